//===- PlanToIR.cpp - write a plan onto the dopt IR -----------------------===//

#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Planner/PlanToIR.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace distopt::planner;
namespace shard = mlir::shard;
using llvm::SmallVector;

namespace {

using distopt::grid::kDataAxis;
using distopt::grid::kStageAxis;
using distopt::grid::kTensorAxis;
constexpr llvm::StringLiteral kGridName = distopt::grid::kName;

class Annotator {
public:
  Annotator(mlir::ModuleOp module, const PlanGraph &g, const Plan &p)
      : module(module), g(g), plan(p), builder(module.getContext()) {}

  llvm::Error run();

private:
  mlir::ModuleOp module;
  const PlanGraph &g;
  const Plan &plan;
  mlir::OpBuilder builder;
  mlir::Block *entry = nullptr;
  llvm::StringMap<mlir::Value> shardings;
  /// TP state of every tensor as produced, and of every (node, operand) as
  /// needed.
  std::vector<int64_t> produced;
  llvm::DenseMap<std::pair<int64_t, unsigned>, int64_t> needed;
  /// (node, operand) reading a segment's output in its boundary state.
  llvm::DenseMap<std::pair<int64_t, unsigned>, int64_t> readAs;
  /// The shard.shard that annotates each tensor as produced (null if none).
  std::vector<mlir::Value> annotations;

  mlir::Value sharding(const PlanTensor &t, int64_t state) {
    SmallVector<SmallVector<int16_t>> axes(t.shape.size());
    if (plan.dp > 1 && t.batchDim >= 0)
      axes[t.batchDim].push_back(kDataAxis);
    if (plan.tp > 1 && state >= 0)
      axes[state].push_back(kTensorAxis);
    while (axes.size() > 1 && axes.back().empty())
      axes.pop_back();
    if (axes.empty())
      axes.emplace_back();
    std::string key;
    for (auto &a : axes) {
      key += "[";
      for (int16_t x : a)
        key += std::to_string(x) + ",";
      key += "]";
    }
    auto it = shardings.find(key);
    if (it != shardings.end())
      return it->second;
    SmallVector<shard::GridAxesAttr> attrs;
    for (auto &a : axes)
      attrs.push_back(mlir::DenseI16ArrayAttr::get(module.getContext(), a));
    mlir::OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(entry);
    auto op = shard::ShardingOp::create(
        builder, module.getLoc(),
        mlir::FlatSymbolRefAttr::get(module.getContext(), kGridName), attrs);
    shardings[key] = op.getResult();
    return op.getResult();
  }

  void markPartial(shard::ShardOp op, int64_t state) {
    if (state == kPartialSum || state == kPartialMax || state == kPartialMean)
      op->setAttr("dopt.partial",
                  builder.getStringAttr(state == kPartialSum   ? "sum"
                                        : state == kPartialMax ? "max"
                                                               : "mean"));
  }
};

llvm::Error Annotator::run() {
  mlir::func::FuncOp func;
  if (g.tensors.empty() || !g.tensors.front().value)
    return llvm::createStringError("empty plan graph");
  mlir::Value first = g.tensors.front().value;
  func = llvm::dyn_cast<mlir::func::FuncOp>(
      first.getParentRegion()->getParentOp());
  if (!func || func->getParentOp() != module.getOperation())
    return llvm::createStringError("the plan graph is not of this module");
  entry = &func.getBody().front();

  // Grid and plan summary.
  builder.setInsertionPointToStart(module.getBody());
  shard::GridOp::create(builder, module.getLoc(), kGridName,
                        SmallVector<int64_t>{plan.pp, plan.dp, plan.tp});
  module->setAttr(
      "dopt.plan",
      builder.getDictionaryAttr({
          builder.getNamedAttr("dp", builder.getI64IntegerAttr(plan.dp)),
          builder.getNamedAttr("tp", builder.getI64IntegerAttr(plan.tp)),
          builder.getNamedAttr("pp", builder.getI64IntegerAttr(plan.pp)),
          builder.getNamedAttr("microbatches",
                               builder.getI64IntegerAttr(plan.microbatches)),
          builder.getNamedAttr("microbatch_size",
                               builder.getI64IntegerAttr(plan.microbatchSize)),
          builder.getNamedAttr(
              "recompute", builder.getStringAttr(recomputeName(plan.recompute))),
          builder.getNamedAttr("zero_stage",
                               builder.getI64IntegerAttr(plan.zeroStage)),
          builder.getNamedAttr("schedule", builder.getStringAttr(
                                               pipelineScheduleName(plan.schedule))),
      }));

  // Map each segment's shared solution onto its own nodes.
  produced.assign(g.tensors.size(), kReplicated);
  annotations.assign(g.tensors.size(), mlir::Value());
  std::vector<int64_t> stageOf(g.nodes.size(), -1);
  std::vector<const Segment *> representative(g.numClasses, nullptr);
  for (const Segment &s : g.segments)
    if (!representative[s.classId])
      representative[s.classId] = &s;
  for (const StagePlan &stage : plan.stages) {
    int64_t k = &stage - plan.stages.data();
    for (int64_t si = stage.firstSegment; si < stage.endSegment; ++si) {
      const Segment &seg = g.segments[si];
      const Segment &rep = *representative[seg.classId];
      const SegmentSolution *sol = plan.segmentSolutions[si];
      for (const NodeChoice &c : sol->choices) {
        int64_t node = c.node;
        bool inside = node >= rep.begin && node < rep.end;
        if (inside)
          node = seg.begin + (node - rep.begin);
        else if (node >= seg.begin && node < seg.end)
          inside = true;
        const PlanNode &n = g.nodes[node];
        if (inside)
          stageOf[node] = k;
        if (n.kind == NodeKind::Compute) {
          for (auto [i, state] : llvm::enumerate(c.operandStates))
            needed[{node, static_cast<unsigned>(i)}] = state;
          for (auto [r, state] : llvm::enumerate(c.resultStates))
            produced[n.results[r]] = state;
        } else if (!c.resultStates.empty()) {
          produced[n.results[0]] = c.resultStates[0];
        }
      }
    }
  }

  // Function arguments, then every op result: one shard.shard each, users
  // rewired to it.
  auto annotate = [&](int64_t tensorId, mlir::Operation *after) {
    const PlanTensor &t = g.tensors[tensorId];
    int64_t state = produced[tensorId];
    // The sharding value first: it is created at the top of the block, so
    // an argument's annotation goes after it.
    mlir::Value sh = sharding(t, state);
    if (after)
      builder.setInsertionPointAfter(after);
    else
      builder.setInsertionPointAfter(sh.getDefiningOp());
    auto op = shard::ShardOp::create(builder, t.value.getLoc(), t.value, sh,
                                     /*annotate_for_users=*/false);
    markPartial(op, state);
    // The batch dimension: pipelined programs run it in micro-batches.
    if (t.batchDim >= 0)
      op->setAttr("dopt.batch_dim", builder.getI64IntegerAttr(t.batchDim));
    if (t.batchDim >= 0 && t.batchInner != 1)
      op->setAttr("dopt.batch_inner", builder.getI64IntegerAttr(t.batchInner));
    mlir::Value v = t.value;
    v.replaceAllUsesExcept(op.getResult(), op);
    annotations[tensorId] = op.getResult();
    return op;
  };
  for (auto [id, t] : llvm::enumerate(g.tensors))
    if (t.producer < 0)
      annotate(static_cast<int64_t>(id), nullptr);
  for (auto [i, n] : llvm::enumerate(g.nodes)) {
    if (stageOf[i] >= 0)
      n.op->setAttr("dopt.stage", builder.getI64IntegerAttr(stageOf[i]));
    if (n.kind == NodeKind::Constant &&
        g.tensors[n.results[0]].batchDim < 0)
      continue; // replicated everywhere; nothing to say
    for (int64_t r : n.results)
      annotate(r, n.op);
  }
  // Between segments the plan priced one state (the chain's boundary
  // state): the output of segment s is resharded to it once, inside s, and
  // the later segments read it from there. Uses in later segments go
  // through that reshard, so the program's collectives are the priced ones.
  for (size_t si = 0;
       si + 1 < g.segments.size() && si < plan.boundaryStates.size(); ++si) {
    int64_t t = g.segments[si].output;
    int64_t want = plan.boundaryStates[si];
    if (t < 0 || want == produced[t])
      continue;
    const PlanTensor &tensor = g.tensors[t];
    mlir::Value annotated = annotations[t];
    if (!annotated)
      continue;
    builder.setInsertionPointAfter(annotated.getDefiningOp());
    auto op = shard::ShardOp::create(builder, tensor.value.getLoc(), annotated,
                                     sharding(tensor, want),
                                     /*annotate_for_users=*/true);
    int64_t end = g.segments[si].end;
    for (auto [user, operand] : tensor.uses)
      if (user >= end) {
        g.nodes[user].op->setOperand(operand, op.getResult());
        readAs[{user, operand}] = want;
      }
    // The model's outputs read the value as produced (delivered below).
  }
  // The model's outputs are delivered in the state the plan priced: the
  // last segment's chosen output state, replicated for other outputs.
  {
    auto ret = llvm::cast<mlir::func::ReturnOp>(entry->getTerminator());
    int64_t lastOutput =
        g.segments.empty() ? -1 : g.segments.back().output;
    for (auto [i, v] : llvm::enumerate(g.outputs)) {
      int64_t want = v == lastOutput && !plan.boundaryStates.empty()
                         ? plan.boundaryStates.back()
                         : kReplicated;
      if (want == produced[v])
        continue;
      builder.setInsertionPoint(ret);
      mlir::Value current = ret.getOperand(i);
      auto op = shard::ShardOp::create(builder, ret.getLoc(), current,
                                       sharding(g.tensors[v], want),
                                       /*annotate_for_users=*/true);
      ret.setOperand(i, op.getResult());
    }
  }
  // Operands needed in another state than produced.
  for (auto [i, n] : llvm::enumerate(g.nodes)) {
    if (n.kind != NodeKind::Compute)
      continue;
    for (auto [o, tid] : llvm::enumerate(n.operands)) {
      std::pair<int64_t, unsigned> key{static_cast<int64_t>(i),
                                       static_cast<unsigned>(o)};
      auto it = needed.find(key);
      auto read = readAs.find(key);
      int64_t have = read == readAs.end() ? produced[tid] : read->second;
      if (it == needed.end() || it->second == have)
        continue;
      builder.setInsertionPoint(n.op);
      const PlanTensor &t = g.tensors[tid];
      mlir::Value current = n.op->getOperand(o);
      auto op = shard::ShardOp::create(builder, n.op->getLoc(), current,
                                       sharding(t, it->second),
                                       /*annotate_for_users=*/true);
      n.op->setOperand(o, op.getResult());
    }
  }
  if (mlir::failed(mlir::verify(module)))
    return llvm::createStringError("the annotated plan IR does not verify");
  return llvm::Error::success();
}

} // namespace

llvm::Error distopt::planner::annotatePlan(mlir::ModuleOp module,
                                           const PlanGraph &graph,
                                           const Plan &plan) {
  return Annotator(module, graph, plan).run();
}

namespace {

using CollectiveCounts = std::map<std::pair<std::string, int64_t>, int64_t>;

/// The collectives of `module` by (kind, whole-tensor bytes), those `keep`
/// accepts. all_slice is a local copy: not a collective.
CollectiveCounts
programCollectives(mlir::ModuleOp module, int64_t tp,
                   llvm::function_ref<bool(mlir::Operation *)> keep,
                   int64_t floatBytes = 0) {
  CollectiveCounts program;
  // A plan made for --precision prices every floating-point tensor at that
  // width (CostOptions::precision): `floatBytes` counts them so.
  auto bytesOf = [&](mlir::Type t) -> int64_t {
    auto type = llvm::cast<mlir::RankedTensorType>(t);
    if (floatBytes > 0 && llvm::isa<mlir::FloatType>(type.getElementType()))
      return type.getNumElements() * floatBytes;
    return type.getNumElements() *
           std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  };
  module.walk([&](mlir::Operation *op) {
    std::string kind;
    int64_t bytes = 0;
    if (llvm::isa<shard::AllReduceOp>(op)) {
      kind = "all_reduce";
      bytes = bytesOf(op->getOperand(0).getType());
    } else if (llvm::isa<shard::ReduceScatterOp>(op)) {
      kind = "reduce_scatter";
      bytes = bytesOf(op->getOperand(0).getType());
    } else if (llvm::isa<shard::AllGatherOp>(op)) {
      kind = "all_gather";
      bytes = bytesOf(op->getResult(0).getType());
    } else if (llvm::isa<shard::AllToAllOp>(op)) {
      kind = "all_to_all";
      bytes = bytesOf(op->getOperand(0).getType()) * tp;
    } else {
      return;
    }
    if (keep(op))
      ++program[{kind, bytes}];
  });
  return program;
}

std::string listCounts(const CollectiveCounts &counts) {
  std::string out;
  for (auto &[k, n] : counts)
    out += " " + std::to_string(n) + "x" + k.first + "(" +
           std::to_string(k.second) + " B)";
  return out;
}

} // namespace

void distopt::planner::recordPlannedBackward(mlir::ModuleOp module,
                                             const Plan &plan,
                                             std::optional<DType> precision) {
  mlir::Builder b(module.getContext());
  if (precision)
    module->setAttr("dopt.planned_float_bytes",
                    b.getI64IntegerAttr(dtypeBytes(*precision)));
  int64_t batches = plan.pp > 1 ? 1 : plan.microbatches;
  CollectiveCounts planned;
  for (const SegmentSolution *sol : plan.segmentSolutions)
    for (const PlannedCollective &c : sol->collectives)
      if (c.backward)
        ++planned[{collectiveKindName(c.kind).str(),
                   static_cast<int64_t>(std::llround(c.bytes)) * batches}];
  for (const PlannedCollective &c : plan.dataCollectives)
    if (c.backward)
      ++planned[{collectiveKindName(c.kind).str(),
                 static_cast<int64_t>(std::llround(c.bytes)) * batches}];
  // A vocabulary-parallel loss (appended after this check's forward twin):
  // its backward all-reduce over the tensor axis.
  for (const PlannedCollective &c : plan.lossCollectives)
    if (c.backward)
      ++planned[{collectiveKindName(c.kind).str(),
                 static_cast<int64_t>(std::llround(c.bytes)) * batches}];
  llvm::SmallVector<mlir::Attribute> list;
  for (auto &[k, n] : planned)
    list.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr(k.first)),
         b.getNamedAttr("bytes", b.getI64IntegerAttr(k.second)),
         b.getNamedAttr("count", b.getI64IntegerAttr(n))}));
  module->setAttr("dopt.planned_backward", b.getArrayAttr(list));
}

llvm::Error distopt::planner::checkBackwardCollectives(mlir::ModuleOp module) {
  auto list = module->getAttrOfType<mlir::ArrayAttr>("dopt.planned_backward");
  auto grid = module.lookupSymbol<shard::GridOp>("dopt_grid");
  if (!list || !grid)
    return llvm::Error::success(); // not a planned program
  int64_t tp = grid.getShape()[distopt::grid::kTensorAxis];
  // A pipelined step runs the backward of every micro-batch.
  int64_t times = 1;
  if (auto pipeline = module->getAttrOfType<mlir::DictionaryAttr>("dopt.pipeline"))
    if (auto m = pipeline.getAs<mlir::IntegerAttr>("microbatches"))
      times = m.getInt();
  // So does a step accumulating K micro-batches (distopt-accumulate-
  // gradients), each with the plan's collectives.
  if (auto k = module->getAttrOfType<mlir::IntegerAttr>("dopt.accumulate"))
    times *= k.getInt();
  auto floatBytes =
      module->getAttrOfType<mlir::IntegerAttr>("dopt.planned_float_bytes");
  CollectiveCounts planned;
  for (mlir::Attribute a : list) {
    auto d = llvm::cast<mlir::DictionaryAttr>(a);
    planned[{d.getAs<mlir::StringAttr>("kind").getValue().str(),
             d.getAs<mlir::IntegerAttr>("bytes").getInt()}] +=
        d.getAs<mlir::IntegerAttr>("count").getInt() * times;
  }
  CollectiveCounts program =
      programCollectives(module, tp, [](mlir::Operation *op) {
        auto axes = op->getAttrOfType<mlir::DenseI16ArrayAttr>("grid_axes");
        // Over the tensor axis, and over the data axis those that complete
        // the shares of a batch statistic's adjoint (not the gradients'
        // synchronisation, which the plan prices separately).
        return op->hasAttr("dopt.backward") && axes &&
               (llvm::is_contained(axes.asArrayRef(), distopt::grid::kTensorAxis) ||
                llvm::is_contained(axes.asArrayRef(), distopt::grid::kDataAxis));
      },
      floatBytes ? floatBytes.getInt() : 0);
  bool within = true;
  for (auto &[k, n] : program) {
    auto it = planned.find(k);
    within &= it != planned.end() && n <= it->second;
  }
  if (within)
    return llvm::Error::success();
  return llvm::createStringError(
      "the step's backward collectives are not among those the plan priced "
      "(internal error)\n  planned:" +
      listCounts(planned) + "\n  program:" + listCounts(program));
}

llvm::Error
distopt::planner::checkPlannedCollectives(mlir::ModuleOp module,
                                          const Plan &plan,
                                          std::optional<DType> precision) {
  // (kind, whole-tensor bytes) -> count, on both sides.
  CollectiveCounts planned;
  // A pipelined program runs one micro-batch per call; otherwise the
  // program runs all micro-batches of its replica at once.
  int64_t batches = plan.pp > 1 ? 1 : plan.microbatches;
  for (const SegmentSolution *sol : plan.segmentSolutions)
    for (const PlannedCollective &c : sol->collectives)
      if (!c.backward)
        ++planned[{collectiveKindName(c.kind).str(),
                   static_cast<int64_t>(std::llround(c.bytes)) * batches}];
  for (const PlannedCollective &c : plan.dataCollectives)
    if (!c.backward)
      ++planned[{collectiveKindName(c.kind).str(),
                 static_cast<int64_t>(std::llround(c.bytes)) * batches}];
  CollectiveCounts program = programCollectives(
      module, plan.tp, [](mlir::Operation *) { return true; },
      precision ? dtypeBytes(*precision) : 0);
  if (planned == program)
    return llvm::Error::success();
  return llvm::createStringError(
      "the partitioned program's collectives differ from the plan's "
      "(internal error)\n  planned:" +
      listCounts(planned) + "\n  program:" + listCounts(program));
}
