//===- ShardingRules.cpp - how each dopt op may be split ------------------===//

#include "distopt/Planner/ShardingRules.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>

using namespace distopt::planner;
namespace dopt = distopt::dopt;
using llvm::ArrayRef;
using llvm::SmallVector;

int64_t OpShardingRule::operandDim(unsigned operand, int64_t factor) const {
  for (auto [d, f] : llvm::enumerate(operandDims[operand]))
    if (f == factor)
      return static_cast<int64_t>(d);
  return -1;
}

int64_t OpShardingRule::resultDim(unsigned result, int64_t factor) const {
  for (auto [d, f] : llvm::enumerate(resultDims[result]))
    if (f == factor)
      return static_cast<int64_t>(d);
  return -1;
}

namespace {

using Dims = SmallVector<int64_t, 4>;

std::optional<ArrayRef<int64_t>> shapeOf(mlir::Value v) {
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  return type.getShape();
}

/// Builds a rule whose factors are the dimensions of one "iteration shape".
struct RuleBuilder {
  OpShardingRule rule;

  int64_t add(int64_t size, FactorKind kind = FactorKind::Parallel,
              PartialKind partial = PartialKind::Sum) {
    rule.factors.push_back({size, kind, partial});
    return static_cast<int64_t>(rule.factors.size()) - 1;
  }
  /// A factor for a dimension of `size`, and the dimension's factor: none
  /// for size 1 (never split; its factor stays, unused).
  int64_t dim(int64_t size, FactorKind kind = FactorKind::Parallel,
              PartialKind partial = PartialKind::Sum) {
    int64_t factor = add(size, kind, partial);
    return size == 1 ? -1 : factor;
  }
  /// A parallel factor for each dimension of `shape`, and their factors.
  Dims dims(ArrayRef<int64_t> shape) {
    Dims factors;
    for (int64_t size : shape)
      factors.push_back(dim(size));
    return factors;
  }
};

/// Maps `operandShape`, broadcast NumPy-style to a result whose dimensions
/// are `resultFactors` (of sizes `resultShape`), onto those factors.
Dims broadcastDims(ArrayRef<int64_t> operandShape,
                   ArrayRef<int64_t> resultShape, ArrayRef<int64_t> factors) {
  Dims dims;
  int64_t offset =
      static_cast<int64_t>(resultShape.size() - operandShape.size());
  for (auto [i, size] : llvm::enumerate(operandShape)) {
    int64_t r = offset + static_cast<int64_t>(i);
    dims.push_back(r >= 0 && size == resultShape[r] && size != 1 ? factors[r]
                                                                 : -1);
  }
  return dims;
}

/// Elementwise ops (and expand, cast, where): one parallel factor per result
/// dimension; operands broadcast onto them.
std::optional<OpShardingRule> elementwiseRule(mlir::Operation *op) {
  auto resultShape = shapeOf(op->getResult(0));
  if (!resultShape)
    return std::nullopt;
  RuleBuilder b;
  Dims factors = b.dims(*resultShape);
  for (mlir::Value operand : op->getOperands()) {
    auto shape = shapeOf(operand);
    if (!shape)
      return std::nullopt;
    b.rule.operandDims.push_back(broadcastDims(*shape, *resultShape, factors));
  }
  b.rule.resultDims.push_back(factors);
  return b.rule;
}

/// One factor per dimension of the single operand, which the result keeps;
/// factors at `fixed` get `fixedKind`. Extra operands (scale, bias of
/// normalisations) map onto the trailing or the given factors by the caller.
struct SameShapeRule {
  RuleBuilder b;
  Dims factors;
  SameShapeRule(ArrayRef<int64_t> shape, llvm::function_ref<bool(int64_t)> fixed,
                FactorKind fixedKind) {
    for (auto [d, size] : llvm::enumerate(shape)) {
      FactorKind kind = fixed(static_cast<int64_t>(d)) ? fixedKind
                                                       : FactorKind::Parallel;
      factors.push_back(b.dim(size, kind));
    }
  }
};

std::optional<OpShardingRule> softmaxRule(mlir::Operation *op, int64_t axis) {
  auto shape = shapeOf(op->getOperand(0));
  if (!shape)
    return std::nullopt;
  SameShapeRule r(*shape, [&](int64_t d) { return d == axis; },
                  FactorKind::NeedReplication);
  r.b.rule.operandDims.push_back(r.factors);
  r.b.rule.resultDims.push_back(r.factors);
  return r.b.rule;
}

std::optional<OpShardingRule> layerNormRule(dopt::LayerNormOp op) {
  auto shape = shapeOf(op.getInput());
  if (!shape)
    return std::nullopt;
  int64_t axis = op.getAxis();
  SameShapeRule r(*shape, [&](int64_t d) { return d >= axis; },
                  FactorKind::NeedReplication);
  r.b.rule.operandDims.push_back(r.factors);
  for (mlir::Value extra : op->getOperands().drop_front()) {
    auto extraShape = shapeOf(extra);
    if (!extraShape)
      return std::nullopt;
    r.b.rule.operandDims.push_back(
        broadcastDims(*extraShape, *shape, r.factors));
  }
  r.b.rule.resultDims.push_back(r.factors);
  return r.b.rule;
}

std::optional<OpShardingRule> batchNormRule(dopt::BatchNormOp op) {
  auto shape = shapeOf(op.getInput());
  if (!shape || shape->size() < 2)
    return std::nullopt;
  SameShapeRule r(*shape, [](int64_t d) { return d >= 2; },
                  FactorKind::NeedReplication);
  r.b.rule.operandDims.push_back(r.factors);
  for (unsigned i = 1; i < 5; ++i)
    r.b.rule.operandDims.push_back(Dims{r.factors[1]});
  r.b.rule.resultDims.push_back(r.factors);
  return r.b.rule;
}

/// matmul with NumPy batch broadcasting; both operands of rank >= 2.
std::optional<OpShardingRule> matmulRule(dopt::MatMulOp op) {
  auto a = shapeOf(op.getLhs()), bShape = shapeOf(op.getRhs()),
       c = shapeOf(op.getResult());
  if (!a || !bShape || !c || a->size() < 2 || bShape->size() < 2)
    return std::nullopt;
  RuleBuilder b;
  size_t rank = c->size();
  Dims resultFactors;
  for (size_t d = 0; d + 2 < rank; ++d)
    resultFactors.push_back(b.dim((*c)[d]));
  int64_t m = b.dim((*c)[rank - 2]);
  int64_t n = b.dim((*c)[rank - 1]);
  int64_t kSize = a->back();
  int64_t k = b.dim(kSize, FactorKind::Reduction);
  resultFactors.push_back(m);
  resultFactors.push_back(n);
  auto operand = [&](ArrayRef<int64_t> shape, int64_t row, int64_t col) {
    Dims batch = broadcastDims(shape.drop_back(2), c->drop_back(2),
                               ArrayRef<int64_t>(resultFactors).drop_back(2));
    batch.push_back(row);
    batch.push_back(col);
    return batch;
  };
  b.rule.operandDims.push_back(operand(*a, m, k));
  b.rule.operandDims.push_back(operand(*bShape, k, n));
  b.rule.resultDims.push_back(resultFactors);
  return b.rule;
}

std::optional<OpShardingRule> gemmRule(dopt::GemmOp op) {
  auto c = shapeOf(op.getResult());
  auto a = shapeOf(op.getA());
  if (!c || !a || c->size() != 2 || a->size() != 2)
    return std::nullopt;
  RuleBuilder b;
  int64_t m = b.dim((*c)[0]);
  int64_t n = b.dim((*c)[1]);
  int64_t kSize = op.getTransA() ? (*a)[0] : (*a)[1];
  int64_t k = b.dim(kSize, FactorKind::Reduction);
  b.rule.operandDims.push_back(op.getTransA() ? Dims{k, m} : Dims{m, k});
  b.rule.operandDims.push_back(op.getTransB() ? Dims{n, k} : Dims{k, n});
  if (op.getC()) {
    auto cShape = shapeOf(op.getC());
    if (!cShape)
      return std::nullopt;
    b.rule.operandDims.push_back(broadcastDims(*cShape, *c, Dims{m, n}));
  }
  b.rule.resultDims.push_back(Dims{m, n});
  return b.rule;
}

/// Convolutions, plain and transposed: batch and output channels parallel,
/// input channels a reduction (whole with groups, or with a bias, which
/// would be added to every partial sum). The weight is [M, C/G, kh, kw] for
/// a convolution, [C, M/G, kh, kw] for a transposed one; with groups its
/// channel dimensions are per group and map to no factor (the transposed
/// one's output channels included: M/G is not the result's M).
std::optional<OpShardingRule> convolutionRule(mlir::Value input,
                                              mlir::Value result, bool bias,
                                              int64_t group, bool transposed) {
  auto x = shapeOf(input), y = shapeOf(result);
  if (!x || !y || x->size() != 4)
    return std::nullopt;
  RuleBuilder b;
  bool dense = group == 1;
  int64_t n = b.dim((*y)[0]);
  FactorKind channelKind =
      dense ? FactorKind::Parallel : FactorKind::NeedReplication;
  int64_t o = b.dim((*y)[1], channelKind);
  int64_t c = b.dim((*x)[1], dense && !bias ? FactorKind::Reduction
                                            : FactorKind::NeedReplication);
  b.rule.operandDims.push_back(Dims{n, c, -1, -1});
  b.rule.operandDims.push_back(transposed
                                   ? Dims{dense ? c : -1, dense ? o : -1, -1, -1}
                                   : Dims{o, dense ? c : -1, -1, -1});
  if (bias)
    b.rule.operandDims.push_back(Dims{o});
  b.rule.resultDims.push_back(Dims{n, o, -1, -1});
  return b.rule;
}

/// Pooling: batch and channel parallel, windows not split.
std::optional<OpShardingRule> poolRule(mlir::Operation *op, bool global) {
  auto x = shapeOf(op->getOperand(0));
  if (!x || x->size() != 4)
    return std::nullopt;
  RuleBuilder b;
  int64_t n = b.dim((*x)[0]);
  int64_t c = b.dim((*x)[1]);
  if (global) {
    // Splitting H leaves each device the mean of its rows: partial means,
    // combined by averaging.
    int64_t h = b.dim((*x)[2], FactorKind::Reduction, PartialKind::Mean);
    b.rule.operandDims.push_back(Dims{n, c, h, -1});
  } else {
    b.rule.operandDims.push_back(Dims{n, c, -1, -1});
  }
  b.rule.resultDims.push_back(Dims{n, c, -1, -1});
  return b.rule;
}

std::optional<OpShardingRule> reduceRule(mlir::Operation *op,
                                         ArrayRef<int64_t> axes, bool keepdims,
                                         PartialKind partial) {
  auto x = shapeOf(op->getOperand(0));
  if (!x)
    return std::nullopt;
  RuleBuilder b;
  Dims in, out;
  for (auto [d, size] : llvm::enumerate(*x)) {
    bool reduced = llvm::is_contained(axes, static_cast<int64_t>(d));
    int64_t f = b.dim(
        size, reduced ? FactorKind::Reduction : FactorKind::Parallel, partial);
    in.push_back(f);
    if (!reduced)
      out.push_back(f);
    else if (keepdims)
      out.push_back(-1);
  }
  b.rule.operandDims.push_back(in);
  b.rule.resultDims.push_back(out);
  return b.rule;
}

std::optional<OpShardingRule> transposeRule(dopt::TransposeOp op) {
  auto x = shapeOf(op.getInput());
  if (!x)
    return std::nullopt;
  RuleBuilder b;
  Dims in = b.dims(*x);
  Dims out;
  for (int64_t p : op.getPerm())
    out.push_back(in[p]);
  b.rule.operandDims.push_back(in);
  b.rule.resultDims.push_back(out);
  return b.rule;
}

/// Reshape: dimensions are grouped into the shortest runs with equal
/// products on both sides, and each run is cut into its common refinement
/// ("atoms": [T, B, D] -> [T, B*H, D/H] has atoms T | B | H | D/H). A split
/// of a dimension splits its major (first) atom into contiguous blocks, so
/// an atom is a factor of the rule only where it is the major atom of its
/// dimension on both sides ([B, D] -> [B*H, hd]: B is; H is major in D but
/// minor in B*H, so a split of D must be undone before the reshape). A
/// dimension whose major atom is not such a factor maps to no factor: it is
/// never split here, and a split that reaches it is resharded first. Runs
/// with no common refinement ([6, 4] -> [4, 6]) are not split at all.
std::optional<OpShardingRule> reshapeRule(mlir::Operation *op) {
  auto x = shapeOf(op->getOperand(0)), y = shapeOf(op->getResult(0));
  if (!x || !y)
    return std::nullopt;
  RuleBuilder b;
  Dims in(x->size(), -1), out(y->size(), -1);
  size_t i = 0, j = 0;
  while (i < x->size() || j < y->size()) {
    // Size-1 dimensions stand alone.
    if (i < x->size() && (*x)[i] == 1) {
      ++i;
      continue;
    }
    if (j < y->size() && (*y)[j] == 1) {
      ++j;
      continue;
    }
    if (i == x->size() || j == y->size())
      break; // zero-size tensors: leave the rest unsplittable
    size_t i0 = i, j0 = j;
    int64_t px = (*x)[i++], py = (*y)[j++];
    while (px != py) {
      if (px < py && i < x->size())
        px *= (*x)[i++];
      else if (py < px && j < y->size())
        py *= (*y)[j++];
      else
        break;
    }
    if (px != py)
      break;
    // The run's atoms: the major atom of every dimension, or -1 when the
    // run has no common refinement.
    Dims majorX(i - i0, -1), majorY(j - j0, -1);
    llvm::SmallDenseMap<int64_t, int, 8> majorCount; // atom -> sides major
    size_t a = i0, c = j0;
    int64_t remX = (*x)[a], remY = (*y)[c];
    bool regular = true, startX = true, startY = true;
    while (a < i && c < j) {
      if (remX == 1) {
        ++a;
        startX = true;
        remX = a < i ? (*x)[a] : 1;
        continue;
      }
      if (remY == 1) {
        ++c;
        startY = true;
        remY = c < j ? (*y)[c] : 1;
        continue;
      }
      int64_t atom;
      if (remX % remY == 0)
        atom = remY;
      else if (remY % remX == 0)
        atom = remX;
      else {
        regular = false;
        break;
      }
      int64_t f = b.add(atom);
      if (startX) {
        majorX[a - i0] = f;
        ++majorCount[f];
      }
      if (startY) {
        majorY[c - j0] = f;
        ++majorCount[f];
      }
      startX = startY = false;
      remX /= atom;
      remY /= atom;
    }
    if (!regular)
      continue;
    auto shared = [&](int64_t f) {
      return f >= 0 && majorCount.lookup(f) == 2 ? f : -1;
    };
    for (size_t k = i0; k < i; ++k)
      in[k] = (*x)[k] == 1 ? -1 : shared(majorX[k - i0]);
    for (size_t k = j0; k < j; ++k)
      out[k] = (*y)[k] == 1 ? -1 : shared(majorY[k - j0]);
  }
  b.rule.operandDims.push_back(in);
  b.rule.resultDims.push_back(out);
  return b.rule;
}

/// Ops that move data along one axis (concat, split, pad, slice): the
/// dimensions in `fixed` are not split, the others are parallel.
std::optional<OpShardingRule> alongAxesRule(mlir::Operation *op,
                                            llvm::function_ref<bool(int64_t)>
                                                fixed) {
  auto y = shapeOf(op->getResult(0));
  if (!y)
    return std::nullopt;
  RuleBuilder b;
  Dims factors;
  for (auto [d, size] : llvm::enumerate(*y))
    factors.push_back(fixed(static_cast<int64_t>(d)) ? -1 : b.dim(size));
  for (mlir::Value operand : op->getOperands()) {
    auto shape = shapeOf(operand);
    if (!shape || shape->size() != y->size())
      return std::nullopt;
    b.rule.operandDims.push_back(factors);
  }
  for (unsigned r = 0; r < op->getNumResults(); ++r)
    b.rule.resultDims.push_back(factors);
  return b.rule;
}

/// Whether `v` can be made in a block layout along `dim` (the walk of
/// blockLayoutOperands back to weights; shard.shard annotations are looked
/// through).
bool blockLayoutReaches(mlir::Value v, int64_t dim, std::string &why,
                        unsigned depth = 0) {
  mlir::Operation *def = v.getDefiningOp();
  while (def && def->getName().getStringRef() == "shard.shard") {
    v = def->getOperand(0);
    def = v.getDefiningOp();
  }
  if (!def) {
    why = "a function argument cannot be loaded in a block layout";
    return false;
  }
  if (depth > 64) {
    why = "the chain of producers is too long";
    return false;
  }
  auto next = blockLayoutOperands(def, dim, why);
  if (failed(next))
    return false;
  for (const BlockOperand &b : *next)
    if (!blockLayoutReaches(def->getOperand(b.operand), b.dim, why, depth + 1))
      return false;
  return true;
}

/// Whether the block layout of a concatenation `v` along `axis` of parts of
/// `sizes` is only ever undone: through elementwise ops (and shard.shard
/// annotations) every use reaches a dopt.split along `axis` into parts of
/// the same sizes. A concatenation of branches that a convolution, a matmul
/// or anything else reads whole (an Inception or Fire module's) is not one:
/// its blocks would not be where those ops look for its rows.
bool concatBlocksUndone(mlir::Value v, int64_t axis,
                        llvm::ArrayRef<int64_t> sizes, unsigned depth = 0) {
  if (depth > 64 || v.use_empty())
    return false;
  for (mlir::Operation *user : v.getUsers()) {
    if (user->getName().getStringRef() == "shard.shard" ||
        (mlir::isa<dopt::ElementwiseOpInterface>(user) &&
         user->getNumResults() == 1 &&
         shapeOf(user->getResult(0)) == shapeOf(v))) {
      if (!concatBlocksUndone(user->getResult(0), axis, sizes, depth + 1))
        return false;
      continue;
    }
    auto split = mlir::dyn_cast<dopt::SplitOp>(user);
    if (!split || split.getAxis() != axis ||
        split.getSizes() != llvm::ArrayRef<int64_t>(sizes))
      return false;
  }
  return true;
}

/// concat (parts = operands) and split (parts = results) along `axis`: the
/// other dimensions are parallel; the axis is splittable when every part's
/// size divides evenly, in a block layout: each device holds the same block
/// of every part (device i: rows [i·p/n, (i+1)·p/n) of each part p). That
/// is Megatron's layout for a fused QKV projection followed by a split into
/// Q, K and V: the partitioner permutes the producer's weight columns (or
/// the blocks of a collective) to match, at no extra cost.
std::optional<OpShardingRule> partsRule(mlir::Operation *op, int64_t axis,
                                        bool partsAreOperands) {
  auto rule = alongAxesRule(op, [&](int64_t d) { return d == axis; });
  if (!rule)
    return rule;
  int64_t g = 0;
  auto parts = partsAreOperands ? mlir::ValueRange(op->getOperands())
                                : mlir::ValueRange(op->getResults());
  for (mlir::Value v : parts) {
    auto shape = shapeOf(v);
    if (!shape)
      return rule;
    g = std::gcd(g, (*shape)[axis]);
  }
  if (g <= 1)
    return rule;
  // A split's operand must be made in the block layout all the way back to
  // the weights; a concatenation's result split again the same way.
  if (!partsAreOperands && op->getNumResults() > 1) {
    std::string why;
    if (!blockLayoutReaches(op->getOperand(0), axis, why))
      return rule;
  }
  if (partsAreOperands && op->getNumOperands() > 1) {
    llvm::SmallVector<int64_t> sizes;
    for (mlir::Value v : parts)
      sizes.push_back((*shapeOf(v))[axis]);
    if (!concatBlocksUndone(op->getResult(0), axis, sizes))
      return rule;
  }
  rule->factors.push_back({g, FactorKind::Parallel, PartialKind::Sum});
  int64_t f = static_cast<int64_t>(rule->factors.size()) - 1;
  for (auto &dims : rule->operandDims)
    dims[axis] = f;
  for (auto &dims : rule->resultDims)
    dims[axis] = f;
  return rule;
}

/// gather(data, indices, axis): result = data[:axis] ++ indices ++
/// data[axis+1:]. Splitting the gathered axis of `data` (a vocabulary-split
/// embedding table) leaves each device with the rows it owns: a partial
/// sum once rows it does not own read as zero.
std::optional<OpShardingRule> gatherRule(dopt::GatherOp op) {
  auto data = shapeOf(op.getData()), idx = shapeOf(op.getIndices());
  if (!data || !idx)
    return std::nullopt;
  int64_t axis = op.getAxis();
  RuleBuilder b;
  Dims dataDims, idxDims, out;
  for (int64_t d = 0; d < axis; ++d) {
    int64_t f = b.dim((*data)[d]);
    dataDims.push_back(f);
    out.push_back(f);
  }
  dataDims.push_back(b.dim((*data)[axis], FactorKind::Reduction));
  for (int64_t size : *idx) {
    int64_t f = b.dim(size);
    idxDims.push_back(f);
    out.push_back(f);
  }
  for (size_t d = axis + 1; d < data->size(); ++d) {
    int64_t f = b.dim((*data)[d]);
    dataDims.push_back(f);
    out.push_back(f);
  }
  b.rule.operandDims.push_back(dataDims);
  b.rule.operandDims.push_back(idxDims);
  b.rule.resultDims.push_back(out);
  return b.rule;
}

// The rule of each op that has one (ShardingRuleOpInterface): one overload
// per op, attached to the op by registerShardingRuleModels.
using Rule = std::optional<OpShardingRule>;

Rule ruleOf(dopt::SoftmaxOp o) { return softmaxRule(o, o.getAxis()); }
Rule ruleOf(dopt::LogSoftmaxOp o) { return softmaxRule(o, o.getAxis()); }
Rule ruleOf(dopt::LayerNormOp o) { return layerNormRule(o); }
Rule ruleOf(dopt::BatchNormOp o) { return batchNormRule(o); }
Rule ruleOf(dopt::MatMulOp o) { return matmulRule(o); }
Rule ruleOf(dopt::GemmOp o) { return gemmRule(o); }
Rule ruleOf(dopt::ConvOp o) {
  return convolutionRule(o.getInput(), o.getResult(),
                         static_cast<bool>(o.getBias()), o.getGroup(),
                         /*transposed=*/false);
}
Rule ruleOf(dopt::ConvTransposeOp o) {
  return convolutionRule(o.getInput(), o.getResult(),
                         static_cast<bool>(o.getBias()), o.getGroup(),
                         /*transposed=*/true);
}
Rule ruleOf(dopt::MaxPoolOp o) { return poolRule(o, /*global=*/false); }
Rule ruleOf(dopt::AvgPoolOp o) { return poolRule(o, /*global=*/false); }
Rule ruleOf(dopt::GlobalAvgPoolOp o) { return poolRule(o, /*global=*/true); }
Rule ruleOf(dopt::ReduceSumOp o) {
  return reduceRule(o, o.getAxes(), o.getKeepdims(), PartialKind::Sum);
}
Rule ruleOf(dopt::ReduceMeanOp o) {
  return reduceRule(o, o.getAxes(), o.getKeepdims(), PartialKind::Mean);
}
Rule ruleOf(dopt::ReduceMaxOp o) {
  return reduceRule(o, o.getAxes(), o.getKeepdims(), PartialKind::Max);
}
Rule ruleOf(dopt::TransposeOp o) { return transposeRule(o); }
Rule ruleOf(dopt::ReshapeOp o) { return reshapeRule(o); }
Rule ruleOf(dopt::ConcatOp o) {
  return partsRule(o, o.getAxis(), /*partsAreOperands=*/true);
}
Rule ruleOf(dopt::SplitOp o) {
  return partsRule(o, o.getAxis(), /*partsAreOperands=*/false);
}
Rule ruleOf(dopt::SliceOp o) {
  auto in = shapeOf(o.getInput());
  if (!in)
    return std::nullopt;
  ArrayRef<int64_t> starts = o.getStarts(), ends = o.getEnds(),
                    steps = o.getSteps();
  return alongAxesRule(o, [&](int64_t d) {
    return !(starts[d] == 0 && steps[d] == 1 && ends[d] >= (*in)[d]);
  });
}
Rule ruleOf(dopt::PadOp o) {
  ArrayRef<int64_t> pads = o.getPads();
  size_t rank = pads.size() / 2;
  return alongAxesRule(
      o, [&](int64_t d) { return pads[d] != 0 || pads[rank + d] != 0; });
}
Rule ruleOf(dopt::GatherOp o) { return gatherRule(o); }
// One element per index along the axis: every other dimension splits where
// the data and the indices have the same extent (each device gathers or
// scatters within its own rows); the axis itself and shorter index
// dimensions do not.
Rule ruleOf(dopt::TopKOp o) {
  int64_t axis = o.getAxis();
  return alongAxesRule(o, [&](int64_t d) { return d == axis; });
}
template <typename OpT> Rule elementsAlongAxisRule(OpT o) {
  auto data = shapeOf(o.getData()), idx = shapeOf(o.getIndices());
  int64_t axis = o.getAxis();
  if (!data || !idx)
    return std::nullopt;
  return alongAxesRule(
      o, [&](int64_t d) { return d == axis || (*data)[d] != (*idx)[d]; });
}
// Attention: the leading (batch, head) dimensions and the queries split;
// the keys and the contracted width do not (the softmax runs over every
// key); the values' width splits (each device its columns of the output).
Rule ruleOf(dopt::AttentionOp o) {
  auto q = shapeOf(o.getQuery()), k = shapeOf(o.getKey()),
       v = shapeOf(o.getValue());
  if (!q || !k || !v)
    return std::nullopt;
  RuleBuilder b;
  int64_t r = static_cast<int64_t>(q->size());
  Dims lead;
  for (int64_t d = 0; d < r - 2; ++d)
    lead.push_back(b.dim((*q)[d]));
  int64_t tq = b.dim((*q)[r - 2]);
  int64_t width = b.dim((*q)[r - 1], FactorKind::NeedReplication);
  int64_t tk = b.dim((*k)[r - 2], FactorKind::NeedReplication);
  int64_t dv = b.dim((*v)[r - 1]);
  auto with = [&](int64_t x, int64_t y) {
    Dims d(lead);
    d.push_back(x);
    d.push_back(y);
    return d;
  };
  b.rule.operandDims = {with(tq, width), with(tk, width), with(tk, dv)};
  SmallVector<int64_t> scores(q->drop_back(1));
  scores.push_back((*k)[r - 2]);
  for (mlir::Value mask : {o.getKeep(), o.getBias()})
    if (mask) {
      auto m = shapeOf(mask);
      if (!m)
        return std::nullopt;
      b.rule.operandDims.push_back(broadcastDims(*m, scores, with(tq, tk)));
    }
  b.rule.resultDims = {with(tq, dv)};
  return b.rule;
}
Rule ruleOf(dopt::GatherElementsOp o) { return elementsAlongAxisRule(o); }
Rule ruleOf(dopt::ScatterElementsOp o) { return elementsAlongAxisRule(o); }

template <typename OpT>
struct ShardingRuleModel
    : dopt::ShardingRuleOpInterface::ExternalModel<ShardingRuleModel<OpT>,
                                                   OpT> {
  bool getShardingRule(mlir::Operation *op, OpShardingRule &rule) const {
    Rule r = ruleOf(llvm::cast<OpT>(op));
    if (!r)
      return false;
    rule = std::move(*r);
    return true;
  }
};

template <typename... OpTs> void attachRules(mlir::MLIRContext *ctx) {
  (OpTs::template attachInterface<ShardingRuleModel<OpTs>>(*ctx), ...);
}

} // namespace

void distopt::planner::registerShardingRuleModels(
    mlir::DialectRegistry &registry) {
  registry.addExtension(+[](mlir::MLIRContext *ctx, dopt::DoptDialect *) {
    attachRules<dopt::AttentionOp, dopt::SoftmaxOp, dopt::LogSoftmaxOp, dopt::LayerNormOp,
                dopt::BatchNormOp, dopt::MatMulOp, dopt::GemmOp, dopt::ConvOp,
                dopt::ConvTransposeOp, dopt::MaxPoolOp, dopt::AvgPoolOp,
                dopt::GlobalAvgPoolOp, dopt::ReduceSumOp, dopt::ReduceMeanOp,
                dopt::ReduceMaxOp, dopt::TransposeOp, dopt::ReshapeOp,
                dopt::ConcatOp, dopt::SplitOp, dopt::SliceOp, dopt::PadOp,
                dopt::GatherOp, dopt::TopKOp, dopt::GatherElementsOp,
                dopt::ScatterElementsOp>(ctx);
  });
}

std::optional<OpShardingRule>
distopt::planner::getShardingRule(mlir::Operation *op) {
  if (op->getNumResults() == 0)
    return std::nullopt;
  // Elementwise ops (ElementwiseOpInterface) and expand (a broadcast).
  if (llvm::isa<dopt::ElementwiseOpInterface, dopt::ExpandOp>(op))
    return elementwiseRule(op);
  auto withRule = llvm::dyn_cast<dopt::ShardingRuleOpInterface>(op);
  OpShardingRule rule;
  if (!withRule || !withRule.getShardingRule(rule))
    return std::nullopt;
  return rule;
}

llvm::FailureOr<SmallVector<BlockOperand>>
distopt::planner::blockLayoutOperands(mlir::Operation *def, int64_t dim,
                                      std::string &why) {
  SmallVector<BlockOperand> out;
  if (llvm::isa<dopt::WeightOp>(def))
    return out;
  auto type = llvm::cast<mlir::RankedTensorType>(def->getResult(0).getType());
  int64_t rank = type.getRank();
  // Elementwise arithmetic: every operand not broadcast along the dimension.
  if (llvm::isa<dopt::AddOp, dopt::SubOp, dopt::MulOp, dopt::DivOp>(def)) {
    for (auto [i, operand] : llvm::enumerate(def->getOperands())) {
      auto ot = llvm::cast<mlir::RankedTensorType>(operand.getType());
      int64_t d = dim - (rank - ot.getRank());
      if (d < 0 || ot.getDimSize(d) != type.getDimSize(dim))
        continue;
      out.push_back({static_cast<unsigned>(i), d});
    }
    return out;
  }
  // A product's columns come from the right operand's columns (and a
  // GEMM's bias).
  if (auto mm = llvm::dyn_cast<dopt::MatMulOp>(def)) {
    auto rhs = llvm::cast<mlir::RankedTensorType>(mm.getRhs().getType());
    if (dim != rank - 1 || rhs.getRank() < 2) {
      why = "a matmul makes a block layout along its columns only";
      return mlir::failure();
    }
    out.push_back({1, rhs.getRank() - 1});
    return out;
  }
  if (auto gemm = llvm::dyn_cast<dopt::GemmOp>(def)) {
    if (dim != 1) {
      why = "a gemm makes a block layout along its columns only";
      return mlir::failure();
    }
    out.push_back({1, gemm.getTransB() ? 0 : 1});
    if (gemm.getC()) {
      auto ct = llvm::cast<mlir::RankedTensorType>(gemm.getC().getType());
      int64_t d = ct.getRank() - 1;
      if (d >= 0 && ct.getDimSize(d) == type.getDimSize(1))
        out.push_back({2, d});
    }
    return out;
  }
  // A reshape that keeps the innermost dimension ([B*T, 3D] -> [B, T, 3D]).
  if (llvm::isa<dopt::ReshapeOp>(def)) {
    auto in = llvm::cast<mlir::RankedTensorType>(def->getOperand(0).getType());
    if (dim != rank - 1 || in.getRank() == 0 ||
        in.getDimSize(in.getRank() - 1) != type.getDimSize(dim)) {
      why = "a reshape carries a block layout only along an innermost "
            "dimension it keeps";
      return mlir::failure();
    }
    out.push_back({0, in.getRank() - 1});
    return out;
  }
  why = "its producer '" + def->getName().getStringRef().str() +
        "' cannot be made in a block layout";
  return mlir::failure();
}
