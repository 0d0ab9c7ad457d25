//===- Sha256.h - SHA-256 digest --------------------------------*- C++ -*-===//
//
// Own implementation (FIPS 180-4) so the runtime needs no crypto library; it
// names cache entries and checks kernel images, so only correctness matters,
// not constant-time behaviour.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_SHA256_H
#define LOSSJIT_RUNTIME_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lossjit::runtime {

/// Incremental SHA-256.
class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();

  /// Feeds `size` bytes.
  void update(const void *data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }

  /// Pads, returns the digest and resets the hasher for reuse.
  Digest finalize();

  /// Lower-case hex of a digest (64 characters).
  static std::string toHex(const Digest &digest);

private:
  void compress(const uint8_t *block);
  void reset();

  std::array<uint32_t, 8> state;
  std::array<uint8_t, 64> buffer;
  size_t buffered;
  uint64_t totalBytes;
};

/// Lower-case hex SHA-256 of `data`.
std::string sha256Hex(std::string_view data);

/// True when `text` is 64 lower-case hex characters (a well-formed key or
/// digest as written in manifests).
bool isSha256Hex(std::string_view text);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_SHA256_H
