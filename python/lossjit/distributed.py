"""``lossjit.distributed``: the fused loss on ``torch.distributed``.

Two ways to spread the loss over a process group (gloo on CPUs, NCCL on GPUs;
lossjit has no collective layer of its own):

* **Vocabulary parallel** (:func:`linear_cross_entropy`,
  :class:`VocabParallelLinearCrossEntropy`): every rank holds a contiguous
  shard ``weight[vocab_start : vocab_start + V_r]`` of the output projection
  and the same ``hidden`` and ``target``. Each rank runs the single-device
  kernels over its shard, in fixed blocks of the vocabulary, and keeps only
  per-row statistics ([N]-sized: the log-sum-exp of each block, the logit at
  the label for the block that holds it). One ``all_gather`` of those
  statistics, never of [N, V] logits, and a merge in the fixed order of the
  vocabulary blocks give every rank the same loss. The backward gives each
  rank its own dW shard and the full dX, summed over the ranks in a fixed
  order (an all-to-all of f32 row slices, a fixed tree, an all-gather), so
  the results are bitwise reproducible run to run.

* **Token parallel** (:func:`token_parallel_linear_cross_entropy`,
  :class:`TokenParallelLinearCrossEntropy`): every rank holds its own rows and
  the whole weight (replicated, or unsharded by FSDP2 inside the module's
  forward); the mean is over the global count of counted rows.

See docs/distributed.md for which group to pass, what each rank passes and
the memory per rank.
"""

from __future__ import annotations

import math
import re
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.overrides import handle_torch_function, has_torch_function_variadic

from . import _ops
from .functional import _autocast, guard_lse, linear_cross_entropy as _single_device
from .functional import _check_filter as _functional_check_filter

__all__ = [
    "linear_cross_entropy",
    "token_parallel_linear_cross_entropy",
    "VocabParallelLinearCrossEntropy",
    "TokenParallelLinearCrossEntropy",
    "shard_range",
]

#: The ignore_index the per-shard kernels are compiled with. Local labels are
#: in [0, block], so -100 can never collide with one; the caller's own
#: ignore_index is applied in torch (it may even lie inside the vocabulary).
_LOCAL_IGNORE = -100

#: Default number of vocabulary columns per block: bounds the backward's
#: per-block f32 copy of the weight to (block + 1) · D · 4 bytes.
DEFAULT_VOCAB_BLOCK = 8192


# --------------------------------------------------------------------------
# Process groups and the shard layout
# --------------------------------------------------------------------------

def _check_group(group):
    """The group and this rank's place in it; a clear error when
    torch.distributed is not initialized or the argument is no group."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "lossjit.distributed: torch.distributed is not initialized; call "
            "torch.distributed.init_process_group (gloo on CPU, nccl on CUDA) first")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"lossjit.distributed: group must be a torch.distributed "
                        f"ProcessGroup or None, got {type(group).__name__}")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("lossjit.distributed: this process is not a member of `group`")
    return group, rank, dist.get_world_size(group)


def shard_range(num_classes: int, rank: int, world_size: int) -> Tuple[int, int]:
    """(vocab_start, V_r) of `rank`'s shard when `num_classes` rows are split
    as evenly as possible in rank order (the first V % world_size ranks get one
    more row), so no shard is empty while V >= world_size."""
    base, extra = divmod(num_classes, world_size)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)


class _Layout(NamedTuple):
    """The vocabulary as the group holds it: per rank (start, rows), the total
    V, and the fixed blocks each rank covers (global [start, end) ranges)."""

    starts: Tuple[int, ...]
    sizes: Tuple[int, ...]
    vocab: int
    blocks: Tuple[Tuple[Tuple[int, int], ...], ...]

    def order(self) -> List[int]:
        """Ranks in vocabulary order: the order every fixed combine runs in."""
        return sorted(range(len(self.starts)), key=lambda r: (self.starts[r], r))


def _blocks_of(start: int, size: int, block: int) -> Tuple[Tuple[int, int], ...]:
    """The global block grid [k·block, (k+1)·block) cut to [start, start+size).
    A shard that starts on the grid is whole blocks (but its last one), so its
    statistics do not depend on how the vocabulary is cut into shards."""
    out, lo, end = [], start, start + size
    while lo < end:
        hi = min((lo // block + 1) * block, end)
        out.append((lo, hi))
        lo = hi
    return tuple(out)


class _Local(NamedTuple):
    """What a rank tells the others before any statistic moves."""

    n: int
    d: int
    rows: int
    vocab_start: Optional[int]
    block: int
    error: bool
    fingerprint: Optional[Tensor]  # int64 [2] on the device, or None


def _fingerprint(hidden: Tensor, target: Tensor) -> Tensor:
    """Two int64 numbers that differ when ranks pass different `hidden` or
    `target` (which would silently give wrong losses): the bits of hidden's
    float64 sum and a position-weighted sum of the labels. O(N·D) work, no
    copy of hidden; identical inputs give identical bits (deterministic
    reductions of the same shape on the same kind of device)."""
    with torch.no_grad():
        total = hidden.sum(dtype=torch.float64).reshape(1).view(torch.int64)
        flat = target.reshape(-1).to(torch.int64)
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.int64, device=flat.device)
        return torch.cat([total, (flat * weights).sum().reshape(1)])


def _exchange_layout(local: _Local, group, device: torch.device) -> Optional[_Layout]:
    """One all_gather of eight integers per rank: every rank learns the
    others' shard, checks that the shards tile [0, V) and that every rank has
    the same N, D, options and inputs (by fingerprint), and learns whether
    some rank rejected its inputs (so all ranks raise instead of some waiting
    forever in the next collective). None when this rank rejected its own."""
    world = dist.get_world_size(group)
    head = torch.tensor([local.n, local.d, local.rows,
                         -1 if local.vocab_start is None else local.vocab_start,
                         int(local.error), local.block], dtype=torch.int64, device=device)
    tail = local.fingerprint if local.fingerprint is not None else head.new_zeros(2)
    mine = torch.cat([head, tail.to(device)])
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    info = torch.stack(gathered).cpu().tolist()
    if local.error:
        return None  # the caller raises its own error
    bad = [r for r, row in enumerate(info) if row[4]]
    if bad:
        raise RuntimeError(f"lossjit.distributed: rank(s) {bad} of the group rejected their "
                           "inputs (see the error raised there); no rank computed the loss")
    for what, cols in (("hidden's row count N", (0,)), ("the feature size D", (1,)),
                       ("vocab_block", (5,)), ("the values of hidden or target", (6, 7))):
        if len({tuple(row[c] for c in cols) for row in info}) != 1:
            raise ValueError(f"lossjit.distributed: {what} differ(s) over the group; every "
                             "rank passes the same hidden and target (and options)")
    given = [row[3] >= 0 for row in info]
    if any(given) and not all(given):
        raise ValueError("lossjit.distributed: vocab_start was given on some ranks and not "
                         "on others; pass it on every rank or on none")
    sizes = tuple(row[2] for row in info)
    if all(given):
        starts = tuple(row[3] for row in info)
    else:
        starts = tuple(sum(sizes[:r]) for r in range(world))
    _check_tiling(starts, sizes)
    blocks = tuple(_blocks_of(starts[r], sizes[r], local.block) for r in range(world))
    return _Layout(starts, sizes, sum(sizes), blocks)


def _check_tiling(starts: Sequence[int], sizes: Sequence[int]) -> None:
    """The shards, taken in vocabulary order, must cover [0, V) exactly."""
    covered = 0
    for r in sorted(range(len(starts)), key=lambda r: (starts[r], r)):
        if starts[r] != covered:
            raise ValueError(
                f"lossjit.distributed: the shards (vocab_start, rows) by rank "
                f"{list(zip(starts, sizes))} do not tile [0, V): rank {r}'s shard starts at "
                f"{starts[r]}, expected {covered}")
        covered += sizes[r]
    if covered < 1:
        raise ValueError("lossjit.distributed: the shards hold no rows; V must be >= 1")


# --------------------------------------------------------------------------
# Fixed-order combines
# --------------------------------------------------------------------------

def _tree_sum(count: int, leaf: Callable[[int], Tensor]) -> Tensor:
    """Σ leaf(i), i < count, as a fixed binary tree: the left subtree holds
    the largest power of two of leaves below the total. A run of 2^k leaves
    that starts at a multiple of 2^k is one subtree, so a rank that owns such
    a run can add it alone and the group's result keeps the same bits. Leaves
    are made lazily (at most ~log2(count) partials are alive) and must be
    tensors the tree may add into."""
    def node(lo: int, hi: int) -> Tensor:
        if hi - lo == 1:
            return leaf(lo)
        half = 1 << ((hi - lo - 1).bit_length() - 1)
        left = node(lo, lo + half)
        left.add_(node(lo + half, hi))
        return left
    return node(0, count)


def _merge_lse(block_lse: Sequence[Tensor]) -> Tensor:
    """log Σ_b exp(lse_b) over the blocks in the given (vocabulary) order, in
    float64, rounded once to float32. The max is order-free; the sum runs
    block after block, so the bits depend on the block grid only."""
    stacked = torch.stack([b.double() for b in block_lse])
    peak = stacked.max(dim=0).values
    # An all -inf row (no finite logit) keeps peak -inf without NaN.
    safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros_like(peak)
    for b in range(stacked.shape[0]):
        total = total + torch.exp(stacked[b] - safe)
    return (safe + torch.log(total)).float()


def _row_slices(n: int, world: int) -> List[int]:
    """Rows of dX each rank reduces: as even as possible, in rank order."""
    base, extra = divmod(n, world)
    return [base + (1 if r < extra else 0) for r in range(world)]


def _sum_over_ranks(partial: Tensor, layout: _Layout, group, rank: int,
                    dtype: torch.dtype) -> Tensor:
    """Σ_r partial_r (each [N, D] float32) in the fixed tree over the ranks in
    vocabulary order, rounded once to `dtype`, on every rank. A reduce-scatter
    made of an all_to_all of f32 row slices (each rank adds its slice, in the
    same order as every other) and an all_gather of the rounded slices:
    no collective's own summation order is trusted."""
    world = len(layout.sizes)
    n, d = partial.shape
    if world == 1:
        return partial.to(dtype)
    rows = _row_slices(n, world)
    received = partial.new_empty((world * rows[rank], d))
    dist.all_to_all_single(received, partial.contiguous(), [rows[rank]] * world, rows,
                           group=group)
    pieces = received.view(world, rows[rank], d)
    order = layout.order()
    mine = _tree_sum(world, lambda i: pieces[order[i]]).to(dtype)
    # all_gather wants equal sizes: pad each slice to the largest.
    longest = rows[0]
    padded = mine.new_zeros((longest, d))
    padded[:rows[rank]].copy_(mine)
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return torch.cat([gathered[r][:rows[r]] for r in range(world)])


# --------------------------------------------------------------------------
# The vocabulary-parallel op
# --------------------------------------------------------------------------

class _Setup(NamedTuple):
    group: object
    rank: int
    layout: _Layout
    ignore_index: int
    reduction: str
    logit_scale: float
    softcap: float


def _transforms(setup: _Setup) -> tuple:
    if setup.logit_scale == 1.0 and setup.softcap == 0.0:
        return ()
    return (float(setup.logit_scale), float(setup.softcap))


def _block_labels(target: Tensor, counted: Tensor, lo: int, hi: int,
                  foreign: Optional[int]) -> Tuple[Tensor, Tensor]:
    """(local labels, owned) of the block [lo, hi): label − lo where the block
    holds it, else `foreign` for a counted row (None: _LOCAL_IGNORE), and
    _LOCAL_IGNORE for an ignored row."""
    owned = counted & (target >= lo) & (target < hi)
    other = _LOCAL_IGNORE if foreign is None else foreign
    fill = torch.where(counted, torch.full_like(target, other),
                       torch.full_like(target, _LOCAL_IGNORE))
    return torch.where(owned, target - lo, fill), owned


def _forward_stats(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                   counted: Tensor, setup: _Setup, slots: int) -> Tensor:
    """This rank's [slots + 3, N] float32 statistics: the lse of each of its
    blocks (rows past its block count are -inf), then for the block holding
    a row's label its lse, its row loss (lse_b − z_target) and a 1."""
    n = hidden.shape[0]
    start = setup.layout.starts[setup.rank]
    stats = hidden.new_zeros((slots + 3, n), dtype=torch.float32)
    stats[:slots].fill_(-math.inf)
    for k, (lo, hi) in enumerate(setup.layout.blocks[setup.rank]):
        labels, owned = _block_labels(target, counted, lo, hi, None)
        loss_b, lse_b = torch.ops.lossjit.linear_cross_entropy(
            hidden, weight[lo - start:hi - start],
            labels, None if bias is None else bias[lo - start:hi - start],
            _LOCAL_IGNORE, "none", "", *_transforms(setup))
        stats[k] = lse_b
        stats[slots] = torch.where(owned, lse_b, stats[slots])
        # 0 exactly for every row the block does not hold: the sum is exact.
        stats[slots + 1] += loss_b
        stats[slots + 2] += owned.to(torch.float32)
    return stats


def _combine(gathered: Tensor, layout: _Layout, slots: int,
             counted: Tensor) -> Tuple[Tensor, Tensor]:
    """(row loss, lse), both float32 [N], from every rank's statistics: the
    blocks' lse merged in vocabulary order, then lse − lse_owner + loss_owner
    in float64. A counted row no shard holds (label outside [0, V)) is NaN."""
    blocks = sorted((lo, r, k) for r in range(len(layout.blocks))
                    for k, (lo, _hi) in enumerate(layout.blocks[r]))
    lse = _merge_lse([gathered[r, k] for _lo, r, k in blocks])
    owner_lse = gathered[:, slots].double().sum(0)
    owner_loss = gathered[:, slots + 1].double().sum(0)
    owners = gathered[:, slots + 2].sum(0)
    row = (lse.double() - owner_lse) + owner_loss
    row = torch.where(owners == 1, row, torch.full_like(row, math.nan))
    row = torch.where(counted, row, torch.zeros_like(row))
    return row.float(), lse


def _reduce(row: Tensor, counted: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return row
    total = row.double().sum()
    if reduction == "sum":
        return total.float()
    return (total / counted.sum()).float()  # NaN when no row counts, like torch


def _row_grads(grad_loss: Tensor, counted: Tensor, reduction: str) -> Tensor:
    """g per row, float32 [N]: what the single-device kernels use (grad/count
    for mean, in float32)."""
    n = counted.shape[0]
    g = grad_loss.to(torch.float32)
    if reduction == "mean":
        g = g / counted.sum().to(torch.float32)
    if reduction != "none":
        g = g.expand(n)
    return torch.where(counted, g, torch.zeros_like(g)).contiguous()


def _extended_block(weight: Tensor, bias: Optional[Tensor], lo: int, hi: int,
                    logit_scale: float) -> Tuple[Tensor, Tensor]:
    """The block's rows as float32 plus one extra row of zeros whose bias is
    −inf (after the logit scale): its logit is −inf (−softcap with a softcap),
    so it adds nothing to the softmax, and with weight row 0 it adds exactly
    0 to dX. A counted row whose label lies in another shard takes this
    column as its label, so the kernel's dZ for the real columns is g·softmax
    without a one-hot: exactly the shard's share of the gradient."""
    rows = hi - lo
    w = weight.new_zeros((rows + 1, weight.shape[1]), dtype=torch.float32)
    w[:rows].copy_(weight[lo:hi])
    b = w.new_zeros((rows + 1,))
    if bias is not None:
        b[:rows].copy_(bias[lo:hi])
    b[rows] = -math.inf if logit_scale > 0 else math.inf
    return w, b


class _VocabParallel(torch.autograd.Function):
    """(loss, lse) of hidden [N, D] against this rank's shard; the group
    merges the statistics. Gradients: dW (and db) of the shard on this rank,
    dX summed over the group in a fixed order (every rank gets the same)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, setup: _Setup):
        counted = target != setup.ignore_index
        slots = max(len(b) for b in setup.layout.blocks)
        stats = _forward_stats(hidden, weight, bias, target, counted, setup, slots)
        world = len(setup.layout.sizes)
        gathered = [torch.empty_like(stats) for _ in range(world)]
        dist.all_gather(gathered, stats, group=setup.group)
        row, lse = _combine(torch.stack(gathered), setup.layout, slots, counted)
        ctx.save_for_backward(hidden, weight, bias, target, lse)
        ctx.setup = setup
        ctx.mark_non_differentiable(lse)
        return _reduce(row, counted, setup.reduction), lse

    @staticmethod
    def backward(ctx, grad_loss, _grad_lse):
        hidden, weight, bias, target, lse = ctx.saved_tensors
        setup = ctx.setup
        needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
        if grad_loss is None or not (needs_x or needs_w or needs_b):
            return None, None, None, None, None
        counted = target != setup.ignore_index
        g = _row_grads(grad_loss, counted, setup.reduction)
        start = setup.layout.starts[setup.rank]
        blocks = setup.layout.blocks[setup.rank]
        # f32 copies so each block's dX partial stays f32 until the one final
        # rounding (the kernels round their outputs to the storage dtype).
        x32 = hidden.to(torch.float32)
        grad_w = torch.empty_like(weight) if needs_w else None
        grad_b = torch.empty_like(bias) if (needs_b and bias is not None) else None
        want_w = bool(needs_w or needs_b)

        def block(k: int) -> Tensor:
            lo, hi = blocks[k]
            w, b = _extended_block(weight, bias, lo - start, hi - start, setup.logit_scale)
            labels, _ = _block_labels(target, counted, lo, hi, foreign=hi - lo)
            gx, gw, gb = torch.ops.lossjit.linear_cross_entropy_backward(
                x32, w, labels, b, lse, g, _LOCAL_IGNORE, "none", bool(needs_x), want_w,
                setup.logit_scale, setup.softcap)
            if grad_w is not None:
                grad_w[lo - start:hi - start].copy_(gw[:hi - lo])
            if grad_b is not None:
                grad_b[lo - start:hi - start].copy_(gb[:hi - lo])
            return gx

        if needs_x:
            partial = _tree_sum(len(blocks), block) if blocks else \
                torch.zeros_like(x32)
            grad_x = _sum_over_ranks(partial, setup.layout, setup.group, setup.rank,
                                     hidden.dtype)
        else:
            for k in range(len(blocks)):
                block(k)
            grad_x = None
        return grad_x, grad_w, grad_b, None, None


# --------------------------------------------------------------------------
# Input handling shared by both modes
# --------------------------------------------------------------------------

def _renamed(error: Exception, names: dict) -> Exception:
    """The single-device check's error with the argument names this API uses."""
    text = str(error)
    for old, new in names.items():
        text = re.sub(rf"\b{old}\b", new, text)
    return type(error)(text.replace("lossjit:", "lossjit.distributed:", 1))


def _check_options(reduction, logit_scale, softcap, fused_backward, return_lse):
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(
            softcap, (int, float)) or not softcap > 0):
        raise ValueError(f"lossjit.distributed: softcap must be a positive number or None, "
                         f"got {softcap!r}")
    _ops.check_logit_transforms(logit_scale, 0.0 if softcap is None else softcap)
    if not isinstance(return_lse, bool):
        raise TypeError(f"lossjit.distributed: return_lse must be a bool, got "
                        f"{type(return_lse).__name__}")
    if not isinstance(fused_backward, bool):
        raise TypeError(f"lossjit.distributed: fused_backward must be a bool, got "
                        f"{type(fused_backward).__name__}")
    if reduction not in _ops.REDUCTIONS:
        raise ValueError(f"lossjit.distributed: reduction must be 'none', 'mean' or 'sum', "
                         f"got {reduction!r}")


def _check_filter(filter_ignored, return_lse: bool) -> None:
    try:
        _functional_check_filter(filter_ignored, return_lse)
    except (TypeError, ValueError) as error:
        raise _renamed(error, {}) from None


def _dtensor_types():
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:  # pragma: no cover - torch without DTensor
        return None, None, None
    return DTensor, Shard, Replicate


def _unwrap_vocab_shard(weight, bias, group, vocab_start):
    """A DTensor weight (and bias) sharded on dim 0 over a 1-D mesh → (its
    local shard, bias shard, the mesh's group, the shard's first row). The
    local tensors are differentiable: their gradients return as DTensors with
    the same placement. Other placements are an error. Plain tensors pass
    through with `group` and `vocab_start` unchanged."""
    DTensor, Shard, _ = _dtensor_types()
    if DTensor is None or not isinstance(weight, DTensor):
        if DTensor is not None and isinstance(bias, DTensor):
            raise TypeError("lossjit.distributed: bias_shard is a DTensor but weight_shard is "
                            "not; pass both as DTensors sharded on dim 0, or both as local "
                            "shards")
        return weight, bias, group, vocab_start
    mesh = weight.device_mesh
    placements = tuple(weight.placements)
    if mesh.ndim != 1 or placements != (Shard(0),):
        raise ValueError(
            f"lossjit.distributed: weight_shard is a DTensor with placements {placements} on "
            f"a {mesh.ndim}-D mesh; the vocabulary-parallel loss takes a weight sharded on "
            "dim 0 (the vocabulary) over a 1-D mesh, [Shard(0)]. A replicated weight is the "
            "single-device op's (lossjit.linear_cross_entropy on weight.to_local()) or the "
            "token-parallel loss's; redistribute others to [Shard(0)] first")
    mesh_group = mesh.get_group(0)
    if group is not None and group != mesh_group:
        raise ValueError("lossjit.distributed: group differs from weight_shard's device mesh "
                         "group; pass group=None to use the mesh's")
    if bias is not None:
        if not isinstance(bias, DTensor) or tuple(bias.placements) != (Shard(0),) \
                or bias.device_mesh != mesh:
            raise ValueError("lossjit.distributed: with a DTensor weight_shard, bias_shard must "
                             "be a DTensor sharded like it ([Shard(0)] on the same mesh)")
        bias = bias.to_local()
    local = weight.to_local()
    start = _dtensor_shard_start(weight.shape[0], mesh.size(), mesh.get_coordinate()[0],
                                 local.shape[0])
    if vocab_start is not None and vocab_start != start:
        raise ValueError(f"lossjit.distributed: vocab_start={vocab_start} but weight_shard's "
                         f"local shard starts at row {start}; leave vocab_start=None with a "
                         "DTensor")
    return local, bias, mesh_group, start


def _dtensor_shard_start(vocab: int, world: int, coordinate: int, rows: int) -> int:
    """The first row of mesh coordinate `coordinate`'s Shard(0) piece, from
    Shard's torch.chunk semantics (pieces of ceil(V / world) rows in mesh
    order), so a mesh whose order is not the group's rank order is placed
    right; checked against the local shard's row count."""
    chunk = -(-vocab // world)
    start = min(coordinate * chunk, vocab)
    if rows != min(chunk, vocab - start):
        raise RuntimeError(f"lossjit.distributed: weight_shard's local shard has {rows} rows, "
                           f"but Shard(0) of {vocab} rows over {world} ranks gives mesh "
                           f"coordinate {coordinate} {min(chunk, vocab - start)}")
    return start


def _flat(hidden: Tensor, target: Tensor):
    if hidden.dim() == 2:
        return hidden, target
    return hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)


def _check_plain(name: str, value) -> None:
    DTensor, _, _ = _dtensor_types()
    if DTensor is not None and isinstance(value, DTensor):
        raise TypeError(f"lossjit.distributed: {name} is a DTensor; pass the local tensor "
                        f"({name}.to_local()), which every rank of the group must hold in full")


# --------------------------------------------------------------------------
# Public API: vocabulary parallel
# --------------------------------------------------------------------------

def linear_cross_entropy(hidden: Tensor, weight_shard: Tensor, target: Tensor,
                         bias_shard: Optional[Tensor] = None, *, group=None,
                         vocab_start: Optional[int] = None, ignore_index: int = -100,
                         reduction: str = "mean", return_lse: bool = False,
                         logit_scale: float = 1.0, softcap: Optional[float] = None,
                         fused_backward: bool = False,
                         vocab_block: Optional[int] = None):
    """Vocabulary-parallel :func:`lossjit.linear_cross_entropy`: this rank
    holds the rows ``weight[vocab_start : vocab_start + V_r]`` (and the bias
    shard) of the full [V, D] projection; every rank of `group` passes the
    same `hidden` and `target` and gets the same loss, the loss of the full
    projection.

    Args:
        hidden: [..., D], the same on every rank (float16, bfloat16, float32).
        weight_shard: [V_r, D] local rows of the weight, or a DTensor sharded
            on dim 0 over a 1-D mesh ([Shard(0)]; other placements are an
            error). May have 0 rows.
        target: [...] global class indices in [0, V) (or ignore_index), the
            same on every rank.
        bias_shard: optional [V_r] local rows of the bias.
        group: the process group the vocabulary is split over (default: the
            world; with a DTensor, its mesh's group).
        vocab_start: the first global row this rank holds. Default: shards in
            rank order (the sum of the lower ranks' V_r). Pass it on all
            ranks or none; the shards must tile [0, V).
        ignore_index, reduction, return_lse, logit_scale, softcap: as for the
            single-device op; the mean is over the rows whose target is not
            ignore_index. lse is the global log-sum-exp (no gradient).
        fused_backward: must be False: the backward needs the global lse,
            which no rank has before the forward's collective.
        vocab_block: columns per fixed vocabulary block (default 8192). The
            statistics are merged block by block in vocabulary order; when
            every shard starts on the block grid, the forward's bits do not
            depend on the number of ranks, and when every rank holds the same
            power-of-two number of whole blocks the gradients' bits do not
            either (see docs/distributed.md).

    Every rank must call this (it runs collectives). Bitwise reproducible for
    a given group size, layout and device.

    Returns:
        loss (float32), or (loss, lse) with return_lse=True.
    """
    if has_torch_function_variadic(hidden, weight_shard, target, bias_shard):
        return handle_torch_function(
            linear_cross_entropy, (hidden, weight_shard, target, bias_shard), hidden,
            weight_shard, target, bias_shard, group=group, vocab_start=vocab_start,
            ignore_index=ignore_index, reduction=reduction, return_lse=return_lse,
            logit_scale=logit_scale, softcap=softcap, fused_backward=fused_backward,
            vocab_block=vocab_block)
    block = _check_vocab_options(reduction, logit_scale, softcap, fused_backward,
                                 return_lse, vocab_start, vocab_block)
    _check_plain("hidden", hidden)
    _check_plain("target", target)
    weight_shard, bias_shard, group, vocab_start = _unwrap_vocab_shard(
        weight_shard, bias_shard, group, vocab_start)
    group, rank, _world = _check_group(group)
    layout = _agree_on_layout(hidden, weight_shard, target, bias_shard, ignore_index,
                              reduction, vocab_start, block, group)

    lead = hidden.shape[:-1]
    # What the single-device op does under autocast (F.linear's rule), before
    # the autograd Function so the casts get their own gradients.
    hidden, weight_shard, bias_shard = _autocast(hidden, weight_shard, bias_shard)
    flat_hidden, flat_target = _flat(hidden, target)
    _check_label_range(flat_target, ignore_index, layout.vocab)
    setup = _Setup(group, rank, layout, ignore_index, reduction, float(logit_scale),
                   0.0 if softcap is None else float(softcap))
    loss, lse = _VocabParallel.apply(flat_hidden, weight_shard, bias_shard, flat_target,
                                     setup)
    if hidden.dim() != 2:
        lse = lse.view(lead)
        if reduction == "none":
            loss = loss.view(lead)
    if return_lse:
        return loss, guard_lse(lse, hidden, weight_shard, bias_shard)
    return loss


def _check_vocab_options(reduction, logit_scale, softcap, fused_backward, return_lse,
                         vocab_start, vocab_block) -> int:
    """The options' checks (the same on every rank, so raised before any
    collective); returns the block size."""
    _check_options(reduction, logit_scale, softcap, fused_backward, return_lse)
    if fused_backward:
        raise ValueError("lossjit.distributed: fused_backward=True is not available for the "
                         "vocabulary-parallel loss: the backward needs the global lse, known "
                         "only after the forward's collective")
    block = DEFAULT_VOCAB_BLOCK if vocab_block is None else vocab_block
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"lossjit.distributed: vocab_block must be a positive int or None, "
                         f"got {vocab_block!r}")
    if vocab_start is not None and (isinstance(vocab_start, bool)
                                    or not isinstance(vocab_start, int) or vocab_start < 0):
        raise ValueError(f"lossjit.distributed: vocab_start must be a non-negative int or "
                         f"None, got {vocab_start!r}")
    return block


def _agree_on_layout(hidden, weight, target, bias, ignore_index, reduction, vocab_start,
                     block, group) -> _Layout:
    """This rank's input checks, then the layout exchange every rank reaches
    even when its own inputs are bad: that rank raises its error, the others
    an error naming it, and none waits in a collective that never comes."""
    error = None
    try:
        _check_shard(hidden, weight, target, bias, ignore_index, reduction)
    except (TypeError, ValueError, RuntimeError) as caught:
        error = _renamed(caught, {"weight": "weight_shard", "bias": "bias_shard"})
    if error is None:
        local = _Local(hidden.numel() // hidden.shape[-1] if hidden.shape[-1] else
                       target.numel(), hidden.shape[-1], weight.shape[0], vocab_start, block,
                       False, _fingerprint(hidden, target))
    else:
        local = _Local(-1, -1, 0, vocab_start, block, True, None)
    device = hidden.device if isinstance(hidden, Tensor) else torch.device("cpu")
    layout = _exchange_layout(local, group, device)
    if error is not None:
        raise error
    return layout


def _check_shard(hidden, weight, target, bias, ignore_index, reduction) -> None:
    """The single-device op's checks, allowing a shard with no rows."""
    if isinstance(weight, Tensor) and weight.dim() == 2 and weight.shape[0] == 0:
        weight = weight.new_empty((1, weight.shape[1]))
        if isinstance(bias, Tensor) and tuple(bias.shape) == (0,):
            bias = bias.new_empty((1,))
    _ops.check_inputs(hidden, weight, target, bias, ignore_index, reduction)


def _check_label_range(target: Tensor, ignore_index: int, vocab: int) -> None:
    """On CPU a label outside [0, V) (not ignore_index) is an IndexError, as
    for the single-device op; on CUDA (no host sync) its row is NaN."""
    if target.device.type != "cpu" or target.numel() == 0:
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= vocab))
    count = int(bad.sum())
    if count:
        first = int(target[bad][0])
        raise IndexError(f"lossjit.distributed: target {first} is out of bounds for {vocab} "
                         f"classes ({count} such label(s); ignore_index={ignore_index})")


class VocabParallelLinearCrossEntropy(nn.Module):
    """An output projection and its loss with the vocabulary split over a group.

    Holds this rank's rows ``weight[vocab_start : vocab_start + V_r]`` (and
    bias) of a [num_classes, in_features] projection, split evenly in rank
    order (:func:`shard_range`); ``forward(hidden, target)`` is
    :func:`linear_cross_entropy` with them. Every rank passes the same hidden
    and target and gets the same loss; the gradient of hidden is the full one
    on every rank.
    """

    def __init__(self, in_features: int, num_classes: int, bias: bool = False, *,
                 group=None, ignore_index: int = -100, reduction: str = "mean",
                 return_lse: bool = False, logit_scale: float = 1.0,
                 softcap: Optional[float] = None, vocab_block: Optional[int] = None,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_options(reduction, logit_scale, softcap, False, return_lse)
        group, rank, world = _check_group(group)
        self.group = group
        self.in_features = in_features
        self.num_classes = num_classes
        self.vocab_start, rows = shard_range(num_classes, rank, world)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.return_lse = return_lse
        self.logit_scale = logit_scale
        self.softcap = softcap
        self.vocab_block = vocab_block
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((rows, in_features), **factory))
        self.bias = nn.Parameter(torch.empty((rows,), **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialization, per shard (the bounds depend on
        in_features only, so the distribution is that of the full layer)."""
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        with torch.no_grad():
            nn.init.uniform_(self.weight, -bound, bound)
            if self.bias is not None:
                nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_full(cls, weight: Tensor, bias: Optional[Tensor] = None, *, group=None,
                  **options) -> "VocabParallelLinearCrossEntropy":
        """This rank's shard of an existing [V, D] weight (e.g. a
        checkpoint's), copied; every rank passes the same full tensors."""
        module = cls(weight.shape[1], weight.shape[0], bias is not None, group=group,
                     device=weight.device, dtype=weight.dtype, **options)
        rows = module.weight.shape[0]
        with torch.no_grad():
            module.weight.copy_(weight[module.vocab_start:module.vocab_start + rows])
            if bias is not None:
                module.bias.copy_(bias[module.vocab_start:module.vocab_start + rows])
        return module

    def forward(self, hidden: Tensor, target: Tensor):
        return linear_cross_entropy(
            hidden, self.weight, target, self.bias, group=self.group,
            vocab_start=self.vocab_start, ignore_index=self.ignore_index,
            reduction=self.reduction, return_lse=self.return_lse,
            logit_scale=self.logit_scale, softcap=self.softcap, vocab_block=self.vocab_block)

    def extra_repr(self) -> str:
        rows = self.weight.shape[0]
        return (f"in_features={self.in_features}, num_classes={self.num_classes}, "
                f"shard=[{self.vocab_start}, {self.vocab_start + rows}), "
                f"bias={self.bias is not None}, reduction={self.reduction!r}")


# --------------------------------------------------------------------------
# Public API: token parallel
# --------------------------------------------------------------------------

def _whole_weight(name: str, value):
    """A weight every row of which this rank holds. A DTensor replicated over
    its mesh is its local tensor; a sharded one (an FSDP2 parameter read
    outside its module's forward, a Shard(0) weight) is an error: its local
    storage holds only some rows."""
    DTensor, _, Replicate = _dtensor_types()
    if DTensor is None or not isinstance(value, DTensor):
        return value
    if all(isinstance(p, Replicate) for p in value.placements):
        return value.to_local()
    raise ValueError(
        f"lossjit.distributed: {name} is a DTensor with placements {tuple(value.placements)}: "
        f"its local storage holds only part of it, and the token-parallel loss needs all of "
        f"it. With FSDP2, call the loss inside the forward of the fully_shard'ed module that "
        f"owns {name} (e.g. TokenParallelLinearCrossEntropy), where FSDP unshards it; for a "
        f"weight sharded over the vocabulary use lossjit.distributed.linear_cross_entropy")


def token_parallel_linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor,
                                        bias: Optional[Tensor] = None, *, group=None,
                                        ignore_index: int = -100, reduction: str = "mean",
                                        return_lse: bool = False, logit_scale: float = 1.0,
                                        softcap: Optional[float] = None,
                                        fused_backward: bool = False,
                                        average_gradients: bool = True,
                                        filter_ignored: bool = False):
    """Token-parallel :func:`lossjit.linear_cross_entropy`: each rank of
    `group` holds its own rows (hidden, target) and the whole weight; the mean
    is over the counted rows of the whole group, not of this rank.

    The result is this rank's share of the group's loss: for 'mean'
    ``local_sum / global_count``, for 'sum' ``local_sum`` — multiplied by the
    group size when `average_gradients` (the default: DDP and FSDP2 average
    the ranks' parameter gradients, so the average of the ranks' gradients is
    then the gradient of the group's loss). With average_gradients=False the
    ranks' results (and gradients) sum to the group's. 'none' returns this
    rank's per-row losses unchanged. The one collective is an all_reduce of
    the integer count of counted rows (exact, so in any order), for 'mean'.

    `weight` must be whole on this rank: a plain tensor, a replicated DTensor,
    or the parameter of a module under FSDP2's fully_shard read inside that
    module's forward. A sharded DTensor is an error naming the fix.

    `filter_ignored=True` runs this rank's kernels on its counted rows only
    (see :func:`lossjit.linear_cross_entropy`; the count the mean divides by
    is the same).
    """
    if has_torch_function_variadic(hidden, weight, target, bias):
        return handle_torch_function(
            token_parallel_linear_cross_entropy, (hidden, weight, target, bias), hidden,
            weight, target, bias, group=group, ignore_index=ignore_index,
            reduction=reduction, return_lse=return_lse, logit_scale=logit_scale,
            softcap=softcap, fused_backward=fused_backward,
            average_gradients=average_gradients,
            **({"filter_ignored": True} if filter_ignored else {}))
    _check_options(reduction, logit_scale, softcap, fused_backward, return_lse)
    _check_filter(filter_ignored, return_lse)
    if not isinstance(average_gradients, bool):
        raise TypeError(f"lossjit.distributed: average_gradients must be a bool, got "
                        f"{type(average_gradients).__name__}")
    weight = _whole_weight("weight", weight)
    bias = _whole_weight("bias", bias)
    _check_plain("hidden", hidden)
    _check_plain("target", target)
    group, _rank, world = _check_group(group)
    _ops.check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    local = "sum" if reduction == "mean" else reduction
    out = _single_device(hidden, weight, target, bias, ignore_index=ignore_index,
                         reduction=local, return_lse=return_lse, logit_scale=logit_scale,
                         softcap=softcap, fused_backward=fused_backward,
                         filter_ignored=filter_ignored)
    loss, lse = out if return_lse else (out, None)
    if reduction != "none":
        factor = float(world) if average_gradients else 1.0
        if reduction == "mean":
            count = (target != ignore_index).sum().to(torch.int64).reshape(1)
            dist.all_reduce(count, group=group)
            # f32 division like the single-device mean (0/0: NaN, as torch).
            loss = loss / count[0].to(torch.float32)
        if factor != 1.0:
            loss = loss * factor
    return (loss, lse) if return_lse else loss


class TokenParallelLinearCrossEntropy(nn.Module):
    """An output projection (the whole [num_classes, in_features] weight) and
    its token-parallel loss: ``forward(hidden, target)`` with this rank's rows.

    Made for FSDP2: ``fully_shard(module)`` shards its weight over the ranks
    at rest and unshards it for ``forward``, where the loss reads it; the
    gradients FSDP reduce-scatters are those of the group's mean (with
    average_gradients=True, FSDP2's default averaging). Plain replication
    (DDP) works the same way.
    """

    def __init__(self, in_features: int, num_classes: int, bias: bool = False, *,
                 group=None, ignore_index: int = -100, reduction: str = "mean",
                 return_lse: bool = False, logit_scale: float = 1.0,
                 softcap: Optional[float] = None, fused_backward: bool = False,
                 average_gradients: bool = True, filter_ignored: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_options(reduction, logit_scale, softcap, fused_backward, return_lse)
        _check_filter(filter_ignored, return_lse)
        self.group = group
        self.in_features = in_features
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.return_lse = return_lse
        self.logit_scale = logit_scale
        self.softcap = softcap
        self.fused_backward = fused_backward
        self.average_gradients = average_gradients
        self.filter_ignored = filter_ignored
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((num_classes, in_features), **factory))
        self.bias = nn.Parameter(torch.empty((num_classes,), **factory)) if bias else None
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        with torch.no_grad():
            nn.init.uniform_(self.weight, -bound, bound)
            if self.bias is not None:
                nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, hidden: Tensor, target: Tensor):
        return token_parallel_linear_cross_entropy(
            hidden, self.weight, target, self.bias, group=self.group,
            ignore_index=self.ignore_index, reduction=self.reduction,
            return_lse=self.return_lse, logit_scale=self.logit_scale, softcap=self.softcap,
            fused_backward=self.fused_backward, average_gradients=self.average_gradients,
            filter_ignored=self.filter_ignored)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, num_classes={self.num_classes}, "
                f"bias={self.bias is not None}, reduction={self.reduction!r}, "
                f"average_gradients={self.average_gradients}")
