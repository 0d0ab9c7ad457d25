//===- ClusterOpsTest.cpp - thread-block clusters in the interpreter ------===//
//
// Hand-written cluster kernels. The main one is the protocol a multicast
// TMA ring uses between the two blocks of a cluster: each block's first
// thread initializes a "full" mbarrier (its own arrive.expect_tx) and an
// "empty" one (one arrival per block of the cluster), the cluster barrier
// makes the inits visible, then per round each block copies its half of a
// 16 × 64 bf16 tile into both blocks (multicast), every thread waits for
// the whole tile, copies it out, and the block releases the stage to both
// producers with an arrival on each block's "empty" mbarrier (nvvm.mapa);
// a producer waits for both releases before it overwrites the stage. A
// final cluster barrier keeps a block alive while its peer may still
// write to it. Each sabotage of the protocol is a named error.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

constexpr int64_t kCols = 64, kRows = 64; // bf16, 128-byte rows
constexpr int64_t kClusters = 2, kRounds = 2, kTile = 16 * 64;

const char *kBars =
    "!nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>";
const char *kMap = "!nvgpu.tensormap.descriptor<tensor = memref<8x64xbf16, 3>, swizzle = none, "
                   "l2promo = none, oob = zero, interleave = none>";
const char *kView = "memref<16x64xbf16, #gpu.address_space<workgroup>>";
const char *kHalf = "memref<8x64xbf16, strided<[64, 1], offset: ?>, #gpu.address_space<workgroup>>";

struct Protocol {
  int64_t mask = 3;           ///< the multicast mask of every load
  int64_t txBytes = 2 * 1024; ///< what each producer expects per round
  bool initSync = true;       ///< a cluster barrier after the inits
  bool endSync = true;        ///< a cluster barrier before the end
  bool waitEmpty = true;      ///< producers wait for both releases
  bool releasePeer = true;    ///< blocks release their peer's producer too
  bool fence = true;          ///< nvvm.fence.mbarrier.init after the inits
  bool relaxed = false;       ///< the first cluster arrival is relaxed
  bool initLate = false;      ///< the inits between that arrival and its wait
  bool readPeerOnly = false;  ///< no full wait; read only the peer's half
};

std::string multicastKernel() {
  const std::string bars = kBars, map = kMap, view = kView, half = kHalf;
  const std::string inits = R"(
    nvgpu.mbarrier.init %bar[%c0], %c1 : )" + bars + R"(
    nvgpu.mbarrier.init %bar[%c1], %c2 : )" + bars + R"(
    scf.if %fence {
      nvvm.fence.mbarrier.init
    })";
  return R"(
gpu.func @k(%tm: !llvm.ptr {llvm.align = 64 : i64}, %out: memref<?xf32>, %mask: i16, %tx: index,
            %initSync: i1, %endSync: i1, %waitEmpty: i1, %releasePeer: i1, %fence: i1,
            %relaxed: i1, %initLate: i1, %readPeerOnly: i1)
    kernel attributes {loss.tensor_maps = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c1024 = arith.constant 1024 : index
  %ticks = arith.constant 1000000 : index
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %off = arith.constant 1008 : index
  %v = memref.view %dyn[%off][] : memref<?xi8, #gpu.address_space<workgroup>> to )" +
         view + R"(
  %desc = builtin.unrealized_conversion_cast %tm : !llvm.ptr to )" +
         map + R"(
  %bar = nvgpu.mbarrier.create -> )" +
         bars + R"(
  %t = gpu.thread_id x
  %b = gpu.block_id x
  %rank = gpu.cluster_block_id x
  %cid = gpu.cluster_id x
  %t0 = arith.cmpi eq, %t, %c0 : index
  %true = arith.constant true
  %initEarly = arith.xori %initLate, %true : i1
  %t0Early = arith.andi %t0, %initEarly : i1
  %t0Late = arith.andi %t0, %initLate : i1
  scf.if %t0Early {)" + inits + R"(
  }
  scf.if %initSync {
    scf.if %relaxed {
      nvvm.cluster.arrive.relaxed
    } else {
      nvvm.cluster.arrive
    }
    scf.if %t0Late {)" + inits + R"(
    }
    nvvm.cluster.wait
  }
  %r0 = arith.muli %rank, %c8 : index
  %tileRow = arith.muli %cid, %c32 : index
  scf.for %round = %c0 to %c2 step %c1 {
    %roundBit = arith.index_cast %round : index to i1
    scf.if %t0 {
      %later = arith.cmpi ugt, %round, %c0 : index
      %wait = arith.andi %later, %waitEmpty : i1
      scf.if %wait {
        %false = arith.constant false
        nvgpu.mbarrier.try_wait.parity %bar[%c1], %false, %ticks : )" +
         bars + R"(
      }
      nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %tx : )" +
         bars + R"(
      %roundRow = arith.muli %round, %c16 : index
      %y1 = arith.addi %tileRow, %roundRow : index
      %y = arith.addi %y1, %r0 : index
      %dst = memref.subview %v[%r0, 0] [8, 64] [1, 1] : )" +
         view + " to " + half + R"(
      nvgpu.tma.async.load %desc[%c0, %y], %bar[%c0] to %dst multicast_mask = %mask : )" +
         map + ", " + bars + " -> " + half + R"(
    }
    %waitFull = arith.xori %readPeerOnly, %true : i1
    scf.if %waitFull {
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %roundBit, %ticks : )" +
         bars + R"(
    }
    %b2 = arith.muli %b, %c2 : index
    %slotIndex = arith.addi %b2, %round : index
    %base = arith.muli %slotIndex, %c1024 : index
    scf.for %e = %t to %c1024 step %c128 {
      %r = arith.divui %e, %c64 : index
      %c = arith.remui %e, %c64 : index
      %half = arith.divui %r, %c8 : index
      %mine = arith.cmpi eq, %half, %rank : index
      %skip = arith.andi %mine, %readPeerOnly : i1
      %read = arith.xori %skip, %true : i1
      scf.if %read {
        %x = memref.load %v[%r, %c] : )" +
         view + R"(
        %xf = arith.extf %x : bf16 to f32
        %o = arith.addi %base, %e : index
        memref.store %xf, %out[%o] : memref<?xf32>
      }
    }
    gpu.barrier
    scf.if %t0 {
      %address = nvgpu.mbarrier.get %bar[%c1] : )" +
         bars + R"( -> i64
      %local = llvm.inttoptr %address : i64 to !llvm.ptr<3>
      %own = arith.index_cast %rank : index to i32
      %mine = nvvm.mapa %local, %own : !llvm.ptr<3> -> !llvm.ptr<7>
      nvvm.mbarrier.arrive %mine {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %peer = arith.xori %own, %one : i32
      %theirs = nvvm.mapa %local, %peer : !llvm.ptr<3> -> !llvm.ptr<7>
      scf.if %releasePeer {
        nvvm.mbarrier.arrive %theirs {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
      } else {
        nvvm.mbarrier.arrive %mine {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
      }
    }
  }
  scf.if %endSync {
    nvvm.cluster.arrive
    nvvm.cluster.wait
  }
  gpu.return
})";
}

struct ProtocolRun {
  std::string error;
  std::vector<float> out, global;
};

ProtocolRun runProtocol(const Protocol &p) {
  ProtocolRun r;
  std::vector<uint16_t> bits(size_t(kCols * kRows));
  for (int64_t row = 0; row < kRows; ++row)
    for (int64_t col = 0; col < kCols; ++col) {
      const float v = float((row * 5 + col * 3) % 97 - 48);
      bits[size_t(row * kCols + col)] = uint16_t(std::bit_cast<uint32_t>(v) >> 16);
      r.global.push_back(v);
    }
  SimtBuffer global("w", ElementType::BF16, bits.data(), int64_t(bits.size()));
  TensorMapDesc map;
  map.type = ElementType::BF16;
  map.rank = 2;
  map.globalDim = {uint64_t(kCols), uint64_t(kRows)};
  map.globalStrides = {uint64_t(kCols * 2)};
  map.boxDim = {64, 8};
  map.swizzle = TmaSwizzle::None;
  map.oobFill = TmaOobFill::Zero;
  const int64_t blocks = 2 * kClusters;
  r.out.assign(size_t(blocks * kRounds * kTile), -1000.0f);
  SimtBuffer out("out", ElementType::F32, r.out.data(), int64_t(r.out.size()));
  SimtOptions options;
  // The view at byte 1008 lies at shared address 2048 (TMA needs 128).
  options.dynamicSharedBytes = 1008 + kTile * 2;
  options.cluster = {2, 1, 1};
  r.error = runKernel(multicastKernel(), {blocks, 1, 1}, {128, 1, 1},
                      {SimtArg::tensorMap(map, global), SimtArg::buffer(out),
                       SimtArg::integer(p.mask), SimtArg::integer(p.txBytes),
                       SimtArg::integer(p.initSync), SimtArg::integer(p.endSync),
                       SimtArg::integer(p.waitEmpty), SimtArg::integer(p.releasePeer),
                       SimtArg::integer(p.fence), SimtArg::integer(p.relaxed),
                       SimtArg::integer(p.initLate), SimtArg::integer(p.readPeerOnly)},
                      options);
  return r;
}

/// Every block saw, in round k, rows 32·(b/2) + 16k … + 15 of the matrix:
/// its own half and its peer's.
void expectDelivered(const ProtocolRun &r) {
  for (int64_t b = 0; b < 2 * kClusters; ++b)
    for (int64_t round = 0; round < kRounds; ++round)
      for (int64_t e = 0; e < kTile; ++e) {
        const int64_t row = 32 * (b / 2) + 16 * round + e / 64, col = e % 64;
        ASSERT_EQ(r.out[size_t((b * kRounds + round) * kTile + e)],
                  r.global[size_t(row * kCols + col)])
            << "block " << b << " round " << round << " element " << e;
      }
}

TEST(ClusterOps, MulticastRingDeliversEveryHalfToBothBlocks) {
  ProtocolRun r = runProtocol(Protocol());
  ASSERT_EQ(r.error, "");
  expectDelivered(r);
  // CUTLASS's start: the fence, then a relaxed arrival (it releases
  // nothing; the fence published the inits); or no fence and a release
  // arrival.
  Protocol relaxed;
  relaxed.relaxed = true;
  r = runProtocol(relaxed);
  ASSERT_EQ(r.error, "");
  expectDelivered(r);
  Protocol unfenced;
  unfenced.fence = false;
  r = runProtocol(unfenced);
  ASSERT_EQ(r.error, "");
  expectDelivered(r);
}

TEST(ClusterOps, ExpectingOnlyTheOwnHalfLeavesThePeersHalfInFlight) {
  Protocol p;
  p.txBytes = 1024;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("TMA copy to it (its mbarrier phase has not completed)"), std::string::npos)
      << error;
}

TEST(ClusterOps, OverwritingAStageThePeerStillReadsIsARace) {
  Protocol p;
  p.waitEmpty = false;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("data race: write of element"), std::string::npos) << error;
  EXPECT_NE(error.find("with no mbarrier phase or cluster barrier ordering them"),
            std::string::npos)
      << error;
}

TEST(ClusterOps, ReleasingOnlyTheOwnProducerDoesNotOrderThePeersWrite) {
  // Both arrivals land on the block's own "empty": its phase completes, but
  // the peer's reads never reach the producer that overwrites them.
  Protocol p;
  p.releasePeer = false;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("data race: write of element"), std::string::npos) << error;
}

TEST(ClusterOps, PeersMbarriersNeedTheirInitPublishedByAClusterBarrier) {
  const char *unpublished = "uses mbarrier 0 of block rank 1 before its mbarrier.init reached "
                            "the cluster";
  // No cluster barrier at all.
  Protocol none;
  none.initSync = false;
  std::string error = runProtocol(none).error;
  EXPECT_NE(error.find(unpublished), std::string::npos) << error;
  // A relaxed arrival without the fence publishes nothing.
  Protocol relaxed;
  relaxed.relaxed = true;
  relaxed.fence = false;
  error = runProtocol(relaxed).error;
  EXPECT_NE(error.find(unpublished), std::string::npos) << error;
  // Inits between the arrival and its wait: that phase does not order
  // them, fenced or not.
  for (bool fence : {true, false}) {
    Protocol late;
    late.initLate = true;
    late.fence = fence;
    error = runProtocol(late).error;
    EXPECT_NE(error.find(unpublished), std::string::npos) << error;
  }
}

TEST(ClusterOps, ReadingThePeersHalfWithoutTheWaitIsARace) {
  // The peer's multicast half lands as a write by this block's arrival on
  // its full barrier: a reader that skipped the wait races with it, though
  // the interpreter's order landed it before the read.
  Protocol p;
  p.readPeerOnly = true;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("data race: read of element 1 of 'dynamic shared memory [1008, 3056) of "
                       "block rank 1' (shared memory) after a peer block's multicast TMA copy, "
                       "landed with the arrival by thread (0,0,0) of block (1,0,0)"),
            std::string::npos)
      << error;
}

TEST(ClusterOps, BlocksMayNotEndWhileAPeerMayStillWriteToThem) {
  Protocol p;
  p.endSync = false;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("end with no cluster barrier after the last access to a peer's shared "
                       "memory"),
            std::string::npos)
      << error;
}

TEST(ClusterOps, MulticastMaskMustNameRanksOfTheCluster) {
  Protocol p;
  p.mask = 5;
  std::string error = runProtocol(p).error;
  EXPECT_NE(error.find("multicast mask 5 must name at least one block and only ranks of the "
                       "cluster of 2"),
            std::string::npos)
      << error;
}

/// Thread 0 of each block writes its ids: block x, y; cluster x, y; rank
/// in the cluster x, y; clusters in the grid x; blocks per cluster y.
std::string idsKernel(const std::string &attrs) {
  return R"(
gpu.func @k(%out: memref<?xi32>) kernel attributes {)" +
         attrs + R"(} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %t = gpu.thread_id x
  %bx = gpu.block_id x
  %by = gpu.block_id y
  %cx = gpu.cluster_id x
  %cy = gpu.cluster_id y
  %rx = gpu.cluster_block_id x
  %ry = gpu.cluster_block_id y
  %nx = gpu.cluster_dim x
  %ny = gpu.cluster_dim_blocks y
  %lanes = gpu.num_subgroups : index
  gpu.barrier
  %t0 = arith.cmpi eq, %t, %c0 : index
  scf.if %t0 {
    %row = arith.muli %by, %c4 : index
    %linear = arith.addi %row, %bx : index
    %base = arith.muli %linear, %c8 : index
    %values = vector.from_elements %bx, %by, %cx, %cy, %rx, %ry, %nx, %ny : vector<8xindex>
    %casted = arith.index_cast %values : vector<8xindex> to vector<8xi32>
    vector.store %casted, %out[%base] : memref<?xi32>, vector<8xi32>
  }
  nvvm.cluster.arrive
  nvvm.cluster.wait
  gpu.return
})";
}

TEST(ClusterOps, IdsFollowTheClusterShape) {
  // Blocks of 48 threads: each is padded to a warpgroup in the cluster's
  // thread space; gpu.barrier and the cluster barrier still count 48 each.
  std::vector<int32_t> out(4 * 2 * 8, -1);
  SimtBuffer buf("out", ElementType::I32, out.data(), int64_t(out.size()));
  SimtOptions options;
  options.cluster = {2, 2, 1};
  ASSERT_EQ(runKernel(idsKernel(""), {4, 2, 1}, {48, 1, 1}, {SimtArg::buffer(buf)}, options), "");
  for (int32_t by = 0; by < 2; ++by)
    for (int32_t bx = 0; bx < 4; ++bx) {
      const int32_t *ids = reinterpret_cast<const int32_t *>(buf.data()) + (by * 4 + bx) * 8;
      const std::vector<int32_t> got(ids, ids + 8);
      const std::vector<int32_t> want = {bx, by, bx / 2, by / 2, bx % 2, by % 2, 2, 2};
      EXPECT_EQ(got, want) << "block (" << bx << ", " << by << ")";
    }
}

TEST(ClusterOps, LaunchChecksTheClusterShape) {
  std::vector<int32_t> out(64, 0);
  SimtBuffer buf("out", ElementType::I32, out.data(), int64_t(out.size()));
  SimtOptions options;
  options.cluster = {3, 1, 1};
  std::string error =
      runKernel(idsKernel(""), {4, 1, 1}, {32, 1, 1}, {SimtArg::buffer(buf)}, options);
  EXPECT_NE(error.find("cluster dimension 0 is 3, which must be positive and divide the grid's "
                       "(4)"),
            std::string::npos)
      << error;
  options.cluster = {4, 4, 1};
  error = runKernel(idsKernel(""), {4, 4, 1}, {32, 1, 1}, {SimtArg::buffer(buf)}, options);
  EXPECT_NE(error.find("clusters of 16 blocks exceed the portable 8"), std::string::npos) << error;
  options.cluster = {2, 1, 1};
  error = runKernel(idsKernel("known_cluster_size = array<i32: 4, 1, 1>"), {4, 1, 1}, {32, 1, 1},
                    {SimtArg::buffer(buf)}, options);
  EXPECT_NE(error.find("launched with clusters of (2,1,1) blocks but known_cluster_size is "
                       "(4,1,1)"),
            std::string::npos)
      << error;
}

/// Rank 0's threads alone pass the cluster barrier (or arrive twice, or
/// wait with no arrival).
std::string lopsidedKernel(int mode) {
  std::string body = mode == 0   ? "nvvm.cluster.arrive\n    nvvm.cluster.wait"
                     : mode == 1 ? "nvvm.cluster.arrive\n    nvvm.cluster.arrive"
                                 : "nvvm.cluster.wait";
  return R"(
gpu.func @k() kernel {
  %c0 = arith.constant 0 : index
  %rank = gpu.cluster_block_id x
  %first = arith.cmpi eq, %rank, %c0 : index
  scf.if %first {
    )" + body +
         R"(
  }
  gpu.return
})";
}

// Stricter than the hardware, whose barrier.cluster.wait counts exited
// threads as arrived: the interpreter runs a cluster's threads together and
// cannot tell a block that exits early from one that never arrives. The
// kernels arrive with every thread.
TEST(ClusterOps, ClusterBarrierWaitsForEveryThreadOfTheCluster) {
  SimtOptions options;
  options.cluster = {2, 1, 1};
  std::string error = runKernel(lopsidedKernel(0), {2, 1, 1}, {64, 1, 1}, {}, options);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("waits in nvvm.cluster.wait for the cluster's 128 threads; 64 arrived"),
            std::string::npos)
      << error;
  error = runKernel(lopsidedKernel(1), {2, 1, 1}, {64, 1, 1}, {}, options);
  EXPECT_NE(error.find("nvvm.cluster.arrive again before the nvvm.cluster.wait"), std::string::npos)
      << error;
  error = runKernel(lopsidedKernel(2), {2, 1, 1}, {64, 1, 1}, {}, options);
  EXPECT_NE(error.find("nvvm.cluster.wait with no nvvm.cluster.arrive before it"),
            std::string::npos)
      << error;
}

} // namespace
