//===- TestUtil.h - helpers of the SIMT interpreter tests -------*- C++ -*-===//

#ifndef LOSSJIT_TESTS_UNIT_INTERPRETER_TESTUTIL_H
#define LOSSJIT_TESTS_UNIT_INTERPRETER_TESTUTIL_H

#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "testing/simt/FloatFormats.h"
#include "testing/simt/SimtInterpreter.h"
#include "tests/unit/CpuCompileCache.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <string>

namespace lossjit::simt::test {

/// One context for the whole test binary, with lossjit's dialects.
inline mlir::MLIRContext &getContext() {
  static std::unique_ptr<mlir::MLIRContext> context = [] {
    mlir::DialectRegistry registry;
    registerLossJITDialects(registry);
    auto ctx = std::make_unique<mlir::MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    return ctx;
  }();
  return *context;
}

/// Parses a module; fails the test (and returns null) on a parse error.
inline mlir::OwningOpRef<mlir::ModuleOp>
parseModule(const std::string &source) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(
      source, mlir::ParserConfig(&getContext()), "test.mlir");
  EXPECT_TRUE(module) << "parse error in:\n" << source;
  return module;
}

/// `funcText` (one or more gpu.func) inside `gpu.module @m`.
inline std::string kernelModule(const std::string &funcText) {
  return "module attributes {gpu.container_module} {\n gpu.module @m {\n" +
         funcText + "\n }\n}\n";
}

/// The error's message, or "" on success.
inline std::string errorText(llvm::Error err) {
  if (!err)
    return "";
  return llvm::toString(std::move(err));
}

/// Parses `funcText`, decodes gpu.func @`name` and launches it. Returns the
/// error message ("" on success).
inline std::string
runKernel(const std::string &funcText, std::array<int64_t, 3> grid,
          std::array<int64_t, 3> block, llvm::ArrayRef<SimtArg> args,
          const SimtOptions &options = {}, const std::string &name = "k") {
  auto module = parseModule(kernelModule(funcText));
  if (!module)
    return "parse error";
  auto func = lookupKernel(*module, "m", name);
  if (!func)
    return errorText(func.takeError());
  auto kernel = SimtKernel::decode(*func);
  if (!kernel)
    return errorText(kernel.takeError());
  return errorText((*kernel)->launch(grid, block, args, options));
}

/// The CPU backend's op for `graph` (mutated on a miss), the reference
/// many GPU-kernel checks compare with (one test checks a dozen GPU tiles
/// against the same CPU op), through the tests' cache (CpuCompileCache.h).
inline llvm::Expected<std::unique_ptr<CpuCompiledOp>> compileCpuReference(mlir::ModuleOp graph) {
  return lossjit::test::compileCpuCached(graph);
}

inline uint64_t f32Word(float f) { return std::bit_cast<uint32_t>(f); }
inline float wordF32(uint64_t w) { return std::bit_cast<float>(uint32_t(w)); }

} // namespace lossjit::simt::test

#endif // LOSSJIT_TESTS_UNIT_INTERPRETER_TESTUTIL_H
