"""bench/gpu/bench_lce.py's AOT implementations, without a GPU.

The benchmark runs only on a lent GPU machine (scripts/gpu-check.sh), where a
mistake in its Python costs the lease's only measurement. Here its AOT
implementations run on CPU tensors against a stand-in for the ctypes C API
that records the calls, and its chunk arithmetic reads a real lossjit-aot
index manifest.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import aot_binary, load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench/gpu/bench_lce.py")


class RecordingLibrary:
    """AotLibrary's interface: ops by role, chunks, workspaces; `run` records
    (role, tensor names, dims) and writes recognizable outputs."""

    def __init__(self, roles, chunks=(1, 7), chunk_dim="N", workspace=3 << 20):
        self.ops = {role: {"role": role} for role in roles}
        self.arch = "sm_90a"
        self.calls = []
        self._chunks, self._chunk_dim, self._workspace = chunks, chunk_dim, workspace

    def chunk_launches(self, role, dims):
        assert role in self.ops, role
        return self._chunks

    def chunk_dim(self, role):
        return self._chunk_dim

    def workspace_bytes(self, role, dims):
        return self._workspace

    def run(self, role, tensors, dims, workspace=None):
        self.calls.append((role, sorted(tensors), dims))
        if role != "backward":
            tensors["loss"].fill_(float(len(self.calls)))
        for name in ("grad_x", "grad_w"):
            if name in tensors:
                tensors[name].fill_(0.5)


def prepared(tmp_path, name):
    """An AOT variant directory the way gpu-check.sh --prepare names it."""
    variant = tmp_path / name
    variant.mkdir()
    (variant / "manifest.json").write_text("{}")
    return str(tmp_path)


def inputs(n=6, v=11, d=4):
    x = torch.randn(n, d, dtype=torch.bfloat16)
    w = torch.randn(v, d, dtype=torch.bfloat16)
    y = torch.randint(0, v, (n,))
    return x, w, y


def test_fused_impl_is_one_call_of_the_fused_op(bench, tmp_path, monkeypatch):
    lib = RecordingLibrary(["forward", "backward", "forward_backward"], chunks=(2, 6),
                           chunk_dim="V")
    monkeypatch.setattr(bench, "AotLibrary", lambda variant, workdir, l2_promotion=None: lib)
    root = prepared(tmp_path, "bf16-mean-sm90a-wide256-cluster")
    fwd_bwd, note = bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster", fused=True)
    assert "fused op in 2 chunk(s) of 6 column(s), workspace 3 MiB" in note
    x, w, y = inputs()
    loss, gx, gw = fwd_bwd(x, w, y)
    # One call: the gradients of grad_loss = 1 (no grad_loss buffer).
    assert lib.calls == [("forward_backward",
                          ["grad_w", "grad_x", "labels", "loss", "lse", "w", "x"], (6, 11, 4))]
    assert loss.item() == 1.0 and loss.dtype == torch.float32
    assert gx.shape == x.shape and gx.dtype == x.dtype and bool((gx == 0.5).all())
    assert gw.shape == w.shape and gw.dtype == w.dtype and bool((gw == 0.5).all())
    # The forward alone is still the forward op.
    lib.calls.clear()
    fwd_bwd.forward(x, w, y)
    assert [c[0] for c in lib.calls] == ["forward"]


def test_unfused_impl_runs_forward_then_backward(bench, tmp_path, monkeypatch):
    lib = RecordingLibrary(["forward", "backward", "forward_backward"])
    monkeypatch.setattr(bench, "AotLibrary", lambda variant, workdir, l2_promotion=None: lib)
    root = prepared(tmp_path, "bf16-mean-sm90a-wide256-cluster")
    fwd_bwd, note = bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster")
    assert "fused" not in note
    loss, gx, gw = fwd_bwd(*inputs())
    assert [(role, "grad_loss" in names) for role, names, _ in lib.calls] == [
        ("forward", False), ("backward", True)]
    assert gx is not None and gw is not None


def test_fused_impl_needs_the_fused_op_and_few_chunks(bench, tmp_path, monkeypatch):
    root = prepared(tmp_path, "bf16-mean-sm90a-wide256-cluster-rows1g")
    monkeypatch.setattr(bench, "AotLibrary", lambda variant, workdir, l2_promotion=None:
                        RecordingLibrary(["forward", "backward"]))
    with pytest.raises(RuntimeError, match="has no fused op \\(lossjit-aot --fused\\)"):
        bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster-rows1g", fused=True)
    many = bench.MAX_BACKWARD_CHUNKS + 1
    monkeypatch.setattr(bench, "AotLibrary", lambda variant, workdir, l2_promotion=None:
                        RecordingLibrary(["forward", "backward", "forward_backward"],
                                         chunks=(many, 16)))
    with pytest.raises(RuntimeError, match=f"would run {many} chunks of 16 row"):
        bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster-rows1g", fused=True)
    with pytest.raises(RuntimeError, match="no prepared AOT variant"):
        bench.make_aot_impl(root, "fp16", (6, 11, 4), "wide256-cluster-rows1g", fused=True)


def test_fused_impls_name_prepared_variants(bench):
    # Every fused impl is in the default list and names a Hopper variant
    # that scripts/gpu-check.sh --prepare builds with --fused.
    script = open(os.path.join(os.path.dirname(__file__), "../../scripts/gpu-check.sh")).read()
    assert bench.HOPPER_FUSED
    for impl, tile in bench.HOPPER_FUSED.items():
        assert impl in bench.DEFAULT_IMPLS.split(","), impl
        line = next(line for line in script.splitlines()
                    if line.strip().startswith(f'"bf16-mean-sm90a-{tile}|'))
        assert " --fused" in line, line


def test_l2_promotion_impls_pass_their_promotion(bench, tmp_path, monkeypatch):
    # The L2-promotion impls are fused Hopper impls in the default list, and
    # their promotion reaches the C API's library (and the row's note).
    assert bench.L2_PROMOTION
    for impl in bench.L2_PROMOTION:
        assert impl in bench.HOPPER_FUSED and impl in bench.DEFAULT_IMPLS.split(","), impl
    seen = []
    lib = RecordingLibrary(["forward", "backward", "forward_backward"])

    def library(variant, workdir, l2_promotion=None):
        seen.append(l2_promotion)
        return lib

    monkeypatch.setattr(bench, "AotLibrary", library)
    root = prepared(tmp_path, "bf16-mean-sm90a-wide256-cluster")
    _, note = bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster", fused=True,
                                  l2_promotion="NONE")
    _, plain = bench.make_aot_impl(root, "bf16", (6, 11, 4), "wide256-cluster", fused=True)
    assert seen == ["NONE", None]
    assert "L2 promotion NONE" in note and "L2 promotion" not in plain


@pytest.mark.skipif(aot_binary() is None, reason="needs lossjit-aot (a compiler build)")
def test_chunks_of_a_real_fused_index(bench, tmp_path):
    # AotLibrary's chunk arithmetic on lossjit-aot's manifest of a fused op
    # in vocabulary chunks: ceil(V / C) chunks of C columns.
    out = tmp_path / "aot"
    subprocess.run([aot_binary(), "--preset", "linear-cross-entropy", "--dtype", "bf16",
                    "--reduction", "mean", "--fused", "--strategy", "vocab_chunked",
                    "--workspace-bytes", "200000", "--arch", "sm_80", "--quiet", "-o", str(out)],
                   check=True)
    lib = object.__new__(bench.AotLibrary)
    index = json.load(open(out / "manifest.json"))
    lib.ops = {op["role"]: op for op in index["ops"]}
    lib.arch = "sm_80"
    assert lib.chunk_dim("forward_backward") == "V"
    chunks, columns = lib.chunk_launches("forward_backward", (130, 8191, 96))
    assert chunks > 1 and chunks == -(-8191 // columns)


def _cuda_header():
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return any(os.path.exists(f"{d}/cuda.h") for d in (f"{cuda}/include",
                                                        "/usr/local/cuda/include"))


@pytest.mark.skipif(aot_binary() is None or not _cuda_header(),
                    reason="needs lossjit-aot (a compiler build) and CUDA's cuda.h")
def test_compiled_library_follows_the_source(bench, tmp_path):
    # A machine kept warm between two prepared bundles: the same variant
    # name with another lce.c gets its own library; the same source reuses it.
    def prepare(where, fused):
        args = [aot_binary(), "--preset", "linear-cross-entropy", "--dtype", "f16",
                "--reduction", "mean", "--arch", "sm_80", "--quiet", "-o", str(where)]
        subprocess.run(args + (["--fused"] if fused else []), check=True)
        return str(where)

    work = str(tmp_path / "work")
    plain = prepare(tmp_path / "one" / "f16-mean", False)
    first = bench.compiled_library(plain, "lce", work)
    assert os.path.basename(first).startswith("libf16-mean-")
    assert bench.compiled_library(plain, "lce", work) == first
    fused = prepare(tmp_path / "two" / "f16-mean", True)
    second = bench.compiled_library(fused, "lce", work)
    assert second != first and os.path.exists(first) and os.path.exists(second)
    # Only finished libraries are left (no temporary files).
    assert sorted(os.listdir(work)) == sorted(map(os.path.basename, (first, second)))
    symbols = subprocess.run(["nm", "-D", "--defined-only", second], capture_output=True,
                             text=True, check=True).stdout
    assert "lce_forward_backward_v" in symbols
    assert "lce_forward_backward_v" not in subprocess.run(
        ["nm", "-D", "--defined-only", first], capture_output=True, text=True,
        check=True).stdout


@pytest.mark.skipif(aot_binary() is None, reason="needs lossjit-aot (a compiler build)")
def test_compiled_library_takes_the_l2_promotion(bench, tmp_path):
    # A TMA variant's tensor maps take <PREFIX>_TMA_L2_PROMOTION: a library of
    # its own per value, and a value that names no CUtensorMapL2promotion
    # fails to compile (so the macro reaches the encode), leaving no file.
    tma = str(tmp_path / "bf16-mean-sm90a-tma")
    subprocess.run([aot_binary(), "--preset", "linear-cross-entropy", "--dtype", "bf16",
                    "--reduction", "mean", "--arch", "sm_90a", "--no-gradients", "--tile",
                    "matmul=wgmma,tma=1", "--quiet", "-o", tma], check=True)
    work = str(tmp_path / "work")
    macro = "LCE_TMA_L2_PROMOTION=CU_TENSOR_MAP_L2_PROMOTION_"
    default = bench.compiled_library(tma, "lce", work)
    none = bench.compiled_library(tma, "lce", work, (macro + "NONE",))
    assert none != default and os.path.exists(none)
    with pytest.raises(subprocess.CalledProcessError):
        bench.compiled_library(tma, "lce", work, (macro + "BOGUS",))
    assert sorted(os.listdir(work)) == sorted(map(os.path.basename, (default, none)))


# ------------------------------------------------------ process isolation

#: Stand-in impls: one that aborts its process, one that never returns.
FAULTY_IMPLS = '''
import os
import time


def _crash(args, dtype_name, shape):
    def fwd_bwd(x, w, y):
        os.abort()
    return fwd_bwd, "aborts"


def _hang(args, dtype_name, shape):
    def fwd_bwd(x, w, y):
        time.sleep(3600)
    return fwd_bwd, "sleeps"


IMPLS = {"test-crash": _crash, "test-hang": _hang}
'''

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "bench_lce.py")
TINY = ["--device", "cpu", "--n", "16", "--d", "32", "--v", "40", "--dtypes", "fp32,bf16",
        "--seconds", "0.05"]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    path = tmp_path_factory.mktemp("impls") / "faulty.py"
    path.write_text(FAULTY_IMPLS)
    return str(path)


@pytest.fixture(scope="module")
def isolated_run(faulty, tmp_path_factory):
    """One run: a crash, a hang (killed at --impl-timeout), then eager."""
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, BENCH, *TINY, "--impls", "test-crash,test-hang,eager",
                           "--extra-impls", faulty, "--impl-timeout", "20", "--budget", "200",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((out / "bench.json").read_text())["results"]


def rows_of(results, impl):
    return [r for r in results if r["impl"] == impl]


def test_a_crash_costs_only_its_impl(isolated_run):
    _, results = isolated_run
    crashed = rows_of(results, "test-crash")
    assert [r["dtype"] for r in crashed] == ["fp32", "bf16"]
    assert all(r["status"] == "crashed (killed by SIGABRT)" for r in crashed), crashed


def test_a_hang_is_killed_at_its_time_and_costs_only_its_impl(isolated_run):
    proc, results = isolated_run
    hung = rows_of(results, "test-hang")
    assert [r["status"] for r in hung] == ["hung (killed after 20 s)"] * 2, hung
    eager = rows_of(results, "eager")
    assert [(r["dtype"], r["status"]) for r in eager] == [("fp32", "ok"), ("bf16", "ok")]
    assert all(r["loss_err"] < 1e-2 and r["dx_err"] < 2e-2 for r in eager)
    assert "| eager | bf16 | 16 |" in proc.stdout  # the table comes last, with every impl


def test_each_impl_has_a_process_of_its_own(isolated_run):
    proc, results = isolated_run
    pids = {impl: {r["pid"] for r in rows_of(results, impl)}
            for impl in ("test-crash", "test-hang", "eager")}
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len(set().union(*pids.values())) == 3
    eager = rows_of(results, "eager")
    assert all(r["host_peak_mib"] > 0 for r in eager)


def test_in_process_measures_in_one_process(tmp_path):
    proc = subprocess.run([sys.executable, BENCH, *TINY, "--impls", "eager,torch_lce",
                           "--in-process", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert len({r["pid"] for r in results}) == 1
    assert [r["impl"] for r in results] == ["eager", "torch_lce"] * 2


@pytest.mark.parametrize("argv,message", [
    (["--impls", "eager,lossjit-wide512"], "--impls: unknown impl(s) lossjit-wide512"),
    (["--impls", "eager,eager"], "--impls: an impl is named twice"),
    (["--impls", ""], "--impls: unknown impl(s) (none given)"),
    (["--impl-timeout", "-1"], "--impl-timeout must be >= 0 seconds"),
    (["--extra-impls", "/nonexistent/impls.py"], "--extra-impls: FileNotFoundError"),
])
def test_bad_arguments_name_what_was_expected(bench, monkeypatch, capsys, argv, message):
    monkeypatch.setattr(sys, "argv", ["bench_lce.py", "--device", "cpu", *argv])
    with pytest.raises(SystemExit) as exit:
        bench.main()
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_extra_impls_may_not_shadow_a_builtin(bench, monkeypatch, capsys, tmp_path):
    impls = tmp_path / "shadow.py"
    impls.write_text("IMPLS = {'eager': lambda args, dtype, shape: None}\n")
    monkeypatch.setattr(sys, "argv", ["bench_lce.py", "--device", "cpu",
                                      "--extra-impls", str(impls)])
    with pytest.raises(SystemExit):
        bench.main()
    assert "--extra-impls: eager already name built-in impls" in capsys.readouterr().err
