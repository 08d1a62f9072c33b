//===- OpHelpers.cpp - what the per-op importers share --------------------===//
//
// See OpHelpers.h.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace distopt::onnximport {

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

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

LogicalResult setResult(NodeContext &nc, Value y) {
  if (!y)
    return failure();
  nc.setOutput(0, y);
  return success();
}

std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

Value castTo(NodeContext &nc, Value v, Type t) {
  if (!v || cast<RankedTensorType>(v.getType()).getElementType() == t)
    return v;
  return nc.create<dopt::CastOp>(v, TypeAttr::get(t));
}

Value iotaAlong(NodeContext &nc, int64_t n, int64_t rank, int64_t axis) {
  SmallVector<int64_t> shape(rank, 1), values;
  shape[axis] = n;
  for (int64_t i = 0; i < n; ++i)
    values.push_back(i);
  return nc.constantI64(values, shape);
}

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

std::string entries(size_t n) {
  return std::to_string(n) + (n == 1 ? " entry" : " entries");
}

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

FailureOr<size_t> spatialAxes(NodeContext &nc, RankedTensorType in) {
  if (in.getRank() >= 3 && in.getRank() <= 5)
    return size_t(in.getRank() - 2);
  (void)nc.error("only 1-D, 2-D and 3-D windows (3-D NCL, 4-D NCHW or 5-D "
                 "NCDHW inputs) are supported, got input of rank " +
                 std::to_string(in.getRank()));
  return failure();
}

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

SmallVector<int64_t> liftSizes(ArrayRef<int64_t> v, int64_t fill) {
  if (v.size() != 1)
    return SmallVector<int64_t>(v);
  return {fill, v[0]};
}

SmallVector<int64_t> liftPads(ArrayRef<int64_t> p) {
  if (p.size() != 2)
    return SmallVector<int64_t>(p);
  return {0, p[0], 0, p[1]};
}

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

LogicalResult setWindowOutput(NodeContext &nc, Value y, bool oneD) {
  if (oneD)
    y = heightOne(nc, y, false);
  return setResult(nc, y);
}

FailureOr<ConvNode> convNode(NodeContext &nc, Value x, Value w) {
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

Value addChannelBias3D(NodeContext &nc, Value y, Value bias) {
  if (!bias || !y)
    return y;
  int64_t m = cast<RankedTensorType>(y.getType()).getDimSize(1);
  auto bt = cast<RankedTensorType>(bias.getType());
  if (bt.getRank() != 1 || bt.getDimSize(0) != m) {
    (void)nc.error("bias must be 1-D with " + std::to_string(m) +
                   " entries, got " + shapeStr(bt.getShape()));
    return {};
  }
  return nc.create<dopt::AddOp>(
      y, nc.create<dopt::ReshapeOp>(
             bias, nc.builder().getDenseI64ArrayAttr({m, 1, 1, 1})));
}

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
  return addChannelBias3D(nc, y, bias);
}

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

Value absPower(NodeContext &nc, Value x, int64_t p) {
  if (p == 2)
    return nc.create<dopt::MulOp>(x, x);
  Value a = nc.create<dopt::AbsOp>(x);
  if (p == 1)
    return a;
  Type elt = cast<RankedTensorType>(x.getType()).getElementType();
  return nc.create<dopt::PowOp>(a, constantScalar(nc, elt, (double)p));
}

Value rootOf(NodeContext &nc, Value s, int64_t p) {
  if (p == 1 || !s)
    return s;
  if (p == 2)
    return nc.create<dopt::SqrtOp>(s);
  Type elt = cast<RankedTensorType>(s.getType()).getElementType();
  return nc.create<dopt::PowOp>(s, constantScalar(nc, elt, 1.0 / (double)p));
}

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

Value reshape(NodeContext &nc, Value x, ArrayRef<int64_t> shape) {
  return nc.create<dopt::ReshapeOp>(x,
                                    nc.builder().getDenseI64ArrayAttr(shape));
}

Value checkedIndices(NodeContext &nc, Value indices, int64_t extent,
                     const std::string &what, bool negative,
                     std::optional<int64_t> ignore) {
  // Constants, and indices of a type no index may have (the op that takes
  // them reports that).
  Type elt = cast<RankedTensorType>(indices.getType()).getElementType();
  if (indices.getDefiningOp<dopt::ConstantOp>() ||
      !(elt.isSignlessInteger(32) || elt.isSignlessInteger(64)))
    return indices;
  std::string site = nc.label() + ": " + what;
  OpBuilder &b = nc.builder();
  return nc.create<dopt::CheckIndicesOp>(
      indices, b.getI64IntegerAttr(extent), b.getBoolAttr(negative),
      ignore ? b.getI64IntegerAttr(*ignore) : IntegerAttr(),
      b.getStringAttr(site));
}

} // namespace distopt::onnximport
