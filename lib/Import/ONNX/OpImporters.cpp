//===- OpImporters.cpp - one importer per ONNX op type --------------------===//
//
// Each entry maps one ONNX node (default domain, opsets 13-21) to dopt ops,
// resolving what ONNX leaves to run time (negative axes, 0/-1 in shapes,
// auto_pad, optional inputs, inputs that became attributes across opsets)
// into canonical static attributes. Constant inputs fold as they are built,
// so exporters' shape subgraphs vanish during import.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "distopt/Dialect/Dopt/IR/DoptLosses.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>
#include <numeric>
#include <sstream>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

#define TRY(var, expr)                                                         \
  auto var##OrErr = (expr);                                                    \
  if (failed(var##OrErr))                                                      \
    return failure();                                                          \
  auto var = *var##OrErr;

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// A 0-d dopt.constant of element type `elt` holding `v` (an integer type
/// gets v truncated, -1 being all ones).
Value constantScalar(NodeContext &nc, Type elt, double v) {
  OpBuilder &b = nc.builder();
  Attribute a;
  if (auto ft = dyn_cast<FloatType>(elt))
    a = b.getFloatAttr(ft, v);
  else
    a = b.getIntegerAttr(elt, APInt(elt.getIntOrFloatBitWidth(), (int64_t)v,
                                    /*isSigned=*/true, /*implicitTrunc=*/true));
  return dopt::ConstantOp::create(
      b, nc.loc(), DenseElementsAttr::get(RankedTensorType::get({}, elt), a));
}

/// A constant of floating-point element type `elt` and shape `shape`
/// holding `values` (rounded to `elt`).
Value floatConstant(NodeContext &nc, Type elt, ArrayRef<int64_t> shape,
                    ArrayRef<double> values) {
  SmallVector<APFloat> v;
  for (double d : values) {
    APFloat f(d);
    bool lost;
    f.convert(cast<FloatType>(elt).getFloatSemantics(),
              APFloat::rmNearestTiesToEven, &lost);
    v.push_back(f);
  }
  return dopt::ConstantOp::create(
      nc.builder(), nc.loc(),
      DenseElementsAttr::get(RankedTensorType::get(shape, elt), v));
}

/// Sets `y` as the node's output 0 (a null value: an op failed to build,
/// and said so).
LogicalResult setResult(NodeContext &nc, Value y) {
  if (!y)
    return failure();
  nc.setOutput(0, y);
  return success();
}

/// How MLIR prints `t` ("f32", "ui8", "tensor<2x3xf32>"), for messages.
std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

/// `v` converted to element type `t` (`v` itself when it has it).
Value castTo(NodeContext &nc, Value v, Type t) {
  if (!v || cast<RankedTensorType>(v.getType()).getElementType() == t)
    return v;
  return nc.create<dopt::CastOp>(v, TypeAttr::get(t));
}

/// 0, 1, ..., n − 1 (i64) along `axis` of a rank-`rank` shape, 1 elsewhere.
Value iotaAlong(NodeContext &nc, int64_t n, int64_t rank, int64_t axis) {
  SmallVector<int64_t> shape(rank, 1), values;
  shape[axis] = n;
  for (int64_t i = 0; i < n; ++i)
    values.push_back(i);
  return nc.constantI64(values, shape);
}

/// (x - mean) / sqrt(var + eps), the statistics over `axes` of x (kept as
/// size-1 axes): what InstanceNormalization and GroupNormalization share
/// (batch norm's training form keeps its mean and variance for the running
/// statistics, so it writes them out).
Value standardize(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
                  double eps) {
  if (!x)
    return x;
  OpBuilder &b = nc.builder();
  auto axesAttr = b.getDenseI64ArrayAttr(axes);
  Type elt = cast<RankedTensorType>(x.getType()).getElementType();
  Value mean = nc.create<dopt::ReduceMeanOp>(x, axesAttr, b.getBoolAttr(true));
  Value centered = nc.create<dopt::SubOp>(x, mean);
  Value var = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(centered, centered), axesAttr, b.getBoolAttr(true));
  return nc.create<dopt::DivOp>(
      centered, nc.create<dopt::SqrtOp>(nc.create<dopt::AddOp>(
                    var, constantScalar(nc, elt, eps))));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Softmax, normalisation
//===----------------------------------------------------------------------===//

/// The loss of NegativeLogLikelihoodLoss (and of SoftmaxCrossEntropyLoss
/// after its log-softmax): dopt::buildNegativeLogLikelihood.
static FailureOr<Value> negativeLogLikelihood(NodeContext &nc, Value logp,
                                              Value target, Value weight) {
  TRY(reduction, nc.stringAttr("reduction", "mean"));
  std::optional<int64_t> ignore;
  if (nc.hasAttr("ignore_index")) {
    TRY(ii, nc.intAttr("ignore_index", -100));
    ignore = ii;
  }
  std::string error;
  FailureOr<Value> loss = dopt::buildNegativeLogLikelihood(
      nc.builder(), nc.loc(), logp, target, weight, ignore, reduction, error);
  if (failed(loss))
    return nc.error(error);
  return loss;
}

LogicalResult importNegativeLogLikelihoodLoss(NodeContext &nc) {
  TRY(logp, nc.requiredInput(0));
  TRY(target, nc.requiredInput(1));
  TRY(loss, negativeLogLikelihood(nc, logp, target, nc.input(2)));
  nc.setOutput(0, loss);
  return success();
}

/// SoftmaxCrossEntropyLoss: log-softmax over the class axis (the optional
/// second output), then the negative log-likelihood.
LogicalResult importSoftmaxCrossEntropyLoss(NodeContext &nc) {
  TRY(scores, nc.requiredInput(0));
  TRY(labels, nc.requiredInput(1));
  if (nc.inputType(0).getRank() < 2)
    return nc.error("scores have rank " +
                    std::to_string(nc.inputType(0).getRank()) +
                    "; expected [N, C, d1, ...]");
  Value logp = nc.create<dopt::LogSoftmaxOp>(scores,
                                             nc.builder().getI64IntegerAttr(1));
  TRY(loss, negativeLogLikelihood(nc, logp, labels, nc.input(2)));
  nc.setOutput(0, loss);
  nc.setOutput(1, logp);
  return success();
}

template <typename OpTy>
LogicalResult importSoftmax(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(axis, nc.intAttr("axis", -1));
  TRY(a, nc.normalizeAxis(axis, nc.inputType(0).getRank()));
  nc.setOutput(0, nc.create<OpTy>(x, nc.builder().getI64IntegerAttr(a)));
  return success();
}

LogicalResult importBatchNorm(NodeContext &nc) {
  Value in[5];
  for (int i = 0; i < 5; ++i) {
    TRY(v, nc.requiredInput(i));
    in[i] = v;
  }
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(training, nc.intAttr("training_mode", 0));
  // The inference op carries the operand rule (shapes, channels, element
  // types) for both forms: the training form builds it to check the
  // operands, then drops it.
  Value inference = nc.create<dopt::BatchNormOp>(
      in[0], in[1], in[2], in[3], in[4], nc.builder().getF32FloatAttr(eps));
  if (!inference)
    return failure();
  if (!training) {
    nc.setOutput(0, inference);
    return success();
  }
  if (nc.evalForm()) {
    // Evaluation: the running statistics normalise, and stay as they are.
    nc.setOutput(0, inference);
    nc.setOutput(1, in[3]);
    nc.setOutput(2, in[4]);
    return success();
  }
  if (inference.use_empty())
    inference.getDefiningOp()->erase();
  // Training form: the batch's statistics over every axis but the channels
  // (1), written with ops autodiff differentiates; the running statistics
  // as ONNX defines them (opset 14/15): input * momentum + current *
  // (1 - momentum), the current variance the population one.
  TRY(momentum, nc.floatAttr("momentum", 0.9f));
  auto type = cast<RankedTensorType>(in[0].getType());
  OpBuilder &b = nc.builder();
  int64_t rank = type.getRank(), channels = type.getDimSize(1);
  SmallVector<int64_t> axes{0}, bcast(rank, 1);
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  bcast[1] = channels;
  Type elt = type.getElementType();
  auto scalar = [&](double v) { return constantScalar(nc, elt, v); };
  auto perChannel = [&](Value v) -> Value {
    return nc.create<dopt::ReshapeOp>(v, b.getDenseI64ArrayAttr(bcast));
  };
  Value mean = nc.create<dopt::ReduceMeanOp>(in[0], b.getDenseI64ArrayAttr(axes),
                                             b.getBoolAttr(true));
  Value centered = nc.create<dopt::SubOp>(in[0], mean);
  Value var = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(centered, centered), b.getDenseI64ArrayAttr(axes),
      b.getBoolAttr(true));
  Value norm = nc.create<dopt::DivOp>(
      centered, nc.create<dopt::SqrtOp>(nc.create<dopt::AddOp>(var, scalar(eps))));
  Value y = nc.create<dopt::AddOp>(nc.create<dopt::MulOp>(norm, perChannel(in[1])),
                                   perChannel(in[2]));
  nc.setOutput(0, y);
  // Running statistics: outputs 1 and 2, and the updates of the weights
  // they came from (the train loop keeps them: dopt.updates_weight).
  auto running = [&](Value old, Value current) -> Value {
    Value flat = nc.create<dopt::ReshapeOp>(
        current, b.getDenseI64ArrayAttr({channels}));
    Value r = nc.create<dopt::AddOp>(
        nc.create<dopt::MulOp>(old, scalar(momentum)),
        nc.create<dopt::MulOp>(flat, scalar(1.0 - double(momentum))));
    if (!r)
      return r;
    if (auto w = old.getDefiningOp<dopt::WeightOp>())
      r.getDefiningOp()->setAttr("dopt.updates_weight", w.getNameAttr());
    return r;
  };
  if (!nc.hasFailed()) {
    nc.setOutput(1, running(in[3], mean));
    nc.setOutput(2, running(in[4], var));
  }
  return success();
}

/// What LayerNormalization and RMSNormalization share: the normalised axes
/// [axis, rank), epsilon, and the stash type their statistics are computed
/// in (with `xs`, the input in it).
struct Normalization {
  int64_t axis;
  SmallVector<int64_t> axes;
  float eps;
  Type stash;
  Value xs;
};

FailureOr<Normalization> readNormalization(NodeContext &nc, Value x) {
  TRY(axis, nc.intAttr("axis", -1));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(stash, nc.intAttr("stash_type", onnx::TensorProto::FLOAT));
  int64_t rank = nc.inputType(0).getRank();
  TRY(a, nc.normalizeAxis(axis, rank));
  Type u = convertDataType(nc.context(), stash);
  if (!u || !isa<FloatType>(u)) {
    (void)nc.error("stash_type " + dataTypeName(stash) +
                   " is not a floating-point type distopt supports");
    return failure();
  }
  SmallVector<int64_t> axes;
  for (int64_t d = a; d < rank; ++d)
    axes.push_back(d);
  Value xs = u == nc.inputType(0).getElementType()
                 ? x
                 : nc.create<dopt::CastOp>(x, TypeAttr::get(u));
  return Normalization{a, axes, eps, u, xs};
}

LogicalResult importLayerNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(n, readNormalization(nc, x));
  OpBuilder &b = nc.builder();
  nc.setOutput(0, nc.create<dopt::LayerNormOp>(x, scale, nc.input(2),
                                               b.getI64IntegerAttr(n.axis),
                                               b.getF32FloatAttr(n.eps)));
  if (!nc.outputUsed(1) && !nc.outputUsed(2))
    return success();
  // Mean and InvStdDev (what a training framework keeps for the backward
  // pass): the statistics in the stash type, kept as size-1 axes, as the
  // ONNX function of the op computes them.
  auto axes = b.getDenseI64ArrayAttr(n.axes);
  Value mean =
      nc.create<dopt::ReduceMeanOp>(n.xs, axes, b.getBoolAttr(true));
  Value centered = nc.create<dopt::SubOp>(n.xs, mean);
  Value var = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(centered, centered), axes, b.getBoolAttr(true));
  Value invStdDev = nc.create<dopt::ReciprocalOp>(nc.create<dopt::SqrtOp>(
      nc.create<dopt::AddOp>(var, constantScalar(nc, n.stash, n.eps))));
  if (!nc.hasFailed()) {
    nc.setOutput(1, mean);
    nc.setOutput(2, invStdDev);
  }
  return success();
}

/// RMSNormalization (opset 23; LLaMA's RMSNorm): x / sqrt(mean(x², axes
/// [axis, rank)) + epsilon) in the stash type, back to x's type, times the
/// scale -- the op's ONNX function, written with dopt ops.
LogicalResult importRMSNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(n, readNormalization(nc, x));
  Type t = nc.inputType(0).getElementType();
  OpBuilder &b = nc.builder();
  Value meanSquare = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(n.xs, n.xs), b.getDenseI64ArrayAttr(n.axes),
      b.getBoolAttr(true));
  Value rms = nc.create<dopt::SqrtOp>(
      nc.create<dopt::AddOp>(meanSquare, constantScalar(nc, n.stash, n.eps)));
  Value normalized = nc.create<dopt::DivOp>(n.xs, rms);
  if (n.stash != t)
    normalized = nc.create<dopt::CastOp>(normalized, TypeAttr::get(t));
  Value y = nc.create<dopt::MulOp>(normalized, scale);
  return setResult(nc, y);
}

//===----------------------------------------------------------------------===//
// MatMul, Gemm, Conv, pooling
//===----------------------------------------------------------------------===//

LogicalResult importGemm(NodeContext &nc) {
  TRY(a, nc.requiredInput(0));
  TRY(b, nc.requiredInput(1));
  TRY(alpha, nc.floatAttr("alpha", 1.0f));
  TRY(beta, nc.floatAttr("beta", 1.0f));
  TRY(transA, nc.intAttr("transA", 0));
  TRY(transB, nc.intAttr("transB", 0));
  OpBuilder &b_ = nc.builder();
  nc.setOutput(0, nc.create<dopt::GemmOp>(
                      a, b, nc.input(2), b_.getF32FloatAttr(alpha),
                      b_.getF32FloatAttr(beta), b_.getBoolAttr(transA != 0),
                      b_.getBoolAttr(transB != 0)));
  return success();
}

/// "1 entry", "4 entries": how many a window attribute must have.
std::string entries(size_t n) {
  return std::to_string(n) + (n == 1 ? " entry" : " entries");
}

/// Resolves ONNX's auto_pad into explicit [begins..., ends...] pads for a
/// window of kernel.size() spatial axes.
FailureOr<SmallVector<int64_t>>
resolvePads(NodeContext &nc, ArrayRef<int64_t> inSpatial,
            ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
            ArrayRef<int64_t> dilations) {
  TRY(autoPad, nc.stringAttr("auto_pad", "NOTSET"));
  TRY(padsAttr, nc.intsAttr("pads"));
  size_t n = kernel.size();
  if (autoPad == "NOTSET") {
    SmallVector<int64_t> pads = padsAttr.value_or(SmallVector<int64_t>(2 * n));
    if (pads.size() != 2 * n) {
      (void)nc.error("pads must have " + entries(2 * n) + ", got " +
                     shapeStr(pads));
      return failure();
    }
    return pads;
  }
  SmallVector<int64_t> pads(2 * n, 0);
  if (autoPad == "VALID")
    return pads;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER") {
    (void)nc.error("auto_pad '" + autoPad + "' is not one of NOTSET, "
                   "SAME_UPPER, SAME_LOWER, VALID");
    return failure();
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t out = (inSpatial[i] + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(
        0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 -
               inSpatial[i]);
    int64_t small = total / 2, big = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : big;
    pads[i + n] = autoPad == "SAME_UPPER" ? big : small;
  }
  return pads;
}

FailureOr<SmallVector<int64_t>> windowAttr(NodeContext &nc, StringRef name,
                                           size_t n) {
  TRY(v, nc.intsAttr(name));
  if (!v)
    return SmallVector<int64_t>(n, 1);
  if (v->size() != n) {
    (void)nc.error(name + " must have " + entries(n) + ", got " +
                   shapeStr(*v));
    return failure();
  }
  // Checked here, not only by the dialect: auto_pad divides by the strides.
  if (llvm::any_of(*v, [](int64_t x) { return x <= 0; })) {
    (void)nc.error(name + " must be positive, got " + shapeStr(*v));
    return failure();
  }
  return *v;
}

/// The spatial axes of a windowed op's input: 1 (N×C×L), 2 (N×C×H×W) or
/// 3 (N×C×D×H×W). The dialect, the kernels and cuDNN see one kind of
/// convolution and pooling, 2-D: a 1-D window runs as a 2-D one of height 1
/// (liftSizes, liftPads, heightOne); a 3-D convolution as 2-D ones, one per
/// tap of its depth (conv3dByDepth), and a 3-D pooling as a reduction of
/// strided slices (poolBySlices).
FailureOr<size_t> spatialAxes(NodeContext &nc, RankedTensorType in) {
  if (in.getRank() >= 3 && in.getRank() <= 5)
    return size_t(in.getRank() - 2);
  (void)nc.error("only 1-D, 2-D and 3-D windows (3-D NCL, 4-D NCHW or 5-D "
                 "NCDHW inputs) are supported, got input of rank " +
                 std::to_string(in.getRank()));
  return failure();
}

/// `x` padded along its trailing spatial axes by `begins` and `ends` with
/// `value` (no op when all are 0).
Value padSpatial(NodeContext &nc, Value x, ArrayRef<int64_t> begins,
                 ArrayRef<int64_t> ends, double value) {
  if (!x || (llvm::all_of(begins, [](int64_t p) { return p == 0; }) &&
             llvm::all_of(ends, [](int64_t p) { return p == 0; })))
    return x;
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  size_t n = begins.size();
  SmallVector<int64_t> pads(2 * rank, 0);
  for (size_t i = 0; i < n; ++i) {
    pads[rank - n + i] = begins[i];
    pads[2 * rank - n + i] = ends[i];
  }
  OpBuilder &b = nc.builder();
  return nc.create<dopt::PadOp>(x, b.getDenseI64ArrayAttr(pads),
                                b.getStringAttr("constant"),
                                b.getF64FloatAttr(value));
}

/// Elements [start, start + (count − 1)·step] with stride `step` of axes
/// `axes` of `x`, every other axis whole.
Value strided(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
              ArrayRef<int64_t> starts, ArrayRef<int64_t> steps,
              ArrayRef<int64_t> counts) {
  if (!x)
    return x;
  auto t = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> s(t.getRank(), 0), e(t.getShape()), st(t.getRank(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    s[axes[i]] = starts[i];
    e[axes[i]] = starts[i] + (counts[i] - 1) * steps[i] + 1;
    st[axes[i]] = steps[i];
  }
  OpBuilder &b = nc.builder();
  return nc.create<dopt::SliceOp>(x, b.getDenseI64ArrayAttr(s),
                                  b.getDenseI64ArrayAttr(e),
                                  b.getDenseI64ArrayAttr(st));
}

/// A 1-D window's sizes (kernel, strides, dilations, output padding) as a
/// 2-D one's of height 1: `fill` in front.
SmallVector<int64_t> liftSizes(ArrayRef<int64_t> v, int64_t fill) {
  if (v.size() != 1)
    return SmallVector<int64_t>(v);
  return {fill, v[0]};
}

/// 1-D pads [begin, end] as 2-D ones [0, begin, 0, end].
SmallVector<int64_t> liftPads(ArrayRef<int64_t> p) {
  if (p.size() != 2)
    return SmallVector<int64_t>(p);
  return {0, p[0], 0, p[1]};
}

/// N×C×L as N×C×1×L (`up`), or back (a null value stays null).
Value heightOne(NodeContext &nc, Value v, bool up) {
  if (!v)
    return v;
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  if (up)
    shape.insert(shape.begin() + 2, 1);
  else
    shape.erase(shape.begin() + 2);
  return nc.create<dopt::ReshapeOp>(v,
                                    nc.builder().getDenseI64ArrayAttr(shape));
}

/// Sets a windowed op's result as the node's output, back to N×C×L for a
/// 1-D window (a null value: the op failed, and said so).
LogicalResult setWindowOutput(NodeContext &nc, Value y, bool oneD) {
  if (oneD)
    y = heightOne(nc, y, false);
  return setResult(nc, y);
}

/// What Conv and ConvTranspose share: a 3-D (NCL) or 4-D (NCHW) input and
/// a weight of the same rank, whose kernel kernel_shape, if given, must
/// equal; strides, dilations, group. The sizes are as many as the spatial
/// axes (`axes`); x and w are lifted to 2-D already.
struct ConvNode {
  Value x, w;
  size_t axes;
  SmallVector<int64_t> inSpatial, kernel, strides, dilations;
  int64_t group;
};

/// The node's convolution attributes, for its inputs 0 and 1 or, where
/// given, `x` and `w` standing for them (an integer convolution's operands
/// less their zero points).
FailureOr<ConvNode> convNode(NodeContext &nc, Value x = {}, Value w = {}) {
  if (!x) {
    TRY(x0, nc.requiredInput(0));
    x = x0;
  }
  if (!w) {
    TRY(w0, nc.requiredInput(1));
    w = w0;
  }
  auto in = cast<RankedTensorType>(x.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  TRY(axes, spatialAxes(nc, in));
  if (wt.getRank() != in.getRank()) {
    (void)nc.error("weight must be " + std::to_string(in.getRank()) +
                   "-D like the input, got rank " +
                   std::to_string(wt.getRank()));
    return failure();
  }
  TRY(kernelAttr, nc.intsAttr("kernel_shape"));
  SmallVector<int64_t> kernel(wt.getShape().drop_front(2));
  if (kernelAttr && *kernelAttr != kernel) {
    (void)nc.error("kernel_shape " + shapeStr(*kernelAttr) +
                   " does not match the weight's " + shapeStr(kernel));
    return failure();
  }
  TRY(strides, windowAttr(nc, "strides", axes));
  TRY(dilations, windowAttr(nc, "dilations", axes));
  TRY(group, nc.intAttr("group", 1));
  if (axes == 1) {
    x = heightOne(nc, x, true);
    w = heightOne(nc, w, true);
  }
  return ConvNode{x,
                  w,
                  axes,
                  SmallVector<int64_t>(in.getShape().drop_front(2)),
                  kernel,
                  strides,
                  dilations,
                  group};
}

/// A 3-D transposed convolution (x N×C×D×H×W, w C×M/G×KD×KH×KW) as 2-D
/// ones, one per tap kd of the kernel's depth, over the input's depth
/// slices taken as a batch of N·D images: tap kd's result for input depth i
/// lands at output depth i·stride + kd·dilation, so each is spread out by
/// the stride (zeros between its depth slices), shifted by kd·dilation and
/// summed; the pads are cropped (a negative one grows zeros) and the bias
/// added last. `pads` as ONNX orders them, resolved; the operation count is
/// the 3-D op's.
Value convTranspose3dByDepth(NodeContext &nc, Value x, Value w, Value bias,
                             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                             ArrayRef<int64_t> dilations,
                             ArrayRef<int64_t> outPad, int64_t group) {
  auto in = cast<RankedTensorType>(x.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  int64_t batch = in.getDimSize(0), channels = in.getDimSize(1);
  int64_t depth = in.getDimSize(2), kd = wt.getDimSize(2);
  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  // Pads cropped after the sum; a negative one is zeros grown instead.
  SmallVector<int64_t> crop, grow;
  for (int64_t p : pads) {
    crop.push_back(std::max<int64_t>(0, p));
    grow.push_back(std::max<int64_t>(0, -p));
  }
  Value images = nc.create<dopt::ReshapeOp>(
      nc.create<dopt::TransposeOp>(x, i64s({0, 2, 1, 3, 4})),
      i64s({batch * depth, channels, in.getDimSize(3), in.getDimSize(4)}));
  SmallVector<int64_t> wShape{wt.getDimSize(0), wt.getDimSize(1),
                              wt.getDimSize(3), wt.getDimSize(4)};
  // The full output depth before cropping.
  int64_t full = dopt::transposedOutputSize(depth, kd, strides[0], 0, 0,
                                            dilations[0], outPad[0]);
  Value sum;
  for (int64_t k = 0; k < kd && !nc.hasFailed(); ++k) {
    Value wk = nc.create<dopt::ReshapeOp>(strided(nc, w, {2}, {k}, {1}, {1}),
                                          i64s(wShape));
    Value y = nc.create<dopt::ConvTransposeOp>(
        images, wk, Value(), i64s({strides[1], strides[2]}),
        i64s({crop[1], crop[2], crop[4], crop[5]}),
        i64s({dilations[1], dilations[2]}), i64s({outPad[1], outPad[2]}),
        b.getI64IntegerAttr(group));
    if (!y)
      break;
    auto yt = cast<RankedTensorType>(y.getType());
    int64_t m = yt.getDimSize(1), ho = yt.getDimSize(2), wo = yt.getDimSize(3);
    // N×D×1×M×Ho×Wo padded to stride slices per input depth: depth i at
    // i·stride.
    y = nc.create<dopt::ReshapeOp>(y, i64s({batch, depth, 1, m, ho, wo}));
    y = padSpatial(nc, y, {0, 0, 0, 0}, {strides[0] - 1, 0, 0, 0}, 0.0);
    y = nc.create<dopt::ReshapeOp>(y,
                                   i64s({batch, depth * strides[0], m, ho, wo}));
    // Shifted by kd·dilation, cut or padded to the full depth.
    int64_t shift = k * dilations[0], length = shift + depth * strides[0];
    if (length > full)
      y = strided(nc, y, {1}, {0}, {1}, {full - shift});
    y = padSpatial(nc, y, {shift, 0, 0, 0},
                   {std::max<int64_t>(0, full - length), 0, 0, 0}, 0.0);
    sum = sum ? nc.create<dopt::AddOp>(sum, y) : y;
  }
  if (nc.hasFailed() || !sum)
    return {};
  int64_t outDepth = full - crop[0] - crop[3];
  if (outDepth <= 0) {
    (void)nc.error("the output depth " + std::to_string(outDepth) +
                   " is not positive");
    return {};
  }
  Value y = strided(nc, sum, {1}, {crop[0]}, {1}, {outDepth});
  y = nc.create<dopt::TransposeOp>(y, i64s({0, 2, 1, 3, 4}));
  y = padSpatial(nc, y, {grow[0], grow[1], grow[2]}, {grow[3], grow[4], grow[5]},
                 0.0);
  if (bias && y) {
    int64_t m = cast<RankedTensorType>(y.getType()).getDimSize(1);
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != m) {
      (void)nc.error("bias must be 1-D with " + std::to_string(m) +
                     " entries, got " + shapeStr(bt.getShape()));
      return {};
    }
    y = nc.create<dopt::AddOp>(
        y, nc.create<dopt::ReshapeOp>(bias, i64s({m, 1, 1, 1})));
  }
  return y;
}

/// ONNX ConvTranspose (1-D or 2-D): pads explicit, or derived from
/// output_shape or auto_pad as the ONNX reference does (total =
/// stride·(in − 1) + output_padding + extent − out, split with floor
/// division, the odd one at the end for SAME_UPPER, at the start
/// otherwise). A negative pad (an output_shape beyond the natural one)
/// becomes zeros around the result, the bias added after them.
LogicalResult importConvTranspose(NodeContext &nc) {
  TRY(conv, convNode(nc));
  auto [x, w, n, inSpatial, kernel, strides, dilations, group] = conv;
  TRY(outPadAttr, nc.intsAttr("output_padding"));
  SmallVector<int64_t> outPad = outPadAttr.value_or(SmallVector<int64_t>(n));
  if (outPad.size() != n)
    return nc.error("output_padding must have " + entries(n) + ", got " +
                    shapeStr(outPad));
  TRY(autoPad, nc.stringAttr("auto_pad", "NOTSET"));
  TRY(outShapeAttr, nc.intsAttr("output_shape"));
  SmallVector<int64_t> pads;
  if (outShapeAttr || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    SmallVector<int64_t> outShape;
    if (outShapeAttr) {
      if (outShapeAttr->size() != n && outShapeAttr->size() != n + 2)
        return nc.error("output_shape must have " + std::to_string(n) +
                        " (spatial) or " + entries(n + 2) + ", got " +
                        shapeStr(*outShapeAttr));
      outShape.assign(outShapeAttr->end() - n, outShapeAttr->end());
    } else {
      for (size_t i = 0; i < n; ++i)
        outShape.push_back(inSpatial[i] * strides[i]);
    }
    pads.assign(2 * n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (outShape[i] <= 0)
        return nc.error("output_shape " + shapeStr(outShape) +
                        " must be positive");
      int64_t total =
          dopt::transposedOutputSize(inSpatial[i], kernel[i], strides[i], 0,
                                     0, dilations[i], outPad[i]) -
          outShape[i];
      int64_t half = llvm::divideFloorSigned(total, 2);
      pads[i] = autoPad == "SAME_UPPER" ? half : total - half;
      pads[i + n] = autoPad == "SAME_UPPER" ? total - half : half;
    }
  } else if (autoPad == "NOTSET" || autoPad == "VALID") {
    TRY(padsAttr, nc.intsAttr("pads"));
    pads = autoPad == "VALID" ? SmallVector<int64_t>(2 * n, 0)
                              : padsAttr.value_or(SmallVector<int64_t>(2 * n, 0));
    if (pads.size() != 2 * n)
      return nc.error("pads must have " + entries(2 * n) + ", got " +
                      shapeStr(pads));
    if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return nc.error("pads must be non-negative, got " + shapeStr(pads));
  } else {
    return nc.error("auto_pad '" + autoPad +
                    "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  if (n == 3)
    return setWindowOutput(nc,
                           convTranspose3dByDepth(nc, x, w, nc.input(2), strides,
                                                  pads, dilations, outPad,
                                                  group),
                           false);
  // From here on in 2-D.
  pads = liftPads(pads);
  strides = liftSizes(strides, 1);
  dilations = liftSizes(dilations, 1);
  outPad = liftSizes(outPad, 0);
  OpBuilder &b = nc.builder();
  SmallVector<int64_t> clipped, grow(8, 0);
  bool negative = false;
  for (int i = 0; i < 4; ++i) {
    clipped.push_back(std::max<int64_t>(0, pads[i]));
    if (pads[i] < 0) {
      negative = true;
      grow[2 + (i % 2) + (i >= 2 ? 4 : 0)] = -pads[i];
    }
  }
  Value bias = nc.input(2);
  if (negative && bias) {
    // Added after the padding, not by the op: checked here as the op would.
    auto bt = cast<RankedTensorType>(bias.getType());
    int64_t m = nc.inputType(1).getDimSize(1) * group;
    if (bt.getRank() != 1 || bt.getDimSize(0) != m)
      return nc.error("bias must be 1-D with " + std::to_string(m) +
                      " entries, got rank " + std::to_string(bt.getRank()) +
                      " " + shapeStr(bt.getShape()));
  }
  Value y = nc.create<dopt::ConvTransposeOp>(
      x, w, negative ? Value() : bias, b.getDenseI64ArrayAttr(strides),
      b.getDenseI64ArrayAttr(clipped), b.getDenseI64ArrayAttr(dilations),
      b.getDenseI64ArrayAttr(outPad), b.getI64IntegerAttr(group));
  if (negative && y) {
    y = nc.create<dopt::PadOp>(y, b.getDenseI64ArrayAttr(grow),
                               b.getStringAttr("constant"),
                               b.getF64FloatAttr(0.0));
    if (bias)
      y = nc.create<dopt::AddOp>(
          y, nc.create<dopt::ReshapeOp>(
                 bias, b.getDenseI64ArrayAttr(
                           {cast<RankedTensorType>(bias.getType()).getDimSize(0),
                            1, 1})));
  }
  return setWindowOutput(nc, y, n == 1);
}

/// A 3-D convolution (N×C×D×H×W) as the sum of 2-D ones, one per tap kd of
/// the kernel's depth: the input's depth slices kd·dilation, + stride, ...
/// (padded in depth first) become a batch of N·Do images of C×H×W, each
/// convolved with the weight's depth slice kd. The sum has the 3-D
/// convolution's operation count; the transposes and slices read the input
/// KD + 1 times. Autodiff, sharding and every target see 2-D convolutions.
Value conv3dByDepth(NodeContext &nc, Value x, Value w, Value bias,
                    ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                    ArrayRef<int64_t> dilations, int64_t group) {
  auto in = cast<RankedTensorType>(x.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  int64_t batch = in.getDimSize(0), channels = in.getDimSize(1);
  int64_t depth = in.getDimSize(2), kd = wt.getDimSize(2);
  int64_t outDepth = dopt::windowOutputSize(depth, kd, strides[0], pads[0],
                                            pads[3], dilations[0], false);
  if (outDepth <= 0) {
    (void)nc.error("the kernel's depth " + std::to_string(kd) +
                   " (dilated " + std::to_string(dilations[0]) +
                   ") does not fit the padded input depth " +
                   std::to_string(depth + pads[0] + pads[3]));
    return {};
  }
  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  int64_t extent = (outDepth - 1) * strides[0] + (kd - 1) * dilations[0] + 1;
  Value padded = padSpatial(
      nc, x, {pads[0], 0, 0},
      {std::max<int64_t>(0, extent - depth - pads[0]), 0, 0}, 0.0);
  // N×D×C×H×W: a depth slice is then a batch of images.
  Value byDepth = nc.create<dopt::TransposeOp>(padded, i64s({0, 2, 1, 3, 4}));
  SmallVector<int64_t> wShape{wt.getDimSize(0), wt.getDimSize(1),
                              wt.getDimSize(3), wt.getDimSize(4)};
  Value sum;
  for (int64_t k = 0; k < kd && !nc.hasFailed(); ++k) {
    Value slice = strided(nc, byDepth, {1}, {k * dilations[0]}, {strides[0]},
                          {outDepth});
    Value images = nc.create<dopt::ReshapeOp>(
        slice, i64s({batch * outDepth, channels, in.getDimSize(3),
                     in.getDimSize(4)}));
    Value wk = nc.create<dopt::ReshapeOp>(
        strided(nc, w, {2}, {k}, {1}, {1}), i64s(wShape));
    Value y = nc.create<dopt::ConvOp>(
        images, wk, Value(), i64s({strides[1], strides[2]}),
        i64s({pads[1], pads[2], pads[4], pads[5]}),
        i64s({dilations[1], dilations[2]}), b.getI64IntegerAttr(group));
    sum = sum ? nc.create<dopt::AddOp>(sum, y) : y;
  }
  if (nc.hasFailed())
    return {};
  auto yt = cast<RankedTensorType>(sum.getType());
  int64_t m = yt.getDimSize(1);
  Value y = nc.create<dopt::TransposeOp>(
      nc.create<dopt::ReshapeOp>(sum, i64s({batch, outDepth, m,
                                            yt.getDimSize(2),
                                            yt.getDimSize(3)})),
      i64s({0, 2, 1, 3, 4}));
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != m) {
      (void)nc.error("bias must be 1-D with " + std::to_string(m) +
                     " entries, got " + shapeStr(bt.getShape()));
      return {};
    }
    y = nc.create<dopt::AddOp>(
        y, nc.create<dopt::ReshapeOp>(bias, i64s({m, 1, 1, 1})));
  }
  return y;
}

/// The node's convolution of `x` and `w` (null: its inputs 0 and 1) plus
/// `bias`: dopt.conv for 1-D (lifted to 2-D) and 2-D windows, 2-D ones over
/// depth slices for 3-D.
FailureOr<Value> convolution(NodeContext &nc, Value x, Value w, Value bias) {
  TRY(conv, convNode(nc, x, w));
  auto [cx, cw, n, inSpatial, kernel, strides, dilations, group] = conv;
  TRY(pads, resolvePads(nc, inSpatial, kernel, strides, dilations));
  Value y;
  if (n == 3) {
    y = conv3dByDepth(nc, cx, cw, bias, strides, pads, dilations, group);
  } else {
    OpBuilder &b = nc.builder();
    y = nc.create<dopt::ConvOp>(
        cx, cw, bias, b.getDenseI64ArrayAttr(liftSizes(strides, 1)),
        b.getDenseI64ArrayAttr(liftPads(pads)),
        b.getDenseI64ArrayAttr(liftSizes(dilations, 1)),
        b.getI64IntegerAttr(group));
    if (n == 1)
      y = heightOne(nc, y, false);
  }
  if (!y)
    return failure();
  return y;
}

LogicalResult importConv(NodeContext &nc) {
  TRY(y, convolution(nc, {}, {}, nc.input(2)));
  return setResult(nc, y);
}

/// Max or average pooling over any number of spatial axes, and with any
/// dilations, as the reduction of strided slices of the padded input, one
/// slice per tap of the window: the maximum of the slices (padding at the
/// type's lowest value), or their sum (padding 0) divided by each window's
/// tap count (dopt::windowTapCount, the rule dopt.avg_pool follows). For
/// what dopt.max_pool and dopt.avg_pool do not cover: 3-D windows and
/// dilated average pooling; and, with `divide` false, the windows' sums
/// (LpPool). prod(kernel) slices, each of the output's size: a 2x2x2
/// window reads its input 8 times.
Value poolBySlices(NodeContext &nc, Value x, bool isMax,
                   ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                   ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads,
                   bool ceilMode, bool countIncludePad, bool divide = true) {
  auto in = cast<RankedTensorType>(x.getType());
  size_t n = kernel.size();
  Type elt = in.getElementType();
  SmallVector<int64_t> out, axes, begins(pads.take_front(n)), ends;
  for (size_t i = 0; i < n; ++i) {
    int64_t size = in.getDimSize(2 + i);
    int64_t o = dopt::windowOutputSize(size, kernel[i], strides[i], pads[i],
                                       pads[n + i], dilations[i], ceilMode);
    if (o <= 0) {
      (void)nc.error("the " + shapeStr(kernel) + " window does not fit the " +
                     "padded input " + shapeStr(in.getShape()));
      return {};
    }
    out.push_back(o);
    axes.push_back(2 + i);
    // Enough padding at the end for the last window, ceil_mode's overhang
    // included.
    int64_t extent = (o - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1;
    ends.push_back(std::max<int64_t>(0, extent - size - pads[i]));
  }
  double lowest = -std::numeric_limits<double>::infinity();
  if (auto it = dyn_cast<IntegerType>(elt))
    lowest = it.isUnsigned() || it.getWidth() == 1
                 ? 0.0
                 : (double)APInt::getSignedMinValue(it.getWidth())
                       .getSExtValue();
  Value padded = padSpatial(nc, x, begins, ends, isMax ? lowest : 0.0);
  Value acc;
  SmallVector<int64_t> tap(n, 0);
  while (true) {
    SmallVector<int64_t> starts;
    for (size_t i = 0; i < n; ++i)
      starts.push_back(tap[i] * dilations[i]);
    Value s = strided(nc, padded, axes, starts, strides, out);
    acc = !acc ? s
          : isMax ? nc.create<dopt::MaxOp>(acc, s)
                  : nc.create<dopt::AddOp>(acc, s);
    size_t i = n;
    while (i > 0 && ++tap[i - 1] == kernel[i - 1])
      tap[--i] = 0;
    if (i == 0)
      break;
  }
  if (isMax || !acc || !divide)
    return acc;
  if (!isa<FloatType>(elt)) {
    (void)nc.error("average pooling needs a floating-point input, got " +
                   typeStr(in));
    return {};
  }
  // The divisors: a constant of the output's spatial shape.
  int64_t total = 1;
  for (int64_t o : out)
    total *= o;
  SmallVector<double> counts;
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat, count = 1;
    for (size_t i = n; i-- > 0;) {
      int64_t o = rest % out[i];
      rest /= out[i];
      count *= dopt::windowTapCount(o, in.getDimSize(2 + i), kernel[i],
                                    strides[i], pads[i], pads[n + i],
                                    dilations[i], countIncludePad);
    }
    counts.push_back((double)count);
  }
  return nc.create<dopt::DivOp>(acc, floatConstant(nc, elt, out, counts));
}

/// The window attributes MaxPool and AveragePool share, resolved and
/// lifted to 2-D; `x` the input, lifted too.
struct PoolWindow {
  Value x;
  bool oneD, threeD;
  SmallVector<int64_t> kernel, strides, dilations, pads;
  bool ceilMode;
};

FailureOr<PoolWindow> readPoolWindow(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(n, spatialAxes(nc, in));
  TRY(kernel, nc.intsAttr("kernel_shape"));
  if (!kernel || kernel->size() != n) {
    (void)nc.error("kernel_shape must have " + entries(n));
    return failure();
  }
  TRY(strides, windowAttr(nc, "strides", n));
  TRY(dilations, windowAttr(nc, "dilations", n));
  TRY(ceil, nc.intAttr("ceil_mode", 0));
  TRY(pads, resolvePads(nc, in.getShape().drop_front(2), *kernel, strides,
                        dilations));
  return PoolWindow{n == 1 ? heightOne(nc, x, true) : x,
                    n == 1,
                    n == 3,
                    liftSizes(*kernel, 1),
                    liftSizes(strides, 1),
                    liftSizes(dilations, 1),
                    liftPads(pads),
                    ceil != 0};
}

LogicalResult importMaxPool(NodeContext &nc) {
  TRY(order, nc.intAttr("storage_order", 0));
  if (order != 0)
    return nc.error("storage_order = 1 (column-major indices) is not "
                    "supported");
  if (nc.outputUsed(1))
    return nc.error("the Indices output is not supported");
  TRY(w, readPoolWindow(nc));
  if (w.threeD)
    return setWindowOutput(nc,
                           poolBySlices(nc, w.x, /*isMax=*/true, w.kernel,
                                        w.strides, w.dilations, w.pads,
                                        w.ceilMode, false),
                           false);
  OpBuilder &b = nc.builder();
  return setWindowOutput(
      nc,
      nc.create<dopt::MaxPoolOp>(w.x, b.getDenseI64ArrayAttr(w.kernel),
                                 b.getDenseI64ArrayAttr(w.strides),
                                 b.getDenseI64ArrayAttr(w.pads),
                                 b.getDenseI64ArrayAttr(w.dilations),
                                 b.getBoolAttr(w.ceilMode)),
      w.oneD);
}

LogicalResult importAveragePool(NodeContext &nc) {
  TRY(w, readPoolWindow(nc));
  TRY(countPad, nc.intAttr("count_include_pad", 0));
  if (w.threeD || llvm::any_of(w.dilations, [](int64_t d) { return d != 1; }))
    return setWindowOutput(nc,
                           poolBySlices(nc, w.x, /*isMax=*/false, w.kernel,
                                        w.strides, w.dilations, w.pads,
                                        w.ceilMode, countPad != 0),
                           w.oneD);
  OpBuilder &b = nc.builder();
  return setWindowOutput(
      nc,
      nc.create<dopt::AvgPoolOp>(w.x, b.getDenseI64ArrayAttr(w.kernel),
                                 b.getDenseI64ArrayAttr(w.strides),
                                 b.getDenseI64ArrayAttr(w.pads),
                                 b.getBoolAttr(w.ceilMode),
                                 b.getBoolAttr(countPad != 0)),
      w.oneD);
}

/// |x|^p, with x·x for p = 2 and |x| for p = 1 (their gradients are
/// PyTorch's: the power's at 0 would be 0·inf).
Value absPower(NodeContext &nc, Value x, int64_t p) {
  if (p == 2)
    return nc.create<dopt::MulOp>(x, x);
  Value a = nc.create<dopt::AbsOp>(x);
  if (p == 1)
    return a;
  Type elt = cast<RankedTensorType>(x.getType()).getElementType();
  return nc.create<dopt::PowOp>(a, constantScalar(nc, elt, (double)p));
}

/// s^(1/p): a square root for p = 2, s itself for p = 1.
Value rootOf(NodeContext &nc, Value s, int64_t p) {
  if (p == 1 || !s)
    return s;
  if (p == 2)
    return nc.create<dopt::SqrtOp>(s);
  Type elt = cast<RankedTensorType>(s.getType()).getElementType();
  return nc.create<dopt::PowOp>(s, constantScalar(nc, elt, 1.0 / (double)p));
}

/// LpPool: (the window's sum of |x|^p)^(1/p), padding counting as 0; any
/// number of spatial axes, dilations, ceil_mode (poolBySlices' sums).
LogicalResult importLpPool(NodeContext &nc) {
  TRY(w, readPoolWindow(nc));
  TRY(p, nc.intAttr("p", 2));
  if (p < 1)
    return nc.error("p must be a positive integer, got " + std::to_string(p));
  if (!isa<FloatType>(nc.inputType(0).getElementType()))
    return nc.error("needs a floating-point input");
  Value sums = poolBySlices(nc, absPower(nc, w.x, p), /*isMax=*/false,
                            w.kernel, w.strides, w.dilations, w.pads,
                            w.ceilMode, false, /*divide=*/false);
  return setWindowOutput(nc, rootOf(nc, sums, p), w.oneD);
}

/// GlobalMaxPool: the maximum over every spatial axis, kept as size 1.
LogicalResult importGlobalMaxPool(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  int64_t rank = nc.inputType(0).getRank();
  if (rank < 3)
    return nc.error("input must have rank >= 3 (N, C, spatial...), got rank " +
                    std::to_string(rank));
  SmallVector<int64_t> axes;
  for (int64_t i = 2; i < rank; ++i)
    axes.push_back(i);
  OpBuilder &b = nc.builder();
  Value y = nc.create<dopt::ReduceMaxOp>(x, b.getDenseI64ArrayAttr(axes),
                                         b.getBoolAttr(true));
  return setResult(nc, y);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// A reduction's axes (sorted, normalised; all of them when none are given,
/// unless noop_with_empty_axes) and keepdims.
struct Reduction {
  SmallVector<int64_t> axes;
  bool keepdims;
};

/// `sinceInput`: the opset from which `axes` is an input, not an attribute.
FailureOr<Reduction> readReduction(NodeContext &nc, int64_t sinceInput) {
  int64_t rank = nc.inputType(0).getRank();
  TRY(keepdims, nc.intAttr("keepdims", 1));
  TRY(noopEmpty, nc.intAttr("noop_with_empty_axes", 0));
  SmallVector<int64_t> axes;
  if (nc.opset() >= sinceInput) {
    if (nc.hasAttr("axes")) {
      (void)nc.error("'axes' is an input since opset " +
                     std::to_string(sinceInput) + ", not an attribute");
      return failure();
    }
    if (nc.input(1)) {
      TRY(a, nc.constantInts(1, "axes"));
      axes = a;
    }
  } else {
    // Ignoring a second input would silently reduce over all axes.
    if (nc.input(1)) {
      (void)nc.error("'axes' is an attribute before opset " +
                     std::to_string(sinceInput) + ", not an input");
      return failure();
    }
    TRY(a, nc.intsAttr("axes"));
    if (a)
      axes = *a;
  }
  if (axes.empty() && !noopEmpty)
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  for (int64_t &a : axes) {
    TRY(n, nc.normalizeAxis(a, rank));
    a = n;
  }
  llvm::sort(axes);
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    (void)nc.error("axes contain a duplicate");
    return failure();
  }
  return Reduction{axes, keepdims != 0};
}

template <typename OpTy, int64_t sinceInput>
LogicalResult importReduce(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(r, readReduction(nc, sinceInput));
  nc.setOutput(0, nc.create<OpTy>(x, nc.builder().getDenseI64ArrayAttr(r.axes),
                                  nc.builder().getBoolAttr(r.keepdims)));
  return success();
}

/// The minimum over `axes`: the maximum of the values reflected (−x for
/// floats, ~x = all-ones − x for integers, not x for booleans), reflected
/// back.
Value reduceMinimum(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
                    bool keepdims) {
  Type elt = cast<RankedTensorType>(x.getType()).getElementType();
  auto reflect = [&](Value v) -> Value {
    if (isa<FloatType>(elt))
      return nc.create<dopt::NegOp>(v);
    if (elt.isInteger(1))
      return nc.create<dopt::NotOp>(v);
    return nc.create<dopt::SubOp>(constantScalar(nc, elt, -1), v);
  };
  OpBuilder &b = nc.builder();
  return reflect(nc.create<dopt::ReduceMaxOp>(
      reflect(x), b.getDenseI64ArrayAttr(axes), b.getBoolAttr(keepdims)));
}

/// The position of the maximum (`isMax`) or minimum along `axis`, as
/// int64: the positions holding the extreme value (an Equal with it, kept
/// as a size-1 axis), the lowest of them (or the highest, `last`) found by
/// a reduction of their indices (the others replaced by n, or −1). NaNs are
/// passed over, as ONNX Runtime does (NumPy's argmax would pick the first).
Value argExtreme(NodeContext &nc, Value x, int64_t axis, bool isMax, bool last,
                 bool keepdims) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  OpBuilder &b = nc.builder();
  int64_t n = type.getDimSize(axis);
  // NaNs do not count (as in ONNX Runtime): the other end of the order.
  if (isa<FloatType>(type.getElementType()))
    x = nc.create<dopt::WhereOp>(
        nc.create<dopt::EqualOp>(x, x), x,
        constantScalar(nc, type.getElementType(),
                       isMax ? -INFINITY : INFINITY));
  Value extreme =
      isMax ? nc.create<dopt::ReduceMaxOp>(x, b.getDenseI64ArrayAttr({axis}),
                                           b.getBoolAttr(true))
            : reduceMinimum(nc, x, {axis}, true);
  Value at = nc.create<dopt::EqualOp>(x, extreme);
  Value indices = nc.create<dopt::WhereOp>(
      at, iotaAlong(nc, n, rank, axis), nc.constantI64({last ? -1 : n}, {}));
  return last ? nc.create<dopt::ReduceMaxOp>(indices,
                                             b.getDenseI64ArrayAttr({axis}),
                                             b.getBoolAttr(keepdims))
              : reduceMinimum(nc, indices, {axis}, keepdims);
}

/// ArgMax / ArgMin (`isMax`) along one axis (argExtreme).
template <bool isMax> LogicalResult importArgExtreme(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  auto type = cast<RankedTensorType>(x.getType());
  TRY(axisAttr, nc.intAttr("axis", 0));
  TRY(axis, nc.normalizeAxis(axisAttr, type.getRank()));
  TRY(keepdims, nc.intAttr("keepdims", 1));
  TRY(last, nc.intAttr("select_last_index", 0));
  if (type.getElementType().isInteger(1))
    return nc.error("needs a numeric input, not booleans");
  return setResult(nc, argExtreme(nc, x, axis, isMax, last != 0, keepdims != 0));
}

/// Hardmax: 1 at the first maximum along `axis`, 0 elsewhere (a one-hot of
/// argExtreme; no gradient, as the function is piecewise constant).
LogicalResult importHardmax(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  auto type = cast<RankedTensorType>(x.getType());
  TRY(axisAttr, nc.intAttr("axis", -1));
  TRY(axis, nc.normalizeAxis(axisAttr, type.getRank()));
  if (type.getElementType().isInteger(1))
    return nc.error("needs a numeric input, not booleans");
  int64_t n = type.getDimSize(axis);
  if (n == 0)
    return setResult(nc, x);
  Value first = argExtreme(nc, x, axis, true, false, true);
  Value hot = nc.create<dopt::EqualOp>(iotaAlong(nc, n, type.getRank(), axis),
                                       first);
  return setResult(nc, nc.create<dopt::CastOp>(
                           hot, TypeAttr::get(type.getElementType())));
}

Value reshape(NodeContext &nc, Value x, ArrayRef<int64_t> shape);

/// The product along `axis`, kept as a size-1 axis: a tree of halvings
/// (the axis padded with a one to an even extent, its two halves
/// multiplied), ⌈log2 n⌉ products of slices. Exact at zeros; its gradient
/// follows from the slices, pads and products. An empty axis gives 1.
Value productAlong(NodeContext &nc, Value x, int64_t axis) {
  while (x) {
    auto t = cast<RankedTensorType>(x.getType());
    int64_t n = t.getDimSize(axis);
    if (n == 1)
      return x;
    if (n % 2 == 1 || n == 0) {
      SmallVector<int64_t> pads(2 * t.getRank(), 0);
      pads[t.getRank() + axis] = 1;
      OpBuilder &b = nc.builder();
      x = nc.create<dopt::PadOp>(x, b.getDenseI64ArrayAttr(pads),
                                 b.getStringAttr("constant"),
                                 b.getF64FloatAttr(1.0));
      continue;
    }
    x = nc.create<dopt::MulOp>(strided(nc, x, {axis}, {0}, {1}, {n / 2}),
                               strided(nc, x, {axis}, {n / 2}, {1}, {n / 2}));
  }
  return x;
}

/// ReduceProd: productAlong each axis, the axes dropped unless keepdims.
LogicalResult importReduceProd(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(r, readReduction(nc, 18));
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType().isInteger(1))
    return nc.error("needs a numeric input, not booleans");
  Value y = x;
  SmallVector<int64_t> kept;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (llvm::is_contained(r.axes, d))
      y = productAlong(nc, y, d);
    else
      kept.push_back(type.getDimSize(d));
  if (!r.keepdims && y)
    y = reshape(nc, y, kept);
  return setResult(nc, y);
}

/// The reductions ONNX defines with a function of others, written so:
/// ReduceMin (reduceMinimum), ReduceSumSquare, ReduceL1,
/// ReduceL2, ReduceLogSum, and ReduceLogSumExp shifted by the maximum (so
/// that exp does not overflow). Axes as for ReduceMax (an input since
/// opset 18).
enum class Composed { Min, SumSquare, L1, L2, LogSum, LogSumExp };
template <Composed kind> LogicalResult importComposedReduce(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(r, readReduction(nc, 18));
  OpBuilder &b = nc.builder();
  auto type = cast<RankedTensorType>(x.getType());
  Type elt = type.getElementType();
  auto axes = b.getDenseI64ArrayAttr(r.axes);
  auto keep = b.getBoolAttr(r.keepdims);
  auto sum = [&](Value v) { return nc.create<dopt::ReduceSumOp>(v, axes, keep); };
  bool isFloat = isa<FloatType>(elt);
  Value y;
  switch (kind) {
  case Composed::Min:
    y = reduceMinimum(nc, x, r.axes, r.keepdims);
    break;
  case Composed::SumSquare:
    y = sum(nc.create<dopt::MulOp>(x, x));
    break;
  case Composed::L1:
    y = sum(nc.create<dopt::AbsOp>(x));
    break;
  case Composed::L2:
  case Composed::LogSum: {
    Value s = kind == Composed::L2 ? sum(nc.create<dopt::MulOp>(x, x)) : sum(x);
    // Integers: computed in double and truncated back, as NumPy's astype.
    if (!isFloat)
      s = nc.create<dopt::CastOp>(s, TypeAttr::get(b.getF64Type()));
    y = kind == Composed::L2 ? nc.create<dopt::SqrtOp>(s)
                             : nc.create<dopt::LogOp>(s);
    if (!isFloat)
      y = nc.create<dopt::CastOp>(y, TypeAttr::get(elt));
    break;
  }
  case Composed::LogSumExp: {
    if (!isFloat)
      return nc.error("ReduceLogSumExp of integers is not supported");
    Value m = nc.create<dopt::ReduceMaxOp>(x, axes, b.getBoolAttr(true));
    Value s = nc.create<dopt::ReduceSumOp>(
        nc.create<dopt::ExpOp>(nc.create<dopt::SubOp>(x, m)), axes,
        b.getBoolAttr(true));
    y = nc.create<dopt::AddOp>(nc.create<dopt::LogOp>(s), m);
    if (!r.keepdims && y) {
      SmallVector<int64_t> shape;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (!llvm::is_contained(r.axes, d))
          shape.push_back(type.getDimSize(d));
      y = nc.create<dopt::ReshapeOp>(y, b.getDenseI64ArrayAttr(shape));
    }
    break;
  }
  }
  return setResult(nc, y);
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

/// A float constant input (roi, scales) as doubles; nothing when the input
/// is absent or an empty tensor.
FailureOr<SmallVector<double>> constantDoubles(NodeContext &nc, int i,
                                               StringRef what) {
  SmallVector<double> out;
  if (!nc.input(i))
    return out;
  DenseElementsAttr attr = nc.constantValues(i);
  if (!attr) {
    (void)nc.error(what + " (input " + std::to_string(i) +
                   ") must be a constant after shape folding; distopt needs "
                   "it to compute static shapes");
    return failure();
  }
  if (isa<FloatType>(attr.getElementType()))
    for (APFloat x : attr.getValues<APFloat>())
      out.push_back(x.convertToDouble());
  else
    for (APInt x : attr.getValues<APInt>())
      out.push_back((double)x.getSExtValue());
  return out;
}

/// How Resize maps one axis: its modes and sizes.
struct ResizeAxis {
  std::string coordinates, mode, nearestMode;
  double scale, cubicA;
  int64_t in, out;
  double roiBegin = 0, roiEnd = 1;
  bool antialias, excludeOutside;
};

/// The interpolation taps of one output position at `ratio` in (0, 1]
/// (ONNX's reference: nearest, linear, cubic, and their antialiased forms
/// when downsampling).
SmallVector<double> resizeCoefficients(const ResizeAxis &a, double ratio) {
  if (a.mode == "nearest") {
    if (ratio == std::floor(ratio))
      return {0, 1};
    const std::string &m = a.nearestMode;
    bool right = m == "round_prefer_ceil" ? ratio >= 0.5
                 : m == "floor"           ? false
                 : m == "ceil"            ? true
                                          : ratio > 0.5;
    return {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
  }
  double A = a.cubicA;
  auto cubic = [&](double x) {
    x = std::fabs(x);
    if (x <= 1)
      return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2)
      return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0.0;
  };
  if (!a.antialias) {
    if (a.mode == "linear")
      return {1 - ratio, ratio};
    return {cubic(ratio + 1), cubic(ratio), cubic(1 - ratio),
            cubic(2 - ratio)};
  }
  double s = std::min(a.scale, 1.0);
  SmallVector<double> c;
  if (a.mode == "linear") {
    int64_t start = (int64_t)std::floor(-1 / s) + 1;
    for (int64_t i = start; i < start + 2 - 2 * start; ++i)
      c.push_back(std::clamp(1 - std::fabs((i - ratio) * s), 0.0, 1.0));
  } else {
    int64_t start = (int64_t)std::floor(-2 / s) + 1;
    for (int64_t i = start; i < 2 - start; ++i)
      c.push_back(cubic(s * (i - ratio)));
  }
  double sum = 0;
  for (double v : c)
    sum += v;
  for (double &v : c)
    v /= sum;
  return c;
}

/// The out × in matrix of one axis' interpolation (row o: the weights of
/// the input positions output o reads; an index past either end reads the
/// edge), and which outputs tf_crop_and_resize extrapolates.
std::pair<std::vector<double>, std::vector<bool>>
resizeMatrix(const ResizeAxis &a) {
  std::vector<double> w(a.out * a.in, 0.0);
  std::vector<bool> outside(a.out, false);
  double outWidth = a.scale * a.in;
  for (int64_t o = 0; o < a.out; ++o) {
    double y = o, x;
    const std::string &m = a.coordinates;
    if (m == "align_corners")
      x = outWidth == 1 ? 0 : y * (a.in - 1) / (outWidth - 1);
    else if (m == "asymmetric")
      x = y / a.scale;
    else if (m == "tf_crop_and_resize") {
      x = outWidth == 1 ? (a.roiEnd - a.roiBegin) * (a.in - 1) / 2
                        : y * (a.roiEnd - a.roiBegin) * (a.in - 1) /
                              (outWidth - 1);
      x += a.roiBegin * (a.in - 1);
      if (x < 0 || x > a.in - 1) {
        outside[o] = true;
        continue;
      }
    } else if (m == "pytorch_half_pixel")
      x = outWidth == 1 ? -0.5 : (y + 0.5) / a.scale - 0.5;
    else if (m == "half_pixel_symmetric") {
      double offset = a.in / 2.0 * (1 - a.out / outWidth);
      x = offset + (y + 0.5) / a.scale - 0.5;
    } else // half_pixel
      x = (y + 0.5) / a.scale - 0.5;
    double xi = std::floor(x);
    double ratio = x == xi ? 1.0 : x - xi;
    SmallVector<double> c = resizeCoefficients(a, ratio);
    int64_t n = c.size(), pad = (n + 1) / 2;
    double xp = x + pad, pp = std::floor(xp), frac = xp - pp;
    int64_t offset = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1)
                                : (frac <= 0.5 ? -((n - 1) / 2)
                                               : -((n - 1) / 2) + 1);
    int64_t start = (int64_t)pp + offset - pad;
    if (a.excludeOutside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        if (start + k < 0 || start + k >= a.in)
          c[k] = 0;
        sum += c[k];
      }
      for (double &v : c)
        v /= sum == 0 ? 1 : sum;
    }
    for (int64_t k = 0; k < n; ++k)
      w[o * a.in + std::clamp<int64_t>(start + k, 0, a.in - 1)] += c[k];
  }
  return {w, outside};
}

/// Resize (opset 13+; Upsample converts to it): separable, so each resized
/// axis is a product with that axis' constant interpolation matrix
/// (resizeMatrix, computed here from ONNX's reference formulas for every
/// mode, coordinate transformation and antialias): W·x for the second-last
/// axis, x·Wᵀ for the last, a transpose around it for the others. In f32
/// (f64 for f64 inputs); integer inputs with nearest only, exact.
LogicalResult importResize(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  TRY(roi, constantDoubles(nc, 1, "roi"));
  TRY(scales, constantDoubles(nc, 2, "scales"));
  TRY(sizesIn, constantDoubles(nc, 3, "sizes"));
  TRY(mode, nc.stringAttr("mode", "nearest"));
  TRY(coordinates,
      nc.stringAttr("coordinate_transformation_mode", "half_pixel"));
  TRY(nearestMode, nc.stringAttr("nearest_mode", "round_prefer_floor"));
  TRY(cubicA, nc.floatAttr("cubic_coeff_a", -0.75f));
  TRY(exclude, nc.intAttr("exclude_outside", 0));
  TRY(extrapolation, nc.floatAttr("extrapolation_value", 0.0f));
  TRY(antialias, nc.intAttr("antialias", 0));
  TRY(policy, nc.stringAttr("keep_aspect_ratio_policy", "stretch"));
  TRY(axesAttr, nc.intsAttr("axes"));
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return nc.error("mode '" + mode + "' is not one of nearest, linear, cubic");
  if (!llvm::is_contained({"half_pixel", "half_pixel_symmetric",
                           "pytorch_half_pixel", "align_corners", "asymmetric",
                           "tf_crop_and_resize"},
                          coordinates))
    return nc.error("coordinate_transformation_mode '" + coordinates +
                    "' is not supported");
  if (!llvm::is_contained({"round_prefer_floor", "round_prefer_ceil", "floor",
                           "ceil"},
                          nearestMode))
    return nc.error("nearest_mode '" + nearestMode + "' is not supported");
  if (antialias && mode == "nearest")
    return nc.error("antialias applies to linear and cubic modes only");
  SmallVector<int64_t> axes;
  if (axesAttr) {
    for (int64_t a : *axesAttr) {
      TRY(n, nc.normalizeAxis(a, rank));
      axes.push_back(n);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  size_t k = axes.size();
  if (scales.empty() == sizesIn.empty())
    return nc.error("exactly one of scales and sizes must be given");
  if ((!scales.empty() && scales.size() != k) ||
      (!sizesIn.empty() && sizesIn.size() != k))
    return nc.error((scales.empty() ? "sizes" : "scales") +
                    std::string(" must have one entry per resized axis (") +
                    std::to_string(k) + ")");
  if (!roi.empty() && roi.size() != 2 * k)
    return nc.error("roi must have " + std::to_string(2 * k) + " entries");
  // Scales and output sizes per axis (ONNX's keep_aspect_ratio_policy).
  SmallVector<double> scale(rank, 1.0);
  SmallVector<int64_t> outSize(type.getShape());
  for (int64_t a : axes)
    if (type.isDynamicDim(a) || type.getDimSize(a) == 0)
      return nc.error("axis " + std::to_string(a) + " of the input has size " +
                      (type.isDynamicDim(a) ? std::string("?") : "0") +
                      ": Resize needs a known, non-zero size");
  // An output size as a double, checked before it becomes an int64 (a
  // scale of 1e30 or a NaN would otherwise be undefined behaviour).
  constexpr double maxSize = double(int64_t(1) << 40);
  auto toSize = [&](double v, int64_t axis) -> FailureOr<int64_t> {
    if (!(v >= 0) || v >= maxSize)
      return nc.error("the output size of axis " + std::to_string(axis) +
                      " would be " + (std::ostringstream() << v).str());
    return (int64_t)v;
  };
  if (!scales.empty()) {
    for (size_t i = 0; i < k; ++i) {
      if (!(scales[i] > 0) || !std::isfinite(scales[i]))
        return nc.error("scales must be positive and finite");
      scale[axes[i]] = scales[i];
      TRY(n, toSize(scales[i] * type.getDimSize(axes[i]), axes[i]));
      outSize[axes[i]] = n;
    }
  } else {
    for (size_t i = 0; i < k; ++i) {
      TRY(n, toSize(sizesIn[i], axes[i]));
      (void)n;
      scale[axes[i]] = sizesIn[i] / type.getDimSize(axes[i]);
    }
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        return nc.error("keep_aspect_ratio_policy '" + policy +
                        "' is not one of stretch, not_larger, not_smaller");
      double s = scale[axes[0]];
      for (int64_t a : axes)
        s = policy == "not_larger" ? std::min(s, scale[a])
                                   : std::max(s, scale[a]);
      for (int64_t a : axes) {
        scale[a] = s;
        TRY(n, toSize(s * type.getDimSize(a) + 0.5, a));
        outSize[a] = n;
      }
    } else {
      for (size_t i = 0; i < k; ++i)
        outSize[axes[i]] = (int64_t)sizesIn[i];
    }
  }
  if (!fitsInMemory(outSize, 8))
    return nc.error("the output shape " + shapeStr(outSize) + " is too large");
  // Every axis checked before any work: each resized axis' interpolation is
  // a dense out x in constant built here (2^24 entries: 4096 x 4096).
  constexpr int64_t maxMatrix = int64_t(1) << 24;
  for (int64_t axis : axes) {
    int64_t in = type.getDimSize(axis), out = outSize[axis];
    if (out <= 0)
      return nc.error("the output size of axis " + std::to_string(axis) +
                      " is " + std::to_string(out));
    if (out > maxMatrix / in)
      return nc.error("resizing axis " + std::to_string(axis) + " from " +
                      std::to_string(in) + " to " + std::to_string(out) +
                      " needs a " + std::to_string(out) + "x" +
                      std::to_string(in) +
                      " interpolation matrix, more than distopt builds "
                      "(2^24 entries)");
  }
  Type stored = type.getElementType();
  bool isInt = !isa<FloatType>(stored);
  if (isInt && mode != "nearest")
    return nc.error(mode + " resizing of integers is not supported (nearest "
                    "is)");
  OpBuilder &b = nc.builder();
  Type compute = stored.isF64() || isInt ? b.getF64Type() : b.getF32Type();
  Value y = x;
  if (compute != stored)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(compute));
  for (size_t i = 0; i < k && !nc.hasFailed(); ++i) {
    int64_t axis = axes[i];
    ResizeAxis a{coordinates,   mode,           nearestMode,
                 scale[axis],   cubicA,         type.getDimSize(axis),
                 outSize[axis]};
    if (!roi.empty()) {
      a.roiBegin = roi[i];
      a.roiEnd = roi[k + i];
    }
    a.antialias = antialias != 0;
    a.excludeOutside = exclude != 0;
    bool identity = a.in == a.out && std::fabs(a.scale - 1) < 1e-9 &&
                    (coordinates != "tf_crop_and_resize" ||
                     (a.roiBegin == 0 && a.roiEnd == 1));
    if (identity)
      continue;
    // Not a structured binding: C++17 lambdas cannot capture one (clang).
    std::pair<std::vector<double>, std::vector<bool>> interpolation =
        resizeMatrix(a);
    const std::vector<double> &w = interpolation.first;
    const std::vector<bool> &outside = interpolation.second;
    auto matrix = [&](bool transposed) -> Value {
      if (!transposed)
        return floatConstant(nc, compute, {a.out, a.in}, w);
      std::vector<double> wt(w.size());
      for (int64_t r = 0; r < a.out; ++r)
        for (int64_t c = 0; c < a.in; ++c)
          wt[c * a.out + r] = w[r * a.in + c];
      return floatConstant(nc, compute, {a.in, a.out}, wt);
    };
    int64_t r = rank;
    if (axis == r - 1) {
      y = nc.create<dopt::MatMulOp>(y, matrix(true));
    } else if (axis == r - 2) {
      y = nc.create<dopt::MatMulOp>(matrix(false), y);
    } else {
      SmallVector<int64_t> perm;
      for (int64_t d = 0; d < r; ++d)
        if (d != axis)
          perm.push_back(d);
      perm.push_back(axis);
      SmallVector<int64_t> back(r);
      for (int64_t d = 0; d < r; ++d)
        back[perm[d]] = d;
      y = nc.create<dopt::TransposeOp>(y, b.getDenseI64ArrayAttr(perm));
      y = nc.create<dopt::MatMulOp>(y, matrix(true));
      y = nc.create<dopt::TransposeOp>(y, b.getDenseI64ArrayAttr(back));
    }
    if (llvm::is_contained(outside, true)) {
      SmallVector<int64_t> shape(r, 1);
      shape[axis] = a.out;
      SmallVector<double> fill;
      for (bool o : outside)
        fill.push_back(o ? extrapolation : 0.0);
      y = nc.create<dopt::AddOp>(y, floatConstant(nc, compute, shape, fill));
    }
  }
  if (y && compute != stored)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(stored));
  return setResult(nc, y);
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

Value reshape(NodeContext &nc, Value x, ArrayRef<int64_t> shape) {
  return nc.create<dopt::ReshapeOp>(x,
                                    nc.builder().getDenseI64ArrayAttr(shape));
}

LogicalResult importReshape(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(target, nc.constantInts(1, "shape"));
  TRY(allowZero, nc.intAttr("allowzero", 0));
  RankedTensorType in = nc.inputType(0);
  SmallVector<int64_t> shape(target);
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if ((int64_t)i >= in.getRank())
        return nc.error("shape " + shapeStr(target) + " copies dimension " +
                        std::to_string(i) + " (0), which the input " +
                        shapeStr(in.getShape()) + " lacks");
      shape[i] = in.getDimSize(i);
    }
    if (shape[i] == -1) {
      if (inferred >= 0)
        return nc.error("shape " + shapeStr(target) + " has more than one -1");
      inferred = i;
      continue;
    }
    if (shape[i] < 0)
      return nc.error("shape " + shapeStr(target) + " has a negative size");
    known *= shape[i];
  }
  if (inferred >= 0) {
    if (known == 0 || in.getNumElements() % known != 0)
      return nc.error("cannot infer the -1 in shape " + shapeStr(target) +
                      " for input " + shapeStr(in.getShape()));
    shape[inferred] = in.getNumElements() / known;
  }
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  if (count != in.getNumElements())
    return nc.error("cannot reshape " + shapeStr(in.getShape()) + " to " +
                    shapeStr(target));
  nc.setOutput(0, reshape(nc, x, shape));
  return success();
}

LogicalResult importFlatten(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axisAttr, nc.intAttr("axis", 1));
  int64_t rank = in.getRank();
  if (axisAttr < -rank || axisAttr > rank)
    return nc.error("axis " + std::to_string(axisAttr) +
                    " is out of range for rank " + std::to_string(rank));
  int64_t axis = axisAttr < 0 ? axisAttr + rank : axisAttr;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= in.getDimSize(i);
  nc.setOutput(0, reshape(nc, x, {outer, inner}));
  return success();
}

/// Squeeze / Unsqueeze axes: an input since opset 13.
FailureOr<std::optional<SmallVector<int64_t>>> axesInput(NodeContext &nc) {
  if (nc.hasAttr("axes")) {
    (void)nc.error("'axes' is an input since opset 13, not an attribute");
    return failure();
  }
  if (!nc.input(1))
    return std::optional<SmallVector<int64_t>>();
  TRY(axes, nc.constantInts(1, "axes"));
  return std::optional<SmallVector<int64_t>>(axes);
}

LogicalResult importSqueeze(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axesOpt, axesInput(nc));
  SmallVector<bool> drop(in.getRank(), false);
  if (axesOpt) {
    for (int64_t a : *axesOpt) {
      TRY(n, nc.normalizeAxis(a, in.getRank()));
      if (in.getDimSize(n) != 1)
        return nc.error("cannot squeeze dimension " + std::to_string(n) +
                        " of size " + std::to_string(in.getDimSize(n)));
      drop[n] = true;
    }
  } else {
    for (int64_t i = 0; i < in.getRank(); ++i)
      drop[i] = in.getDimSize(i) == 1;
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i)
    if (!drop[i])
      shape.push_back(in.getDimSize(i));
  nc.setOutput(0, reshape(nc, x, shape));
  return success();
}

LogicalResult importUnsqueeze(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axesOpt, axesInput(nc));
  if (!axesOpt)
    return nc.error("missing required input 1 (axes)");
  int64_t outRank = in.getRank() + axesOpt->size();
  SmallVector<bool> inserted(outRank, false);
  for (int64_t a : *axesOpt) {
    TRY(n, nc.normalizeAxis(a, outRank));
    if (inserted[n])
      return nc.error("axes contain a duplicate");
    inserted[n] = true;
  }
  SmallVector<int64_t> shape;
  int64_t src = 0;
  for (int64_t i = 0; i < outRank; ++i)
    shape.push_back(inserted[i] ? 1 : in.getDimSize(src++));
  nc.setOutput(0, reshape(nc, x, shape));
  return success();
}

LogicalResult importTranspose(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  int64_t rank = nc.inputType(0).getRank();
  TRY(permAttr, nc.intsAttr("perm"));
  SmallVector<int64_t> perm;
  if (permAttr) {
    perm = *permAttr;
  } else {
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  }
  nc.setOutput(0, nc.create<dopt::TransposeOp>(
                      x, nc.builder().getDenseI64ArrayAttr(perm)));
  return success();
}

LogicalResult importConcat(NodeContext &nc) {
  SmallVector<Value> inputs;
  for (int i = 0; i < nc.numInputs(); ++i) {
    TRY(v, nc.requiredInput(i));
    inputs.push_back(v);
  }
  if (inputs.empty())
    return nc.error("needs at least one input");
  if (!nc.hasAttr("axis"))
    return nc.error("missing attribute 'axis'");
  TRY(axisAttr, nc.intAttr("axis", 0));
  TRY(axis, nc.normalizeAxis(axisAttr, nc.inputType(0).getRank()));
  nc.setOutput(0, nc.create<dopt::ConcatOp>(
                      inputs, nc.builder().getI64IntegerAttr(axis)));
  return success();
}

LogicalResult importSplit(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axisAttr, nc.intAttr("axis", 0));
  TRY(axis, nc.normalizeAxis(axisAttr, in.getRank()));
  int64_t dim = in.getDimSize(axis);
  SmallVector<int64_t> sizes;
  if (nc.hasAttr("split"))
    return nc.error("'split' is an input since opset 13, not an attribute");
  if (nc.input(1)) {
    TRY(s, nc.constantInts(1, "split"));
    sizes = s;
    if ((int)sizes.size() != nc.numOutputs())
      return nc.error("split has " + std::to_string(sizes.size()) +
                      " sizes but the node has " +
                      std::to_string(nc.numOutputs()) + " outputs");
  } else {
    int64_t n = nc.numOutputs();
    if (nc.hasAttr("num_outputs")) {
      if (nc.opset() < 18)
        return nc.error("num_outputs exists only since opset 18");
      TRY(numOutputs, nc.intAttr("num_outputs", n));
      if (numOutputs != n)
        return nc.error("num_outputs = " + std::to_string(numOutputs) +
                        " but the node has " + std::to_string(n) + " outputs");
    }
    if (n <= 0)
      return nc.error("has no outputs");
    // Equal pieces of ceil(dim / n); since opset 18 the last may be
    // smaller, but not empty (ONNX Runtime rejects that too).
    int64_t piece = (dim + n - 1) / n;
    if (nc.opset() < 18 && dim % n != 0)
      return nc.error("dimension " + std::to_string(dim) +
                      " does not split evenly into " + std::to_string(n));
    int64_t last = dim - piece * (n - 1);
    if (dim % n != 0 && last <= 0)
      return nc.error("dimension " + std::to_string(dim) + " cannot be " +
                      "split into " + std::to_string(n) + " pieces of " +
                      std::to_string(piece) + " with a smaller, non-empty " +
                      "last piece");
    sizes.assign(n - 1, piece);
    sizes.push_back(last);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    // SplitOp's builder would abort on a negative size.
    if (s < 0)
      return nc.error("split sizes " + shapeStr(sizes) +
                      " must be non-negative");
    total += s;
  }
  if (total != dim)
    return nc.error("split sizes " + shapeStr(sizes) + " do not add up to " +
                    "dimension " + std::to_string(axis) + " (" +
                    std::to_string(dim) + ")");
  auto op = dopt::SplitOp::create(nc.builder(), nc.loc(), x,
                                  nc.builder().getI64IntegerAttr(axis),
                                  nc.builder().getDenseI64ArrayAttr(sizes));
  for (size_t i = 0; i < sizes.size(); ++i)
    nc.setOutput(i, op.getResult(i));
  return success();
}

LogicalResult importSlice(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  TRY(starts, nc.constantInts(1, "starts"));
  TRY(ends, nc.constantInts(2, "ends"));
  SmallVector<int64_t> axes, steps;
  if (nc.input(3)) {
    TRY(a, nc.constantInts(3, "axes"));
    axes = a;
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  }
  if (nc.input(4)) {
    TRY(s, nc.constantInts(4, "steps"));
    steps = s;
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return nc.error("starts, ends, axes and steps must have the same length");
  SmallVector<int64_t> s(rank, 0), e(in.getShape()), st(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t k = 0; k < axes.size(); ++k) {
    TRY(axis, nc.normalizeAxis(axes[k], rank));
    if (seen[axis])
      return nc.error("axes contain a duplicate");
    seen[axis] = true;
    int64_t d = in.getDimSize(axis), step = steps[k];
    if (step == 0)
      return nc.error("steps must be non-zero");
    // ONNX Slice semantics: negative indices count from the end, then
    // clamp: for positive steps start and end to [0, d]; for negative steps
    // start to [0, d-1] and end to [-1, d-1] (end -1: through index 0).
    auto adjust = [d](int64_t v) {
      if (v < 0)
        v = v < std::numeric_limits<int64_t>::min() + d ? -1 : v + d;
      return v;
    };
    int64_t b = adjust(starts[k]), en = adjust(ends[k]);
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, d);
      en = std::clamp<int64_t>(en, 0, d);
      en = std::max(en, b);
    } else {
      // An empty dimension has no index 0: start -1 there.
      b = std::clamp<int64_t>(b, std::min<int64_t>(0, d - 1), d - 1);
      en = std::clamp<int64_t>(en, -1, d - 1);
      en = std::min(en, b);
    }
    s[axis] = b;
    e[axis] = en;
    st[axis] = step;
  }
  OpBuilder &bld = nc.builder();
  nc.setOutput(0, nc.create<dopt::SliceOp>(x, bld.getDenseI64ArrayAttr(s),
                                           bld.getDenseI64ArrayAttr(e),
                                           bld.getDenseI64ArrayAttr(st)));
  return success();
}

/// Constant indices (shape subgraphs; Gather, GatherElements,
/// ScatterElements) are checked at import: out of range, ONNX leaves them
/// undefined, and a gather of them would not fold and fail confusingly
/// further on.
LogicalResult checkConstantIndices(NodeContext &nc, Value indices,
                                   int64_t axis, int64_t dim) {
  auto c = indices.getDefiningOp<dopt::ConstantOp>();
  auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue())
                 : DenseElementsAttr();
  if (!dense || !isa<IntegerType>(dense.getElementType()))
    return success();
  for (APInt v : dense.getValues<APInt>()) {
    int64_t i = v.getSExtValue();
    if (i < -dim || i >= dim)
      return nc.error("index " + std::to_string(i) +
                      " is out of range for axis " + std::to_string(axis) +
                      " of size " + std::to_string(dim));
  }
  return success();
}

/// Gather and GatherElements: data, indices, an axis.
template <typename OpTy> LogicalResult importGatherLike(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(indices, nc.requiredInput(1));
  TRY(axisAttr, nc.intAttr("axis", 0));
  TRY(axis, nc.normalizeAxis(axisAttr, nc.inputType(0).getRank()));
  if (failed(checkConstantIndices(nc, indices, axis,
                                  nc.inputType(0).getDimSize(axis))))
    return failure();
  nc.setOutput(0, nc.create<OpTy>(data, indices,
                                  nc.builder().getI64IntegerAttr(axis)));
  return success();
}

LogicalResult importScatterElements(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(indices, nc.requiredInput(1));
  TRY(updates, nc.requiredInput(2));
  TRY(axisAttr, nc.intAttr("axis", 0));
  TRY(axis, nc.normalizeAxis(axisAttr, nc.inputType(0).getRank()));
  TRY(reduction, nc.stringAttr("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return nc.error("reduction must be none, add, mul, max or min, got '" +
                    reduction + "'");
  if (reduction != "none" && nc.inputType(0).getElementType().isInteger(1))
    return nc.error("reduction '" + reduction +
                    "' of booleans (only none replaces booleans)");
  if (failed(checkConstantIndices(nc, indices, axis,
                                  nc.inputType(0).getDimSize(axis))))
    return failure();
  OpBuilder &b = nc.builder();
  nc.setOutput(0, nc.create<dopt::ScatterElementsOp>(
                      data, indices, updates, b.getI64IntegerAttr(axis),
                      b.getStringAttr(reduction)));
  return success();
}

LogicalResult importTopK(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axisAttr, nc.intAttr("axis", -1));
  TRY(axis, nc.normalizeAxis(axisAttr, in.getRank()));
  TRY(largest, nc.intAttr("largest", 1));
  TRY(ks, nc.constantInts(1, "K"));
  if (ks.size() != 1)
    return nc.error("K must hold one value, got " + shapeStr(ks));
  int64_t k = ks[0], n = in.getDimSize(axis);
  if (k < 0 || k > n)
    return nc.error("K = " + std::to_string(k) + " is outside [0, " +
                    std::to_string(n) + "] (the extent of axis " +
                    std::to_string(axis) + ")");
  if (in.getElementType().isInteger(1))
    return nc.error("TopK of booleans is not supported");
  OpBuilder &b = nc.builder();
  auto op = dopt::TopKOp::create(b, nc.loc(), x, b.getI64IntegerAttr(k),
                                 b.getI64IntegerAttr(axis),
                                 b.getBoolAttr(largest != 0));
  nc.setOutput(0, op.getValues());
  nc.setOutput(1, op.getIndices());
  return success();
}

/// RNN, GRU and LSTM, unrolled over the (static) sequence into dopt ops,
/// as ONNX's equations define them: per direction, the input's product
/// with W for every step at once, then per step the state's product with R
/// and the gates. Written with other ops, so the gradient (through time),
/// the sharding rules (the batch splits) and every target follow.
/// sequence_lens, when given, must be constant: a sample's state stops at
/// its length and its later outputs are zeros (reverse directions start at
/// its last element).
enum class Recurrent { RNN, GRU, LSTM };
template <Recurrent kind> LogicalResult importRecurrent(NodeContext &nc) {
  const int64_t gates = kind == Recurrent::LSTM ? 4
                        : kind == Recurrent::GRU ? 3
                                                 : 1;
  TRY(x, nc.requiredInput(0));
  TRY(w, nc.requiredInput(1));
  TRY(r, nc.requiredInput(2));
  Value bias = nc.input(3), h0 = nc.input(5);
  Value c0 = kind == Recurrent::LSTM ? nc.input(6) : Value();
  Value peep = kind == Recurrent::LSTM ? nc.input(7) : Value();
  RankedTensorType xt = nc.inputType(0), wt = nc.inputType(1),
                   rt = nc.inputType(2);
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(layout, nc.intAttr("layout", 0));
  TRY(direction, nc.stringAttr("direction", "forward"));
  if (direction != "forward" && direction != "reverse" &&
      direction != "bidirectional")
    return nc.error("direction must be forward, reverse or bidirectional, "
                    "got '" + direction + "'");
  if (layout != 0 && layout != 1)
    return nc.error("layout must be 0 or 1, got " + std::to_string(layout));
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (xt.getRank() != 3 || wt.getRank() != 3 || rt.getRank() != 3)
    return nc.error("X, W and R must have rank 3");
  int64_t steps = xt.getDimSize(layout == 0 ? 0 : 1);
  if (xt.getRank() == 3 && steps == 0)
    return nc.error("a sequence of 0 steps is not supported");
  int64_t batch = xt.getDimSize(layout == 0 ? 1 : 0), in = xt.getDimSize(2);
  int64_t hidden = rt.getDimSize(2);
  TRY(hiddenAttr, nc.intAttr("hidden_size", hidden));
  auto shapeIs = [&](RankedTensorType t, ArrayRef<int64_t> want) {
    return t && t.getShape() == want;
  };
  if (hiddenAttr != hidden || !shapeIs(wt, {dirs, gates * hidden, in}) ||
      !shapeIs(rt, {dirs, gates * hidden, hidden}))
    return nc.error(
        "W " + shapeStr(wt.getShape()) + " and R " + shapeStr(rt.getShape()) +
        " do not fit " + std::to_string(dirs) + " direction(s), " +
        std::to_string(gates) + " gate(s) of hidden_size " +
        std::to_string(hiddenAttr) + " and input size " + std::to_string(in) +
        " (want W " + shapeStr({dirs, gates * hiddenAttr, in}) + ", R " +
        shapeStr({dirs, gates * hiddenAttr, hiddenAttr}) + ")");
  SmallVector<int64_t> stateShape =
      layout == 0 ? SmallVector<int64_t>{dirs, batch, hidden}
                  : SmallVector<int64_t>{batch, dirs, hidden};
  if (bias && !shapeIs(nc.inputType(3), {dirs, 2 * gates * hidden}))
    return nc.error("B " + shapeStr(nc.inputType(3).getShape()) +
                    " must be " + shapeStr({dirs, 2 * gates * hidden}));
  if (h0 && !shapeIs(nc.inputType(5), stateShape))
    return nc.error("initial_h " + shapeStr(nc.inputType(5).getShape()) +
                    " must be " + shapeStr(stateShape));
  if (c0 && !shapeIs(nc.inputType(6), stateShape))
    return nc.error("initial_c " + shapeStr(nc.inputType(6).getShape()) +
                    " must be " + shapeStr(stateShape));
  if (peep && !shapeIs(nc.inputType(7), {dirs, 3 * hidden}))
    return nc.error("P " + shapeStr(nc.inputType(7).getShape()) +
                    " must be " + shapeStr({dirs, 3 * hidden}));
  SmallVector<int64_t> lens;
  if (nc.input(4)) {
    TRY(l, nc.constantInts(4, "sequence_lens"));
    if (static_cast<int64_t>(l.size()) != batch)
      return nc.error("sequence_lens has " + std::to_string(l.size()) +
                      " entries for a batch of " + std::to_string(batch));
    for (int64_t v : l)
      if (v < 0 || v > steps)
        return nc.error("sequence_lens " + shapeStr(l) +
                        " must lie in [0, " + std::to_string(steps) + "]");
    if (llvm::any_of(l, [&](int64_t v) { return v != steps; }))
      lens = l;
  }
  std::optional<float> clip;
  if (nc.hasAttr("clip")) {
    TRY(c, nc.floatAttr("clip", 0.0f));
    if (c <= 0)
      return nc.error("clip must be positive");
    clip = c;
  }
  TRY(inputForget, nc.intAttr("input_forget", 0));
  TRY(linearBeforeReset, nc.intAttr("linear_before_reset", 0));

  // Activations, per direction (ONNX's defaults; alphas and betas in order
  // for those that take them).
  SmallVector<std::string> names;
  if (const onnx::AttributeProto *a = nc.attr("activations"))
    for (const std::string &n : a->strings())
      names.push_back(n);
  int64_t perDir = kind == Recurrent::LSTM ? 3 : kind == Recurrent::GRU ? 2 : 1;
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) {
      if (kind == Recurrent::RNN)
        names.push_back("Tanh");
      else
        names.append({"Sigmoid", "Tanh"});
      if (kind == Recurrent::LSTM)
        names.push_back("Tanh");
    }
  }
  if (static_cast<int64_t>(names.size()) != perDir * dirs)
    return nc.error("activations has " + std::to_string(names.size()) +
                    " entries, want " + std::to_string(perDir * dirs));
  SmallVector<float> alphas, betas;
  if (const onnx::AttributeProto *a = nc.attr("activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const onnx::AttributeProto *a = nc.attr("activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  size_t nextAlpha = 0, nextBeta = 0;
  auto c = [&](double v) { return constantScalar(nc, elt, v); };
  auto add = [&](Value a, Value b) { return nc.create<dopt::AddOp>(a, b); };
  auto mul = [&](Value a, Value b) { return nc.create<dopt::MulOp>(a, b); };
  using Fn = std::function<Value(Value)>;
  SmallVector<Fn> fns;
  for (std::string n : names) {
    // ONNX Runtime reads the names without regard to case.
    for (StringRef known : {"Sigmoid", "Tanh", "Relu", "LeakyRelu", "Affine",
                            "ScaledTanh", "HardSigmoid"})
      if (StringRef(n).equals_insensitive(known))
        n = known.str();
    auto param = [&](SmallVector<float> &list, size_t &next, float dflt) {
      return next < list.size() ? list[next++] : dflt;
    };
    if (n == "Sigmoid")
      fns.push_back([&](Value v) { return nc.create<dopt::SigmoidOp>(v); });
    else if (n == "Tanh")
      fns.push_back([&](Value v) { return nc.create<dopt::TanhOp>(v); });
    else if (n == "Relu")
      fns.push_back([&](Value v) { return nc.create<dopt::ReluOp>(v); });
    else if (n == "LeakyRelu") {
      float alpha = param(alphas, nextAlpha, 0.01f);
      fns.push_back([&, alpha](Value v) {
        return nc.create<dopt::LeakyReluOp>(
            v, nc.builder().getF32FloatAttr(alpha));
      });
    } else if (n == "Affine") {
      float alpha = param(alphas, nextAlpha, 1.0f);
      float beta = param(betas, nextBeta, 0.0f);
      fns.push_back([&, alpha, beta](Value v) {
        return add(mul(v, c(alpha)), c(beta));
      });
    } else if (n == "ScaledTanh") {
      float alpha = param(alphas, nextAlpha, 1.0f);
      float beta = param(betas, nextBeta, 1.0f);
      fns.push_back([&, alpha, beta](Value v) {
        return mul(c(alpha), nc.create<dopt::TanhOp>(mul(v, c(beta))));
      });
    } else if (n == "HardSigmoid") {
      float alpha = param(alphas, nextAlpha, 0.2f);
      float beta = param(betas, nextBeta, 0.5f);
      fns.push_back([&, alpha, beta](Value v) {
        return nc.create<dopt::MinOp>(
            nc.create<dopt::MaxOp>(add(mul(v, c(alpha)), c(beta)), c(0)),
            c(1));
      });
    } else
      return nc.error("activation '" + n +
                      "' is not supported (Sigmoid, Tanh, Relu, LeakyRelu, "
                      "Affine, ScaledTanh, HardSigmoid)");
  }

  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  auto along = [&](Value v, int64_t axis, int64_t start, int64_t count) {
    return strided(nc, v, {axis}, {start}, {1}, {count});
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return nc.create<dopt::TransposeOp>(v, i64s(perm));
  };
  // [T, B, I] and states [dirs, B, H].
  if (layout == 1) {
    x = transpose(x, {1, 0, 2});
    if (h0)
      h0 = transpose(h0, {1, 0, 2});
    if (c0)
      c0 = transpose(c0, {1, 0, 2});
  }
  Value zeros = floatConstant(nc, elt, {batch, hidden},
                              SmallVector<double>(batch * hidden, 0.0));
  SmallVector<Value> ys(dirs), lastH(dirs), lastC(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    // Per gate k: W_k^T and R_k^T (a product per gate, not one over all
    // gates sliced after: the planner can then split each gate's hidden
    // columns as its own product's), and the input's product with W_k for
    // every step at once.
    Value wd = reshape(nc, along(w, 0, d, 1), {gates * hidden, in});
    Value rd = reshape(nc, along(r, 0, d, 1), {gates * hidden, hidden});
    Value x2 = reshape(nc, x, {steps * batch, in});
    Value bd = bias ? reshape(nc, along(bias, 0, d, 1), {2 * gates * hidden})
                    : Value();
    SmallVector<Value> xw(gates), rT(gates), rbk(gates);
    for (int64_t k = 0; k < gates; ++k) {
      xw[k] = reshape(nc,
                      nc.create<dopt::MatMulOp>(
                          x2, transpose(along(wd, 0, k * hidden, hidden), {1, 0})),
                      {steps, batch, hidden});
      rT[k] = transpose(along(rd, 0, k * hidden, hidden), {1, 0});
      if (bd) {
        xw[k] = add(xw[k], along(bd, 0, k * hidden, hidden));
        rbk[k] = along(bd, 0, (gates + k) * hidden, hidden);
      }
    }
    Value pi, po, pf;
    if (peep) {
      Value pd = reshape(nc, along(peep, 0, d, 1), {3 * hidden});
      pi = along(pd, 0, 0, hidden);
      po = along(pd, 0, hidden, hidden);
      pf = along(pd, 0, 2 * hidden, hidden);
    }
    Fn f = fns[d * perDir], g = perDir > 1 ? fns[d * perDir + 1] : Fn(),
       h = perDir > 2 ? fns[d * perDir + 2] : Fn();
    Value hPrev = h0 ? reshape(nc, along(h0, 0, d, 1), {batch, hidden}) : zeros;
    Value cPrev = c0 ? reshape(nc, along(c0, 0, d, 1), {batch, hidden}) : zeros;
    // The state's product with gate k's R (and its bias).
    auto hr = [&](Value state, int64_t k) {
      Value v = nc.create<dopt::MatMulOp>(state, rT[k]);
      return rbk[k] ? add(v, rbk[k]) : v;
    };
    auto clipped = [&](Value v) {
      return clip ? nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(v, c(-*clip)),
                                           c(*clip))
                  : v;
    };
    SmallVector<Value> outs(steps);
    for (int64_t i = 0; i < steps; ++i) {
      int64_t t = reverse ? steps - 1 - i : i;
      SmallVector<Value> xs(gates);
      for (int64_t k = 0; k < gates; ++k)
        xs[k] = reshape(nc, along(xw[k], 0, t, 1), {batch, hidden});
      Value hNew, cNew;
      if (kind == Recurrent::RNN) {
        hNew = f(clipped(add(xs[0], hr(hPrev, 0))));
      } else if (kind == Recurrent::GRU) {
        Value z = f(clipped(add(xs[0], hr(hPrev, 0))));
        Value rg = f(clipped(add(xs[1], hr(hPrev, 1))));
        Value cand = linearBeforeReset ? add(xs[2], mul(rg, hr(hPrev, 2)))
                                       : add(xs[2], hr(mul(rg, hPrev), 2));
        Value hh = g(clipped(cand));
        hNew = add(mul(nc.create<dopt::SubOp>(c(1), z), hh), mul(z, hPrev));
      } else {
        Value pre_i = add(xs[0], hr(hPrev, 0));
        Value pre_f = add(xs[2], hr(hPrev, 2));
        if (peep) {
          pre_i = add(pre_i, mul(pi, cPrev));
          pre_f = add(pre_f, mul(pf, cPrev));
        }
        Value ig = f(clipped(pre_i));
        Value fg = inputForget ? nc.create<dopt::SubOp>(c(1), ig)
                               : f(clipped(pre_f));
        Value cc = g(clipped(add(xs[3], hr(hPrev, 3))));
        cNew = add(mul(fg, cPrev), mul(ig, cc));
        Value pre_o = add(xs[1], hr(hPrev, 1));
        if (peep)
          pre_o = add(pre_o, mul(po, cNew));
        Value og = f(clipped(pre_o));
        hNew = mul(og, h(cNew));
      }
      Value out = hNew;
      if (!lens.empty()) {
        // Samples past their length keep their state and output zeros.
        SmallVector<bool> valid;
        for (int64_t l : lens)
          valid.push_back(t < l);
        Value mask = dopt::ConstantOp::create(
            b, nc.loc(),
            DenseElementsAttr::get(RankedTensorType::get({batch, 1}, b.getI1Type()),
                                   ArrayRef<bool>(valid)));
        out = nc.create<dopt::WhereOp>(mask, hNew, zeros);
        hNew = nc.create<dopt::WhereOp>(mask, hNew, hPrev);
        if (cNew)
          cNew = nc.create<dopt::WhereOp>(mask, cNew, cPrev);
      }
      outs[t] = reshape(nc, out, {1, 1, batch, hidden});
      hPrev = hNew;
      if (cNew)
        cPrev = cNew;
      if (nc.hasFailed())
        return failure();
    }
    ys[d] = steps == 1 ? outs[0]
                       : nc.create<dopt::ConcatOp>(outs, b.getI64IntegerAttr(0));
    if (llvm::is_contained(lens, 0)) {
      // A sample of length 0 ends with zero states (ONNX Runtime's choice;
      // the spec leaves it open).
      SmallVector<bool> some;
      for (int64_t l : lens)
        some.push_back(l > 0);
      Value any = dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(RankedTensorType::get({batch, 1}, b.getI1Type()),
                                 ArrayRef<bool>(some)));
      hPrev = nc.create<dopt::WhereOp>(any, hPrev, zeros);
      if (kind == Recurrent::LSTM)
        cPrev = nc.create<dopt::WhereOp>(any, cPrev, zeros);
    }
    lastH[d] = reshape(nc, hPrev, {1, batch, hidden});
    if (kind == Recurrent::LSTM)
      lastC[d] = reshape(nc, cPrev, {1, batch, hidden});
  }
  auto joined = [&](SmallVector<Value> &v, int64_t axis) {
    return v.size() == 1 ? v[0]
                         : nc.create<dopt::ConcatOp>(v, b.getI64IntegerAttr(axis));
  };
  Value y = joined(ys, 1), yh = joined(lastH, 0);
  Value yc = kind == Recurrent::LSTM ? joined(lastC, 0) : Value();
  if (layout == 1) {
    y = transpose(y, {2, 0, 1, 3});
    yh = transpose(yh, {1, 0, 2});
    if (yc)
      yc = transpose(yc, {1, 0, 2});
  }
  nc.setOutput(0, y);
  nc.setOutput(1, yh);
  if (kind == Recurrent::LSTM)
    nc.setOutput(2, yc);
  return failure(nc.hasFailed());
}

/// Attention (opset 23-25; what torch's exporter writes for
/// scaled_dot_product_attention from opset 23), written with other ops as
/// ONNX's function body and reference define it: 3-D inputs split into
/// heads; Q and K each scaled by sqrt(scale); the past keys and values in
/// front of the new ones (present_key/value); grouped-query heads repeated;
/// softcap; a bias from the mask (boolean: 0 or -inf; a mask shorter than
/// the keys padded), the causal frontier (bottom-right: offset by the past
/// length, or per sample by nonpad_kv_seqlen), the sliding window and the
/// padding of nonpad_kv_seqlen -- those three known at import, one
/// constant; softmax (in softmax_precision), rows whose bias is all -inf
/// zero; the product with V. The four qk_matmul_output modes.
LogicalResult importAttention(NodeContext &nc) {
  TRY(q, nc.requiredInput(0));
  TRY(k, nc.requiredInput(1));
  TRY(v, nc.requiredInput(2));
  Value mask = nc.input(3), pastK = nc.input(4), pastV = nc.input(5);
  RankedTensorType qt = nc.inputType(0);
  Type elt = qt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs floating-point Q, K and V");
  int64_t rank = qt.getRank();
  if ((rank != 3 && rank != 4) || nc.inputType(1).getRank() != rank ||
      nc.inputType(2).getRank() != rank)
    return nc.error("Q, K and V must all have rank 3 or all rank 4");
  if (!pastK != !pastV)
    return nc.error("past_key and past_value must be given together");
  SmallVector<int64_t> nonpad;
  if (nc.input(6)) {
    if (pastK)
      return nc.error("nonpad_kv_seqlen cannot be combined with past_key");
    TRY(l, nc.constantInts(6, "nonpad_kv_seqlen"));
    nonpad = l;
  }
  TRY(isCausal, nc.intAttr("is_causal", 0));
  TRY(mode, nc.intAttr("qk_matmul_output_mode", 0));
  TRY(softcap, nc.floatAttr("softcap", 0.0f));
  TRY(left, nc.intAttr("left_window_size", -1));
  TRY(right, nc.intAttr("right_window_size", -1));
  if (mode < 0 || mode > 3)
    return nc.error("qk_matmul_output_mode must be 0 to 3, got " +
                    std::to_string(mode));
  if (left < -1 || right < -1)
    return nc.error("window sizes must be -1 or non-negative");
  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> x) { return b.getDenseI64ArrayAttr(x); };
  auto c = [&](double x) { return constantScalar(nc, elt, x); };
  auto mul = [&](Value x, Value y) { return nc.create<dopt::MulOp>(x, y); };
  auto add = [&](Value x, Value y) { return nc.create<dopt::AddOp>(x, y); };
  auto shapeOf = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getShape();
  };
  int64_t batch = qt.getDimSize(0);
  // [B, S, heads * d] -> [B, heads, S, d].
  auto heads = [&](Value x, int64_t n, StringRef what) -> FailureOr<Value> {
    auto sh = shapeOf(x);
    if (n <= 0 || sh[2] % n != 0)
      return nc.error(what + " hidden size " + std::to_string(sh[2]) +
                      " does not split into " + std::to_string(n) + " heads");
    return nc.create<dopt::TransposeOp>(
        reshape(nc, x, {sh[0], sh[1], n, sh[2] / n}), i64s({0, 2, 1, 3}));
  };
  if (rank == 3) {
    if (!nc.hasAttr("q_num_heads") || !nc.hasAttr("kv_num_heads"))
      return nc.error("3-D inputs need q_num_heads and kv_num_heads");
    TRY(qh, nc.intAttr("q_num_heads", 0));
    TRY(kvh, nc.intAttr("kv_num_heads", 0));
    TRY(q4, heads(q, qh, "Q"));
    TRY(k4, heads(k, kvh, "K"));
    TRY(v4, heads(v, kvh, "V"));
    q = q4, k = k4, v = v4;
  }
  int64_t qHeads = shapeOf(q)[1], kvHeads = shapeOf(k)[1];
  int64_t sq = shapeOf(q)[2], d = shapeOf(q)[3];
  if (shapeOf(k)[0] != batch || shapeOf(v)[0] != batch ||
      shapeOf(k)[3] != d || shapeOf(v)[1] != kvHeads)
    return nc.error("Q, K and V do not agree on batch, heads and head size");
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (nc.hasAttr("scale")) {
    TRY(sc, nc.floatAttr("scale", 1.0f));
    scale = sc;
  }
  // Both operands scaled by sqrt(scale), rounded to the input type (the
  // function body's order).
  Value rootScale = c(std::sqrt(scale));
  if (pastK) {
    k = nc.create<dopt::ConcatOp>(SmallVector<Value>{pastK, k},
                                  b.getI64IntegerAttr(2));
    v = nc.create<dopt::ConcatOp>(SmallVector<Value>{pastV, v},
                                  b.getI64IntegerAttr(2));
    if (nc.hasFailed())
      return failure();
  }
  Value presentK = k, presentV = v;
  int64_t skv = shapeOf(k)[2];
  int64_t past = pastK ? nc.inputType(4).getDimSize(2) : 0;
  if (!nonpad.empty() && static_cast<int64_t>(nonpad.size()) != batch)
    return nc.error("nonpad_kv_seqlen has " + std::to_string(nonpad.size()) +
                    " entries for a batch of " + std::to_string(batch));

  // The bias the attributes define: causal frontier, window, padding -- 0
  // where a query may attend a key, -inf where not; [B or 1, 1, Sq, Skv],
  // built from index vectors (folded at import when small; a long context
  // computes it in the program instead of holding Sq x Skv constants).
  bool perSample = !nonpad.empty();
  bool structural = isCausal || left >= 0 || right >= 0 || perSample;
  int64_t bs = perSample ? batch : 1;
  Value fixedBias;
  if (structural) {
    Type i64 = b.getI64Type();
    auto ints = [&](ArrayRef<int64_t> v, ArrayRef<int64_t> shape) -> Value {
      return dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(RankedTensorType::get(shape, i64), v));
    };
    auto iota = [](int64_t n) {
      SmallVector<int64_t> v(n);
      std::iota(v.begin(), v.end(), 0);
      return v;
    };
    auto scalarInt = [&](int64_t v) { return ints({v}, {}); };
    // diff[s, i, j] = i + offset[s] - j: how far key j lies before query i.
    SmallVector<int64_t> offsets;
    for (int64_t s = 0; s < bs; ++s)
      offsets.push_back(perSample ? nonpad[s] - sq : past);
    Value j = ints(iota(skv), {1, 1, skv});
    Value diff = nc.create<dopt::SubOp>(
        nc.create<dopt::AddOp>(ints(iota(sq), {1, sq, 1}),
                               ints(offsets, {bs, 1, 1})),
        j);
    Value ok;
    auto both = [&](Value cond) {
      ok = ok ? nc.create<dopt::AndOp>(ok, cond) : cond;
    };
    if (isCausal)
      both(nc.create<dopt::GreaterEqualOp>(diff, scalarInt(0)));
    if (left >= 0)
      both(nc.create<dopt::LessEqualOp>(diff, scalarInt(left)));
    if (right >= 0)
      both(nc.create<dopt::GreaterEqualOp>(diff, scalarInt(-right)));
    if (perSample)
      both(nc.create<dopt::LessOp>(j, ints(nonpad, {bs, 1, 1})));
    fixedBias = nc.create<dopt::WhereOp>(ok, c(0), c(-INFINITY));
    if (nc.hasFailed())
      return failure();
    // Right-aligned against the scores [B, heads, Sq, Skv].
    fixedBias = reshape(nc, nc.create<dopt::ExpandOp>(fixedBias, i64s({bs, sq, skv})),
                        {bs, 1, sq, skv});
  }
  Value bias;
  if (mask) {
    RankedTensorType mt = nc.inputType(3);
    bool boolean = mt.getElementType().isInteger(1);
    if (!boolean && mt.getElementType() != elt)
      return nc.error("attn_mask must be boolean or of Q's element type");
    int64_t mr = mt.getRank();
    if (mr < 1 || mr > 4)
      return nc.error("attn_mask must have rank 1 to 4, got " +
                      std::to_string(mr));
    int64_t last = mt.getDimSize(mr - 1);
    if (last > skv)
      return nc.error("attn_mask's last dimension " + std::to_string(last) +
                      " is longer than the keys (" + std::to_string(skv) + ")");
    Value m = mask;
    if (boolean)
      m = nc.create<dopt::WhereOp>(m, c(0), c(-INFINITY));
    if (last < skv) {
      SmallVector<int64_t> pads(2 * mr, 0);
      pads[2 * mr - 1] = skv - last;
      m = nc.create<dopt::PadOp>(m, i64s(pads), b.getStringAttr("constant"),
                                 b.getF64FloatAttr(-INFINITY));
    }
    bias = m;
  }
  if (fixedBias)
    bias = bias ? add(bias, fixedBias) : fixedBias;
  // Grouped-query attention: each key/value head serves q/kv query heads
  // ([h0, h0, h1, h1, ...]).
  if (qHeads != kvHeads) {
    if (qHeads % kvHeads != 0)
      return nc.error(std::to_string(qHeads) + " query heads do not share " +
                      std::to_string(kvHeads) + " key/value heads evenly");
    int64_t rep = qHeads / kvHeads;
    auto repeat = [&](Value x) {
      auto sh = shapeOf(x);
      Value e = nc.create<dopt::ExpandOp>(
          reshape(nc, x, {sh[0], sh[1], 1, sh[2], sh[3]}),
          i64s({sh[0], sh[1], rep, sh[2], sh[3]}));
      return reshape(nc, e, {sh[0], sh[1] * rep, sh[2], sh[3]});
    };
    k = repeat(k);
    v = repeat(v);
  }
  Value raw = nc.create<dopt::MatMulOp>(
      mul(q, rootScale),
      nc.create<dopt::TransposeOp>(mul(k, rootScale), i64s({0, 1, 3, 2})));
  Value scores = raw;
  if (softcap > 0)
    scores = mul(nc.create<dopt::TanhOp>(nc.create<dopt::DivOp>(raw, c(softcap))),
                 c(softcap));
  Value biased = bias ? add(scores, bias) : scores;
  // Mode 0: the product itself (the function body's QKAttnWeight; ONNX's
  // Python reference gives the softcapped one); 1: after softcap; 2: with
  // the bias; 3: the probabilities.
  Value qkOut = mode == 0 ? raw : mode == 2 ? biased : scores;
  Value logits = biased;
  Type smElt = elt;
  if (nc.hasAttr("softmax_precision")) {
    TRY(sp, nc.intAttr("softmax_precision", 1));
    smElt = convertDataType(nc.context(), sp);
    if (!smElt || !isa<FloatType>(smElt))
      return nc.error("softmax_precision must be a floating-point type");
    if (smElt != elt)
      logits = nc.create<dopt::CastOp>(logits, TypeAttr::get(smElt));
  }
  Value probs = nc.create<dopt::SoftmaxOp>(logits, b.getI64IntegerAttr(3));
  if (smElt != elt)
    probs = nc.create<dopt::CastOp>(probs, TypeAttr::get(elt));
  // A query whose every key is masked attends to nothing: zeros (decided on
  // the bias, as ONNX's reference does, not on NaN logits).
  if (bias) {
    Value rowMax = nc.create<dopt::ReduceMaxOp>(bias, i64s({static_cast<int64_t>(
                                                          shapeOf(bias).size() - 1)}),
                                                b.getBoolAttr(true));
    Value none = nc.create<dopt::EqualOp>(rowMax, c(-INFINITY));
    probs = nc.create<dopt::WhereOp>(none, c(0), probs);
  }
  if (mode == 3)
    qkOut = probs;
  Value y = nc.create<dopt::MatMulOp>(probs, v);
  if (rank == 3 && !nc.hasFailed()) {
    auto sh = shapeOf(y);
    y = reshape(nc, nc.create<dopt::TransposeOp>(y, i64s({0, 2, 1, 3})),
                {sh[0], sh[2], sh[1] * sh[3]});
  }
  nc.setOutput(0, y);
  nc.setOutput(1, presentK);
  nc.setOutput(2, presentV);
  nc.setOutput(3, qkOut);
  return failure(nc.hasFailed());
}

/// RotaryEmbedding (opset 23): the first rotary_embedding_dim features of
/// each head rotated by the angles of its position, as pairs (x1, x2) →
/// (cos·x1 − sin·x2, sin·x1 + cos·x2): the halves of those features, or
/// their even and odd elements (`interleaved`). The input is [B, H, S, D],
/// or [B, S, H·D] with num_heads; cos and sin are [B, S, r/2], or rows of a
/// [positions, r/2] cache taken at position_ids [B, S] (a Gather).
LogicalResult importRotaryEmbedding(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(cosCache, nc.requiredInput(1));
  TRY(sinCache, nc.requiredInput(2));
  Value positions = nc.input(3);
  RankedTensorType in = nc.inputType(0);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(interleaved, nc.intAttr("interleaved", 0));
  TRY(numHeads, nc.intAttr("num_heads", 0));
  TRY(rotaryAttr, nc.intAttr("rotary_embedding_dim", 0));
  int64_t rank = in.getRank();
  if (rank != 3 && rank != 4)
    return nc.error("input must have rank 3 [batch, sequence, hidden] or 4 "
                    "[batch, heads, sequence, head size], got rank " +
                    std::to_string(rank));
  int64_t batch = in.getDimSize(0);
  int64_t seq = in.getDimSize(rank == 4 ? 2 : 1);
  int64_t headSize;
  Value v = x;
  if (rank == 3) {
    int64_t hidden = in.getDimSize(2);
    if (numHeads <= 0 || hidden % numHeads != 0)
      return nc.error("a 3-D input needs num_heads dividing its hidden size " +
                      std::to_string(hidden) + ", got num_heads = " +
                      std::to_string(numHeads));
    headSize = hidden / numHeads;
    v = reshape(nc, x, {batch, seq, numHeads, headSize});
  } else {
    headSize = in.getDimSize(3);
  }
  int64_t r = rotaryAttr == 0 ? headSize : rotaryAttr;
  if (r <= 0 || r % 2 != 0 || r > headSize)
    return nc.error("rotary_embedding_dim must be even and at most the head "
                    "size " + std::to_string(headSize) + ", got " +
                    std::to_string(r));
  int64_t half = r / 2;
  SmallVector<int64_t> angles{batch, seq, half};
  OpBuilder &b = nc.builder();
  auto anglesOf = [&](Value cache, int i, StringRef what) -> Value {
    RankedTensorType t = nc.inputType(i);
    if (t.getElementType() != elt) {
      (void)nc.error(what + " must have the input's element type");
      return {};
    }
    if (positions) {
      if (t.getRank() != 2 || t.getDimSize(1) != half) {
        (void)nc.error(what + " must be [positions, " + std::to_string(half) +
                       "] with position_ids, got " + shapeStr(t.getShape()));
        return {};
      }
      return nc.create<dopt::GatherOp>(cache, positions, b.getI64IntegerAttr(0));
    }
    if (t.getShape() != ArrayRef<int64_t>(angles)) {
      (void)nc.error(what + " must be " + shapeStr(angles) +
                     " without position_ids, got " + shapeStr(t.getShape()));
      return {};
    }
    return cache;
  };
  if (positions) {
    RankedTensorType pt = nc.inputType(3);
    if (pt.getShape() != ArrayRef<int64_t>({batch, seq}))
      return nc.error("position_ids must be [" + std::to_string(batch) + "," +
                      std::to_string(seq) + "], got " +
                      shapeStr(pt.getShape()));
  }
  Value cos = anglesOf(cosCache, 1, "cos_cache");
  if (!cos)
    return failure();
  Value sin = anglesOf(sinCache, 2, "sin_cache");
  if (!sin)
    return failure();
  // [B, 1, S, r/2] against [B, H, S, D]; [B, S, 1, r/2] against [B, S, H, D].
  SmallVector<int64_t> view = rank == 4 ? SmallVector<int64_t>{batch, 1, seq, half}
                                        : SmallVector<int64_t>{batch, seq, 1, half};
  cos = reshape(nc, cos, view);
  sin = reshape(nc, sin, view);
  Value rotated = r == headSize ? v : strided(nc, v, {3}, {0}, {1}, {r});
  Value x1 = interleaved ? strided(nc, rotated, {3}, {0}, {2}, {half})
                         : strided(nc, rotated, {3}, {0}, {1}, {half});
  Value x2 = interleaved ? strided(nc, rotated, {3}, {1}, {2}, {half})
                         : strided(nc, rotated, {3}, {half}, {1}, {half});
  Value re = nc.create<dopt::SubOp>(nc.create<dopt::MulOp>(cos, x1),
                                    nc.create<dopt::MulOp>(sin, x2));
  Value im = nc.create<dopt::AddOp>(nc.create<dopt::MulOp>(sin, x1),
                                    nc.create<dopt::MulOp>(cos, x2));
  auto shape4 = [&](int64_t last) {
    SmallVector<int64_t> s(cast<RankedTensorType>(v.getType()).getShape());
    s.back() = last;
    return s;
  };
  Value y;
  if (interleaved) {
    SmallVector<int64_t> pairs = shape4(half);
    pairs.push_back(1);
    y = nc.create<dopt::ConcatOp>(
        ValueRange{reshape(nc, re, pairs), reshape(nc, im, pairs)},
        b.getI64IntegerAttr(4));
    y = reshape(nc, y, shape4(r));
  } else {
    y = nc.create<dopt::ConcatOp>(ValueRange{re, im}, b.getI64IntegerAttr(3));
  }
  if (r < headSize)
    y = nc.create<dopt::ConcatOp>(
        ValueRange{y, strided(nc, v, {3}, {r}, {1}, {headSize - r})},
        b.getI64IntegerAttr(3));
  if (rank == 3)
    y = reshape(nc, y, in.getShape());
  return setResult(nc, y);
}


/// Defines output `i` when something reads it, built by `make` only then
/// (a null value: an op failed to build, and said so).
template <typename Fn> LogicalResult setIfUsed(NodeContext &nc, int i, Fn make) {
  if (!nc.outputUsed(i))
    return success();
  Value v = make();
  if (!v)
    return failure();
  nc.setOutput(i, v);
  return success();
}

/// The compute type of an op whose definition computes in float32 whatever
/// its inputs (16-bit floats widened); f64 stays f64.
Type widened(NodeContext &nc, Type elt) {
  return elt.getIntOrFloatBitWidth() < 32 ? Type(nc.builder().getF32Type())
                                          : elt;
}

/// CausalConvWithState (opset 27; Mamba's and Gated DeltaNet's short
/// convolution): a depthwise convolution over [past_state (zeros when
/// absent), input] along the length, kernel k: output[b, c, t] =
/// Σ_j w[c, 0, j]·padded[b, c, t + j] (+ bias), then SiLU if asked;
/// present_state is the padded sequence's last k − 1 positions. The k taps
/// are k strided products: k is small (3 or 4), and the gradient is that of
/// slices and products. 16-bit inputs are summed in f32 and rounded to
/// their type, as the definition's reference does.
LogicalResult importCausalConvWithState(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(w, nc.requiredInput(1));
  Value bias = nc.input(2), past = nc.input(3);
  TRY(activation, nc.stringAttr("activation", "none"));
  if (activation != "none" && activation != "silu" && activation != "swish")
    return nc.error("activation must be none, silu or swish, got '" +
                    activation + "'");
  RankedTensorType in = nc.inputType(0), wt = nc.inputType(1);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input, got " + typeStr(elt));
  if (in.getRank() != 3)
    return nc.error("input must be [batch, channels, length], got " +
                    shapeStr(in.getShape()));
  int64_t batch = in.getDimSize(0), channels = in.getDimSize(1),
          length = in.getDimSize(2);
  if (wt.getElementType() != elt || wt.getRank() != 3 ||
      wt.getDimSize(0) != channels || wt.getDimSize(1) != 1)
    return nc.error("weight must be [" + std::to_string(channels) +
                    ", 1, k] of the input's type, got " +
                    shapeStr(wt.getShape()) + " " +
                    typeStr(wt.getElementType()));
  int64_t k = wt.getDimSize(2);
  if (k < 1)
    return nc.error("the kernel must have at least one tap");
  if (bias) {
    RankedTensorType bt = nc.inputType(2);
    if (bt.getElementType() != elt || bt.getShape() != ArrayRef<int64_t>{channels})
      return nc.error("bias must be [" + std::to_string(channels) +
                      "] of the input's type, got " + shapeStr(bt.getShape()));
  }
  SmallVector<int64_t> stateShape{batch, channels, k - 1};
  if (past) {
    RankedTensorType pt = nc.inputType(3);
    if (pt.getElementType() != elt || pt.getShape() != ArrayRef<int64_t>(stateShape))
      return nc.error("past_state must be " + shapeStr(stateShape) +
                      " of the input's type, got " + shapeStr(pt.getShape()));
  }
  if (k == 1 && nc.outputUsed(1))
    return nc.error("a kernel of one tap leaves present_state empty (distopt "
                    "has no empty tensors)");
  OpBuilder &b = nc.builder();
  Value padded = x;
  if (k > 1)
    padded = past ? nc.create<dopt::ConcatOp>(ValueRange{past, x},
                                              b.getI64IntegerAttr(2))
                  : padSpatial(nc, x, {k - 1}, {0}, 0.0);
  Type ct = widened(nc, elt);
  Value xs = castTo(nc, padded, ct), ws = castTo(nc, w, ct);
  Value y;
  for (int64_t j = 0; j < k; ++j) {
    Value tap = reshape(nc, strided(nc, ws, {2}, {j}, {1}, {1}), {1, channels, 1});
    Value term = nc.create<dopt::MulOp>(tap, strided(nc, xs, {2}, {j}, {1}, {length}));
    y = y ? nc.create<dopt::AddOp>(y, term) : term;
  }
  if (bias)
    y = nc.create<dopt::AddOp>(y, reshape(nc, castTo(nc, bias, ct), {1, channels, 1}));
  y = castTo(nc, y, elt);
  if (activation != "none") {
    Value yw = castTo(nc, y, ct);
    y = castTo(nc, nc.create<dopt::MulOp>(yw, nc.create<dopt::SigmoidOp>(yw)),
               elt);
  }
  if (!y)
    return failure();
  nc.setOutput(0, y);
  return setIfUsed(nc, 1, [&] {
    return strided(nc, padded, {2}, {length}, {1}, {k - 1});
  });
}

/// LinearAttention (opset 27): the recurrent state S [B, H_kv, d_k, d_v] of
/// linear attention, updated token by token and read by the queries:
///   linear       S ← S + k ⊗ v
///   gated        S ← exp(g)·S + k ⊗ v
///   delta        S ← S + k ⊗ β(v − Sᵀk)
///   gated_delta  S ← exp(g)·S, then as delta
///   o = scale · qᵀS (query head h reads KV head h / (H_q / H_kv)).
/// The recurrence is unrolled over the sequence: a prefill of T tokens is T
/// steps of products and updates (the definition's own sequential
/// semantics; a chunk-parallel form would need fewer, larger ops). Computed
/// in f32 for 16-bit inputs, as the definition's reference does;
/// present_state takes past_state's type (the query's without one).
LogicalResult importLinearAttention(NodeContext &nc) {
  TRY(query, nc.requiredInput(0));
  TRY(key, nc.requiredInput(1));
  TRY(value, nc.requiredInput(2));
  Value past = nc.input(3), decay = nc.input(4), beta = nc.input(5);
  if (!nc.hasAttr("q_num_heads") || !nc.hasAttr("kv_num_heads"))
    return nc.error("q_num_heads and kv_num_heads are required");
  TRY(qHeads, nc.intAttr("q_num_heads", 0));
  TRY(kvHeads, nc.intAttr("kv_num_heads", 0));
  TRY(scaleAttr, nc.floatAttr("scale", 0.0f));
  TRY(rule, nc.stringAttr("update_rule", "gated_delta"));
  if (rule != "linear" && rule != "gated" && rule != "delta" &&
      rule != "gated_delta")
    return nc.error("update_rule must be linear, gated, delta or "
                    "gated_delta, got '" + rule + "'");
  if (qHeads <= 0 || kvHeads <= 0 || qHeads % kvHeads != 0)
    return nc.error("q_num_heads (" + std::to_string(qHeads) +
                    ") must be a positive multiple of kv_num_heads (" +
                    std::to_string(kvHeads) + ")");
  bool gated = rule == "gated" || rule == "gated_delta";
  bool delta = rule == "delta" || rule == "gated_delta";
  if (gated != static_cast<bool>(decay))
    return nc.error("update_rule '" + rule + "' " +
                    (gated ? "requires" : "takes no") + " decay input");
  if (delta != static_cast<bool>(beta))
    return nc.error("update_rule '" + rule + "' " +
                    (delta ? "requires" : "takes no") + " beta input");
  RankedTensorType qt = nc.inputType(0), kt = nc.inputType(1),
                   vt = nc.inputType(2);
  Type elt = qt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs floating-point inputs, got " + typeStr(elt));
  for (auto [t, name] : {std::pair{qt, "query"}, {kt, "key"}, {vt, "value"}})
    if (t.getRank() != 3 || t.getElementType() != elt)
      return nc.error(std::string(name) + " must be [batch, sequence, heads * "
                      "size] of the query's type, got " +
                      shapeStr(t.getShape()) + " " +
                      typeStr(t.getElementType()));
  int64_t batch = qt.getDimSize(0), steps = qt.getDimSize(1);
  for (RankedTensorType t : {kt, vt})
    if (t.getDimSize(0) != batch || t.getDimSize(1) != steps)
      return nc.error("query, key and value must share batch and sequence, "
                      "got " + shapeStr(qt.getShape()) + ", " +
                      shapeStr(kt.getShape()) + " and " +
                      shapeStr(vt.getShape()));
  if (qt.getDimSize(2) % qHeads != 0)
    return nc.error("the query's last dimension " +
                    std::to_string(qt.getDimSize(2)) +
                    " is not a multiple of q_num_heads " +
                    std::to_string(qHeads));
  int64_t dk = qt.getDimSize(2) / qHeads;
  if (kt.getDimSize(2) != kvHeads * dk)
    return nc.error("key's last dimension must be kv_num_heads * d_k = " +
                    std::to_string(kvHeads * dk) + ", got " +
                    std::to_string(kt.getDimSize(2)));
  if (vt.getDimSize(2) % kvHeads != 0)
    return nc.error("value's last dimension " +
                    std::to_string(vt.getDimSize(2)) +
                    " is not a multiple of kv_num_heads " +
                    std::to_string(kvHeads));
  int64_t dv = vt.getDimSize(2) / kvHeads, group = qHeads / kvHeads;
  SmallVector<int64_t> stateShape{batch, kvHeads, dk, dv};
  Type stateElt = elt;
  if (past) {
    RankedTensorType pt = nc.inputType(3);
    stateElt = pt.getElementType();
    if (!isa<FloatType>(stateElt) || pt.getShape() != ArrayRef<int64_t>(stateShape))
      return nc.error("past_state must be " + shapeStr(stateShape) +
                      " of a floating-point type, got " +
                      shapeStr(pt.getShape()) + " " + typeStr(stateElt));
  }
  bool perKey = false;
  if (decay) {
    RankedTensorType dt = nc.inputType(4);
    int64_t last = dt.getRank() == 3 ? dt.getDimSize(2) : -1;
    perKey = last == kvHeads * dk;
    if (dt.getElementType() != elt || dt.getRank() != 3 ||
        dt.getDimSize(0) != batch || dt.getDimSize(1) != steps ||
        (last != kvHeads && !perKey))
      return nc.error("decay must be [" + std::to_string(batch) + ", " +
                      std::to_string(steps) + ", kv_num_heads or kv_num_heads "
                      "* d_k] of the query's type, got " +
                      shapeStr(dt.getShape()));
  }
  int64_t betaHeads = 1;
  if (beta) {
    RankedTensorType bt = nc.inputType(5);
    betaHeads = bt.getRank() == 3 ? bt.getDimSize(2) : -1;
    if (bt.getElementType() != elt || bt.getRank() != 3 ||
        bt.getDimSize(0) != batch || bt.getDimSize(1) != steps ||
        (betaHeads != kvHeads && betaHeads != 1))
      return nc.error("beta must be [" + std::to_string(batch) + ", " +
                      std::to_string(steps) + ", kv_num_heads or 1] of the "
                      "query's type, got " + shapeStr(bt.getShape()));
  }
  Type ct = widened(nc, elt);
  double scale = scaleAttr == 0.0f ? 1.0 / std::sqrt(double(dk)) : scaleAttr;
  OpBuilder &b = nc.builder();
  // Token t of x [B, T, ...]: its row, reshaped.
  auto token = [&](Value x, int64_t t, ArrayRef<int64_t> shape) {
    return reshape(nc, strided(nc, x, {1}, {t}, {1}, {1}), shape);
  };
  Value q = castTo(nc, query, ct), k = castTo(nc, key, ct),
        v = castTo(nc, value, ct);
  Value g = decay ? nc.create<dopt::ExpOp>(castTo(nc, decay, ct)) : Value();
  Value be = beta ? castTo(nc, beta, ct) : Value();
  Value s = past ? castTo(nc, past, ct) : Value(); // null: zeros
  Value scaleV = constantScalar(nc, ct, scale);
  SmallVector<Value> outputs;
  for (int64_t t = 0; t < steps; ++t) {
    Value kT = token(k, t, {batch, kvHeads, dk, 1});
    Value vT = token(v, t, {batch, kvHeads, 1, dv});
    if (gated && s)
      s = nc.create<dopt::MulOp>(
          s, token(g, t, perKey ? SmallVector<int64_t>{batch, kvHeads, dk, 1}
                                : SmallVector<int64_t>{batch, kvHeads, 1, 1}));
    if (delta) {
      // v ← β(v − Sᵀk): [B, H, 1, d_k] · [B, H, d_k, d_v].
      Value corrected = vT;
      if (s)
        corrected = nc.create<dopt::SubOp>(
            vT, nc.create<dopt::MatMulOp>(
                    token(k, t, {batch, kvHeads, 1, dk}), s));
      vT = nc.create<dopt::MulOp>(token(be, t, {batch, betaHeads, 1, 1}),
                                  corrected);
    }
    Value outer = nc.create<dopt::MulOp>(kT, vT);
    s = s ? nc.create<dopt::AddOp>(s, outer) : outer;
    // [B, H_kv, G, d_k] · [B, H_kv, d_k, d_v]: query head h = kv·G + g.
    Value o = nc.create<dopt::MatMulOp>(token(q, t, {batch, kvHeads, group, dk}), s);
    outputs.push_back(reshape(nc, nc.create<dopt::MulOp>(o, scaleV),
                              {batch, 1, qHeads * dv}));
    if (nc.hasFailed())
      return failure();
  }
  Value out = outputs.size() == 1
                  ? outputs.front()
                  : nc.create<dopt::ConcatOp>(outputs, b.getI64IntegerAttr(1));
  out = castTo(nc, out, elt);
  if (!out)
    return failure();
  nc.setOutput(0, out);
  return setIfUsed(nc, 1, [&] { return castTo(nc, s, stateElt); });
}

LogicalResult importExpand(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(shape, nc.constantInts(1, "shape"));
  SmallVector<int64_t> full(shape);
  for (int64_t d : nc.inputType(0).getShape())
    full.push_back(d);
  if (!fitsInMemory(full, 1))
    return nc.error("shape " + shapeStr(shape) + " is too large");
  nc.setOutput(0, nc.create<dopt::ExpandOp>(
                      x, nc.builder().getDenseI64ArrayAttr(shape)));
  return success();
}

LogicalResult importPad(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  TRY(mode, nc.stringAttr("mode", "constant"));
  if (mode != "constant" && mode != "reflect" && mode != "edge" &&
      mode != "wrap")
    return nc.error("mode must be constant, reflect, edge or wrap, got '" +
                    mode + "'");
  if (mode == "wrap" && nc.opset() < 19)
    return nc.error("mode 'wrap' came with opset 19; the model's is " +
                    std::to_string(nc.opset()));
  TRY(given, nc.constantInts(1, "pads"));
  SmallVector<int64_t> axes;
  if (nc.input(3)) {
    TRY(a, nc.constantInts(3, "axes"));
    axes = a;
  } else {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  if (given.size() != 2 * axes.size())
    return nc.error("pads has " + std::to_string(given.size()) +
                    " entries, expected " + std::to_string(2 * axes.size()));
  SmallVector<int64_t> pads(2 * rank, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    TRY(axis, nc.normalizeAxis(axes[k], rank));
    pads[axis] = given[k];
    pads[axis + rank] = given[k + axes.size()];
  }
  for (int64_t p : pads)
    if (p < 0)
      return nc.error("negative pads (cropping) are not supported: " +
                      shapeStr(pads));
  OpBuilder &b = nc.builder();
  if (mode == "wrap") {
    // Circular padding: per padded axis one Gather of the positions
    // (j − before) mod n, which wraps as often as the pads ask.
    Value y = x;
    for (int64_t axis = 0; axis < rank; ++axis) {
      int64_t before = pads[axis], after = pads[axis + rank],
              n = in.getDimSize(axis);
      if (before == 0 && after == 0)
        continue;
      SmallVector<int64_t> positions;
      for (int64_t j = 0; j < n + before + after; ++j)
        positions.push_back(((j - before) % n + n) % n);
      y = nc.create<dopt::GatherOp>(
          y, nc.constantI64(positions, {n + before + after}),
          b.getI64IntegerAttr(axis));
    }
    return setResult(nc, y);
  }
  double value = 0.0;
  if (nc.input(2)) {
    TRY(v, nc.constantScalar(2, "constant_value"));
    value = v;
  }
  nc.setOutput(0, nc.create<dopt::PadOp>(x, b.getDenseI64ArrayAttr(pads),
                                         b.getStringAttr(mode),
                                         b.getF64FloatAttr(value)));
  return success();
}

/// Tile: x viewed as [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...]
/// and collapsed to [r0·d0, r1·d1, ...] (output[i] = x[i mod d]).
LogicalResult importTile(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(repeats, nc.constantInts(1, "repeats"));
  RankedTensorType in = nc.inputType(0);
  if ((int64_t)repeats.size() != in.getRank())
    return nc.error("repeats " + shapeStr(repeats) + " has " +
                    std::to_string(repeats.size()) +
                    " entries for an input of rank " +
                    std::to_string(in.getRank()));
  SmallVector<int64_t> spread, broadcast, out;
  for (auto [r, d] : llvm::zip(repeats, in.getShape())) {
    if (r < 0)
      return nc.error("repeats " + shapeStr(repeats) + " has a negative entry");
    spread.append({1, d});
    broadcast.append({r, d});
    out.push_back(r * d);
  }
  if (!fitsInMemory(broadcast, 1))
    return nc.error("repeats " + shapeStr(repeats) + " make the output too large");
  Value v = nc.create<dopt::ExpandOp>(
      reshape(nc, x, spread), nc.builder().getDenseI64ArrayAttr(broadcast));
  return setResult(nc, reshape(nc, v, out));
}

/// One Einsum operand (or result) in the making: its value and the label
/// of each axis.
struct Labelled {
  Value value;
  std::string labels;
};

/// `x` with its axes in the order of `want` (a permutation of x's labels).
Labelled permuteTo(NodeContext &nc, const Labelled &x, StringRef want) {
  SmallVector<int64_t> perm;
  for (char l : want)
    perm.push_back(x.labels.find(l));
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return {x.value, want.str()};
  return {nc.create<dopt::TransposeOp>(x.value,
                                       nc.builder().getDenseI64ArrayAttr(perm)),
          want.str()};
}

/// `x` summed over the axes whose labels are not in `keep`.
Labelled sumAllBut(NodeContext &nc, const Labelled &x, StringRef keep) {
  SmallVector<int64_t> axes;
  std::string left;
  for (auto [i, l] : llvm::enumerate(x.labels))
    (keep.contains(l) ? (void)left.push_back(l) : axes.push_back(i));
  if (axes.empty())
    return x;
  OpBuilder &b = nc.builder();
  return {nc.create<dopt::ReduceSumOp>(x.value, b.getDenseI64ArrayAttr(axes),
                                       b.getBoolAttr(false)),
          left};
}

/// The product of two operands keeping the labels in `keep` (those a later
/// operand or the result needs), as one (batched) matrix product: labels in
/// both and kept are batch axes, labels in both and not kept are
/// contracted, the others are each side's free axes. A label of size 1 on
/// one side and n on the other is broadcast first.
Labelled contract(NodeContext &nc, Labelled a, Labelled b, StringRef keep) {
  a = sumAllBut(nc, a, (keep + b.labels).str());
  b = sumAllBut(nc, b, (keep + a.labels).str());
  auto dims = [](const Labelled &x) {
    return cast<RankedTensorType>(x.value.getType()).getShape();
  };
  // Broadcast size-1 axes against the other side.
  for (int side = 0; side < 2; ++side) {
    Labelled &x = side ? b : a, &y = side ? a : b;
    SmallVector<int64_t> to(dims(x));
    bool grow = false;
    for (auto [i, l] : llvm::enumerate(x.labels)) {
      size_t j = y.labels.find(l);
      if (j != std::string::npos && to[i] == 1 && dims(y)[j] != 1) {
        to[i] = dims(y)[j];
        grow = true;
      }
    }
    if (grow)
      x.value = nc.create<dopt::ExpandOp>(
          x.value, nc.builder().getDenseI64ArrayAttr(to));
  }
  std::string batch, contracted, freeA, freeB;
  for (char l : a.labels)
    (b.labels.find(l) == std::string::npos
         ? freeA
         : (keep.contains(l) ? batch : contracted))
        .push_back(l);
  for (char l : b.labels)
    if (a.labels.find(l) == std::string::npos)
      freeB.push_back(l);
  a = permuteTo(nc, a, batch + freeA + contracted);
  b = permuteTo(nc, b, batch + contracted + freeB);
  auto size = [&](const Labelled &x, StringRef ls) {
    int64_t n = 1;
    for (char l : ls)
      n *= dims(x)[x.labels.find(l)];
    return n;
  };
  int64_t nb = size(a, batch), nfa = size(a, freeA), nc_ = size(a, contracted),
          nfb = size(b, freeB);
  SmallVector<int64_t> shapeA = {nfa, nc_}, shapeB = {nc_, nfb};
  if (!batch.empty()) {
    shapeA.insert(shapeA.begin(), nb);
    shapeB.insert(shapeB.begin(), nb);
  }
  Value product = nc.create<dopt::MatMulOp>(reshape(nc, a.value, shapeA),
                                            reshape(nc, b.value, shapeB));
  SmallVector<int64_t> out;
  for (char l : batch + freeA)
    out.push_back(dims(a)[a.labels.find(l)]);
  for (char l : freeB)
    out.push_back(dims(b)[b.labels.find(l)]);
  return {reshape(nc, product, out), batch + freeA + freeB};
}

/// Einsum as transposes, sums and (batched) matrix products, operands
/// contracted left to right. Ellipses broadcast; a label repeated within
/// one operand (a diagonal) is refused.
LogicalResult importEinsum(NodeContext &nc) {
  TRY(equation, nc.stringAttr("equation", ""));
  std::string eq;
  for (char c : equation)
    if (c != ' ')
      eq.push_back(c);
  StringRef text(eq);
  auto [lhs, rhs] = text.split("->");
  bool explicitOutput = text.contains("->");
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if ((int)terms.size() != nc.numInputs())
    return nc.error("equation '" + equation + "' has " +
                    std::to_string(terms.size()) + " operands, the node " +
                    std::to_string(nc.numInputs()));
  // Ellipses become labels of their own (characters no equation uses),
  // right-aligned across operands as broadcasting is.
  int64_t ellipsisRank = 0;
  for (auto [i, term] : llvm::enumerate(terms))
    if (term.contains("..."))
      ellipsisRank = std::max<int64_t>(
          ellipsisRank, nc.inputType(i).getRank() - ((int64_t)term.size() - 3));
  auto expand = [&](StringRef term, int64_t rank) -> std::optional<std::string> {
    size_t at = term.find("...");
    if (at == StringRef::npos)
      return term.str();
    int64_t n = rank - ((int64_t)term.size() - 3);
    if (n < 0)
      return std::nullopt;
    std::string dots;
    for (int64_t k = ellipsisRank - n; k < ellipsisRank; ++k)
      dots.push_back(char('0' + k));
    return (term.take_front(at) + dots + term.drop_front(at + 3)).str();
  };
  for (char c : eq)
    if (!llvm::isAlpha(c) && !StringRef(".,->").contains(c))
      return nc.error("equation '" + equation + "': '" + std::string(1, c) +
                      "' is not a label (letters)");
  SmallVector<Labelled> ops;
  std::string all;
  llvm::DenseMap<char, int64_t> sizes;
  for (auto [i, term] : llvm::enumerate(terms)) {
    TRY(v, nc.requiredInput(i));
    int64_t rank = nc.inputType(i).getRank();
    std::optional<std::string> labels = expand(term, rank);
    if (!labels || (int64_t)labels->size() != rank)
      return nc.error("operand " + std::to_string(i) + " ('" + term.str() +
                      "') does not match its rank " + std::to_string(rank));
    for (auto [j, l] : llvm::enumerate(*labels)) {
      if (labels->find(l) != j)
        return nc.error("equation '" + equation + "': label '" +
                        std::string(1, l) + "' repeats within operand " +
                        std::to_string(i) + " (diagonals are not supported)");
      // Sizes agree across operands, or are 1 (broadcast).
      int64_t d = nc.inputType(i).getDimSize(j);
      auto [it, fresh] = sizes.try_emplace(l, d);
      if (!fresh && it->second != d && it->second != 1 && d != 1)
        return nc.error("equation '" + equation + "': label '" +
                        (llvm::isDigit(l) ? std::string("...")
                                          : std::string(1, l)) +
                        "' has size " + std::to_string(it->second) +
                        " in one operand and " + std::to_string(d) +
                        " in operand " + std::to_string(i));
      if (it->second == 1)
        it->second = d;
    }
    all += *labels;
    ops.push_back({v, *labels});
  }
  std::string output;
  if (explicitOutput) {
    std::optional<std::string> o = expand(rhs, ellipsisRank + (int64_t)rhs.size() -
                                                  (rhs.contains("...") ? 3 : 0));
    if (!o)
      return nc.error("equation '" + equation + "': bad output");
    output = *o;
    for (auto [j, l] : llvm::enumerate(output)) {
      if (all.find(l) == std::string::npos)
        return nc.error("equation '" + equation + "': output label '" +
                        std::string(1, l) + "' is in no operand");
      if (output.find(l) != j)
        return nc.error("equation '" + equation + "': output label '" +
                        std::string(1, l) + "' repeats");
    }
  } else {
    // Implicit output: the ellipsis' axes, then the labels seen once, in
    // alphabetical order.
    for (char l : all)
      if (llvm::isDigit(l) && output.find(l) == std::string::npos)
        output.push_back(l);
    std::string once;
    for (char l : all)
      if (llvm::isAlpha(l) && llvm::count(all, l) == 1)
        once.push_back(l);
    llvm::sort(once);
    output += once;
  }
  Labelled acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::string keep = output;
    for (size_t j = i + 1; j < ops.size(); ++j)
      keep += ops[j].labels;
    acc = contract(nc, acc, ops[i], keep);
    if (nc.hasFailed())
      return failure();
  }
  acc = permuteTo(nc, sumAllBut(nc, acc, output), output);
  return setResult(nc, acc.value);
}

/// `x` shifted by `k` along `axis`: k `fill`s (of the pad op) in front, the
/// last k elements dropped.
Value shiftAlong(NodeContext &nc, Value x, int64_t axis, int64_t k,
                 double fill = 0.0) {
  if (!x)
    return x;
  auto t = cast<RankedTensorType>(x.getType());
  int64_t n = t.getDimSize(axis);
  Value kept = strided(nc, x, {axis}, {0}, {1}, {n - k});
  SmallVector<int64_t> pads(2 * t.getRank(), 0);
  pads[axis] = k;
  OpBuilder &b = nc.builder();
  return nc.create<dopt::PadOp>(kept, b.getDenseI64ArrayAttr(pads),
                                b.getStringAttr("constant"),
                                b.getF64FloatAttr(fill));
}

/// `x` reversed along `axis`.
Value reverseAlong(NodeContext &nc, Value x, int64_t axis) {
  if (!x)
    return x;
  auto t = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> s(t.getRank(), 0), e(t.getShape()), st(t.getRank(), 1);
  s[axis] = t.getDimSize(axis) - 1;
  e[axis] = -1;
  st[axis] = -1;
  OpBuilder &b = nc.builder();
  return nc.create<dopt::SliceOp>(x, b.getDenseI64ArrayAttr(s),
                                  b.getDenseI64ArrayAttr(e),
                                  b.getDenseI64ArrayAttr(st));
}

/// CumSum (CumProd) as a scan of ⌈log2 n⌉ shifted additions
/// (multiplications), Hillis–Steele: after the step combining x with x
/// shifted by k, each element holds the sum (product) of the 2k elements
/// ending at it. Any numeric type; exact at zeros; the gradient follows from
/// the pads, slices and arithmetic. `exclusive` shifts the result by one
/// (the identity in front), `reverse` scans the reversed axis.
template <bool isProduct> LogicalResult importCumulative(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(axisValues, nc.constantInts(1, "axis"));
  if (axisValues.size() != 1)
    return nc.error("axis must hold one value, got " + shapeStr(axisValues));
  RankedTensorType in = nc.inputType(0);
  if (in.getElementType().isInteger(1))
    return nc.error("needs a numeric input, not booleans");
  TRY(axis, nc.normalizeAxis(axisValues[0], in.getRank()));
  TRY(exclusive, nc.intAttr("exclusive", 0));
  TRY(reverse, nc.intAttr("reverse", 0));
  double identity = isProduct ? 1.0 : 0.0;
  auto combine = [&](Value a, Value b) -> Value {
    return isProduct ? nc.create<dopt::MulOp>(a, b) : nc.create<dopt::AddOp>(a, b);
  };
  int64_t n = in.getDimSize(axis);
  if (n == 0)
    return setResult(nc, x);
  Value y = x;
  if (reverse)
    y = reverseAlong(nc, y, axis);
  for (int64_t k = 1; k < n; k *= 2)
    y = combine(y, shiftAlong(nc, y, axis, k, identity));
  if (exclusive)
    y = shiftAlong(nc, y, axis, 1, identity);
  if (reverse)
    y = reverseAlong(nc, y, axis);
  return setResult(nc, y);
}

/// ReverseSequence: along `time_axis`, the first sequence_lens[b] elements
/// of each batch entry b reversed, the rest kept. A GatherElements at
/// index len − 1 − t where t < len, t elsewhere (lengths are a run-time
/// input; above the axis's extent they count as the whole axis).
LogicalResult importReverseSequence(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(lens, nc.requiredInput(1));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  if (rank < 2)
    return nc.error("input must have rank >= 2, got rank " +
                    std::to_string(rank));
  TRY(timeAttr, nc.intAttr("time_axis", 0));
  TRY(batchAttr, nc.intAttr("batch_axis", 1));
  TRY(timeAxis, nc.normalizeAxis(timeAttr, rank, "time_axis"));
  TRY(batchAxis, nc.normalizeAxis(batchAttr, rank, "batch_axis"));
  if (timeAxis == batchAxis)
    return nc.error("time_axis and batch_axis must differ, both are " +
                    std::to_string(timeAxis));
  RankedTensorType lt = nc.inputType(1);
  int64_t batch = in.getDimSize(batchAxis), steps = in.getDimSize(timeAxis);
  if (lt.getRank() != 1 || lt.getDimSize(0) != batch)
    return nc.error("sequence_lens must have shape [" + std::to_string(batch) +
                    "] (the batch axis's extent), got " +
                    shapeStr(lt.getShape()));
  OpBuilder &b = nc.builder();
  if (!isa<IntegerType>(lt.getElementType()) || lt.getElementType().isInteger(1))
    return nc.error("sequence_lens must be integers, got " +
                    typeStr(lt.getElementType()));
  lens = castTo(nc, lens, b.getI64Type());
  SmallVector<int64_t> lensShape(rank, 1);
  lensShape[batchAxis] = batch;
  Value t = iotaAlong(nc, steps, rank, timeAxis);
  Value len = nc.create<dopt::MinOp>(reshape(nc, lens, lensShape),
                                     nc.constantI64({steps}, {}));
  Value reversed = nc.create<dopt::SubOp>(
      nc.create<dopt::SubOp>(len, nc.constantI64({1}, {})), t);
  Value index = nc.create<dopt::WhereOp>(nc.create<dopt::LessOp>(t, len),
                                         reversed, t);
  index = nc.create<dopt::ExpandOp>(index, b.getDenseI64ArrayAttr(in.getShape()));
  return setResult(nc, nc.create<dopt::GatherElementsOp>(
                           x, index, b.getI64IntegerAttr(timeAxis)));
}

/// CenterCropPad: each axis of `axes` cropped or padded (with zeros) to the
/// size `shape` names, centred (an odd difference puts the extra element at
/// the end).
LogicalResult importCenterCropPad(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(sizes, nc.constantInts(1, "shape"));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  TRY(axesAttr, nc.intsAttr("axes"));
  SmallVector<int64_t> axes;
  if (axesAttr)
    axes = *axesAttr;
  else
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (sizes.size() != axes.size())
    return nc.error("shape has " + std::to_string(sizes.size()) +
                    " entries, one per axis needs " +
                    std::to_string(axes.size()));
  SmallVector<int64_t> starts(rank, 0), ends(in.getShape()), steps(rank, 1);
  SmallVector<int64_t> pads(2 * rank, 0);
  llvm::SmallDenseSet<int64_t> seen;
  for (auto [a, size] : llvm::zip(axes, sizes)) {
    TRY(axis, nc.normalizeAxis(a, rank));
    if (!seen.insert(axis).second)
      return nc.error("axes contain a duplicate");
    if (size <= 0)
      return nc.error("shape must be positive (distopt has no empty tensors "
                      "here), got " + shapeStr(sizes));
    int64_t dim = in.getDimSize(axis);
    if (size < dim) {
      starts[axis] = (dim - size) / 2;
      ends[axis] = starts[axis] + size;
    } else {
      pads[axis] = (size - dim) / 2;
      pads[rank + axis] = size - dim - pads[axis];
    }
  }
  OpBuilder &b = nc.builder();
  Value y = nc.create<dopt::SliceOp>(x, b.getDenseI64ArrayAttr(starts),
                                     b.getDenseI64ArrayAttr(ends),
                                     b.getDenseI64ArrayAttr(steps));
  if (llvm::any_of(pads, [](int64_t p) { return p != 0; }))
    y = nc.create<dopt::PadOp>(y, b.getDenseI64ArrayAttr(pads),
                               b.getStringAttr("constant"),
                               b.getF64FloatAttr(0.0));
  return setResult(nc, y);
}

/// InstanceNormalization: each (sample, channel) normalised over its
/// spatial axes, then scaled and shifted per channel -- the op's
/// definition with dopt ops; 16-bit inputs compute in f32 and round once.
LogicalResult importInstanceNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(bias, nc.requiredInput(2));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  if (rank < 3)
    return nc.error("input of rank " + std::to_string(rank) +
                    ": expected N x C x D1 x ... (rank 3 or more)");
  int64_t channels = in.getDimSize(1);
  for (int i : {1, 2})
    if (nc.inputType(i).getRank() != 1 ||
        nc.inputType(i).getDimSize(0) != channels)
      return nc.error(std::string(i == 1 ? "scale" : "bias") + " of shape " +
                      shapeStr(nc.inputType(i).getShape()) +
                      " for an input of " + std::to_string(channels) +
                      " channels");
  OpBuilder &b = nc.builder();
  Type t = in.getElementType();
  Type stash = t.getIntOrFloatBitWidth() < 32 ? b.getF32Type() : t;
  auto toStash = [&](Value v) {
    return stash == t ? v : nc.create<dopt::CastOp>(v, TypeAttr::get(stash));
  };
  SmallVector<int64_t> spatial, perChannel = {channels};
  for (int64_t i = 2; i < rank; ++i) {
    spatial.push_back(i);
    perChannel.push_back(1);
  }
  Value normalized = standardize(nc, toStash(x), spatial, eps);
  Value y = nc.create<dopt::AddOp>(
      nc.create<dopt::MulOp>(normalized,
                             reshape(nc, toStash(scale), perChannel)),
      reshape(nc, toStash(bias), perChannel));
  if (stash != t)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(t));
  return setResult(nc, y);
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

/// DepthToSpace (PixelShuffle) and SpaceToDepth: a reshape, a transpose and
/// a reshape, as the ops' definitions write them.
template <bool ToSpace>
LogicalResult importDepthSpace(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(b, nc.intAttr("blocksize", 0));
  TRY(mode, nc.stringAttr("mode", "DCR"));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() != 4)
    return nc.error("input of rank " + std::to_string(in.getRank()) +
                    ": expected N x C x H x W");
  if (b < 1)
    return nc.error("blocksize " + std::to_string(b) + " must be positive");
  int64_t n = in.getDimSize(0), c = in.getDimSize(1), h = in.getDimSize(2),
          w = in.getDimSize(3);
  SmallVector<int64_t> split, perm, out;
  if (mode != "DCR" && mode != "CRD")
    return nc.error("mode '" + mode + "' is not DCR or CRD");
  if (ToSpace) {
    if (c % (b * b))
      return nc.error(std::to_string(c) + " channels are not a multiple of "
                      "blocksize² = " + std::to_string(b * b));
    int64_t k = c / (b * b);
    bool dcr = mode == "DCR";
    split = dcr ? SmallVector<int64_t>{n, b, b, k, h, w}
                : SmallVector<int64_t>{n, k, b, b, h, w};
    perm = dcr ? SmallVector<int64_t>{0, 3, 4, 1, 5, 2}
               : SmallVector<int64_t>{0, 1, 4, 2, 5, 3};
    out = {n, k, h * b, w * b};
  } else {
    if (h % b || w % b)
      return nc.error("spatial size " + shapeStr({h, w}) +
                      " is not a multiple of blocksize " + std::to_string(b));
    split = {n, c, h / b, b, w / b, b};
    // DCR: output channel (i·b + j)·C + c; CRD: c·b² + i·b + j.
    perm = mode == "CRD" ? SmallVector<int64_t>{0, 1, 3, 5, 2, 4}
                         : SmallVector<int64_t>{0, 3, 5, 1, 2, 4};
    out = {n, c * b * b, h / b, w / b};
  }
  Value t = nc.create<dopt::TransposeOp>(
      reshape(nc, x, split), nc.builder().getDenseI64ArrayAttr(perm));
  return setResult(nc, reshape(nc, t, out));
}

/// OneHot: the indices (negative ones counted from depth) compared with
/// 0..depth-1 along the new axis; `values` = [off, on].
LogicalResult importOneHot(NodeContext &nc) {
  TRY(indices, nc.requiredInput(0));
  TRY(depthValue, nc.constantScalar(1, "depth"));
  TRY(values, nc.requiredInput(2));
  TRY(axisAttr, nc.intAttr("axis", -1));
  RankedTensorType it = nc.inputType(0), vt = nc.inputType(2);
  int64_t rank = it.getRank() + 1;
  TRY(axis, nc.normalizeAxis(axisAttr, rank));
  int64_t depth = (int64_t)depthValue;
  if (depth < 1)
    return nc.error("depth " + std::to_string(depth) + " must be positive");
  if (vt.getNumElements() != 2)
    return nc.error("values of shape " + shapeStr(vt.getShape()) +
                    ": expected [off, on]");
  OpBuilder &b = nc.builder();
  Type i64 = b.getI64Type();
  Value idx = it.getElementType() == i64
                  ? indices
                  : nc.create<dopt::CastOp>(indices, TypeAttr::get(i64));
  Value d = constantScalar(nc, i64, depth);
  idx = nc.create<dopt::WhereOp>(
      nc.create<dopt::LessOp>(idx, constantScalar(nc, i64, 0)),
      nc.create<dopt::AddOp>(idx, d), idx);
  SmallVector<int64_t> withAxis(it.getShape());
  withAxis.insert(withAxis.begin() + axis, 1);
  SmallVector<int64_t> outShape(withAxis);
  outShape[axis] = depth;
  if (!fitsInMemory(outShape, 8))
    return nc.error("depth " + std::to_string(depth) + " makes the output too large");
  Value hot = nc.create<dopt::EqualOp>(reshape(nc, idx, withAxis),
                                       iotaAlong(nc, depth, rank, axis));
  Value flat = reshape(nc, values, {2});
  Value off = reshape(nc, strided(nc, flat, {0}, {0}, {1}, {1}), {});
  Value on = reshape(nc, strided(nc, flat, {0}, {1}, {1}, {1}), {});
  return setResult(nc, nc.create<dopt::WhereOp>(hot, on, off));
}

/// GroupNormalization: each sample's channels in num_groups groups,
/// normalised over the group's channels and spatial axes (in the stash
/// type), then scaled and shifted per channel (opset 21: scale and bias of
/// C) or per group (opset 18: of num_groups).
LogicalResult importGroupNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(bias, nc.requiredInput(2));
  TRY(groups, nc.intAttr("num_groups", 0));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(stashType, nc.intAttr("stash_type", onnx::TensorProto::FLOAT));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() < 2)
    return nc.error("input of rank " + std::to_string(in.getRank()) +
                    ": expected N x C x ...");
  int64_t n = in.getDimSize(0), c = in.getDimSize(1);
  if (groups < 1 || c % groups)
    return nc.error(std::to_string(c) + " channels do not split into " +
                    std::to_string(groups) + " groups");
  int64_t per = nc.inputType(1).getNumElements();
  if (per != c && per != groups)
    return nc.error("scale of shape " + shapeStr(nc.inputType(1).getShape()) +
                    ": expected " + std::to_string(c) + " (per channel) or " +
                    std::to_string(groups) + " (per group)");
  Type t = in.getElementType();
  Type stash = convertDataType(nc.context(), stashType);
  if (!stash || !isa<FloatType>(stash))
    return nc.error("stash_type " + dataTypeName(stashType) +
                    " is not a floating-point type distopt supports");
  if (in.getNumElements() == 0)
    return setResult(nc, x);
  OpBuilder &b = nc.builder();
  Value grouped =
      reshape(nc, castTo(nc, x, stash), {n, groups, in.getNumElements() / (n * groups)});
  Value normalized = castTo(nc, standardize(nc, grouped, {2}, eps), t);
  // Per channel: [C, 1, ...] against x's shape; per group: [G, 1, ...]
  // against [N, G, C/G, ...].
  SmallVector<int64_t> view(in.getShape()), param = {per};
  if (per == groups) {
    view = {n, groups, c / groups};
    llvm::append_range(view, in.getShape().drop_front(2));
  }
  for (size_t i = 2; i < view.size(); ++i)
    param.push_back(1);
  Value y = nc.create<dopt::AddOp>(
      nc.create<dopt::MulOp>(reshape(nc, normalized, view),
                             reshape(nc, castTo(nc, scale, t), param)),
      reshape(nc, castTo(nc, bias, t), param));
  return setResult(nc, reshape(nc, y, in.getShape()));
}

/// LpNormalization: x divided by its L1 or L2 norm along `axis`; a zero
/// norm (a zero vector) gives zeros (ONNX's reference). The norm is
/// replaced by 1 there before the division, so the gradient stays finite.
LogicalResult importLpNormalization(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axisAttr, nc.intAttr("axis", -1));
  TRY(axis, nc.normalizeAxis(axisAttr, in.getRank()));
  TRY(p, nc.intAttr("p", 2));
  if (p != 1 && p != 2)
    return nc.error("p must be 1 or 2, got " + std::to_string(p));
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  OpBuilder &b = nc.builder();
  Value sum = nc.create<dopt::ReduceSumOp>(absPower(nc, x, p),
                                           b.getDenseI64ArrayAttr({axis}),
                                           b.getBoolAttr(true));
  Value zero = constantScalar(nc, elt, 0.0);
  Value safe = nc.create<dopt::WhereOp>(nc.create<dopt::EqualOp>(sum, zero),
                                        constantScalar(nc, elt, 1.0), sum);
  return setResult(nc, nc.create<dopt::DivOp>(x, rootOf(nc, safe, p)));
}

/// LRN: x / (bias + alpha/size · Σ x²)^beta, the sum over the `size`
/// channels around each (⌊(size−1)/2⌋ before, ⌈(size−1)/2⌉ after, those
/// past the edges left out): shifted slices of the squares, zero-padded
/// along the channel axis.
LogicalResult importLRN(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() < 3)
    return nc.error("input must have rank >= 3 (N, C, spatial...), got rank " +
                    std::to_string(in.getRank()));
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(size, nc.intAttr("size", 0));
  if (size < 1)
    return nc.error("size must be a positive integer, got " +
                    std::to_string(size));
  TRY(alpha, nc.floatAttr("alpha", 1e-4f));
  TRY(beta, nc.floatAttr("beta", 0.75f));
  TRY(bias, nc.floatAttr("bias", 1.0f));
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  int64_t channels = in.getDimSize(1), rank = in.getRank();
  SmallVector<int64_t> pads(2 * rank, 0);
  pads[1] = before;
  pads[rank + 1] = after;
  OpBuilder &b = nc.builder();
  Value padded = nc.create<dopt::PadOp>(nc.create<dopt::MulOp>(x, x),
                                        b.getDenseI64ArrayAttr(pads),
                                        b.getStringAttr("constant"),
                                        b.getF64FloatAttr(0.0));
  Value sum;
  for (int64_t k = 0; k < size; ++k) {
    Value s = strided(nc, padded, {1}, {k}, {1}, {channels});
    sum = sum ? nc.create<dopt::AddOp>(sum, s) : s;
  }
  Value base = nc.create<dopt::AddOp>(
      constantScalar(nc, elt, bias),
      nc.create<dopt::MulOp>(constantScalar(nc, elt, (double)alpha / size),
                             sum));
  return setResult(nc, nc.create<dopt::DivOp>(
                           x, nc.create<dopt::PowOp>(
                                  base, constantScalar(nc, elt, beta))));
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

//===----------------------------------------------------------------------===//
// GridSample
//===----------------------------------------------------------------------===//

/// GridSample (2-D since opset 16, N-D since 20): each output position
/// samples the input at the grid's normalised coordinates (x for the last
/// spatial axis, then y, z), by nearest, linear or cubic (Keys, a = −0.75)
/// interpolation; taps outside read zeros, the border, or the reflection.
/// As ONNX's reference: coordinates outside the border range are clamped
/// (border; not for cubic, as PyTorch and ONNX Runtime) or reflected
/// (reflection) before the taps are taken, and each tap is resolved again. Written as one GatherElements per combination of
/// taps over the flattened spatial axes (1, 2^r or 4^r of them), weighted
/// and summed: the gradient reaches the input (a scatter-add) and the grid
/// (through the weights), as PyTorch's grid_sample's does.
LogicalResult importGridSample(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(grid, nc.requiredInput(1));
  RankedTensorType in = nc.inputType(0), gt = nc.inputType(1);
  int64_t rank = in.getRank(), r = rank - 2;
  if (rank < 3)
    return nc.error("X must have rank >= 3 (N, C, spatial...), got rank " +
                    std::to_string(rank));
  if (nc.opset() < 20 && r != 2)
    return nc.error("GridSample before opset 20 takes 4-D inputs, got rank " +
                    std::to_string(rank));
  if (gt.getRank() != rank || gt.getDimSize(0) != in.getDimSize(0) ||
      gt.getDimSize(rank - 1) != r)
    return nc.error("grid must be [" + std::to_string(in.getDimSize(0)) +
                    ", spatial..., " + std::to_string(r) + "] for X " +
                    shapeStr(in.getShape()) + ", got " +
                    shapeStr(gt.getShape()));
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt) || !isa<FloatType>(gt.getElementType()))
    return nc.error("X and grid must be floating-point");
  bool old = nc.opset() < 20;
  TRY(modeAttr, nc.stringAttr("mode", old ? "bilinear" : "linear"));
  TRY(padding, nc.stringAttr("padding_mode", "zeros"));
  TRY(alignAttr, nc.intAttr("align_corners", 0));
  bool align = alignAttr != 0;
  std::string mode = modeAttr;
  if (old && mode == "bilinear")
    mode = "linear";
  else if (old && mode == "bicubic")
    mode = "cubic";
  else if (old ? mode != "nearest"
               : mode != "linear" && mode != "nearest" && mode != "cubic")
    return nc.error("mode '" + modeAttr + "' is not one of " +
                    (old ? "bilinear, nearest, bicubic" : "linear, nearest, cubic"));
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return nc.error("padding_mode '" + padding +
                    "' is not one of zeros, border, reflection");
  OpBuilder &b = nc.builder();
  Type ct = elt.isF64() || gt.getElementType().isF64() ? Type(b.getF64Type())
                                                       : Type(b.getF32Type());
  auto c = [&](double v) { return constantScalar(nc, ct, v); };
  auto add = [&](Value a, Value v) { return nc.create<dopt::AddOp>(a, v); };
  auto sub = [&](Value a, Value v) { return nc.create<dopt::SubOp>(a, v); };
  auto mul = [&](Value a, Value v) { return nc.create<dopt::MulOp>(a, v); };
  auto floorOf = [&](Value v) { return nc.create<dopt::FloorOp>(v); };
  auto where = [&](Value m, Value a, Value v) {
    return nc.create<dopt::WhereOp>(m, a, v);
  };
  auto less = [&](Value a, double v) { return nc.create<dopt::LessOp>(a, c(v)); };
  auto greater = [&](Value a, double v) {
    return nc.create<dopt::GreaterOp>(a, c(v));
  };
  auto clampTo = [&](Value v, double lo, double hi) {
    return nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(v, c(lo)), c(hi));
  };
  auto isEven = [&](Value n) {
    return nc.create<dopt::EqualOp>(
        sub(n, mul(c(2), floorOf(mul(n, c(0.5))))), c(0));
  };
  // Reflected into [lo, hi] by its near border, repeatedly (the identity
  // inside).
  auto reflect = [&](Value v, double lo, double hi) -> Value {
    double span = hi - lo;
    if (span <= 0)
      return where(nc.create<dopt::OrOp>(less(v, lo), greater(v, hi)), c(lo), v);
    Value dLo = sub(c(lo), v), dHi = sub(v, c(hi));
    Value nLo = floorOf(mul(dLo, c(1 / span))), nHi = floorOf(mul(dHi, c(1 / span)));
    Value rLo = sub(dLo, mul(nLo, c(span))), rHi = sub(dHi, mul(nHi, c(span)));
    Value below = where(isEven(nLo), add(c(lo), rLo), sub(c(hi), rLo));
    Value above = where(isEven(nHi), sub(c(hi), rHi), add(c(lo), rHi));
    return where(less(v, lo), below, where(greater(v, hi), above, v));
  };

  int64_t n = in.getDimSize(0), channels = in.getDimSize(1), points = 1;
  SmallVector<int64_t> outShape{n, channels}, dims(in.getShape().drop_front(2));
  for (int64_t i = 1; i < rank - 1; ++i) {
    points *= gt.getDimSize(i);
    outShape.push_back(gt.getDimSize(i));
  }
  Value g = reshape(nc, nc.create<dopt::CastOp>(grid, TypeAttr::get(ct)),
                    {n, points, r});
  // Per spatial axis: the taps (position, weight; a null weight is 1).
  struct Tap {
    Value at, weight;
  };
  SmallVector<SmallVector<Tap>> taps(r);
  SmallVector<double> lows(r), highs(r);
  for (int64_t i = 0; i < r; ++i) {
    double d = (double)dims[i];
    Value u = reshape(nc, strided(nc, g, {2}, {r - 1 - i}, {1}, {1}), {n, points});
    Value pos = align ? mul(add(u, c(1)), c((d - 1) / 2))
                      : mul(sub(mul(add(u, c(1)), c(d)), c(1)), c(0.5));
    if (mode == "nearest")
      pos = nc.create<dopt::RoundOp>(pos);
    lows[i] = align ? 0.0 : -0.5;
    highs[i] = align ? d - 1 : d - 0.5;
    // Cubic taps around a position beyond the border are each clamped, not
    // the position (PyTorch and ONNX Runtime; ONNX's reference clamps the
    // position, which moves the taps' weights).
    if (padding == "border" && mode != "cubic")
      pos = where(nc.create<dopt::OrOp>(less(pos, lows[i]), greater(pos, highs[i])),
                  clampTo(pos, 0, d - 1), pos);
    else if (padding == "reflection")
      pos = reflect(pos, lows[i], highs[i]);
    if (mode == "nearest") {
      taps[i].push_back({pos, Value()});
      continue;
    }
    Value p0 = floorOf(pos), f = sub(pos, p0);
    if (mode == "linear") {
      taps[i].push_back({p0, sub(c(1), f)});
      taps[i].push_back({add(p0, c(1)), f});
      continue;
    }
    const double A = -0.75;
    // Keys' kernel at distance t: ((A+2)t − (A+3))t² + 1 within 1,
    // ((At − 5A)t + 8A)t − 4A within 2.
    auto near = [&](Value t) {
      return add(mul(sub(mul(c(A + 2), t), c(A + 3)), mul(t, t)), c(1));
    };
    auto far = [&](Value t) {
      return sub(mul(add(mul(sub(mul(c(A), t), c(5 * A)), t), c(8 * A)), t),
                 c(4 * A));
    };
    taps[i].push_back({sub(p0, c(1)), far(add(f, c(1)))});
    taps[i].push_back({p0, near(f)});
    taps[i].push_back({add(p0, c(1)), near(sub(c(1), f))});
    taps[i].push_back({add(p0, c(2)), far(sub(c(2), f))});
  }
  // Each tap's index along its axis, and whether it reads the input (zeros
  // padding; not at a NaN position, which gives 0 as in PyTorch).
  auto resolve = [&](Value t, int64_t i, Value &valid) -> Value {
    double d = (double)dims[i];
    Value known = nc.create<dopt::EqualOp>(t, t);
    t = where(known, t, c(-1));
    if (padding == "zeros") {
      valid = nc.create<dopt::AndOp>(
          nc.create<dopt::GreaterEqualOp>(t, c(0)),
          nc.create<dopt::LessEqualOp>(t, c(d - 1)));
    } else {
      // A NaN position reads nothing (PyTorch's 0), its NaN weights too.
      valid = known;
      if (padding == "reflection")
        t = floorOf(reflect(t, lows[i], highs[i]));
    }
    return nc.create<dopt::CastOp>(clampTo(t, 0, d - 1),
                                   TypeAttr::get(b.getI64Type()));
  };
  int64_t spatial = 1;
  SmallVector<int64_t> strides(r);
  for (int64_t i = r - 1; i >= 0; --i) {
    strides[i] = spatial;
    spatial *= dims[i];
  }
  Value flatX = reshape(nc, x, {n, channels, spatial});
  Value acc;
  SmallVector<size_t> which(r, 0);
  while (true) {
    Value index, weight, valid;
    for (int64_t i = 0; i < r; ++i) {
      const Tap &tap = taps[i][which[i]];
      Value ok;
      Value idx = resolve(tap.at, i, ok);
      if (strides[i] != 1)
        idx = nc.create<dopt::MulOp>(idx, nc.constantI64({strides[i]}, {}));
      index = index ? nc.create<dopt::AddOp>(index, idx) : idx;
      if (tap.weight)
        weight = weight ? mul(weight, tap.weight) : tap.weight;
      if (ok)
        valid = valid ? nc.create<dopt::AndOp>(valid, ok) : ok;
    }
    Value gathered = nc.create<dopt::GatherElementsOp>(
        flatX,
        nc.create<dopt::ExpandOp>(reshape(nc, index, {n, 1, points}),
                                  b.getDenseI64ArrayAttr({n, channels, points})),
        b.getI64IntegerAttr(2));
    if (elt != ct)
      gathered = nc.create<dopt::CastOp>(gathered, TypeAttr::get(ct));
    if (weight)
      gathered = mul(gathered, reshape(nc, weight, {n, 1, points}));
    if (valid)
      gathered = where(reshape(nc, valid, {n, 1, points}), gathered, c(0));
    acc = acc ? add(acc, gathered) : gathered;
    if (nc.hasFailed())
      return failure();
    int64_t i = r;
    while (i > 0 && ++which[i - 1] == taps[i - 1].size())
      which[--i] = 0;
    if (i == 0)
      break;
  }
  Value y = reshape(nc, acc, outShape);
  if (elt != ct)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(elt));
  return setResult(nc, y);
}

/// AffineGrid (opset 20): the sampling grid of affine maps theta (N×2×3, or
/// N×3×4 in 3-D) over an output of `size` (constant: N, C, H, W or N, C,
/// D, H, W): each position's normalised coordinates (x along W first, then
/// y, z; pixel centres, or corners with align_corners), homogeneous, times
/// thetaᵀ -- a constant matrix's product with theta, so the gradient
/// reaches theta (a spatial transformer's localisation net).
LogicalResult importAffineGrid(NodeContext &nc) {
  TRY(theta, nc.requiredInput(0));
  TRY(size, nc.constantInts(1, "size"));
  TRY(align, nc.intAttr("align_corners", 0));
  RankedTensorType tt = nc.inputType(0);
  Type elt = tt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("theta must be floating-point");
  if (size.size() != 4 && size.size() != 5)
    return nc.error("size must hold 4 (N, C, H, W) or 5 (N, C, D, H, W) "
                    "values, got " + shapeStr(size));
  int64_t r = (int64_t)size.size() - 2;
  if (tt.getRank() != 3 || tt.getDimSize(0) != size[0] ||
      tt.getDimSize(1) != r || tt.getDimSize(2) != r + 1)
    return nc.error("theta must be [" + std::to_string(size[0]) + "," +
                    std::to_string(r) + "," + std::to_string(r + 1) +
                    "] for size " + shapeStr(size) + ", got " +
                    shapeStr(tt.getShape()));
  SmallVector<int64_t> dims(size.begin() + 2, size.end());
  int64_t points = 1;
  for (int64_t d : dims) {
    if (d <= 0)
      return nc.error("size must be positive, got " + shapeStr(size));
    points *= d;
  }
  auto coordinate = [&](int64_t i, int64_t n) {
    if (align)
      return n == 1 ? -1.0 : -1.0 + 2.0 * (double)i / (double)(n - 1);
    return -1.0 + (2.0 * (double)i + 1.0) / (double)n;
  };
  // The homogeneous coordinates, one row per channel (x, y[, z], 1), one
  // column per position in row-major order: (r + 1) × points.
  SmallVector<double> base((r + 1) * points);
  for (int64_t p = 0; p < points; ++p) {
    int64_t rest = p;
    for (int64_t a = r - 1; a >= 0; --a) {
      int64_t i = rest % dims[a];
      rest /= dims[a];
      // Spatial axis a (0 = D or H) is coordinate r − 1 − a (x is W's).
      base[(r - 1 - a) * points + p] = coordinate(i, dims[a]);
    }
    base[r * points + p] = 1.0;
  }
  Value grid = nc.create<dopt::MatMulOp>(
      theta, floatConstant(nc, elt, {r + 1, points}, base));   // N × r × P
  OpBuilder &b = nc.builder();
  grid = nc.create<dopt::TransposeOp>(grid, b.getDenseI64ArrayAttr({0, 2, 1}));
  SmallVector<int64_t> shape{size[0]};
  shape.append(dims.begin(), dims.end());
  shape.push_back(r);
  return setResult(nc, reshape(nc, grid, shape));
}

/// Col2Im (opset 18): the columns of sliding blocks summed back into an
/// image (im2col's adjoint; torch's F.fold). Per tap of the block: its row
/// of each channel's columns viewed as the grid of block positions, spread
/// out by the strides (zeros between), shifted by the tap's dilated offset
/// into the padded image; the taps summed and the pads cropped. Slices,
/// pads and reshapes, so the gradient (im2col) and every target follow.
LogicalResult importCol2Im(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(image, nc.constantInts(1, "image_shape"));
  TRY(block, nc.constantInts(2, "block_shape"));
  RankedTensorType in = nc.inputType(0);
  size_t r = image.size();
  if (in.getRank() != 3)
    return nc.error("input must be [N, C·prod(block_shape), L], got " +
                    shapeStr(in.getShape()));
  if (r == 0 || block.size() != r)
    return nc.error("image_shape and block_shape must have one entry per "
                    "spatial axis, got " + shapeStr(image) + " and " +
                    shapeStr(block));
  TRY(strides, windowAttr(nc, "strides", r));
  TRY(dilations, windowAttr(nc, "dilations", r));
  TRY(padsAttr, nc.intsAttr("pads"));
  SmallVector<int64_t> pads(2 * r, 0);
  if (padsAttr) {
    if (padsAttr->size() != 2 * r)
      return nc.error("pads must have " + std::to_string(2 * r) +
                      " entries, got " + shapeStr(*padsAttr));
    pads = *padsAttr;
  }
  int64_t taps = 1, positions = 1;
  SmallVector<int64_t> grid, padded;
  for (size_t i = 0; i < r; ++i) {
    if (image[i] <= 0 || block[i] <= 0 || pads[i] < 0 || pads[r + i] < 0)
      return nc.error("image_shape and block_shape must be positive and pads "
                      "non-negative");
    padded.push_back(image[i] + pads[i] + pads[r + i]);
    int64_t span = dilations[i] * (block[i] - 1) + 1;
    if (span > padded[i])
      return nc.error("block " + shapeStr(block) + " does not fit the padded "
                      "image along axis " + std::to_string(i));
    grid.push_back((padded[i] - span) / strides[i] + 1);
    taps *= block[i];
    positions *= grid[i];
  }
  int64_t n = in.getDimSize(0);
  if (in.getDimSize(1) % taps != 0 || in.getDimSize(2) != positions)
    return nc.error("input " + shapeStr(in.getShape()) + " must be [N, C·" +
                    std::to_string(taps) + ", " + std::to_string(positions) +
                    "] for blocks " + shapeStr(block) + " over image " +
                    shapeStr(image));
  int64_t channels = in.getDimSize(1) / taps;
  OpBuilder &b = nc.builder();
  Value cols = reshape(nc, x, {n, channels, taps, positions});
  SmallVector<int64_t> gridShape{n, channels};
  gridShape.append(grid.begin(), grid.end());
  Value acc;
  SmallVector<int64_t> tap(r, 0);
  for (int64_t k = 0; k < taps; ++k) {
    Value v = reshape(nc, strided(nc, cols, {2}, {k}, {1}, {1}), gridShape);
    for (size_t i = 0; i < r && v; ++i) {
      int64_t axis = 2 + i;
      auto shape = [&]() {
        return SmallVector<int64_t>(
            cast<RankedTensorType>(v.getType()).getShape());
      };
      if (strides[i] > 1) {
        // Each element followed by stride − 1 zeros, the last ones dropped.
        SmallVector<int64_t> s = shape();
        s.insert(s.begin() + axis + 1, 1);
        v = reshape(nc, v, s);
        SmallVector<int64_t> p(2 * s.size(), 0);
        p[s.size() + axis + 1] = strides[i] - 1;
        v = nc.create<dopt::PadOp>(v, b.getDenseI64ArrayAttr(p),
                                   b.getStringAttr("constant"),
                                   b.getF64FloatAttr(0.0));
        SmallVector<int64_t> merged = shape();
        merged[axis] *= merged[axis + 1];
        merged.erase(merged.begin() + axis + 1);
        v = strided(nc, reshape(nc, v, merged), {axis}, {0}, {1},
                    {(grid[i] - 1) * strides[i] + 1});
      }
      int64_t before = tap[i] * dilations[i];
      int64_t after = padded[i] - before - shape()[axis];
      SmallVector<int64_t> p(2 * (r + 2), 0);
      p[axis] = before;
      p[r + 2 + axis] = after;
      v = nc.create<dopt::PadOp>(v, b.getDenseI64ArrayAttr(p),
                                 b.getStringAttr("constant"),
                                 b.getF64FloatAttr(0.0));
    }
    acc = acc ? nc.create<dopt::AddOp>(acc, v) : v;
    for (size_t i = r; i-- > 0;) {
      if (++tap[i] < block[i])
        break;
      tap[i] = 0;
    }
  }
  SmallVector<int64_t> axes, starts;
  for (size_t i = 0; i < r; ++i) {
    axes.push_back(2 + i);
    starts.push_back(pads[i]);
  }
  SmallVector<int64_t> ones(r, 1);
  return setResult(nc, strided(nc, acc, axes, starts, ones, image));
}

/// The discrete Fourier transform of `x` (real [..., 1] or complex [..., 2]
/// in its last axis) along `axis`, of length `n` (the input cut or
/// zero-padded to it), as products with constant cos and sin matrices in
/// f64 (O(n²) per signal: BLAS's, not an FFT's O(n log n)). `inverse` divides
/// by n; `onesided` keeps the first n/2 + 1 frequencies forward, and
/// inverse reads them as a Hermitian spectrum and gives a real signal
/// (NumPy's irfft). The result's last axis is [re, im] (or [re]).
Value fourier(NodeContext &nc, Value x, int64_t axis, int64_t n, bool inverse,
              bool onesided) {
  auto t = cast<RankedTensorType>(x.getType());
  int64_t rank = t.getRank(), last = rank - 1, length = t.getDimSize(axis);
  Type elt = t.getElementType();
  bool complex = t.getDimSize(last) == 2;
  bool real = inverse && onesided;
  int64_t out = real || !onesided ? n : n / 2 + 1;
  // Rows: the input samples (or one-sided frequencies) that count.
  int64_t rows = std::min(length, real ? n / 2 + 1 : n);
  OpBuilder &b = nc.builder();
  // The signal axis moved last, the [re, im] axis dropped.
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < last; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.push_back(axis);
  SmallVector<int64_t> partShape(t.getShape().drop_back());
  partShape[axis] = rows;
  auto part = [&](int64_t k) -> Value {
    Value v = reshape(
        nc, strided(nc, x, {last, axis}, {k, 0}, {1, 1}, {1, rows}), partShape);
    return nc.create<dopt::TransposeOp>(v, b.getDenseI64ArrayAttr(perm));
  };
  // In f64: each output sums `rows` products, and an f32 sum's rounding
  // (√rows ulps) would show where the exact result is near 0.
  Type f64 = b.getF64Type();
  Value re = castTo(nc, part(0), f64);
  Value im = complex ? castTo(nc, part(1), f64) : Value();
  SmallVector<double> c(rows * out), sn(rows * out);
  const double twoPi = 2 * M_PI;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < out; ++k) {
      // (r·k mod n) keeps the angle small, so cos and sin stay exact-ish.
      double angle = twoPi * (double)((r * k) % n) / (double)n;
      double scale = inverse ? 1.0 / (double)n : 1.0;
      if (real && r != 0 && !(n % 2 == 0 && r == n / 2))
        scale *= 2; // the conjugate frequency's share
      c[r * out + k] = scale * std::cos(angle);
      sn[r * out + k] = scale * std::sin(angle);
    }
  Value cm = floatConstant(nc, f64, {rows, out}, c);
  Value sm = floatConstant(nc, f64, {rows, out}, sn);
  auto mm = [&](Value a, Value m) { return nc.create<dopt::MatMulOp>(a, m); };
  Value yr, yi;
  if (!inverse) {
    // (re + i·im)(cos − i·sin).
    yr = mm(re, cm);
    yi = nc.create<dopt::NegOp>(mm(re, sm));
    if (im) {
      yr = nc.create<dopt::AddOp>(yr, mm(im, sm));
      yi = nc.create<dopt::AddOp>(yi, mm(im, cm));
    }
  } else {
    // (re + i·im)(cos + i·sin) / n.
    yr = mm(re, cm);
    yi = mm(re, sm);
    if (im) {
      yr = nc.create<dopt::SubOp>(yr, mm(im, sm));
      yi = nc.create<dopt::AddOp>(yi, mm(im, cm));
    }
  }
  // Back: the signal axis to its place, [re, im] last.
  SmallVector<int64_t> inversePerm(last);
  for (int64_t d = 0; d < last; ++d)
    inversePerm[perm[d]] = d;
  SmallVector<int64_t> shape(t.getShape());
  shape[axis] = out;
  shape[last] = 1;
  auto back = [&](Value v) {
    return reshape(nc,
                   nc.create<dopt::TransposeOp>(
                       castTo(nc, v, elt), b.getDenseI64ArrayAttr(inversePerm)),
                   shape);
  };
  if (real)
    return back(yr);
  return nc.create<dopt::ConcatOp>(ValueRange{back(yr), back(yi)},
                                   b.getI64IntegerAttr(last));
}

/// DFT (opsets 17 to 20; the axis an attribute, or an input since 20):
/// fourier along the axis, of dft_length (an input; by default the axis's
/// extent, or 2·(extent − 1) for an inverse one-sided transform).
LogicalResult importDFT(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  if (!isa<FloatType>(in.getElementType()))
    return nc.error("needs a floating-point input");
  if (rank < 2 || (in.getDimSize(rank - 1) != 1 && in.getDimSize(rank - 1) != 2))
    return nc.error("input must end in an axis of 1 (real) or 2 (complex), "
                    "got " + shapeStr(in.getShape()));
  TRY(inverse, nc.intAttr("inverse", 0));
  TRY(onesided, nc.intAttr("onesided", 0));
  int64_t axisValue;
  if (nc.opset() >= 20) {
    if (nc.hasAttr("axis"))
      return nc.error("'axis' is an input since opset 20, not an attribute");
    axisValue = -2;
    if (nc.input(2)) {
      TRY(a, nc.constantInts(2, "axis"));
      if (a.size() != 1)
        return nc.error("axis must hold one value, got " + shapeStr(a));
      axisValue = a[0];
    }
  } else {
    TRY(a, nc.intAttr("axis", 1));
    axisValue = a;
  }
  TRY(axis, nc.normalizeAxis(axisValue, rank));
  if (axis == rank - 1)
    return nc.error("axis must be a signal axis, not the last ([re, im]) one");
  int64_t extent = in.getDimSize(axis);
  int64_t n = inverse && onesided ? 2 * (extent - 1) : extent;
  if (nc.input(1)) {
    TRY(len, nc.constantInts(1, "dft_length"));
    if (len.size() != 1)
      return nc.error("dft_length must hold one value, got " + shapeStr(len));
    n = len[0];
  }
  if (n < 1)
    return nc.error("the transform's length must be positive, got " +
                    std::to_string(n));
  return setResult(nc, fourier(nc, x, axis, n, inverse != 0, onesided != 0));
}

/// STFT (opset 17): the signal [batch, length, 1 or 2] cut into frames of
/// frame_length every frame_step (one Gather of constant positions), each
/// times the window, transformed (fourier; one-sided by default for a real
/// signal): [batch, frames, bins, 2].
LogicalResult importSTFT(NodeContext &nc) {
  TRY(signal, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point signal");
  if (in.getRank() != 3 || (in.getDimSize(2) != 1 && in.getDimSize(2) != 2))
    return nc.error("signal must be [batch, length, 1 or 2], got " +
                    shapeStr(in.getShape()));
  TRY(steps, nc.constantInts(1, "frame_step"));
  TRY(onesided, nc.intAttr("onesided", 1));
  Value window = nc.input(2);
  int64_t frameLength = -1;
  if (window) {
    RankedTensorType wt = nc.inputType(2);
    if (wt.getRank() != 1 || wt.getElementType() != elt)
      return nc.error("window must be a vector of the signal's type");
    frameLength = wt.getDimSize(0);
  }
  if (nc.input(3)) {
    TRY(fl, nc.constantInts(3, "frame_length"));
    if (fl.size() != 1 || (frameLength >= 0 && fl[0] != frameLength))
      return nc.error("frame_length must be one value, the window's length "
                      "if there is one");
    frameLength = fl[0];
  }
  if (frameLength < 0)
    return nc.error("needs a window or a frame_length");
  if (steps.size() != 1 || steps[0] < 1)
    return nc.error("frame_step must be one positive value");
  int64_t length = in.getDimSize(1);
  if (frameLength < 1 || frameLength > length)
    return nc.error("frame_length " + std::to_string(frameLength) +
                    " must be between 1 and the signal's length " +
                    std::to_string(length));
  int64_t frames = (length - frameLength) / steps[0] + 1;
  SmallVector<int64_t> positions;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < frameLength; ++j)
      positions.push_back(f * steps[0] + j);
  OpBuilder &b = nc.builder();
  Value cut = nc.create<dopt::GatherOp>(
      signal, nc.constantI64(positions, {frames, frameLength}),
      b.getI64IntegerAttr(1));                          // [B, F, L, c]
  if (window)
    cut = nc.create<dopt::MulOp>(cut, reshape(nc, window, {1, 1, frameLength, 1}));
  if (!cut)
    return failure();
  return setResult(nc, fourier(nc, cut, 2, frameLength, false, onesided != 0));
}

/// A constant of element type `elt` and shape `shape` holding `values`:
/// rounded to a float type, truncated toward zero to an integer type (as
/// NumPy's astype, which the ops' definitions use).
Value numericConstant(NodeContext &nc, Type elt, ArrayRef<int64_t> shape,
                      ArrayRef<double> values) {
  if (isa<FloatType>(elt))
    return floatConstant(nc, elt, shape, values);
  auto it = cast<IntegerType>(elt);
  SmallVector<APInt> v;
  for (double d : values)
    v.push_back(APInt(it.getWidth(), (uint64_t)(int64_t)std::trunc(d),
                      /*isSigned=*/true, /*implicitTrunc=*/true));
  return dopt::ConstantOp::create(
      nc.builder(), nc.loc(),
      DenseElementsAttr::get(RankedTensorType::get(shape, elt), v));
}

/// The element type of `output_datatype` (default FLOAT): a number.
FailureOr<Type> outputDatatype(NodeContext &nc) {
  TRY(code, nc.intAttr("output_datatype", onnx::TensorProto::FLOAT));
  Type elt = convertDataType(nc.context(), static_cast<int32_t>(code));
  if (!elt || elt.isInteger(1))
    return nc.error("output_datatype " +
                    dataTypeName(static_cast<int32_t>(code)) +
                    " is not a supported numeric type");
  return elt;
}

enum class Window { Hann, Hamming, Blackman };

/// HannWindow, HammingWindow, BlackmanWindow (opset 17): the window of the
/// constant `size`, periodic (over size) or symmetric (over size − 1), as
/// a constant.
template <Window kind> LogicalResult importWindow(NodeContext &nc) {
  TRY(size, nc.constantInts(0, "size"));
  TRY(elt, outputDatatype(nc));
  TRY(periodic, nc.intAttr("periodic", 1));
  if (size.size() != 1 || size[0] < 1)
    return nc.error("size must be one positive value (distopt has no empty "
                    "tensors)");
  int64_t n = size[0];
  double span = static_cast<double>(periodic ? n : n - 1);
  // The definitions' formulas in their order of operations, in f64: an
  // integer output_datatype truncates, where the last ulp decides.
  SmallVector<double> w;
  for (int64_t i = 0; i < n; ++i) {
    double k = static_cast<double>(i);
    // A symmetric window of one sample is 1 (PyTorch's; the formula's 0/0).
    if (span == 0) {
      w.push_back(1.0);
      continue;
    }
    switch (kind) {
    case Window::Hann: {
      double s = std::sin(k * M_PI / span);
      w.push_back(s * s);
      break;
    }
    case Window::Hamming:
      w.push_back(25.0 / 46.0 -
                  std::cos(k * M_PI * 2 / span) * (1 - 25.0 / 46.0));
      break;
    case Window::Blackman:
      w.push_back(std::cos(k * (M_PI * 2) / span) * -0.5 +
                  std::cos(k * (M_PI * 4) / span) * 0.08 + 0.42);
      break;
    }
  }
  return setResult(nc, numericConstant(nc, elt, {n}, w));
}

/// MelWeightMatrix (opset 17): the [dft_length / 2 + 1, num_mel_bins]
/// triangular filters from linear frequency bins to mel bins, as a constant
/// (the operator's definition: num_mel_bins + 2 edges evenly spaced in mel
/// over [lower, upper] by (mel range) / (num_mel_bins + 2), each floored to
/// a bin of the (dft_length + 1)-point scale).
LogicalResult importMelWeightMatrix(NodeContext &nc) {
  TRY(melBins, nc.constantInts(0, "num_mel_bins"));
  TRY(dftLength, nc.constantInts(1, "dft_length"));
  TRY(sampleRate, nc.constantInts(2, "sample_rate"));
  TRY(lower, nc.constantScalar(3, "lower_edge_hertz"));
  TRY(upper, nc.constantScalar(4, "upper_edge_hertz"));
  TRY(elt, outputDatatype(nc));
  if (melBins.size() != 1 || dftLength.size() != 1 || sampleRate.size() != 1)
    return nc.error("num_mel_bins, dft_length and sample_rate must be scalars");
  int64_t m = melBins[0], n = dftLength[0], rate = sampleRate[0];
  if (m < 1 || n < 1 || rate < 1)
    return nc.error("num_mel_bins, dft_length and sample_rate must be "
                    "positive, got " + std::to_string(m) + ", " +
                    std::to_string(n) + " and " + std::to_string(rate));
  if (!(lower >= 0) || !(upper > lower) || upper > rate / 2.0)
    return nc.error("the edges must satisfy 0 <= lower_edge_hertz < "
                    "upper_edge_hertz <= sample_rate / 2, got " +
                    std::to_string(lower) + " and " + std::to_string(upper));
  int64_t bins = n / 2 + 1;
  auto toMel = [](double hz) { return 2595.0 * std::log10(1 + hz / 700.0); };
  double low = toMel(lower), step = (toMel(upper) - low) / double(m + 2);
  SmallVector<int64_t> edge;
  for (int64_t i = 0; i < m + 2; ++i) {
    double hz = 700.0 * std::expm1((low + double(i) * step) / 2595.0 *
                                   std::log(10.0));
    edge.push_back(static_cast<int64_t>(std::floor(double(n + 1) * hz /
                                                   double(rate))));
  }
  SmallVector<double> w(bins * m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
    auto at = [&](int64_t j) -> double & { return w[j * m + i]; };
    if (center == left) {
      if (center < bins)
        at(center) = 1;
    } else {
      for (int64_t j = left; j <= center && j < bins; ++j)
        at(j) = double(j - left) / double(center - left);
    }
    for (int64_t j = center; j < right && j < bins; ++j)
      at(j) = double(right - j) / double(right - center);
  }
  return setResult(nc, numericConstant(nc, elt, {bins, m}, w));
}

/// TensorScatter (opset 24, a KV cache's update): `update` written into
/// `past_cache` along `axis` from each batch entry's write index on
/// (circular: modulo the axis's extent). A ScatterElements at write index
/// + position; the indices come at run time.
LogicalResult importTensorScatter(NodeContext &nc) {
  TRY(cache, nc.requiredInput(0));
  TRY(update, nc.requiredInput(1));
  RankedTensorType ct = nc.inputType(0), ut = nc.inputType(1);
  int64_t rank = ct.getRank();
  TRY(axisAttr, nc.intAttr("axis", -2));
  TRY(axis, nc.normalizeAxis(axisAttr, rank));
  TRY(mode, nc.stringAttr("mode", "linear"));
  if (mode != "linear" && mode != "circular")
    return nc.error("mode '" + mode + "' is not one of linear, circular");
  if (axis == 0)
    return nc.error("axis must not be the batch axis 0");
  if (ut.getRank() != rank || ct.getElementType() != ut.getElementType())
    return nc.error("update must have past_cache's rank and element type");
  for (int64_t d = 0; d < rank; ++d)
    if (d == axis ? ut.getDimSize(d) > ct.getDimSize(d)
                  : ut.getDimSize(d) != ct.getDimSize(d))
      return nc.error("update " + shapeStr(ut.getShape()) +
                      " does not fit past_cache " + shapeStr(ct.getShape()) +
                      " (the same extents except along axis " +
                      std::to_string(axis) + ", there at most the cache's)");
  int64_t batch = ct.getDimSize(0), length = ut.getDimSize(axis);
  int64_t capacity = ct.getDimSize(axis);
  OpBuilder &b = nc.builder();
  Value index = iotaAlong(nc, length, rank, axis);
  if (Value starts = nc.input(2)) {
    RankedTensorType st = nc.inputType(2);
    if (st.getRank() != 1 || st.getDimSize(0) != batch ||
        !isa<IntegerType>(st.getElementType()))
      return nc.error("write_indices must be an integer vector of the " +
                      std::to_string(batch) + " batch entries, got " +
                      shapeStr(st.getShape()));
    SmallVector<int64_t> view(rank, 1);
    view[0] = batch;
    if (!st.getElementType().isInteger(64))
      starts = nc.create<dopt::CastOp>(starts, TypeAttr::get(b.getI64Type()));
    index = nc.create<dopt::AddOp>(reshape(nc, starts, view), index);
  }
  if (mode == "circular") {
    // Non-negative write indices: the remainder of a truncating division.
    Value m = nc.constantI64({capacity}, {});
    index = nc.create<dopt::SubOp>(
        index, nc.create<dopt::MulOp>(nc.create<dopt::DivOp>(index, m), m));
  }
  index = nc.create<dopt::ExpandOp>(index, b.getDenseI64ArrayAttr(ut.getShape()));
  return setResult(nc, nc.create<dopt::ScatterElementsOp>(
                           cache, index, update, b.getI64IntegerAttr(axis),
                           b.getStringAttr("none")));
}

//===----------------------------------------------------------------------===//
// Quantization (QuantizeLinear, DequantizeLinear)
//===----------------------------------------------------------------------===//

/// A quantization parameter (scale or zero point, input `i`) made to
/// broadcast against `x`: a scalar (or one element) as is; per axis, a
/// vector of x's extent along `axis`, viewed along it; blocked
/// (`block` > 0), x's shape but ⌈n / block⌉ along `axis`, each entry
/// repeated over its block (a Gather at i / block).
Value quantParam(NodeContext &nc, int i, RankedTensorType x, int64_t axis,
                 int64_t block, StringRef what) {
  Value v = nc.input(i);
  RankedTensorType t = nc.inputType(i);
  if (t.getNumElements() == 1 && !block)
    return t.getRank() == 0 ? v : reshape(nc, v, {});
  FailureOr<int64_t> normalized = nc.normalizeAxis(axis, x.getRank());
  if (failed(normalized))
    return {};
  axis = *normalized;
  int64_t n = x.getDimSize(axis);
  if (!block) {
    if (t.getRank() != 1 || t.getDimSize(0) != n) {
      (void)nc.error(what + " must be a scalar or hold " + std::to_string(n) +
                     " values (the extent of axis " + std::to_string(axis) +
                     "), got " + shapeStr(t.getShape()));
      return {};
    }
    SmallVector<int64_t> view(x.getRank(), 1);
    view[axis] = n;
    return reshape(nc, v, view);
  }
  SmallVector<int64_t> want(x.getShape());
  want[axis] = (n + block - 1) / block;
  if (t.getShape() != ArrayRef<int64_t>(want)) {
    (void)nc.error(what + " must be " + shapeStr(want) + " for blocks of " +
                   std::to_string(block) + " along axis " +
                   std::to_string(axis) + ", got " + shapeStr(t.getShape()));
    return {};
  }
  SmallVector<int64_t> rows;
  for (int64_t k = 0; k < n; ++k)
    rows.push_back(k / block);
  return nc.create<dopt::GatherOp>(v, nc.constantI64(rows, {n}),
                                   nc.builder().getI64IntegerAttr(axis));
}

/// The axis (as given: it matters only for a parameter that is not a
/// scalar) and block size of a quantization node.
FailureOr<std::pair<int64_t, int64_t>> quantAxis(NodeContext &nc) {
  TRY(axis, nc.intAttr("axis", 1));
  TRY(block, nc.intAttr("block_size", 0));
  if (block < 0) {
    (void)nc.error("block_size must be non-negative, got " +
                   std::to_string(block));
    return failure();
  }
  return std::make_pair(axis, block);
}

/// Whether `t` is a quantized type distopt supports (8- and 16-bit
/// integers; int32 too where `int32`, DequantizeLinear's biases); an error
/// naming it otherwise.
LogicalResult checkQuantType(NodeContext &nc, Type t, StringRef what,
                             bool int32 = false) {
  auto it = dyn_cast<IntegerType>(t);
  if (it && (it.getWidth() == 8 || it.getWidth() == 16 ||
             (int32 && it.getWidth() == 32 && !it.isUnsigned())))
    return success();
  return nc.error(what + " type " + typeStr(t) + " is not supported (int8, uint8, " +
                  "int16, uint16" + (int32 ? ", int32" : "") +
                  " are; float8, int4 and the other narrow types are not)");
}

/// round-half-even(q) saturated to the integer type `out` and converted to
/// it; NaN gives the type's lowest value, as in ONNX Runtime (a float to
/// integer conversion of NaN or of a value out of range is undefined).
Value saturateTo(NodeContext &nc, Value q, IntegerType out) {
  Type ft = cast<RankedTensorType>(q.getType()).getElementType();
  unsigned w = out.getWidth();
  double lo = out.isUnsigned() ? 0.0 : -std::ldexp(1.0, w - 1);
  double hi = out.isUnsigned() ? std::ldexp(1.0, w) - 1
                               : std::ldexp(1.0, w - 1) - 1;
  Value low = constantScalar(nc, ft, lo);
  q = nc.create<dopt::WhereOp>(nc.create<dopt::EqualOp>(q, q),
                               nc.create<dopt::RoundOp>(q), low);
  q = nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(q, low),
                             constantScalar(nc, ft, hi));
  return castTo(nc, q, out);
}

/// QuantizeLinear: saturate(round(x / scale) + zero_point) in the zero
/// point's type (or output_dtype's, uint8 by default), halves to even,
/// computed in f32 at least (f64 with precision = DOUBLE; a 16-bit
/// precision is widened). Per tensor, per axis or
/// blocked. Its result is an integer: no gradient flows through it (a
/// straight-through estimator, as quantization-aware training uses, is not
/// applied).
LogicalResult importQuantizeLinear(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  if (failed(nc.requiredInput(1)))
    return failure();
  RankedTensorType in = nc.inputType(0);
  if (!isa<FloatType>(in.getElementType()) ||
      !isa<FloatType>(nc.inputType(1).getElementType()))
    return nc.error("x and y_scale must be floating-point");
  TRY(ab, quantAxis(nc));
  auto [axis, block] = ab;
  TRY(outputDtype, nc.intAttr("output_dtype", 0));
  TRY(precision, nc.intAttr("precision", 0));
  TRY(saturate, nc.intAttr("saturate", 1));
  (void)saturate; // only float8 outputs depend on it
  OpBuilder &b = nc.builder();
  Type out = b.getIntegerType(8, /*isSigned=*/false);
  if (outputDtype) {
    out = convertDataType(nc.context(), (int32_t)outputDtype);
    if (!out)
      return nc.error("output_dtype " + dataTypeName((int32_t)outputDtype) +
                      " is not supported (int8, uint8, int16, uint16 are)");
  }
  Value zp = nc.input(2);
  if (zp) {
    Type zt = nc.inputType(2).getElementType();
    if (outputDtype && zt != out)
      return nc.error("output_dtype " + dataTypeName((int32_t)outputDtype) +
                      " differs from the zero point's type");
    out = zt;
  }
  if (failed(checkQuantType(nc, out, "output")))
    return failure();
  Type ct = b.getF32Type();
  if (precision) {
    ct = convertDataType(nc.context(), (int32_t)precision);
    if (!ct || !isa<FloatType>(ct))
      return nc.error("precision " + dataTypeName((int32_t)precision) +
                      " is not a floating-point type");
    if (ct.getIntOrFloatBitWidth() < 32)
      ct = b.getF32Type();
  }
  Value s = quantParam(nc, 1, in, axis, block, "y_scale");
  if (!s)
    return failure();
  // Rounded before the zero point is added (halves go to even before).
  Value q = nc.create<dopt::RoundOp>(
      nc.create<dopt::DivOp>(castTo(nc, x, ct), castTo(nc, s, ct)));
  if (zp) {
    if (nc.inputType(2).getShape() != nc.inputType(1).getShape())
      return nc.error("y_zero_point must have y_scale's shape " +
                      shapeStr(nc.inputType(1).getShape()) + ", got " +
                      shapeStr(nc.inputType(2).getShape()));
    Value z = quantParam(nc, 2, in, axis, block, "y_zero_point");
    if (!z)
      return failure();
    q = nc.create<dopt::AddOp>(q, castTo(nc, z, ct));
  }
  return setResult(nc, saturateTo(nc, q, cast<IntegerType>(out)));
}

/// DequantizeLinear: (x − zero_point) · scale, in f32, rounded to the
/// scale's type (or output_dtype's). Per tensor, per axis or blocked; x of
/// 8- or 16-bit integers, or int32 (a bias).
LogicalResult importDequantizeLinear(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  if (failed(nc.requiredInput(1)))
    return failure();
  RankedTensorType in = nc.inputType(0);
  Type xt = in.getElementType();
  if (failed(checkQuantType(nc, xt, "input", /*int32=*/true)))
    return failure();
  Type st = nc.inputType(1).getElementType();
  if (!isa<FloatType>(st))
    return nc.error("x_scale must be floating-point");
  TRY(ab, quantAxis(nc));
  auto [axis, block] = ab;
  TRY(outputDtype, nc.intAttr("output_dtype", 0));
  Type out = st;
  if (outputDtype) {
    out = convertDataType(nc.context(), (int32_t)outputDtype);
    if (!out || !isa<FloatType>(out))
      return nc.error("output_dtype " + dataTypeName((int32_t)outputDtype) +
                      " is not a floating-point type");
  }
  Value zp = nc.input(2);
  if (zp && nc.inputType(2).getElementType() != xt)
    return nc.error("x_zero_point must have x's type");
  OpBuilder &b = nc.builder();
  Type f32 = b.getF32Type();
  Value d = castTo(nc, x, f32);
  if (zp) {
    Value z = quantParam(nc, 2, in, axis, block, "x_zero_point");
    if (!z)
      return failure();
    d = nc.create<dopt::SubOp>(d, castTo(nc, z, f32));
  }
  Value s = quantParam(nc, 1, in, axis, block, "x_scale");
  if (!s)
    return failure();
  return setResult(nc, castTo(nc, nc.create<dopt::MulOp>(d, castTo(nc, s, f32)), out));
}

/// The integer operand `v` less its zero point (input `zpIndex`, absent:
/// 0; a scalar, or a vector along `axis` of `v`), as `ft`.
Value lessZeroPoint(NodeContext &nc, Value v, int zpIndex, int64_t axis,
                    Type ft, StringRef what) {
  Value f = nc.create<dopt::CastOp>(v, TypeAttr::get(ft));
  if (!nc.input(zpIndex))
    return f;
  RankedTensorType vt = cast<RankedTensorType>(v.getType());
  if (nc.inputType(zpIndex).getElementType() != vt.getElementType()) {
    (void)nc.error(what + " must have its operand's type");
    return {};
  }
  Value z = quantParam(nc, zpIndex, vt, axis, 0, what);
  if (!z)
    return {};
  return nc.create<dopt::SubOp>(f, nc.create<dopt::CastOp>(z, TypeAttr::get(ft)));
}

/// The float type in which products of `k` terms of the integer types `a`
/// and `b` (less their zero points) sum exactly: f32 while every partial
/// sum stays below 2^24, f64 beyond.
Type exactAccumulator(OpBuilder &b, int64_t k, Type a, Type bt) {
  double range = std::ldexp(1.0, a.getIntOrFloatBitWidth()) *
                 std::ldexp(1.0, bt.getIntOrFloatBitWidth());
  return (double)k * range <= std::ldexp(1.0, 24) ? Type(b.getF32Type())
                                                  : Type(b.getF64Type());
}

/// round-half-even(acc · multiplier + y_zero_point (input `zpIndex`, a
/// scalar)), saturated to `out` (QLinearMatMul's and QLinearConv's
/// requantization, as ONNX Runtime and ONNX's reference: the multiplier
/// x_scale · w_scale / y_scale computed in the scales' type first, the
/// product in f32). y_scale is input
/// `scaleIndex`; `scale` the product of the other two, broadcasting
/// against `acc`.
FailureOr<Value> requantize(NodeContext &nc, Value acc, Value scale,
                            int scaleIndex, int zpIndex, Type out) {
  if (nc.inputType(scaleIndex).getNumElements() != 1) {
    (void)nc.error("y_scale must be a scalar");
    return failure();
  }
  if (nc.input(zpIndex) && nc.inputType(zpIndex).getNumElements() != 1) {
    (void)nc.error("y_zero_point must be a scalar");
    return failure();
  }
  // In f32, as ONNX Runtime: the exact integer sum rounded to f32 (as its
  // int32 → float conversion), times the multiplier.
  Type ft = nc.builder().getF32Type();
  Value multiplier =
      nc.create<dopt::DivOp>(scale, reshape(nc, nc.input(scaleIndex), {}));
  Value y = nc.create<dopt::MulOp>(castTo(nc, acc, ft),
                                   castTo(nc, multiplier, ft));
  if (nc.input(zpIndex))
    y = nc.create<dopt::AddOp>(
        y, castTo(nc, reshape(nc, nc.input(zpIndex), {}), ft));
  return saturateTo(nc, y, cast<IntegerType>(out));
}

/// An exact integer sum held in a float type, as int32: through i64, so a
/// sum past int32 wraps as ONNX Runtime's does (a direct conversion would
/// be undefined).
Value exactToInt32(NodeContext &nc, Value acc) {
  OpBuilder &b = nc.builder();
  return castTo(nc, castTo(nc, acc, b.getI64Type()), b.getI32Type());
}

/// Checks that inputs `is` are 8- or 16-bit integers and `scales` present,
/// float scalars or vectors of one type; an error naming the first that is
/// not.
LogicalResult checkQLinearInputs(NodeContext &nc, ArrayRef<int> is,
                                 ArrayRef<int> scales) {
  for (int i : is) {
    RankedTensorType t = nc.inputType(i);
    if (t && failed(checkQuantType(nc, t.getElementType(),
                                   "input " + std::to_string(i))))
      return failure();
  }
  for (int i : scales) {
    if (failed(nc.requiredInput(i)))
      return failure();
    RankedTensorType t = nc.inputType(i);
    if (t && (!isa<FloatType>(t.getElementType()) || t.getRank() > 1 ||
              t.getElementType() != nc.inputType(scales[0]).getElementType()))
      return nc.error("scale (input " + std::to_string(i) +
                      ") must be a floating-point scalar or vector, of the "
                      "other scales' type");
  }
  return success();
}

/// MatMulInteger: (A − a_zero_point) · (B − b_zero_point) in int32, the
/// zero points scalars or per row of A / per column of B. The product is
/// computed in floating point where every sum is exact (exactAccumulator).
/// QLinearMatMul (`requantized`): that product times
/// a_scale · b_scale / y_scale, plus y_zero_point, rounded and saturated.
template <bool requantized> LogicalResult importIntegerMatMul(NodeContext &nc) {
  int bi = requantized ? 3 : 1;
  TRY(a, nc.requiredInput(0));
  TRY(bv, nc.requiredInput(bi));
  if (failed(requantized ? checkQLinearInputs(nc, {0, 2, 3, 5, 7}, {1, 4, 6})
                         : checkQLinearInputs(nc, {0, 1, 2, 3}, {})))
    return failure();
  RankedTensorType at = nc.inputType(0), bt = nc.inputType(bi);
  if (at.getRank() < 1 || bt.getRank() < 1)
    return nc.error("A and B must have rank >= 1");
  int64_t k = at.getDimSize(at.getRank() - 1);
  OpBuilder &b = nc.builder();
  Type ft = exactAccumulator(b, k, at.getElementType(), bt.getElementType());
  int64_t rows = std::max<int64_t>(0, at.getRank() - 2);
  Value a0 = lessZeroPoint(nc, a, 2, rows, ft, "a_zero_point");
  if (!a0)
    return failure();
  Value b0 = lessZeroPoint(nc, bv, requantized ? 5 : 3, bt.getRank() - 1, ft,
                           "b_zero_point");
  if (!b0)
    return failure();
  Value acc = nc.create<dopt::MatMulOp>(a0, b0);
  if (!requantized)
    return setResult(nc, exactToInt32(nc, acc));
  Value as = quantParam(nc, 1, at, rows, 0, "a_scale");
  Value bs = quantParam(nc, 4, bt, bt.getRank() - 1, 0, "b_scale");
  if (!as || !bs)
    return failure();
  Type out = nc.input(7) ? nc.inputType(7).getElementType() : at.getElementType();
  TRY(y, requantize(nc, acc, nc.create<dopt::MulOp>(as, bs), 6, 7, out));
  return setResult(nc, y);
}

/// ConvInteger: the convolution of x − x_zero_point (a scalar) and
/// w − w_zero_point (a scalar or one per output channel) in int32, padding
/// with the zero point; computed as exactAccumulator says. QLinearConv
/// (`requantized`): that plus the int32 bias, times
/// x_scale · w_scale / y_scale (w_scale per output channel or not), plus
/// y_zero_point, rounded and saturated.
template <bool requantized> LogicalResult importIntegerConv(NodeContext &nc) {
  int wi = requantized ? 3 : 1;
  TRY(x, nc.requiredInput(0));
  TRY(w, nc.requiredInput(wi));
  if (failed(requantized ? checkQLinearInputs(nc, {0, 2, 3, 5, 7}, {1, 4, 6})
                         : checkQLinearInputs(nc, {0, 1, 2, 3}, {})))
    return failure();
  RankedTensorType xt = nc.inputType(0), wt = nc.inputType(wi);
  if (wt.getRank() < 3)
    return nc.error("w must have rank >= 3, got rank " +
                    std::to_string(wt.getRank()));
  int64_t k = 1;
  for (int64_t d : wt.getShape().drop_front(1))
    k *= d;
  OpBuilder &b = nc.builder();
  Type ft = exactAccumulator(b, k, xt.getElementType(), wt.getElementType());
  int xzp = 2, wzp = requantized ? 5 : 3;
  if (nc.input(xzp) && nc.inputType(xzp).getNumElements() != 1)
    return nc.error("x_zero_point must be a scalar");
  Value x0 = lessZeroPoint(nc, x, xzp, 0, ft, "x_zero_point");
  Value w0 = x0 ? lessZeroPoint(nc, w, wzp, 0, ft, "w_zero_point") : Value();
  if (!w0)
    return failure();
  TRY(acc, convolution(nc, x0, w0, {}));
  if (!requantized)
    return setResult(nc, exactToInt32(nc, acc));
  if (Value bias = nc.input(8)) {
    // Added in f64, where any int32 bias plus the exact sum stays exact
    // (the int32 sum ONNX Runtime converts to f32).
    RankedTensorType bt = nc.inputType(8);
    if (!bt.getElementType().isInteger(32) || bt.getRank() != 1 ||
        bt.getDimSize(0) != wt.getDimSize(0))
      return nc.error("B must be an int32 vector of the " +
                      std::to_string(wt.getDimSize(0)) + " output channels");
    SmallVector<int64_t> view(cast<RankedTensorType>(acc.getType()).getRank(), 1);
    view[1] = wt.getDimSize(0);
    acc = nc.create<dopt::AddOp>(castTo(nc, acc, b.getF64Type()),
                                 castTo(nc, reshape(nc, bias, view), b.getF64Type()));
  }
  auto yt = cast<RankedTensorType>(acc.getType());
  Value ws = quantParam(nc, 4, yt, 1, 0, "w_scale");
  if (!ws)
    return failure();
  if (nc.inputType(1).getNumElements() != 1)
    return nc.error("x_scale must be a scalar");
  Type out = nc.input(7) ? nc.inputType(7).getElementType() : xt.getElementType();
  TRY(y, requantize(nc, acc,
                    nc.create<dopt::MulOp>(reshape(nc, nc.input(1), {}), ws), 6,
                    7, out));
  return setResult(nc, y);
}

/// DynamicQuantizeLinear: x (f32) to uint8 with the scale and zero point of
/// its range widened to hold 0; three outputs. As ONNX Runtime: NaNs do not
/// count in the range (and quantize to 0), and an empty range (x all 0)
/// has scale 1 (ONNX's reference: 1/255).
LogicalResult importDynamicQuantizeLinear(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  OpBuilder &b = nc.builder();
  Type f32 = b.getF32Type();
  Value xf = castTo(nc, x, f32);
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < in.getRank(); ++d)
    all.push_back(d);
  auto c = [&](double v) { return constantScalar(nc, f32, v); };
  // NaN as 0: the range holds 0 anyway.
  Value counted = nc.create<dopt::WhereOp>(nc.create<dopt::EqualOp>(xf, xf), xf, c(0));
  Value hi = nc.create<dopt::MaxOp>(
      nc.create<dopt::ReduceMaxOp>(counted, b.getDenseI64ArrayAttr(all),
                                   b.getBoolAttr(false)),
      c(0));
  Value lo = nc.create<dopt::MinOp>(reduceMinimum(nc, counted, all, false), c(0));
  Value scale = nc.create<dopt::WhereOp>(
      nc.create<dopt::EqualOp>(hi, lo), c(1),
      nc.create<dopt::DivOp>(nc.create<dopt::SubOp>(hi, lo), c(255)));
  Value zp = nc.create<dopt::RoundOp>(nc.create<dopt::MinOp>(
      nc.create<dopt::MaxOp>(
          nc.create<dopt::NegOp>(nc.create<dopt::DivOp>(lo, scale)), c(0)),
      c(255)));
  auto u8 = cast<IntegerType>(b.getIntegerType(8, /*isSigned=*/false));
  Value y = saturateTo(
      nc,
      nc.create<dopt::AddOp>(
          nc.create<dopt::RoundOp>(nc.create<dopt::DivOp>(xf, scale)), zp),
      u8);
  if (nc.hasFailed())
    return failure();
  nc.setOutput(0, y);
  nc.setOutput(1, castTo(nc, scale, elt));
  nc.setOutput(2, castTo(nc, zp, u8));
  return success();
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

/// MeanVarianceNormalization, as its ONNX function: (x - E[x]) /
/// (sqrt(E[x²] - E[x]²) + 1e-9) over `axes` (default 0, 2, 3).
LogicalResult importMeanVarianceNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(axesAttr, nc.intsAttr("axes"));
  RankedTensorType in = nc.inputType(0);
  SmallVector<int64_t> axes;
  for (int64_t a : axesAttr.value_or(SmallVector<int64_t>{0, 2, 3})) {
    TRY(axis, nc.normalizeAxis(a, in.getRank()));
    axes.push_back(axis);
  }
  OpBuilder &b = nc.builder();
  Type t = in.getElementType();
  auto mean = [&](Value v) {
    return nc.create<dopt::ReduceMeanOp>(v, b.getDenseI64ArrayAttr(axes),
                                         b.getBoolAttr(true));
  };
  Value m = mean(x);
  Value var = nc.create<dopt::SubOp>(mean(nc.create<dopt::MulOp>(x, x)),
                                     nc.create<dopt::MulOp>(m, m));
  Value y = nc.create<dopt::DivOp>(
      nc.create<dopt::SubOp>(x, m),
      nc.create<dopt::AddOp>(nc.create<dopt::SqrtOp>(var),
                             constantScalar(nc, t, 1e-9)));
  return setResult(nc, y);
}

/// EyeLike: a constant of the input's 2-D shape with ones on diagonal k, in
/// `dtype` (default the input's type).
LogicalResult importEyeLike(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  (void)x;
  TRY(k, nc.intAttr("k", 0));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() != 2)
    return nc.error("input of rank " + std::to_string(in.getRank()) +
                    ": expected 2");
  Type t = in.getElementType();
  if (nc.hasAttr("dtype")) {
    TRY(dtype, nc.intAttr("dtype", 0));
    t = convertDataType(nc.context(), dtype);
    if (!t)
      return nc.error("dtype " + dataTypeName(dtype) + " is not supported");
  }
  int64_t rows = in.getDimSize(0), cols = in.getDimSize(1);
  SmallVector<double> v(rows * cols, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    if (i + k >= 0 && i + k < cols)
      v[i * cols + i + k] = 1.0;
  Value eye = floatConstant(nc, nc.builder().getF32Type(), {rows, cols}, v);
  return setResult(nc, nc.create<dopt::CastOp>(eye, TypeAttr::get(t)));
}

/// The row each index tuple of ScatterND/GatherND names: indices [..., k]
/// into axes of extents `dims` (k of them) as one linear index [..., 1]
/// (negative components count from the end; out-of-range ones are
/// clamped, as the element ops' are).
Value linearIndex(NodeContext &nc, Value indices, ArrayRef<int64_t> dims) {
  OpBuilder &b = nc.builder();
  Type i64 = b.getI64Type();
  auto it = cast<RankedTensorType>(indices.getType());
  if (it.getElementType() != i64)
    indices = nc.create<dopt::CastOp>(indices, TypeAttr::get(i64));
  auto c = [&](int64_t v) { return constantScalar(nc, i64, v); };
  int64_t last = it.getRank() - 1;
  Value linear;
  for (size_t j = 0; j < dims.size(); ++j) {
    Value comp = strided(nc, indices, {last}, {(int64_t)j}, {1}, {1});
    comp = nc.create<dopt::WhereOp>(nc.create<dopt::LessOp>(comp, c(0)),
                                    nc.create<dopt::AddOp>(comp, c(dims[j])),
                                    comp);
    comp = nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(comp, c(0)),
                                  c(dims[j] - 1));
    linear = linear ? nc.create<dopt::AddOp>(
                          nc.create<dopt::MulOp>(linear, c(dims[j])), comp)
                    : comp;
  }
  return linear;
}

/// Constant index tuples of ScatterND/GatherND must lie in the axes they
/// index (ONNX leaves others undefined).
LogicalResult checkConstantTuples(NodeContext &nc, Value indices,
                                  ArrayRef<int64_t> dims, int64_t firstAxis) {
  auto cst = indices.getDefiningOp<dopt::ConstantOp>();
  auto dense = cst ? dyn_cast<DenseElementsAttr>(cst.getValue())
                   : DenseElementsAttr();
  if (!dense || !isa<IntegerType>(dense.getElementType()))
    return success();
  int64_t k = dims.size(), n = 0;
  for (APInt v : dense.getValues<APInt>()) {
    int64_t j = n++ % k, i = v.getSExtValue();
    if (i < -dims[j] || i >= dims[j])
      return nc.error("index " + std::to_string(i) + " is out of range for "
                      "axis " + std::to_string(firstAxis + j) + " of size " +
                      std::to_string(dims[j]));
  }
  return success();
}

/// GatherND: the data's first batch_dims axes are shared with the indices;
/// each index tuple (the indices' last axis, k long) names a row of the
/// next k axes. Written as a GatherElements over the data viewed as
/// [batch, rows, row] with the tuples' linear indices broadcast along the
/// row -- so its gradient (a scatter-add), sharding and lowering are
/// GatherElements'.
LogicalResult importGatherND(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(indices, nc.requiredInput(1));
  TRY(batchDims, nc.intAttr("batch_dims", 0));
  RankedTensorType dt = nc.inputType(0), it = nc.inputType(1);
  int64_t r = dt.getRank(), ir = it.getRank();
  if (ir < 1)
    return nc.error("indices must have rank 1 or more");
  int64_t k = it.getShape().back();
  if (batchDims < 0 || batchDims >= std::min(r, ir))
    return nc.error("batch_dims " + std::to_string(batchDims) +
                    " must be below the ranks of data and indices");
  if (k < 1 || k > r - batchDims)
    return nc.error("indices' last dimension " + std::to_string(k) +
                    " must be between 1 and " + std::to_string(r - batchDims) +
                    " (the data's rank less batch_dims)");
  if (dt.getShape().take_front(batchDims) != it.getShape().take_front(batchDims))
    return nc.error("data " + shapeStr(dt.getShape()) + " and indices " +
                    shapeStr(it.getShape()) + " differ in their first " +
                    std::to_string(batchDims) + " (batch) dimensions");
  ArrayRef<int64_t> dims = dt.getShape().slice(batchDims, k);
  if (failed(checkConstantTuples(nc, indices, dims, batchDims)))
    return failure();
  auto product = [](ArrayRef<int64_t> v) { return ShapedType::getNumElements(v); };
  int64_t batch = product(dt.getShape().take_front(batchDims));
  int64_t rows = product(dims), row = product(dt.getShape().drop_front(batchDims + k));
  int64_t m = product(it.getShape().slice(batchDims, ir - 1 - batchDims));
  SmallVector<int64_t> outShape(it.getShape().drop_back());
  llvm::append_range(outShape, dt.getShape().drop_front(batchDims + k));
  if (batch * m * row == 0) {
    auto t = RankedTensorType::get(outShape, dt.getElementType());
    return setResult(nc, dopt::ConstantOp::create(
                             nc.builder(), nc.loc(),
                             DenseElementsAttr::get(
                                 t, nc.builder().getZeroAttr(dt.getElementType()))));
  }
  Value idx = reshape(nc, linearIndex(nc, indices, dims), {batch, m, 1});
  idx = nc.create<dopt::ExpandOp>(idx, nc.builder().getDenseI64ArrayAttr({batch, m, row}));
  Value out = nc.create<dopt::GatherElementsOp>(
      reshape(nc, data, {batch, rows, row}), idx, nc.builder().getI64IntegerAttr(1));
  return setResult(nc, reshape(nc, out, outShape));
}

/// ScatterND with constant indices (slice assignments; what exporters write
/// for `t[a:b, c:d] = v`): the rows of `data` (flattened over the indexed
/// axes) that an update replaces are known at import, so the result is a
/// `where` between `data` and a gather of the updates' rows. Later updates
/// of a row win (ONNX leaves duplicates undefined). Reductions other than
/// none are refused.
LogicalResult importScatterND(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(updates, nc.requiredInput(2));
  TRY(reduction, nc.stringAttr("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return nc.error("reduction must be none, add, mul, max or min, got '" +
                    reduction + "'");
  RankedTensorType dt = nc.inputType(0), it = nc.inputType(1),
                   ut = nc.inputType(2);
  if (it.getRank() < 1)
    return nc.error("indices must have rank 1 or more");
  int64_t k = it.getShape().back(), r = dt.getRank();
  if (k < 1 || k > r)
    return nc.error("indices' last dimension " + std::to_string(k) +
                    " must be between 1 and the data's rank " +
                    std::to_string(r));
  SmallVector<int64_t> wantUpdates(it.getShape().drop_back());
  llvm::append_range(wantUpdates, dt.getShape().drop_front(k));
  if (ut.getShape() != ArrayRef<int64_t>(wantUpdates))
    return nc.error("updates of shape " + shapeStr(ut.getShape()) +
                    ", expected " + shapeStr(wantUpdates));
  int64_t rows = ShapedType::getNumElements(dt.getShape().take_front(k));
  int64_t row = ShapedType::getNumElements(dt.getShape().drop_front(k));
  if (!nc.constantValues(1)) {
    // Indices computed at run time (`x[rows, cols] = v`, index_put): the
    // data viewed as [rows, row], each tuple's linear index broadcast along
    // the row, a ScatterElements along the rows -- which takes the updates
    // in the same order (tuple after tuple) and combines them the same way.
    TRY(idxValue, nc.requiredInput(1));
    int64_t n = ut.getNumElements();
    if (n == 0)
      return setResult(nc, data);
    n /= row;
    Value idx = reshape(nc, linearIndex(nc, idxValue, dt.getShape().take_front(k)),
                        {n, 1});
    OpBuilder &b = nc.builder();
    idx = nc.create<dopt::ExpandOp>(idx, b.getDenseI64ArrayAttr({n, row}));
    Value y = nc.create<dopt::ScatterElementsOp>(
        reshape(nc, data, {rows, row}), idx, reshape(nc, updates, {n, row}),
        b.getI64IntegerAttr(0), b.getStringAttr(reduction));
    return setResult(nc, reshape(nc, y, dt.getShape()));
  }
  TRY(indices, nc.constantInts(1, "indices"));
  int64_t count = (int64_t)indices.size() / k;
  if (count == 0)
    return setResult(nc, data);
  // The update rows each data row receives, in order.
  std::vector<SmallVector<int64_t, 1>> sources(rows);
  for (int64_t u = 0; u < count; ++u) {
    int64_t linear = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t dim = dt.getDimSize(j), i = indices[u * k + j];
      if (i < -dim || i >= dim)
        return nc.error("index " + std::to_string(i) + " is out of range for "
                        "axis " + std::to_string(j) + " of size " +
                        std::to_string(dim));
      linear = linear * dim + (i < 0 ? i + dim : i);
    }
    if (reduction == "none")
      sources[linear].assign(1, u); // duplicates: ONNX leaves it open; the last
    else
      sources[linear].push_back(u);
  }
  // One layer per update a row receives: layer l takes each row's l-th
  // update (a gather of the update rows) and replaces, adds, multiplies or
  // takes the max or min where the row has one (a where).
  size_t layers = 0;
  for (const auto &s : sources)
    layers = std::max(layers, s.size());
  constexpr size_t kMaxLayers = 64;
  if (layers > kMaxLayers)
    return nc.error("a row of the data receives " + std::to_string(layers) +
                    " updates; distopt combines at most " +
                    std::to_string(kMaxLayers) + " per row");
  OpBuilder &b = nc.builder();
  Value flatUpdates = reshape(nc, updates, {count, row});
  Value y = reshape(nc, data, {rows, row});
  for (size_t l = 0; l < layers; ++l) {
    SmallVector<int64_t> gatherIndex;
    SmallVector<bool> hit;
    for (const auto &s : sources) {
      gatherIndex.push_back(l < s.size() ? s[l] : 0);
      hit.push_back(l < s.size());
    }
    Value mask = dopt::ConstantOp::create(
        b, nc.loc(),
        DenseElementsAttr::get(RankedTensorType::get({rows, 1}, b.getI1Type()),
                               ArrayRef<bool>(hit)));
    Value picked = nc.create<dopt::GatherOp>(
        flatUpdates, nc.constantI64(gatherIndex, {rows}), b.getI64IntegerAttr(0));
    Value combined = reduction == "add"   ? nc.create<dopt::AddOp>(y, picked)
                     : reduction == "mul" ? nc.create<dopt::MulOp>(y, picked)
                     : reduction == "max" ? nc.create<dopt::MaxOp>(y, picked)
                     : reduction == "min" ? nc.create<dopt::MinOp>(y, picked)
                                          : picked;
    y = nc.create<dopt::WhereOp>(mask, combined, y);
  }
  return setResult(nc, reshape(nc, y, dt.getShape()));
}

LogicalResult importShape(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  int64_t rank = nc.inputType(0).getRank();
  TRY(start, nc.intAttr("start", 0));
  TRY(end, nc.intAttr("end", rank));
  // ONNX Shape (15+): negative values count from the end; both clamp.
  auto clampDim = [rank](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  start = clampDim(start);
  end = std::max(clampDim(end), start);
  nc.setOutput(0, nc.create<dopt::ShapeOp>(
                      x, nc.builder().getI64IntegerAttr(start),
                      nc.builder().getI64IntegerAttr(end)));
  return success();
}

LogicalResult importConstant(NodeContext &nc) {
  OpBuilder &b = nc.builder();
  auto scalarType = [&](Type elt, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elt);
  };
  for (const onnx::AttributeProto &a : nc.node().attribute()) {
    StringRef name = a.name();
    Value v;
    if (name == "value") {
      // Named after the node output so a large constant can be found in
      // the file later, as initializers are; small float ones (a Resize's
      // scales made by Concat) stay inline, so that they fold. A large one
      // is still a constant: training leaves it alone.
      TRY(t, nc.tensorValue(a.t(), nc.node().output(0), 64));
      if (auto w = t.getDefiningOp<dopt::WeightOp>())
        w.setConstant(true);
      v = t;
    } else if (name == "value_float") {
      v = dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(scalarType(b.getF32Type(), {}), a.f()));
    } else if (name == "value_floats") {
      SmallVector<float> fs(a.floats().begin(), a.floats().end());
      v = dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(
              scalarType(b.getF32Type(), {(int64_t)fs.size()}),
              ArrayRef<float>(fs)));
    } else if (name == "value_int") {
      v = nc.constantI64({a.i()}, {});
    } else if (name == "value_ints") {
      SmallVector<int64_t> is(a.ints().begin(), a.ints().end());
      v = nc.constantI64(is, {(int64_t)is.size()});
    } else {
      return nc.error("constant attribute '" + name + "' is not supported");
    }
    nc.setOutput(0, v);
    return success();
  }
  return nc.error("has no value attribute");
}

LogicalResult importConstantOfShape(NodeContext &nc) {
  TRY(shape, nc.constantInts(0, "shape"));
  for (int64_t d : shape)
    if (d < 0)
      return nc.error("shape " + shapeStr(shape) + " has a negative size");
  if (!fitsInMemory(shape, 8))
    return nc.error("shape " + shapeStr(shape) + " is too large");
  const onnx::AttributeProto *a = nc.attr("value");
  OpBuilder &b = nc.builder();
  DenseElementsAttr splat;
  if (!a) {
    splat = DenseElementsAttr::get(RankedTensorType::get(shape, b.getF32Type()),
                                   0.0f);
  } else {
    TRY(v, nc.tensorValue(a->t(), nc.node().output(0)));
    auto c = v.getDefiningOp<dopt::ConstantOp>();
    auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
    if (!dense || dense.getNumElements() != 1)
      return nc.error("value must be a one-element tensor");
    splat = DenseElementsAttr::get(
        RankedTensorType::get(shape, dense.getElementType()),
        dense.getValues<Attribute>()[0]);
  }
  nc.setOutput(0, dopt::ConstantOp::create(b, nc.loc(), splat));
  return success();
}

/// Range is only ever used by exporters on shape values; distopt evaluates
/// it at import and needs constant inputs.
LogicalResult importRange(NodeContext &nc) {
  TRY(start, nc.constantScalar(0, "start"));
  TRY(limit, nc.constantScalar(1, "limit"));
  TRY(delta, nc.constantScalar(2, "delta"));
  if (delta == 0)
    return nc.error("delta must be non-zero");
  RankedTensorType t = nc.inputType(0);
  double count = std::max(0.0, std::ceil((limit - start) / delta));
  if (count > (1 << 24)) {
    std::ostringstream os; // the count may exceed int64 or be infinite
    os << count;
    return nc.error("Range of " + os.str() +
                    " elements is too large to evaluate at import");
  }
  int64_t n = (int64_t)count;
  auto type = RankedTensorType::get({n}, t.getElementType());
  DenseElementsAttr attr;
  if (auto ft = dyn_cast<FloatType>(t.getElementType())) {
    SmallVector<APFloat> vals;
    for (int64_t i = 0; i < n; ++i) {
      APFloat v(start + i * delta);
      bool lost;
      v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      vals.push_back(v);
    }
    attr = DenseElementsAttr::get(type, vals);
  } else {
    unsigned width = t.getElementType().getIntOrFloatBitWidth();
    SmallVector<APInt> vals;
    for (int64_t i = 0; i < n; ++i)
      vals.push_back(APInt(width, (int64_t)start + i * (int64_t)delta,
                           /*isSigned=*/true, /*implicitTrunc=*/true));
    attr = DenseElementsAttr::get(type, vals);
  }
  nc.setOutput(0, dopt::ConstantOp::create(nc.builder(), nc.loc(), attr));
  return success();
}

} // namespace

const llvm::StringMap<OpImporterFn> &onnximport::opImporters() {
  static const llvm::StringMap<OpImporterFn> table = [] {
    llvm::StringMap<OpImporterFn> t;
    // Elementwise.
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
    // Softmax and normalisation.
    t["Softmax"] = importSoftmax<dopt::SoftmaxOp>;
    t["LogSoftmax"] = importSoftmax<dopt::LogSoftmaxOp>;
    // Losses (training graphs exported with their loss).
    t["NegativeLogLikelihoodLoss"] = importNegativeLogLikelihoodLoss;
    t["SoftmaxCrossEntropyLoss"] = importSoftmaxCrossEntropyLoss;
    t["BatchNormalization"] = importBatchNorm;
    t["RMSNormalization"] = importRMSNorm;
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
    t["Resize"] = importResize;
    t["ArgMax"] = importArgExtreme<true>;
    t["ArgMin"] = importArgExtreme<false>;
    t["Hardmax"] = importHardmax;
    t["ReduceProd"] = importReduceProd;
    t["ReduceMin"] = importComposedReduce<Composed::Min>;
    t["ReduceSumSquare"] = importComposedReduce<Composed::SumSquare>;
    t["ReduceL1"] = importComposedReduce<Composed::L1>;
    t["ReduceL2"] = importComposedReduce<Composed::L2>;
    t["ReduceLogSum"] = importComposedReduce<Composed::LogSum>;
    t["ReduceLogSumExp"] = importComposedReduce<Composed::LogSumExp>;
    t["LayerNormalization"] = importLayerNorm;
    // Linear algebra, convolution, pooling.
    t["MatMul"] = importBinary<dopt::MatMulOp>;
    t["Gemm"] = importGemm;
    t["Conv"] = importConv;
    t["ConvTranspose"] = importConvTranspose;
    t["MaxPool"] = importMaxPool;
    t["AveragePool"] = importAveragePool;
    t["LpPool"] = importLpPool;
    t["GlobalAveragePool"] = importUnary<dopt::GlobalAvgPoolOp>;
    t["GlobalMaxPool"] = importGlobalMaxPool;
    // Reductions (axes became an input in opset 13 for ReduceSum, 18 for
    // the others).
    t["ReduceSum"] = importReduce<dopt::ReduceSumOp, 13>;
    t["ReduceMean"] = importReduce<dopt::ReduceMeanOp, 18>;
    t["ReduceMax"] = importReduce<dopt::ReduceMaxOp, 18>;
    // Shapes and data movement.
    t["Reshape"] = importReshape;
    t["Flatten"] = importFlatten;
    t["Squeeze"] = importSqueeze;
    t["Unsqueeze"] = importUnsqueeze;
    t["Transpose"] = importTranspose;
    t["Concat"] = importConcat;
    t["Split"] = importSplit;
    t["Slice"] = importSlice;
    t["Gather"] = importGatherLike<dopt::GatherOp>;
    t["Expand"] = importExpand;
    t["Pad"] = importPad;
    t["Shape"] = importShape;
    t["Constant"] = importConstant;
    t["ConstantOfShape"] = importConstantOfShape;
    t["Range"] = importRange;
    t["Tile"] = importTile;
    t["DepthToSpace"] = importDepthSpace<true>;
    t["SpaceToDepth"] = importDepthSpace<false>;
    t["OneHot"] = importOneHot;
    t["GroupNormalization"] = importGroupNorm;
    t["Xor"] = importBinary<dopt::XorOp>;
    t["BitwiseAnd"] = importBitwise<dopt::AndOp>;
    t["BitwiseOr"] = importBitwise<dopt::OrOp>;
    t["BitwiseXor"] = importBitwise<dopt::XorOp>;
    t["BitwiseNot"] = importBitwise<dopt::NotOp>;
    t["BitShift"] = importBitShift;
    t["QuantizeLinear"] = importQuantizeLinear;
    t["GridSample"] = importGridSample;
    t["AffineGrid"] = importAffineGrid;
    t["Col2Im"] = importCol2Im;
    t["DFT"] = importDFT;
    t["STFT"] = importSTFT;
    t["HannWindow"] = importWindow<Window::Hann>;
    t["HammingWindow"] = importWindow<Window::Hamming>;
    t["BlackmanWindow"] = importWindow<Window::Blackman>;
    t["MelWeightMatrix"] = importMelWeightMatrix;
    t["BitCast"] = importBitCast;
    t["CausalConvWithState"] = importCausalConvWithState;
    t["LinearAttention"] = importLinearAttention;
    t["TensorScatter"] = importTensorScatter;
    t["DynamicQuantizeLinear"] = importDynamicQuantizeLinear;
    t["MatMulInteger"] = importIntegerMatMul<false>;
    t["QLinearMatMul"] = importIntegerMatMul<true>;
    t["ConvInteger"] = importIntegerConv<false>;
    t["QLinearConv"] = importIntegerConv<true>;
    t["DequantizeLinear"] = importDequantizeLinear;
    t["LpNormalization"] = importLpNormalization;
    t["LRN"] = importLRN;
    t["SwiGLU"] = importSwiGLU;
    t["Shrink"] = importShrink;
    t["MeanVarianceNormalization"] = importMeanVarianceNorm;
    t["EyeLike"] = importEyeLike;
    t["Einsum"] = importEinsum;
    t["CumSum"] = importCumulative<false>;
    t["CumProd"] = importCumulative<true>;
    t["ReverseSequence"] = importReverseSequence;
    t["CenterCropPad"] = importCenterCropPad;
    t["ScatterND"] = importScatterND;
    t["GatherND"] = importGatherND;
    t["GatherElements"] = importGatherLike<dopt::GatherElementsOp>;
    t["ScatterElements"] = importScatterElements;
    t["TopK"] = importTopK;
    t["Attention"] = importAttention;
    t["RotaryEmbedding"] = importRotaryEmbedding;
    t["RNN"] = importRecurrent<Recurrent::RNN>;
    t["GRU"] = importRecurrent<Recurrent::GRU>;
    t["LSTM"] = importRecurrent<Recurrent::LSTM>;
    t["InstanceNormalization"] = importInstanceNorm;
    t["Mod"] = importMod;
    return t;
  }();
  return table;
}
