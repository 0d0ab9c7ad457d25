#!/usr/bin/env python3
"""Linear + cross-entropy, forward + backward: lossjit against its peers on CUDA.

    python3 bench/gpu/bench_lce.py [--out DIR] [--budget SECONDS]
        [--n 4096,8192] [--d 4096] [--v 128256] [--dtypes fp16,bf16]
        [--impls eager,torch_lce,lossjit,liger,cce,compile] [--aot-dir .bundle/aot]

For every dtype x N (D and V fixed, reduction mean, int64 labels with a few
ignore_index rows) each implementation runs loss = f(x, w, y) and the
backward for dX and dW. Reported per run: median fwd+bwd time over CUDA
events (after a warm-up), TFLOP/s at 6*N*D*V, the forward alone (no
gradients kept; TFLOP/s at 2*N*D*V), peak memory allocated above the
inputs (torch's allocator; lossjit's workspace comes from it too), the loss's
error against an fp32 reference, and dX/dW's norm-wise error against fp32
gradients computed from the stored inputs (the table; bench.json also has
their difference from eager PyTorch's, which rounds dlogits to the storage
type).

Each implementation runs in a process of its own (as the side-by-side CPU
benchmarks do), one after another: a kernel that hangs, crashes or leaves the
CUDA context broken costs that implementation only, and its rows say so
("hung (killed after S s)", "crashed (killed by SIGSEGV)"). Each gets up to
twice an even share of what is left of the budget (--impl-timeout caps it);
--in-process measures them all in this process instead, for each shape in
turn. --extra-impls FILE adds implementations of one's own (FILE's IMPLS
dict: name -> factory(args, dtype_name, (N, V, D)) -> (fwd_bwd, note)).
bench.json's rows also carry each process's id and its peak resident memory
so far (VmHWM, host memory).

Implementations, in this order, smaller N first (each reported as
unavailable, with the reason, when it cannot run):
  eager      F.cross_entropy(F.linear(x, w).float(), y)
  torch_lce  torch.nn.functional.linear_cross_entropy, where torch has it
  lossjit    the `lossjit` Python package if it imports and passes a smoke
             check on CUDA; otherwise the AOT C API prepared by
             `scripts/gpu-check.sh --prepare` (.bundle/aot/<dtype>-mean),
             compiled here into a shared library and called through ctypes
             on torch's stream and memory; its backward is skipped (forward
             only, said in the note) when it would run > 256 row chunks
  lossjit-aot
             lossjit's default tile through the AOT C API even where the
             package works (not in the default list)
  lossjit-fused
             the package with fused_backward=True: loss and gradients from
             one op (vocabulary chunks after the forward's statistics)
  lossjit-filtered
             the package with filter_ignored=True: the kernels run on the
             counted rows only (one host sync for their count), as CCE
             filters ignored tokens; with --ignored F the first F·N rows'
             targets are ignore_index (a masked prompt), for every impl
  liger      Liger-Kernel's fused linear cross-entropy (wheel from .whl/)
  cce        Apple's cut-cross-entropy (wheel from .whl/; default filter_eps)
  lossjit-persist, lossjit-tma, lossjit-ws
             lossjit's Hopper tiles (bf16, compute capability 9.0): the AOT
             variants bf16-mean-sm90a-{persist,tma,ws} (tma is what auto
             now takes; persist and ws are opt-in)
  lossjit-vocab
             auto's Hopper tile with the backward in vocabulary chunks (AOT
             variant bf16-mean-sm90a-vocab): what the package runs on CUDA
             for N <= V, no f32 V x D dW accumulator
  lossjit-lend, lossjit-wide
             the vocabulary chunks with 128x256 gradient tiles (AOT variants
             bf16-mean-sm90a-{lend,wide}): a producer warpgroup lending the
             consumers its registers (tma=3), or TMA alone (tma=1)
  lossjit-band
             auto's Hopper tile in vocabulary chunks, its product tiles in
             32 MiB bands of row blocks (AOT variant bf16-mean-sm90a-band;
             bench/gpu/tile_order.py models the DRAM traffic it saves)
  lossjit-wide256
             the vocabulary chunks with 128x256 logit and gradient tiles on
             the producer warpgroup (AOT variant bf16-mean-sm90a-wide256)
  lossjit-cluster
             the vocabulary chunks with every product's row blocks in
             thread-block clusters of two that multicast each shared tile
             (tile cluster=2 on a producer warp; AOT variant
             bf16-mean-sm90a-cluster)
  lossjit-wide256-cluster, lossjit-wide256-cluster4
             lossjit-wide256's tiles in those clusters, of two or four row
             blocks (AOT variants bf16-mean-sm90a-wide256-cluster{,4})
  lossjit-wide256-cluster-persist
             the clusters of two on a persistent grid of 132 blocks, each
             cluster sweeping groups of two row blocks (AOT variant
             bf16-mean-sm90a-wide256-cluster-persist)
  lossjit-wide256-cluster-fused, lossjit-wide256-cluster-fused1g
             the fused forward+backward (one call of the AOT C API's
             lce_forward_backward) on lossjit-wide256-cluster's tile: in
             vocabulary chunks within 256 MiB (AOT variant
             bf16-mean-sm90a-wide256-cluster), or in row chunks of a 1 GiB
             workspace (bf16-mean-sm90a-wide256-cluster-rows1g: over the
             issue's dW + dX + 256 MiB; perf_model.py's fastest)
  compile    torch.compile of eager (compiles per shape: first-call column)

The run stops starting measurements when --budget runs low and marks the rest
"skipped (time)". Writes DIR/bench.json (everything) and DIR/bench.md (the
table), and prints the table last. `--device cpu` with small shapes runs the
harness itself without a GPU.
"""

import argparse
import collections
import ctypes
import hashlib
import importlib.util
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
# The budget counts from this process's start, a measuring child's from its
# spawn (importing torch counts against it); log lines from the run's start
# (CLOCK_MONOTONIC is system-wide).
START = float(os.environ.get("BENCH_LCE_SPAWNED", time.monotonic()))
LOG_START = float(os.environ.get("BENCH_LCE_START", START))


def elapsed():
    return time.monotonic() - START


def log(*args):
    print(f"[{time.monotonic() - LOG_START:6.1f}s]", *args, flush=True)


# --------------------------------------------------------------- lossjit


def compiled_library(directory, prefix, workdir, defines=()):
    """The shared library of the AOT C API in `directory` (<prefix>.c), compiled
    into `workdir` unless it is there: keyed by the variant's name, its source
    and the macros `defines` ("NAME=VALUE", passed as -D), so a machine kept
    warm between two prepared bundles never loads the older one's library,
    and written under a temporary name first, so an interrupted compile
    leaves none."""
    source = os.path.join(directory, f"{prefix}.c")
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read() + "\0".join(defines).encode()).hexdigest()[:16]
    os.makedirs(workdir, exist_ok=True)
    so = os.path.join(workdir, f"lib{os.path.basename(os.path.normpath(directory))}-{digest}.so")
    if os.path.exists(so):
        return so
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    include = next((d for d in (f"{cuda}/include", "/usr/local/cuda/include")
                    if os.path.exists(f"{d}/cuda.h")), None)
    if not include:
        raise RuntimeError("no cuda.h to compile the AOT C API against")
    stub = next((d for d in (f"{cuda}/lib64/stubs", "/usr/local/cuda/lib64/stubs",
                             f"{cuda}/targets/x86_64-linux/lib/stubs")
                 if os.path.exists(f"{d}/libcuda.so")), None)
    link = ["-L", stub, "-lcuda"] if stub else ["-l:libcuda.so.1"]
    partial = f"{so}.{os.getpid()}.tmp"
    cmd = (["cc", "-O2", "-std=c11", "-shared", "-fPIC", "-I", directory, "-I", include]
           + [f"-D{d}" for d in defines] + [source, "-o", partial] + link)
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(partial, so)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return so


class AotLibrary:
    """The AOT C API of one prepared variant, loaded with ctypes."""

    def __init__(self, directory, workdir, l2_promotion=None):
        """`l2_promotion`: a CUtensorMapL2promotion suffix ("NONE", "L2_256B")
        the C API's tensor maps ask for instead of its default."""
        self.dir = directory
        index = json.load(open(os.path.join(directory, "manifest.json")))
        self.index = index
        self.prefix = index["c_api"]["prefix"]
        self.ops = {op["role"]: op for op in index["ops"]}
        defines = ((f"{self.prefix.upper()}_TMA_L2_PROMOTION="
                    f"CU_TENSOR_MAP_L2_PROMOTION_{l2_promotion}",) if l2_promotion else ())
        self.lib = ctypes.CDLL(compiled_library(directory, self.prefix, workdir, defines))
        p = self.prefix
        c = ctypes
        # Attribute access: ctypes caches the function object (CDLL's
        # lib["name"] makes a new one per call, which forgets its restype).
        self.fn = {}

        def bind(name, argtypes, restype):
            f = getattr(self.lib, name)
            f.argtypes, f.restype = argtypes, restype
            self.fn[name] = f

        bind(f"{p}_create", [c.c_void_p, c.POINTER(c.c_void_p)], c.c_int)
        bind(f"{p}_last_error", [], c.c_char_p)
        bind(f"{p}_handle_arch", [c.c_void_p], c.c_char_p)
        for role in self.ops:
            bind(f"{p}_{role}_v", [c.c_void_p, c.c_void_p, c.POINTER(c.c_uint64), c.c_int,
                                   c.POINTER(c.c_int64), c.c_int, c.c_uint64, c.c_size_t],
                 c.c_int)
            bind(f"{p}_{role}_workspace_bytes", [c.c_int64] * 3, c.c_size_t)
        self.handle = c.c_void_p()
        torch.cuda.init()
        torch.empty(1, device="cuda")  # makes the primary context current
        status = self.fn[f"{p}_create"](None, c.byref(self.handle))
        if status != 0:
            raise RuntimeError(f"{p}_create: {self.error()}")
        self.arch = self.fn[f"{p}_handle_arch"](self.handle).decode()

    def error(self):
        return (self.fn[f"{self.prefix}_last_error"]() or b"").decode(errors="replace")

    def _arch_entry(self, role):
        """The index manifest's entry of `role` for the loaded arch, or None."""
        op = self.ops.get(role)
        return next((a for a in op["arches"] if a["arch"] == self.arch.split(":")[0]),
                    op["arches"][0]) if op else None

    def chunk_dim(self, role):
        """The dim the op's chunks split: N (rows) or V (vocabulary columns)."""
        return (self._arch_entry(role) or {}).get("chunk_dim", "N")

    def chunk_launches(self, role, dims):
        """(chunks, rows per chunk) the op's per-chunk kernel groups run for dims
        (rows of the chunk dim: N, or V for vocabulary chunks)."""
        op = self.ops.get(role)
        arch = self._arch_entry(role)
        if not arch or not arch.get("chunk"):
            return 1, dims[0]
        values = dict(zip(op["dims"], dims))
        values.update(arch["constants"])
        env = {"__builtins__": {}, "cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
        for d in arch["derived"]:
            values[d["name"]] = eval(d["formula"].replace("/", "//"), env, dict(values))
        rows = max(1, values[arch["chunk"]])
        # Rows of N, or columns of V (strategy vocab_chunked: chunk_dim V).
        extent = values[arch.get("chunk_dim", "N")]
        return -(-extent // rows), rows

    def workspace_bytes(self, role, dims):
        """Bytes of workspace `role` takes at dims (N, V, D)."""
        return self.fn[f"{self.prefix}_{role}_workspace_bytes"](*dims)

    def run(self, role, tensors, dims, workspace=None):
        op = self.ops[role]
        buffers = (ctypes.c_uint64 * len(op["params"]))()
        for i, p in enumerate(op["params"]):
            buffers[i] = tensors[p["name"]].data_ptr()
        d = (ctypes.c_int64 * len(dims))(*dims)
        nbytes = self.workspace_bytes(role, dims)
        ws = workspace
        if nbytes and (ws is None or ws.numel() < nbytes):
            ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        status = self.fn[f"{self.prefix}_{role}_v"](
            self.handle, ctypes.c_void_p(stream), buffers, len(op["params"]), d, len(dims),
            ws.data_ptr() if nbytes else 0, nbytes)
        if status != 0:
            raise RuntimeError(f"{self.prefix}_{role}: {self.error()}")


AOT_DTYPES = {"fp16": "f16", "fp32": "f32"}

# A backward whose chunk size collapses (a workspace budget below the fp32 dW
# accumulator gives 1-row chunks) would run for hours at the benchmark shape;
# such runs are reported, not started.
MAX_BACKWARD_CHUNKS = 256


def make_aot_impl(aot_dir, dtype_name, shape, tile=None, fused=False, l2_promotion=None):
    """The prepared AOT variant <dtype>-mean, or with `tile` (tma, ws,
    persist) its Hopper tile <dtype>-mean-sm90a-<tile> (scripts/gpu-check.sh
    HOPPER_AOT_VARIANTS). With `fused`, forward+backward is one call of its
    fused op (lossjit-aot --fused: role forward_backward, the gradients of
    grad_loss = 1); the forward alone is still its forward. `l2_promotion`
    (AotLibrary) overrides the tensor maps' L2 promotion."""
    # The bench's dtype names (fp16, bf16) against lossjit's (f16, bf16).
    name = f"{AOT_DTYPES.get(dtype_name, dtype_name)}-mean" + (f"-sm90a-{tile}" if tile else "")
    variant = os.path.join(aot_dir, name)
    if not os.path.exists(os.path.join(variant, "manifest.json")):
        raise RuntimeError(f"no prepared AOT variant {variant}")
    lib = AotLibrary(variant, "/tmp/lossjit-bench-aot", l2_promotion=l2_promotion)
    # (Outputs live on the inputs' device: CUDA here, the CPU in the harness's
    # unit test, tests/python/test_bench_harness.py.)
    backward = "forward_backward" if fused else "backward"
    has_backward = backward in lib.ops
    note = (f"AOT C API {lib.arch}" + (f", tile {tile}" if tile else "")
            + (f", L2 promotion {l2_promotion}" if l2_promotion else ""))
    if fused:
        if not has_backward:
            raise RuntimeError(f"{variant} has no fused op (lossjit-aot --fused)")
        chunks, rows = lib.chunk_launches(backward, shape)
        what = "column(s)" if lib.chunk_dim(backward) == "V" else "row(s)"
        if chunks > MAX_BACKWARD_CHUNKS:
            raise RuntimeError(f"the fused op would run {chunks} chunks of {rows} {what}")
        note += (f", fused op in {chunks} chunk(s) of {rows} {what}, workspace "
                 f"{lib.workspace_bytes(backward, shape) / 2 ** 20:.0f} MiB")
    if not has_backward:
        note += ", forward only (no backward in the AOT output)"
    elif not fused:
        chunks, rows = lib.chunk_launches("backward", shape)
        if chunks > MAX_BACKWARD_CHUNKS:
            has_backward = False
            what = "column(s)" if lib.chunk_dim("backward") == "V" else "row(s)"
            note += (f", forward only: the backward would run {chunks} chunks of {rows} "
                     f"{what} at this shape")

    def fwd_bwd(x, w, y):
        n, d = x.shape
        v = w.shape[0]
        loss = torch.empty((), dtype=torch.float32, device=x.device)
        lse = torch.empty(n, dtype=torch.float32, device=x.device)
        t = {"x": x, "w": w, "labels": y, "loss": loss, "lse": lse}
        if fused:
            gx, gw = torch.empty_like(x), torch.empty_like(w)
            t.update(grad_x=gx, grad_w=gw)
            lib.run("forward_backward", t, (n, v, d))
            return loss, gx, gw
        lib.run("forward", t, (n, v, d))
        if not has_backward:
            return loss, None, None
        gx, gw = torch.empty_like(x), torch.empty_like(w)
        t.update(grad_loss=torch.ones((), dtype=torch.float32, device=x.device),
                 grad_x=gx, grad_w=gw)
        lib.run("backward", t, (n, v, d))
        return loss, gx, gw

    def forward(x, w, y):
        n, d = x.shape
        loss = torch.empty((), dtype=torch.float32, device=x.device)
        lse = torch.empty(n, dtype=torch.float32, device=x.device)
        lib.run("forward", {"x": x, "w": w, "labels": y, "loss": loss, "lse": lse},
                (n, w.shape[0], d))
        return loss
    fwd_bwd.forward = forward
    return fwd_bwd, note


def make_package_impl(fused_backward=False, filter_ignored=False):
    """The package's linear_cross_entropy (with `fused_backward`: the fused
    forward+backward, lossjit::linear_cross_entropy_with_grad)."""
    import lossjit  # noqa: F401  (import errors say why it is unavailable)
    plain = getattr(lossjit, "linear_cross_entropy", None)
    if plain is None:
        raise RuntimeError("lossjit has no linear_cross_entropy")

    def fn(x, w, y):
        extra = {"filter_ignored": True} if filter_ignored else {}
        if fused_backward and torch.is_grad_enabled():
            return plain(x, w, y, fused_backward=True, **extra)
        return plain(x, w, y, **extra)
    # Smoke check on CUDA against eager before trusting it with big shapes.
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(33, 64, device="cuda", dtype=torch.float16, generator=g)
    w = torch.randn(1000, 64, device="cuda", dtype=torch.float16, generator=g) * 0.1
    y = torch.randint(0, 1000, (33,), device="cuda", generator=g)
    got = fn(x, w, y)
    want = F.cross_entropy(F.linear(x.float(), w.float()), y)
    if not torch.allclose(got.float(), want, rtol=1e-3, atol=1e-3):
        raise RuntimeError(f"smoke check failed: {got.item()} vs {want.item()}")
    note = f"python package {getattr(lossjit, '__version__', '')}".strip()
    note += ", fused_backward=True" if fused_backward else ""
    return autograd_impl(fn), note + (", filter_ignored=True" if filter_ignored else "")


# ----------------------------------------------------------------- peers


def autograd_impl(loss_fn):
    def fwd_bwd(x, w, y):
        xg = x.detach().requires_grad_(True)
        wg = w.detach().requires_grad_(True)
        loss = loss_fn(xg, wg, y)
        loss.backward()
        return loss.detach(), xg.grad, wg.grad

    def forward(x, w, y):
        with torch.no_grad():
            return loss_fn(x, w, y)
    fwd_bwd.forward = forward
    return fwd_bwd


def eager_loss(x, w, y):
    return F.cross_entropy(F.linear(x, w).float(), y, ignore_index=IGNORE_INDEX)


def make_impl(name, args, dtype_name, shape):
    """(fwd_bwd, note) or raises with the reason it is unavailable."""
    if name == "eager":
        return autograd_impl(eager_loss), ""
    if name == "compile":
        return autograd_impl(torch.compile(eager_loss, dynamic=False)), "dynamic=False"
    if name == "torch_lce":
        fn = getattr(F, "linear_cross_entropy", None)
        if fn is None:
            raise RuntimeError(f"torch {torch.__version__} has no F.linear_cross_entropy")
        return autograd_impl(lambda x, w, y: fn(x, w, y, ignore_index=IGNORE_INDEX)), ""
    if name == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
        return autograd_impl(lambda x, w, y: liger_fused_linear_cross_entropy(
            x, w, y, ignore_index=IGNORE_INDEX)), _version("liger_kernel")
    if name == "cce":
        from cut_cross_entropy import linear_cross_entropy
        return autograd_impl(lambda x, w, y: linear_cross_entropy(
            x, w, y, ignore_index=IGNORE_INDEX)), _version("cut_cross_entropy")
    if name == "lossjit":
        if args.device != "cuda":
            raise RuntimeError("needs CUDA")
        reasons = []
        try:
            return make_package_impl()
        except Exception as e:  # noqa: BLE001 - any failure means: use the AOT path
            reasons.append(f"package: {type(e).__name__}: {e}")
        try:
            return make_aot_impl(args.aot_dir, dtype_name, shape)
        except Exception as e:  # noqa: BLE001
            reasons.append(f"AOT: {type(e).__name__}: {e}")
        raise RuntimeError("; ".join(reasons))
    if name == "lossjit-fused":
        # The package's fused forward+backward (on CUDA with 16-bit storage:
        # the forward's statistics, then the backward's vocabulary chunks).
        if args.device != "cuda":
            raise RuntimeError("needs CUDA")
        return make_package_impl(fused_backward=True)
    if name == "lossjit-filtered":
        if args.device != "cuda":
            raise RuntimeError("needs CUDA")
        return make_package_impl(filter_ignored=True)
    if name == "lossjit-aot":
        # The default tile through the AOT C API, whatever the package does.
        if args.device != "cuda":
            raise RuntimeError("needs CUDA")
        return make_aot_impl(args.aot_dir, dtype_name, shape)
    if name in HOPPER_TILES or name in HOPPER_FUSED:
        # The same op on an opt-in Hopper tile, through its AOT C API.
        if args.device != "cuda":
            raise RuntimeError("needs CUDA")
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) != (9, 0):
            raise RuntimeError(f"sm_90a code needs compute capability 9.0, not {major}.{minor}")
        tile = HOPPER_TILES.get(name) or HOPPER_FUSED[name]
        return make_aot_impl(args.aot_dir, dtype_name, shape, tile, fused=name in HOPPER_FUSED,
                             l2_promotion=L2_PROMOTION.get(name))
    if name in args.extra:
        return args.extra[name](args, dtype_name, shape)
    raise ValueError(name)


# Every impl make_impl() knows besides the Hopper tiles and --extra-impls.
BUILTIN_IMPLS = ("eager", "compile", "torch_lce", "liger", "cce", "lossjit", "lossjit-fused",
                 "lossjit-filtered", "lossjit-aot")


def load_extra_impls(path):
    """--extra-impls: the IMPLS dict of the Python file at `path` (impl name
    -> factory(args, dtype_name, (N, V, D)) returning (fwd_bwd, note), as
    make_impl does), so a variant of one's own is measured side by side."""
    if not path:
        return {}
    spec = importlib.util.spec_from_file_location("bench_lce_extra_impls", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    impls = getattr(module, "IMPLS", None)
    if not isinstance(impls, dict) or not all(callable(f) for f in impls.values()):
        raise ValueError(f"{path} defines no IMPLS dict of impl name -> factory")
    return impls


# Benchmark impls of lossjit's opt-in Hopper tiles: impl -> AOT tile suffix.
HOPPER_TILES = {"lossjit-tma": "tma", "lossjit-ws": "ws", "lossjit-persist": "persist",
                "lossjit-vocab": "vocab", "lossjit-lend": "lend", "lossjit-wide": "wide",
                "lossjit-band": "band", "lossjit-wide256": "wide256",
                "lossjit-cluster": "cluster", "lossjit-wide256-cluster": "wide256-cluster",
                "lossjit-wide256-cluster4": "wide256-cluster4",
                "lossjit-wide256-cluster-persist": "wide256-cluster-persist"}
# The fused forward+backward of an AOT Hopper variant built with --fused:
# impl -> AOT tile suffix.
HOPPER_FUSED = {"lossjit-wide256-cluster-fused": "wide256-cluster",
                "lossjit-wide256-cluster-fused1g": "wide256-cluster-rows1g",
                "lossjit-wide256-cluster-fused-l2none": "wide256-cluster"}
# Impls whose tensor maps ask for another L2 promotion than the launchers'
# default (128 bytes, CUTLASS's): impl -> CUtensorMapL2promotion suffix. The
# same bits; the lease times what the hint is worth.
L2_PROMOTION = {"lossjit-wide256-cluster-fused-l2none": "NONE"}


# The default --impls, in order. The peers before lossjit's explicit Hopper
# tiles: a tile that hangs or fails on new hardware then costs no comparison
# with what users run.
DEFAULT_IMPLS = ("eager,torch_lce,lossjit,liger,cce,lossjit-fused,"
                 "lossjit-filtered,lossjit-vocab,"
                 "lossjit-band,lossjit-wide256,lossjit-cluster,lossjit-wide256-cluster,"
                 "lossjit-wide256-cluster-fused,lossjit-wide256-cluster-fused1g,"
                 "lossjit-wide256-cluster4,lossjit-wide256-cluster-persist,"
                 "lossjit-lend,lossjit-wide,"
                 "lossjit-persist,lossjit-tma,"
                 "lossjit-ws,lossjit-wide256-cluster-fused-l2none,"
                 "compile")


def _version(module):
    try:
        from importlib.metadata import version
        return version(module.replace("_", "-"))
    except Exception:  # noqa: BLE001
        return ""


# ---------------------------------------------------------------- timing


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


# A call slower than this is timed once (its warm-up) and not repeated.
SLOW_CALL_SECONDS = 10.0


def timed_calls(fn, x, w, y, device, seconds):
    """ms of each call of fn(x, w, y): at least 3, at most 20, for about
    `seconds` (CUDA events on CUDA)."""
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 20):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(x, w, y)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn(x, w, y)
            times.append((time.perf_counter() - t) * 1e3)
    return times


def measure(fwd_bwd, x, w, y, device, seconds):
    """(median ms, all ms, first-call ms, peak bytes, outputs)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    out = fwd_bwd(x, w, y)  # warm-up: JIT, autotuning, compilation
    sync(device)
    first_ms = (time.perf_counter() - t0) * 1e3
    if first_ms > SLOW_CALL_SECONDS * 1e3:
        peak = torch.cuda.max_memory_allocated() - base if device == "cuda" else None
        return first_ms, [first_ms], first_ms, peak, out
    out = None
    times = timed_calls(fwd_bwd, x, w, y, device, seconds)
    peak = None
    if device == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fwd_bwd(x, w, y)
        sync(device)
        peak = torch.cuda.max_memory_allocated() - base
    else:
        out = fwd_bwd(x, w, y)
    return statistics.median(times), times, first_ms, peak, out


def measure_forward(forward, x, w, y, device, seconds):
    """Median ms of the forward alone (the issue's forward target counts
    2·N·D·V), after one warm-up."""
    forward(x, w, y)
    sync(device)
    return statistics.median(timed_calls(forward, x, w, y, device, seconds))


def reference_loss(x, w, y, chunk=2048):
    """fp32 mean cross-entropy from the stored inputs, in row chunks."""
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    count = int((y != IGNORE_INDEX).sum())
    wf = w.float()
    for i in range(0, x.shape[0], chunk):
        z = x[i:i + chunk].float() @ wf.T
        total += F.cross_entropy(z, y[i:i + chunk], ignore_index=IGNORE_INDEX,
                                 reduction="sum").double()
    return (total / max(count, 1)).item()


def reference_grads(x, w, y, chunk=1024):
    """dX and dW of the mean loss in fp32 from the stored inputs (TF32 off),
    in row chunks: the yardstick for every implementation's gradients,
    eager's included (which rounds dlogits to the storage type)."""
    count = max(int((y != IGNORE_INDEX).sum()), 1)
    wf = w.float()
    gx = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    gw = torch.zeros(w.shape, dtype=torch.float32, device=x.device)
    for i in range(0, x.shape[0], chunk):
        xs = x[i:i + chunk].float()
        ys = y[i:i + chunk]
        p = torch.softmax(xs @ wf.T, dim=1)
        valid = ys != IGNORE_INDEX
        rows = torch.arange(ys.shape[0], device=x.device)[valid]
        p[rows, ys[valid]] -= 1.0
        p[~valid] = 0.0
        p /= count
        gx[i:i + chunk] = p @ wf
        gw += p.T @ xs
        del p, xs
    return gx, gw


def rel(a, b):
    if a is None or b is None:
        return None
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run")
    ap.add_argument("--n", default="4096,8192")
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--v", type=int, default=128256)
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--impls", default=DEFAULT_IMPLS)
    ap.add_argument("--aot-dir", default=os.path.join(os.path.dirname(__file__), "../../.bundle/aot"))
    ap.add_argument("--ignored", type=float, default=0.0,
                    help="fraction of rows (the first ones) whose target is ignore_index")
    ap.add_argument("--seconds", type=float, default=3.0, help="timing per measurement")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--extra-impls", default="",
                    help="a Python file whose IMPLS dict maps more impl names to factories "
                         "f(args, dtype_name, (N, V, D)) -> (fwd_bwd, note), as make_impl")
    ap.add_argument("--impl-timeout", type=float, default=0.0,
                    help="the most seconds one impl's process may take (default: its share "
                         "of what is left of the budget)")
    ap.add_argument("--in-process", action="store_true",
                    help="measure every impl in this process (a kernel that hangs or breaks "
                         "the CUDA context then costs every impl after it)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--eager-reference", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not 0.0 <= args.ignored <= 1.0:
        ap.error(f"--ignored must be a fraction in [0, 1], got {args.ignored}")
    if args.impl_timeout < 0:
        ap.error(f"--impl-timeout must be >= 0 seconds, got {args.impl_timeout}")
    try:
        args.extra = load_extra_impls(args.extra_impls)
    except Exception as e:  # noqa: BLE001 - any failure to load it is a bad argument
        ap.error(f"--extra-impls: {type(e).__name__}: {e}")
    known = set(BUILTIN_IMPLS) | set(HOPPER_TILES) | set(HOPPER_FUSED)
    clash = sorted(known & set(args.extra))
    if clash:
        ap.error(f"--extra-impls: {', '.join(clash)} already name built-in impls")
    names = [name for name in args.impls.split(",") if name]
    unknown = [name for name in names if name not in known and name not in args.extra]
    if not names or unknown:
        ap.error(f"--impls: unknown impl(s) {', '.join(unknown) or '(none given)'}; expected "
                 f"some of {', '.join(sorted(known | set(args.extra)))}")
    if len(set(names)) != len(names):
        ap.error(f"--impls: an impl is named twice: {args.impls}")
    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_lce: no CUDA device; nothing measured (use --device cpu for a dry run)")
        return 2
    if args.child:
        log(f"bench_lce: {','.join(names)} in process {os.getpid()}")
    if args.child or args.in_process:
        info, results = measure_impls(args, names, args.eager_reference or "eager" in names)
    else:
        info, results = measure_isolated(args, names)
    table = save(args.out, info, results)
    if not args.child:
        print()
        print(table, flush=True)
    return 0


def run_info(args, device_name):
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "host": platform.node(),
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": {"N": args.n, "D": args.d, "V": args.v},
        "ignored": args.ignored,
    }


def configs_of(args):
    """(dtype, N) of every measurement, smaller N first for every dtype."""
    return [(dt, int(n)) for n in args.n.split(",") for dt in args.dtypes.split(",")]


def host_peak_mib():
    """This process's peak resident memory so far (VmHWM), MiB; None where
    /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def measure_impls(args, names, eager_reference):
    """(info, rows): every impl of `names` measured in this process, for
    each shape in turn; with `eager_reference`, the gradients are also
    compared with eager PyTorch's (computed here when eager is not among
    `names`)."""
    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    info = run_info(args, torch.cuda.get_device_name(0) if device == "cuda"
                    else platform.processor())
    if not args.child:
        log("bench_lce:", json.dumps(info))
    results = []
    impl_cache = {}
    compile_used = False
    last_first = {}  # (impl, dtype) -> (N, first-call seconds), to predict the next N
    # Smaller N first for every dtype, so each implementation gets its
    # smallest shape measured before the budget runs out on bigger ones.
    for dtype_name, n in configs_of(args):
        dtype = dtypes[dtype_name]
        d, v = args.d, args.v
        g = torch.Generator(device=device).manual_seed(n)
        x = torch.randn(n, d, device=device, dtype=dtype, generator=g)
        w = (torch.randn(v, d, device=device, dtype=dtype, generator=g) * d ** -0.5).to(dtype)
        y = torch.randint(0, v, (n,), device=device, generator=g)
        y[::97] = IGNORE_INDEX
        y[:round(args.ignored * n)] = IGNORE_INDEX
        ref = reference_loss(x, w, y)
        flops = 6.0 * n * d * v
        eager_grads = None
        ref_grads = None  # fp32 dX, dW: computed at the first gradients
        for name in names:
            row = {"impl": name, "dtype": dtype_name, "N": n, "D": d, "V": v,
                   "pid": os.getpid()}
            left = args.budget - elapsed()
            window = min(args.seconds, max(1.0, left / 20))
            # torch.compile (dynamic=False) compiles again for every shape;
            # anything else: a warm-up and a few timing windows.
            need = (120 if not compile_used else 90) if name == "compile" else 5 * window
            if (name, dtype_name) in last_first:
                n0, t0 = last_first[(name, dtype_name)]
                need = max(need, 2 * t0 * n / n0 + 5)
            if left < need:
                row["status"] = "skipped (time)"
                results.append(row)
                continue
            # lossjit's AOT path decides per shape (backward chunking).
            key = (name, dtype_name, n if name.startswith("lossjit") else None)
            try:
                if key not in impl_cache:
                    impl_cache[key] = make_impl(name, args, dtype_name, (n, v, d))
                fwd_bwd, note = impl_cache[key]
            except Exception as e:  # noqa: BLE001
                row["status"] = "unavailable"
                row["note"] = f"{type(e).__name__}: {e}"[:300]
                log(f"{name} {dtype_name}: unavailable: {row['note']}")
                results.append(row)
                continue
            try:
                median, times, first, peak, out = measure(fwd_bwd, x, w, y, device, window)
                if name == "compile":
                    compile_used = True
                last_first[(name, dtype_name)] = (n, median / 1e3)
                loss, gx, gw = out
                row.update(status="ok", ms=median, times_ms=times, first_call_ms=first,
                           tflops=flops / (median * 1e-3) / 1e12 if gx is not None else None,
                           peak_gib=peak / 2 ** 30 if peak is not None else None,
                           loss=float(loss), loss_err=abs(float(loss) - ref) / abs(ref),
                           note=note)
                if gx is None:
                    row["status"] = "ok (forward only)"
                # The forward alone, but not after a call too slow to repeat,
                # nor for torch.compile (no_grad would compile it again).
                if (getattr(fwd_bwd, "forward", None) is not None and name != "compile"
                        and first <= SLOW_CALL_SECONDS * 1e3):
                    fwd_ms = measure_forward(fwd_bwd.forward, x, w, y, device,
                                             min(args.seconds, max(0.5, left / 40)))
                    row.update(fwd_ms=fwd_ms,
                               fwd_tflops=2.0 * n * d * v / (fwd_ms * 1e-3) / 1e12)
                if name == "eager":
                    eager_grads = (gx, gw)
                elif eager_grads is None and eager_reference and gx is not None:
                    eager_grads = eager_gradients(x, w, y)
                if name != "eager" and eager_grads and gx is not None:
                    row["dx_vs_eager"] = rel(gx, eager_grads[0])
                    row["dw_vs_eager"] = rel(gw, eager_grads[1])
                if gx is not None and ref_grads is None:
                    try:
                        ref_grads = reference_grads(x, w, y)
                    except Exception as e:  # noqa: BLE001 - the reference, not this impl
                        ref_grads = False
                        log(f"fp32 reference gradients unavailable: {type(e).__name__}: {e}")
                if gx is not None and ref_grads:
                    row["dx_err"] = rel(gx, ref_grads[0])
                    row["dw_err"] = rel(gw, ref_grads[1])
                del out, loss, gx, gw
                log(f"{name} {dtype_name} N={n}: {median:.2f} ms "
                    f"(first call {first:.0f} ms) peak "
                    f"{row['peak_gib'] if row['peak_gib'] is not None else float('nan'):.2f} GiB "
                    f"loss err {row['loss_err']:.2e}")
            except Exception as e:  # noqa: BLE001
                row["status"] = "failed"
                row["note"] = f"{type(e).__name__}: {e}"[:300]
                row["traceback"] = traceback.format_exc()[-2000:]
                log(f"{name} {dtype_name} N={n}: FAILED {row['note']}")
            row["host_peak_mib"] = host_peak_mib()
            results.append(row)
            save(args.out, info, results)  # partial results survive a kill
            if device == "cuda":
                torch.cuda.empty_cache()
        eager_grads = ref_grads = None
        del x, w, y
    return info, results


def eager_gradients(x, w, y):
    """Eager PyTorch's dX and dW of the mean loss (False where they cannot
    be formed): what bench.json's *_vs_eager columns compare with."""
    try:
        _, gx, gw = autograd_impl(eager_loss)(x, w, y)
        return gx, gw
    except Exception as e:  # noqa: BLE001 - the comparison, not the impl measured
        log(f"eager gradients unavailable: {type(e).__name__}: {e}")
        return False


# A measuring process gets at least this many seconds (importing torch,
# creating the CUDA context, the inputs and the fp32 reference come first),
# or the impl is skipped; its budget (from its spawn) stops
# IMPL_GRACE_SECONDS before it is killed, so that a measurement it starts
# near the end can finish and be saved.
IMPL_MIN_SECONDS = 20.0
IMPL_GRACE_SECONDS = 5.0


def measure_isolated(args, names):
    """(info, rows): each impl measured in a process of its own, as the
    side-by-side benchmarks do: a kernel that hangs, crashes or breaks the
    CUDA context (a sticky error) costs that impl only; it is killed at its
    time (a share of what is left: up to twice an even split) and its
    missing rows say how it ended."""
    # The device's name comes from the first child that reports (this
    # process creates no CUDA context).
    info, results = run_info(args, "?"), []
    reported = False
    for i, name in enumerate(names):
        left = args.budget - elapsed()
        if left < IMPL_MIN_SECONDS:
            results += [dict(impl=name, dtype=dt, N=n, D=args.d, V=args.v,
                             status="skipped (time)") for dt, n in configs_of(args)]
            continue
        share = min(left, max(IMPL_MIN_SECONDS, 2 * left / (len(names) - i)))
        if args.impl_timeout:
            share = min(share, args.impl_timeout)
        child_info, rows = run_impl_process(args, name, share, "eager" in names)
        if child_info and not reported:
            info, reported = child_info, True
        results += rows
        save(args.out, info, results)  # partial results survive a kill
    return info, results


def exit_description(code):
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def run_impl_process(args, name, seconds, eager_reference):
    """(info or None, rows) of `name` measured by this script in a child
    process within `seconds`; its output is relayed as it comes."""
    with tempfile.TemporaryDirectory(prefix="bench-lce-") as out:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--impls", name,
               "--out", out, "--budget", f"{max(seconds - IMPL_GRACE_SECONDS, 1.0):.1f}",
               "--n", args.n, "--d", str(args.d), "--v", str(args.v), "--dtypes", args.dtypes,
               "--aot-dir", args.aot_dir, "--ignored", str(args.ignored),
               "--seconds", str(args.seconds), "--device", args.device]
        if args.extra_impls:
            cmd += ["--extra-impls", args.extra_impls]
        if eager_reference:
            cmd.append("--eager-reference")
        # A session of its own: a kill takes its compile workers too.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True,
                                env=dict(os.environ, BENCH_LCE_START=repr(LOG_START),
                                         BENCH_LCE_SPAWNED=repr(time.monotonic())))
        tail = collections.deque(maxlen=8)

        def relay():
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                if line.strip():
                    tail.append(line.strip())
        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=seconds)
            ended = None if code == 0 else f"crashed ({exit_description(code)})"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            ended = f"hung (killed after {seconds:.0f} s)"
        reader.join(timeout=5)
        try:
            with open(os.path.join(out, "bench.json")) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
    rows = data.get("results", [])
    done = {(r["dtype"], r["N"]) for r in rows}
    missing = [(dt, n) for dt, n in configs_of(args) if (dt, n) not in done]
    if ended:
        log(f"{name}: {ended}")
    for dt, n in missing:
        rows.append(dict(impl=name, dtype=dt, N=n, D=args.d, V=args.v, pid=proc.pid,
                         status=ended or "no result (the process ended without one)",
                         note=" / ".join(tail)[-300:]))
    return data.get("info"), rows




def save(out, info, results):
    """Writes bench.json and bench.md; returns the table."""
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump({"info": info, "results": results}, f, indent=1)
    table = render(info, results)
    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write(table)
    return table


def render(info, results):
    def f(v, fmt):
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)
    lines = [
        f"### fwd+bwd, linear + cross-entropy (mean), D={info['shape']['D']}, "
        f"V={info['shape']['V']}: {info['device']}, torch {info['torch']}",
        "",
        "| impl | dtype | N | fwd+bwd ms | TFLOP/s | fwd ms | fwd TFLOP/s | peak GiB | "
        "first call ms | loss err | dX err | dW err | status / note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        note = r.get("status", "")
        if r.get("note"):
            note += f": {r['note']}"
        lines.append(
            f"| {r['impl']} | {r['dtype']} | {r['N']} | {f(r.get('ms'), '.2f')} | "
            f"{f(r.get('tflops'), '.0f')} | {f(r.get('fwd_ms'), '.2f')} | "
            f"{f(r.get('fwd_tflops'), '.0f')} | {f(r.get('peak_gib'), '.2f')} | "
            f"{f(r.get('first_call_ms'), '.0f')} | "
            f"{f(r.get('loss_err'), '.1e')} | {f(r.get('dx_err'), '.1e')} | "
            f"{f(r.get('dw_err'), '.1e')} | {note.replace('|', '/')[:160]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
