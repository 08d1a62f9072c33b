//===- Autodiff.h - reverse-mode gradient rules of dopt ops -----*- C++ -*-===//
//
// One truth per op for its gradient: lib/Transforms/AutodiffRules.cpp holds
// the vector-Jacobian product of every differentiable dopt op, and the
// distopt-autodiff pass (lib/Transforms/Autodiff.cpp) only walks the program
// backwards applying them.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_AUTODIFF_H
#define DISTOPT_TRANSFORMS_AUTODIFF_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"

namespace distopt::autodiff {

/// Whether dopt has a gradient rule for ops named `opName`.
bool hasRule(llvm::StringRef opName);

/// The vector-Jacobian product of `op`: given the adjoints of its results
/// (null where a result has none: an unused piece of a split), builds the
/// adjoints of its operands at the builder's insertion point, left null
/// where an operand gets none (integer and boolean operands, conditions).
/// An op without a rule is an error at the op naming it.
mlir::LogicalResult
applyRule(mlir::OpBuilder &b, mlir::Operation *op,
          mlir::ArrayRef<mlir::Value> resultAdjoints,
          llvm::SmallVectorImpl<mlir::Value> &operandAdjoints);

/// Sums `grad` (the adjoint of a broadcast result) over the dimensions that
/// NumPy broadcasting added or stretched, back to `type`'s shape.
mlir::Value unbroadcast(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value grad, mlir::RankedTensorType type);

} // namespace distopt::autodiff

#endif // DISTOPT_TRANSFORMS_AUTODIFF_H
