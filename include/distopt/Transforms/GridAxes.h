//===- GridAxes.h - the device grid of a partitioned program -----*- C++ -*-===//
//
// A planned program runs on one `shard.grid @dopt_grid` of shape
// stages x data x tensor. The planner writes it, the partitioner and the
// training passes (loss, gradient synchronisation) read it: one place says
// which axis is which.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_GRIDAXES_H
#define DISTOPT_TRANSFORMS_GRIDAXES_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace distopt::grid {

/// The grid's symbol name in the module.
constexpr llvm::StringLiteral kName = "dopt_grid";
/// Pipeline stages, data-parallel replicas, tensor-parallel shards.
constexpr int16_t kStageAxis = 0, kDataAxis = 1, kTensorAxis = 2;

} // namespace distopt::grid

#endif // DISTOPT_TRANSFORMS_GRIDAXES_H
