//===- TensorVarying.h - what differs between tensor-parallel ranks -*- C++ -*-===//
//
// Which values of one rank's program differ between the ranks of the grid's
// tensor axis. Asked by stage outlining (what a received activation is),
// reverse mode (where an adjoint's shares are all-reduced) and pipeline
// training.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DISTRIBUTED_TENSORVARYING_H
#define DISTOPT_DISTRIBUTED_TENSORVARYING_H

#include "distopt/Dialect/Dopt/IR/GridAxes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace distopt::grid {

/// The values of `func` (its arguments and the results of `ops`, nested ops
/// included) that differ between the ranks of the tensor axis of its
/// module's grid: weights split over it (arguments or dopt.weight ops),
/// arguments and received activations marked dopt.tensor_varying, the
/// results of collectives that split over it, this rank's coordinate on it,
/// and what is computed from them -- except what an all-reduce or
/// all-gather over the axis makes whole again. Empty when the grid has no
/// tensor axis of more than one rank.
llvm::DenseSet<mlir::Value> tensorVarying(mlir::func::FuncOp func,
                                          llvm::ArrayRef<mlir::Operation *> ops);

} // namespace distopt::grid

#endif // DISTOPT_DISTRIBUTED_TENSORVARYING_H
