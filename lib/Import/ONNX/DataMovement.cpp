//===- DataMovement.cpp - ONNX data movement ops --------------------------===//
//
// The importers of shapes and data movement: reshapes, slices, gathers,
// scatters, pads, constants.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include <limits>
#include <sstream>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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
  TRY(axis, nc.axisAttr(0, nc.inputType(0).getRank()));
  nc.setOutput(0, nc.create<dopt::ConcatOp>(
                      inputs, nc.builder().getI64IntegerAttr(axis)));
  return success();
}

LogicalResult importSplit(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axis, nc.axisAttr(0, in.getRank()));
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
  // A constant splits into constants (shape arithmetic).
  SmallVector<Value> folded;
  if (succeeded(nc.builder().tryFold(op, folded)) &&
      folded.size() == sizes.size()) {
    op->erase();
    for (size_t i = 0; i < sizes.size(); ++i)
      nc.setOutput(i, folded[i]);
    return success();
  }
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

/// What indices along `axis` of the data index.
std::string dataAxis(int64_t axis, int64_t dim) {
  return "the data's axis " + std::to_string(axis) + " (size " +
         std::to_string(dim) + ")";
}

/// Gather and GatherElements: data, indices, an axis.
template <typename OpTy> LogicalResult importGatherLike(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(indices, nc.requiredInput(1));
  TRY(axis, nc.axisAttr(0, nc.inputType(0).getRank()));
  int64_t dim = nc.inputType(0).getDimSize(axis);
  if (failed(checkConstantIndices(nc, indices, axis, dim)))
    return failure();
  indices = checkedIndices(nc, indices, dim, "the indices into " + dataAxis(axis, dim));
  nc.setOutput(0, nc.create<OpTy>(data, indices,
                                  nc.builder().getI64IntegerAttr(axis)));
  return success();
}

LogicalResult importScatterElements(NodeContext &nc) {
  TRY(data, nc.requiredInput(0));
  TRY(indices, nc.requiredInput(1));
  TRY(updates, nc.requiredInput(2));
  TRY(axis, nc.axisAttr(0, nc.inputType(0).getRank()));
  TRY(reduction, nc.stringAttr("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return nc.error("reduction must be none, add, mul, max or min, got '" +
                    reduction + "'");
  if (reduction != "none" && nc.inputType(0).getElementType().isInteger(1))
    return nc.error("reduction '" + reduction +
                    "' of booleans (only none replaces booleans)");
  int64_t dim = nc.inputType(0).getDimSize(axis);
  if (failed(checkConstantIndices(nc, indices, axis, dim)))
    return failure();
  indices = checkedIndices(nc, indices, dim, "the indices into " + dataAxis(axis, dim));
  OpBuilder &b = nc.builder();
  nc.setOutput(0, nc.create<dopt::ScatterElementsOp>(
                      data, indices, updates, b.getI64IntegerAttr(axis),
                      b.getStringAttr(reduction)));
  return success();
}

LogicalResult importTopK(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axis, nc.axisAttr(-1, in.getRank()));
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
  // A length beyond the time axis, or negative, would reverse nothing or
  // read elsewhere: ONNX Runtime refuses it, and so does the run.
  lens = checkedIndices(nc, lens, steps + 1,
                        "sequence_lens, at most the time axis's " +
                            std::to_string(steps) + " steps",
                        /*negative=*/false);
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

/// TensorScatter (opset 24, a KV cache's update): `update` written into
/// `past_cache` along `axis` from each batch entry's write index on
/// (circular: modulo the axis's extent). A ScatterElements at write index
/// + position; the indices come at run time.
LogicalResult importTensorScatter(NodeContext &nc) {
  TRY(cache, nc.requiredInput(0));
  TRY(update, nc.requiredInput(1));
  RankedTensorType ct = nc.inputType(0), ut = nc.inputType(1);
  int64_t rank = ct.getRank();
  TRY(axis, nc.axisAttr(-2, rank));
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
    if (mode == "circular")
      starts = checkedIndices(nc, starts, capacity,
                              "write_indices into past_cache's axis " +
                                  std::to_string(axis) + " (size " +
                                  std::to_string(capacity) + ")",
                              /*negative=*/false);
    index = nc.create<dopt::AddOp>(reshape(nc, starts, view), index);
    if (mode == "linear")
      index = checkedIndices(nc, index, capacity,
                             "the positions written (write_indices plus the "
                             "update's position) into past_cache's axis " +
                                 std::to_string(axis) + " (size " +
                                 std::to_string(capacity) + ")",
                             /*negative=*/false);
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
/// reported when the program runs, and clamped, as the element ops' are).
/// `firstAxis`: the data's axis the first component indexes.
Value linearIndex(NodeContext &nc, Value indices, ArrayRef<int64_t> dims,
                  int64_t firstAxis) {
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
    comp = checkedIndices(
        nc, comp, dims[j],
        "component " + std::to_string(j) + " of the index tuples, into " +
            dataAxis(firstAxis + j, dims[j]));
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
  Value idx = reshape(nc, linearIndex(nc, indices, dims, batchDims),
                      {batch, m, 1});
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
    Value idx = reshape(
        nc, linearIndex(nc, idxValue, dt.getShape().take_front(k), 0), {n, 1});
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

void onnximport::registerDataMovementImporters(llvm::StringMap<OpImporterFn> &t) {
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
  t["TensorScatter"] = importTensorScatter;
  t["EyeLike"] = importEyeLike;
  t["CumSum"] = importCumulative<false>;
  t["CumProd"] = importCumulative<true>;
  t["ReverseSequence"] = importReverseSequence;
  t["CenterCropPad"] = importCenterCropPad;
  t["ScatterND"] = importScatterND;
  t["GatherND"] = importGatherND;
  t["GatherElements"] = importGatherLike<dopt::GatherElementsOp>;
  t["ScatterElements"] = importScatterElements;
  t["TopK"] = importTopK;
}
