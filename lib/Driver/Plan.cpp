//===- Plan.cpp - `distopt plan` as a library function --------------------===//
//
// Imports the model at a probe batch of 2 (its batch symbol; costs scale
// linearly from it, PlanGraph.h), builds the planner's graph, searches, and
// optionally annotates the model at its real batch with the plan. See
// Driver.h.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Planner/PlanToIR.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::planner;
using llvm::Twine;

static LogicalResult planError(const Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "distopt plan") << msg << "\n";
  return failure();
}

static func::FuncOp firstFunction(ModuleOp module) {
  func::FuncOp func;
  module->walk([&](func::FuncOp f) {
    if (!func)
      func = f;
  });
  return func;
}

FailureOr<std::unique_ptr<driver::PlannedModel>>
driver::plan(MLIRContext &context, const PlanRequest &request) {
  // Built in place and never moved: the plans point into the graph.
  auto owned = std::make_unique<PlannedModel>();
  PlannedModel &out = *owned;
  out.context.modelName = llvm::sys::path::filename(request.input).str();
  out.context.clusterSpec = request.distribution.cluster;
  PlanOptions &options = out.options;
  options.mode = request.mode;
  options.optimizer = request.optimizer;
  options.segmentSolver = request.segmentSolver;
  options.compareServers = true;
  if (llvm::Error e = applyDistribution(request.distribution, options))
    return planError(toString(std::move(e)));
  if (request.globalBatch && *request.globalBatch < 1)
    return planError("--global-batch must be at least 1");
  if (request.seqLen && *request.seqLen < 1)
    return planError("--seq-len must be at least 1");
  llvm::Expected<Cluster> cluster =
      resolveCluster(request.distribution.cluster);
  if (!cluster)
    return planError(toString(cluster.takeError()));
  out.cluster = std::move(*cluster);

  ONNXImportOptions importOptions = request.import;
  if (request.globalBatch)
    importOptions.batchSize = 2;
  if (request.seqLen)
    importOptions.symbolicDimsByPosition[1] = *request.seqLen;
  // A 16-bit precision: the model as it will be compiled (distopt-
  // autocast), priced at its own widths.
  bool mixed = request.precision && isHalfPrecision(*request.precision);
  bool storeWeights = request.mode == PlanMode::Infer;
  out.module = importONNXFile(context, request.input, importOptions);
  // Plans price the fused attention the program computes.
  if (!out.module || failed(prepareImported(*out.module, /*fuseAttention=*/true,
                                            request.precision, storeWeights)))
    return failure();
  func::FuncOp func = firstFunction(*out.module);
  if (!func || func.getNumArguments() == 0)
    return planError("the model has no inputs to carry a batch");
  // The batch: the batch dimension of the inputs the model left symbolic
  // (bound to the probe of 2 above), else the first input's static dim 0.
  bool symbolic = false;
  std::optional<int64_t> probeOpt = batchOf(func, symbolic);
  if (!probeOpt)
    return planError("the first model input is a scalar: no batch dimension");
  if (!symbolic && request.globalBatch && *request.globalBatch != *probeOpt)
    return planError("the model's batch is static (" + Twine(*probeOpt) +
                     ", dimension 0 of its inputs): --global-batch must be " +
                     Twine(*probeOpt) + " or left out");
  int64_t probe = *probeOpt;
  options.globalBatch = request.globalBatch.value_or(probe);
  if (options.mode == PlanMode::Train)
    options.classLossOutput = classLossOutputOf(func, request.loss);
  CostOptions costOptions;
  if (!mixed)
    costOptions.precision = request.precision;
  llvm::Expected<PlanGraph> graph = buildPlanGraph(func, probe, costOptions);
  if (!graph)
    return planError(toString(graph.takeError()));
  if (request.precision) {
    options.precision = *request.precision;
  } else {
    // The model's floating-point type (f64 is costed at 8 bytes but runs at
    // the fp32 peak: cluster specs carry no fp64 figure).
    for (const PlanTensor &t : graph->tensors) {
      if (!t.isFloat)
        continue;
      Type elt = cast<RankedTensorType>(t.value.getType()).getElementType();
      options.precision = elt.isF16()    ? DType::FP16
                          : elt.isBF16() ? DType::BF16
                                         : DType::FP32;
      break;
    }
  }
  out.graph = std::move(*graph);
  llvm::Expected<PlanResult> result =
      searchPlan(out.graph, out.cluster, options);
  if (!result)
    return planError(toString(result.takeError()));
  out.result = std::move(*result);
  if (!request.annotate)
    return owned;

  context.loadDialect<shard::ShardDialect>();
  // The plan was searched at the probe batch; the IR it annotates has the
  // real one. Same model, same importer: the graphs must match node for
  // node, which is checked.
  std::optional<PlanGraph> fullGraph;
  if (probe != options.globalBatch) {
    importOptions.batchSize = options.globalBatch;
    out.annotated = importONNXFile(context, request.input, importOptions);
    if (!out.annotated ||
        failed(prepareImported(*out.annotated, /*fuseAttention=*/true,
                               request.precision, storeWeights)))
      return failure();
    llvm::Expected<PlanGraph> g2 =
        rebindPlanGraph(out.graph, firstFunction(*out.annotated));
    if (!g2)
      return planError(toString(g2.takeError()) + " (batch " + Twine(probe) +
                       " vs " + Twine(options.globalBatch) + ")");
    fullGraph = std::move(*g2);
  }
  ModuleOp target = out.annotatedModule();
  // The IR names its model absolutely, so `distopt compile plan.mlir` finds
  // the weights from any directory.
  llvm::SmallString<256> abs(request.input);
  llvm::sys::fs::make_absolute(abs);
  target->setAttr("dopt.source", StringAttr::get(&context, abs.str()));
  // The precision it was planned (and, in 16 bits, rewritten) for: the
  // bundle compiled from it says so (tf32: the CUDA libraries' TF32 math).
  if (request.precision)
    target->setAttr("dopt.precision",
                    StringAttr::get(&context, dtypeName(*request.precision)));
  if (llvm::Error e = annotatePlan(target, fullGraph ? *fullGraph : out.graph,
                                   out.result.best))
    return planError(toString(std::move(e)));
  return owned;
}

void driver::PlannedModel::printSummary(llvm::raw_ostream &os) const {
  planner::printPlanSummary(os, {graph, cluster, options, result, context});
}

llvm::json::Value driver::PlannedModel::toJSON() const {
  return planner::planToJSON({graph, cluster, options, result, context});
}

void driver::PlannedModel::writeHTML(llvm::raw_ostream &os) const {
  planner::writePlanHTML(os, {graph, cluster, options, result, context});
}

bool driver::writeOutputFile(
    StringRef path, llvm::function_ref<void(llvm::raw_ostream &)> write,
    std::string &error) {
  auto out = mlir::openOutputFile(path, &error);
  if (!out)
    return false;
  write(out->os());
  out->keep();
  return true;
}
