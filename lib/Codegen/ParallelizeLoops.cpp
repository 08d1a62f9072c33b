//===- ParallelizeLoops.cpp - one level of coarse loop parallelism --------===//
//
// convert-linalg-to-parallel-loops makes every parallel dimension of every
// linalg op an scf.parallel dimension. Handed to convert-scf-to-openmp as
// is, that forks threads for tiny loops, forks again inside forked loops,
// and work-shares the innermost dimension that LLVM should vectorise. This
// pass keeps one level: the few leading dimensions of a big enough nest.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "LoopSplit.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <limits>

namespace distopt {
#define GEN_PASS_DEF_PARALLELIZELOOPSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

constexpr int64_t kUnknown = -1;

/// Iterations of a loop dimension, or kUnknown when a bound is not constant.
int64_t tripCount(Value lb, Value ub, Value step) {
  std::optional<int64_t> l = getConstantIntValue(lb);
  std::optional<int64_t> u = getConstantIntValue(ub);
  std::optional<int64_t> s = getConstantIntValue(step);
  if (!l || !u || !s || *s <= 0)
    return kUnknown;
  return *u <= *l ? 0 : (*u - *l + *s - 1) / *s;
}

SmallVector<int64_t> tripCounts(scf::ParallelOp op) {
  SmallVector<int64_t> trips;
  for (auto [lb, ub, step] : llvm::zip(op.getLowerBound(), op.getUpperBound(),
                                       op.getStep()))
    trips.push_back(tripCount(lb, ub, step));
  return trips;
}

int64_t saturatingMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  if (a > std::numeric_limits<int64_t>::max() / b)
    return std::numeric_limits<int64_t>::max();
  return a * b;
}

int64_t saturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b
             ? std::numeric_limits<int64_t>::max()
             : a + b;
}

/// Operations a block executes, counting loop bodies once per iteration.
/// A loop with a non-constant trip count counts once per op of its body
/// (so it never makes a nest look big).
int64_t work(Block &block) {
  int64_t total = 0;
  for (Operation &op : block) {
    int64_t inner = 0;
    for (Region &r : op.getRegions())
      for (Block &b : r)
        inner = saturatingAdd(inner, work(b));
    int64_t trips = 1;
    if (auto f = dyn_cast<scf::ForOp>(op)) {
      int64_t t = tripCount(f.getLowerBound(), f.getUpperBound(), f.getStep());
      trips = t == kUnknown ? 1 : t;
    } else if (auto p = dyn_cast<scf::ParallelOp>(op)) {
      for (int64_t t : tripCounts(p))
        trips = saturatingMul(trips, t == kUnknown ? 1 : t);
    }
    total = saturatingAdd(total, saturatingMul(trips, std::max<int64_t>(
                                                          inner, 1)));
  }
  return total;
}

bool containsLoops(scf::ParallelOp op) {
  return op.getBody()
      ->walk([](Operation *o) {
        return isa<scf::ForOp, scf::ParallelOp, scf::WhileOp>(o)
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

struct ParallelizeLoopsPass
    : distopt::impl::ParallelizeLoopsPassBase<ParallelizeLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    // Post-order: nested loops come before the loops that hold them, so a
    // loop is rewritten only after everything inside it.
    SmallVector<scf::ParallelOp> loops;
    getOperation().walk<WalkOrder::PostOrder>(
        [&](scf::ParallelOp op) { loops.push_back(op); });
    for (scf::ParallelOp op : loops) {
      // Loops that combine values (reductions) are left to
      // convert-scf-to-openmp; linalg lowers reductions to scf.for.
      if (op.getNumResults() != 0)
        continue;
      if (op->getParentOfType<scf::ParallelOp>()) {
        distopt::splitParallelLoop(op, 0, distopt::InnerLoops::Sequential);
        continue;
      }
      SmallVector<int64_t> trips = tripCounts(op);
      unsigned keep = chooseParallelDims(op, trips);
      distopt::splitParallelLoop(op, keep, distopt::InnerLoops::Sequential);
    }
  }

  /// How many leading dimensions of an outermost loop stay parallel.
  unsigned chooseParallelDims(scf::ParallelOp op, ArrayRef<int64_t> trips) {
    if (llvm::is_contained(trips, kUnknown))
      return 0;
    int64_t nestWork = 1;
    for (int64_t t : trips)
      nestWork = saturatingMul(nestWork, t);
    nestWork = saturatingMul(nestWork, std::max<int64_t>(work(*op.getBody()), 1));
    if (nestWork < minWork)
      return 0;
    // The innermost dimension of an innermost loop stays sequential: it is
    // the loop LLVM vectorises (unless it is the only one).
    unsigned maxKeep = op.getNumLoops();
    if (maxKeep > 1 && !containsLoops(op))
      --maxKeep;
    unsigned keep = 1;
    int64_t chunks = trips[0];
    while (keep < maxKeep && chunks < minChunks)
      chunks = saturatingMul(chunks, trips[keep++]);
    return chunks < 2 ? 0 : keep;
  }
};

} // namespace
