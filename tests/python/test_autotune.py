"""LOSSJIT_AUTOTUNE: the config space, the choice, the store (no GPU needed).

The timing itself (CUDA events) needs a device; everything that decides what
is timed, which tile wins and what is remembered is checked here with a fake
timer, and a CPU run proves the variable changes nothing off CUDA.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import lossjit
from lossjit import _autotune, _kernels


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv(_autotune.ENV, raising=False)
    assert not _autotune.enabled()
    monkeypatch.setenv(_autotune.ENV, "0")
    assert not _autotune.enabled()
    monkeypatch.setenv(_autotune.ENV, "1")
    assert _autotune.enabled()
    monkeypatch.setenv(_autotune.ENV, "yes please")
    with pytest.raises(ValueError, match="LOSSJIT_AUTOTUNE must be 0 or 1, got 'yes please'"):
        _autotune.enabled()


def test_config_space_follows_the_compilers_default():
    tc = _autotune.candidates("sm_90", "bf16")
    assert tc[0] == "matmul=mma_sync"  # the default tile first: it wins ties
    assert all(t.startswith("matmul=mma_sync") for t in tc)
    assert _autotune.candidates("sm_80", "f16", "chunked") == tc
    # sm_90a (what the JIT builds on compute capability 9.0): the tile auto
    # gives the cross-entropy ops first (TMA, measured fastest on an H200),
    # wgmma's base tile among the rest, the mma.sync space after them.
    hopper = _autotune.candidates("sm_90a", "f16")
    assert hopper[0] == "matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1"
    assert "matmul=wgmma" in hopper
    assert hopper[-len(tc):] == tc
    assert all(t.startswith("matmul=wgmma") for t in hopper[:-len(tc)])
    assert _autotune.candidates("sm_90a", "bf16", "recompute") == _autotune.SIMT_TILES
    # f32 storage, the recompute backward and pre-Ampere chips stay SIMT.
    assert _autotune.candidates("sm_90", "f32") == _autotune.SIMT_TILES
    assert _autotune.candidates("sm_90", "f64") == _autotune.SIMT_TILES  # tensor cores: 16-bit
    assert _autotune.candidates("sm_90", "bf16", "recompute") == _autotune.SIMT_TILES
    assert _autotune.candidates("sm_75", "f16") == _autotune.SIMT_TILES


@pytest.mark.skipif(not lossjit.has_compiler, reason="needs the compiler to parse tiles")
def test_every_candidate_is_a_valid_tile(monkeypatch, tmp_path):
    # Each text must be one the compiler accepts for its op (compile a tiny
    # bf16 forward for sm_80 with it: PTX only, no device), and the cache is
    # the test's own.
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    graph = lossjit._ext.C.lce_graph(dtype="bf16", label_type="i64", bias=False,
                                     ignore_index=-100, reduction="mean")
    for tile in set(_autotune.TENSOR_CORE_TILES) | set(_autotune.SIMT_TILES):
        op = lossjit._ext.C.compile_gpu(graph, "sm_80", tile)
        assert op is not None, tile
    for tile in _autotune.WGMMA_TILES:
        op = lossjit._ext.C.compile_gpu(graph, "sm_90a", tile)
        assert op is not None, tile


def test_buckets_are_powers_of_two():
    assert _autotune.shape_bucket(4096, 128256, 4096) == (4096, 131072, 4096)
    assert _autotune.shape_bucket(1, 3, 5) == (1, 4, 8)
    assert _autotune.shape_bucket(0, 1, 2) == (0, 1, 2)
    assert _autotune.shape_bucket(1, 3, 5, 6) == (1, 4, 8, 8)  # with a teacher's T


def test_key_names_device_arch_op_dtype_options_and_bucket():
    options = {"reduction": "mean", "bias": "false"}
    bucket = (4096, 131072, 4096)
    a = _autotune.store_key("NVIDIA H200", "sm_90a", "forward", "bf16", options, bucket)
    b = _autotune.store_key("NVIDIA H200", "sm_90a", "forward", "bf16",
                            {"bias": "false", "reduction": "mean"}, bucket)
    assert a == b  # option order does not matter
    assert a == ("NVIDIA H200|sm_90a|forward|bf16|bias=false,reduction=mean|"
                 "N4096.V131072.D4096")
    assert a != _autotune.store_key("NVIDIA A100", "sm_90a", "forward", "bf16", options, bucket)
    # The same device running sm_90 code (LOSSJIT_CUDA_ARCH) has winners of its own.
    assert a != _autotune.store_key("NVIDIA H200", "sm_90", "forward", "bf16", options, bucket)
    assert _autotune.store_key("NVIDIA H200", "sm_90a", "forward", "bf16", options,
                               bucket + (512,)) == a + ".T512"


class _FakeCompiler:
    """compile_gpu for _Tuned without a GPU: tiles named in `broken` fail to
    compile; every compile is recorded."""

    def __init__(self, broken=()):
        self.broken, self.compiled = set(broken), []

    def compile_gpu(self, graph, arch, tile):
        self.compiled.append((arch, tile))
        if tile in self.broken:
            raise RuntimeError(f"tile {tile!r} does not compile for {arch}")
        return ("op", arch, tile)


def _tuned_op(monkeypatch, tmp_path, arch, compiler, medians, t=0, capturing=False,
              tuned=None):
    """_Tuned.op_for on a stand-in device: `medians` gives each candidate's
    time (a missing one: 1 ms); `compiler.launched` gets (op, t) per timing
    launch and `compiler.timed_on` the device each timing ran on."""
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_kernels, "C", compiler)
    monkeypatch.setattr(_kernels, "_device_index", lambda device: 0)
    monkeypatch.setattr(_kernels, "capturing", lambda index: capturing)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H200")
    monkeypatch.setattr(_kernels, "_launch_cuda",
                        lambda op, names, dims, device, n, v, d, buffers, t=0:
                        compiler.launched.append((op, t)))
    compiler.launched, compiler.timed_on = [], []

    def timer(run, device=None):
        compiler.timed_on.append(device)
        run()
        return [medians.get(compiler.launched[-1][0][2], 1.0)]

    monkeypatch.setattr(_autotune, "cuda_event_timer", timer)
    tuned = tuned or _kernels._Tuned(lambda: "graph", arch, "forward", "bf16", "auto",
                                     {"pass": "forward"})
    kernel = type("Kernel", (), {"names": [], "dims": [], "op": "untuned"})()
    return tuned.op_for(kernel, torch.device("cuda", 1), 4096, 128256, 4096, {}, t)


def test_a_winner_is_kept_per_arch(monkeypatch, tmp_path):
    wgmma = _autotune.WGMMA_TILES[1]
    op = _tuned_op(monkeypatch, tmp_path, "sm_90a", _FakeCompiler(), {wgmma: 0.5})
    assert op == ("op", "sm_90a", wgmma)
    # The same device with sm_90 code tunes its own space (the store's wgmma
    # winner would not compile for it), and both winners stay.
    compiler = _FakeCompiler(broken=_autotune.WGMMA_TILES[:-len(_autotune.TENSOR_CORE_TILES)])
    op = _tuned_op(monkeypatch, tmp_path, "sm_90", compiler, {"matmul=mma_sync": 0.5})
    assert op == ("op", "sm_90", "matmul=mma_sync")
    assert all(tile.startswith("matmul=mma_sync") for _, tile in compiler.compiled)
    winners = _autotune.TuningStore(str(tmp_path / _autotune.STORE_NAME)).load()
    assert sorted(winners.values()) == sorted([wgmma, "matmul=mma_sync"])


def test_a_teachers_dim_reaches_the_timing_launches(monkeypatch, tmp_path):
    # Distillation plans take T (the teacher's hidden size): every timing
    # launch gets it as the real launch does, on the tensors' device, and
    # T is part of the bucket the winner is stored under.
    compiler = _FakeCompiler()
    op = _tuned_op(monkeypatch, tmp_path, "sm_90a", compiler, {}, t=32)
    assert compiler.launched and {t for _, t in compiler.launched} == {32}
    assert set(compiler.timed_on) == {torch.device("cuda", 1)}
    winners = _autotune.TuningStore(str(tmp_path / _autotune.STORE_NAME)).load()
    assert [key.rsplit("|", 1)[1] for key in winners] == ["N4096.V131072.D4096.T32"]
    assert op == ("op", "sm_90a", winners.popitem()[1])


def test_a_capture_takes_the_untuned_op_and_tunes_later(monkeypatch, tmp_path):
    # Inside a CUDA graph capture the timing's syncs are forbidden: the
    # untuned op, nothing timed, stored or kept; the next call outside the
    # capture tunes the bucket.
    tuned = _kernels._Tuned(lambda: "graph", "sm_90a", "forward", "bf16", "auto",
                            {"pass": "forward"})
    compiler = _FakeCompiler()
    assert _tuned_op(monkeypatch, tmp_path, "sm_90a", compiler, {}, capturing=True,
                     tuned=tuned) == "untuned"
    assert compiler.launched == [] and compiler.compiled == []
    assert _autotune.TuningStore(str(tmp_path / _autotune.STORE_NAME)).load() == {}
    op = _tuned_op(monkeypatch, tmp_path, "sm_90a", compiler, {}, tuned=tuned)
    assert op[0] == "op" and compiler.launched


def test_the_timer_runs_on_the_devices_stream(monkeypatch):
    # The events go on the current stream of the tensors' device, with that
    # device current: not the current device's (cuda:0 while the tensors
    # are on cuda:1).
    log = []

    class Device:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            log.append(("enter", self.device))

        def __exit__(self, *exc):
            log.append(("exit", self.device))

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self, stream=None):
            log.append(("record", stream))
            self.at = len(log)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return float(end.at - self.at)

    monkeypatch.setattr(torch.cuda, "device", Device)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    times = _autotune.cuda_event_timer(lambda: log.append(("run",)), torch.device("cuda", 1),
                                       warmup=1, runs=2)
    assert times == [2.0, 2.0]
    assert log[0] == ("enter", torch.device("cuda", 1)) and log[-1][0] == "exit"
    assert {entry[1] for entry in log if entry[0] == "record"} == {
        f"stream of {torch.device('cuda', 1)}"}


def test_a_stored_winner_that_does_not_compile_is_tuned_again(monkeypatch, tmp_path):
    key = _autotune.store_key("NVIDIA H200", "sm_90a", "forward", "bf16", {"pass": "forward"},
                              _autotune.shape_bucket(4096, 128256, 4096))
    store = _autotune.TuningStore(str(tmp_path / _autotune.STORE_NAME))
    store.record(key, "matmul=wgmma,cluster=3")
    best = _autotune.WGMMA_TILES[2]
    compiler = _FakeCompiler(broken={"matmul=wgmma,cluster=3"})
    with pytest.warns(UserWarning, match="ignoring the stored autotune winner "
                                         "'matmul=wgmma,cluster=3'.*tuning again"):
        op = _tuned_op(monkeypatch, tmp_path, "sm_90a", compiler, {best: 0.25})
    assert op == ("op", "sm_90a", best)
    assert store.lookup(key) == best


def test_fastest_median_wins_and_ties_go_to_the_earlier_tile():
    runs = {"a": [5.0, 1.0, 5.0], "b": [2.0, 2.0, 9.0], "c": [2.0, 2.0, 2.0]}
    best, medians = _autotune.fastest(["a", "b", "c"], lambda t: runs[t])
    assert medians == {"a": 5.0, "b": 2.0, "c": 2.0}
    assert best == "b"  # b and c tie at a median of 2: the earlier one


def test_a_failing_candidate_is_skipped_with_a_warning():
    def time_ms(tile):
        if tile == "bad":
            raise RuntimeError("too much shared memory")
        return [3.0]
    with pytest.warns(UserWarning, match="candidate 'bad' skipped: too much shared memory"):
        best, _ = _autotune.fastest(["bad", "good"], time_ms)
    assert best == "good"
    with pytest.raises(RuntimeError, match="no candidate tile that runs"):
        with pytest.warns(UserWarning):
            _autotune.fastest(["bad"], time_ms)


def test_store_round_trips_and_keeps_other_keys(tmp_path):
    path = tmp_path / "cache" / "autotune.json"
    store = _autotune.TuningStore(str(path))
    assert store.lookup("k1") is None
    store.record("k1", "matmul=mma_sync,stages=4")
    store.record("k2", "matmul=mma_sync")
    again = _autotune.TuningStore(str(path))
    assert again.lookup("k1") == "matmul=mma_sync,stages=4"
    assert again.lookup("k2") == "matmul=mma_sync"
    data = json.loads(path.read_text())
    assert data["format"] == "lossjit-autotune" and data["format_version"] == 1
    # No temporary file is left next to the store.
    assert sorted(os.listdir(path.parent)) == ["autotune.json"]


def test_a_failed_write_leaves_the_previous_store(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    store = _autotune.TuningStore(str(path))
    store.record("k1", "matmul=mma_sync")
    before = path.read_text()

    def boom(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(_autotune.json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        store.record("k2", "matmul=mma_sync,stages=4")
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["autotune.json"]


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": "other"}),
                                     json.dumps({"format": "lossjit-autotune",
                                                 "format_version": 1, "winners": {"k": 3}})])
def test_a_broken_store_is_ignored_with_a_warning(tmp_path, content):
    path = tmp_path / "autotune.json"
    path.write_text(content)
    with pytest.warns(UserWarning, match="ignoring the autotune store"):
        assert _autotune.TuningStore(str(path)).lookup("k") is None


def test_store_location_follows_the_kernel_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("LOSSJIT_CACHE_DISABLE", raising=False)
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    assert _autotune.default_store_path() == str(tmp_path / "autotune.json")
    monkeypatch.delenv("LOSSJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _autotune.default_store_path() == str(tmp_path / "xdg" / "lossjit" / "autotune.json")
    monkeypatch.setenv("LOSSJIT_CACHE_DISABLE", "1")
    assert _autotune.default_store_path() is None
    _autotune.TuningStore(None).record("k", "auto")  # no store: nothing written


@pytest.mark.skipif(not lossjit.has_compiler, reason="the CPU backend needs the compiler")
def test_cpu_ops_are_never_tuned(monkeypatch):
    monkeypatch.setenv(_autotune.ENV, "1")
    _kernels.clear_cache()
    try:
        x = torch.randn(5, 16)
        w = torch.randn(11, 16)
        y = torch.randint(0, 11, (5,))
        loss = lossjit.linear_cross_entropy(x, w, y)
        ref = torch.nn.functional.cross_entropy(x @ w.T, y)
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
        kernel = next(iter(_kernels._forward_ops.values()))
        assert kernel.tuned is None
    finally:
        _kernels.clear_cache()
