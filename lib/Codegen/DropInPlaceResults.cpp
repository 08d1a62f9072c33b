//===- DropInPlaceResults.cpp - results written into argument buffers ---===//

#include "distopt/Codegen/Passes.h"

#include "FunctionBody.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace distopt {
#define GEN_PASS_DEF_DROPINPLACERESULTSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

/// The memref `v` is a view of, through casts and reshapes (which keep an
/// identity-layout buffer's elements where they are).
Value viewedBuffer(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<memref::CastOp, memref::ExpandShapeOp, memref::CollapseShapeOp>(
            def))
      break;
    v = def->getOperand(0);
  }
  return v;
}

/// The buffer behind `v`: up through every view.
Value rootBuffer(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view)
      break;
    v = view.getViewSource();
  }
  return v;
}

/// The last op of `block` (before its terminator) that may touch `root`'s
/// memory: its definition, a user of it or of anything a user makes (views,
/// loop results, an asynchronous collective's handle that a later wait
/// takes), taken at its ancestor in `block`; null when none.
Operation *lastToucher(Value root, Block *block) {
  Operation *last = nullptr;
  if (Operation *def = root.getDefiningOp())
    last = block->findAncestorOpInBlock(*def);
  SmallVector<Value> work{root};
  llvm::SmallPtrSet<Value, 16> seen{root};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      Operation *at = block->findAncestorOpInBlock(*user);
      if (!at || at == block->getTerminator())
        continue;
      if (!last || last->isBeforeInBlock(at))
        last = at;
      for (Value r : user->getResults())
        if (seen.insert(r).second)
          work.push_back(r);
    }
  }
  return last;
}

struct DropInPlaceResultsPass
    : distopt::impl::DropInPlaceResultsPassBase<DropInPlaceResultsPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func::ReturnOp ret = distopt::singleBlockReturn(func);
    if (!ret)
      return;
    llvm::BitVector dropped(func.getNumResults());
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      auto of = func.getResultAttrOfType<IntegerAttr>(r, "dopt.in_place_of");
      if (!of)
        continue;
      Value arg = func.getArgument(of.getInt());
      Value value = ret.getOperand(r);
      if (value.getType() != arg.getType()) {
        func.emitError("internal error: result ")
            << r << " of type " << value.getType()
            << " cannot be written in place of argument " << of.getInt()
            << " of type " << arg.getType();
        return signalPassFailure();
      }
      if (viewedBuffer(value) != arg) {
        // Bufferization wrote it elsewhere: into the argument after the
        // last op touching either (every read of the old value, every
        // write of the new), so that its buffer is free from there.
        Block *block = ret->getBlock();
        Operation *after = nullptr;
        for (Value root : {value, rootBuffer(value), Value(arg)})
          if (Operation *op = lastToucher(root, block))
            if (!after || after->isBeforeInBlock(op))
              after = op;
        OpBuilder b(ret);
        if (after)
          b.setInsertionPointAfter(after);
        else
          b.setInsertionPointToStart(block);
        memref::CopyOp::create(b, ret.getLoc(), value, arg);
      }
      dropped.set(r);
    }
    if (dropped.none())
      return;
    ret->eraseOperands(dropped);
    if (failed(func.eraseResults(dropped))) {
      func.emitError("internal error: cannot remove the in-place results");
      return signalPassFailure();
    }
  }
};

} // namespace
