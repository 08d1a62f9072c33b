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

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Planner/PlanReport.h"
#include "distopt/Planner/PlanToIR.h"
#include "distopt/Distributed/Passes.h"

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
                               cl::desc("adam (default), momentum or sgd"),
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

/// The gradient flags onto the planner's options.
bool applyGradientSync(PlanOptions &options, std::string &error) {
  distopt::tool::GradientSyncFlags flags;
  if (!distopt::tool::gradientSyncFlags(flags, error))
    return false;
  options.bucketBytes = flags.bucketBytes;
  if (flags.dtype != "fp32")
    options.gradDtype = parseDType(flags.dtype);
  if (flags.zero >= 0)
    options.zeroStage = flags.zero;
  return true;
}

/// --sync, --servers and --backup-workers (plan and compile).
bool applyServerFlags(PlanOptions &options, std::string &error) {
  std::optional<GradientSync> sync = parseGradientSync(syncFlag);
  if (!sync) {
    error = "--sync must be allreduce, ps or async, got '" + syncFlag + "'";
    return false;
  }
  options.sync = *sync;
  bool servers = *sync != GradientSync::AllReduce;
  if (!servers && (serversFlag.getNumOccurrences() ||
                   backupWorkersFlag.getNumOccurrences())) {
    error = std::string(serversFlag.getNumOccurrences() ? "--servers"
                                                        : "--backup-workers") +
            " applies to parameter servers (--sync ps or --sync async)";
    return false;
  }
  if (servers && options.mode != PlanMode::Train) {
    error = "--sync " + syncFlag + " applies to training (plan --mode train, "
            "compile --loss and --optimizer)";
    return false;
  }
  if (serversFlag.getNumOccurrences()) {
    if (serversFlag < 1) {
      error = "--servers must be at least 1, got " +
              std::to_string(serversFlag);
      return false;
    }
    options.servers = serversFlag;
  }
  if (backupWorkersFlag < 0) {
    error = "--backup-workers must be at least 0, got " +
            std::to_string(backupWorkersFlag);
    return false;
  }
  if (backupWorkersFlag > 0 && *sync != GradientSync::ParameterServer) {
    error = "--backup-workers applies to synchronous parameter servers "
            "(--sync ps): an asynchronous server waits for no one";
    return false;
  }
  options.backupWorkers = backupWorkersFlag;
  if (servers && (forceTP > 1 || forcePP > 1)) {
    error = "parameter servers serve data-parallel workers: --tp and --pp "
            "must be 1 with --sync " + syncFlag;
    return false;
  }
  if (servers && forceDP.getNumOccurrences()) {
    error = "--dp: with parameter servers the workers are the devices the "
            "servers leave (set --servers, or the cluster)";
    return false;
  }
  if (servers && zeroFlag > 0) {
    error = "--zero 1 shards the optimizer state over all-reduce replicas; "
            "parameter servers already hold it, sharded over the servers";
    return false;
  }
  return true;
}

/// --recompute and --schedule (plan and compile).
bool applyPipelineFlags(PlanOptions &options, std::string &error) {
  if (!forceRecompute.empty()) {
    if (forceRecompute == "off")
      options.recompute = Recompute::Off;
    else if (forceRecompute == "selective")
      options.recompute = Recompute::Selective;
    else if (forceRecompute == "full")
      options.recompute = Recompute::Full;
    else {
      error = "--recompute must be off, selective or full, got '" +
              forceRecompute + "'";
      return false;
    }
    if (options.mode == PlanMode::Infer && *options.recompute != Recompute::Off) {
      error = "--recompute applies to training (plan --mode train, compile "
              "--optimizer)";
      return false;
    }
  }
  if (pipelineSchedule != "1f1b" && pipelineSchedule != "gpipe") {
    error = "--schedule must be 1f1b or gpipe, got '" + pipelineSchedule + "'";
    return false;
  }
  if (pipelineSchedule.getNumOccurrences() && options.mode == PlanMode::Infer) {
    error = "--schedule applies to training (plan --mode train, compile "
            "--optimizer)";
    return false;
  }
  options.schedule = pipelineSchedule == "gpipe" ? PipelineSchedule::GPipe
                                                 : PipelineSchedule::OneFOneB;
  if (microbatchStatistics && options.mode == PlanMode::Infer) {
    error = "--microbatch-statistics applies to training (plan --mode train, "
            "compile --optimizer)";
    return false;
  }
  options.microbatchStatistics = microbatchStatistics;
  return true;
}

int usage(const Twine &msg) {
  WithColor::error(errs(), "distopt plan") << msg << "\n";
  return 1;
}

/// The batch of a model: the size of the batch dimension
/// (argumentBatchDim) of the first input that has one (`symbolic` = true),
/// else dimension 0 of the first input; nullopt for a scalar first input.
std::optional<int64_t> batchOf(mlir::func::FuncOp func, bool &symbolic) {
  for (mlir::BlockArgument arg : func.getArguments()) {
    int64_t d = argumentBatchDim(func, arg.getArgNumber());
    if (d >= 0 && func.getArgAttr(arg.getArgNumber(), "dopt.symbolic_dims")) {
      symbolic = true;
      return cast<mlir::RankedTensorType>(arg.getType()).getDimSize(d);
    }
  }
  symbolic = false;
  auto first = dyn_cast<mlir::RankedTensorType>(func.getArgument(0).getType());
  if (!first || first.getRank() == 0)
    return std::nullopt;
  return first.getDimSize(0);
}

bool compileError(const Twine &msg) {
  WithColor::error(errs(), "distopt compile") << msg << "\n";
  return false;
}

bool positive(cl::opt<int64_t> &opt, StringRef name, std::optional<int64_t> &out,
              std::string &error) {
  if (opt.getNumOccurrences() == 0)
    return true;
  if (opt < 1) {
    error = "--" + name.str() + " must be at least 1, got " +
            std::to_string(opt);
    return false;
  }
  out = opt;
  return true;
}

} // namespace

/// The output (by name, or position; default the first) a --loss of a kind
/// that takes its last axis as classes (cross-entropy, nll) reads, or -1.
bool distopt::tool::microbatchStatisticsFlag() { return microbatchStatistics; }

std::optional<distopt::tool::MicrobatchObstacle>
distopt::tool::microbatchObstacle(mlir::ModuleOp module) {
  auto func = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!func || func.getNumArguments() == 0)
    return std::nullopt;
  using Obstacle = distopt::tool::MicrobatchObstacle;
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

bool distopt::tool::annotateBatchDims(mlir::ModuleOp module, std::string &error) {
  auto func = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!func || func.getNumArguments() == 0)
    return true;
  auto nameOf = [&](unsigned i, bool result) {
    auto n = result ? func.getResultAttrOfType<mlir::StringAttr>(i, "dopt.name")
                    : func.getArgAttrOfType<mlir::StringAttr>(i, "dopt.name");
    return n ? n.getValue().str() : std::to_string(i);
  };
  bool seqFirst = false;
  mlir::Builder b(module.getContext());
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

static int64_t classLossOutputOf(mlir::func::FuncOp func, StringRef loss) {
  auto [kind, out] = loss.split(':');
  if (kind != "cross-entropy" && kind != "nll")
    return -1;
  StringRef which = out.empty() ? "0" : out;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto name = func.getResultAttrOfType<mlir::StringAttr>(i, "dopt.name"))
      if (name.getValue() == which)
        return i;
  unsigned position;
  if (!which.getAsInteger(10, position) && position < func.getNumResults())
    return position;
  return -1;
}

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
  {
    std::string error;
    if (!applyGradientSync(options, error))
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
  if (optimizer == "adam")
    options.optimizer = Optimizer::Adam;
  else if (optimizer == "momentum")
    options.optimizer = Optimizer::Momentum;
  else if (optimizer == "sgd")
    options.optimizer = Optimizer::SGD;
  else
    return usage("--optimizer must be adam, momentum or sgd, got '" +
                 optimizer + "'");
  std::string error;
  if (!positive(forceDP, "dp", options.dp, error) ||
      !positive(forceTP, "tp", options.tp, error) ||
      !positive(forcePP, "pp", options.pp, error) ||
      !positive(forceMicro, "microbatches", options.microbatches, error))
    return usage(error);
  if (!applyPipelineFlags(options, error) ||
      !applyServerFlags(options, error))
    return usage(error);
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
  if (!profileFile.empty()) {
    auto buf = MemoryBuffer::getFile(profileFile);
    if (!buf)
      return usage("cannot read profile '" + profileFile +
                   "': " + buf.getError().message());
    auto profile = parseEfficiencyProfile((*buf)->getBuffer(), profileFile);
    if (!profile)
      return usage(toString(profile.takeError()));
    options.efficiency = *profile;
  }

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
  std::optional<int64_t> probeOpt = batchOf(func, symbolic);
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
    options.classLossOutput = classLossOutputOf(func, planLoss);
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

bool distopt::tool::partitionForCluster(mlir::MLIRContext &context,
                                        mlir::ModuleOp module,
                                        std::vector<int64_t> &grid,
                                        bool training,
                                        const std::vector<int64_t> *sameAs,
                                        ServerPlan *servers,
                                        llvm::StringRef loss) {
  grid.clear();
  if (clusterSpec.empty()) {
    if (forceDP.getNumOccurrences() || forceTP.getNumOccurrences() ||
        forcePP.getNumOccurrences() || forceMicro.getNumOccurrences())
      return compileError("--dp/--tp/--pp/--microbatches need --cluster");
    return true;
  }
  Expected<Cluster> cluster = resolveCluster(clusterSpec);
  if (!cluster)
    return compileError(toString(cluster.takeError()));
  PlanOptions options;
  options.mode = training ? PlanMode::Train : PlanMode::Infer;
  std::string error;
  if (!positive(forceDP, "dp", options.dp, error) ||
      !positive(forceTP, "tp", options.tp, error) ||
      !positive(forcePP, "pp", options.pp, error) ||
      !positive(forceMicro, "microbatches", options.microbatches, error))
    return compileError(error);
  if (!applyGradientSync(options, error) ||
      !applyPipelineFlags(options, error) ||
      !applyServerFlags(options, error))
    return compileError(error);
  if (sameAs && sameAs->size() == 3) {
    options.pp = (*sameAs)[0];
    options.dp = (*sameAs)[1];
    options.tp = (*sameAs)[2];
  }

  if (!profileFile.empty()) {
    auto buf = MemoryBuffer::getFile(profileFile);
    if (!buf)
      return compileError("cannot read profile '" + profileFile +
                   "': " + buf.getError().message());
    auto profile = parseEfficiencyProfile((*buf)->getBuffer(), profileFile);
    if (!profile)
      return compileError(toString(profile.takeError()));
    options.efficiency = *profile;
  }
  auto func = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!func || func.getNumArguments() == 0)
    return compileError("the model has no inputs to carry a batch");
  // The batch: the batch dimension of the inputs the model left symbolic
  // (bound by --dim), else dimension 0 of the first input.
  bool symbolic = false;
  std::optional<int64_t> batch = batchOf(func, symbolic);
  if (!batch)
    return compileError("the first model input is a scalar: no batch "
                        "dimension");
  options.globalBatch = *batch;
  if (options.dp && *options.dp > *batch)
    return compileError("--dp " + Twine(*options.dp) + " exceeds the batch of " +
                        Twine(*batch) +
                        " (the batch dimension of the model inputs): a "
                        "replica would get no samples");
  // The output a cross-entropy or NLL loss takes: its classes may stay
  // split for a vocabulary-parallel loss.
  if (training)
    options.classLossOutput = classLossOutputOf(func, loss);
  Expected<PlanGraph> graph = buildPlanGraph(func, *batch, CostOptions());
  if (!graph)
    return compileError(toString(graph.takeError()));
  Expected<PlanResult> result = searchPlan(*graph, *cluster, options);
  if (!result)
    return compileError(toString(result.takeError()));
  const Plan &p = result->best;
  context.loadDialect<mlir::shard::ShardDialect>();
  if (Error e = annotatePlan(module, *graph, p))
    return compileError(toString(std::move(e)));
  mlir::PassManager pm(&context);
  // A pipelined training step appends its loss to the partitioned @main
  // before the stages are outlined (runCompile).
  distopt::PartitionPassOptions partitionOptions;
  partitionOptions.outlineStages = !training || p.pp == 1;
  pm.addPass(distopt::createPartitionPass(partitionOptions));
  if (failed(pm.run(module)))
    return false;
  if (Error e = checkPlannedCollectives(module, p))
    return compileError(toString(std::move(e)));
  if (training)
    recordPlannedBackward(module, p);
  grid = {p.pp, p.dp, p.tp};
  if (servers) {
    servers->sync = p.sync;
    servers->servers = p.servers;
    servers->workers = p.dp;
    servers->backupWorkers = p.backupWorkers;
  }
  if (!sameAs) {
    if (p.sync != GradientSync::AllReduce)
      outs() << "distopt compile: plan " << p.servers
             << (p.servers == 1 ? " parameter server + " : " parameter servers + ")
             << p.dp << " data-parallel workers"
             << (p.backupWorkers ? " (" + std::to_string(p.backupWorkers) +
                                       " backups)"
                                 : std::string())
             << " (" << gradientSyncName(p.sync) << ") = " << p.devices()
             << " ranks on " << clusterSpec << "\n";
    else
      outs() << "distopt compile: plan dp " << p.dp << " x tp " << p.tp
             << " x pp " << p.pp << " = " << p.devices() << " ranks on "
             << clusterSpec
             << (p.vocabularyParallelLoss ? "; vocabulary-parallel loss" : "")
             << "\n";
  }
  return true;
}

bool distopt::tool::gradientSyncFlags(GradientSyncFlags &out,
                                      std::string &error) {
  out.given = bucketMB.getNumOccurrences() || gradDtype.getNumOccurrences() ||
              zeroFlag.getNumOccurrences();
  if (zeroFlag.getNumOccurrences() && zeroFlag != 0 && zeroFlag != 1) {
    error = "--zero must be 0 or 1 (ZeRO stages 2 and 3 are not built), "
            "got " + std::to_string(zeroFlag);
    return false;
  }
  out.zero = zeroFlag.getNumOccurrences() ? int(zeroFlag) : -1;
  if (!(bucketMB > 0)) {
    error = "--bucket-mb must be positive";
    return false;
  }
  if (gradDtype != "fp32" && gradDtype != "fp16" && gradDtype != "bf16") {
    error = "--grad-dtype must be fp32, fp16 or bf16, got '" + gradDtype + "'";
    return false;
  }
  out.bucketBytes = bucketMB * 1024 * 1024;
  out.dtype = gradDtype;
  return true;
}

bool distopt::tool::clusterGiven() {
  return !clusterSpec.empty() || forceDP.getNumOccurrences() ||
         forceTP.getNumOccurrences() || forcePP.getNumOccurrences() ||
         forceMicro.getNumOccurrences();
}
