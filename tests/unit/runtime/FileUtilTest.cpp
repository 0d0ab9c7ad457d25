//===- FileUtilTest.cpp - Bounded reads and bounded lock waits ------------===//

#include "runtime/FileUtil.h"
#include "runtime/FileLock.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sys/stat.h>
#include <unistd.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

TEST(ReadFile, RegularFilesUpToTheBound) {
  TempDir dir;
  std::string path = dir / "f";
  ASSERT_FALSE(writeFile(path, "12345"));
  Expected<std::string> r = readFile(path, 5);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(*r, "12345");
  r = readFile(path, 4);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(),
            "cannot read '" + path + "': it holds 5 bytes, more than the limit of 4 bytes");
  // Symlinks are followed to regular files.
  ASSERT_EQ(::symlink(path.c_str(), (dir / "link").c_str()), 0);
  EXPECT_EQ(*readFile(dir / "link"), "12345");
}

TEST(ReadFile, EverythingElseIsAnErrorAtOnce) {
  TempDir dir;
  auto expectKind = [&](const std::string &path, const std::string &kind) {
    Expected<std::string> r = readFile(path);
    ASSERT_FALSE(r) << path;
    EXPECT_EQ(r.errorMessage(),
              "cannot read '" + path + "': it is " + kind + ", expected a regular file");
  };
  // A FIFO without a writer: opening it for reading would block forever.
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  expectKind(dir / "fifo", "a FIFO");
  expectKind("/dev/zero", "a character device");
  expectKind(dir.path(), "a directory");
  ASSERT_EQ(::symlink("/dev/zero", (dir / "zero").c_str()), 0);
  expectKind(dir / "zero", "a character device");
  Expected<std::string> missing = readFile(dir / "none");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.errorMessage(),
            "cannot open '" + dir / "none" + "': No such file or directory");
}

TEST(FileLock, BoundedWaitReportsAndTimesOut) {
  TempDir dir;
  std::string path = dir / "k.lock";
  Expected<FileLock> held = FileLock::acquire(path);
  ASSERT_TRUE(held) << held.errorMessage();

  LockWait wait;
  wait.timeout = std::chrono::milliseconds(250);
  wait.progressInterval = std::chrono::milliseconds(100);
  int reports = 0;
  wait.onProgress = [&](std::chrono::milliseconds waited) {
    ++reports;
    EXPECT_GE(waited.count(), 100 * reports);
  };
  bool timedOut = false;
  Expected<FileLock> second = FileLock::acquire(path, wait, &timedOut);
  ASSERT_FALSE(second);
  EXPECT_TRUE(timedOut);
  EXPECT_EQ(reports, 2);
  EXPECT_EQ(second.errorMessage().rfind(
                "lock file '" + path + "' is still held by another process after ", 0),
            0u)
      << second.errorMessage();

  held->release();
  Expected<FileLock> third = FileLock::acquire(path, wait, &timedOut);
  EXPECT_TRUE(third) << third.errorMessage();
  EXPECT_FALSE(timedOut);
}

TEST(FileLock, PlantedSymlinkIsRefused) {
  TempDir dir;
  ASSERT_FALSE(writeFile(dir / "victim", "data"));
  ASSERT_EQ(::symlink((dir / "victim").c_str(), (dir / "k.lock").c_str()), 0);
  Expected<FileLock> lock = FileLock::acquire(dir / "k.lock");
  ASSERT_FALSE(lock);
  EXPECT_NE(lock.errorMessage().find("cannot open lock file '" + dir / "k.lock" + "'"),
            std::string::npos);
  EXPECT_EQ(*readFile(dir / "victim"), "data");
}
