//===- EnvironmentTest.cpp - Env parsing and dump helper ------------------===//

#include "runtime/Dump.h"
#include "runtime/Environment.h"
#include "runtime/FileUtil.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

TEST(Environment, ParseByteSize) {
  EXPECT_EQ(*parseByteSize("0"), 0u);
  EXPECT_EQ(*parseByteSize("1234"), 1234u);
  EXPECT_EQ(*parseByteSize("4K"), 4096u);
  EXPECT_EQ(*parseByteSize("2MiB"), 2u << 20);
  EXPECT_EQ(*parseByteSize("1gb"), 1u << 30);
  EXPECT_EQ(*parseByteSize("3T"), uint64_t(3) << 40);
  EXPECT_EQ(*parseByteSize("10B"), 10u);
  for (const char *bad : {"", "-1", "1X", "K", "1KX", "1.5G", "99999999999999999999"}) {
    Expected<uint64_t> v = parseByteSize(bad);
    ASSERT_FALSE(v) << bad;
    EXPECT_NE(v.errorMessage().find("invalid byte size"), std::string::npos);
  }
}

TEST(Environment, SplitPathListAndTruthiness) {
  EXPECT_EQ(splitPathList("a:b::c:"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(splitPathList("").empty());
  EXPECT_TRUE(isTruthy("1"));
  EXPECT_TRUE(isTruthy("TRUE"));
  EXPECT_FALSE(isTruthy("0"));
  EXPECT_FALSE(isTruthy(""));
}

TEST(Environment, DefaultCacheDirectory) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    EXPECT_EQ(defaultCacheDirectory(), "/x/cache/lossjit");
  }
  ScopedEnv noXdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(defaultCacheDirectory(), "/home/u/.cache/lossjit");
}

TEST(Dump, WritesUnderDumpDirOnlyWhenSet) {
  {
    ScopedEnv unset("LOSSJIT_DUMP_DIR", nullptr);
    Expected<std::string> path = dumpArtifact("stage", "a.txt", "x");
    ASSERT_TRUE(path);
    EXPECT_TRUE(path->empty());
  }
  TempDir dir;
  ScopedEnv set("LOSSJIT_DUMP_DIR", dir.path().c_str());
  Expected<std::string> path = dumpArtifact("10-lower", "../../evil name", "text");
  ASSERT_TRUE(path) << path.errorMessage();
  // '/' and ' ' became '_': the name cannot leave the stage directory.
  EXPECT_EQ(*path, dir / "10-lower/.._.._evil_name");
  EXPECT_EQ(*readFile(*path), "text");
}
