//===- InPlaceLoopBuffers.cpp - drop buffers a loop carries unchanged -----===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_INPLACELOOPBUFFERSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {
struct InPlaceLoopBuffersPass
    : distopt::impl::InPlaceLoopBuffersPassBase<InPlaceLoopBuffersPass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    // Post-order: inner loops first, so an outer loop sees their results
    // already replaced by their initial buffers.
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops) {
      auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
      SmallVector<unsigned> carried;
      for (unsigned i = 0; i < loop.getNumResults(); ++i)
        if (isa<MemRefType>(loop.getResult(i).getType()) &&
            yield.getOperand(i) == loop.getRegionIterArg(i))
          carried.push_back(i);
      if (carried.empty())
        continue;
      // Uses of the carried buffer (inside) and of the loop's result
      // (after it) become uses of the initial buffer.
      for (unsigned i : carried) {
        Value init = loop.getInitArgs()[i];
        loop.getRegionIterArg(i).replaceAllUsesWith(init);
        loop.getResult(i).replaceAllUsesWith(init);
      }
      // A loop without them.
      SmallVector<Value> inits;
      SmallVector<unsigned> kept;
      for (unsigned i = 0; i < loop.getNumResults(); ++i)
        if (!llvm::is_contained(carried, i)) {
          kept.push_back(i);
          inits.push_back(loop.getInitArgs()[i]);
        }
      OpBuilder b(loop);
      auto slim = scf::ForOp::create(b, loop.getLoc(), loop.getLowerBound(),
                                     loop.getUpperBound(), loop.getStep(),
                                     inits);
      slim->setAttrs(loop->getAttrs());
      Block *body = slim.getBody();
      // The new body: the old one's ops, with the induction variable and
      // the kept iter_args remapped.
      if (!body->empty())
        body->getTerminator()->erase();
      body->getOperations().splice(body->end(),
                                   loop.getBody()->getOperations());
      loop.getInductionVar().replaceAllUsesWith(slim.getInductionVar());
      for (auto [n, i] : llvm::enumerate(kept)) {
        loop.getRegionIterArg(i).replaceAllUsesWith(slim.getRegionIterArg(n));
        loop.getResult(i).replaceAllUsesWith(slim.getResult(n));
      }
      auto oldYield = cast<scf::YieldOp>(body->getTerminator());
      SmallVector<Value> yields;
      for (unsigned i : kept)
        yields.push_back(oldYield.getOperand(i));
      OpBuilder yb(oldYield);
      scf::YieldOp::create(yb, oldYield.getLoc(), yields);
      oldYield.erase();
      loop.erase();
    }
  }
};
} // namespace
