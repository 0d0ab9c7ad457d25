//===- Json.cpp - JSON value, bounded parser (nlohmann SAX) and writer ----===//

#include "runtime/Json.h"

#include <nlohmann/json.hpp>

#include <cassert>
#include <cmath>
#include <unordered_set>

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
// Parser: nlohmann's lexer and grammar, our values and limits
//===----------------------------------------------------------------------===//

namespace {

/// Builds a JsonValue from nlohmann's SAX events, enforcing JsonLimits as it
/// goes. nlohmann's parser keeps its own state on the heap, so depth costs no
/// stack there; this handler keeps an explicit stack of open containers too,
/// and the depth limit also bounds the recursion of ~JsonValue and of
/// writeJson on what it returns.
class Builder {
public:
  using json = nlohmann::json;

  explicit Builder(const JsonLimits &limits) : limits(limits) {}

  bool null() { return addScalar(JsonValue(nullptr)); }
  bool boolean(bool value) { return addScalar(JsonValue(value)); }
  bool number_integer(json::number_integer_t value) {
    return addScalar(JsonValue(static_cast<int64_t>(value)));
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (value > static_cast<uint64_t>(INT64_MAX))
      return fail("integer " + std::to_string(value) + " does not fit in 64 bits");
    return addScalar(JsonValue(static_cast<int64_t>(value)));
  }
  bool number_float(json::number_float_t value, const std::string &text) {
    // nlohmann turns integers beyond uint64 into doubles; sizes must never
    // be rounded, so an integer literal that is not an int64 is an error.
    if (text.find_first_of(".eE") == std::string::npos)
      return fail("integer " + text + " does not fit in 64 bits");
    if (!std::isfinite(value))
      return fail("number " + text + " is out of range");
    return addScalar(JsonValue(static_cast<double>(value)));
  }
  bool string(std::string &value) {
    if (!checkString(value, "string"))
      return false;
    return addScalar(JsonValue(std::move(value)));
  }
  bool binary(json::binary_t &) { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) { return open(JsonValue::object()); }
  bool key(std::string &value) {
    if (!checkString(value, "key"))
      return false;
    Frame &frame = stack.back();
    // Small objects (every manifest object) scan; big ones hash, so a
    // million distinct keys cost a million lookups, not 10^12 comparisons.
    if (frame.keys) {
      if (!frame.keys->insert(value).second)
        return duplicate(value);
    } else {
      if (frame.value.find(value))
        return duplicate(value);
      if (frame.value.getObject().size() >= kScanLimit) {
        frame.keys = std::make_unique<std::unordered_set<std::string>>();
        for (const JsonValue::Member &m : frame.value.getObject())
          frame.keys->insert(m.key);
        frame.keys->insert(value);
      }
    }
    frame.key = std::move(value);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(JsonValue::array()); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &ex) {
    // "[json.exception.parse_error.101] parse error at line 3, column 13:
    // syntax error ..." -> "JSON parse error at line 3, column 13: ...".
    // nlohmann quotes the input it last read; hostile bytes are escaped.
    std::string what = printable(ex.what(), 400);
    if (size_t at = what.find("] ");
        what.rfind("[json.exception.", 0) == 0 && at != std::string::npos)
      what = what.substr(at + 2);
    if (what.rfind("parse error", 0) == 0)
      error = makeError("JSON parse error" + what.substr(11));
    else
      error = makeError("JSON parse error: " + what);
    return false;
  }

  /// The parsed document; call once, after a successful parse.
  Expected<JsonValue> take() {
    if (error)
      return std::move(error);
    if (!root)
      return makeError("JSON parse error: no value");
    return std::move(*root);
  }

  /// The first error (success while none).
  Error error = Error::success();

private:
  static constexpr size_t kScanLimit = 16;

  struct Frame {
    JsonValue value;
    /// The pending member key (objects).
    std::string key;
    /// Keys seen so far, once the object outgrows a linear scan.
    std::unique_ptr<std::unordered_set<std::string>> keys;
  };

  bool fail(const std::string &what) {
    error = makeError("JSON parse error at " + printable(path()) + ": " + printable(what));
    return false;
  }

  bool duplicate(const std::string &key) { return fail("duplicate key \"" + key + "\""); }

  bool checkString(const std::string &value, const char *what) {
    if (value.size() > limits.maxStringBytes)
      return fail(std::string(what) + " of " + std::to_string(value.size()) +
                  " bytes exceeds the limit of " + std::to_string(limits.maxStringBytes) +
                  " bytes");
    return true;
  }

  bool countValue() {
    if (++values > limits.maxValues)
      return fail("more than " + std::to_string(limits.maxValues) +
                  " values (the limit of one document)");
    return true;
  }

  /// Stores a finished value into the open container (or as the root).
  void attach(JsonValue value) {
    if (stack.empty()) {
      root = std::move(value);
      return;
    }
    Frame &frame = stack.back();
    if (frame.value.isArray())
      frame.value.push(std::move(value));
    else
      frame.value.getObject().push_back(JsonValue::Member{std::move(frame.key), std::move(value)});
  }

  bool addScalar(JsonValue value) {
    if (!countValue())
      return false;
    attach(std::move(value));
    return true;
  }

  bool open(JsonValue container) {
    if (!countValue())
      return false;
    if (stack.size() >= limits.maxDepth)
      return fail("nesting deeper than " + std::to_string(limits.maxDepth) +
                  " levels (the limit of one document)");
    stack.push_back(Frame{std::move(container), {}, nullptr});
    return true;
  }

  bool close() {
    JsonValue done = std::move(stack.back().value);
    stack.pop_back();
    attach(std::move(done));
    return true;
  }

  /// "$", "$.kernels[2].args": where the parser is, for error messages.
  std::string path() const {
    std::string out = "$";
    for (const Frame &frame : stack) {
      // append(), not operator+: GCC 12 warns (-Wrestrict) falsely on
      // "[" + std::to_string(...).
      if (frame.value.isArray()) {
        out.append(1, '[');
        out.append(std::to_string(frame.value.getArray().size()));
        out.append(1, ']');
      } else if (!frame.key.empty()) {
        out.append(1, '.');
        out.append(frame.key, 0, 64);
      }
    }
    return out;
  }

  const JsonLimits &limits;
  std::vector<Frame> stack;
  std::optional<JsonValue> root;
  size_t values = 0;
};

void writeString(std::string &out, const std::string &s) {
  // nlohmann escapes quotes, backslashes and control characters, and
  // replaces bytes that are not UTF-8 so that what we write always parses.
  out += nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                                nlohmann::json::error_handler_t::replace);
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
    // nlohmann writes the shortest text that reads back to the same double,
    // with a '.' whatever the C locale says, and keeps "2.0" a double.
    out += nlohmann::json(d).dump();
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

Expected<JsonValue> parseJson(std::string_view text, const JsonLimits &limits) {
  if (text.size() > limits.maxBytes)
    return makeError("JSON document of " + std::to_string(text.size()) +
                     " bytes exceeds the limit of " + std::to_string(limits.maxBytes) + " bytes");
  Builder builder(limits);
  try {
    nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                              nlohmann::json::input_format_t::json,
                              /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception &e) {
    // sax_parse reports through parse_error(); this is a last line of
    // defence (an allocation failure, say), never a crash.
    if (!builder.error)
      return makeError(std::string("JSON parse error: ") + e.what());
  }
  return builder.take();
}

std::string writeJson(const JsonValue &value, int indent) {
  std::string out;
  writeValue(out, value, indent, 0);
  if (indent > 0)
    out += '\n';
  return out;
}

} // namespace lossjit::runtime
