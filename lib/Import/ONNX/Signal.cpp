//===- Signal.cpp - ONNX signal ops ---------------------------------------===//
//
// The importers of DFT, STFT, windows and MelWeightMatrix.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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

} // namespace

void onnximport::registerSignalImporters(llvm::StringMap<OpImporterFn> &t) {
  t["DFT"] = importDFT;
  t["STFT"] = importSTFT;
  t["HannWindow"] = importWindow<Window::Hann>;
  t["HammingWindow"] = importWindow<Window::Hamming>;
  t["BlackmanWindow"] = importWindow<Window::Blackman>;
  t["MelWeightMatrix"] = importMelWeightMatrix;
}
