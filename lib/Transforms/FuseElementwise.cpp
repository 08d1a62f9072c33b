//===- FuseElementwise.cpp - fuse elementwise generics only ---------------===//

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace distopt {
#define GEN_PASS_DEF_FUSEELEMENTWISEPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {
struct FuseElementwisePass
    : distopt::impl::FuseElementwisePassBase<FuseElementwisePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::ControlFusionFn onlyElementwiseProducers =
        [](OpOperand *fused) {
          auto producer = fused->get().getDefiningOp<linalg::GenericOp>();
          auto consumer = dyn_cast<linalg::GenericOp>(fused->getOwner());
          return producer && consumer &&
                 producer.getNumParallelLoops() == producer.getNumLoops() &&
                 producer->hasOneUse();
        };
    linalg::populateElementwiseOpsFusionPatterns(patterns,
                                                 onlyElementwiseProducers);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
