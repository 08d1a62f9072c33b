//===- DropInPlaceResults.cpp - results written into argument buffers ---===//

#include "distopt/Codegen/Passes.h"

#include "FunctionBody.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/BitVector.h"

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
        // Bufferization wrote it elsewhere: into the argument now, after
        // every read of the old value (the function's last op).
        OpBuilder b(ret);
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
