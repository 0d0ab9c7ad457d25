#!/usr/bin/env python3
"""Derives the polynomial coefficients of loss-expand-host-libcalls.

compiler/Conversion/ExpandHostLibcalls.cpp evaluates, in f32 with fma:
  exp2: 2^f = 1 + f*q(f) on f in [-1/2, 1/2], q of degree 5;
  log2: log2(1 + r) = r*g(r) on r in [sqrt(1/2) - 1, sqrt(2) - 1], g of degree 9,
        g = C0 + r*h(r) with C0 = log2(e) split in an f32 pair.
Each polynomial is a minimax fit of the *relative* error (Lawson's
iteratively reweighted least squares on Chebyshev points), with the function
evaluated at 120-bit precision. The printed f32 values are what the C++
carries (9 significant digits identify an f32 exactly).

Usage: python3 scripts/numerics/fit-host-math.py   (needs numpy and mpmath)
The f32 evaluation is checked exhaustively by host-math-exhaustive.cpp and
by sampling in tests/unit/compiler/HostTargetTest.cpp.
"""
import mpmath as mp
import numpy as np

mp.mp.prec = 120


def lawson(f, degree, lo, hi, points=4000, iterations=200):
    xs = np.cos(np.linspace(0, np.pi, points)) * (hi - lo) / 2 + (hi + lo) / 2
    ys = np.array([float(f(mp.mpf(x))) for x in xs])
    basis = np.stack([xs**k for k in range(degree + 1)], axis=1)
    weights = np.ones(points) / points
    for _ in range(iterations):
        w = np.sqrt(weights)
        coeffs, *_ = np.linalg.lstsq(basis / ys[:, None] * w[:, None], w, rcond=None)
        err = np.abs(basis @ coeffs / ys - 1)
        weights = weights * err
        weights /= weights.sum()
    return coeffs, float(np.max(np.abs(basis @ coeffs / ys - 1)))


def show(name, coeffs, err):
    high_first = [float(np.float32(c)) for c in reversed(coeffs)]
    print(f"{name}: max relative error {err:.3g}")
    print("  high to low:", ", ".join(f"{c:.8e}f" for c in high_first))


q, err = lawson(lambda x: (mp.power(2, x) - 1) / x if x else mp.log(2), 5, -0.5, 0.5)
show("exp2 q(f)", q, err)
lo, hi = float(mp.sqrt(0.5) - 1), float(mp.sqrt(2) - 1)
g, err = lawson(lambda x: mp.log(1 + x, 2) / x if x else 1 / mp.log(2), 9, lo, hi)
show("log2 h(r) = g[1:]", g[1:], err)
c0 = 1 / mp.log(2)
c0_hi = np.float32(float(c0))
c0_lo = np.float32(float(c0 - mp.mpf(float(c0_hi))))
print(f"log2 C0 = {float(c0_hi):.8e}f + {float(c0_lo):.8e}f")
