//===- LinalgToBlas.cpp - linalg matmuls on buffers -> BLAS calls ---------===//

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace distopt {
#define GEN_PASS_DEF_LINALGTOBLASPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// transA/transB of a (batch_)matmul from its indexing maps; std::nullopt
/// for layouts other than plain or transposed operands.
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
  auto make = [&](AffineExpr a, AffineExpr b) {
    SmallVector<AffineExpr> e(batch);
    e.push_back(a);
    e.push_back(b);
    return AffineMap::get(n, 0, e, ctx);
  };
  if (maps[2] != make(m, nn))
    return std::nullopt;
  bool ta, tb;
  if (maps[0] == make(m, k))
    ta = false;
  else if (maps[0] == make(k, m))
    ta = true;
  else
    return std::nullopt;
  if (maps[1] == make(k, nn))
    tb = false;
  else if (maps[1] == make(nn, k))
    tb = true;
  else
    return std::nullopt;
  return std::make_pair(ta, tb);
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
    for (Value v : op->getOperands())
      args.push_back(memref::CastOp::create(b, loc, genericType, v));
    args.push_back(arith::ConstantIntOp::create(b, loc, t->first, 32));
    args.push_back(arith::ConstantIntOp::create(b, loc, t->second, 32));
    // alpha = 1, beta = 1: the accumulator was zero-filled (or holds a
    // partial sum) and the product is added to it.
    Value one = arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 1.0));
    args.push_back(one);
    args.push_back(one);
    func::CallOp::create(b, loc, callee, args);
    op->erase();
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
