"""The GPU performance model's PTX analysis (bench/gpu/perf_model.py).

The model itself needs lossjit-opt and ptxas; its PTX reader does not.
A warp-specialized kernel has two mbarrier wait loops, each an inline-asm
block with the same LAB_WAIT / DONE labels: read as one set of labels,
their branches would join the two roles' loops and hide the consumers'.
"""

from conftest import load_bench


def load_model():
    return load_bench("bench/gpu/perf_model.py")


def wait_loop():
    return """
\t{
\t.reg .pred P1;
\tLAB_WAIT:
\tmbarrier.try_wait.parity.shared.b64 P1, [%r1], %r2, %r3;
\t@P1 bra.uni DONE;
\tbra.uni LAB_WAIT;
\tDONE:
\t}
"""


# Block 0 branches to the consumers ($L__BB0_1, a loop: wait, wgmma, arrive)
# or the producer ($L__BB0_3, a loop: wait, TMA copy); both end at ret.
PTX = """
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .pred %p<4>;
\tsetp.eq.u32 %p1, %r0, 0;
\t@%p1 bra $L__BB0_3;
$L__BB0_1:
""" + wait_loop() + """
\twgmma.fence.sync.aligned;
\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%r4}, %rd1, %rd2, p, 1, 1, 0, 0;
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 0;
\tmbarrier.arrive.shared.b64 %rd3, [%rd4];
\tsetp.ne.u32 %p2, %r5, 0;
\t@%p2 bra $L__BB0_1;
\tret;
$L__BB0_3:
""" + wait_loop() + """
\tmbarrier.arrive.expect_tx.shared.b64 %rd5, [%rd6], %r7;
\tcp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%rd7], [%rd8, {%r8, %r9}], [%rd6];
\tsetp.ne.u32 %p3, %r10, 0;
\t@%p3 bra $L__BB0_3;
\tret;
}
"""


def test_inline_asm_labels_are_scoped_per_block():
    model = load_model()
    name, items = model.ptx_instructions(PTX)
    labels = [text for kind, text in items if kind == "label"]
    assert name == "k"
    # Two blocks' LAB_WAIT and DONE, renamed apart; the function's own keep
    # their names.
    assert len([l for l in labels if l.startswith("LAB_WAIT@")]) == 2
    assert len(set(labels)) == len(labels)
    assert "$L__BB0_1" in labels and "$L__BB0_3" in labels


def test_the_consumers_loop_is_the_hot_loop():
    model = load_model()
    result = model.analyze_ptx(PTX)
    hot = result["hot_loop"]
    assert result["product"] == "wgmma"
    assert hot is not None
    # The consumers' loop: its wait, one wgmma, no TMA copy (the producer's
    # loop is another loop).
    assert hot["per_iteration"]["wgmma"] == 1
    assert hot["per_iteration"]["tma"] == 0
    assert result["total"]["tma"] == 1


def test_persistent_grids_take_the_waves_of_their_tiles():
    # A block per tile: 288 tiles of one 8-warp block per SM on 132 SMs run
    # in 3 waves, the last one 24 blocks. A persistent grid of
    # min(288, 132) blocks sweeps the same tiles, its busiest blocks three
    # of them: the same waves, not one full wave.
    model = load_model()
    occ = {"blocks_per_sm": 1, "warps_per_sm": 8}
    per_tile = model.occupancy_factor("sm_90a", "tensor core", occ, 288, 8)
    assert per_tile < 0.75
    assert model.occupancy_factor("sm_90a", "tensor core", occ, 288, 8, persistent=132) == per_tile
    # Fewer blocks than SMs: 64 blocks take 288 tiles in 5 rounds, on 64 SMs.
    assert model.occupancy_factor("sm_90a", "tensor core", occ, 288, 8, persistent=64) == \
        min(1.0, 288 * 8 / (5 * 132) / model.W_SAT_TENSOR)
    # One full wave of tiles is one full wave either way.
    assert model.occupancy_factor("sm_90a", "tensor core", occ, 132, 8, persistent=132) == 1.0


def test_occupancy_counts_warps_by_sub_partition():
    """A launch counts a block's warps rounded up to the SM's 4 register
    sub-partitions (cuda_occupancy.h): 288 threads get the registers of 384."""
    model = load_model()
    # 9 warps at 168 registers: 12 * 32 * 168 = 64512 of 65536, one block.
    fits = model.occupancy("sm_90a", 168, 1024, 288)
    assert fits["blocks_per_sm"] == 1 and fits["limiter"] == "registers"
    # 224 registers assembled but failed every launch on an H200.
    try:
        model.occupancy("sm_90a", 224, 1024, 288)
    except ValueError as e:
        assert "cannot launch" in str(e)
    else:
        raise AssertionError("288 threads at 224 registers must not launch")
    # 8 warps at 128 registers: two blocks of a sub-partition's 16384 each.
    assert model.occupancy("sm_90a", 128, 1024, 256)["blocks_per_sm"] == 2


def test_vocabulary_chunks_trade_the_dw_accumulator_for_dx():
    # At the Llama-3 head: the row chunks read and write an f32 V x D dW
    # accumulator per chunk; the vocabulary chunks store dW once in bf16 and
    # read and write an f32 N x D dX per chunk instead.
    m = load_model()
    shape = {"N": 4096, "D": 4096, "V": 128256}
    tile = {"matmul": "wgmma", "block_rows": 128, "block_cols": 128, "threads": 256}
    n, d, v = shape["N"], shape["D"], shape["V"]
    rows_dw = m.kernel_work("lce_bwd_dw", shape, tile, {"C": 1046}, 4, 2)
    vocab_dw = m.kernel_work("lce_bwd_dw", shape, tile, {"C": 21376}, 6, 2, vocab=True)
    assert rows_dw["floor_bytes"] - vocab_dw["floor_bytes"] > 6 * v * d * 4
    vocab_dx = m.kernel_work("lce_bwd_dx", shape, tile, {"C": 21376}, 6, 2, vocab=True)
    # dZ and W once (W's chunks are disjoint), dX's f32 read and write per chunk.
    assert vocab_dx["floor_bytes"] == n * v * 2 + v * d * 2 + 6 * 2 * n * d * 4
    assert vocab_dw["flops"] == vocab_dx["flops"] == 2 * n * d * v
    plan = m.parse_plan('loss.launch_plans = {g = {chunk = "C", chunk_dim = "V", '
                        'kernels = [{args = ["dz"], name = "lce_bwd_dw", per_chunk = true}]}}')
    assert plan["chunk_dim"] == "V"


def test_clusters_read_the_gradient_products_shared_tile_once_per_pair():
    # cluster=2: dX's row blocks of a column block share its W tile, dW's
    # vocabulary row blocks its X tile, when each block copies whole 64-line
    # boxes (128 or 256 gradient columns), persistent or banded too (the
    # clusters take their tiles together); at 64 columns nothing pairs.
    m = load_model()
    shape = {"N": 4096, "D": 4096, "V": 128256}
    n, d, v = shape["N"], shape["D"], shape["V"]
    tile = {"matmul": "wgmma", "block_rows": 128, "block_cols": 128, "threads": 256,
            "block_k": 64, "tma": 2}
    paired = dict(tile, cluster=2)
    env = {"C": 21376}
    # (kind, row blocks per chunk, depth of each B read): dX over N rows
    # (32 blocks), dW over the chunk's 21376 vocabulary rows (167: the
    # last pair is padded).
    for kind, blocks, depth in (("lce_bwd_dx", m.cdiv(n, 128), 21376),
                                ("lce_bwd_dw", m.cdiv(21376, 128), n)):
        alone = m.kernel_work(kind, shape, tile, env, 6, 2, vocab=True)
        pairs = m.kernel_work(kind, shape, paired, env, 6, 2, vocab=True)
        saved = 6 * (blocks - m.cdiv(blocks, 2)) * depth * d * 2
        assert alone["tile_bytes"] - pairs["tile_bytes"] == saved
        assert pairs["flops"] == alone["flops"] == 2 * n * d * v
        one_box = m.kernel_work(kind, shape, dict(paired, grad_cols=64), env, 6, 2, vocab=True)
        assert one_box == m.kernel_work(kind, shape, dict(tile, grad_cols=64), env, 6, 2,
                                        vocab=True)
        for knob in ({"persistent": 132}, {"band": 32768}):
            assert m.kernel_work(kind, shape, dict(paired, **knob), env, 6, 2, vocab=True) == pairs
    rows = m.kernel_work("lce_bwd_dw", shape, paired, {"C": 1024}, 4, 2)
    assert m.kernel_work("lce_bwd_dw", shape, tile, {"C": 1024}, 4, 2)["tile_bytes"] - \
        rows["tile_bytes"] == (m.cdiv(v, 128) - m.cdiv(m.cdiv(v, 128), 2)) * n * d * 2


def ordered_alike(m, grid, swept, tile, env):
    """ordered_operand_bytes of a block-per-tile `grid` and of the persistent
    `swept` grid (tile persistent=132) over the same tiles: equal, and
    returned."""
    a = m.ordered_operand_bytes("sm_90a", grid, tile, env, env, False, 132, 2)
    b = m.ordered_operand_bytes("sm_90a", swept, dict(tile, persistent=132), env, env, False,
                                132, 2)
    assert a == b
    return a


def test_the_tile_order_reads_a_persistent_grids_tiles_like_a_block_per_tile():
    # A persistent grid is min(R*Cb, P): the same R x Cb tiles, in the same
    # order, as the block-per-tile grid [R, Cb]; the model must see both as
    # the tiles they are (and every slab once as the compulsory part).
    m = load_model()
    assert m.split_product("cdiv(V,128)*max(1,cdiv(D,128))") == ("cdiv(V,128)", "max(1,cdiv(D,128))")
    env = {"N": 4096, "D": 4096, "V": 128256, "C": 1024}
    tile = {"matmul": "wgmma", "block_rows": 128, "block_cols": 128, "grad_cols": 128,
            "band": 32768}
    grid = {"name": "lce_bwd_dw", "grid": ["cdiv(V,128)", "cdiv(D,128)", "1"]}
    swept = {"name": "lce_bwd_dw", "grid": ["min(cdiv(V,128)*cdiv(D,128),132)", "1", "1"]}
    slabs, once = ordered_alike(m, grid, swept, tile, env)
    assert once == (1002 + 32) * 128 * 1024 * 2  # dZᵀ's and Xᵀ's slabs, 1024 rows deep
    assert once <= slabs < 2 * once  # 32 MiB bands: about every slab once
    rows_first = m.ordered_operand_bytes("sm_90a", grid, dict(tile, band=0), env, env, False,
                                         132, 2)[0]
    assert rows_first > 10 * slabs  # dZᵀ once per column block
    assert m.ordered_operand_bytes("sm_90a", {"name": "lce_partial", "grid": ["1", "1", "1"]},
                                   tile, env, env, False, 132, 2) is None


def test_the_tile_order_takes_a_clusters_tiles_as_groups_of_row_blocks():
    # In clusters of two (GpuSchedule::productLaunch) grid.x is
    # 2*cdiv(V,256) or, persistent, 2*min(groups*Cb,66): the tiles go in
    # groups of two row blocks that share one B slab, so the order's rows
    # are the groups, 256-row A slabs, and half as many concurrent groups
    # as blocks. Both grids are the same tiles in the same order.
    m = load_model()
    assert m.cluster_groups("2*cdiv(V,256)") == (2, "cdiv(V,256)")
    assert m.cluster_groups("4*min(cdiv(C,512)*cdiv(D,256),32)") == \
        (4, "min(cdiv(C,512)*cdiv(D,256),32)")
    assert m.cluster_groups("cdiv(V,128)") == (1, "cdiv(V,128)")
    assert m.cluster_groups("cdiv(V*D,256)*(1-min(N,1))") == (1, "cdiv(V*D,256)*(1-min(N,1))")
    env = {"N": 4096, "D": 4096, "V": 128256, "C": 1024}
    tile = {"matmul": "wgmma", "block_rows": 128, "block_cols": 128, "grad_cols": 128,
            "band": 32768, "cluster": 2, "tma": 2, "block_k": 64}
    grid = {"name": "lce_bwd_dw", "grid": ["2*cdiv(V,256)", "cdiv(D,128)", "1"]}
    swept = {"name": "lce_bwd_dw", "grid": ["2*min(cdiv(V,256)*cdiv(D,128),66)", "1", "1"]}
    # 501 groups of 256 vocabulary rows (the last one half padding) and 32
    # Xᵀ slabs, 1024 rows deep.
    assert ordered_alike(m, grid, swept, tile, env)[1] == (501 * 256 + 32 * 128) * 1024 * 2
    # A persistent grid of whole clusters sweeps the same tiles as the
    # block-per-tile grid, in as many waves: the same occupancy. (V = 512,
    # D = 256: 2 groups x 2 column blocks, 8 blocks, well below a wave.)
    shape = {"N": 4096, "D": 256, "V": 512}
    ptx = {"hot_loop": None, "total": {"mma.sync": 0, "wgmma": 1}}
    def modelled(kernel, knobs):
        plan = {"constants": {"C": 1024}, "derived": [], "tile": dict(tile, **knobs)}
        kernel = dict(kernel, block=[384, 1, 1], per_chunk=False, dynamic_smem=0)
        return m.model_kernel("sm_90a", shape, plan, kernel, ptx, {"smem": 0, "registers": 168}, 2)
    persistent, per_tile = modelled(swept, {"persistent": 132}), modelled(grid, {})
    assert persistent["blocks_per_launch"] == per_tile["blocks_per_launch"] == 8
    assert 0 < persistent["f_occ"] == per_tile["f_occ"] < 1


def test_an_empty_grid_costs_nothing():
    # lce_bwd_zero launches blocks only for N = 0 (lce_bwd_dw starts the dW
    # sums at the first chunk): with rows its grid is empty, the launchers
    # skip it, and the model charges it no time, bytes or launch.
    m = load_model()
    plan = {"constants": {}, "derived": [], "tile": {}}
    kernel = {"name": "lce_bwd_zero", "grid": ["cdiv(max(V*D,V),128)*(1-min(N,1))", "1", "1"],
              "block": [128, 1, 1], "per_chunk": False, "dynamic_smem": 0}
    ptx = {"hot_loop": None, "total": {"mma.sync": 0, "wgmma": 0}}
    info = {"smem": 0, "registers": 10}
    rows = m.model_kernel("sm_90a", {"N": 4096, "D": 4096, "V": 128256}, plan, kernel, ptx,
                          info, 2)
    assert rows["blocks_per_launch"] == 0 and rows["launches"] == 0
    assert rows["t_est_s"] == rows["t_l2reuse_s"] == rows["t_floor_s"] == 0
    assert rows["dram_floor_bytes"] == 0 and rows["bound"] == "empty grid"
    empty = m.model_kernel("sm_90a", {"N": 0, "D": 4096, "V": 128256}, plan, kernel, ptx, info, 2)
    assert empty["blocks_per_launch"] == m.cdiv(128256 * 4096, 128)
    assert empty["t_est_s"] > 0 and empty["dram_floor_bytes"] == 128256 * 4096 * 4 + 128256 * 4


def test_a_single_chunk_rounds_dw_without_the_accumulator():
    # Where the rows fit one chunk (SINGLE = 1) lce_bwd_dw_single replaces
    # lce_bwd_dw and lce_bwd_finish: the same product, dW written once in
    # the storage type instead of f32 (and never rounded by a second pass).
    # Their grids carry the 0/1 factor; the tile order sees through it.
    m = load_model()
    assert m.unguarded("(min(cdiv(V,128)*cdiv(D,128),132))*SINGLE") == \
        "min(cdiv(V,128)*cdiv(D,128),132)"
    assert m.unguarded("(cdiv(V,128))*(1-SINGLE)") == "cdiv(V,128)"
    assert m.unguarded("cdiv(max(V*D,V),128)*(1-min(N,1))") == "cdiv(max(V*D,V),128)*(1-min(N,1))"
    assert m.unguarded("(cdiv(V,128))*C") == "(cdiv(V,128))*C"  # a real factor stays
    shape = {"N": 4096, "D": 4096, "V": 128256}
    tile = {"matmul": "wgmma", "block_rows": 128, "block_cols": 128, "grad_cols": 128}
    accumulated = m.kernel_work("lce_bwd_dw", shape, tile, {"C": 4096}, 1, 2)
    single = m.kernel_work("lce_bwd_dw_single", shape, tile, {"C": 4096}, 1, 2)
    assert single["flops"] == accumulated["flops"]
    assert accumulated["floor_bytes"] - single["floor_bytes"] == 128256 * 4096 * (4 - 2)
    env = {"N": 4096, "D": 4096, "V": 128256, "C": 4096, "SINGLE": 1}
    swept = {"name": "lce_bwd_dw", "grid": ["min(cdiv(V,128)*cdiv(D,128),132)", "1", "1"]}
    guarded = {"name": "lce_bwd_dw_single",
               "grid": ["(min(cdiv(V,128)*cdiv(D,128),132))*SINGLE", "1", "1"]}
    tile = dict(tile, persistent=132, band=32768)
    assert m.ordered_operand_bytes("sm_90a", guarded, tile, env, env, False, 132, 2) == \
        m.ordered_operand_bytes("sm_90a", swept, tile, env, env, False, 132, 2)


def test_the_fused_lse_merges_tile_states_instead_of_reading_the_logits():
    # On tensor-core tiles lce_fused_z stores each tile's row statistics
    # (8 bytes a state: one per row and wgmma tile, two per mma.sync 64x64
    # tile) and lce_fused_lse reads those and one label logit a row; SIMT
    # tiles keep reading the f32 raw logits.
    m = load_model()
    shape = {"N": 4096, "D": 4096, "V": 128256}
    env = {"C": 4096}
    simt = m.kernel_work("lce_fused_lse", shape, {"threads": 128}, env, 1, 2)
    assert simt["floor_bytes"] == 4096 * 128256 * 4 + 4096 * 3 * 4
    wgmma = {"matmul": "wgmma", "block_rows": 128, "block_cols": 256, "grad_cols": 256}
    states = 4096 * 501 * 8  # cdiv(128256, 256) states a row
    lse = m.kernel_work("lce_fused_lse", shape, wgmma, env, 1, 2)
    assert lse["floor_bytes"] == states + 4096 * (3 * 4 + 32)
    raw = m.kernel_work("lce_fused_z", shape, wgmma, env, 1, 2)
    plain = m.kernel_work("lce_bwd_dz", shape, wgmma, env, 1, 2)
    assert raw["floor_bytes"] - plain["floor_bytes"] == 4096 * 128256 * (4 - 2) + states
    mma = {"matmul": "mma_sync", "block_rows": 64, "block_cols": 64, "threads": 128}
    lse = m.kernel_work("lce_fused_lse", shape, mma, env, 1, 2)
    assert lse["floor_bytes"] == 4096 * 2004 * 2 * 8 + 4096 * (3 * 4 + 32)


def test_an_h100_lease_changes_the_hopper_chips_dram_alone():
    # A lease may be an H100 SXM rather than an H200: --card h100 models
    # sm_90/sm_90a with its 3.35 TB/s of DRAM and names the card; sm_80 and
    # every other limit stay as they are, and the default is the H200.
    m = load_model()
    h200 = m.hopper_chips("h200")
    assert h200 == m.CHIPS
    h100 = m.hopper_chips("h100")
    for chip in ("sm_90", "sm_90a"):
        assert h100[chip]["dram_bw"] == 3.35e12
        assert h100[chip]["card"] == "H100 SXM (%s)" % chip
        changed = {k for k in h100[chip] if h100[chip][k] != m.CHIPS[chip][k]}
        assert changed == {"dram_bw", "card"}
    assert h100["sm_80"] == m.CHIPS["sm_80"]
    assert m.CHIPS["sm_90a"]["dram_bw"] == 4.8e12  # the table itself is untouched
