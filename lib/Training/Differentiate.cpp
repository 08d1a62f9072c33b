//===- Differentiate.cpp - reverse mode over a list of dopt ops -----------===//
//
// The walk distopt-autodiff and distopt-pipeline-training share: seeded
// adjoints, each op's rule (AutodiffRules.cpp) applied in reverse program
// order, contributions summed per value.
//
// Tensor parallelism (a partitioned program whose grid has a tensor axis of
// t > 1 ranks): the program is one rank's, and its values either differ
// between the ranks of the tensor axis (split, or partial sums: "varying")
// or are the same on all of them ("replicated"). The adjoint of a varying
// value is its rank's own. The adjoint of a replicated value is kept
// complete -- the whole adjoint, the same on every rank -- so the rules of
// replicated ops run on whole adjoints as in one process. A varying op that
// reads a replicated value (a column-parallel matmul reading its input)
// contributes only its rank's share of that value's adjoint: such
// contributions are summed per value and all-reduced over the tensor axis
// once, when the value's own producer is differentiated (Megatron's "f"
// operator: identity forward, all-reduce backward). The collectives the
// partitioner placed are transposed by their rules (AutodiffRules.cpp).
//
// Data parallelism with batch statistics (a sum or mean over the batch,
// batch norm's in training form, completed by an all-reduce over the data
// axis: distopt-partition): the statistic is then the same on every replica
// ("whole"), and what a replica computes from it with its own samples
// contributes only that replica's share of the statistic's adjoint. Those
// shares are kept apart, carried back through the ops that compute from
// whole statistics alone, and summed over the replicas at the all-reduce
// that made the statistic: its operand's adjoint is the all-reduce of the
// shares (SyncBatchNorm's backward). The loss's own sums (distopt-append-
// loss) are whole too, with whole adjoints: the seed. Weights, the same on
// every replica, keep their shares, which distopt-sync-gradients sums.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Autodiff.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/TensorVarying.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace distopt;
using autodiff::isFloatTensor;

namespace {

bool hasAxis(ArrayRef<int16_t> axes, int16_t axis) {
  return llvm::is_contained(axes, axis);
}

bool isDataAllReduce(Operation *op) {
  auto c = dyn_cast<shard::AllReduceOp>(op);
  return c && hasAxis(c.getGridAxes(), grid::kDataAxis);
}

/// The whole statistics of `ops` (Differentiate.cpp's header): the results
/// of all-reduces over the data axis and what is computed from them and from
/// values the same on every replica alone (weights, constants). Everything
/// else differs between the replicas: the samples (arguments that are not
/// weights), values made outside `ops` (received or sliced activations), and
/// what is computed from those. `resolve` maps an operand to the value that
/// stands for it (a recomputed twin). Empty without a data axis of more than
/// one rank.
llvm::DenseSet<Value> wholeStatistics(ArrayRef<Operation *> ops,
                                      llvm::function_ref<Value(Value)> resolve) {
  llvm::DenseSet<Value> whole, varying, seen;
  if (ops.empty() || grid::axisSize(ops.front(), grid::kDataAxis) <= 1)
    return whole;
  auto differs = [&](Value operand) {
    Value v = resolve(operand);
    if (varying.count(v))
      return true;
    if (whole.count(v) || seen.count(v))
      return false;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      return !func || !func.getArgAttr(arg.getArgNumber(), "dopt.weight");
    }
    return !isa<dopt::ConstantOp, dopt::WeightOp>(v.getDefiningOp());
  };
  for (Operation *top : ops)
    top->walk([&](Operation *op) {
      llvm::DenseSet<Value> &into =
          isDataAllReduce(op) ? whole
          : llvm::any_of(op->getOperands(), differs) ? varying
          : llvm::any_of(op->getOperands(),
                         [&](Value v) { return whole.count(resolve(v)) > 0; })
              ? whole
              : seen;
      for (Value r : op->getResults()) {
        into.insert(r);
        seen.insert(r);
      }
    });
  return whole;
}

} // namespace

bool autodiff::isTrainedWeight(func::FuncOp func, unsigned i,
                               const llvm::Regex *frozen) {
  auto ref = func.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight");
  if (!ref || !isFloatTensor(func.getArgument(i)) || ref.get("constant"))
    return false;
  auto name = ref.getAs<StringAttr>("name");
  return !(frozen && name && frozen->match(name.getValue()));
}

llvm::DenseMap<unsigned, StringAttr>
autodiff::forwardUpdatedWeights(func::FuncOp func, ArrayRef<Operation *> ops) {
  llvm::StringMap<unsigned> byName;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto ref = func.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight"))
      if (auto n = ref.getAs<StringAttr>("name"))
        byName[n.getValue()] = i;
  llvm::DenseMap<unsigned, StringAttr> updated;
  for (Operation *op : ops)
    if (auto n = op->getAttrOfType<StringAttr>("dopt.updates_weight")) {
      auto it = byName.find(n.getValue());
      if (it != byName.end())
        updated[it->second] = n;
    }
  return updated;
}

SmallVector<std::pair<unsigned, Value>> autodiff::takeForwardUpdates(
    const llvm::DenseMap<unsigned, StringAttr> &updatedArgs,
    ArrayRef<Operation *> ops) {
  SmallVector<std::pair<unsigned, Value>> updates;
  for (Operation *op : ops)
    if (auto n = op->getAttrOfType<StringAttr>("dopt.updates_weight")) {
      op->removeAttr("dopt.updates_weight");
      for (auto [arg, name] : updatedArgs)
        if (name == n && op->getNumResults() == 1)
          updates.push_back({arg, op->getResult(0)});
    }
  return updates;
}

SmallVector<Operation *> autodiff::weightCopies(
    func::FuncOp func, Block *args, ArrayRef<Operation *> ops,
    const llvm::DenseMap<unsigned, StringAttr> &updatedArgs) {
  SmallVector<Operation *> copies;
  for (Operation *op : ops) {
    auto cast = dyn_cast<dopt::CastOp>(op);
    auto arg = cast ? dyn_cast<BlockArgument>(cast.getInput()) : nullptr;
    if (arg && arg.getOwner() == args &&
        arg.getArgNumber() < func.getNumArguments() &&
        func.getArgAttr(arg.getArgNumber(), "dopt.weight") &&
        !updatedArgs.count(arg.getArgNumber()))
      copies.push_back(op);
  }
  return copies;
}

static int64_t dropoutBatchDim(Operation *d) {
  auto bd = d->getAttrOfType<IntegerAttr>("dopt.batch_dim");
  return bd ? bd.getInt() : 0;
}

/// Places dropout `op` of one micro-batch of `count`: its offsets become
/// offsets * count + shift(rows) along its batch dimension, `shift` making
/// the micro-batch's [rank]-vector of offsets from the vector of its rows
/// (the batch dimension's size there, 0 elsewhere).
static void placeDropout(OpBuilder &b, Operation *op, int64_t count,
                         llvm::function_ref<Value(ArrayRef<int64_t>)> shift) {
  auto d = cast<dopt::DropoutOp>(op);
  auto local = cast<RankedTensorType>(d.getInput().getType());
  int64_t bd = dropoutBatchDim(d);
  // One micro-batch is the whole batch; a batch dimension out of range was
  // refused by checkMicrobatchDropouts where it matters (count > 1).
  if (count <= 1 || local.getRank() == 0 || bd < 0 || bd >= local.getRank())
    return;
  SmallVector<int64_t> whole(local.getShape());
  if (auto g = d.getGlobalShapeAttr())
    whole.assign(g.asArrayRef().begin(), g.asArrayRef().end());
  whole[bd] *= count;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(d);
  Location loc = d.getLoc();
  auto offType = RankedTensorType::get({local.getRank()}, b.getI64Type());
  SmallVector<int64_t> scale(local.getRank(), 1), rows(local.getRank(), 0);
  scale[bd] = count;
  rows[bd] = local.getDimSize(bd);
  Value offsets = shift(rows);
  if (Value old = d.getOffsets())
    offsets = dopt::AddOp::create(
        b, loc,
        dopt::MulOp::create(
            b, loc, old,
            dopt::ConstantOp::create(
                b, loc, DenseElementsAttr::get(offType, ArrayRef<int64_t>(scale)))),
        offsets);
  d.getOffsetsMutable().assign(offsets);
  d.setGlobalShapeAttr(b.getDenseI64ArrayAttr(whole));
}

void autodiff::placeDropoutMicrobatch(OpBuilder &b, Operation *op, int64_t m,
                                      int64_t count) {
  placeDropout(b, op, count, [&](ArrayRef<int64_t> rows) -> Value {
    SmallVector<int64_t> shift;
    for (int64_t r : rows)
      shift.push_back(m * r);
    auto type = RankedTensorType::get({(int64_t)rows.size()}, b.getI64Type());
    return dopt::ConstantOp::create(
        b, op->getLoc(),
        DenseElementsAttr::get(type, ArrayRef<int64_t>(shift)));
  });
}

void autodiff::placeDropoutMicrobatch(OpBuilder &b, Operation *op, Value m,
                                      int64_t count) {
  placeDropout(b, op, count, [&](ArrayRef<int64_t> rows) -> Value {
    auto type = RankedTensorType::get({(int64_t)rows.size()}, b.getI64Type());
    Value perRow = dopt::ConstantOp::create(b, op->getLoc(),
                                            DenseElementsAttr::get(type, rows));
    return dopt::MulOp::create(b, op->getLoc(), perRow, m);
  });
}

void autodiff::forEachForwardUpdate(
    func::FuncOp func, llvm::function_ref<void(StringAttr, Value)> fn) {
  func.walk([&](Operation *op) {
    if (auto n = op->getAttrOfType<StringAttr>("dopt.updates_weight")) {
      if (op->getNumResults() == 1)
        fn(n, op->getResult(0));
      return;
    }
    if (auto names = op->getAttrOfType<ArrayAttr>("dopt.updates_weights"))
      for (auto [name, result] : llvm::zip(names, op->getResults()))
        if (auto n = dyn_cast<StringAttr>(name))
          fn(n, result);
  });
}

LogicalResult autodiff::checkMicrobatchDropouts(Operation *scope,
                                                StringRef cut) {
  WalkResult r = scope->walk([&](dopt::DropoutOp d) {
    auto t = cast<RankedTensorType>(d.getInput().getType());
    int64_t bd = dropoutBatchDim(d);
    if (t.getRank() == 0 || (bd >= 0 && bd < t.getRank()))
      return WalkResult::advance();
    d.emitError() << cut << " cuts the batch into micro-batches, but this "
                  << "dropout's input holds the batch spread over a dimension "
                     "with other data, so a micro-batch's mask cannot be the "
                     "whole batch's";
    return WalkResult::interrupt();
  });
  return failure(r.wasInterrupted());
}

FailureOr<SmallVector<Value>>
autodiff::differentiate(OpBuilder &b, ArrayRef<Operation *> ops,
                        ArrayRef<std::pair<Value, Value>> seeds,
                        ArrayRef<Value> wrt,
                        const llvm::DenseSet<Value> &tensorVarying,
                        const llvm::DenseMap<Value, Value> *aliases) {
  auto resolve = [&](Value v) {
    if (aliases)
      if (Value a = aliases->lookup(v))
        return a;
    return v;
  };
  // Values that depend on what we differentiate with respect to (forward)
  // ...
  llvm::DenseSet<Value> active(wrt.begin(), wrt.end());
  for (Operation *op : ops) {
    bool depends = llvm::any_of(
        op->getOperands(), [&](Value v) { return active.count(resolve(v)); });
    if (depends)
      for (Value r : op->getResults())
        if (isFloatTensor(r))
          active.insert(r);
  }
  // ... walked backwards from the seeds.
  llvm::DenseMap<Value, Value> adjoint, shares;
  auto accumulate = [&](llvm::DenseMap<Value, Value> &into, Value v, Value g) {
    auto [it, inserted] = into.try_emplace(v, g);
    if (!inserted)
      it->second = dopt::AddOp::create(b, g.getLoc(), it->second, g);
  };
  // The complete adjoint of `v`: the whole contributions plus the shares,
  // all-reduced over the tensor axis.
  auto complete = [&](Value v) -> Value {
    auto share = shares.find(v);
    if (share == shares.end())
      return adjoint.lookup(v);
    Value s = share->second;
    shares.erase(share);
    MLIRContext *ctx = b.getContext();
    Value summed =
        shard::AllReduceOp::create(
            b, s.getLoc(), s.getType(), FlatSymbolRefAttr::get(ctx, grid::kName),
            b.getDenseI16ArrayAttr({grid::kTensorAxis}), s,
            shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
            .getResult();
    summed.getDefiningOp()->setAttr("dopt.backward", b.getUnitAttr());
    accumulate(adjoint, v, summed);
    return adjoint.lookup(v);
  };
  // Shares of whole statistics' adjoints (the header), summed over the
  // replicas at the all-reduce that made each statistic.
  llvm::DenseSet<Value> statistics = wholeStatistics(ops, resolve);
  llvm::DenseMap<Value, Value> dataShares;
  auto allReduce = [&](Value v, int16_t axis, shard::ReductionKind kind) {
    MLIRContext *ctx = b.getContext();
    auto op = shard::AllReduceOp::create(
        b, v.getLoc(), v.getType(), FlatSymbolRefAttr::get(ctx, grid::kName),
        b.getDenseI16ArrayAttr({axis}), v,
        shard::ReductionKindAttr::get(ctx, kind));
    op->setAttr("dopt.backward", b.getUnitAttr());
    return op.getResult();
  };
  for (auto [v, g] : seeds)
    if (g)
      accumulate(adjoint, v, g);
  llvm::DenseSet<Operation *> seedOps;
  for (auto [v, g] : seeds)
    if (g)
      seedOps.insert(g.getDefiningOp());
  for (Operation *op : llvm::reverse(ops)) {
    if (isa<dopt::ConstantOp>(op) || seedOps.count(op))
      continue;
    bool depends = llvm::any_of(
        op->getOperands(), [&](Value v) { return active.count(resolve(v)); });
    if (depends && llvm::any_of(op->getResults(), [&](Value r) {
          return dataShares.count(r);
        })) {
      // The replicas' shares of a whole statistic's adjoint: summed where
      // the statistic was made, carried back through what computes from it.
      SmallVector<Value> gs;
      for (Value r : op->getResults()) {
        gs.push_back(dataShares.lookup(r));
        dataShares.erase(r);
      }
      if (auto all = dyn_cast<shard::AllReduceOp>(op); all && isDataAllReduce(op)) {
        Value x = resolve(all.getInput());
        if (all.getReduction() != shard::ReductionKind::Sum &&
            all.getReduction() != shard::ReductionKind::Average)
          return all.emitError("no gradient rule for a ")
                 << shard::stringifyReductionKind(all.getReduction())
                 << " all-reduce of a batch statistic";
        if (active.count(x))
          accumulate(adjoint, x,
                     allReduce(gs[0], grid::kDataAxis, all.getReduction()));
      } else {
        SmallVector<Value> operandGs;
        if (failed(applyRule(b, op, gs, operandGs)))
          return failure();
        for (auto [operand, g] : llvm::zip(op->getOperands(), operandGs)) {
          Value v = resolve(operand);
          if (g && active.count(v))
            accumulate(statistics.count(v) ? dataShares : adjoint, v, g);
        }
      }
    }
    bool any = llvm::any_of(op->getResults(), [&](Value r) {
      return adjoint.count(r) || shares.count(r);
    });
    if (!any || !depends)
      continue;
    // An all-gather over the tensor axis whose result's adjoint has shares:
    // the shares' sum, scattered -- a reduce-scatter, half an all-reduce's
    // traffic (Megatron's sequence parallelism) -- plus this rank's block of
    // the whole part.
    if (auto gather = dyn_cast<shard::AllGatherOp>(op);
        gather && hasAxis(gather.getGridAxes(), grid::kTensorAxis) &&
        shares.count(gather.getResult())) {
      Value r = gather.getResult();
      Value share = shares.lookup(r);
      shares.erase(r);
      MLIRContext *ctx = b.getContext();
      auto scattered = shard::ReduceScatterOp::create(
          b, share.getLoc(), gather.getInput().getType(), gather.getGridAttr(),
          gather.getGridAxesAttr(), share,
          shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum),
          gather.getGatherAxisAttr());
      scattered->setAttr("dopt.backward", b.getUnitAttr());
      Value g = scattered.getResult();
      if (Value whole = adjoint.lookup(r)) {
        SmallVector<Value> sliced;
        if (failed(applyRule(b, op, {whole}, sliced)))
          return failure();
        g = dopt::AddOp::create(b, g.getLoc(), g, sliced[0]);
      }
      Value x = resolve(gather.getInput());
      if (active.count(x))
        accumulate(adjoint, x, g);
      continue;
    }
    // A float cast of an all-gather's result (a 16-bit program's, distopt-
    // autocast) is linear: the shares of its result's adjoint are shares of
    // the gather's (cast back), so the gather still finds them and
    // reduce-scatters, as the plan priced. (Elsewhere the shares are summed
    // at the cast's result, where the plan prices the all-reduce.)
    auto castOfGather = [&](dopt::CastOp c) {
      auto gather = resolve(c.getInput()).getDefiningOp<shard::AllGatherOp>();
      return gather && hasAxis(gather.getGridAxes(), grid::kTensorAxis);
    };
    if (auto c = dyn_cast<dopt::CastOp>(op);
        c && shares.count(c.getResult()) && isFloatTensor(c.getInput()) &&
        active.count(resolve(c.getInput())) && castOfGather(c)) {
      Value r = c.getResult(), x = resolve(c.getInput());
      Value share = shares.lookup(r);
      shares.erase(r);
      Type elt = cast<RankedTensorType>(x.getType()).getElementType();
      accumulate(shares, x,
                 dopt::CastOp::create(b, share.getLoc(), share, TypeAttr::get(elt)));
      if (Value whole = adjoint.lookup(r)) {
        SmallVector<Value> back;
        if (failed(applyRule(b, op, {whole}, back)))
          return failure();
        if (back[0])
          accumulate(adjoint, x, back[0]);
      }
      continue;
    }
    SmallVector<Value> gs;
    for (Value r : op->getResults())
      gs.push_back(complete(r));
    SmallVector<Value> operandGs;
    if (failed(applyRule(b, op, gs, operandGs)))
      return failure();
    // A varying op's contribution to a replicated operand is this rank's
    // share; a collective's rule gives the whole adjoint already.
    bool sharesOnly = !isa<shard::ShardDialect>(op->getDialect()) &&
                      llvm::any_of(op->getResults(), [&](Value r) {
                        return tensorVarying.count(r);
                      });
    // An op computing from a whole statistic and this replica's samples
    // contributes this replica's share of the statistic's adjoint.
    bool perReplica = !statistics.empty() &&
                      !isa<shard::ShardDialect>(op->getDialect()) &&
                      llvm::any_of(op->getResults(), [&](Value r) {
                        return !statistics.count(r);
                      });
    for (auto [operand, g] : llvm::zip(op->getOperands(), operandGs)) {
      Value v = resolve(operand);
      if (!g || !active.count(v))
        continue;
      if (perReplica && statistics.count(v)) {
        // A tensor-split op's part of it is this rank's share over the
        // tensor axis as well: summed there first.
        if (sharesOnly && !tensorVarying.count(v))
          g = allReduce(g, grid::kTensorAxis, shard::ReductionKind::Sum);
        accumulate(dataShares, v, g);
      } else if (sharesOnly && !tensorVarying.count(v)) {
        accumulate(shares, v, g);
      } else {
        accumulate(adjoint, v, g);
      }
    }
  }
  SmallVector<Value> out;
  for (Value v : wrt)
    out.push_back(complete(v));
  return out;
}
