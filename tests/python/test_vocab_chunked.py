"""The backward in vocabulary chunks (strategy "vocab_chunked").

On CUDA with 16-bit storage the package takes it for N <= V: each dW row is
formed once over all rows and rounded straight into grad_weight, so the f32
scratch is dX's N x D, not the row chunks' V x D dW accumulator. A build
without the compiler takes such bundles where its kernel path has them and
any backward otherwise. The strategy is plumbed to the compiler on every
device, so the host runs it here; the CUDA test runs where a GPU is.
"""

from __future__ import annotations

import pytest
import torch

import lossjit
from lossjit import _kernels as K

from conftest import (CUDA, NO_CUDA, aot_binary, make_inputs, needs_cpu_backend, reference,
                      reference_grads, tolerance)


@pytest.mark.parametrize("device,dtype,n,v,grad_w,expected", [
    ("cuda", torch.bfloat16, 4096, 128256, True, "vocab_chunked"),
    ("cuda", torch.float16, 524, 128256, True, "vocab_chunked"),
    ("cuda", torch.float16, 523, 128256, True, "auto"),    # one row chunk: no accumulator
    ("cuda", torch.float16, 7, 7, True, "auto"),
    ("cuda", torch.bfloat16, 8, 7, True, "auto"),          # N > V: dX the bigger scratch
    ("cuda", torch.bfloat16, 4096, 128256, False, "auto"),  # no dW: row chunks need no sum
    ("cuda", torch.float32, 4096, 128256, True, "auto"),   # f32 sums dW in grad_weight
    ("cpu", torch.bfloat16, 4096, 128256, True, "auto"),   # the host's auto chunks V already
])
def test_the_backward_strategy_follows_device_dtype_and_shape(monkeypatch, device, dtype, n, v,
                                                             grad_w, expected):
    monkeypatch.setattr(K, "HAS_COMPILER", True)  # the JIT's budget is known
    assert K.backward_strategy(dtype, torch.device(device), n, v, grad_w) == expected


@pytest.mark.parametrize("dtype,v,d,grad_w,fused,expected", [
    # 4.V.D bytes of f32 dW accumulator against half of the 64 MiB budget.
    (torch.bfloat16, 8000, 1024, True, True, "chunked"),   # 31.25 MiB
    (torch.float16, 32768, 256, True, True, "chunked"),    # 32 MiB
    (torch.bfloat16, 32769, 256, True, True, "auto"),      # just over: vocabulary chunks
    (torch.bfloat16, 32000, 1024, True, True, "auto"),
    (torch.bfloat16, 8000, 1024, True, False, "auto"),     # the backward alone
    (torch.bfloat16, 8000, 1024, False, True, "auto"),     # no dW, no accumulator
    (torch.float32, 8000, 1024, True, True, "auto"),       # f32 sums dW in grad_weight
])
def test_the_host_fused_op_takes_row_chunks_for_a_small_head(dtype, v, d, grad_w, fused,
                                                             expected):
    cpu = torch.device("cpu")
    assert K.backward_strategy(dtype, cpu, 4096, v, grad_w, fused=fused, d=d) == expected
    flags = K.BackwardFlags(True, grad_w, strategy=expected)
    # Row chunks get the half of the budget their accumulator leaves.
    assert K._with_workspace(flags, cpu).workspace_bytes == (
        K.CPU_WORKSPACE_BYTES // 2 if expected == "chunked" else K.CPU_WORKSPACE_BYTES)


@needs_cpu_backend
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_host_fused_op_in_row_chunks_matches_fp64_and_repeats(monkeypatch, dtype):
    # A budget small enough for several row chunks: 1 MiB, so chunks of
    # about 430 rows within the half the dW accumulator leaves. (Row chunks
    # form lse from the logit tiles' statistics: the last bits of the
    # gradients are not the vocabulary chunks', as f32's fused op already
    # differs from its split backward; each is checked against fp64.)
    monkeypatch.setattr(K, "CPU_WORKSPACE_BYTES", 1 << 20)
    h, w, y, _ = make_inputs("cpu", dtype, n=1000, v=301, d=64)
    assert K.backward_strategy(dtype, h.device, 1000, 301, fused=True, d=64) == "chunked"
    runs = []
    for _ in range(2):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = lossjit.linear_cross_entropy(hh, ww, y, fused_backward=True)
        loss.backward()
        runs.append((loss.detach(), hh.grad, ww.grad))
    name = {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
    options = [op.op.options for op in K._fused_ops.values()
               if op.op.options["dtype"] == name and op.op.options["workspace_bytes"] == str(1 << 19)]
    assert [o["strategy"] for o in options] == ["chunked"]
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    torch.testing.assert_close(runs[0][0].double(), reference(h, w, y)[0],
                               rtol=1e-5, atol=1e-6)
    rx, rw = reference_grads(h, w, y, None, torch.tensor(1.0))[:2]
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(runs[0][1].double(), rx, rtol=rtol, atol=atol)
    torch.testing.assert_close(runs[0][2].double(), rw, rtol=rtol, atol=atol)


def test_the_fused_op_keeps_one_row_chunk_while_its_logits_fit(monkeypatch):
    # The fused op's row chunks hold 6 bytes an element (f32 raw logits and
    # 16-bit dZ) and up to 8 bytes per 32 columns (the tiles' row
    # statistics): at V = 128256 and 256 MiB, 334 rows are one chunk (the
    # logits once, 6.N.D.V) and 335 take the vocabulary chunks (8.N.D.V).
    # Without the compiler the prebuilt row-chunk bundles' budget is not
    # known: vocabulary chunks whatever N.
    cuda = torch.device("cuda")
    monkeypatch.setattr(K, "HAS_COMPILER", True)
    assert K.backward_strategy(torch.bfloat16, cuda, 334, 128256, fused=True) == "auto"
    assert K.backward_strategy(torch.bfloat16, cuda, 335, 128256, fused=True) == "vocab_chunked"
    assert K.backward_strategy(torch.bfloat16, cuda, 523, 128256) == "auto"
    monkeypatch.setattr(K, "CUDA_WORKSPACE_BYTES", 1 << 20)  # read per call
    assert K.backward_strategy(torch.bfloat16, cuda, 334, 128256, fused=True) == "vocab_chunked"
    monkeypatch.setattr(K, "HAS_COMPILER", False)
    monkeypatch.setattr(K, "CUDA_WORKSPACE_BYTES", 256 << 20)
    assert K.backward_strategy(torch.bfloat16, cuda, 7, 7, fused=True) == "vocab_chunked"


def _assert_gradients_match_fp64(hidden, weight, target, bias, dtype):
    """The .grad of a backward of grad_loss = 1 against fp64."""
    rx, rw, rb = reference_grads(hidden, weight, target, bias, torch.tensor(1.0))
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(hidden.grad.double().cpu(), rx, rtol=rtol, atol=atol)
    torch.testing.assert_close(weight.grad.double().cpu(), rw, rtol=rtol, atol=atol)
    torch.testing.assert_close(bias.grad.double().cpu(), rb, rtol=rtol, atol=atol)


def _evaluate(formula, symbols):
    """A plan formula (+ - * / min max cdiv over integers, '/' floor)."""
    return eval(formula.replace("/", "//"),
                {"__builtins__": {}, "min": min, "max": max, "cdiv": lambda a, b: -(-a // b)},
                dict(symbols))


@pytest.mark.skipif(aot_binary() is None, reason="needs lossjit-aot (a compiler build)")
def test_one_row_chunk_is_what_every_gpu_plan_takes(tmp_path):
    # fits_one_row_chunk must never promise one chunk that a compiled plan
    # cuts in two: for each tile the JIT may pick (SIMT's f32 dZ, mma.sync's
    # and wgmma's 16-bit one), backward and fused op, at the 256 MiB the
    # package asks on CUDA, SINGLE = 1 wherever it says the rows fit.
    import glob
    import json
    import subprocess
    # The tiles: SIMT, auto (mma.sync 64x64 on sm_80, wgmma on sm_90a) and
    # an autotune candidate with four warp columns (four tile states a row
    # per 128 columns).
    for name, arch, tile in [("simt", "sm_80", "block_rows=4,threads=128,splits=8"),
                             ("auto", "sm_80,sm_90a", "auto"),
                             ("wide", "sm_80",
                              "matmul=mma_sync,block_rows=64,block_cols=128,threads=256")]:
        subprocess.run([aot_binary(), "--preset", "linear-cross-entropy", "--dtype", "bf16",
                        "--fused", "--arch", arch, "--tile", tile,
                        "--workspace-bytes", str(K.CUDA_WORKSPACE_BYTES), "--no-c-api",
                        "--quiet", "-o", str(tmp_path / name)], check=True, timeout=600)
    checked = 0
    for path in glob.glob(str(tmp_path / "*" / "*" / "manifest.json")):
        manifest = json.load(open(path))
        fused = manifest["options"]["pass"] == "forward_backward"
        if manifest["options"]["pass"] not in ("backward", "forward_backward"):
            continue
        # The Llama-3 head, and a vocabulary no tile width divides.
        for v, edge in ((128256, 334 if fused else 523), (32001, 1341 if fused else 2097)):
            for n in (1, 100, edge - 1, edge, edge + 1):
                symbols = {"N": n, "V": v, "D": 4096, **manifest["constants"]}
                for d in manifest["derived"]:
                    symbols[d["name"]] = _evaluate(d["formula"], symbols)
                fits = K.fits_one_row_chunk(n, v, fused)
                assert fits == (n <= edge), (v, n)
                if fits:
                    assert symbols["SINGLE"] == 1, (path, v, n, symbols)
        checked += 1
    # SIMT and mma.sync's 64x64 and 64x128 on sm_80, wgmma on sm_90a; both ops.
    assert checked == 8


def _run_backward(kernel, hidden, weight, target, lse, grad_loss):
    n, d = hidden.shape
    v = weight.shape[0]
    buffers = {"x": hidden, "w": weight, "labels": target, "lse": lse,
               "grad_loss": grad_loss, "grad_x": torch.empty_like(hidden),
               "grad_w": torch.empty_like(weight)}
    kernel.run(hidden.device, n, v, d, buffers)
    return buffers["grad_x"], buffers["grad_w"]


@needs_cpu_backend
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vocab_chunks_through_the_package_match_fp64(dtype, tmp_path, monkeypatch):
    # A budget of a few columns: 41 columns in several chunks.
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    hidden, weight, target, _ = make_inputs("cpu", dtype, n=13, v=41, d=16)
    lse = torch.logsumexp((hidden.double() @ weight.double().T), -1).float()
    grad_loss = torch.tensor(0.75)
    flags = K.BackwardFlags(True, True, strategy="vocab_chunked", workspace_bytes=4096)
    kernel = K.backward_kernel(dtype, torch.int64, False, -100, "mean", flags,
                               torch.device("cpu"))
    assert kernel.options["strategy"] == "vocab_chunked"
    gx, gw = _run_backward(kernel, hidden, weight, target, lse, grad_loss)
    rx, rw = reference_grads(hidden, weight, target, None, grad_loss)
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(gx.double(), rx, rtol=rtol, atol=atol)
    torch.testing.assert_close(gw.double(), rw, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["backward", "fused"])
def test_a_kernel_path_without_vocab_chunks_serves_any_backward(op, monkeypatch):
    # A runtime-only build asks its kernel path for vocab_chunked bundles
    # first (the backward, or the fused op); where it has none it takes
    # whatever it holds of that op, once.
    asked = []

    def new_kernel(dtype, label_dtype, bias, ignore_index, reduction, flags, device,
                   logit_scale, softcap):
        asked.append(flags.strategy)
        if flags.strategy == "vocab_chunked":
            raise RuntimeError("no prebuilt kernel for linear_cross_entropy {...}")
        return "row-chunked bundle"

    public = K.backward_kernel if op == "backward" else K.fused_kernel
    monkeypatch.setattr(K, "HAS_COMPILER", False)
    monkeypatch.setattr(K, f"_new_{op}_kernel", new_kernel)
    monkeypatch.setattr(K, f"_{op}_ops", {})
    flags = K.BackwardFlags(True, True, strategy="vocab_chunked")
    cuda = torch.device("cuda", 0)
    for _ in range(2):
        assert public(torch.bfloat16, torch.int64, False, -100, "mean", flags,
                      cuda) == "row-chunked bundle"
    assert asked == ["vocab_chunked", "auto"]
    # With the compiler a failure is the compiler's to report, not hidden.
    monkeypatch.setattr(K, "HAS_COMPILER", True)
    monkeypatch.setattr(K, f"_{op}_ops", {})
    with pytest.raises(RuntimeError, match="no prebuilt kernel"):
        public(torch.bfloat16, torch.int64, False, -100, "mean", flags, cuda)


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_backward_takes_vocab_chunks_and_matches_fp64(monkeypatch, dtype):
    # 64 rows fit one row chunk, which the package would take instead.
    monkeypatch.setattr(K, "fits_one_row_chunk", lambda *args, **kwargs: False)
    hidden, weight, target, bias = make_inputs("cuda", dtype, n=64, v=3000, d=72, bias=True,
                                               requires_grad=True)
    loss = lossjit.linear_cross_entropy(hidden, weight, target, bias=bias)
    loss.backward()
    taken = [kernel for key, kernel in K._backward_ops.items()
             if key[0] == dtype and key[5].strategy == "vocab_chunked"]
    assert taken and all(k.options.get("strategy") == "vocab_chunked" for k in taken), \
        "no vocab_chunked kernel (a kernel path without them falls back)"
    _assert_gradients_match_fp64(hidden, weight, target, bias, dtype)


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_fused_op_takes_vocab_chunks_and_matches_fp64(monkeypatch, dtype):
    # 64 rows fit one row chunk, which the package would take instead.
    monkeypatch.setattr(K, "fits_one_row_chunk", lambda *args, **kwargs: False)
    # fused_backward=True on CUDA with 16-bit storage: the forward's
    # statistics, then the backward's vocabulary chunks in one op.
    hidden, weight, target, bias = make_inputs("cuda", dtype, n=64, v=3000, d=72, bias=True,
                                               requires_grad=True)
    loss = lossjit.linear_cross_entropy(hidden, weight, target, bias=bias, fused_backward=True)
    loss.backward()
    taken = [kernel for key, kernel in K._fused_ops.items()
             if key[0] == dtype and key[5].strategy == "vocab_chunked"]
    assert taken and all(k.options.get("strategy") == "vocab_chunked" for k in taken), \
        "no fused vocab_chunked kernel (a kernel path without them falls back)"
    want, _ = reference(hidden, weight, target, bias)
    torch.testing.assert_close(loss.detach().double().cpu(), want, rtol=1e-4, atol=1e-5)
    _assert_gradients_match_fp64(hidden, weight, target, bias, dtype)


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.skipif(not lossjit.has_compiler, reason="the JIT's budget decides")
@pytest.mark.parametrize("fused", [False, True])
def test_cuda_one_row_chunk_takes_the_row_chunks_and_matches_fp64(fused):
    # 64 rows over 3000 columns fit one row chunk: the row chunks (no V x D
    # accumulator: lce_bwd_dw_single) rather than the vocabulary chunks.
    dtype = torch.bfloat16
    hidden, weight, target, bias = make_inputs("cuda", dtype, n=64, v=3000, d=72, bias=True,
                                               requires_grad=True)
    loss = lossjit.linear_cross_entropy(hidden, weight, target, bias=bias,
                                        fused_backward=fused)
    loss.backward()
    ops = K._fused_ops if fused else K._backward_ops
    assert any(key[0] == dtype and key[5].strategy == "auto" for key in ops), \
        "the row chunks were not taken"
    _assert_gradients_match_fp64(hidden, weight, target, bias, dtype)


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.skipif(not lossjit.has_compiler, reason="a small budget needs the JIT")
def test_cuda_vocab_chunks_over_many_chunks_match_fp64():
    # 64 rows, 1000 columns in chunks of 64 (the last one 40 wide): the f32
    # dX accumulator carried across 16 chunks.
    hidden, weight, target, _ = make_inputs("cuda", torch.bfloat16, n=64, v=1000, d=72)
    lse = torch.logsumexp(hidden.double() @ weight.double().T, -1).float()
    flags = K.BackwardFlags(True, True, strategy="vocab_chunked",
                            workspace_bytes=2 * (64 * 4 + 64 * 64 * 2))
    kernel = K.backward_kernel(torch.bfloat16, torch.int64, False, -100, "mean", flags,
                               hidden.device)
    gx, gw = _run_backward(kernel, hidden, weight, target, lse,
                           torch.tensor(1.0, device="cuda"))
    rx, rw = reference_grads(hidden, weight, target, None, torch.tensor(1.0))
    rtol, atol = tolerance(torch.bfloat16)
    torch.testing.assert_close(gx.double().cpu(), rx, rtol=rtol, atol=atol)
    torch.testing.assert_close(gw.double().cpu(), rw, rtol=rtol, atol=atol)
