#!/usr/bin/env python3
"""Inputs and expected outputs for the lossjit-runner lit test, without numpy.

    runner-data.py make DIR    writes DIR/{x,w,y}.npy (f32, f32, i64)
    runner-data.py check DIR PREFIX ORDER
        reads PREFIX0.npy, PREFIX1.npy and checks them, in ORDER ("lse,loss"
        or "loss,lse"), against a float64 evaluation of the same inputs.
"""
import math
import struct
import sys

N, V, D = 3, 5, 4
X = [[0.5 * ((r * D + k) % 7) - 1.0 for k in range(D)] for r in range(N)]
W = [[0.25 * ((j * 3 + k * 5) % 9) - 1.0 for k in range(D)] for j in range(V)]
Y = [2, -100, 4]  # the middle row is ignored


def write_npy(path, descr, shape, values, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def read_npy(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode()
    assert "'<f4'" in header, header
    body = data[10 + hlen:]
    return header, list(struct.unpack("<%df" % (len(body) // 4), body))


def reference():
    lse, rows = [], []
    for r in range(N):
        z = [sum(X[r][k] * W[j][k] for k in range(D)) for j in range(V)]
        m = max(z)
        l = m + math.log(sum(math.exp(v - m) for v in z))
        lse.append(l)
        rows.append(0.0 if Y[r] == -100 else l - z[Y[r]])
    counted = sum(1 for y in Y if y != -100)
    return lse, sum(rows) / counted


def main():
    if sys.argv[1] == "make":
        d = sys.argv[2]
        write_npy(d + "/x.npy", "<f4", (N, D), [v for row in X for v in row], "f")
        write_npy(d + "/w.npy", "<f4", (V, D), [v for row in W for v in row], "f")
        write_npy(d + "/y.npy", "<i8", (N,), Y, "q")
        return
    prefix, order = sys.argv[3], sys.argv[4].split(",")
    lse, loss = reference()
    for i, name in enumerate(order):
        header, values = read_npy("%s%d.npy" % (prefix, i))
        want = lse if name == "lse" else [loss]
        shape = "(3,)" if name == "lse" else "()"
        assert "'shape': " + shape in header, (name, header)
        for got, ref in zip(values, want):
            assert abs(got - ref) <= 1e-5 * max(1.0, abs(ref)), (name, got, ref)
        print("%s ok %s" % (name, " ".join("%.6f" % v for v in values)))


if __name__ == "__main__":
    main()
