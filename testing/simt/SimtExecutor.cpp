//===- SimtExecutor.cpp - runs decoded kernels block by block -------------===//
//
// Lockstep execution: `exec` runs an instruction range for a sorted list of
// active threads; each instruction loops over that list. Control flow builds
// narrower lists in a bump arena (one level per region nesting), so a
// divergent branch costs a partition of the list, nothing per instruction.
//
// This file sets a launch up (arguments, descriptors, shared memory), runs
// its blocks, and hands each instruction to its family's routine
// (Exec<Family>.cpp) through a switch generated from SimtOps.def. Race
// detection is in RaceDetector.cpp.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/Support/FormatVariadic.h"

#include <atomic>
#include <memory>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {

/// Process-wide block serials: records left in a buffer by an earlier launch
/// have smaller serials than any block of the current launch.
std::atomic<uint64_t> nextBlockSerial{1};

} // namespace

bool Executor::exec(uint32_t pc, uint32_t end, const uint32_t *act, uint32_t n) {
  while (pc < end) {
    const Instr &in = prog.instrs[pc];
    if (++steps > options.maxSteps)
      return failBlock(in, llvm::formatv("instruction limit of {0} exceeded "
                                         "(infinite loop?)",
                                         options.maxSteps));
    bool ok = true;
    switch (in.opc) {
#define SIMT_OP(NAME, MLIR_NAME, FAMILY)                                                           \
  case Opc::NAME:                                                                                  \
    ok = exec##FAMILY(in, act, n);                                                                 \
    break;
#include "testing/simt/SimtOps.def"
    }
    if (!ok)
      return false;
    pc = in.next;
  }
  return true;
}

bool Executor::runCluster() {
  resetTasks();
  resetClocks();
  std::fill(ctaEpochs.begin(), ctaEpochs.end(), 0);
  steps = 0;
  for (auto &buf : sharedBuffers) {
    buf->setAllInitialized(false);
    if (options.detectRaces)
      std::fill(buf->shadow.begin(), buf->shadow.end(), AccessShadow());
  }
  for (auto &list : pending)
    list.clear();
  std::fill(committedGroups.begin(), committedGroups.end(), 0);
  std::fill(proxyFences.begin(), proxyFences.end(), 0);
  std::fill(wgmmaUncommitted.begin(), wgmmaUncommitted.end(), 0);
  std::fill(wgmmaGroups.begin(), wgmmaGroups.end(), 0);
  wgmmaCommitted.assign((numThreads + 127) / 128, 0);
  wgmmaRetired.assign((numThreads + 127) / 128, 0);
  mbarriers.assign(numCtas, {});
  mbarrierInitPhase.assign(numCtas, {});
  for (uint32_t c = 0; c < numCtas; ++c)
    for (size_t g = 0; g < prog.mbarrierGroups.size(); ++g) {
      mbarriers[c].push_back(std::vector<MbarrierModel>(prog.mbarrierGroups[g]));
      mbarrierInitPhase[c].push_back(std::vector<uint64_t>(prog.mbarrierGroups[g], 0));
    }
  pendingTma.clear();
  warpgroupRegisters.assign((numThreads + 127) / 128, prog.launchRegisters);
  freeRegisters.assign(numCtas, 0);
  namedBarriers.assign(numCtas, {});
  setRegistersUnsynced.assign((numThreads + 127) / 128, 0);
  clusterBarrier = ClusterBarrierModel();
  clusterBarrier.arrivedOn.assign(numThreads, ~uint64_t(0));
  lastPeerAccessPhase = ~uint64_t(0);
  unpublishedInits.assign(numThreads, {});
  for (uint32_t index : prog.privateAttributions) {
    Instr instr;
    instr.op = prog.func;
    if (!execAlloca(instr, prog.allocas[index], all.data(), uint32_t(all.size())))
      return false;
  }
  if (!exec(0, uint32_t(prog.instrs.size()), all.data(), uint32_t(all.size())))
    return false;
  Instr end;
  end.op = prog.func;
  return checkAsyncDrained(end) && checkNamedBarriersDrained(end) && checkClusterDrained(end);
}

llvm::Error Executor::run(llvm::ArrayRef<SimtArg> args) {
  auto err = [&](const llvm::Twine &message) {
    return llvm::createStringError("kernel '" + prog.name + "': " + message);
  };
  if (args.size() != prog.args.size())
    return err(llvm::formatv("takes {0} arguments, got {1}", prog.args.size(), args.size()));
  if (auto known = cast<gpu::GPUFuncOp>(prog.func).getKnownBlockSize())
    for (unsigned d = 0; d < 3; ++d)
      if ((*known)[d] != block[d])
        return err(llvm::formatv("launched with block ({0},{1},{2}) but "
                                 "known_block_size is ({3},{4},{5})",
                                 block[0], block[1], block[2], (*known)[0], (*known)[1],
                                 (*known)[2]));
  if (auto known = cast<gpu::GPUFuncOp>(prog.func).getKnownGridSize())
    for (unsigned d = 0; d < 3; ++d)
      if ((*known)[d] != grid[d])
        return err("launched with a grid different from known_grid_size");
  if (prog.knownClusterSize && *prog.knownClusterSize != cluster)
    return err(llvm::formatv("launched with clusters of ({0},{1},{2}) blocks but "
                             "known_cluster_size is ({3},{4},{5})",
                             cluster[0], cluster[1], cluster[2], (*prog.knownClusterSize)[0],
                             (*prog.knownClusterSize)[1], (*prog.knownClusterSize)[2]));

  regs.assign(size_t(prog.numSlots) * numThreads, 0);
  for (auto [s, word] : prog.constants)
    std::fill_n(slot(s), numThreads, word);
  all.clear();
  for (uint32_t t = 0; t < numThreads; ++t)
    if (t % ctaStride < ctaThreads)
      all.push_back(t);
  for (unsigned d = 0; d < 3; ++d)
    threadIds[d].assign(numThreads, 0);
  for (uint32_t t : all) {
    const uint32_t local = t % ctaStride;
    threadIds[0][t] = uint32_t(local % block[0]);
    threadIds[1][t] = uint32_t((local / block[0]) % block[1]);
    threadIds[2][t] = uint32_t(local / (block[0] * block[1]));
  }

  // Static descriptors: memref parameters, then workgroup attributions.
  numStaticDescs = uint32_t(prog.memrefParams.size() + numCtas * prog.workgroup.size());
  descs.assign(numStaticDescs + size_t(prog.numProducers) * numThreads, {});
  privateBuffers.clear();
  privateBuffers.resize(size_t(prog.numProducers) * numThreads);
  auto makeDesc = [](MemrefDesc &d, SimtBuffer *buffer, unsigned rank, const int64_t *shape) {
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
  tensorMaps.clear();
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
      auto storage = [](ElementType t) { return t == ElementType::Index ? ElementType::I64 : t; };
      if (storage(arg.buf->getType()) != storage(param.type))
        return err(llvm::formatv("argument {0}: buffer '{1}' holds {2} but the "
                                 "kernel expects {3}",
                                 i, arg.buf->getName(), getElementTypeName(arg.buf->getType()),
                                 getElementTypeName(param.type)));
      int64_t shape[kMaxRank];
      for (unsigned k = 0; k < param.rank; ++k) {
        if (!arg.shape.empty()) {
          if (arg.shape.size() != param.rank ||
              (param.shape[k] != ShapedType::kDynamic && param.shape[k] != arg.shape[k]))
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
      if (arg.buf && !param.tensorMap)
        return err(llvm::formatv("argument {0} is a scalar but a buffer was "
                                 "given",
                                 i));
      uint64_t word;
      if (param.tensorMap && arg.unencoded) {
        word = tensorMaps.size();
        tensorMaps.push_back({nullptr, nullptr});
      } else if (param.tensorMap) {
        if (!arg.map || !arg.buf)
          return err(llvm::formatv("argument {0} is a tensor map (!llvm.ptr): bind it with "
                                   "SimtArg::tensorMap",
                                   i));
        const TensorMapDesc &map = *arg.map;
        const int64_t bytes = int64_t((getBitWidth(map.type) + 7) / 8);
        int64_t at = map.globalOffset * bytes, align = arg.buf->alignment();
        if (at % align)
          align = at & -at;
        if (std::string why = map.validate(align); !why.empty())
          return err(llvm::formatv("argument {0}: {1}", i, why));
        if (map.type != arg.buf->getType())
          return err(llvm::formatv("argument {0}: the tensor map describes {1} but buffer '{2}' "
                                   "holds {3}",
                                   i, getElementTypeName(map.type), arg.buf->getName(),
                                   getElementTypeName(arg.buf->getType())));
        int64_t last = map.globalOffset + int64_t(map.globalDim[0]) - 1;
        for (int d = 1; d < map.rank; ++d)
          last += (int64_t(map.globalDim[d]) - 1) * int64_t(map.globalStrides[d - 1]) / bytes;
        if (last >= arg.buf->size())
          return err(llvm::formatv("argument {0}: the tensor map reaches element {1} of buffer "
                                   "'{2}', which has {3}",
                                   i, last, arg.buf->getName(), arg.buf->size()));
        word = tensorMaps.size();
        tensorMaps.push_back({&map, arg.buf});
      } else if (isFloatType(param.type))
        word = makeFloatWord(param.type, arg.isReal ? arg.realValue : double(arg.intValue));
      else if (arg.isReal)
        return err(llvm::formatv("argument {0} is an integer but a float was "
                                 "given",
                                 i));
      else
        word = uint64_t(arg.intValue) & widthMask(getBitWidth(param.type));
      std::fill_n(slot(param.slot), numThreads, word);
    }
  }
  setUpRaceRecords(args);
  sharedBuffers.clear();
  for (uint32_t c = 0; c < numCtas; ++c)
    for (size_t i = 0; i < prog.workgroup.size(); ++i) {
      const MemrefParam &param = prog.workgroup[i];
      int64_t count = 1;
      for (unsigned k = 0; k < param.rank; ++k)
        count *= param.shape[k];
      std::string name = "workgroup attribution #" + std::to_string(i);
      if (param.dynamicOffset >= 0) {
        int64_t end = param.dynamicOffset + count * int64_t((getBitWidth(param.type) + 7) / 8);
        name = llvm::formatv("dynamic shared memory [{0}, {1})", param.dynamicOffset, end).str();
        if (end > options.dynamicSharedBytes)
          return err(llvm::formatv("kernel '{0}' views {1} but the launch gives {2} bytes of "
                                   "dynamic shared memory",
                                   prog.name, name, options.dynamicSharedBytes));
      }
      if (numCtas > 1)
        name += " of block rank " + std::to_string(c);
      sharedBuffers.push_back(
          std::make_unique<SimtBuffer>(name, param.type, count, MemorySpace::Shared));
      sharedBuffers.back()->setAlignment(param.align ? param.align
                                                     : int64_t(getBitWidth(param.type) + 7) / 8);
      if (options.detectRaces) {
        sharedBuffers.back()->shadow.assign(size_t(count), AccessShadow());
        sharedBuffers.back()->trackRaces = true;
      }
      if (param.dynamicOffset >= 0)
        sharedBuffers.back()->sharedAddress =
            dynamicSharedWindowBase(prog.dynamicSharedAlign) + param.dynamicOffset;
      uint32_t descIndex = uint32_t(prog.memrefParams.size() + c * prog.workgroup.size() + i);
      makeDesc(descs[descIndex], sharedBuffers.back().get(), param.rank, param.shape);
      std::fill_n(slot(param.slot) + size_t(c) * ctaStride, ctaStride, uint64_t(descIndex));
    }

  temp.assign(size_t(prog.maxCopyLanes) * numThreads, 0);
  pending.assign(numThreads, {});
  committedGroups.assign(numThreads, 0);
  proxyFences.assign(numThreads, 0);
  wgmmaUncommitted.assign(numThreads, 0);
  wgmmaGroups.assign(numThreads, 0);

  // Serials of this launch's blocks must be consecutive for block
  // coordinates in messages; reserve them all at once. A block's serial is
  // launchFirstSerial plus its linear index in the grid.
  launchFirstSerial = nextBlockSerial.fetch_add(uint64_t(grid[0] * grid[1] * grid[2]));
  ctaBlockIds.assign(numCtas, {});
  ctaSerials.assign(numCtas, 0);
  ctaEpochs.assign(numCtas, 0);
  std::array<int64_t, 3> at;
  for (at[2] = 0; at[2] < grid[2]; at[2] += cluster[2])
    for (at[1] = 0; at[1] < grid[1]; at[1] += cluster[1])
      for (at[0] = 0; at[0] < grid[0]; at[0] += cluster[0]) {
        for (uint32_t c = 0; c < numCtas; ++c) {
          std::array<int64_t, 3> &id = ctaBlockIds[c];
          id = {at[0] + c % cluster[0], at[1] + (c / cluster[0]) % cluster[1],
                at[2] + c / (cluster[0] * cluster[1])};
          ctaSerials[c] = launchFirstSerial + uint64_t(id[0] + grid[0] * (id[1] + grid[1] * id[2]));
        }
        if (!runCluster())
          return llvm::createStringError(error);
      }
  return llvm::Error::success();
}

llvm::Error lossjit::simt::detail::executeProgram(const Program &program,
                                                  const std::array<int64_t, 3> &grid,
                                                  const std::array<int64_t, 3> &block,
                                                  llvm::ArrayRef<SimtArg> args,
                                                  const SimtOptions &options) {
  for (unsigned d = 0; d < 3; ++d) {
    if (grid[d] < 0)
      return llvm::createStringError(
          llvm::formatv("kernel '{0}': negative grid dimension {1}", program.name, grid[d]));
    if (block[d] < 1)
      return llvm::createStringError(llvm::formatv(
          "kernel '{0}': block dimension {1} is not positive", program.name, block[d]));
  }
  if (block[0] * block[1] * block[2] > 1024)
    return llvm::createStringError(llvm::formatv("kernel '{0}': {1} threads per block exceed 1024",
                                                 program.name, block[0] * block[1] * block[2]));
  // A kernel with a known_cluster_size runs in clusters of it however it
  // is launched (its PTX has .reqnctapercluster): unless the launch says
  // otherwise (and then it must agree), take that shape.
  SimtOptions effective = options;
  if (program.knownClusterSize && effective.cluster == std::array<int64_t, 3>{1, 1, 1})
    effective.cluster = *program.knownClusterSize;
  const std::array<int64_t, 3> &cluster = effective.cluster;
  for (unsigned d = 0; d < 3; ++d)
    if (cluster[d] < 1 || (grid[d] > 0 && grid[d] % cluster[d]))
      return llvm::createStringError(
          llvm::formatv("kernel '{0}': cluster dimension {1} is {2}, which must be positive and "
                        "divide the grid's ({3})",
                        program.name, d, cluster[d], grid[d]));
  if (cluster[0] * cluster[1] * cluster[2] > 8)
    return llvm::createStringError(
        llvm::formatv("kernel '{0}': clusters of {1} blocks exceed the portable 8", program.name,
                      cluster[0] * cluster[1] * cluster[2]));
  if (grid[0] * grid[1] * grid[2] == 0)
    return llvm::Error::success();
  Executor executor(program, effective, grid, block);
  return executor.run(args);
}
