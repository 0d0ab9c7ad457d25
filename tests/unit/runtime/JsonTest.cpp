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
  std::string e = parseError("{\n  \"a\": 1,\n  \"b\": [1, 2,]\n}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(parseError("{\"a\": 1, \"a\": 2}").find("duplicate key \"a\""),
            std::string::npos);
  EXPECT_NE(parseError("\"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(parseError("[1 2]").find("expected ',' or ']'"), std::string::npos);
  EXPECT_NE(parseError("{} x").find("trailing"), std::string::npos);
  EXPECT_NE(parseError("01").find("leading zeros"), std::string::npos);
  EXPECT_NE(parseError("").find("unexpected end"), std::string::npos);
  EXPECT_NE(parseError("tru").find("unexpected character"), std::string::npos);
  EXPECT_NE(parseError("\"\\x\"").find("invalid escape"), std::string::npos);
  EXPECT_NE(parseError("\"\\ud800\"").find("surrogate"), std::string::npos);
  EXPECT_NE(parseError("{1: 2}").find("string key"), std::string::npos);
  EXPECT_NE(parseError("1.").find("digit"), std::string::npos);
  EXPECT_NE(parseError(std::string(1000, '[')).find("nesting"), std::string::npos);
  std::string withNewline = "\"a\nb\"";
  EXPECT_NE(parseError(withNewline).find("control character"), std::string::npos);
}
