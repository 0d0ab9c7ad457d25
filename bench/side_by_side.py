"""Shared pieces of the side-by-side CPU benchmarks (each variant in its own
process): the inputs of a language-model head, and a timed loop that gives
the best time and the peak resident-memory growth of a call (VmHWM from
/proc/self/status, reset through /proc/self/clear_refs before each call)."""
import time


def hwm():
    """The process's peak resident set size in bytes (0 where unknown)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """Resets VmHWM to the current resident set size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def head_inputs(torch, n, v, d, dtype_name, generator):
    """x [n, d] and w [v, d] (logits of magnitude ~4) requiring grad, with
    zeroed gradient buffers already allocated (as in a training step that
    reuses them), and labels y [n]."""
    dtype = getattr(torch, dtype_name)
    x = torch.randn(n, d, generator=generator).to(dtype).requires_grad_()
    w = (torch.randn(v, d, generator=generator) * (4.0 / d ** 0.5)).to(dtype).requires_grad_()
    y = torch.randint(0, v, (n,), generator=generator)
    x.grad = torch.zeros_like(x)
    w.grad = torch.zeros_like(w)
    return x, w, y


def best_of(call, repeat):
    """(best seconds, peak VmHWM growth in bytes, last result) of `repeat`
    calls of `call` after one warm-up call (compilation, caches)."""
    call()
    best, peak, result = float("inf"), 0, None
    for _ in range(repeat):
        reset_hwm()
        before = hwm()
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
        peak = max(peak, hwm() - before)
    return best, peak, result
