// Verifier errors of loss.vocab_reduce, loss.vocab_reduce_grad and loss.stat.
// RUN: lossjit-opt %s -split-input-file -verify-diagnostics

// Each split is one test function; -verify-diagnostics pins every expected
// diagnostic to its op's line (in place of CHECK-LABEL). The positive forms
// are in vocab-reduce.mlir.

func.func @label_logit_without_labels(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{'loss.vocab_reduce' op label_logit needs the labels operand}}
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @labels_without_reader(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{has labels but no label_logit statistic reads them}}
  %r = loss.vocab_reduce %x, %w labels %y : tensor<?xi64> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @class_weights_without_sum(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %c: tensor<?xf32>) {
  // expected-error @+1 {{has class_weights but no logit_sum or target_logit_sum statistic reads them}}
  %r = loss.vocab_reduce %x, %w class_weights %c : tensor<?xf32> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @class_weights_of_another_type(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %c: tensor<?xf16>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 32-bit float or 64-bit float values, but got 'tensor<?xf16>'}}
  %r = loss.vocab_reduce %x, %w class_weights %c : tensor<?xf16> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @class_weights_length(%x: tensor<?x?xf16>, %w: tensor<10x?xf16>, %c: tensor<9xf32>) {
  // expected-error @+1 {{class_weights length differs from vocabulary size V of weight: 9 vs 10}}
  %r = loss.vocab_reduce %x, %w class_weights %c : tensor<9xf32> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<10x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x10xf32>):
    %0 = loss.stat logit_sum %z : tensor<?x10xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @statistic_twice(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  %r:2 = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    // expected-error @+1 {{'loss.stat' op computes 'lse' a second time; one of each kind per region}}
    %1 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return
}

// -----

func.func @unyielded_statistic(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    // expected-error @+1 {{computes a statistic the region does not yield}}
    %1 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @foreign_op_in_region(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    // expected-error @+1 {{is not a loss.stat: a vocabulary-reduction region holds statistics of its logits only}}
    %l = loss.logsumexp %z : tensor<?x?xf32> -> tensor<?xf32>
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @result_count(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{has 2 results but its region yields 1 statistics}}
  %r:2 = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @region_logits_not_f32(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{region argument must be the 'f32' logits tensor [N, V], got 'tensor<?x?xf16>'}}
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf16>):
    loss.yield
  }
  return
}

// -----

func.func @region_rows_differ(%x: tensor<4x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{row count N of the region's logits differs: 5 vs 4}}
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<4x?xf16>, tensor<?x?xf16> -> tensor<4xf32> {
  ^bb0(%z: tensor<5x?xf32>):
    %0 = loss.stat lse %z : tensor<5x?xf32> -> tensor<5xf32>
    loss.yield %0 : tensor<5xf32>
  }
  return
}

// -----

func.func @f16_compute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{compute must be 'f32' for 'f16' storage (fp16/bf16 storage never means fp16 math; f64 storage computes in f64), got 'f16'}}
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f16}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @entropy_gradient_without_lse(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>,
    %h: tensor<?xf32>, %gh: tensor<?xf32>) {
  // expected-error @+1 {{the adjoint of entropy reads lse: yield lse as well}}
  %g:2 = loss.vocab_reduce_grad %x, %w saved(%h : tensor<?xf32>) adjoints(%gh : tensor<?xf32>)
      {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>, tensor<?x?xf16> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @adjoint_count(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %l: tensor<?xf32>,
    %g0: tensor<?xf32>, %g1: tensor<?xf32>) {
  // expected-error @+1 {{takes 1 saved statistics but 2 adjoints; one of each per statistic}}
  %g:2 = loss.vocab_reduce_grad %x, %w saved(%l : tensor<?xf32>)
      adjoints(%g0, %g1 : tensor<?xf32>, tensor<?xf32>)
      {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>, tensor<?x?xf16> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @gradient_results(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %l: tensor<?xf32>,
    %g0: tensor<?xf32>) {
  // expected-error @+1 {{expects 2 gradient results for needs_input=1 needs_weight=1, got 1}}
  %g = loss.vocab_reduce_grad %x, %w saved(%l : tensor<?xf32>) adjoints(%g0 : tensor<?xf32>)
      {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @stat_outside_reduction(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.stat' op expects parent op to be one of 'loss.vocab_reduce, loss.vocab_reduce_grad'}}
  %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
  return
}

// -----

func.func @target_sum_without_targets(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{target_logit_sum needs the targets operand}}
  %r = loss.vocab_reduce %x, %w {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat target_logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @targets_of_another_width(%x: tensor<?x?xf16>, %w: tensor<10x?xf16>, %t: tensor<?x9xf32>) {
  // expected-error @+1 {{targets width differs from vocabulary size V of weight: 9 vs 10}}
  %r = loss.vocab_reduce %x, %w targets %t : tensor<?x9xf32> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<10x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x10xf32>):
    %0 = loss.stat target_logit_sum %z : tensor<?x10xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @targets_in_bf16_with_f16_storage(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %t: tensor<?x?xbf16>) {
  // expected-error @+1 {{targets must be 'f32' or the storage type 'f16', got 'bf16'}}
  %r = loss.vocab_reduce %x, %w targets %t : tensor<?x?xbf16> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat target_logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @teacher_without_reader(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %tx: tensor<?x?xf16>,
    %tw: tensor<?x?xf16>) {
  // expected-error @+1 {{has a teacher but no statistic reads it}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf16>, tensor<?x?xf16>)
      {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @teacher_stored_otherwise(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %tx: tensor<?x?xbf16>,
    %tw: tensor<?x?xbf16>) {
  // expected-error @+1 {{the teacher must be stored like the student ('f16'), got 'bf16'}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @teacher_vocabulary_differs(%x: tensor<4x8xf32>, %w: tensor<10x8xf32>,
    %tx: tensor<4x6xf32>, %tw: tensor<12x6xf32>) {
  // expected-error @+1 {{vocabulary size V of the teacher differs}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<4x6xf32>, tensor<12x6xf32>)
      {storage = f32, compute = f32} : tensor<4x8xf32>, tensor<10x8xf32> -> tensor<4xf32> {
  ^bb0(%z: tensor<4x10xf32>, %u: tensor<4x10xf32>):
    %0 = loss.stat teacher_lse %u : tensor<4x10xf32> -> tensor<4xf32>
    loss.yield %0 : tensor<4xf32>
  }
  return
}

// -----

func.func @teacher_scale_zero(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>,
    %tw: tensor<?x?xf32>) {
  // expected-error @+1 {{teacher_scale must be finite and nonzero, got 0}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32, teacher_scale = 0.0}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @teacher_region_takes_one_argument(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>,
    %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>) {
  // expected-error @+1 {{region must take 2 arguments, the logits and the teacher's logits [N, V] ('f32'), got 1}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @teacher_kind_without_teacher(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>) {
  %r = loss.vocab_reduce %x, %w {storage = f32, compute = f32}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    // expected-error @+1 {{'teacher_lse' reads the teacher's logits: the region's arguments in that order (the op has no teacher)}}
    %0 = loss.stat teacher_lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @cross_entropy_streams_swapped(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>,
    %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>) {
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    // expected-error @+1 {{'cross_entropy' reads the teacher's logits, the logits: the region's arguments in that order}}
    %0 = loss.stat cross_entropy %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @cross_entropy_adjoint_needs_both_lse(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>,
    %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>, %s: tensor<?xf32>, %g: tensor<?xf32>) {
  // expected-error @+1 {{the adjoint of cross_entropy reads lse and teacher_lse: yield both as well}}
  %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      saved(%s : tensor<?xf32>) adjoints(%g : tensor<?xf32>)
      {storage = f32, compute = f32, needs_input = false, strategy = "recompute"}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @jsd_beta_at_an_end(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>,
    %tw: tensor<?x?xf32>) {
  // expected-error @+1 {{jsd_beta must be in (0, 1) (β = 0 and β = 1 mean the KL divergences: use cross_entropy or reverse_cross_entropy), got 1}}
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32, jsd_beta = 1.0} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @jsd_beta_without_a_reader(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>) {
  // expected-error @+1 {{sets jsd_beta (0.25) but no jsd, mixture_kl or mixture_p2 statistic reads it}}
  %r = loss.vocab_reduce %x, %w {storage = f32, compute = f32, jsd_beta = 0.25}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @jsd_streams_swapped(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>,
    %tw: tensor<?x?xf32>) {
  %r = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    // expected-error @+1 {{'jsd' reads the logits, the teacher's logits: the region's arguments in that order}}
    %0 = loss.stat jsd %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0 : tensor<?xf32>
  }
  return
}

// -----

func.func @jsd_gradient_without_mixture_kl(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>,
    %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>, %s0: tensor<?xf32>, %s1: tensor<?xf32>,
    %s2: tensor<?xf32>, %g0: tensor<?xf32>, %g1: tensor<?xf32>, %g2: tensor<?xf32>) {
  // expected-error @+1 {{the adjoint of jsd reads lse, teacher_lse and mixture_kl: yield all three as well}}
  %gx, %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      saved(%s0, %s1, %s2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>, tensor<?x?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return
}

// -----

func.func @mixture_kl_gradient_without_mixture_p2(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>,
    %tx: tensor<?x?xf32>, %tw: tensor<?x?xf32>, %s0: tensor<?xf32>, %s1: tensor<?xf32>,
    %s2: tensor<?xf32>, %g0: tensor<?xf32>, %g1: tensor<?xf32>, %g2: tensor<?xf32>) {
  // expected-error @+1 {{the adjoint of mixture_kl reads lse, teacher_lse and mixture_p2: yield all three as well}}
  %gx, %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      saved(%s0, %s1, %s2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>, tensor<?x?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat mixture_kl %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return
}
