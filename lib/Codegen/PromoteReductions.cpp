//===- PromoteReductions.cpp - reduction accumulators in registers --------===//

#include "distopt/Codegen/Passes.h"

#include "BufferAccess.h"
#include "distopt/Codegen/Accumulators.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace distopt {
#define GEN_PASS_DEF_PROMOTEREDUCTIONSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using distopt::Accumulator;
using distopt::findAccumulators;
using distopt::sameElementEachIteration;

namespace {

/// Allows reordering of a float add or multiply that combines the
/// accumulator with the loop's values.
void markReassociable(Value stored, Value accumulator) {
  Operation *def = stored.getDefiningOp();
  if (!def || !llvm::is_contained(def->getOperands(), accumulator))
    return;
  auto withReassoc = [](arith::FastMathFlags f) {
    return f | arith::FastMathFlags::reassoc;
  };
  if (auto add = dyn_cast<arith::AddFOp>(def))
    add.setFastmath(withReassoc(add.getFastmath()));
  else if (auto mul = dyn_cast<arith::MulFOp>(def))
    mul.setFastmath(withReassoc(mul.getFastmath()));
}

void promote(scf::ForOp loop, MutableArrayRef<Accumulator> accs) {
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  SmallVector<Value> inits;
  for (Accumulator &acc : accs)
    inits.push_back(memref::LoadOp::create(b, loc, acc.load.getMemRef(),
                                           acc.load.getIndices()));
  auto newLoop =
      scf::ForOp::create(b, loc, loop.getLowerBound(), loop.getUpperBound(),
                         loop.getStep(), inits);
  Block *newBody = newLoop.getBody();
  Block *oldBody = loop.getBody();
  // scf.for's builder gives a body with a terminator only without iter_args.
  if (!newBody->empty())
    newBody->getTerminator()->erase();
  loop.getInductionVar().replaceAllUsesWith(newLoop.getInductionVar());
  newBody->getOperations().splice(newBody->end(), oldBody->getOperations());
  SmallVector<Value> yields;
  for (auto [i, acc] : llvm::enumerate(accs)) {
    Value carried = newLoop.getRegionIterArgs()[i];
    acc.load.getResult().replaceAllUsesWith(carried);
    markReassociable(acc.store.getValueToStore(), carried);
    yields.push_back(acc.store.getValueToStore());
  }
  Operation *oldYield = newBody->getTerminator();
  b.setInsertionPoint(oldYield);
  scf::YieldOp::create(b, loc, yields);
  oldYield->erase();
  b.setInsertionPointAfter(newLoop);
  for (auto [i, acc] : llvm::enumerate(accs)) {
    memref::StoreOp::create(b, loc, newLoop.getResult(i),
                            acc.store.getMemRef(), acc.store.getIndices());
    acc.store->erase();
    acc.load->erase();
  }
  loop->erase();
}

/// Moves loads that read the same element on every iteration (a row's
/// maximum, sum or mean in the loop over the row) above `loop`, when the
/// loop writes no buffer they could read. LLVM cannot do it: it does not
/// know that the output written in the loop is another buffer, so it
/// reloads the value per element (and vectorises only behind run-time
/// overlap checks).
void hoistInvariantLoads(scf::ForOp loop) {
  SmallVector<Value> written;
  bool unknownEffects = false;
  loop.getBody()->walk([&](Operation *op) {
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      distopt::Access a;
      if (!distopt::resolveAccess(store.getMemRef(), store.getIndices(), a))
        unknownEffects = true;
      written.push_back(a.base);
    } else if (distopt::hasOpaqueMemoryEffects(op)) {
      unknownEffects = true;
    }
  });
  if (unknownEffects)
    return;
  SmallVector<memref::LoadOp> loads;
  for (Operation &op : loop.getBody()->without_terminator())
    if (auto load = dyn_cast<memref::LoadOp>(op))
      if (sameElementEachIteration(loop, load.getMemRef(), load.getIndices()))
        loads.push_back(load);
  for (memref::LoadOp load : loads) {
    distopt::Access a;
    if (!distopt::resolveAccess(load.getMemRef(), load.getIndices(), a) ||
        llvm::is_contained(written, a.base))
      continue;
    load->moveBefore(loop);
  }
}

struct PromoteReductionsPass
    : distopt::impl::PromoteReductionsPassBase<PromoteReductionsPass> {
  void runOnOperation() override {
    // Innermost loops first: once a reduction loop is promoted, its
    // enclosing loop sees a load and a store per iteration of its own,
    // at indices that change with it, and leaves them alone.
    SmallVector<scf::ForOp> loops;
    getOperation().walk<WalkOrder::PostOrder>([&](scf::ForOp loop) {
      if (loop.getNumRegionIterArgs() == 0)
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops) {
      hoistInvariantLoads(loop);
      SmallVector<Accumulator> accs = findAccumulators(loop);
      if (!accs.empty())
        promote(loop, accs);
    }
  }
};

} // namespace
