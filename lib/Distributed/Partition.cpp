//===- Partition.cpp - planned program -> the program one rank runs -------===//
//
// See Passes.td (PartitionPass). The pass works in place:
//  1. read the sharding every value is produced in from its shard.shard;
//  2. mark tensors that must hold a block layout (an axis split feeding a
//     multi-result dopt.split) back to the weights they come from;
//  3. in program order: retype arguments and op results to local shapes and
//     fix shape attributes; replace each annotate_for_users shard.shard by
//     the collectives that turn the produced sharding into the needed one;
//     drop the other shard.shard and shard.sharding ops.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/Passes.h"
#include "distopt/Planner/Reshard.h"
#include "distopt/Planner/ShardingRules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace distopt {
#define GEN_PASS_DEF_PARTITIONPASS
#include "distopt/Distributed/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

using grid::kDataAxis;
using grid::kTensorAxis;
constexpr llvm::StringLiteral kGridName = grid::kName;

struct Sharding {
  SmallVector<SmallVector<int16_t>> axes; ///< per dimension
  std::optional<shard::ReductionKind> partial; ///< over the tensor axis
  int64_t batchDim = -1; ///< the dimension carrying the batch, if any
  int64_t batchInner = 1; ///< elements of that dimension below the batch

  /// The dimension split over `axis`, or -1.
  int64_t dimOf(int16_t axis) const {
    for (auto [d, a] : llvm::enumerate(axes))
      if (llvm::is_contained(a, axis))
        return static_cast<int64_t>(d);
    return -1;
  }
};

Sharding shardingOf(shard::ShardOp op, int64_t rank) {
  Sharding s;
  s.axes.resize(rank);
  auto def = op.getSharding().getDefiningOp<shard::ShardingOp>();
  if (def)
    for (auto [d, a] : llvm::enumerate(def.getSplitAxes().getAxes()))
      if (d < s.axes.size())
        s.axes[d].assign(a.asArrayRef().begin(), a.asArrayRef().end());
  if (auto b = op->getAttrOfType<IntegerAttr>("dopt.batch_dim"))
    s.batchDim = b.getInt();
  if (auto b = op->getAttrOfType<IntegerAttr>("dopt.batch_inner"))
    s.batchInner = b.getInt();
  if (auto p = op->getAttrOfType<StringAttr>("dopt.partial"))
    s.partial = p.getValue() == "max"    ? shard::ReductionKind::Max
                : p.getValue() == "mean" ? shard::ReductionKind::Average
                                         : shard::ReductionKind::Sum;
  return s;
}

/// The value under any shard.shard annotations.
Value unannotated(Value v) {
  while (auto s = v.getDefiningOp<shard::ShardOp>())
    v = s.getSrc();
  return v;
}

struct BlockLayout {
  int64_t dim = -1;
  int64_t parts = 1;
};

class Partitioner {
public:
  Partitioner(ModuleOp module, func::FuncOp func, shard::GridOp grid,
              bool outline)
      : module(module), func(func), grid(grid), outline(outline),
        builder(module.getContext()) {
    gridShape.assign(grid.getShape().begin(), grid.getShape().end());
  }

  LogicalResult run();

private:
  ModuleOp module;
  func::FuncOp func;
  shard::GridOp grid;
  bool outline; ///< pipelined plans: outline the stages (outlinePipelineStages)
  OpBuilder builder;
  SmallVector<int64_t> gridShape;
  int64_t microbatches = 1; ///< > 1 only for pipelined plans
  llvm::DenseMap<Value, Sharding> produced;
  llvm::DenseMap<Value, BlockLayout> blocks;
  llvm::DenseMap<Value, Type> globalTypes; ///< before partitioning
  /// Values whose batch is padded (an uneven split over the data axis).
  llvm::DenseSet<Value> padded;

  FlatSymbolRefAttr gridRef() {
    return FlatSymbolRefAttr::get(module.getContext(), kGridName);
  }
  DenseI16ArrayAttr axisAttr(int16_t axis) {
    return builder.getDenseI16ArrayAttr({axis});
  }

  /// Set by localType when the last type it made is padded (uneven batch).
  bool paddedNow = false;

  /// The model's global batch (the batch dimension of the batch-carrying
  /// inputs); 0 when no input carries a batch.
  int64_t globalBatch = 0;

  /// The local type of a value of type `global` held as `s`. A split takes
  /// the major part of a dimension; the data axis takes the batch, which
  /// may sit inside a merged dimension ([T, B*H, hd] after attention folds
  /// heads into the batch): there the dimension is outer x batch x inner
  /// and only the batch part shrinks.
  FailureOr<RankedTensorType> localType(RankedTensorType global,
                                        const Sharding &s, Location loc) {
    paddedNow = false;
    SmallVector<int64_t> shape(global.getShape());
    for (auto [d, axes] : llvm::enumerate(s.axes)) {
      if (d >= shape.size())
        break;
      bool batchHere = static_cast<int64_t>(d) == s.batchDim && globalBatch > 0;
      if (batchHere) {
        int64_t whole = globalBatch * s.batchInner;
        if (whole <= 0 || shape[d] % whole != 0)
          return emitError(loc) << "dimension " << d << " of size " << shape[d]
                                << " does not hold the batch of "
                                << globalBatch << " (internal error)";
        int64_t outer = shape[d] / whole, batch = globalBatch;
        for (int16_t a : axes) {
          int64_t n = gridShape[a];
          if (a == kDataAxis) {
            // The batch split over the data axis may be uneven: every
            // replica runs ceil(B/dp) samples, the last ones padded (the
            // runtime fills and drops the padding).
            paddedNow |= batch % n != 0;
            batch = (batch + n - 1) / n;
          } else if (outer == 1 && batch % n == 0) {
            batch /= n;
          } else if (outer > 1 && outer % n == 0) {
            outer /= n;
          } else {
            return emitError(loc) << "dimension " << d << " of size "
                                  << shape[d] << " does not split evenly over "
                                  << n << " devices";
          }
        }
        // Pipelined programs run one micro-batch at a time.
        if (microbatches > 1) {
          if (batch % microbatches != 0)
            return emitError(loc) << "the batch of " << batch << " per replica "
                                  << "does not split into " << microbatches
                                  << " micro-batches";
          batch /= microbatches;
        }
        shape[d] = outer * batch * s.batchInner;
        continue;
      }
      int64_t parts = 1;
      for (int16_t a : axes)
        parts *= gridShape[a];
      if (shape[d] % parts != 0)
        return emitError(loc) << "dimension " << d << " of size " << shape[d]
                              << " does not split evenly over " << parts
                              << " devices (only the batch may split "
                              << "unevenly, over the data axis)";
      shape[d] /= parts;
    }
    return RankedTensorType::get(shape, global.getElementType(),
                                 global.getEncoding());
  }

  LogicalResult markBlockLayouts();
  LogicalResult propagateBlock(Value v, BlockLayout layout, Operation *user);
  LogicalResult retypeOp(Operation *op);
  LogicalResult checkRule(Operation *op);
  LogicalResult completeDataReduction(Operation *op);
  /// Each op's sharding rule, taken on the global shapes before retyping.
  llvm::DenseMap<Operation *, planner::OpShardingRule> rules;
  LogicalResult splitVocabularyGather(dopt::GatherOp g);
  void placeDropoutBlock(dopt::DropoutOp d);
  FailureOr<Value> reshard(Value v, const Sharding &from, const Sharding &to,
                           Location loc);
};

LogicalResult Partitioner::propagateBlock(Value v, BlockLayout layout,
                                          Operation *user) {
  auto [it, inserted] = blocks.try_emplace(v, layout);
  if (!inserted) {
    if (it->second.dim != layout.dim || it->second.parts != layout.parts)
      return user->emitError("a tensor needs two block layouts");
    return success();
  }
  Operation *def = v.getDefiningOp();
  if (!def)
    return user->emitError("a block-layout split (fused QKV) of a function "
                           "argument is not partitioned");
  // The planner's walk (ShardingRules.h): it offered this split only where
  // the walk reaches the weights.
  std::string why;
  auto next = planner::blockLayoutOperands(def, layout.dim, why);
  if (failed(next))
    return def->emitError("a block-layout split (fused QKV) cannot be made "
                          "here: ")
           << why << " (internal error: the planner offers no such split)";
  for (const planner::BlockOperand &b : *next)
    if (failed(propagateBlock(unannotated(def->getOperand(b.operand)),
                              {b.dim, layout.parts}, def)))
      return failure();
  return success();
}

LogicalResult Partitioner::markBlockLayouts() {
  WalkResult r = func.walk([&](dopt::SplitOp split) {
    if (split->getNumResults() < 2)
      return WalkResult::advance();
    // The sharding the split consumes: the annotation on its operand.
    auto ann = split.getInput().getDefiningOp<shard::ShardOp>();
    if (!ann)
      return WalkResult::advance();
    int64_t rank = cast<RankedTensorType>(split.getInput().getType()).getRank();
    if (shardingOf(ann, rank).dimOf(kTensorAxis) != split.getAxis())
      return WalkResult::advance();
    BlockLayout layout{static_cast<int64_t>(split.getAxis()),
                       static_cast<int64_t>(split->getNumResults())};
    if (failed(propagateBlock(unannotated(split.getInput()), layout, split)))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

/// Turns `v`, held as `from`, into `to` by the steps planner::reshardSteps
/// decides (multi-step on 2-D grids), a partial value being one over the
/// tensor axis.
FailureOr<Value> Partitioner::reshard(Value v, const Sharding &from,
                                      const Sharding &to, Location loc) {
  if (to.partial)
    return emitError(loc) << "an operand cannot be needed as a partial value";
  size_t rank = cast<RankedTensorType>(v.getType()).getRank();
  SmallVector<SmallVector<int16_t>> cur(from.axes), want(to.axes);
  cur.resize(rank);
  want.resize(rank);
  bool change = from.partial.has_value() || cur != want;
  if (padded.count(v) && from.dimOf(kDataAxis) != to.dimOf(kDataAxis))
    return emitError(loc) << "resharding an unevenly split batch along the "
                             "data axis is not supported";
  if (change && blocks.count(v)) {
    // A whole tensor (a weight shared by two fused-QKV projections) sliced
    // into its block layout: each of the k parts along the dimension gives
    // this rank its block -- [.., k, n/k, ..] sliced along n/k.
    BlockLayout layout = blocks.lookup(v);
    auto type = cast<RankedTensorType>(v.getType());
    bool whole = !from.partial && llvm::all_of(cur, [](const auto &a) {
      return a.empty();
    });
    bool justTheBlocks = true;
    for (size_t d = 0; d < rank; ++d)
      justTheBlocks &= static_cast<int64_t>(d) == layout.dim
                           ? want[d] == SmallVector<int16_t>{kTensorAxis}
                           : want[d].empty();
    if (!whole || !justTheBlocks || layout.dim < 0 ||
        type.getDimSize(layout.dim) % layout.parts != 0)
      return emitError(loc) << "resharding a block-layout tensor (fused QKV) "
                               "is not supported";
    int64_t d = layout.dim, k = layout.parts;
    SmallVector<int64_t> parts(type.getShape());
    parts[d] /= k;
    parts.insert(parts.begin() + d, k);
    Value x = dopt::ReshapeOp::create(builder, loc, v,
                                      builder.getDenseI64ArrayAttr(parts));
    SmallVector<int64_t> mine(parts);
    mine[d + 1] /= gridShape[kTensorAxis];
    x = shard::AllSliceOp::create(
            builder, loc, RankedTensorType::get(mine, type.getElementType()),
            gridRef(), axisAttr(kTensorAxis), x, builder.getIndexAttr(d + 1))
            .getResult();
    SmallVector<int64_t> local(type.getShape());
    local[d] /= gridShape[kTensorAxis];
    return dopt::ReshapeOp::create(builder, loc, x,
                                   builder.getDenseI64ArrayAttr(local))
        .getResult();
  }
  auto resized = [&](Value x, int64_t d, int64_t num, int64_t den) {
    auto t = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[d] = shape[d] * num / den;
    return RankedTensorType::get(shape, t.getElementType());
  };
  // The steps are the planner's (planner::reshardSteps): what it priced is
  // what is emitted.
  planner::GridLayout fromLayout{cur, from.partial.has_value()};
  planner::GridLayout toLayout{want, false};
  Value x = v;
  for (const planner::ReshardStep &step :
       planner::reshardSteps(fromLayout, toLayout, kTensorAxis)) {
    int64_t n = gridShape[step.axis];
    switch (step.kind) {
    case planner::ReshardStep::AllReduce:
      x = shard::AllReduceOp::create(
              builder, loc, x.getType(), gridRef(), axisAttr(step.axis), x,
              shard::ReductionKindAttr::get(module.getContext(), *from.partial))
              .getResult();
      break;
    case planner::ReshardStep::ReduceScatter:
      x = shard::ReduceScatterOp::create(
              builder, loc, resized(x, step.dim, 1, n), gridRef(),
              axisAttr(step.axis), x,
              shard::ReductionKindAttr::get(module.getContext(), *from.partial),
              builder.getIndexAttr(step.dim))
              .getResult();
      break;
    case planner::ReshardStep::AllGather:
      x = shard::AllGatherOp::create(builder, loc, resized(x, step.dim, n, 1),
                                     gridRef(), axisAttr(step.axis), x,
                                     builder.getIndexAttr(step.dim))
              .getResult();
      break;
    case planner::ReshardStep::AllToAll: {
      auto t = cast<RankedTensorType>(x.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape[step.dim] /= n;
      shape[step.fromDim] *= n;
      x = shard::AllToAllOp::create(
              builder, loc, RankedTensorType::get(shape, t.getElementType()),
              gridRef(), axisAttr(step.axis), x,
              builder.getIndexAttr(step.dim), builder.getIndexAttr(step.fromDim))
              .getResult();
      break;
    }
    case planner::ReshardStep::Slice:
      x = shard::AllSliceOp::create(builder, loc, resized(x, step.dim, 1, n),
                                    gridRef(), axisAttr(step.axis), x,
                                    builder.getIndexAttr(step.dim))
              .getResult();
      break;
    }
  }
  return x;
}

ArrayAttr splitAxesAttr(Builder &b, const Sharding &s) {
  SmallVector<Attribute> dims;
  for (auto &a : s.axes) {
    SmallVector<int64_t> wide(a.begin(), a.end());
    dims.push_back(b.getI64ArrayAttr(wide));
  }
  return b.getArrayAttr(dims);
}

LogicalResult Partitioner::retypeOp(Operation *op) {
  for (OpResult r : op->getResults()) {
    auto global = dyn_cast<RankedTensorType>(r.getType());
    if (!global)
      continue;
    auto it = produced.find(r);
    if (it == produced.end())
      continue; // replicated (constants)
    FailureOr<RankedTensorType> local = localType(global, it->second,
                                                  op->getLoc());
    if (failed(local))
      return failure();
    globalTypes[r] = global;
    r.setType(*local);
    if (paddedNow)
      padded.insert(r);
  }
  auto localShape = [&](unsigned i) {
    return cast<RankedTensorType>(op->getResult(i).getType()).getShape();
  };
  if (auto w = dyn_cast<dopt::WeightOp>(op)) {
    auto it = produced.find(w.getResult());
    if (it != produced.end() && it->second.dimOf(kTensorAxis) >= 0) {
      w->setAttr("dopt.global_type", TypeAttr::get(w.getType()));
      w->setAttr("dopt.split_axes", splitAxesAttr(builder, it->second));
      auto b = blocks.find(w.getResult());
      if (b != blocks.end() && b->second.parts > 1)
        w->setAttr("dopt.block_parts",
                   builder.getI64IntegerAttr(b->second.parts));
      w.setTypeAttr(TypeAttr::get(w.getResult().getType()));
    }
    return success();
  }
  if (auto c = dyn_cast<dopt::ConstantOp>(op)) {
    auto type = c.getResult().getType();
    auto value = dyn_cast<DenseElementsAttr>(c.getValue());
    if (type == c.getValue().getType())
      return success();
    // A constant cut along the batch: every sample's rows are the same
    // (the planner only cuts such constants), so each rank keeps its count.
    auto it = produced.find(c.getResult());
    int64_t d = it == produced.end() ? -1 : it->second.batchDim;
    if (!value || d < 0 || !dopt::isUniformAlong(value, d))
      return op->emitError("a split constant is not partitioned yet");
    c.setValueAttr(dopt::resizeUniform(
        value, d, cast<RankedTensorType>(type).getDimSize(d)));
    return success();
  }
  if (auto g = dyn_cast<dopt::GatherOp>(op)) {
    auto it = produced.find(g.getResult());
    if (it != produced.end() && it->second.partial)
      return splitVocabularyGather(g);
  }
  if (auto d = dyn_cast<dopt::DropoutOp>(op))
    placeDropoutBlock(d);
  // Padded samples must stay apart from real ones: an op that reads a padded
  // batch must keep the batch split (it works per sample).
  if (llvm::any_of(op->getOperands(),
                   [&](Value v) { return padded.count(v); }))
    for (OpResult r : op->getResults())
      if (isa<RankedTensorType>(r.getType()) && !padded.count(r))
        return op->emitError("this op combines samples of an unevenly split "
                             "batch (its result does not keep the batch "
                             "split); use a data-parallel degree that divides "
                             "the batch");
  // A GEMM split along K leaves partial sums; its C term must count once in
  // their sum: every rank adds C·beta/t.
  if (auto gemm = dyn_cast<dopt::GemmOp>(op)) {
    auto it = produced.find(gemm.getResult());
    if (gemm.getC() && it != produced.end() && it->second.partial)
      gemm.setBetaAttr(builder.getF32FloatAttr(
          gemm.getBeta().convertToFloat() /
          static_cast<float>(gridShape[kTensorAxis])));
  }
  // Shape attributes follow the local types.
  llvm::TypeSwitch<Operation *>(op)
      .Case<dopt::ReshapeOp>([&](dopt::ReshapeOp r) {
        r.setShape(localShape(0));
      })
      .Case<dopt::ExpandOp>([&](dopt::ExpandOp e) {
        e.setShape(localShape(0));
      })
      .Case<dopt::SplitOp>([&](dopt::SplitOp s) {
        SmallVector<int64_t> sizes;
        for (unsigned i = 0; i < s->getNumResults(); ++i)
          sizes.push_back(localShape(i)[s.getAxis()]);
        s.setSizes(sizes);
      })
      .Case<dopt::SliceOp>([&](dopt::SliceOp s) {
        auto in = cast<RankedTensorType>(s.getInput().getType()).getShape();
        SmallVector<int64_t> starts(s.getStarts()), ends(s.getEnds());
        for (size_t d = 0; d < in.size(); ++d)
          if (localShape(0)[d] == in[d] && starts[d] == 0 &&
              s.getSteps()[d] == 1)
            ends[d] = in[d]; // an untouched (possibly split) dimension
        s.setEnds(ends);
      });
  // The op's own type inference must agree with the local types.
  if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
    SmallVector<Type> inferred;
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), inferred)))
      return op->emitError("cannot partition: the op rejects its local "
                           "operand shapes");
    for (auto [want, got] : llvm::zip(op->getResultTypes(), inferred))
      if (want != got)
        return op->emitError("cannot partition: local result ")
               << got << " differs from the planned " << want;
  }
  return success();
}

/// The op's operands and results, as the plan holds them, must split one
/// factor of its sharding rule over the tensor axis — the one the planner
/// priced: every dimension of that factor split, no other, and the results
/// partial exactly when it is a reduction factor the results lack. Local
/// shapes alone would let a wrong split through (a softmax split along its
/// axis computes on the slices without an error).
LogicalResult Partitioner::checkRule(Operation *op) {
  auto it = rules.find(op);
  if (it == rules.end() || gridShape[kTensorAxis] == 1)
    return success();
  const planner::OpShardingRule &rule = it->second;
  auto stateOf = [&](Value v) -> std::optional<Sharding> {
    auto p = produced.find(v);
    if (p == produced.end())
      return std::nullopt;
    return p->second;
  };
  int64_t factor = -1;
  auto fail = [&](const Twine &why) {
    return op->emitError("the plan splits this op in a way its sharding rule "
                         "does not allow: ")
           << why << " (internal error)";
  };
  auto take = [&](int64_t f, const Twine &what) -> LogicalResult {
    if (f < 0)
      return fail(what + " is split along a dimension no factor can split");
    if (factor >= 0 && factor != f)
      return fail(what + " is split along another factor than the rest");
    factor = f;
    return success();
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    auto s = stateOf(v);
    if (!s || i >= rule.operandDims.size())
      continue;
    if (s->partial)
      return fail("operand " + Twine(i) + " is a partial value");
    int64_t d = s->dimOf(kTensorAxis);
    if (d >= 0 && d < static_cast<int64_t>(rule.operandDims[i].size()) &&
        failed(take(rule.operandDims[i][d], "operand " + Twine(i))))
      return failure();
  }
  bool partial = false;
  for (auto [r, v] : llvm::enumerate(op->getResults())) {
    auto s = stateOf(v);
    if (!s || r >= rule.resultDims.size())
      continue;
    partial |= s->partial.has_value();
    int64_t d = s->dimOf(kTensorAxis);
    if (d >= 0 && d < static_cast<int64_t>(rule.resultDims[r].size()) &&
        failed(take(rule.resultDims[r][d], "result " + Twine(r))))
      return failure();
  }
  if (factor < 0)
    return partial ? fail("a result is partial but nothing is split")
                   : success();
  const planner::Factor &f = rule.factors[factor];
  if (f.kind == planner::FactorKind::NeedReplication)
    return fail("the split factor must stay whole");
  // Every dimension of the factor is split.
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    if (i >= rule.operandDims.size())
      continue;
    int64_t d = rule.operandDim(i, factor);
    auto s = stateOf(v);
    if (d >= 0 && (!s || s->dimOf(kTensorAxis) != d))
      return fail("operand " + Twine(i) + " is not split along the factor");
  }
  bool inResults = false;
  for (auto [r, v] : llvm::enumerate(op->getResults())) {
    if (r >= rule.resultDims.size())
      continue;
    int64_t d = rule.resultDim(r, factor);
    inResults |= d >= 0;
    auto s = stateOf(v);
    if (d >= 0 && (!s || s->dimOf(kTensorAxis) != d))
      return fail("result " + Twine(r) + " is not split along the factor");
  }
  bool reduction = f.kind == planner::FactorKind::Reduction && !inResults;
  if (reduction != partial)
    return fail(reduction ? "a split reduction must leave partial results"
                          : "a result is partial but the factor is parallel");
  return success();
}

/// A sum or mean over a batch split over the data axis (batch norm's
/// statistics; the planner's PlanNode::dataReduction): each replica has
/// reduced its own samples, and an all-reduce over the replicas completes
/// the result -- summing, or averaging the means of equal shares (an
/// unevenly split batch was refused by retypeOp).
LogicalResult Partitioner::completeDataReduction(Operation *op) {
  auto it = rules.find(op);
  if (it == rules.end() || gridShape[kDataAxis] == 1)
    return success();
  const planner::OpShardingRule &rule = it->second;
  std::optional<planner::PartialKind> kind;
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    auto p = produced.find(v);
    if (p == produced.end() || i >= rule.operandDims.size())
      continue;
    int64_t d = p->second.dimOf(kDataAxis);
    if (d < 0 || d >= static_cast<int64_t>(rule.operandDims[i].size()))
      continue;
    int64_t f = rule.operandDims[i][d];
    if (f < 0)
      continue;
    bool kept = false;
    for (unsigned r = 0; r < rule.resultDims.size(); ++r)
      kept |= rule.resultDim(r, f) >= 0;
    if (kept)
      continue;
    const planner::Factor &factor = rule.factors[f];
    if (factor.kind != planner::FactorKind::Reduction ||
        factor.partial == planner::PartialKind::Max)
      return op->emitError("this op reduces a batch split over the data axis "
                           "in a way an all-reduce cannot complete "
                           "(internal error: the planner lets only sums and "
                           "means over the batch through)");
    kind = factor.partial;
    break;
  }
  if (!kind)
    return success();
  builder.setInsertionPointAfter(op);
  auto reduction = shard::ReductionKindAttr::get(
      module.getContext(), *kind == planner::PartialKind::Mean
                               ? shard::ReductionKind::Average
                               : shard::ReductionKind::Sum);
  for (OpResult r : op->getResults()) {
    auto all = shard::AllReduceOp::create(builder, op->getLoc(), r.getType(),
                                          gridRef(), axisAttr(kDataAxis), r,
                                          reduction);
    r.replaceAllUsesExcept(all.getResult(), all);
    auto p = produced.find(r);
    if (p != produced.end()) {
      Sharding s = p->second;
      produced[all.getResult()] = s;
    }
    if (Type g = globalTypes.lookup(r))
      globalTypes[all.getResult()] = g;
  }
  return success();
}

LogicalResult Partitioner::run() {
  if (gridShape.size() != 3)
    return grid.emitError("expected the planner's 3-axis grid (stages x data "
                          "x tensor)");
  if (gridShape[0] > 1)
    if (auto plan = module->getAttrOfType<DictionaryAttr>("dopt.plan"))
      if (auto m = plan.getAs<IntegerAttr>("microbatches"))
        microbatches = m.getInt();
  for (Operation &op : func.getBody().front())
    if (isa<dopt::DoptDialect>(op.getDialect()))
      if (auto rule = planner::getShardingRule(&op))
        rules[&op] = std::move(*rule);
  // 1. Produced shardings.
  func.walk([&](shard::ShardOp s) {
    if (s.getAnnotateForUsers())
      return;
    auto type = dyn_cast<RankedTensorType>(s.getSrc().getType());
    if (type)
      produced[s.getSrc()] = shardingOf(s, type.getRank());
  });
  // 2. Block layouts: backwards from splits (fused QKV), forwards from
  // concatenations along a split axis, through elementwise ops; such a
  // tensor must not be resharded or returned (its blocks are not
  // contiguous).
  if (failed(markBlockLayouts()))
    return failure();
  for (Operation &op : func.getBody().front()) {
    if (auto concat = dyn_cast<dopt::ConcatOp>(op)) {
      auto it = produced.find(concat.getResult());
      if (concat->getNumOperands() > 1 && it != produced.end() &&
          it->second.dimOf(kTensorAxis) == concat.getAxis())
        blocks.try_emplace(concat.getResult(),
                           BlockLayout{static_cast<int64_t>(concat.getAxis()),
                                       concat->getNumOperands()});
      continue;
    }
    if (op.getNumResults() != 1)
      continue;
    if (!isa<dopt::ElementwiseOpInterface, dopt::ExpandOp>(op))
      continue;
    for (Value operand : op.getOperands()) {
      auto b = blocks.find(unannotated(operand));
      if (b != blocks.end()) {
        blocks.try_emplace(op.getResult(0), b->second);
        break;
      }
    }
  }
  for (Value v : func.getBody().front().getTerminator()->getOperands())
    if (blocks.count(unannotated(v)) &&
        !isa_and_nonnull<dopt::WeightOp>(unannotated(v).getDefiningOp()))
      return func.emitError("a model output in a block layout (a "
                            "concatenation along a split axis) is not "
                            "supported");
  // 3. Arguments.
  Builder b(module.getContext());
  for (BlockArgument arg : func.getArguments()) {
    auto it = produced.find(arg);
    if (it != produced.end() && it->second.batchDim >= 0)
      globalBatch = cast<RankedTensorType>(arg.getType())
                        .getDimSize(it->second.batchDim);
  }
  for (BlockArgument arg : func.getArguments()) {
    auto it = produced.find(arg);
    if (it == produced.end())
      continue;
    auto global = cast<RankedTensorType>(arg.getType());
    FailureOr<RankedTensorType> local = localType(global, it->second,
                                                  arg.getLoc());
    if (failed(local))
      return failure();
    arg.setType(*local);
    if (paddedNow)
      padded.insert(arg);
    func.setArgAttr(arg.getArgNumber(), "dopt.split_axes",
                    splitAxesAttr(builder, it->second));
    func.setArgAttr(arg.getArgNumber(), "dopt.global_type",
                    TypeAttr::get(global));
    if (it->second.batchDim >= 0)
      func.setArgAttr(arg.getArgNumber(), "dopt.batch_dim",
                      builder.getI64IntegerAttr(it->second.batchDim));
  }
  // 4. Ops in order.
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  SmallVector<Operation *> dead;
  for (Operation *op : ops) {
    if (auto s = dyn_cast<shard::ShardOp>(op)) {
      if (!s.getAnnotateForUsers()) {
        s.getResult().replaceAllUsesWith(s.getSrc());
        dead.push_back(op);
        continue;
      }
      Value src = s.getSrc();
      // The annotated value is the producer's (its shard.shard is gone).
      auto it = produced.find(src);
      auto rank = cast<RankedTensorType>(src.getType()).getRank();
      Sharding from;
      if (it != produced.end())
        from = it->second;
      else
        from.axes.resize(rank);
      Sharding to = shardingOf(s, rank);
      to.batchDim = from.batchDim;
      to.batchInner = from.batchInner;
      builder.setInsertionPoint(op);
      FailureOr<Value> v = reshard(src, from, to, op->getLoc());
      if (failed(v))
        return failure();
      if (*v != src) {
        // The resharded value (e.g. a model output) has the needed sharding.
        produced[*v] = to;
        if (Type g = globalTypes.lookup(src))
          globalTypes[*v] = g;
        else
          globalTypes[*v] = s.getResult().getType();
      }
      s.getResult().replaceAllUsesWith(*v);
      dead.push_back(op);
      continue;
    }
    if (isa<shard::ShardingOp, func::ReturnOp>(op))
      continue;
    if (failed(checkRule(op)) || failed(retypeOp(op)) ||
        failed(completeDataReduction(op)))
      return failure();
  }
  for (Operation *op : llvm::reverse(dead))
    op->erase();
  SmallVector<shard::ShardingOp> unused;
  func.walk([&](shard::ShardingOp s) {
    if (s->use_empty())
      unused.push_back(s);
  });
  for (shard::ShardingOp s : unused)
    s.erase();
  // 5. Results: the local types, and their split for the runtime.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  SmallVector<Type> results;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    results.push_back(v.getType());
    auto it = produced.find(v);
    if (it != produced.end()) {
      if (it->second.partial)
        return ret.emitError("result ") << i << " is a partial value";
      // The runtime joins outputs along their batch dimension: the batch
      // must be that whole dimension.
      if (int64_t d = it->second.batchDim; d >= 0 && globalBatch > 0)
        if (Type g = globalTypes.lookup(v))
          if (cast<RankedTensorType>(g).getDimSize(d) != globalBatch)
            return ret.emitError("result ")
                   << i << " holds the batch inside a merged dimension "
                   << d << "; the runtime cannot join it across replicas";
      func.setResultAttr(i, "dopt.split_axes",
                         splitAxesAttr(builder, it->second));
      if (Type g = globalTypes.lookup(v))
        func.setResultAttr(i, "dopt.global_type", TypeAttr::get(g));
      if (it->second.batchDim >= 0)
        func.setResultAttr(i, "dopt.batch_dim",
                           builder.getI64IntegerAttr(it->second.batchDim));
    }
  }
  func.setType(FunctionType::get(module.getContext(),
                                 func.getBody().front().getArgumentTypes(),
                                 results));
  module->setAttr("dopt.partitioned", builder.getUnitAttr());
  if (gridShape[0] > 1) {
    module->setAttr(
        "dopt.pipeline",
        builder.getDictionaryAttr(
            {builder.getNamedAttr("stages",
                                  builder.getI64IntegerAttr(gridShape[0])),
             builder.getNamedAttr("microbatches",
                                  builder.getI64IntegerAttr(microbatches))}));
    if (outline)
      return outlinePipelineStages(module);
  }
  return success();
}

/// A gather from a table split over its gathered rows (a vocabulary-split
/// embedding, Megatron's VocabParallelEmbedding): each rank looks up the
/// indices that fall in its rows and contributes zeros for the others, so
/// the results are partial sums (the all_reduce that follows adds them):
///   lo = rank_on_tensor_axis * rows_per_rank
///   in = 0 <= idx - lo < rows_per_rank
///   out = where(in[..., None], gather(table_block, where(in, idx - lo, 0)), 0)
LogicalResult Partitioner::splitVocabularyGather(dopt::GatherOp g) {
  if (g.getAxis() != 0)
    return g.emitError("a split gather is supported along axis 0 only");
  Location loc = g.getLoc();
  auto table = cast<RankedTensorType>(g.getData().getType());
  auto idxType = cast<RankedTensorType>(g.getIndices().getType());
  Type ie = idxType.getElementType();
  auto scalar = RankedTensorType::get({}, ie);
  auto intConst = [&](int64_t v) {
    return dopt::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(scalar, builder.getIntegerAttr(ie, v)));
  };
  builder.setInsertionPoint(g);
  auto coord = shard::ProcessMultiIndexOp::create(
      builder, loc, kGridName, ArrayRef<shard::GridAxis>{kTensorAxis});
  Value c = arith::IndexCastOp::create(builder, loc, ie, coord.getResult()[0]);
  Value rows = arith::ConstantOp::create(
      builder, loc, builder.getIntegerAttr(ie, table.getDimSize(0)));
  Value loScalar = arith::MulIOp::create(builder, loc, c, rows);
  Value lo = tensor::FromElementsOp::create(builder, loc, scalar,
                                            ValueRange{loScalar});
  Value shifted = dopt::SubOp::create(builder, loc, g.getIndices(), lo);
  Value zero = intConst(0);
  Value ge = dopt::GreaterEqualOp::create(builder, loc, shifted, zero);
  Value lt = dopt::LessOp::create(builder, loc, shifted,
                                  intConst(table.getDimSize(0)));
  Value in = dopt::AndOp::create(builder, loc, ge, lt);
  Value safe = dopt::WhereOp::create(builder, loc, in, shifted, zero);
  g.getIndicesMutable().assign(safe);
  builder.setInsertionPointAfter(g);
  SmallVector<int64_t> maskShape(idxType.getShape());
  maskShape.append(table.getRank() - 1, 1);
  Value mask = dopt::ReshapeOp::create(builder, loc, in,
                                       builder.getDenseI64ArrayAttr(maskShape));
  auto out = cast<RankedTensorType>(g.getResult().getType());
  Value fzero = dopt::ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get({}, out.getElementType()),
                             builder.getZeroAttr(out.getElementType())));
  auto masked = dopt::WhereOp::create(builder, loc, mask, g.getResult(), fzero);
  g.getResult().replaceAllUsesExcept(masked.getResult(), masked);
  produced[masked.getResult()] = produced[g.getResult()];
  if (Type gt = globalTypes.lookup(g.getResult()))
    globalTypes[masked.getResult()] = gt;
  return success();
}

/// A dropout's mask is drawn by position in the whole tensor: a split
/// dropout gets the whole shape and its block's first element per
/// dimension (the rank's block index on the dimension's grid axes times the
/// local size), so every rank draws its part of the one-process mask.
void Partitioner::placeDropoutBlock(dopt::DropoutOp d) {
  auto it = produced.find(d.getResult());
  Type whole = globalTypes.lookup(d.getResult());
  if (it == produced.end() || !whole)
    return;
  const Sharding &s = it->second;
  if (llvm::all_of(s.axes, [](const auto &a) { return a.empty(); }))
    return;
  Location loc = d.getLoc();
  builder.setInsertionPoint(d);
  auto local = cast<RankedTensorType>(d.getResult().getType());
  Type i64 = builder.getI64Type();
  SmallVector<Value> offsets;
  for (auto [dim, axes] : llvm::enumerate(s.axes)) {
    Value block = arith::ConstantOp::create(builder, loc,
                                            builder.getIntegerAttr(i64, 0));
    for (int16_t a : axes) {
      auto coord = shard::ProcessMultiIndexOp::create(
          builder, loc, kGridName, ArrayRef<shard::GridAxis>{a});
      Value c = arith::IndexCastOp::create(builder, loc, i64,
                                           coord.getResult()[0]);
      Value n = arith::ConstantOp::create(
          builder, loc, builder.getIntegerAttr(i64, gridShape[a]));
      block = arith::AddIOp::create(
          builder, loc, arith::MulIOp::create(builder, loc, block, n), c);
    }
    Value size = arith::ConstantOp::create(
        builder, loc, builder.getIntegerAttr(i64, local.getDimSize(dim)));
    offsets.push_back(arith::MulIOp::create(builder, loc, block, size));
  }
  Value offsetTensor = tensor::FromElementsOp::create(
      builder, loc, RankedTensorType::get({local.getRank()}, i64), offsets);
  d.getOffsetsMutable().assign(offsetTensor);
  d.setGlobalShapeAttr(builder.getDenseI64ArrayAttr(
      cast<RankedTensorType>(whole).getShape()));
}

struct PartitionPass : distopt::impl::PartitionPassBase<PartitionPass> {
  using PartitionPassBase::PartitionPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module.lookupSymbol<shard::GridOp>(kGridName);
    if (!grid) {
      module.emitError("no shard.grid @dopt_grid: run `distopt plan "
                       "--emit=ir` (or the planner) first");
      return signalPassFailure();
    }
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.getBody().getBlocks().size() != 1) {
      module.emitError("no single-block @main to partition");
      return signalPassFailure();
    }
    Partitioner p(module, main, grid, outlineStages);
    if (failed(p.run()))
      return signalPassFailure();
  }
};

} // namespace
