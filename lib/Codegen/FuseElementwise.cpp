//===- FuseElementwise.cpp - fuse elementwise generics only ---------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace distopt {
#define GEN_PASS_DEF_FUSEELEMENTWISEPASS
#include "distopt/Codegen/Passes.h.inc"
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
          // A producer the consumer reads through a broadcast (a per-row
          // value such as softmax's 1/sum or layer norm's mean) stays
          // separate: fused, it would be recomputed for every element of
          // the row. distopt-fuse-parallel-loops later runs it once per row
          // inside the consumer's row loop.
          return producer && consumer &&
                 producer.getNumParallelLoops() == producer.getNumLoops() &&
                 producer->hasOneUse() &&
                 consumer.getMatchingIndexingMap(fused).isPermutation();
        };
    linalg::populateElementwiseOpsFusionPatterns(patterns,
                                                 onlyElementwiseProducers);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
