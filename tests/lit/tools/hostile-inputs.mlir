// Hostile input to the three tools ends in a clear error that names the
// argument, file or limit, and exit code 1: never a crash, a hang or an
// abort (issue 16). The graph below is valid; the inputs are not.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/Inputs/hostile.py make %t
// RUN: export LOSSJIT_CACHE_DIR=%t/cache
//
// .npy: a shape whose byte size overflows (it wrapped to 0 and crashed), a
// file shorter than its header says, a version byte and a dtype holding
// control characters (escaped, never printed raw).
// RUN: not lossjit-runner --preset linear-cross-entropy %t/overflow.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=OVERFLOW
// RUN: not lossjit-runner --preset linear-cross-entropy %t/short.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=SHORT
// RUN: not lossjit-runner --preset linear-cross-entropy %t/version.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=VERSION
// RUN: not lossjit-runner --preset linear-cross-entropy %t/control.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=CONTROL
// OVERFLOW: lossjit-runner: error: {{.*}}overflow.npy: shape '(2305843009213693952, 2)' of f32 needs more than 2^63 bytes (its size overflows)
// SHORT: lossjit-runner: error: {{.*}}short.npy: holds 20 data bytes, shape and dtype need 48
// VERSION: lossjit-runner: error: {{.*}}version.npy: unsupported .npy format version 7.27 (expected 1.0, 2.0 or 3.0)
// CONTROL: lossjit-runner: error: {{.*}}control.npy: dtype '\x1b[2J' is not supported
//
// --random sizes beyond memory or 64 bits (LLVM's out-of-memory abort,
// std::length_error), and --host-threads out of 1..1024 (std::system_error).
// RUN: not lossjit-runner --preset linear-cross-entropy --random 100000000000,100000000,3 2>&1 | FileCheck %s --check-prefix=RANDOM
// RUN: not lossjit-runner --preset linear-cross-entropy --random 9223372036854775807,2,2 2>&1 | FileCheck %s --check-prefix=RANDOM64
// RUN: not lossjit-runner --preset linear-cross-entropy --random 4,8,4 --host-threads 100000 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not lossjit-runner --preset linear-cross-entropy --random 4,8,4 --host-threads 0 2>&1 | FileCheck %s --check-prefix=THREADS0
// RUN: not lossjit-runner --preset linear-cross-entropy --random 4,8,4 --host-threads -2 2>&1 | FileCheck %s --check-prefix=THREADSNEG
// RUN: lossjit-runner --preset linear-cross-entropy --random 40,8,4 --host-threads 1024 --check | FileCheck %s --check-prefix=THREADSMAX
// RANDOM: lossjit-runner: error: --random 100000000000,100000000,3: the inputs need 5203200000000 bytes, more than this machine's {{[0-9]+}} bytes of memory
// RANDOM64: lossjit-runner: error: --random 9223372036854775807,2,2: the inputs' size overflows 64 bits
// THREADS: lossjit-runner: error: --host-threads must be between 1 and 1024, got 100000
// THREADS0: lossjit-runner: error: --host-threads must be between 1 and 1024, got 0
// THREADSNEG: lossjit-runner: error: --host-threads must be between 1 and 1024, got -2
// THREADSMAX: max relative error
//
// Graphs nested 10,000 deep (attributes, modules) overflowed MLIR's parser
// stack in all three tools; the nesting is bounded before parsing.
// RUN: not lossjit-opt %t/deep-attr.mlir 2>&1 | FileCheck %s --check-prefix=DEEP-ATTR -DTOOL=opt
// RUN: not lossjit-opt %t/deep-module.mlir 2>&1 | FileCheck %s --check-prefix=DEEP-MODULE -DTOOL=opt
// RUN: not lossjit-opt - < %t/deep-module.mlir 2>&1 | FileCheck %s --check-prefix=DEEP-STDIN
// RUN: not lossjit-runner %t/deep-attr.mlir %t/x.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=DEEP-ATTR -DTOOL=runner
// RUN: not lossjit-runner %t/deep-module.mlir %t/x.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=DEEP-MODULE -DTOOL=runner
// RUN: not lossjit-aot %t/deep-attr.mlir -o %t/aot 2>&1 | FileCheck %s --check-prefix=DEEP-ATTR -DTOOL=aot
// RUN: not lossjit-aot %t/deep-module.mlir -o %t/aot 2>&1 | FileCheck %s --check-prefix=DEEP-MODULE -DTOOL=aot
// DEEP-ATTR: lossjit-[[TOOL]]: error: {{.*}}deep-attr.mlir: brackets nest deeper than 256 levels at line 1, column 281 (the limit keeps the parser's recursion within its stack)
// DEEP-MODULE: lossjit-[[TOOL]]: error: {{.*}}deep-module.mlir: brackets nest deeper than 256 levels at line 257, column 8
// DEEP-STDIN: lossjit-opt: error: -: brackets nest deeper than 256 levels at line 257, column 8
//
// An arch LLVM does not know exited 0 and wrote PTX ptxas rejects; a known
// one that needs a newer PTX ISA made LLVM abort.
// RUN: not lossjit-aot --preset linear-cross-entropy --arch sm_80,sm_1000 -o %t/aot 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not lossjit-aot --preset linear-cross-entropy --arch sm_120 -o %t/aot 2>&1 | FileCheck %s --check-prefix=ARCH120
// RUN: not ls %t/aot
// ARCH: lossjit-aot: error: --arch: arch sm_1000 is not known to LLVM {{[0-9.]+}}'s NVPTX backend (known: sm_70, {{.*}}sm_90a, sm_100{{.*}})
// ARCH120: lossjit-aot: error: --arch: arch sm_120 needs PTX ISA 8.7 or newer, and lossjit emits PTX ISA 8.6 for it (features '+ptx86'): not supported yet
//
// The graph file that the tools accept: this one, nested 4 deep.
// RUN: lossjit-opt %s | FileCheck %s --check-prefix=VALID
// VALID: func.func @lce

func.func @lce(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %loss, %lse : tensor<f32>, tensor<?xf32>
}
