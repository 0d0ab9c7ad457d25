// The CPU kernel cache through lossjit-runner (issue 16): every damaged,
// tampered, misfiled or hostile entry is reported, recompiled and replaced,
// never trusted and never a permanent failure; --check proves the result is
// the right one each time (a wrong kernel would differ from the reference).
// RUN: rm -rf %t && mkdir -p %t
// RUN: export LOSSJIT_CACHE_DIR=%t/c
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A workspace count edited in the launch plan (it overflowed the heap).
// RUN: %python %S/Inputs/hostile.py tamper %t/c plan
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,EDITED,COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A garbage or missing launch plan, the hashes updated ("malformed" forever).
// RUN: %python %S/Inputs/hostile.py tamper %t/c forge-plan
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,MALFORMED,COMPILE
// RUN: %python %S/Inputs/hostile.py tamper %t/c forge-no-plan
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,NOPLAN,COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A garbage object whose hashes were all updated ("cannot link" forever).
// RUN: %python %S/Inputs/hostile.py tamper %t/c forge-object
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,LINK,COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A FIFO as manifest.json (a hang), the object a symlink to /dev/zero or a
// 64 GiB sparse file (LLVM's out-of-memory abort).
// RUN: %python %S/Inputs/hostile.py tamper %t/c fifo
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,FIFO,COMPILE
// RUN: %python %S/Inputs/hostile.py tamper %t/c devzero
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,DEVZERO,COMPILE
// RUN: %python %S/Inputs/hostile.py tamper %t/c sparse
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,SPARSE,COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A `mean` entry copied to the key of the `sum` graph, its key rewritten
// and its manifest hash made to agree: the IR hash tells them apart.
// RUN: env LOSSJIT_CACHE_DIR=%t/sum lossjit-runner --preset linear-cross-entropy --reduction sum --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=COMPILE
// RUN: %python %S/Inputs/hostile.py copy-entry %t/c %t/sum
// RUN: env LOSSJIT_CACHE_DIR=%t/sum lossjit-runner --preset linear-cross-entropy --reduction sum --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=INVALID,COPIED,COMPILE
// RUN: env LOSSJIT_CACHE_DIR=%t/sum lossjit-runner --preset linear-cross-entropy --reduction sum --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// A lock held by another process: waited for LOSSJIT_CACHE_LOCK_TIMEOUT,
// then the kernel is compiled without it and written (no entry existed).
// RUN: env LOSSJIT_CACHE_LOCK_TIMEOUT=0.5 %python %S/Inputs/hostile.py hold-lock %t/c lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=LOCK,COMPILE
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefix=HIT
//
// SIGXFSZ while writing the entry (ulimit -f): the write fails with EFBIG,
// the cache falls back to memory with one warning, the result is right.
// RUN: rm -rf %t/c
// RUN: ulimit -f 2048
// RUN: lossjit-runner --preset linear-cross-entropy --random 37,301,29 --check 2>&1 | FileCheck %s --check-prefixes=XFSZ,COMPILE
// RUN: ulimit -f unlimited
//
// INVALID: lossjit[warning]: ignoring invalid kernel bundle {{[^ ]*}}/{{c|sum}}/{{[0-9a-f]+}}:
// EDITED-SAME: manifest.json: does not match manifest.sha256
// MALFORMED-SAME: CPU cache entry {{[0-9a-f]+}}: has a malformed launch plan
// NOPLAN-SAME: CPU cache entry {{[0-9a-f]+}}: has no launch plan
// LINK-SAME: CPU cache entry {{[0-9a-f]+}}: cannot link its object
// FIFO-SAME: cannot read '{{.*}}manifest.json': it is a FIFO, expected a regular file
// DEVZERO-SAME: cannot read '{{.*}}kernels.host.o': it is a character device, expected a regular file
// SPARSE-SAME: cannot read '{{.*}}kernels.host.o': it holds 68719476736 bytes, more than the limit of
// COPIED-SAME: ir_hash {{[0-9a-f]+}} does not match the requested graph's {{[0-9a-f]+}} (an entry copied under another key?)
// LOCK: lossjit[warning]: kernel cache lock {{.*}}/c/{{[0-9a-f]+}}.lock still held after 500 ms (a stopped or hung process?); compiling {{[0-9a-f]+}} without it (the result is identical)
// XFSZ: lossjit[warning]: kernel cache directory '{{.*}}/c' is unusable (cannot write '{{.*}}': File too large); caching kernels in memory only for this process
// XFSZ-NOT: Stack dump
// COMPILE: backend cpu: compile
// COMPILE: max relative error
// HIT: backend cpu: cache hit
// HIT: max relative error
