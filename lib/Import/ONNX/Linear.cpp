//===- Linear.cpp - ONNX linear ops ---------------------------------------===//
//
// The importers of Gemm, convolutions (transposed and 3-D) and Einsum.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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
  return addChannelBias3D(nc, y, bias);
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

LogicalResult importConv(NodeContext &nc) {
  TRY(y, convolution(nc, {}, {}, nc.input(2)));
  return setResult(nc, y);
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

} // namespace

void onnximport::registerLinearImporters(llvm::StringMap<OpImporterFn> &t) {
  t["Gemm"] = importGemm;
  t["Conv"] = importConv;
  t["ConvTranspose"] = importConvTranspose;
  t["Einsum"] = importEinsum;
}
