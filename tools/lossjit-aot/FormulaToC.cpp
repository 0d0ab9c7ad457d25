//===- FormulaToC.cpp -----------------------------------------------------===//

#include "tools/lossjit-aot/FormulaToC.h"

#include <cctype>
#include <limits>

namespace lossjit::aot {

namespace {
/// Recursive descent over runtime/Formula.h's grammar, emitting C.
class Translator {
public:
  Translator(const std::string &text, const std::vector<std::string> &symbols,
             const FormulaCStyle &style)
      : text(text), symbols(symbols), style(style) {}

  runtime::Expected<std::string> run() {
    std::string out;
    if (!expr(out))
      return runtime::makeError("formula '" + text + "': " + error);
    skipSpace();
    if (pos != text.size())
      return runtime::makeError("formula '" + text + "': unexpected '" +
                                text.substr(pos) + "' at offset " +
                                std::to_string(pos));
    return out;
  }

private:
  void skipSpace() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool fail(const std::string &message) {
    if (error.empty())
      error = message + " at offset " + std::to_string(pos);
    return false;
  }
  std::string call(const std::string &fn, const std::string &a) {
    return style.helper + fn + "(" + style.errorFlag + ", " + a + ")";
  }
  std::string call(const std::string &fn, const std::string &a, const std::string &b) {
    return style.helper + fn + "(" + style.errorFlag + ", " + a + ", " + b + ")";
  }

  bool expr(std::string &out) {
    if (!term(out))
      return false;
    while (true) {
      skipSpace();
      if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
        char op = text[pos++];
        std::string rhs;
        if (!term(rhs))
          return false;
        out = call(op == '+' ? "add" : "sub", out, rhs);
      } else {
        return true;
      }
    }
  }

  bool term(std::string &out) {
    if (!unary(out))
      return false;
    while (true) {
      skipSpace();
      if (pos < text.size() && (text[pos] == '*' || text[pos] == '/')) {
        char op = text[pos++];
        std::string rhs;
        if (!unary(rhs))
          return false;
        out = call(op == '*' ? "mul" : "fdiv", out, rhs);
      } else {
        return true;
      }
    }
  }

  bool unary(std::string &out) {
    if (consume('-')) {
      if (!unary(out))
        return false;
      out = call("neg", out);
      return true;
    }
    if (consume('+'))
      return unary(out);
    return primary(out);
  }

  bool primary(std::string &out) {
    skipSpace();
    if (pos >= text.size())
      return fail("expected a number, symbol or '('");
    char c = text[pos];
    if (c == '(') {
      ++pos;
      if (!expr(out))
        return false;
      if (!consume(')'))
        return fail("expected ')'");
      out = "(" + out + ")";
      return true;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos;
      while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
        ++pos;
      std::string digits = text.substr(start, pos - start);
      if (digits.size() > 19 ||
          (digits.size() == 19 && digits > "9223372036854775807"))
        return fail("integer " + digits + " does not fit int64");
      // INT64_C keeps the literal's type int64_t on every data model.
      out = "INT64_C(" + digits + ")";
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos;
      while (pos < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
        ++pos;
      std::string name = text.substr(start, pos - start);
      if (name == "cdiv" || name == "min" || name == "max") {
        if (!consume('('))
          return fail("expected '(' after " + name);
        std::string a, b;
        if (!expr(a))
          return false;
        if (!consume(','))
          return fail("expected ',' in " + name + "(...)");
        if (!expr(b))
          return false;
        if (!consume(')'))
          return fail("expected ')' closing " + name + "(...)");
        out = call(name, a, b);
        return true;
      }
      for (size_t i = 0; i < symbols.size(); ++i)
        if (symbols[i] == name) {
          out = style.symbolArray + "[" + std::to_string(i) + "]";
          return true;
        }
      return fail("unknown symbol '" + name + "'");
    }
    return fail(std::string("unexpected '") + c + "'");
  }

  const std::string &text;
  const std::vector<std::string> &symbols;
  const FormulaCStyle &style;
  size_t pos = 0;
  std::string error;
};
} // namespace

runtime::Expected<std::string> formulaToC(const std::string &text,
                                          const std::vector<std::string> &symbols,
                                          const FormulaCStyle &style) {
  return Translator(text, symbols, style).run();
}

} // namespace lossjit::aot
