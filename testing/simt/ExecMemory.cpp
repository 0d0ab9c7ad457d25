//===- ExecMemory.cpp - execution of memory ops ---------------------------===//
//
// A memref value is an index into the launch's descriptors (MemrefDesc):
// parameters and workgroup attributions first, then one block per
// (allocating or subviewing op, thread). Every access is bounds-checked and
// goes through the race detector (RaceDetector.cpp).
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

#include <memory>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

bool Executor::execMemory(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::Load:
  case Opc::Store:
  case Opc::TransferRead:
  case Opc::TransferWrite:
    return execAccess(in, act, n);
  case Opc::Alloca:
    return execAlloca(in, prog.allocas[in.aux], act, n);
  case Opc::Subview:
    return execSubview(in, act, n);
  case Opc::Dim:
    return execDim(in, act, n);
  case Opc::SharedAddress:
    return execSharedAddress(in, act, n);
  default:
    llvm_unreachable("not a memory op");
  }
}

bool Executor::locate(const Instr &in, const char *what, const MemrefDesc &d, const int64_t *idx,
                      uint32_t t, int64_t &linear) {
  linear = d.offset;
  bool inBounds = true;
  for (unsigned k = 0; k < d.rank; ++k) {
    inBounds = inBounds && idx[k] >= 0 && idx[k] < d.sizes[k];
    linear += idx[k] * d.strides[k];
  }
  if (inBounds && linear >= 0 && linear < d.buffer->size())
    return true;
  std::string indices, shape;
  for (unsigned k = 0; k < d.rank; ++k) {
    indices += (k ? ", " : "") + std::to_string(idx[k]);
    shape += (k ? ", " : "") + std::to_string(d.sizes[k]);
  }
  return fail(in, t,
              llvm::formatv("out-of-bounds {0} '{1}' ({2}): index [{3}] "
                            "outside shape [{4}] (buffer of {5} elements)",
                            what, d.buffer->getName(), getMemorySpaceName(d.buffer->getSpace()),
                            indices, shape, d.buffer->size())
                  .str());
}

bool Executor::execAccess(const Instr &in, const uint32_t *act, uint32_t n) {
  const MemAccess &a = prog.accesses[in.aux];
  bool isRead = in.opc == Opc::Load || in.opc == Opc::TransferRead;
  bool isTransfer = in.opc == Opc::TransferRead || in.opc == Opc::TransferWrite;
  const char *what = isRead ? "load from" : "store to";
  int64_t idx[kMaxRank];
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    const MemrefDesc &d = descOf(a.memref, t);
    readIndices(a, t, idx);
    int64_t base = a.rank ? idx[a.rank - 1] : 0;
    for (uint32_t l = 0; l < a.lanes; ++l) {
      if (a.rank)
        idx[a.rank - 1] = base + l;
      if (isTransfer) {
        bool masked = a.mask != kNoSlot && !slot(a.mask + l)[t];
        bool outside = a.rank && (base + int64_t(l) >= d.sizes[a.rank - 1]);
        if (masked || (outside && !a.inBounds)) {
          if (isRead)
            slot(a.value + l)[t] = slot(a.pad)[t];
          continue;
        }
      }
      int64_t linear;
      if (!locate(in, what, d, idx, t, linear))
        return false;
      SimtBuffer &buf = *d.buffer;
      if (isRead) {
        if (!checkRead(in, buf, linear, t))
          return false;
        slot(a.value + l)[t] = buf.loadWord(linear);
      } else {
        if (!checkWrite(in, buf, linear, t))
          return false;
        buf.storeWord(linear, slot(a.value + l)[t]);
      }
    }
  }
  return true;
}

bool Executor::execAlloca(const Instr &in, const AllocaInfo &info, const uint32_t *act,
                          uint32_t n) {
  uint64_t *r = slot(info.slot);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    uint32_t descIndex = numStaticDescs + info.producer * numThreads + t;
    MemrefDesc &d = descs[descIndex];
    int64_t count = 1;
    d.rank = info.rank;
    d.offset = 0;
    for (unsigned k = 0; k < info.rank; ++k) {
      const MixedInt &s = info.sizes[k];
      d.sizes[k] = s.slot == kNoSlot ? s.value : int64_t(slot(s.slot)[t]);
      if (d.sizes[k] < 0)
        return fail(in, t, "negative allocation size");
      count *= d.sizes[k];
    }
    for (int k = int(info.rank) - 1, stride = 1; k >= 0; --k) {
      d.strides[k] = stride;
      stride *= int(d.sizes[k]);
    }
    // Fresh memory on every execution: a new buffer when the size changes,
    // else the old one with every element uninitialized again.
    std::unique_ptr<SimtBuffer> &buf = privateBuffers[size_t(info.producer) * numThreads + t];
    if (!buf || buf->size() != count)
      buf = std::make_unique<SimtBuffer>(info.name, info.type, count, MemorySpace::Private);
    else
      buf->setAllInitialized(false);
    d.buffer = buf.get();
    r[t] = descIndex;
  }
  return true;
}

bool Executor::execSubview(const Instr &in, const uint32_t *act, uint32_t n) {
  const SubviewInfo &info = prog.subviews[in.aux];
  uint64_t *r = slot(in.res);
  auto value = [&](const MixedInt &m, uint32_t t) {
    return m.slot == kNoSlot ? m.value : int64_t(slot(m.slot)[t]);
  };
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    const MemrefDesc &src = descOf(info.source, t);
    uint32_t descIndex = numStaticDescs + info.producer * numThreads + t;
    MemrefDesc d;
    d.buffer = src.buffer;
    d.offset = src.offset;
    unsigned k = 0;
    for (unsigned dim = 0; dim < info.sourceRank; ++dim) {
      int64_t off = value(info.offsets[dim], t), size = value(info.sizes[dim], t),
              stride = value(info.strides[dim], t);
      if (off < 0 || size < 0 || (size > 0 && off + (size - 1) * stride >= src.sizes[dim]) ||
          (size > 0 && off + (size - 1) * stride < 0))
        return fail(in, t,
                    llvm::formatv("out-of-bounds subview of '{0}': dimension "
                                  "{1} offset {2} size {3} stride {4} exceeds "
                                  "size {5}",
                                  src.buffer->getName(), dim, off, size, stride, src.sizes[dim]));
      d.offset += off * src.strides[dim];
      if (info.dropped[dim])
        continue;
      d.sizes[k] = size;
      d.strides[k] = src.strides[dim] * stride;
      ++k;
    }
    d.rank = uint8_t(k);
    descs[descIndex] = d;
    r[t] = descIndex;
  }
  return true;
}

bool Executor::execDim(const Instr &in, const uint32_t *act, uint32_t n) {
  uint64_t *r = slot(in.res), *dims = slot(in.b);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    const MemrefDesc &d = descOf(in.a, t);
    if (dims[t] >= d.rank)
      return fail(in, t,
                  llvm::formatv("memref.dim index {0} out of range "
                                "for rank {1}",
                                dims[t], d.rank));
    r[t] = uint64_t(d.sizes[dims[t]]);
  }
  return true;
}

bool Executor::execSharedAddress(const Instr &in, const uint32_t *act, uint32_t n) {
  uint64_t *r = slot(in.res);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    const MemrefDesc &d = descOf(in.a, t);
    if (d.buffer->sharedAddress < 0)
      return fail(in, t,
                  "memref.extract_aligned_pointer_as_index of '" + d.buffer->getName() +
                      "', which is not a view of dynamic shared memory (only those have an "
                      "address in the model)");
    // The aligned pointer, as MLIR defines it: the buffer's start, not the
    // view's offset into it (a subview shares its source's pointer).
    r[t] = uint64_t(d.buffer->sharedAddress);
  }
  return true;
}
