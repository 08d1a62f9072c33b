//===- DoptToLinalg.cpp - dopt -> linalg/tensor/arith/math ----------------===//
//
// Lowers every dopt op to destination-style tensor code. See the pass
// description in include/distopt/Conversion/Passes.td.
//
// Conventions:
//  * values are converted with a TypeConverter that makes ui8 signless; the
//    original (dopt) element types decide signedness of the arithmetic;
//  * f16/bf16 arithmetic is computed in f32 inside the loop body and rounded
//    once per op, as ONNX Runtime's CPU kernels do;
//  * every elementwise op is one linalg.generic whose operand maps encode
//    NumPy broadcasting, so elementwise fusion can merge chains;
//  * reductions produce keepdims-shaped tensors, so their consumers broadcast
//    with the same right-aligned rule.
//
//===----------------------------------------------------------------------===//

#include "DoptToLinalgInternal.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/MapVector.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cmath>

namespace distopt {
#define GEN_PASS_DEF_CONVERTDOPTTOLINALGPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;
namespace dopt = distopt::dopt;

namespace {

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

Type signlessElement(Type t) {
  if (auto it = dyn_cast<IntegerType>(t); it && !it.isSignless())
    return IntegerType::get(t.getContext(), it.getWidth());
  return t;
}

/// Whether integer arithmetic on the original dopt element type is unsigned.
bool isUnsignedElt(Type origElt) {
  return origElt.isUnsignedInteger() || origElt.isInteger(1);
}

bool isLowPrecisionFloat(Type t) { return t.isF16() || t.isBF16(); }

RankedTensorType tensorTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

//===----------------------------------------------------------------------===//
// Scalar emission (inside linalg bodies)
//===----------------------------------------------------------------------===//

Value scalarConstant(OpBuilder &b, Location loc, Type t, double v) {
  if (auto ft = dyn_cast<FloatType>(t))
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(ft, v));
  return arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(t, APInt(t.getIntOrFloatBitWidth(), (int64_t)v,
                                        /*isSigned=*/true,
                                        /*implicitTrunc=*/true)));
}

/// Lowest value of a type (-inf for floats): the identity of max.
Value lowestValue(OpBuilder &b, Location loc, Type t, bool isUnsigned) {
  if (auto ft = dyn_cast<FloatType>(t))
    return arith::ConstantOp::create(
        b, loc,
        b.getFloatAttr(ft, APFloat::getInf(ft.getFloatSemantics(), true)));
  unsigned w = t.getIntOrFloatBitWidth();
  APInt v = isUnsigned ? APInt::getMinValue(w) : APInt::getSignedMinValue(w);
  return arith::ConstantOp::create(b, loc, b.getIntegerAttr(t, v));
}

/// Extends f16/bf16 to f32 for computation.
Value widen(OpBuilder &b, Location loc, Value x) {
  if (isLowPrecisionFloat(x.getType()))
    return arith::ExtFOp::create(b, loc, b.getF32Type(), x);
  return x;
}

/// The type `widen` computes an element type in (f32 for f16/bf16).
Type widenedType(OpBuilder &b, Type t) {
  return isLowPrecisionFloat(t) ? b.getF32Type() : t;
}

/// Rounds a computed value back to the storage element type.
Value narrow(OpBuilder &b, Location loc, Value x, Type elt) {
  if (x.getType() != elt && isa<FloatType>(elt))
    return arith::TruncFOp::create(b, loc, elt, x);
  return x;
}

/// Converts a scalar between element types (signless values; `from`/`to`
/// are the original dopt element types, which carry signedness).
Value convertScalar(OpBuilder &b, Location loc, Value x, Type from, Type to) {
  Type toS = signlessElement(to);
  if (from == to)
    return x;
  bool fromFloat = isa<FloatType>(from), toFloat = isa<FloatType>(to);
  if (to.isInteger(1)) {
    if (fromFloat)
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, x,
                                   scalarConstant(b, loc, from, 0.0));
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, x,
                                 scalarConstant(b, loc, x.getType(), 0));
  }
  if (fromFloat && toFloat) {
    if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth() ||
        (from.isF16() && to.isBF16()) || (from.isBF16() && to.isF16())) {
      if ((from.isF16() && to.isBF16()) || (from.isBF16() && to.isF16()))
        return arith::TruncFOp::create(
            b, loc, toS, arith::ExtFOp::create(b, loc, b.getF32Type(), x));
      return arith::ExtFOp::create(b, loc, toS, x);
    }
    return arith::TruncFOp::create(b, loc, toS, x);
  }
  if (!fromFloat && toFloat) {
    if (isUnsignedElt(from))
      return arith::UIToFPOp::create(b, loc, toS, x);
    return arith::SIToFPOp::create(b, loc, toS, x);
  }
  if (fromFloat && !toFloat) {
    if (to.isUnsignedInteger())
      return arith::FPToUIOp::create(b, loc, toS, x);
    return arith::FPToSIOp::create(b, loc, toS, x);
  }
  unsigned fw = from.getIntOrFloatBitWidth(), tw = to.getIntOrFloatBitWidth();
  if (fw == tw)
    return x; // i8 <-> ui8: same bits
  if (fw > tw)
    return arith::TruncIOp::create(b, loc, toS, x);
  if (isUnsignedElt(from))
    return arith::ExtUIOp::create(b, loc, toS, x);
  return arith::ExtSIOp::create(b, loc, toS, x);
}

enum class BinKind {
  Add, Sub, Mul, Div, Max, Min, Pow, Eq, Lt, Le, Gt, Ge, And, Or, Xor, Shl, Shr
};

/// One elementwise binary op on scalars of original element type `elt`.
Value emitBinary(OpBuilder &b, Location loc, BinKind k, Value l, Value r,
                 Type elt, Type rhsElt) {
  bool isFloat = isa<FloatType>(elt);
  bool isUns = isUnsignedElt(elt);
  if (k == BinKind::Pow) {
    if (isFloat) {
      Value base = widen(b, loc, l);
      Value exp = isa<FloatType>(rhsElt)
                      ? widen(b, loc, r)
                      : convertScalar(b, loc, r, rhsElt, base.getType());
      if (exp.getType() != base.getType())
        exp = convertScalar(b, loc, exp, exp.getType(), base.getType());
      return narrow(b, loc, math::PowFOp::create(b, loc, base, exp), elt);
    }
    if (isa<FloatType>(rhsElt)) {
      // Integer base, float exponent: ONNX Runtime computes pow in floating
      // point and converts the result (4 ^ 0.5 = 2).
      Type f64 = b.getF64Type();
      Value p = math::PowFOp::create(b, loc, convertScalar(b, loc, l, elt, f64),
                                     convertScalar(b, loc, r, rhsElt, f64));
      return convertScalar(b, loc, p, f64, elt);
    }
    return math::IPowIOp::create(b, loc, l,
                                 convertScalar(b, loc, r, rhsElt, elt));
  }
  if (isFloat) {
    Value x = widen(b, loc, l), y = widen(b, loc, r);
    Value v;
    switch (k) {
    case BinKind::Add:
      v = arith::AddFOp::create(b, loc, x, y);
      break;
    case BinKind::Sub:
      v = arith::SubFOp::create(b, loc, x, y);
      break;
    case BinKind::Mul:
      v = arith::MulFOp::create(b, loc, x, y);
      break;
    case BinKind::Div:
      v = arith::DivFOp::create(b, loc, x, y);
      break;
    case BinKind::Max:
      v = arith::MaximumFOp::create(b, loc, x, y);
      break;
    case BinKind::Min:
      v = arith::MinimumFOp::create(b, loc, x, y);
      break;
    case BinKind::Eq:
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, y);
    case BinKind::Lt:
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, y);
    case BinKind::Le:
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, x, y);
    case BinKind::Gt:
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x, y);
    case BinKind::Ge:
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, x, y);
    default:
      llvm_unreachable("not a float op");
    }
    return narrow(b, loc, v, elt);
  }
  switch (k) {
  case BinKind::Add:
    return arith::AddIOp::create(b, loc, l, r);
  case BinKind::Sub:
    return arith::SubIOp::create(b, loc, l, r);
  case BinKind::Mul:
    return arith::MulIOp::create(b, loc, l, r);
  case BinKind::Div:
    // Division by zero is undefined in ONNX; make it 0 rather than a trap.
    {
      Value zero = scalarConstant(b, loc, l.getType(), 0);
      Value one = scalarConstant(b, loc, l.getType(), 1);
      Value isZero =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, r, zero);
      Value safe = arith::SelectOp::create(b, loc, isZero, one, r);
      Value q = isUns ? (Value)arith::DivUIOp::create(b, loc, l, safe)
                      : (Value)arith::DivSIOp::create(b, loc, l, safe);
      return arith::SelectOp::create(b, loc, isZero, zero, q);
    }
  case BinKind::Max:
    return isUns ? (Value)arith::MaxUIOp::create(b, loc, l, r)
                 : (Value)arith::MaxSIOp::create(b, loc, l, r);
  case BinKind::Min:
    return isUns ? (Value)arith::MinUIOp::create(b, loc, l, r)
                 : (Value)arith::MinSIOp::create(b, loc, l, r);
  case BinKind::Eq:
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, l, r);
  case BinKind::Lt:
    return arith::CmpIOp::create(
        b, loc, isUns ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt,
        l, r);
  case BinKind::Le:
    return arith::CmpIOp::create(
        b, loc, isUns ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle,
        l, r);
  case BinKind::Gt:
    return arith::CmpIOp::create(
        b, loc, isUns ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt,
        l, r);
  case BinKind::Ge:
    return arith::CmpIOp::create(
        b, loc, isUns ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge,
        l, r);
  case BinKind::And:
    return arith::AndIOp::create(b, loc, l, r);
  case BinKind::Or:
    return arith::OrIOp::create(b, loc, l, r);
  case BinKind::Xor:
    return arith::XOrIOp::create(b, loc, l, r);
  case BinKind::Shl:
  case BinKind::Shr: {
    // arith's shifts are poison from the width on (and for negative
    // amounts, which compare unsigned as past it); ONNX's leave only the
    // sign: 0 to the left, the sign bit copied to the right.
    Type t = l.getType();
    Value width = scalarConstant(b, loc, t, (double)t.getIntOrFloatBitWidth());
    Value tooFar =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, r, width);
    if (k == BinKind::Shl)
      return arith::SelectOp::create(b, loc, tooFar,
                                     scalarConstant(b, loc, t, 0),
                                     arith::ShLIOp::create(b, loc, l, r));
    if (isUns)
      return arith::SelectOp::create(b, loc, tooFar,
                                     scalarConstant(b, loc, t, 0),
                                     arith::ShRUIOp::create(b, loc, l, r));
    Value amount = arith::SelectOp::create(
        b, loc, tooFar,
        scalarConstant(b, loc, t, (double)t.getIntOrFloatBitWidth() - 1), r);
    return arith::ShRSIOp::create(b, loc, l, amount);
  }
  case BinKind::Pow:
    break;
  }
  llvm_unreachable("unhandled binary kind");
}

enum class UnKind {
  Neg, Abs, Not, Sqrt, Recip, Exp, Log, Tanh, Sigmoid, Erf, Relu,
  LeakyRelu, GeluErf, GeluTanh, Identity, Floor, Ceil, Round, Sin, Cos,
  Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh
};

Value emitUnary(OpBuilder &b, Location loc, UnKind k, Value v, Type elt,
                double alpha = 0.0) {
  if (!isa<FloatType>(elt)) {
    Type t = v.getType();
    switch (k) {
    case UnKind::Neg:
      return arith::SubIOp::create(b, loc, scalarConstant(b, loc, t, 0), v);
    case UnKind::Abs:
      // max(v, -v) rather than math.absi, which the GPU (NVVM) path does
      // not lower (T5's relative positions take |i - j| of integers).
      return isUnsignedElt(elt)
                 ? v
                 : (Value)arith::MaxSIOp::create(
                       b, loc, v,
                       arith::SubIOp::create(b, loc,
                                             scalarConstant(b, loc, t, 0), v));
    case UnKind::Not:
      // All ones: true for i1, every bit for the wider integers.
      return arith::XOrIOp::create(b, loc, v, scalarConstant(b, loc, t, -1));
    case UnKind::Relu:
      return isUnsignedElt(elt)
                 ? v
                 : (Value)arith::MaxSIOp::create(b, loc, v,
                                                 scalarConstant(b, loc, t, 0));
    case UnKind::Identity:
      return v;
    default:
      llvm_unreachable("float-only unary op on integers");
    }
  }
  Value x = widen(b, loc, v);
  Type t = x.getType();
  auto c = [&](double d) { return scalarConstant(b, loc, t, d); };
  Value r;
  switch (k) {
  case UnKind::Neg:
    r = arith::NegFOp::create(b, loc, x);
    break;
  case UnKind::Abs:
    r = math::AbsFOp::create(b, loc, x);
    break;
  case UnKind::Sqrt:
    r = math::SqrtOp::create(b, loc, x);
    break;
  case UnKind::Recip:
    r = arith::DivFOp::create(b, loc, c(1.0), x);
    break;
  case UnKind::Exp:
    r = math::ExpOp::create(b, loc, x);
    break;
  case UnKind::Log:
    r = math::LogOp::create(b, loc, x);
    break;
  case UnKind::Tanh:
    r = math::TanhOp::create(b, loc, x);
    break;
  case UnKind::Erf:
    r = math::ErfOp::create(b, loc, x);
    break;
  case UnKind::Floor:
    r = math::FloorOp::create(b, loc, x);
    break;
  case UnKind::Ceil:
    r = math::CeilOp::create(b, loc, x);
    break;
  case UnKind::Round:
    r = math::RoundEvenOp::create(b, loc, x);
    break;
  case UnKind::Sin:
    r = math::SinOp::create(b, loc, x);
    break;
  case UnKind::Cos:
    r = math::CosOp::create(b, loc, x);
    break;
  case UnKind::Asin:
    r = math::AsinOp::create(b, loc, x);
    break;
  case UnKind::Acos:
    r = math::AcosOp::create(b, loc, x);
    break;
  case UnKind::Atan:
    r = math::AtanOp::create(b, loc, x);
    break;
  case UnKind::Sinh:
    r = math::SinhOp::create(b, loc, x);
    break;
  case UnKind::Cosh:
    r = math::CoshOp::create(b, loc, x);
    break;
  case UnKind::Asinh:
    r = math::AsinhOp::create(b, loc, x);
    break;
  case UnKind::Acosh:
    r = math::AcoshOp::create(b, loc, x);
    break;
  case UnKind::Atanh:
    r = math::AtanhOp::create(b, loc, x);
    break;
  case UnKind::Sigmoid: {
    Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
    r = arith::DivFOp::create(b, loc, c(1.0),
                              arith::AddFOp::create(b, loc, c(1.0), e));
    break;
  }
  case UnKind::Relu:
    r = arith::MaximumFOp::create(b, loc, x, c(0.0));
    break;
  case UnKind::LeakyRelu: {
    Value neg = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x,
                                      c(0.0));
    r = arith::SelectOp::create(b, loc, neg,
                                arith::MulFOp::create(b, loc, x, c(alpha)), x);
    break;
  }
  case UnKind::GeluErf: {
    // 0.5 * x * (1 + erf(x / sqrt(2)))
    Value e = math::ErfOp::create(
        b, loc, arith::MulFOp::create(b, loc, x, c(M_SQRT1_2)));
    r = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, c(0.5), x),
        arith::AddFOp::create(b, loc, c(1.0), e));
    break;
  }
  case UnKind::GeluTanh: {
    // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
    Value x3 = arith::MulFOp::create(b, loc, x,
                                     arith::MulFOp::create(b, loc, x, x));
    Value inner = arith::AddFOp::create(
        b, loc, x, arith::MulFOp::create(b, loc, c(0.044715), x3));
    Value th = math::TanhOp::create(
        b, loc, arith::MulFOp::create(b, loc, c(std::sqrt(2.0 / M_PI)), inner));
    r = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, c(0.5), x),
        arith::AddFOp::create(b, loc, c(1.0), th));
    break;
  }
  case UnKind::Identity:
    r = x;
    break;
  case UnKind::Not:
    llvm_unreachable("not on floats");
  }
  return narrow(b, loc, r, elt);
}

//===----------------------------------------------------------------------===//
// Structured-op helpers
//===----------------------------------------------------------------------===//

Value emptyTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                  Type elt) {
  return tensor::EmptyOp::create(b, loc, shape, elt);
}

Value emptyTensor(OpBuilder &b, Location loc, RankedTensorType type) {
  return emptyTensor(b, loc, type.getShape(), type.getElementType());
}

using BodyFn = function_ref<Value(OpBuilder &, Location, ValueRange)>;

/// A parallel loop nest over a result of `type`: `body` makes each element
/// from the elements of `inputs` that `inputMaps` (from the result's
/// coordinates) name.
Value parallelOver(OpBuilder &b, Location loc, RankedTensorType type,
                   ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                   BodyFn body) {
  int64_t rank = type.getRank();
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(AffineMap::getMultiDimIdentityMap(rank, b.getContext()));
  SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
  auto g = linalg::GenericOp::create(
      b, loc, TypeRange{type}, inputs, ValueRange{emptyTensor(b, loc, type)},
      maps, iters, [&](OpBuilder &nb, Location l, ValueRange a) {
        linalg::YieldOp::create(nb, l, body(nb, l, a.drop_back()));
      });
  return g.getResult(0);
}

Value filled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Value v) {
  Value e = emptyTensor(b, loc, shape, v.getType());
  return linalg::FillOp::create(b, loc, ValueRange{v}, ValueRange{e})
      .getResult(0);
}

/// Map from the loops of an `outShape` iteration space to an operand of
/// `inShape` under right-aligned NumPy broadcasting.
AffineMap broadcastMap(MLIRContext *ctx, ArrayRef<int64_t> inShape,
                       ArrayRef<int64_t> outShape) {
  SmallVector<AffineExpr> exprs;
  size_t offset = outShape.size() - inShape.size();
  for (size_t i = 0; i < inShape.size(); ++i)
    exprs.push_back(inShape[i] == 1 && outShape[offset + i] != 1
                        ? getAffineConstantExpr(0, ctx)
                        : getAffineDimExpr(offset + i, ctx));
  return AffineMap::get(outShape.size(), 0, exprs, ctx);
}

/// out[i] = body(ins[bcast(i)]...) over the shape of `outShape`.
Value elementwise(OpBuilder &b, Location loc, ArrayRef<int64_t> outShape,
                  Type outElt, ValueRange ins, BodyFn body) {
  SmallVector<AffineMap> maps;
  for (Value v : ins)
    maps.push_back(
        broadcastMap(b.getContext(), tensorTypeOf(v).getShape(), outShape));
  return parallelOver(b, loc, RankedTensorType::get(outShape, outElt), ins,
                      maps, body);
}

/// A reshape that is a view: collapse to 1-D, expand to the target.
Value reshapeTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  auto type = tensorTypeOf(v);
  if (type.getShape() == shape)
    return v;
  auto target = RankedTensorType::get(shape, type.getElementType());
  Value flat = v;
  if (type.getRank() != 1) {
    if (type.getRank() == 0) {
      flat = tensor::ExpandShapeOp::create(
          b, loc, RankedTensorType::get({1}, type.getElementType()), v,
          ArrayRef<ReassociationIndices>{});
    } else {
      ReassociationIndices all;
      for (int64_t i = 0; i < type.getRank(); ++i)
        all.push_back(i);
      flat = tensor::CollapseShapeOp::create(b, loc, v, {all});
    }
  }
  if (shape.size() == 1)
    return flat;
  if (shape.empty())
    return tensor::CollapseShapeOp::create(b, loc, target, flat,
                                           ArrayRef<ReassociationIndices>{});
  ReassociationIndices all;
  for (size_t i = 0; i < shape.size(); ++i)
    all.push_back(i);
  return tensor::ExpandShapeOp::create(b, loc, target, flat,
                                       ArrayRef<ReassociationIndices>{all});
}

enum class ReduceKind { Sum, Max };

/// Reduces `in` over `axes`; the result keeps reduced dims as size 1.
Value reduceKeepDims(OpBuilder &b, Location loc, Value in,
                     ArrayRef<int64_t> axes, ReduceKind kind, Type origElt) {
  MLIRContext *ctx = b.getContext();
  auto type = tensorTypeOf(in);
  Type elt = type.getElementType();
  int64_t rank = type.getRank();
  SmallVector<int64_t> kept;
  SmallVector<AffineExpr> outExprs;
  SmallVector<utils::IteratorType> iters;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = llvm::is_contained(axes, i);
    iters.push_back(reduced ? utils::IteratorType::reduction
                            : utils::IteratorType::parallel);
    if (!reduced) {
      kept.push_back(type.getDimSize(i));
      outExprs.push_back(getAffineDimExpr(i, ctx));
    }
  }
  Value init =
      kind == ReduceKind::Sum
          ? filled(b, loc, kept, scalarConstant(b, loc, elt, 0.0))
          : filled(b, loc, kept,
                   lowestValue(b, loc, elt, isUnsignedElt(origElt)));
  SmallVector<AffineMap> maps = {
      AffineMap::getMultiDimIdentityMap(rank, ctx),
      AffineMap::get(rank, 0, outExprs, ctx)};
  auto op = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{in}, ValueRange{init},
      maps, iters, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value x = args[0], acc = args[1], r;
        if (isa<FloatType>(elt))
          r = kind == ReduceKind::Sum
                  ? (Value)arith::AddFOp::create(nb, nloc, acc, x)
                  : (Value)arith::MaximumFOp::create(nb, nloc, acc, x);
        else if (kind == ReduceKind::Sum)
          r = arith::AddIOp::create(nb, nloc, acc, x);
        else
          r = isUnsignedElt(origElt)
                  ? (Value)arith::MaxUIOp::create(nb, nloc, acc, x)
                  : (Value)arith::MaxSIOp::create(nb, nloc, acc, x);
        linalg::YieldOp::create(nb, nloc, r);
      });
  SmallVector<int64_t> keepShape(type.getShape());
  for (int64_t a : axes)
    keepShape[a] = 1;
  return reshapeTo(b, loc, op.getResult(0), keepShape);
}

/// Number of elements over `axes`.
int64_t countOver(RankedTensorType t, ArrayRef<int64_t> axes) {
  int64_t n = 1;
  for (int64_t a : axes)
    n *= t.getDimSize(a);
  return n;
}

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

template <typename OpTy>
struct DoptPattern : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;
  using OpAdaptor = typename OpConversionPattern<OpTy>::OpAdaptor;

  RankedTensorType resultType(OpTy op, unsigned i = 0) const {
    return cast<RankedTensorType>(
        this->getTypeConverter()->convertType(op->getResult(i).getType()));
  }
  static Type origElt(Value v) { return tensorTypeOf(v).getElementType(); }
};

/// The exponent of a pow when it is a constant 2, 3 or 4 (every element).

/// The exponent of a pow when it is a constant 2, 3 or 4 (every element).
std::optional<int> smallIntegerExponent(Value exponent) {
  std::optional<double> v = dopt::splatFloatConstant(exponent);
  if (v && (*v == 2.0 || *v == 3.0 || *v == 4.0))
    return static_cast<int>(*v);
  return std::nullopt;
}

template <typename OpTy, BinKind kind>
struct BinaryPattern : DoptPattern<OpTy> {
  using DoptPattern<OpTy>::DoptPattern;
  LogicalResult
  matchAndRewrite(OpTy op, typename DoptPattern<OpTy>::OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = this->resultType(op);
    Type elt = this->origElt(op.getLhs()), rhsElt = this->origElt(op.getRhs());
    // x ^ 2, 3, 4 (layer norms, tanh-GELU) with a constant exponent:
    // multiplications, which vectorise, instead of a libm powf call per
    // element that keeps the whole fused loop scalar.
    if constexpr (kind == BinKind::Pow) {
      std::optional<int> n = smallIntegerExponent(op.getRhs());
      if (n && isa<FloatType>(elt)) {
        Value r = elementwise(
            rewriter, op.getLoc(), rt.getShape(), rt.getElementType(),
            {adaptor.getLhs()}, [&](OpBuilder &b, Location loc, ValueRange a) {
              Value x = widen(b, loc, a[0]);
              Value sq = arith::MulFOp::create(b, loc, x, x);
              Value v = *n == 2   ? sq
                        : *n == 3 ? arith::MulFOp::create(b, loc, sq, x)
                                  : arith::MulFOp::create(b, loc, sq, sq);
              return narrow(b, loc, v, elt);
            });
        rewriter.replaceOp(op, r);
        return success();
      }
    }
    // x / c for a constant power of two c (an average's 1/4, attention's
    // 1/8): x * (1/c), exactly the quotient, instead of a division per
    // element. Other constants keep the division: x * (1/c) may differ by
    // an ulp, which moves a quantizer's rounding (DynamicQuantizeLinear's
    // range / 255) off ONNX Runtime's.
    if constexpr (kind == BinKind::Div) {
      std::optional<double> c = dopt::splatFloatConstant(op.getRhs());
      int exponent = 0;
      if (c && isa<FloatType>(elt) && elt == rhsElt && *c != 0.0 &&
          std::isfinite(*c) && std::isfinite(1.0 / *c) &&
          std::fabs(std::frexp(*c, &exponent)) == 0.5) {
        double inv = 1.0 / *c;
        Value r = elementwise(
            rewriter, op.getLoc(), rt.getShape(), rt.getElementType(),
            {adaptor.getLhs()}, [&](OpBuilder &b, Location loc, ValueRange a) {
              Value x = widen(b, loc, a[0]);
              Value k = scalarConstant(b, loc, x.getType(), inv);
              return narrow(b, loc, arith::MulFOp::create(b, loc, x, k), elt);
            });
        rewriter.replaceOp(op, r);
        return success();
      }
    }
    Value r = elementwise(
        rewriter, op.getLoc(), rt.getShape(), rt.getElementType(),
        {adaptor.getLhs(), adaptor.getRhs()},
        [&](OpBuilder &b, Location loc, ValueRange a) {
          return emitBinary(b, loc, kind, a[0], a[1], elt, rhsElt);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

template <typename OpTy, UnKind kind>
struct UnaryPattern : DoptPattern<OpTy> {
  using DoptPattern<OpTy>::DoptPattern;
  LogicalResult
  matchAndRewrite(OpTy op, typename DoptPattern<OpTy>::OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = this->resultType(op);
    Type elt = this->origElt(op.getInput());
    double alpha = 0.0;
    UnKind k = kind;
    if constexpr (std::is_same_v<OpTy, dopt::LeakyReluOp>)
      alpha = op.getAlpha().convertToDouble();
    if constexpr (std::is_same_v<OpTy, dopt::GeluOp>)
      k = op.getApproximate() == "tanh" ? UnKind::GeluTanh : UnKind::GeluErf;
    Value r = elementwise(rewriter, op.getLoc(), rt.getShape(),
                          rt.getElementType(), {adaptor.getInput()},
                          [&](OpBuilder &b, Location loc, ValueRange a) {
                            return emitUnary(b, loc, k, a[0], elt, alpha);
                          });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct WherePattern : DoptPattern<dopt::WhereOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::WhereOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Value r = elementwise(
        rewriter, op.getLoc(), rt.getShape(), rt.getElementType(),
        adaptor.getOperands(), [](OpBuilder &b, Location loc, ValueRange a) {
          return arith::SelectOp::create(b, loc, a[0], a[1], a[2]);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

/// dopt.dropout: each element's mask bit from SplitMix64 at its counter
/// (the op's description); the row-major index in the whole tensor comes
/// from linalg.index plus the block's offsets.
struct DropoutPattern : DoptPattern<dopt::DropoutOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::DropoutOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Location loc = op.getLoc();
    int64_t rank = rt.getRank();
    auto i64 = rewriter.getI64Type();
    // The key enters as a broadcast 0-d operand and the offsets are read
    // inside the body: no scalar reads on the host before the loop (a GPU
    // kernel reads them itself).
    Value offsetTensor = adaptor.getOffsets();
    SmallVector<int64_t> whole(rt.getShape());
    if (auto g = op.getGlobalShapeAttr())
      whole.assign(g.asArrayRef().begin(), g.asArrayRef().end());
    float ratio = op.getRatio().convertToFloat();
    double scale = 1.0 / (1.0 - double(ratio));
    int64_t stream = op.getStream();
    Type elt = rt.getElementType();
    Value r = elementwise(
        rewriter, loc, rt.getShape(), elt,
        {adaptor.getInput(), adaptor.getKey()},
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          auto c64 = [&](uint64_t v) -> Value {
            return arith::ConstantOp::create(
                b, l, b.getIntegerAttr(i64, static_cast<int64_t>(v)));
          };
          Value key = a[1];
          Value g = c64(0);
          for (int64_t d = 0; d < rank; ++d) {
            Value i = arith::IndexCastOp::create(
                b, l, i64, linalg::IndexOp::create(b, l, d));
            if (offsetTensor)
              i = arith::AddIOp::create(
                  b, l, i,
                  tensor::ExtractOp::create(
                      b, l, offsetTensor,
                      ValueRange{arith::ConstantIndexOp::create(b, l, d)}));
            g = arith::AddIOp::create(
                b, l, arith::MulIOp::create(b, l, g, c64(whole[d])), i);
          }
          Value counter = arith::AddIOp::create(
              b, l, g, c64((uint64_t(stream) << 40) + 1));
          Value z = arith::AddIOp::create(
              b, l, key,
              arith::MulIOp::create(b, l, counter,
                                    c64(dopt::DropoutOp::kCounterStep)));
          auto mix = [&](Value v, int64_t shift, uint64_t mul) -> Value {
            Value x = arith::XOrIOp::create(
                b, l, v, arith::ShRUIOp::create(b, l, v, c64(shift)));
            return mul ? Value(arith::MulIOp::create(b, l, x, c64(mul))) : x;
          };
          z = mix(z, 30, 0xBF58476D1CE4E5B9ull);
          z = mix(z, 27, 0x94D049BB133111EBull);
          z = mix(z, 31, 0);
          Value bits = arith::ShRUIOp::create(b, l, z, c64(40));
          Value u = arith::MulFOp::create(
              b, l, arith::UIToFPOp::create(b, l, b.getF32Type(), bits),
              arith::ConstantOp::create(b, l, b.getF32FloatAttr(0x1p-24f)));
          Value keep = arith::CmpFOp::create(
              b, l, arith::CmpFPredicate::OGE, u,
              arith::ConstantOp::create(b, l, b.getF32FloatAttr(ratio)));
          Value kept = arith::MulFOp::create(
              b, l, a[0],
              arith::ConstantOp::create(b, l, b.getFloatAttr(elt, scale)));
          Value zero =
              arith::ConstantOp::create(b, l, b.getFloatAttr(elt, 0.0));
          return arith::SelectOp::create(b, l, keep, kept, zero);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct CastPattern : DoptPattern<dopt::CastOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::CastOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Type from = origElt(op.getInput()), to = op.getTo();
    Value r = elementwise(rewriter, op.getLoc(), rt.getShape(),
                          rt.getElementType(), {adaptor.getInput()},
                          [&](OpBuilder &b, Location loc, ValueRange a) {
                            return convertScalar(b, loc, a[0], from, to);
                          });
    rewriter.replaceOp(op, r);
    return success();
  }
};

/// The same bits read as another type of their width: arith.bitcast
/// (signless; ui32 and i32 are one type here). A boolean is a byte 0 or 1
/// in memory: from it, that byte; to it, whether the byte is not 0.
struct BitcastPattern : DoptPattern<dopt::BitcastOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::BitcastOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Type from = origElt(op.getInput()), to = op.getTo();
    Type toS = signlessElement(to);
    Value r = elementwise(
        rewriter, op.getLoc(), rt.getShape(), rt.getElementType(),
        {adaptor.getInput()}, [&](OpBuilder &b, Location loc, ValueRange a) {
          Value x = a[0];
          if (from.isInteger(1))
            return Value(arith::ExtUIOp::create(b, loc, toS, x));
          if (to.isInteger(1)) {
            Value zero = arith::ConstantOp::create(
                b, loc, b.getIntegerAttr(x.getType(), 0));
            return Value(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                               x, zero));
          }
          if (x.getType() == toS)
            return x;
          return Value(arith::BitcastOp::create(b, loc, toS, x));
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct ExpandPattern : DoptPattern<dopt::ExpandOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ExpandOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Value r = elementwise(rewriter, op.getLoc(), rt.getShape(),
                          rt.getElementType(), {adaptor.getInput()},
                          [](OpBuilder &, Location, ValueRange a) {
                            return a[0];
                          });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct ConstantPattern : DoptPattern<dopt::ConstantOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ConstantOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    TypedAttr value = cast<TypedAttr>(op.getValue());
    if (rt != op.getType()) {
      auto dense = dyn_cast<DenseElementsAttr>(value);
      if (!dense)
        return rewriter.notifyMatchFailure(op, "unsigned dense_resource");
      value = dense.bitcast(rt.getElementType());
    }
    // A large splat (a loop's initial value: fused attention's running
    // maximum of every row) is a fill: as a constant it would be a dense
    // global of that size in the program (and in every GPU kernel reading
    // it).
    if (auto dense = dyn_cast<DenseElementsAttr>(value);
        dense && dense.isSplat() && rt.getNumElements() > kMaxSplatConstant) {
      Value scalar = arith::ConstantOp::create(
          rewriter, op.getLoc(), dense.getSplatValue<TypedAttr>());
      rewriter.replaceOp(op,
                         filled(rewriter, op.getLoc(), rt.getShape(), scalar));
      return success();
    }
    rewriter.replaceOpWithNewOp<arith::ConstantOp>(op, value);
    return success();
  }
  /// Elements of the largest splat kept as a constant.
  static constexpr int64_t kMaxSplatConstant = 1 << 16;
};

struct ShapePattern : DoptPattern<dopt::ShapeOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ShapeOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto dims = tensorTypeOf(op.getInput())
                    .getShape()
                    .slice(op.getStart(), op.getEnd() - op.getStart());
    rewriter.replaceOpWithNewOp<arith::ConstantOp>(
        op, DenseElementsAttr::get(op.getType(), dims));
    return success();
  }
};

struct WeightPattern : DoptPattern<dopt::WeightOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::WeightOp op, OpAdaptor,
                  ConversionPatternRewriter &) const override {
    return op.emitOpError("must be turned into a function argument "
                          "(distopt-outline-weights) before lowering");
  }
};

//===----------------------------------------------------------------------===//
// Softmax and normalisation
//===----------------------------------------------------------------------===//

template <typename OpTy, bool isLog>
struct SoftmaxPattern : DoptPattern<OpTy> {
  using DoptPattern<OpTy>::DoptPattern;
  LogicalResult
  matchAndRewrite(OpTy op, typename DoptPattern<OpTy>::OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = this->resultType(op);
    Type elt = rt.getElementType();
    int64_t axis = op.getAxis();
    Value x = adaptor.getInput();
    Value m = reduceKeepDims(rewriter, loc, x, {axis}, ReduceKind::Max, elt);
    // e = exp(x - m), computed once and reused by the sum.
    Value shifted = elementwise(
        rewriter, loc, rt.getShape(), elt, {x, m},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value d = arith::SubFOp::create(b, l, widen(b, l, a[0]),
                                          widen(b, l, a[1]));
          return narrow(b, l, isLog ? d : (Value)math::ExpOp::create(b, l, d),
                        elt);
        });
    Value expShifted = shifted;
    if (isLog)
      expShifted = elementwise(rewriter, loc, rt.getShape(), elt, {shifted},
                               [&](OpBuilder &b, Location l, ValueRange a) {
                                 return emitUnary(b, l, UnKind::Exp, a[0],
                                                  elt);
                               });
    Value s =
        reduceKeepDims(rewriter, loc, expShifted, {axis}, ReduceKind::Sum, elt);
    // One log (or reciprocal) per row, then a subtraction (or
    // multiplication) per element.
    auto st = tensorTypeOf(s);
    Type wide = widenedType(rewriter, elt);
    Value perRow = elementwise(
        rewriter, loc, st.getShape(), wide, {s},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value sum = widen(b, l, a[0]);
          return isLog ? (Value)math::LogOp::create(b, l, sum)
                       : (Value)arith::DivFOp::create(
                             b, l, scalarConstant(b, l, sum.getType(), 1.0),
                             sum);
        });
    Value r = elementwise(
        rewriter, loc, rt.getShape(), elt, {shifted, perRow},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = widen(b, l, a[0]);
          return narrow(b, l,
                        isLog ? (Value)arith::SubFOp::create(b, l, v, a[1])
                              : (Value)arith::MulFOp::create(b, l, v, a[1]),
                        elt);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct LayerNormPattern : DoptPattern<dopt::LayerNormOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::LayerNormOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    SmallVector<int64_t> axes;
    for (int64_t i = op.getAxis(); i < rt.getRank(); ++i)
      axes.push_back(i);
    double n = (double)countOver(rt, axes);
    double eps = op.getEpsilon().convertToDouble();
    Value x = adaptor.getInput();
    Value sum = reduceKeepDims(rewriter, loc, x, axes, ReduceKind::Sum, elt);
    Value centered = elementwise(
        rewriter, loc, rt.getShape(), elt, {x, sum},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value mean = arith::DivFOp::create(
              b, l, widen(b, l, a[1]),
              scalarConstant(b, l, widen(b, l, a[1]).getType(), n));
          return narrow(b, l,
                        arith::SubFOp::create(b, l, widen(b, l, a[0]), mean),
                        elt);
        });
    Value sq = elementwise(rewriter, loc, rt.getShape(), elt, {centered},
                           [&](OpBuilder &b, Location l, ValueRange a) {
                             Value v = widen(b, l, a[0]);
                             return narrow(
                                 b, l, arith::MulFOp::create(b, l, v, v), elt);
                           });
    Value var = reduceKeepDims(rewriter, loc, sq, axes, ReduceKind::Sum, elt);
    SmallVector<Value> ins = {centered, var, adaptor.getScale()};
    if (adaptor.getBias())
      ins.push_back(adaptor.getBias());
    Value r = elementwise(
        rewriter, loc, rt.getShape(), elt, ins,
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = widen(b, l, a[0]);
          Type t = v.getType();
          Value variance = arith::DivFOp::create(b, l, widen(b, l, a[1]),
                                                 scalarConstant(b, l, t, n));
          Value denom = math::SqrtOp::create(
              b, l,
              arith::AddFOp::create(b, l, variance,
                                    scalarConstant(b, l, t, eps)));
          Value y = arith::MulFOp::create(
              b, l, arith::DivFOp::create(b, l, v, denom), widen(b, l, a[2]));
          if (a.size() > 3)
            y = arith::AddFOp::create(b, l, y, widen(b, l, a[3]));
          return narrow(b, l, y, elt);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

struct BatchNormPattern : DoptPattern<dopt::BatchNormOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::BatchNormOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    double eps = op.getEpsilon().convertToDouble();
    // Per-channel parameters [C] broadcast along axis 1: view them as
    // [C, 1, ..., 1] so right-aligned broadcasting applies.
    SmallVector<int64_t> paramShape = {rt.getDimSize(1)};
    paramShape.append(rt.getRank() - 2, 1);
    // Per channel, once: s = gamma / sqrt(var + eps), t = beta - mean * s.
    // Per element: y = x * s + t (a square root and a division per
    // channel instead of per element).
    int64_t channels = rt.getDimSize(1);
    Type wide = widenedType(rewriter, elt);
    Value scale = elementwise(
        rewriter, loc, {channels}, wide, {adaptor.getScale(), adaptor.getVar()},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = widen(b, l, a[1]);
          Value root = math::SqrtOp::create(
              b, l,
              arith::AddFOp::create(b, l, v,
                                    scalarConstant(b, l, v.getType(), eps)));
          return arith::DivFOp::create(b, l, widen(b, l, a[0]), root)
              .getResult();
        });
    Value shift = elementwise(
        rewriter, loc, {channels}, wide,
        {adaptor.getBias(), adaptor.getMean(), scale},
        [&](OpBuilder &b, Location l, ValueRange a) {
          return arith::SubFOp::create(
                     b, l, widen(b, l, a[0]),
                     arith::MulFOp::create(b, l, widen(b, l, a[1]), a[2]))
              .getResult();
        });
    Value r = elementwise(
        rewriter, loc, rt.getShape(), elt,
        {adaptor.getInput(), reshapeTo(rewriter, loc, scale, paramShape),
         reshapeTo(rewriter, loc, shift, paramShape)},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value x = widen(b, l, a[0]);
          Value y = arith::AddFOp::create(
              b, l, arith::MulFOp::create(b, l, x, a[1]), a[2]);
          return narrow(b, l, y, elt);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpTy, ReduceKind kind, bool mean>
struct ReducePattern : DoptPattern<OpTy> {
  using DoptPattern<OpTy>::DoptPattern;
  LogicalResult
  matchAndRewrite(OpTy op, typename DoptPattern<OpTy>::OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = this->resultType(op);
    Type orig = this->origElt(op.getInput());
    Value in = adaptor.getInput();
    auto inType = tensorTypeOf(in);
    ArrayRef<int64_t> axes = op.getAxes();
    Value r = in;
    if (!axes.empty()) {
      r = reduceKeepDims(rewriter, loc, in, axes, kind, orig);
      if (mean) {
        double n = (double)countOver(inType, axes);
        auto keepShape = tensorTypeOf(r).getShape();
        r = elementwise(rewriter, loc, keepShape, rt.getElementType(), {r},
                        [&](OpBuilder &b, Location l, ValueRange a) {
                          Value v = widen(b, l, a[0]);
                          Value c = scalarConstant(b, l, v.getType(), n);
                          return isa<FloatType>(orig)
                                     ? narrow(b, l,
                                              arith::DivFOp::create(b, l, v,
                                                                    c),
                                              rt.getElementType())
                                     : emitBinary(b, l, BinKind::Div, v, c,
                                                  orig, orig);
                        });
      }
    }
    rewriter.replaceOp(op, reshapeTo(rewriter, loc, r, rt.getShape()));
    return success();
  }
};

struct GlobalAvgPoolPattern : DoptPattern<dopt::GlobalAvgPoolOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::GlobalAvgPoolOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    auto inType = tensorTypeOf(adaptor.getInput());
    SmallVector<int64_t> axes;
    for (int64_t i = 2; i < inType.getRank(); ++i)
      axes.push_back(i);
    double n = (double)countOver(inType, axes);
    Value s = reduceKeepDims(rewriter, loc, adaptor.getInput(), axes,
                             ReduceKind::Sum, rt.getElementType());
    Value r = elementwise(
        rewriter, loc, rt.getShape(), rt.getElementType(), {s},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = widen(b, l, a[0]);
          return narrow(b, l,
                        arith::DivFOp::create(
                            b, l, v, scalarConstant(b, l, v.getType(), n)),
                        rt.getElementType());
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// C[m, n] = sum_k op(A) op(B) into a zero-filled accumulator; transposed
/// operands are expressed through linalg.matmul's indexing_maps.
Value matmul2D(OpBuilder &b, Location loc, Value a, Value bm, bool transA,
               bool transB, Type elt) {
  MLIRContext *ctx = b.getContext();
  auto at = tensorTypeOf(a), bt = tensorTypeOf(bm);
  int64_t m = at.getDimSize(transA ? 1 : 0);
  int64_t n = bt.getDimSize(transB ? 0 : 1);
  Value acc = filled(b, loc, {m, n}, scalarConstant(b, loc, elt, 0.0));
  AffineExpr dm = getAffineDimExpr(0, ctx), dn = getAffineDimExpr(1, ctx),
             dk = getAffineDimExpr(2, ctx);
  SmallVector<Attribute> maps = {
      AffineMapAttr::get(AffineMap::get(3, 0, transA ? ArrayRef<AffineExpr>{dk, dm}
                                                     : ArrayRef<AffineExpr>{dm, dk},
                                        ctx)),
      AffineMapAttr::get(AffineMap::get(3, 0, transB ? ArrayRef<AffineExpr>{dn, dk}
                                                     : ArrayRef<AffineExpr>{dk, dn},
                                        ctx)),
      AffineMapAttr::get(AffineMap::get(3, 0, {dm, dn}, ctx))};
  SmallVector<NamedAttribute> attrs;
  if (transA || transB)
    attrs.push_back(b.getNamedAttr("indexing_maps", b.getArrayAttr(maps)));
  return linalg::MatmulOp::create(b, loc, TypeRange{acc.getType()},
                                  ValueRange{a, bm}, ValueRange{acc}, attrs)
      .getResult(0);
}

/// Broadcasts `v` ([batch..., r, c]) to `batch` + [r, c] and collapses the
/// batch to one dimension: [prod(batch), r, c].
Value toBatch3D(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> batch) {
  auto t = tensorTypeOf(v);
  SmallVector<int64_t> full(batch);
  full.push_back(t.getDimSize(t.getRank() - 2));
  full.push_back(t.getDimSize(t.getRank() - 1));
  if (t.getShape() != ArrayRef<int64_t>(full))
    v = elementwise(b, loc, full, t.getElementType(), {v},
                    [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  return reshapeTo(b, loc, v, {product(batch), full[full.size() - 2],
                               full.back()});
}

/// A matrix operand that is a transpose: when the transpose swaps the last
/// two dimensions (and perhaps permutes others), the product reads it
/// transposed instead (BLAS's trans flag): `v` becomes the transpose's input
/// -- or, when the other dimensions move too, a cheaper transpose of it that
/// keeps the innermost dimension in place -- and `trans` flips. A tied
/// embedding's [vocab, d] table feeding the output projection, or the
/// [b, s, h, d] -> [b, h, d, s] transpose of attention keys, no longer
/// materialise a strided copy.
void foldTransposedOperand(OpBuilder &b, Location loc, Value &v, bool &trans) {
  auto t = v.getDefiningOp<linalg::TransposeOp>();
  if (!t)
    return;
  SmallVector<int64_t> perm(t.getPermutation());
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2)
    return;
  std::swap(perm[r - 2], perm[r - 1]);
  Value input = t.getInput();
  if (!isIdentityPermutation(perm)) {
    // Worth it only if the remaining transpose copies whole rows.
    if (perm[r - 1] != r - 1)
      return;
    auto it = tensorTypeOf(input);
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(it.getDimSize(p));
    Value init = emptyTensor(b, loc, shape, it.getElementType());
    input = linalg::TransposeOp::create(b, loc, input, init, perm).getResult()[0];
  }
  v = input;
  trans = !trans;
}

struct MatMulPattern : DoptPattern<dopt::MatMulOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::MatMulOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    Value lhs = adaptor.getLhs(), rhs = adaptor.getRhs();
    // NumPy promotion of 1-D operands.
    if (tensorTypeOf(lhs).getRank() == 1)
      lhs = reshapeTo(rewriter, loc, lhs, {1, tensorTypeOf(lhs).getDimSize(0)});
    if (tensorTypeOf(rhs).getRank() == 1)
      rhs = reshapeTo(rewriter, loc, rhs, {tensorTypeOf(rhs).getDimSize(0), 1});
    auto lt = tensorTypeOf(lhs), rtp = tensorTypeOf(rhs);
    int64_t m = lt.getDimSize(lt.getRank() - 2), k = lt.getShape().back();
    int64_t n = rtp.getShape().back();
    bool transB = false;
    Value result;
    if (rtp.getRank() == 2) {
      // [batch..., M, K] x [K, N]: one GEMM over batch*M rows.
      int64_t rows = product(lt.getShape().drop_back(1));
      Value a = reshapeTo(rewriter, loc, lhs, {rows, k});
      foldTransposedOperand(rewriter, loc, rhs, transB);
      result = matmul2D(rewriter, loc, a, rhs, false, transB, elt);
      (void)m;
    } else {
      auto batch = dopt::broadcastShapes({lt.getShape().drop_back(2),
                                    rtp.getShape().drop_back(2)});
      bool transA = false;
      if (lt.getShape().drop_back(2) == ArrayRef<int64_t>(*batch))
        foldTransposedOperand(rewriter, loc, lhs, transA);
      if (rtp.getShape().drop_back(2) == ArrayRef<int64_t>(*batch))
        foldTransposedOperand(rewriter, loc, rhs, transB);
      Value a = toBatch3D(rewriter, loc, lhs, *batch);
      Value bb = toBatch3D(rewriter, loc, rhs, *batch);
      int64_t nb = product(*batch);
      Value acc =
          filled(rewriter, loc, {nb, m, n}, scalarConstant(rewriter, loc, elt, 0));
      MLIRContext *ctx = rewriter.getContext();
      AffineExpr db = getAffineDimExpr(0, ctx), dm = getAffineDimExpr(1, ctx),
                 dn = getAffineDimExpr(2, ctx), dk = getAffineDimExpr(3, ctx);
      auto map = [&](AffineExpr r, AffineExpr c) {
        return AffineMapAttr::get(AffineMap::get(4, 0, {db, r, c}, ctx));
      };
      SmallVector<NamedAttribute> attrs;
      if (transA || transB)
        attrs.push_back(rewriter.getNamedAttr(
            "indexing_maps",
            rewriter.getArrayAttr({transA ? map(dk, dm) : map(dm, dk),
                                   transB ? map(dn, dk) : map(dk, dn),
                                   map(dm, dn)})));
      result = linalg::BatchMatmulOp::create(rewriter, loc,
                                             TypeRange{acc.getType()},
                                             ValueRange{a, bb}, ValueRange{acc},
                                             attrs)
                   .getResult(0);
    }
    rewriter.replaceOp(op, reshapeTo(rewriter, loc, result, rt.getShape()));
    return success();
  }
};

struct GemmPattern : DoptPattern<dopt::GemmOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::GemmOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    Type orig = origElt(op.getA());
    Value a = adaptor.getA(), b = adaptor.getB();
    bool transA = op.getTransA(), transB = op.getTransB();
    foldTransposedOperand(rewriter, loc, a, transA);
    foldTransposedOperand(rewriter, loc, b, transB);
    Value mm = matmul2D(rewriter, loc, a, b, transA, transB, elt);
    double alpha = op.getAlpha().convertToDouble();
    double beta = op.getBeta().convertToDouble();
    Value c = adaptor.getC();
    if (alpha == 1.0 && (!c || beta == 0.0)) {
      rewriter.replaceOp(op, mm);
      return success();
    }
    SmallVector<Value> ins = {mm};
    if (c && beta != 0.0)
      ins.push_back(c);
    Value r = elementwise(
        rewriter, loc, rt.getShape(), elt, ins,
        [&](OpBuilder &b, Location l, ValueRange a) {
          if (!isa<FloatType>(orig)) {
            // Integer Gemm: scale in f64 (alpha/beta may be fractional) and
            // convert the result back.
            Type f64 = b.getF64Type();
            Value v = convertScalar(b, l, a[0], orig, f64);
            if (alpha != 1.0)
              v = arith::MulFOp::create(b, l, v,
                                        scalarConstant(b, l, f64, alpha));
            if (a.size() > 1) {
              Value cv = convertScalar(b, l, a[1], orig, f64);
              if (beta != 1.0)
                cv = arith::MulFOp::create(b, l, cv,
                                           scalarConstant(b, l, f64, beta));
              v = arith::AddFOp::create(b, l, v, cv);
            }
            return convertScalar(b, l, v, f64, orig);
          }
          Value v = widen(b, l, a[0]);
          Type t = v.getType();
          if (alpha != 1.0)
            v = arith::MulFOp::create(b, l, v, scalarConstant(b, l, t, alpha));
          if (a.size() > 1) {
            Value cv = widen(b, l, a[1]);
            if (beta != 1.0)
              cv = arith::MulFOp::create(b, l, cv,
                                         scalarConstant(b, l, t, beta));
            v = arith::AddFOp::create(b, l, v, cv);
          }
          return narrow(b, l, v, elt);
        });
    rewriter.replaceOp(op, r);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

DenseIntElementsAttr i64Vector(OpBuilder &b, ArrayRef<int64_t> v) {
  return DenseIntElementsAttr::get(
      RankedTensorType::get({(int64_t)v.size()}, b.getI64Type()), v);
}

/// Pads the two spatial dims of an NCHW tensor with `value`.
Value padSpatial(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> lo,
                 ArrayRef<int64_t> hi, Value value) {
  if (llvm::all_of(lo, [](int64_t p) { return p == 0; }) &&
      llvm::all_of(hi, [](int64_t p) { return p == 0; }))
    return x;
  auto t = tensorTypeOf(x);
  SmallVector<OpFoldResult> low = {b.getIndexAttr(0), b.getIndexAttr(0),
                                   b.getIndexAttr(lo[0]), b.getIndexAttr(lo[1])};
  SmallVector<OpFoldResult> high = {b.getIndexAttr(0), b.getIndexAttr(0),
                                    b.getIndexAttr(hi[0]),
                                    b.getIndexAttr(hi[1])};
  SmallVector<int64_t> shape(t.getShape());
  shape[2] += lo[0] + hi[0];
  shape[3] += lo[1] + hi[1];
  return tensor::PadOp::create(
      b, loc, RankedTensorType::get(shape, t.getElementType()), x, low, high,
      value);
}

/// A tensor of `shape` whose element at (d0, d1, ...) is x[read(d0, d1, ...)]
/// (im2col).
Value gather(OpBuilder &b, Location loc, Value x, AffineMap read,
             ArrayRef<int64_t> shape) {
  Value init = emptyTensor(b, loc, shape, tensorTypeOf(x).getElementType());
  SmallVector<AffineMap> maps = {
      read, AffineMap::getMultiDimIdentityMap(shape.size(), b.getContext())};
  return linalg::GenericOp::create(
             b, loc, TypeRange{init.getType()}, ValueRange{x},
             ValueRange{init}, maps,
             SmallVector<utils::IteratorType>(shape.size(),
                                              utils::IteratorType::parallel),
             [](OpBuilder &nb, Location l, ValueRange a) {
               linalg::YieldOp::create(nb, l, a[0]);
             })
      .getResult(0);
}

/// A batch_matmul whose A operand (2-D, [M, K]) is shared by every batch
/// item: C[b] += A @ B[b] (B[b] [K, N]; with `transposedB`, [N, K] read
/// transposed). LinalgToBlas hands it to BLAS with A broadcast.
Value sharedLhsBatchMatmul(OpBuilder &b, Location loc, Value a, Value bm,
                           Value acc, bool transposedB = false) {
  MLIRContext *ctx = b.getContext();
  AffineExpr d0 = getAffineDimExpr(0, ctx), dm = getAffineDimExpr(1, ctx),
             dn = getAffineDimExpr(2, ctx), dk = getAffineDimExpr(3, ctx);
  SmallVector<Attribute> maps = {
      AffineMapAttr::get(AffineMap::get(4, 0, {dm, dk}, ctx)),
      AffineMapAttr::get(AffineMap::get(
          4, 0, transposedB ? ArrayRef<AffineExpr>{d0, dn, dk}
                            : ArrayRef<AffineExpr>{d0, dk, dn},
          ctx)),
      AffineMapAttr::get(AffineMap::get(4, 0, {d0, dm, dn}, ctx))};
  return linalg::BatchMatmulOp::create(
             b, loc, TypeRange{acc.getType()}, ValueRange{a, bm},
             ValueRange{acc},
             {b.getNamedAttr("indexing_maps", b.getArrayAttr(maps))})
      .getResult(0);
}

/// Groups up to which a convolution runs one GEMM batch per group in the
/// output's own layout; beyond (depthwise-like), one batched GEMM over the
/// groups with a transpose back.
constexpr int64_t kMaxGroupsPerGemm = 8;

/// The runtime function a library convolution of `elt` calls:
///   dort_conv2d_<f32|f64>(x, w, y, stride_h, stride_w, pad_h, pad_w,
///                         dilation_h, dilation_w, groups)
/// on strided 4-D views (x [N, C, H, W], w [M, C/groups, kh, kw], y
/// [N, M, ho, wo], written whole), with the same padding at both ends of
/// each spatial dimension.
///
/// A transposed convolution (dopt.conv_transpose) calls
///   dort_conv2d_backward_data_<f32|f64>(dy, w, dx, ...same parameters)
/// with dy its input, w its weight and dx its output: the input gradient of
/// the convolution from dx to dy (cuDNN's backward data on a GPU).
StringRef libraryConvolution(Type elt, bool backwardData = false) {
  if (elt.isF32())
    return backwardData ? "dort_conv2d_backward_data_f32" : "dort_conv2d_f32";
  if (elt.isF64())
    return backwardData ? "dort_conv2d_backward_data_f64" : "dort_conv2d_f64";
  return "";
}

MemRefType anyStrided4D(Type elt) {
  SmallVector<int64_t> dyn(4, ShapedType::kDynamic);
  return MemRefType::get(
      dyn, elt,
      StridedLayoutAttr::get(elt.getContext(), ShapedType::kDynamic, dyn));
}

/// The attribute that tells apart the bufferization.to_buffer ops of
/// different library calls (see libraryConvolutionCall).
constexpr llvm::StringLiteral kLibraryCallAttr = "dopt.library_call";

/// One library convolution call (libraryConvolution's contract) on the
/// buffers of `x` and `w` (converted values; `xOriginal`/`wOriginal` the
/// dopt values they came from), into a new buffer of `out`'s shape: the
/// result as a tensor.
///
/// One-Shot Bufferize takes a bufferization.to_buffer as the read of its
/// tensor, at the to_buffer: the buffer must not be used after a later op
/// may have written the tensor's memory in place. Each call therefore gets
/// to_buffer ops of its own, right before it, marked with the call's number
/// `callIndex` (kLibraryCallAttr) so that CSE cannot merge them with an
/// earlier call's (a weight gradient's view of an activation with the
/// forward convolution's buffer of it: by the time the gradient reads it,
/// a gradient accumulation may have reused that memory).
Value libraryConvolutionCall(ConversionPatternRewriter &rewriter, Location loc,
                             StringRef callee, int64_t callIndex,
                             Value xOriginal, Value x, Value wOriginal,
                             Value w, RankedTensorType out,
                             ArrayRef<int64_t> st, ArrayRef<int64_t> pad,
                             ArrayRef<int64_t> dl, int64_t groups) {
  Type elt = out.getElementType();
  MemRefType any = anyStrided4D(elt);
  SmallVector<int64_t> dyn(4, ShapedType::kDynamic);
  auto bufferOf = [&](Value t) -> Value {
    auto bufType = MemRefType::get(
        tensorTypeOf(t).getShape(), elt,
        StridedLayoutAttr::get(rewriter.getContext(), ShapedType::kDynamic,
                               dyn));
    auto buffer = bufferization::ToBufferOp::create(rewriter, loc, bufType, t,
                                                    /*read_only=*/true);
    buffer->setAttr(kLibraryCallAttr, rewriter.getI64IntegerAttr(callIndex));
    return buffer;
  };
  // An operand that is a dopt.transpose of a 4-D tensor is passed as a
  // transposed view of that tensor, not a copy: Autodiff's weight
  // gradients transpose the activation and the output gradient
  // ([N, C, ...] -> [C, N, ...]), and the runtime, seeing through the
  // view, hands cuDNN both in their own NCHW layout.
  auto view = [&](Value original, Value converted) -> Value {
    if (auto t = original.getDefiningOp<dopt::TransposeOp>())
      if (Value src = rewriter.getRemappedValue(t.getInput()))
        if (tensorTypeOf(src).getRank() == 4) {
          // The view is a reinterpret_cast with the permuted sizes and
          // strides (a ViewLikeOp: the buffer planner and the
          // deallocation see that it aliases the source; memref.transpose
          // is not one in MLIR 22).
          Value buf = bufferOf(src);
          auto meta =
              memref::ExtractStridedMetadataOp::create(rewriter, loc, buf);
          ArrayRef<int64_t> shape = tensorTypeOf(src).getShape();
          SmallVector<OpFoldResult> sizes, strides;
          SmallVector<int64_t> permuted;
          for (int64_t p : t.getPerm()) {
            sizes.push_back(rewriter.getIndexAttr(shape[p]));
            strides.push_back(meta.getStrides()[p]);
            permuted.push_back(shape[p]);
          }
          auto viewType = MemRefType::get(
              permuted, elt,
              StridedLayoutAttr::get(rewriter.getContext(),
                                     ShapedType::kDynamic, dyn));
          Value v = memref::ReinterpretCastOp::create(
              rewriter, loc, viewType, buf, OpFoldResult(meta.getOffset()),
              sizes, strides);
          return memref::CastOp::create(rewriter, loc, any, v);
        }
    return memref::CastOp::create(rewriter, loc, any, bufferOf(converted));
  };
  SmallVector<Value> args = {view(xOriginal, x), view(wOriginal, w)};
  Value buffer = memref::AllocOp::create(
      rewriter, loc, MemRefType::get(out.getShape(), elt));
  args.push_back(memref::CastOp::create(rewriter, loc, any, buffer));
  for (int64_t v : {st[0], st[1], pad[0], pad[1], dl[0], dl[1], groups})
    args.push_back(arith::ConstantOp::create(rewriter, loc,
                                             rewriter.getI64IntegerAttr(v)));
  func::CallOp::create(rewriter, loc, callee, TypeRange{}, args);
  return bufferization::ToTensorOp::create(rewriter, loc, out, buffer,
                                           /*restrict=*/true,
                                           /*writable=*/true);
}

/// y [N, M, H, W] plus `bias` [M] (if any) per channel.
Value addChannelBias(OpBuilder &b, Location loc, Value y, Value bias) {
  if (!bias)
    return y;
  RankedTensorType rt = tensorTypeOf(y);
  Value b3 = reshapeTo(b, loc, bias, {rt.getDimSize(1), 1, 1});
  return elementwise(b, loc, rt.getShape(), rt.getElementType(), {y, b3},
                     [](OpBuilder &nb, Location l, ValueRange a) {
                       return arith::AddFOp::create(nb, l, a[0], a[1])
                           .getResult();
                     });
}

/// Convolution as im2col + GEMM, so the work lands in BLAS. With few
/// groups, in NCHW throughout (no transpose of the result):
///   col[n, g, (c, i, j), (oh, ow)] = x[n, g*Cg + c, oh*sh + i*dh, ow*sw + j*dw]
///   y[n, g, m, (oh, ow)]           = W[g] @ col[n, g]  (W[g]: Mg x Cg*kh*kw)
/// one batch (over n) of GEMMs per group, W shared by the batch, each
/// writing its group's channels of y in place; col is written along ow,
/// the output's contiguous dimension. With many groups:
///   col[g, (n, oh, ow), (c, i, j)], out[g] = col[g] @ W[g]^T, transposed to y.
/// dopt.conv is float-only, and f16/bf16 are widened to f32 before this
/// pattern runs, so every convolution takes the BLAS route -- or, with
/// library-convolutions (the CUDA targets), one runtime call (libraryCall).
struct ConvPattern : DoptPattern<dopt::ConvOp> {
  ConvPattern(const TypeConverter &converter, MLIRContext *ctx,
              bool library, int64_t *libraryCalls)
      : DoptPattern(converter, ctx), library(library),
        libraryCalls(libraryCalls) {}
  bool library;
  int64_t *libraryCalls; // the pass's count of library calls made

  /// The convolution as one runtime call on buffers (library-convolutions):
  /// a padding that differs between the two ends of a dimension gives the
  /// library the smaller of the two and pads the rest here.
  LogicalResult libraryCall(dopt::ConvOp op, OpAdaptor adaptor,
                            ConversionPatternRewriter &rewriter) const {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    ArrayRef<int64_t> pads = op.getPads();
    int64_t ph = std::min(pads[0], pads[2]), pw = std::min(pads[1], pads[3]);
    Value x = adaptor.getInput();
    if (pads[0] != pads[2] || pads[1] != pads[3])
      x = padSpatial(rewriter, loc, x, {pads[0] - ph, pads[1] - pw},
                     {pads[2] - ph, pads[3] - pw},
                     scalarConstant(rewriter, loc, elt, 0.0));
    // Padded here: the pad is a copy, passed as is.
    Value y = libraryConvolutionCall(
        rewriter, loc, libraryConvolution(elt), (*libraryCalls)++,
        x == adaptor.getInput() ? op.getInput() : x, x, op.getWeight(),
        adaptor.getWeight(), rt, op.getStrides(), {ph, pw}, op.getDilations(),
        op.getGroup());
    rewriter.replaceOp(op, addChannelBias(rewriter, loc, y, adaptor.getBias()));
    return success();
  }

  LogicalResult
  matchAndRewrite(dopt::ConvOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    if (library && !libraryConvolution(elt).empty())
      return libraryCall(op, adaptor, rewriter);
    ArrayRef<int64_t> pads = op.getPads();
    Value x = padSpatial(rewriter, loc, adaptor.getInput(), pads.take_front(2),
                         pads.drop_front(2),
                         scalarConstant(rewriter, loc, elt, 0.0));
    Value w = adaptor.getWeight();
    auto xt = tensorTypeOf(x), wt = tensorTypeOf(w);
    int64_t g = op.getGroup();
    int64_t n = xt.getDimSize(0), c = xt.getDimSize(1), m = wt.getDimSize(0);
    int64_t cg = c / g, mg = m / g, kh = wt.getDimSize(2), kw = wt.getDimSize(3);
    int64_t ho = rt.getDimSize(2), wo = rt.getDimSize(3);
    ArrayRef<int64_t> st = op.getStrides(), dl = op.getDilations();
    auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
    Value y;
    if (g <= kMaxGroupsPerGemm) {
      // im2col: loops (n, g, c, i, j, oh, ow), col [n, g, (c, i, j), (oh,
      // ow)]: rows of the output are the contiguous, vectorized loop. When
      // the kernel is wider than the output (a weight gradient: the
      // activation's gradient is its "kernel", the weight's 3x3 its
      // output), loops (n, g, oh, ow, c, i, j) and col transposed, [n, g,
      // (oh, ow), (c, i, j)], read transposed by the GEMM: a 3-wide inner
      // loop is unrolled away and the wide one vectorized, so its stores
      // would scatter 9 apart.
      bool colT = kw > wo;
      // Loop positions of (c, i, j) and (oh, ow) after (n, g).
      unsigned ci = colT ? 4 : 2, oh = colT ? 2 : 5;
      SmallVector<int64_t> loops =
          colT ? SmallVector<int64_t>{n, g, ho, wo, cg, kh, kw}
               : SmallVector<int64_t>{n, g, cg, kh, kw, ho, wo};
      Value col = gather(
          rewriter, loc, x,
          AffineMap::get(7, 0,
                         {d(0), d(1) * cg + d(ci),
                          d(oh) * st[0] + d(ci + 1) * dl[0],
                          d(oh + 1) * st[1] + d(ci + 2) * dl[1]},
                         ctx),
          loops);
      int64_t k = cg * kh * kw, p = ho * wo;
      Value col4 = colT ? reshapeTo(rewriter, loc, col, {n, g, p, k})
                        : reshapeTo(rewriter, loc, col, {n, g, k, p});
      Value w3 = reshapeTo(rewriter, loc, w, {g, mg, k});
      // Each group's GEMMs start from their own zero fill of their slice
      // (which BLAS then overwrites with beta = 0): no fill of the whole.
      Value acc = emptyTensor(rewriter, loc, {n, g, mg, p}, elt);
      Value zeroElt = scalarConstant(rewriter, loc, elt, 0.0);
      auto one = rewriter.getIndexAttr(1), zero = rewriter.getIndexAttr(0);
      SmallVector<OpFoldResult> unitStrides(4, one);
      for (int64_t gi = 0; gi < g; ++gi) {
        // Group gi of a [n, g, rows, cols] tensor: [:, gi] as [n, rows, cols].
        SmallVector<OpFoldResult> groupOffsets = {
            zero, rewriter.getIndexAttr(gi), zero, zero};
        auto groupSizes = [&](int64_t rows, int64_t cols) {
          return SmallVector<OpFoldResult>{rewriter.getIndexAttr(n), one,
                                           rewriter.getIndexAttr(rows),
                                           rewriter.getIndexAttr(cols)};
        };
        auto groupOf = [&](Value v, int64_t rows, int64_t cols) {
          auto t = RankedTensorType::get({n, rows, cols}, elt);
          return tensor::ExtractSliceOp::create(rewriter, loc, t, v,
                                                groupOffsets,
                                                groupSizes(rows, cols),
                                                unitStrides);
        };
        Value wg = tensor::ExtractSliceOp::create(
            rewriter, loc, RankedTensorType::get({mg, k}, elt), w3,
            ArrayRef<OpFoldResult>{rewriter.getIndexAttr(gi), zero, zero},
            ArrayRef<OpFoldResult>{one, rewriter.getIndexAttr(mg),
                                   rewriter.getIndexAttr(k)},
            ArrayRef<OpFoldResult>{one, one, one});
        Value zeroAcc = linalg::FillOp::create(rewriter, loc, zeroElt,
                                               Value(groupOf(acc, mg, p)))
                            .getResult(0);
        Value mm = sharedLhsBatchMatmul(
            rewriter, loc, wg, colT ? groupOf(col4, p, k) : groupOf(col4, k, p),
            zeroAcc, colT);
        acc = tensor::InsertSliceOp::create(rewriter, loc, mm, acc,
                                            groupOffsets, groupSizes(mg, p),
                                            unitStrides);
      }
      y = reshapeTo(rewriter, loc, acc, {n, m, ho, wo});
      if (Value bias = adaptor.getBias()) {
        Value b3 = reshapeTo(rewriter, loc, bias, {m, 1, 1});
        y = elementwise(rewriter, loc, {n, m, ho, wo}, elt, {y, b3},
                        [](OpBuilder &b, Location l, ValueRange a) {
                          return arith::AddFOp::create(b, l, a[0], a[1])
                              .getResult();
                        });
      }
      rewriter.replaceOp(op, y);
      return success();
    }
    // Many groups: im2col with loops (g, n, oh, ow, c, i, j).
    Value col = gather(
        rewriter, loc, x,
        AffineMap::get(7, 0,
                       {d(1), d(0) * cg + d(4), d(2) * st[0] + d(5) * dl[0],
                        d(3) * st[1] + d(6) * dl[1]},
                       ctx),
        {g, n, ho, wo, cg, kh, kw});
    int64_t rows = n * ho * wo, k = cg * kh * kw;
    Value col3 = reshapeTo(rewriter, loc, col, {g, rows, k});
    Value w3 = reshapeTo(rewriter, loc, w, {g, mg, k});
    Value acc = filled(rewriter, loc, {g, rows, mg},
                       scalarConstant(rewriter, loc, elt, 0.0));
    AffineExpr b0 = d(0), dm = d(1), dn = d(2), dk = d(3);
    SmallVector<Attribute> mmMaps = {
        AffineMapAttr::get(AffineMap::get(4, 0, {b0, dm, dk}, ctx)),
        AffineMapAttr::get(AffineMap::get(4, 0, {b0, dn, dk}, ctx)),
        AffineMapAttr::get(AffineMap::get(4, 0, {b0, dm, dn}, ctx))};
    Value mm = linalg::BatchMatmulOp::create(
                   rewriter, loc, TypeRange{acc.getType()},
                   ValueRange{col3, w3}, ValueRange{acc},
                   {rewriter.getNamedAttr("indexing_maps",
                                          rewriter.getArrayAttr(mmMaps))})
                   .getResult(0);
    // [g, n, oh, ow, mg] -> y[n, g*mg + m, oh, ow] (+ bias[g*mg + m]).
    Value mm5 = reshapeTo(rewriter, loc, mm, {g, n, ho, wo, mg});
    SmallVector<Value> ins = {mm5};
    // Loops (n, g, mg, oh, ow) over the output viewed as [n, g, mg, oh, ow].
    SmallVector<AffineMap> maps = {
        AffineMap::get(5, 0, {d(1), d(0), d(3), d(4), d(2)}, ctx)};
    if (Value bias = adaptor.getBias()) {
      ins.push_back(reshapeTo(rewriter, loc, bias, {g, mg}));
      maps.push_back(AffineMap::get(5, 0, {d(1), d(2)}, ctx));
    }
    maps.push_back(AffineMap::getMultiDimIdentityMap(5, ctx));
    SmallVector<utils::IteratorType> iters(5, utils::IteratorType::parallel);
    Value init = emptyTensor(rewriter, loc, {n, g, mg, ho, wo}, elt);
    y = linalg::GenericOp::create(
                  rewriter, loc, TypeRange{init.getType()}, ins,
                  ValueRange{init}, maps, iters,
                  [](OpBuilder &b, Location l, ValueRange a) {
                    Value v = a[0];
                    if (a.size() > 2)
                      v = arith::AddFOp::create(b, l, v, a[1]);
                    linalg::YieldOp::create(b, l, v);
                  })
                  .getResult(0);
    rewriter.replaceOp(op, reshapeTo(rewriter, loc, y, rt.getShape()));
    return success();
  }
};

/// dopt.conv_transpose: one backward-data call (libraryConvolution(elt,
/// true)) on every target -- cuDNN's on a GPU, the runtime's GEMM + col2im
/// on CPUs. (The plain convolution of the stride-dilated input it equals
/// spends three quarters of its GEMM on zeros for a stride of 2: a DCGAN
/// generator at batch 16 took 104.7 ms that way on this project's 2-core
/// machine, 19.7 ms with the call; docs/benchmarks.md.) The library's dx
/// must be a shape whose convolution gives back the input's, so with pads
/// that differ between the ends of a dimension, or an output padding of a
/// stride or more, it computes the full result (no pads) and the pads are
/// cut off here (the output padding added as zeros). f16/bf16 are widened
/// to f32 before this pattern runs.
struct ConvTransposePattern : DoptPattern<dopt::ConvTransposeOp> {
  ConvTransposePattern(const TypeConverter &converter, MLIRContext *ctx,
                       int64_t *libraryCalls)
      : DoptPattern(converter, ctx), libraryCalls(libraryCalls) {}
  int64_t *libraryCalls; // the pass's count of library calls made

  LogicalResult
  matchAndRewrite(dopt::ConvTransposeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    ArrayRef<int64_t> st = op.getStrides(), pads = op.getPads(),
                      dl = op.getDilations(), outPad = op.getOutputPadding();
    StringRef callee = libraryConvolution(elt, /*backwardData=*/true);
    if (callee.empty())
      return rewriter.notifyMatchFailure(op, "not f32 or f64");
    bool direct = pads[0] == pads[2] && pads[1] == pads[3] &&
                  outPad[0] < st[0] && outPad[1] < st[1];
    RankedTensorType callType = rt;
    SmallVector<int64_t> pad = {pads[0], pads[1]};
    auto in = tensorTypeOf(adaptor.getInput()),
         wt = tensorTypeOf(adaptor.getWeight());
    if (!direct) {
      SmallVector<int64_t> full(rt.getShape());
      for (int i = 0; i < 2; ++i)
        full[2 + i] = dopt::transposedOutputSize(in.getDimSize(2 + i),
                                                 wt.getDimSize(2 + i), st[i],
                                                 0, 0, dl[i], 0);
      callType = RankedTensorType::get(full, elt);
      pad = {0, 0};
    }
    Value y = libraryConvolutionCall(
        rewriter, loc, callee, (*libraryCalls)++, op.getInput(),
        adaptor.getInput(), op.getWeight(), adaptor.getWeight(), callType, st,
        pad, dl, op.getGroup());
    if (!direct) {
      // y = full[begin pads : begin pads + output], zeros past its end
      // (all zeros where the begin pad passes the full result's end).
      SmallVector<int64_t> keep(rt.getShape()), extra(2, 0), from(2);
      for (int i = 0; i < 2; ++i) {
        int64_t full = callType.getDimSize(2 + i);
        keep[2 + i] =
            std::clamp<int64_t>(full - pads[i], 0, rt.getDimSize(2 + i));
        from[i] = keep[2 + i] ? pads[i] : 0; // an empty slice starts inside
        extra[i] = rt.getDimSize(2 + i) - keep[2 + i];
      }
      SmallVector<OpFoldResult> offsets = {
          rewriter.getIndexAttr(0), rewriter.getIndexAttr(0),
          rewriter.getIndexAttr(from[0]), rewriter.getIndexAttr(from[1])};
      SmallVector<OpFoldResult> sizes, ones(4, rewriter.getIndexAttr(1));
      for (int64_t d : keep)
        sizes.push_back(rewriter.getIndexAttr(d));
      y = tensor::ExtractSliceOp::create(
          rewriter, loc, RankedTensorType::get(keep, elt), y, offsets, sizes,
          ones);
      y = padSpatial(rewriter, loc, y, {0, 0}, extra,
                     scalarConstant(rewriter, loc, elt, 0.0));
    }
    rewriter.replaceOp(op, addChannelBias(rewriter, loc, y, adaptor.getBias()));
    return success();
  }
};

/// Extra end padding that ceil_mode needs so that every output window lies
/// inside the padded input.
SmallVector<int64_t> ceilExtra(RankedTensorType in, RankedTensorType out,
                               ArrayRef<int64_t> kernel,
                               ArrayRef<int64_t> strides,
                               ArrayRef<int64_t> pads,
                               ArrayRef<int64_t> dilations) {
  SmallVector<int64_t> extra;
  for (int i = 0; i < 2; ++i) {
    int64_t need = (out.getDimSize(2 + i) - 1) * strides[i] +
                   (kernel[i] - 1) * dilations[i] + 1;
    int64_t have = in.getDimSize(2 + i) + pads[i] + pads[i + 2];
    extra.push_back(std::max<int64_t>(0, need - have));
  }
  return extra;
}

/// Pooling windows up to this many positions are unrolled into the inputs
/// of one elementwise op.
constexpr int64_t kMaxUnrolledWindow = 9;

/// For each window position (i, j), row-major: the strided slice of the
/// (padded) NCHW input `x` that position reads for every output,
/// x[n, c, i*d0 : ... : s0, j*d1 : ... : s1] of shape `outShape` (a view,
/// not a copy).
SmallVector<Value> windowSlices(OpBuilder &b, Location loc, Value x,
                                ArrayRef<int64_t> outShape,
                                ArrayRef<int64_t> kernel,
                                ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> dilations) {
  auto sliceType =
      RankedTensorType::get(outShape, tensorTypeOf(x).getElementType());
  auto idx = [&](int64_t v) -> OpFoldResult { return b.getIndexAttr(v); };
  SmallVector<Value> slices;
  for (int64_t i = 0; i < kernel[0]; ++i)
    for (int64_t j = 0; j < kernel[1]; ++j)
      slices.push_back(tensor::ExtractSliceOp::create(
          b, loc, sliceType, x,
          ArrayRef<OpFoldResult>{idx(0), idx(0), idx(i * dilations[0]),
                                 idx(j * dilations[1])},
          ArrayRef<OpFoldResult>{idx(outShape[0]), idx(outShape[1]),
                                 idx(outShape[2]), idx(outShape[3])},
          ArrayRef<OpFoldResult>{idx(1), idx(1), idx(strides[0]),
                                 idx(strides[1])}));
  return slices;
}

struct MaxPoolPattern : DoptPattern<dopt::MaxPoolOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::MaxPoolOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    Type orig = origElt(op.getInput());
    ArrayRef<int64_t> pads = op.getPads(), kernel = op.getKernelShape();
    SmallVector<int64_t> extra =
        ceilExtra(tensorTypeOf(adaptor.getInput()), rt, kernel,
                  op.getStrides(), pads, op.getDilations());
    SmallVector<int64_t> hi = {pads[2] + extra[0], pads[3] + extra[1]};
    // Padding and the initial maximum are the lowest finite value (as ONNX
    // Runtime), so a window entirely in the padding yields it, not -inf.
    Value lowest =
        isa<FloatType>(elt)
            ? (Value)arith::ConstantOp::create(
                  rewriter, loc,
                  rewriter.getFloatAttr(
                      elt, APFloat::getLargest(
                               cast<FloatType>(elt).getFloatSemantics(),
                               /*Negative=*/true)))
            : lowestValue(rewriter, loc, elt, isUnsignedElt(orig));
    Value x = padSpatial(rewriter, loc, adaptor.getInput(),
                         pads.take_front(2), hi, lowest);
    // Small float windows (2x2, 3x3): one elementwise op over the output
    // that reads every window position as its own input -- the strided view
    // x[n, c, oh*s + i*d, ow*s + j*d] for each (i, j) -- and takes their
    // maximum: no reduction loops and no fill of the output.
    if (isa<FloatType>(elt) && kernel[0] * kernel[1] <= kMaxUnrolledWindow) {
      MLIRContext *ctx = rewriter.getContext();
      ArrayRef<int64_t> s = op.getStrides(), d = op.getDilations();
      SmallVector<Value> ins =
          windowSlices(rewriter, loc, x, rt.getShape(), kernel, s, d);
      SmallVector<AffineMap> maps(ins.size() + 1,
                                  AffineMap::getMultiDimIdentityMap(4, ctx));
      Value init = emptyTensor(rewriter, loc, rt.getShape(), elt);
      Value out =
          linalg::GenericOp::create(
              rewriter, loc, TypeRange{init.getType()}, ins, ValueRange{init},
              maps,
              SmallVector<utils::IteratorType>(4,
                                               utils::IteratorType::parallel),
              [&](OpBuilder &b, Location l, ValueRange a) {
                Value m = a[0];
                for (Value v : a.drop_front().drop_back())
                  m = arith::MaximumFOp::create(b, l, m, v);
                linalg::YieldOp::create(b, l, m);
              })
              .getResult(0);
      rewriter.replaceOp(op, out);
      return success();
    }
    Value window = emptyTensor(rewriter, loc, kernel, elt);
    Value acc = filled(rewriter, loc, rt.getShape(), lowest);
    auto strides = i64Vector(rewriter, op.getStrides());
    auto dilations = i64Vector(rewriter, op.getDilations());
    Value out;
    if (!isUnsignedElt(orig)) {
      // pooling_nchw_max takes the signed maximum for integers.
      out = linalg::PoolingNchwMaxOp::create(
                rewriter, loc, TypeRange{acc.getType()}, ValueRange{x, window},
                ValueRange{acc}, strides, dilations)
                .getResult(0);
    } else {
      // No named unsigned NCHW pooling: the same loop nest as a generic,
      // (n, c, oh, ow, kh, kw) reading x[n, c, oh*s + kh*d, ow*s + kw*d].
      MLIRContext *ctx = rewriter.getContext();
      ArrayRef<int64_t> s = op.getStrides(), d = op.getDilations();
      auto dim = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
      SmallVector<AffineMap> maps = {
          AffineMap::get(6, 0,
                         {dim(0), dim(1), dim(2) * s[0] + dim(4) * d[0],
                          dim(3) * s[1] + dim(5) * d[1]},
                         ctx),
          AffineMap::get(6, 0, {dim(4), dim(5)}, ctx),
          AffineMap::get(6, 0, {dim(0), dim(1), dim(2), dim(3)}, ctx)};
      SmallVector<utils::IteratorType> iters(4, utils::IteratorType::parallel);
      iters.append(2, utils::IteratorType::reduction);
      out = linalg::GenericOp::create(
                rewriter, loc, TypeRange{acc.getType()}, ValueRange{x, window},
                ValueRange{acc}, maps, iters,
                [](OpBuilder &b, Location l, ValueRange a) {
                  linalg::YieldOp::create(
                      b, l, Value(arith::MaxUIOp::create(b, l, a[0], a[2])));
                })
                .getResult(0);
    }
    rewriter.replaceOp(op, out);
    return success();
  }
};

struct AvgPoolPattern : DoptPattern<dopt::AvgPoolOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::AvgPoolOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    auto inType = tensorTypeOf(adaptor.getInput());
    ArrayRef<int64_t> pads = op.getPads(), kernel = op.getKernelShape(),
                      strides = op.getStrides();
    int64_t ones[2] = {1, 1};
    SmallVector<int64_t> extra =
        ceilExtra(inType, rt, kernel, strides, pads, ones);
    SmallVector<int64_t> hi = {pads[2] + extra[0], pads[3] + extra[1]};
    Value x = padSpatial(rewriter, loc, adaptor.getInput(), pads.take_front(2),
                         hi, scalarConstant(rewriter, loc, elt, 0.0));
    Value sum;
    if (isa<FloatType>(elt) && kernel[0] * kernel[1] <= kMaxUnrolledWindow) {
      // Small windows: one elementwise sum of the window's strided slices.
      SmallVector<Value> slices = windowSlices(rewriter, loc, x, rt.getShape(),
                                               kernel, strides, ones);
      sum = elementwise(rewriter, loc, rt.getShape(), elt, slices,
                        [&](OpBuilder &b, Location l, ValueRange a) {
                          Value v = a[0];
                          for (Value w : a.drop_front())
                            v = arith::AddFOp::create(b, l, v, w);
                          return v;
                        });
    } else {
      Value window = emptyTensor(rewriter, loc, kernel, elt);
      Value acc = filled(rewriter, loc, rt.getShape(),
                         scalarConstant(rewriter, loc, elt, 0.0));
      sum = linalg::PoolingNchwSumOp::create(
                rewriter, loc, TypeRange{acc.getType()}, ValueRange{x, window},
                ValueRange{acc}, i64Vector(rewriter, strides),
                i64Vector(rewriter, ones))
                .getResult(0);
    }
    // Divisors are known at compile time: the window's overlap with the
    // input (count_include_pad: with the input plus its explicit pads; the
    // ceil_mode overhang never counts).
    int64_t ho = rt.getDimSize(2), wo = rt.getDimSize(3);
    SmallVector<float> counts;
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        int64_t cnt = 1;
        for (int d = 0; d < 2; ++d)
          cnt *= dopt::windowTapCount(d == 0 ? i : j, inType.getDimSize(2 + d),
                                      kernel[d], strides[d], pads[d],
                                      pads[d + 2], 1,
                                      op.getCountIncludePad());
        counts.push_back((float)cnt);
      }
    Value divisor = arith::ConstantOp::create(
        rewriter, loc,
        DenseElementsAttr::get(
            RankedTensorType::get({ho, wo}, rewriter.getF32Type()),
            ArrayRef<float>(counts)));
    Value out = elementwise(
        rewriter, loc, rt.getShape(), elt, {sum, divisor},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value v = widen(b, l, a[0]);
          Value d = a[1];
          if (d.getType() != v.getType())
            d = convertScalar(b, l, d, d.getType(), v.getType());
          return narrow(b, l, arith::DivFOp::create(b, l, v, d), elt);
        });
    rewriter.replaceOp(op, out);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

struct ReshapePattern : DoptPattern<dopt::ReshapeOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ReshapeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, reshapeTo(rewriter, op.getLoc(), adaptor.getInput(),
                                     op.getShape()));
    return success();
  }
};

struct TransposePattern : DoptPattern<dopt::TransposeOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::TransposeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    Value init = emptyTensor(rewriter, op.getLoc(), rt.getShape(),
                             rt.getElementType());
    rewriter.replaceOp(op, linalg::TransposeOp::create(
                               rewriter, op.getLoc(), adaptor.getInput(), init,
                               op.getPerm())
                               .getResult()[0]);
    return success();
  }
};

/// The most inputs one chain of tensor.insert_slice takes. One-shot
/// bufferization's conflict analysis of a chain into one buffer is about
/// cubic in its length (every insert against every other use of the
/// buffer, each along the use-def chain): a 256-way concat took 100 s to
/// bufferize. Longer concats are concatenated in groups first (each group
/// its own buffer, copied once into the result).
constexpr size_t kConcatChain = 32;

/// `inputs` concatenated along `axis` into a new tensor of element type
/// `elt`: a chain of tensor.insert_slice into a tensor.empty, grouped as
/// kConcatChain says.
Value concatenate(OpBuilder &b, Location loc, ValueRange inputs, int64_t axis,
                  Type elt) {
  SmallVector<Value> parts(inputs);
  if (parts.size() > kConcatChain) {
    SmallVector<Value> groups;
    for (size_t i = 0; i < parts.size(); i += kConcatChain) {
      ValueRange group = ValueRange(parts).slice(
          i, std::min(kConcatChain, parts.size() - i));
      groups.push_back(group.size() == 1
                           ? group.front()
                           : concatenate(b, loc, group, axis, elt));
    }
    return concatenate(b, loc, groups, axis, elt);
  }
  SmallVector<int64_t> shape(tensorTypeOf(parts.front()).getShape());
  shape[axis] = 0;
  for (Value in : parts)
    shape[axis] += tensorTypeOf(in).getDimSize(axis);
  Value acc = emptyTensor(b, loc, shape, elt);
  int64_t offset = 0;
  for (Value in : parts) {
    auto t = tensorTypeOf(in);
    if (t.getNumElements() == 0)
      continue; // nothing to insert (and its offset may be out of bounds)
    SmallVector<OpFoldResult> offsets(shape.size(), b.getIndexAttr(0));
    offsets[axis] = b.getIndexAttr(offset);
    SmallVector<OpFoldResult> sizes, strides(shape.size(), b.getIndexAttr(1));
    for (int64_t d : t.getShape())
      sizes.push_back(b.getIndexAttr(d));
    acc = tensor::InsertSliceOp::create(b, loc, in, acc, offsets, sizes,
                                        strides);
    offset += t.getDimSize(axis);
  }
  return acc;
}

struct ConcatPattern : DoptPattern<dopt::ConcatOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ConcatOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    RankedTensorType rt = resultType(op);
    rewriter.replaceOp(op, concatenate(rewriter, op.getLoc(),
                                       adaptor.getInputs(), op.getAxis(),
                                       rt.getElementType()));
    return success();
  }
};

/// A strided window of `src` (positive steps) as tensor.extract_slice.
Value extractSlice(OpBuilder &b, Location loc, Value src,
                   ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes,
                   ArrayRef<int64_t> steps) {
  SmallVector<OpFoldResult> o, s, st;
  for (size_t i = 0; i < offsets.size(); ++i) {
    o.push_back(b.getIndexAttr(offsets[i]));
    s.push_back(b.getIndexAttr(sizes[i]));
    st.push_back(b.getIndexAttr(steps[i]));
  }
  auto type = RankedTensorType::get(sizes, tensorTypeOf(src).getElementType());
  // An empty slice may start at the end of a dimension, which
  // tensor.extract_slice rejects: it is just an empty tensor.
  if (type.getNumElements() == 0)
    return emptyTensor(b, loc, sizes, type.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, type, src, o, s, st);
}

struct SplitPattern : DoptPattern<dopt::SplitOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::SplitOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto t = tensorTypeOf(adaptor.getInput());
    int64_t axis = op.getAxis(), offset = 0;
    SmallVector<Value> results;
    for (int64_t size : op.getSizes()) {
      SmallVector<int64_t> offsets(t.getRank(), 0), sizes(t.getShape()),
          steps(t.getRank(), 1);
      offsets[axis] = offset;
      sizes[axis] = size;
      results.push_back(extractSlice(rewriter, op.getLoc(),
                                     adaptor.getInput(), offsets, sizes,
                                     steps));
      offset += size;
    }
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct SlicePattern : DoptPattern<dopt::SliceOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::SliceOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    ArrayRef<int64_t> starts = op.getStarts(), steps = op.getSteps();
    if (llvm::all_of(steps, [](int64_t s) { return s > 0; })) {
      rewriter.replaceOp(op, extractSlice(rewriter, loc, adaptor.getInput(),
                                          starts, rt.getShape(), steps));
      return success();
    }
    // Negative steps: an affine read map start + i * step.
    MLIRContext *ctx = rewriter.getContext();
    int64_t rank = rt.getRank();
    if (rt.getNumElements() == 0) {
      rewriter.replaceOp(op, emptyTensor(rewriter, loc, rt));
      return success();
    }
    SmallVector<AffineExpr> exprs;
    for (int64_t i = 0; i < rank; ++i)
      exprs.push_back(getAffineDimExpr(i, ctx) * steps[i] + starts[i]);
    rewriter.replaceOp(op, parallelOver(rewriter, loc, rt, adaptor.getInput(),
                                        AffineMap::get(rank, 0, exprs, ctx),
                                        [](OpBuilder &, Location,
                                           ValueRange x) { return x[0]; }));
    return success();
  }
};

/// An index of Gather, GatherElements or ScatterElements as an index into
/// an axis of `dim` elements: negative ones count from the end,
/// out-of-range ones are clamped (ONNX leaves them undefined; never read
/// or written out of bounds).
Value axisIndex(OpBuilder &b, Location l, Value raw, int64_t dim) {
  Value idx = arith::IndexCastOp::create(b, l, b.getIndexType(), raw);
  Value zero = arith::ConstantIndexOp::create(b, l, 0);
  Value neg =
      arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, idx, zero);
  idx = arith::SelectOp::create(
      b, l, neg,
      arith::AddIOp::create(b, l, idx, arith::ConstantIndexOp::create(b, l, dim)),
      idx);
  idx = arith::MaxSIOp::create(b, l, idx, zero);
  return arith::MinSIOp::create(b, l, idx,
                                arith::ConstantIndexOp::create(b, l, dim - 1));
}

struct GatherPattern : DoptPattern<dopt::GatherOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::GatherOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType rt = resultType(op);
    Value data = adaptor.getData();
    auto dt = tensorTypeOf(data), it = tensorTypeOf(adaptor.getIndices());
    int64_t axis = op.getAxis(), rank = rt.getRank(), ir = it.getRank();
    int64_t dim = dt.getDimSize(axis);
    if (rt.getNumElements() == 0 || dim == 0) {
      rewriter.replaceOp(op, emptyTensor(rewriter, loc, rt));
      return success();
    }
    // Output dims: data[:axis] ++ indices ++ data[axis+1:].
    SmallVector<AffineExpr> idxExprs;
    for (int64_t i = 0; i < ir; ++i)
      idxExprs.push_back(getAffineDimExpr(axis + i, ctx));
    rewriter.replaceOp(
        op, parallelOver(
                rewriter, loc, rt, adaptor.getIndices(),
                AffineMap::get(rank, 0, idxExprs, ctx),
                [&](OpBuilder &b, Location l, ValueRange index) -> Value {
                  Value idx = axisIndex(b, l, index[0], dim);
                  SmallVector<Value> coords;
                  for (int64_t i = 0; i < axis; ++i)
                    coords.push_back(linalg::IndexOp::create(b, l, i));
                  coords.push_back(idx);
                  for (int64_t i = axis + 1; i < dt.getRank(); ++i)
                    coords.push_back(linalg::IndexOp::create(b, l, i - 1 + ir));
                  return tensor::ExtractOp::create(b, l, data, coords);
                }));
    return success();
  }
};

/// gather_elements: one parallel loop nest over the result; each element
/// reads the data at its own position with the axis coordinate replaced by
/// its index.
struct GatherElementsPattern : DoptPattern<dopt::GatherElementsOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::GatherElementsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType rt = resultType(op);
    Value data = adaptor.getData();
    int64_t axis = op.getAxis(), rank = rt.getRank();
    int64_t dim = tensorTypeOf(data).getDimSize(axis);
    if (rt.getNumElements() == 0) {
      rewriter.replaceOp(op, emptyTensor(rewriter, loc, rt));
      return success();
    }
    rewriter.replaceOp(
        op, parallelOver(
                rewriter, loc, rt, adaptor.getIndices(),
                AffineMap::getMultiDimIdentityMap(rank, ctx),
                [&](OpBuilder &b, Location l, ValueRange index) -> Value {
                  SmallVector<Value> coords;
                  for (int64_t i = 0; i < rank; ++i)
                    coords.push_back(
                        i == axis ? axisIndex(b, l, index[0], dim)
                                  : Value(linalg::IndexOp::create(b, l, i)));
                  return tensor::ExtractOp::create(b, l, data, coords);
                }));
    return success();
  }
};

/// scatter_elements. Updates only move along the axis, so each column (a
/// position off the axis) is independent of the others, and within a
/// column the updates apply in order along the axis -- row-major order, as
/// ONNX's reference takes them (the last of duplicate indices wins under
/// "none"; add, mul, max and min combine in order). Two forms:
/// - the data's axis is short (at most kMaxParallelScatterAxis) and the
///   indices span the data off the axis: a parallel loop nest over the
///   result, each element folding, in order, the updates of its column
///   whose index names it (O(axis) reads per element: the gradient of a
///   gather or a top-k over a short axis, on every GPU thread);
/// - otherwise one sequential loop over the updates (one thread on the GPU).
constexpr int64_t kMaxParallelScatterAxis = 256;

struct ScatterElementsPattern : DoptPattern<dopt::ScatterElementsOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::ScatterElementsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value data = adaptor.getData(), indices = adaptor.getIndices(),
          updates = adaptor.getUpdates();
    auto ut = tensorTypeOf(updates), dt = tensorTypeOf(data);
    int64_t axis = op.getAxis(), rank = ut.getRank();
    int64_t dim = dt.getDimSize(axis);
    int64_t n = ut.getNumElements();
    if (n == 0) {
      rewriter.replaceOp(op, data);
      return success();
    }
    Type elt = origElt(op.getData());
    StringRef red = op.getReduction();
    auto combine = [&](OpBuilder &b, Location l, Value old, Value u) -> Value {
      if (red == "none")
        return u;
      if (red == "max" || red == "min") {
        // The update where it is larger (smaller), else what is there: a NaN
        // update changes nothing, as std::max in ONNX Runtime and max() in
        // ONNX's reference.
        Value takes = emitBinary(b, l, red == "max" ? BinKind::Gt : BinKind::Lt,
                                 u, old, elt, elt);
        return arith::SelectOp::create(b, l, takes, u, old);
      }
      return emitBinary(b, l, red == "add" ? BinKind::Add : BinKind::Mul, old,
                        u, elt, elt);
    };
    bool spans = true;
    for (int64_t d = 0; d < rank; ++d)
      spans &= d == axis || ut.getDimSize(d) == dt.getDimSize(d);
    if (dim <= kMaxParallelScatterAxis && spans) {
      MLIRContext *ctx = rewriter.getContext();
      // Loops (d0 .. d{rank-1}, s): s runs along the updates' axis.
      SmallVector<AffineExpr> e;
      for (int64_t d = 0; d < rank; ++d)
        e.push_back(getAffineDimExpr(d == axis ? rank : d, ctx));
      AffineMap column = AffineMap::get(rank + 1, 0, e, ctx);
      AffineMap own = AffineMap::getMultiDimIdentityMap(rank + 1, ctx)
                          .getMajorSubMap(rank);
      SmallVector<utils::IteratorType> iters(rank,
                                             utils::IteratorType::parallel);
      iters.push_back(utils::IteratorType::reduction);
      auto g = linalg::GenericOp::create(
          rewriter, loc, TypeRange{data.getType()}, ValueRange{indices, updates},
          ValueRange{data}, SmallVector<AffineMap>{column, column, own}, iters,
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value here = linalg::IndexOp::create(b, l, axis);
            Value hit = arith::CmpIOp::create(
                b, l, arith::CmpIPredicate::eq, axisIndex(b, l, a[0], dim),
                here);
            linalg::YieldOp::create(
                b, l,
                Value(arith::SelectOp::create(b, l, hit,
                                              combine(b, l, a[2], a[1]), a[2])));
          });
      rewriter.replaceOp(op, g.getResult(0));
      return success();
    }
    auto c = [&](int64_t v) {
      return arith::ConstantIndexOp::create(rewriter, loc, v).getResult();
    };
    auto loop = scf::ForOp::create(
        rewriter, loc, c(0), c(n), c(1), ValueRange{data},
        [&](OpBuilder &b, Location l, Value k, ValueRange acc) {
          // Row-major coordinates of update k.
          SmallVector<Value> coords =
              distopt::rowMajorCoords(b, l, k, ut.getShape());
          Value u = tensor::ExtractOp::create(b, l, updates, coords);
          SmallVector<Value> at(coords);
          at[axis] = axisIndex(
              b, l, tensor::ExtractOp::create(b, l, indices, coords), dim);
          if (red != "none")
            u = combine(b, l, tensor::ExtractOp::create(b, l, acc[0], at), u);
          scf::YieldOp::create(
              b, l, Value(tensor::InsertOp::create(b, l, u, acc[0], at)));
        });
    rewriter.replaceOp(op, loop.getResult(0));
    return success();
  }
};

/// top_k, in two parallel loop nests (deterministic, no sort): the rank of
/// each element along the axis -- how many elements come before it:
/// larger ones (smaller ones for !largest), and equal ones at lower
/// indices -- then, for each output position j, the element whose rank is
/// j. O(n^2) comparisons per row of n elements: meant for the k of a
/// router or a few candidates, not for sorting long rows.
struct TopKPattern : DoptPattern<dopt::TopKOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::TopKOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value x = adaptor.getInput();
    auto xt = tensorTypeOf(x);
    RankedTensorType vt = resultType(op, 0), it = resultType(op, 1);
    Type elt = origElt(op.getInput());
    int64_t axis = op.getAxis(), rank = xt.getRank();
    bool largest = op.getLargest();
    if (vt.getNumElements() == 0) {
      rewriter.replaceOp(op, {emptyTensor(rewriter, loc, vt.getShape(),
                                          vt.getElementType()),
                              emptyTensor(rewriter, loc, it.getShape(),
                                          it.getElementType())});
      return success();
    }
    Type i64 = rewriter.getI64Type();
    // Loops (d0 .. d{rank-1}, m): m runs along the axis beside d{axis}.
    auto along = [&](unsigned m) {
      SmallVector<AffineExpr> e;
      for (int64_t d = 0; d < rank; ++d)
        e.push_back(getAffineDimExpr(d == axis ? m : d, ctx));
      return AffineMap::get(rank + 1, 0, e, ctx);
    };
    AffineMap own = along(axis), other = along(rank);
    SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
    iters.push_back(utils::IteratorType::reduction);
    Value zero64 = scalarConstant(rewriter, loc, i64, 0);
    Value ranks = filled(rewriter, loc, xt.getShape(), zero64);
    ranks = linalg::GenericOp::create(
                rewriter, loc, TypeRange{ranks.getType()}, ValueRange{x, x},
                ValueRange{ranks}, SmallVector<AffineMap>{own, other, own},
                iters,
                [&](OpBuilder &b, Location l, ValueRange a) {
                  Value i = linalg::IndexOp::create(b, l, axis);
                  Value m = linalg::IndexOp::create(b, l, rank);
                  Value beats = emitBinary(b, l, largest ? BinKind::Gt
                                                         : BinKind::Lt,
                                           a[1], a[0], elt, elt);
                  Value same = emitBinary(b, l, BinKind::Eq, a[1], a[0], elt, elt);
                  if (isa<FloatType>(elt)) {
                    // NaN is the largest value (ONNX's reference sorts
                    // with NumPy): first for largest, last for smallest;
                    // NaNs tie with each other. The order stays total, so
                    // every rank is taken.
                    auto isNaN = [&](Value v) {
                      Value w = widen(b, l, v);
                      return arith::CmpFOp::create(
                          b, l, arith::CmpFPredicate::UNO, w, w);
                    };
                    Value nanM = isNaN(a[1]), nanI = isNaN(a[0]);
                    Value one = arith::ConstantIntOp::create(b, l, 1, 1);
                    auto notV = [&](Value v) {
                      return arith::XOrIOp::create(b, l, v, one);
                    };
                    Value nanFirst = largest
                                         ? arith::AndIOp::create(b, l, nanM, notV(nanI))
                                         : arith::AndIOp::create(b, l, nanI, notV(nanM));
                    beats = arith::OrIOp::create(b, l, beats, nanFirst);
                    same = arith::OrIOp::create(
                        b, l, same, arith::AndIOp::create(b, l, nanM, nanI));
                  }
                  Value tie = arith::AndIOp::create(
                      b, l, same,
                      arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult,
                                            m, i));
                  Value before = arith::OrIOp::create(b, l, beats, tie);
                  Value one = arith::ExtUIOp::create(b, l, b.getI64Type(),
                                                     before);
                  linalg::YieldOp::create(
                      b, l, Value(arith::AddIOp::create(b, l, a[2], one)));
                })
                .getResult(0);
    // Output j along the axis: the element of rank j (each rank is taken
    // once; the fill only guards the outputs should that ever fail).
    Value vInit = filled(rewriter, loc, vt.getShape(),
                         scalarConstant(rewriter, loc, vt.getElementType(), 0));
    Value iInit = filled(rewriter, loc, it.getShape(), zero64);
    auto sel = linalg::GenericOp::create(
        rewriter, loc, TypeRange{vt, it}, ValueRange{x, ranks},
        ValueRange{vInit, iInit},
        SmallVector<AffineMap>{other, other, own, own}, iters,
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value j = arith::IndexCastOp::create(
              b, l, b.getI64Type(), linalg::IndexOp::create(b, l, axis));
          Value m = arith::IndexCastOp::create(
              b, l, b.getI64Type(), linalg::IndexOp::create(b, l, rank));
          Value hit =
              arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, a[1], j);
          linalg::YieldOp::create(
              b, l,
              ValueRange{arith::SelectOp::create(b, l, hit, a[0], a[2]),
                         arith::SelectOp::create(b, l, hit, m, a[3])});
        });
    rewriter.replaceOp(op, sel.getResults());
    return success();
  }
};

struct PadPattern : DoptPattern<dopt::PadOp> {
  using DoptPattern::DoptPattern;
  LogicalResult
  matchAndRewrite(dopt::PadOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType rt = resultType(op);
    Type elt = rt.getElementType();
    Value in = adaptor.getInput();
    auto inType = tensorTypeOf(in);
    int64_t rank = rt.getRank();
    ArrayRef<int64_t> pads = op.getPads();
    if (op.getMode() == "constant") {
      SmallVector<OpFoldResult> lo, hi;
      for (int64_t i = 0; i < rank; ++i) {
        lo.push_back(rewriter.getIndexAttr(pads[i]));
        hi.push_back(rewriter.getIndexAttr(pads[i + rank]));
      }
      double v = op.getValue().convertToDouble();
      Value pv = elt.isInteger(1)
                     ? scalarConstant(rewriter, loc, elt, v != 0.0)
                     : scalarConstant(rewriter, loc, elt, v);
      rewriter.replaceOpWithNewOp<tensor::PadOp>(op, rt, in, lo, hi, pv);
      return success();
    }
    if (rt.getNumElements() == 0) {
      rewriter.replaceOp(op, emptyTensor(rewriter, loc, rt.getShape(), elt));
      return success();
    }
    bool reflect = op.getMode() == "reflect";
    SmallVector<AffineMap> maps = {
        AffineMap::getMultiDimIdentityMap(rank, rewriter.getContext())};
    SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
    Value init = emptyTensor(rewriter, loc, rt.getShape(), elt);
    auto g = linalg::GenericOp::create(
        rewriter, loc, TypeRange{rt}, ValueRange{}, ValueRange{init}, maps,
        iters, [&](OpBuilder &b, Location l, ValueRange) {
          SmallVector<Value> coords;
          for (int64_t i = 0; i < rank; ++i) {
            int64_t d = inType.getDimSize(i);
            Value p = arith::SubIOp::create(
                b, l, linalg::IndexOp::create(b, l, i),
                arith::ConstantIndexOp::create(b, l, pads[i]));
            Value zero = arith::ConstantIndexOp::create(b, l, 0);
            Value last = arith::ConstantIndexOp::create(b, l, d - 1);
            if (reflect) {
              // Mirror without repeating the edge: -p below 0, 2(d-1)-p above.
              Value below = arith::CmpIOp::create(
                  b, l, arith::CmpIPredicate::slt, p, zero);
              p = arith::SelectOp::create(
                  b, l, below, arith::SubIOp::create(b, l, zero, p), p);
              Value above = arith::CmpIOp::create(
                  b, l, arith::CmpIPredicate::sgt, p, last);
              Value twice = arith::ConstantIndexOp::create(b, l, 2 * (d - 1));
              p = arith::SelectOp::create(
                  b, l, above, arith::SubIOp::create(b, l, twice, p), p);
            }
            p = arith::MaxSIOp::create(b, l, p, zero);
            p = arith::MinSIOp::create(b, l, p, last);
            coords.push_back(p);
          }
          linalg::YieldOp::create(
              b, l, Value(tensor::ExtractOp::create(b, l, in, coords)));
        });
    rewriter.replaceOp(op, g.getResult(0));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// Ops that accumulate (sums, dot products, normalisation statistics) run
/// in f32 when their operands are f16/bf16: the operands are cast up, the op
/// is rebuilt on f32 and its result cast back, so rounding happens once, as
/// in ONNX Runtime. (An f16 running sum stops growing at 2048.)
void widenAccumulatingOps(ModuleOp module) {
  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (!isa<dopt::MatMulOp, dopt::GemmOp, dopt::ConvOp,
             dopt::ConvTransposeOp, dopt::AvgPoolOp,
             dopt::GlobalAvgPoolOp, dopt::ReduceSumOp, dopt::ReduceMeanOp,
             dopt::SoftmaxOp, dopt::LogSoftmaxOp, dopt::LayerNormOp,
             dopt::BatchNormOp>(op))
      return;
    if (llvm::any_of(op->getOperandTypes(), [](Type t) {
          return isLowPrecisionFloat(cast<RankedTensorType>(t).getElementType());
        }))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    auto f32 = b.getF32Type();
    OperationState state(loc, op->getName());
    for (Value v : op->getOperands()) {
      auto t = cast<RankedTensorType>(v.getType());
      state.operands.push_back(
          isLowPrecisionFloat(t.getElementType())
              ? dopt::CastOp::create(b, loc, t.clone(f32), v, TypeAttr::get(f32))
                    .getResult()
              : v);
    }
    state.attributes = op->getAttrDictionary();
    for (Type t : op->getResultTypes())
      state.types.push_back(cast<RankedTensorType>(t).clone(f32));
    Operation *wide = b.create(state);
    for (auto [oldResult, newResult] :
         llvm::zip(op->getResults(), wide->getResults())) {
      auto t = cast<RankedTensorType>(oldResult.getType());
      oldResult.replaceAllUsesWith(
          dopt::CastOp::create(b, loc, t, newResult,
                               TypeAttr::get(t.getElementType()))
              .getResult());
    }
    op->erase();
  }
}

struct ConvertDoptToLinalgPass
    : distopt::impl::ConvertDoptToLinalgPassBase<ConvertDoptToLinalgPass> {
  using ConvertDoptToLinalgPassBase::ConvertDoptToLinalgPassBase;

  /// Declares the runtime convolutions the module's dopt.conv (with
  /// library-convolutions) and dopt.conv_transpose ops will call.
  void declareLibraryConvolutions() {
    ModuleOp module = getOperation();
    llvm::MapVector<StringRef, Type> calls; // name -> element type
    module.walk([&](Operation *op) {
      if (!isa<dopt::ConvTransposeOp>(op) &&
          !(libraryConvolutions && isa<dopt::ConvOp>(op)))
        return;
      Type elt = tensorTypeOf(op->getResult(0)).getElementType();
      StringRef name =
          libraryConvolution(elt, isa<dopt::ConvTransposeOp>(op));
      if (!name.empty())
        calls.insert({name, elt});
    });
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    for (auto [name, elt] : calls) {
      if (module.lookupSymbol(name))
        continue;
      MemRefType any = anyStrided4D(elt);
      Type i64 = b.getI64Type();
      auto fn = func::FuncOp::create(
          b, module.getLoc(), name,
          b.getFunctionType({any, any, any, i64, i64, i64, i64, i64, i64, i64},
                            {}));
      fn.setPrivate();
      fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    }
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    widenAccumulatingOps(getOperation());
    TypeConverter converter;
    converter.addConversion([](Type t) { return t; });
    converter.addConversion([](IntegerType t) -> Type {
      return signlessElement(t);
    });
    converter.addConversion([](RankedTensorType t) -> Type {
      return t.clone(signlessElement(t.getElementType()));
    });

    ConversionTarget target(*ctx);
    target.addIllegalDialect<dopt::DoptDialect>();
    target.addLegalDialect<linalg::LinalgDialect, tensor::TensorDialect,
                           arith::ArithDialect, math::MathDialect,
                           scf::SCFDialect,
                           bufferization::BufferizationDialect,
                           memref::MemRefDialect>();
    // A runtime call is not dead code to later passes, as pure linalg is:
    // drop the dead dopt ops first (such as Autodiff's gradient for a data
    // input that nothing reads, a transposed convolution).
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<dopt::DoptDialect>(op->getDialect()))
        ops.push_back(op);
    });
    for (Operation *op : llvm::reverse(ops))
      if (isOpTriviallyDead(op))
        op->erase();
    declareLibraryConvolutions();
    declareIndexFault(getOperation());
    target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp f) {
      return converter.isSignatureLegal(f.getFunctionType());
    });
    target.addDynamicallyLegalOp<func::ReturnOp, func::CallOp>(
        [&](Operation *op) { return converter.isLegal(op); });

    RewritePatternSet patterns(ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                   converter);
    populateReturnOpTypeConversionPattern(patterns, converter);
    populateCallOpTypeConversionPattern(patterns, converter);
    int64_t libraryCalls = 0;
    patterns.add<ConvPattern>(converter, ctx, libraryConvolutions,
                              &libraryCalls);
    patterns.add<ConvTransposePattern>(converter, ctx, &libraryCalls);
    int64_t indexChecks = 0;
    populateCheckIndicesPattern(patterns, converter, &indexChecks);
    patterns.add<
        DropoutPattern,
        BinaryPattern<dopt::AddOp, BinKind::Add>,
        BinaryPattern<dopt::SubOp, BinKind::Sub>,
        BinaryPattern<dopt::MulOp, BinKind::Mul>,
        BinaryPattern<dopt::DivOp, BinKind::Div>,
        BinaryPattern<dopt::MaxOp, BinKind::Max>,
        BinaryPattern<dopt::MinOp, BinKind::Min>,
        BinaryPattern<dopt::PowOp, BinKind::Pow>,
        BinaryPattern<dopt::EqualOp, BinKind::Eq>,
        BinaryPattern<dopt::LessOp, BinKind::Lt>,
        BinaryPattern<dopt::LessEqualOp, BinKind::Le>,
        BinaryPattern<dopt::GreaterOp, BinKind::Gt>,
        BinaryPattern<dopt::GreaterEqualOp, BinKind::Ge>,
        BinaryPattern<dopt::AndOp, BinKind::And>,
        BinaryPattern<dopt::OrOp, BinKind::Or>,
        BinaryPattern<dopt::XorOp, BinKind::Xor>,
        BinaryPattern<dopt::ShiftLeftOp, BinKind::Shl>,
        BinaryPattern<dopt::ShiftRightOp, BinKind::Shr>,
        UnaryPattern<dopt::NegOp, UnKind::Neg>,
        UnaryPattern<dopt::AbsOp, UnKind::Abs>,
        UnaryPattern<dopt::NotOp, UnKind::Not>,
        UnaryPattern<dopt::SqrtOp, UnKind::Sqrt>,
        UnaryPattern<dopt::ReciprocalOp, UnKind::Recip>,
        UnaryPattern<dopt::ExpOp, UnKind::Exp>,
        UnaryPattern<dopt::LogOp, UnKind::Log>,
        UnaryPattern<dopt::TanhOp, UnKind::Tanh>,
        UnaryPattern<dopt::SigmoidOp, UnKind::Sigmoid>,
        UnaryPattern<dopt::ErfOp, UnKind::Erf>,
        UnaryPattern<dopt::FloorOp, UnKind::Floor>,
        UnaryPattern<dopt::CeilOp, UnKind::Ceil>,
        UnaryPattern<dopt::RoundOp, UnKind::Round>,
        UnaryPattern<dopt::SinOp, UnKind::Sin>,
        UnaryPattern<dopt::CosOp, UnKind::Cos>,
        UnaryPattern<dopt::AsinOp, UnKind::Asin>,
        UnaryPattern<dopt::AcosOp, UnKind::Acos>,
        UnaryPattern<dopt::AtanOp, UnKind::Atan>,
        UnaryPattern<dopt::SinhOp, UnKind::Sinh>,
        UnaryPattern<dopt::CoshOp, UnKind::Cosh>,
        UnaryPattern<dopt::AsinhOp, UnKind::Asinh>,
        UnaryPattern<dopt::AcoshOp, UnKind::Acosh>,
        UnaryPattern<dopt::AtanhOp, UnKind::Atanh>,
        UnaryPattern<dopt::ReluOp, UnKind::Relu>,
        UnaryPattern<dopt::LeakyReluOp, UnKind::LeakyRelu>,
        UnaryPattern<dopt::GeluOp, UnKind::GeluErf>, WherePattern, CastPattern, BitcastPattern,
        ExpandPattern, ConstantPattern, ShapePattern, WeightPattern,
        SoftmaxPattern<dopt::SoftmaxOp, false>,
        SoftmaxPattern<dopt::LogSoftmaxOp, true>, LayerNormPattern,
        BatchNormPattern,
        ReducePattern<dopt::ReduceSumOp, ReduceKind::Sum, false>,
        ReducePattern<dopt::ReduceMeanOp, ReduceKind::Sum, true>,
        ReducePattern<dopt::ReduceMaxOp, ReduceKind::Max, false>,
        GlobalAvgPoolPattern, MatMulPattern, GemmPattern,
        MaxPoolPattern, AvgPoolPattern, ReshapePattern, TransposePattern,
        ConcatPattern, SplitPattern, SlicePattern, GatherPattern,
        GatherElementsPattern, ScatterElementsPattern, TopKPattern, PadPattern>(
        converter, ctx);

    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

SmallVector<Value> distopt::rowMajorCoords(OpBuilder &b, Location loc,
                                           Value flat, ArrayRef<int64_t> shape) {
  int64_t rank = static_cast<int64_t>(shape.size());
  SmallVector<Value> coords(rank);
  Value rest = flat;
  for (int64_t d = rank - 1; d >= 0; --d) {
    Value size = arith::ConstantIndexOp::create(b, loc, shape[d]);
    coords[d] = d == 0 ? rest : Value(arith::RemUIOp::create(b, loc, rest, size));
    if (d > 0)
      rest = arith::DivUIOp::create(b, loc, rest, size);
  }
  return coords;
}
