//===- DoptLosses.h - losses as compositions of dopt ops ---------*- C++ -*-===//
//
// One truth for what a loss computes: ONNX's NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss import through these, and a loss appended to an
// inference model is built the same way. Written with ops the planner, the
// partitioner, autodiff and both targets already know.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTLOSSES_H
#define DISTOPT_DIALECT_DOPT_IR_DOPTLOSSES_H

#include "mlir/IR/Builders.h"
#include "mlir/Support/LLVM.h"

#include <optional>
#include <string>

namespace distopt::dopt {

/// The negative log-likelihood of `logp` [N, C, d...] (log-probabilities
/// over axis 1) at the class indices `target` [N, d...] (int32/int64),
/// with optional per-class `weight` [C]: loss[n, d] = -logp[n, t, d] w[t],
/// 0 where t == ignoreIndex; `reduction` "none" keeps it, "sum" adds it up,
/// "mean" divides the sum by the weights of the counted targets (their
/// number without weights) -- PyTorch's NLLLoss and ONNX's op. The class is
/// picked with a one-hot mask (target == iota over C), not a gather.
/// Returns the loss, or failure with `error` saying what does not fit.
///
/// `acrossReplicas`, when given, sums a local 0-d value over the replicas
/// that each hold a share of the samples (a data-parallel program): "sum"
/// and "mean" then reduce over the whole batch, the mean's count included,
/// so the loss is exact however the batch is split.
///
/// `classes`, when given, says `logp` holds only the classes [offset,
/// offset + C) of a class axis split over ranks (Megatron's vocabulary-
/// parallel loss): each rank picks the targets that fall in its classes and
/// `acrossClasses` sums the picked values over those ranks. No `weight`
/// then; every target not ignored counts one.
struct ClassSplit {
  mlir::Value offset; ///< 0-d i64: the first class this rank holds
  llvm::function_ref<mlir::Value(mlir::Value)> acrossClasses;
};
mlir::FailureOr<mlir::Value> buildNegativeLogLikelihood(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value logp,
    mlir::Value target, mlir::Value weight, std::optional<int64_t> ignoreIndex,
    llvm::StringRef reduction, std::string &error,
    llvm::function_ref<mlir::Value(mlir::Value)> acrossReplicas = nullptr,
    std::optional<ClassSplit> classes = std::nullopt);

} // namespace distopt::dopt

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTLOSSES_H
