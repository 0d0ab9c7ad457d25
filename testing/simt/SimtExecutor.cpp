//===- SimtExecutor.cpp - runs decoded kernels block by block -------------===//
//
// Lockstep execution: `exec` runs an instruction range for a sorted list of
// active threads; each instruction loops over that list. Control flow builds
// narrower lists in a bump arena (one level per region nesting), so a
// divergent branch costs a partition of the list, nothing per instruction.
//
// Race detection follows the barrier-interval model: an access is ordered
// after an earlier one when both come from the same thread, or from the same
// block with a gpu.barrier between them (different epoch). Each element keeps
// its last write and its last reads (AccessShadow); a new access that is not
// ordered after a conflicting one is a race.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/FormatVariadic.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {

/// Process-wide block serials: records left in a buffer by an earlier launch
/// have smaller serials than any block of the current launch.
std::atomic<uint64_t> nextBlockSerial{1};

struct MemrefDesc {
  SimtBuffer *buffer = nullptr;
  int64_t offset = 0;
  uint8_t rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

struct PendingCopy {
  SimtBuffer *buffer;
  int64_t begin, count;
  int64_t group; ///< -1 until a device_async_create_group commits it
};

inline float asF32(uint64_t w) { return std::bit_cast<float>(uint32_t(w)); }
inline uint64_t fromF32(float f) { return std::bit_cast<uint32_t>(f); }
inline double asF64(uint64_t w) { return std::bit_cast<double>(w); }
inline uint64_t fromF64(double d) { return std::bit_cast<uint64_t>(d); }

template <typename T> T maximumF(T x, T y) {
  if (std::isnan(x))
    return x;
  if (std::isnan(y))
    return y;
  if (x == y)
    return std::signbit(x) ? y : x; // +0 > -0
  return x > y ? x : y;
}
template <typename T> T minimumF(T x, T y) {
  if (std::isnan(x))
    return x;
  if (std::isnan(y))
    return y;
  if (x == y)
    return std::signbit(x) ? x : y;
  return x < y ? x : y;
}
template <typename T> T maxNumF(T x, T y) {
  if (std::isnan(x))
    return y;
  if (std::isnan(y))
    return x;
  return maximumF(x, y);
}
template <typename T> T minNumF(T x, T y) {
  if (std::isnan(x))
    return y;
  if (std::isnan(y))
    return x;
  return minimumF(x, y);
}

bool compareFloat(arith::CmpFPredicate pred, double x, double y) {
  bool unordered = std::isnan(x) || std::isnan(y);
  using P = arith::CmpFPredicate;
  switch (pred) {
  case P::AlwaysFalse:
    return false;
  case P::OEQ:
    return !unordered && x == y;
  case P::OGT:
    return !unordered && x > y;
  case P::OGE:
    return !unordered && x >= y;
  case P::OLT:
    return !unordered && x < y;
  case P::OLE:
    return !unordered && x <= y;
  case P::ONE:
    return !unordered && x != y;
  case P::ORD:
    return !unordered;
  case P::UEQ:
    return unordered || x == y;
  case P::UGT:
    return unordered || x > y;
  case P::UGE:
    return unordered || x >= y;
  case P::ULT:
    return unordered || x < y;
  case P::ULE:
    return unordered || x <= y;
  case P::UNE:
    return unordered || x != y;
  case P::UNO:
    return unordered;
  case P::AlwaysTrue:
    return true;
  }
  return false;
}

bool compareInt(arith::CmpIPredicate pred, uint64_t a, uint64_t b,
                unsigned width) {
  int64_t sa = signExtend(a, width), sb = signExtend(b, width);
  using P = arith::CmpIPredicate;
  switch (pred) {
  case P::eq:
    return a == b;
  case P::ne:
    return a != b;
  case P::slt:
    return sa < sb;
  case P::sle:
    return sa <= sb;
  case P::sgt:
    return sa > sb;
  case P::sge:
    return sa >= sb;
  case P::ult:
    return a < b;
  case P::ule:
    return a <= b;
  case P::ugt:
    return a > b;
  case P::uge:
    return a >= b;
  }
  return false;
}

/// The raw bits of a register word of type `type` (f16/bf16 re-encoded).
uint64_t toBits(ElementType type, uint64_t word) {
  switch (type) {
  case ElementType::F16:
    return doubleToHalfBits(asF32(word));
  case ElementType::BF16:
    return doubleToBFloat16Bits(asF32(word));
  default:
    return word;
  }
}
uint64_t fromBits(ElementType type, uint64_t bits) {
  switch (type) {
  case ElementType::F16:
    return fromF32(halfBitsToFloat(uint16_t(bits)));
  case ElementType::BF16:
    return fromF32(bfloat16BitsToFloat(uint16_t(bits)));
  case ElementType::F32:
    return bits & 0xffffffffu;
  default:
    return bits & widthMask(getBitWidth(type));
  }
}

class Executor {
public:
  Executor(const Program &prog, const SimtOptions &options,
           const std::array<int64_t, 3> &grid,
           const std::array<int64_t, 3> &block)
      : prog(prog), options(options), grid(grid), block(block),
        numThreads(uint32_t(block[0] * block[1] * block[2])) {}

  llvm::Error run(llvm::ArrayRef<SimtArg> args);

private:
  const Program &prog;
  const SimtOptions &options;
  std::array<int64_t, 3> grid, block;
  uint32_t numThreads;

  std::vector<uint64_t> regs;
  std::vector<MemrefDesc> descs;
  uint32_t numStaticDescs = 0;
  std::vector<std::unique_ptr<SimtBuffer>> sharedBuffers;
  std::vector<std::unique_ptr<SimtBuffer>> privateBuffers; // producer*T + t
  std::vector<uint32_t> arena;
  uint32_t arenaTop = 0;
  std::vector<uint64_t> temp;
  std::vector<uint8_t> activeFlags;
  std::vector<uint32_t> all; ///< 0 .. numThreads-1
  std::vector<uint32_t> threadIds[3];
  std::vector<std::vector<PendingCopy>> pending;
  std::vector<int64_t> committedGroups;

  std::array<int64_t, 3> blockId = {0, 0, 0};
  uint64_t launchFirstSerial = 0, blockSerial = 0;
  uint32_t epoch = 0;
  uint64_t steps = 0;
  std::string error;

  uint64_t *slot(uint32_t s) { return regs.data() + size_t(s) * numThreads; }

  uint32_t *arenaAlloc(uint32_t n) {
    assert(arenaTop + n <= arena.size() && "arena overflow");
    uint32_t *p = arena.data() + arenaTop;
    arenaTop += n;
    return p;
  }

  // --- errors -------------------------------------------------------------
  std::string threadText(uint32_t t) const {
    return llvm::formatv("({0},{1},{2})", threadIds[0][t], threadIds[1][t],
                         threadIds[2][t]);
  }
  std::string blockText() const {
    return llvm::formatv("({0},{1},{2})", blockId[0], blockId[1], blockId[2]);
  }
  std::string blockTextOfSerial(uint64_t serial) const {
    int64_t linear = int64_t(serial - launchFirstSerial);
    return llvm::formatv("({0},{1},{2})", linear % grid[0],
                         (linear / grid[0]) % grid[1],
                         linear / (grid[0] * grid[1]));
  }
  bool fail(const Instr &in, uint32_t t, const std::string &message) {
    error = message + ", thread " + threadText(t) + " block " + blockText() +
            ", at " + describeOp(in.op);
    return false;
  }
  bool failBlock(const Instr &in, const std::string &message) {
    error = message + ", block " + blockText() + ", at " + describeOp(in.op);
    return false;
  }

  // --- memory checks ------------------------------------------------------
  std::string elementText(const SimtBuffer &buf, int64_t i) const {
    return llvm::formatv("element {0} of '{1}' ({2})", i, buf.getName(),
                         getMemorySpaceName(buf.getSpace()));
  }
  bool tracksRaces(const SimtBuffer &buf) const { return buf.trackRaces; }

  bool checkRead(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t) {
    if (!buf.isInitialized(i))
      return fail(in, t, "read of uninitialized " + elementText(buf, i));
    if (!tracksRaces(buf))
      return true;
    AccessShadow &s = buf.shadow[size_t(i)];
    if (s.asyncPending)
      return fail(in, t,
                  "read of " + elementText(buf, i) +
                      " while an nvgpu.device_async_copy to it is in flight "
                      "(no nvgpu.device_async_wait covered its group)");
    if (s.writeBlock >= launchFirstSerial) {
      bool ordered = s.writeBlock == blockSerial &&
                     (s.writeThread == t || s.writeEpoch != epoch);
      if (!ordered)
        return fail(
            in, t,
            raceText("read", buf, i, "write", s.writeBlock, s.writeThread));
    }
    if (s.readBlock < launchFirstSerial) {
      s.readBlock = blockSerial;
      s.readEpoch = epoch;
      s.readThread = t;
      s.readInManyBlocks = false;
    } else if (s.readBlock != blockSerial) {
      s.readInManyBlocks = true;
      s.readBlock = blockSerial;
      s.readEpoch = epoch;
      s.readThread = t;
    } else if (s.readEpoch != epoch) {
      s.readEpoch = epoch;
      s.readThread = t;
    } else if (s.readThread != t) {
      s.readThread = AccessShadow::kManyThreads;
    }
    return true;
  }

  bool checkWrite(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t) {
    if (!tracksRaces(buf))
      return true;
    AccessShadow &s = buf.shadow[size_t(i)];
    if (s.asyncPending)
      return fail(in, t,
                  "write to " + elementText(buf, i) +
                      " while an nvgpu.device_async_copy to it is in flight");
    if (s.writeBlock >= launchFirstSerial) {
      bool ordered = s.writeBlock == blockSerial &&
                     (s.writeThread == t || s.writeEpoch != epoch);
      if (!ordered)
        return fail(
            in, t,
            raceText("write", buf, i, "write", s.writeBlock, s.writeThread));
    }
    if (s.readBlock >= launchFirstSerial) {
      if (s.readInManyBlocks || s.readBlock != blockSerial)
        return fail(in, t,
                    "data race: write of " + elementText(buf, i) +
                        " that a thread of another block read in the same "
                        "launch");
      if (s.readEpoch == epoch && s.readThread != t) {
        if (s.readThread == AccessShadow::kManyThreads)
          return fail(in, t,
                      "data race: write of " + elementText(buf, i) +
                          " that other threads of the block read with no "
                          "gpu.barrier in between");
        return fail(
            in, t,
            raceText("write", buf, i, "read", s.readBlock, s.readThread));
      }
    }
    s.writeBlock = blockSerial;
    s.writeEpoch = epoch;
    s.writeThread = t;
    s.readBlock = 0;
    s.readInManyBlocks = false;
    return true;
  }

  std::string raceText(const char *access, const SimtBuffer &buf, int64_t i,
                       const char *earlier, uint64_t otherBlock,
                       uint32_t otherThread) const {
    std::string where = otherBlock == blockSerial
                            ? std::string(" with no gpu.barrier in between")
                            : " of block " + blockTextOfSerial(otherBlock);
    return std::string("data race: ") + access + " of " + elementText(buf, i) +
           " after a " + earlier + " by thread " + threadText(otherThread) +
           where;
  }

  /// Linear element of `idx` in `d`, or an out-of-bounds error.
  bool locate(const Instr &in, const char *what, const MemrefDesc &d,
              const int64_t *idx, uint32_t t, int64_t &linear) {
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
                              what, d.buffer->getName(),
                              getMemorySpaceName(d.buffer->getSpace()), indices,
                              shape, d.buffer->size())
                    .str());
  }

  const MemrefDesc &descOf(uint32_t memrefSlot, uint32_t t) {
    return descs[slot(memrefSlot)[t]];
  }
  void readIndices(const MemAccess &a, uint32_t t, int64_t *idx) {
    for (unsigned k = 0; k < a.rank; ++k)
      idx[k] = int64_t(slot(prog.slots[a.indices + k])[t]);
  }

  // --- instruction groups -------------------------------------------------
  bool exec(uint32_t pc, uint32_t end, const uint32_t *act, uint32_t n);
  bool execIntBinary(const Instr &in, const uint32_t *act, uint32_t n);
  bool execFloat(const Instr &in, const uint32_t *act, uint32_t n);
  bool execCast(const Instr &in, const uint32_t *act, uint32_t n);
  bool execVector(const Instr &in, const uint32_t *act, uint32_t n);
  bool execMemory(const Instr &in, const uint32_t *act, uint32_t n);
  bool execAlloca(const Instr &in, const AllocaInfo &info, const uint32_t *act,
                  uint32_t n);
  bool execSubview(const Instr &in, const uint32_t *act, uint32_t n);
  bool execFor(const Instr &in, const uint32_t *act, uint32_t n);
  bool execWhile(const Instr &in, const uint32_t *act, uint32_t n);
  bool execIf(const Instr &in, const uint32_t *act, uint32_t n);
  bool execShuffle(const Instr &in, const uint32_t *act, uint32_t n);
  bool execMma(const Instr &in, const uint32_t *act, uint32_t n);
  bool execLdMatrix(const Instr &in, const uint32_t *act, uint32_t n);
  bool execAsync(const Instr &in, const uint32_t *act, uint32_t n);
  bool requireFullWarps(const Instr &in, const uint32_t *act, uint32_t n,
                        const char *what);
  void copies(uint32_t setIndex, const uint32_t *act, uint32_t n);
  bool runBlock(uint64_t serial);
};

void Executor::copies(uint32_t setIndex, const uint32_t *act, uint32_t n) {
  const CopySet &set = prog.copySets[setIndex];
  if (!set.viaTemp) {
    for (uint32_t c = 0; c < set.count; ++c) {
      const Copy &copy = prog.copies[set.begin + c];
      for (uint32_t l = 0; l < copy.lanes; ++l) {
        uint64_t *dst = slot(copy.dst + l), *src = slot(copy.src + l);
        for (uint32_t i = 0; i < n; ++i)
          dst[act[i]] = src[act[i]];
      }
    }
    return;
  }
  size_t staged = 0;
  for (uint32_t c = 0; c < set.count; ++c) {
    const Copy &copy = prog.copies[set.begin + c];
    for (uint32_t l = 0; l < copy.lanes; ++l, ++staged) {
      uint64_t *src = slot(copy.src + l);
      uint64_t *tmp = temp.data() + staged * numThreads;
      for (uint32_t i = 0; i < n; ++i)
        tmp[act[i]] = src[act[i]];
    }
  }
  staged = 0;
  for (uint32_t c = 0; c < set.count; ++c) {
    const Copy &copy = prog.copies[set.begin + c];
    for (uint32_t l = 0; l < copy.lanes; ++l, ++staged) {
      uint64_t *dst = slot(copy.dst + l);
      uint64_t *tmp = temp.data() + staged * numThreads;
      for (uint32_t i = 0; i < n; ++i)
        dst[act[i]] = tmp[act[i]];
    }
  }
}

bool Executor::execIntBinary(const Instr &in, const uint32_t *act, uint32_t n) {
  unsigned w = in.width;
  uint64_t mask = widthMask(w);
  int64_t minSigned =
      w >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (w - 1));
  for (uint32_t l = 0; l < in.lanes; ++l) {
    uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
    uint64_t *pb = in.b == kNoSlot ? nullptr : slot(in.b + l);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      uint64_t a = pa[t], b = pb ? pb[t] : 0;
      int64_t sa = signExtend(a, w), sb = signExtend(b, w);
      uint64_t v = 0;
      switch (in.opc) {
      case Opc::AddI:
        v = a + b;
        break;
      case Opc::SubI:
        v = a - b;
        break;
      case Opc::MulI:
        v = a * b;
        break;
      case Opc::AndI:
        v = a & b;
        break;
      case Opc::OrI:
        v = a | b;
        break;
      case Opc::XOrI:
        v = a ^ b;
        break;
      case Opc::MinSI:
        v = sa < sb ? a : b;
        break;
      case Opc::MaxSI:
        v = sa > sb ? a : b;
        break;
      case Opc::MinUI:
        v = a < b ? a : b;
        break;
      case Opc::MaxUI:
        v = a > b ? a : b;
        break;
      case Opc::AbsI:
        v = uint64_t(sa < 0 ? -sa : sa);
        break;
      case Opc::ShLI:
      case Opc::ShRSI:
      case Opc::ShRUI:
        if (b >= w)
          return fail(in, t,
                      llvm::formatv("shift amount {0} is not below the "
                                    "bit width {1}",
                                    b, w));
        v = in.opc == Opc::ShLI    ? a << b
            : in.opc == Opc::ShRUI ? a >> b
                                   : uint64_t(sa >> b);
        break;
      case Opc::DivUI:
      case Opc::RemUI:
      case Opc::CeilDivUI:
        if (b == 0)
          return fail(in, t, "integer division by zero");
        v = in.opc == Opc::DivUI   ? a / b
            : in.opc == Opc::RemUI ? a % b
                                   : a / b + (a % b != 0);
        break;
      case Opc::DivSI:
      case Opc::RemSI:
      case Opc::CeilDivSI:
      case Opc::FloorDivSI: {
        if (b == 0)
          return fail(in, t, "integer division by zero");
        if (sa == minSigned && sb == -1)
          return fail(in, t, "signed integer division overflow");
        int64_t q = sa / sb, rem = sa % sb;
        if (in.opc == Opc::RemSI)
          v = uint64_t(rem);
        else if (in.opc == Opc::DivSI)
          v = uint64_t(q);
        else if (in.opc == Opc::CeilDivSI)
          v = uint64_t(q + (rem != 0 && ((sa < 0) == (sb < 0))));
        else
          v = uint64_t(q - (rem != 0 && ((sa < 0) != (sb < 0))));
        break;
      }
      default:
        llvm_unreachable("not an integer op");
      }
      r[t] = v & mask;
    }
  }
  return true;
}

bool Executor::execFloat(const Instr &in, const uint32_t *act, uint32_t n) {
  ElementType ty = in.ty;
  // Operations whose f32 result is exact in IEEE single arithmetic are done
  // in the operand type; f16/bf16 results are rounded from the f32 result,
  // which for + - * / and sqrt equals direct rounding (f32 has more than
  // 2p+2 significand bits). Everything else is evaluated in f64 and rounded
  // once to the result type.
  auto binary = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l),
               *pb = slot(in.b + l);
      switch (ty) {
      case ElementType::F32:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = fromF32(f(asF32(pa[t]), asF32(pb[t])));
        }
        break;
      case ElementType::F64:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = fromF64(f(asF64(pa[t]), asF64(pb[t])));
        }
        break;
      default:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = makeFloatWord(ty, f(asF32(pa[t]), asF32(pb[t])));
        }
      }
    }
  };
  auto unaryF64 = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = makeFloatWord(ty, f(floatWordValue(ty, pa[t])));
      }
    }
  };
  auto binaryF64 = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l),
               *pb = slot(in.b + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = makeFloatWord(
            ty, f(floatWordValue(ty, pa[t]), floatWordValue(ty, pb[t])));
      }
    }
  };
  switch (in.opc) {
  case Opc::AddF:
    binary([](auto x, auto y) { return x + y; });
    break;
  case Opc::SubF:
    binary([](auto x, auto y) { return x - y; });
    break;
  case Opc::MulF:
    binary([](auto x, auto y) { return x * y; });
    break;
  case Opc::DivF:
    binary([](auto x, auto y) { return x / y; });
    break;
  case Opc::MaximumF:
    binary([](auto x, auto y) { return maximumF(x, y); });
    break;
  case Opc::MinimumF:
    binary([](auto x, auto y) { return minimumF(x, y); });
    break;
  case Opc::MaxNumF:
    binary([](auto x, auto y) { return maxNumF(x, y); });
    break;
  case Opc::MinNumF:
    binary([](auto x, auto y) { return minNumF(x, y); });
    break;
  case Opc::RemF:
    binaryF64([](double x, double y) { return std::fmod(x, y); });
    break;
  case Opc::PowF:
    binaryF64([](double x, double y) { return std::pow(x, y); });
    break;
  case Opc::CopySign:
    binaryF64([](double x, double y) { return std::copysign(x, y); });
    break;
  case Opc::NegF:
    unaryF64([](double x) { return -x; });
    break;
  case Opc::AbsF:
    unaryF64([](double x) { return std::fabs(x); });
    break;
  case Opc::Sqrt:
    unaryF64([](double x) { return std::sqrt(x); });
    break;
  case Opc::Rsqrt:
    unaryF64([](double x) { return 1.0 / std::sqrt(x); });
    break;
  case Opc::Exp:
    unaryF64([](double x) { return std::exp(x); });
    break;
  case Opc::Exp2:
    unaryF64([](double x) { return std::exp2(x); });
    break;
  case Opc::ExpM1:
    unaryF64([](double x) { return std::expm1(x); });
    break;
  case Opc::Log:
    unaryF64([](double x) { return std::log(x); });
    break;
  case Opc::Log2:
    unaryF64([](double x) { return std::log2(x); });
    break;
  case Opc::Log1p:
    unaryF64([](double x) { return std::log1p(x); });
    break;
  case Opc::Tanh:
    unaryF64([](double x) { return std::tanh(x); });
    break;
  case Opc::Sin:
    unaryF64([](double x) { return std::sin(x); });
    break;
  case Opc::Cos:
    unaryF64([](double x) { return std::cos(x); });
    break;
  case Opc::Erf:
    unaryF64([](double x) { return std::erf(x); });
    break;
  case Opc::Floor:
    unaryF64([](double x) { return std::floor(x); });
    break;
  case Opc::Ceil:
    unaryF64([](double x) { return std::ceil(x); });
    break;
  case Opc::Round:
    unaryF64([](double x) { return std::round(x); });
    break;
  case Opc::RoundEven:
    unaryF64([](double x) { return std::nearbyint(x); });
    break;
  case Opc::Trunc:
    unaryF64([](double x) { return std::trunc(x); });
    break;
  case Opc::Fma:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l),
               *pb = slot(in.b + l), *pc = slot(in.c + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        if (ty == ElementType::F32)
          r[t] = fromF32(std::fma(asF32(pa[t]), asF32(pb[t]), asF32(pc[t])));
        else
          r[t] = makeFloatWord(ty, std::fma(floatWordValue(ty, pa[t]),
                                            floatWordValue(ty, pb[t]),
                                            floatWordValue(ty, pc[t])));
      }
    }
    break;
  case Opc::CmpF: {
    auto pred = arith::CmpFPredicate(in.mode);
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l),
               *pb = slot(in.b + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = compareFloat(pred, floatWordValue(ty, pa[t]),
                            floatWordValue(ty, pb[t]));
      }
    }
    break;
  }
  default:
    llvm_unreachable("not a float op");
  }
  return true;
}

bool Executor::execCast(const Instr &in, const uint32_t *act, uint32_t n) {
  unsigned srcWidth = getBitWidth(in.ty), dstWidth = getBitWidth(in.rty);
  uint64_t dstMask = widthMask(dstWidth);
  for (uint32_t l = 0; l < in.lanes; ++l) {
    uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      uint64_t a = pa[t];
      switch (in.opc) {
      case Opc::IntCastS:
        r[t] = uint64_t(signExtend(a, srcWidth)) & dstMask;
        break;
      case Opc::IntCastU:
        r[t] = a & dstMask;
        break;
      case Opc::SIToFP: {
        int64_t v = signExtend(a, srcWidth);
        // int64 → f32 directly: one rounding (via f64 would be two).
        r[t] = in.rty == ElementType::F32 ? fromF32(float(v))
                                          : makeFloatWord(in.rty, double(v));
        break;
      }
      case Opc::UIToFP:
        r[t] = in.rty == ElementType::F32 ? fromF32(float(a))
                                          : makeFloatWord(in.rty, double(a));
        break;
      case Opc::FPToSI:
      case Opc::FPToUI: {
        double x = std::trunc(floatWordValue(in.ty, a));
        bool isSigned = in.opc == Opc::FPToSI;
        double lo = isSigned ? -std::ldexp(1.0, int(dstWidth) - 1) : 0.0;
        double hi = std::ldexp(1.0, int(dstWidth) - (isSigned ? 1 : 0));
        if (!(x >= lo && x < hi))
          return fail(in, t,
                      llvm::formatv("{0} of {1} is out of range for i{2}",
                                    isSigned ? "fptosi" : "fptoui",
                                    floatWordValue(in.ty, a), dstWidth));
        r[t] = (isSigned ? uint64_t(int64_t(x)) : uint64_t(x)) & dstMask;
        break;
      }
      case Opc::FloatCast:
        r[t] = makeFloatWord(in.rty, floatWordValue(in.ty, a));
        break;
      case Opc::Bitcast:
        r[t] = fromBits(in.rty, toBits(in.ty, a));
        break;
      default:
        llvm_unreachable("not a cast");
      }
    }
  }
  return true;
}

bool Executor::execVector(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::Select: {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pc = slot(in.a + (in.mode ? 0 : l)),
               *pt = slot(in.b + l), *pf = slot(in.c + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = pc[t] ? pt[t] : pf[t];
      }
    }
    return true;
  }
  case Opc::CmpI: {
    auto pred = arith::CmpIPredicate(in.mode);
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l),
               *pb = slot(in.b + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = compareInt(pred, pa[t], pb[t], in.width);
      }
    }
    return true;
  }
  case Opc::LaneMap:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + prog.slots[in.aux + l]);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = pa[act[i]];
    }
    return true;
  case Opc::FromElements:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(prog.slots[in.aux + l]);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = pa[act[i]];
    }
    return true;
  case Opc::CreateMask:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = int64_t(l) < int64_t(pa[act[i]]);
    }
    return true;
  case Opc::Extract:
  case Opc::Insert: {
    const PositionInfo &pos = prog.positions[in.aux];
    bool isInsert = in.opc == Opc::Insert;
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      int64_t offset = 0;
      for (unsigned d = 0; d < pos.count; ++d) {
        const MixedInt &p = pos.positions[d];
        int64_t v = p.slot == kNoSlot ? p.value : int64_t(slot(p.slot)[t]);
        if (v < 0 || v >= pos.dims[d])
          return fail(in, t,
                      llvm::formatv("position {0} out of range for "
                                    "dimension {1} of size {2}",
                                    v, d, pos.dims[d]));
        offset += v * pos.strides[d];
      }
      if (isInsert) {
        for (uint32_t l = 0; l < in.lanes; ++l)
          slot(in.res + l)[t] = slot(in.b + l)[t];
        for (uint32_t l = 0; l < pos.chunk; ++l)
          slot(in.res + uint32_t(offset) + l)[t] = slot(in.a + l)[t];
      } else {
        for (uint32_t l = 0; l < pos.chunk; ++l)
          slot(in.res + l)[t] = slot(in.a + uint32_t(offset) + l)[t];
      }
    }
    return true;
  }
  case Opc::Reduction: {
    auto kind = vector::CombiningKind(in.mode);
    ElementType ty = in.ty;
    unsigned w = in.width;
    uint64_t mask = widthMask(w);
    auto combine = [&](uint64_t x, uint64_t y) -> uint64_t {
      using K = vector::CombiningKind;
      if (isFloatType(ty)) {
        double a = floatWordValue(ty, x), b = floatWordValue(ty, y), v = 0;
        switch (kind) {
        case K::ADD:
          v = a + b;
          break;
        case K::MUL:
          v = a * b;
          break;
        case K::MINNUMF:
          v = minNumF(a, b);
          break;
        case K::MAXNUMF:
          v = maxNumF(a, b);
          break;
        case K::MINIMUMF:
          v = minimumF(a, b);
          break;
        case K::MAXIMUMF:
          v = maximumF(a, b);
          break;
        default:
          v = std::nan("");
        }
        // a + b in f64 then rounded: exact-then-round for f32 and narrower.
        return makeFloatWord(ty, v);
      }
      int64_t sx = signExtend(x, w), sy = signExtend(y, w);
      switch (kind) {
      case K::ADD:
        return (x + y) & mask;
      case K::MUL:
        return (x * y) & mask;
      case K::MINUI:
        return x < y ? x : y;
      case K::MAXUI:
        return x > y ? x : y;
      case K::MINSI:
        return sx < sy ? x : y;
      case K::MAXSI:
        return sx > sy ? x : y;
      case K::AND:
        return x & y;
      case K::OR:
        return x | y;
      case K::XOR:
        return x ^ y;
      default:
        return 0;
      }
    };
    uint64_t *r = slot(in.res);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      // Sequential order, as LLVM's ordered vector reductions.
      uint64_t acc;
      uint32_t l = 0;
      if (in.b != kNoSlot) {
        acc = slot(in.b)[t];
      } else {
        acc = slot(in.a)[t];
        l = 1;
      }
      for (; l < in.lanes; ++l)
        acc = combine(acc, slot(in.a + l)[t]);
      r[t] = acc;
    }
    return true;
  }
  default:
    llvm_unreachable("not a vector op");
  }
}

bool Executor::execMemory(const Instr &in, const uint32_t *act, uint32_t n) {
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

bool Executor::execAlloca(const Instr &in, const AllocaInfo &info,
                          const uint32_t *act, uint32_t n) {
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
    std::unique_ptr<SimtBuffer> &buf =
        privateBuffers[size_t(info.producer) * numThreads + t];
    if (!buf || buf->size() != count)
      buf = std::make_unique<SimtBuffer>(info.name, info.type, count,
                                         MemorySpace::Private);
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
      int64_t off = value(info.offsets[dim], t),
              size = value(info.sizes[dim], t),
              stride = value(info.strides[dim], t);
      if (off < 0 || size < 0 ||
          (size > 0 && off + (size - 1) * stride >= src.sizes[dim]) ||
          (size > 0 && off + (size - 1) * stride < 0))
        return fail(in, t,
                    llvm::formatv("out-of-bounds subview of '{0}': dimension "
                                  "{1} offset {2} size {3} stride {4} exceeds "
                                  "size {5}",
                                  src.buffer->getName(), dim, off, size, stride,
                                  src.sizes[dim]));
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

bool Executor::execIf(const Instr &in, const uint32_t *act, uint32_t n) {
  const IfInfo &info = prog.ifs[in.aux];
  uint64_t *cond = slot(info.cond);
  uint32_t mark = arenaTop;
  uint32_t *lists = arenaAlloc(n);
  uint32_t numThen = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (cond[act[i]])
      lists[numThen++] = act[i];
  uint32_t numElse = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (!cond[act[i]])
      lists[numThen + numElse++] = act[i];
  bool ok = true;
  if (numThen)
    ok = exec(info.thenRegion.begin, info.thenRegion.end, lists, numThen);
  if (ok && numElse)
    ok = exec(info.elseRegion.begin, info.elseRegion.end, lists + numThen,
              numElse);
  arenaTop = mark;
  return ok;
}

bool Executor::execFor(const Instr &in, const uint32_t *act, uint32_t n) {
  const ForInfo &f = prog.fors[in.aux];
  unsigned w = getBitWidth(f.ivType);
  uint64_t mask = widthMask(w);
  copies(f.init, act, n);
  uint64_t *iv = slot(f.iv), *lb = slot(f.lb), *ub = slot(f.ub),
           *step = slot(f.step);
  auto less = [&](uint64_t x, uint64_t y) {
    return f.unsignedCmp ? x < y : signExtend(x, w) < signExtend(y, w);
  };
  uint32_t mark = arenaTop;
  uint32_t *run = arenaAlloc(n);
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    if (signExtend(step[t], w) <= 0 && !(f.unsignedCmp && step[t] != 0)) {
      arenaTop = mark;
      return fail(in, t,
                  llvm::formatv("scf.for step {0} is not positive",
                                signExtend(step[t], w)));
    }
    iv[t] = lb[t];
    if (less(lb[t], ub[t]))
      run[m++] = t;
  }
  while (m) {
    if (!exec(f.body.begin, f.body.end, run, m)) {
      arenaTop = mark;
      return false;
    }
    uint32_t k = 0;
    for (uint32_t j = 0; j < m; ++j) {
      uint32_t t = run[j];
      // Continue iff iv + step < ub, computed without overflow: ub > iv, so
      // ub - iv is exact as an unsigned w-bit number.
      uint64_t remaining = (ub[t] - iv[t]) & mask;
      if ((step[t] & mask) < remaining) {
        iv[t] = (iv[t] + step[t]) & mask;
        run[k++] = t;
      }
    }
    m = k;
  }
  arenaTop = mark;
  return true;
}

bool Executor::execWhile(const Instr &in, const uint32_t *act, uint32_t n) {
  const WhileInfo &w = prog.whiles[in.aux];
  copies(w.init, act, n);
  uint32_t mark = arenaTop;
  uint32_t *run = arenaAlloc(n);
  uint32_t *exiting = arenaAlloc(n);
  std::copy(act, act + n, run);
  uint32_t m = n;
  bool ok = true;
  while (ok && m) {
    if (!(ok = exec(w.before.begin, w.before.end, run, m)))
      break;
    uint64_t *cond = slot(w.cond);
    uint32_t k = 0, e = 0;
    for (uint32_t j = 0; j < m; ++j) {
      uint32_t t = run[j];
      if (cond[t])
        run[k++] = t;
      else
        exiting[e++] = t;
    }
    copies(w.toResult, exiting, e);
    copies(w.toAfter, run, k);
    m = k;
    if (m)
      ok = exec(w.after.begin, w.after.end, run, m);
  }
  arenaTop = mark;
  return ok;
}

bool Executor::requireFullWarps(const Instr &in, const uint32_t *act,
                                uint32_t n, const char *what) {
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
                                what, count, warp,
                                (warp + 1) * 32 > numThreads
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
      return fail(in, t,
                  llvm::formatv("gpu.shuffle width {0} is not in [1, 32]",
                                int32_t(width)));
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
                                    d.buffer->getName(),
                                    getMemorySpaceName(d.buffer->getSpace()),
                                    idx[a.rank - 1], idx[a.rank - 1] + 7,
                                    d.sizes[a.rank - 1]));
        if (linear % 8 != 0)
          return fail(in, t,
                      llvm::formatv("nvgpu.ldmatrix row address (element {0} "
                                    "of '{1}') is not 16-byte aligned",
                                    linear, d.buffer->getName()));
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
          if (tracksRaces(*copy.buffer))
            for (int64_t e = 0; e < copy.count; ++e) {
              AccessShadow &s = copy.buffer->shadow[size_t(copy.begin + e)];
              s.asyncPending = false;
              // The data lands now: order later accesses against this point.
              s.writeBlock = blockSerial;
              s.writeEpoch = epoch;
              s.writeThread = t;
            }
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
    int64_t srcCount = info.srcElements == kNoSlot
                           ? info.dstElements
                           : int64_t(slot(info.srcElements)[t]);
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
        return fail(in, t,
                    "nvgpu.device_async_copy destination is not contiguous");
    }
    if (dstLinear * elemSize % uint64_t(bytes) != 0)
      return fail(in, t,
                  "nvgpu.device_async_copy destination is not aligned "
                  "to the copy size");
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
      if (tracksRaces(*dst.buffer))
        dst.buffer->shadow[size_t(dstLinear + e)].asyncPending = true;
    }
    pending[t].push_back({dst.buffer, dstLinear, info.dstElements, -1});
  }
  return true;
}

bool Executor::exec(uint32_t pc, uint32_t end, const uint32_t *act,
                    uint32_t n) {
  while (pc < end) {
    const Instr &in = prog.instrs[pc];
    if (++steps > options.maxSteps)
      return failBlock(in, llvm::formatv("instruction limit of {0} exceeded "
                                         "(infinite loop?)",
                                         options.maxSteps));
    bool ok = true;
    switch (in.opc) {
    case Opc::ThreadId:
    case Opc::BlockId:
    case Opc::BlockDim:
    case Opc::GridDim:
    case Opc::GlobalId:
    case Opc::LaneId:
    case Opc::SubgroupId:
    case Opc::NumSubgroups: {
      uint64_t *r = slot(in.res);
      unsigned d = in.mode;
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        uint64_t v = 0;
        switch (in.opc) {
        case Opc::ThreadId:
          v = threadIds[d][t];
          break;
        case Opc::BlockId:
          v = uint64_t(blockId[d]);
          break;
        case Opc::BlockDim:
          v = uint64_t(block[d]);
          break;
        case Opc::GridDim:
          v = uint64_t(grid[d]);
          break;
        case Opc::GlobalId:
          v = uint64_t(blockId[d] * block[d]) + threadIds[d][t];
          break;
        case Opc::LaneId:
          v = t % 32;
          break;
        case Opc::SubgroupId:
          v = t / 32;
          break;
        default:
          v = (numThreads + 31) / 32;
          break;
        }
        r[t] = v;
      }
      break;
    }
    case Opc::AddI:
    case Opc::SubI:
    case Opc::MulI:
    case Opc::DivSI:
    case Opc::DivUI:
    case Opc::RemSI:
    case Opc::RemUI:
    case Opc::CeilDivSI:
    case Opc::CeilDivUI:
    case Opc::FloorDivSI:
    case Opc::AndI:
    case Opc::OrI:
    case Opc::XOrI:
    case Opc::ShLI:
    case Opc::ShRSI:
    case Opc::ShRUI:
    case Opc::MinSI:
    case Opc::MaxSI:
    case Opc::MinUI:
    case Opc::MaxUI:
    case Opc::AbsI:
      ok = execIntBinary(in, act, n);
      break;
    case Opc::AddF:
    case Opc::SubF:
    case Opc::MulF:
    case Opc::DivF:
    case Opc::RemF:
    case Opc::MaximumF:
    case Opc::MinimumF:
    case Opc::MaxNumF:
    case Opc::MinNumF:
    case Opc::PowF:
    case Opc::CopySign:
    case Opc::CmpF:
    case Opc::NegF:
    case Opc::AbsF:
    case Opc::Sqrt:
    case Opc::Rsqrt:
    case Opc::Exp:
    case Opc::Exp2:
    case Opc::ExpM1:
    case Opc::Log:
    case Opc::Log2:
    case Opc::Log1p:
    case Opc::Tanh:
    case Opc::Sin:
    case Opc::Cos:
    case Opc::Erf:
    case Opc::Floor:
    case Opc::Ceil:
    case Opc::Round:
    case Opc::RoundEven:
    case Opc::Trunc:
    case Opc::Fma:
      ok = execFloat(in, act, n);
      break;
    case Opc::IntCastS:
    case Opc::IntCastU:
    case Opc::SIToFP:
    case Opc::UIToFP:
    case Opc::FPToSI:
    case Opc::FPToUI:
    case Opc::FloatCast:
    case Opc::Bitcast:
      ok = execCast(in, act, n);
      break;
    case Opc::Select:
    case Opc::CmpI:
    case Opc::LaneMap:
    case Opc::Extract:
    case Opc::Insert:
    case Opc::FromElements:
    case Opc::Reduction:
    case Opc::CreateMask:
      ok = execVector(in, act, n);
      break;
    case Opc::Load:
    case Opc::Store:
    case Opc::TransferRead:
    case Opc::TransferWrite:
      ok = execMemory(in, act, n);
      break;
    case Opc::Alloca:
      ok = execAlloca(in, prog.allocas[in.aux], act, n);
      break;
    case Opc::Subview:
      ok = execSubview(in, act, n);
      break;
    case Opc::Dim: {
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
      break;
    }
    case Opc::If:
      ok = execIf(in, act, n);
      break;
    case Opc::For:
      ok = execFor(in, act, n);
      break;
    case Opc::While:
      ok = execWhile(in, act, n);
      break;
    case Opc::Yield:
      copies(in.aux, act, n);
      break;
    case Opc::Barrier:
      if (n != numThreads)
        return fail(in, act[0],
                    llvm::formatv("gpu.barrier reached by {0} of the {1} "
                                  "threads of the block (barrier in divergent "
                                  "control flow)",
                                  n, numThreads));
      ++epoch;
      break;
    case Opc::Condition:
    case Opc::Nop:
      break;
    case Opc::Shuffle:
      ok = execShuffle(in, act, n);
      break;
    case Opc::MmaSync:
      ok = execMma(in, act, n);
      break;
    case Opc::LdMatrix:
      ok = execLdMatrix(in, act, n);
      break;
    case Opc::AsyncCopy:
    case Opc::AsyncCreateGroup:
    case Opc::AsyncWait:
      ok = execAsync(in, act, n);
      break;
    }
    if (!ok)
      return false;
    pc = in.next;
  }
  return true;
}

bool Executor::runBlock(uint64_t serial) {
  blockSerial = serial;
  epoch = 0;
  steps = 0;
  for (auto &buf : sharedBuffers) {
    buf->setAllInitialized(false);
    if (options.detectRaces)
      std::fill(buf->shadow.begin(), buf->shadow.end(), AccessShadow());
  }
  for (auto &list : pending)
    list.clear();
  std::fill(committedGroups.begin(), committedGroups.end(), 0);
  for (uint32_t index : prog.privateAttributions) {
    Instr instr;
    instr.op = prog.func;
    if (!execAlloca(instr, prog.allocas[index], all.data(), numThreads))
      return false;
  }
  return exec(0, uint32_t(prog.instrs.size()), all.data(), numThreads);
}

llvm::Error Executor::run(llvm::ArrayRef<SimtArg> args) {
  auto err = [&](const llvm::Twine &message) {
    return llvm::createStringError("kernel '" + prog.name + "': " + message);
  };
  if (args.size() != prog.args.size())
    return err(llvm::formatv("takes {0} arguments, got {1}", prog.args.size(),
                             args.size()));
  if (auto known = cast<gpu::GPUFuncOp>(prog.func).getKnownBlockSize())
    for (unsigned d = 0; d < 3; ++d)
      if ((*known)[d] != block[d])
        return err(llvm::formatv("launched with block ({0},{1},{2}) but "
                                 "known_block_size is ({3},{4},{5})",
                                 block[0], block[1], block[2], (*known)[0],
                                 (*known)[1], (*known)[2]));
  if (auto known = cast<gpu::GPUFuncOp>(prog.func).getKnownGridSize())
    for (unsigned d = 0; d < 3; ++d)
      if ((*known)[d] != grid[d])
        return err("launched with a grid different from known_grid_size");

  regs.assign(size_t(prog.numSlots) * numThreads, 0);
  for (auto [s, word] : prog.constants)
    std::fill_n(slot(s), numThreads, word);
  all.resize(numThreads);
  for (uint32_t t = 0; t < numThreads; ++t)
    all[t] = t;
  for (unsigned d = 0; d < 3; ++d)
    threadIds[d].resize(numThreads);
  for (uint32_t t = 0; t < numThreads; ++t) {
    threadIds[0][t] = uint32_t(t % block[0]);
    threadIds[1][t] = uint32_t((t / block[0]) % block[1]);
    threadIds[2][t] = uint32_t(t / (block[0] * block[1]));
  }

  // Static descriptors: memref parameters, then workgroup attributions.
  numStaticDescs = uint32_t(prog.memrefParams.size() + prog.workgroup.size());
  descs.assign(numStaticDescs + size_t(prog.numProducers) * numThreads, {});
  privateBuffers.clear();
  privateBuffers.resize(size_t(prog.numProducers) * numThreads);
  auto makeDesc = [](MemrefDesc &d, SimtBuffer *buffer, unsigned rank,
                     const int64_t *shape) {
    d.buffer = buffer;
    d.rank = uint8_t(rank);
    int64_t stride = 1;
    for (int k = int(rank) - 1; k >= 0; --k) {
      d.sizes[k] = shape[k];
      d.strides[k] = stride;
      stride *= shape[k];
    }
    return stride; // elements spanned
  };
  for (size_t i = 0; i < args.size(); ++i) {
    auto [isMemref, index] = prog.args[i];
    const SimtArg &arg = args[i];
    if (isMemref) {
      const MemrefParam &param = prog.memrefParams[index];
      if (!arg.buf)
        return err(llvm::formatv("argument {0} is a memref but no buffer was "
                                 "given",
                                 i));
      // index lowers to i64: the two share a storage format.
      auto storage = [](ElementType t) {
        return t == ElementType::Index ? ElementType::I64 : t;
      };
      if (storage(arg.buf->getType()) != storage(param.type))
        return err(llvm::formatv("argument {0}: buffer '{1}' holds {2} but the "
                                 "kernel expects {3}",
                                 i, arg.buf->getName(),
                                 getElementTypeName(arg.buf->getType()),
                                 getElementTypeName(param.type)));
      int64_t shape[kMaxRank];
      for (unsigned k = 0; k < param.rank; ++k) {
        if (!arg.shape.empty()) {
          if (arg.shape.size() != param.rank ||
              (param.shape[k] != ShapedType::kDynamic &&
               param.shape[k] != arg.shape[k]))
            return err(llvm::formatv("argument {0}: shape does not match the "
                                     "memref type",
                                     i));
          shape[k] = arg.shape[k];
        } else if (param.shape[k] != ShapedType::kDynamic) {
          shape[k] = param.shape[k];
        } else if (param.rank == 1) {
          shape[k] = arg.buf->size();
        } else {
          return err(llvm::formatv("argument {0}: dynamic rank-{1} memref "
                                   "needs an explicit shape",
                                   i, param.rank));
        }
      }
      int64_t span = makeDesc(descs[index], arg.buf, param.rank, shape);
      if (span > arg.buf->size())
        return err(llvm::formatv("argument {0}: shape spans {1} elements but "
                                 "buffer '{2}' has {3}",
                                 i, span, arg.buf->getName(), arg.buf->size()));
      std::fill_n(slot(param.slot), numThreads, uint64_t(index));
    } else {
      const ScalarParam &param = prog.scalarParams[index];
      if (arg.buf)
        return err(llvm::formatv("argument {0} is a scalar but a buffer was "
                                 "given",
                                 i));
      uint64_t word;
      if (isFloatType(param.type))
        word = makeFloatWord(param.type,
                             arg.isReal ? arg.realValue : double(arg.intValue));
      else if (arg.isReal)
        return err(llvm::formatv("argument {0} is an integer but a float was "
                                 "given",
                                 i));
      else
        word = uint64_t(arg.intValue) & widthMask(getBitWidth(param.type));
      std::fill_n(slot(param.slot), numThreads, word);
    }
  }
  // Race records only for buffers some parameter may write through.
  for (size_t i = 0; i < args.size(); ++i)
    if (prog.args[i].first)
      args[i].buf->trackRaces = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto [isMemref, index] = prog.args[i];
    if (!isMemref || !options.detectRaces || !prog.memrefParamWritten[index])
      continue;
    SimtBuffer &buf = *args[i].buf;
    buf.trackRaces = true;
    if (buf.shadow.size() != size_t(buf.size()))
      buf.shadow.assign(size_t(buf.size()), AccessShadow());
  }
  sharedBuffers.clear();
  for (size_t i = 0; i < prog.workgroup.size(); ++i) {
    const MemrefParam &param = prog.workgroup[i];
    int64_t count = 1;
    for (unsigned k = 0; k < param.rank; ++k)
      count *= param.shape[k];
    sharedBuffers.push_back(std::make_unique<SimtBuffer>(
        "workgroup attribution #" + std::to_string(i), param.type, count,
        MemorySpace::Shared));
    if (options.detectRaces) {
      sharedBuffers.back()->shadow.assign(size_t(count), AccessShadow());
      sharedBuffers.back()->trackRaces = true;
    }
    uint32_t descIndex = uint32_t(prog.memrefParams.size() + i);
    makeDesc(descs[descIndex], sharedBuffers.back().get(), param.rank,
             param.shape);
    std::fill_n(slot(param.slot), numThreads, uint64_t(descIndex));
  }

  arena.assign(size_t(prog.maxDepth + 2) * 2 * numThreads, 0);
  arenaTop = 0;
  temp.assign(size_t(prog.maxCopyLanes) * numThreads, 0);
  pending.assign(numThreads, {});
  committedGroups.assign(numThreads, 0);

  // Serials of this launch's blocks must be consecutive for block
  // coordinates in messages; reserve them all at once.
  launchFirstSerial =
      nextBlockSerial.fetch_add(uint64_t(grid[0] * grid[1] * grid[2]));
  uint64_t serial = launchFirstSerial;
  for (blockId[2] = 0; blockId[2] < grid[2]; ++blockId[2])
    for (blockId[1] = 0; blockId[1] < grid[1]; ++blockId[1])
      for (blockId[0] = 0; blockId[0] < grid[0]; ++blockId[0]) {
        if (!runBlock(serial++))
          return llvm::createStringError(error);
      }
  return llvm::Error::success();
}

} // namespace

llvm::Error lossjit::simt::detail::executeProgram(
    const Program &program, const std::array<int64_t, 3> &grid,
    const std::array<int64_t, 3> &block, llvm::ArrayRef<SimtArg> args,
    const SimtOptions &options) {
  for (unsigned d = 0; d < 3; ++d) {
    if (grid[d] < 0)
      return llvm::createStringError(llvm::formatv(
          "kernel '{0}': negative grid dimension {1}", program.name, grid[d]));
    if (block[d] < 1)
      return llvm::createStringError(
          llvm::formatv("kernel '{0}': block dimension {1} is not positive",
                        program.name, block[d]));
  }
  if (block[0] * block[1] * block[2] > 1024)
    return llvm::createStringError(
        llvm::formatv("kernel '{0}': {1} threads per block exceed 1024",
                      program.name, block[0] * block[1] * block[2]));
  if (grid[0] * grid[1] * grid[2] == 0)
    return llvm::Error::success();
  Executor executor(program, options, grid, block);
  return executor.run(args);
}
