//===- Bindings.h - pieces shared by the _lossjit binding files -*- C++ -*-===//
//
// `_lossjit` is split in two: the runtime half (CUDA launches of kernel
// bundles, bundle lookup in LOSSJIT_KERNEL_PATH) is built in every
// configuration; the compiler half (graph builder, CPU backend, PTX
// compilation) only when LOSSJIT_ENABLE_COMPILER is on, so a runtime-only
// build on a GPU machine without MLIR still gives a working extension.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_PYTHON_BINDINGS_H
#define LOSSJIT_PYTHON_BINDINGS_H

#include "runtime/KernelCache.h"

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace lossjit::python {

namespace py = pybind11;

/// A CUDA kernel bundle ready to launch: what both a JIT compile (compiler
/// builds) and a LOSSJIT_KERNEL_PATH lookup (every build) produce.
struct GpuOp {
  runtime::BundleRef bundle;
};

/// Raised for a runtime::Error; Python sees RuntimeError with the message.
[[noreturn]] inline void throwError(const std::string &message) {
  throw std::runtime_error(message);
}

/// Raised for bad input the message names; Python sees ValueError.
[[noreturn]] inline void throwValueError(const std::string &message) {
  throw std::invalid_argument(message);
}

/// Registers the compiler half (GraphBuilder, Graph, CpuOp, ...). Defined in
/// CompilerBindings.cpp, which is compiled only with the compiler.
void bindCompiler(py::module_ &m);

} // namespace lossjit::python

#endif // LOSSJIT_PYTHON_BINDINGS_H
