//===- CheckIndices.cpp - dopt.check_indices -> a reduction + runtime call -===//
//
// dopt.check_indices becomes, at tensor level:
//   1. a reduction over the indices to the flat position of the first index
//      out of range (INT64_MAX when none): per row, then over the rows;
//   2. a two-element tensor [position, the index there], one linalg.generic
//      of two iterations reading the indices at that position;
//   3. a call of the runtime's
//        dort_index_fault(fault, shape, text, low, high)
//      (Kernels.h) on that tensor's buffer, the indices' shape and the
//      check's message (two constant globals in host memory), which records
//      a pending error when the position is not INT64_MAX.
// The indices pass through unchanged: the gathers and scatters they feed
// clamp them. On a GPU steps 1 and 2 are kernels and the runtime's CUDA
// twin copies the two values into pinned memory, read after the step.
//
//===----------------------------------------------------------------------===//

#include "DoptToLinalgInternal.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

using namespace mlir;
using namespace distopt;

namespace {

constexpr int64_t kNoFault = std::numeric_limits<int64_t>::max();

/// A dynamic 1-D strided memref of `elt`: how the runtime function takes
/// each of its buffers.
MemRefType anyStrided1D(Type elt) {
  return MemRefType::get(
      {ShapedType::kDynamic}, elt,
      StridedLayoutAttr::get(elt.getContext(), ShapedType::kDynamic,
                             {ShapedType::kDynamic}));
}

/// The ONNX node that an op came from: the first name in its location.
std::string nodeName(Location loc) {
  std::string name;
  loc->walk([&](Location l) {
    if (auto n = dyn_cast<NameLoc>(l)) {
      name = n.getName().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return name;
}

struct CheckIndicesPattern : OpConversionPattern<dopt::CheckIndicesOp> {
  CheckIndicesPattern(TypeConverter &converter, MLIRContext *ctx,
                      int64_t *checks)
      : OpConversionPattern(converter, ctx), checks(checks) {}
  int64_t *checks; // the pass's count of checks lowered (their globals' names)

  /// A private constant global named `name` holding `value` (of `type`), at
  /// the start of the module.
  static Value global(ConversionPatternRewriter &rewriter, Location loc,
                      ModuleOp module, StringRef name, MemRefType type,
                      DenseElementsAttr value) {
    {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(module.getBody());
      memref::GlobalOp::create(rewriter, loc, name,
                               rewriter.getStringAttr("private"), type, value,
                               /*constant=*/true, IntegerAttr());
    }
    Value g = memref::GetGlobalOp::create(rewriter, loc, type, name);
    return memref::CastOp::create(rewriter, loc,
                                  anyStrided1D(type.getElementType()), g);
  }

  LogicalResult
  matchAndRewrite(dopt::CheckIndicesOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value indices = adaptor.getIndices();
    auto it = cast<RankedTensorType>(indices.getType());
    int64_t rank = it.getRank(), n = it.getNumElements();
    if (n == 0) {
      rewriter.replaceOp(op, indices);
      return success();
    }
    auto module = op->getParentOfType<ModuleOp>();
    Type i64 = rewriter.getI64Type();
    int64_t extent = op.getExtent();
    int64_t low = op.getNegative() ? -extent : 0, high = extent - 1;
    std::optional<int64_t> ignore;
    if (IntegerAttr a = op.getIgnoreAttr())
      ignore = a.getInt();
    auto c64 = [&](OpBuilder &b, Location l, int64_t v) -> Value {
      return arith::ConstantOp::create(b, l, b.getI64IntegerAttr(v));
    };

    // 1. The flat position of the first index out of range: per row (the
    //    first dimension; rows in parallel, a block each on a GPU) when the
    //    indices have two or more dimensions, then over the rows.
    auto noFault = [&](ArrayRef<int64_t> shape) -> Value {
      return linalg::FillOp::create(
                 rewriter, loc, ValueRange{c64(rewriter, loc, kNoFault)},
                 ValueRange{tensor::EmptyOp::create(rewriter, loc, shape, i64)})
          .getResult(0);
    };
    bool perRow = rank >= 2;
    SmallVector<int64_t> partialShape;
    SmallVector<AffineExpr> partialExprs;
    SmallVector<utils::IteratorType> iters(rank,
                                           utils::IteratorType::reduction);
    if (perRow) {
      partialShape.push_back(it.getDimSize(0));
      partialExprs.push_back(getAffineDimExpr(0, ctx));
      iters[0] = utils::IteratorType::parallel;
    }
    Value partialInit = noFault(partialShape);
    SmallVector<AffineMap> maps = {
        AffineMap::getMultiDimIdentityMap(rank, ctx),
        AffineMap::get(rank, 0, partialExprs, ctx)};
    Value first = linalg::GenericOp::create(
        rewriter, loc, TypeRange{partialInit.getType()}, ValueRange{indices},
        ValueRange{partialInit}, maps, iters,
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = a[0].getType() == i64
                        ? a[0]
                        : Value(arith::ExtSIOp::create(b, l, i64, a[0]));
          Value below = arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt,
                                              v, c64(b, l, low));
          Value above = arith::CmpIOp::create(b, l, arith::CmpIPredicate::sgt,
                                              v, c64(b, l, high));
          Value bad = arith::OrIOp::create(b, l, below, above);
          if (ignore)
            bad = arith::AndIOp::create(
                b, l, bad,
                arith::CmpIOp::create(b, l, arith::CmpIPredicate::ne, v,
                                      c64(b, l, *ignore)));
          Value flat;
          for (int64_t d = 0; d < rank; ++d) {
            Value i = arith::IndexCastOp::create(
                b, l, i64, linalg::IndexOp::create(b, l, d));
            flat = d == 0 ? i
                          : Value(arith::AddIOp::create(
                                b, l,
                                arith::MulIOp::create(
                                    b, l, flat, c64(b, l, it.getDimSize(d))),
                                i));
          }
          if (!flat)
            flat = c64(b, l, 0);
          Value here = arith::SelectOp::create(b, l, bad, flat,
                                               c64(b, l, kNoFault));
          linalg::YieldOp::create(
              b, l, Value(arith::MinSIOp::create(b, l, a[1], here)));
        })
                      .getResult(0);
    if (perRow) {
      Value init = noFault({});
      first = linalg::GenericOp::create(
                  rewriter, loc, TypeRange{init.getType()}, ValueRange{first},
                  ValueRange{init},
                  {AffineMap::getMultiDimIdentityMap(1, ctx),
                   AffineMap::get(1, 0, {}, ctx)},
                  {utils::IteratorType::reduction},
                  [&](OpBuilder &b, Location l, ValueRange a) {
                    linalg::YieldOp::create(
                        b, l, Value(arith::MinSIOp::create(b, l, a[1], a[0])));
                  })
                  .getResult(0);
    }

    // 2. [position, the index there] (the index at 0 when none is out).
    Value pair = tensor::EmptyOp::create(rewriter, loc, ArrayRef<int64_t>{2},
                                         i64);
    SmallVector<AffineMap> pairMaps = {AffineMap::get(1, 0, {}, ctx),
                                       AffineMap::getMultiDimIdentityMap(1, ctx)};
    auto fault = linalg::GenericOp::create(
        rewriter, loc, TypeRange{pair.getType()},
        ValueRange{first}, ValueRange{pair}, pairMaps,
        {utils::IteratorType::parallel},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value none = arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq,
                                             a[0], c64(b, l, kNoFault));
          Value rest = arith::IndexCastOp::create(
              b, l, b.getIndexType(),
              arith::SelectOp::create(b, l, none, c64(b, l, 0), a[0]));
          Value v = tensor::ExtractOp::create(
              b, l, indices, rowMajorCoords(b, l, rest, it.getShape()));
          if (v.getType() != i64)
            v = arith::ExtSIOp::create(b, l, i64, v);
          Value isPosition = arith::CmpIOp::create(
              b, l, arith::CmpIPredicate::eq, linalg::IndexOp::create(b, l, 0),
              arith::ConstantIndexOp::create(b, l, 0));
          linalg::YieldOp::create(
              b, l, Value(arith::SelectOp::create(b, l, isPosition, a[0], v)));
        });

    // 3. The runtime call, with the shape and the message as globals.
    std::string prefix = "__dopt_index_check_" + std::to_string((*checks)++);
    SmallVector<int64_t> dims(it.getShape());
    Value shape = global(
        rewriter, loc, module, prefix + "_shape",
        MemRefType::get({rank}, i64),
        DenseElementsAttr::get(RankedTensorType::get({rank}, i64),
                               ArrayRef<int64_t>(dims)));
    std::string text = op.getWhat().str();
    if (text.empty()) {
      std::string node = nodeName(loc);
      text = node.empty() ? "dopt.check_indices" : "node '" + node + "'";
    }
    if (ignore)
      text += " (the ignore index " + std::to_string(*ignore) + " aside)";
    SmallVector<int8_t> bytes(text.begin(), text.end());
    bytes.push_back(0);
    Type i8 = rewriter.getI8Type();
    int64_t length = bytes.size();
    Value message = global(
        rewriter, loc, module, prefix + "_text", MemRefType::get({length}, i8),
        DenseElementsAttr::get(RankedTensorType::get({length}, i8),
                               ArrayRef<int8_t>(bytes)));
    auto bufferType = MemRefType::get(
        {2}, i64,
        StridedLayoutAttr::get(ctx, ShapedType::kDynamic,
                               {ShapedType::kDynamic}));
    Value buffer = bufferization::ToBufferOp::create(
        rewriter, loc, bufferType, fault.getResult(0), /*read_only=*/true);
    func::CallOp::create(
        rewriter, loc, distopt::kIndexFaultFunction, TypeRange{},
        ValueRange{memref::CastOp::create(rewriter, loc, anyStrided1D(i64),
                                          buffer),
                   shape, message, c64(rewriter, loc, low),
                   c64(rewriter, loc, high)});
    rewriter.replaceOp(op, indices);
    return success();
  }
};

} // namespace

void distopt::declareIndexFault(ModuleOp module) {
  bool any = false;
  module.walk([&](dopt::CheckIndicesOp) {
    any = true;
    return WalkResult::interrupt();
  });
  if (!any || module.lookupSymbol(kIndexFaultFunction))
    return;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Type i64 = b.getI64Type();
  auto fn = func::FuncOp::create(
      b, module.getLoc(), kIndexFaultFunction,
      b.getFunctionType({anyStrided1D(i64), anyStrided1D(i64),
                         anyStrided1D(b.getI8Type()), i64, i64},
                        {}));
  fn.setPrivate();
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
}

void distopt::populateCheckIndicesPattern(RewritePatternSet &patterns,
                                          TypeConverter &converter,
                                          int64_t *checks) {
  patterns.add<CheckIndicesPattern>(converter, patterns.getContext(), checks);
}
