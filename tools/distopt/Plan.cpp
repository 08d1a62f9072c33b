//===- Plan.cpp - `distopt plan` ------------------------------------------===//
//
//   distopt plan MODEL --cluster SPEC [--mode train|infer] --global-batch N
//       [--seq-len N] [--precision fp16] [--dp N --tp N --pp N]
//       [--microbatches N] [--recompute off|selective|full] [--json FILE]
//
// Imports the model at a probe batch of 2 (its batch symbol), builds
// the planner's graph, searches and prints the plan.
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"
#include "distopt/Planner/PlanReport.h"
#include "distopt/Planner/PlanToIR.h"

#include "mlir/Pass/PassManager.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace distopt::planner;

cl::SubCommand &distopt::tool::planCommand() {
  static cl::SubCommand cmd(
      "plan", "Find how to split a model over a cluster and explain it");
  return cmd;
}

namespace {

cl::opt<std::string> clusterSpec(
    "cluster",
    cl::desc("Cluster: a preset (dgx-a100x8, dgx-h100x8, local:N, "
             "NxPRESET) or a YAML file"),
    cl::value_desc("spec"), cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> planLoss(
    "loss",
    cl::desc("Training: the loss distopt compile --loss would append "
             "(KIND[:OUTPUT]); under cross-entropy or nll the plan may keep "
             "that output split along its classes (a vocabulary-parallel "
             "loss)"),
    cl::value_desc("KIND[:OUTPUT]"), cl::sub(distopt::tool::planCommand()));
cl::opt<std::string> mode("mode", cl::desc("train (default) or infer"),
                          cl::init("train"), cl::value_desc("train|infer"),
                          cl::sub(distopt::tool::planCommand()));
cl::opt<int64_t> globalBatch(
    "global-batch",
    cl::desc("Samples per step over the whole cluster (binds the batch "
             "dimension of the inputs; default: the model's static batch)"),
    cl::init(0), cl::value_desc("N"), cl::sub(distopt::tool::planCommand()));
cl::opt<int64_t> seqLen(
    "seq-len",
    cl::desc("Sequence length (binds a symbolic dimension 1 of the inputs)"),
    cl::init(0), cl::value_desc("N"), cl::sub(distopt::tool::planCommand()));
cl::opt<std::string> precision(
    "precision",
    cl::desc("fp32|tf32|bf16|fp16: compute and communication dtype "
             "(16-bit: mixed precision with fp32 master weights); default: "
             "the model's"),
    cl::value_desc("dtype"), cl::sub(distopt::tool::planCommand()));
cl::opt<int64_t> forceDP("dp", cl::desc("Force the data-parallel degree"),
                         cl::init(0), cl::value_desc("N"),
                         cl::sub(distopt::tool::planCommand()),
                         cl::sub(distopt::tool::compileCommand()));
cl::opt<int64_t> forceTP("tp", cl::desc("Force the tensor-parallel degree"),
                         cl::init(0), cl::value_desc("N"),
                         cl::sub(distopt::tool::planCommand()),
                         cl::sub(distopt::tool::compileCommand()));
cl::opt<int64_t> forcePP("pp", cl::desc("Force the number of pipeline stages"),
                         cl::init(0), cl::value_desc("N"),
                         cl::sub(distopt::tool::planCommand()),
                         cl::sub(distopt::tool::compileCommand()));
cl::opt<int64_t> forceMicro(
    "microbatches", cl::desc("Force the micro-batches per step"), cl::init(0),
    cl::value_desc("N"), cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<bool> microbatchStatistics(
    "microbatch-statistics",
    cl::desc("Statistics over the batch (batch norm in training form) may "
             "be each micro-batch's own (--accumulate, --microbatches), the "
             "running statistics updated once per micro-batch in order, as "
             "PyTorch's gradient accumulation and GPipe do; without it such "
             "models are not cut into micro-batches"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> forceRecompute(
    "recompute", cl::desc("Force activation recomputation"),
    cl::value_desc("off|selective|full"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> pipelineSchedule(
    "schedule",
    cl::desc("The pipeline schedule of a training step: 1f1b (default) or "
             "gpipe"),
    cl::value_desc("1f1b|gpipe"), cl::init("1f1b"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> optimizer("optimizer",
                               cl::desc("The optimizer whose state the plan "
                                        "holds: sgd, momentum, adam "
                                        "(default) or adamw"),
                               cl::init("adam"), cl::value_desc("name"),
                               cl::sub(distopt::tool::planCommand()));
cl::opt<double> bucketMB(
    "bucket-mb",
    cl::desc("Data-parallel training: the largest bucket of gradients one "
             "all-reduce carries, in MiB (default 25, as PyTorch DDP)"),
    cl::init(25.0), cl::value_desc("MIB"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> gradDtype(
    "grad-dtype",
    cl::desc("Data-parallel training: the dtype gradients travel in, fp32 "
             "(default), fp16 or bf16 (scaled by 1/replicas before the sum; "
             "the update stays fp32)"),
    cl::init("fp32"), cl::value_desc("fp32|fp16|bf16"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<int> zeroFlag(
    "zero",
    cl::desc("Data-parallel training: 1 shards the optimizer state over the "
             "replicas (ZeRO-1: gradients reduce-scattered, weights "
             "all-gathered), 0 keeps it on every replica; default: 0 unless "
             "no plan fits without it"),
    cl::init(-1), cl::value_desc("0|1"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> syncFlag(
    "sync",
    cl::desc("Data-parallel training: how replicas combine gradients: "
             "allreduce (default; ring all-reduce), ps (synchronous parameter "
             "servers) or async (asynchronous parameter servers)"),
    cl::init("allreduce"), cl::value_desc("allreduce|ps|async"),
    cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<int64_t> serversFlag(
    "servers",
    cl::desc("With --sync ps|async: the number of parameter-server ranks "
             "(default: the fastest count the planner prices)"),
    cl::init(0), cl::value_desc("K"), cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<int64_t> backupWorkersFlag(
    "backup-workers",
    cl::desc("With --sync ps: workers beyond those whose gradients a step "
             "applies (each step takes the first to arrive)"),
    cl::init(0), cl::value_desc("K"), cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> profileFile(
    "profile", cl::desc("Efficiency profile (YAML) over the defaults"),
    cl::value_desc("file"), cl::sub(distopt::tool::planCommand()),
    cl::sub(distopt::tool::compileCommand()));
cl::opt<std::string> emit(
    "emit",
    cl::desc("summary (default): the readable plan; ir: the model's dopt IR "
             "annotated with the plan (shard dialect grid and shardings, "
             "stage attributes), the partitioner's input"),
    cl::init("summary"), cl::value_desc("summary|ir"),
    cl::sub(distopt::tool::planCommand()));
cl::opt<std::string> reportFile(
    "report",
    cl::desc("Also write a self-contained HTML page with the pipeline "
             "schedule and per-stage costs drawn as SVG"),
    cl::value_desc("file.html"), cl::sub(distopt::tool::planCommand()));
cl::opt<std::string> segmentSolver(
    "segment-solver",
    cl::desc("How the sharding problem of each segment is solved: auto "
             "(default: variable elimination, CBC where that is too wide), "
             "ilp (CBC for every problem with a cycle) or elimination (fails "
             "where it is too wide); for benchmarks"),
    cl::init("auto"), cl::value_desc("auto|ilp|elimination"), cl::Hidden,
    cl::sub(distopt::tool::planCommand()));
cl::opt<std::string> jsonFile("json",
                              cl::desc("Also write the plan as JSON ('-': "
                                       "stdout, instead of the summary)"),
                              cl::value_desc("file"),
                              cl::sub(distopt::tool::planCommand()));

int usage(const Twine &msg) {
  WithColor::error(errs(), "distopt plan") << msg << "\n";
  return 1;
}

} // namespace

int distopt::tool::runPlan(mlir::MLIRContext &context, StringRef input) {
  if (clusterSpec.empty())
    return usage("--cluster is required (e.g. --cluster dgx-a100x8 or "
                 "--cluster local:4)");
  PlanOptions options;
  if (mode == "train")
    options.mode = PlanMode::Train;
  else if (mode == "infer")
    options.mode = PlanMode::Infer;
  else
    return usage("--mode must be train or infer, got '" + mode + "'");
  distopt::driver::DistributionOptions distribution;
  {
    std::string error;
    if (!distributionFromFlags(distribution, error))
      return usage(error);
  }
  CostOptions costOptions;
  if (!precision.empty()) {
    std::optional<DType> d = parseDType(precision);
    if (!d)
      return usage("--precision must be fp32, tf32, bf16 or fp16, got '" +
                   precision + "'");
    costOptions.precision = *d;
  }
  if (std::optional<Optimizer> opt = parseOptimizer(optimizer))
    options.optimizer = *opt;
  else
    return usage("--optimizer must be " + optimizerChoices(", ", " or ") +
                 ", got '" + optimizer + "'");
  if (Error e = distopt::driver::applyDistribution(distribution, options))
    return usage(toString(std::move(e)));
  options.compareServers = true;
  if (segmentSolver == "ilp")
    options.segmentSolver = IntraOpSolver::ILP;
  else if (segmentSolver == "elimination")
    options.segmentSolver = IntraOpSolver::Elimination;
  else if (segmentSolver != "auto")
    return usage("--segment-solver must be auto, ilp or elimination, got '" +
                 segmentSolver + "'");
  if (emit != "summary" && emit != "ir")
    return usage("--emit must be summary or ir, got '" + emit + "'");
  if (globalBatch.getNumOccurrences() && globalBatch < 1)
    return usage("--global-batch must be at least 1");
  if (seqLen.getNumOccurrences() && seqLen < 1)
    return usage("--seq-len must be at least 1");

  Expected<Cluster> cluster = resolveCluster(clusterSpec);
  if (!cluster)
    return usage(toString(cluster.takeError()));

  distopt::ONNXImportOptions importOptions;
  if (!importOptionsFromFlags(importOptions))
    return 1;
  // Probe batch 2: costs scale linearly from it (PlanGraph.h).
  if (globalBatch.getNumOccurrences())
    importOptions.batchSize = 2;
  if (seqLen.getNumOccurrences())
    importOptions.symbolicDimsByPosition[1] = seqLen;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      distopt::importONNXFile(context, input, importOptions);
  if (!module)
    return 1;
  mlir::func::FuncOp func;
  module->walk([&](mlir::func::FuncOp f) {
    if (!func)
      func = f;
  });
  if (!func || func.getNumArguments() == 0)
    return usage("the model has no inputs to carry a batch");
  // The batch: the batch dimension of the inputs the model left symbolic
  // (bound to the probe of 2 above), else the first input's static dim 0.
  bool symbolic = false;
  std::optional<int64_t> probeOpt = distopt::driver::batchOf(func, symbolic);
  if (!probeOpt)
    return usage("the first model input is a scalar: no batch dimension");
  if (!symbolic) {
    if (globalBatch.getNumOccurrences() && globalBatch != *probeOpt)
      return usage("the model's batch is static (" + Twine(*probeOpt) +
                   ", dimension 0 of its inputs): --global-batch must be " +
                   Twine(*probeOpt) + " or left out");
  }
  int64_t probe = *probeOpt;
  options.globalBatch = globalBatch.getNumOccurrences() ? int64_t(globalBatch)
                                                        : probe;
  if (options.mode == PlanMode::Train)
    options.classLossOutput =
        distopt::driver::classLossOutputOf(func, planLoss);
  Expected<PlanGraph> graph = buildPlanGraph(func, probe, costOptions);
  if (!graph)
    return usage(toString(graph.takeError()));
  if (costOptions.precision) {
    options.precision = *costOptions.precision;
  } else {
    // The model's floating-point type (f64 is costed at 8 bytes but runs at
    // the fp32 peak: cluster specs carry no fp64 figure).
    for (const PlanTensor &t : graph->tensors) {
      if (!t.isFloat)
        continue;
      mlir::Type elt =
          cast<mlir::RankedTensorType>(t.value.getType()).getElementType();
      options.precision = elt.isF16()    ? DType::FP16
                          : elt.isBF16() ? DType::BF16
                                         : DType::FP32;
      break;
    }
  }

  Expected<PlanResult> result = searchPlan(*graph, *cluster, options);
  if (!result)
    return usage(toString(result.takeError()));
  PlanContext ctx;
  ctx.modelName = sys::path::filename(input).str();
  ctx.clusterSpec = clusterSpec;
  if (emit == "ir") {
    context.loadDialect<mlir::shard::ShardDialect>();
    // The plan was searched at the probe batch; the IR it annotates has the
    // real one. Same model, same importer: the graphs must match node for
    // node, which is checked.
    mlir::OwningOpRef<mlir::ModuleOp> full;
    std::optional<PlanGraph> fullGraph;
    if (probe != options.globalBatch) {
      importOptions.batchSize = options.globalBatch;
      full = distopt::importONNXFile(context, input, importOptions);
      if (!full)
        return 1;
      mlir::func::FuncOp fullFunc;
      full->walk([&](mlir::func::FuncOp f) {
        if (!fullFunc)
          fullFunc = f;
      });
      Expected<PlanGraph> g2 = rebindPlanGraph(*graph, fullFunc);
      if (!g2)
        return usage(toString(g2.takeError()) + " (batch " + Twine(probe) +
                     " vs " + Twine(options.globalBatch) + ")");
      fullGraph = std::move(*g2);
    }
    mlir::ModuleOp target = full ? *full : *module;
    // The IR names its model absolutely, so `distopt compile plan.mlir`
    // finds the weights from any directory.
    {
      SmallString<256> abs(input);
      sys::fs::make_absolute(abs);
      target->setAttr("dopt.source",
                      mlir::StringAttr::get(&context, abs.str()));
    }
    if (Error e = annotatePlan(target, fullGraph ? *fullGraph : *graph,
                               result->best))
      return usage(toString(std::move(e)));
    if (jsonFile != "-") {
      target->print(outs());
      outs() << "\n";
    }
  } else if (jsonFile != "-") {
    printPlanSummary(outs(), *graph, *cluster, options, *result, ctx);
  }
  if (!reportFile.empty()) {
    std::string err;
    auto out = mlir::openOutputFile(reportFile, &err);
    if (!out)
      return usage(err);
    writePlanHTML(out->os(), *graph, *cluster, options, *result, ctx);
    out->keep();
  }
  if (!jsonFile.empty()) {
    std::string err;
    auto out = mlir::openOutputFile(jsonFile, &err);
    if (!out)
      return usage(err);
    out->os() << formatv("{0:2}",
                         planToJSON(*graph, *cluster, options, *result, ctx))
              << "\n";
    out->keep();
  }
  return 0;
}

bool distopt::tool::distributionFromFlags(
    distopt::driver::DistributionOptions &out, std::string &error) {
  out.cluster = clusterSpec;
  auto given = [](auto &opt) { return opt.getNumOccurrences() > 0; };
  if (given(forceDP))
    out.dp = forceDP;
  if (given(forceTP))
    out.tp = forceTP;
  if (given(forcePP))
    out.pp = forcePP;
  if (given(forceMicro))
    out.microbatches = forceMicro;
  out.microbatchStatistics = microbatchStatistics;
  if (!forceRecompute.empty()) {
    if (forceRecompute == "off")
      out.recompute = Recompute::Off;
    else if (forceRecompute == "selective")
      out.recompute = Recompute::Selective;
    else if (forceRecompute == "full")
      out.recompute = Recompute::Full;
    else {
      error = "--recompute must be off, selective or full, got '" +
              forceRecompute + "'";
      return false;
    }
  }
  if (pipelineSchedule != "1f1b" && pipelineSchedule != "gpipe") {
    error = "--schedule must be 1f1b or gpipe, got '" + pipelineSchedule + "'";
    return false;
  }
  if (given(pipelineSchedule))
    out.schedule = pipelineSchedule == "gpipe" ? PipelineSchedule::GPipe
                                               : PipelineSchedule::OneFOneB;
  if (given(bucketMB))
    out.bucketMiB = bucketMB;
  if (gradDtype != "fp32" && gradDtype != "fp16" && gradDtype != "bf16") {
    error = "--grad-dtype must be fp32, fp16 or bf16, got '" + gradDtype + "'";
    return false;
  }
  if (given(gradDtype))
    out.gradDtype = parseDType(gradDtype);
  if (given(zeroFlag))
    out.zero = zeroFlag;
  std::optional<GradientSync> sync = parseGradientSync(syncFlag);
  if (!sync) {
    error = "--sync must be allreduce, ps or async, got '" + syncFlag + "'";
    return false;
  }
  out.sync = *sync;
  if (given(serversFlag))
    out.servers = serversFlag;
  if (given(backupWorkersFlag))
    out.backupWorkers = backupWorkersFlag;
  out.profile = profileFile;
  return true;
}
