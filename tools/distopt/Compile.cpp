//===- Compile.cpp - `distopt compile` ------------------------------------===//
//
// The flags of `distopt compile` into driver::CompileOptions; the pipeline
// is lib/Driver (driver::compile).
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"

#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace distopt;
using llvm::WithColor;

namespace cl = llvm::cl;

static cl::opt<std::string> compileTarget(
    "target",
    cl::desc("What the bundle runs on: cpu (default), cuda (NVIDIA GPUs, "
             "one per rank), or cuda-emu (the CUDA target's kernels run on "
             "this CPU, thread by thread: for testing the GPU code "
             "generation without a GPU; slow)"),
    cl::value_desc("cpu|cuda|cuda-emu"), cl::init("cpu"),
    cl::sub(tool::compileCommand()));
static cl::opt<int64_t> outlineOps(
    "outline-ops",
    cl::desc("CPU code: functions of at least N loop-level operations are "
             "split into functions of about 250 before LLVM (default 8000: "
             "large training steps; 0 splits every function)"),
    cl::value_desc("N"), cl::Hidden, cl::sub(tool::compileCommand()));
static cl::opt<bool> fuseAttention(
    "fuse-attention",
    cl::desc("Compute attention without its score matrix (default true; "
             "false keeps the exported ops, for comparisons)"),
    cl::init(true), cl::Hidden, cl::sub(tool::compileCommand()));
static cl::opt<bool> outlineRepeats(
    "outline-repeats",
    cl::desc("Compile each run of repeated op sequences (a model's layers: "
             "forward, backward, updates) once, as a function called per "
             "copy (default true; false compiles every copy, for "
             "comparisons)"),
    cl::init(true), cl::Hidden, cl::sub(tool::compileCommand()));
static cl::opt<int64_t> compileRank(
    "rank",
    cl::desc("Generate code only for what rank R of the plan runs (its "
             "pipeline stage's step): one rank's bundle of a large plan, "
             "compiled in the time of one stage. Bundles of ranks of "
             "different stages run together under one mpirun (MPMD: -np A "
             "a.dx/a : -np B b.dx/b)"),
    cl::value_desc("R"), cl::sub(tool::compileCommand()));
static cl::opt<bool> sharedLibrary(
    "shared-library",
    cl::desc("Also write the program as <model>.so (single-rank CPU "
             "bundles), which a host process (the Python package) loads to "
             "run it in process"),
    cl::sub(tool::compileCommand()));
static cl::opt<unsigned> codegenThreads(
    "codegen-threads",
    cl::desc("Threads for machine code generation: a large program's "
             "functions are compiled in parts on N threads (default 0: one "
             "per hardware thread; 1: one part)"),
    cl::value_desc("N"), cl::init(0), cl::sub(tool::compileCommand()));
static cl::opt<unsigned> codegenSplitMin(
    "codegen-split-min",
    cl::desc("Programs of fewer LLVM instructions are compiled in one part "
             "(default 20000)"),
    cl::value_desc("N"), cl::init(20000), cl::Hidden,
    cl::sub(tool::compileCommand()));
static cl::opt<std::string> emulateThreads(
    "emulate-threads",
    cl::desc("With --target cuda-emu: the order a block's threads run in "
             "between barriers, reverse (default: shows threads reading what "
             "thread 0 writes without a barrier) or forward (shows thread 0 "
             "reading what the others write); the executable's "
             "DISTOPT_EMULATE_THREADS=forward|reverse overrides it, so one "
             "bundle checks both"),
    cl::value_desc("reverse|forward"), cl::init("reverse"),
    cl::sub(tool::compileCommand()));
static cl::list<std::string> cudaArchs(
    "cuda-arch",
    cl::desc("GPU architectures to assemble kernels for (default "
             "sm_80,sm_90); the PTX of the lowest is embedded too"),
    cl::value_desc("sm_XX,..."), cl::CommaSeparated,
    cl::sub(tool::compileCommand()));
static cl::opt<std::string> cudaToolkit(
    "cuda-toolkit",
    cl::desc("The CUDA toolkit (bin/ptxas, bin/fatbinary, nvvm/libdevice); "
             "default: the one distopt was built with"),
    cl::value_desc("DIR"), cl::sub(tool::compileCommand()));

static cl::opt<std::string> runtimeLink(
    "runtime-link",
    cl::desc("How the executable gets distopt's runtime: static (default: "
             "the bundle runs anywhere its system libraries are) or shared "
             "(it loads libdistopt_runtime[_cuda]_shared.so from distopt's "
             "library directory or LD_LIBRARY_PATH: many bundles share one "
             "copy)"),
    cl::value_desc("static|shared"), cl::init("static"),
    cl::sub(tool::compileCommand()));

static cl::opt<bool> compileGradients(
    "gradients",
    cl::desc("Also compute the gradients of the model's first output (a "
             "scalar loss, e.g. an exported SoftmaxCrossEntropyLoss) with "
             "respect to its weights: extra outputs 'grad:<weight>' "
             "(distopt-autodiff; one process)"),
    cl::sub(tool::compileCommand()));
static cl::opt<std::string> compileLoss(
    "loss",
    cl::desc("Compile the model's training loss instead of its outputs: "
             "cross-entropy, nll, mse or output, of the model output OUTPUT "
             "(name or position, default the first); labels are a new input "
             "(--labels)"),
    cl::value_desc("KIND[:OUTPUT]"), cl::sub(tool::compileCommand()));
static cl::opt<std::string> compileLabels(
    "labels", cl::desc("Name of the labels input --loss adds (default labels)"),
    cl::value_desc("NAME"), cl::init("labels"), cl::sub(tool::compileCommand()));
static cl::opt<std::string> compileOptimizer(
    "optimizer",
    cl::desc("Compile one training step: the loss's gradients (as "
             "--gradients) applied by sgd, momentum (the same: SGD whose "
             "momentum is the run-time --momentum), adam or adamw; state and "
             "hyperparameters are inputs, the updates outputs"),
    cl::value_desc("sgd|momentum|adam|adamw"), cl::sub(tool::compileCommand()));
static cl::opt<bool> compileNesterov(
    "nesterov", cl::desc("With --optimizer sgd: Nesterov momentum"),
    cl::sub(tool::compileCommand()));
static cl::opt<bool> compileTrain(
    "train",
    cl::desc("Compile a training step (what --loss with --optimizer compile; "
             "this flag only says so)"),
    cl::sub(tool::compileCommand()));
static cl::opt<int64_t> accumulateSteps(
    "accumulate",
    cl::desc("With --optimizer: one step sums the gradients of K "
             "micro-batches of the model's batch (K times the samples per "
             "update, one micro-batch's activations in memory; data-parallel "
             "gradients communicated once per step)"),
    cl::value_desc("K"), cl::init(1), cl::sub(tool::compileCommand()));
static cl::opt<std::string> freezeWeights(
    "freeze-weights",
    cl::desc("With --gradients: weights whose name matches this regular "
             "expression get no gradient"),
    cl::value_desc("REGEX"), cl::sub(tool::compileCommand()));

int tool::runCompile(MLIRContext &context, StringRef input, StringRef output,
                     StringRef emit, StringRef cpuName, bool printGeneric) {
  driver::CompileOptions options;
  options.input = input.str();
  options.output = output.str();
  options.printGeneric = printGeneric;
  options.cpu = cpuName.str();
  std::string error;
  if ((!emit.empty() &&
       !parseNamed("emit", driver::kEmits, emit, options.emit, error)) ||
      !parseNamed("runtime-link", driver::kRuntimeLinks, runtimeLink,
                  options.runtimeLink, error) ||
      !parseNamed("target", driver::kTargets, compileTarget, options.target,
                  error))
    return fail("compile", error);
  // Only the emulation reads --emulate-threads; other targets accept any.
  if (emulateThreads.getNumOccurrences() &&
      !parseNamed("emulate-threads", driver::kEmulatedThreads,
                  options.target == driver::Target::CUDAEmulation
                      ? StringRef(emulateThreads)
                      : StringRef("reverse"),
                  options.emulateThreads, error))
    return fail("compile", error);
  options.cudaToolkit = cudaToolkit;
  options.cudaArchs.assign(cudaArchs.begin(), cudaArchs.end());
  setIfGiven(outlineOps, options.outlineOps);
  options.codegenThreads = codegenThreads;
  options.fuseAttention = fuseAttention;
  options.outlineRepeats = outlineRepeats;
  options.sharedLibrary = sharedLibrary;
  options.codegenSplitMin = codegenSplitMin;

  options.gradients = compileGradients;
  options.loss = compileLoss;
  setIfGiven(compileLabels, options.labels);
  if (!compileOptimizer.empty()) {
    options.optimizer = planner::parseOptimizer(compileOptimizer);
    if (!options.optimizer) {
      error = planner::unknownOptimizer(compileOptimizer);
      return fail("compile", error);
    }
  }
  options.nesterov = compileNesterov;
  options.train = compileTrain;
  setIfGiven(accumulateSteps, options.accumulate);
  setIfGiven(freezeWeights, options.freezeWeights);
  setIfGiven(compileRank, options.rank);

  if (!distributionFromFlags(options.distribution, error) ||
      !precisionFromFlags(options.precision, error))
    return fail("compile", error);
  // Planned IR (.mlir) carries its imports; ONNX models read the flags.
  if (!input.ends_with(".mlir") && !importOptionsFromFlags(options.import))
    return 1;
  return failed(driver::compile(context, options, llvm::outs())) ? 1 : 0;
}
