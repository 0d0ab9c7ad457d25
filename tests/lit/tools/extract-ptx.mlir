// Self-test of tests/lit/extract-ptx.py (%extract-ptx): the object payload
// of every gpu.binary is unescaped (\0A newline, \09 tab, \22 quote, \5C
// backslash) into one file per binary, objects of a multi-object binary get
// an index, and the target's chip is reported. The input goes through
// lossjit-opt first so the escaping is MLIR's own printer's.
// RUN: rm -rf %t && mkdir -p %t
// RUN: lossjit-opt %s | %extract-ptx - %t/out | FileCheck %s --check-prefix=FILES
// RUN: diff %t/out/one.ptx %S/Inputs/one.expected.ptx
// The source spells the backslash \5C, the printer \\: both decode alike.
// RUN: %extract-ptx %s %t/raw | FileCheck %s --check-prefix=FILES
// RUN: diff %t/raw/one.ptx %S/Inputs/one.expected.ptx
// RUN: FileCheck %s --check-prefix=MULTI0 --input-file=%t/out/multi.0.ptx
// RUN: FileCheck %s --check-prefix=MULTI1 --input-file=%t/out/multi.1.ptx
// Negative: an input without gpu.binary is an error (a pipeline that emitted
// no kernel must not make a PTX test pass vacuously).
// RUN: not %extract-ptx %S/../dialect/ops.mlir %t/none 2>&1 | FileCheck %s --check-prefix=NONE

// FILES:      one.ptx sm_80
// FILES-NEXT: multi.0.ptx sm_80
// FILES-NEXT: multi.1.ptx sm_90
// FILES-NOT:  .ptx

// MULTI0: first
// MULTI1: second

// NONE: extract-ptx: no gpu.binary with an object in

module attributes {gpu.container_module} {
  gpu.binary @one [#gpu.object<#nvvm.target<chip = "sm_80", features = "+ptx80">, properties = {O = 3 : i32, note = "not > the payload"}, assembly = "// header \22quoted\22 \5C backslash\0A.version 8.0\0A\09.reg .b32 \09%r<4>;\0A\0Aend -> done <> [] {}\0A">]
  gpu.binary @multi [#gpu.object<#nvvm.target<chip = "sm_80">, assembly = "first\0A">, #gpu.object<#nvvm.target<chip = "sm_90">, assembly = "second\0A">]
}
