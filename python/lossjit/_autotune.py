"""Opt-in tile autotuning of the GPU kernels (``LOSSJIT_AUTOTUNE=1``).

Without it every op compiles with the tile ``auto`` (``TileConfig::defaultFor``
in the compiler and SelectLoweringConfig: for f16/bf16 on sm_90a wgmma, for
the cross-entropy ops 128x128 logit tiles loaded by TMA, k 64, 3 stages;
mma.sync's 64x64x32 3-stage tile on the other sm_80+ arches; SIMT otherwise),
so results depend only on the inputs and the chip.

With it, the first call of an op for a *shape bucket* (N, V, D each rounded up
to a power of two) on a device times every candidate tile of that op's small
config space on the call's own buffers — CUDA events, the median of several
runs after a warm-up — and keeps the fastest. Winners are stored in
``<cache dir>/autotune.json`` keyed by device name, arch, op, dtype, options
and bucket, so later processes skip the timing; a stored winner that no
longer compiles (another build, a hand-edited store) is ignored with a
warning and the op is tuned again. A tuned op can give different bits
than the default tile (the tensor cores' k grouping follows the tile), which
is why tuning is never on unless asked for; with a stored winner the bits are
again a function of inputs, chip and the store.

The store is written atomically (a temporary file, then ``os.replace``): a
process killed mid-write leaves the previous store, never half a file. An
unreadable or malformed store is ignored with a warning (and rewritten on the
next winner), never trusted.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ENV = "LOSSJIT_AUTOTUNE"
STORE_NAME = "autotune.json"
STORE_FORMAT = "lossjit-autotune"
STORE_VERSION = 1

#: The tensor-core config space (sm_80+, f16/bf16): the default tile first, so
#: it wins ties. Block tiles of 32x32 warp tiles, each with its threads.
TENSOR_CORE_TILES = (
    "matmul=mma_sync",
    "matmul=mma_sync,stages=4",
    "matmul=mma_sync,block_rows=128,block_cols=64,threads=256",
    "matmul=mma_sync,block_rows=64,block_cols=128,threads=256",
    "matmul=mma_sync,block_rows=128,block_cols=128,threads=512,stages=2",
    "matmul=mma_sync,block_k=64,stages=2",
)
#: Hopper's warpgroup MMA (sm_90a, the default arch on compute capability
#: 9.0): the tile auto gives the cross-entropy ops first (128x128 logits by
#: TMA, k 64, 3 stages: 64.3 ms forward + backward on an H200 at N=4096,
#: D=4096, V=128256, bf16), then the warp-specialized one (71.0 ms there),
#: 128x256 gradient tiles from a producer warpgroup that lends its registers
#: (tma=3) or by TMA alone (not yet measured), auto's tile in 32 MiB bands
#: of row blocks (band=32768: bench/gpu/tile_order.py's DRAM model; not yet
#: measured),
#: wgmma's base tile (128x64 logits on the cp.async ring), the cp.async ring
#: at 128 columns (139.5 ms there) and tiles every kernel of which ptxas
#: takes without spills; then the mma.sync space, which sm_90a modules also
#: run. Tiles that spill for some op (e.g. a loss family's 128-column
#: logits) still compute the same function: tuning times them.
WGMMA_TILES = (
    "matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1",
    "matmul=wgmma,block_cols=128,block_k=64,stages=2,tma=2",
    "matmul=wgmma,block_cols=128,block_k=64,stages=3,grad_cols=256,tma=3",
    "matmul=wgmma,block_cols=128,block_k=64,stages=3,grad_cols=256,tma=1",
    "matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1,band=32768",
    "matmul=wgmma",
    "matmul=wgmma,block_cols=128",
    "matmul=wgmma,stages=3",
    "matmul=wgmma,block_k=64,stages=2",
    "matmul=wgmma,block_rows=64,threads=128",
) + TENSOR_CORE_TILES
#: SIMT (f32 storage, chips before sm_80, the recompute backward).
SIMT_TILES = (
    "auto",
    "block_rows=8,threads=128",
    "block_rows=4,threads=256",
    "block_rows=2,threads=128,splits=16",
)

_lock = threading.Lock()


def enabled() -> bool:
    """Whether ``LOSSJIT_AUTOTUNE`` asks for tuning ('1'); '0' or unset: no."""
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"lossjit: {ENV} must be 0 or 1, got {value!r}")


def _arch_number(arch: str) -> int:
    digits = "".join(ch for ch in arch[3:] if ch.isdigit()) if arch.startswith("sm_") else ""
    return int(digits) if digits else 0


def candidates(arch: str, dtype: str, strategy: str = "auto") -> Tuple[str, ...]:
    """The tiles an op is timed with: the tensor-core space where the
    compiler's default would be tensor cores, else the SIMT space."""
    if _arch_number(arch) >= 80 and dtype in ("f16", "bf16") and strategy != "recompute":
        return WGMMA_TILES if arch == "sm_90a" else TENSOR_CORE_TILES
    return SIMT_TILES


def shape_bucket(n: int, v: int, d: int, t: int = 0) -> Tuple[int, ...]:
    """(N, V, D), each rounded up to a power of two (0 stays 0); with a
    teacher's hidden size `t` (distillation plans), (N, V, D, T)."""
    def up(x: int) -> int:
        return 0 if x <= 0 else 1 << (x - 1).bit_length()
    return (up(n), up(v), up(d)) + ((up(t),) if t > 0 else ())


def store_key(device_name: str, arch: str, op: str, dtype: str, options: Dict[str, str],
              bucket: Tuple[int, ...]) -> str:
    """One line per tuned specialization; options sorted so the key is stable.
    The arch the op is compiled for is part of it: one device runs sm_90a or
    (LOSSJIT_CUDA_ARCH=sm_90) sm_90 code, and a wgmma winner is no tile for
    the latter."""
    opts = ",".join(f"{k}={options[k]}" for k in sorted(options))
    return (f"{device_name}|{arch}|{op}|{dtype}|{opts}|"
            f"N{bucket[0]}.V{bucket[1]}.D{bucket[2]}"
            + (f".T{bucket[3]}" if len(bucket) > 3 else ""))


def default_store_path() -> Optional[str]:
    """``autotune.json`` in the kernel cache directory (LOSSJIT_CACHE_DIR, else
    $XDG_CACHE_HOME/lossjit or ~/.cache/lossjit, as the runtime's cache);
    None when LOSSJIT_CACHE_DISABLE is set or no directory is known."""
    if os.environ.get("LOSSJIT_CACHE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    directory = os.environ.get("LOSSJIT_CACHE_DIR") or ""
    if not directory:
        xdg = os.environ.get("XDG_CACHE_HOME") or ""
        home = os.environ.get("HOME") or ""
        directory = os.path.join(xdg, "lossjit") if xdg else (
            os.path.join(home, ".cache", "lossjit") if home else "")
    return os.path.join(directory, STORE_NAME) if directory else None


class TuningStore:
    """The winners on disk: {key: tile text}. Reads tolerate a missing or
    broken file (a warning, then empty); writes are atomic."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path

    def load(self) -> Dict[str, str]:
        if not self.path or not os.path.exists(self.path):
            return {}
        try:
            with open(self.path, "r", encoding="utf-8") as f:
                data = json.load(f)
            if (not isinstance(data, dict) or data.get("format") != STORE_FORMAT
                    or data.get("format_version") != STORE_VERSION
                    or not isinstance(data.get("winners"), dict)):
                raise ValueError("not a lossjit autotune store of format version "
                                 f"{STORE_VERSION}")
            winners = data["winners"]
            if not all(isinstance(k, str) and isinstance(t, str) for k, t in winners.items()):
                raise ValueError("winners must map strings to tile strings")
            return dict(winners)
        except (OSError, ValueError) as e:
            warnings.warn(f"lossjit: ignoring the autotune store {self.path}: {e}")
            return {}

    def lookup(self, key: str) -> Optional[str]:
        return self.load().get(key)

    def record(self, key: str, tile: str) -> None:
        """Adds one winner (re-reading the file first, so concurrent tuners
        of other keys are kept) and replaces the file atomically."""
        if not self.path:
            return
        with _lock:
            winners = self.load()
            winners[key] = tile
            directory = os.path.dirname(self.path) or "."
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"format": STORE_FORMAT, "format_version": STORE_VERSION,
                               "winners": winners}, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise


def fastest(tiles: Sequence[str], time_ms: Callable[[str], List[float]]) -> Tuple[str, Dict[str, float]]:
    """The tile with the smallest median time (`time_ms(tile)` gives the run
    times), ties to the earlier tile; a tile that fails to compile or run is
    skipped with a warning. Returns (winner, {tile: median ms})."""
    medians: Dict[str, float] = {}
    for tile in tiles:
        try:
            runs = time_ms(tile)
        except Exception as e:  # a candidate the chip or shape cannot run
            warnings.warn(f"lossjit: autotune candidate {tile!r} skipped: {e}")
            continue
        if not runs:
            continue
        medians[tile] = statistics.median(runs)
    if not medians:
        raise RuntimeError("lossjit: autotuning found no candidate tile that runs: "
                           + ", ".join(tiles))
    best = min(medians, key=lambda t: (medians[t], tiles.index(t)))
    return best, medians


def cuda_event_timer(run: Callable[[], None], device=None, warmup: int = 2,
                     runs: int = 7) -> List[float]:
    """Milliseconds of `run()`, `runs` times after `warmup` untimed calls,
    measured with CUDA events on `device`'s current stream (the one the
    launches go to; None: the current device's), with `device` current."""
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        for _ in range(warmup):
            run()
        times = []
        for _ in range(runs):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            run()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times
