//===- Passes.td - lowering of the fused op to kernels -----*- tablegen -*-===//

#ifndef LOSSJIT_COMPILER_CONVERSION_PASSES
#define LOSSJIT_COMPILER_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def LossLowerToGPU : Pass<"loss-lower-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Lower each fused loss function to a gpu.module of kernels and a launch plan";
  let description = [{
    A `func.func` whose body is one fused op (`loss.linear_cross_entropy`,
    `_grad` or `_with_grad`; operands are the function's arguments) becomes
    one `gpu.module` per kernel of the schedule its `loss.lowering_config`
    (a `#loss.gpu_config`, from loss-select-lowering-config) names —
    forward: partial statistics over vocabulary splits, fixed-order
    combine, fixed-order reduction; chunked / recompute backward; fused
    forward+backward — plus a `loss.launch_plans` entry that tells the
    runtime the grid, block, workspaces and arguments of each launch. The
    function itself is replaced by the modules. The pass only reads the
    config: an op without one is an error.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::vector::VectorDialect", "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect"];
  let options = [
    Option<"chip", "chip", "std::string", "\"sm_80\"",
           "target GPU (sm_70 or newer); kernels are chosen for it and it is "
           "recorded in the launch plan">,
  ];
}

def LossLowerToCPU : Pass<"loss-lower-to-cpu", "::mlir::ModuleOp"> {
  let summary = "Lower each fused loss function to CPU kernels (loops + vectors) and a launch plan";
  let description = [{
    Like loss-lower-to-gpu for the host, from the op's `#loss.cpu_config`:
    the fused op becomes `func.func` kernels over row or vocabulary ranges
    (vectorized f32 dot products, online statistics, target logit) and a
    fixed-order reduction that sums in the same order as the GPU reduction
    kernel. The host splits ranges between threads; every result is
    independent of the split.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::vector::VectorDialect"];
}

def LossExpandHostLibcalls : Pass<"loss-expand-host-libcalls"> {
  let summary = "Expand f16/bf16 conversions and f32 exp2/log2 into integer and f32 arithmetic";
  let description = [{
    LLVM lowers these ops on the host to calls into the compiler runtime or
    libm whenever the target CPU lacks an instruction for them:
    `__truncsfbf2` (f32 → bf16 without AVX512_BF16; gcc 12's libgcc has
    none), `__truncsfhf2` / `__extendhfsf2` (f16 without F16C), `exp2f` /
    `log2f` (always, with results that differ between C libraries). This
    pass rewrites them — scalar or vector, element-wise — so the JIT's code
    is the same arithmetic on every host and calls nothing but `fma`, on a
    target without FMA units alone (f64 fma; f32 fma too, all of it without
    `expand-f32-fma` and the exp2/log2 polynomials' with it):

    - `arith.extf` bf16 → f32: shift into the high half (exact);
    - `arith.truncf` f32 → bf16: round to nearest even, NaN → 0x7FC0
      (torch's c10::BFloat16 rounding, bit for bit);
    - `arith.extf` f16 → f32: exact, subnormals included, NaN quieted;
    - `arith.truncf` f32 → f16: round to nearest even, overflow → ±inf,
      subnormal results, NaN → ±0x7E00 (c10::Half's rounding);
    - `math.exp2` (f32): 2^n·p(f), |f| ≤ 1/2, degree-6 polynomial, exact
      power-of-two scaling (subnormal results rounded once); ≤ 0.90 ulp;
    - `math.log2` (f32): e + r·g(r) on m = 1 + r ∈ [√½, √2), degree-9
      polynomial with log2(e) split in two; ≤ 1.003 ulp;
      log2(0) = −inf, log2(x < 0) = NaN, subnormal inputs handled;
    - `math.fma` (f32), with `expand-f32-fma` only (a target without FMA
      units, where LLVM calls `fmaf` per element): exactly rounded in f64
      arithmetic that SSE2 vectorizes. The product of two f32 is exact in
      f64; the sum is rounded to odd (two-sum error, then the f64 moved one
      step toward it when inexact and even), so the final rounding to f32
      rounds once: the bits of a fused multiply-add, inf and NaN included.
      Only the fmas already in the input are expanded (the products'):
      those of the exp2/log2 polynomials this pass writes stay `math.fma`
      (calls to the exact fmaf there), about 1 % of the work, and most of
      the code if expanded.
    (Errors measured over every f32 input: scripts/numerics/.)

    Example: `%b = arith.truncf %x : vector<8xf32> to vector<8xbf16>`
    becomes a bitcast to vector<8xi32>, the rounding bias add, a shift, a
    NaN select and a trunci to vector<8xi16> bitcast back to bf16.
    Ops of other types are left alone (the object-file check after codegen
    names any call that remains).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
  let options = [
    Option<"f16ExtendInHardware", "f16-extend-in-hardware", "bool", "false",
           "leave f16 → f32 arith.extf to LLVM: the target widens it with an exact "
           "instruction (x86 F16C), the same bits as the expansion, faster">,
    Option<"expandF32Fma", "expand-f32-fma", "bool", "false",
           "expand the input's f32 math.fma into exact f64 arithmetic: for a "
           "target without FMA units, where LLVM would call fmaf for every "
           "element (same bits, about 1.7x faster there)">,
  ];
}

def LossMathToNVVMApprox : Pass<"loss-math-to-nvvm-approx"> {
  let summary = "Lower f32 math.exp2/log2/fma to ex2.approx/lg2.approx/fma.rn intrinsics";
  let description = [{
    Without this, convert-gpu-to-nvvm turns math ops into `__nv_*` libdevice
    calls, which Debian's MLIR cannot link (and which resolve only when
    CUDA_HOME points at a libdevice). The kernels only use exp2/log2 on
    pre-scaled arguments, so the hardware approximations suffice (relative
    error ≤ 2^-22); fma becomes the exact `llvm.fma.f32`. f64 (the kernels
    of f64 storage) has no approx instructions: exp2/log2 expand into the
    arithmetic loss-expand-host-libcalls uses on the host, and fma becomes
    `llvm.fma.f64`.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def LossBF16MmaSyncToNVVM : Pass<"loss-bf16-mma-sync-to-nvvm"> {
  let summary = "Lower bf16 nvgpu.mma.sync to nvvm.mma.sync on packed i32 fragments";
  let description = [{
    MLIR 22's convert-nvgpu-to-nvvm cannot lower `nvgpu.mma.sync` on bf16
    operands ("failed to deduce operand PTX types"; fixed upstream after
    22). The kernels keep the one nvgpu op for f16 and bf16 (the SIMT
    interpreter models it from the PTX ISA's fragment tables); this pass,
    run before convert-nvgpu-to-nvvm, rewrites the bf16 ones into
    `nvvm.mma.sync` with each .bf16x2 fragment register bitcast to i32 and
    the f32 accumulators passed and returned element by element, in the
    register order of the nvgpu vectors. Other mma.sync ops are left to
    convert-nvgpu-to-nvvm.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
                           "::mlir::vector::VectorDialect"];
}

def LossTensorMapGridConstant : Pass<"loss-tensor-map-grid-constant"> {
  let summary = "Pass TMA tensor maps to kernels by value: 128-byte, 64-byte aligned grid constants";
  let description = [{
    A TMA copy names its tensor map (a 128-byte CUtensorMap) by address; the
    map should reach the kernel by value, as a `__grid_constant__` parameter
    in param space (`.param .align 64 .b8 p[128]`), which the copy then
    addresses directly. The gpu.func verifier rejects `nvvm.grid_constant`
    and the gpu→llvm lowering drops `llvm.byval`, so this pass runs after
    convert-gpu-to-nvvm: on every kernel whose `loss.tensor_maps` attribute
    says how many tensor maps it takes, the `!llvm.ptr` parameters with
    `llvm.align = 64` (how the kernel builders mark a tensor map; no other
    parameter is 64-byte aligned) get `llvm.byval = !llvm.array<128 x i8>`
    and `nvvm.grid_constant`. A count that does not match the marked
    parameters is an error naming both; kernels without the attribute are
    left alone.

    Example:
    `llvm.func @k(%map: !llvm.ptr {llvm.align = 64 : i64}, ...) attributes
    {loss.tensor_maps = 1 : i64, nvvm.kernel}` becomes
    `llvm.func @k(%map: !llvm.ptr {llvm.align = 64 : i64, llvm.byval =
    !llvm.array<128 x i8>, nvvm.grid_constant}, ...)`.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

def LossExternDynamicSharedMemory : Pass<"loss-extern-dynamic-shared-memory"> {
  let summary = "Give the dynamic shared-memory base external linkage (PTX .extern .shared)";
  let description = [{
    MLIR 22's convert-gpu-to-nvvm lowers `gpu.dynamic_shared_memory` to an
    *internal* zero-length global in address space 3. NVPTX then emits it
    as a one-byte static `.shared .b8 __dynamic_shmem__0;` that the static
    buffers are laid out next to, so every view past its first byte
    overlaps them or runs past the kernel's static shared memory, silently.
    The launch's dynamic shared memory only lies behind an `.extern .shared`
    array: this pass, run after convert-gpu-to-nvvm, gives every internal
    zero-length shared global external linkage and at least `alignment`
    bytes of alignment, or the `loss.dynamic_shared_align` of a function in
    its module where that is larger (TMA's swizzled stages need 1024).
    Globals with a size, or outside shared memory, are left alone.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "16",
           "least byte alignment of the dynamic shared-memory base (a power of two)">,
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

#endif // LOSSJIT_COMPILER_CONVERSION_PASSES
