//===- ExecWarp.cpp - execution of warp-level ops -------------------------===//
//
// A warp is 32 consecutive linear thread ids of a block. gpu.shuffle needs
// the first `width` lanes active; nvgpu.mma.sync and nvgpu.ldmatrix need the
// whole warp. Fragment layouts are the PTX ISA's (WarpMatrix.h). Async copies
// copy at issue; their destination stays in flight (for the race detector)
// until a device_async_wait of the issuing thread covers the copy's group.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

bool Executor::execWarp(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::Shuffle:
    return execShuffle(in, act, n);
  case Opc::MmaSync:
    return execMma(in, act, n);
  case Opc::LdMatrix:
    return execLdMatrix(in, act, n);
  case Opc::AsyncCopy:
  case Opc::AsyncCreateGroup:
  case Opc::AsyncWait:
    return execAsync(in, act, n);
  case Opc::Wgmma:
    return execWgmma(in, act, n);
  case Opc::WgmmaFence:
  case Opc::WgmmaCommit:
  case Opc::WgmmaWait:
  case Opc::ProxyFence:
    return execWgmmaSync(in, act, n);
  case Opc::SetMaxRegister:
    return execSetMaxRegister(in, act, n);
  case Opc::NamedBarrier:
    return execNamedBarrier(in, act, n);
  case Opc::MbarrierInit:
  case Opc::MbarrierArrive:
  case Opc::MbarrierWait:
  case Opc::TmaLoad:
    return execAsyncTransfer(in, act, n);
  default:
    llvm_unreachable("not a warp-level op");
  }
}

bool Executor::requireFullWarps(const Instr &in, const uint32_t *act, uint32_t n,
                                const char *what) {
  for (uint32_t i = 0; i < n;) {
    uint32_t warp = act[i] / 32, count = 0;
    uint32_t first = act[i];
    while (i < n && act[i] / 32 == warp) {
      ++count;
      ++i;
    }
    if (count != 32)
      return fail(in, first,
                  llvm::formatv("{0} executed by {1} of the 32 lanes of warp "
                                "{2} (it needs the whole warp converged{3})",
                                what, count, (first % ctaStride) / 32,
                                (first % ctaStride) / 32 * 32 + 32 > ctaThreads
                                    ? "; the block size is not a multiple of 32"
                                    : ""));
  }
  return true;
}

bool Executor::execShuffle(const Instr &in, const uint32_t *act, uint32_t n) {
  uint64_t *offsets = slot(in.b), *widths = slot(in.c), *valid = slot(in.res2);
  auto mode = gpu::ShuffleMode(in.mode);
  std::vector<uint8_t> &active = activeFlags;
  active.assign(numThreads, 0);
  for (uint32_t i = 0; i < n; ++i)
    active[act[i]] = 1;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i], lane = t % 32, warpBase = t - lane;
    uint64_t width = widths[t];
    if (width == 0 || width > 32)
      return fail(in, t, llvm::formatv("gpu.shuffle width {0} is not in [1, 32]", int32_t(width)));
    for (uint32_t l = 0; l < width; ++l) {
      uint32_t other = warpBase + l;
      if (other >= numThreads || !active[other])
        return fail(in, t,
                    llvm::formatv("gpu.shuffle with width {0} needs lanes "
                                  "0..{1} of the warp active, lane {2} is not",
                                  width, width - 1, l));
      if (widths[other] != width)
        return fail(in, t, "gpu.shuffle width differs between lanes of a warp");
    }
    int64_t source = -1;
    if (lane < width) {
      uint32_t offset = uint32_t(offsets[t]);
      switch (mode) {
      case gpu::ShuffleMode::XOR:
        source = int64_t(lane ^ offset);
        break;
      case gpu::ShuffleMode::DOWN:
        source = int64_t(lane) + offset;
        break;
      case gpu::ShuffleMode::UP:
        source = int64_t(lane) - offset;
        break;
      case gpu::ShuffleMode::IDX:
        source = offset;
        break;
      }
      if (source < 0 || source >= int64_t(width))
        source = -1;
    }
    valid[t] = source >= 0;
    // An invalid lane's result is unspecified; like the hardware, return
    // the lane's own value.
    uint32_t from = source >= 0 ? warpBase + uint32_t(source) : t;
    for (uint32_t l = 0; l < in.lanes; ++l)
      slot(in.res + l)[t] = slot(in.a + l)[from];
  }
  return true;
}

bool Executor::execMma(const Instr &in, const uint32_t *act, uint32_t n) {
  if (!requireFullWarps(in, act, n, "nvgpu.mma.sync"))
    return false;
  const MmaInfo &info = prog.mmas[in.aux];
  const MmaConfig &cfg = info.config;
  int sizeA = *cfg.fragmentSizeA(), sizeB = *cfg.fragmentSizeB();
  double A[16][16], B[16][8], C[16][8];
  auto input = [&](uint64_t word) {
    if (cfg.input == MmaInputType::TF32) // the hardware ignores the low 13 bits
      return double(std::bit_cast<float>(uint32_t(word) & 0xffffe000u));
    return double(asF32(word));
  };
  for (uint32_t w = 0; w < n; w += 32) {
    uint32_t base = act[w];
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t t = base + uint32_t(lane);
      for (int i = 0; i < sizeA; ++i) {
        auto [row, col] = mmaElementA(cfg, lane, i);
        A[row][col] = input(slot(in.a + uint32_t(i))[t]);
      }
      for (int i = 0; i < sizeB; ++i) {
        auto [row, col] = mmaElementB(cfg, lane, i);
        B[row][col] = input(slot(in.b + uint32_t(i))[t]);
      }
      for (int i = 0; i < 4; ++i) {
        auto [row, col] = mmaElementC(cfg, lane, i);
        C[row][col] = floatWordValue(in.rty, slot(in.c + uint32_t(i))[t]);
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t t = base + uint32_t(lane);
      for (int i = 0; i < 4; ++i) {
        auto [row, col] = mmaElementC(cfg, lane, i);
        // Products of f16/bf16/tf32 values are exact in f64; the sum is
        // rounded once to the accumulator type.
        double sum = C[row][col];
        for (int k = 0; k < cfg.k; ++k)
          sum += A[row][k] * B[k][col];
        slot(in.res + uint32_t(i))[t] = makeFloatWord(in.rty, sum);
      }
    }
  }
  return true;
}

bool Executor::execLdMatrix(const Instr &in, const uint32_t *act, uint32_t n) {
  if (!requireFullWarps(in, act, n, "nvgpu.ldmatrix"))
    return false;
  const LdMatrixInfo &info = prog.ldmatrices[in.aux];
  const MemAccess &a = info.access;
  uint64_t rows[4][8][8];
  int64_t idx[kMaxRank];
  for (uint32_t w = 0; w < n; w += 32) {
    uint32_t base = act[w];
    for (int tile = 0; tile < info.numTiles; ++tile) {
      for (int row = 0; row < 8; ++row) {
        uint32_t t = base + uint32_t(8 * tile + row); // the addressing lane
        const MemrefDesc &d = descOf(a.memref, t);
        readIndices(a, t, idx);
        int64_t linear;
        if (!locate(in, "ldmatrix row load from", d, idx, t, linear))
          return false;
        if (d.strides[a.rank - 1] != 1)
          return fail(in, t,
                      "nvgpu.ldmatrix from a memref whose innermost "
                      "stride is not 1");
        if (idx[a.rank - 1] + 7 >= d.sizes[a.rank - 1])
          return fail(in, t,
                      llvm::formatv("out-of-bounds ldmatrix row load from "
                                    "'{0}' ({1}): elements {2}..{3} of the "
                                    "innermost dimension of size {4}",
                                    d.buffer->getName(), getMemorySpaceName(d.buffer->getSpace()),
                                    idx[a.rank - 1], idx[a.rank - 1] + 7, d.sizes[a.rank - 1]));
        if (linear % 8 != 0)
          return fail(in, t,
                      llvm::formatv("nvgpu.ldmatrix row address (element {0} "
                                    "of '{1}') is not 16-byte aligned",
                                    linear, d.buffer->getName()));
        if (d.buffer->alignment() % 16 != 0)
          return fail(in, t,
                      llvm::formatv("nvgpu.ldmatrix reads '{0}', whose start is only {1}-byte "
                                    "aligned (give the attribution llvm.align = 16)",
                                    d.buffer->getName(), d.buffer->alignment()));
        for (int c = 0; c < 8; ++c) {
          if (!checkRead(in, *d.buffer, linear + c, t))
            return false;
          rows[tile][row][c] = d.buffer->loadWord(linear + c);
        }
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t t = base + uint32_t(lane);
      for (int tile = 0; tile < info.numTiles; ++tile)
        for (int j = 0; j < 2; ++j) {
          auto [row, col] = ldmatrixElement(info.transpose, lane, j);
          slot(in.res + uint32_t(2 * tile + j))[t] = rows[tile][row][col];
        }
    }
  }
  return true;
}

bool Executor::execAsync(const Instr &in, const uint32_t *act, uint32_t n) {
  if (in.opc == Opc::AsyncCreateGroup) {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      bool any = false;
      for (PendingCopy &p : pending[t])
        if (p.group < 0) {
          p.group = committedGroups[t];
          any = true;
        }
      (void)any;
      ++committedGroups[t]; // an empty group is still a group (PTX)
    }
    return true;
  }
  if (in.opc == Opc::AsyncWait) {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      int64_t limit = committedGroups[t] - in.imm; // groups below complete
      auto &list = pending[t];
      for (size_t p = 0; p < list.size();) {
        PendingCopy &copy = list[p];
        if (copy.group >= 0 && copy.group < limit) {
          landAsyncCopy(copy, t);
          list[p] = list.back();
          list.pop_back();
        } else {
          ++p;
        }
      }
    }
    return true;
  }
  // AsyncCopy.
  const AsyncCopyInfo &info = prog.asyncCopies[in.aux];
  int64_t dstIdx[kMaxRank], srcIdx[kMaxRank];
  unsigned elemSize = getElementSize(in.ty);
  int64_t bytes = info.dstElements * elemSize;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    if (bytes != 4 && bytes != 8 && bytes != 16)
      return fail(in, t,
                  llvm::formatv("nvgpu.device_async_copy of {0} bytes "
                                "(cp.async copies 4, 8 or 16)",
                                bytes));
    const MemrefDesc &dst = descOf(info.dst.memref, t);
    const MemrefDesc &src = descOf(info.src.memref, t);
    readIndices(info.dst, t, dstIdx);
    readIndices(info.src, t, srcIdx);
    int64_t srcCount =
        info.srcElements == kNoSlot ? info.dstElements : int64_t(slot(info.srcElements)[t]);
    if (srcCount < 0 || srcCount > info.dstElements)
      return fail(in, t,
                  llvm::formatv("nvgpu.device_async_copy srcElements {0} "
                                "not in [0, {1}]",
                                srcCount, info.dstElements));
    int64_t dstLinear = 0, srcLinear = 0;
    int64_t dstBase = dstIdx[info.dst.rank - 1];
    int64_t srcBase = info.src.rank ? srcIdx[info.src.rank - 1] : 0;
    for (int64_t e = 0; e < info.dstElements; ++e) {
      dstIdx[info.dst.rank - 1] = dstBase + e;
      int64_t linear;
      if (!locate(in, "async copy to", dst, dstIdx, t, linear))
        return false;
      if (e == 0)
        dstLinear = linear;
      else if (linear != dstLinear + e)
        return fail(in, t, "nvgpu.device_async_copy destination is not contiguous");
    }
    if (dstLinear * elemSize % uint64_t(bytes) != 0)
      return fail(in, t,
                  "nvgpu.device_async_copy destination is not aligned "
                  "to the copy size");
    if (dst.buffer->alignment() % bytes != 0)
      return fail(in, t,
                  llvm::formatv("nvgpu.device_async_copy of {0} bytes into '{1}', whose start is "
                                "only {2}-byte aligned (give the attribution llvm.align = {0})",
                                bytes, dst.buffer->getName(), dst.buffer->alignment()));
    for (int64_t e = 0; e < srcCount; ++e) {
      if (info.src.rank)
        srcIdx[info.src.rank - 1] = srcBase + e;
      int64_t linear;
      if (!locate(in, "async copy from", src, srcIdx, t, linear))
        return false;
      if (e == 0)
        srcLinear = linear;
      else if (linear != srcLinear + e)
        return fail(in, t, "nvgpu.device_async_copy source is not contiguous");
    }
    for (int64_t e = 0; e < info.dstElements; ++e) {
      uint64_t value = 0;
      if (e < srcCount) {
        if (!checkRead(in, *src.buffer, srcLinear + e, t))
          return false;
        value = src.buffer->loadWord(srcLinear + e);
      }
      if (!checkWrite(in, *dst.buffer, dstLinear + e, t))
        return false;
      dst.buffer->storeWord(dstLinear + e, value);
      markAsyncPending(*dst.buffer, dstLinear + e);
    }
    pending[t].push_back({dst.buffer, dstLinear, info.dstElements, -1});
  }
  return true;
}
