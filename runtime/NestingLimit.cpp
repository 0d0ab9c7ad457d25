//===- NestingLimit.cpp - Bound nesting before parsing --------------------===//

#include "runtime/NestingLimit.h"

namespace lossjit::runtime {

namespace {
/// Scans `text`; stops at the first position deeper than `limit` and
/// returns it in `*where` (text.size() when none).
size_t scan(std::string_view text, size_t limit, size_t *where) {
  size_t depth = 0, deepest = 0;
  *where = text.size();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '"') {
      // A string literal: skip to its closing quote (escapes included).
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && next == '/') {
      while (i < text.size() && text[i] != '\n')
        ++i;
      continue;
    }
    bool opens = c == '(' || c == '[' || c == '{' || (c == '<' && next != '=');
    bool closes = c == ')' || c == ']' || c == '}' ||
                  (c == '>' && next != '=' && !(i > 0 && text[i - 1] == '-'));
    if (opens) {
      if (++depth > deepest)
        deepest = depth;
      if (depth > limit) {
        *where = i;
        return deepest;
      }
    } else if (closes && depth > 0) {
      --depth;
    }
  }
  return deepest;
}
} // namespace

size_t bracketNesting(std::string_view text) {
  size_t where;
  return scan(text, static_cast<size_t>(-1), &where);
}

Error checkNesting(std::string_view text, size_t maxDepth, std::string_view what) {
  size_t where;
  scan(text, maxDepth, &where);
  if (where == text.size())
    return Error::success();
  size_t line = 1, column = 1;
  for (size_t i = 0; i < where; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return makeError(std::string(what) + ": brackets nest deeper than " + std::to_string(maxDepth) +
                   " levels at line " + std::to_string(line) + ", column " +
                   std::to_string(column) +
                   " (the limit keeps the parser's recursion within its stack)");
}

} // namespace lossjit::runtime
