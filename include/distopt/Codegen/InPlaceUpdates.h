//===- InPlaceUpdates.h - a step's updates in their old buffers -*- C++ -*-===//
//
// A training step returns the new value of each weight and optimizer state
// it updates. Those written into the buffer of the argument they update
// have no buffer of their own in the entry point; the driver's manifest
// says so (an output's "in_place"), the runtime keeps the updated values
// where the old ones were. One rule decides which, read by
// distopt-update-in-place and by the driver.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_CODEGEN_INPLACEUPDATES_H
#define DISTOPT_CODEGEN_INPLACEUPDATES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"

namespace distopt {

/// The attribute the driver puts on a training step's function to have its
/// updates written in place.
inline constexpr llvm::StringLiteral kUpdateInPlaceAttr =
    "dopt.update_in_place";

struct InPlaceUpdate {
  unsigned result;
  unsigned argument;
  /// What the result updates: the weight's or the input's name.
  mlir::StringAttr target;
};

/// The results of `func` written into an argument's buffer: in a function
/// marked kUpdateInPlaceAttr, each result marked `dopt.updates_weight =
/// NAME` (the argument whose `dopt.weight` is NAME) or `dopt.updates = NAME`
/// (the argument whose `dopt.name` is NAME) of the argument's type; one
/// result per argument (the first). Empty for an unmarked function.
llvm::SmallVector<InPlaceUpdate> inPlaceUpdates(mlir::func::FuncOp func);

} // namespace distopt

#endif // DISTOPT_CODEGEN_INPLACEUPDATES_H
