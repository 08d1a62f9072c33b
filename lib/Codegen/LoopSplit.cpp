//===- LoopSplit.cpp - split an scf.parallel into outer and inner loops ---===//

#include "LoopSplit.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;

scf::ParallelOp distopt::splitParallelLoop(scf::ParallelOp op, unsigned outer,
                                           InnerLoops inner) {
  unsigned n = op.getNumLoops();
  if (outer >= n)
    return op;
  OpBuilder b(op);
  Location loc = op.getLoc();
  IRMapping map;
  scf::ParallelOp outerLoop;
  if (outer > 0) {
    outerLoop = scf::ParallelOp::create(
        b, loc, op.getLowerBound().take_front(outer),
        op.getUpperBound().take_front(outer), op.getStep().take_front(outer));
    for (unsigned d = 0; d < outer; ++d)
      map.map(op.getInductionVars()[d], outerLoop.getInductionVars()[d]);
    b.setInsertionPoint(outerLoop.getBody()->getTerminator());
  }
  if (inner == InnerLoops::Parallel) {
    auto innerLoop = scf::ParallelOp::create(
        b, loc, op.getLowerBound().drop_front(outer),
        op.getUpperBound().drop_front(outer), op.getStep().drop_front(outer));
    for (unsigned d = outer; d < n; ++d)
      map.map(op.getInductionVars()[d], innerLoop.getInductionVars()[d - outer]);
    b.setInsertionPoint(innerLoop.getBody()->getTerminator());
  } else {
    for (unsigned d = outer; d < n; ++d) {
      auto loop = scf::ForOp::create(b, loc, op.getLowerBound()[d],
                                     op.getUpperBound()[d], op.getStep()[d]);
      map.map(op.getInductionVars()[d], loop.getInductionVar());
      b.setInsertionPoint(loop.getBody()->getTerminator());
    }
  }
  for (Operation &nested : op.getBody()->without_terminator())
    b.clone(nested, map);
  op.erase();
  return outerLoop;
}
