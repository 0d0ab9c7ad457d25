"""Compiled kernels, cached per specialization, and how to run them.

A specialization is (storage dtype, label dtype, bias, ignore_index,
reduction, logit scale, softcap[, backward flags]) plus the device (CPU, or the CUDA arch of the
device). Kernels are generic in N, V and D, so one compiled op serves every
shape. The graph behind a forward op is either the C++ preset
(``_lossjit.lce_graph``) or one the ``@lossjit.jit`` decorator built; the
latter are registered here under an id derived from their IR text.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch

from . import _autotune
from ._ext import C, HAS_COMPILER, NO_COMPILER_MESSAGE

STORAGE_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
                  torch.float64: "f64"}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in for `dtype` storage, and that of every
    row value they take or give (losses, lse, statistics, their gradients,
    class weights): float64 for float64 (gradcheck, reference runs),
    float32 otherwise (16-bit storage never means 16-bit math)."""
    return torch.float64 if dtype == torch.float64 else torch.float32

LABEL_DTYPES = {torch.int32: "i32", torch.int64: "i64"}
_BUFFER_DTYPES = {**STORAGE_DTYPES, **LABEL_DTYPES}


def dtype_name(dtype: torch.dtype) -> str:
    """A tensor dtype as the launch plans spell it ('f32', 'bf16', 'i64'...);
    other dtypes by torch's name, which no plan uses (so launch refuses)."""
    name = _BUFFER_DTYPES.get(dtype)
    return name if name is not None else str(dtype).replace("torch.", "")


def option_text(value: float) -> str:
    """A float as the manifests spell it: repr(), like loss::formatF64."""
    return repr(float(value))


class Spec(NamedTuple):
    """What a fused forward kernel is specialized on (shapes are not here).
    The logits are softcap(logit_scale * (x @ w.T + b)); softcap 0 is none."""

    dtype: str
    label_type: str
    bias: bool
    ignore_index: int
    reduction: str
    logit_scale: float = 1.0
    softcap: float = 0.0

    def options(self) -> Dict[str, str]:
        """The manifest options of a bundle made for this spec (the logit
        transforms only when set, as the compiler writes them)."""
        options = {
            "dtype": self.dtype,
            "label_type": self.label_type,
            "bias": "true" if self.bias else "false",
            "ignore_index": str(self.ignore_index),
            "reduction": self.reduction,
        }
        if self.logit_scale != 1.0:
            options["logit_scale"] = option_text(self.logit_scale)
        if self.softcap != 0.0:
            options["softcap"] = option_text(self.softcap)
        return options


#: The workspace budget of a chunked backward on the host: it also bounds the
#: threads' stack scratch, and chunks of a few hundred rows stay in cache.
CPU_WORKSPACE_BYTES = 64 << 20
#: On CUDA: the 256 MiB the Hopper issue allows next to dX and dW. Chunks are
#: ~4x as many rows as at 64 MiB (~350 at V = 128256 in the fused op), so
#: the f32 dW accumulator crosses DRAM ~4x less often; a small N takes no
#: more than its N x V.
CUDA_WORKSPACE_BYTES = 256 << 20


class BackwardFlags(NamedTuple):
    needs_grad_x: bool
    needs_grad_w: bool
    strategy: str = "auto"
    #: 0: the device's default (CPU_WORKSPACE_BYTES / CUDA_WORKSPACE_BYTES).
    workspace_bytes: int = 0
    #: The backward also takes the gradient of lse (a per-row input).
    grad_lse: bool = False


def backward_strategy(dtype: torch.dtype, device: torch.device, n: int, v: int,
                      needs_grad_w: bool = True, fused: bool = False, d: int = 0) -> str:
    """The backward's (`fused`: the fused op's) schedule for a call of N rows
    over a vocabulary of V: on CUDA with 16-bit storage, dW wanted and N <= V,
    vocabulary chunks ("vocab_chunked"): each dW row is formed once over all
    rows and rounded straight into grad_weight, so the f32 scratch is dX's
    N x D instead of the row chunks' V x D dW accumulator (2 GiB at a 128K x
    4096 head), the same 6.N.D.V flops in the backward (8 in the fused op,
    which forms the forward's statistics first). But where the JIT compiles
    the kernels (with CUDA_WORKSPACE_BYTES; a prebuilt row-chunk bundle may
    have been built with a smaller budget) and all N rows fit one row chunk
    of it (`fits_one_row_chunk`), "auto": that chunk rounds its dW straight
    into grad_weight too (lce_bwd_dw_single), with neither a V x D nor an
    N x D f32 accumulator, and the fused op forms the logits once
    (6.N.D.V). Otherwise "auto" (the lowering's choice: row chunks on CUDA,
    which without dW need no accumulator at all; the CPU chunks the
    vocabulary for 16-bit storage already).
    On the host, the fused op with 16-bit storage and dW takes the row
    chunks ("chunked": the logits once, 6.N.D.V instead of the vocabulary
    chunks' 8) where their V x D f32 dW accumulator (`d`: D) takes at most
    half of CPU_WORKSPACE_BYTES; the chunks get the other half
    (_with_workspace), so the op stays within the budget."""
    if (device.type == "cpu" and fused and dtype in (torch.float16, torch.bfloat16)
            and needs_grad_w and 0 < 4 * v * d <= CPU_WORKSPACE_BYTES // 2):
        return "chunked"
    if (device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and needs_grad_w
            and n <= v and not (HAS_COMPILER and fits_one_row_chunk(n, v, fused))):
        return "vocab_chunked"
    return "auto"


def fits_one_row_chunk(n: int, v: int, fused: bool, budget: Optional[int] = None) -> bool:
    """Whether the GPU row chunks take all `n` rows in one chunk of `budget`
    bytes whatever tile the JIT picks: the budget holds the row factors (4
    bytes a row) and the [N, V] chunk at its widest, 6 bytes an element in
    the fused op (f32 raw logits and the tensor cores' 16-bit dZ) and 4 in
    the backward (the SIMT tile's f32 dZ; tensor cores store 2), as
    PlanBuilder::chunked sizes it. The fused op's tensor-core tiles also
    keep each tile's row statistics for lce_fused_lse: 8 bytes a state, one
    per row, column tile and warp column. The tiles the JIT picks (auto and
    the autotune candidates) have warps of 32 columns or more and at most
    256 columns a tile (mma.sync's 64x64: two states per 64 columns, its
    64x128 and 128x128 four per 128; wgmma one per 64 or 128), so a row
    has at most cdiv(V, 32) + 7 states.
    `budget`: CUDA_WORKSPACE_BYTES."""
    per_row = 4 + v * (6 if fused else 4)
    if fused:
        per_row += 8 * ((v + 31) // 32 + 7)
    if budget is None:
        budget = CUDA_WORKSPACE_BYTES
    return n * per_row <= budget


def _with_workspace(flags: "BackwardFlags", device: torch.device) -> "BackwardFlags":
    """`flags` with its workspace budget resolved for `device`."""
    if flags.workspace_bytes:
        return flags
    if device.type == "cuda":
        budget = CUDA_WORKSPACE_BYTES
    elif flags.strategy == "chunked":
        # Only backward_strategy asks for row chunks on the host (16-bit
        # storage): the other half holds their f32 dW accumulator.
        budget = CPU_WORKSPACE_BYTES // 2
    else:
        budget = CPU_WORKSPACE_BYTES
    return flags._replace(workspace_bytes=budget)


_lock = threading.Lock()
_forward_ops: Dict[Tuple[Any, ...], Any] = {}
_backward_ops: Dict[Tuple[Any, ...], Any] = {}
_fused_ops: Dict[Tuple[Any, ...], Any] = {}
_graphs: Dict[str, Any] = {}
_cuda_arch: Dict[int, str] = {}
_cuda_capability: Dict[int, Tuple[int, int]] = {}

#: Overrides the arch the JIT compiles for (and that of the prebuilt bundles
#: a build without the compiler loads), e.g. sm_90 to keep a Hopper on the
#: mma.sync kernels instead of sm_90a's wgmma. Read once per device.
ARCH_ENV = "LOSSJIT_CUDA_ARCH"


def register_graph(graph: Any) -> str:
    """Registers a decorator-built graph; returns the id the op takes."""
    graph_id = "jit-" + hashlib.sha256(graph.text().encode()).hexdigest()[:20]
    with _lock:
        _graphs.setdefault(graph_id, graph)
    return graph_id


def registered_graph(graph_id: str) -> Any:
    try:
        return _graphs[graph_id]
    except KeyError:
        raise ValueError(
            f"lossjit: unknown graph id {graph_id!r}; ids come from @lossjit.jit in "
            "this process") from None


def _requested_arch() -> str:
    return os.environ.get(ARCH_ENV, "").strip()


def cuda_capability(index: int) -> Tuple[int, int]:
    """(major, minor) of CUDA device `index`."""
    cc = _cuda_capability.get(index)
    if cc is None:
        cc = tuple(C.cuda_compute_capability(index))
        _cuda_capability[index] = cc
    return cc


def cuda_arch(index: int) -> str:
    """The arch lossjit's kernels for CUDA device `index` are built for:
    sm_90a on compute capability 9.0 (wgmma), sm_XY elsewhere, or
    LOSSJIT_CUDA_ARCH when set (ValueError if it cannot run there)."""
    arch = _cuda_arch.get(index)
    if arch is None:
        major, minor = cuda_capability(index)
        arch = C.select_jit_arch(major, minor, _requested_arch())
        _cuda_arch[index] = arch
    return arch


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _require_compiler(what: str) -> None:
    if not HAS_COMPILER:
        raise RuntimeError(f"lossjit: {what} needs the compiler, but {NO_COMPILER_MESSAGE}")


def _compile(graph_factory, device: torch.device, bundle_options: Dict[str, str],
             op_family: str = "linear_cross_entropy"):
    if device.type == "cpu":
        _require_compiler("the CPU backend")
        return C.CpuOp.compile(graph_factory())
    if device.type == "cuda":
        index = _device_index(device)
        arch = cuda_arch(index)
        if HAS_COMPILER:
            return C.compile_gpu(graph_factory(), arch)
        major, minor = cuda_capability(index)
        # An option a bundle lacks reads as "": asking for "" keeps a plain
        # request from matching a bundle with a softcap or scale.
        wanted = {"logit_scale": "", "softcap": "", **bundle_options}
        return C.find_gpu_bundle(op_family, wanted, major, minor,
                                 arch if _requested_arch() else "")
    raise ValueError(
        f"lossjit: tensors on '{device.type}' are not supported; lossjit runs on "
        "CPU and CUDA tensors")


class Kernel:
    """A compiled op and how to call it; `run` is the per-call hot path."""

    __slots__ = ("op", "cpu", "names", "dims", "tuned")

    def __init__(self, op: Any, device: torch.device, tuned: Any = None) -> None:
        self.op = op
        self.cpu = device.type == "cpu"
        self.names = [p[0] for p in op.params]
        self.dims = list(getattr(op, "dims", ["N", "V", "D"]))
        self.tuned = tuned

    @property
    def options(self) -> Dict[str, str]:
        return dict(self.op.options)

    def run(self, device: torch.device, n: int, v: int, d: int,
            buffers: Dict[str, torch.Tensor], t: int = 0) -> None:
        """Runs on contiguous tensors bound by param name (`t`: a teacher's
        hidden size, for plans with a teacher). On CPU every label is checked
        (ignore_index or in [0, V), else IndexError) before launch."""
        if self.cpu:
            self.op.launch([(buffers[k].data_ptr(), buffers[k].numel(),
                             dtype_name(buffers[k].dtype)) for k in self.names],
                           n, v, d, torch.get_num_threads(), True, t)
            return
        op = self.tuned.op_for(self, device, n, v, d, buffers, t) if self.tuned else self.op
        _launch_cuda(op, self.names, self.dims, device, n, v, d, buffers, t)


class _Tuned:
    """LOSSJIT_AUTOTUNE=1 on CUDA: the op compiled with the winning tile of
    each shape bucket (lossjit._autotune), timed on first use unless the
    store already names the winner."""

    def __init__(self, factory, arch: str, role: str, dtype: str, strategy: str,
                 options: Dict[str, str]) -> None:
        self.factory, self.arch, self.role = factory, arch, role
        self.dtype, self.strategy, self.options = dtype, strategy, options
        self.ops: Dict[Tuple[int, ...], Any] = {}

    def op_for(self, kernel: "Kernel", device: torch.device, n: int, v: int, d: int,
               buffers: Dict[str, torch.Tensor], t: int = 0) -> Any:
        """The tuned op for this shape (`t`: a teacher's hidden size, which
        the timing launches need as the real one does)."""
        bucket = _autotune.shape_bucket(n, v, d, t)
        op = self.ops.get(bucket)
        if op is not None:
            return op
        index = _device_index(device)
        key = _autotune.store_key(torch.cuda.get_device_name(index), self.arch, self.role,
                                  self.dtype, self.options, bucket)
        store = _autotune.TuningStore(_autotune.default_store_path())
        tile = store.lookup(key)
        compiled: Dict[str, Any] = {}

        def compile_tile(text: str) -> Any:
            if text not in compiled:
                compiled[text] = C.compile_gpu(self.factory(), self.arch, text)
            return compiled[text]

        if tile is not None:
            try:
                compile_tile(tile)
            except Exception as e:  # noqa: BLE001 - a store is never trusted
                warnings.warn(f"lossjit: ignoring the stored autotune winner {tile!r} "
                              f"({key}): {e}; tuning again")
                tile = None
        if tile is None and capturing(index):
            # Timing syncs, which a CUDA graph capture forbids: the untuned
            # op until a call outside the capture tunes this bucket.
            return kernel.op
        if tile is None:
            def time_ms(text: str):
                op = compile_tile(text)
                return _autotune.cuda_event_timer(lambda: _launch_cuda(
                    op, kernel.names, kernel.dims, device, n, v, d, buffers, t), device)
            tile, _ = _autotune.fastest(
                _autotune.candidates(self.arch, self.dtype, self.strategy), time_ms)
            store.record(key, tile)
        op = compile_tile(tile)
        self.ops[bucket] = op
        return op


def capturing(index: int) -> bool:
    """Whether device `index`'s current stream is capturing a CUDA graph
    (where nothing may wait for the host)."""
    with torch.cuda.device(index):
        return torch.cuda.is_current_stream_capturing()


def _kernel(factory, device: torch.device, options: Dict[str, str], dtype: str,
            strategy: str = "auto", op_family: str = "linear_cross_entropy") -> Kernel:
    """The op for `options` on `device`, tuned per shape bucket when
    LOSSJIT_AUTOTUNE=1 asks for it on a CUDA device with the compiler."""
    op = _compile(factory, device, options, op_family)
    tuned = None
    if device.type == "cuda" and HAS_COMPILER and _autotune.enabled():
        tuned = _Tuned(factory, cuda_arch(_device_index(device)), options["pass"], dtype,
                       strategy, options)
    return Kernel(op, device, tuned)


def forward_kernel(dtype: torch.dtype, label_dtype: torch.dtype, bias: bool,
                   ignore_index: int, reduction: str, graph_id: str,
                   device: torch.device, logit_scale: float = 1.0,
                   softcap: float = 0.0) -> Kernel:
    """The compiled forward for these options (and decorator graph `graph_id`,
    or the preset when empty) on `device`; compiled on first use, then cached."""
    key = (dtype, label_dtype, bias, ignore_index, reduction, graph_id, device, logit_scale,
           softcap)
    kernel = _forward_ops.get(key)
    if kernel is not None:
        return kernel
    spec = Spec(STORAGE_DTYPES[dtype], LABEL_DTYPES[label_dtype], bias, ignore_index,
                reduction, logit_scale, softcap)
    with _lock:
        kernel = _forward_ops.get(key)
        if kernel is None:
            def factory():
                if graph_id:
                    return registered_graph(graph_id)
                return C.lce_graph(dtype=spec.dtype, label_type=spec.label_type,
                                   bias=spec.bias, ignore_index=spec.ignore_index,
                                   reduction=spec.reduction, logit_scale=spec.logit_scale,
                                   softcap=spec.softcap)
            kernel = _kernel(factory, device, {**spec.options(), "pass": "forward"}, spec.dtype)
            _forward_ops[key] = kernel
    return kernel


def backward_kernel(dtype: torch.dtype, label_dtype: torch.dtype, bias: bool,
                    ignore_index: int, reduction: str, flags: BackwardFlags,
                    device: torch.device, logit_scale: float = 1.0,
                    softcap: float = 0.0) -> Kernel:
    """The compiled backward (gradient) function for these options."""
    return _gradient_kernel(_backward_ops, _new_backward_kernel, backward_kernel,
                            (dtype, label_dtype, bias, ignore_index, reduction), flags, device,
                            logit_scale, softcap)


def _gradient_kernel(cache: Dict[Tuple[Any, ...], Any], new_kernel, public, args: tuple,
                     flags: BackwardFlags, device: torch.device, logit_scale: float,
                     softcap: float) -> Kernel:
    """The kernel of `public` (backward_kernel, fused_kernel) for `args` and
    `flags` from `cache`, made by `new_kernel` on first use."""
    if not HAS_COMPILER and device.type == "cuda":
        # Prebuilt (lossjit-aot) backward and fused bundles compute both
        # gradients.
        flags = flags._replace(needs_grad_x=True, needs_grad_w=True)
    key = (*args, flags, device, logit_scale, softcap)
    kernel = cache.get(key)
    if kernel is not None:
        return kernel
    try:
        with _lock:
            kernel = cache.get(key)
            if kernel is None:
                kernel = new_kernel(*args, flags, device, logit_scale, softcap)
                cache[key] = kernel
        return kernel
    except RuntimeError:
        if HAS_COMPILER or device.type != "cuda" or flags.strategy != "vocab_chunked":
            raise
    # A kernel path without the vocabulary chunks (lossjit-aot --strategy
    # vocab_chunked): whatever backward or fused op it holds gives the same
    # gradients (within rounding; the row chunks' f32 dW accumulator takes
    # more memory).
    kernel = public(*args, flags._replace(strategy="auto"), device, logit_scale, softcap)
    with _lock:
        return cache.setdefault(key, kernel)


def _new_backward_kernel(dtype: torch.dtype, label_dtype: torch.dtype, bias: bool,
                         ignore_index: int, reduction: str, flags: BackwardFlags,
                         device: torch.device, logit_scale: float,
                         softcap: float) -> Kernel:
    """backward_kernel's compile (or kernel path lookup) for exactly `flags`."""
    # (The cache key holds the flags as given: the budget is resolved per
    # device, and the device is in the key, so a cache hit does no work for
    # it.)
    flags = _with_workspace(flags, device)
    spec = Spec(STORAGE_DTYPES[dtype], LABEL_DTYPES[label_dtype], bias, ignore_index,
                reduction, logit_scale, softcap)

    def factory():
        return C.lce_graph(dtype=spec.dtype, label_type=spec.label_type,
                           bias=spec.bias, ignore_index=spec.ignore_index,
                           reduction=spec.reduction, gradient=True,
                           strategy=flags.strategy,
                           needs_grad_x=flags.needs_grad_x,
                           needs_grad_w=flags.needs_grad_w,
                           workspace_bytes=flags.workspace_bytes,
                           logit_scale=spec.logit_scale, softcap=spec.softcap,
                           **({"grad_lse": True} if flags.grad_lse else {}))
    options = {**spec.options(), "pass": "backward",
               "grad_x": "true" if flags.needs_grad_x else "false",
               "grad_w": "true" if flags.needs_grad_w else "false"}
    if flags.grad_lse:
        options["grad_lse"] = "true"
    return _strategy_kernel(factory, device, options, spec.dtype, flags.strategy)


def _strategy_kernel(factory, device: torch.device, options: Dict[str, str], dtype: str,
                     strategy: str) -> Kernel:
    """_kernel for a backward or fused op of `strategy`, which the options
    name unless it is auto."""
    if strategy != "auto":
        return _kernel(factory, device, {**options, "strategy": strategy}, dtype, strategy)
    if device.type == "cuda" and not HAS_COMPILER:
        # Prebuilt bundles record the schedule they hold, and a kernel path
        # may hold vocab_chunked ones next to the row chunks "auto" means
        # on CUDA; a path with neither serves any it has.
        try:
            return _kernel(factory, device, {**options, "strategy": "chunked"}, dtype, strategy)
        except RuntimeError:
            pass
    return _kernel(factory, device, options, dtype, strategy)


def fused_kernel(dtype: torch.dtype, label_dtype: torch.dtype, bias: bool,
                 ignore_index: int, reduction: str, flags: BackwardFlags,
                 device: torch.device, logit_scale: float = 1.0,
                 softcap: float = 0.0) -> Kernel:
    """The compiled fused forward+backward (pass "forward_backward"): loss, lse
    and the gradients of grad_loss = 1 in one pass (reduction mean or sum)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"lossjit: the fused forward+backward needs reduction 'mean' or "
                         f"'sum', got {reduction!r}")
    return _gradient_kernel(_fused_ops, _new_fused_kernel, fused_kernel,
                            (dtype, label_dtype, bias, ignore_index, reduction), flags, device,
                            logit_scale, softcap)


def _new_fused_kernel(dtype: torch.dtype, label_dtype: torch.dtype, bias: bool,
                      ignore_index: int, reduction: str, flags: BackwardFlags,
                      device: torch.device, logit_scale: float, softcap: float) -> Kernel:
    """fused_kernel's compile (or kernel path lookup) for exactly `flags`."""
    flags = _with_workspace(flags, device)  # (as for the backward: after the lookup)
    spec = Spec(STORAGE_DTYPES[dtype], LABEL_DTYPES[label_dtype], bias, ignore_index,
                reduction, logit_scale, softcap)

    def factory():
        if not getattr(C, "has_fused_forward_backward", False):
            raise RuntimeError(
                "lossjit: this build's graph builder has no fused "
                "forward+backward; use fused_backward=False")
        return C.lce_graph(dtype=spec.dtype, label_type=spec.label_type,
                           bias=spec.bias, ignore_index=spec.ignore_index,
                           reduction=spec.reduction, gradient=True,
                           fused_forward=True, strategy=flags.strategy,
                           needs_grad_x=flags.needs_grad_x,
                           needs_grad_w=flags.needs_grad_w,
                           workspace_bytes=flags.workspace_bytes,
                           logit_scale=spec.logit_scale, softcap=spec.softcap)
    options = {**spec.options(), "pass": "forward_backward",
               "grad_x": "true" if flags.needs_grad_x else "false",
               "grad_w": "true" if flags.needs_grad_w else "false"}
    return _strategy_kernel(factory, device, options, spec.dtype, flags.strategy)


class ReduceSpec(NamedTuple):
    """What a vocabulary-reduction kernel (loss.vocab_reduce) is specialized
    on: the statistics in order, and the optional operands."""

    dtype: str
    statistics: Tuple[str, ...]
    label_type: str  # "" without labels (no label_logit)
    bias: bool
    class_weights: bool
    ignore_index: int
    logit_scale: float = 1.0
    softcap: float = 0.0
    labels_per_row: int = 0  # K for labels [N, K]; 0 for labels [N]
    targets: str = ""  # dtype of the [N, V] targets ("f32" or dtype); "" for none
    teacher: str = ""  # "" none, "true" a teacher stream, "bias" one with a bias
    teacher_scale: float = 1.0
    jsd_beta: float = 0.5  # β of jsd / mixture_kl's mixture

    def options(self) -> Dict[str, str]:
        options = {"dtype": self.dtype, "statistics": ",".join(self.statistics),
                   "bias": "true" if self.bias else "false",
                   "class_weights": "true" if self.class_weights else "false",
                   "targets": self.targets or "none"}
        if self.label_type:
            options["label_type"] = self.label_type
            options["ignore_index"] = str(self.ignore_index)
            if self.labels_per_row:
                options["labels_per_row"] = str(self.labels_per_row)
        if self.logit_scale != 1.0:
            options["logit_scale"] = option_text(self.logit_scale)
        if self.softcap != 0.0:
            options["softcap"] = option_text(self.softcap)
        if self.teacher:
            options["teacher"] = self.teacher
            if self.teacher_scale != 1.0:
                options["teacher_scale"] = option_text(self.teacher_scale)
            if "jsd" in self.statistics or "mixture_kl" in self.statistics:
                options["jsd_beta"] = option_text(self.jsd_beta)
        return options

    def graph(self, **gradient: Any) -> Any:
        return C.vocab_reduce_graph(
            dtype=self.dtype, statistics=list(self.statistics),
            label_type=self.label_type or "i64", bias=self.bias,
            class_weights=self.class_weights, ignore_index=self.ignore_index,
            logit_scale=self.logit_scale, softcap=self.softcap,
            labels_per_row=self.labels_per_row, targets=self.targets,
            teacher=bool(self.teacher), teacher_bias=self.teacher == "bias",
            teacher_scale=self.teacher_scale, jsd_beta=self.jsd_beta, **gradient)


_reduce_ops: Dict[Tuple[Any, ...], Any] = {}


def reduce_kernel(spec: ReduceSpec, device: torch.device,
                  flags: "BackwardFlags | None" = None) -> Kernel:
    """The compiled vocabulary reduction (`flags` None) or its derived
    backward for `spec` on `device`; compiled on first use, then cached."""
    key = (spec, flags, device)
    kernel = _reduce_ops.get(key)
    if kernel is not None:
        return kernel
    if flags is not None:
        flags = _with_workspace(flags, device)  # (as for the backward: after the lookup)
    with _lock:
        kernel = _reduce_ops.get(key)
        if kernel is None:
            options = {**spec.options(), "pass": "forward" if flags is None else "backward"}
            if flags is None:
                def factory():
                    return spec.graph()
            else:
                options["grad_x"] = "true" if flags.needs_grad_x else "false"
                options["grad_w"] = "true" if flags.needs_grad_w else "false"
                if flags.strategy != "auto":
                    options["strategy"] = flags.strategy

                def factory():
                    return spec.graph(gradient=True, strategy=flags.strategy,
                                      needs_grad_x=flags.needs_grad_x,
                                      needs_grad_w=flags.needs_grad_w,
                                      workspace_bytes=flags.workspace_bytes)
            kernel = _kernel(factory, device, options, spec.dtype,
                             "auto" if flags is None else flags.strategy, "vocab_reduce")
            _reduce_ops[key] = kernel
    return kernel


def _launch_cuda(op: Any, names, dims, device: torch.device, n: int, v: int, d: int,
                 buffers: Dict[str, torch.Tensor], t: int = 0) -> None:
    index = _device_index(device)
    keep: Dict[int, torch.Tensor] = {}

    def allocate(nbytes: int) -> int:
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        keep[t.data_ptr()] = t
        return t.data_ptr()

    def release(address: int) -> None:
        # PyTorch's caching allocator is stream-ordered: freeing right after
        # the enqueue is safe on the current stream.
        keep.pop(address, None)

    sizes = {"N": n, "V": v, "D": d, "T": t}
    with torch.cuda.device(index):
        stream = torch.cuda.current_stream(index).cuda_stream
        op.launch([(name, buffers[name].data_ptr(), buffers[name].numel(),
                    dtype_name(buffers[name].dtype)) for name in names],
                  [sizes[name] for name in dims], stream, index, allocate, release)


def clear_cache() -> None:
    """Drops compiled ops held by this process (the disk cache stays)."""
    with _lock:
        _forward_ops.clear()
        _backward_ops.clear()
        _fused_ops.clear()
        _reduce_ops.clear()


def cache_info() -> Dict[str, int]:
    """Compiled ops this process holds, per kind, and where this process's
    kernels came from: `compiled` here, `from_disk` (the kernel cache,
    LOSSJIT_CACHE_DIR: CPU objects and GPU PTX alike) or `from_kernel_path`
    (prebuilt bundles, LOSSJIT_KERNEL_PATH)."""
    stats = C.kernel_cache_stats()
    return {"forward": len(_forward_ops), "backward": len(_backward_ops),
            "forward_backward": len(_fused_ops), "vocab_reduce": len(_reduce_ops),
            "graphs": len(_graphs), "compiled": stats["compiles"],
            "from_disk": stats["disk_hits"], "from_kernel_path": stats["kernel_path_hits"]}


def describe_build() -> Dict[str, Any]:
    count, message = C.cuda_status()
    return {
        "version": C.__version__,
        "compiler": HAS_COMPILER,
        "llvm": getattr(C, "llvm_version", ""),
        "backward_builder": bool(getattr(C, "has_backward_builder", False)),
        "fused_forward_backward": bool(getattr(C, "has_fused_forward_backward", False)),
        "cuda_devices": count,
        "cuda": message,
        "kernel_path": list(C.kernel_search_path()),
    }


