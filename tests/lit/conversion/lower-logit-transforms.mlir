// logit_scale and softcap through loss-lower-to-gpu and loss-lower-to-cpu:
// the plans record them (only when set), and every kernel that makes a logit
// applies z = cap·tanh(scale·raw / cap) with tanh built from exp2 and an odd
// polynomial for small arguments — never math.tanh (libdevice's __nv_tanhf on
// the GPU) — and the backward's dZ is
// multiplied by ∂z/∂raw = scale·q·(2 − q), q = 2/(exp(2|u|) + 1).
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu --split-input-file --verify-diagnostics \
// RUN:   | FileCheck %s --check-prefix=GPU --implicit-check-not=math.tanh
// RUN: lossjit-opt %s --loss-select-lowering-config=target=cpu --loss-lower-to-cpu --split-input-file --verify-diagnostics \
// RUN:   | FileCheck %s --check-prefix=CPU --implicit-check-not=math.tanh

// GPU-LABEL: loss.launch_plans = {capped = {
// GPU-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", logit_scale = "0.5", pass = "forward", reduction = "mean", softcap = "30.0"}
// The partial LSE transforms every raw logit before the online softmax:
// GPU:         gpu.module @capped_lce_partial
// GPU:           math.fma
// GPU:           %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// GPU-NEXT:      %[[S:.*]] = arith.mulf %{{.*}}, %[[HALF]] : f32
// GPU-NEXT:      %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// GPU-NEXT:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// GPU-NEXT:      %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// GPU-NEXT:      %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// GPU-NEXT:      %[[U:.*]] = arith.divf %[[S]], %[[CAP]] : f32
// GPU-NEXT:      %[[NEG:.*]] = arith.cmpf olt, %[[U]], %[[ZERO]] : f32
// GPU-NEXT:      %[[MU:.*]] = arith.subf %[[ZERO]], %[[U]] : f32
// GPU-NEXT:      %[[A:.*]] = arith.select %[[NEG]], %[[MU]], %[[U]] : f32
// GPU-NEXT:      %[[A2:.*]] = arith.addf %[[A]], %[[A]] : f32
// GPU-NEXT:      %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// GPU-NEXT:      %[[ARG:.*]] = arith.mulf %[[A2]], %[[LOG2E]] : f32
// GPU-NEXT:      %[[E:.*]] = math.exp2 %[[ARG]] : f32
// GPU-NEXT:      %[[E1:.*]] = arith.addf %[[E]], %[[ONE]] : f32
// GPU-NEXT:      %[[Q:.*]] = arith.divf %[[TWO]], %[[E1]] : f32
// Small a: tanh a = a + a³·P(a²) (1 − q would cancel); from 0.625 on, 1 − q.
// GPU-NEXT:      %[[S2:.*]] = arith.mulf %[[A]], %[[A]] : f32
// GPU-NEXT:      arith.constant -0.00570498873 : f32
// GPU:           arith.constant -0.333332807 : f32
// GPU-NEXT:      arith.mulf %{{.*}}, %[[S2]] : f32
// GPU-NEXT:      %[[P:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// GPU-NEXT:      %[[PS:.*]] = arith.mulf %[[P]], %[[S2]] : f32
// GPU-NEXT:      %[[PSA:.*]] = arith.mulf %[[PS]], %[[A]] : f32
// GPU-NEXT:      %[[POLY:.*]] = arith.addf %[[PSA]], %[[A]] : f32
// GPU-NEXT:      %[[SWITCH:.*]] = arith.constant 6.250000e-01 : f32
// GPU-NEXT:      %[[SMALL:.*]] = arith.cmpf olt, %[[A]], %[[SWITCH]] : f32
// GPU-NEXT:      %[[ONE2:.*]] = arith.constant 1.000000e+00 : f32
// GPU-NEXT:      %[[OMQ:.*]] = arith.subf %[[ONE2]], %[[Q]] : f32
// GPU-NEXT:      %[[T:.*]] = arith.select %[[SMALL]], %[[POLY]], %[[OMQ]] : f32
// GPU-NEXT:      %[[C:.*]] = arith.mulf %[[CAP]], %[[T]] : f32
// GPU-NEXT:      %[[NC:.*]] = arith.subf %[[ZERO]], %[[C]] : f32
// GPU-NEXT:      %[[Z:.*]] = arith.select %[[NEG]], %[[NC]], %[[C]] : f32
// (The fragment's other rows make their logits before the fold.)
// GPU:           arith.maximumf %{{.*}}, %[[Z]] : f32
// The combine kernel's target logit goes through the same transform.
// GPU:         gpu.module @capped_lce_combine
// GPU:           math.log2
// GPU:           arith.constant 5.000000e-01 : f32
// GPU-NEXT:      arith.mulf
// GPU:           arith.divf
// GPU:           math.exp2
// GPU:         gpu.module @capped_lce_reduce
// CPU-LABEL: loss.launch_plans = {capped = {
// CPU-SAME:    options = {bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", logit_scale = "0.5", pass = "forward", reduction = "mean", softcap = "30.0"}
// CPU:         func.func @lce_rows
// CPU:           arith.constant 5.000000e-01 : f32
// CPU-NEXT:      arith.mulf
// CPU-NEXT:      arith.constant 3.000000e+01 : f32
// CPU:           arith.divf
// CPU:           math.exp2
// CPU:         func.func @lce_reduce
func.func @capped(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, logit_scale = 0.5, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// The gradient: the bias is added to raw before the scale, and dZ gets the
// factor scale·(1 − tanh²) = scale·q·(2 − q) (no 1 − t² cancellation).
// GPU-LABEL: loss.launch_plans = {capped_grad = {
// GPU-SAME:    logit_scale = "2.0", pass = "backward", reduction = "mean", softcap = "15.0"
// GPU:         gpu.module @capped_grad_lce_bwd_dz
// GPU:           %[[RAW:.*]] = arith.addf %{{.*}}#0, %{{.*}} : f32
// GPU:           %[[SCALE:.*]] = arith.constant 2.000000e+00 : f32
// GPU-NEXT:      %[[S:.*]] = arith.mulf %[[RAW]], %[[SCALE]] : f32
// GPU-NEXT:      %[[CAP:.*]] = arith.constant 1.500000e+01 : f32
// GPU-NEXT:      arith.constant 0.000000e+00 : f32
// GPU-NEXT:      arith.constant 1.000000e+00 : f32
// GPU-NEXT:      %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// GPU-NEXT:      arith.divf %[[S]], %[[CAP]] : f32
// GPU:           %[[Q:.*]] = arith.divf %[[TWO]], %{{.*}} : f32
// GPU:           arith.constant 6.250000e-01 : f32
// GPU:           %[[T:.*]] = arith.select
// GPU-NEXT:      %[[C:.*]] = arith.mulf %[[CAP]], %[[T]] : f32
// GPU-NEXT:      arith.subf
// GPU-NEXT:      %[[Z:.*]] = arith.select
// GPU-NEXT:      %[[TMQ:.*]] = arith.subf %[[TWO]], %[[Q]] : f32
// GPU-NEXT:      %[[SECH2:.*]] = arith.mulf %[[Q]], %[[TMQ]] : f32
// GPU-NEXT:      %[[DZDRAW:.*]] = arith.mulf %[[SECH2]], %[[SCALE]] : f32
// GPU-NEXT:      arith.subf %[[Z]], %{{.*}} : f32
// GPU:           math.exp2
// GPU:           %[[G:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// GPU-NEXT:      arith.mulf %[[G]], %[[DZDRAW]] : f32
// CPU-LABEL: loss.launch_plans = {capped_grad = {
// CPU-SAME:    logit_scale = "2.0", pass = "backward", reduction = "mean", softcap = "15.0", strategy = "vocab_chunked"
// CPU:         func.func @lce_bwd_dz
// CPU:           arith.divf
// CPU:           math.exp2
// CPU:           %[[Q:.*]] = arith.divf %[[TWO:cst[_0-9]*]], %{{.*}} : f32
// CPU:           arith.subf %[[TWO]], %[[Q]] : f32
// CPU-NEXT:      arith.mulf %[[Q]], %{{.*}} : f32
func.func @capped_grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32, logit_scale = 2.0, softcap = 15.0} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

// -----

// The recompute schedule recomputes logits in both its kernels, each with the
// same transform and derivative.
// GPU-LABEL: loss.launch_plans = {capped_rc = {
// GPU-SAME:    logit_scale = "2.0", pass = "backward", reduction = "none", softcap = "15.0", strategy = "recompute"
// GPU:         gpu.module @capped_rc_lce_bwd_dx_rc
// GPU:           %[[Q:.*]] = arith.divf %[[TWO:cst[_0-9]*]], %{{.*}} : f32
// GPU:           arith.subf %[[TWO]], %[[Q]] : f32
// GPU-NEXT:      arith.mulf %[[Q]], %{{.*}} : f32
// GPU:         gpu.module @capped_rc_lce_bwd_dw_rc
// GPU:           %[[Q:.*]] = arith.divf %[[TWO:cst[_0-9]*]], %{{.*}} : f32
// GPU:           arith.subf %[[TWO]], %[[Q]] : f32
// GPU-NEXT:      arith.mulf %[[Q]], %{{.*}} : f32
// CPU-LABEL: loss.launch_plans = {capped_rc = {
// CPU-SAME:    logit_scale = "2.0", pass = "backward", reduction = "none", softcap = "15.0", strategy = "recompute"
// CPU:         func.func @lce_bwd_dx(
// CPU:           %[[Q:.*]] = arith.divf %[[TWO:cst[_0-9]*]], %{{.*}} : f32
// CPU:           arith.subf %[[TWO]], %[[Q]] : f32
// CPU-NEXT:      arith.mulf %[[Q]], %{{.*}} : f32
// CPU:         func.func @lce_bwd_dw(
// CPU:           %[[Q:.*]] = arith.divf %[[TWO:cst[_0-9]*]], %{{.*}} : f32
// CPU:           arith.subf %[[TWO]], %[[Q]] : f32
// CPU-NEXT:      arith.mulf %[[Q]], %{{.*}} : f32
func.func @capped_rc(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, logit_scale = 2.0, softcap = 15.0, strategy = "recompute", reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// A scale alone: one f32 multiply, no softcap option, no division.
// GPU-LABEL: loss.launch_plans = {scaled = {
// GPU-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "false", dtype = "f32", ignore_index = "-100", label_type = "i64", logit_scale = "-1.25", pass = "forward", reduction = "sum"}
// GPU:         gpu.module @scaled_lce_partial
// GPU:           %[[K:.*]] = arith.constant -1.250000e+00 : f32
// GPU-NEXT:      %[[Z:.*]] = arith.mulf %{{.*}}, %[[K]] : f32
// GPU:           arith.maximumf %{{.*}}, %[[Z]] : f32
// GPU:         gpu.module @scaled_lce_combine
// CPU-LABEL: loss.launch_plans = {scaled = {
// CPU-SAME:    logit_scale = "-1.25", pass = "forward", reduction = "sum"}
func.func @scaled(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32, logit_scale = -1.25, reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// Without transforms the plans have neither option (manifests unchanged).
// GPU-LABEL: loss.launch_plans = {plain = {
// GPU-NOT:     logit_scale
// GPU-NOT:     softcap
// GPU-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", pass = "forward", reduction = "mean"}
// CPU-LABEL: loss.launch_plans = {plain = {
// CPU-SAME:    options = {bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", pass = "forward", reduction = "mean"}
func.func @plain(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}
