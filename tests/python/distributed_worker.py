"""The rank side of tests/python/test_distributed.py (not collected by pytest).

`main(rank, world, rendezvous, out_dir)` joins a gloo group, runs every
scenario below in order, and writes {scenario: "ok" | traceback} to
out_dir/rank<rank>.json; the test module asserts on those files. Every
scenario runs all of its collectives before it asserts, so a failing check
on one rank cannot leave the others waiting in a collective.

References: F.cross_entropy(F.linear(...)) in float64 from the same rounded
inputs (the design's reference semantics), and the single-device lossjit op.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

import lossjit
import lossjit.distributed as LD

N, D, V = 24, 16, 37  # V = 37: no world size of the tests divides it
IGNORE = -100

# (loss rtol, gradient atol relative to the largest |gradient|): the loss is
# float32 either way; the gradients are rounded once to the storage dtype, so
# their error is about half an ulp of the largest one (f16 2^-11, bf16 2^-8)
# plus float32 slack. Measured (4 ranks): f32 4e-7, f16 3.2e-4, bf16 2.5e-3,
# the same as the single-device op's.
TOLERANCE = {torch.float32: (2e-6, 1e-6), torch.float16: (2e-6, 6e-4),
             torch.bfloat16: (2e-6, 4.5e-3)}


class Ctx:
    def __init__(self, rank, world):
        self.rank = rank
        self.world = world
        # Subgroups of the first 1 and 2 ranks (created by every rank, in
        # the same order, as torch.distributed requires).
        self.groups = {1: dist.new_group([0]), 2: dist.new_group([0, 1]), world: None}


def inputs(dtype, n=N, v=V, d=D, seed=0, bias=False, ignored=(3, 11), labels=None):
    """The full problem, the same on every rank (a fixed seed), rounded to dtype."""
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, d, generator=g) * 2).to(dtype)
    weight = (torch.randn(v, d, generator=g) / d ** 0.5 * 3).to(dtype)
    b = (torch.randn(v, generator=g)).to(dtype) if bias else None
    target = torch.randint(0, v, (n,), generator=g) if labels is None else labels.clone()
    for i in ignored:
        target[i] = IGNORE
    return hidden, weight, target, b


def reference(hidden, weight, target, bias=None, reduction="mean", softcap=None,
              logit_scale=1.0):
    """(loss, lse, dX, dW, db) in float64 from the rounded inputs."""
    x = hidden.double().requires_grad_()
    w = weight.double().requires_grad_()
    b = None if bias is None else bias.double().requires_grad_()
    z = F.linear(x, w, b) * logit_scale
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    loss = F.cross_entropy(z, target, ignore_index=IGNORE, reduction=reduction)
    grads = torch.autograd.grad(loss.sum(), [t for t in (x, w, b) if t is not None])
    return (loss.detach(), torch.logsumexp(z, 1).detach()) + tuple(grads) + \
        ((None,) if b is None else ())


def close(name, got, want, rtol=0.0, atol=0.0, scale=None):
    got = got.double()
    want = want.double()
    if scale is not None and want.numel():
        atol = atol * max(float(want.abs().max()), 1e-30)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        err = (got - want).abs().max()
        raise AssertionError(f"{name}: max |error| {float(err):.3g} > rtol {rtol} / atol "
                             f"{atol:.3g}\n got {got.flatten()[:6]}\nwant {want.flatten()[:6]}")


def shard(tensor, rank, world, v=V):
    start, rows = LD.shard_range(v, rank, world)
    return None if tensor is None else tensor[start:start + rows].clone()


def vocab_run(ctx, dtype, world, bias=False, reduction="mean", block=8, seed=0, **kw):
    """Runs the vocabulary-parallel loss on the first `world` ranks; returns
    (loss, lse, dX, dW shard, db shard) and the full inputs."""
    hidden, weight, target, b = inputs(dtype, bias=bias, seed=seed, **kw)
    x = hidden.clone().requires_grad_()
    w = shard(weight, ctx.rank, world).requires_grad_()
    bs = shard(b, ctx.rank, world)
    if bs is not None:
        bs.requires_grad_()
    loss, lse = LD.linear_cross_entropy(x, w, target, bs, group=ctx.groups[world],
                                        reduction=reduction, return_lse=True,
                                        vocab_block=block)
    loss.sum().backward()
    return (loss.detach(), lse.detach(), x.grad, w.grad, None if bs is None else bs.grad), \
        (hidden, weight, target, b)


def check_vocab(ctx, got, full, world, dtype, reduction="mean", bias=False, what=""):
    hidden, weight, target, b = full
    loss, lse, dx, dw, db = got
    rloss, rlse, rdx, rdw, rdb = reference(hidden, weight, target, b, reduction)
    lt, gt = TOLERANCE[dtype]
    tag = f"{what}{dtype} W={world} {reduction}"
    close(f"{tag} loss", loss, rloss, rtol=lt * 4, atol=1e-6)
    close(f"{tag} lse", lse, rlse, rtol=lt)
    close(f"{tag} dX", dx, rdx, atol=gt, scale=True)
    close(f"{tag} dW shard", dw, shard(rdw, ctx.rank, world), atol=gt, scale=True)
    if bias:
        close(f"{tag} db shard", db, shard(rdb, ctx.rank, world), atol=gt, scale=True)


# ---------------------------------------------------------------- scenarios

def scenario_vocab_dtypes(ctx):
    """2 and 4 ranks against the fp64 reference, f32/f16/bf16, V = 37 over the
    ranks (uneven shards), blocks of 8 cut at the shard edges, ignored rows."""
    results = []
    for world in (2, ctx.world):
        if ctx.rank >= world:
            continue
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            bias = dtype == torch.float32
            results.append((world, dtype, bias) + vocab_run(ctx, dtype, world, bias=bias))
    single = {}
    for world, dtype, bias, got, full in results:
        check_vocab(ctx, got, full, world, dtype, bias=bias)
        if dtype not in single:
            single[dtype] = single_device(*full)
        # Against the single-device op: both round each gradient once, so
        # they may differ by one rounding each.
        _lt, gt = TOLERANCE[dtype]
        gt *= 2
        tag = f"vs single-device {dtype} W={world}"
        loss, _lse, dx, dw, db = got
        sloss, sdx, sdw, sdb = single[dtype]
        close(f"{tag} loss", loss, sloss, rtol=1e-5)
        close(f"{tag} dX", dx, sdx, atol=gt, scale=True)
        close(f"{tag} dW", dw, shard(sdw, ctx.rank, world), atol=gt, scale=True)
        if bias:
            close(f"{tag} db", db, shard(sdb, ctx.rank, world), atol=gt, scale=True)


def single_device(hidden, weight, target, bias):
    """(loss, dX, dW, db) of the single-device lossjit op, mean."""
    x = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    b = None if bias is None else bias.clone().requires_grad_()
    loss = lossjit.linear_cross_entropy(x, w, target, b)
    loss.backward()
    return loss.detach(), x.grad, w.grad, None if b is None else b.grad


def scenario_vocab_reductions(ctx):
    """'sum' and 'none' on 4 ranks; and the single-device op's bits are close."""
    got = {r: vocab_run(ctx, torch.float32, ctx.world, reduction=r, bias=True)
           for r in ("sum", "none")}
    for r, (res, full) in got.items():
        check_vocab(ctx, res, full, ctx.world, torch.float32, reduction=r, bias=True)
    hidden, weight, target, b = got["sum"][1]
    x = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    single = lossjit.linear_cross_entropy(x, w, target, b, reduction="sum")
    single.backward()
    loss, _lse, dx, dw, _db = got["sum"][0]
    close("single-device loss", loss, single.detach(), rtol=1e-6)
    close("single-device dX", dx, x.grad, atol=1e-6, scale=True)
    close("single-device dW", dw, shard(w.grad, ctx.rank, ctx.world), atol=1e-6, scale=True)


def scenario_shard_without_labels(ctx):
    """Every label lies in rank 0's shard: the other ranks' shards hold none,
    so their dW is g·softmax·x alone (no one-hot), and rank 0 owns all."""
    start, rows = LD.shard_range(V, 0, ctx.world)
    g = torch.Generator().manual_seed(5)
    labels = torch.randint(start, start + rows, (N,), generator=g)
    for dtype in (torch.float32, torch.bfloat16):
        res, full = vocab_run(ctx, dtype, ctx.world, labels=labels, ignored=(0,))
        check_vocab(ctx, res, full, ctx.world, dtype, what="labels only on rank 0: ")


def scenario_explicit_layout(ctx):
    """vocab_start in reverse rank order, one rank with no rows at all; the
    combines follow the vocabulary order, not the rank order."""
    world = ctx.world
    assert world == 4, "the layout below is made for 4 ranks"
    sizes = [0, 5, 20, 12]
    starts = [37, 32, 12, 0]
    hidden, weight, target, b = inputs(torch.float32, bias=True)
    lo, rows = starts[ctx.rank], sizes[ctx.rank]
    x = hidden.clone().requires_grad_()
    w = weight[lo:lo + rows].clone().requires_grad_()
    bs = b[lo:lo + rows].clone().requires_grad_()
    # int32 labels here (int64 elsewhere).
    loss = LD.linear_cross_entropy(x, w, target.int(), bs, vocab_start=lo, vocab_block=8)
    loss.backward()
    rloss, _rlse, rdx, rdw, rdb = reference(hidden, weight, target, b)
    close("layout loss", loss.detach(), rloss, rtol=8e-6)
    close("layout dX", x.grad, rdx, atol=2e-6, scale=True)
    close("layout dW", w.grad, rdw[lo:lo + rows], atol=2e-6, scale=True)
    close("layout db", bs.grad, rdb[lo:lo + rows], atol=2e-6, scale=True)


def scenario_softcap_scale(ctx):
    """The logit transforms (negative scale: the extra column's bias flips)."""
    hidden, weight, target, _ = inputs(torch.float32)
    for scale, cap in ((-0.7, None), (1.3, 4.0)):
        x = hidden.clone().requires_grad_()
        w = shard(weight, ctx.rank, ctx.world).requires_grad_()
        loss = LD.linear_cross_entropy(x, w, target, logit_scale=scale, softcap=cap,
                                       vocab_block=8)
        loss.backward()
        rloss, _l, rdx, rdw, _ = reference(hidden, weight, target, softcap=cap,
                                           logit_scale=scale)
        close(f"scale {scale} cap {cap} loss", loss.detach(), rloss, rtol=1e-5)
        close(f"scale {scale} cap {cap} dX", x.grad, rdx, atol=4e-6, scale=True)
        close(f"scale {scale} cap {cap} dW", w.grad, shard(rdw, ctx.rank, ctx.world),
              atol=4e-6, scale=True)


def scenario_module_shapes_autocast(ctx):
    """The module (from a full weight) with hidden [4, 6, D] and reduction
    'none' (losses and lse shaped like target); autocast casts like the
    single-device op; differentiating through lse is an error."""
    hidden, weight, target, b = inputs(torch.float32, bias=True)
    head = LD.VocabParallelLinearCrossEntropy.from_full(weight, b, reduction="none",
                                                       return_lse=True, vocab_block=8)
    x = hidden.view(4, 6, D).clone().requires_grad_()
    loss, lse = head(x, target.view(4, 6))
    assert loss.shape == (4, 6) and lse.shape == (4, 6), (loss.shape, lse.shape)
    loss.sum().backward()
    rloss, rlse, rdx, rdw, rdb = reference(hidden, weight, target, b, "none")
    close("module loss", loss.detach().view(-1), rloss, rtol=8e-6, atol=1e-6)
    close("module lse", lse.detach().view(-1), rlse, rtol=2e-6)
    close("module dX", x.grad.view(-1, D), rdx, atol=2e-6, scale=True)
    close("module dW", head.weight.grad, shard(rdw, ctx.rank, ctx.world), atol=2e-6,
          scale=True)
    close("module db", head.bias.grad, shard(rdb, ctx.rank, ctx.world), atol=2e-6,
          scale=True)
    x = hidden.clone().requires_grad_()
    _loss, lse = LD.linear_cross_entropy(x, shard(weight, ctx.rank, ctx.world), target,
                                         return_lse=True, vocab_block=8)
    expect(RuntimeError, "lse", lambda: lse.sum().backward())
    w = shard(weight, ctx.rank, ctx.world)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = LD.linear_cross_entropy(hidden, w, target, vocab_block=8)
        want = lossjit.linear_cross_entropy(hidden, weight, target)
    close("autocast loss", got, want, rtol=1e-5)
    rloss = reference(hidden.bfloat16(), weight.bfloat16(), target)[0]
    close("autocast loss vs bf16 reference", got, rloss, rtol=8e-6)


def scenario_redispatch(ctx):
    """Under a TorchFunctionMode the public functions are seen once each and
    give the same bits as a plain call (the single-device op's contract)."""
    from torch.overrides import TorchFunctionMode

    seen = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in (LD.linear_cross_entropy, LD.token_parallel_linear_cross_entropy):
                seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    hidden, weight, target, _ = inputs(torch.float32)
    w = shard(weight, ctx.rank, ctx.world)
    plain = LD.linear_cross_entropy(hidden, w, target, vocab_block=8)
    plain_tp = LD.token_parallel_linear_cross_entropy(hidden, weight, target)
    with Count():
        moded = LD.linear_cross_entropy(hidden, w, target, vocab_block=8)
        moded_tp = LD.token_parallel_linear_cross_entropy(hidden, weight, target)
    assert seen == ["linear_cross_entropy", "token_parallel_linear_cross_entropy"], seen
    assert torch.equal(plain, moded) and torch.equal(plain_tp, moded_tp)


def scenario_bitwise_repeatable(ctx):
    """Same inputs twice: the same bits (loss, lse, dX, dW), bf16 and f32."""
    for dtype in (torch.float32, torch.bfloat16):
        a, _ = vocab_run(ctx, dtype, ctx.world, block=8)
        b, _ = vocab_run(ctx, dtype, ctx.world, block=8)
        for name, p, q in zip(("loss", "lse", "dX", "dW"), a, b):
            assert torch.equal(p, q), f"{dtype} {name} differs between two identical runs"


def scenario_world_size_independent(ctx):
    """V = 64 in blocks of 8: 1, 2 and 4 ranks each hold a power-of-two
    number of whole blocks, so loss, lse, dX and the full dW keep their bits."""
    v = 64
    out = {}
    for world in (1, 2, ctx.world):
        for dtype in (torch.float32, torch.bfloat16):
            if ctx.rank >= world:
                continue
            hidden, weight, target, _ = inputs(dtype, v=v, seed=3)
            x = hidden.clone().requires_grad_()
            start, rows = LD.shard_range(v, ctx.rank, world)
            w = weight[start:start + rows].clone().requires_grad_()
            loss, lse = LD.linear_cross_entropy(x, w, target, group=ctx.groups[world],
                                                return_lse=True, vocab_block=8)
            loss.backward()
            pieces = [torch.empty_like(w.grad) for _ in range(world)]
            dist.all_gather(pieces, w.grad.contiguous(), group=ctx.groups[world])
            out[world, dtype] = (loss.detach(), lse.detach(), x.grad, torch.cat(pieces))
    if ctx.rank == 0:
        for dtype in (torch.float32, torch.bfloat16):
            for world in (2, ctx.world):
                for name, p, q in zip(("loss", "lse", "dX", "dW"), out[1, dtype],
                                      out[world, dtype]):
                    assert torch.equal(p, q), \
                        f"{dtype} {name}: world size {world} differs from world size 1"


def scenario_dtensor(ctx):
    """A DTensor weight [Shard(0)] (torch's uneven chunks of V = 37), its
    gradient a DTensor; other placements are a clear error."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (ctx.world,))
    hidden, weight, target, b = inputs(torch.float32, bias=True)
    w = distribute_tensor(weight.clone(), mesh, [Shard(0)]).requires_grad_()
    bs = distribute_tensor(b.clone(), mesh, [Shard(0)]).requires_grad_()
    x = hidden.clone().requires_grad_()
    loss = LD.linear_cross_entropy(x, w, target, bs, vocab_block=8)
    loss.backward()
    rloss, _l, rdx, rdw, rdb = reference(hidden, weight, target, b)
    close("dtensor loss", loss.detach(), rloss, rtol=8e-6)
    close("dtensor dX", x.grad, rdx, atol=2e-6, scale=True)
    assert type(w.grad).__name__ == "DTensor", type(w.grad)
    close("dtensor dW", w.grad.full_tensor(), rdw, atol=2e-6, scale=True)
    close("dtensor db", bs.grad.full_tensor(), rdb, atol=2e-6, scale=True)
    for placement in (Replicate(), Shard(1)):
        bad = distribute_tensor(weight.clone(), mesh, [placement])
        try:
            LD.linear_cross_entropy(hidden, bad, target)
        except ValueError as error:
            assert "weight_shard is a DTensor with placements" in str(error), str(error)
            assert "Shard(0)" in str(error), str(error)
        else:
            raise AssertionError(f"a DTensor weight placed {placement} was accepted")


def _rows_of(rank, world, n=N):
    """Uneven row slices: rank r holds rows [cuts[r], cuts[r+1])."""
    cuts = [0, 3, 11, 11, n] if world == 4 else [0, n // 3, n]
    return cuts[rank], cuts[rank + 1]


def scenario_token_parallel(ctx):
    """Rows over 2 and 4 ranks (one rank with no rows, ignored rows on rank 0
    only, rank 1's rows all ignored), the weight replicated, f32/f16/bf16:
    the mean over the group's counted rows; summed gradients equal the full
    problem's (dW and db rounded once per rank, so W roundings at most)."""
    results = []
    for world in (2, ctx.world):
        if ctx.rank >= world:
            continue
        group = ctx.groups[world]
        lo, hi = _rows_of(ctx.rank, world)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            hidden, weight, target, b = inputs(dtype, bias=True, ignored=())
            target[0] = target[2] = IGNORE          # rank 0 (rows 0..2)
            target[3:11] = IGNORE                   # rank 1 (W=4): every row ignored
            # f32 also with filter_ignored (rank 1 keeps no row).
            runs = ((False, False), (True, False), (True, True)) \
                if dtype == torch.float32 else ((True, False),)
            for averaged, filtered in runs:
                x = hidden[lo:hi].clone().requires_grad_()
                w = weight.clone().requires_grad_()
                bb = b.clone().requires_grad_()
                loss = LD.token_parallel_linear_cross_entropy(
                    x, w, target[lo:hi], bb, group=group, average_gradients=averaged,
                    filter_ignored=filtered)
                loss.backward()
                summed = [loss.detach().clone(), w.grad.float(), bb.grad.float()]
                for t in summed:
                    dist.all_reduce(t, group=group)
                results.append((world, dtype, averaged, filtered, summed, x.grad, lo, hi,
                                (hidden, weight, target, b)))
    for world, dtype, averaged, filtered, (loss, dw, db), dx, lo, hi, full in results:
        rloss, _l, rdx, rdw, rdb = reference(*full)
        k = float(world) if averaged else 1.0
        _lt, gt = TOLERANCE[dtype]
        tag = f"token parallel {dtype} W={world} averaged={averaged} filtered={filtered}"
        close(f"{tag} loss", loss / k, rloss, rtol=4e-6)
        close(f"{tag} dW", dw / k, rdw, atol=gt * world, scale=True)
        close(f"{tag} db", db / k, rdb, atol=gt * world, scale=True)
        close(f"{tag} dX", dx.float() / k, rdx[lo:hi], atol=gt, scale=True)


def scenario_weight_gradient_only(ctx):
    """hidden needs no gradient: dW and db only (no dX collective)."""
    hidden, weight, target, b = inputs(torch.bfloat16, bias=True)
    w = shard(weight, ctx.rank, ctx.world).requires_grad_()
    bs = shard(b, ctx.rank, ctx.world).requires_grad_()
    loss = LD.linear_cross_entropy(hidden, w, target, bs, vocab_block=8)
    loss.backward()
    _rloss, _l, _rdx, rdw, rdb = reference(hidden, weight, target, b)
    _lt, gt = TOLERANCE[torch.bfloat16]
    close("weight-only dW", w.grad, shard(rdw, ctx.rank, ctx.world), atol=gt, scale=True)
    close("weight-only db", bs.grad, shard(rdb, ctx.rank, ctx.world), atol=gt, scale=True)


def scenario_fsdp2(ctx):
    """TokenParallelLinearCrossEntropy under FSDP2's fully_shard: the weight
    shards' gradients (averaged by FSDP) are the full problem's; reading the
    sharded parameter outside forward is an error naming the fix."""
    from torch.distributed.fsdp import fully_shard

    hidden, weight, target, _ = inputs(torch.float32, ignored=(1, 2, 20))
    head = LD.TokenParallelLinearCrossEntropy(D, V)
    with torch.no_grad():
        head.weight.copy_(weight)
    fully_shard(head)
    lo, hi = _rows_of(ctx.rank, ctx.world)
    x = hidden[lo:hi].clone().requires_grad_()
    loss = head(x, target[lo:hi])
    loss.backward()
    grad = head.weight.grad.full_tensor()
    rloss, _l, rdx, rdw, _ = reference(hidden, weight, target)
    close("fsdp2 dW", grad, rdw, atol=2e-6, scale=True)
    close("fsdp2 dX", x.grad / ctx.world, rdx[lo:hi], atol=2e-6, scale=True)
    total = loss.detach().clone()
    dist.all_reduce(total)
    close("fsdp2 loss", total / ctx.world, rloss, rtol=4e-6)
    try:
        LD.token_parallel_linear_cross_entropy(x, head.weight, target[lo:hi])
    except ValueError as error:
        assert "fully_shard" in str(error) and "weight is a DTensor" in str(error), str(error)
    else:
        raise AssertionError("a sharded FSDP2 parameter was used as a whole weight")


def expect(error_type, fragment, fn):
    try:
        fn()
    except error_type as error:
        assert fragment in str(error), f"{error_type.__name__} without {fragment!r}: {error}"
        return
    raise AssertionError(f"no {error_type.__name__} ({fragment!r})")


def scenario_bad_inputs(ctx):
    """Clear errors naming the argument, raised on every rank (a rank whose
    inputs are bad makes the others raise too instead of hanging)."""
    hidden, weight, target, _ = inputs(torch.float32)
    w = shard(weight, ctx.rank, ctx.world)
    call = LD.linear_cross_entropy
    expect(ValueError, "vocab_block", lambda: call(hidden, w, target, vocab_block=0))
    expect(ValueError, "fused_backward", lambda: call(hidden, w, target, fused_backward=True))
    expect(ValueError, "vocab_start", lambda: call(hidden, w, target, vocab_start=-1))
    expect(TypeError, "group", lambda: call(hidden, w, target, group="world"))
    bad = target.clone()
    bad[5] = V + 3
    expect(IndexError, f"out of bounds for {V} classes", lambda: call(hidden, w, bad))
    # Overlapping shards: every rank claims to start at 0.
    expect(ValueError, "do not tile", lambda: call(hidden, w, target, vocab_start=0))
    # Rank 1 alone passes a weight shard of the wrong dtype.
    mine = w.half() if ctx.rank == 1 else w
    if ctx.rank == 1:
        expect(TypeError, "weight_shard has dtype float16", lambda: call(hidden, mine, target))
    else:
        expect(RuntimeError, "rank(s) [1]", lambda: call(hidden, mine, target))
    expect(ValueError, "weight_shard", lambda: call(hidden, w[:, :3], target))
    # Rank 2 alone passes other labels (or other hidden): every rank raises.
    other = target.clone()
    if ctx.rank == 2:
        other[0] = (other[0] + 1) % V
    expect(ValueError, "the values of hidden or target", lambda: call(hidden, w, other))
    shifted = hidden + 1 if ctx.rank == 2 else hidden
    expect(ValueError, "the values of hidden or target", lambda: call(shifted, w, target))
    expect(ValueError, "reduction",
           lambda: LD.token_parallel_linear_cross_entropy(hidden, weight, target,
                                                          reduction="avg"))


SCENARIOS = [name for name in list(globals()) if name.startswith("scenario_")]


def main(rank, world, rendezvous, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    ctx = Ctx(rank, world)
    report, seconds = {}, {}
    for name in SCENARIOS:
        start = time.perf_counter()
        try:
            globals()[name](ctx)
            report[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the parent
            report[name] = traceback.format_exc()
        seconds[name] = round(time.perf_counter() - start, 2)
    report["seconds"] = seconds
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()
