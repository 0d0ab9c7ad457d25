//===- Json.h - Minimal JSON value, parser and writer -----------*- C++ -*-===//
//
// Just enough JSON for bundle manifests: objects keep insertion order so a
// written manifest is byte-stable (its bytes are hashed and diffed), integers
// stay exact 64-bit values (sizes and ignore_index must not pass through a
// double), and parse errors carry a line and column.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_JSON_H
#define LOSSJIT_RUNTIME_JSON_H

#include "runtime/Status.h"

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lossjit::runtime {

/// A JSON value: null, bool, integer, double, string, array or object.
class JsonValue {
public:
  enum class Kind { Null, Bool, Int, Double, String, Array, Object };
  struct Member;
  using Array = std::vector<JsonValue>;
  using Object = std::vector<Member>;

  JsonValue() = default;
  JsonValue(std::nullptr_t) {}
  JsonValue(bool value) : kind(Kind::Bool), boolValue(value) {}
  /// Any integer type except bool; unsigned values above INT64_MAX are a
  /// caller bug (manifests never hold them).
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonValue(T value) : kind(Kind::Int), intValue(static_cast<int64_t>(value)) {}
  JsonValue(double value) : kind(Kind::Double), doubleValue(value) {}
  JsonValue(std::string value)
      : kind(Kind::String), stringValue(std::move(value)) {}
  JsonValue(std::string_view value)
      : kind(Kind::String), stringValue(value) {}
  JsonValue(const char *value) : kind(Kind::String), stringValue(value) {}

  /// An empty array / object.
  static JsonValue array();
  static JsonValue object();

  Kind getKind() const { return kind; }
  bool isNull() const { return kind == Kind::Null; }
  bool isBool() const { return kind == Kind::Bool; }
  bool isInt() const { return kind == Kind::Int; }
  bool isDouble() const { return kind == Kind::Double; }
  bool isNumber() const { return isInt() || isDouble(); }
  bool isString() const { return kind == Kind::String; }
  bool isArray() const { return kind == Kind::Array; }
  bool isObject() const { return kind == Kind::Object; }

  /// Typed accessors; callers check the kind first (they assert).
  bool getBool() const;
  int64_t getInt() const;
  /// Ints widen to double.
  double getDouble() const;
  const std::string &getString() const;
  const Array &getArray() const;
  Array &getArray();
  const Object &getObject() const;
  Object &getObject();

  /// Object member lookup; null when absent or not an object.
  const JsonValue *find(std::string_view key) const;
  /// Sets (replacing) an object member, keeping first-insertion order.
  JsonValue &set(std::string_view key, JsonValue value);
  /// Appends to an array.
  JsonValue &push(JsonValue value);

  /// The name of a kind, for error messages ("an integer", "a string", ...).
  static const char *describe(Kind kind);

  /// Deep structural equality (ints and doubles compare as distinct kinds).
  friend bool operator==(const JsonValue &a, const JsonValue &b);

private:
  Kind kind = Kind::Null;
  bool boolValue = false;
  int64_t intValue = 0;
  double doubleValue = 0;
  std::string stringValue;
  Array arrayValue;
  Object objectValue;
};

/// One object member.
struct JsonValue::Member {
  std::string key;
  JsonValue value;
};

/// Parses one JSON document (RFC 8259; duplicate keys are rejected because a
/// manifest with two "key" fields is ambiguous). Errors name line and column.
Expected<JsonValue> parseJson(std::string_view text);

/// Serializes; `indent` > 0 pretty-prints with that many spaces per level.
std::string writeJson(const JsonValue &value, int indent = 2);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_JSON_H
