// lossjit-aot's family presets: the row statistics of a loss.vocab_reduce
// and its derived backward, as bundles and a C API; flags of another preset
// are refused by name rather than ignored.
// RUN: rm -rf %t && mkdir -p %t
// RUN: lossjit-aot --preset linear-log-prob --dtype bf16 --label-type i32 --arch sm_80 -o %t/lp --quiet
// RUN: lossjit-aot --check %t/lp | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=LOGPROB < %t/lp/lce.h
// RUN: lossjit-aot --preset linear-log-prob --no-entropy --no-gradients --dtype f32 --arch sm_80 -o %t/lp2 --quiet
// RUN: FileCheck %s --check-prefix=NOENTROPY < %t/lp2/lce.h
// RUN: lossjit-aot --preset linear-kl --dtype f16 --teacher-bias --logit-scale 0.5 --arch sm_80 -o %t/kl --quiet
// RUN: lossjit-aot --check %t/kl | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=KL < %t/kl/lce.h
// RUN: FileCheck %s --check-prefix=KLINDEX < %t/kl/manifest.json
// RUN: lossjit-aot --preset linear-kl --reverse --dtype bf16 --no-gradients --arch sm_80 -o %t/rkl --quiet
// RUN: FileCheck %s --check-prefix=REVERSE < %t/rkl/lce.h
// RUN: lossjit-aot --preset linear-kl --jsd-beta 0.25 --dtype bf16 --arch sm_80 -o %t/jsd --quiet
// RUN: lossjit-aot --check %t/jsd | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=JSD < %t/jsd/lce.h
// RUN: FileCheck %s --check-prefix=JSDINDEX < %t/jsd/manifest.json
// RUN: not lossjit-aot --preset linear-kl --jsd-beta 1 -o %t/e8 2>&1 | FileCheck %s --check-prefix=JSDEND
// RUN: not lossjit-aot --preset linear-kl --jsd-beta 0.5 --reverse -o %t/e9 2>&1 | FileCheck %s --check-prefix=JSDREVERSE
// RUN: not lossjit-aot --preset linear-log-prob --jsd-beta 0.5 -o %t/e10 2>&1 | FileCheck %s --check-prefix=JSDFLAG
// RUN: not lossjit-aot --preset linear-log-prob --reduction sum -o %t/e1 2>&1 | FileCheck %s --check-prefix=REDUCTION
// RUN: not lossjit-aot --preset linear-kl --fused -o %t/e2 2>&1 | FileCheck %s --check-prefix=FUSED
// RUN: not lossjit-aot --preset linear-cross-entropy --reverse -o %t/e3 2>&1 | FileCheck %s --check-prefix=REVERSEFLAG
// RUN: not lossjit-aot --preset linear-kl --no-entropy -o %t/e4 2>&1 | FileCheck %s --check-prefix=NOENTROPYFLAG
// RUN: not lossjit-aot --preset linear-kl --ignore-index 0 -o %t/e5 2>&1 | FileCheck %s --check-prefix=LABELS
// RUN: not lossjit-aot --preset linear-jsd -o %t/e6 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not lossjit-aot --preset linear-kl --logit-scale 0 -o %t/e7 2>&1 | FileCheck %s --check-prefix=SCALE
// f64 storage: SIMT kernels computing in f64, f64 row values.
// RUN: lossjit-aot --preset linear-log-prob --dtype f64 --arch sm_80 -o %t/lp64 --quiet
// RUN: lossjit-aot --check %t/lp64 | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=F64 < %t/lp64/lce.h

// OK: : ok

// LOGPROB-LABEL: lce_status lce_forward(lce_handle *handle, CUstream stream,
// LOGPROB-NEXT:    CUdeviceptr x,
// LOGPROB-NEXT:    CUdeviceptr w,
// LOGPROB-NEXT:    CUdeviceptr labels,
// LOGPROB-NEXT:    CUdeviceptr lse,
// LOGPROB-NEXT:    CUdeviceptr label_logit,
// LOGPROB-NEXT:    CUdeviceptr entropy,
// LOGPROB-LABEL: lce_status lce_backward(lce_handle *handle, CUstream stream,
// LOGPROB:         CUdeviceptr grad_lse,
// LOGPROB-NEXT:    CUdeviceptr grad_label_logit,
// LOGPROB-NEXT:    CUdeviceptr grad_entropy,
// LOGPROB-NEXT:    CUdeviceptr grad_x,
// LOGPROB-NEXT:    CUdeviceptr grad_w,

// NOENTROPY-LABEL: lce_status lce_forward(
// NOENTROPY:         CUdeviceptr label_logit,
// NOENTROPY-NOT:     entropy
// NOENTROPY-NOT:     lce_backward

// KL-LABEL: lce_status lce_forward(lce_handle *handle, CUstream stream,
// KL-NEXT:    CUdeviceptr x,
// KL-NEXT:    CUdeviceptr w,
// KL-NEXT:    CUdeviceptr teacher_x,
// KL-NEXT:    CUdeviceptr teacher_w,
// KL-NEXT:    CUdeviceptr teacher_bias,
// KL-NEXT:    CUdeviceptr lse,
// KL-NEXT:    CUdeviceptr teacher_lse,
// KL-NEXT:    CUdeviceptr teacher_entropy,
// KL-NEXT:    CUdeviceptr cross_entropy,
// KL-NEXT:    int64_t N, int64_t V, int64_t D, int64_t T,
// KL-LABEL: lce_status lce_backward(
// KL:         CUdeviceptr grad_cross_entropy,
// KL-NEXT:    CUdeviceptr grad_x,
// KL-NEXT:    CUdeviceptr grad_w,

// KLINDEX: "statistics": "lse,teacher_lse,teacher_entropy,cross_entropy"
// KLINDEX: "teacher_scale": "0.5"

// REVERSE-LABEL: lce_status lce_forward(
// REVERSE:         CUdeviceptr lse,
// REVERSE-NEXT:    CUdeviceptr entropy,
// REVERSE-NEXT:    CUdeviceptr teacher_lse,
// REVERSE-NEXT:    CUdeviceptr reverse_cross_entropy,

// JSD-LABEL: lce_status lce_forward(lce_handle *handle, CUstream stream,
// JSD:         CUdeviceptr teacher_w,
// JSD-NEXT:    CUdeviceptr lse,
// JSD-NEXT:    CUdeviceptr teacher_lse,
// JSD-NEXT:    CUdeviceptr mixture_kl,
// JSD-NEXT:    CUdeviceptr mixture_p2,
// JSD-NEXT:    CUdeviceptr jsd,
// JSD-NEXT:    int64_t N, int64_t V, int64_t D, int64_t T,
// JSD-LABEL: lce_status lce_backward(
// JSD:         CUdeviceptr mixture_kl,
// JSD-NEXT:    CUdeviceptr mixture_p2,
// JSD:         CUdeviceptr grad_mixture_kl,
// JSD-NEXT:    CUdeviceptr grad_mixture_p2,
// JSD-NEXT:    CUdeviceptr grad_jsd,
// JSD-NEXT:    CUdeviceptr grad_x,

// JSDINDEX: "jsd_beta": "0.25"
// JSDINDEX: "statistics": "lse,teacher_lse,mixture_kl,mixture_p2,jsd"

// JSDEND: lossjit-aot: error: --preset linear-kl: forward graph: jsd beta must be in (0, 1) (0 and 1 mean the KL divergences), got 1
// JSDREVERSE: lossjit-aot: error: --reverse and --jsd-beta exclude each other (by TRL's convention the reverse KL is β = 1)
// JSDFLAG: lossjit-aot: error: --jsd-beta applies to --preset linear-kl only

// REDUCTION: lossjit-aot: error: --reduction applies to --preset linear-cross-entropy only (the linear-log-prob preset returns per-row statistics; the engine reduces them)
// FUSED: lossjit-aot: error: --fused applies to --preset linear-cross-entropy only
// REVERSEFLAG: lossjit-aot: error: --reverse applies to --preset linear-kl only
// NOENTROPYFLAG: lossjit-aot: error: --no-entropy applies to --preset linear-log-prob only
// LABELS: lossjit-aot: error: --preset linear-kl reads no labels and no student bias (the engine masks rows): drop --label-type, --ignore-index and --bias
// UNKNOWN: lossjit-aot: error: --preset must be linear-cross-entropy, linear-log-prob or linear-kl, got 'linear-jsd'
// SCALE: lossjit-aot: error: --preset linear-kl: forward graph: logit scale must be finite and nonzero, got 0
// F64: #define LCE_DTYPE "f64"
// F64: x{{ +}}f64{{ +}}[N, D]{{ +}}read
// F64: lse{{ +}}f64{{ +}}[N]{{ +}}written
