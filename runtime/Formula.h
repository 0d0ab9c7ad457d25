//===- Formula.h - Integer formulas over runtime dims -----------*- C++ -*-===//
//
// Grid sizes and workspace counts in a bundle manifest are tiny integer
// expressions over the runtime dims (N, V, D) and compile-time constants:
//
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('-' | '+') unary | primary
//   primary := INTEGER | SYMBOL | ('cdiv' | 'min' | 'max') '(' expr ',' expr ')'
//            | '(' expr ')'
//
// '/' is floor division and cdiv(a, b) is ceil(a / b), both exact on int64;
// division by zero and overflow are errors, never UB. Formulas are parsed
// once (when a bundle is prepared) into a postfix program with symbols bound
// to indices, so evaluating one per launch costs a few nanoseconds.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_FORMULA_H
#define LOSSJIT_RUNTIME_FORMULA_H

#include "runtime/Status.h"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lossjit::runtime {

/// A parsed formula whose symbols are bound to positions in a value array.
class Formula {
public:
  /// Parses `text`; every symbol must be one of `symbols`, and is bound to its
  /// index there. Errors quote the formula and say what was expected where.
  static Expected<Formula> parse(std::string_view text,
                                 const std::vector<std::string> &symbols);

  /// Evaluates with `values[i]` standing for `symbols[i]` of parse().
  Expected<int64_t> evaluate(std::span<const int64_t> values) const;

  /// The source text.
  const std::string &getText() const { return text; }

  /// Indices of the symbols the formula reads (sorted, unique).
  std::vector<size_t> usedSymbols() const;

private:
  struct Op {
    enum Kind { Literal, Symbol, Neg, Add, Sub, Mul, Div, CDiv, Min, Max };
    Kind kind;
    int64_t operand; // literal value or symbol index
  };
  friend class FormulaParser;

  std::string text;
  std::vector<Op> program; // postfix
  size_t maxStack = 0;
};

/// Parses and evaluates `text` once with the given symbol values.
Expected<int64_t> evaluateFormula(std::string_view text,
                                  const std::map<std::string, int64_t> &symbols);

/// floor(a / b) for b != 0 (C++ '/' truncates toward zero).
int64_t floorDiv(int64_t a, int64_t b);
/// ceil(a / b) for b != 0.
int64_t ceilDiv(int64_t a, int64_t b);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_FORMULA_H
