//===- JsonTest.cpp - JSON parser and writer ------------------------------===//

#include "runtime/Json.h"

#include <gtest/gtest.h>

#include <limits>

using namespace lossjit::runtime;

namespace {
JsonValue parseOrDie(const std::string &text) {
  Expected<JsonValue> v = parseJson(text);
  EXPECT_TRUE(v) << v.errorMessage();
  return v ? *v : JsonValue();
}

std::string parseError(const std::string &text) {
  Expected<JsonValue> v = parseJson(text);
  EXPECT_FALSE(v) << "expected a parse error for: " << text;
  return v ? std::string() : v.errorMessage();
}
} // namespace

TEST(Json, ScalarsAndKinds) {
  EXPECT_TRUE(parseOrDie("null").isNull());
  EXPECT_TRUE(parseOrDie("true").getBool());
  EXPECT_FALSE(parseOrDie(" false ").getBool());
  EXPECT_EQ(parseOrDie("-42").getInt(), -42);
  EXPECT_TRUE(parseOrDie("1.5").isDouble());
  EXPECT_DOUBLE_EQ(parseOrDie("1.5e3").getDouble(), 1500.0);
  EXPECT_DOUBLE_EQ(parseOrDie("-0.25").getDouble(), -0.25);
  EXPECT_EQ(parseOrDie("\"hi\"").getString(), "hi");
}

TEST(Json, IntegersStayExact) {
  auto max = std::numeric_limits<int64_t>::max();
  auto min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(parseOrDie(std::to_string(max)).getInt(), max);
  EXPECT_EQ(parseOrDie(std::to_string(min)).getInt(), min);
  EXPECT_NE(parseError("9223372036854775808").find("64 bits"), std::string::npos);
}

TEST(Json, StringEscapesAndUnicode) {
  JsonValue v = parseOrDie(R"("a\"b\\c\/d\n\t\u00e9\u20ac\ud83d\ude00")");
  EXPECT_EQ(v.getString(), "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  // Control characters are escaped on output and survive a round trip.
  JsonValue control(std::string("x\x01y\"z"));
  EXPECT_EQ(writeJson(control, 0), "\"x\\u0001y\\\"z\"");
  EXPECT_EQ(parseOrDie(writeJson(control, 0)), control);
}

TEST(Json, RoundTripPreservesOrderAndTypes) {
  JsonValue doc = JsonValue::object();
  doc.set("zeta", 1);
  doc.set("alpha", JsonValue::array());
  doc.set("pi", 3.25);
  doc.set("whole", 2.0);
  doc.set("flag", true);
  doc.set("none", nullptr);
  JsonValue nested = JsonValue::object();
  nested.set("shape", JsonValue::array());
  nested.find("shape"); // const lookup path
  doc.set("nested", nested);
  doc.getObject()[1].value.push("N").getString();
  doc.getObject()[1].value.push(4);
  for (int indent : {0, 2}) {
    std::string text = writeJson(doc, indent);
    JsonValue back = parseOrDie(text);
    EXPECT_EQ(back, doc) << text;
    EXPECT_EQ(writeJson(back, indent), text);
    EXPECT_EQ(back.getObject()[0].key, "zeta");
    EXPECT_TRUE(back.find("whole")->isDouble()) << "2.0 must stay a double";
    EXPECT_TRUE(back.find("zeta")->isInt());
  }
  // set() replaces in place.
  doc.set("zeta", "z");
  EXPECT_EQ(doc.getObject()[0].value.getString(), "z");
  EXPECT_EQ(doc.find("missing"), nullptr);
}

TEST(Json, ErrorsNameLineAndColumn) {
  // Syntax errors: nlohmann's messages, with line and column.
  EXPECT_EQ(parseError("{\n  \"a\": 1,\n  \"b\": [1, 2,]\n}"),
            "JSON parse error at line 3, column 14: syntax error while parsing value - "
            "unexpected ']'; expected '[', '{', or a literal");
  EXPECT_NE(parseError("\"abc").find("missing closing quote"), std::string::npos);
  EXPECT_NE(parseError("[1 2]").find("expected ']'"), std::string::npos);
  EXPECT_NE(parseError("{} x").find("expected end of input"), std::string::npos);
  EXPECT_NE(parseError("01").find("expected end of input"), std::string::npos);
  EXPECT_NE(parseError("").find("unexpected end of input"), std::string::npos);
  EXPECT_NE(parseError("tru").find("invalid literal"), std::string::npos);
  EXPECT_NE(parseError("\"\\x\"").find("forbidden character after backslash"), std::string::npos);
  EXPECT_NE(parseError("\"\\ud800\"").find("surrogate"), std::string::npos);
  EXPECT_NE(parseError("{1: 2}").find("expected string literal"), std::string::npos);
  EXPECT_NE(parseError("1.").find("digit"), std::string::npos);
  std::string withNewline = "\"a\nb\"";
  EXPECT_NE(parseError(withNewline).find("control character"), std::string::npos);
  // Semantic errors: the JSON path.
  EXPECT_EQ(parseError("{\"a\": 1, \"a\": 2}"), "JSON parse error at $: duplicate key \"a\"");
  EXPECT_EQ(parseError("{\"k\": [1, {\"x\": 1, \"x\": 2}]}"),
            "JSON parse error at $.k[1]: duplicate key \"x\"");
  EXPECT_EQ(parseError("[1e999]"), "JSON parse error: number overflow parsing '1e999'");
}

TEST(Json, ErrorsNeverCarryRawBytes) {
  // Invalid UTF-8 is rejected, and the byte nlohmann quotes back is escaped:
  // an error message must not put hostile bytes on a terminal.
  std::string e = parseError("[\"\xff\x1b[2J\"]");
  EXPECT_NE(e.find("ill-formed UTF-8"), std::string::npos) << e;
  EXPECT_NE(e.find("\\xff"), std::string::npos) << e;
  for (char c : e)
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(static_cast<unsigned char>(c));
  e = parseError("{\"\\u001b[31m\": 1, \"\\u001b[31m\": 2}");
  EXPECT_EQ(e, "JSON parse error at $: duplicate key \"\\x1b[31m\"");
}

TEST(Json, LimitsAreEnforcedWithClearErrors) {
  // Depth: the default allows 64 levels, and the 65th is named.
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(parseJson(ok));
  std::string deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_NE(parseError(deep).find("nesting deeper than 64 levels"), std::string::npos);
  // A million-deep document costs no stack (nlohmann's parser keeps its
  // state on the heap, and we stop at the limit).
  EXPECT_NE(parseError(std::string(1 << 20, '[')).find("nesting deeper than 64"),
            std::string::npos);

  JsonLimits tight;
  tight.maxBytes = 16;
  tight.maxDepth = 2;
  tight.maxStringBytes = 4;
  tight.maxValues = 5;
  auto error = [&](const std::string &text) {
    Expected<JsonValue> v = parseJson(text, tight);
    EXPECT_FALSE(v) << text;
    return v ? std::string() : v.errorMessage();
  };
  EXPECT_EQ(error(std::string(17, ' ')), "JSON document of 17 bytes exceeds the limit of 16 bytes");
  EXPECT_EQ(error("[[[1]]]"),
            "JSON parse error at $[0][0]: nesting deeper than 2 levels (the limit of one "
            "document)");
  EXPECT_EQ(error("[\"abcde\"]"),
            "JSON parse error at $[0]: string of 5 bytes exceeds the limit of 4 bytes");
  EXPECT_EQ(error("{\"abcde\":1}"),
            "JSON parse error at $: key of 5 bytes exceeds the limit of 4 bytes");
  EXPECT_EQ(error("[1,2,3,4,5]"),
            "JSON parse error at $[4]: more than 5 values (the limit of one document)");
  EXPECT_TRUE(parseJson("[1,2,3,4]", tight));
}

TEST(Json, ManyKeysStayFast) {
  // Duplicate detection hashes once an object is big: 200,000 keys (and a
  // duplicate at the end) parse in well under a second, not in hours.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i)
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  std::string unique = text + "\"end\":0}";
  Expected<JsonValue> v = parseJson(unique);
  ASSERT_TRUE(v) << v.errorMessage();
  EXPECT_EQ(v->getObject().size(), 200001u);
  EXPECT_EQ(parseError(text + "\"k7\":0}"), "JSON parse error at $: duplicate key \"k7\"");
}

TEST(Json, WriterOutputAlwaysParses) {
  // Bytes that are not UTF-8 are replaced, so what we write reads back.
  JsonValue bad(std::string("a\xff"
                            "b"));
  std::string text = writeJson(bad, 0);
  EXPECT_EQ(text, "\"a\xef\xbf\xbd"
                  "b\"");
  EXPECT_TRUE(parseJson(text));
  // Doubles: shortest round-trip text, always with '.' or an exponent.
  EXPECT_EQ(writeJson(JsonValue(0.1), 0), "0.1");
  EXPECT_EQ(writeJson(JsonValue(2.0), 0), "2.0");
  EXPECT_EQ(writeJson(JsonValue(1e300), 0), "1e+300");
  EXPECT_TRUE(parseOrDie("1e+300").isDouble());
}
