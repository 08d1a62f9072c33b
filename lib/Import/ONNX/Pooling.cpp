//===- Pooling.cpp - ONNX pooling ops -------------------------------------===//
//
// The importers of max, average, Lp and global pooling.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include <limits>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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

} // namespace

void onnximport::registerPoolingImporters(llvm::StringMap<OpImporterFn> &t) {
  t["MaxPool"] = importMaxPool;
  t["AveragePool"] = importAveragePool;
  t["LpPool"] = importLpPool;
  t["GlobalMaxPool"] = importGlobalMaxPool;
}
