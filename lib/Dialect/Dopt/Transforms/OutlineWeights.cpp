//===- OutlineWeights.cpp - dopt.weight -> arguments of @main -------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_OUTLINEWEIGHTSPASS
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {
struct OutlineWeightsPass
    : distopt::impl::OutlineWeightsPassBase<OutlineWeightsPass> {
  void runOnOperation() override {
    auto main = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!main) {
      getOperation().emitError("no @main function to outline weights into");
      return signalPassFailure();
    }
    Builder b(&getContext());
    llvm::StringMap<BlockArgument> args;
    SmallVector<dopt::WeightOp> weights;
    getOperation().walk([&](dopt::WeightOp w) { weights.push_back(w); });
    for (dopt::WeightOp w : weights) {
      if (w->getParentOfType<func::FuncOp>() != main) {
        w.emitOpError("weights outside @main are not supported");
        return signalPassFailure();
      }
      auto [it, inserted] = args.try_emplace(w.getName());
      if (inserted) {
        SmallVector<NamedAttribute> ref = {
            b.getNamedAttr("name", w.getNameAttr())};
        if (w.getLocationAttr()) {
          ref.push_back(b.getNamedAttr("location", w.getLocationAttr()));
          ref.push_back(b.getNamedAttr("offset", w.getOffsetAttr()));
          ref.push_back(b.getNamedAttr("length", w.getLengthAttr()));
        }
        if (w.getConstant())
          ref.push_back(b.getNamedAttr("constant", b.getUnitAttr()));
        // Stored wider than it is used (distopt-autocast's store-weights).
        if (w.getDataTypeAttr())
          ref.push_back(b.getNamedAttr("data_type", w.getDataTypeAttr()));
        // A partitioned program's weight is this rank's block of a bigger
        // tensor (distopt-partition): keep how to cut it.
        for (StringRef key :
             {"dopt.global_type", "dopt.split_axes", "dopt.block_parts"})
          if (Attribute a = w->getAttr(key))
            ref.push_back(b.getNamedAttr(key.drop_front(5), a));
        unsigned index = main.getNumArguments();
        if (failed(main.insertArgument(
                index, w.getType(),
                b.getDictionaryAttr(
                    b.getNamedAttr("dopt.weight", b.getDictionaryAttr(ref))),
                w.getLoc())))
          return signalPassFailure();
        it->second = main.getArgument(index);
      } else if (it->second.getType() != w.getType()) {
        w.emitOpError("weight '") << w.getName()
                                  << "' is used with two different types";
        return signalPassFailure();
      }
      w.getResult().replaceAllUsesWith(it->second);
      w.erase();
    }
    // The run's random key: one input, `rng.key`, after the model's inputs
    // (the entry's buffers are inputs, then weights, then outputs).
    SmallVector<dopt::RngKeyOp> keys;
    main.walk([&](dopt::RngKeyOp k) { keys.push_back(k); });
    if (keys.empty())
      return;
    unsigned index = 0;
    while (index < main.getNumArguments() &&
           !main.getArgAttr(index, "dopt.weight"))
      ++index;
    if (failed(main.insertArgument(
            index, keys.front().getType(),
            b.getDictionaryAttr(
                {b.getNamedAttr("dopt.name", b.getStringAttr("rng.key")),
                 b.getNamedAttr("dopt.rng_key", b.getUnitAttr())}),
            keys.front().getLoc())))
      return signalPassFailure();
    for (dopt::RngKeyOp k : keys) {
      k.getResult().replaceAllUsesWith(main.getArgument(index));
      k.erase();
    }
  }
};
} // namespace
