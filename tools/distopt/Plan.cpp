//===- Plan.cpp - `distopt plan` ------------------------------------------===//
//
//   distopt plan MODEL --cluster SPEC [--mode train|infer] --global-batch N
//       [--seq-len N] [--precision fp16] [--dp N --tp N --pp N]
//       [--microbatches N] [--recompute off|selective|full] [--json FILE]
//
// The flags of `distopt plan` into driver::PlanRequest; prints the plan
// driver::plan found (summary, JSON, HTML report, or the annotated IR).
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace distopt::planner;

namespace {

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
cl::opt<std::string> optimizer("optimizer",
                               cl::desc("The optimizer whose state the plan "
                                        "holds: sgd, momentum, adam "
                                        "(default) or adamw"),
                               cl::init("adam"), cl::value_desc("name"),
                               cl::sub(distopt::tool::planCommand()));
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

} // namespace

int distopt::tool::runPlan(mlir::MLIRContext &context, StringRef input) {
  distopt::driver::PlanRequest request;
  request.input = input.str();
  std::string error;
  if (!distributionFromFlags(request.distribution, error))
    return fail("plan", error);
  if (request.distribution.cluster.empty())
    return fail("plan", "--cluster is required (e.g. --cluster dgx-a100x8 or "
                        "--cluster local:4)");
  // --emit ir: the annotated IR instead of the summary.
  static constexpr distopt::NamedValue<bool> kEmits[] = {
      {"summary", false}, {"ir", true}};
  if (!distopt::parseNamed("emit", kEmits, emit, request.annotate, error) ||
      !distopt::parseNamed("mode", distopt::planner::kPlanModes, mode,
                           request.mode, error) ||
      !precisionFromFlags(request.precision, error) ||
      !distopt::parseNamed("segment-solver", distopt::planner::kIntraOpSolvers,
                           segmentSolver, request.segmentSolver, error))
    return fail("plan", error);
  if (std::optional<Optimizer> opt = parseOptimizer(optimizer))
    request.optimizer = *opt;
  else
    return fail("plan", unknownOptimizer(optimizer));
  setIfGiven(globalBatch, request.globalBatch);
  setIfGiven(seqLen, request.seqLen);
  request.loss = planLoss;
  if (!importOptionsFromFlags(request.import))
    return 1;

  mlir::FailureOr<std::unique_ptr<distopt::driver::PlannedModel>> planned =
      distopt::driver::plan(context, request);
  if (failed(planned))
    return 1;
  const distopt::driver::PlannedModel &p = **planned;
  if (jsonFile != "-") {
    if (request.annotate) {
      p.annotatedModule()->print(outs());
      outs() << "\n";
    } else {
      p.printSummary(outs());
    }
  }
  std::string err;
  if (!reportFile.empty() &&
      !distopt::driver::writeOutputFile(
          reportFile, [&](raw_ostream &os) { p.writeHTML(os); }, err))
    return fail("plan", err);
  if (!jsonFile.empty() &&
      !distopt::driver::writeOutputFile(
          jsonFile,
          [&](raw_ostream &os) { os << formatv("{0:2}", p.toJSON()) << "\n"; },
          err))
    return fail("plan", err);
  return 0;
}
