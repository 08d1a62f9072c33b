//===- Elementwise.cpp - ONNX elementwise ops -----------------------------===//
//
// The importers of elementwise arithmetic, comparisons, activations, casts,
// bitwise ops.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

template <typename OpTy>
LogicalResult importUnary(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  nc.setOutput(0, nc.create<OpTy>(x));
  return success();
}

template <typename OpTy>
LogicalResult importBinary(NodeContext &nc) {
  TRY(a, nc.requiredInput(0));
  TRY(b, nc.requiredInput(1));
  nc.setOutput(0, nc.create<OpTy>(a, b));
  return success();
}

/// Max / Min / Sum-like variadic ops: a left fold of the binary op.
template <typename OpTy>
LogicalResult importVariadic(NodeContext &nc) {
  TRY(acc, nc.requiredInput(0));
  for (int i = 1; i < nc.numInputs(); ++i) {
    TRY(next, nc.requiredInput(i));
    acc = nc.create<OpTy>(acc, next);
  }
  nc.setOutput(0, acc);
  return success();
}

/// Mean of its inputs: their sum (a left fold, broadcasting) divided by the
/// count.
LogicalResult importMean(NodeContext &nc) {
  TRY(sum, nc.requiredInput(0));
  Type elt = nc.inputType(0).getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("Mean needs floating-point inputs");
  for (int i = 1; i < nc.numInputs(); ++i) {
    TRY(next, nc.requiredInput(i));
    sum = nc.create<dopt::AddOp>(sum, next);
  }
  return setResult(nc, nc.create<dopt::DivOp>(
                           sum, constantScalar(nc, elt, nc.numInputs())));
}

/// IsNaN: x != x. IsInf: x equal to +inf (detect_positive) or -inf
/// (detect_negative).
LogicalResult importIsNaN(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  return setResult(nc, nc.create<dopt::NotOp>(nc.create<dopt::EqualOp>(x, x)));
}

LogicalResult importIsInf(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(negative, nc.intAttr("detect_negative", 1));
  TRY(positive, nc.intAttr("detect_positive", 1));
  Type elt = nc.inputType(0).getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("IsInf needs a floating-point input");
  Value any;
  for (auto [detect, inf] : {std::pair<int64_t, double>{positive, INFINITY},
                             std::pair<int64_t, double>{negative, -INFINITY}}) {
    if (!detect)
      continue;
    Value is = nc.create<dopt::EqualOp>(x, constantScalar(nc, elt, inf));
    any = any ? nc.create<dopt::OrOp>(any, is) : is;
  }
  if (!any) {
    // Neither detected: all false.
    Value same = nc.create<dopt::EqualOp>(x, x);
    any = nc.create<dopt::AndOp>(same, nc.create<dopt::NotOp>(same));
  }
  return setResult(nc, any);
}

/// Tan: sin / cos.
LogicalResult importTan(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  return setResult(nc, nc.create<dopt::DivOp>(nc.create<dopt::SinOp>(x),
                                              nc.create<dopt::CosOp>(x)));
}

LogicalResult importIdentity(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  nc.setOutput(0, x);
  return success();
}

LogicalResult importDropout(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  if (nc.input(2)) {
    TRY(training, nc.constantScalar(2, "training_mode"));
    // A training-mode dropout with ratio 0 (PyTorch exports dropout=0.0
    // layers that way) keeps everything: the identity.
    double ratio = 0.5; // ONNX's default
    if (nc.input(1)) {
      TRY(r, nc.constantScalar(1, "ratio"));
      ratio = r;
    }
    if (training != 0 && ratio != 0 && !nc.evalForm()) {
      if (!(ratio > 0 && ratio < 1))
        return nc.error("ratio must be in [0, 1), got " +
                        std::to_string(ratio));
      if (nc.outputUsed(1))
        return nc.error("the mask output of a training-mode Dropout is not "
                        "supported (the mask is drawn inside the op)");
      // The mask: counter-based, keyed by the step's random key; each
      // Dropout of the model its own stream.
      OpBuilder &b = nc.builder();
      Value key = dopt::RngKeyOp::create(b, nc.loc());
      int64_t stream = 0;
      if (auto f = b.getInsertionBlock()->getParentOp())
        f->walk([&](dopt::DropoutOp) { ++stream; });
      nc.setOutput(0, nc.create<dopt::DropoutOp>(
                          x, key, Value(), b.getF32FloatAttr(float(ratio)),
                          b.getI64IntegerAttr(stream), DenseI64ArrayAttr()));
      return success();
    }
  }
  nc.setOutput(0, x);
  if (nc.outputUsed(1)) {
    // In inference mode the mask keeps everything.
    auto type = cast<RankedTensorType>(x.getType());
    auto maskType = type.clone(nc.builder().getI1Type());
    nc.setOutput(1, dopt::ConstantOp::create(
                        nc.builder(), nc.loc(),
                        DenseElementsAttr::get(maskType, true)));
  }
  return success();
}

/// Clip(x, min?, max?) = min(max(x, lo), hi); a missing bound does not clip
/// (opset 11+ takes the bounds as inputs; MobileNet's ReLU6 exports as Clip).
/// Activations ONNX defines by a function of other ops, written with them
/// (so every target, autodiff and the sharding rules know them already):
/// HardSigmoid, HardSwish, Swish, Elu, Celu, Selu, Softplus (as
/// relu(x) + log(1 + exp(−|x|)), which does not overflow), Softsign, Mish,
/// ThresholdedRelu, PRelu; and Sign. Float inputs (Sign and PRelu: any
/// numeric type); 16-bit floats computed in f32 and rounded once, as one
/// ONNX op is.
enum class Activation {
  HardSigmoid,
  HardSwish,
  Swish,
  Elu,
  Celu,
  Selu,
  Softplus,
  Softsign,
  Mish,
  ThresholdedRelu,
  PRelu,
  Sign
};

template <Activation kind> LogicalResult importActivation(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  Type stored = nc.inputType(0).getElementType();
  if (!isa<FloatType>(stored) && kind != Activation::PRelu &&
      kind != Activation::Sign)
    return nc.error("needs a floating-point input");
  Type elt = stored;
  auto widen = [&](Value v) -> Value {
    return v && elt != stored ? nc.create<dopt::CastOp>(v, TypeAttr::get(elt))
                              : v;
  };
  if (stored.isF16() || stored.isBF16()) {
    elt = nc.builder().getF32Type();
    x = widen(x);
  }
  auto c = [&](double v) { return constantScalar(nc, elt, v); };
  auto mul = [&](Value a, Value b) { return nc.create<dopt::MulOp>(a, b); };
  auto add = [&](Value a, Value b) { return nc.create<dopt::AddOp>(a, b); };
  auto where = [&](Value cond, Value a, Value b) {
    return nc.create<dopt::WhereOp>(cond, a, b);
  };
  auto clip01 = [&](Value v) {
    return nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(v, c(0)), c(1));
  };
  // exp(min(v, 0)) − 1: the negative branch of Elu/Celu/Selu, bounded where
  // `where` does not select it -- an exp(v) that overflows there would make
  // its gradient 0 · inf = NaN.
  auto expm1Negative = [&](Value v) {
    return nc.create<dopt::SubOp>(
        nc.create<dopt::ExpOp>(nc.create<dopt::MinOp>(v, c(0))), c(1));
  };
  auto softplus = [&](Value v) {
    return add(nc.create<dopt::ReluOp>(v),
               nc.create<dopt::LogOp>(add(
                   c(1), nc.create<dopt::ExpOp>(nc.create<dopt::NegOp>(
                             nc.create<dopt::AbsOp>(v))))));
  };
  Value y;
  switch (kind) {
  case Activation::HardSigmoid: {
    TRY(alpha, nc.floatAttr("alpha", 0.2f));
    TRY(beta, nc.floatAttr("beta", 0.5f));
    y = clip01(add(mul(x, c(alpha)), c(beta)));
    break;
  }
  case Activation::HardSwish:
    y = mul(x, clip01(add(mul(x, c(1.0 / 6.0)), c(0.5))));
    break;
  case Activation::Swish: {
    TRY(alpha, nc.floatAttr("alpha", 1.0f));
    y = mul(x, nc.create<dopt::SigmoidOp>(alpha == 1.0f ? x : mul(x, c(alpha))));
    break;
  }
  case Activation::Elu: {
    TRY(alpha, nc.floatAttr("alpha", 1.0f));
    y = where(nc.create<dopt::LessOp>(x, c(0)), mul(c(alpha), expm1Negative(x)),
              x);
    break;
  }
  case Activation::Celu: {
    // alpha · elu(x / alpha), ONNX's function (the order 16-bit types
    // round in).
    TRY(alpha, nc.floatAttr("alpha", 1.0f));
    Value z = nc.create<dopt::DivOp>(x, c(alpha));
    Value elu = where(nc.create<dopt::LessOp>(z, c(0)), expm1Negative(z), z);
    y = mul(c(alpha), elu);
    break;
  }
  case Activation::Selu: {
    TRY(alpha, nc.floatAttr("alpha", 1.67326319217681884765625f));
    TRY(gamma, nc.floatAttr("gamma", 1.05070102214813232421875f));
    y = mul(c(gamma), where(nc.create<dopt::LessEqualOp>(x, c(0)),
                            mul(c(alpha), expm1Negative(x)), x));
    break;
  }
  case Activation::Softplus:
    y = softplus(x);
    break;
  case Activation::Softsign:
    y = nc.create<dopt::DivOp>(x, add(c(1), nc.create<dopt::AbsOp>(x)));
    break;
  case Activation::Mish:
    y = mul(x, nc.create<dopt::TanhOp>(softplus(x)));
    break;
  case Activation::ThresholdedRelu: {
    TRY(alpha, nc.floatAttr("alpha", 1.0f));
    y = where(nc.create<dopt::GreaterOp>(x, c(alpha)), x, c(0));
    break;
  }
  case Activation::PRelu: {
    TRY(slope, nc.requiredInput(1));
    y = where(nc.create<dopt::LessOp>(x, c(0)), mul(x, widen(slope)), x);
    break;
  }
  case Activation::Sign:
    y = where(nc.create<dopt::GreaterOp>(x, c(0)), c(1),
              where(nc.create<dopt::LessOp>(x, c(0)), c(-1), c(0)));
    break;
  }
  if (y && elt != stored)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(stored));
  return setResult(nc, y);
}

/// CastLike(x, like): a Cast to like's element type.
LogicalResult importCastLike(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(like, nc.requiredInput(1));
  nc.setOutput(0, nc.create<dopt::CastOp>(
                      x, TypeAttr::get(cast<RankedTensorType>(like.getType())
                                           .getElementType())));
  return success();
}

/// Size(x): the element count, a constant (shapes are static).
LogicalResult importSize(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  nc.setOutput(0, nc.constantI64(
                      {cast<RankedTensorType>(x.getType()).getNumElements()},
                      {}));
  return success();
}

LogicalResult importClip(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  if (nc.hasAttr("min") || nc.hasAttr("max"))
    return nc.error("Clip with 'min'/'max' attributes (opset < 11) is not "
                    "supported; re-export at opset 13 or later");
  if (Value lo = nc.input(1))
    x = nc.create<dopt::MaxOp>(x, lo);
  if (Value hi = nc.input(2))
    x = nc.create<dopt::MinOp>(x, hi);
  nc.setOutput(0, x);
  return success();
}

/// Trilu(x, k?): keeps the upper (upper = 1) or lower triangle of the last
/// two dimensions, shifted by the diagonal offset k: where(mask, x, 0) with
/// mask = (j - i >= k) (upper) or (j - i <= k) (lower); j - i is a constant,
/// k a constant or a runtime scalar (torch.tril/triu; causal masks).
LogicalResult importTrilu(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(upper, nc.intAttr("upper", 1));
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getRank() < 2)
    return nc.error("input has rank " + std::to_string(type.getRank()) +
                    "; Trilu needs rank 2 or more");
  int64_t m = type.getDimSize(type.getRank() - 2),
          n = type.getDimSize(type.getRank() - 1);
  OpBuilder &b = nc.builder();
  SmallVector<int64_t> diff;
  diff.reserve(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      diff.push_back(j - i);
  auto i64 = b.getI64Type();
  Value d = dopt::ConstantOp::create(
      b, nc.loc(),
      DenseElementsAttr::get(RankedTensorType::get({m, n}, i64),
                             ArrayRef<int64_t>(diff)));
  Value k = nc.input(1);
  if (k) {
    auto kt = cast<RankedTensorType>(k.getType());
    if (kt.getNumElements() != 1 || kt.getElementType() != i64)
      return nc.error("k (input 1) must be an int64 scalar");
    if (kt.getRank() != 0)
      k = nc.create<dopt::ReshapeOp>(k, b.getDenseI64ArrayAttr({}));
  } else {
    k = dopt::ConstantOp::create(
        b, nc.loc(),
        DenseElementsAttr::get(RankedTensorType::get({}, i64),
                               ArrayRef<int64_t>{0}));
  }
  Value mask = upper ? nc.create<dopt::GreaterEqualOp>(d, k)
                     : nc.create<dopt::LessEqualOp>(d, k);
  Value zero = dopt::ConstantOp::create(
      b, nc.loc(),
      DenseElementsAttr::get(RankedTensorType::get({}, type.getElementType()),
                             b.getZeroAttr(type.getElementType())));
  nc.setOutput(0, nc.create<dopt::WhereOp>(mask, x, zero));
  return success();
}

LogicalResult importLeakyRelu(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(alpha, nc.floatAttr("alpha", 0.01f));
  nc.setOutput(0, nc.create<dopt::LeakyReluOp>(
                      x, nc.builder().getF32FloatAttr(alpha)));
  return success();
}

LogicalResult importGelu(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(approx, nc.stringAttr("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return nc.error("approximate must be \"none\" or \"tanh\", got \"" +
                    approx + "\"");
  nc.setOutput(0, nc.create<dopt::GeluOp>(
                      x, nc.builder().getStringAttr(approx)));
  return success();
}

LogicalResult importWhere(NodeContext &nc) {
  TRY(c, nc.requiredInput(0));
  TRY(x, nc.requiredInput(1));
  TRY(y, nc.requiredInput(2));
  nc.setOutput(0, nc.create<dopt::WhereOp>(c, x, y));
  return success();
}

/// The element type of the `to` attribute of a Cast or BitCast (`what`
/// names the conversion in the error).
FailureOr<Type> toAttrType(NodeContext &nc, StringRef what) {
  const onnx::AttributeProto *to = nc.attr("to");
  if (!to)
    return nc.error("missing attribute 'to'");
  Type elt = convertDataType(nc.context(), to->i());
  if (!elt)
    return nc.error(what + " to " + dataTypeName(to->i()) +
                    " is not supported");
  return elt;
}

LogicalResult importCast(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(elt, toAttrType(nc, "cast"));
  nc.setOutput(0, nc.create<dopt::CastOp>(x, TypeAttr::get(elt)));
  return success();
}

/// BitCast (opset 26): the bits read as `to`, a type of the same width.
LogicalResult importBitCast(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(elt, toAttrType(nc, "bitcast"));
  Type from = nc.inputType(0).getElementType();
  auto bits = [](Type t) { return t.isInteger(1) ? 8 : t.getIntOrFloatBitWidth(); };
  if (bits(from) != bits(elt))
    return nc.error("reinterprets " + typeStr(from) + " (" +
                    std::to_string(bits(from)) + " bits) as " +
                    dataTypeName(nc.attr("to")->i()) + " (" +
                    std::to_string(bits(elt)) + " bits): the widths must be equal");
  return setResult(nc, nc.create<dopt::BitcastOp>(x, TypeAttr::get(elt)));
}

/// Mod. Integers: a - (a / b)·b with the division truncating (fmod = 1,
/// the sign of the dividend, C's %), then, for fmod = 0, the divisor added
/// where the remainder's sign differs from it (Python's %). Floats the same
/// way from a - b·trunc(a / b), with C's and NumPy's infinities and signed
/// zeros; 16-bit ones in f32, rounded once. (Exact for quotients below
/// 2^24 in f32; beyond, a - b·trunc(a / b) loses what fmod keeps.)
LogicalResult importMod(NodeContext &nc) {
  TRY(a, nc.requiredInput(0));
  TRY(b, nc.requiredInput(1));
  TRY(fmod, nc.intAttr("fmod", 0));
  Type elt = nc.inputType(0).getElementType();
  if (elt.isInteger(1))
    return nc.error("Mod of booleans is not supported");
  if (auto ft = dyn_cast<FloatType>(elt)) {
    Type f32 = nc.builder().getF32Type();
    Type t = ft.getWidth() < 32 ? f32 : elt;
    if (t != elt) {
      a = nc.create<dopt::CastOp>(a, TypeAttr::get(t));
      b = nc.create<dopt::CastOp>(b, TypeAttr::get(t));
    }
    auto c = [&](double v) { return constantScalar(nc, t, v); };
    auto less = [&](Value x, double v) { return nc.create<dopt::LessOp>(x, c(v)); };
    auto equal = [&](Value x, double v) {
      return nc.create<dopt::EqualOp>(x, c(v));
    };
    // A zero with the sign of `like`.
    auto signedZero = [&](Value like) {
      return nc.create<dopt::WhereOp>(less(like, 0), c(-0.0), c(0.0));
    };
    // C's fmod: a - b·trunc(a / b); a itself for an infinite b and a finite
    // a; a zero keeps a's sign.
    Value q = nc.create<dopt::DivOp>(a, b);
    Value whole = nc.create<dopt::WhereOp>(
        less(q, 0), nc.create<dopt::CeilOp>(q), nc.create<dopt::FloorOp>(q));
    Value r = nc.create<dopt::SubOp>(a, nc.create<dopt::MulOp>(b, whole));
    Value bInfinite = equal(nc.create<dopt::AbsOp>(b), INFINITY);
    Value aFinite = equal(nc.create<dopt::SubOp>(a, a), 0);
    r = nc.create<dopt::WhereOp>(nc.create<dopt::AndOp>(bInfinite, aFinite), a, r);
    r = nc.create<dopt::WhereOp>(equal(r, 0), signedZero(a), r);
    if (!fmod) {
      // NumPy's mod: the divisor added where the signs differ; a zero takes
      // the divisor's sign.
      Value differ = nc.create<dopt::AndOp>(
          nc.create<dopt::NotOp>(equal(r, 0)),
          nc.create<dopt::NotOp>(
              nc.create<dopt::EqualOp>(less(r, 0), less(b, 0))));
      r = nc.create<dopt::WhereOp>(differ, nc.create<dopt::AddOp>(r, b), r);
      r = nc.create<dopt::WhereOp>(equal(r, 0), signedZero(b), r);
    }
    if (t != elt)
      r = nc.create<dopt::CastOp>(r, TypeAttr::get(elt));
    return setResult(nc, r);
  }
  Value r = nc.create<dopt::SubOp>(
      a, nc.create<dopt::MulOp>(nc.create<dopt::DivOp>(a, b), b));
  if (!fmod && !elt.isUnsignedInteger()) {
    Value zero = constantScalar(nc, elt, 0);
    Value differ = nc.create<dopt::AndOp>(
        nc.create<dopt::NotOp>(nc.create<dopt::EqualOp>(r, zero)),
        nc.create<dopt::NotOp>(nc.create<dopt::EqualOp>(
            nc.create<dopt::LessOp>(r, zero),
            nc.create<dopt::LessOp>(b, zero))));
    r = nc.create<dopt::WhereOp>(differ, nc.create<dopt::AddOp>(r, b), r);
  }
  return setResult(nc, r);
}

/// SwiGLU: Swish_alpha(a) · b = a · sigmoid(alpha · a) · b; a and b of one
/// shape (no broadcasting).
LogicalResult importSwiGLU(NodeContext &nc) {
  TRY(a, nc.requiredInput(0));
  TRY(v, nc.requiredInput(1));
  if (nc.inputType(0) != nc.inputType(1))
    return nc.error("A and B must have the same shape and element type (no "
                    "broadcasting), got " +
                    shapeStr(nc.inputType(0).getShape()) + " and " +
                    shapeStr(nc.inputType(1).getShape()));
  TRY(alpha, nc.floatAttr("alpha", 1.0f));
  Type elt = nc.inputType(0).getElementType();
  Value gate = alpha == 1.0f
                   ? a
                   : nc.create<dopt::MulOp>(a, constantScalar(nc, elt, alpha));
  Value swish = nc.create<dopt::MulOp>(a, nc.create<dopt::SigmoidOp>(gate));
  return setResult(nc, nc.create<dopt::MulOp>(swish, v));
}

/// Whether inputs 0 .. n−1 are integers (booleans too, when `bools`);
/// an error naming the first that is not otherwise.
LogicalResult checkIntegerInputs(NodeContext &nc, int n, bool bools) {
  for (int i = 0; i < n; ++i) {
    RankedTensorType t = nc.inputType(i);
    if (!t)
      continue;
    auto it = dyn_cast<IntegerType>(t.getElementType());
    if (!it || (!bools && it.getWidth() == 1))
      return nc.error("needs integer inputs" +
                      std::string(bools ? " (or booleans)" : "") +
                      ", input " + std::to_string(i) + " is " +
                      typeStr(t.getElementType()));
  }
  return success();
}

/// BitwiseAnd / Or / Xor / Not: dopt.and, or, xor, not on integers.
template <typename OpTy> LogicalResult importBitwise(NodeContext &nc) {
  if (failed(checkIntegerInputs(nc, nc.numInputs(), true)))
    return failure();
  if constexpr (std::is_same_v<OpTy, dopt::NotOp>)
    return importUnary<OpTy>(nc);
  else
    return importBinary<OpTy>(nc);
}

/// BitShift: a left or right shift (dopt.shift_left / shift_right).
LogicalResult importBitShift(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(y, nc.requiredInput(1));
  if (failed(checkIntegerInputs(nc, 2, false)))
    return failure();
  TRY(direction, nc.stringAttr("direction", ""));
  if (direction == "LEFT")
    return setResult(nc, nc.create<dopt::ShiftLeftOp>(x, y));
  if (direction == "RIGHT")
    return setResult(nc, nc.create<dopt::ShiftRightOp>(x, y));
  return nc.error("direction must be \"LEFT\" or \"RIGHT\", got \"" +
                  direction + "\"");
}

/// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
LogicalResult importShrink(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(bias, nc.floatAttr("bias", 0.0f));
  TRY(lambd, nc.floatAttr("lambd", 0.5f));
  Type t = nc.inputType(0).getElementType();
  Value below = nc.create<dopt::LessOp>(x, constantScalar(nc, t, -lambd));
  Value above = nc.create<dopt::GreaterOp>(x, constantScalar(nc, t, lambd));
  Value y = nc.create<dopt::WhereOp>(
      below, nc.create<dopt::AddOp>(x, constantScalar(nc, t, bias)),
      nc.create<dopt::WhereOp>(
          above, nc.create<dopt::SubOp>(x, constantScalar(nc, t, bias)),
          constantScalar(nc, t, 0)));
  return setResult(nc, y);
}

} // namespace

void onnximport::registerElementwiseImporters(llvm::StringMap<OpImporterFn> &t) {
  t["Add"] = importBinary<dopt::AddOp>;
  t["Sub"] = importBinary<dopt::SubOp>;
  t["Mul"] = importBinary<dopt::MulOp>;
  t["Div"] = importBinary<dopt::DivOp>;
  t["Pow"] = importBinary<dopt::PowOp>;
  t["Max"] = importVariadic<dopt::MaxOp>;
  t["Sum"] = importVariadic<dopt::AddOp>;
  t["Mean"] = importMean;
  t["Min"] = importVariadic<dopt::MinOp>;
  t["Equal"] = importBinary<dopt::EqualOp>;
  t["Less"] = importBinary<dopt::LessOp>;
  t["LessOrEqual"] = importBinary<dopt::LessEqualOp>;
  t["Greater"] = importBinary<dopt::GreaterOp>;
  t["GreaterOrEqual"] = importBinary<dopt::GreaterEqualOp>;
  t["And"] = importBinary<dopt::AndOp>;
  t["Or"] = importBinary<dopt::OrOp>;
  t["Neg"] = importUnary<dopt::NegOp>;
  t["Abs"] = importUnary<dopt::AbsOp>;
  t["Not"] = importUnary<dopt::NotOp>;
  t["Sqrt"] = importUnary<dopt::SqrtOp>;
  t["Reciprocal"] = importUnary<dopt::ReciprocalOp>;
  t["Exp"] = importUnary<dopt::ExpOp>;
  t["Log"] = importUnary<dopt::LogOp>;
  t["Tanh"] = importUnary<dopt::TanhOp>;
  t["Sigmoid"] = importUnary<dopt::SigmoidOp>;
  t["Erf"] = importUnary<dopt::ErfOp>;
  t["Floor"] = importUnary<dopt::FloorOp>;
  t["Ceil"] = importUnary<dopt::CeilOp>;
  t["Round"] = importUnary<dopt::RoundOp>;
  t["Sin"] = importUnary<dopt::SinOp>;
  t["Cos"] = importUnary<dopt::CosOp>;
  t["Asin"] = importUnary<dopt::AsinOp>;
  t["Acos"] = importUnary<dopt::AcosOp>;
  t["Atan"] = importUnary<dopt::AtanOp>;
  t["Sinh"] = importUnary<dopt::SinhOp>;
  t["Cosh"] = importUnary<dopt::CoshOp>;
  t["Asinh"] = importUnary<dopt::AsinhOp>;
  t["Acosh"] = importUnary<dopt::AcoshOp>;
  t["Atanh"] = importUnary<dopt::AtanhOp>;
  t["Tan"] = importTan;
  t["IsNaN"] = importIsNaN;
  t["IsInf"] = importIsInf;
  t["Relu"] = importUnary<dopt::ReluOp>;
  t["LeakyRelu"] = importLeakyRelu;
  t["Clip"] = importClip;
  t["Gelu"] = importGelu;
  t["Identity"] = importIdentity;
  t["Dropout"] = importDropout;
  t["Where"] = importWhere;
  t["Trilu"] = importTrilu;
  t["Cast"] = importCast;
  t["CastLike"] = importCastLike;
  t["Size"] = importSize;
  t["HardSigmoid"] = importActivation<Activation::HardSigmoid>;
  t["HardSwish"] = importActivation<Activation::HardSwish>;
  t["Swish"] = importActivation<Activation::Swish>;
  t["Elu"] = importActivation<Activation::Elu>;
  t["Celu"] = importActivation<Activation::Celu>;
  t["Selu"] = importActivation<Activation::Selu>;
  t["Softplus"] = importActivation<Activation::Softplus>;
  t["Softsign"] = importActivation<Activation::Softsign>;
  t["Mish"] = importActivation<Activation::Mish>;
  t["ThresholdedRelu"] = importActivation<Activation::ThresholdedRelu>;
  t["PRelu"] = importActivation<Activation::PRelu>;
  t["Sign"] = importActivation<Activation::Sign>;
  t["MatMul"] = importBinary<dopt::MatMulOp>;
  t["GlobalAveragePool"] = importUnary<dopt::GlobalAvgPoolOp>;
  t["Xor"] = importBinary<dopt::XorOp>;
  t["BitwiseAnd"] = importBitwise<dopt::AndOp>;
  t["BitwiseOr"] = importBitwise<dopt::OrOp>;
  t["BitwiseXor"] = importBitwise<dopt::XorOp>;
  t["BitwiseNot"] = importBitwise<dopt::NotOp>;
  t["BitShift"] = importBitShift;
  t["BitCast"] = importBitCast;
  t["SwiGLU"] = importSwiGLU;
  t["Shrink"] = importShrink;
  t["Mod"] = importMod;
}
