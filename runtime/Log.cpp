//===- Log.cpp - LOSSJIT_LOG diagnostics on stderr ------------------------===//

#include "runtime/Log.h"

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace lossjit::runtime {

LogLevel activeLogLevel() {
  static const LogLevel level = [] {
    const char *value = std::getenv("LOSSJIT_LOG");
    std::string text = value ? value : "";
    if (text == "debug" || text == "2")
      return LogLevel::Debug;
    if (text == "info" || text == "1")
      return LogLevel::Info;
    // A value that names no level keeps warnings and says so, once: a
    // misspelled "verbose" should not look like a quiet run.
    if (!text.empty() && text != "warning" && text != "0")
      logMessage(LogLevel::Warning, "LOSSJIT_LOG='" + text +
                                        "' names no level (expected warning or 0, info or 1, "
                                        "debug or 2); logging warnings only");
    return LogLevel::Warning;
  }();
  return level;
}

void logMessage(LogLevel level, std::string_view message) {
  const char *name = level == LogLevel::Warning ? "warning"
                     : level == LogLevel::Info  ? "info"
                                                : "debug";
  std::string line = std::string("lossjit[") + name + "]: ";
  line.append(message);
  line += '\n';
  // One write(2) keeps the line atomic with respect to other writers.
  const char *data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n <= 0)
      return;
    data += n;
    left -= static_cast<size_t>(n);
  }
}

} // namespace lossjit::runtime
