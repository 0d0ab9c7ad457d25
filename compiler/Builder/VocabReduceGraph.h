//===- VocabReduceGraph.h - build loss.vocab_reduce graphs ------*- C++ -*-===//
//
// The graphs behind the loss families (lossjit.linear_cross_entropy with
// class weights or label smoothing, linear_log_prob, ...): one
// loss.vocab_reduce yielding the statistics asked for, or its derived
// backward loss.vocab_reduce_grad. Built with ops, never by formatting text.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_BUILDER_VOCABREDUCEGRAPH_H
#define LOSSJIT_COMPILER_BUILDER_VOCABREDUCEGRAPH_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace lossjit {

struct VocabReduceGraphOptions {
  std::string name = "vocab_reduce"; ///< function name.
  std::string dtype = "f16";         ///< storage of x, w, b, class weights.
  std::string labelType = "i64";     ///< i32 or i64 (when label_logit is asked for).
  /// K labels per row (labels [N, K], label_logit [N, K]); 0: labels [N].
  int64_t labelsPerRow = 0;
  /// The statistics, in result order: lse, label_logit, logit_sum, entropy.
  std::vector<std::string> statistics;
  bool bias = false;
  /// Class weights c [V] weighting logit_sum (Σ_j c_j z_j) and
  /// target_logit_sum.
  bool classWeights = false;
  /// The element type of the targets [N, V] that target_logit_sum reads
  /// ("f32" or the dtype); "" without targets.
  std::string targets;
  int64_t ignoreIndex = -100;
  double logitScale = 1.0;
  double softcap = 0.0;
  /// A teacher stream u = teacherScale · (x'·w'ᵀ + b') from its own hidden
  /// states x' [N, D'] and weight w' [V, D'] (arguments after the targets),
  /// read by teacher_lse, teacher_entropy, cross_entropy and
  /// reverse_cross_entropy.
  bool teacher = false;
  bool teacherBias = false;
  double teacherScale = 1.0;
  /// β of the mixture M = β·q + (1 − β)·p that jsd and mixture_kl read.
  double jsdBeta = 0.5;

  /// Build the backward instead: `@name(x, w[, labels][, bias][, class_weights][, targets],
  /// saved..., adjoints...) -> (grad_x?, grad_w?, grad_bias?)`, one saved
  /// statistic and one adjoint per statistic, in order.
  bool gradient = false;
  std::string strategy = "auto"; ///< auto, chunked, recompute.
  bool needsGradX = true;
  bool needsGradW = true;
  int64_t workspaceBytes = 64ll << 20;
};

/// `func.func @name(x, w[, labels][, bias][, class_weights][, targets]) -> statistics`
/// holding one loss.vocab_reduce (labels when label_logit is asked for), or
/// the gradient function. Bad options give an error naming the option and
/// the accepted values; the verifier's rules (each statistic once; entropy's
/// gradient needs lse) are reported as errors too.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildVocabReduceGraph(mlir::MLIRContext &context, const VocabReduceGraphOptions &options);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_BUILDER_VOCABREDUCEGRAPH_H
