//===- PrivatizeFills.cpp - one fill (or empty) per user of an init -----===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_PRIVATIZEFILLSPASS
#include "distopt/Codegen/Passes.h.inc"
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
    // Likewise a tensor.empty that CSE made the init of many ops: each op
    // writing it gets its own. Shared, every in-place write into it is a
    // conflict with every other for the analysis to resolve, along the
    // use-def chains: an unrolled recurrence (LinearAttention over 256
    // tokens: ~500 elementwise ops sharing two empties) took 30 s to
    // bufferize; each gets a buffer of its own either way.
    SmallVector<tensor::EmptyOp> empties;
    getOperation().walk([&](tensor::EmptyOp empty) {
      if (!empty->getResult(0).hasOneUse())
        empties.push_back(empty);
    });
    for (tensor::EmptyOp empty : empties) {
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : empty->getResult(0).getUses()) {
        auto user = dyn_cast<DestinationStyleOpInterface>(use.getOwner());
        if (user && user.isDpsInit(&use))
          uses.push_back(&use);
      }
      if (uses.size() < 2)
        continue;
      // Each its own, right before it, as the fills above.
      for (OpOperand *use : uses) {
        OpBuilder b(use->getOwner());
        use->set(b.clone(*empty)->getResult(0));
      }
      if (empty->use_empty())
        empty->erase();
    }
  }
};
} // namespace
