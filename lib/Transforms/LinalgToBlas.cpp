//===- LinalgToBlas.cpp - linalg matmuls on buffers -> BLAS calls ---------===//

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/SymbolTable.h"

namespace distopt {
#define GEN_PASS_DEF_LINALGTOBLASPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// transA/transB of a (batch_)matmul from its indexing maps; std::nullopt
/// for layouts other than plain or transposed operands. In a batch_matmul,
/// A or B may lack the batch dimension (one matrix shared by every item).
std::optional<std::pair<bool, bool>> transposes(linalg::LinalgOp op,
                                                unsigned batchDims) {
  MLIRContext *ctx = op->getContext();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (maps.size() != 3)
    return std::nullopt;
  unsigned n = batchDims + 3;
  SmallVector<AffineExpr> batch;
  for (unsigned i = 0; i < batchDims; ++i)
    batch.push_back(getAffineDimExpr(i, ctx));
  AffineExpr m = getAffineDimExpr(batchDims, ctx),
             nn = getAffineDimExpr(batchDims + 1, ctx),
             k = getAffineDimExpr(batchDims + 2, ctx);
  auto make = [&](AffineExpr a, AffineExpr b, bool shared = false) {
    SmallVector<AffineExpr> e;
    if (!shared)
      e.append(batch);
    e.push_back(a);
    e.push_back(b);
    return AffineMap::get(n, 0, e, ctx);
  };
  if (maps[2] != make(m, nn))
    return std::nullopt;
  // Plain, transposed, or (batched only) either of them shared.
  auto orientation = [&](AffineMap map, AffineExpr r,
                         AffineExpr c) -> std::optional<bool> {
    for (bool shared : {false, true}) {
      if (shared && batchDims == 0)
        break;
      if (map == make(r, c, shared))
        return false;
      if (map == make(c, r, shared))
        return true;
    }
    return std::nullopt;
  };
  std::optional<bool> ta = orientation(maps[0], m, k);
  std::optional<bool> tb = orientation(maps[1], k, nn);
  if (!ta || !tb)
    return std::nullopt;
  return std::make_pair(*ta, *tb);
}

struct LinalgToBlasPass
    : distopt::impl::LinalgToBlasPassBase<LinalgToBlasPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<linalg::LinalgOp> candidates;
    module.walk([&](linalg::LinalgOp op) {
      if (isa<linalg::MatmulOp, linalg::BatchMatmulOp>(op) &&
          op.hasPureBufferSemantics())
        candidates.push_back(op);
    });
    for (linalg::LinalgOp op : candidates)
      rewrite(op);
  }

  void rewrite(linalg::LinalgOp op) {
    unsigned batchDims = isa<linalg::BatchMatmulOp>(op) ? 1 : 0;
    auto cType = cast<MemRefType>(op.getDpsInits()[0].getType());
    Type elt = cType.getElementType();
    if (!elt.isF32() && !elt.isF64())
      return;
    for (Value v : op->getOperands())
      if (cast<MemRefType>(v.getType()).getElementType() != elt)
        return;
    std::optional<std::pair<bool, bool>> t = transposes(op, batchDims);
    if (!t)
      return;
    OpBuilder b(op);
    Location loc = op.getLoc();
    int64_t rank = 2 + batchDims;
    SmallVector<int64_t> dyn(rank, ShapedType::kDynamic);
    auto layout = StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                                         dyn);
    auto genericType = MemRefType::get(dyn, elt, layout);
    std::string name = std::string(batchDims ? "dort_batch_matmul_"
                                             : "dort_matmul_") +
                       (elt.isF32() ? "f32" : "f64");
    func::FuncOp callee = declare(name, genericType, elt);
    SmallVector<Value> args;
    for (Value v : op->getOperands()) {
      // A shared operand becomes a batch of one, which the kernel
      // broadcasts.
      auto type = cast<MemRefType>(v.getType());
      if (type.getRank() < rank)
        v = memref::ExpandShapeOp::create(
            b, loc, SmallVector<int64_t>{1, type.getDimSize(0), type.getDimSize(1)},
            v, SmallVector<ReassociationIndices>{{0, 1}, {2}});
      args.push_back(memref::CastOp::create(b, loc, genericType, v));
    }
    args.push_back(arith::ConstantIntOp::create(b, loc, t->first, 32));
    args.push_back(arith::ConstantIntOp::create(b, loc, t->second, 32));
    // alpha = 1, beta = 1: the product is added to the accumulator (a
    // partial sum). When the accumulator was just zero-filled, the fill
    // goes and beta = 0: BLAS writes C without reading it.
    Value one = arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 1.0));
    linalg::FillOp zeroFill = precedingZeroFill(op);
    args.push_back(one);
    args.push_back(zeroFill ? arith::ConstantOp::create(
                                  b, loc, b.getFloatAttr(elt, 0.0))
                                  .getResult()
                            : one);
    if (zeroFill)
      zeroFill->erase();
    func::CallOp::create(b, loc, callee, args);
    op->erase();
  }

  /// The buffer a view (subview, reshape, cast) looks into.
  static Value rootBuffer(Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (isa<memref::SubViewOp, memref::CollapseShapeOp,
              memref::ExpandShapeOp, memref::CastOp,
              memref::ReinterpretCastOp>(def))
        v = def->getOperand(0);
      else
        break;
    }
    return v;
  }

  /// A linalg.fill of zero into all of op's accumulator, with nothing that
  /// touches memory between the two; null otherwise.
  static linalg::FillOp precedingZeroFill(linalg::LinalgOp op) {
    Value c = op.getDpsInits()[0];
    auto cType = cast<MemRefType>(c.getType());
    for (Operation *prev = op->getPrevNode(); prev;
         prev = prev->getPrevNode()) {
      auto fill = dyn_cast<linalg::FillOp>(prev);
      if (!fill) {
        if (isMemoryEffectFree(prev))
          continue;
        return nullptr;
      }
      if (!matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
        return nullptr;
      // The fill must cover C: fill C itself, or fill all of the buffer C
      // is all of.
      Value filled = fill.getDpsInits()[0], root = rootBuffer(c);
      if (filled == c)
        return fill;
      auto fType = dyn_cast<MemRefType>(filled.getType());
      auto rType = dyn_cast<MemRefType>(root.getType());
      if (!fType || !rType || !fType.hasStaticShape() ||
          !rType.hasStaticShape() || !cType.hasStaticShape() ||
          rootBuffer(filled) != root ||
          fType.getNumElements() != rType.getNumElements() ||
          cType.getNumElements() != rType.getNumElements())
        return nullptr;
      return fill;
    }
    return nullptr;
  }

  func::FuncOp declare(StringRef name, MemRefType memrefType, Type elt) {
    ModuleOp module = getOperation();
    if (auto f = module.lookupSymbol<func::FuncOp>(name))
      return f;
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    Type i32 = b.getI32Type();
    auto type = b.getFunctionType(
        {memrefType, memrefType, memrefType, i32, i32, elt, elt}, {});
    auto f = func::FuncOp::create(b, module.getLoc(), name, type);
    f.setPrivate();
    f->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    return f;
  }
};

} // namespace
