//===- LaunchPlan.h - how the runtime runs a compiled op ---------*- C++ -*-===//
//
// A compiled op is several kernels. The plan lists them in launch order with
// grid formulas over the runtime dims (N, V, D) and compile-time constants,
// the workspaces to allocate, and which buffer or dim feeds each kernel
// argument. It travels in the IR as the `loss.launch_plans` attribute (so lit
// tests see it) and ends up in the bundle manifest (runtime/KernelBundle.h).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_LAUNCHPLAN_H
#define LOSSJIT_COMPILER_KERNELS_LAUNCHPLAN_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <array>
#include <map>
#include <string>
#include <vector>

namespace lossjit {

/// A user-visible buffer of the op (inputs and outputs alike).
struct PlanParam {
  std::string name;
  std::string dtype;              ///< "f16", "bf16", "f32", "i32", "i64".
  std::vector<std::string> shape; ///< dim names or integer literals.
  bool isOutput = false;
};

/// Scratch memory the runtime allocates once per call.
struct PlanWorkspace {
  std::string name;
  std::string dtype;
  std::string count; ///< element-count formula, e.g. "S*N".
};

/// A TMA tensor map the runtime encodes for each call (Hopper kernels,
/// tile tma=1): a row-major 2-D param, dimension 0 (`dims[0]` elements)
/// contiguous and rows `dims[0]`·element bytes apart, copied in boxes of
/// `box` elements (box[0] along dimension 0) into shared memory swizzled in
/// `swizzle`-byte rows (0, 32, 64 or 128), out-of-bounds elements read as
/// zero. A kernel argument bound to `name` takes the 128-byte map; one bound
/// to kTensorMapsReadyBinding takes 1 when the runtime encoded every map the
/// kernel takes (an aligned base, rows a multiple of 16 bytes) and 0 when it
/// could not, and that kernel then copies by cp.async instead.
struct PlanTensorMap {
  std::string name;
  std::string buffer;                ///< the param.
  std::array<std::string, 2> dims;   ///< formulas: contiguous, then rows.
  std::array<int64_t, 2> box = {0, 0};
  int64_t swizzle = 0;
};

/// The plan value that says whether the tensor maps were encoded.
inline constexpr llvm::StringLiteral kTensorMapsReadyBinding = "tensor_maps_ready";

/// One kernel launch (GPU) or one call of a host kernel (CPU).
struct PlanKernel {
  std::string name;
  /// The gpu.module (GPU) or builtin.module (CPU) holding the kernel; one
  /// GPU kernel per module so each kernel becomes its own PTX file.
  std::string module;
  std::array<std::string, 3> grid = {"1", "1", "1"}; ///< formulas.
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t sharedBytes = 0;
  std::vector<std::string> args; ///< param, workspace, dim or constant names.
  /// CPU only: "rows" — the kernel takes (row_begin, row_end) and the host
  /// may split rows between threads; "vocab" — likewise (col_begin,
  /// col_end) over [0, V); "none" — called once.
  std::string parallel = "none";
  /// Launched once per row chunk [chunk_begin, chunk_end) of `chunkSymbol`
  /// rows, in chunk order; consecutive per-chunk kernels run as a group.
  bool perChunk = false;
  /// GPU only: blocks per cluster along x (1: none); grid.x is a multiple.
  int64_t cluster = 1;
  /// GPU only: the blocks sweep their tiles with a stride of gridDim.x, so
  /// the launcher may run fewer whole clusters along x than grid[0] says
  /// (LaunchShape::persistent).
  bool persistent = false;
};

struct LaunchPlan {
  std::string entry; ///< name of the function the plan replaces.
  /// For each argument of that function, the param it feeds ("x", "w",
  /// "labels", "bias"; "" if unused), so a graph's callers keep its order.
  std::vector<std::string> entryArgs;
  /// For each result of that function, the output param it returns.
  std::vector<std::string> entryResults;
  /// For each argument of that function, the extents its tensor type
  /// declares (-1 where dynamic; empty for an unranked type). Empty when no
  /// argument has a static extent. The kernels only see the runtime dims, so
  /// without this a graph declaring tensor<3x4xf32> would run on 5 rows:
  /// checkDeclaredExtents() compares it with every call.
  std::vector<std::vector<int64_t>> entryArgExtents;
  std::string op = "linear_cross_entropy";
  std::vector<PlanParam> params;
  std::vector<std::string> dims = {"N", "V", "D"};
  std::map<std::string, int64_t> constants;
  /// Symbols computed from dims and constants before anything else, in
  /// order, e.g. {"C", "max(1,min(N,WB/(V*4)))"} (the chunk size).
  std::vector<std::pair<std::string, std::string>> derived;
  /// Name of the chunk-size symbol when some kernel is per-chunk.
  std::string chunkSymbol;
  /// The dim the chunks cut: "N" (rows; chunk_begin/chunk_end are rows)
  /// or "V" (host plans only: vocabulary columns, while "rows" kernels of a
  /// chunk take all N rows and "vocab" kernels split the chunk's columns).
  std::string chunkDim = "N";
  std::vector<PlanWorkspace> workspaces;
  /// TMA tensor maps kernel arguments may bind (none unless tma=1).
  std::vector<PlanTensorMap> tensorMaps;
  std::vector<PlanKernel> kernels;
  std::map<std::string, std::string> options; ///< dtype, reduction, ...
  std::string tile;                           ///< TileConfig::str().

  /// Encodes the plan as a dictionary attribute.
  mlir::DictionaryAttr toAttr(mlir::MLIRContext *context) const;
  /// Decodes `toAttr`'s output; fails with a message on malformed input.
  static mlir::FailureOr<LaunchPlan> fromAttr(mlir::DictionaryAttr attr, std::string &error);
};

/// Compares every static extent in `plan.entryArgExtents` with the extent
/// the argument's param has in this call (its shape entry evaluated over
/// `symbols`: N, V, D and the constants). The error names the argument
/// (index and role), the dimension, the declared and the actual extent.
llvm::Error checkDeclaredExtents(const LaunchPlan &plan,
                                 const std::map<std::string, int64_t> &symbols);

/// Name of the top-level module attribute mapping each lowered function's
/// name to its plan: `loss.launch_plans = {lce = {...}}`.
inline constexpr llvm::StringLiteral kLaunchPlansAttrName = "loss.launch_plans";

/// Adds `plan` under its entry name to the module's `loss.launch_plans`.
void attachLaunchPlan(mlir::Operation *module, const LaunchPlan &plan);
/// Reads every plan of `module` (in entry-name order).
mlir::FailureOr<std::vector<LaunchPlan>> readLaunchPlans(mlir::Operation *module,
                                                         std::string &error);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LAUNCHPLAN_H
