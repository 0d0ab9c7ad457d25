//===- Log.h - LOSSJIT_LOG diagnostics on stderr ----------------*- C++ -*-===//
//
// LOSSJIT_LOG=info|debug turns on runtime diagnostics (cache hits and misses
// with their reason, launch configurations). Warnings are always printed:
// they report conditions the user must know about (a cache that silently
// stopped persisting would cost minutes of recompilation per process).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_LOG_H
#define LOSSJIT_RUNTIME_LOG_H

#include <string_view>

namespace lossjit::runtime {

/// Verbosity, ordered: a message prints when its level <= the active level.
enum class LogLevel { Warning = 0, Info = 1, Debug = 2 };

/// The level from LOSSJIT_LOG ("info", "debug"; anything else or unset means
/// warnings only), read once per process.
LogLevel activeLogLevel();

/// True when messages at `level` print; lets callers skip building strings.
inline bool isLogEnabled(LogLevel level) { return level <= activeLogLevel(); }

/// Writes "lossjit[<level>]: <message>\n" to stderr in one write, so lines
/// from concurrent threads and processes do not interleave.
void logMessage(LogLevel level, std::string_view message);

inline void logWarning(std::string_view message) {
  logMessage(LogLevel::Warning, message);
}
inline void logInfo(std::string_view message) {
  if (isLogEnabled(LogLevel::Info))
    logMessage(LogLevel::Info, message);
}
inline void logDebug(std::string_view message) {
  if (isLogEnabled(LogLevel::Debug))
    logMessage(LogLevel::Debug, message);
}

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_LOG_H
