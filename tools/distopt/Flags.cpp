//===- Flags.cpp - the flags `distopt` subcommands share
//-------------------===//
//
// The subcommands, the import flags (import, plan, compile) and the
// distribution flags (plan, compile), parsed into the driver library's
// options. Each subcommand's own flags live beside it (Plan.cpp,
// Compile.cpp, Run.cpp).
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace distopt::planner;
using distopt::tool::ImportPlanAndCompile;
using distopt::tool::PlanAndCompile;

cl::SubCommand &distopt::tool::importCommand() {
  static cl::SubCommand cmd("import",
                            "Import an ONNX model into the dopt dialect");
  return cmd;
}

cl::SubCommand &distopt::tool::planCommand() {
  static cl::SubCommand cmd(
      "plan", "Find how to split a model over a cluster and explain it");
  return cmd;
}

cl::SubCommand &distopt::tool::compileCommand() {
  static cl::SubCommand cmd(
      "compile", "Compile an ONNX model into an executable bundle (model.dx/)");
  return cmd;
}

namespace {

static cl::list<std::string>
    importShapes("shape",
                 cl::desc("Concrete shape of a graph input, e.g. x=32x256"),
                 cl::value_desc("name=AxBx..."), ImportPlanAndCompile());
static cl::list<std::string>
    importDims("dim", cl::desc("Value of a symbolic dimension, e.g. batch=32"),
               cl::value_desc("name=N"), ImportPlanAndCompile());
static cl::list<std::string> importFreeze(
    "freeze",
    cl::desc("Bind a graph input to the value in a .npy/.pb file at compile "
             "time (for inputs that feed shapes: axes, pads, targets)"),
    cl::value_desc("name=file"), ImportPlanAndCompile());
static cl::opt<bool> importInlineWeights(
    "inline-weights",
    cl::desc("Read all weights (including external data) into the IR as "
             "dense_resource blobs instead of referencing them"),
    cl::sub(distopt::tool::importCommand()));
static cl::opt<bool>
    importText("text",
               cl::desc("Read ONNX's textual syntax (default for "
                        ".onnxtxt files)"),
               ImportPlanAndCompile());

cl::opt<std::string>
    clusterSpec("cluster",
                cl::desc("Cluster: a preset (dgx-a100x8, dgx-h100x8, local:N, "
                         "NxPRESET) or a YAML file"),
                cl::value_desc("spec"), PlanAndCompile());
cl::opt<int64_t> forceDP("dp", cl::desc("Force the data-parallel degree"),
                         cl::init(0), cl::value_desc("N"), PlanAndCompile());
cl::opt<int64_t> forceTP("tp", cl::desc("Force the tensor-parallel degree"),
                         cl::init(0), cl::value_desc("N"), PlanAndCompile());
cl::opt<int64_t> forcePP("pp", cl::desc("Force the number of pipeline stages"),
                         cl::init(0), cl::value_desc("N"), PlanAndCompile());
cl::opt<int64_t> forceMicro("microbatches",
                            cl::desc("Force the micro-batches per step"),
                            cl::init(0), cl::value_desc("N"), PlanAndCompile());
cl::opt<bool> microbatchStatistics(
    "microbatch-statistics",
    cl::desc("Statistics over the batch (batch norm in training form) may "
             "be each micro-batch's own (--accumulate, --microbatches), the "
             "running statistics updated once per micro-batch in order, as "
             "PyTorch's gradient accumulation and GPipe do; without it such "
             "models are not cut into micro-batches"),
    PlanAndCompile());
cl::opt<std::string> forceRecompute("recompute",
                                    cl::desc("Force activation recomputation"),
                                    cl::value_desc("off|selective|full"),
                                    PlanAndCompile());
cl::opt<std::string> precisionFlag(
    "precision",
    cl::desc("fp32|tf32|bf16|fp16: the precision the program computes in "
             "(16-bit: mixed precision, matrix products and convolutions in "
             "16 bits with fp32 accumulation, fp32 master weights); default: "
             "the model's"),
    cl::value_desc("dtype"), PlanAndCompile());
cl::opt<std::string> pipelineSchedule(
    "schedule",
    cl::desc("The pipeline schedule of a training step: 1f1b (default) or "
             "gpipe"),
    cl::value_desc("1f1b|gpipe"), cl::init("1f1b"), PlanAndCompile());
cl::opt<double> bucketMB(
    "bucket-mb",
    cl::desc("Data-parallel training: the largest bucket of gradients one "
             "all-reduce carries, in MiB (default 25, as PyTorch DDP)"),
    cl::init(25.0), cl::value_desc("MIB"), PlanAndCompile());
cl::opt<std::string> gradDtype(
    "grad-dtype",
    cl::desc("Data-parallel training: the dtype gradients travel in, fp32 "
             "(default), fp16 or bf16 (scaled by 1/replicas before the sum; "
             "the update stays fp32)"),
    cl::init("fp32"), cl::value_desc("fp32|fp16|bf16"), PlanAndCompile());
cl::opt<int> zeroFlag(
    "zero",
    cl::desc("Data-parallel training: 1 shards the optimizer state over the "
             "replicas (ZeRO-1: gradients reduce-scattered, weights "
             "all-gathered), 0 keeps it on every replica; default: 0 unless "
             "no plan fits without it"),
    cl::init(-1), cl::value_desc("0|1"), PlanAndCompile());
cl::opt<std::string> syncFlag(
    "sync",
    cl::desc("Data-parallel training: how replicas combine gradients: "
             "allreduce (default; ring all-reduce), ps (synchronous parameter "
             "servers) or async (asynchronous parameter servers)"),
    cl::init("allreduce"), cl::value_desc("allreduce|ps|async"),
    PlanAndCompile());
cl::opt<int64_t> serversFlag(
    "servers",
    cl::desc("With --sync ps|async: the number of parameter-server ranks "
             "(default: the fastest count the planner prices)"),
    cl::init(0), cl::value_desc("K"), PlanAndCompile());
cl::opt<int64_t> backupWorkersFlag(
    "backup-workers",
    cl::desc("With --sync ps: workers beyond those whose gradients a step "
             "applies (each step takes the first to arrive)"),
    cl::init(0), cl::value_desc("K"), PlanAndCompile());
cl::opt<std::string>
    profileFile("profile",
                cl::desc("Efficiency profile (YAML) over the defaults"),
                cl::value_desc("file"), PlanAndCompile());

} // namespace

/// Builds import options from the command line; false after a usage error.
bool distopt::tool::importOptionsFromFlags(ONNXImportOptions &options) {
  using driver::ImportSetting;
  std::string error;
  for (auto [flag, setting] : {std::pair(&importShapes, ImportSetting::Shape),
                               std::pair(&importDims, ImportSetting::Dim),
                               std::pair(&importFreeze, ImportSetting::Freeze)})
    for (StringRef arg : *flag)
      if (!driver::addImportSetting(setting, arg, options, error)) {
        WithColor::error() << error << "\n";
        return false;
      }
  options.inlineWeights = importInlineWeights;
  if (importText)
    options.textFormat = true;
  return true;
}

bool distopt::tool::distributionFromFlags(
    distopt::driver::DistributionOptions &out, std::string &error) {
  out.cluster = clusterSpec;
  setIfGiven(forceDP, out.dp);
  setIfGiven(forceTP, out.tp);
  setIfGiven(forcePP, out.pp);
  setIfGiven(forceMicro, out.microbatches);
  out.microbatchStatistics = microbatchStatistics;
  if (!forceRecompute.empty() &&
      !parseNamed("recompute", planner::kRecomputes, forceRecompute,
                  out.recompute, error))
    return false;
  // Unless given, --schedule and --grad-dtype leave the plan's choice.
  if ((pipelineSchedule.getNumOccurrences() &&
       !parseNamed("schedule", planner::kSchedules, pipelineSchedule,
                   out.schedule, error)) ||
      (gradDtype.getNumOccurrences() &&
       !parseNamed("grad-dtype", driver::kGradDtypes, gradDtype, out.gradDtype,
                   error)))
    return false;
  setIfGiven(bucketMB, out.bucketMiB);
  setIfGiven(zeroFlag, out.zero);
  if (!parseNamed("sync", planner::kGradientSyncs, syncFlag, out.sync, error))
    return false;
  setIfGiven(serversFlag, out.servers);
  setIfGiven(backupWorkersFlag, out.backupWorkers);
  out.profile = profileFile;
  return true;
}

bool distopt::tool::precisionFromFlags(std::optional<planner::DType> &out,
                                       std::string &error) {
  if (precisionFlag.empty())
    return true;
  return parseNamed("precision", planner::kDTypes, precisionFlag, out, error);
}
