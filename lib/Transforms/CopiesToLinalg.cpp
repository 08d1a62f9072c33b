//===- CopiesToLinalg.cpp - memref.copy as linalg.copy --------------------===//

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_COPIESTOLINALGPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {
struct CopiesToLinalgPass
    : distopt::impl::CopiesToLinalgPassBase<CopiesToLinalgPass> {
  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (memref::CopyOp copy : copies) {
      auto src = dyn_cast<MemRefType>(copy.getSource().getType());
      auto dst = dyn_cast<MemRefType>(copy.getTarget().getType());
      // Ranked memrefs of one static shape and element type; anything
      // else stays a memref.copy.
      if (!src || !dst || !src.hasStaticShape() ||
          src.getShape() != dst.getShape() ||
          src.getElementType() != dst.getElementType() || src.getRank() == 0)
        continue;
      OpBuilder b(copy);
      linalg::CopyOp::create(b, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      copy.erase();
    }
  }
};
} // namespace
