"""The tile-order DRAM model (bench/gpu/tile_order.py): its order is the
kernels' (GpuSchedule::tileOrder) — every tile once, bands of row blocks —
and its L2 counts what the order implies. Pure Python: no GPU, no build."""

import pytest

from conftest import load_bench


def load():
    return load_bench("bench/gpu/tile_order.py")


@pytest.mark.parametrize("rows,cols,band,slab", [
    (3, 7, 0, 100), (3, 7, 100, 100), (3, 7, 250, 100), (5, 4, 200, 100),
    (167, 32, 32 << 20, 1 << 20), (1, 9, 50, 100), (8, 1, 300, 100), (4, 4, 1, 100)])
def test_every_tile_runs_once(rows, cols, band, slab):
    m = load()
    seen = [m.tile_order(t, rows, cols, band, slab) for t in range(rows * cols)]
    assert sorted(seen) == [(r, c) for r in range(rows) for c in range(cols)]


def test_bands_run_column_by_column_with_a_short_last_band():
    m = load()
    # Bands of two row blocks (250 // 100) over five: rows 0-1, 2-3, then 4.
    order = [m.tile_order(t, 5, 3, 250, 100) for t in range(15)]
    assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert order[6:12] == [(2, 0), (3, 0), (2, 1), (3, 1), (2, 2), (3, 2)]
    assert order[12:] == [(4, 0), (4, 1), (4, 2)]


def test_a_band_of_every_row_block_is_rows_first():
    m = load()
    for t in range(6 * 4):
        assert m.tile_order(t, 6, 4, 10**9, 100) == m.tile_order(t, 6, 4, 0, 100)


def test_a_grid_whose_operands_fit_the_l2_reads_each_slab_once():
    m = load()
    # 8 + 4 slabs of 1 MiB in a 50 MiB L2, waves of 5 tiles.
    got = m.dram_bytes(8, 4, 1 << 20, 1 << 20, 0, concurrent=5)
    assert got == 12 << 20


def test_rows_first_rereads_an_a_larger_than_the_l2_once_per_column():
    m = load()
    # 100 row slabs of 1 MiB (A is twice the L2), 4 columns, waves of 10:
    # every column block re-reads all of A; bands of 16 MiB read A once (B's
    # four slabs stay in the L2 from band to band).
    rows_first = m.dram_bytes(100, 4, 1 << 20, 1 << 20, 0, concurrent=10)
    banded = m.dram_bytes(100, 4, 1 << 20, 1 << 20, 16 << 20, concurrent=10)
    assert rows_first == (4 * 100 + 4) << 20
    assert banded == (100 + 4) << 20
    # A B of 60 slabs (more than the L2) streams through once per band: 7
    # bands of 16 rows (the last of 4).
    wide = m.dram_bytes(100, 60, 1 << 20, 1 << 20, 16 << 20, concurrent=10)
    assert wide == (100 + 7 * 60) << 20


def test_the_target_shapes_weight_gradient_is_what_bands_fix():
    # The vocabulary chunks' dW at N=4096, D=4096, V=128256 (6 chunks of
    # 21376): rows first re-reads dZ once per column block; 32 MiB bands
    # take a tenth of the traffic or less, and no product kernel of the
    # vocabulary chunks reads more with them.
    m = load()
    rows = m.report(4096, 4096, 128256, 1024, 21376, [0, 32 << 20])
    by = {(s, k): traffic for s, k, _, _, _, _, traffic in rows}
    dw = by[("vocab_chunked", "lce_bwd_dw")]
    assert dw[32 << 20] * 10 < dw[0]
    for kernel in ("lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dw"):
        traffic = by[("vocab_chunked", kernel)]
        assert traffic[32 << 20] <= traffic[0], kernel
