//===- GpuSchedule.cpp - operand staging shared by the GPU schedules ------===//

#include "compiler/Kernels/Schedules/GPU/GpuSchedule.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace lossjit;

void GpuSchedule::stageOperands(LaunchShape &launch, const TileMatmul *product) const {
  MLIRContext *context = sink.builder().getContext();
  auto space = gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup);
  for (const ScratchBuffer &buffer : (product ? *product : matmul).scratch(storage())) {
    if (buffer.rowElements)
      launch.dynamicWorkgroup.push_back(
          MemRefType::get({buffer.elements / buffer.rowElements, buffer.rowElements},
                          buffer.type, MemRefLayoutAttrInterface{}, space));
    else
      launch.dynamicWorkgroup.push_back(shared(buffer.elements, buffer.type));
    // Views past the first keep their order; a larger alignment pads.
    launch.dynamicAlign.resize(launch.dynamicWorkgroup.size() - 1, 0);
    launch.dynamicAlign.push_back(buffer.align);
  }
}

SmallVector<Value> GpuSchedule::staged(const KernelArgs &args, const LaunchShape &launch) const {
  SmallVector<Value> buffers;
  for (size_t i = 0; i < launch.dynamicWorkgroup.size(); ++i)
    buffers.push_back(args.workgroup(static_cast<unsigned>(launch.workgroup.size() + i)));
  if (args["x_map"]) {
    KernelEmitter e(sink.builder(), sink.location(), compute());
    matmul.prepare(e, buffers);
  }
  return buffers;
}

void GpuSchedule::declareOperandMaps(KernelSignature &sig) const {
  if (!tile.tma)
    return;
  // Boxes of BK elements (one swizzle span of 2·BK bytes) by the tile's
  // lines: BM rows of x, BN rows of w.
  auto declare = [&](llvm::StringRef buffer, llvm::StringRef rows, int64_t lines) {
    std::string name = (buffer + "_tma_" + std::to_string(lines) + "x" +
                        std::to_string(tile.blockK))
                           .str();
    std::vector<PlanTensorMap> &maps = sink.plan().tensorMaps;
    if (llvm::none_of(maps, [&](const PlanTensorMap &m) { return m.name == name; }))
      maps.push_back({name, buffer.str(), {"D", rows.str()}, {tile.blockK, lines}, 2 * tile.blockK});
    sig.tensorMap((buffer + "_map").str(), name, sink.builder().getContext());
  };
  declare("x", "N", tile.blockRows);
  declare("w", "V", tile.tileCols());
  sig.arg("tma_ready", index(), kTensorMapsReadyBinding);
}
