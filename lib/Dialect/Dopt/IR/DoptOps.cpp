//===- DoptOps.cpp - dopt op verification and type inference -------------===//
//
// Every dopt op infers its result types here. The same function is the op's
// shape verifier: MLIR's InferTypeOpInterface verifier compares the inferred
// types with the op's actual result types, and errors emitted here carry the
// op's location (for imported ops: the ONNX node name and file).
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cstring>

using namespace mlir;
using namespace distopt;
using namespace distopt::dopt;

//===----------------------------------------------------------------------===//
// Shared shape helpers
//===----------------------------------------------------------------------===//

std::optional<SmallVector<int64_t>>
dopt::broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (ArrayRef<int64_t> s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> result(rank, 1);
  for (ArrayRef<int64_t> s : shapes) {
    size_t offset = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &r = result[offset + i];
      int64_t d = s[i];
      if (d == r || d == 1)
        continue;
      if (r == 1) {
        r = d;
        continue;
      }
      return std::nullopt;
    }
  }
  return result;
}

int64_t dopt::windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                               int64_t padBegin, int64_t padEnd,
                               int64_t dilation, bool ceilMode) {
  int64_t effective = (kernel - 1) * dilation + 1;
  int64_t span = in + padBegin + padEnd - effective;
  if (span < 0)
    return -1;
  int64_t out = ceilMode ? (span + stride - 1) / stride + 1 : span / stride + 1;
  // With ceil_mode the last window must start inside the input or the begin
  // padding (ONNX/PyTorch rule).
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

int64_t dopt::windowTapCount(int64_t out, int64_t in, int64_t kernel,
                             int64_t stride, int64_t padBegin,
                             int64_t padEnd, int64_t dilation,
                             bool countIncludePad) {
  int64_t lo = countIncludePad ? -padBegin : 0;
  int64_t hi = in + (countIncludePad ? padEnd : 0);
  int64_t count = 0;
  for (int64_t k = 0; k < kernel; ++k) {
    int64_t p = out * stride - padBegin + k * dilation;
    count += p >= lo && p < hi;
  }
  return std::max<int64_t>(count, 1);
}

int64_t dopt::transposedOutputSize(int64_t in, int64_t kernel,
                                   int64_t stride, int64_t padBegin,
                                   int64_t padEnd, int64_t dilation,
                                   int64_t outputPadding) {
  return stride * (in - 1) + outputPadding + dilation * (kernel - 1) + 1 -
         padBegin - padEnd;
}

std::optional<double> dopt::splatFloatConstant(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

int64_t dopt::sliceSize(int64_t start, int64_t end, int64_t step) {
  if (step > 0)
    return end > start ? (end - start + step - 1) / step : 0;
  return start > end ? (start - end + (-step) - 1) / (-step) : 0;
}

namespace {
/// Rows of `value` around `dim`: outer count, slice count and bytes per
/// slice (of the dimensions after `dim`); std::nullopt for bit-packed i1.
std::optional<std::tuple<int64_t, int64_t, size_t>>
sliceLayout(DenseElementsAttr value, int64_t dim) {
  auto type = cast<RankedTensorType>(value.getType());
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  if (bits % 8 != 0 || dim < 0 || dim >= type.getRank())
    return std::nullopt;
  int64_t outer = 1, inner = bits / 8;
  for (int64_t d = 0; d < dim; ++d)
    outer *= type.getDimSize(d);
  for (int64_t d = dim + 1; d < type.getRank(); ++d)
    inner *= type.getDimSize(d);
  return std::make_tuple(outer, type.getDimSize(dim),
                         static_cast<size_t>(inner));
}
} // namespace

bool dopt::isUniformAlong(DenseElementsAttr value, int64_t dim) {
  if (value.isSplat())
    return true;
  auto layout = sliceLayout(value, dim);
  if (!layout)
    return false;
  auto [outer, count, bytes] = *layout;
  ArrayRef<char> raw = value.getRawData();
  for (int64_t o = 0; o < outer; ++o) {
    const char *first = raw.data() + o * count * bytes;
    for (int64_t i = 1; i < count; ++i)
      if (std::memcmp(first, first + i * bytes, bytes) != 0)
        return false;
  }
  return true;
}

DenseElementsAttr dopt::resizeUniform(DenseElementsAttr value, int64_t dim,
                                      int64_t size) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  auto local = RankedTensorType::get(shape, type.getElementType());
  if (value.isSplat())
    return value.resizeSplat(local);
  auto [outer, count, bytes] = *sliceLayout(value, dim);
  ArrayRef<char> raw = value.getRawData();
  SmallVector<char> data;
  data.reserve(outer * size * bytes);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < size; ++i)
      data.append(raw.begin() + o * count * bytes,
                  raw.begin() + o * count * bytes + bytes);
  return DenseElementsAttr::getFromRawBuffer(local, data);
}

namespace {
/// Collects an error message and emits it (when a location is available) with
/// the op name in front, the way MLIR's own op verifiers print.
struct Failer {
  std::optional<Location> loc;
  StringRef opName;
  LogicalResult operator()(const Twine &msg) const {
    return emitOptionalError(loc, "'", opName, "' op ", msg);
  }
};

RankedTensorType tensorType(Value v) {
  return v ? dyn_cast<RankedTensorType>(v.getType()) : RankedTensorType();
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, ", ");
  os << "]";
  return s;
}

/// The element types of Dopt_Tensor (DoptOps.td).
bool isDoptElementType(Type t) {
  return t.isF16() || t.isBF16() || t.isF32() || t.isF64() || t.isInteger(1) ||
         t.isSignlessInteger(8) || t.isSignlessInteger(16) ||
         t.isSignlessInteger(32) || t.isSignlessInteger(64) ||
         t.isUnsignedInteger(8) || t.isUnsignedInteger(16) ||
         t.isUnsignedInteger(32) || t.isUnsignedInteger(64);
}

LogicalResult requireOperandTypes(const Failer &fail, ValueRange operands) {
  for (Value v : operands)
    if (!tensorType(v))
      return fail("operands must be ranked tensors");
  return success();
}

LogicalResult inferBroadcast(const Failer &fail, ValueRange operands,
                             Type resultElt, bool sameElementTypes,
                             SmallVectorImpl<Type> &out) {
  if (failed(requireOperandTypes(fail, operands)))
    return failure();
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : operands)
    shapes.push_back(tensorType(v).getShape());
  if (sameElementTypes) {
    Type elt = tensorType(operands.front()).getElementType();
    for (Value v : operands.drop_front())
      if (tensorType(v).getElementType() != elt)
        return fail("operand element types differ: " + typeStr(elt) +
                    " and " + typeStr(tensorType(v).getElementType()));
  }
  std::optional<SmallVector<int64_t>> shape = broadcastShapes(shapes);
  if (!shape) {
    std::string msg = "operand shapes are not broadcast-compatible:";
    for (Value v : operands)
      msg += " " + typeStr(v.getType());
    return fail(msg);
  }
  if (!resultElt)
    resultElt = tensorType(operands.front()).getElementType();
  out.push_back(RankedTensorType::get(*shape, resultElt));
  return success();
}

LogicalResult checkAxis(const Failer &fail, int64_t axis, int64_t rank,
                        StringRef what = "axis") {
  if (axis < 0 || axis >= rank)
    return fail(what + " " + Twine(axis) + " is out of range for rank " +
                Twine(rank));
  return success();
}

/// Axes must be non-negative, strictly increasing and below `rank`.
LogicalResult checkAxes(const Failer &fail, ArrayRef<int64_t> axes,
                        int64_t rank) {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (failed(checkAxis(fail, axes[i], rank)))
      return failure();
    if (i && axes[i] <= axes[i - 1])
      return fail("axes must be sorted and unique, got " + shapeStr(axes));
  }
  return success();
}

LogicalResult checkPositive(const Failer &fail, ArrayRef<int64_t> values,
                            size_t expected, StringRef what) {
  if (values.size() != expected)
    return fail(what + " must have " + Twine(expected) + " entries, got " +
                Twine(values.size()));
  for (int64_t v : values)
    if (v <= 0)
      return fail(what + " must be positive, got " + shapeStr(values));
  return success();
}

LogicalResult checkPads(const Failer &fail, ArrayRef<int64_t> pads,
                        size_t expected) {
  if (pads.size() != expected)
    return fail("pads must have " + Twine(expected) + " entries, got " +
                Twine(pads.size()));
  for (int64_t p : pads)
    if (p < 0)
      return fail("pads must be non-negative, got " + shapeStr(pads));
  return success();
}

/// Shared by max_pool and avg_pool: NCHW input, 2-D window.
LogicalResult inferPool(const Failer &fail, Value input,
                        ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                        ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                        bool ceilMode, SmallVectorImpl<Type> &out) {
  RankedTensorType in = tensorType(input);
  if (!in || in.getRank() != 4)
    return fail("input must be a 4-D (NCHW) tensor, got " +
                typeStr(input.getType()));
  if (failed(checkPositive(fail, kernel, 2, "kernel_shape")) ||
      failed(checkPositive(fail, strides, 2, "strides")) ||
      failed(checkPositive(fail, dilations, 2, "dilations")) ||
      failed(checkPads(fail, pads, 4)))
    return failure();
  SmallVector<int64_t> shape(in.getShape().take_front(2));
  for (int i = 0; i < 2; ++i) {
    if (pads[i] >= kernel[i] || pads[i + 2] >= kernel[i])
      return fail("pads " + shapeStr(pads) +
                  " must be smaller than the kernel " + shapeStr(kernel));
    int64_t o = windowOutputSize(in.getDimSize(2 + i), kernel[i], strides[i],
                                 pads[i], pads[i + 2], dilations[i], ceilMode);
    if (o <= 0)
      return fail("window " + shapeStr(kernel) + " does not fit input " +
                  typeStr(in));
    shape.push_back(o);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult inferSameType(const Failer &fail, Value input,
                            SmallVectorImpl<Type> &out) {
  if (!tensorType(input))
    return fail("operand must be a ranked tensor");
  out.push_back(input.getType());
  return success();
}

LogicalResult inferAxisOp(const Failer &fail, Value input, IntegerAttr axis,
                          SmallVectorImpl<Type> &out) {
  RankedTensorType t = tensorType(input);
  if (!t || !axis)
    return fail("needs a ranked tensor operand and an axis");
  if (failed(checkAxis(fail, axis.getInt(), t.getRank())))
    return failure();
  out.push_back(t);
  return success();
}

/// `norm` (scale or bias of a normalisation, gemm's C) must broadcast
/// (unidirectionally) to `target`, which the message calls `targetName`.
LogicalResult checkBroadcastsTo(const Failer &fail, Value norm,
                                ArrayRef<int64_t> target, StringRef what,
                                StringRef targetName = "the normalised shape") {
  RankedTensorType t = tensorType(norm);
  if (!t)
    return fail(what + " must be a ranked tensor");
  ArrayRef<int64_t> s = t.getShape();
  bool ok = s.size() <= target.size();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    int64_t d = s[s.size() - 1 - i];
    ok = d == 1 || d == target[target.size() - 1 - i];
  }
  if (!ok)
    return fail(what + " of type " + typeStr(t) + " does not broadcast to " +
                targetName + " " + shapeStr(target));
  return success();
}
} // namespace

#define DOPT_FAILER(OP) Failer fail{location, OP::getOperationName()}

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ConstantOp);
  auto value = adaptor.getValueAttr();
  if (!value)
    return fail("requires a 'value' attribute");
  auto type = dyn_cast<RankedTensorType>(value.getShapedType());
  if (!type || !type.hasStaticShape())
    return fail("value must be a statically shaped tensor");
  out.push_back(type);
  return success();
}

LogicalResult WeightOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  DOPT_FAILER(WeightOp);
  auto typeAttr = adaptor.getTypeAttr();
  auto type =
      typeAttr ? dyn_cast<RankedTensorType>(typeAttr.getValue()) : nullptr;
  if (!type || !type.hasStaticShape())
    return fail("type must be a statically shaped tensor type");
  if (!isDoptElementType(type.getElementType()))
    return fail("type " + typeStr(type) + " does not have a dopt element type");
  if (!adaptor.getNameAttr() || adaptor.getName().empty())
    return fail("requires a non-empty name");
  // The stored data's element type: a wider float than the weight's.
  Type stored = type.getElementType();
  if (auto dataType = adaptor.getDataTypeAttr()) {
    stored = dataType.getValue();
    auto narrow = dyn_cast<FloatType>(type.getElementType());
    auto wide = dyn_cast<FloatType>(stored);
    if (!narrow || !wide || wide.getWidth() <= narrow.getWidth())
      return fail("data_type " + typeStr(stored) +
                  " must be a float type wider than the weight's " +
                  typeStr(type.getElementType()));
  }
  if (adaptor.getLocationAttr()) {
    if (adaptor.getLocation()->empty())
      return fail("external-data location must not be empty");
    if (adaptor.getOffsetAttr() && adaptor.getOffsetAttr().getInt() < 0)
      return fail("external-data offset must be non-negative");
    if (adaptor.getLengthAttr()) {
      int64_t bits = type.getNumElements() *
                     std::max<int64_t>(8, stored.getIntOrFloatBitWidth());
      int64_t need = type.getElementType().isInteger(1)
                         ? type.getNumElements()
                         : bits / 8;
      if (adaptor.getLengthAttr().getInt() < need)
        return fail("external-data length " +
                    Twine(adaptor.getLengthAttr().getInt()) +
                    " is smaller than the " + Twine(need) + " bytes of " +
                    typeStr(type));
    }
  } else if (adaptor.getOffsetAttr() || adaptor.getLengthAttr()) {
    return fail("offset/length need an external-data location");
  }
  out.push_back(type);
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define DOPT_BINARY(OP, BOOL_RESULT)                                           \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *ctx, std::optional<Location> location, Adaptor adaptor,     \
      SmallVectorImpl<Type> &out) {                                            \
    DOPT_FAILER(OP);                                                           \
    return inferBroadcast(fail, {adaptor.getLhs(), adaptor.getRhs()},          \
                          BOOL_RESULT ? IntegerType::get(ctx, 1) : Type(),     \
                          /*sameElementTypes=*/true, out);                     \
  }
DOPT_BINARY(AddOp, false)
DOPT_BINARY(SubOp, false)
DOPT_BINARY(MulOp, false)
DOPT_BINARY(DivOp, false)
DOPT_BINARY(MaxOp, false)
DOPT_BINARY(MinOp, false)
DOPT_BINARY(EqualOp, true)
DOPT_BINARY(LessOp, true)
DOPT_BINARY(LessEqualOp, true)
DOPT_BINARY(GreaterOp, true)
DOPT_BINARY(GreaterEqualOp, true)
DOPT_BINARY(AndOp, false)
DOPT_BINARY(OrOp, false)
DOPT_BINARY(XorOp, false)
DOPT_BINARY(ShiftLeftOp, false)
DOPT_BINARY(ShiftRightOp, false)
#undef DOPT_BINARY

LogicalResult PowOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> location,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  DOPT_FAILER(PowOp);
  return inferBroadcast(fail, {adaptor.getLhs(), adaptor.getRhs()}, Type(),
                        /*sameElementTypes=*/false, out);
}

#define DOPT_UNARY(OP)                                                         \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> location,         \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &out) {             \
    DOPT_FAILER(OP);                                                           \
    return inferSameType(fail, adaptor.getInput(), out);                       \
  }
DOPT_UNARY(NegOp)
DOPT_UNARY(AbsOp)
DOPT_UNARY(NotOp)
DOPT_UNARY(SqrtOp)
DOPT_UNARY(ReciprocalOp)
DOPT_UNARY(ExpOp)
DOPT_UNARY(LogOp)
DOPT_UNARY(TanhOp)
DOPT_UNARY(SigmoidOp)
DOPT_UNARY(ErfOp)
DOPT_UNARY(FloorOp)
DOPT_UNARY(CeilOp)
DOPT_UNARY(RoundOp)
DOPT_UNARY(SinOp)
DOPT_UNARY(CosOp)
DOPT_UNARY(AsinOp)
DOPT_UNARY(AcosOp)
DOPT_UNARY(AtanOp)
DOPT_UNARY(SinhOp)
DOPT_UNARY(CoshOp)
DOPT_UNARY(AsinhOp)
DOPT_UNARY(AcoshOp)
DOPT_UNARY(AtanhOp)
DOPT_UNARY(ReluOp)
DOPT_UNARY(LeakyReluOp)
#undef DOPT_UNARY

LogicalResult GeluOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  DOPT_FAILER(GeluOp);
  StringRef approx = adaptor.getApproximate();
  if (approx != "none" && approx != "tanh")
    return fail("approximate must be \"none\" or \"tanh\", got \"" + approx +
                "\"");
  return inferSameType(fail, adaptor.getInput(), out);
}

LogicalResult RngKeyOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location>, Adaptor,
                                         SmallVectorImpl<Type> &out) {
  out.push_back(RankedTensorType::get({}, IntegerType::get(context, 64)));
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(DropoutOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!isa<FloatType>(in.getElementType()))
    return fail("input must hold floats, got " + typeStr(in));
  RankedTensorType key = tensorType(adaptor.getKey());
  if (key.getRank() != 0)
    return fail("key must be a tensor<i64>, got " + typeStr(key));
  float ratio = adaptor.getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return fail("ratio must be in [0, 1), got " + std::to_string(ratio));
  if (adaptor.getStream() < 0 || adaptor.getStream() >= (int64_t(1) << 23))
    return fail("stream must be in [0, 2^23)");
  if (Value offsets = adaptor.getOffsets()) {
    RankedTensorType o = tensorType(offsets);
    if (o.getRank() != 1 || o.getDimSize(0) != in.getRank())
      return fail("offsets must be a tensor<" + std::to_string(in.getRank()) +
                  "xi64>, got " + typeStr(o));
  }
  if (auto whole = adaptor.getGlobalShapeAttr()) {
    if (whole.size() != in.getRank())
      return fail("global_shape must have one size per input dimension");
    for (auto [g, l] : llvm::zip(whole.asArrayRef(), in.getShape()))
      if (g < l)
        return fail("global_shape is smaller than the input");
  }
  out.push_back(in);
  return success();
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  DOPT_FAILER(WhereOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  Type lhsElt = tensorType(adaptor.getLhs()).getElementType();
  Type rhsElt = tensorType(adaptor.getRhs()).getElementType();
  if (lhsElt != rhsElt)
    return fail("value element types differ: " + typeStr(lhsElt) + " and " +
                typeStr(rhsElt));
  return inferBroadcast(
      fail, {adaptor.getCondition(), adaptor.getLhs(), adaptor.getRhs()},
      lhsElt, /*sameElementTypes=*/false, out);
}

LogicalResult CastOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  DOPT_FAILER(CastOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getToAttr())
    return fail("needs a ranked tensor operand and a 'to' type");
  Type to = adaptor.getTo();
  if (!isDoptElementType(to))
    return fail("cannot cast to " + typeStr(to) + ": not a dopt element type");
  out.push_back(in.clone(to));
  return success();
}

/// Bits per element as stored: a boolean is one byte.
static unsigned storedBits(Type t) {
  return t.isInteger(1) ? 8 : t.getIntOrFloatBitWidth();
}

LogicalResult BitcastOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(BitcastOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getToAttr())
    return fail("needs a ranked tensor operand and a 'to' type");
  Type to = adaptor.getTo();
  if (!isDoptElementType(to))
    return fail("cannot reinterpret as " + typeStr(to) +
                ": not a dopt element type");
  Type from = in.getElementType();
  if (storedBits(from) != storedBits(to))
    return fail("reinterprets " + typeStr(from) + " (" +
                std::to_string(storedBits(from)) + " bits) as " + typeStr(to) +
                " (" + std::to_string(storedBits(to)) +
                " bits): the widths must be equal");
  out.push_back(in.clone(to));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(SoftmaxOp);
  return inferAxisOp(fail, adaptor.getInput(), adaptor.getAxisAttr(), out);
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &out) {
  DOPT_FAILER(LogSoftmaxOp);
  return inferAxisOp(fail, adaptor.getInput(), adaptor.getAxisAttr(), out);
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  DOPT_FAILER(BatchNormOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  if (in.getRank() < 2)
    return fail("input must have rank >= 2 (N, C, ...), got " + typeStr(in));
  int64_t channels = in.getDimSize(1);
  const char *names[] = {"scale", "bias", "mean", "var"};
  Value params[] = {adaptor.getScale(), adaptor.getBias(), adaptor.getMean(),
                    adaptor.getVar()};
  for (int i = 0; i < 4; ++i) {
    RankedTensorType p = tensorType(params[i]);
    if (p.getRank() != 1 || p.getDimSize(0) != channels)
      return fail(Twine(names[i]) + " must be 1-D with " + Twine(channels) +
                  " channels, got " + typeStr(p));
    if (p.getElementType() != in.getElementType())
      return fail(Twine(names[i]) + " element type " +
                  typeStr(p.getElementType()) + " differs from the input's " +
                  typeStr(in.getElementType()));
  }
  out.push_back(in);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  DOPT_FAILER(LayerNormOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!adaptor.getAxisAttr())
    return fail("requires an 'axis' attribute");
  int64_t axis = adaptor.getAxisAttr().getInt();
  if (failed(checkAxis(fail, axis, in.getRank())))
    return failure();
  ArrayRef<int64_t> normalized = in.getShape().drop_front(axis);
  const char *names[] = {"scale", "bias"};
  Value params[] = {adaptor.getScale(), adaptor.getBias()};
  for (int i = 0; i < 2; ++i) {
    if (!params[i])
      continue;
    if (failed(checkBroadcastsTo(fail, params[i], normalized, names[i])))
      return failure();
    Type elt = tensorType(params[i]).getElementType();
    if (elt != in.getElementType())
      return fail(Twine(names[i]) + " element type " + typeStr(elt) +
                  " differs from the input's " + typeStr(in.getElementType()));
  }
  out.push_back(in);
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  DOPT_FAILER(AttentionOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType q = tensorType(adaptor.getQuery()),
                   k = tensorType(adaptor.getKey()),
                   v = tensorType(adaptor.getValue());
  if (q.getRank() < 2)
    return fail("query must have rank >= 2 ([..., Tq, D]), got " + typeStr(q));
  if (k.getRank() != q.getRank() || v.getRank() != q.getRank())
    return fail("query, key and value must have the same rank, got " +
                typeStr(q) + ", " + typeStr(k) + " and " + typeStr(v));
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return fail("query, key and value must have the same element type, got " +
                typeStr(q) + ", " + typeStr(k) + " and " + typeStr(v));
  int64_t r = q.getRank();
  if (q.getShape().drop_back(2) != k.getShape().drop_back(2) ||
      q.getShape().drop_back(2) != v.getShape().drop_back(2))
    return fail("query, key and value must have the same leading dimensions, "
                "got " +
                typeStr(q) + ", " + typeStr(k) + " and " + typeStr(v));
  if (q.getDimSize(r - 1) != k.getDimSize(r - 1))
    return fail("query and key must have the same last dimension, got " +
                typeStr(q) + " and " + typeStr(k));
  if (k.getDimSize(r - 2) != v.getDimSize(r - 2))
    return fail("key and value must have as many rows (keys), got " +
                typeStr(k) + " and " + typeStr(v));
  SmallVector<int64_t> scores(q.getShape().drop_back(1));
  scores.push_back(k.getDimSize(r - 2));
  for (auto [name, operand] :
       {std::pair<StringRef, Value>{"keep", adaptor.getKeep()},
        {"bias", adaptor.getBias()}}) {
    if (!operand)
      continue;
    RankedTensorType t = tensorType(operand);
    std::optional<SmallVector<int64_t>> b =
        broadcastShapes({t.getShape(), ArrayRef<int64_t>(scores)});
    if (t.getRank() > r || !b || ArrayRef<int64_t>(*b) != ArrayRef(scores))
      return fail(name.str() + " must broadcast to the scores " +
                  typeStr(RankedTensorType::get(scores, q.getElementType())) +
                  ", got " + typeStr(t));
  }
  if (auto bias = adaptor.getBias();
      bias && tensorType(bias).getElementType() != q.getElementType())
    return fail("bias must have the query's element type, got " +
                typeStr(tensorType(bias)));
  SmallVector<int64_t> shape(q.getShape().drop_back(1));
  shape.push_back(v.getDimSize(r - 1));
  out.push_back(RankedTensorType::get(shape, q.getElementType()));
  return success();
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  DOPT_FAILER(MatMulOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType lhs = tensorType(adaptor.getLhs());
  RankedTensorType rhs = tensorType(adaptor.getRhs());
  if (lhs.getRank() == 0 || rhs.getRank() == 0)
    return fail("operands must have rank >= 1");
  if (lhs.getElementType() != rhs.getElementType())
    return fail("operand element types differ: " +
                typeStr(lhs.getElementType()) + " and " +
                typeStr(rhs.getElementType()));
  // NumPy promotion of 1-D operands.
  SmallVector<int64_t> l(lhs.getShape()), r(rhs.getShape());
  bool lhsVec = l.size() == 1, rhsVec = r.size() == 1;
  if (lhsVec)
    l.insert(l.begin(), 1);
  if (rhsVec)
    r.push_back(1);
  int64_t m = l[l.size() - 2], k = l.back();
  int64_t k2 = r[r.size() - 2], n = r.back();
  if (k != k2)
    return fail("contracting dimensions differ: " + typeStr(lhs) + " and " +
                typeStr(rhs));
  std::optional<SmallVector<int64_t>> batch =
      broadcastShapes({ArrayRef<int64_t>(l).drop_back(2),
                       ArrayRef<int64_t>(r).drop_back(2)});
  if (!batch)
    return fail("batch dimensions are not broadcast-compatible: " +
                typeStr(lhs) + " and " + typeStr(rhs));
  SmallVector<int64_t> shape(*batch);
  if (!lhsVec)
    shape.push_back(m);
  if (!rhsVec)
    shape.push_back(n);
  out.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  DOPT_FAILER(GemmOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType a = tensorType(adaptor.getA());
  RankedTensorType b = tensorType(adaptor.getB());
  if (a.getRank() != 2 || b.getRank() != 2)
    return fail("A and B must be 2-D, got " + typeStr(a) + " and " +
                typeStr(b));
  if (a.getElementType() != b.getElementType())
    return fail("A and B element types differ");
  bool ta = adaptor.getTransA(), tb = adaptor.getTransB();
  int64_t m = a.getDimSize(ta ? 1 : 0), k = a.getDimSize(ta ? 0 : 1);
  int64_t k2 = b.getDimSize(tb ? 1 : 0), n = b.getDimSize(tb ? 0 : 1);
  if (k != k2)
    return fail("contracting dimensions differ: op(A) is " + Twine(m) + "x" +
                Twine(k) + ", op(B) is " + Twine(k2) + "x" + Twine(n));
  if (Value c = adaptor.getC()) {
    RankedTensorType ct = tensorType(c);
    if (ct.getElementType() != a.getElementType())
      return fail("C element type differs from A's");
    int64_t mn[2] = {m, n};
    if (failed(checkBroadcastsTo(fail, c, mn, "C", "the result shape")))
      return failure();
  }
  out.push_back(RankedTensorType::get({m, n}, a.getElementType()));
  return success();
}

/// dopt.conv's and dopt.conv_transpose's operands: 4-D input and weight
/// (`layout` names the weight's) of one element type, a non-empty kernel.
static LogicalResult checkConvOperands(const Failer &fail,
                                       RankedTensorType in, RankedTensorType w,
                                       StringRef layout) {
  if (in.getRank() != 4 || w.getRank() != 4)
    return fail("input and weight must be 4-D (NCHW, " + layout + "), got " +
                typeStr(in) + " and " + typeStr(w));
  if (in.getElementType() != w.getElementType())
    return fail("input and weight element types differ");
  if (w.getDimSize(2) <= 0 || w.getDimSize(3) <= 0)
    return fail("weight " + typeStr(w) + " has an empty kernel");
  return success();
}

/// Two positive strides and dilations, four non-negative pads.
static LogicalResult checkConvWindow(const Failer &fail,
                                     ArrayRef<int64_t> strides,
                                     ArrayRef<int64_t> dilations,
                                     ArrayRef<int64_t> pads) {
  if (failed(checkPositive(fail, strides, 2, "strides")) ||
      failed(checkPositive(fail, dilations, 2, "dilations")) ||
      failed(checkPads(fail, pads, 4)))
    return failure();
  return success();
}

/// An optional bias: 1-D, one entry per output channel (`m`), the input's
/// element type.
static LogicalResult checkConvBias(const Failer &fail, Value bias,
                                   int64_t m, RankedTensorType in) {
  if (!bias)
    return success();
  RankedTensorType bt = tensorType(bias);
  if (bt.getRank() != 1 || bt.getDimSize(0) != m)
    return fail("bias must be 1-D with " + Twine(m) + " entries, got " +
                typeStr(bt));
  if (bt.getElementType() != in.getElementType())
    return fail("bias element type " + typeStr(bt.getElementType()) +
                " differs from the input's " + typeStr(in.getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ConvOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  RankedTensorType w = tensorType(adaptor.getWeight());
  if (failed(checkConvOperands(fail, in, w, "MCkHkW")))
    return failure();
  if (!adaptor.getGroupAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr() || !adaptor.getDilationsAttr())
    return fail("requires strides, pads, dilations and group");
  int64_t group = adaptor.getGroupAttr().getInt();
  ArrayRef<int64_t> strides = adaptor.getStrides(), pads = adaptor.getPads(),
                    dilations = adaptor.getDilations();
  if (failed(checkConvWindow(fail, strides, dilations, pads)))
    return failure();
  int64_t c = in.getDimSize(1), m = w.getDimSize(0);
  if (group <= 0 || c % group != 0 || m % group != 0)
    return fail("group " + Twine(group) + " must be positive and divide the " +
                Twine(c) + " input and " + Twine(m) + " output channels");
  if (w.getDimSize(1) * group != c)
    return fail("weight has " + Twine(w.getDimSize(1)) +
                " input channels per group, expected " + Twine(c) + "/" +
                Twine(group));
  if (failed(checkConvBias(fail, adaptor.getBias(), m, in)))
    return failure();
  SmallVector<int64_t> shape = {in.getDimSize(0), m};
  for (int i = 0; i < 2; ++i) {
    int64_t o = windowOutputSize(in.getDimSize(2 + i), w.getDimSize(2 + i),
                                 strides[i], pads[i], pads[i + 2],
                                 dilations[i], /*ceilMode=*/false);
    if (o <= 0)
      return fail("kernel " + typeStr(w) + " does not fit input " +
                  typeStr(in) + " with pads " + shapeStr(pads));
    shape.push_back(o);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult ConvTransposeOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ConvTransposeOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())))
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  RankedTensorType w = tensorType(adaptor.getWeight());
  if (failed(checkConvOperands(fail, in, w, "C(M/group)kHkW")))
    return failure();
  if (!adaptor.getGroupAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr() || !adaptor.getDilationsAttr() ||
      !adaptor.getOutputPaddingAttr())
    return fail("requires strides, pads, dilations, output_padding and group");
  int64_t group = adaptor.getGroupAttr().getInt();
  ArrayRef<int64_t> strides = adaptor.getStrides(), pads = adaptor.getPads(),
                    dilations = adaptor.getDilations(),
                    outPad = adaptor.getOutputPadding();
  if (failed(checkConvWindow(fail, strides, dilations, pads)))
    return failure();
  if (outPad.size() != 2)
    return fail("output_padding must have 2 entries, got " +
                Twine(outPad.size()));
  for (int i = 0; i < 2; ++i)
    if (outPad[i] < 0 || outPad[i] >= std::max(strides[i], dilations[i]))
      return fail("output_padding " + shapeStr(outPad) +
                  " must be non-negative and less than the stride or the "
                  "dilation (strides " +
                  shapeStr(strides) + ", dilations " + shapeStr(dilations) +
                  ")");
  int64_t c = in.getDimSize(1);
  if (group <= 0 || c % group != 0)
    return fail("group " + Twine(group) + " must be positive and divide the " +
                Twine(c) + " input channels");
  if (w.getDimSize(0) != c)
    return fail("weight has " + Twine(w.getDimSize(0)) +
                " input channels, expected " + Twine(c) + " (the input's)");
  int64_t m = w.getDimSize(1) * group;
  if (failed(checkConvBias(fail, adaptor.getBias(), m, in)))
    return failure();
  SmallVector<int64_t> shape = {in.getDimSize(0), m};
  for (int i = 0; i < 2; ++i) {
    int64_t o = transposedOutputSize(in.getDimSize(2 + i), w.getDimSize(2 + i),
                                     strides[i], pads[i], pads[i + 2],
                                     dilations[i], outPad[i]);
    if (o <= 0)
      return fail("pads " + shapeStr(pads) + " crop the whole output of input " +
                  typeStr(in) + " and weight " + typeStr(w));
    shape.push_back(o);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(MaxPoolOp);
  if (!adaptor.getKernelShapeAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr() || !adaptor.getDilationsAttr())
    return fail("requires kernel_shape, strides, pads and dilations");
  return inferPool(fail, adaptor.getInput(), adaptor.getKernelShape(),
                   adaptor.getStrides(), adaptor.getPads(),
                   adaptor.getDilations(), adaptor.getCeilMode(), out);
}

LogicalResult AvgPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(AvgPoolOp);
  if (!adaptor.getKernelShapeAttr() || !adaptor.getStridesAttr() ||
      !adaptor.getPadsAttr())
    return fail("requires kernel_shape, strides and pads");
  int64_t ones[2] = {1, 1};
  return inferPool(fail, adaptor.getInput(), adaptor.getKernelShape(),
                   adaptor.getStrides(), adaptor.getPads(), ones,
                   adaptor.getCeilMode(), out);
}

LogicalResult GlobalAvgPoolOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &out) {
  DOPT_FAILER(GlobalAvgPoolOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || in.getRank() < 3)
    return fail("input must have rank >= 3 (N, C, spatial...)");
  SmallVector<int64_t> shape(in.getShape());
  std::fill(shape.begin() + 2, shape.end(), 1);
  out.push_back(in.clone(shape));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
template <typename Adaptor>
LogicalResult inferReduce(const Failer &fail, Adaptor adaptor,
                          SmallVectorImpl<Type> &out) {
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getAxesAttr())
    return fail("needs a ranked tensor operand and axes");
  ArrayRef<int64_t> axes = adaptor.getAxes();
  if (failed(checkAxes(fail, axes, in.getRank())))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    if (!llvm::is_contained(axes, i))
      shape.push_back(in.getDimSize(i));
    else if (adaptor.getKeepdims())
      shape.push_back(1);
  }
  out.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}
} // namespace

#define DOPT_REDUCE(OP)                                                        \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> location,         \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &out) {             \
    DOPT_FAILER(OP);                                                           \
    return inferReduce(fail, adaptor, out);                                    \
  }
DOPT_REDUCE(ReduceSumOp)
DOPT_REDUCE(ReduceMeanOp)
DOPT_REDUCE(ReduceMaxOp)
#undef DOPT_REDUCE

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ReshapeOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getShapeAttr())
    return fail("needs a ranked tensor operand and a shape");
  ArrayRef<int64_t> shape = adaptor.getShape();
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return fail("shape " + shapeStr(shape) +
                  " must be fully resolved (no negative sizes)");
    count *= d;
  }
  if (count != in.getNumElements())
    return fail("cannot reshape " + typeStr(in) + " (" +
                Twine(in.getNumElements()) + " elements) to " +
                shapeStr(shape) + " (" + Twine(count) + " elements)");
  out.push_back(in.clone(shape));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &out) {
  DOPT_FAILER(TransposeOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getPermAttr())
    return fail("needs a ranked tensor operand and perm");
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if ((int64_t)perm.size() != in.getRank())
    return fail("perm " + shapeStr(perm) + " must have " +
                Twine(in.getRank()) + " entries");
  llvm::SmallSet<int64_t, 8> seen;
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || !seen.insert(p).second)
      return fail("perm " + shapeStr(perm) + " is not a permutation of 0.." +
                  Twine(in.getRank() - 1));
    shape.push_back(in.getDimSize(p));
  }
  out.push_back(in.clone(shape));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ConcatOp);
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return fail("needs at least one input");
  if (failed(requireOperandTypes(fail, inputs)) || !adaptor.getAxisAttr())
    return failure();
  RankedTensorType first = tensorType(inputs.front());
  int64_t axis = adaptor.getAxisAttr().getInt();
  if (failed(checkAxis(fail, axis, first.getRank())))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (Value v : inputs.drop_front()) {
    RankedTensorType t = tensorType(v);
    if (t.getElementType() != first.getElementType())
      return fail("inputs have different element types: " + typeStr(first) +
                  " and " + typeStr(t));
    if (t.getRank() != first.getRank())
      return fail("inputs have different ranks: " + typeStr(first) + " and " +
                  typeStr(t));
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != axis && t.getDimSize(i) != shape[i])
        return fail("inputs differ in dimension " + Twine(i) +
                    " (not the concat axis): " + typeStr(first) + " and " +
                    typeStr(t));
    shape[axis] += t.getDimSize(axis);
  }
  out.push_back(first.clone(shape));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  DOPT_FAILER(SplitOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getAxisAttr() || !adaptor.getSizesAttr())
    return fail("needs a ranked tensor operand, axis and sizes");
  int64_t axis = adaptor.getAxisAttr().getInt();
  if (failed(checkAxis(fail, axis, in.getRank())))
    return failure();
  ArrayRef<int64_t> sizes = adaptor.getSizes();
  if (sizes.empty())
    return fail("sizes must not be empty");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return fail("sizes must be non-negative, got " + shapeStr(sizes));
    total += s;
  }
  if (total != in.getDimSize(axis))
    return fail("sizes " + shapeStr(sizes) + " add up to " + Twine(total) +
                ", but dimension " + Twine(axis) + " has " +
                Twine(in.getDimSize(axis)));
  for (int64_t s : sizes) {
    SmallVector<int64_t> shape(in.getShape());
    shape[axis] = s;
    out.push_back(in.clone(shape));
  }
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  DOPT_FAILER(SliceOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getStartsAttr() || !adaptor.getEndsAttr() ||
      !adaptor.getStepsAttr())
    return fail("needs a ranked tensor operand, starts, ends and steps");
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds(),
                    steps = adaptor.getSteps();
  int64_t rank = in.getRank();
  if ((int64_t)starts.size() != rank || (int64_t)ends.size() != rank ||
      (int64_t)steps.size() != rank)
    return fail("starts, ends and steps must have one entry per dimension (" +
                Twine(rank) + ")");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t d = in.getDimSize(i), s = starts[i], e = ends[i], st = steps[i];
    if (st == 0)
      return fail("steps must be non-zero");
    bool ok = st > 0 ? (0 <= s && s <= d && s <= e && e <= d)
                     : (-1 <= e && e <= s && s <= d - 1);
    if (!ok && !(st < 0 && d == 0 && s == -1 && e == -1))
      return fail("slice [" + Twine(s) + ":" + Twine(e) + ":" + Twine(st) +
                  "] of dimension " + Twine(i) + " (size " + Twine(d) +
                  ") is not normalised");
    shape.push_back(sliceSize(s, e, st));
  }
  out.push_back(in.clone(shape));
  return success();
}

LogicalResult CheckIndicesOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &out) {
  DOPT_FAILER(CheckIndicesOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())) ||
      !adaptor.getExtentAttr())
    return failure();
  if (adaptor.getExtentAttr().getInt() < 0)
    return fail("extent " + Twine(adaptor.getExtentAttr().getInt()) +
                " must not be negative");
  out.push_back(tensorType(adaptor.getIndices()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  DOPT_FAILER(GatherOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())) ||
      !adaptor.getAxisAttr())
    return failure();
  RankedTensorType data = tensorType(adaptor.getData());
  RankedTensorType indices = tensorType(adaptor.getIndices());
  int64_t axis = adaptor.getAxisAttr().getInt();
  if (failed(checkAxis(fail, axis, data.getRank())))
    return failure();
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  out.push_back(data.clone(shape));
  return success();
}

/// GatherElements and ScatterElements: `indices` has `data`'s rank and,
/// off the axis, no dimension longer than data's.
static LogicalResult checkElementIndices(const Failer &fail,
                                         RankedTensorType data,
                                         RankedTensorType indices,
                                         int64_t axis) {
  if (failed(checkAxis(fail, axis, data.getRank())))
    return failure();
  if (indices.getRank() != data.getRank())
    return fail("indices " + shapeStr(indices.getShape()) +
                " must have the data's rank (" + Twine(data.getRank()) +
                ", data " + shapeStr(data.getShape()) + ")");
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != axis && indices.getDimSize(d) > data.getDimSize(d))
      return fail("indices " + shapeStr(indices.getShape()) +
                  " are longer than the data " + shapeStr(data.getShape()) +
                  " in dimension " + Twine(d) + " (not the axis)");
  if (data.getDimSize(axis) == 0 && indices.getNumElements() != 0)
    return fail("indices into an empty axis " + Twine(axis));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &out) {
  DOPT_FAILER(GatherElementsOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())) ||
      !adaptor.getAxisAttr())
    return failure();
  RankedTensorType data = tensorType(adaptor.getData());
  RankedTensorType indices = tensorType(adaptor.getIndices());
  if (failed(checkElementIndices(fail, data, indices,
                                 adaptor.getAxisAttr().getInt())))
    return failure();
  out.push_back(data.clone(indices.getShape()));
  return success();
}

LogicalResult ScatterElementsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ScatterElementsOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())) ||
      !adaptor.getAxisAttr())
    return failure();
  RankedTensorType data = tensorType(adaptor.getData());
  RankedTensorType indices = tensorType(adaptor.getIndices());
  RankedTensorType updates = tensorType(adaptor.getUpdates());
  if (failed(checkElementIndices(fail, data, indices,
                                 adaptor.getAxisAttr().getInt())))
    return failure();
  if (updates.getShape() != indices.getShape())
    return fail("updates " + shapeStr(updates.getShape()) +
                " must have the indices' shape " +
                shapeStr(indices.getShape()));
  if (updates.getElementType() != data.getElementType())
    return fail("updates must have the data's element type");
  StringRef r = adaptor.getReduction();
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    return fail("unknown reduction '" + r +
                "' (none, add, mul, max or min)");
  out.push_back(data);
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &out) {
  DOPT_FAILER(TopKOp);
  if (failed(requireOperandTypes(fail, adaptor.getOperands())) ||
      !adaptor.getAxisAttr() || !adaptor.getKAttr())
    return failure();
  RankedTensorType in = tensorType(adaptor.getInput());
  int64_t axis = adaptor.getAxisAttr().getInt();
  if (failed(checkAxis(fail, axis, in.getRank())))
    return failure();
  int64_t k = adaptor.getKAttr().getInt(), n = in.getDimSize(axis);
  if (k < 0 || k > n)
    return fail("k = " + Twine(k) + " is outside [0, " + Twine(n) +
                "] (the extent of axis " + Twine(axis) + ")");
  SmallVector<int64_t> shape(in.getShape());
  shape[axis] = k;
  out.push_back(in.clone(shape));
  out.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ExpandOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getShapeAttr())
    return fail("needs a ranked tensor operand and a shape");
  ArrayRef<int64_t> target = adaptor.getShape();
  for (int64_t d : target)
    if (d < 0)
      return fail("shape " + shapeStr(target) + " must be non-negative");
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes({in.getShape(), target});
  if (!shape)
    return fail("cannot expand " + typeStr(in) + " to " + shapeStr(target));
  out.push_back(in.clone(*shape));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> location,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  DOPT_FAILER(PadOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getPadsAttr())
    return fail("needs a ranked tensor operand and pads");
  int64_t rank = in.getRank();
  ArrayRef<int64_t> pads = adaptor.getPads();
  if (failed(checkPads(fail, pads, 2 * rank)))
    return failure();
  StringRef mode = adaptor.getMode();
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return fail("mode must be \"constant\", \"reflect\" or \"edge\", got \"" +
                mode + "\"");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t d = in.getDimSize(i);
    if (mode == "reflect" && (pads[i] >= d || pads[i + rank] >= d))
      return fail("reflect padding of dimension " + Twine(i) +
                  " must be smaller than its size " + Twine(d));
    if (mode == "edge" && d == 0 && (pads[i] || pads[i + rank]))
      return fail("edge padding of the empty dimension " + Twine(i));
    shape.push_back(d + pads[i] + pads[i + rank]);
  }
  out.push_back(in.clone(shape));
  return success();
}

LogicalResult ShapeOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  DOPT_FAILER(ShapeOp);
  RankedTensorType in = tensorType(adaptor.getInput());
  if (!in || !adaptor.getStartAttr() || !adaptor.getEndAttr())
    return fail("needs a ranked tensor operand, start and end");
  int64_t start = adaptor.getStartAttr().getInt();
  int64_t end = adaptor.getEndAttr().getInt();
  if (start < 0 || start > end || end > in.getRank())
    return fail("[start, end) = [" + Twine(start) + ", " + Twine(end) +
                ") is not a range within rank " + Twine(in.getRank()));
  out.push_back(RankedTensorType::get({end - start}, IntegerType::get(ctx, 64)));
  return success();
}

//===----------------------------------------------------------------------===//
// TableGen'd op definitions
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// FLOPs per element of the elementwise ops that count other than one
// (ElementwiseOpInterface; the planner's cost model reads them).
//===----------------------------------------------------------------------===//

// 1 / (1 + exp(-x)): neg, exp, add, reciprocal.
double SigmoidOp::getFlopsPerElement() { return 4.0; }
// x >= 0 ? x : alpha·x: a compare and a multiply.
double LeakyReluOp::getFlopsPerElement() { return 2.0; }
// none: 0.5·x·(1 + erf(x/√2)): mul, erf, add, mul, mul = 5.
// tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))):
//   x³ (2), ·0.044715, +x, ·√(2/π), tanh, +1, ·x, ·0.5 = 9.
double GeluOp::getFlopsPerElement() {
  return getApproximate() == "tanh" ? 9.0 : 5.0;
}
// The mask's hash (an index, SplitMix64: ~12 integer ops), a compare, a
// multiply and a select, counted as FLOPs.
double DropoutOp::getFlopsPerElement() { return 15.0; }
// The bits read as another type: no arithmetic, a copy's bytes.
double BitcastOp::getFlopsPerElement() { return 0.0; }
/// Two comparisons per index.
double CheckIndicesOp::getFlopsPerElement() { return 2.0; }

#include "distopt/Dialect/Dopt/IR/DoptInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "distopt/Dialect/Dopt/IR/DoptOps.cpp.inc"
