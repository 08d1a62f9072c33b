//===- DoptConvolutions.cpp - convolution shapes as dopt ops --------------===//

#include "distopt/Dialect/Dopt/IR/DoptConvolutions.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace distopt;

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static Value reshape(OpBuilder &b, Location loc, Value v,
                     ArrayRef<int64_t> shape) {
  if (shapeOf(v) == shape)
    return v;
  return dopt::ReshapeOp::create(b, loc, v, b.getDenseI64ArrayAttr(shape));
}

Value dopt::padOrCrop(OpBuilder &b, Location loc, Value v,
                      ArrayRef<int64_t> begin, ArrayRef<int64_t> end) {
  // Padded first, then cropped: a crop at one end may reach into the
  // padding added at the other (a transposed convolution whose begin pad
  // exceeds its full result keeps only output-padding zeros).
  ArrayRef<int64_t> shape = shapeOf(v);
  int64_t r = shape.size();
  SmallVector<int64_t> pads(2 * r, 0), starts(r, 0), ends(r), steps(r, 1);
  bool pad = false, crop = false;
  for (int64_t i = 0; i < r; ++i) {
    pads[i] = std::max<int64_t>(begin[i], 0);
    pads[r + i] = std::max<int64_t>(end[i], 0);
    pad = pad || pads[i] > 0 || pads[r + i] > 0;
    starts[i] = std::max<int64_t>(-begin[i], 0);
    ends[i] = shape[i] + pads[i] + pads[r + i] - std::max<int64_t>(-end[i], 0);
    crop = crop || begin[i] < 0 || end[i] < 0;
  }
  if (pad)
    v = dopt::PadOp::create(b, loc, v, b.getDenseI64ArrayAttr(pads),
                            b.getStringAttr("constant"),
                            b.getF64FloatAttr(0.0));
  if (crop)
    v = dopt::SliceOp::create(b, loc, v, b.getDenseI64ArrayAttr(starts),
                              b.getDenseI64ArrayAttr(ends),
                              b.getDenseI64ArrayAttr(steps));
  return v;
}

Value dopt::dilateSpatial(OpBuilder &b, Location loc, Value v, int64_t sh,
                          int64_t sw) {
  if (sh == 1 && sw == 1)
    return v;
  ArrayRef<int64_t> s = shapeOf(v);
  int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  // Each row (column) followed by its zeros, then the trailing zeros cut.
  v = reshape(b, loc, v, {n, c, h, 1, w, 1});
  v = dopt::PadOp::create(
      b, loc, v,
      b.getDenseI64ArrayAttr({0, 0, 0, 0, 0, 0, 0, 0, 0, sh - 1, 0, sw - 1}),
      b.getStringAttr("constant"), b.getF64FloatAttr(0.0));
  v = reshape(b, loc, v, {n, c, h * sh, w * sw});
  return dopt::SliceOp::create(
      b, loc, v, b.getDenseI64ArrayAttr({0, 0, 0, 0}),
      b.getDenseI64ArrayAttr({n, c, (h - 1) * sh + 1, (w - 1) * sw + 1}),
      b.getDenseI64ArrayAttr({1, 1, 1, 1}));
}

Value dopt::convTransposeAsConv(OpBuilder &b, Location loc, Value x, Value w,
                                Value bias, ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> pads,
                                ArrayRef<int64_t> dilations,
                                ArrayRef<int64_t> outputPadding,
                                int64_t group) {
  ArrayRef<int64_t> ws = shapeOf(w);
  Value xd = dilateSpatial(b, loc, x, strides[0], strides[1]);
  SmallVector<int64_t> begin{0, 0}, end{0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t extent = dilations[i] * (ws[2 + i] - 1) + 1;
    begin.push_back(extent - 1 - pads[i]);
    end.push_back(extent - 1 - pads[2 + i] + outputPadding[i]);
  }
  xd = padOrCrop(b, loc, xd, begin, end);
  Value flipped = dopt::SliceOp::create(
      b, loc, w, b.getDenseI64ArrayAttr({0, 0, ws[2] - 1, ws[3] - 1}),
      b.getDenseI64ArrayAttr({ws[0], ws[1], -1, -1}),
      b.getDenseI64ArrayAttr({1, 1, -1, -1}));
  Value wt;
  if (group == 1) {
    wt = dopt::TransposeOp::create(b, loc, flipped,
                                   b.getDenseI64ArrayAttr({1, 0, 2, 3}));
  } else {
    int64_t c = ws[0] / group, m = ws[1];
    Value v = reshape(b, loc, flipped, {group, c, m, ws[2], ws[3]});
    v = dopt::TransposeOp::create(b, loc, v,
                                  b.getDenseI64ArrayAttr({0, 2, 1, 3, 4}));
    wt = reshape(b, loc, v, {group * m, c, ws[2], ws[3]});
  }
  return dopt::ConvOp::create(b, loc, xd, wt, bias,
                              b.getDenseI64ArrayAttr({1, 1}),
                              b.getDenseI64ArrayAttr({0, 0, 0, 0}),
                              b.getDenseI64ArrayAttr(dilations),
                              b.getI64IntegerAttr(group));
}
