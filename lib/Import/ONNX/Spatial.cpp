//===- Spatial.cpp - ONNX spatial ops -------------------------------------===//
//
// The importers of Resize, GridSample, AffineGrid and Col2Im.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include <sstream>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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

} // namespace

void onnximport::registerSpatialImporters(llvm::StringMap<OpImporterFn> &t) {
  t["Resize"] = importResize;
  t["GridSample"] = importGridSample;
  t["AffineGrid"] = importAffineGrid;
  t["Col2Im"] = importCol2Im;
}
