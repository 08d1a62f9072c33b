//===- PrivatizeFills.cpp - one fill per user of a filled tensor ----------===//

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_PRIVATIZEFILLSPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {
struct PrivatizeFillsPass
    : distopt::impl::PrivatizeFillsPassBase<PrivatizeFillsPass> {
  void runOnOperation() override {
    SmallVector<linalg::FillOp> fills;
    getOperation().walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics() && !fill->getResult(0).hasOneUse())
        fills.push_back(fill);
    });
    for (linalg::FillOp fill : fills) {
      Value result = fill->getResult(0);
      // Only the accumulators of linalg ops (their `outs`) are privatised:
      // other users -- an extract_slice and the insert_slice that writes it
      // back, say -- update one buffer in place and must keep sharing it.
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : result.getUses()) {
        auto user = dyn_cast<linalg::LinalgOp>(use.getOwner());
        if (user && user.isDpsInit(&use))
          uses.push_back(&use);
      }
      if (uses.empty() || (uses.size() == 1 && result.hasOneUse()))
        continue;
      // Every user gets a copy right before it (where BLAS can then write C
      // without reading it), and the shared original goes.
      for (OpOperand *use : uses) {
        Operation *user = use->getOwner();
        OpBuilder b(user);
        IRMapping map;
        Value init = fill.getDpsInits()[0];
        if (auto empty = init.getDefiningOp<tensor::EmptyOp>())
          map.map(init, b.clone(*empty)->getResult(0));
        // The fill value is a constant or defined above the fill, so it
        // dominates the user too.
        Operation *copy = b.clone(*fill, map);
        use->set(copy->getResult(0));
      }
      if (!result.use_empty())
        continue;
      Value init = fill.getDpsInits()[0];
      fill->erase();
      if (auto empty = init.getDefiningOp<tensor::EmptyOp>())
        if (empty->use_empty())
          empty->erase();
    }
  }
};
} // namespace
