//===- Json.h - JSON value, bounded parser and writer -----------*- C++ -*-===//
//
// The JSON of bundle manifests, cache entries and AOT indexes. Objects keep
// insertion order so a written manifest is byte-stable (its bytes are hashed
// and diffed), and integers stay exact 64-bit values (sizes and ignore_index
// must not pass through a double).
//
// Parsing is nlohmann-json's (a maintained, fuzzed parser; RFC 8259 with
// UTF-8 validation) driven through its SAX interface, so the document is
// checked against JsonLimits while it is read: a hostile manifest in a shared
// cache or on LOSSJIT_KERNEL_PATH cannot exhaust the stack (depth), memory
// (bytes, string length, value count) or time (duplicate keys are found with
// a hash set). nlohmann stays an implementation detail of Json.cpp: this
// header, and so the runtime's interface, does not include it.
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

  // The constructors are defined below, after Member: a constructor body
  // may destroy objectValue, which needs Member complete (clang insists).
  JsonValue() = default;
  JsonValue(std::nullptr_t);
  JsonValue(bool value);
  /// Any integer type except bool; unsigned values above INT64_MAX are a
  /// caller bug (manifests never hold them).
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonValue(T value);
  JsonValue(double value);
  JsonValue(std::string value);
  JsonValue(std::string_view value);
  JsonValue(const char *value);

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

inline JsonValue::JsonValue(std::nullptr_t) {}
inline JsonValue::JsonValue(bool value) : kind(Kind::Bool), boolValue(value) {}
template <std::integral T>
  requires(!std::same_as<T, bool>)
inline JsonValue::JsonValue(T value) : kind(Kind::Int), intValue(static_cast<int64_t>(value)) {}
inline JsonValue::JsonValue(double value) : kind(Kind::Double), doubleValue(value) {}
inline JsonValue::JsonValue(std::string value)
    : kind(Kind::String), stringValue(std::move(value)) {}
inline JsonValue::JsonValue(std::string_view value) : kind(Kind::String), stringValue(value) {}
inline JsonValue::JsonValue(const char *value) : kind(Kind::String), stringValue(value) {}

/// Bounds on what parseJson() accepts. The defaults fit every document
/// lossjit writes with a wide margin (a manifest is a few KiB, 5 levels deep).
struct JsonLimits {
  /// Document size in bytes.
  size_t maxBytes = size_t(64) << 20;
  /// Nesting of arrays and objects; a scalar document has depth 0.
  size_t maxDepth = 64;
  /// Bytes of one string or object key (after unescaping).
  size_t maxStringBytes = size_t(16) << 20;
  /// Values in the whole document (every scalar, array and object counts).
  size_t maxValues = size_t(1) << 20;
};

/// Parses one JSON document (RFC 8259, UTF-8; duplicate keys are rejected
/// because a manifest with two "key" fields is ambiguous; integers outside
/// int64 are rejected rather than rounded). Syntax errors name the line and
/// column, limit and duplicate-key errors the JSON path ("$.kernels[0]").
Expected<JsonValue> parseJson(std::string_view text, const JsonLimits &limits = {});

/// Serializes; `indent` > 0 pretty-prints with that many spaces per level.
/// Strings that are not valid UTF-8 are written with U+FFFD in place of the
/// bad bytes (the parser would reject them), doubles in the shortest form that
/// reads back to the same value, independent of the C locale.
std::string writeJson(const JsonValue &value, int indent = 2);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_JSON_H
