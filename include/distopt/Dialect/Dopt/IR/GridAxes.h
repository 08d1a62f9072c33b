//===- GridAxes.h - the device grid of a partitioned program -----*- C++ -*-===//
//
// A planned program runs on one `shard.grid @dopt_grid` of shape
// stages x data x tensor. The planner writes it, the partitioner and the
// training passes (loss, gradient synchronisation) read it: one place says
// which axis is which.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DOPT_IR_GRIDAXES_H
#define DISTOPT_DIALECT_DOPT_IR_GRIDAXES_H

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace distopt::grid {

/// The grid's symbol name in the module.
constexpr llvm::StringLiteral kName = "dopt_grid";
/// Pipeline stages, data-parallel replicas, tensor-parallel shards.
constexpr int16_t kStageAxis = 0, kDataAxis = 1, kTensorAxis = 2;

/// Whether a split (a `dopt.split_axes` array: per dimension, the grid axes
/// splitting it) uses grid axis `axis`; false for none.
inline bool splitsOver(mlir::Attribute splitAxes, int16_t axis) {
  auto dims = llvm::dyn_cast_or_null<mlir::ArrayAttr>(splitAxes);
  if (!dims)
    return false;
  for (mlir::Attribute d : dims)
    if (auto axes = llvm::dyn_cast<mlir::ArrayAttr>(d))
      for (mlir::Attribute a : axes)
        if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(a); i && i.getInt() == axis)
          return true;
  return false;
}

/// The number of ranks along `axis` of the grid of `op`'s module (`op` may
/// be the module); 1 without a grid or such an axis.
inline int64_t axisSize(mlir::Operation *op, int16_t axis) {
  auto module = llvm::dyn_cast<mlir::ModuleOp>(op);
  if (!module)
    module = op->getParentOfType<mlir::ModuleOp>();
  if (!module)
    return 1;
  if (auto g = module.lookupSymbol<mlir::shard::GridOp>(kName))
    if (g.getShape().size() > size_t(axis))
      return g.getShape()[axis];
  return 1;
}

} // namespace distopt::grid

#endif // DISTOPT_DIALECT_DOPT_IR_GRIDAXES_H
