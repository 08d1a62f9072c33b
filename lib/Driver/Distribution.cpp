//===- Distribution.cpp - plan a model for a cluster, partition it --------===//
//
// The options of a distribution (DistributionOptions) checked and handed to
// the planner, and `partitionForCluster`: plan the imported model, annotate
// it with the plan and rewrite it into one rank's program. See Driver.h.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Distributed/Passes.h"
#include "distopt/Planner/Cluster.h"
#include "distopt/Planner/PlanToIR.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::planner;
using llvm::Twine;

static llvm::Error fail(const Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// A forced degree: at least 1.
static llvm::Error positive(const std::optional<int64_t> &value,
                            llvm::StringRef flag, std::optional<int64_t> &out) {
  if (!value)
    return llvm::Error::success();
  if (*value < 1)
    return fail("--" + flag + " must be at least 1, got " + Twine(*value));
  out = *value;
  return llvm::Error::success();
}

llvm::Error driver::checkGradientSync(const DistributionOptions &d) {
  if (d.zero && *d.zero != 0 && *d.zero != 1)
    return fail("--zero must be 0 or 1 (ZeRO stages 2 and 3 are not built), "
                "got " + Twine(*d.zero));
  if (d.bucketMiB && !(*d.bucketMiB > 0))
    return fail("--bucket-mb must be positive");
  return llvm::Error::success();
}

/// --bucket-mb, --grad-dtype and --zero.
static llvm::Error applyGradientSync(const driver::DistributionOptions &d,
                                     PlanOptions &options) {
  if (llvm::Error e = driver::checkGradientSync(d))
    return e;
  options.bucketBytes = d.bucketBytes();
  if (d.gradDtype && *d.gradDtype != DType::FP32)
    options.gradDtype = *d.gradDtype;
  if (d.zero)
    options.zeroStage = *d.zero;
  return llvm::Error::success();
}

/// --recompute, --schedule and --microbatch-statistics.
static llvm::Error applyPipeline(const driver::DistributionOptions &d,
                                 PlanOptions &options) {
  bool infer = options.mode == PlanMode::Infer;
  if (d.recompute) {
    options.recompute = *d.recompute;
    if (infer && *d.recompute != Recompute::Off)
      return fail("--recompute applies to training (plan --mode train, "
                  "compile --optimizer)");
  }
  if (d.schedule && infer)
    return fail("--schedule applies to training (plan --mode train, compile "
                "--optimizer)");
  options.schedule = d.schedule.value_or(PipelineSchedule::OneFOneB);
  if (d.microbatchStatistics && infer)
    return fail("--microbatch-statistics applies to training (plan --mode "
                "train, compile --optimizer)");
  options.microbatchStatistics = d.microbatchStatistics;
  return llvm::Error::success();
}

/// --sync, --servers and --backup-workers.
static llvm::Error applyServers(const driver::DistributionOptions &d,
                                PlanOptions &options) {
  options.sync = d.sync;
  std::string sync = gradientSyncName(d.sync).str();
  bool servers = d.sync != GradientSync::AllReduce;
  if (!servers && (d.servers || d.backupWorkers))
    return fail(Twine(d.servers ? "--servers" : "--backup-workers") +
                " applies to parameter servers (--sync ps or --sync async)");
  if (servers && options.mode != PlanMode::Train)
    return fail("--sync " + sync +
                " applies to training (plan --mode train, compile --loss and "
                "--optimizer)");
  if (d.servers) {
    if (*d.servers < 1)
      return fail("--servers must be at least 1, got " + Twine(*d.servers));
    options.servers = *d.servers;
  }
  int64_t backups = d.backupWorkers.value_or(0);
  if (backups < 0)
    return fail("--backup-workers must be at least 0, got " + Twine(backups));
  if (backups > 0 && d.sync != GradientSync::ParameterServer)
    return fail("--backup-workers applies to synchronous parameter servers "
                "(--sync ps): an asynchronous server waits for no one");
  options.backupWorkers = backups;
  if (servers && (d.tp.value_or(0) > 1 || d.pp.value_or(0) > 1))
    return fail("parameter servers serve data-parallel workers: --tp and --pp "
                "must be 1 with --sync " + sync);
  if (servers && d.dp)
    return fail("--dp: with parameter servers the workers are the devices the "
                "servers leave (set --servers, or the cluster)");
  if (servers && d.zero.value_or(-1) > 0)
    return fail("--zero 1 shards the optimizer state over all-reduce replicas; "
                "parameter servers already hold it, sharded over the servers");
  return llvm::Error::success();
}

llvm::Error driver::applyDistribution(const DistributionOptions &d,
                                      PlanOptions &options) {
  if (llvm::Error e = positive(d.dp, "dp", options.dp))
    return e;
  if (llvm::Error e = positive(d.tp, "tp", options.tp))
    return e;
  if (llvm::Error e = positive(d.pp, "pp", options.pp))
    return e;
  if (llvm::Error e = positive(d.microbatches, "microbatches",
                               options.microbatches))
    return e;
  if (llvm::Error e = applyGradientSync(d, options))
    return e;
  if (llvm::Error e = applyPipeline(d, options))
    return e;
  if (llvm::Error e = applyServers(d, options))
    return e;
  if (!d.profile.empty()) {
    auto buf = llvm::MemoryBuffer::getFile(d.profile);
    if (!buf)
      return fail("cannot read profile '" + d.profile +
                  "': " + buf.getError().message());
    auto profile = parseEfficiencyProfile((*buf)->getBuffer(), d.profile);
    if (!profile)
      return profile.takeError();
    options.efficiency = *profile;
  }
  return llvm::Error::success();
}

static LogicalResult compileError(const Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "distopt compile") << msg << "\n";
  return failure();
}

FailureOr<driver::Partitioned>
driver::partitionForCluster(MLIRContext &context, ModuleOp module,
                            const DistributionOptions &distribution,
                            const PartitionRequest &request) {
  Partitioned out;
  if (distribution.cluster.empty()) {
    if (distribution.clusterGiven())
      return compileError("--dp/--tp/--pp/--microbatches need --cluster");
    return out;
  }
  llvm::Expected<Cluster> cluster = resolveCluster(distribution.cluster);
  if (!cluster)
    return compileError(toString(cluster.takeError()));
  PlanOptions options;
  options.mode = request.training ? PlanMode::Train : PlanMode::Infer;
  options.optimizer = request.optimizer;
  if (llvm::Error e = applyDistribution(distribution, options))
    return compileError(toString(std::move(e)));
  if (request.sameAs && request.sameAs->size() == 3) {
    options.pp = (*request.sameAs)[0];
    options.dp = (*request.sameAs)[1];
    options.tp = (*request.sameAs)[2];
  }
  auto func = module.lookupSymbol<func::FuncOp>("main");
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
    return compileError("--dp " + Twine(*options.dp) +
                        " exceeds the batch of " + Twine(*batch) +
                        " (the batch dimension of the model inputs): a "
                        "replica would get no samples");
  // The output a cross-entropy or NLL loss takes: its classes may stay
  // split for a vocabulary-parallel loss.
  if (request.training)
    options.classLossOutput = classLossOutputOf(func, request.loss);
  // The precision the program will compute in: the plan prices its FLOPs
  // at that peak. A 16-bit program is already in its types (driver::
  // autocast ran on the imported model): each tensor is priced at its own
  // width, each op at its own dtype's peak. fp32/tf32: every float tensor
  // and op at the precision.
  CostOptions costOptions;
  bool mixed = request.precision && isHalfPrecision(*request.precision);
  if (!mixed)
    costOptions.precision = request.precision;
  if (request.precision)
    options.precision = *request.precision;
  llvm::Expected<PlanGraph> graph = buildPlanGraph(func, *batch, costOptions);
  if (!graph)
    return compileError(toString(graph.takeError()));
  llvm::Expected<PlanResult> result = searchPlan(*graph, *cluster, options);
  if (!result)
    return compileError(toString(result.takeError()));
  const Plan &p = result->best;
  context.loadDialect<shard::ShardDialect>();
  if (llvm::Error e = annotatePlan(module, *graph, p))
    return compileError(toString(std::move(e)));
  PassManager pm(&context);
  // A pipelined training step appends its loss to the partitioned @main
  // before the stages are outlined (compile).
  PartitionPassOptions partitionOptions;
  partitionOptions.outlineStages = !request.training || p.pp == 1;
  pm.addPass(createPartitionPass(partitionOptions));
  if (failed(pm.run(module)))
    return failure();
  if (llvm::Error e = checkPlannedCollectives(module, p, costOptions.precision))
    return compileError(toString(std::move(e)));
  if (request.training)
    recordPlannedBackward(module, p, costOptions.precision);
  out.grid = {p.pp, p.dp, p.tp};
  out.sync = p.sync;
  out.servers = p.servers;
  out.workers = p.dp;
  out.backupWorkers = p.backupWorkers;
  out.deviceMemory = cluster->device.memoryCapacity;
  for (const StagePlan &st : p.stages)
    out.stageMemory.push_back({st.weightBytes, st.gradientBytes,
                               st.optimizerBytes, st.activationBytes});
  llvm::raw_string_ostream os(out.summary);
  if (p.sync != GradientSync::AllReduce)
    os << "plan " << p.servers
       << (p.servers == 1 ? " parameter server + " : " parameter servers + ")
       << p.dp << " data-parallel workers"
       << (p.backupWorkers
               ? " (" + std::to_string(p.backupWorkers) + " backups)"
               : std::string())
       << " (" << gradientSyncName(p.sync) << ") = " << p.devices()
       << " ranks on " << distribution.cluster;
  else
    os << "plan dp " << p.dp << " x tp " << p.tp << " x pp " << p.pp << " = "
       << p.devices() << " ranks on " << distribution.cluster
       << (p.vocabularyParallelLoss ? "; vocabulary-parallel loss" : "");
  return out;
}
