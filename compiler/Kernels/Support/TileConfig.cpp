//===- TileConfig.cpp -----------------------------------------------------===//

#include "compiler/Kernels/Support/TileConfig.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace lossjit;

std::string TileConfig::str() const {
  return "block_rows=" + std::to_string(blockRows) + ",threads=" + std::to_string(threads) +
         ",splits=" + std::to_string(splits) + ",matmul=simt";
}

llvm::Error TileConfig::validate() const {
  auto bad = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (blockRows < 1 || blockRows > 16)
    return bad("tile block_rows must be in [1, 16], got " + llvm::Twine(blockRows));
  if (threads < 32 || threads > 1024 || !llvm::isPowerOf2_64(threads))
    return bad("tile threads must be a power of two in [32, 1024], got " + llvm::Twine(threads));
  if (splits < 1 || splits > 1024)
    return bad("tile splits must be in [1, 1024], got " + llvm::Twine(splits));
  if (blockRows * threads * 8 > 48 * 1024)
    return bad("tile block_rows*threads*8 bytes of shared memory exceed 48 KiB");
  return llvm::Error::success();
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  TileConfig config;
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    if (key == "matmul") {
      if (value != "simt")
        return llvm::createStringError(
            "tile matmul must be 'simt' (tensor-core kinds are not built yet), got '" +
            value.str() + "'");
      continue;
    }
    int64_t number = 0;
    if (value.getAsInteger(10, number))
      return llvm::createStringError("tile '" + key.str() + "' expects an integer, got '" +
                                     value.str() + "'");
    if (key == "block_rows")
      config.blockRows = number;
    else if (key == "threads")
      config.threads = number;
    else if (key == "splits")
      config.splits = number;
    else
      return llvm::createStringError("unknown tile key '" + key.str() +
                                     "' (expected block_rows, threads, splits, matmul)");
  }
  if (llvm::Error err = config.validate())
    return std::move(err);
  return config;
}

std::string CpuTileConfig::str() const {
  return "cpu:block_rows=" + std::to_string(blockRows) +
         ",vector_width=" + std::to_string(vectorWidth) +
         ",panel_blocks=" + std::to_string(panelBlocks) +
         ",vocab_tile=" + std::to_string(vocabTile) +
         ",reduce_lanes=" + std::to_string(reduceLanes);
}
