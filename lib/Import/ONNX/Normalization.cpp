//===- Normalization.cpp - ONNX normalization ops -------------------------===//
//
// The importers of softmax, the losses, batch/layer/RMS/instance/group norm,
// LRN.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include "distopt/Dialect/Dopt/IR/DoptLosses.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

/// The loss of NegativeLogLikelihoodLoss (and of SoftmaxCrossEntropyLoss
/// after its log-softmax): dopt::buildNegativeLogLikelihood.
static FailureOr<Value> negativeLogLikelihood(NodeContext &nc, Value logp,
                                              Value target, Value weight) {
  TRY(reduction, nc.stringAttr("reduction", "mean"));
  std::optional<int64_t> ignore;
  if (nc.hasAttr("ignore_index")) {
    TRY(ii, nc.intAttr("ignore_index", -100));
    ignore = ii;
  }
  // ONNX leaves a target outside the classes undefined (ONNX Runtime
  // refuses it); the loss would count it as no class.
  auto lt = cast<RankedTensorType>(logp.getType());
  Type te = cast<RankedTensorType>(target.getType()).getElementType();
  if (lt.getRank() >= 2 && (te.isInteger(32) || te.isInteger(64)))
    target = checkedIndices(nc, target, lt.getDimSize(1),
                            "the target class indices into the " +
                                std::to_string(lt.getDimSize(1)) +
                                " classes (axis 1 of the scores)",
                            /*negative=*/false, ignore);
  if (!target)
    return failure();
  std::string error;
  FailureOr<Value> loss = dopt::buildNegativeLogLikelihood(
      nc.builder(), nc.loc(), logp, target, weight, ignore, reduction, error);
  if (failed(loss))
    return nc.error(error);
  return loss;
}

LogicalResult importNegativeLogLikelihoodLoss(NodeContext &nc) {
  TRY(logp, nc.requiredInput(0));
  TRY(target, nc.requiredInput(1));
  TRY(loss, negativeLogLikelihood(nc, logp, target, nc.input(2)));
  nc.setOutput(0, loss);
  return success();
}

/// SoftmaxCrossEntropyLoss: log-softmax over the class axis (the optional
/// second output), then the negative log-likelihood.
LogicalResult importSoftmaxCrossEntropyLoss(NodeContext &nc) {
  TRY(scores, nc.requiredInput(0));
  TRY(labels, nc.requiredInput(1));
  if (nc.inputType(0).getRank() < 2)
    return nc.error("scores have rank " +
                    std::to_string(nc.inputType(0).getRank()) +
                    "; expected [N, C, d1, ...]");
  Value logp = nc.create<dopt::LogSoftmaxOp>(scores,
                                             nc.builder().getI64IntegerAttr(1));
  TRY(loss, negativeLogLikelihood(nc, logp, labels, nc.input(2)));
  nc.setOutput(0, loss);
  nc.setOutput(1, logp);
  return success();
}

template <typename OpTy>
LogicalResult importSoftmax(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(axis, nc.intAttr("axis", -1));
  TRY(a, nc.normalizeAxis(axis, nc.inputType(0).getRank()));
  nc.setOutput(0, nc.create<OpTy>(x, nc.builder().getI64IntegerAttr(a)));
  return success();
}

LogicalResult importBatchNorm(NodeContext &nc) {
  Value in[5];
  for (int i = 0; i < 5; ++i) {
    TRY(v, nc.requiredInput(i));
    in[i] = v;
  }
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(training, nc.intAttr("training_mode", 0));
  // The inference op carries the operand rule (shapes, channels, element
  // types) for both forms: the training form builds it to check the
  // operands, then drops it.
  Value inference = nc.create<dopt::BatchNormOp>(
      in[0], in[1], in[2], in[3], in[4], nc.builder().getF32FloatAttr(eps));
  if (!inference)
    return failure();
  if (!training) {
    nc.setOutput(0, inference);
    return success();
  }
  if (nc.evalForm()) {
    // Evaluation: the running statistics normalise, and stay as they are.
    nc.setOutput(0, inference);
    nc.setOutput(1, in[3]);
    nc.setOutput(2, in[4]);
    return success();
  }
  if (inference.use_empty())
    inference.getDefiningOp()->erase();
  // Training form: the batch's statistics over every axis but the channels
  // (1), written with ops autodiff differentiates; the running statistics
  // as ONNX defines them (opset 14/15): input * momentum + current *
  // (1 - momentum), the current variance the population one.
  TRY(momentum, nc.floatAttr("momentum", 0.9f));
  auto type = cast<RankedTensorType>(in[0].getType());
  OpBuilder &b = nc.builder();
  int64_t rank = type.getRank(), channels = type.getDimSize(1);
  SmallVector<int64_t> axes{0}, bcast(rank, 1);
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  bcast[1] = channels;
  Type elt = type.getElementType();
  auto scalar = [&](double v) { return constantScalar(nc, elt, v); };
  auto perChannel = [&](Value v) -> Value {
    return nc.create<dopt::ReshapeOp>(v, b.getDenseI64ArrayAttr(bcast));
  };
  Value mean = nc.create<dopt::ReduceMeanOp>(in[0], b.getDenseI64ArrayAttr(axes),
                                             b.getBoolAttr(true));
  Value centered = nc.create<dopt::SubOp>(in[0], mean);
  Value var = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(centered, centered), b.getDenseI64ArrayAttr(axes),
      b.getBoolAttr(true));
  Value norm = nc.create<dopt::DivOp>(
      centered, nc.create<dopt::SqrtOp>(nc.create<dopt::AddOp>(var, scalar(eps))));
  Value y = nc.create<dopt::AddOp>(nc.create<dopt::MulOp>(norm, perChannel(in[1])),
                                   perChannel(in[2]));
  nc.setOutput(0, y);
  // Running statistics: outputs 1 and 2, and the updates of the weights
  // they came from (the train loop keeps them: dopt.updates_weight).
  auto running = [&](Value old, Value current) -> Value {
    Value flat = nc.create<dopt::ReshapeOp>(
        current, b.getDenseI64ArrayAttr({channels}));
    Value r = nc.create<dopt::AddOp>(
        nc.create<dopt::MulOp>(old, scalar(momentum)),
        nc.create<dopt::MulOp>(flat, scalar(1.0 - double(momentum))));
    if (!r)
      return r;
    if (auto w = old.getDefiningOp<dopt::WeightOp>())
      r.getDefiningOp()->setAttr("dopt.updates_weight", w.getNameAttr());
    return r;
  };
  if (!nc.hasFailed()) {
    nc.setOutput(1, running(in[3], mean));
    nc.setOutput(2, running(in[4], var));
  }
  return success();
}

/// What LayerNormalization and RMSNormalization share: the normalised axes
/// [axis, rank), epsilon, and the stash type their statistics are computed
/// in (with `xs`, the input in it).
struct Normalization {
  int64_t axis;
  SmallVector<int64_t> axes;
  float eps;
  Type stash;
  Value xs;
};

FailureOr<Normalization> readNormalization(NodeContext &nc, Value x) {
  TRY(axis, nc.intAttr("axis", -1));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(stash, nc.intAttr("stash_type", onnx::TensorProto::FLOAT));
  int64_t rank = nc.inputType(0).getRank();
  TRY(a, nc.normalizeAxis(axis, rank));
  Type u = convertDataType(nc.context(), stash);
  if (!u || !isa<FloatType>(u)) {
    (void)nc.error("stash_type " + dataTypeName(stash) +
                   " is not a floating-point type distopt supports");
    return failure();
  }
  SmallVector<int64_t> axes;
  for (int64_t d = a; d < rank; ++d)
    axes.push_back(d);
  Value xs = u == nc.inputType(0).getElementType()
                 ? x
                 : nc.create<dopt::CastOp>(x, TypeAttr::get(u));
  return Normalization{a, axes, eps, u, xs};
}

LogicalResult importLayerNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(n, readNormalization(nc, x));
  OpBuilder &b = nc.builder();
  nc.setOutput(0, nc.create<dopt::LayerNormOp>(x, scale, nc.input(2),
                                               b.getI64IntegerAttr(n.axis),
                                               b.getF32FloatAttr(n.eps)));
  if (!nc.outputUsed(1) && !nc.outputUsed(2))
    return success();
  // Mean and InvStdDev (what a training framework keeps for the backward
  // pass): the statistics in the stash type, kept as size-1 axes, as the
  // ONNX function of the op computes them.
  auto axes = b.getDenseI64ArrayAttr(n.axes);
  Value mean =
      nc.create<dopt::ReduceMeanOp>(n.xs, axes, b.getBoolAttr(true));
  Value centered = nc.create<dopt::SubOp>(n.xs, mean);
  Value var = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(centered, centered), axes, b.getBoolAttr(true));
  Value invStdDev = nc.create<dopt::ReciprocalOp>(nc.create<dopt::SqrtOp>(
      nc.create<dopt::AddOp>(var, constantScalar(nc, n.stash, n.eps))));
  if (!nc.hasFailed()) {
    nc.setOutput(1, mean);
    nc.setOutput(2, invStdDev);
  }
  return success();
}

/// RMSNormalization (opset 23; LLaMA's RMSNorm): x / sqrt(mean(x², axes
/// [axis, rank)) + epsilon) in the stash type, back to x's type, times the
/// scale -- the op's ONNX function, written with dopt ops.
LogicalResult importRMSNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(n, readNormalization(nc, x));
  Type t = nc.inputType(0).getElementType();
  OpBuilder &b = nc.builder();
  Value meanSquare = nc.create<dopt::ReduceMeanOp>(
      nc.create<dopt::MulOp>(n.xs, n.xs), b.getDenseI64ArrayAttr(n.axes),
      b.getBoolAttr(true));
  Value rms = nc.create<dopt::SqrtOp>(
      nc.create<dopt::AddOp>(meanSquare, constantScalar(nc, n.stash, n.eps)));
  Value normalized = nc.create<dopt::DivOp>(n.xs, rms);
  if (n.stash != t)
    normalized = nc.create<dopt::CastOp>(normalized, TypeAttr::get(t));
  Value y = nc.create<dopt::MulOp>(normalized, scale);
  return setResult(nc, y);
}

/// InstanceNormalization: each (sample, channel) normalised over its
/// spatial axes, then scaled and shifted per channel -- the op's
/// definition with dopt ops; 16-bit inputs compute in f32 and round once.
LogicalResult importInstanceNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(bias, nc.requiredInput(2));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  RankedTensorType in = nc.inputType(0);
  int64_t rank = in.getRank();
  if (rank < 3)
    return nc.error("input of rank " + std::to_string(rank) +
                    ": expected N x C x D1 x ... (rank 3 or more)");
  int64_t channels = in.getDimSize(1);
  for (int i : {1, 2})
    if (nc.inputType(i).getRank() != 1 ||
        nc.inputType(i).getDimSize(0) != channels)
      return nc.error(std::string(i == 1 ? "scale" : "bias") + " of shape " +
                      shapeStr(nc.inputType(i).getShape()) +
                      " for an input of " + std::to_string(channels) +
                      " channels");
  OpBuilder &b = nc.builder();
  Type t = in.getElementType();
  Type stash = t.getIntOrFloatBitWidth() < 32 ? b.getF32Type() : t;
  auto toStash = [&](Value v) {
    return stash == t ? v : nc.create<dopt::CastOp>(v, TypeAttr::get(stash));
  };
  SmallVector<int64_t> spatial, perChannel = {channels};
  for (int64_t i = 2; i < rank; ++i) {
    spatial.push_back(i);
    perChannel.push_back(1);
  }
  Value normalized = standardize(nc, toStash(x), spatial, eps);
  Value y = nc.create<dopt::AddOp>(
      nc.create<dopt::MulOp>(normalized,
                             reshape(nc, toStash(scale), perChannel)),
      reshape(nc, toStash(bias), perChannel));
  if (stash != t)
    y = nc.create<dopt::CastOp>(y, TypeAttr::get(t));
  return setResult(nc, y);
}

/// GroupNormalization: each sample's channels in num_groups groups,
/// normalised over the group's channels and spatial axes (in the stash
/// type), then scaled and shifted per channel (opset 21: scale and bias of
/// C) or per group (opset 18: of num_groups).
LogicalResult importGroupNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(scale, nc.requiredInput(1));
  TRY(bias, nc.requiredInput(2));
  TRY(groups, nc.intAttr("num_groups", 0));
  TRY(eps, nc.floatAttr("epsilon", 1e-5f));
  TRY(stashType, nc.intAttr("stash_type", onnx::TensorProto::FLOAT));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() < 2)
    return nc.error("input of rank " + std::to_string(in.getRank()) +
                    ": expected N x C x ...");
  int64_t n = in.getDimSize(0), c = in.getDimSize(1);
  if (groups < 1 || c % groups)
    return nc.error(std::to_string(c) + " channels do not split into " +
                    std::to_string(groups) + " groups");
  int64_t per = nc.inputType(1).getNumElements();
  if (per != c && per != groups)
    return nc.error("scale of shape " + shapeStr(nc.inputType(1).getShape()) +
                    ": expected " + std::to_string(c) + " (per channel) or " +
                    std::to_string(groups) + " (per group)");
  Type t = in.getElementType();
  Type stash = convertDataType(nc.context(), stashType);
  if (!stash || !isa<FloatType>(stash))
    return nc.error("stash_type " + dataTypeName(stashType) +
                    " is not a floating-point type distopt supports");
  if (in.getNumElements() == 0)
    return setResult(nc, x);
  OpBuilder &b = nc.builder();
  Value grouped =
      reshape(nc, castTo(nc, x, stash), {n, groups, in.getNumElements() / (n * groups)});
  Value normalized = castTo(nc, standardize(nc, grouped, {2}, eps), t);
  // Per channel: [C, 1, ...] against x's shape; per group: [G, 1, ...]
  // against [N, G, C/G, ...].
  SmallVector<int64_t> view(in.getShape()), param = {per};
  if (per == groups) {
    view = {n, groups, c / groups};
    llvm::append_range(view, in.getShape().drop_front(2));
  }
  for (size_t i = 2; i < view.size(); ++i)
    param.push_back(1);
  Value y = nc.create<dopt::AddOp>(
      nc.create<dopt::MulOp>(reshape(nc, normalized, view),
                             reshape(nc, castTo(nc, scale, t), param)),
      reshape(nc, castTo(nc, bias, t), param));
  return setResult(nc, reshape(nc, y, in.getShape()));
}

/// LpNormalization: x divided by its L1 or L2 norm along `axis`; a zero
/// norm (a zero vector) gives zeros (ONNX's reference). The norm is
/// replaced by 1 there before the division, so the gradient stays finite.
LogicalResult importLpNormalization(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  TRY(axis, nc.axisAttr(-1, in.getRank()));
  TRY(p, nc.intAttr("p", 2));
  if (p != 1 && p != 2)
    return nc.error("p must be 1 or 2, got " + std::to_string(p));
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  OpBuilder &b = nc.builder();
  Value sum = nc.create<dopt::ReduceSumOp>(absPower(nc, x, p),
                                           b.getDenseI64ArrayAttr({axis}),
                                           b.getBoolAttr(true));
  Value zero = constantScalar(nc, elt, 0.0);
  Value safe = nc.create<dopt::WhereOp>(nc.create<dopt::EqualOp>(sum, zero),
                                        constantScalar(nc, elt, 1.0), sum);
  return setResult(nc, nc.create<dopt::DivOp>(x, rootOf(nc, safe, p)));
}

/// LRN: x / (bias + alpha/size · Σ x²)^beta, the sum over the `size`
/// channels around each (⌊(size−1)/2⌋ before, ⌈(size−1)/2⌉ after, those
/// past the edges left out): shifted slices of the squares, zero-padded
/// along the channel axis.
LogicalResult importLRN(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  RankedTensorType in = nc.inputType(0);
  if (in.getRank() < 3)
    return nc.error("input must have rank >= 3 (N, C, spatial...), got rank " +
                    std::to_string(in.getRank()));
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(size, nc.intAttr("size", 0));
  if (size < 1)
    return nc.error("size must be a positive integer, got " +
                    std::to_string(size));
  TRY(alpha, nc.floatAttr("alpha", 1e-4f));
  TRY(beta, nc.floatAttr("beta", 0.75f));
  TRY(bias, nc.floatAttr("bias", 1.0f));
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  int64_t channels = in.getDimSize(1), rank = in.getRank();
  SmallVector<int64_t> pads(2 * rank, 0);
  pads[1] = before;
  pads[rank + 1] = after;
  OpBuilder &b = nc.builder();
  Value padded = nc.create<dopt::PadOp>(nc.create<dopt::MulOp>(x, x),
                                        b.getDenseI64ArrayAttr(pads),
                                        b.getStringAttr("constant"),
                                        b.getF64FloatAttr(0.0));
  Value sum;
  for (int64_t k = 0; k < size; ++k) {
    Value s = strided(nc, padded, {1}, {k}, {1}, {channels});
    sum = sum ? nc.create<dopt::AddOp>(sum, s) : s;
  }
  Value base = nc.create<dopt::AddOp>(
      constantScalar(nc, elt, bias),
      nc.create<dopt::MulOp>(constantScalar(nc, elt, (double)alpha / size),
                             sum));
  return setResult(nc, nc.create<dopt::DivOp>(
                           x, nc.create<dopt::PowOp>(
                                  base, constantScalar(nc, elt, beta))));
}

/// MeanVarianceNormalization, as its ONNX function: (x - E[x]) /
/// (sqrt(E[x²] - E[x]²) + 1e-9) over `axes` (default 0, 2, 3).
LogicalResult importMeanVarianceNorm(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(axesAttr, nc.intsAttr("axes"));
  RankedTensorType in = nc.inputType(0);
  SmallVector<int64_t> axes;
  for (int64_t a : axesAttr.value_or(SmallVector<int64_t>{0, 2, 3})) {
    TRY(axis, nc.normalizeAxis(a, in.getRank()));
    axes.push_back(axis);
  }
  OpBuilder &b = nc.builder();
  Type t = in.getElementType();
  auto mean = [&](Value v) {
    return nc.create<dopt::ReduceMeanOp>(v, b.getDenseI64ArrayAttr(axes),
                                         b.getBoolAttr(true));
  };
  Value m = mean(x);
  Value var = nc.create<dopt::SubOp>(mean(nc.create<dopt::MulOp>(x, x)),
                                     nc.create<dopt::MulOp>(m, m));
  Value y = nc.create<dopt::DivOp>(
      nc.create<dopt::SubOp>(x, m),
      nc.create<dopt::AddOp>(nc.create<dopt::SqrtOp>(var),
                             constantScalar(nc, t, 1e-9)));
  return setResult(nc, y);
}

} // namespace

void onnximport::registerNormalizationImporters(llvm::StringMap<OpImporterFn> &t) {
  t["Softmax"] = importSoftmax<dopt::SoftmaxOp>;
  t["LogSoftmax"] = importSoftmax<dopt::LogSoftmaxOp>;
  t["NegativeLogLikelihoodLoss"] = importNegativeLogLikelihoodLoss;
  t["SoftmaxCrossEntropyLoss"] = importSoftmaxCrossEntropyLoss;
  t["BatchNormalization"] = importBatchNorm;
  t["RMSNormalization"] = importRMSNorm;
  t["LayerNormalization"] = importLayerNorm;
  t["GroupNormalization"] = importGroupNorm;
  t["LpNormalization"] = importLpNormalization;
  t["LRN"] = importLRN;
  t["MeanVarianceNormalization"] = importMeanVarianceNorm;
  t["InstanceNormalization"] = importInstanceNorm;
}
