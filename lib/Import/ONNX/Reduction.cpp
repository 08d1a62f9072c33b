//===- Reduction.cpp - ONNX reduction ops ---------------------------------===//
//
// The importers of reductions, ArgMax/ArgMin, Hardmax.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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
  TRY(axis, nc.axisAttr(0, type.getRank()));
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
  TRY(axis, nc.axisAttr(-1, type.getRank()));
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

} // namespace

void onnximport::registerReductionImporters(llvm::StringMap<OpImporterFn> &t) {
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
  t["ReduceSum"] = importReduce<dopt::ReduceSumOp, 13>;
  t["ReduceMean"] = importReduce<dopt::ReduceMeanOp, 18>;
  t["ReduceMax"] = importReduce<dopt::ReduceMaxOp, 18>;
}
