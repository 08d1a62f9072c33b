//===- TensorVarying.cpp - what differs between tensor-parallel ranks -----===//
//
// One rank's program under tensor parallelism holds values that differ
// between the ranks of the grid's tensor axis (split weights, partial sums)
// and values that are the same on all of them. Stage outlining, reverse
// mode and pipeline training all ask which is which; this file answers.
//
//===----------------------------------------------------------------------===//

#include "distopt/Distributed/TensorVarying.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace distopt;

static bool hasAxis(ArrayRef<int16_t> axes, int16_t axis) {
  return llvm::is_contained(axes, axis);
}

llvm::DenseSet<Value> grid::tensorVarying(func::FuncOp func,
                                          ArrayRef<Operation *> ops) {
  using grid::kTensorAxis;
  llvm::DenseSet<Value> varying;
  if (axisSize(func, kTensorAxis) <= 1)
    return varying;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    Attribute split = func.getArgAttr(i, "dopt.split_axes");
    if (auto ref = func.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight"))
      split = ref.get("split_axes");
    if (grid::splitsOver(split, kTensorAxis) ||
        func.getArgAttr(i, "dopt.tensor_varying"))
      varying.insert(func.getArgument(i));
  }
  for (Operation *top : ops)
    top->walk([&](Operation *op) {
      bool source = false, whole = false;
      if (auto c = dyn_cast<shard::AllReduceOp>(op))
        whole = hasAxis(c.getGridAxes(), kTensorAxis);
      else if (auto c = dyn_cast<shard::AllGatherOp>(op))
        whole = hasAxis(c.getGridAxes(), kTensorAxis);
      else if (auto c = dyn_cast<shard::AllSliceOp>(op))
        source = hasAxis(c.getGridAxes(), kTensorAxis);
      else if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
        source = hasAxis(c.getGridAxes(), kTensorAxis);
      else if (auto c = dyn_cast<shard::AllToAllOp>(op))
        source = hasAxis(c.getGridAxes(), kTensorAxis);
      else if (auto c = dyn_cast<shard::ProcessMultiIndexOp>(op))
        source = c.getAxes().empty() || hasAxis(c.getAxes(), kTensorAxis);
      else if (isa<shard::ProcessLinearIndexOp>(op))
        source = true;
      else if (auto w = dyn_cast<dopt::WeightOp>(op))
        source = grid::splitsOver(w->getAttr("dopt.split_axes"), kTensorAxis);
      else if (auto r = dyn_cast<shard::RecvOp>(op))
        source = static_cast<bool>(op->getAttr("dopt.tensor_varying"));
      if (whole)
        return;
      if (source || llvm::any_of(op->getOperands(),
                                 [&](Value v) { return varying.count(v); }))
        for (Value r : op->getResults())
          varying.insert(r);
    });
  return varying;
}

