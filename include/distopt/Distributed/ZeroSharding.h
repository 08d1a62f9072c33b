//===- ZeroSharding.h - ZeRO-1's layout of a parameter's shards --*- C++ -*-===//
//
// Under ZeRO-1 each data-parallel replica owns one contiguous chunk of every
// trained weight, flattened: replica r holds elements [r*c, (r+1)*c) of the
// weight padded with zeros to R*c elements, c = ceil(n / R). Its gradient
// arrives as that chunk (reduce-scatter, distopt-sync-gradients), its
// optimizer state is kept for that chunk only, and the updated chunks are
// all-gathered back into the weight (distopt-optimizer). The runtime writes
// and reads checkpoints by the same layout. One place says it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DISTRIBUTED_ZEROSHARDING_H
#define DISTOPT_DISTRIBUTED_ZEROSHARDING_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace distopt::zero {

/// The result attribute distopt-sync-gradients puts on a gradient that is
/// this replica's chunk.
constexpr llvm::StringLiteral kShardAttr = "dopt.zero_shard";

/// Elements per replica of a weight of `elements` over `replicas`.
inline int64_t chunk(int64_t elements, int64_t replicas) {
  return (elements + replicas - 1) / replicas;
}

/// `v` (any shape) flattened, padded with zeros and viewed as
/// [replicas, chunk]: row r is replica r's chunk.
mlir::Value toChunks(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                     int64_t replicas);

/// The inverse for a flat [replicas * chunk] tensor: its first elements
/// reshaped to `type`'s shape.
mlir::Value fromChunks(mlir::OpBuilder &b, mlir::Location loc, mlir::Value flat,
                       mlir::RankedTensorType type);

} // namespace distopt::zero

#endif // DISTOPT_DISTRIBUTED_ZEROSHARDING_H
