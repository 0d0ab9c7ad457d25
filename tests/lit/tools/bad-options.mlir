// lossjit-aot and the tools around it refuse what would change nothing:
// flags a GRAPH.mlir input makes meaningless, an arch named twice, an empty
// tile; and say when the environment asks for what cannot be done.
// RUN: rm -rf %t && mkdir -p %t
// (This file's @f is the graph; it compiles as given.)
// RUN: lossjit-aot %s --arch sm_80 -o %t/graph --quiet
// A GRAPH.mlir input carries its own types, loss and backward: a preset's
// flag next to it is an error, not silently dropped.
// RUN: not lossjit-aot %s --fused --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=GRAPHFUSED
// RUN: not lossjit-aot %s --workspace-bytes 65536 --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=GRAPHWS
// RUN: not lossjit-aot %s --dtype bf16 --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=GRAPHDTYPE
// RUN: not lossjit-aot --preset linear-cross-entropy --arch sm_90a,sm_80,sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=TWICE
// A misspelled LOSSJIT_LOG level and a LOSSJIT_DUMP_DIR that cannot be
// written are said once (the compile still succeeds): neither silently
// looks like a quiet run or an empty dump.
// RUN: touch %t/not-a-directory
// RUN: env LOSSJIT_CACHE_DISABLE=1 LOSSJIT_LOG=verbose LOSSJIT_DUMP_DIR=%t/not-a-directory/dump lossjit-runner --preset linear-cross-entropy --random 8,16,24 -o %t/dumped 2>&1 | FileCheck %s --check-prefix=ENVWARN
// An empty --tile (an unset variable in a script) is no tile.
// RUN: not lossjit-aot --preset linear-cross-entropy --tile "" --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=EMPTYTILE

// GRAPHFUSED: error: --fused shapes a --preset graph; a GRAPH.mlir input carries its own types, loss and backward (drop --fused)
// GRAPHWS: error: --workspace-bytes shapes a --preset graph
// GRAPHDTYPE: error: --dtype shapes a --preset graph
// TWICE: error: --arch names sm_90a twice: sm_90a,sm_80,sm_90a
// ENVWARN: lossjit[warning]: LOSSJIT_LOG='verbose' names no level (expected warning or 0, info or 1, debug or 2); logging warnings only
// ENVWARN: lossjit[warning]: LOSSJIT_DUMP_DIR: cannot create {{.*}}not-a-directory/dump: {{.*}}; the stages are not dumped
// ENVWARN-NOT: LOSSJIT_DUMP_DIR
// EMPTYTILE: error: --tile: tile must be 'auto' or key=value pairs such as 'matmul=wgmma,tma=2', got ''

func.func @f(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.cross_entropy %z, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
