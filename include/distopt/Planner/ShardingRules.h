//===- ShardingRules.h - how each dopt op may be split ----------*- C++ -*-===//
//
// A sharding rule describes an op by its loop factors (the terms of Shardy's
// OpShardingRule): every operand and result dimension maps to at most one
// factor, and splitting a factor over n devices splits every dimension
// mapped to it. What splitting a factor means for the op:
//  * Parallel: the op runs on the slices; results stay split.
//  * Reduction: each device reduces its slice; the result is a partial
//    value (partial sums, maxima for reduce_max, means for reduce_mean and
//    global_avg_pool) that needs an
//    all-reduce (or reduce-scatter) before use.
//  * NeedReplication: the factor must not be split (softmax axis,
//    normalised axes, convolution windows, concatenation axes...).
// Dimensions mapped to no factor (size-1 broadcast dimensions, sliced or
// padded dimensions) are never split.
//
// The planner enumerates strategies from these rules and prices them; the
// partitioner rewrites ops with the same rules, so plan and
// program agree on what a split means.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_SHARDINGRULES_H
#define DISTOPT_PLANNER_SHARDINGRULES_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/LogicalResult.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
class DialectRegistry;
class Operation;
} // namespace mlir

namespace distopt::planner {

enum class FactorKind { Parallel, Reduction, NeedReplication };

/// How partial results of a split reduction factor combine.
/// Mean: each device holds the mean of its slice; equal slices combine by
/// averaging (reduce_mean, global_avg_pool).
enum class PartialKind { Sum, Max, Mean };

struct Factor {
  int64_t size = 1;
  FactorKind kind = FactorKind::Parallel;
  PartialKind partial = PartialKind::Sum; ///< for Reduction factors
};

struct OpShardingRule {
  llvm::SmallVector<Factor> factors;
  /// operandDims[i][d]: the factor of dimension d of operand i, or -1.
  llvm::SmallVector<llvm::SmallVector<int64_t, 4>> operandDims;
  /// resultDims[i][d]: the factor of dimension d of result i, or -1.
  llvm::SmallVector<llvm::SmallVector<int64_t, 4>> resultDims;

  /// The dimension of operand `operand` mapped to `factor`, or -1.
  int64_t operandDim(unsigned operand, int64_t factor) const;
  /// The dimension of result `result` mapped to `factor`, or -1.
  int64_t resultDim(unsigned result, int64_t factor) const;
};

/// Block layouts. A concat or split along a split axis holds each part's
/// block on every device (partsRule); the tensor split into parts must be
/// made in that layout, which its producers carry back to the weights
/// (whose columns the runtime then loads permuted). One step of that walk:
/// the operands of `def` (a result of which is wanted in a block layout
/// along dimension `dim`) that must be in the block layout too, with their
/// dimension. A weight needs nothing more. Fails, saying why, for a
/// producer that cannot carry the layout. The planner offers a block split
/// only where the whole walk succeeds; the partitioner follows the same
/// walk to mark the values and weights.
struct BlockOperand {
  unsigned operand;
  int64_t dim;
};
llvm::FailureOr<llvm::SmallVector<BlockOperand>>
blockLayoutOperands(mlir::Operation *def, int64_t dim, std::string &why);

/// Attaches each op's rule to it (dopt::ShardingRuleOpInterface); a context
/// that plans or partitions registers it (planner::registerOpModels).
void registerShardingRuleModels(mlir::DialectRegistry &registry);

/// The rule of a dopt op: elementwise ops and dopt.expand split alike along
/// every result dimension; other ops answer through
/// dopt::ShardingRuleOpInterface. std::nullopt for ops that are only ever
/// replicated (dopt.shape, dopt.constant, dopt.weight, ops of other
/// dialects) and for shapes a rule cannot describe (unranked, rank-1
/// matmul operands).
std::optional<OpShardingRule> getShardingRule(mlir::Operation *op);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_SHARDINGRULES_H
