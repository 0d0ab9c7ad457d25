//===- KernelBundleTest.cpp - Manifest and bundle directory format --------===//

#include "runtime/FileUtil.h"
#include "runtime/KernelBundle.h"
#include "runtime/Sha256.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

namespace {
void expectSameBundle(const KernelBundle &a, const KernelBundle &b,
                      bool compareImages) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.lossjitVersion, b.lossjitVersion);
  EXPECT_EQ(a.llvmVersion, b.llvmVersion);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.options, b.options);
  EXPECT_EQ(a.tile, b.tile);
  EXPECT_EQ(a.irHash, b.irHash);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].name, b.params[i].name);
    EXPECT_EQ(a.params[i].kind, b.params[i].kind);
    EXPECT_EQ(a.params[i].dtype, b.params[i].dtype);
    EXPECT_EQ(a.params[i].shape, b.params[i].shape);
  }
  EXPECT_EQ(a.dims, b.dims);
  EXPECT_EQ(a.constants, b.constants);
  EXPECT_EQ(a.derived, b.derived);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.chunkDim, b.chunkDim);
  ASSERT_EQ(a.workspaces.size(), b.workspaces.size());
  for (size_t i = 0; i < a.workspaces.size(); ++i) {
    EXPECT_EQ(a.workspaces[i].name, b.workspaces[i].name);
    EXPECT_EQ(a.workspaces[i].dtype, b.workspaces[i].dtype);
    EXPECT_EQ(a.workspaces[i].count, b.workspaces[i].count);
  }
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const BundleKernel &x = a.kernels[i], &y = b.kernels[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.file, y.file);
    EXPECT_EQ(x.grid, y.grid);
    EXPECT_EQ(x.block, y.block);
    EXPECT_EQ(x.sharedBytes, y.sharedBytes);
    EXPECT_EQ(x.args, y.args);
    EXPECT_EQ(x.perChunk, y.perChunk);
    EXPECT_EQ(x.cluster, y.cluster);
    EXPECT_EQ(x.persistent, y.persistent);
    if (compareImages) {
      EXPECT_EQ(x.image, y.image);
    }
  }
}

std::string verifyError(const KernelBundle &b) {
  Error e = b.verify();
  EXPECT_TRUE(static_cast<bool>(e)) << "expected verify() to fail";
  return e.message();
}
} // namespace

TEST(KernelBundle, TestBundleVerifies) {
  KernelBundle b = makeTestBundle(testKey("a"));
  Error e = b.verify();
  EXPECT_FALSE(e) << e.message();
}

TEST(KernelBundle, ManifestRoundTrip) {
  KernelBundle b = makeTestBundle(testKey("a"));
  std::string text = writeJson(b.toManifest());
  Expected<JsonValue> json = parseJson(text);
  ASSERT_TRUE(json) << json.errorMessage();
  std::vector<std::string> hashes;
  Expected<KernelBundle> back = KernelBundle::fromManifest(*json, &hashes);
  ASSERT_TRUE(back) << back.errorMessage();
  expectSameBundle(b, *back, /*compareImages=*/false);
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes[0], sha256Hex(b.kernels[0].image));
  // Byte-stable: writing the re-read manifest gives the same text.
  for (size_t i = 0; i < back->kernels.size(); ++i)
    back->kernels[i].image = b.kernels[i].image;
  EXPECT_EQ(writeJson(back->toManifest()), text);
}

TEST(KernelBundle, ParsesTheDocumentedExample) {
  // The example from KernelBundle.h / the issue, with integer and string grid
  // entries mixed and no shared_bytes on one kernel.
  std::string key = testKey("example");
  std::string ptx = ".version 8.0\n";
  std::string manifest = R"J({
    "format": "lossjit-bundle", "format_version": 1,
    "key": ")J" + key + R"J(",
    "lossjit_version": "0.1.0", "llvm_version": "22.1.8",
    "op": "linear_cross_entropy", "backend": "cuda", "arch": "sm_80",
    "options": {"dtype": "f16", "label_type": "i64", "ignore_index": -100,
                "reduction": "mean", "bias": false},
    "tile": {"block_rows": 4, "threads": 128, "splits": 8, "matmul": "simt"},
    "ir_hash": ")J" + std::string(64, '0') + R"J(",
    "params": [ {"name":"x","kind":"buffer","dtype":"f16","shape":["N","D"]},
                {"name":"w","kind":"buffer","dtype":"f16","shape":["V","D"]},
                {"name":"labels","kind":"buffer","dtype":"i64","shape":["N"]},
                {"name":"loss","kind":"buffer","dtype":"f32","shape":[]},
                {"name":"lse","kind":"buffer","dtype":"f32","shape":["N"]} ],
    "dims": ["N","V","D"],
    "constants": {"S": 8},
    "workspaces": [ {"name":"part_m","dtype":"f32","count":"S*N"},
                    {"name":"part_s","dtype":"f32","count":"S*N"},
                    {"name":"loss_rows","dtype":"f32","count":"N"} ],
    "kernels": [ {"name":"lce_partial","file":"lce_partial.sm_80.ptx",
                  "sha256":")J" + sha256Hex(ptx) + R"J(",
                  "grid":["cdiv(N,4)","S",1], "block":[128,1,1], "shared_bytes":4096,
                  "args":["x","w","part_m","part_s","N","V","D"]},
                 {"name":"lce_combine","file":"lce_combine.sm_80.ptx",
                  "sha256":")J" + sha256Hex(ptx) + R"J(",
                  "grid":[1,1,1], "block":[256,1,1],
                  "args":["part_m","part_s","labels","loss_rows","loss","lse","N","S"]} ],
    "future_field": {"ignored": true}
  })J";
  TempDir dir;
  ASSERT_FALSE(writeFile(dir / "manifest.json", manifest));
  ASSERT_FALSE(writeFile(dir / "lce_partial.sm_80.ptx", ptx));
  ASSERT_FALSE(writeFile(dir / "lce_combine.sm_80.ptx", ptx));
  Expected<KernelBundle> b = readBundleDirectory(dir.path(), key);
  ASSERT_TRUE(b) << b.errorMessage();
  EXPECT_EQ(b->kernels[0].grid[2], "1");
  EXPECT_EQ(b->kernels[1].sharedBytes, 0u);
  EXPECT_EQ(b->constants.at(0).second, 8);
  EXPECT_EQ(b->options.find("ignore_index")->getInt(), -100);
  EXPECT_EQ(b->kernels[0].image, ptx);
}

TEST(KernelBundle, DirectoryRoundTrip) {
  KernelBundle b = makeTestBundle(testKey("dir"));
  TempDir dir;
  std::string entry = dir / b.key;
  Error w = writeBundleDirectory(b, entry);
  ASSERT_FALSE(w) << w.message();
  Expected<KernelBundle> back = readBundleDirectory(entry, b.key);
  ASSERT_TRUE(back) << back.errorMessage();
  expectSameBundle(b, *back, /*compareImages=*/true);
  EXPECT_EQ(back->imageBytes(), b.imageBytes());

  Expected<KernelBundle> wrongKey = readBundleDirectory(entry, testKey("other"));
  ASSERT_FALSE(wrongKey);
  EXPECT_NE(wrongKey.errorMessage().find("does not match"), std::string::npos);
}

TEST(KernelBundle, DetectsCorruptionTruncationAndMissingFiles) {
  KernelBundle b = makeTestBundle(testKey("bad"));
  TempDir dir;
  ASSERT_FALSE(writeBundleDirectory(b, dir.path()));
  std::string ptxPath = dir / b.kernels[0].file;
  std::string original = *readFile(ptxPath);

  std::string flipped = original;
  flipped[flipped.size() / 2] ^= 0x01;
  ASSERT_FALSE(writeFile(ptxPath, flipped));
  Expected<KernelBundle> r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("SHA-256 mismatch"), std::string::npos)
      << r.errorMessage();

  ASSERT_FALSE(writeFile(ptxPath, original.substr(0, original.size() - 5)));
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), ptxPath + ": holds " + std::to_string(original.size() - 5) +
                                  " bytes, the manifest says " + std::to_string(original.size()) +
                                  ": the file is truncated");

  ::unlink(ptxPath.c_str());
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("cannot open"), std::string::npos);
  EXPECT_NE(r.errorMessage().find(b.kernels[0].name), std::string::npos);

  ASSERT_FALSE(writeFile(dir / "manifest.json", "{\"format\": \"lossjit-bundle\","));
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("does not match manifest.sha256"), std::string::npos)
      << r.errorMessage();
  // Without manifest.sha256 (a prebuilt bundle of an older lossjit) the
  // parser reports the same manifest.
  ::unlink((dir / "manifest.sha256").c_str());
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("JSON parse error"), std::string::npos);
  EXPECT_NE(r.errorMessage().find("manifest.json"), std::string::npos);
}

TEST(KernelBundle, ManifestHashCoversTheWholeEntry) {
  // issue 16: editing a workspace count in the manifest gave a heap
  // overflow. The manifest (launch plan, image hashes) is hashed now.
  KernelBundle b = makeTestBundle(testKey("whole"));
  TempDir dir;
  ASSERT_FALSE(writeBundleDirectory(b, dir.path()));
  std::string hashText = *readFile(dir / "manifest.sha256");
  std::string manifest = *readFile(dir / "manifest.json");
  EXPECT_EQ(hashText, sha256Hex(manifest) + "  manifest.json\n") << "sha256sum(1) format";

  size_t at = manifest.find("\"S*N\"");
  ASSERT_NE(at, std::string::npos);
  std::string edited = manifest;
  edited.replace(at, 5, "\"1\"");
  ASSERT_FALSE(writeFile(dir / "manifest.json", edited));
  Expected<KernelBundle> r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), dir / "manifest.json" + ": does not match manifest.sha256 (" +
                                  std::to_string(edited.size()) + " bytes hash to " +
                                  sha256Hex(edited) + "; expected '" + sha256Hex(manifest) +
                                  "  manifest.json\\x0a'): the manifest was edited or corrupted");

  // An entry must have the hash when the caller requires it (the cache).
  ASSERT_FALSE(writeFile(dir / "manifest.json", manifest));
  ::unlink((dir / "manifest.sha256").c_str());
  BundleReadOptions options;
  EXPECT_TRUE(readBundleDirectory(dir.path(), options));
  options.requireManifestHash = true;
  r = readBundleDirectory(dir.path(), options);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage().rfind(dir.path() +
                                       ": an entry needs its manifest.sha256: cannot "
                                       "open '" +
                                       dir / "manifest.sha256",
                                   0),
            0u)
      << r.errorMessage();
}

TEST(KernelBundle, KeyAndIrHashAreCompared) {
  // issue 16: an entry copied under another key (its "key" rewritten) was
  // used for another graph. The IR hash is compared on load.
  KernelBundle b = makeTestBundle(testKey("copied"));
  TempDir dir;
  ASSERT_FALSE(writeBundleDirectory(b, dir.path()));
  BundleReadOptions options;
  options.expectedKey = b.key;
  options.expectedIrHash = b.irHash;
  EXPECT_TRUE(readBundleDirectory(dir.path(), options));
  options.expectedIrHash = std::string(64, 'c');
  Expected<KernelBundle> r = readBundleDirectory(dir.path(), options);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), dir / "manifest.json" + ": ir_hash " + b.irHash +
                                  " does not match the requested graph's " + std::string(64, 'c') +
                                  " (an entry copied under another key?)");
}

TEST(KernelBundle, ReadsOnlyRegularFilesWithinTheirSize) {
  KernelBundle b = makeTestBundle(testKey("files"));
  TempDir dir;
  ASSERT_FALSE(writeBundleDirectory(b, dir.path()));
  std::string image = dir / b.kernels[0].file;

  // An image symlinked to /dev/zero: an error, not an out-of-memory abort.
  ::unlink(image.c_str());
  ASSERT_EQ(::symlink("/dev/zero", image.c_str()), 0);
  Expected<KernelBundle> r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), "kernel 'lce_partial' image: cannot read '" + image +
                                  "': it is a character device, expected a regular file");

  // A 64 GiB sparse image: refused from its size, before any read.
  ::unlink(image.c_str());
  int fd = ::open(image.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(64) << 30), 0);
  ::close(fd);
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  std::string bytes = std::to_string(b.kernels[0].image.size());
  EXPECT_EQ(r.errorMessage(), "kernel 'lce_partial' image: cannot read '" + image +
                                  "': it holds 68719476736 bytes, more than the limit of " + bytes +
                                  " bytes");
  ::unlink(image.c_str());

  // A FIFO named manifest.json: an error at once, not a hang.
  std::string manifest = dir / "manifest.json";
  ::unlink(manifest.c_str());
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0644), 0);
  r = readBundleDirectory(dir.path());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(),
            "cannot read '" + manifest + "': it is a FIFO, expected a regular file");
}

TEST(KernelBundle, ImageSizesAreBounded) {
  KernelBundle b = makeTestBundle(testKey("sizes"));
  JsonValue m = b.toManifest();
  EXPECT_EQ(m.find("kernels")->getArray()[0].find("bytes")->getInt(),
            static_cast<int64_t>(b.kernels[0].image.size()));
  for (int64_t bad : {int64_t(0), int64_t(-5), int64_t(kMaxImageBytes) + 1}) {
    JsonValue copy = m;
    for (JsonValue::Member &member : copy.getObject())
      if (member.key == "kernels")
        member.value.getArray()[1].set("bytes", bad);
    Expected<KernelBundle> r = KernelBundle::fromManifest(copy);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.errorMessage(), "manifest.kernels[1].bytes: expected 1.." +
                                    std::to_string(kMaxImageBytes) + ", got " +
                                    std::to_string(bad));
  }
}

TEST(KernelBundle, ManifestFieldErrorsNameThePath) {
  KernelBundle b = makeTestBundle(testKey("fields"));
  auto errorFor = [&](auto mutate) {
    JsonValue m = b.toManifest();
    mutate(m);
    Expected<KernelBundle> r = KernelBundle::fromManifest(m);
    EXPECT_FALSE(r);
    return r ? std::string() : r.errorMessage();
  };
  EXPECT_NE(errorFor([](JsonValue &m) { m.set("format", "other"); })
                .find("manifest.format"),
            std::string::npos);
  EXPECT_NE(errorFor([](JsonValue &m) {
              m.set("format_version", 3);
            }).find("reads versions 1 and 2, got 3"),
            std::string::npos);
  // Version 2 is for chunk_dim alone.
  EXPECT_NE(errorFor([](JsonValue &m) {
              m.set("format_version", 2);
            }).find("is for chunks of another dim than N"),
            std::string::npos);
  EXPECT_NE(errorFor([](JsonValue &m) { m.set("op", 3); }).find("manifest.op: expected a string"),
            std::string::npos);
  std::string e = errorFor([](JsonValue &m) {
    m.getObject()[m.getObject().size() - 1].value.getArray()[1].set("block", JsonValue::array());
  });
  EXPECT_NE(e.find("manifest.kernels[1].block: expected 3 entries"), std::string::npos) << e;
  e = errorFor([](JsonValue &m) {
    JsonValue grid = JsonValue::array();
    grid.push("N");
    grid.push(JsonValue::array());
    grid.push(1);
    m.getObject().back().value.getArray()[0].set("grid", grid);
  });
  EXPECT_NE(e.find("manifest.kernels[0].grid[1]: expected a string or an integer, got an array"),
            std::string::npos)
      << e;
  e = errorFor([](JsonValue &m) {
    m.getObject().back().value.getArray()[0].set("sha256", "xyz");
  });
  EXPECT_NE(e.find("kernels[0].sha256"), std::string::npos) << e;
  EXPECT_NE(errorFor([](JsonValue &m) { m = JsonValue::array(); })
                .find("manifest: expected an object"),
            std::string::npos);
}

TEST(KernelBundle, DeclaredExtentsRoundTripAndAreValidated) {
  // A graph's static extents (issue 16: a tensor<3x4xf32> graph must not run
  // on 5 rows on the GPU path either) travel per param, -1 where dynamic.
  KernelBundle b = makeTestBundle(testKey("extents"));
  ASSERT_EQ(b.params[0].shape, (std::vector<std::string>{"N", "D"}));
  b.params[0].extents = {3, -1};
  ASSERT_FALSE(static_cast<bool>(b.verify()));
  JsonValue m = b.toManifest();
  Expected<KernelBundle> again = KernelBundle::fromManifest(m);
  ASSERT_TRUE(again) << again.errorMessage();
  EXPECT_EQ(again->params[0].extents, (std::vector<int64_t>{3, -1}));
  EXPECT_TRUE(again->params[1].extents.empty()) << "absent means none declared";

  auto paramsOf = [](JsonValue &manifest) -> JsonValue::Array & {
    for (JsonValue::Member &member : manifest.getObject())
      if (member.key == "params")
        return member.value.getArray();
    ADD_FAILURE() << "no params";
    static JsonValue::Array none;
    return none;
  };
  auto errorFor = [&](JsonValue extents) {
    JsonValue copy = m;
    paramsOf(copy)[0].set("extents", std::move(extents));
    Expected<KernelBundle> r = KernelBundle::fromManifest(copy);
    EXPECT_FALSE(r);
    return r ? std::string() : r.errorMessage();
  };
  JsonValue one = JsonValue::array();
  one.push(3);
  EXPECT_NE(errorFor(one).find("params[0].extents: expected 2 entries (one per shape entry), got 1"),
            std::string::npos)
      << errorFor(one);
  JsonValue negative = JsonValue::array();
  negative.push(-2);
  negative.push(4);
  EXPECT_NE(errorFor(negative).find("params[0].extents[0]: expected an extent >= 0 or -1"),
            std::string::npos)
      << errorFor(negative);
  JsonValue text = JsonValue::array();
  text.push("N");
  text.push(4);
  EXPECT_NE(errorFor(text).find("params[0].extents[0]: expected an integer"), std::string::npos)
      << errorFor(text);
  // verify() guards bundles built in memory the same way.
  b.params[0].extents = {3};
  EXPECT_NE(verifyError(b).find("params[0].extents: expected 2 entries"), std::string::npos);
}

TEST(KernelBundle, VerifyRejectsInconsistentBundles) {
  KernelBundle good = makeTestBundle(testKey("v"));
  KernelBundle b = good;
  b.key = "nothex";
  EXPECT_NE(verifyError(b).find("key"), std::string::npos);
  b = good;
  b.kernels[0].args.push_back("nope");
  EXPECT_NE(verifyError(b).find("kernels[0].args[8]: \"nope\" names no param"),
            std::string::npos);
  b = good;
  b.params[0].dtype = "f8";
  EXPECT_NE(verifyError(b).find("params[0].dtype: unknown dtype 'f8'"),
            std::string::npos);
  b = good;
  b.kernels[1].file = "../evil.ptx";
  EXPECT_NE(verifyError(b).find("not a plain file name"), std::string::npos);
  b = good;
  b.kernels[1].file = "manifest.json";
  EXPECT_NE(verifyError(b).find("not a plain file name"), std::string::npos);
  b = good;
  b.workspaces[0].name = "N";
  EXPECT_NE(verifyError(b).find("declared twice"), std::string::npos);
  b = good;
  b.workspaces[0].count = "S*Q";
  EXPECT_NE(verifyError(b).find("workspaces[0].count"), std::string::npos);
  b = good;
  b.kernels[0].grid[0] = "cdiv(N,";
  EXPECT_NE(verifyError(b).find("kernels[0].grid[0]"), std::string::npos);
  b = good;
  b.kernels[0].block = {64, 32, 1};
  EXPECT_NE(verifyError(b).find("at most 1024 threads"), std::string::npos);
  b = good;
  b.kernels[0].image.clear();
  EXPECT_NE(verifyError(b).find("is empty"), std::string::npos);
  b = good;
  b.params[0].shape = {"N", "-3"};
  EXPECT_NE(verifyError(b).find("params[0].shape[1]"), std::string::npos);
  b = good;
  b.arch = "ampere";
  EXPECT_NE(verifyError(b).find("arch"), std::string::npos);
  b = good;
  b.dims.push_back("cdiv");
  EXPECT_NE(verifyError(b).find("reserved"), std::string::npos);
  b = good;
  b.kernels.clear();
  EXPECT_NE(verifyError(b).find("at least one kernel"), std::string::npos);
  // Kernels may share a file only with identical bytes.
  b = good;
  b.kernels[1].file = b.kernels[0].file;
  EXPECT_NE(verifyError(b).find("images differ"), std::string::npos);
  b.kernels[1].image = b.kernels[0].image;
  EXPECT_FALSE(b.verify());
  // A cpu bundle needs no launch geometry.
  b = good;
  b.backend = "cpu";
  b.arch = "host";
  EXPECT_FALSE(b.verify());
}

TEST(KernelBundle, DtypeSizes) {
  EXPECT_EQ(*dtypeSize("f16"), 2u);
  EXPECT_EQ(*dtypeSize("bf16"), 2u);
  EXPECT_EQ(*dtypeSize("i64"), 8u);
  EXPECT_EQ(*dtypeSize("i1"), 1u);
  EXPECT_FALSE(dtypeSize("float"));
}

// ---- Chunked launch plans: derived symbols, chunk, per_chunk ----

TEST(KernelBundle, ChunkedTestBundleVerifies) {
  KernelBundle b = makeChunkedTestBundle(testKey("chunked"));
  Error e = b.verify();
  EXPECT_FALSE(e) << e.message();
}

TEST(KernelBundle, ChunkedManifestRoundTrip) {
  KernelBundle b = makeChunkedTestBundle(testKey("chunked-rt"));
  JsonValue manifest = b.toManifest();
  // The new fields as documented.
  const JsonValue *derived = manifest.find("derived");
  ASSERT_TRUE(derived && derived->isArray());
  ASSERT_EQ(derived->getArray().size(), 2u);
  EXPECT_EQ(derived->getArray()[0].find("name")->getString(), "C");
  EXPECT_EQ(derived->getArray()[0].find("formula")->getString(),
            "max(1,min(N,(WB-V*D*4)/(V*4)))");
  EXPECT_EQ(derived->getArray()[1].find("name")->getString(), "NC");
  ASSERT_TRUE(manifest.find("chunk"));
  EXPECT_EQ(manifest.find("chunk")->getString(), "C");
  const JsonValue::Array &kernels = manifest.find("kernels")->getArray();
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_FALSE(kernels[0].find("per_chunk")) << "written only when true";
  ASSERT_TRUE(kernels[1].find("per_chunk"));
  EXPECT_TRUE(kernels[1].find("per_chunk")->getBool());
  EXPECT_TRUE(kernels[2].find("per_chunk")->getBool());
  EXPECT_FALSE(kernels[3].find("per_chunk"));

  std::string text = writeJson(manifest);
  Expected<JsonValue> json = parseJson(text);
  ASSERT_TRUE(json) << json.errorMessage();
  Expected<KernelBundle> back = KernelBundle::fromManifest(*json);
  ASSERT_TRUE(back) << back.errorMessage();
  expectSameBundle(b, *back, /*compareImages=*/false);
  EXPECT_EQ(back->derived, b.derived);
  EXPECT_EQ(back->chunk, "C");
  EXPECT_FALSE(back->kernels[0].perChunk);
  EXPECT_TRUE(back->kernels[1].perChunk);
  EXPECT_TRUE(back->kernels[2].perChunk);
  EXPECT_FALSE(back->kernels[3].perChunk);
  for (size_t i = 0; i < back->kernels.size(); ++i)
    back->kernels[i].image = b.kernels[i].image;
  EXPECT_EQ(writeJson(back->toManifest()), text) << "byte-stable";

  // Through a directory, with integrity checks and verify().
  TempDir dir;
  ASSERT_FALSE(writeBundleDirectory(b, dir / b.key));
  Expected<KernelBundle> read = readBundleDirectory(dir / b.key, b.key);
  ASSERT_TRUE(read) << read.errorMessage();
  expectSameBundle(b, *read, /*compareImages=*/true);
}

TEST(KernelBundle, VocabularyChunksNameTheirDim) {
  // chunk_dim is written only when it is not N, read back, and must name a
  // dim of a chunked bundle.
  KernelBundle b = makeChunkedTestBundle(testKey("chunk-dim"));
  EXPECT_FALSE(b.toManifest().find("chunk_dim")) << "N is the default, not written";
  b.chunkDim = "V";
  ASSERT_FALSE(b.verify());
  JsonValue manifest = b.toManifest();
  ASSERT_TRUE(manifest.find("chunk_dim"));
  EXPECT_EQ(manifest.find("chunk_dim")->getString(), "V");
  // Version 2: a runtime from before chunk_dim refuses the bundle rather
  // than chunking N.
  EXPECT_EQ(manifest.find("format_version")->getInt(), 2);
  EXPECT_EQ(
      makeChunkedTestBundle(testKey("chunk-dim-n")).toManifest().find("format_version")->getInt(),
      1);
  Expected<KernelBundle> back = KernelBundle::fromManifest(manifest);
  ASSERT_TRUE(back) << back.errorMessage();
  EXPECT_EQ(back->chunkDim, "V");
  JsonValue old = manifest;
  old.set("format_version", 1);
  Expected<KernelBundle> refused = KernelBundle::fromManifest(old);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.errorMessage().find("predates chunk_dim \"V\""), std::string::npos)
      << refused.errorMessage();

  KernelBundle noDim = b;
  noDim.chunkDim = "T";
  EXPECT_NE(verifyError(noDim).find("chunk_dim"), std::string::npos);
  EXPECT_NE(verifyError(noDim).find("no dim \"T\""), std::string::npos);
  KernelBundle unchunked = makeTestBundle(testKey("chunk-dim-alone"));
  unchunked.chunkDim = "V";
  EXPECT_NE(verifyError(unchunked).find("has no \"chunk\""), std::string::npos);
}

TEST(KernelBundle, UnchunkedManifestsHaveNoNewFields) {
  // Bundles without chunking keep writing exactly the old manifest.
  KernelBundle b = makeTestBundle(testKey("old"));
  JsonValue m = b.toManifest();
  EXPECT_FALSE(m.find("derived"));
  EXPECT_FALSE(m.find("chunk"));
  for (const JsonValue &k : m.find("kernels")->getArray()) {
    EXPECT_FALSE(k.find("per_chunk"));
    EXPECT_FALSE(k.find("cluster"));
    EXPECT_FALSE(k.find("persistent"));
  }
  Expected<KernelBundle> back = KernelBundle::fromManifest(m);
  ASSERT_TRUE(back) << back.errorMessage();
  EXPECT_TRUE(back->derived.empty());
  EXPECT_TRUE(back->chunk.empty());
  for (const BundleKernel &k : back->kernels)
    EXPECT_FALSE(k.perChunk);
}

// Hopper's clusters and persistent grids: written only when set, read
// back, and checked — a cluster of 1..16 blocks, a persistent kernel's grid
// along x alone.
TEST(KernelBundle, ClustersAndPersistentGridsRoundTripAndAreValidated) {
  KernelBundle b = makeTestBundle(testKey("persistent"));
  b.kernels[0].grid = {"2*cdiv(N,4)", "1", "1"};
  b.kernels[0].cluster = 2;
  b.kernels[0].persistent = true;
  ASSERT_FALSE(b.verify()) << b.verify().message();
  JsonValue m = b.toManifest();
  const JsonValue &k0 = m.find("kernels")->getArray()[0];
  ASSERT_TRUE(k0.find("cluster") && k0.find("persistent"));
  EXPECT_EQ(k0.find("cluster")->getInt(), 2);
  EXPECT_TRUE(k0.find("persistent")->getBool());
  EXPECT_FALSE(m.find("kernels")->getArray()[1].find("cluster"));
  Expected<KernelBundle> back = KernelBundle::fromManifest(m);
  ASSERT_TRUE(back) << back.errorMessage();
  expectSameBundle(b, *back, /*compareImages=*/false);

  auto verifyError = [&](auto mutate) {
    KernelBundle bad = b;
    mutate(bad);
    Error e = bad.verify();
    return e ? e.message() : std::string();
  };
  EXPECT_NE(verifyError([](KernelBundle &x) {
              x.kernels[0].cluster = 0;
            }).find("kernels[0].cluster: expected 1..16, got 0"),
            std::string::npos);
  EXPECT_NE(verifyError([](KernelBundle &x) {
              x.kernels[0].cluster = 17;
            }).find("expected 1..16, got 17"),
            std::string::npos);
  EXPECT_NE(verifyError([](KernelBundle &x) { x.kernels[0].grid[1] = "S"; })
                .find("kernels[0].persistent: kernel 'lce_partial' is persistent, so its grid[1] "
                      "and grid[2] must be \"1\""),
            std::string::npos);
  EXPECT_EQ(verifyError([](KernelBundle &x) {
              x.kernels[0].grid[1] = "S";
              x.kernels[0].persistent = false;
            }),
            "");
  // A manifest's cluster out of range or of the wrong type names its path.
  auto readError = [&](JsonValue value) {
    JsonValue bad = b.toManifest();
    bad.getObject().back().value.getArray()[0].set("cluster", std::move(value));
    Expected<KernelBundle> r = KernelBundle::fromManifest(bad);
    return r ? std::string() : r.errorMessage();
  };
  EXPECT_NE(readError(JsonValue(int64_t(0))).find("manifest.kernels[0].cluster: expected 1..16"),
            std::string::npos);
  EXPECT_NE(readError(JsonValue("two")).find("manifest.kernels[0].cluster"), std::string::npos);
}

TEST(KernelBundle, ParsesAChunkedManifest) {
  std::string key = testKey("chunked-example");
  std::string ptx = ".version 8.0\n";
  std::string hash = sha256Hex(ptx);
  std::string manifest = R"J({
    "format": "lossjit-bundle", "format_version": 1,
    "key": ")J" + key + R"J(",
    "lossjit_version": "0.1.0", "op": "lce_backward", "backend": "cuda",
    "arch": "sm_80",
    "params": [ {"name":"x","dtype":"f32","shape":["N","D"]},
                {"name":"w","dtype":"f32","shape":["V","D"]} ],
    "dims": ["N","V","D"],
    "constants": {"WB": 4096},
    "derived": [ {"name":"C","formula":"max(1,min(N,(WB-V*D*4)/(V*4)))"},
                 {"name":"K","formula":7} ],
    "chunk": "C",
    "workspaces": [ {"name":"dz","dtype":"f32","count":"C*V"} ],
    "kernels": [ {"name":"once","file":"k.ptx","sha256":")J" + hash + R"J(",
                  "grid":[1,1,1],"block":[32,1,1],"args":["x","K"]},
                 {"name":"each","file":"k.ptx","sha256":")J" + hash + R"J(",
                  "grid":["cdiv(C,4)",1,1],"block":[32,1,1],
                  "args":["x","dz","chunk_begin","chunk_end"],
                  "per_chunk":true},
                 {"name":"off","file":"k.ptx","sha256":")J" + hash + R"J(",
                  "grid":[1,1,1],"block":[32,1,1],"args":["w"],
                  "per_chunk":false} ]
  })J";
  TempDir dir;
  ASSERT_FALSE(writeFile(dir / "manifest.json", manifest));
  ASSERT_FALSE(writeFile(dir / "k.ptx", ptx));
  Expected<KernelBundle> b = readBundleDirectory(dir.path(), key);
  ASSERT_TRUE(b) << b.errorMessage();
  ASSERT_EQ(b->derived.size(), 2u);
  EXPECT_EQ(b->derived[0],
            std::make_pair(std::string("C"),
                           std::string("max(1,min(N,(WB-V*D*4)/(V*4)))")));
  EXPECT_EQ(b->derived[1], std::make_pair(std::string("K"), std::string("7")));
  EXPECT_EQ(b->chunk, "C");
  EXPECT_FALSE(b->kernels[0].perChunk);
  EXPECT_TRUE(b->kernels[1].perChunk);
  EXPECT_FALSE(b->kernels[2].perChunk);
}

TEST(KernelBundle, ChunkedManifestFieldErrorsNameThePath) {
  KernelBundle b = makeChunkedTestBundle(testKey("chunked-fields"));
  auto errorFor = [&](auto mutate) {
    JsonValue m = b.toManifest();
    mutate(m);
    Expected<KernelBundle> r = KernelBundle::fromManifest(m);
    EXPECT_FALSE(r);
    return r ? std::string() : r.errorMessage();
  };
  auto kernelsOf = [](JsonValue &m) -> JsonValue::Array & {
    return m.getObject().back().value.getArray();
  };
  std::string e = errorFor([&](JsonValue &m) { kernelsOf(m)[1].set("per_chunk", 1); });
  EXPECT_NE(e.find("manifest.kernels[1].per_chunk: expected a boolean, got an integer"),
            std::string::npos)
      << e;
  e = errorFor([](JsonValue &m) { m.set("chunk", 4); });
  EXPECT_NE(e.find("manifest.chunk: expected a string"), std::string::npos) << e;
  e = errorFor([](JsonValue &m) { m.set("derived", JsonValue::object()); });
  EXPECT_NE(e.find("manifest.derived: expected an array"), std::string::npos) << e;
  e = errorFor([](JsonValue &m) {
    JsonValue d = JsonValue::array();
    JsonValue entry = JsonValue::object();
    entry.set("name", "C");
    d.push(entry);
    m.set("derived", d);
  });
  EXPECT_NE(e.find("manifest.derived[0]: missing required field \"formula\""),
            std::string::npos)
      << e;
}

TEST(KernelBundle, VerifyRejectsBadChunking) {
  KernelBundle good = makeChunkedTestBundle(testKey("chunk-verify"));
  KernelBundle b = good;
  // Derived names share the one namespace.
  b.derived[1].first = "C";
  std::string e = verifyError(b);
  EXPECT_NE(e.find("derived[1].name: name 'C' is declared twice"), std::string::npos) << e;
  b = good;
  b.derived[0].first = "V";
  EXPECT_NE(verifyError(b).find("derived[0].name: name 'V' is declared twice"),
            std::string::npos);
  b = good;
  b.derived[0].first = "WB";
  EXPECT_NE(verifyError(b).find("declared twice"), std::string::npos);
  b = good;
  b.workspaces[0].name = "NC"; // a workspace may not reuse a derived name
  EXPECT_NE(verifyError(b).find("workspaces[0].name: name 'NC' is declared twice"),
            std::string::npos);
  b = good;
  b.derived[0].first = "min";
  EXPECT_NE(verifyError(b).find("reserved"), std::string::npos);
  b = good;
  b.derived[0].first = "chunk_begin";
  EXPECT_NE(verifyError(b).find("name 'chunk_begin' is reserved for chunked launches"),
            std::string::npos);

  // Formulas: syntax, unknown names, forward references; errors name the symbol.
  b = good;
  b.derived[0].second = "max(1,";
  e = verifyError(b);
  EXPECT_NE(e.find("derived[0].formula: derived symbol 'C': bad formula 'max(1,'"),
            std::string::npos)
      << e;
  b = good;
  b.derived[1].second = "cdiv(N,Q)";
  e = verifyError(b);
  EXPECT_NE(e.find("derived[1].formula: derived symbol 'NC':"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown name 'Q'"), std::string::npos) << e;
  b = good;
  b.derived[0].second = "max(1,NC)"; // NC is defined after C
  e = verifyError(b);
  EXPECT_NE(e.find("derived symbol 'C'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown name 'NC'"), std::string::npos) << e;
  b = good;
  b.derived[0].second = "max(1,x)"; // a buffer is not a symbol
  EXPECT_NE(verifyError(b).find("unknown name 'x'"), std::string::npos);
  // Grids and workspace counts may read derived symbols, shapes may not.
  b = good;
  b.params[0].shape = {"C", "D"};
  EXPECT_NE(verifyError(b).find("params[0].shape[0]"), std::string::npos);

  // The chunk symbol.
  b = good;
  b.chunk = "nothing";
  e = verifyError(b);
  EXPECT_NE(e.find("chunk: \"nothing\" names no derived symbol or constant"),
            std::string::npos)
      << e;
  b = good;
  b.chunk = "V"; // a dim is not a chunk size
  EXPECT_NE(verifyError(b).find("names no derived symbol or constant"), std::string::npos);
  b = good;
  b.chunk = "WB"; // a constant is
  EXPECT_FALSE(b.verify());
  b = good;
  b.dims = {"M", "V", "D"};
  for (BundleParam &p : b.params)
    for (std::string &s : p.shape)
      if (s == "N")
        s = "M";
  b.derived = {{"C", "4"}, {"NC", "cdiv(M,C)"}};
  b.workspaces[0].count = "M";
  b.kernels[0].args[3] = "M";
  e = verifyError(b);
  EXPECT_NE(e.find("chunk: chunked launches split the rows of dim \"N\", but the bundle "
                   "has no dim \"N\""),
            std::string::npos)
      << e;

  // per_chunk needs a chunk; chunk_begin/chunk_end need per_chunk.
  b = good;
  b.chunk.clear();
  e = verifyError(b);
  EXPECT_NE(e.find("kernels[1].per_chunk: kernel 'lce_bwd_dz' is per_chunk but the "
                   "bundle has no \"chunk\""),
            std::string::npos)
      << e;
  b = good;
  b.kernels[0].args.push_back("chunk_begin");
  e = verifyError(b);
  EXPECT_NE(e.find("kernels[0].args[5]: \"chunk_begin\" is valid only in per_chunk "
                   "kernels"),
            std::string::npos)
      << e;
  b = good;
  b.kernels[3].args.push_back("chunk_end");
  EXPECT_NE(verifyError(b).find("\"chunk_end\" is valid only in per_chunk"),
            std::string::npos);
  // ... also in bundles without any chunking.
  b = makeTestBundle(testKey("chunk-verify-plain"));
  b.kernels[1].args.push_back("chunk_begin");
  EXPECT_NE(verifyError(b).find("\"chunk_begin\" is valid only in per_chunk"),
            std::string::npos);
  b = makeTestBundle(testKey("chunk-verify-plain"));
  b.dims.push_back("chunk_end");
  EXPECT_NE(verifyError(b).find("reserved for chunked launches"), std::string::npos);
  // A chunk without per-chunk kernels is allowed (and harmless).
  b = good;
  for (BundleKernel &k : b.kernels) {
    k.perChunk = false;
    std::erase(k.args, "chunk_begin");
    std::erase(k.args, "chunk_end");
  }
  EXPECT_FALSE(b.verify());
}
