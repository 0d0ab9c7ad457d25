#!/usr/bin/env python3
"""Checks the f32 tanh of the softcap logit map (compiler/Kernels/RowStats/
LogitMaps.cpp) against float64, in ulps of the f32 result:

  a < 0.625:  a + a^3 * P(a^2)  (Cephes' tanhf coefficients, Horner in f32)
  a >= 0.625: 1 - 2 / (exp(2a) + 1)

The polynomial is there because 1 - q cancels for small a; this script shows
both the bound of each branch and how badly the cancelling form does below
the switch. numpy's exp stands in for the kernels' exp2-based one.

Usage: scripts/numerics/softcap-tanh.py   (prints the max ulp errors; exits
non-zero if a branch exceeds its documented bound)
"""
import sys

import numpy as np

POLY = [np.float32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                1.33314422036e-1, -3.33332819422e-1)]
SWITCH = np.float32(0.625)


def poly_tanh(a):
    s = a * a
    p = POLY[0]
    for c in POLY[1:]:
        p = p * s + c
    return p * s * a + a


def q_tanh(a):
    q = np.float32(2) / (np.exp(a + a) + np.float32(1))
    return np.float32(1) - q


def max_ulp(got, a):
    ref = np.tanh(a.astype(np.float64))
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return float((np.abs(got.astype(np.float64) - ref) / ulp).max())


def main() -> int:
    small = np.linspace(0, SWITCH, 4_000_001, dtype=np.float32)[1:-1]
    tiny = (np.float32(1.37) * np.float32(2.0) ** -np.arange(2, 126, dtype=np.float32))
    small = np.concatenate([small, tiny.astype(np.float32)])
    large = np.linspace(SWITCH, 12, 2_000_001, dtype=np.float32)
    poly, cancel, rest = max_ulp(poly_tanh(small), small), max_ulp(q_tanh(small), small), \
        max_ulp(q_tanh(large), large)
    print(f"polynomial below {SWITCH}: {poly:.3f} ulp")
    print(f"1 - q below {SWITCH} (the cancelling form, not used): {cancel:.3g} ulp")
    print(f"1 - q from {SWITCH}: {rest:.3f} ulp")
    return 0 if poly <= 0.78 and rest <= 1.7 else 1


if __name__ == "__main__":
    sys.exit(main())
