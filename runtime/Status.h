//===- Status.h - Error and Expected<T> for the runtime --------*- C++ -*-===//
//
// The runtime may not depend on LLVM, so it carries its own small error
// types. They mirror llvm::Error / llvm::Expected closely enough that code
// moving between the compiler and the runtime reads the same, but they never
// abort on an unchecked error: the runtime is embedded in Python processes and
// must report, not crash.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_STATUS_H
#define LOSSJIT_RUNTIME_STATUS_H

#include <cassert>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lossjit::runtime {

/// A success-or-message result. Converts to `true` when it holds a failure,
/// like llvm::Error, so `if (Error e = f()) return e;` propagates failures.
class [[nodiscard]] Error {
public:
  /// The success value.
  static Error success() { return Error(); }

  /// A failure carrying a human-readable message. An empty message is replaced
  /// by "unknown error" so that a failure is never mistaken for success.
  static Error failure(std::string message) {
    Error e;
    e.msg = message.empty() ? std::string("unknown error")
                                 : std::move(message);
    return e;
  }

  /// True when this holds a failure.
  explicit operator bool() const { return msg.has_value(); }

  /// The failure message; empty on success.
  const std::string &message() const {
    static const std::string empty;
    return msg ? *msg : empty;
  }

  /// Prefixes the message with `context + ": "` (no-op on success), so each
  /// layer can say what it was doing without losing the root cause.
  Error withContext(const std::string &context) && {
    if (msg)
      *msg = context + ": " + *msg;
    return std::move(*this);
  }

private:
  Error() = default;
  std::optional<std::string> msg;
};

/// Shorthand for Error::failure.
inline Error makeError(std::string message) {
  return Error::failure(std::move(message));
}

/// `text` made safe to quote in an error message: bytes outside printable
/// ASCII become \xNN, and at most `maxBytes` input bytes are shown (then
/// "..."). Messages quote file contents (a .npy header, a manifest key) that
/// may be hostile; a terminal must not receive their control characters.
inline std::string printable(std::string_view text, size_t maxBytes = 200) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < maxBytes; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > maxBytes)
    out += "...";
  return out;
}

/// Either a value of type T or an Error. Converts to `true` when it holds a
/// value, like llvm::Expected.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : storage(std::in_place_index<0>, std::move(value)) {}
  /// Constructing from a success Error is a programming error; it is turned
  /// into a failure rather than an abort so release builds stay safe.
  Expected(Error error)
      : storage(std::in_place_index<1>,
                 error ? std::move(error)
                       : Error::failure("internal error: Expected built from "
                                        "a success Error")) {}

  /// True when this holds a value.
  explicit operator bool() const { return storage.index() == 0; }
  bool hasValue() const { return storage.index() == 0; }

  T &operator*() & {
    assert(hasValue() && "dereferencing an Expected holding an error");
    return std::get<0>(storage);
  }
  const T &operator*() const & {
    assert(hasValue() && "dereferencing an Expected holding an error");
    return std::get<0>(storage);
  }
  T &&operator*() && {
    assert(hasValue() && "dereferencing an Expected holding an error");
    return std::get<0>(std::move(storage));
  }
  T *operator->() { return &**this; }
  const T *operator->() const { return &**this; }

  /// Moves the error out (success if this holds a value).
  Error takeError() {
    if (hasValue())
      return Error::success();
    return std::move(std::get<1>(storage));
  }

  /// The error message; empty when this holds a value.
  const std::string &errorMessage() const {
    static const std::string empty;
    return hasValue() ? empty : std::get<1>(storage).message();
  }

private:
  std::variant<T, Error> storage;
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_STATUS_H
