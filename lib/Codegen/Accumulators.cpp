//===- Accumulators.cpp - reduction accumulators of a loop ----------------===//

#include "distopt/Codegen/Accumulators.h"

#include "BufferAccess.h"

using namespace mlir;
using distopt::Accumulator;

bool distopt::sameElementEachIteration(scf::ForOp loop, Value memref,
                              ValueRange indices) {
  return loop.isDefinedOutsideOfLoop(memref) &&
         llvm::all_of(indices,
                      [&](Value v) { return loop.isDefinedOutsideOfLoop(v); });
}

SmallVector<Accumulator> distopt::findUpdates(Block *body, Operation *scope) {
  SmallVector<memref::StoreOp> stores;
  bool unknownEffects = false;
  body->walk([&](Operation *op) {
    if (auto store = dyn_cast<memref::StoreOp>(op))
      stores.push_back(store);
    else if (distopt::hasOpaqueMemoryEffects(op))
      unknownEffects = true;
  });
  if (unknownEffects || stores.empty())
    return {};
  SmallVector<Accumulator> found;
  for (memref::StoreOp store : stores) {
    Value buffer = store.getMemRef();
    if (store->getBlock() != body ||
        scope->isAncestor(buffer.getParentBlock()->getParentOp()))
      return {};
    memref::LoadOp load;
    for (Operation *user : buffer.getUsers()) {
      if (user == store || !scope->isAncestor(user))
        continue;
      auto l = dyn_cast<memref::LoadOp>(user);
      // The element must be the only thing of this buffer the loops read,
      // read once, before the store, in the body itself.
      if (!l || load || l->getBlock() != body ||
          !l->isBeforeInBlock(store) || l.getIndices() != store.getIndices())
        return {};
      load = l;
    }
    if (!load)
      return {};
    found.push_back({load, store});
  }
  return found;
}

SmallVector<Accumulator> distopt::findAccumulators(scf::ForOp loop) {
  SmallVector<Accumulator> found = findUpdates(loop.getBody(), loop);
  for (Accumulator &acc : found)
    if (!sameElementEachIteration(loop, acc.store.getMemRef(),
                                  acc.store.getIndices()))
      return {};
  return found;
}
