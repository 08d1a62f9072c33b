//===- Autodiff.h - reverse-mode gradient rules of dopt ops -----*- C++ -*-===//
//
// One truth per op for its gradient: lib/Training/AutodiffRules.cpp holds
// the vector-Jacobian product of every differentiable dopt op, and the
// distopt-autodiff pass (lib/Training/Autodiff.cpp) only walks the program
// backwards applying them.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRAINING_AUTODIFF_H
#define DISTOPT_TRAINING_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Regex.h"

namespace distopt::autodiff {

/// Whether `v` is a ranked tensor of floats: what carries a gradient.
inline bool isFloatTensor(mlir::Value v) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && llvm::isa<mlir::FloatType>(t.getElementType());
}

/// Whether argument `i` of `func` is a trained parameter: a float weight,
/// not from an ONNX Constant node, and not matched by `frozen` (the
/// --freeze-weights expression; null or empty: none frozen).
bool isTrainedWeight(mlir::func::FuncOp func, unsigned i,
                     const llvm::Regex *frozen);

/// The arguments of `func` holding weights that `ops` update in the forward
/// pass (ops marked dopt.updates_weight: batch norm's running statistics):
/// argument index -> the weight's name, as the marks spell it.
llvm::DenseMap<unsigned, mlir::StringAttr>
forwardUpdatedWeights(mlir::func::FuncOp func,
                      llvm::ArrayRef<mlir::Operation *> ops);

/// The updates among `ops` of the weights `updatedArgs` names (as
/// forwardUpdatedWeights gives them): (argument, new value) in op order, the
/// marks removed (the caller marks the step's own).
llvm::SmallVector<std::pair<unsigned, mlir::Value>>
takeForwardUpdates(const llvm::DenseMap<unsigned, mlir::StringAttr> &updatedArgs,
                   llvm::ArrayRef<mlir::Operation *> ops);

/// The 16-bit copies of weights among `ops`: casts (autocast's) whose
/// input is argument i of `args` where `func`'s argument i holds a weight
/// that the forward pass does not update (`updatedArgs`, as
/// forwardUpdatedWeights gives them). A step makes them once and passes
/// them to each micro-batch's calls.
llvm::SmallVector<mlir::Operation *>
weightCopies(mlir::func::FuncOp func, mlir::Block *args,
             llvm::ArrayRef<mlir::Operation *> ops,
             const llvm::DenseMap<unsigned, mlir::StringAttr> &updatedArgs);

/// Micro-batches of a step (--accumulate, a pipeline stage's): each copy of
/// a dropout draws the mask of its rows of the whole batch. The replica's
/// block of the batch (the partitioner's offsets, at micro-batch size) holds
/// `count` micro-batches along the dropout's batch dimension (`dopt.batch_dim`
/// on the op: distopt compile's reading of the planner's graph; default 0),
/// and micro-batch `m` follows the m before it, as the loader lays samples
/// out: offsets * count + m * rows along that dimension, in a whole tensor
/// `count` times as large there.
void placeDropoutMicrobatch(mlir::OpBuilder &b, mlir::Operation *dropout,
                            int64_t m, int64_t count);
/// The same with the micro-batch's index a value (a `tensor<i64>` scalar):
/// one function that every micro-batch calls.
void placeDropoutMicrobatch(mlir::OpBuilder &b, mlir::Operation *dropout,
                            mlir::Value m, int64_t count);

/// The weights `func`'s forward pass updates and their new values: the
/// results of ops marked `dopt.updates_weight` (the weight's name; one
/// result), and of ops marked `dopt.updates_weights` (an array with a name,
/// or a unit attribute, per result: a call of the function that runs one
/// micro-batch, distopt-accumulate-gradients').
void forEachForwardUpdate(
    mlir::func::FuncOp func,
    llvm::function_ref<void(mlir::StringAttr, mlir::Value)> fn);

/// Fails (an error on the op, `cut` saying what cuts the batch: "--accumulate
/// 2", "a pipeline's 4 micro-batches") where a dropout in `scope` has its
/// batch spread over a dimension with other data (`dopt.batch_dim` = -1), so
/// that no micro-batch's rows are one block of it.
mlir::LogicalResult checkMicrobatchDropouts(mlir::Operation *scope,
                                            llvm::StringRef cut);

/// Attaches each op's gradient rule to it (dopt::GradientOpInterface: the
/// dopt ops and the tensor-parallel `shard` collectives); a context that
/// differentiates registers it before loading the dialects.
void registerOpModels(mlir::DialectRegistry &registry);

/// The vector-Jacobian product of `op`: given the adjoints of its results
/// (null where a result has none: an unused piece of a split), builds the
/// adjoints of its operands at the builder's insertion point, left null
/// where an operand gets none (integer and boolean operands, conditions).
/// An op without a rule (no dopt::GradientOpInterface) is an error at the
/// op naming it.
mlir::LogicalResult
applyRule(mlir::OpBuilder &b, mlir::Operation *op,
          mlir::ArrayRef<mlir::Value> resultAdjoints,
          llvm::SmallVectorImpl<mlir::Value> &operandAdjoints);

/// Reverse mode over `ops` (one block's ops in program order): the adjoint
/// of each seed value starts as given, each op's rule is applied in reverse
/// order, and the adjoints of `wrt` are returned (null where the seeds do
/// not depend on one). New ops go at `b`'s insertion point.
/// `tensorVarying` (grid::tensorVarying in Distributed/TensorVarying.h;
/// empty without tensor parallelism) says which values differ between the ranks of the tensor axis: the
/// shares of replicated values' adjoints that varying ops contribute are
/// all-reduced over the axis once per value (Differentiate.cpp).
/// `aliases`: operands of `ops` that stand for other values (an op kept from
/// an earlier forward while its producers were recomputed: its operands are
/// the forward's values, their twins in `ops` the recomputed ones, which
/// get the adjoints).
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
differentiate(mlir::OpBuilder &b, mlir::ArrayRef<mlir::Operation *> ops,
              mlir::ArrayRef<std::pair<mlir::Value, mlir::Value>> seeds,
              mlir::ArrayRef<mlir::Value> wrt,
              const llvm::DenseSet<mlir::Value> &tensorVarying,
              const llvm::DenseMap<mlir::Value, mlir::Value> *aliases = nullptr);

/// Sums `grad` (the adjoint of a broadcast result) over the dimensions that
/// NumPy broadcasting added or stretched, back to `type`'s shape.
mlir::Value unbroadcast(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value grad, mlir::RankedTensorType type);

/// The step's loss scale (fp16 training, dynamic loss scaling as PyTorch's
/// GradScaler): the 0-d f32 hyperparameter input `opt.loss_scale` of
/// `main` (`dopt.hyper` = "loss_scale"), added before the weights where it
/// is not there yet. The backward is seeded with it; distopt-optimizer
/// divides the gradients by it and skips a step whose gradients are not
/// finite.
mlir::Value lossScaleInput(mlir::func::FuncOp main);

} // namespace distopt::autodiff

#endif // DISTOPT_TRAINING_AUTODIFF_H
