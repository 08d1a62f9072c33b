//===- Batch.cpp - where a model's batch lies ------------------------------===//
//
// The planner's graph (PlanGraph) knows where each tensor holds the batch;
// a training step, the loader and micro-batches need that reading on the
// program itself. See Driver.h.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Planner/PlanGraph.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::planner;
using namespace llvm;
using driver::MicrobatchObstacle;

std::optional<int64_t> driver::batchOf(func::FuncOp func, bool &symbolic) {
  for (BlockArgument arg : func.getArguments()) {
    int64_t d = argumentBatchDim(func, arg.getArgNumber());
    if (d >= 0 && func.getArgAttr(arg.getArgNumber(), "dopt.symbolic_dims")) {
      symbolic = true;
      return cast<RankedTensorType>(arg.getType()).getDimSize(d);
    }
  }
  symbolic = false;
  auto first = dyn_cast<RankedTensorType>(func.getArgument(0).getType());
  if (!first || first.getRank() == 0)
    return std::nullopt;
  return first.getDimSize(0);
}

std::optional<driver::MicrobatchObstacle>
driver::microbatchObstacle(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func || func.getNumArguments() == 0)
    return std::nullopt;
  using Obstacle = MicrobatchObstacle;
  bool symbolic = false;
  std::optional<int64_t> batch = batchOf(func, symbolic);
  if (!batch)
    return std::nullopt;
  Expected<PlanGraph> graph = buildPlanGraph(func, *batch, CostOptions());
  if (!graph) {
    // Not a graph the planner reads (dynamic shapes, no batch input):
    // nothing known against micro-batches.
    consumeError(graph.takeError());
    return std::nullopt;
  }
  if (graph->batchMixer >= 0)
    return Obstacle{Obstacle::Mixes, graph->batchMixerWhy};
  if (!graph->batchReductions.empty())
    return Obstacle{Obstacle::Statistic, graph->batchReductionWhy};
  return std::nullopt;
}

bool driver::annotateBatchDims(ModuleOp module, std::string &error) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func || func.getNumArguments() == 0)
    return true;
  auto nameOf = [&](unsigned i, bool result) {
    auto n = result ? func.getResultAttrOfType<StringAttr>(i, "dopt.name")
                    : func.getArgAttrOfType<StringAttr>(i, "dopt.name");
    return n ? n.getValue().str() : std::to_string(i);
  };
  bool seqFirst = false;
  Builder b(module.getContext());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    int64_t d = argumentBatchDim(func, i);
    if (d < 0 || func.getArgAttr(i, "dopt.batch_dim"))
      continue;
    func.setArgAttr(i, "dopt.batch_dim", b.getI64IntegerAttr(d));
    seqFirst |= d > 0;
  }
  bool symbolic = false;
  std::optional<int64_t> batch = batchOf(func, symbolic);
  Expected<PlanGraph> graph =
      batch ? buildPlanGraph(func, *batch, CostOptions())
            : Expected<PlanGraph>(createStringError("no batch"));
  if (!graph) {
    std::string why = toString(graph.takeError());
    if (!seqFirst)
      return true; // samples along dimension 0 everywhere, as before
    error = "cannot tell where the batch is in the model's outputs (" + why +
            "), and its inputs carry it past dimension 0";
    return false;
  }
  // Whether micro-batch m of `t` is one block of its batch dimension: the
  // batch is the outermost part of that dimension.
  auto blockOf = [&](const PlanTensor &t) {
    return t.batchDim >= 0 &&
           t.shape[t.batchDim] == graph->probeBatch * t.batchInner;
  };
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    if (i >= graph->outputs.size() || func.getResultAttr(i, "dopt.batch_dim"))
      continue;
    const PlanTensor &t = graph->tensors[graph->outputs[i]];
    if (blockOf(t))
      func.setResultAttr(i, "dopt.batch_dim", b.getI64IntegerAttr(t.batchDim));
    else if (seqFirst && t.batchDim >= 0) {
      error = "output '" + nameOf(i, true) +
              "' holds the batch spread over dimension " +
              std::to_string(t.batchDim) + " with other data, so its samples "
              "are not blocks a training step could read";
      return false;
    }
  }
  for (const PlanNode &node : graph->nodes) {
    if (!llvm::isa<distopt::dopt::DropoutOp>(node.op) || node.operands.empty())
      continue;
    const PlanTensor &t = graph->tensors[node.operands[0]];
    if (t.batchDim < 0)
      continue;
    node.op->setAttr("dopt.batch_dim",
                     b.getI64IntegerAttr(blockOf(t) ? t.batchDim : -1));
  }
  return true;
}

int64_t driver::classLossOutputOf(func::FuncOp func, StringRef loss) {
  auto [kind, out] = loss.split(':');
  if (kind != "cross-entropy" && kind != "nll")
    return -1;
  StringRef which = out.empty() ? "0" : out;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto name = func.getResultAttrOfType<StringAttr>(i, "dopt.name"))
      if (name.getValue() == which)
        return i;
  unsigned position;
  if (!which.getAsInteger(10, position) && position < func.getNumResults())
    return position;
  return -1;
}
