//===- Autodiff.cpp - reverse-mode differentiation of @main ---------------===//
//
// distopt-autodiff: @main (weights as arguments, after
// distopt-outline-weights) returns a scalar loss as result `loss`; the pass
// appends the gradient of that loss with respect to every trainable weight
// argument as further results, built from the per-op rules of
// AutodiffRules.cpp. Forward values the backward ops read stay live (the
// memory plan frees the rest). Integer and boolean values carry no
// gradient; a weight that does not reach the loss gets none.
//
// Tensor parallelism (a partitioned program whose grid has a tensor axis of
// t > 1 ranks): the program is one rank's, and its values either differ
// between the ranks of the tensor axis (split, or partial sums: "varying")
// or are the same on all of them ("replicated"). The adjoint of a varying
// value is its rank's own. The adjoint of a replicated value is kept
// complete -- the whole adjoint, the same on every rank -- so the rules of
// replicated ops run on whole adjoints as in one process. A varying op that
// reads a replicated value (a column-parallel matmul reading its input)
// contributes only its rank's share of that value's adjoint: such
// contributions are summed per value and all-reduced over the tensor axis
// once, when the value's own producer is differentiated (Megatron's "f"
// operator: identity forward, all-reduce backward). The collectives the
// partitioner placed are transposed by their rules (AutodiffRules.cpp).
//
//===----------------------------------------------------------------------===//

#include "distopt/Transforms/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Transforms/Autodiff.h"
#include "distopt/Transforms/GridAxes.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Regex.h"

namespace distopt {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

bool hasAxis(ArrayRef<int16_t> axes, int16_t axis) {
  return llvm::is_contained(axes, axis);
}


/// The values of `main` that differ between the ranks of the tensor axis:
/// split arguments (weight blocks), the results of collectives that split
/// over it, this rank's coordinate on it, and what is computed from them --
/// except what an all-reduce or all-gather over the axis makes whole again.
llvm::DenseSet<Value> tensorVarying(func::FuncOp main) {
  using grid::kTensorAxis;
  llvm::DenseSet<Value> varying;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    Attribute split = main.getArgAttr(i, "dopt.split_axes");
    if (auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight"))
      split = ref.get("split_axes");
    if (grid::splitsOver(split, kTensorAxis))
      varying.insert(main.getArgument(i));
  }
  main.getBody().front().walk([&](Operation *op) {
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
    if (whole)
      return;
    if (source || llvm::any_of(op->getOperands(),
                               [&](Value v) { return varying.count(v); }))
      for (Value r : op->getResults())
        varying.insert(r);
  });
  return varying;
}

struct AutodiffPass : public distopt::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal()) {
      module.emitError("distopt-autodiff needs a @main function");
      return signalPassFailure();
    }
    if (!main.getBody().hasOneBlock()) {
      main.emitError("distopt-autodiff handles a single-block @main");
      return signalPassFailure();
    }
    llvm::Regex frozen(freezeWeights.getValue());
    std::string regexError;
    if (!freezeWeights.empty() && !frozen.isValid(regexError)) {
      main.emitError("--freeze-weights: invalid regular expression: ")
          << regexError;
      return signalPassFailure();
    }
    Block &body = main.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (loss >= ret.getNumOperands()) {
      main.emitError("the loss is result ")
          << loss.getValue() << ", but @main has " << ret.getNumOperands()
          << " results";
      return signalPassFailure();
    }
    Value lossValue = ret.getOperand(loss);
    auto lossType = cast<RankedTensorType>(lossValue.getType());
    if (!isFloatTensor(lossValue) || lossType.getNumElements() != 1) {
      main.emitError("the loss (result ")
          << loss.getValue() << ") must be one float value, got "
          << lossType;
      return signalPassFailure();
    }

    // The parameters: float weight arguments not frozen.
    SmallVector<unsigned> params;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight");
      if (!ref || !isFloatTensor(main.getArgument(i)))
        continue;
      auto name = ref.getAs<StringAttr>("name");
      if (!freezeWeights.empty() && name && frozen.match(name.getValue()))
        continue;
      params.push_back(i);
    }

    // Values that depend on a parameter (forward) ...
    llvm::DenseSet<Value> varying;
    for (unsigned i : params)
      varying.insert(main.getArgument(i));
    for (Operation &op : body.without_terminator()) {
      bool fromParam = llvm::any_of(op.getOperands(), [&](Value v) {
        return varying.count(v);
      });
      if (fromParam)
        for (Value r : op.getResults())
          if (isFloatTensor(r))
            varying.insert(r);
    }

    // ... walked backwards from the loss.
    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> adjoint;
    auto accumulate = [&](Value v, Value g) {
      auto [it, inserted] = adjoint.try_emplace(v, g);
      if (!inserted)
        it->second = dopt::AddOp::create(b, g.getLoc(), it->second, g);
    };
    // Tensor parallelism: the varying values, and the per-rank shares of
    // replicated values' adjoints, to be all-reduced once each.
    int64_t tensorRanks = 1;
    if (auto grid = module.lookupSymbol<shard::GridOp>(grid::kName))
      if (grid.getShape().size() > size_t(grid::kTensorAxis))
        tensorRanks = grid.getShape()[grid::kTensorAxis];
    llvm::DenseSet<Value> tvary;
    if (tensorRanks > 1)
      tvary = tensorVarying(main);
    if (tvary.count(lossValue)) {
      main.emitError("the loss differs between the tensor-parallel ranks "
                     "(internal error: it must be all-reduced or gathered "
                     "over the tensor axis)");
      return signalPassFailure();
    }
    llvm::DenseMap<Value, Value> shares;
    auto accumulateShare = [&](Value v, Value g) {
      auto [it, inserted] = shares.try_emplace(v, g);
      if (!inserted)
        it->second = dopt::AddOp::create(b, g.getLoc(), it->second, g);
    };
    // The complete adjoint of `v`: the whole contributions plus the
    // all-reduced shares.
    auto complete = [&](Value v) -> Value {
      auto share = shares.find(v);
      if (share == shares.end())
        return adjoint.lookup(v);
      Value s = share->second;
      shares.erase(share);
      MLIRContext *ctx = module.getContext();
      Value summed =
          shard::AllReduceOp::create(
              b, s.getLoc(), s.getType(), FlatSymbolRefAttr::get(ctx, grid::kName),
              b.getDenseI16ArrayAttr({grid::kTensorAxis}), s,
              shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
              .getResult();
      accumulate(v, summed);
      return adjoint.lookup(v);
    };
    Value one = dopt::ConstantOp::create(
        b, main.getLoc(),
        DenseElementsAttr::get(lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
    accumulate(lossValue, one);
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      if (isa<dopt::ConstantOp>(op) || op == one.getDefiningOp())
        continue;
      bool active = llvm::any_of(op->getOperands(),
                                 [&](Value v) { return varying.count(v); });
      bool any = llvm::any_of(op->getResults(), [&](Value r) {
        return adjoint.count(r) || shares.count(r);
      });
      if (!any || !active)
        continue;
      b.setInsertionPoint(ret);
      SmallVector<Value> gs;
      for (Value r : op->getResults())
        gs.push_back(complete(r));
      SmallVector<Value> operandGs;
      if (failed(autodiff::applyRule(b, op, gs, operandGs)))
        return signalPassFailure();
      // A varying op's contribution to a replicated operand is this rank's
      // share; a collective's rule gives the whole adjoint already.
      bool sharesOnly = !isa<shard::ShardDialect>(op->getDialect()) &&
                        llvm::any_of(op->getResults(),
                                     [&](Value r) { return tvary.count(r); });
      for (auto [v, g] : llvm::zip(op->getOperands(), operandGs)) {
        if (!g || !varying.count(v))
          continue;
        if (sharesOnly && !tvary.count(v))
          accumulateShare(v, g);
        else
          accumulate(v, g);
      }
    }

    // The gradients become results, after the model's own.
    b.setInsertionPoint(ret);
    SmallVector<Value> results(ret.getOperands());
    SmallVector<Type> resultTypes(main.getResultTypes());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < main.getNumResults(); ++i)
      resultAttrs.push_back(main.getResultAttrDict(i));
    for (unsigned i : params) {
      Value w = main.getArgument(i);
      auto type = cast<RankedTensorType>(w.getType());
      // A weight the loss does not depend on (a batch norm's running
      // statistics, an unused head) gets no gradient, as PyTorch leaves its
      // .grad None: optimizers then leave it alone.
      Value g = complete(w);
      if (!g)
        continue;
      results.push_back(g);
      resultTypes.push_back(type);
      auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight");
      std::string name =
          "grad:" + cast<StringAttr>(ref.get("name")).getValue().str();
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("dopt.name", b.getStringAttr(name)),
           b.getNamedAttr("dopt.grad_of", ref.get("name"))}));
    }
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    main.setType(FunctionType::get(module.getContext(),
                                   main.getArgumentTypes(), resultTypes));
    main.setAllResultAttrs(resultAttrs);
  }
};

} // namespace
