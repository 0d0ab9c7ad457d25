//===- FormulaTest.cpp - Grid and workspace formulas ----------------------===//

#include "runtime/Formula.h"

#include <gtest/gtest.h>

#include <limits>

using namespace lossjit::runtime;

namespace {
const std::map<std::string, int64_t> kDims = {
    {"N", 4096}, {"V", 128256}, {"D", 4096}, {"S", 8}, {"zero", 0}, {"neg", -7}};

int64_t eval(const std::string &text) {
  Expected<int64_t> v = evaluateFormula(text, kDims);
  EXPECT_TRUE(v) << text << ": " << v.errorMessage();
  return v ? *v : -999;
}

std::string evalError(const std::string &text) {
  Expected<int64_t> v = evaluateFormula(text, kDims);
  EXPECT_FALSE(v) << "expected an error for " << text;
  return v ? std::string() : v.errorMessage();
}
} // namespace

TEST(Formula, Arithmetic) {
  EXPECT_EQ(eval("1"), 1);
  EXPECT_EQ(eval("N"), 4096);
  EXPECT_EQ(eval("S*N"), 8 * 4096);
  EXPECT_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(eval("10 - 4 - 3"), 3); // left associative
  EXPECT_EQ(eval("100 / 10 / 5"), 2);
  EXPECT_EQ(eval("-N + 1"), -4095);
  EXPECT_EQ(eval("+3"), 3);
  EXPECT_EQ(eval("--3"), 3);
  EXPECT_EQ(eval("  cdiv( N , 4 )  "), 1024);
  EXPECT_EQ(eval("cdiv(V,128)"), 1002);
  EXPECT_EQ(eval("cdiv(V, 64) * S"), 2004 * 8);
  EXPECT_EQ(eval("min(N, 7)"), 7);
  EXPECT_EQ(eval("max(cdiv(N,256), min(S, 2))"), 16);
  EXPECT_EQ(eval("zero"), 0);
  EXPECT_EQ(eval("cdiv(zero, 4)"), 0);
}

TEST(Formula, FloorDivisionSemantics) {
  EXPECT_EQ(eval("7 / 2"), 3);
  EXPECT_EQ(eval("neg / 2"), -4); // floor, not truncation
  EXPECT_EQ(eval("7 / -2"), -4);
  EXPECT_EQ(eval("neg / -2"), 3);
  EXPECT_EQ(eval("cdiv(7, 2)"), 4);
  EXPECT_EQ(eval("cdiv(neg, 2)"), -3);
  EXPECT_EQ(eval("cdiv(8, 2)"), 4);
  EXPECT_EQ(floorDiv(-8, 2), -4);
  EXPECT_EQ(ceilDiv(-8, 2), -4);
}

TEST(Formula, Errors) {
  EXPECT_NE(evalError("N / zero").find("division by zero"), std::string::npos);
  EXPECT_NE(evalError("cdiv(N, 0)").find("division by zero"), std::string::npos);
  std::string unknown = evalError("N * Q");
  EXPECT_NE(unknown.find("unknown name 'Q'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("expected one of"), std::string::npos) << unknown;
  EXPECT_NE(evalError("floor(N, 2)").find("unknown function 'floor'"),
            std::string::npos);
  EXPECT_NE(evalError("cdiv(N)").find("expected ','"), std::string::npos);
  EXPECT_NE(evalError("(N + 1").find("expected ')'"), std::string::npos);
  EXPECT_NE(evalError("N N").find("expected an operator"), std::string::npos);
  EXPECT_NE(evalError("").find("unexpected end"), std::string::npos);
  EXPECT_NE(evalError("N +").find("unexpected end"), std::string::npos);
  EXPECT_NE(evalError("2N").find("cannot start with a digit"), std::string::npos);
  EXPECT_NE(evalError("N % 2").find("unexpected '%'"), std::string::npos);
  EXPECT_NE(evalError("99999999999999999999").find("64 bits"), std::string::npos);
  EXPECT_NE(evalError("N*N*N*N*N*N").find("overflow"), std::string::npos);
  EXPECT_NE(evalError(std::string(200, '(') + "1" + std::string(200, ')'))
                .find("nested too deeply"),
            std::string::npos);
  // Every message quotes the formula.
  EXPECT_NE(evalError("N / zero").find("'N / zero'"), std::string::npos);
}

TEST(Formula, BoundProgramsReuse) {
  Expected<Formula> f = Formula::parse("cdiv(N, B) * S", {"N", "B", "S"});
  ASSERT_TRUE(f) << f.errorMessage();
  EXPECT_EQ(f->getText(), "cdiv(N, B) * S");
  std::vector<int64_t> values = {100, 8, 3};
  EXPECT_EQ(*f->evaluate(values), 13 * 3);
  values[0] = 1;
  EXPECT_EQ(*f->evaluate(values), 3);
  EXPECT_EQ(f->usedSymbols(), (std::vector<size_t>{0, 1, 2}));
  Expected<Formula> literal = Formula::parse("4", {});
  ASSERT_TRUE(literal);
  EXPECT_TRUE(literal->usedSymbols().empty());
  EXPECT_EQ(*literal->evaluate({}), 4);
}
