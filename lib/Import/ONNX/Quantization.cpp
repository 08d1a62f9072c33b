//===- Quantization.cpp - ONNX quantization ops ---------------------------===//
//
// The importers of quantize/dequantize and the integer products of quantized
// models.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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

} // namespace

void onnximport::registerQuantizationImporters(llvm::StringMap<OpImporterFn> &t) {
  t["QuantizeLinear"] = importQuantizeLinear;
  t["DynamicQuantizeLinear"] = importDynamicQuantizeLinear;
  t["MatMulInteger"] = importIntegerMatMul<false>;
  t["QLinearMatMul"] = importIntegerMatMul<true>;
  t["ConvInteger"] = importIntegerConv<false>;
  t["QLinearConv"] = importIntegerConv<true>;
  t["DequantizeLinear"] = importDequantizeLinear;
}
