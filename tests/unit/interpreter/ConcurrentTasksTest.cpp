//===- ConcurrentTasksTest.cpp - warps that wait on each other ------------===//
//
// Hand-written warp-specialized kernels: a producer warp fills a two-stage
// ring in shared memory and a consumer warp drains it, each stage with a
// "full" mbarrier (the producer's 32 threads arrive after their stores) and
// an "empty" one (the consumer's 32 threads arrive after their loads). The
// producer waits on "empty" before it refills a stage, the consumer on
// "full" before it reads one. In lockstep neither side could run to its end
// before the other started; the interpreter runs the two branches as tasks
// (ExecTasks.cpp). Broken protocols must fail: a read after the consumer
// released its stage is a race (vector clocks through the mbarriers), a
// producer that skips "empty" laps the consumer, which then deadlocks. And
// setmaxnreg: warpgroups trade registers through the block's pool, an
// increase waiting for a decrease.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

const char *kBars =
    "!nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>";

/// `nvgpu.mbarrier.try_wait.parity` on barrier `id` (a value name).
std::string waitOn(const std::string &id, const std::string &parity) {
  return std::string("nvgpu.mbarrier.try_wait.parity %bar[") + id + "], " + parity +
         ", %ticks : " + kBars + "\n";
}

/// `%name = nvgpu.mbarrier.arrive` on barrier `id`.
std::string arriveOn(const std::string &name, const std::string &id) {
  return "%" + name + " = nvgpu.mbarrier.arrive %bar[" + id + "] : " + kBars +
         " -> !nvgpu.mbarrier.token\n";
}

/// The ring kernels' start: @k(%in, %out, %n) with a ring of two 32-float
/// stages, the constants 0-3, 32 and %ticks (plus `constants`, lines of
/// MLIR), and the ring's four barriers, made and initialized by thread 0
/// before a block barrier: full 0 and 1 (32 arrivals: the producer warp),
/// empty 0 and 1 (`emptyCount` arrivals, a constant's name). Defines %bar,
/// %t, %lane.
std::string ringPrologue(const std::string &emptyCount, const std::string &constants = "") {
  const std::string bars = kBars;
  return R"(
gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>, %n: index)
    workgroup(%ring: memref<64xf32, #gpu.address_space<workgroup>>) kernel {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c32 = arith.constant 32 : index
  %ticks = arith.constant 1000000 : index
)" + constants +
         "  %bar = nvgpu.mbarrier.create -> " + bars + R"(
  %t = gpu.thread_id x
  %t0 = arith.cmpi eq, %t, %c0 : index
  scf.if %t0 {
    nvgpu.mbarrier.init %bar[%c0], %c32 : )" + bars + R"(
    nvgpu.mbarrier.init %bar[%c1], %c32 : )" + bars + R"(
    nvgpu.mbarrier.init %bar[%c2], )" + emptyCount + " : " + bars + R"(
    nvgpu.mbarrier.init %bar[%c3], )" + emptyCount + " : " + bars + R"(
  }
  gpu.barrier
  %lane = arith.remui %t, %c32 : index
)";
}

struct RingCase {
  bool producerFirst = true;   ///< the producer is the scf.if's first branch
  bool skipEmptyWait = false;  ///< the producer refills without waiting
  bool releaseBeforeRead = false; ///< the consumer arrives on "empty" first
  bool consumerWaitsWrongParity = false;
};

/// The producer warp's loop: tile k of %in into stage k % 2, announced on
/// "full"; from the third tile on it first waits for the consumers'
/// release of the stage's previous use on "empty" (unless `skipEmptyWait`).
std::string producerLoop(bool skipEmptyWait) {
  std::string producer = R"(
    scf.for %k = %c0 to %n step %c1 {
      %s = arith.remui %k, %c2 : index
      %use = arith.divui %k, %c2 : index
      %reuse = arith.cmpi uge, %k, %c2 : index
)";
  if (!skipEmptyWait)
    producer += R"(
      scf.if %reuse {
        %prev = arith.subi %use, %c1 : index
        %pb = arith.remui %prev, %c2 : index
        %par = arith.cmpi ne, %pb, %c0 : index
        %e = arith.addi %s, %c2 : index
        )" + waitOn("%e", "%par") +
                "      }\n";
  return producer + R"(
      %i = arith.muli %k, %c32 : index
      %gi = arith.addi %i, %lane : index
      %v = memref.load %in[%gi] : memref<?xf32>
      %r = arith.muli %s, %c32 : index
      %ri = arith.addi %r, %lane : index
      memref.store %v, %ring[%ri] : memref<64xf32, #gpu.address_space<workgroup>>
      )" + arriveOn("full", "%s") +
         "    }\n";
}

std::string ringKernel(const RingCase &c) {
  auto wait = waitOn;
  auto arrive = arriveOn;
  const std::string producer = producerLoop(c.skipEmptyWait);
  std::string consumer = R"(
    scf.for %k = %c0 to %n step %c1 {
      %s = arith.remui %k, %c2 : index
      %use = arith.divui %k, %c2 : index
      %pb = arith.remui %use, %c2 : index
      %par0 = arith.cmpi ne, %pb, %c0 : index
)" + std::string(c.consumerWaitsWrongParity ? "      %par = arith.xori %par0, %true : i1\n"
                                            : "      %par = arith.ori %par0, %false : i1\n") +
                         "      " + wait("%s", "%par") + R"(
      %e = arith.addi %s, %c2 : index
)";
  if (c.releaseBeforeRead)
    consumer += "      " + arrive("empty", "%e");
  consumer += R"(
      %r = arith.muli %s, %c32 : index
      %ri = arith.addi %r, %lane : index
      %v = memref.load %ring[%ri] : memref<64xf32, #gpu.address_space<workgroup>>
      %w = arith.addf %v, %v : f32
      %bk = arith.addi %bn, %k : index
      %i = arith.muli %bk, %c32 : index
      %gi = arith.addi %i, %lane : index
      memref.store %w, %out[%gi] : memref<?xf32>
)";
  if (!c.releaseBeforeRead)
    consumer += "      " + arrive("empty", "%e");
  consumer += "    }\n";
  return ringPrologue("%c32", "  %true = arith.constant true\n"
                              "  %false = arith.constant false\n") +
         R"(
  %b = gpu.block_id x
  %bn = arith.muli %b, %n : index
  %first = arith.cmpi )" +
         (c.producerFirst ? "ult" : "uge") + R"(, %t, %c32 : index
  scf.if %first {)" +
         (c.producerFirst ? producer : consumer) + "  } else {" +
         (c.producerFirst ? consumer : producer) + R"(  }
  gpu.return
})";
}

struct RingRun {
  std::string error;
  std::vector<float> in, out;
};

RingRun runRing(const RingCase &c, int64_t tiles = 7) {
  RingRun r;
  for (int64_t i = 0; i < tiles * 32; ++i)
    r.in.push_back(float(i % 97) - 40.0f);
  r.out.assign(2 * r.in.size(), -1.0f); // one copy per block
  SimtBuffer in("in", ElementType::F32, r.in.data(), int64_t(r.in.size()));
  SimtBuffer out("out", ElementType::F32, r.out.data(), int64_t(r.out.size()));
  r.error = runKernel(ringKernel(c), {2, 1, 1}, {64, 1, 1},
                      {SimtArg::buffer(in), SimtArg::buffer(out), SimtArg::integer(tiles)});
  return r;
}

TEST(ConcurrentTasks, AProducerAndAConsumerWarpPassStagesThroughMbarriers) {
  for (bool producerFirst : {true, false}) {
    SCOPED_TRACE(producerFirst ? "producer first" : "consumer first");
    RingCase c;
    c.producerFirst = producerFirst;
    for (int64_t tiles : {1, 2, 7}) {
      RingRun r = runRing(c, tiles);
      ASSERT_EQ(r.error, "") << tiles << " tiles";
      for (size_t i = 0; i < r.out.size(); ++i)
        ASSERT_EQ(r.out[i], 2.0f * r.in[i % r.in.size()])
            << "element " << i << " of " << tiles << " tiles";
    }
  }
}

TEST(ConcurrentTasks, AReadAfterTheStageWasReleasedIsARace) {
  RingCase c;
  c.releaseBeforeRead = true;
  std::string error = runRing(c).error;
  EXPECT_NE(error.find("data race: write of element"), std::string::npos) << error;
  EXPECT_NE(error.find("after a read by thread (32,0,0)"), std::string::npos) << error;
}

TEST(ConcurrentTasks, AProducerThatDoesNotWaitForEmptyStagesLapsTheConsumer) {
  // The producer completes both phases of a stage's "full" barrier before
  // the consumer waits for the first: parity 0 is no longer the last
  // completed phase, and the consumer waits for a phase nobody completes.
  RingCase c;
  c.skipEmptyWait = true;
  std::string error = runRing(c).error;
  EXPECT_NE(error.find("deadlock: every thread of the block waits"), std::string::npos) << error;
  EXPECT_NE(error.find("thread (32,0,0) waits for the phase of parity 0 of mbarrier 0"),
            std::string::npos)
      << error;
}

TEST(ConcurrentTasks, ADeadlockNamesEveryWait) {
  RingCase c;
  c.consumerWaitsWrongParity = true;
  std::string error = runRing(c).error;
  EXPECT_NE(error.find("deadlock: every thread of the block waits and nothing can end a wait, "
                       "block (0,0,0)"),
            std::string::npos)
      << error;
  // The producer filled both stages and waits for the consumer to empty
  // stage 0; the consumer waits for parity 1 of "full" stage 0.
  EXPECT_NE(error.find("thread (0,0,0) waits for the phase of parity 0 of mbarrier 2"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("thread (32,0,0) waits for the phase of parity 1 of mbarrier 0"),
            std::string::npos)
      << error;
}

// Two consumer warps under a nested scf.if (the producer warp is the outer
// branch): the consumers' branch defers its second warp too, so the
// scheduler starts a task inside a task, and the nested join waits for it.
// Each stage's "empty" barrier expects both consumer warps (64 arrivals),
// so the producer waits for the second consumer task as well.
std::string nestedRingKernel() {
  auto wait = waitOn;
  auto arrive = arriveOn;
  auto consumer = [&](const std::string &half) {
    return R"(
      scf.for %k = %c0 to %n step %c1 {
        %s = arith.remui %k, %c2 : index
        %use = arith.divui %k, %c2 : index
        %pb = arith.remui %use, %c2 : index
        %par = arith.cmpi ne, %pb, %c0 : index
        )" + wait("%s", "%par") + R"(
        %r = arith.muli %s, %c32 : index
        %ri = arith.addi %r, %lane : index
        %v = memref.load %ring[%ri] : memref<64xf32, #gpu.address_space<workgroup>>
        %w = arith.addf %v, %v : f32
        %row = arith.addi %k, )" + half + R"( : index
        %i = arith.muli %row, %c32 : index
        %gi = arith.addi %i, %lane : index
        memref.store %w, %out[%gi] : memref<?xf32>
        %e = arith.addi %s, %c2 : index
        )" + arrive("empty", "%e") + R"(
      }
)";
  };
  return ringPrologue("%c64", "  %c64 = arith.constant 64 : index\n") + R"(
  %producer = arith.cmpi ult, %t, %c32 : index
  scf.if %producer {)" +
         producerLoop(/*skipEmptyWait=*/false) + R"(
  } else {
    %first = arith.cmpi ult, %t, %c64 : index
    scf.if %first {)" +
         consumer("%c0") + "    } else {" + consumer("%n") + R"(    }
  }
  gpu.return
})";
}

TEST(ConcurrentTasks, ATaskStartsTasksOfItsOwn) {
  for (int64_t tiles : {1, 3, 6}) {
    std::vector<float> in, out(size_t(2 * tiles * 32), -1.0f);
    for (int64_t i = 0; i < tiles * 32; ++i)
      in.push_back(float(i % 89) - 30.0f);
    SimtBuffer inBuf("in", ElementType::F32, in.data(), int64_t(in.size()));
    SimtBuffer outBuf("out", ElementType::F32, out.data(), int64_t(out.size()));
    ASSERT_EQ(runKernel(nestedRingKernel(), {1, 1, 1}, {96, 1, 1},
                        {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf), SimtArg::integer(tiles)}),
              "")
        << tiles << " tiles";
    // Each consumer warp wrote its own copy: rows [0, n) and [n, 2n).
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(out[i], 2.0f * in[i % in.size()]) << "element " << i << " of " << tiles << " tiles";
  }
}

std::string registerKernel(int64_t increase, int64_t decrease, bool limit = true) {
  return std::string(R"(
gpu.func @k(%out: memref<?xf32>) kernel attributes {)") +
         (limit ? "nvvm.maxnreg = 128 : i32" : "") + R"(} {
  %c128 = arith.constant 128 : index
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %t = gpu.thread_id x
  %consumer = arith.cmpi uge, %t, %c128 : index
  scf.if %consumer {
    nvvm.setmaxregister increase )" +
         std::to_string(increase) + R"(
    memref.store %one, %out[%t] : memref<?xf32>
  } else {
    nvvm.setmaxregister decrease )" +
         std::to_string(decrease) + R"(
    memref.store %two, %out[%t] : memref<?xf32>
  }
  gpu.return
})";
}

std::string runRegisters(int64_t increase, int64_t decrease, bool limit = true) {
  std::vector<float> out(256, 0.0f);
  SimtBuffer buf("out", ElementType::F32, out.data(), 256);
  std::string error = runKernel(registerKernel(increase, decrease, limit), {1, 1, 1},
                                {256, 1, 1}, {SimtArg::buffer(buf)});
  if (error.empty())
    for (int t = 0; t < 256; ++t)
      EXPECT_EQ(out[size_t(t)], t < 128 ? 2.0f : 1.0f) << "thread " << t;
  return error;
}

TEST(ConcurrentTasks, AnIncreaseWaitsForTheRegistersAnotherWarpgroupReleases) {
  // 128 → 216 needs 88 · 128 registers: exactly what 128 → 40 releases.
  EXPECT_EQ(runRegisters(216, 40), "");
  std::string error = runRegisters(224, 40);
  EXPECT_NE(error.find("warpgroup 1 waits in setmaxregister increase for 12288 registers; the "
                       "block's pool holds 11264"),
            std::string::npos)
      << error;
  error = runRegisters(216, 160);
  EXPECT_NE(error.find("nvvm.setmaxregister decrease 160 but the warpgroup holds 128 registers "
                       "per thread"),
            std::string::npos)
      << error;
  error = runRegisters(216, 40, /*limit=*/false);
  EXPECT_NE(error.find("nvvm.setmaxregister in a kernel without nvvm.maxnreg"), std::string::npos)
      << error;
}

/// How handbackKernel's producer synchronizes before it takes its
/// registers back.
enum class ProducerSync {
  Handback, ///< waits on named barrier 2 for the consumers' arrival
  Own,      ///< a barrier of its own warpgroup only (bar.sync 3, 128)
  None,     ///< none at all
};

/// Wgmma's tma=3 roles (Wgmma::withRegisters) by hand: the producer
/// warpgroup (threads 0-127) lends 88 registers per thread to the consumer
/// warpgroup and takes them back at the end. The consumers synchronize on
/// barrier 1 between their two setmaxnregs, then arrive (bar.arrive, no
/// wait) on barrier 2 with `arriveCount` threads after their decrease.
std::string handbackKernel(ProducerSync sync, int64_t arriveCount = 256) {
  const char *producerSync =
      sync == ProducerSync::Handback ? "    nvvm.barrier id = %id2 number_of_threads = %n256\n"
      : sync == ProducerSync::Own    ? "    nvvm.barrier id = %id3 number_of_threads = %n128\n"
                                     : "";
  return std::string(R"(
gpu.func @k(%out: memref<?xf32>) kernel attributes {nvvm.maxnreg = 128 : i32} {
  %c128 = arith.constant 128 : index
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %id1 = arith.constant 1 : i32
  %id2 = arith.constant 2 : i32
  %id3 = arith.constant 3 : i32
  %n128 = arith.constant 128 : i32
  %n256 = arith.constant 256 : i32
  %arrivals = arith.constant )") +
         std::to_string(arriveCount) + R"( : i32
  %t = gpu.thread_id x
  %consumer = arith.cmpi uge, %t, %c128 : index
  scf.if %consumer {
    nvvm.setmaxregister increase 216
    memref.store %one, %out[%t] : memref<?xf32>
    nvvm.barrier id = %id1 number_of_threads = %n128
    nvvm.setmaxregister decrease 128
    nvvm.barrier.arrive id = %id2 number_of_threads = %arrivals
  } else {
    nvvm.setmaxregister decrease 40
    memref.store %two, %out[%t] : memref<?xf32>
)" + producerSync +
         R"(    nvvm.setmaxregister increase 128
  }
  gpu.return
})";
}

/// handbackKernel on 256 threads: "" or the error; on success every thread
/// wrote its role's value.
std::string runHandback(ProducerSync sync, int64_t arriveCount = 256) {
  std::vector<float> out(256, 0.0f);
  SimtBuffer buf("out", ElementType::F32, out.data(), 256);
  std::string error =
      runKernel(handbackKernel(sync, arriveCount), {1, 1, 1}, {256, 1, 1}, {SimtArg::buffer(buf)});
  if (error.empty())
    for (int t = 0; t < 256; ++t)
      EXPECT_EQ(out[size_t(t)], t < 128 ? 2.0f : 1.0f) << "thread " << t;
  return error;
}

TEST(ConcurrentTasks, TheProducerTakesItsRegistersBackAfterTheConsumersGaveThem) {
  EXPECT_EQ(runHandback(ProducerSync::Handback), "");
  // Synchronized only among itself, the producer runs first to its end and
  // takes back what it released: the consumers' increase finds the pool
  // empty and waits forever (a deadlock on the GPU too).
  std::string error = runHandback(ProducerSync::Own);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("warpgroup 1 waits in setmaxregister increase"), std::string::npos) << error;
  // No barrier between its two setmaxnregs at all.
  error = runHandback(ProducerSync::None);
  EXPECT_NE(error.find("nvvm.setmaxregister: warpgroup 0 set its registers before and passed "
                       "no barrier of all its threads since"),
            std::string::npos)
      << error;
  // A bar.arrive that counts other threads than the waiting bar.sync.
  error = runHandback(ProducerSync::Handback, 224);
  EXPECT_NE(error.find("nvvm.barrier.arrive 2 for 224 threads while its phase counts 256"),
            std::string::npos)
      << error;
}

TEST(ConcurrentTasks, NamedBarriersCheckTheirThreads) {
  auto run = [](const std::string &body) {
    std::vector<float> out(256, 0.0f);
    SimtBuffer buf("out", ElementType::F32, out.data(), 256);
    return runKernel(R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %c64 = arith.constant 64 : index
  %id0 = arith.constant 0 : i32
  %id3 = arith.constant 3 : i32
  %n64 = arith.constant 64 : i32
  %n96 = arith.constant 96 : i32
  %n128 = arith.constant 128 : i32
  %t = gpu.thread_id x
  %low = arith.cmpi ult, %t, %c64 : index
)" + body + R"(
  gpu.return
})",
                     {1, 1, 1}, {128, 1, 1}, {SimtArg::buffer(buf)});
  };
  // All 128 threads on barrier 3: fine; half of them with a count of 64.
  EXPECT_EQ(run("  nvvm.barrier id = %id3 number_of_threads = %n128\n"), "");
  EXPECT_EQ(run("  scf.if %low {\n    nvvm.barrier id = %id3 number_of_threads = %n64\n  }\n"), "");
  std::string error = run("  nvvm.barrier id = %id0 number_of_threads = %n128\n");
  EXPECT_NE(error.find("nvvm.barrier id must be in [1, 15]"), std::string::npos) << error;
  error = run("  nvvm.barrier id = %id3 number_of_threads = %n96\n");
  EXPECT_NE(error.find("nvvm.barrier 3: 128 threads arrive in a phase of 96"), std::string::npos)
      << error;
  // Arrivals that never complete a phase, and a wait nobody completes.
  error =
      run("  scf.if %low {\n    nvvm.barrier.arrive id = %id3 number_of_threads = %n128\n  }\n");
  EXPECT_NE(error.find("named barrier 3: 64 of its 128 threads arrived and the block ended"),
            std::string::npos)
      << error;
  error = run("  scf.if %low {\n    nvvm.barrier id = %id3 number_of_threads = %n128\n  }\n");
  EXPECT_NE(error.find("waits in nvvm.barrier 3 for 128 threads; 64 arrived"), std::string::npos)
      << error;
  // A named barrier orders the accesses of its threads (vector clocks, in a
  // kernel without mbarriers too): threads 0-63 write what 64-127 read.
  auto handOver = [](const char *between) {
    return std::string(R"(  %one = arith.constant 1.0 : f32
  scf.if %low {
    %i = arith.addi %t, %c64 : index
    memref.store %one, %out[%i] : memref<?xf32>
  }
)") + between +
           R"(  scf.if %low {
  } else {
    %v = memref.load %out[%t] : memref<?xf32>
  }
)";
  };
  EXPECT_EQ(run(handOver("  nvvm.barrier id = %id3 number_of_threads = %n128\n")), "");
  error = run(handOver(""));
  EXPECT_NE(error.find("data race"), std::string::npos) << error;
}

} // namespace
