// Self-test of %{ptx-forbidden} (lit.cfg.py), the list of what no PTX of
// ours may contain: it must accept a clean kernel and reject each sample of
// libdevice calls, atomics, 16-bit float math and f64 math.
// RUN: FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/ok.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/add-f16.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/fma-bf16.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/mul-f16x2.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/max-bf16x2.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/ex2-f16.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/setp-f16.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/atom.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/red.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/libdevice.ptx
// RUN: not FileCheck %s --check-prefix=ENTRY %{ptx-forbidden} --input-file=%S/Inputs/add-f64.ptx

// ENTRY-LABEL: .visible .entry
// ENTRY:       ret;
