//===- FuseParallelLoops.cpp - row-wise fusion of sibling parallel loops --===//
//
// Softmax is four loop nests over the same rows (max, exp, sum, divide),
// layer norm five: each reads and writes whole tensors, so the data makes
// four or five trips through the caches. Fused over the rows, each row is
// loaded once and stays in L1 for all steps.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "BufferAccess.h"
#include "LoopSplit.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Dominance.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace distopt {
#define GEN_PASS_DEF_FUSEPARALLELLOOPSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using distopt::Access;
using distopt::resolveAccess;

namespace {

/// The memory accesses in `loop`; false when it has effects other than
/// loads and stores, or accesses through views `resolve` does not follow.
bool collectAccesses(scf::ParallelOp loop, SmallVectorImpl<Access> &out) {
  bool ok = true;
  loop.getBody()->walk([&](Operation *op) {
    Access a;
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      a.write = false;
      ok &= resolveAccess(load.getMemRef(), load.getIndices(), a);
    } else if (auto store = dyn_cast<memref::StoreOp>(op)) {
      a.write = true;
      ok &= resolveAccess(store.getMemRef(), store.getIndices(), a);
    } else {
      if (distopt::hasOpaqueMemoryEffects(op))
        ok = false;
      return;
    }
    out.push_back(std::move(a));
  });
  return ok;
}

/// Leading dimensions of the two loops with the same bounds and steps.
unsigned commonDims(scf::ParallelOp a, scf::ParallelOp b) {
  unsigned d = 0;
  auto same = [](Value x, Value y) {
    if (x == y)
      return true;
    std::optional<int64_t> cx = getConstantIntValue(x), cy = getConstantIntValue(y);
    return cx && cy && *cx == *cy;
  };
  while (d < a.getNumLoops() && d < b.getNumLoops() &&
         same(a.getLowerBound()[d], b.getLowerBound()[d]) &&
         same(a.getUpperBound()[d], b.getUpperBound()[d]) &&
         same(a.getStep()[d], b.getStep()[d]))
    ++d;
  return d;
}

/// Whether iteration i of the first `dims` dimensions of `first` and
/// iteration j of `second` touch disjoint data whenever i != j: every pair
/// of accesses to one buffer, one of them a write, indexes some dimension of
/// the buffer by the d-th induction variable of each loop, for every d.
/// Different buffers never overlap (see BufferAccess.h).
bool rowLocal(scf::ParallelOp first, ArrayRef<Access> a, scf::ParallelOp second,
              ArrayRef<Access> b, unsigned dims) {
  for (const Access &x : a)
    for (const Access &y : b) {
      if ((!x.write && !y.write) || x.base != y.base)
        continue;
      for (unsigned d = 0; d < dims; ++d) {
        Value ivX = first.getInductionVars()[d];
        Value ivY = second.getInductionVars()[d];
        bool separated = false;
        for (auto [p, ix] : llvm::enumerate(x.indices))
          if (ix == ivX && p < y.indices.size() && y.indices[p] == ivY)
            separated = true;
        if (!separated)
          return false;
      }
    }
  return true;
}

struct FuseParallelLoopsPass
    : distopt::impl::FuseParallelLoopsPassBase<FuseParallelLoopsPass> {
  void runOnOperation() override {
    if (getOperation().isExternal())
      return;
    Block &block = getOperation().getBody().front();
    scf::ParallelOp current;
    for (Operation *op = &block.front(); op;) {
      Operation *next = op->getNextNode();
      auto loop = dyn_cast<scf::ParallelOp>(op);
      if (!loop || loop.getNumResults() != 0) {
        // Pure ops between two loops (views, constants) do not end a run:
        // they move above the loop being fused into.
        if (!current || !movableBetween(op))
          current = nullptr;
        op = next;
        continue;
      }
      if (current)
        if (scf::ParallelOp fused = tryFuse(current, loop)) {
          current = fused;
          op = next;
          continue;
        }
      current = loop;
      op = next;
    }
  }

  /// Ops that may sit between two loops being fused (they move above the
  /// first): pure ops without regions, and allocations of fresh buffers
  /// (bufferization puts a buffer's allocation right before its first
  /// writer).
  static bool movableBetween(Operation *op) {
    if (op->getNumRegions() != 0)
      return false;
    return isMemoryEffectFree(op) || isa<memref::AllocOp, memref::AllocaOp>(op);
  }

  /// Fuses `second` into `first` over their common rows; the fused loop,
  /// or null when they cannot be fused.
  scf::ParallelOp tryFuse(scf::ParallelOp first, scf::ParallelOp second) {
    unsigned dims = commonDims(first, second);
    if (dims == 0)
      return nullptr;
    SmallVector<Access> a, b;
    if (!collectAccesses(first, a) || !collectAccesses(second, b))
      return nullptr;
    while (dims > 0 && !rowLocal(first, a, second, b, dims))
      --dims;
    if (dims == 0)
      return nullptr;
    // Ops between the loops must be movable above `first`.
    SmallVector<Operation *> between;
    for (Operation *op = first->getNextNode(); op != second;
         op = op->getNextNode()) {
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (def == first.getOperation() || first->isAncestor(def) ||
              (def->getBlock() == first->getBlock() &&
               first->isBeforeInBlock(def) && !llvm::is_contained(between, def)))
            return nullptr;
      between.push_back(op);
    }
    for (Operation *op : between)
      op->moveBefore(first);
    first = distopt::splitParallelLoop(first, dims,
                                       distopt::InnerLoops::Parallel);
    second = distopt::splitParallelLoop(second, dims,
                                        distopt::InnerLoops::Parallel);
    Block *into = first.getBody();
    for (unsigned d = 0; d < dims; ++d)
      second.getInductionVars()[d].replaceAllUsesWith(
          first.getInductionVars()[d]);
    Operation *terminator = into->getTerminator();
    SmallVector<Operation *> moved;
    for (Operation &op : second.getBody()->without_terminator())
      moved.push_back(&op);
    for (Operation *op : moved)
      op->moveBefore(terminator);
    second.erase();
    return first;
  }
};

} // namespace
