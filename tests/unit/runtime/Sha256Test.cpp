//===- Sha256Test.cpp - SHA-256 against FIPS 180-4 vectors ----------------===//

#include "runtime/Sha256.h"

#include <gtest/gtest.h>

using namespace lossjit::runtime;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                      "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalMatchesOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i)
    data += static_cast<char>(i * 7 + 3);
  std::string expected = sha256Hex(data);
  // Split at every awkward boundary around the 64-byte block and 56-byte pad.
  for (size_t chunk : {1, 3, 55, 56, 57, 63, 64, 65, 127, 999}) {
    Sha256 hasher;
    for (size_t pos = 0; pos < data.size(); pos += chunk)
      hasher.update(std::string_view(data).substr(pos, chunk));
    EXPECT_EQ(Sha256::toHex(hasher.finalize()), expected) << "chunk " << chunk;
  }
  // finalize() resets the hasher.
  Sha256 hasher;
  hasher.update("junk");
  (void)hasher.finalize();
  hasher.update("abc");
  EXPECT_EQ(Sha256::toHex(hasher.finalize()), sha256Hex("abc"));
}

TEST(Sha256, PaddingLengthsNearBlockEdges) {
  // Lengths 55/56/64 exercise the one- vs two-block padding paths; values
  // from Python's hashlib.
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, IsSha256Hex) {
  EXPECT_TRUE(isSha256Hex(sha256Hex("x")));
  EXPECT_FALSE(isSha256Hex(""));
  EXPECT_FALSE(isSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(isSha256Hex(std::string(64, 'A')));
  EXPECT_FALSE(isSha256Hex(std::string(63, 'a') + "/"));
}
