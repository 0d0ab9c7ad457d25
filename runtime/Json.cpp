//===- Json.cpp - Minimal JSON value, parser and writer -------------------===//

#include "runtime/Json.h"

#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lossjit::runtime {

JsonValue JsonValue::array() {
  JsonValue v;
  v.kind = Kind::Array;
  return v;
}

JsonValue JsonValue::object() {
  JsonValue v;
  v.kind = Kind::Object;
  return v;
}

bool JsonValue::getBool() const {
  assert(isBool());
  return boolValue;
}
int64_t JsonValue::getInt() const {
  assert(isInt());
  return intValue;
}
double JsonValue::getDouble() const {
  assert(isNumber());
  return isInt() ? static_cast<double>(intValue) : doubleValue;
}
const std::string &JsonValue::getString() const {
  assert(isString());
  return stringValue;
}
const JsonValue::Array &JsonValue::getArray() const {
  assert(isArray());
  return arrayValue;
}
JsonValue::Array &JsonValue::getArray() {
  assert(isArray());
  return arrayValue;
}
const JsonValue::Object &JsonValue::getObject() const {
  assert(isObject());
  return objectValue;
}
JsonValue::Object &JsonValue::getObject() {
  assert(isObject());
  return objectValue;
}

const JsonValue *JsonValue::find(std::string_view key) const {
  if (!isObject())
    return nullptr;
  for (const Member &member : objectValue)
    if (member.key == key)
      return &member.value;
  return nullptr;
}

JsonValue &JsonValue::set(std::string_view key, JsonValue value) {
  assert(isObject());
  for (Member &member : objectValue)
    if (member.key == key) {
      member.value = std::move(value);
      return member.value;
    }
  objectValue.push_back(Member{std::string(key), std::move(value)});
  return objectValue.back().value;
}

JsonValue &JsonValue::push(JsonValue value) {
  assert(isArray());
  arrayValue.push_back(std::move(value));
  return arrayValue.back();
}

const char *JsonValue::describe(Kind kind) {
  switch (kind) {
  case Kind::Null:
    return "null";
  case Kind::Bool:
    return "a boolean";
  case Kind::Int:
    return "an integer";
  case Kind::Double:
    return "a floating-point number";
  case Kind::String:
    return "a string";
  case Kind::Array:
    return "an array";
  case Kind::Object:
    return "an object";
  }
  return "an unknown value";
}

bool operator==(const JsonValue &a, const JsonValue &b) {
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case JsonValue::Kind::Null:
    return true;
  case JsonValue::Kind::Bool:
    return a.boolValue == b.boolValue;
  case JsonValue::Kind::Int:
    return a.intValue == b.intValue;
  case JsonValue::Kind::Double:
    return a.doubleValue == b.doubleValue;
  case JsonValue::Kind::String:
    return a.stringValue == b.stringValue;
  case JsonValue::Kind::Array:
    return a.arrayValue == b.arrayValue;
  case JsonValue::Kind::Object:
    if (a.objectValue.size() != b.objectValue.size())
      return false;
    for (size_t i = 0; i < a.objectValue.size(); ++i)
      if (a.objectValue[i].key != b.objectValue[i].key ||
          !(a.objectValue[i].value == b.objectValue[i].value))
        return false;
    return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

namespace {

/// Recursive-descent parser; depth-limited so a hostile manifest cannot
/// overflow the stack.
class Parser {
public:
  explicit Parser(std::string_view text) : text(text) {}

  Expected<JsonValue> parseDocument() {
    skipWhitespace();
    Expected<JsonValue> value = parseValue(0);
    if (!value)
      return value;
    skipWhitespace();
    if (pos != text.size())
      return fail("unexpected trailing characters after the JSON value");
    return value;
  }

private:
  static constexpr int kMaxDepth = 256;

  Error fail(const std::string &what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return makeError("JSON parse error at line " + std::to_string(line) +
                     ", column " + std::to_string(column) + ": " + what);
  }

  void skipWhitespace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool consumeLiteral(std::string_view literal) {
    if (text.substr(pos, literal.size()) != literal)
      return false;
    pos += literal.size();
    return true;
  }

  Expected<JsonValue> parseValue(int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos >= text.size())
      return fail("unexpected end of input, expected a value");
    char c = text[pos];
    if (c == '{')
      return parseObject(depth);
    if (c == '[')
      return parseArray(depth);
    if (c == '"') {
      Expected<std::string> s = parseString();
      if (!s)
        return s.takeError();
      return JsonValue(std::move(*s));
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return parseNumber();
    if (consumeLiteral("true"))
      return JsonValue(true);
    if (consumeLiteral("false"))
      return JsonValue(false);
    if (consumeLiteral("null"))
      return JsonValue(nullptr);
    return fail(std::string("unexpected character '") + c +
                "', expected a value");
  }

  Expected<JsonValue> parseObject(int depth) {
    ++pos; // '{'
    JsonValue object = JsonValue::object();
    skipWhitespace();
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return object;
    }
    while (true) {
      skipWhitespace();
      if (pos >= text.size() || text[pos] != '"')
        return fail("expected a string key in object");
      size_t keyPos = pos;
      Expected<std::string> key = parseString();
      if (!key)
        return key.takeError();
      if (object.find(*key)) {
        pos = keyPos;
        return fail("duplicate key \"" + *key + "\"");
      }
      skipWhitespace();
      if (pos >= text.size() || text[pos] != ':')
        return fail("expected ':' after object key");
      ++pos;
      skipWhitespace();
      Expected<JsonValue> value = parseValue(depth + 1);
      if (!value)
        return value;
      object.getObject().push_back(
          JsonValue::Member{std::move(*key), std::move(*value)});
      skipWhitespace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return object;
      }
      return fail("expected ',' or '}' in object");
    }
  }

  Expected<JsonValue> parseArray(int depth) {
    ++pos; // '['
    JsonValue array = JsonValue::array();
    skipWhitespace();
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      return array;
    }
    while (true) {
      skipWhitespace();
      Expected<JsonValue> value = parseValue(depth + 1);
      if (!value)
        return value;
      array.push(std::move(*value));
      skipWhitespace();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return array;
      }
      return fail("expected ',' or ']' in array");
    }
  }

  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  Expected<uint32_t> parseHex4() {
    if (pos + 4 > text.size())
      return fail("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text[pos++];
      value <<= 4;
      if (c >= '0' && c <= '9')
        value |= c - '0';
      else if (c >= 'a' && c <= 'f')
        value |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        value |= c - 'A' + 10;
      else
        return fail("invalid hex digit in \\u escape");
    }
    return value;
  }

  Expected<std::string> parseString() {
    ++pos; // '"'
    std::string out;
    while (true) {
      if (pos >= text.size())
        return fail("unterminated string");
      char c = text[pos++];
      if (c == '"')
        return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos;
        return fail("unescaped control character in string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= text.size())
        return fail("unterminated escape in string");
      char e = text[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        Expected<uint32_t> cp = parseHex4();
        if (!cp)
          return cp.takeError();
        uint32_t code = *cp;
        if (code >= 0xD800 && code <= 0xDBFF) {
          if (!consumeLiteral("\\u"))
            return fail("unpaired high surrogate in \\u escape");
          Expected<uint32_t> low = parseHex4();
          if (!low)
            return low.takeError();
          if (*low < 0xDC00 || *low > 0xDFFF)
            return fail("invalid low surrogate in \\u escape");
          code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
        } else if (code >= 0xDC00 && code <= 0xDFFF) {
          return fail("unpaired low surrogate in \\u escape");
        }
        appendUtf8(out, code);
        break;
      }
      default:
        --pos;
        return fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  Expected<JsonValue> parseNumber() {
    size_t start = pos;
    bool isInteger = true;
    if (text[pos] == '-')
      ++pos;
    if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
      return fail("expected a digit in number");
    if (text[pos] == '0' && pos + 1 < text.size() && text[pos + 1] >= '0' &&
        text[pos + 1] <= '9')
      return fail("leading zeros are not allowed in numbers");
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
      ++pos;
    if (pos < text.size() && text[pos] == '.') {
      isInteger = false;
      ++pos;
      if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
        return fail("expected a digit after '.'");
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
    }
    if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
      isInteger = false;
      ++pos;
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-'))
        ++pos;
      if (pos >= text.size() || !(text[pos] >= '0' && text[pos] <= '9'))
        return fail("expected a digit in exponent");
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
        ++pos;
    }
    std::string token(text.substr(start, pos - start));
    errno = 0;
    if (isInteger) {
      char *end = nullptr;
      long long value = std::strtoll(token.c_str(), &end, 10);
      if (errno == ERANGE) {
        pos = start;
        return fail("integer " + token + " does not fit in 64 bits");
      }
      return JsonValue(static_cast<int64_t>(value));
    }
    char *end = nullptr;
    double value = std::strtod(token.c_str(), &end);
    if (errno == ERANGE && std::isinf(value)) {
      pos = start;
      return fail("number " + token + " is out of range");
    }
    return JsonValue(value);
  }

  std::string_view text;
  size_t pos = 0;
};

void writeString(std::string &out, const std::string &s) {
  out += '"';
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += c;
      }
    }
  }
  out += '"';
}

void writeValue(std::string &out, const JsonValue &v, int indent, int level) {
  auto newline = [&](int lvl) {
    if (indent <= 0)
      return;
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.getKind()) {
  case JsonValue::Kind::Null:
    out += "null";
    return;
  case JsonValue::Kind::Bool:
    out += v.getBool() ? "true" : "false";
    return;
  case JsonValue::Kind::Int:
    out += std::to_string(v.getInt());
    return;
  case JsonValue::Kind::Double: {
    double d = v.getDouble();
    // JSON has no NaN or infinity; null is the conventional stand-in.
    if (!std::isfinite(d)) {
      out += "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", d);
    std::string s(buf);
    // Keep it a double on re-parse.
    if (s.find_first_of(".eE") == std::string::npos)
      s += ".0";
    out += s;
    return;
  }
  case JsonValue::Kind::String:
    writeString(out, v.getString());
    return;
  case JsonValue::Kind::Array: {
    const auto &array = v.getArray();
    if (array.empty()) {
      out += "[]";
      return;
    }
    // Short arrays of scalars (shapes, grids) stay on one line: readable
    // manifests matter more than a uniform layout.
    bool flat = array.size() <= 8;
    for (const JsonValue &e : array)
      flat = flat && !e.isArray() && !e.isObject();
    out += '[';
    for (size_t i = 0; i < array.size(); ++i) {
      if (i)
        out += flat && indent > 0 ? ", " : ",";
      if (!flat)
        newline(level + 1);
      writeValue(out, array[i], indent, level + 1);
    }
    if (!flat)
      newline(level);
    out += ']';
    return;
  }
  case JsonValue::Kind::Object: {
    const auto &object = v.getObject();
    if (object.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < object.size(); ++i) {
      if (i)
        out += ',';
      newline(level + 1);
      writeString(out, object[i].key);
      out += indent > 0 ? ": " : ":";
      writeValue(out, object[i].value, indent, level + 1);
    }
    newline(level);
    out += '}';
    return;
  }
  }
}

} // namespace

Expected<JsonValue> parseJson(std::string_view text) {
  return Parser(text).parseDocument();
}

std::string writeJson(const JsonValue &value, int indent) {
  std::string out;
  writeValue(out, value, indent, 0);
  if (indent > 0)
    out += '\n';
  return out;
}

} // namespace lossjit::runtime
