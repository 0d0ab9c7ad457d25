#!/usr/bin/env python3
"""Hostile inputs for the tools' lit tests (issue 16), without numpy.

    hostile.py make DIR             .npy files and graphs under DIR
    hostile.py tamper CACHE MODE    damages the one entry in the cache dir
                                    CACHE (modes below)
    hostile.py copy-entry SRC DST   replaces the one entry of cache DST by
                                    SRC's, "key" rewritten and the manifest
                                    hash made to agree
    hostile.py hold-lock CACHE CMD...
                                    holds the lock of CACHE's one entry (and
                                    removes the entry) while CMD runs

Tamper modes: plan (a workspace count in the launch plan, hash not updated),
forge-plan / forge-no-plan (a garbage / no launch plan, every hash updated),
forge-object (a garbage object, every hash updated), fifo (manifest.json is a
FIFO), devzero (the object is a symlink to /dev/zero), sparse (the object is a
64 GiB sparse file).
"""
import fcntl
import hashlib
import json
import os
import struct
import subprocess
import sys


def npy(path, dict_text, data=b"", version=1):
    header = dict_text.encode("latin-1")
    preamble = 10 if version == 1 else 12
    header += b" " * ((64 - (preamble + len(header) + 1) % 64) % 64) + b"\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]) + length + header + data)


def array_dict(descr, shape):
    return "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)


def make(d):
    npy(os.path.join(d, "x.npy"), array_dict("<f4", "(3, 4)"), struct.pack("<12f", *range(12)))
    npy(os.path.join(d, "w.npy"), array_dict("<f4", "(5, 4)"), struct.pack("<20f", *range(20)))
    npy(os.path.join(d, "y.npy"), array_dict("<i8", "(3,)"), struct.pack("<3q", 1, 2, 3))
    npy(os.path.join(d, "overflow.npy"), array_dict("<f4", "(2305843009213693952, 2)"))
    npy(os.path.join(d, "short.npy"), array_dict("<f4", "(3, 4)"), b"\0" * 20)
    with open(os.path.join(d, "version.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x07\x1b" + struct.pack("<H", 16) + b"x" * 16)
    npy(os.path.join(d, "control.npy"),
        "{'descr': '\x1b[2J', 'fortran_order': False, 'shape': (3, 4), }", b"\0" * 48)
    n = 10000
    with open(os.path.join(d, "deep-attr.mlir"), "w") as f:
        f.write("module attributes {x.a = %s} {\n}\n" % ("[" * n + "]" * n))
    with open(os.path.join(d, "deep-module.mlir"), "w") as f:
        f.write("module {\n" * n + "}\n" * n)


def only_entry(cache):
    entries = [e for e in os.listdir(cache) if len(e) == 64 and os.path.isdir(os.path.join(cache, e))]
    assert len(entries) == 1, entries
    return os.path.join(cache, entries[0])


def rehash(entry):
    manifest = open(os.path.join(entry, "manifest.json"), "rb").read()
    with open(os.path.join(entry, "manifest.sha256"), "w") as f:
        f.write(hashlib.sha256(manifest).hexdigest() + "  manifest.json\n")


def tamper(cache, mode):
    entry = only_entry(cache)
    manifest_path = os.path.join(entry, "manifest.json")
    obj = os.path.join(entry, "kernels.host.o")
    if mode == "plan":
        text = open(manifest_path).read()
        m = json.loads(text)
        plan = m["options"]["launch_plan"]
        edited = plan.replace('count = "N"', 'count = "1"', 1)
        assert edited != plan
        m["options"]["launch_plan"] = edited
        open(manifest_path, "w").write(json.dumps(m, indent=2))
    elif mode in ("forge-plan", "forge-no-plan"):
        # Garbage (or no) launch plan, every hash updated: only the CPU
        # backend's own check of the entry can catch it.
        m = json.loads(open(manifest_path).read())
        if mode == "forge-plan":
            m["options"]["launch_plan"] = "{kernels = [{name = 42"
        else:
            del m["options"]["launch_plan"]
        open(manifest_path, "w").write(json.dumps(m, indent=2))
        rehash(entry)
    elif mode == "forge-object":
        old = open(obj, "rb").read()
        new = b"\x7fELF garbage" * 8
        open(obj, "wb").write(new)
        text = open(manifest_path).read()
        text = text.replace(hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest())
        text = text.replace('"bytes": %d' % len(old), '"bytes": %d' % len(new))
        open(manifest_path, "w").write(text)
        rehash(entry)
    elif mode == "fifo":
        os.unlink(manifest_path)
        os.mkfifo(manifest_path)
    elif mode == "devzero":
        os.unlink(obj)
        os.symlink("/dev/zero", obj)
    elif mode == "sparse":
        os.truncate(obj, 64 << 30)
    else:
        sys.exit("unknown mode " + mode)


def copy_entry(src_cache, dst_cache):
    src, dst = only_entry(src_cache), only_entry(dst_cache)
    src_key, dst_key = os.path.basename(src), os.path.basename(dst)
    for name in os.listdir(dst):
        os.unlink(os.path.join(dst, name))
    for name in os.listdir(src):
        data = open(os.path.join(src, name), "rb").read()
        if name == "manifest.json":
            data = data.replace(src_key.encode(), dst_key.encode())
        open(os.path.join(dst, name), "wb").write(data)
    rehash(dst)


def hold_lock(cache, cmd):
    entry = only_entry(cache)
    for name in os.listdir(entry):
        os.unlink(os.path.join(entry, name))
    os.rmdir(entry)
    with open(entry + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(cmd)
    sys.exit(result.returncode)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "tamper":
        tamper(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "copy-entry":
        copy_entry(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "hold-lock":
        hold_lock(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
