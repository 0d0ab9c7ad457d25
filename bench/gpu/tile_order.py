#!/usr/bin/env python3
"""DRAM traffic of the tensor-core product kernels under a tile order
(tile knob `band`), from a simulated L2 — a model, not a measurement.

A product kernel multiplies R × Cb tiles: tile (r, c) reads A's slab r (BM
rows × the depth K) and B's slab c (BN lines × K), 16-bit. The GPU runs the
tiles P at a time in the kernel's order (GpuSchedule::tileOrder, mirrored in
`tile_order` below): a wave's blocks step through k together, so a slab that
several of them read crosses DRAM once per wave; between waves a slab stays
only if the L2 (least recently used, slab by slab) still holds it.

Row blocks first through the grid (band 0) keeps A's slabs only if all of A
fits the L2: at the Hopper target shape the vocabulary chunks' dW (A = dZᵀ,
167 MiB per chunk, 32 column blocks) re-reads A once per column block. Bands
of G row blocks hold G slabs of A while B streams by once per band.

    python3 bench/gpu/tile_order.py [--n 4096 --d 4096 --v 128256]
        [--markdown FILE]

Prints, per kernel and strategy, DRAM GiB per backward and the time that is
at 4.8 TB/s, next to the kernel's matmul time at the practical tensor-core
peak: where the traffic's time passes the matmul's, the order bounds the
kernel.
"""

import argparse
import collections
import sys

LABEL = "model, not a measurement"

# H200 (bench/gpu/perf_model.py's sm_90a entry): 132 SMs, one 128-row
# wgmma block per SM, 50 MiB of L2, 4.8 TB/s HBM3e, ~700 TFLOP/s bf16.
H200 = {"sms": 132, "l2_bytes": 50 * 2**20, "dram_bw": 4.8e12, "tc_practical": 700e12}
ELEMENT = 2  # 16-bit operands


def cdiv(a, b):
    return -(-a // b)


def tile_order(linear, rows, cols, band_bytes, slab_bytes):
    """(row block, column block) of the `linear`-th tile: GpuSchedule::tileOrder."""
    if not band_bytes:
        return linear % rows, linear // rows
    g = min(max(band_bytes // max(slab_bytes, 1), 1), rows)
    per_band = g * cols
    band = linear // per_band
    first = band * g
    in_band = min(rows - first, g)
    local = linear - band * per_band
    return first + local % in_band, local // in_band


def dram_bytes(rows, cols, slab_a, slab_b, band_bytes, chip=H200, concurrent=None):
    """Bytes one launch reads from DRAM: waves of `concurrent` tiles in
    tile_order, each slab once per wave, an LRU L2 of whole slabs between
    waves."""
    p = concurrent or chip["sms"]
    l2 = collections.OrderedDict()  # slab → bytes, least recent first
    held = 0
    total = 0
    tiles = rows * cols
    for start in range(0, tiles, p):
        wave = [tile_order(t, rows, cols, band_bytes, slab_a)
                for t in range(start, min(start + p, tiles))]
        touched = set()
        for r, c in wave:
            for key, size in ((("A", r), slab_a), (("B", c), slab_b)):
                if key not in touched:
                    touched.add(key)
                    if key in l2:
                        l2.move_to_end(key)
                    else:
                        total += size
                        l2[key] = size
                        held += size
                while held > chip["l2_bytes"] and l2:
                    _, gone = l2.popitem(last=False)
                    held -= gone
    return total


def product_kernels(n, d, v, strategy, row_chunk, vocab_chunk, bm=128, bn=128, bn_logits=128):
    """The backward's product kernels: (name, launches, R, Cb, slab A, slab B,
    flops per launch), as compiler/Kernels/Schedules/GPU/Backward.cpp builds
    them with 128-row tiles (grad_cols / block_cols columns)."""
    e = ELEMENT
    if strategy == "vocab_chunked":
        c = vocab_chunk
        chunks = cdiv(v, c)
        return [
            # dZ = X·W[chunk]ᵀ: A = X (N rows, depth D), B = the chunk's W rows.
            ("lce_bwd_dz", chunks, cdiv(n, bm), cdiv(c, bn_logits), bm * d * e,
             bn_logits * d * e, 2 * n * d * c),
            # dX += dZ·W[chunk]: A = dZ (N rows, depth C), B = Wᵀ's D lines.
            ("lce_bwd_dx", chunks, cdiv(n, bm), cdiv(d, bn), bm * c * e, bn * c * e,
             2 * n * d * c),
            # dW[chunk] = dZᵀ·X: A = dZᵀ (C lines, depth N), B = Xᵀ's D lines.
            ("lce_bwd_dw", chunks, cdiv(c, bm), cdiv(d, bn), bm * n * e, bn * n * e,
             2 * n * d * c),
        ]
    c = row_chunk
    chunks = cdiv(n, c)
    return [
        ("lce_bwd_dz", chunks, cdiv(c, bm), cdiv(v, bn_logits), bm * d * e, bn_logits * d * e,
         2 * c * d * v),
        ("lce_bwd_dx", chunks, cdiv(c, bm), cdiv(d, bn), bm * v * e, bn * v * e, 2 * c * d * v),
        ("lce_bwd_dw", chunks, cdiv(v, bm), cdiv(d, bn), bm * c * e, bn * c * e, 2 * c * d * v),
    ]


def report(n, d, v, row_chunk, vocab_chunk, bands, chip=H200):
    rows = []
    for strategy in ("vocab_chunked", "chunked"):
        for name, launches, r, cb, sa, sb, flops in product_kernels(n, d, v, strategy, row_chunk,
                                                                    vocab_chunk):
            t_mma = launches * flops / chip["tc_practical"]
            traffic = {b: launches * dram_bytes(r, cb, sa, sb, b, chip) for b in bands}
            rows.append((strategy, name, launches, r, cb, t_mma, traffic))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--v", type=int, default=128256)
    # The plans' chunks at 256 MiB (vocabulary: 6 of 21376 columns; rows:
    # 4 balanced chunks of 1024).
    ap.add_argument("--row-chunk", type=int, default=1024)
    ap.add_argument("--vocab-chunk", type=int, default=21376)
    ap.add_argument("--bands", default="0,8192,32768", help="band knobs (KiB) to compare")
    ap.add_argument("--markdown", help="also write the table here")
    args = ap.parse_args(argv)
    bands = [int(b) * 1024 for b in args.bands.split(",")]
    rows = report(args.n, args.d, args.v, args.row_chunk, args.vocab_chunk, bands)
    head = ("| strategy | kernel | launches | tiles R×Cb | matmul ms | " +
            " | ".join("band=%d: GiB / ms" % (b // 1024) for b in bands) + " |")
    lines = ["DRAM traffic of the backward's product kernels at N=%d, D=%d, V=%d by tile order "
             "(%s; H200: 50 MiB L2, 4.8 TB/s, 700 TFLOP/s, waves of 132 tiles)."
             % (args.n, args.d, args.v, LABEL), "", head,
             "|" + "---|" * (5 + len(bands))]
    gib = 2.0**30
    for strategy, name, launches, r, cb, t_mma, traffic in rows:
        cells = ["%.2f / %.2f" % (traffic[b] / gib, 1e3 * traffic[b] / H200["dram_bw"])
                 for b in bands]
        lines.append("| %s | %s | %d | %d×%d | %.2f | %s |" % (
            strategy, name, launches, r, cb, 1e3 * t_mma, " | ".join(cells)))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
