//===- FormulaToC.h - Manifest formulas as checked C expressions -*- C++ -*-===//
//
// The generated C API cannot parse formulas at run time (it has no runtime
// library), so lossjit-aot translates each grid and workspace formula
// (runtime/Formula.h grammar) into a C expression once. Every operation
// becomes a call to a helper that sets an error flag instead of overflowing
// or dividing by zero, matching runtime::Formula's checked evaluation:
//
//   cdiv(N,4)*S   →   P_mul(e, P_cdiv(e, s[0], 4), s[3])
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_FORMULATOC_H
#define LOSSJIT_TOOLS_AOT_FORMULATOC_H

#include "runtime/Status.h"

#include <string>
#include <vector>

namespace lossjit::aot {

/// Names the pieces of the emitted expression.
struct FormulaCStyle {
  /// Prefix of the helper functions: `<helper>add`, `<helper>sub`,
  /// `<helper>mul`, `<helper>fdiv`, `<helper>cdiv`, `<helper>neg`,
  /// `<helper>min`, `<helper>max`; each takes (int *err, a[, b]).
  std::string helper = "aot_";
  /// The `int *` error-flag expression passed to every helper.
  std::string errorFlag = "e";
  /// Symbol i is read as `<symbolArray>[i]`.
  std::string symbolArray = "s";
};

/// Translates `text` into a C expression of type int64_t. Symbols must be in
/// `symbols` (their index is the array position). Errors quote the formula.
runtime::Expected<std::string> formulaToC(const std::string &text,
                                          const std::vector<std::string> &symbols,
                                          const FormulaCStyle &style = {});

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_FORMULATOC_H
