//===- KernelSignature.h - a kernel's arguments, spelled once ---*- C++ -*-===//
//
// A schedule names each kernel argument once, with its type and the plan
// value that feeds it. From that one list the kernel function is created
// (a gpu.func in its own gpu.module, or a func.func in the host module) and
// the launch plan's argument list is written, so the two can never drift.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SUPPORT_KERNELSIGNATURE_H
#define LOSSJIT_COMPILER_KERNELS_SUPPORT_KERNELSIGNATURE_H

#include "compiler/Kernels/Support/LaunchPlan.h"

#include "mlir/IR/Builders.h"

#include <array>
#include <string>
#include <vector>

namespace lossjit {

/// The named, typed arguments of one kernel.
class KernelSignature {
public:
  explicit KernelSignature(llvm::StringRef name) : kernelName(name.str()) {}

  /// Adds argument `name` of `type`, fed at launch by the plan value
  /// `binding` (a param, workspace, dim, constant or range symbol); by
  /// default the value of the same name.
  KernelSignature &arg(llvm::StringRef name, mlir::Type type, llvm::StringRef binding = {});
  /// arg() when `present`, nothing otherwise (optional buffers).
  KernelSignature &argIf(bool present, llvm::StringRef name, mlir::Type type,
                         llvm::StringRef binding = {});
  /// Adds a TMA tensor map argument `name` (an !llvm.ptr the GPU sink marks
  /// llvm.align = 64 and counts in loss.tensor_maps, so that
  /// loss-tensor-map-grid-constant passes it as a 128-byte by-value
  /// parameter), fed by the plan's tensor map `binding` (PlanTensorMap).
  KernelSignature &tensorMap(llvm::StringRef name, llvm::StringRef binding,
                             mlir::MLIRContext *context);
  /// Whether argument `i` is a tensor map.
  bool isTensorMap(size_t i) const { return args[i].tensorMap; }
  size_t size() const { return args.size(); }

  llvm::StringRef name() const { return kernelName; }
  llvm::SmallVector<mlir::Type> types() const;
  /// What the plan passes, in argument order.
  std::vector<std::string> bindings() const;
  /// The argument's position, or -1.
  int position(llvm::StringRef name) const;

private:
  struct Arg {
    std::string name;
    mlir::Type type;
    std::string binding;
    bool tensorMap = false;
  };
  std::string kernelName;
  std::vector<Arg> args;
};

/// A kernel under construction: its arguments by name (a null Value for a
/// name the signature does not have, so optional buffers read naturally).
class KernelArgs {
public:
  KernelArgs(KernelSignature signature, mlir::Block *entry)
      : signature(std::move(signature)), entry(entry) {}
  mlir::Value operator[](llvm::StringRef name) const;
  /// The i-th workgroup (shared-memory) buffer of a GPU kernel: the static
  /// attributions (LaunchShape::workgroup), then the dynamic views
  /// (LaunchShape::dynamicWorkgroup).
  mlir::Value workgroup(unsigned i) const;
  void setWorkgroup(llvm::SmallVector<mlir::Value> buffers) { shared = std::move(buffers); }

private:
  KernelSignature signature;
  mlir::Block *entry;
  llvm::SmallVector<mlir::Value> shared;
};

/// How the runtime launches one kernel (the plan entry's non-argument part).
struct LaunchShape {
  /// GPU grid formulas over dims, constants and derived symbols.
  std::array<std::string, 3> grid = {"1", "1", "1"};
  /// Host only: "rows" / "vocab" ranges the host may split between threads,
  /// or "none" (see PlanKernel::parallel).
  std::string parallel = "none";
  /// Launched once per row chunk, in chunk order.
  bool perChunk = false;
  /// GPU only: static workgroup (shared) buffers, as memref types.
  llvm::SmallVector<mlir::Type> workgroup;
  /// GPU only: buffers in dynamic shared memory (static-shape workgroup
  /// memref types), as views of one gpu.dynamic_shared_memory base at
  /// kDynamicSharedAlign-aligned byte offsets (or `dynamicAlign` where
  /// larger) in this order; the launch asks
  /// for their total (the plan's shared_bytes). Operand rings go here: static
  /// shared memory is capped at 48 KiB per kernel, and every view starts
  /// 16-byte aligned as cp.async and ldmatrix need.
  llvm::SmallVector<mlir::Type> dynamicWorkgroup;
  /// GPU only: threads per block, 0 for the sink's (a tile product's
  /// strategy may want more: TileConfig::productThreads).
  int64_t threads = 0;
  /// GPU only: the registers per thread the kernel starts with
  /// (nvvm.maxnreg), 0 for what ptxas picks. A kernel whose warpgroups
  /// trade registers (setmaxnreg) needs it: the trades count from it.
  int64_t maxRegisters = 0;
  /// GPU only: blocks per thread-block cluster along x (sm_90), 0 for
  /// none. The kernel carries it as known_cluster_size, so its PTX has
  /// .reqnctapercluster and a plain launch runs it in clusters; grid.x
  /// must be a multiple of it.
  int64_t cluster = 0;
  /// GPU only: the blocks sweep the tiles with a stride of gridDim.x (tile
  /// persistent=P), so the launcher may launch fewer along x — in whole
  /// clusters — than the grid formula says, e.g. only as many as are
  /// co-resident on the device (CudaLauncher).
  bool persistent = false;
  /// Per dynamicWorkgroup buffer: its byte alignment when it needs more
  /// than kDynamicSharedAlign (0 or missing: that). A kernel with any such
  /// buffer carries loss.dynamic_shared_align, and its base is that aligned.
  llvm::SmallVector<int64_t> dynamicAlign;
};

/// Byte alignment of the dynamic shared-memory base and of every view in
/// it (loss-extern-dynamic-shared-memory gives the base this alignment).
inline constexpr int64_t kDynamicSharedAlign = 16;

/// Where a schedule's kernels go. Each begin() creates the kernel function
/// from its signature, moves the builder into its body and records the
/// launch in the plan; end() closes the body.
class KernelSink {
public:
  virtual ~KernelSink() = default;
  virtual KernelArgs begin(const KernelSignature &signature, const LaunchShape &launch) = 0;
  virtual void end() = 0;
  mlir::OpBuilder &builder() { return b; }
  mlir::Location location() const { return loc; }
  LaunchPlan &plan() { return launchPlan; }
  /// memref<?xT>: every kernel buffer is flat, sized at run time.
  static mlir::MemRefType flat(mlir::Type element);

protected:
  KernelSink(mlir::OpBuilder &b, mlir::Location loc, LaunchPlan &plan)
      : b(b), loc(loc), launchPlan(plan) {}
  mlir::OpBuilder &b;
  mlir::Location loc;
  LaunchPlan &launchPlan;
};

/// GPU kernels: one gpu.module `<prefix>_<kernel>` per kernel (so each
/// becomes its own PTX file), placed before the builder's insertion point,
/// blocks of `threads` threads.
class GpuKernelSink : public KernelSink {
public:
  GpuKernelSink(mlir::OpBuilder &b, mlir::Location loc, LaunchPlan &plan, llvm::StringRef prefix,
                int64_t threads);
  KernelArgs begin(const KernelSignature &signature, const LaunchShape &launch) override;
  void end() override;
  int64_t threads() const { return blockThreads; }
  /// How many kernels so far run in thread-block clusters.
  int64_t clusteredKernels() const { return clustered; }
  /// Static workgroup memory of `count` elements.
  static mlir::MemRefType shared(mlir::MLIRContext *ctx, int64_t count, mlir::Type element);

private:
  /// Appends to `views` one memref.view per buffer of one
  /// gpu.dynamic_shared_memory base; returns the bytes they span.
  int64_t dynamicViews(const LaunchShape &launch, llvm::SmallVector<mlir::Value> &views);

  std::string prefix;
  int64_t blockThreads;
  int64_t clustered = 0;
  mlir::Block *parent;
  mlir::Block::iterator at;
};

/// Host kernels: func.func ops appended to one module body, called by the
/// host runtime (possibly on row or vocabulary ranges from several threads).
class CpuKernelSink : public KernelSink {
public:
  CpuKernelSink(mlir::OpBuilder &b, mlir::Location loc, LaunchPlan &plan,
                 llvm::StringRef moduleName);
  KernelArgs begin(const KernelSignature &signature, const LaunchShape &launch) override;
  void end() override;

private:
  std::string moduleName;
  mlir::Block *module;
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SUPPORT_KERNELSIGNATURE_H
