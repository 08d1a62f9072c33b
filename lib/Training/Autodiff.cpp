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
// Tensor-parallel programs: see Differentiate.cpp.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/TensorVarying.h"
#include "distopt/Training/Autodiff.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Regex.h"

namespace distopt {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "distopt/Training/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;
using autodiff::isFloatTensor;

namespace {

/// Whether `loss` depends on `w` at all (through any values, integers
/// included), in program order `ops`.
bool reachesThroughIntegers(ArrayRef<Operation *> ops, Value w, Value loss) {
  llvm::DenseSet<Value> reached{w};
  for (Operation *op : ops)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return reached.count(v); }))
      for (Value r : op->getResults())
        reached.insert(r);
  return reached.count(loss);
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

    // Dynamic loss scaling: its input, before the parameters are counted.
    Value scale = lossScale ? autodiff::lossScaleInput(main) : Value();
    // The parameters: float weight arguments not frozen.
    SmallVector<unsigned> params;
    SmallVector<Value> wrt;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      if (!autodiff::isTrainedWeight(main, i,
                                     freezeWeights.empty() ? nullptr : &frozen))
        continue;
      params.push_back(i);
      wrt.push_back(main.getArgument(i));
    }
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);

    OpBuilder b(ret);
    Value one = dopt::ConstantOp::create(
        b, main.getLoc(),
        DenseElementsAttr::get(lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
    // Dynamic loss scaling: the backward starts from the scale, not 1.
    if (scale) {
      Value s = scale;
      if (lossType.getElementType() !=
          cast<RankedTensorType>(s.getType()).getElementType())
        s = dopt::CastOp::create(b, main.getLoc(), s,
                                 TypeAttr::get(lossType.getElementType()));
      one = dopt::MulOp::create(b, main.getLoc(), one, s);
    }
    llvm::DenseSet<Value> tvary = grid::tensorVarying(main, ops);
    if (tvary.count(lossValue)) {
      main.emitError("the loss differs between the tensor-parallel ranks "
                     "(internal error: it must be all-reduced or gathered "
                     "over the tensor axis)");
      return signalPassFailure();
    }
    FailureOr<SmallVector<Value>> grads = autodiff::differentiate(
        b, ops, {{lossValue, one}}, wrt, tvary);
    if (failed(grads))
      return signalPassFailure();

    // The gradients become results, after the model's own.
    SmallVector<Value> results(ret.getOperands());
    SmallVector<Type> resultTypes(main.getResultTypes());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < main.getNumResults(); ++i)
      resultAttrs.push_back(main.getResultAttrDict(i));
    // A weight's name (its position where it has none: hand-written IR).
    auto weightName = [&](unsigned i) -> std::string {
      auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight");
      StringAttr name = ref ? ref.getAs<StringAttr>("name") : StringAttr();
      return name ? name.getValue().str() : "#" + std::to_string(i);
    };
    for (auto [i, g] : llvm::zip(params, *grads)) {
      // A weight the loss does not depend on (a batch norm's running
      // statistics, an unused head) gets no gradient, as PyTorch leaves its
      // .grad None: optimizers then leave it alone. One the loss depends on
      // only through integers (a QuantizeLinear, a cast to an integer type)
      // gets none either; that is said, since it is likely not meant.
      if (!g) {
        if (reachesThroughIntegers(ops, main.getArgument(i), lossValue)) {
          main.emitWarning("weight '")
              << weightName(i) << "' reaches the loss only through integer or boolean values "
                 "(a QuantizeLinear, a comparison, a cast to an integer "
                 "type): it gets no gradient and is not trained";
        }
        continue;
      }
      auto type = cast<RankedTensorType>(main.getArgument(i).getType());
      results.push_back(g);
      resultTypes.push_back(type);
      std::string name = weightName(i);
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("dopt.name", b.getStringAttr("grad:" + name)),
           b.getNamedAttr("dopt.grad_of", b.getStringAttr(name))}));
    }
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    main.setType(FunctionType::get(module.getContext(),
                                   main.getArgumentTypes(), resultTypes));
    main.setAllResultAttrs(resultAttrs);
  }
};

} // namespace

Value distopt::autodiff::lossScaleInput(func::FuncOp main) {
  for (unsigned i = 0; i < main.getNumArguments(); ++i)
    if (auto h = main.getArgAttrOfType<StringAttr>(i, "dopt.hyper"))
      if (h.getValue() == "loss_scale")
        return main.getArgument(i);
  Builder b(main.getContext());
  unsigned index = 0;
  while (index < main.getNumArguments() &&
         !main.getArgAttr(index, "dopt.weight"))
    ++index;
  (void)main.insertArgument(
      index, RankedTensorType::get({}, b.getF32Type()),
      b.getDictionaryAttr(
          {b.getNamedAttr("dopt.name", b.getStringAttr("opt.loss_scale")),
           b.getNamedAttr("dopt.hyper", b.getStringAttr("loss_scale"))}),
      main.getLoc());
  return main.getArgument(index);
}
