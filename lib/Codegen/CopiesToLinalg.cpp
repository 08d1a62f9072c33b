//===- CopiesToLinalg.cpp - memref.copy as linalg.copy --------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/IR/Builders.h"

#include <numeric>

namespace distopt {
#define GEN_PASS_DEF_COPIESTOLINALGPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {
struct CopiesToLinalgPass
    : distopt::impl::CopiesToLinalgPassBase<CopiesToLinalgPass> {
  using CopiesToLinalgPassBase::CopiesToLinalgPassBase;

  /// Whether `a` and `b` are the same view: one value, or identical view
  /// ops (same op, operands and attributes) of the same views.
  static bool sameView(Value a, Value b) {
    if (a == b)
      return true;
    Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
    if (!x || !y || !isa<ViewLikeOpInterface>(x) ||
        x->getName() != y->getName() ||
        x->getNumOperands() != y->getNumOperands() ||
        x->getAttrDictionary() != y->getAttrDictionary() ||
        x->getPropertiesAsAttribute() != y->getPropertiesAsAttribute() ||
        a.getType() != b.getType() ||
        cast<OpResult>(a).getResultNumber() !=
            cast<OpResult>(b).getResultNumber())
      return false;
    for (auto [p, q] : llvm::zip(x->getOperands(), y->getOperands()))
      if (!sameView(p, q))
        return false;
    return true;
  }

  /// Whether `t` is a buffer a memref.copy moves with one memcpy
  /// (contiguous, static shape, whole bytes per element) of at most
  /// memcpy-max-bytes.
  bool isSmallContiguous(MemRefType t) const {
    Type e = t.getElementType();
    if (!e.isIntOrFloat() || e.getIntOrFloatBitWidth() % 8 != 0 ||
        !memref::isStaticShapeAndContiguousRowMajor(t))
      return false;
    return t.getNumElements() * (e.getIntOrFloatBitWidth() / 8) <=
           memcpyMaxBytes;
  }

  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (memref::CopyOp copy : copies) {
      // Bufferization leaves copies of a buffer onto itself (an in-place
      // result written back through a second, identical view): nothing to
      // do, and as a loop it would be a whole pass over memory.
      if (sameView(copy.getSource(), copy.getTarget())) {
        copy.erase();
        continue;
      }
      auto src = dyn_cast<MemRefType>(copy.getSource().getType());
      auto dst = dyn_cast<MemRefType>(copy.getTarget().getType());
      // Ranked memrefs of one static shape and element type; anything
      // else stays a memref.copy.
      if (!src || !dst || !src.hasStaticShape() ||
          src.getShape() != dst.getShape() ||
          src.getElementType() != dst.getElementType() || src.getRank() == 0)
        continue;
      if (memcpyMaxBytes > 0 && isSmallContiguous(src) &&
          isSmallContiguous(dst))
        continue;
      OpBuilder b(copy);
      Value source = copy.getSource(), target = copy.getTarget();
      // Between two contiguous buffers, over one dimension: a [M, C, 3, 3]
      // copy's 3x3 loops would be unrolled away by LLVM and the loop around
      // them vectorized strided by 9 (AVX-512 gathers and scatters: 11% of
      // a ResNet-18 training step on the CPU).
      if (src.getRank() > 1 && src.getLayout().isIdentity() &&
          dst.getLayout().isIdentity()) {
        ReassociationIndices all(src.getRank());
        std::iota(all.begin(), all.end(), 0);
        source = memref::CollapseShapeOp::create(b, copy.getLoc(), source,
                                                 ArrayRef{all});
        target = memref::CollapseShapeOp::create(b, copy.getLoc(), target,
                                                 ArrayRef{all});
      }
      linalg::CopyOp::create(b, copy.getLoc(), source, target);
      copy.erase();
    }
  }
};
} // namespace
