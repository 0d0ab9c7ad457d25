//===- AotOutputTest.cpp - lossjit-aot's directories, index and helpers ----===//
//
// The output directories generated at build time (tests/aot/CMakeLists.txt):
// index manifest schema and contents per option set, the bundle round trip
// through the runtime (readBundleDirectory and a KernelCache whose
// LOSSJIT_KERNEL_PATH is the output), corruption detection, and the pieces
// the writers are built from (formula → C, PTX signatures, cubin tools).
//
//===----------------------------------------------------------------------===//

#include "runtime/FileUtil.h"
#include "runtime/Json.h"
#include "runtime/KernelBundle.h"
#include "runtime/KernelCache.h"
#include "tools/lossjit-aot/CubinCompiler.h"
#include "tools/lossjit-aot/FormulaToC.h"
#include "tools/lossjit-aot/IndexManifest.h"
#include "tools/lossjit-aot/PtxSignature.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>

using namespace lossjit;
using runtime::JsonValue;

namespace {

struct Variant {
  const char *dir;
  const char *dtype, *labels, *bias, *ignore, *reduction;
  std::vector<std::string> arches;
};

std::vector<Variant> variants() {
  return {
      {AOT_DIR_f16_mean, "f16", "i64", "false", "-100", "mean", {"sm_80", "sm_90", "sm_90a"}},
      {AOT_DIR_bf16_sum_bias, "bf16", "i32", "true", "3", "sum", {"sm_80", "sm_86", "sm_90"}},
      {AOT_DIR_f32_none, "f32", "i64", "false", "-100", "none", {"sm_80", "sm_89"}},
  };
}

JsonValue readIndex(const std::string &dir) {
  auto text = runtime::readFile(dir + "/manifest.json");
  EXPECT_TRUE(text) << text.errorMessage();
  auto json = runtime::parseJson(text ? *text : "{}");
  EXPECT_TRUE(json) << json.errorMessage();
  return json ? *json : JsonValue::object();
}

TEST(AotOutput, IndexSchemaAndContents) {
  for (const Variant &v : variants()) {
    SCOPED_TRACE(v.dir);
    runtime::Error e = aot::checkAotDirectory(v.dir);
    ASSERT_FALSE(e) << e.message();
    JsonValue index = readIndex(v.dir);
    EXPECT_EQ(index.find("format")->getString(), "lossjit-aot-index");
    EXPECT_EQ(index.find("format_version")->getInt(), 1);
    EXPECT_EQ(index.find("lossjit_version")->getString(), runtime::kLossjitVersion);
    const JsonValue &options = *index.find("options");
    EXPECT_EQ(options.find("dtype")->getString(), v.dtype);
    EXPECT_EQ(options.find("label_type")->getString(), v.labels);
    EXPECT_EQ(options.find("bias")->getString(), v.bias);
    EXPECT_EQ(options.find("ignore_index")->getString(), v.ignore);
    EXPECT_EQ(options.find("reduction")->getString(), v.reduction);
    EXPECT_TRUE(index.find("tile")->find("splits"));
    EXPECT_EQ(index.find("ir_hash")->getString().size(), 64u);

    const JsonValue &op = index.find("ops")->getArray().front();
    EXPECT_EQ(op.find("role")->getString(), "forward");
    std::vector<std::string> names, outputs;
    for (const JsonValue &p : op.find("params")->getArray()) {
      names.push_back(p.find("name")->getString());
      if (p.find("output")->getBool())
        outputs.push_back(p.find("name")->getString());
    }
    std::vector<std::string> expectNames = {"x", "w", "labels"};
    if (std::string(v.bias) == "true")
      expectNames.push_back("bias");
    expectNames.insert(expectNames.end(), {"loss", "lse"});
    EXPECT_EQ(names, expectNames);
    EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "lse"}));

    std::vector<std::string> arches;
    for (const JsonValue &a : op.find("arches")->getArray()) {
      arches.push_back(a.find("arch")->getString());
      for (const JsonValue &k : a.find("kernels")->getArray()) {
        // Each arg expands to 5 (buffer) or 1 (scalar) u64 parameters; a
        // TMA map (sm_90a's default tile loads by TMA) is one 128-byte
        // by-value .b8 parameter.
        int64_t slots = 0;
        for (const JsonValue &s : k.find("signature")->getArray()) {
          size_t n = s.find("slots")->getArray().size();
          std::string kind = s.find("kind")->getString();
          EXPECT_EQ(n, kind == "buffer" || kind == "workspace" ? 5u : 1u);
          for (const JsonValue &t : s.find("ptx_types")->getArray())
            EXPECT_EQ(t.getString(), kind == "tensor_map" ? "b8" : "u64") << kind;
          slots += static_cast<int64_t>(n);
        }
        EXPECT_EQ(slots, k.find("parameter_count")->getInt());
        EXPECT_EQ(k.find("block")->getArray().size(), 3u);
      }
    }
    EXPECT_EQ(arches, v.arches);
  }
}

TEST(AotOutput, BundlesRoundTripThroughTheRuntime) {
  for (const Variant &v : variants()) {
    SCOPED_TRACE(v.dir);
    JsonValue index = readIndex(v.dir);
    runtime::KernelCacheOptions options;
    options.searchPath = {v.dir};
    runtime::KernelCache cache(options);
    size_t bundles = 0;
    for (const JsonValue &op : index.find("ops")->getArray())
      for (const JsonValue &a : op.find("arches")->getArray()) {
        std::string key = a.find("key")->getString();
        auto direct = runtime::readBundleDirectory(std::string(v.dir) + "/" + key, key);
        ASSERT_TRUE(direct) << direct.errorMessage();
        EXPECT_EQ(direct->arch, a.find("arch")->getString());
        EXPECT_EQ(direct->backend, "cuda");
        // What a runtime-only build does: look the key up on the kernel path.
        auto cached = cache.getOrCompile(key, cache.noCompilerFunction(key));
        ASSERT_TRUE(cached) << cached.errorMessage();
        EXPECT_EQ((*cached)->kernels.size(), direct->kernels.size());
        for (size_t k = 0; k < direct->kernels.size(); ++k)
          EXPECT_EQ((*cached)->kernels[k].image, direct->kernels[k].image);
        ++bundles;
      }
    EXPECT_EQ(cache.stats().searchPathHits, bundles);
    EXPECT_EQ(cache.stats().compiles, 0u);
  }
}

TEST(AotOutput, CheckDetectsDamage) {
  namespace fs = std::filesystem;
  fs::path copy = fs::temp_directory_path() / ("lossjit-aot-damage-" + runtime::uniqueSuffix());
  fs::copy(AOT_DIR_f16_mean, copy, fs::copy_options::recursive);
  ASSERT_FALSE(aot::checkAotDirectory(copy.string()));
  JsonValue index = readIndex(copy.string());
  std::string key =
      index.find("ops")->getArray()[0].find("arches")->getArray()[0].find("key")->getString();
  fs::path ptx = copy / key / "lce_partial.sm_80.ptx";
  auto text = runtime::readFile(ptx.string());
  ASSERT_TRUE(text);
  std::string changed = *text;
  changed[changed.size() / 2] ^= 1;
  ASSERT_FALSE(runtime::writeFile(ptx.string(), changed));
  runtime::Error e = aot::checkAotDirectory(copy.string());
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("lce_partial.sm_80.ptx"), std::string::npos) << e.message();
  ASSERT_FALSE(runtime::writeFile(ptx.string(), *text));
  ASSERT_FALSE(aot::checkAotDirectory(copy.string()));
  fs::remove(copy / "aot_f16_mean.h");
  e = aot::checkAotDirectory(copy.string());
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("c_api.header"), std::string::npos) << e.message();
  fs::remove_all(copy);
}

TEST(FormulaToC, TranslatesTheManifestGrammar) {
  std::vector<std::string> symbols = {"N", "V", "D", "S"};
  auto c = aot::formulaToC("cdiv(N,4)*S", symbols);
  ASSERT_TRUE(c) << c.errorMessage();
  EXPECT_EQ(*c, "aot_mul(e, aot_cdiv(e, s[0], INT64_C(4)), s[3])");
  c = aot::formulaToC(" -(N - 1) / 2 + max(V, min(D,3)) ", symbols);
  ASSERT_TRUE(c) << c.errorMessage();
  EXPECT_EQ(*c, "aot_add(e, aot_fdiv(e, aot_neg(e, (aot_sub(e, s[0], INT64_C(1)))), "
                "INT64_C(2)), aot_max(e, s[1], aot_min(e, s[2], INT64_C(3))))");
  EXPECT_EQ(*aot::formulaToC("7", symbols), "INT64_C(7)");
  EXPECT_EQ(*aot::formulaToC("+S", symbols), "s[3]");
  for (const char *bad : {"", "N +", "cdiv(N)", "Q*2", "N $ 2", "(N", "99999999999999999999"}) {
    auto r = aot::formulaToC(bad, symbols);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.errorMessage().find("formula '"), std::string::npos);
    }
  }
}

TEST(PtxSignature, ReadsEntryParameters) {
  std::string ptx = ".version 8.0\n.target sm_80\n"
                    ".visible .entry other_kernel(\n\t.param .u32 a\n)\n{ ret; }\n"
                    ".visible .entry k(\n"
                    "\t.param .u64 .ptr .global .align 16 k_param_0,\n"
                    "\t.param .u64 k_param_1,\n"
                    "\t.param .b32 k_param_2\n)\n{ ret; }\n"
                    ".visible .entry noargs\n{ ret; }\n";
  auto params = aot::parsePtxEntryParams(ptx, "k");
  ASSERT_TRUE(params) << params.errorMessage();
  ASSERT_EQ(params->size(), 3u);
  EXPECT_EQ((*params)[0].type, "u64");
  EXPECT_TRUE((*params)[0].isPointer);
  EXPECT_EQ((*params)[0].align, 16);
  EXPECT_EQ((*params)[2].type, "b32");
  EXPECT_EQ(aot::parsePtxEntryParams(ptx, "other_kernel")->size(), 1u);
  EXPECT_TRUE(aot::parsePtxEntryParams(ptx, "noargs")->empty());
  EXPECT_FALSE(aot::parsePtxEntryParams(ptx, "missing"));

  // The ABI check: one u64 per scalar, five per buffer.
  runtime::KernelBundle b;
  b.dims = {"N"};
  b.params = {{"x", "buffer", "f32", {"N"}}};
  b.kernels.push_back({});
  b.kernels[0].name = "k";
  b.kernels[0].args = {"x", "N"};
  runtime::Error e = aot::checkPtxAbi(b, 0, ptx);
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("takes 3 parameters, the launch plan passes 6"), std::string::npos)
      << e.message();
}

TEST(CubinCompiler, NamesTheChoices) {
  auto bad = aot::CubinCompiler::create("nvcc");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.errorMessage().find("auto, nvjitlink or ptxas"), std::string::npos);
}

// nvJitLink, once opened, stays loaded after its compiler is destroyed: it
// links its own libstdc++, whose exception pool unloading would leak
// (LeakSanitizer, in the sanitizer build generating the f16_cubin bundle).
TEST(CubinCompiler, NvJitLinkStaysLoadedAfterUse) {
  std::string path;
  {
    auto compiler = aot::CubinCompiler::create("nvjitlink");
    if (!compiler)
      GTEST_SKIP() << compiler.errorMessage();
    std::string described = (*compiler)->describe(); // "nvJitLink 13.0 (<path>)"
    size_t open = described.rfind('('), close = described.rfind(')');
    ASSERT_NE(open, std::string::npos) << described;
    ASSERT_NE(close, std::string::npos) << described;
    path = described.substr(open + 1, close - open - 1);
  }
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr) << path << " was unloaded";
  if (handle)
    ::dlclose(handle);
}

} // namespace
