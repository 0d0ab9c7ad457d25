//===- NestingLimit.h - Bound nesting before parsing ------------*- C++ -*-===//
//
// MLIR's parser (like most) recurses once per nesting level of regions,
// attributes and types, so a graph nested ~10,000 deep overflows an 8 MiB
// stack: a crash no error handler can report. checkNesting() scans the text
// once, without recursion, and rejects it before the parser sees it when its
// brackets nest deeper than a bound the parser handles with a wide margin.
//
// The scan knows just enough MLIR assembly syntax not to be fooled: "..."
// strings (with \ escapes) and // comments are skipped; ( [ { < open, ) ] }
// > close; "->" and ">=" / "<=" are not brackets. It counts all four kinds
// together, since each costs the parser stack. It does not check that the
// brackets match: that is the parser's job, once the text is known to be
// shallow enough to parse.
//
// No MLIR here: the runtime, the tools and the Python bindings share it.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_NESTINGLIMIT_H
#define LOSSJIT_RUNTIME_NESTINGLIMIT_H

#include "runtime/Status.h"

#include <cstddef>
#include <string_view>

namespace lossjit::runtime {

/// Nesting the tools accept in a graph file. Real graphs nest about 10 deep
/// (module, function, region, attribute, type), lowered IR about 20; MLIR's
/// parser, passes and printer overflow an 8 MiB stack around 2,000-4,000.
inline constexpr size_t kMaxGraphNesting = 256;

/// The deepest bracket nesting in `text` (see the file comment).
size_t bracketNesting(std::string_view text);

/// Success when `text` nests at most `maxDepth` deep; otherwise an error
/// "<what>: brackets nest deeper than <maxDepth> levels at line L, column C
/// (the limit keeps the parser's recursion within its stack)".
Error checkNesting(std::string_view text, size_t maxDepth, std::string_view what);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_NESTINGLIMIT_H
