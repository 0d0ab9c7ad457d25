//===- ToolInputTest.cpp - Bounded graph input and nesting checks ---------===//

#include "tools/support/ToolInput.h"

#include "runtime/FileUtil.h"
#include "runtime/NestingLimit.h"

#include <gtest/gtest.h>

#include <csignal>
#include <sys/stat.h>
#include <unistd.h>

using namespace lossjit;

TEST(NestingLimit, CountsBracketsNotStringsArrowsOrComments) {
  EXPECT_EQ(runtime::bracketNesting("module { func.func @f(%a: tensor<?xf32>) -> () { } }"), 3u);
  EXPECT_EQ(runtime::bracketNesting("x = \"((((((\" // [[[[[[\n"), 0u);
  EXPECT_EQ(runtime::bracketNesting("affine_set<(d0) : (d0 >= 0, d0 <= 4)>"), 2u);
  EXPECT_EQ(runtime::bracketNesting("\"a\\\"((\" ("), 1u);
  std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_EQ(runtime::bracketNesting(deep), 300u);
  runtime::Error e = runtime::checkNesting("a\n" + deep, 256, "g.mlir");
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(e.message(), "g.mlir: brackets nest deeper than 256 levels at line 2, column 257 "
                         "(the limit keeps the parser's recursion within its stack)");
  EXPECT_FALSE(runtime::checkNesting(deep, 300, "g.mlir"));
}

TEST(ReadGraphInput, BoundsSizeAndNesting) {
  char name[] = "/tmp/lossjit-graph-XXXXXX";
  int fd = ::mkstemp(name);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string path = name;
  ASSERT_FALSE(runtime::writeFile(path, "module {\n}\n"));
  auto ok = readGraphInput(path);
  ASSERT_TRUE(static_cast<bool>(ok)) << llvm::toString(ok.takeError());
  EXPECT_EQ((*ok)->getBuffer(), "module {\n}\n");

  // issue 16: 10,000 nested modules overflowed the parser's stack.
  std::string deep;
  for (int i = 0; i < 10000; ++i)
    deep += "module {\n";
  for (int i = 0; i < 10000; ++i)
    deep += "}\n";
  ASSERT_FALSE(runtime::writeFile(path, deep));
  auto r = readGraphInput(path);
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            path + ": brackets nest deeper than 256 levels at line 257, column 8 (the limit "
                   "keeps the parser's recursion within its stack)");

  // A sparse file over the bound is refused from its size.
  ASSERT_EQ(::truncate(path.c_str(), off_t(kMaxGraphFileBytes) + 1), 0);
  r = readGraphInput(path);
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(llvm::toString(r.takeError()), "cannot read graph '" + path +
                                               "': it holds 268435457 bytes, more than the limit "
                                               "of 268435456");
  ::unlink(path.c_str());

  // A device is cut at the bound.
  r = readGraphInput("/dev/zero");
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            "cannot read graph '/dev/zero': it holds more than the limit of 268435456 bytes");
}

TEST(ToolProcess, IgnoresSigxfszAndChecksMemory) {
  initToolProcess();
  struct sigaction action;
  ASSERT_EQ(::sigaction(SIGXFSZ, nullptr, &action), 0);
  EXPECT_EQ(action.sa_handler, SIG_IGN);
  EXPECT_FALSE(static_cast<bool>(checkHostMemory(1 << 20, "a megabyte")));
  llvm::Error e = checkHostMemory(uint64_t(1) << 62, "--random inputs");
  ASSERT_TRUE(static_cast<bool>(e));
  std::string message = llvm::toString(std::move(e));
  EXPECT_EQ(message.rfind("--random inputs need 4611686018427387904 bytes, more than this "
                          "machine's ",
                          0),
            0u)
      << message;
}
