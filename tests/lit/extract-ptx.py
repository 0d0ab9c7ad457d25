#!/usr/bin/env python3
"""Extract the PTX of every `gpu.binary` op in lossjit-opt output.

usage: extract-ptx.py INPUT.mlir|- OUTDIR

Writes OUTDIR/<binary symbol>.ptx for each gpu.binary (a binary with several
objects gives <symbol>.<i>.ptx for the i-th one) and prints one line per
written file, "<file name> <chip>" (the chip of the object's target, or "?"),
in input order, so a test can FileCheck the exact set of kernels it then
hands to ptxas.

The object payload is an MLIR string literal: printable characters stay as
they are, everything else is escaped as \\XX (two hex digits; \\0A newline,
\\09 tab, \\22 quote, \\5C backslash); the parser also accepts \\n, \\t,
\\" and \\\\, so all of them are decoded here.
"""

import os
import re
import sys

_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, '"': 0x22, "\\": 0x5C}


def _read_string(text, pos):
    """Decodes the string literal whose opening quote is at `pos`.

    Returns (decoded bytes, position after the closing quote).
    """
    assert text[pos] == '"'
    out = bytearray()
    i = pos + 1
    while True:
        if i >= len(text):
            raise ValueError("unterminated string literal at offset %d" % pos)
        c = text[i]
        if c == '"':
            return bytes(out), i + 1
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[nxt])
            i += 2
            continue
        hexpair = text[i + 1 : i + 3]
        if len(hexpair) == 2 and all(h in "0123456789abcdefABCDEF" for h in hexpair):
            out.append(int(hexpair, 16))
            i += 3
            continue
        raise ValueError("bad escape '\\%s' at offset %d" % (hexpair, i))


_OPEN = {"<": ">", "[": "]", "{": "}", "(": ")"}
_CLOSE = set(_OPEN.values())


def _parse_objects(text, pos):
    """Parses the `[ #gpu.object<...>, ... ]` list whose '[' is at `pos`.

    Returns (list of (chip, payload bytes), position after ']').
    The payload of an object is the last string literal at its top level
    (target attributes and `properties = {...}` are nested deeper).
    """
    assert text[pos] == "["
    objects = []
    stack = ["]"]
    i = pos + 1
    current = None  # (start, depth, top-level strings) of the open object
    while stack:
        if i >= len(text):
            raise ValueError("unterminated gpu.binary object list")
        if text.startswith("#gpu.object<", i):
            if current is not None:
                raise ValueError("nested #gpu.object at offset %d" % i)
            i += len("#gpu.object<")
            stack.append(">")
            current = (i, len(stack), [])
            continue
        c = text[i]
        if c == '"':
            value, end = _read_string(text, i)
            if current is not None and len(stack) == current[1]:
                current[2].append(value)
            i = end
            continue
        if c == "-" and text.startswith("->", i):
            i += 2  # a function type arrow, not a bracket
            continue
        if c in _OPEN:
            stack.append(_OPEN[c])
            i += 1
            continue
        if c in _CLOSE:
            if stack[-1] != c:
                raise ValueError("unbalanced '%s' at offset %d" % (c, i))
            if current is not None and len(stack) == current[1]:
                start, _, strings = current
                if not strings:
                    raise ValueError("#gpu.object without a payload at %d" % start)
                chip = _CHIP.search(text, start, i)
                objects.append((chip.group(1) if chip else "?", strings[-1]))
                current = None
            stack.pop()
            i += 1
            continue
        i += 1
    return objects, i


_CHIP = re.compile(r'chip\s*=\s*"([^"]*)"')
_BINARY = re.compile(r"gpu\.binary\s+@([\w$.-]+|\"[^\"]*\")")


def extract(text):
    """Yields (symbol, list of (chip, payload)) for each gpu.binary."""
    pos = 0
    while True:
        m = _BINARY.search(text, pos)
        if not m:
            return
        name = m.group(1).strip('"')
        bracket = text.find("[", m.end())
        if bracket < 0:
            raise ValueError("gpu.binary @%s has no object list" % name)
        objects, pos = _parse_objects(text, bracket)
        yield name, objects


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    source, outdir = argv[1], argv[2]
    text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    os.makedirs(outdir, exist_ok=True)
    written = 0
    for name, objects in extract(text):
        for index, (chip, payload) in enumerate(objects):
            fname = name + (".%d" % index if len(objects) > 1 else "") + ".ptx"
            with open(os.path.join(outdir, fname), "wb") as f:
                f.write(payload)
            print(fname, chip)
            written += 1
    if written == 0:
        sys.stderr.write("extract-ptx: no gpu.binary with an object in %s\n" % source)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
