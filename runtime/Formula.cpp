//===- Formula.cpp - Integer formulas over runtime dims -------------------===//

#include "runtime/Formula.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace lossjit::runtime {

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) == (b < 0)))
    ++q;
  return q;
}

class FormulaParser {
public:
  FormulaParser(std::string_view text, const std::vector<std::string> &symbols)
      : text(text), symbols(symbols) {}

  Expected<Formula> run() {
    Formula formula;
    formula.text = std::string(text);
    if (text.size() > kMaxLength)
      return fail("longer than " + std::to_string(kMaxLength) + " characters");
    if (Error e = parseExpr(formula, 0))
      return e;
    skipSpaces();
    if (pos != text.size())
      return fail("unexpected '" + std::string(1, text[pos]) +
                  "', expected an operator (+ - * /) or the end");
    // The stack depth bounds evaluation scratch space.
    size_t depth = 0;
    for (const Formula::Op &op : formula.program) {
      switch (op.kind) {
      case Formula::Op::Literal:
      case Formula::Op::Symbol:
        ++depth;
        break;
      case Formula::Op::Neg:
        break;
      default:
        --depth;
      }
      formula.maxStack = std::max(formula.maxStack, depth + 1);
    }
    return formula;
  }

private:
  static constexpr size_t kMaxLength = 1024;
  static constexpr int kMaxDepth = 64;

  Error fail(const std::string &what) const {
    return makeError("bad formula '" + std::string(text) + "' at offset " +
                     std::to_string(pos) + ": " + what);
  }

  void skipSpaces() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }

  bool consume(char c) {
    skipSpaces();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }

  Error parseExpr(Formula &f, int depth) {
    if (depth > kMaxDepth)
      return fail("nested too deeply");
    if (Error e = parseTerm(f, depth))
      return e;
    while (true) {
      if (consume('+')) {
        if (Error e = parseTerm(f, depth))
          return e;
        f.program.push_back({Formula::Op::Add, 0});
      } else if (consume('-')) {
        if (Error e = parseTerm(f, depth))
          return e;
        f.program.push_back({Formula::Op::Sub, 0});
      } else {
        return Error::success();
      }
    }
  }

  Error parseTerm(Formula &f, int depth) {
    if (Error e = parseUnary(f, depth))
      return e;
    while (true) {
      if (consume('*')) {
        if (Error e = parseUnary(f, depth))
          return e;
        f.program.push_back({Formula::Op::Mul, 0});
      } else if (consume('/')) {
        if (Error e = parseUnary(f, depth))
          return e;
        f.program.push_back({Formula::Op::Div, 0});
      } else {
        return Error::success();
      }
    }
  }

  Error parseUnary(Formula &f, int depth) {
    if (depth > kMaxDepth)
      return fail("nested too deeply");
    if (consume('-')) {
      if (Error e = parseUnary(f, depth + 1))
        return e;
      f.program.push_back({Formula::Op::Neg, 0});
      return Error::success();
    }
    if (consume('+'))
      return parseUnary(f, depth + 1);
    return parsePrimary(f, depth);
  }

  Error parsePrimary(Formula &f, int depth) {
    skipSpaces();
    if (pos >= text.size())
      return fail("unexpected end, expected a number, a name, a call or '('");
    char c = text[pos];
    if (c == '(') {
      ++pos;
      if (Error e = parseExpr(f, depth + 1))
        return e;
      if (!consume(')'))
        return fail("expected ')'");
      return Error::success();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t value = 0;
      while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
        int64_t digit = text[pos] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10)
          return fail("integer literal does not fit in 64 bits");
        value = value * 10 + digit;
        ++pos;
      }
      if (pos < text.size() && (std::isalpha(static_cast<unsigned char>(text[pos])) ||
                                text[pos] == '_'))
        return fail("a name cannot start with a digit");
      f.program.push_back({Formula::Op::Literal, value});
      return Error::success();
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos;
      while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                   text[pos] == '_'))
        ++pos;
      std::string name(text.substr(start, pos - start));
      skipSpaces();
      if (pos < text.size() && text[pos] == '(') {
        Formula::Op::Kind kind;
        if (name == "cdiv")
          kind = Formula::Op::CDiv;
        else if (name == "min")
          kind = Formula::Op::Min;
        else if (name == "max")
          kind = Formula::Op::Max;
        else {
          pos = start;
          return fail("unknown function '" + name +
                      "', expected cdiv, min or max");
        }
        ++pos;
        if (Error e = parseExpr(f, depth + 1))
          return e;
        if (!consume(','))
          return fail("expected ',' between the two arguments of " + name);
        if (Error e = parseExpr(f, depth + 1))
          return e;
        if (!consume(')'))
          return fail("expected ')' after the arguments of " + name);
        f.program.push_back({kind, 0});
        return Error::success();
      }
      auto it = std::find(symbols.begin(), symbols.end(), name);
      if (it == symbols.end()) {
        pos = start;
        std::string known;
        for (const std::string &s : symbols)
          known += (known.empty() ? "" : ", ") + s;
        return fail("unknown name '" + name + "', expected one of: " +
                    (known.empty() ? std::string("(no dims or constants)")
                                   : known));
      }
      f.program.push_back(
          {Formula::Op::Symbol, static_cast<int64_t>(it - symbols.begin())});
      return Error::success();
    }
    return fail("unexpected '" + std::string(1, c) +
                "', expected a number, a name, a call or '('");
  }

  std::string_view text;
  const std::vector<std::string> &symbols;
  size_t pos = 0;
};

Expected<Formula> Formula::parse(std::string_view text,
                                 const std::vector<std::string> &symbols) {
  return FormulaParser(text, symbols).run();
}

std::vector<size_t> Formula::usedSymbols() const {
  std::vector<size_t> used;
  for (const Op &op : program)
    if (op.kind == Op::Symbol)
      used.push_back(static_cast<size_t>(op.operand));
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

Expected<int64_t> Formula::evaluate(std::span<const int64_t> values) const {
  // Formulas are short; a small fixed buffer avoids a heap allocation per
  // launch, with a vector fallback for pathological ones.
  int64_t smallStack[32];
  std::vector<int64_t> bigStack;
  int64_t *stack = smallStack;
  if (maxStack > 32) {
    bigStack.resize(maxStack);
    stack = bigStack.data();
  }
  size_t top = 0;
  auto fail = [&](const std::string &what) {
    return makeError("formula '" + text + "': " + what);
  };
  for (const Op &op : program) {
    switch (op.kind) {
    case Op::Literal:
      stack[top++] = op.operand;
      continue;
    case Op::Symbol:
      if (static_cast<size_t>(op.operand) >= values.size())
        return fail("internal error: symbol index out of range");
      stack[top++] = values[static_cast<size_t>(op.operand)];
      continue;
    case Op::Neg:
      if (stack[top - 1] == std::numeric_limits<int64_t>::min())
        return fail("integer overflow in negation");
      stack[top - 1] = -stack[top - 1];
      continue;
    default:
      break;
    }
    int64_t b = stack[--top];
    int64_t a = stack[top - 1];
    int64_t r = 0;
    switch (op.kind) {
    case Op::Add:
      if (__builtin_add_overflow(a, b, &r))
        return fail("integer overflow in " + std::to_string(a) + " + " +
                    std::to_string(b));
      break;
    case Op::Sub:
      if (__builtin_sub_overflow(a, b, &r))
        return fail("integer overflow in " + std::to_string(a) + " - " +
                    std::to_string(b));
      break;
    case Op::Mul:
      if (__builtin_mul_overflow(a, b, &r))
        return fail("integer overflow in " + std::to_string(a) + " * " +
                    std::to_string(b));
      break;
    case Op::Div:
    case Op::CDiv:
      if (b == 0)
        return fail("division by zero (" + std::to_string(a) + " / 0)");
      if (a == std::numeric_limits<int64_t>::min() && b == -1)
        return fail("integer overflow in division");
      r = op.kind == Op::Div ? floorDiv(a, b) : ceilDiv(a, b);
      break;
    case Op::Min:
      r = std::min(a, b);
      break;
    case Op::Max:
      r = std::max(a, b);
      break;
    default:
      return fail("internal error: bad opcode");
    }
    stack[top - 1] = r;
  }
  if (top != 1)
    return fail("internal error: unbalanced program");
  return stack[0];
}

Expected<int64_t> evaluateFormula(std::string_view text,
                                  const std::map<std::string, int64_t> &symbols) {
  std::vector<std::string> names;
  std::vector<int64_t> values;
  for (const auto &[name, value] : symbols) {
    names.push_back(name);
    values.push_back(value);
  }
  Expected<Formula> formula = Formula::parse(text, names);
  if (!formula)
    return formula.takeError();
  return formula->evaluate(values);
}

} // namespace lossjit::runtime
