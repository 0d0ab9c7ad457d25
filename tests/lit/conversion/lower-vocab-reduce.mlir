// A vocabulary reduction lowers through the same selection pass and
// schedules as the cross-entropy ops: on the host, lce_rows writes one [N]
// buffer per statistic (no reduction kernel); on the GPU, the partials
// carry the carried kinds' fields (SoftmaxEntropy: max, sum, dsum;
// LogitSum: zsum) and lce_combine writes the statistics. The derived
// backward reads the saved lse/entropy and one adjoint per statistic and has
// no scale kernel (its adjoints are inputs).
// RUN: lossjit-opt %s --loss-select-lowering-config=target=cpu --loss-lower-to-cpu --split-input-file | FileCheck %s --check-prefix=CPU
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu --split-input-file | FileCheck %s --check-prefix=GPU
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --split-input-file | FileCheck %s --check-prefix=CONFIG

// CPU-LABEL: loss.launch_plans = {stats = {
// CPU-SAME:    entry_args = ["x", "w", "labels", "class_weights"], entry_results = ["lse", "label_logit", "logit_sum", "entropy"]
// CPU-SAME:    kernels = [{args = ["x", "w", "labels", "class_weights", "lse", "label_logit", "logit_sum", "entropy", "row_begin", "row_end", "V", "D"]
// CPU-SAME:    name = "lce_rows"
// CPU-SAME:    op = "vocab_reduce"
// CPU-SAME:    options = {bias = "false", class_weights = "true", dtype = "bf16", ignore_index = "-100", label_type = "i64", pass = "forward", statistics = "lse,label_logit,logit_sum,entropy", targets = "none"}
// CPU-SAME:    params = [{{.*}}{dtype = "f32", name = "class_weights", output = false, shape = ["V"]}, {dtype = "f32", name = "lse", output = true, shape = ["N"]}
// CPU-SAME:    workspaces = []
// CPU:       module @stats_kernels {
// CPU-NEXT:    func.func @lce_rows(
// CONFIG-LABEL: func.func @stats
// CONFIG: loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt
// GPU-LABEL: loss.launch_plans = {stats = {
// GPU-SAME:    kernels = [{args = ["x", "w", "class_weights", "part_max", "part_sum", "part_dsum", "part_zsum", "N", "V", "D"]
// GPU-SAME:    name = "lce_partial"
// GPU-SAME:    {args = ["x", "w", "labels", "part_max", "part_sum", "part_dsum", "part_zsum", "lse", "label_logit", "logit_sum", "entropy", "N", "V", "D", "S"]
// GPU-SAME:    name = "lce_combine"
// GPU-NOT:     lce_reduce
func.func @stats(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %c: tensor<?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:4 = loss.vocab_reduce %x, %w labels %y : tensor<?xi64> class_weights %c : tensor<?xf32>
      {storage = bf16, compute = f32}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// 16-bit storage on the host chunks the vocabulary (no V×D accumulator),
// as for the cross-entropy backward; no lce_bwd_scale, no grow workspace.
// CPU-LABEL: loss.launch_plans = {grad = {
// CPU-SAME:    entry_args = ["x", "w", "lse", "", "entropy", "grad_lse", "grad_logit_sum", "grad_entropy"]
// CPU-SAME:    kernels = [{args = ["x", "w", "lse", "entropy", "grad_lse", "grad_logit_sum", "grad_entropy", "dz", "row_begin", "row_end", "chunk_begin", "chunk_end", "V", "D"]
// CPU-SAME:    name = "lce_bwd_dz_v"
// CPU-NOT:     lce_bwd_scale
// CPU-SAME:    options = {bias = "false", class_weights = "false", dtype = "bf16", grad_w = "true", grad_x = "true", pass = "backward", statistics = "lse,logit_sum,entropy", strategy = "vocab_chunked", targets = "none", workspace_bytes = "67108864"}
// CPU-NOT:     "grow"
// CONFIG-LABEL: func.func @grad
// CONFIG: loss.lowering_config = #loss.gpu_config<schedule = chunked, matmul = simt
// GPU-LABEL: loss.launch_plans = {grad = {
// GPU-NOT:     lce_bwd_scale
// GPU-SAME:    {args = ["x", "w", "lse", "entropy", "grad_lse", "grad_logit_sum", "grad_entropy", "dz", "chunk_begin", "chunk_end", "V", "D"]
// GPU-SAME:    name = "lce_bwd_dz"
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %lse: tensor<?xf32>, %s: tensor<?xf32>,
    %h: tensor<?xf32>, %g0: tensor<?xf32>, %g1: tensor<?xf32>, %g2: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %g:2 = loss.vocab_reduce_grad %x, %w saved(%lse, %s, %h : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {storage = bf16, compute = f32}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %g#0, %g#1 : tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// The teacher stream: its operands and its hidden size T (a dimension of
// its own) reach the kernels; the teacher's kinds carry their own fields
// (tmax, tsum, tdsum) and the cross kind its pair of softmax states.
// CPU-LABEL: loss.launch_plans = {kl = {
// CPU-SAME:    dims = ["N", "V", "D", "T"], entry = "kl", entry_args = ["x", "w", "teacher_x", "teacher_w"], entry_results = ["lse", "teacher_lse", "teacher_entropy", "cross_entropy"]
// CPU-SAME:    kernels = [{args = ["x", "w", "teacher_x", "teacher_w", "T", "lse", "teacher_lse", "teacher_entropy", "cross_entropy", "row_begin", "row_end", "V", "D"]
// CPU-SAME:    teacher = "true", teacher_scale = "0.5"
// CPU-SAME:    {dtype = "bf16", name = "teacher_x", output = false, shape = ["N", "T"]}, {dtype = "bf16", name = "teacher_w", output = false, shape = ["V", "T"]}
// GPU-LABEL: loss.launch_plans = {kl = {
// GPU-SAME:    kernels = [{args = ["x", "w", "teacher_x", "teacher_w", "T", "part_max", "part_sum", "part_tmax", "part_tsum", "part_tdsum", "part_xf_am", "part_xf_as", "part_xf_bm", "part_xf_bs", "part_xf_d", "N", "V", "D"]
// GPU-SAME:    name = "lce_partial"
// GPU-SAME:    name = "lce_combine"
// CONFIG-LABEL: func.func @kl
func.func @kl(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %tx: tensor<?x?xbf16>, %tw: tensor<?x?xbf16>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:4 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      {storage = bf16, compute = f32, teacher_scale = 0.5}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat teacher_entropy %u : tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// The derived backward of a distillation loss recomputes the teacher's
// logits from its operands (T reaches both kernels) and reads the saved
// teacher_lse; the saved cross_entropy is not read ("").
// CPU-LABEL: loss.launch_plans = {kl_grad = {
// CPU-SAME:    entry_args = ["x", "w", "teacher_x", "teacher_w", "lse", "teacher_lse", "", "grad_lse", "grad_teacher_lse", "grad_cross_entropy"]
// CPU-SAME:    kernels = [{args = ["x", "w", "lse", "grad_lse", "grad_teacher_lse", "grad_cross_entropy", "teacher_lse", "teacher_x", "teacher_w", "T", "grad_x", "row_begin", "row_end", "V", "D"]
// CPU-SAME:    name = "lce_bwd_dx"
// CPU-SAME:    {args = ["x", "w", "lse", "grad_lse", "grad_teacher_lse", "grad_cross_entropy", "teacher_lse", "teacher_x", "teacher_w", "T", "grad_w", "col_begin", "col_end", "N", "D"]
// CPU-SAME:    name = "lce_bwd_dw"
// GPU-LABEL: loss.launch_plans = {kl_grad = {
// GPU-SAME:    name = "lce_bwd_dx_rc"
// GPU-SAME:    {args = ["x", "w", "lse", "grad_lse", "grad_teacher_lse", "grad_cross_entropy", "teacher_lse", "teacher_x", "teacher_w", "T", "grad_w", "dw_acc", "N", "V", "D"]
// GPU-SAME:    name = "lce_bwd_dw_rc"
// CONFIG-LABEL: func.func @kl_grad
func.func @kl_grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %tx: tensor<?x?xf16>, %tw: tensor<?x?xf16>,
    %lse: tensor<?xf32>, %tlse: tensor<?xf32>, %ce: tensor<?xf32>,
    %g0: tensor<?xf32>, %g1: tensor<?xf32>, %g2: tensor<?xf32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %gx, %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf16>, tensor<?x?xf16>)
      saved(%lse, %tlse, %ce : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = f16, compute = f32, needs_input = true, strategy = "recompute"}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>, tensor<?x?xf16> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %gx, %gw : tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

// The generalized JSD: a dependent sum, so a second sweep. On the host
// lce_rows sweeps each panel twice (one kernel, the jsd_beta an option);
// on the GPU lce_combine also writes the lse pair the dependent sweep
// reads (row_lse, row_teacher_lse) and lce_partial_dep / lce_combine_dep
// carry the mixture's sums (jsum, ksum, ssum) in their own workspaces.
// CPU-LABEL: loss.launch_plans = {jsd = {
// CPU-SAME:    entry_results = ["lse", "jsd"]
// CPU-SAME:    kernels = [{args = ["x", "w", "teacher_x", "teacher_w", "T", "lse", "jsd", "row_begin", "row_end", "V", "D"]
// CPU-SAME:    name = "lce_rows"
// CPU-SAME:    jsd_beta = "0.25"
// GPU-LABEL: loss.launch_plans = {jsd = {
// GPU-SAME:    kernels = [{args = ["x", "w", "teacher_x", "teacher_w", "T", "part_max", "part_sum", "part_tmax", "part_tsum", "N", "V", "D"]
// GPU-SAME:    name = "lce_partial"
// GPU-SAME:    {args = ["x", "w", "part_max", "part_sum", "part_tmax", "part_tsum", "lse", "jsd", "row_lse", "row_teacher_lse", "N", "V", "D", "S"]
// GPU-SAME:    name = "lce_combine"
// GPU-SAME:    {args = ["x", "w", "teacher_x", "teacher_w", "T", "row_lse", "row_teacher_lse", "part_jsum", "part_ksum", "part_ssum", "N", "V", "D"]
// GPU-SAME:    name = "lce_partial_dep"
// GPU-SAME:    {args = ["x", "w", "part_jsum", "part_ksum", "part_ssum", "lse", "jsd", "N", "V", "D", "S"]
// GPU-SAME:    name = "lce_combine_dep"
// GPU-SAME:    jsd_beta = "0.25"
// GPU-SAME:    {count = "S*N", dtype = "f32", name = "part_jsum"}, {count = "S*N", dtype = "f32", name = "part_ksum"}, {count = "S*N", dtype = "f32", name = "part_ssum"}, {count = "N", dtype = "f32", name = "row_lse"}, {count = "N", dtype = "f32", name = "row_teacher_lse"}
// CONFIG-LABEL: func.func @jsd
func.func @jsd(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>) {
  %r:2 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32, jsd_beta = 0.25}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1 : tensor<?xf32>, tensor<?xf32>
}

// -----

// Its derived backward stays one sweep: it reads the saved mixture_kl (K,
// in jsd's adjoint and in its own) and mixture_p2 (S = Σ p²/M, in
// mixture_kl's) next to both lse's.
// CPU-LABEL: loss.launch_plans = {jsd_grad = {
// CPU-SAME:    entry_args = ["x", "w", "teacher_x", "teacher_w", "lse", "teacher_lse", "mixture_kl", "mixture_p2", "", "grad_lse", "grad_teacher_lse", "grad_mixture_kl", "grad_mixture_p2", "grad_jsd"]
// CPU-SAME:    {args = ["x", "w", "lse", "grad_lse", "grad_teacher_lse", "grad_mixture_kl", "grad_mixture_p2", "grad_jsd", "teacher_lse", "mixture_kl", "mixture_p2", "teacher_x", "teacher_w", "T", "grad_x", "row_begin", "row_end", "V", "D"]
// GPU-LABEL: loss.launch_plans = {jsd_grad = {
// GPU-SAME:    {args = ["x", "w", "lse", "grad_lse", "grad_teacher_lse", "grad_mixture_kl", "grad_mixture_p2", "grad_jsd", "teacher_lse", "mixture_kl", "mixture_p2", "teacher_x", "teacher_w", "T", "grad_x", "N", "V", "D"]
// CONFIG-LABEL: func.func @jsd_grad
func.func @jsd_grad(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>,
    %tw: tensor<?x?xf32>, %s0: tensor<?xf32>, %s1: tensor<?xf32>, %s2: tensor<?xf32>,
    %s3: tensor<?xf32>, %s4: tensor<?xf32>, %g0: tensor<?xf32>, %g1: tensor<?xf32>,
    %g2: tensor<?xf32>, %g3: tensor<?xf32>, %g4: tensor<?xf32>) -> tensor<?x?xf32> {
  %gx = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      saved(%s0, %s1, %s2, %s3, %s4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2, %g3, %g4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = f32, compute = f32, jsd_beta = 0.25, needs_weight = false, strategy = "recompute"}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat mixture_kl %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat mixture_p2 %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %4 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3, %4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %gx : tensor<?x?xf32>
}
