//===- MemoryTest.cpp - memref ops, bounds, initialization and races ------===//

#include "TestUtil.h"

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

constexpr auto F32 = ElementType::F32;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(Memory, OutOfBoundsGlobalLoadNamesEverything) {
  std::vector<float> in(8, 1.0f), out(16, 0.0f);
  SimtBuffer inBuf("in", F32, in.data(), 8), outBuf("out", F32, out.data(), 16);
  std::string func = R"(
gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %v = memref.load %in[%t] : memref<?xf32>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})";
  std::string error =
      runKernel(func, {2, 1, 1}, {9, 1, 1},
                {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "out-of-bounds load from 'in' (global memory): "
                              "index [8] outside shape [8] (buffer of 8 "
                              "elements), thread (8,0,0) block (0,0,0), at "
                              "'memref.load' at loc(\"test.mlir\":"))
      << error;
}

TEST(Memory, OutOfBoundsSharedStoreTwoDimensional) {
  std::string func = R"(
gpu.func @k() workgroup(%sm : memref<4x4xf32, #gpu.address_space<workgroup>>) kernel {
  %t = gpu.thread_id x
  %ty = gpu.thread_id y
  %c4 = arith.constant 4 : index
  %one = arith.constant 1.0 : f32
  %col = arith.addi %t, %ty : index
  memref.store %one, %sm[%ty, %col] : memref<4x4xf32, #gpu.address_space<workgroup>>
  gpu.return
})";
  std::string error = runKernel(func, {1, 1, 1}, {4, 2, 1}, {});
  EXPECT_TRUE(contains(error,
                       "out-of-bounds store to 'workgroup attribution #0' "
                       "(shared memory): index [1, 4] outside shape [4, 4] "
                       "(buffer of 16 elements), thread (3,1,0)"))
      << error;
}

TEST(Memory, UninitializedSharedReadIsAnError) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) workgroup(%sm : memref<64xf32, #gpu.address_space<workgroup>>) kernel {
  %t = gpu.thread_id x
  %c32 = arith.constant 32 : index
  %f = arith.constant 2.0 : f32
  memref.store %f, %sm[%t] : memref<64xf32, #gpu.address_space<workgroup>>
  gpu.barrier
  %u = arith.addi %t, %c32 : index
  %v = memref.load %sm[%u] : memref<64xf32, #gpu.address_space<workgroup>>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})";
  std::vector<float> out(32);
  SimtBuffer outBuf("out", F32, out.data(), 32);
  std::string error =
      runKernel(func, {1, 1, 1}, {32, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "read of uninitialized element 32 of 'workgroup "
                              "attribution #0' (shared memory), thread (0,0,0) "
                              "block (0,0,0)"))
      << error;
}

TEST(Memory, SharedMemoryIsFreshPerBlock) {
  // Block 0 writes the shared array; block 1 only reads: uninitialized.
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) workgroup(%sm : memref<4xf32, #gpu.address_space<workgroup>>) kernel {
  %t = gpu.thread_id x
  %b = gpu.block_id x
  %c0 = arith.constant 0 : index
  %first = arith.cmpi eq, %b, %c0 : index
  scf.if %first {
    %f = arith.constant 2.0 : f32
    memref.store %f, %sm[%t] : memref<4xf32, #gpu.address_space<workgroup>>
  }
  %v = memref.load %sm[%t] : memref<4xf32, #gpu.address_space<workgroup>>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})";
  std::vector<float> out(4);
  SimtBuffer outBuf("out", F32, out.data(), 4);
  SimtOptions noRaces;
  noRaces.detectRaces = false; // both blocks write out[t]
  std::string error =
      runKernel(func, {2, 1, 1}, {4, 1, 1}, {SimtArg::buffer(outBuf)}, noRaces);
  EXPECT_TRUE(contains(error, "read of uninitialized element 0") &&
              contains(error, "block (1,0,0)"))
      << error;
}

// --- Dynamic shared memory: views of gpu.dynamic_shared_memory ----------

/// A kernel with two views of dynamic shared memory, f16 at byte 0 and f32
/// at byte `second`: each thread writes both and reads them back.
std::string dynamicSharedKernel(int64_t second, int64_t f32Count = 32) {
  std::string f32View = "memref<" + std::to_string(f32Count) + "xf32, #gpu.address_space<workgroup>>";
  return R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %c0 = arith.constant 0 : index
  %off = arith.constant )" + std::to_string(second) + R"( : index
  %h = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<32xf16, #gpu.address_space<workgroup>>
  %f = memref.view %dyn[%off][] : memref<?xi8, #gpu.address_space<workgroup>> to )" + f32View + R"(
  %t = gpu.thread_id x
  %one = arith.constant 1.5 : f16
  %two = arith.constant 2.0 : f32
  memref.store %one, %h[%t] : memref<32xf16, #gpu.address_space<workgroup>>
  memref.store %two, %f[%t] : )" + f32View + R"(
  gpu.barrier
  %a = memref.load %h[%t] : memref<32xf16, #gpu.address_space<workgroup>>
  %b = memref.load %f[%t] : )" + f32View + R"(
  %a32 = arith.extf %a : f16 to f32
  %s = arith.addf %a32, %b : f32
  memref.store %s, %out[%t] : memref<?xf32>
  gpu.return
})";
}

TEST(Memory, DynamicSharedViewsAreSeparateBuffers) {
  std::vector<float> out(32, 0.0f);
  SimtBuffer outBuf("out", F32, out.data(), 32);
  SimtOptions launch;
  launch.dynamicSharedBytes = 64 + 128; // f16 [0, 64), f32 [64, 192)
  EXPECT_EQ(runKernel(dynamicSharedKernel(64), {1, 1, 1}, {32, 1, 1}, {SimtArg::buffer(outBuf)},
                      launch),
            "");
  for (float v : out)
    EXPECT_EQ(v, 3.5f);
}

TEST(Memory, DynamicSharedViewPastTheLaunchBytesIsAnError) {
  std::vector<float> out(32, 0.0f);
  SimtBuffer outBuf("out", F32, out.data(), 32);
  SimtOptions launch;
  launch.dynamicSharedBytes = 128; // the f32 view needs up to byte 192
  std::string error = runKernel(dynamicSharedKernel(64), {1, 1, 1}, {32, 1, 1},
                                {SimtArg::buffer(outBuf)}, launch);
  EXPECT_TRUE(contains(error, "views dynamic shared memory [64, 192) but the launch gives 128 "
                              "bytes of dynamic shared memory"))
      << error;
}

TEST(Memory, OverlappingDynamicSharedViewsAreRefused) {
  std::vector<float> out(32, 0.0f);
  SimtBuffer outBuf("out", F32, out.data(), 32);
  SimtOptions launch;
  launch.dynamicSharedBytes = 4096;
  std::string error = runKernel(dynamicSharedKernel(32), {1, 1, 1}, {32, 1, 1},
                                {SimtArg::buffer(outBuf)}, launch);
  EXPECT_TRUE(contains(error, "overlap of dynamic shared views [0, 64) and [32, 160)")) << error;
}

TEST(Memory, DynamicSharedViewIsAsAlignedAsItsOffset) {
  // A view at byte 68 of the 16-byte aligned base is only 4-byte aligned: a
  // 16-byte cp.async into it faults, as on hardware.
  std::string func = R"(
gpu.func @k(%g: memref<?xf32>) kernel {
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %c0 = arith.constant 0 : index
  %c68 = arith.constant 68 : index
  %sm = memref.view %dyn[%c68][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<8xf32, #gpu.address_space<workgroup>>
  %t1 = nvgpu.device_async_copy %g[%c0], %sm[%c0], 4 : memref<?xf32> to memref<8xf32, #gpu.address_space<workgroup>>
  gpu.return
})";
  std::vector<float> g(8, 1.0f);
  SimtBuffer gBuf("g", F32, g.data(), 8);
  SimtOptions launch;
  launch.dynamicSharedBytes = 128;
  std::string error = runKernel(func, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(gBuf)}, launch);
  EXPECT_TRUE(contains(error, "whose start is only 4-byte aligned")) << error;
}

TEST(Memory, OtherUsesOfTheDynamicBaseAreUnsupported) {
  std::string func = R"(
gpu.func @k(%out: memref<?xi8>) kernel {
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %c0 = arith.constant 0 : index
  %v = memref.load %dyn[%c0] : memref<?xi8, #gpu.address_space<workgroup>>
  memref.store %v, %out[%c0] : memref<?xi8>
  gpu.return
})";
  std::vector<uint8_t> out(1, 0);
  SimtBuffer outBuf("out", ElementType::I8, out.data(), 1);
  std::string error = runKernel(func, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "use of gpu.dynamic_shared_memory (only memref.view at a constant "
                              "byte offset to a static shape)"))
      << error;
}

TEST(Memory, WorkspaceInitializationPersistsAcrossLaunches) {
  auto module = parseModule(kernelModule(R"(
gpu.func @write(%ws: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %f = arith.constant 3.0 : f32
  memref.store %f, %ws[%t] : memref<?xf32>
  gpu.return
}
gpu.func @read(%ws: memref<?xf32>, %out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %v = memref.load %ws[%t] : memref<?xf32>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})"));
  ASSERT_TRUE(module);
  auto write = SimtKernel::decode(*lookupKernel(*module, "m", "write"));
  auto read = SimtKernel::decode(*lookupKernel(*module, "m", "read"));
  ASSERT_TRUE(write && read);
  SimtBuffer ws("ws", F32, 8); // owned: uninitialized
  std::vector<float> out(8);
  SimtBuffer outBuf("out", F32, out.data(), 8);
  std::string error = errorText((*read)->launch(
      {1, 1, 1}, {8, 1, 1}, {SimtArg::buffer(ws), SimtArg::buffer(outBuf)}));
  EXPECT_TRUE(contains(
      error, "read of uninitialized element 0 of 'ws' (global memory)"))
      << error;
  ASSERT_EQ("", errorText((*write)->launch({1, 1, 1}, {6, 1, 1},
                                           {SimtArg::buffer(ws)})));
  error = errorText((*read)->launch(
      {1, 1, 1}, {8, 1, 1}, {SimtArg::buffer(ws), SimtArg::buffer(outBuf)}));
  EXPECT_TRUE(contains(error, "read of uninitialized element 6 of 'ws'"))
      << error;
  ASSERT_EQ("", errorText((*read)->launch(
                    {1, 1, 1}, {6, 1, 1},
                    {SimtArg::buffer(ws), SimtArg::buffer(outBuf)})));
  EXPECT_EQ(out[5], 3.0f);
}

const char *kNeighbourExchange = R"(
gpu.func @k(%out: memref<?xf32>) workgroup(%sm : memref<64xf32, #gpu.address_space<workgroup>>) kernel {
  %t = gpu.thread_id x
  %c1 = arith.constant 1 : index
  %ti = arith.index_cast %t : index to i32
  %f = arith.sitofp %ti : i32 to f32
  memref.store %f, %sm[%t] : memref<64xf32, #gpu.address_space<workgroup>>
  BARRIER
  %n = arith.xori %t, %c1 : index
  %v = memref.load %sm[%n] : memref<64xf32, #gpu.address_space<workgroup>>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})";

std::string withBarrier(const char *text, const std::string &barrier) {
  std::string s = text;
  s.replace(s.find("BARRIER"), 7, barrier);
  return s;
}

TEST(Memory, BarrierOrdersSharedAccesses) {
  std::vector<float> out(64);
  SimtBuffer outBuf("out", F32, out.data(), 64);
  ASSERT_EQ("", runKernel(withBarrier(kNeighbourExchange, "gpu.barrier"),
                          {1, 1, 1}, {64, 1, 1}, {SimtArg::buffer(outBuf)}));
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(out[size_t(t)], float(t ^ 1));
}

TEST(Memory, MissingBarrierIsADataRace) {
  std::vector<float> out(64);
  SimtBuffer outBuf("out", F32, out.data(), 64);
  std::string error = runKernel(withBarrier(kNeighbourExchange, ""), {1, 1, 1},
                                {64, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error,
                       "data race: read of element 1 of 'workgroup "
                       "attribution #0' (shared memory) after a write by "
                       "thread (1,0,0) with no gpu.barrier in between, "
                       "thread (0,0,0)"))
      << error;
  SimtOptions noRaces;
  noRaces.detectRaces = false;
  EXPECT_EQ("", runKernel(withBarrier(kNeighbourExchange, ""), {1, 1, 1},
                          {64, 1, 1}, {SimtArg::buffer(outBuf)}, noRaces));
}

TEST(Memory, WriteAfterReadRace) {
  // Every thread reads its neighbour's slot, then overwrites its own: thread
  // 1's write races with thread 0's read.
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) workgroup(%sm : memref<8xf32, #gpu.address_space<workgroup>>) kernel {
  %t = gpu.thread_id x
  %c1 = arith.constant 1 : index
  %f = arith.constant 1.0 : f32
  memref.store %f, %sm[%t] : memref<8xf32, #gpu.address_space<workgroup>>
  gpu.barrier
  %n = arith.xori %t, %c1 : index
  %v = memref.load %sm[%n] : memref<8xf32, #gpu.address_space<workgroup>>
  memref.store %v, %sm[%t] : memref<8xf32, #gpu.address_space<workgroup>>
  gpu.return
})";
  std::vector<float> out(8);
  SimtBuffer outBuf("out", F32, out.data(), 8);
  std::string error =
      runKernel(func, {1, 1, 1}, {8, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "data race: write of element 0") &&
              contains(error, "after a read by thread (1,0,0)"))
      << error;
}

TEST(Memory, GlobalWritesFromTwoBlocksRace) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  %t = gpu.thread_id x
  %is0 = arith.cmpi eq, %t, %c0 : index
  scf.if %is0 {
    memref.store %f, %out[%c0] : memref<?xf32>
  }
  gpu.return
})";
  std::vector<float> out(1);
  SimtBuffer outBuf("out", F32, out.data(), 1);
  std::string error =
      runKernel(func, {2, 1, 1}, {4, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error,
                       "data race: write of element 0 of 'out' (global "
                       "memory) after a write by thread (0,0,0) of block "
                       "(0,0,0), thread (0,0,0) block (1,0,0)"))
      << error;
}

TEST(Memory, BarrierUnderDivergenceIsAnError) {
  std::string func = R"(
gpu.func @k() kernel {
  %t = gpu.thread_id x
  %c16 = arith.constant 16 : index
  %lt = arith.cmpi ult, %t, %c16 : index
  scf.if %lt {
    gpu.barrier
  }
  gpu.return
})";
  std::string error = runKernel(func, {1, 1, 1}, {64, 1, 1}, {});
  EXPECT_TRUE(contains(error, "gpu.barrier reached by 16 of the 64 threads of "
                              "the block (barrier in divergent control flow)"))
      << error;
  // The same barrier is fine when every thread takes the branch.
  EXPECT_EQ("", runKernel(func, {1, 1, 1}, {16, 1, 1}, {}));
}

TEST(Memory, BarrierInLoopWithDivergentTripCount) {
  std::string func = R"(
gpu.func @k() kernel {
  %t = gpu.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %t step %c1 {
    gpu.barrier
  }
  gpu.return
})";
  std::string error = runKernel(func, {1, 1, 1}, {4, 1, 1}, {});
  EXPECT_TRUE(contains(error, "gpu.barrier reached by 3 of the 4 threads"))
      << error;
}

TEST(Memory, PrivateAllocaSubviewAndDim) {
  std::string func = R"(
gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %a = memref.alloca() : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %j = arith.addi %t, %i : index
    %v = memref.load %in[%j] : memref<?xf32>
    memref.store %v, %a[%i] : memref<4xf32>
  }
  %sv = memref.subview %in[%t] [%c4] [2] : memref<?xf32> to memref<?xf32, strided<[2], offset: ?>>
  %n = memref.dim %sv, %c0 : memref<?xf32, strided<[2], offset: ?>>
  %x = memref.load %sv[%c1] : memref<?xf32, strided<[2], offset: ?>>
  %y = memref.load %a[%c2] : memref<4xf32>
  %s = arith.addf %x, %y : f32
  %ni = arith.index_cast %n : index to i32
  %nf = arith.sitofp %ni : i32 to f32
  %r = arith.addf %s, %nf : f32
  memref.store %r, %out[%t] : memref<?xf32>
  gpu.return
})";
  std::vector<float> in(16), out(4);
  for (int i = 0; i < 16; ++i)
    in[size_t(i)] = float(i * 10);
  SimtBuffer inBuf("in", F32, in.data(), 16), outBuf("out", F32, out.data(), 4);
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {4, 1, 1},
                          {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf)}));
  for (int t = 0; t < 4; ++t) // in[t + 2] (subview element 1) + in[t + 2] + 4
    EXPECT_EQ(out[size_t(t)], float((t + 2) * 10 * 2 + 4)) << t;
}

TEST(Memory, SubviewBoundsAndUninitializedAlloca) {
  std::string func = R"(
gpu.func @k(%in: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %c4 = arith.constant 4 : index
  %sv = memref.subview %in[%t] [%c4] [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
  gpu.return
})";
  std::vector<float> in(6);
  SimtBuffer inBuf("in", F32, in.data(), 6);
  std::string error =
      runKernel(func, {1, 1, 1}, {4, 1, 1}, {SimtArg::buffer(inBuf)});
  EXPECT_TRUE(contains(error,
                       "out-of-bounds subview of 'in': dimension 0 offset 3 "
                       "size 4 stride 1 exceeds size 6, thread (3,0,0)"))
      << error;
  std::string uninit = R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %c1 = arith.constant 1 : index
  %a = memref.alloca() : memref<2xf32>
  %v = memref.load %a[%c1] : memref<2xf32>
  memref.store %v, %out[%c1] : memref<?xf32>
  gpu.return
})";
  std::vector<float> out(2);
  SimtBuffer outBuf("out", F32, out.data(), 2);
  error = runKernel(uninit, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error,
                       "read of uninitialized element 1 of 'memref.alloca at "
                       "loc(\"test.mlir\":") &&
              contains(error, "(private memory)"))
      << error;
}

TEST(Memory, CastAndAssumeAlignment) {
  std::string func = R"(
gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %s = memref.cast %in : memref<?xf32> to memref<8xf32>
  %a = memref.assume_alignment %s, 16 : memref<8xf32>
  %v = memref.load %a[%t] : memref<8xf32>
  %d = memref.cast %out : memref<?xf32> to memref<8xf32>
  memref.store %v, %d[%t] : memref<8xf32>
  gpu.return
})";
  std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8}, out(8);
  SimtBuffer inBuf("in", F32, in.data(), 8), outBuf("out", F32, out.data(), 8);
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {8, 1, 1},
                          {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf)}));
  EXPECT_EQ(in, out);
}

TEST(Memory, MultiDimensionalArgumentsAndTypeChecks) {
  std::string func = R"(
gpu.func @k(%m: memref<?x?xf32>, %out: memref<3xf32>) kernel {
  %t = gpu.thread_id x
  %c1 = arith.constant 1 : index
  %v = memref.load %m[%t, %c1] : memref<?x?xf32>
  memref.store %v, %out[%t] : memref<3xf32>
  gpu.return
})";
  std::vector<float> m(12), out(3);
  for (int i = 0; i < 12; ++i)
    m[size_t(i)] = float(i);
  SimtBuffer mBuf("m", F32, m.data(), 12), outBuf("out", F32, out.data(), 3);
  ASSERT_EQ(
      "", runKernel(func, {1, 1, 1}, {3, 1, 1},
                    {SimtArg::buffer(mBuf, {3, 4}), SimtArg::buffer(outBuf)}));
  EXPECT_EQ(out, (std::vector<float>{1, 5, 9}));
  std::string error =
      runKernel(func, {1, 1, 1}, {3, 1, 1},
                {SimtArg::buffer(mBuf), SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "dynamic rank-2 memref needs an explicit shape"))
      << error;
  std::vector<int32_t> wrong(3);
  SimtBuffer wrongBuf("wrong", ElementType::I32, wrong.data(), 3);
  error = runKernel(func, {1, 1, 1}, {3, 1, 1},
                    {SimtArg::buffer(mBuf, {3, 4}), SimtArg::buffer(wrongBuf)});
  EXPECT_TRUE(
      contains(error, "buffer 'wrong' holds i32 but the kernel expects f32"))
      << error;
  error = runKernel(func, {1, 1, 1}, {3, 1, 1},
                    {SimtArg::buffer(mBuf, {4, 4}), SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "shape spans 16 elements but buffer 'm' has 12"))
      << error;
}

TEST(Memory, TypedGlobalBuffers) {
  // Round trip of every storage type through load/store.
  for (const char *type :
       {"f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "index"}) {
    ElementType et = *parseElementType(type);
    std::string t = type;
    std::string func =
        "gpu.func @k(%in: memref<?x" + t + ">, %out: memref<?x" + t +
        ">) kernel {\n  %i = gpu.thread_id x\n  %v = memref.load %in[%i] "
        ": memref<?x" +
        t + ">\n  memref.store %v, %out[%i] : memref<?x" + t +
        ">\n  gpu.return\n}";
    std::vector<uint8_t> in(32), out(32, 0);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = uint8_t(i * 37 + 1);
    if (et == ElementType::I1)
      for (auto &b : in)
        b &= 1;
    int64_t n = 32 / getElementSize(et);
    if (et == ElementType::F16 || et == ElementType::BF16)
      for (size_t i = 1; i < in.size(); i += 2)
        in[i] &= 0x3f; // finite values (NaN payloads need not round-trip)
    if (et == ElementType::F32)
      for (size_t i = 3; i < in.size(); i += 4)
        in[i] &= 0x3f;
    if (et == ElementType::F64)
      for (size_t i = 7; i < in.size(); i += 8)
        in[i] &= 0x3f;
    SimtBuffer inBuf("in", et, in.data(), n), outBuf("out", et, out.data(), n);
    ASSERT_EQ("", runKernel(func, {1, 1, 1}, {n, 1, 1},
                            {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf)}))
        << type;
    EXPECT_EQ(in, out) << type;
  }
}

TEST(Memory, ScalarArguments) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>, %n: index, %s: f32, %k: i32) kernel {
  %t = gpu.thread_id x
  %lt = arith.cmpi ult, %t, %n : index
  scf.if %lt {
    %kf = arith.sitofp %k : i32 to f32
    %v = arith.addf %s, %kf : f32
    memref.store %v, %out[%t] : memref<?xf32>
  }
  gpu.return
})";
  std::vector<float> out(4, 0);
  SimtBuffer outBuf("out", F32, out.data(), 4);
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {4, 1, 1},
                          {SimtArg::buffer(outBuf), SimtArg::integer(3),
                           SimtArg::real(0.5), SimtArg::integer(-2)}));
  EXPECT_EQ(out, (std::vector<float>{-1.5f, -1.5f, -1.5f, 0}));
  EXPECT_TRUE(
      contains(runKernel(func, {1, 1, 1}, {4, 1, 1}, {SimtArg::buffer(outBuf)}),
               "takes 4 arguments, got 1"));
}

TEST(Memory, KnownBlockSizeIsChecked) {
  std::string func = R"(
gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
  gpu.return
})";
  EXPECT_TRUE(contains(
      runKernel(func, {1, 1, 1}, {64, 1, 1}, {}),
      "launched with block (64,1,1) but known_block_size is (32,1,1)"));
  EXPECT_EQ("", runKernel(func, {1, 1, 1}, {32, 1, 1}, {}));
}

} // namespace
