//===- Reshard.h - the collectives that turn one layout into another -*- C++ -*-===//
//
// Which collectives turn a tensor laid out one way over the device grid into
// another layout is decided here, once: the planner prices these steps
// (IntraOp.cpp) and distopt-partition emits them (Partition.cpp), so the
// plan and the program agree by construction.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_RESHARD_H
#define DISTOPT_PLANNER_RESHARD_H

#include "distopt/Planner/IntraOp.h"

#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace distopt::planner {

/// A tensor's layout over the device grid: per dimension, the grid axes
/// that split it (outermost first); `partial`: each rank holds a partial
/// value (a sum, max or mean still to be reduced) over the grid axis
/// `partialAxis` of reshardSteps.
struct GridLayout {
  llvm::SmallVector<llvm::SmallVector<int16_t>> axes;
  bool partial = false;
};

/// One step of a reshard, over one grid axis.
struct ReshardStep {
  enum Kind { AllReduce, ReduceScatter, AllGather, AllToAll, Slice };
  Kind kind;
  int16_t axis;
  /// ReduceScatter and Slice: the dimension split; AllGather: the dimension
  /// gathered; AllToAll: the dimension the split moves to.
  int64_t dim;
  /// AllToAll: the dimension the split moves from (gathered).
  int64_t fromDim = -1;

  /// The collective that moves data in this step; none for a Slice (each
  /// rank takes its part of what it holds).
  std::optional<CollectiveKind> collective() const;
};

/// The steps that turn `from` into `to` (`to` is never partial), one grid
/// axis at a time: first a partial value on `partialAxis` is reduced
/// (all_reduce, or reduce_scatter straight into the split `to` wants on
/// that axis); then splits `to` does not keep are undone, innermost axis
/// first (all_gather, or all_to_all when the same axis splits another
/// dimension in `to`); then the splits `to` adds are taken locally,
/// outermost axis first (slices). Layouts of different ranks are padded
/// with unsplit dimensions.
llvm::SmallVector<ReshardStep> reshardSteps(const GridLayout &from,
                                            const GridLayout &to,
                                            int16_t partialAxis);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_RESHARD_H
