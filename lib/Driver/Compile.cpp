//===- Compile.cpp - `distopt compile` as a library function -------------===//
//
// Imports the model, plans and partitions it, builds the training step,
// lowers it for the target, and writes the bundle:
//
//   model.dx/model          executable (generated object + runtime)
//   model.dx/manifest.json  inputs, outputs, weights (name, dtype, shape, file)
//   model.dx/weights.bin    weights embedded in the ONNX file, 64-byte aligned
//
// External-data weights are not copied: the manifest points at the model's
// external-data file (absolute path), which the runtime maps.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Codegen/InPlaceUpdates.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"
#include "distopt/Distributed/Passes.h"
#include "distopt/Planner/CostModel.h"
#include "distopt/Planner/PlanGraph.h"
#include "distopt/Planner/PlanToIR.h"
#include "distopt/Runtime/Half.h"
#include "distopt/Runtime/Manifest.h"
#include "distopt/Runtime/ServerPlacement.h"
#include "distopt/Target/CPU/CPUTarget.h"
#include "distopt/Target/CUDA/CUDATarget.h"
#include "distopt/Training/Passes.h"
#include "distopt/Training/ServerUpdate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <fstream>
#include <map>

using namespace mlir;
using namespace distopt;
using namespace distopt::driver;
using llvm::WithColor;

namespace {

std::string dtypeName(Type t) {
  if (t.isF32())
    return "float32";
  if (t.isF64())
    return "float64";
  if (t.isF16())
    return "float16";
  if (t.isBF16())
    return "bfloat16";
  if (t.isInteger(1))
    return "bool";
  if (t.isUnsignedInteger())
    return "uint" + std::to_string(t.getIntOrFloatBitWidth());
  if (auto it = dyn_cast<IntegerType>(t))
    return "int" + std::to_string(it.getWidth());
  return "unknown";
}

int64_t elementBytes(Type t) {
  return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8;
}

/// `size` bytes of `path` from `offset` into `out`.
bool readFileRange(const std::string &path, int64_t offset, int64_t size,
                   std::vector<char> &out, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  out.assign(size, 0);
  if (in && in.seekg(offset) && in.read(out.data(), size))
    return true;
  error = "cannot read " + std::to_string(size) + " bytes at offset " +
          std::to_string(offset) + " of " + path;
  return false;
}

/// fp32 data (`bytes`, little-endian) rounded to nearest-even into the
/// 16-bit type `to` (f16 or bf16).
std::vector<char> roundFloats(const std::vector<char> &bytes, Type to) {
  size_t n = bytes.size() / 4;
  std::vector<char> out(2 * n);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    uint16_t h = to.isBF16() ? runtime::floatToBF16(f) : runtime::floatToF16(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

/// A buffer of a pipeline stage that is a model input or output.
runtime::StageBuffer modelBuffer(runtime::StageBuffer::Kind kind,
                                 int64_t index) {
  runtime::StageBuffer b;
  b.kind = kind;
  b.index = index;
  return b;
}

/// The range an integer input's values must lie in where the program reads
/// them as indices: the dopt.check_indices its values reach unchanged
/// (through reshapes, transposes, slices, broadcasts, widening casts and the
/// collectives that move blocks), intersected; nothing when none does, or
/// one allows an ignore index. `use` says what the first one indexes.
std::optional<std::pair<int64_t, int64_t>> indexRangeOf(Value input,
                                                        std::string &use) {
  std::optional<std::pair<int64_t, int64_t>> range;
  SmallVector<Value> work = {input};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (Operation *user : v.getUsers()) {
      if (auto check = dyn_cast<dopt::CheckIndicesOp>(user)) {
        if (check.getIgnoreAttr())
          return std::nullopt;
        int64_t extent = check.getExtent();
        std::pair<int64_t, int64_t> r = {check.getNegative() ? -extent : 0,
                                         extent - 1};
        if (!range)
          use = check.getWhat().str();
        range = range ? std::make_pair(std::max(range->first, r.first),
                                       std::min(range->second, r.second))
                      : r;
        continue;
      }
      if (auto widen = dyn_cast<dopt::CastOp>(user)) {
        auto from = dyn_cast<IntegerType>(
            cast<RankedTensorType>(v.getType()).getElementType());
        auto to = dyn_cast<IntegerType>(widen.getTo());
        if (!from || !to || from.getWidth() > to.getWidth() ||
            from.isUnsigned() != to.isUnsigned())
          continue;
      } else if (!isa<dopt::ReshapeOp, dopt::TransposeOp, dopt::SliceOp,
                      dopt::ExpandOp, dopt::SplitOp, shard::AllSliceOp,
                      shard::AllGatherOp>(user)) {
        continue;
      }
      for (Value r : user->getResults())
        work.push_back(r);
    }
  }
  return range;
}

/// Where bundles find libdistopt_runtime*.a: $DISTOPT_RUNTIME_LIB_DIR, else
/// <bindir>/../lib where it holds them (an installed distopt), else the
/// build tree this driver was built in.
std::string runtimeLibDir() {
  if (std::optional<std::string> env =
          llvm::sys::Process::GetEnv("DISTOPT_RUNTIME_LIB_DIR"))
    return *env;
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  SmallString<256> dir(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(dir, "..", "lib");
  llvm::sys::path::remove_dots(dir, /*remove_dot_dot=*/true);
  SmallString<256> archive(dir);
  llvm::sys::path::append(archive, "libdistopt_runtime.a");
#ifdef DISTOPT_RUNTIME_LIB_DIR
  if (!llvm::sys::fs::exists(archive))
    return DISTOPT_RUNTIME_LIB_DIR;
#endif
  return std::string(dir);
}

template <typename Fn> LogicalResult printTo(StringRef output, Fn print) {
  std::string error;
  auto out = openOutputFile(output.empty() ? "-" : output, &error);
  if (!out) {
    WithColor::error() << error << "\n";
    return failure();
  }
  print(out->os());
  out->keep();
  return success();
}

} // namespace

namespace {

/// A weight in the bundle (by name; stages share the same entries).
struct WeightEntry {
  runtime::WeightSpec spec;
  RankedTensorType fileType; ///< the whole weight (what files hold)
  bool embedded = false;
  int64_t offset = 0;
  /// A weight stored in 16 bits whose data are fp32 (distopt-autocast's
  /// store-weights): the data's type, and where they are when external
  /// (path, offset); weights.bin gets them rounded.
  Type dataElement;
  std::string dataFile;
  int64_t dataOffset = 0;
};

/// How a stage program's buffers map onto the bundle: inputs and outputs
/// as manifest entries, weights by name.
struct StageBuffers {
  std::vector<runtime::StageBuffer> inputs, outputs;
  std::vector<std::string> weights;
};

/// The memory plan's bytes alive at the deepest point of `module`'s @main:
/// each function's arena (distopt-plan-buffers) plus the largest of its
/// callees' (a call allocates its callee's arena).
double arenaPeak(ModuleOp module) {
  llvm::DenseMap<Operation *, double> memo;
  std::function<double(func::FuncOp)> peak = [&](func::FuncOp f) -> double {
    if (!f || f.isExternal())
      return 0;
    auto [it, fresh] = memo.try_emplace(f, 0);
    if (!fresh)
      return it->second; // (also ends recursion)
    double below = 0;
    f.walk([&](func::CallOp call) {
      below = std::max(
          below, peak(module.lookupSymbol<func::FuncOp>(call.getCallee())));
    });
    double own = 0;
    if (auto a = f->getAttrOfType<IntegerAttr>("distopt.arena_bytes"))
      own = a.getInt();
    return memo[f] = own + below;
  };
  return peak(module.lookupSymbol<func::FuncOp>("dopt_main"));
}

/// The optimizer whose state the memory plan holds for a compiled step: the
/// compiled SGD keeps a momentum buffer whatever the run-time --momentum
/// (0: plain SGD), so it is planned as SGD with momentum.
planner::Optimizer statePlannedFor(std::optional<planner::Optimizer> opt) {
  if (!opt)
    return planner::Optimizer::Adam; // no step: the planner's default
  return *opt == planner::Optimizer::SGD ? planner::Optimizer::Momentum : *opt;
}

/// The distopt-optimizer pass's kind for `opt` (momentum is its sgd).
std::string compiledOptimizer(planner::Optimizer opt) {
  switch (opt) {
  case planner::Optimizer::SGD:
  case planner::Optimizer::Momentum:
    return "sgd";
  case planner::Optimizer::Adam:
    return "adam";
  case planner::Optimizer::AdamW:
    return "adamw";
  }
  return "sgd";
}

} // namespace

void driver::registerCompileDialects(DialectRegistry &registry) {
  registerDialects(registry);
  cpu::registerCPUTargetDialects(registry);
}

LogicalResult driver::compile(MLIRContext &context,
                              const CompileOptions &options,
                              llvm::raw_ostream &log) {
  StringRef input = options.input, output = options.output;
  bool toCUDA = options.target == Target::CUDA;
  bool emulateCUDA = options.target == Target::CUDAEmulation;
  Emit emit = options.emit;
  const DistributionOptions &distribution = options.distribution;
  bool optimizer = options.optimizer.has_value();
  int64_t accumulateSteps = options.accumulateSteps();
  std::string freezeWeights = options.freezeWeights.value_or("");
  std::string labels = options.labels.value_or("labels");
  cuda::CUDAOptions cudaOptions;
  if (toCUDA) {
    cudaOptions.toolkit = options.cudaToolkit.empty() ? cuda::defaultToolkit()
                                                      : options.cudaToolkit;
    if (!options.cudaArchs.empty())
      cudaOptions.archs = options.cudaArchs;
    std::string problem = cuda::checkOptions(cudaOptions);
    if (problem.empty() && emit == Emit::Bundle && !cuda::runtimeAvailable())
      problem = "this distopt was built without its CUDA runtime (no CUDA "
                "toolkit at build time): it can print --emit=gpu|ptx but not "
                "link a CUDA bundle";
    if (!problem.empty()) {
      WithColor::error() << problem << "\n";
      return failure();
    }
  } else if (!options.cudaToolkit.empty() || !options.cudaArchs.empty()) {
    WithColor::error() << "--cuda-arch and --cuda-toolkit apply to "
                          "--target cuda\n";
    return failure();
  }
  if (options.nesterov && options.optimizer != planner::Optimizer::SGD &&
      options.optimizer != planner::Optimizer::Momentum) {
    WithColor::error() << "--nesterov applies to --optimizer sgd\n";
    return failure();
  }
  if (!options.gradients && !optimizer && options.freezeWeights) {
    WithColor::error() << "--freeze-weights applies to --gradients\n";
    return failure();
  }
  {
    if (llvm::Error e = checkGradientSync(distribution)) {
      WithColor::error() << toString(std::move(e)) << "\n";
      return failure();
    }
    if (distribution.zero == 1 && !optimizer) {
      WithColor::error() << "--zero 1 shards the optimizer state: it applies "
                            "to --optimizer\n";
      return failure();
    }
    if (distribution.gradientSyncGiven() && !options.gradients && !optimizer) {
      WithColor::error() << "--bucket-mb, --grad-dtype and --zero apply to "
                            "--gradients and --optimizer\n";
      return failure();
    }
  }
  if (options.train && (!optimizer || options.loss.empty())) {
    WithColor::error() << "--train compiles a training step: it needs --loss "
                          "KIND[:OUTPUT] and --optimizer "
                       << namesOf(planner::kOptimizers, "|", "|") << "\n";
    return failure();
  }
  if (options.accumulate &&
      (accumulateSteps < 1 || !optimizer || options.loss.empty())) {
    WithColor::error() << (accumulateSteps < 1
                               ? "--accumulate must be at least 1"
                               : "--accumulate applies to a training step "
                                 "(--loss and --optimizer)")
                       << "\n";
    return failure();
  }
  if (distribution.microbatchStatistics && accumulateSteps <= 1 &&
      !distribution.clusterGiven()) {
    WithColor::error() << "--microbatch-statistics applies to --accumulate "
                          "with K of 2 or more, or to --microbatches\n";
    return failure();
  }
  if (options.labels && options.loss.empty()) {
    WithColor::error() << "--labels applies to --loss\n";
    return failure();
  }
  if (options.outlineOps && *options.outlineOps < 0) {
    WithColor::error() << "--outline-ops must be at least 0, got "
                       << *options.outlineOps << "\n";
    return failure();
  }
  // 16-bit mixed precision (distopt-autocast) and what it applies to.
  planner::DType precision = options.precision.value_or(planner::DType::FP32);
  bool mixed = precision == planner::DType::BF16 ||
               precision == planner::DType::FP16;
  if (mixed && input.ends_with(".mlir")) {
    WithColor::error() << "--precision applies to ONNX models: a planned "
                          "IR was planned in its own precision\n";
    return failure();
  }
  // fp16 trains with dynamic loss scaling (PyTorch's GradScaler), which
  // the training step applies: gradients alone would underflow.
  bool lossScaling =
      precision == planner::DType::FP16 && options.trainingStep();
  if (precision == planner::DType::FP16 && options.gradients &&
      !options.trainingStep()) {
    WithColor::error()
        << "--precision fp16 trains with dynamic loss scaling, which a "
           "training step applies (--loss and --optimizer): fp16 gradients "
           "alone (--gradients) would underflow; use --precision bf16\n";
    return failure();
  }
  if (options.emulateThreads && !emulateCUDA) {
    WithColor::error() << "--emulate-threads applies to --target cuda-emu\n";
    return failure();
  }
  bool gpuEmit = emit == Emit::GPU || emit == Emit::PTX;
  if (gpuEmit && !toCUDA && !(emulateCUDA && emit == Emit::GPU)) {
    WithColor::error() << "--emit=" << (emit == Emit::GPU ? "gpu" : "ptx")
                       << " needs --target cuda"
                       << (emit == Emit::GPU ? " or cuda-emu" : "") << "\n";
    return failure();
  }
  // The input: an ONNX model, or a planned dopt IR (`distopt plan
  // --emit=ir`, possibly edited by hand), whose weights come from the ONNX
  // model it names in `dopt.source`.
  std::string modelPath = input.str();
  std::optional<std::string> inputPrecision; // a planned IR's dopt.precision
  OwningOpRef<ModuleOp> module, evalModule, serverModule;
  // Parameter servers (--sync ps|async): the step is split into the
  // workers' program (its loss and gradients) and the servers' update.
  Partitioned servers;
  // A training step on a pipelined plan: one step program per stage.
  bool pipelinedStep = false;
  std::vector<int64_t> grid;
  if (input.ends_with(".mlir")) {
    if (distribution.clusterGiven()) {
      WithColor::error() << "a planned IR carries its plan: --cluster and "
                            "the degrees apply to ONNX models\n";
      return failure();
    }
    context.loadDialect<shard::ShardDialect>();
    module = parseSourceFile<ModuleOp>(input, &context);
    if (!module)
      return failure();
    auto source = (*module)->getAttrOfType<StringAttr>("dopt.source");
    if (!source) {
      WithColor::error() << input
                         << ": no dopt.source attribute naming the ONNX "
                            "model (its weights)\n";
      return failure();
    }
    modelPath = source.getValue().str();
    if (auto p = (*module)->getAttrOfType<StringAttr>("dopt.precision")) {
      if (!planner::parseDType(p.getValue())) {
        WithColor::error() << input << ": dopt.precision must be fp32, tf32, "
                           << "bf16 or fp16, got '" << p.getValue() << "'\n";
        return failure();
      }
      inputPrecision = p.getValue().str();
    }
    // The planner's reading of where the batch lies (annotateBatchDims) is
    // made on the ONNX model, before the plan's annotations.
    if (optimizer)
      if (auto main = module->lookupSymbol<func::FuncOp>("main"))
        for (unsigned i = 0; i < main.getNumArguments(); ++i)
          if (planner::argumentBatchDim(main, i) > 0) {
            WithColor::error()
                << input << ": input " << i << " carries its batch in "
                << "dimension " << planner::argumentBatchDim(main, i)
                << "; a training step of such a model compiles from the "
                   "ONNX model, not from a planned IR, yet\n";
            return failure();
          }
    if (auto g = module->lookupSymbol<shard::GridOp>("dopt_grid")) {
      PassManager pm(&context);
      pm.addPass(createPartitionPass());
      if (failed(pm.run(*module)))
        return failure();
      grid.assign(g.getShape().begin(), g.getShape().end());
    }
  } else {
    module = importONNXFile(context, input, options.import);
    // The attention chains are one op each before planning, so the plan
    // prices and splits what the program computes, and autodiff
    // differentiates the fused op (recomputing its probabilities).
    if (!module || failed(prepareImported(
                       *module, options.fuseAttention, options.precision,
                       /*storeWeights=*/!options.training())))
      return failure();
    // A training step's `train` reads samples along the batch dimension of
    // each data input (the manifest's batch_dim); --accumulate cuts the
    // batch into micro-batches there, each of which must compute what its
    // samples would in the whole batch.
    if (optimizer) {
      std::string error;
      if (!annotateBatchDims(*module, error)) {
        WithColor::error() << "cannot compile a training step: " << error
                           << "\n";
        return failure();
      }
      // A model without a symbolic batch: `train` takes dimension 0 of its
      // inputs for the samples. Where an op mixes along that dimension (the
      // attention of a sequence-first model exported with fixed shapes
      // does), the samples are probably elsewhere: say so.
      // (The graph is read once for both questions.)
      bool noSymbol = !(*module)->hasAttr("dopt.batch_symbol");
      std::optional<MicrobatchObstacle> obstacle =
          noSymbol || accumulateSteps > 1 ? microbatchObstacle(*module)
                                          : std::nullopt;
      if (noSymbol && obstacle &&
          obstacle->kind == MicrobatchObstacle::Mixes)
        WithColor::warning()
            << "the model has no symbolic batch dimension, so a training "
            << "step takes dimension 0 of its inputs for the samples, but "
            << obstacle->why << ": if its samples lie along another dimension "
            << "(a sequence-first model: [seq, batch, ...]), export it "
            << "with that dimension symbolic (torch.onnx.export's "
            << "dynamic_axes) and compile with --dim\n";
      if (obstacle && accumulateSteps > 1) {
        std::string k = std::to_string(accumulateSteps);
        if (obstacle->kind == MicrobatchObstacle::Mixes) {
          WithColor::error()
              << "--accumulate " << k << " cuts the batch into "
              << "micro-batches, but " << obstacle->why
              << ", so the samples of a batch cannot be split\n";
          return failure();
        } else if (!distribution.microbatchStatistics) {
          WithColor::error()
              << "--accumulate " << k << " cuts the batch into micro-batches, "
              << "but " << obstacle->why << " (a statistic of a micro-batch "
              << "is not the batch's): add --microbatch-statistics to "
              << "normalise each micro-batch by its own statistics and update "
              << "the running ones once per micro-batch, as PyTorch's "
              << "gradient accumulation does, or compile without "
              << "--accumulate\n";
          return failure();
        }
      }
    }
    // --cluster: plan, then rewrite into the program of one rank.
    bool training = options.training();
    PartitionRequest request;
    request.training = training;
    request.loss = options.loss;
    request.optimizer = statePlannedFor(options.optimizer);
    request.precision = options.precision;
    FailureOr<Partitioned> partitioned =
        partitionForCluster(context, *module, distribution, request);
    if (failed(partitioned))
      return failure();
    servers = *partitioned;
    grid = partitioned->grid;
    if (!partitioned->summary.empty())
      log << "distopt compile: " << partitioned->summary << "\n";
    if (servers.servers > 0) {
      std::string problem;
      if (!optimizer || options.loss.empty())
        problem = "parameter servers apply gradients with an optimizer: "
                  "--sync " + planner::gradientSyncName(servers.sync).str() +
                  " needs --loss and --optimizer";
      else if (accumulateSteps > 1)
        problem = "--accumulate does not combine with parameter servers "
                  "(a worker pushes each batch's gradient)";
      else if (distribution.gradientSyncGiven())
        problem = "--bucket-mb, --grad-dtype and --zero shape the "
                  "all-reduce; parameter servers take whole fp32 gradients";
      else if (lossScaling)
        problem = "--precision fp16 scales the loss, and parameter servers "
                  "do not skip the steps it overflows yet: use --precision "
                  "bf16 with --sync " +
                  planner::gradientSyncName(servers.sync).str();
      if (!problem.empty()) {
        WithColor::error() << problem << "\n";
        return failure();
      }
    }
    pipelinedStep = training && grid.size() == 3 && grid[0] > 1;
    if (pipelinedStep) {
      std::string problem;
      if (!optimizer || options.loss.empty())
        problem = "a pipelined plan trains whole steps: --pp needs --loss "
                  "and --optimizer (not --gradients alone)";
      else if (accumulateSteps > 1)
        problem = "--accumulate does not combine with --pp: a pipelined "
                  "step already runs its batch as micro-batches "
                  "(--microbatches)";
      if (!problem.empty()) {
        WithColor::error() << problem << "\n";
        return failure();
      }
    }
    // The loss after partitioning: a data-parallel replica's loss sums
    // over its samples and all-reduces the sums (distopt-append-loss). A
    // pipelined step counts each micro-batch's labels (its weight in the
    // whole batch's loss), then outlines its stages.
    if (!options.loss.empty()) {
      auto [kind, out] = StringRef(options.loss).split(':');
      AppendLossPassOptions lo;
      lo.kind = kind.str();
      lo.output = out.empty() ? "0" : out.str();
      lo.labels = labels;
      lo.counted = accumulateSteps > 1 || pipelinedStep || servers.servers > 0;
      // A worker pushes the gradient of its own samples' loss.
      lo.local = servers.servers > 0;
      PassManager pm(&context);
      pm.addPass(createAppendLossPass(lo));
      if (pipelinedStep)
        pm.addPass(createOutlineStagesPass());
      if (failed(pm.run(*module)))
        return failure();
    }
    // A training step's bundle also holds its evaluation program: the
    // model with training-mode ops in their evaluation form (dropout off,
    // batch norm on running statistics), partitioned as the step is, and
    // its loss (with accuracy counts for class labels), for
    // `train --eval-data` and `eval`.
    // A pipelined step's is the whole model in one process (rank 0 gathers
    // the stages' weights, and their tensor-parallel blocks, to run it).
    if (options.trainingStep()) {
      ONNXImportOptions evalOptions = options.import;
      evalOptions.evalForm = true;
      evalModule = importONNXFile(context, input, evalOptions);
      // (fp32 master weights, shared with the step by name.)
      if (!evalModule ||
          failed(prepareImported(*evalModule, options.fuseAttention,
                                 options.precision, /*storeWeights=*/false)))
        return failure();
      // Pipelined and parameter-server steps evaluate the whole model on
      // rank 0: not compiled where its weights alone exceed a device.
      if ((pipelinedStep || servers.servers > 0) && servers.deviceMemory) {
        int64_t weightBytes = 0;
        evalModule->walk([&](dopt::WeightOp w) {
          auto t = cast<RankedTensorType>(w.getType());
          weightBytes += t.getNumElements() * elementBytes(t.getElementType());
        });
        int64_t capacity = servers.deviceMemory;
        if (weightBytes > capacity) {
          WithColor::warning()
              << "the evaluation program is not compiled: it runs the whole "
                 "model on rank 0, whose weights ("
              << llvm::format("%.1f", weightBytes / double(1 << 30))
              << " GiB) exceed one device ("
              << llvm::format("%.1f", capacity / double(1 << 30))
              << " GiB); this bundle has no `eval` and no `train "
                 "--eval-data`\n";
          evalModule = nullptr;
        }
      }
    }
    if (evalModule) {
      std::string error; // the step's annotation succeeded on this model
      if (!annotateBatchDims(*evalModule, error)) {
        WithColor::error() << "cannot compile the evaluation program: "
                           << error << "\n";
        return failure();
      }
      // Parameter servers: server 0 evaluates the whole batch in one
      // process (it gathers the shards), so the program is not split.
      if (!grid.empty() && servers.servers == 0 && !pipelinedStep) {
        PartitionRequest evalRequest;
        evalRequest.training = true;
        evalRequest.loss = options.loss;
        evalRequest.optimizer = statePlannedFor(options.optimizer);
        evalRequest.sameAs = &grid;
        evalRequest.precision = options.precision;
        if (failed(partitionForCluster(context, *evalModule, distribution,
                                       evalRequest)))
          return failure();
      }
      auto [kind, out] = StringRef(options.loss).split(':');
      AppendLossPassOptions lo;
      lo.kind = kind.str();
      lo.output = out.empty() ? "0" : out.str();
      lo.labels = labels;
      lo.accuracy = kind == "cross-entropy" || kind == "nll";
      PassManager pm(&context);
      pm.addPass(createAppendLossPass(lo));
      if (failed(pm.run(*evalModule)))
        return failure();
    }
  }
  // The servers' ranks come first, then the workers' grid.
  int64_t ranks = 1;
  for (int64_t g : grid)
    ranks *= g;
  ranks += servers.servers;
  OpPrintingFlags flags;
  if (options.printGeneric)
    flags.printGenericOpForm();
  if (emit == Emit::Graph)
    return printTo(output, [&](llvm::raw_ostream &os) {
             module->print(os, flags);
             os << "\n";
           });

  // The programs to compile: @main, or one per pipeline stage.
  auto pipeline = (*module)->getAttrOfType<DictionaryAttr>("dopt.pipeline");
  int64_t stages = pipeline ? pipeline.getAs<IntegerAttr>("stages").getInt() : 1;
  int64_t microbatches =
      pipeline ? pipeline.getAs<IntegerAttr>("microbatches").getInt() : 1;
  SmallVector<std::string> programNames;
  if (pipeline)
    for (int64_t k = 0; k < stages; ++k)
      programNames.push_back("dopt_stage_" + std::to_string(k));
  else
    programNames.push_back("main");
  if (evalModule)
    programNames.push_back("eval");
  if (servers.servers > 0)
    programNames.push_back("ps_update");
  // --rank R: code only for the programs rank R runs. A pipeline's ranks
  // are numbered row-major over (stages x data x tensor): R runs stage
  // R / (data x tensor), and the evaluation program where that stage holds
  // rank 0 (which runs it). Every other program is still built up to its
  // buffers, so the manifest describes every rank.
  std::optional<int64_t> rankStage;
  if (options.rank) {
    int64_t r = *options.rank;
    if (r < 0 || r >= ranks) {
      WithColor::error() << "--rank " << r << ": the plan has " << ranks
                         << " rank" << (ranks == 1 ? "" : "s") << " (0 to "
                         << ranks - 1 << ")\n";
      return failure();
    }
    if (servers.servers > 0) {
      WithColor::error()
          << "--rank: a parameter-server bundle holds the servers' and the "
             "workers' programs together; compile it without --rank\n";
      return failure();
    }
    if (pipeline)
      rankStage = r / (ranks / stages);
  }
  auto generatesCode = [&](StringRef name) {
    if (!rankStage)
      return true;
    if (name == "eval")
      return *rankStage == 0;
    return name == "dopt_stage_" + std::to_string(*rankStage);
  };
  // Parameter servers: the trained weights (the worker's gradients, in
  // their order), their placement on the servers, and the update
  // program's buffers.
  std::vector<std::string> trainedWeights;
  std::vector<int64_t> trainedSizes;
  ps::Placement placement;
  std::vector<runtime::TensorSpec> serverInputs, serverOutputs;

  SmallString<256> modelDir(modelPath);
  llvm::sys::path::remove_filename(modelDir);
  if (modelDir.empty())
    modelDir = ".";
  llvm::sys::fs::make_absolute(modelDir);

  // A partitioned program's tensors are blocks of whole tensors: the
  // manifest says how to cut them (split axes over the grid, whole shape).
  // The manifest's entries (runtime::Manifest, the runtime's own reading of
  // the format). A tensor of an element type the runtime does not hold
  // fails the bundle (`unsupported` names the first).
  std::string unsupported;
  auto tensorSpec = [&](StringRef name, RankedTensorType t) {
    runtime::TensorSpec spec;
    spec.name = name.str();
    if (!runtime::parseDType(dtypeName(t.getElementType()), spec.dtype) &&
        unsupported.empty()) {
      llvm::raw_string_ostream os(unsupported);
      os << "'" << name << "' of element type " << t.getElementType();
    }
    spec.shape.assign(t.getShape().begin(), t.getShape().end());
    return spec;
  };
  // A pipeline activation passed between stages: its id, dtype and shape.
  auto activationBuffer = [&](int64_t id, RankedTensorType t) {
    runtime::StageBuffer b;
    b.kind = runtime::StageBuffer::Kind::Activation;
    b.index = id;
    b.spec = tensorSpec("activation " + std::to_string(id), t);
    return b;
  };
  auto distribute = [&](runtime::TensorSpec &t, Attribute splitAxes,
                        Attribute globalType, Attribute blockParts) {
    auto axes = dyn_cast_or_null<ArrayAttr>(splitAxes);
    auto global = dyn_cast_or_null<TypeAttr>(globalType);
    if (!axes || !global)
      return;
    t.splitAxes.clear();
    for (Attribute a : axes) {
      std::vector<int64_t> list;
      for (Attribute x : cast<ArrayAttr>(a))
        list.push_back(cast<IntegerAttr>(x).getInt());
      t.splitAxes.push_back(std::move(list));
    }
    ArrayRef<int64_t> whole =
        cast<RankedTensorType>(global.getValue()).getShape();
    t.globalShape.assign(whole.begin(), whole.end());
    if (auto parts = dyn_cast_or_null<IntegerAttr>(blockParts))
      t.blockParts = parts.getInt();
  };
  // Model inputs/outputs of a pipeline run micro-batches: the manifest
  // holds the per-replica tensor (micro-batch x count along the batch dim).
  auto perReplica = [&](RankedTensorType t, Attribute batchDim) {
    auto b = dyn_cast_or_null<IntegerAttr>(batchDim);
    if (!pipeline || !b || pipelinedStep)
      return t;
    SmallVector<int64_t> shape(t.getShape());
    shape[b.getInt()] *= microbatches;
    return RankedTensorType::get(shape, t.getElementType());
  };

  std::map<int64_t, runtime::TensorSpec> modelInputs, modelOutputs;
  llvm::StringMap<int64_t> stepInputIndex, stepOutputIndex;
  // The evaluation program's own inputs and outputs (its weights are the
  // step's, by name).
  std::map<int64_t, runtime::TensorSpec> evalInputs, evalOutputs;
  StageBuffers evalBuffers;
  llvm::StringSet<> evalOutputNames;
  llvm::StringMap<WeightEntry> weightTable;
  std::vector<std::string> weightOrder;
  int64_t weightsBinSize = 0;
  std::vector<StageBuffers> stageBuffers;
  double stepFlops = 0;
  std::vector<std::unique_ptr<llvm::LLVMContext>> llvmContexts;
  std::vector<std::unique_ptr<llvm::Module>> llvmModules;
  std::string printed;
  llvm::raw_string_ostream printedOS(printed);
  cpu::CPUOptions cpuOptions;
  cpuOptions.cpu = options.cpu;
  cpuOptions.codegenThreads = options.codegenThreads;
  cpuOptions.codegenSplitMin = options.codegenSplitMin;
  llvm::StringSet<> outerOutputNames;

  // The memory one rank of each compiled training step holds (with a
  // plan): the runtime's buffers by role, and the memory plan's arenas (the
  // step's and, below it, the deepest chain of its calls').
  struct RankMemory {
    int64_t stage = 0;
    double weights = 0, optimizerState = 0, inputs = 0, outputs = 0,
           planned = 0;
  };
  std::vector<RankMemory> rankMemory;

  for (auto [k, programName] : llvm::enumerate(programNames)) {
    bool isEval = programName == "eval";
    bool isServer = programName == "ps_update";
    if (isServer) {
      placement = ps::placeOnServers(trainedSizes, servers.servers);
      serverModule = buildServerUpdate(
          context, std::max<int64_t>(1, placement.shardLength()),
          servers.servers,
          servers.sync == planner::GradientSync::ParameterServer);
    }
    // Each stage is compiled as a module of its own, its function as @main.
    OwningOpRef<ModuleOp> program =
        isServer ? std::move(serverModule)
        : isEval ? std::move(evalModule)
        : pipeline ? OwningOpRef<ModuleOp>(cast<ModuleOp>((*module)->clone()))
                   : std::move(module);
    if (pipeline && !isEval) {
      SmallVector<func::FuncOp> others;
      for (auto f : program->getOps<func::FuncOp>())
        if (f.getName() != programName)
          others.push_back(f);
      for (auto f : others)
        f.erase();
      program->lookupSymbol<func::FuncOp>(programName).setName("main");
    }
    {
      PassManager pm(&context);
      pm.addPass(createOutlineWeightsPass());
      bool worker = servers.servers > 0 && !isServer;
      if (isServer) {
        OptimizerPassOptions opt;
        opt.kind = compiledOptimizer(*options.optimizer);
        opt.nesterov = options.nesterov;
        pm.addPass(createOptimizerPass(opt));
      } else if (pipelinedStep && !isEval) {
        // The stage's forward becomes its step over the micro-batches, in
        // the plan's schedule, recomputing as the plan says.
        PipelineTrainingPassOptions pt;
        pt.stage = static_cast<int64_t>(k);
        pt.freezeWeights = freezeWeights;
        pt.lossScale = lossScaling;
        if (auto plan = (*program)->getAttrOfType<DictionaryAttr>("dopt.plan")) {
          if (auto s = plan.getAs<StringAttr>("schedule"))
            pt.schedule = s.getValue().str();
          if (auto r = plan.getAs<StringAttr>("recompute"))
            pt.recompute = r.getValue().str();
        }
        pm.addPass(createPipelineTrainingPass(pt));
      } else if (!isEval && (options.gradients || optimizer)) {
        AutodiffPassOptions ad;
        ad.freezeWeights = freezeWeights;
        ad.lossScale = lossScaling;
        pm.addPass(createAutodiffPass(ad));
      }
      if (!isEval && accumulateSteps > 1) {
        AccumulateGradientsPassOptions acc;
        acc.steps = accumulateSteps;
        // A loop's carried buffers are freed by checks of their ownership
        // that run on the host, where the CUDA target's buffers are device
        // memory: there, K calls (the micro-batch still compiled once).
        acc.loop = !toCUDA;
        pm.addPass(createAccumulateGradientsPass(acc));
      }
      if (!isEval && !isServer && !worker && (options.gradients || optimizer)) {
        SyncGradientsPassOptions sync;
        sync.bucketBytes = std::max<int64_t>(
            1, static_cast<int64_t>(distribution.bucketBytes()));
        // Gradients travel in the precision unless --grad-dtype says.
        planner::DType gradDtype = distribution.gradDtype.value_or(
            mixed ? precision : planner::DType::FP32);
        sync.gradDtype = gradDtype == planner::DType::FP16   ? "f16"
                         : gradDtype == planner::DType::BF16 ? "bf16"
                                                             : "f32";
        // The plan's ZeRO stage (forced by --zero, or the planner's).
        // Gradients alone (--gradients) are whole: no optimizer state to
        // shard.
        if (auto plan = (*program)->getAttrOfType<DictionaryAttr>("dopt.plan"))
          if (auto z = plan.getAs<IntegerAttr>("zero_stage"))
            if (optimizer)
              sync.zeroStage = static_cast<int>(z.getInt());
        pm.addPass(createSyncGradientsPass(sync));
      }
      if (!isEval && !isServer && !worker && optimizer) {
        OptimizerPassOptions opt;
        opt.kind = compiledOptimizer(*options.optimizer);
        opt.nesterov = options.nesterov;
        opt.lossScale = lossScaling;
        pm.addPass(createOptimizerPass(opt));
      }
      if (failed(pm.run(*program)))
        return failure();
      // The backward collectives are among those the plan priced.
      if (!isEval && !isServer)
        if (llvm::Error e = planner::checkBackwardCollectives(*program)) {
          WithColor::error() << toString(std::move(e)) << "\n";
          return failure();
        }
    }
    auto main = program->lookupSymbol<func::FuncOp>("main");
    // A training step writes its updated weights and optimizer state into
    // their own buffers (the manifest's in-place outputs; parameter servers
    // keep theirs apart).
    if (!isEval && !isServer && optimizer && servers.servers == 0)
      main->setAttr(kUpdateInPlaceAttr, UnitAttr::get(&context));
    llvm::DenseMap<unsigned, StringAttr> inPlaceOf; // result -> target
    for (InPlaceUpdate u : inPlaceUpdates(main))
      inPlaceOf[u.result] = u.target;
    // (The memory plan is read after lowering: for a bundle, on the CPU
    // and the GPU.)
    bool reportMemory = !isEval && !isServer && optimizer &&
                        emit == Emit::Bundle && !emulateCUDA &&
                        generatesCode(programName) &&
                        !servers.stageMemory.empty();
    if (reportMemory) {
      RankMemory mem;
      mem.stage = pipeline ? static_cast<int64_t>(k) : 0;
      auto bytes = [](Type t) {
        auto rt = cast<RankedTensorType>(t);
        return double(rt.getNumElements()) * elementBytes(rt.getElementType());
      };
      for (unsigned i = 0; i < main.getNumArguments(); ++i) {
        double b = bytes(main.getArgument(i).getType());
        if (main.getArgAttr(i, "dopt.weight"))
          mem.weights += b;
        else if (main.getArgAttr(i, "dopt.optimizer_state"))
          mem.optimizerState += b;
        else
          mem.inputs += b;
      }
      for (unsigned i = 0; i < main.getNumResults(); ++i)
        if (!inPlaceOf.count(i))
          mem.outputs += bytes(main.getResultTypes()[i]);
      rankMemory.push_back(mem);
    }
    if (isServer) {
      // Its buffers: inputs, then the shard (its weight), then outputs.
      for (unsigned i = 0; i < main.getNumArguments(); ++i) {
        auto type = cast<RankedTensorType>(main.getArgument(i).getType());
        if (main.getArgAttr(i, "dopt.weight"))
          continue;
        auto name = main.getArgAttrOfType<StringAttr>(i, "dopt.name");
        serverInputs.push_back(tensorSpec(name.getValue(), type));
      }
      for (unsigned i = 0; i < main.getNumResults(); ++i) {
        auto type = cast<RankedTensorType>(main.getResultTypes()[i]);
        auto name = main.getResultAttrOfType<StringAttr>(i, "dopt.name");
        serverOutputs.push_back(tensorSpec(name.getValue(), type));
      }
    } else if (servers.servers > 0 && !isEval) {
      // The worker's gradients name the trained weights.
      for (unsigned i = 0; i < main.getNumResults(); ++i)
        if (auto of = main.getResultAttrOfType<StringAttr>(i, "dopt.grad_of")) {
          auto type = cast<RankedTensorType>(main.getResultTypes()[i]);
          if (!type.getElementType().isF32()) {
            WithColor::error()
                << "parameter servers hold f32 weights; weight '"
                << of.getValue() << "' is " << type.getElementType() << "\n";
            return failure();
          }
          trainedWeights.push_back(of.getValue().str());
          trainedSizes.push_back(type.getNumElements());
        }
      for (unsigned i = 0; i < main.getNumResults(); ++i)
        if (auto n = main.getResultAttrOfType<StringAttr>(i, "dopt.name"))
          if (n.getValue().starts_with("update:")) {
            WithColor::error()
                << "parameter servers keep only gradient-trained weights; '"
                << n.getValue().drop_front(7)
                << "' is updated by the model itself (batch norm's running "
                   "statistics in training form): train it with --sync "
                   "allreduce\n";
            return failure();
          }
    }
    // The FLOPs one rank's training step performs (forward, backward,
    // update), by the cost model's count: the train loop reports the
    // achieved FLOP/s.
    if (!isEval && !isServer && optimizer)
      for (auto &[op, cost] : planner::estimateCosts(main))
        stepFlops += cost.flops / (pipelinedStep ? stages : 1);
    // The bundle's buffers (the server's are its own, above).
    if (!isServer) {
      StageBuffers buffers;
      unsigned nextInput = 0;
      for (unsigned i = 0; i < main.getNumArguments(); ++i) {
        auto type = cast<RankedTensorType>(main.getArgument(i).getType());
        if (auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight")) {
          std::string name = cast<StringAttr>(ref.get("name")).getValue().str();
          buffers.weights.push_back(name);
          if (weightTable.count(name))
            continue;
          WeightEntry w;
          static_cast<runtime::TensorSpec &>(w.spec) = tensorSpec(name, type);
          distribute(w.spec, ref.get("split_axes"), ref.get("global_type"),
                     ref.get("block_parts"));
          w.fileType = type;
          if (auto global = ref.getAs<TypeAttr>("global_type"))
            w.fileType = cast<RankedTensorType>(global.getValue());
          int64_t bytes = w.fileType.getNumElements() *
                          elementBytes(w.fileType.getElementType());
          if (auto dataType = ref.getAs<TypeAttr>("data_type"))
            w.dataElement = dataType.getValue();
          auto loc = ref.getAs<StringAttr>("location");
          if (loc) {
            SmallString<256> path(modelDir);
            llvm::sys::path::append(path, loc.getValue());
            llvm::sys::path::remove_dots(path, /*remove_dot_dot=*/true);
            w.spec.file = std::string(path);
            w.spec.offset = ref.getAs<IntegerAttr>("offset").getInt();
            w.spec.length = ref.getAs<IntegerAttr>("length").getInt();
            w.dataFile = w.spec.file;
            w.dataOffset = w.spec.offset;
          }
          if (!loc || w.dataElement) {
            weightsBinSize = llvm::alignTo(weightsBinSize, 64);
            w.embedded = true;
            w.offset = weightsBinSize;
            w.spec.file = "weights.bin";
            w.spec.offset = weightsBinSize;
            w.spec.length = bytes;
            weightsBinSize += bytes;
          }
          weightTable[name] = std::move(w);
          weightOrder.push_back(name);
          continue;
        }
        if (auto act = main.getArgAttrOfType<IntegerAttr>(i, "dopt.activation")) {
          buffers.inputs.push_back(activationBuffer(act.getInt(), type));
          continue;
        }
        int64_t index = nextInput++;
        if (auto mi = main.getArgAttrOfType<IntegerAttr>(i, "dopt.model_input"))
          index = mi.getInt();
        // A pipelined step's stages take different inputs (their weights'
        // optimizer state): the manifest lists them all, by name.
        if (pipelinedStep && !isEval)
          index = stepInputIndex
                      .try_emplace(main.getArgAttrOfType<StringAttr>(i, "dopt.name")
                                       .getValue(),
                                   stepInputIndex.size())
                      .first->second;
        buffers.inputs.push_back(
            modelBuffer(runtime::StageBuffer::Kind::ModelInput, index));
        auto &inputSpecs = isEval ? evalInputs : modelInputs;
        if (inputSpecs.count(index))
          continue;
        auto name = main.getArgAttrOfType<StringAttr>(i, "dopt.name");
        runtime::TensorSpec in = tensorSpec(
            name ? name.getValue() : "",
            perReplica(type, main.getArgAttr(i, "dopt.batch_dim")));
        distribute(in, main.getArgAttr(i, "dopt.split_axes"),
                   main.getArgAttr(i, "dopt.global_type"), nullptr);
        // Where the samples are: a pipeline's micro-batches slice there, a
        // training step's loader places the samples it reads there.
        if (pipeline || optimizer)
          if (auto b = main.getArgAttrOfType<IntegerAttr>(i, "dopt.batch_dim"))
            in.batchDim = b.getInt();
        if (auto c = main.getArgAttrOfType<IntegerAttr>(i, "dopt.classes"))
          in.classes = c.getInt();
        if (auto r = indexRangeOf(main.getArgument(i), in.indexUse)) {
          in.indexLow = r->first;
          in.indexHigh = r->second;
        }
        inputSpecs[index] = std::move(in);
      }
      unsigned nextOutput = 0;
      for (unsigned i = 0; i < main.getNumResults(); ++i) {
        auto type = cast<RankedTensorType>(main.getResultTypes()[i]);
        if (auto act = main.getResultAttrOfType<IntegerAttr>(i, "dopt.activation")) {
          buffers.outputs.push_back(activationBuffer(act.getInt(), type));
          continue;
        }
        int64_t index = nextOutput++;
        if (auto mo = main.getResultAttrOfType<IntegerAttr>(i, "dopt.model_output"))
          index = mo.getInt();
        // Written into the buffer of what it updates: no buffer of its own.
        std::string inPlace;
        if (auto t = inPlaceOf.find(i); t != inPlaceOf.end())
          inPlace = t->second.str();
        if (pipelinedStep && !isEval) {
          auto n = main.getResultAttrOfType<StringAttr>(i, "dopt.name");
          auto [it, fresh] =
              stepOutputIndex.try_emplace(n.getValue(), stepOutputIndex.size());
          index = it->second;
          if (inPlace.empty())
            buffers.outputs.push_back(
                modelBuffer(runtime::StageBuffer::Kind::ModelOutput, index));
          if (!fresh)
            continue; // loss and grad_norm: every stage's
          runtime::TensorSpec out = tensorSpec(n.getValue(), type);
          distribute(out, main.getResultAttr(i, "dopt.split_axes"),
                     main.getResultAttr(i, "dopt.global_type"), nullptr);
          out.inPlace = inPlace;
          modelOutputs[index] = std::move(out);
          continue;
        }
        if (inPlace.empty())
          buffers.outputs.push_back(
              modelBuffer(runtime::StageBuffer::Kind::ModelOutput, index));
        auto attr = main.getResultAttrOfType<StringAttr>(i, "dopt.name");
        std::string name =
            attr ? attr.getValue().str() : "output" + std::to_string(index);
        // A graph may list one output twice; the bundle's outputs need
        // distinct names (and files).
        llvm::StringSet<> &outputNames =
            isEval ? evalOutputNames : outerOutputNames;
        if (!outputNames.insert(name).second) {
          std::string unique = name + "_" + std::to_string(index);
          WithColor::warning() << "graph output '" << name
                               << "' is listed more than once; output " << index
                               << " is written as '" << unique << "'\n";
          name = unique;
          outputNames.insert(name);
        }
        runtime::TensorSpec out = tensorSpec(
            name, perReplica(type, main.getResultAttr(i, "dopt.batch_dim")));
        distribute(out, main.getResultAttr(i, "dopt.split_axes"),
                   main.getResultAttr(i, "dopt.global_type"), nullptr);
        if (pipeline)
          if (auto b = main.getResultAttrOfType<IntegerAttr>(i, "dopt.batch_dim"))
            out.batchDim = b.getInt();
        out.inPlace = inPlace;
        (isEval ? evalOutputs : modelOutputs)[index] = std::move(out);
      }
      if (isEval)
        evalBuffers = std::move(buffers);
      else
        stageBuffers.push_back(std::move(buffers));
    }

    if (!generatesCode(programName))
      continue; // another rank's program (--rank)
    // Convolutions: cuDNN on the GPU (the CPU runtime's twin under
    // cuda-emu); im2col + GEMM on CPUs and where cuDNN is absent.
    if (failed(cpu::lowerToLinalg(
            *program, emulateCUDA || (toCUDA && cuda::cudnnConvolutions()),
            options.fuseAttention, options.outlineRepeats)))
      return failure();
    if (emit == Emit::Linalg) {
      program->print(printedOS, flags);
      printedOS << "\n";
      continue;
    }
    if (toCUDA) {
      SmallVector<MemRefType> argTypes;
      std::vector<int8_t> kinds;
      if (failed(cuda::lowerToGPU(*program, argTypes, kinds)))
        return failure();
      if (reportMemory)
        rankMemory.back().planned = arenaPeak(*program);
      if (emit == Emit::GPU) {
        program->print(printedOS, flags);
        printedOS << "\n";
        continue;
      }
      std::string ptx;
      if (failed(cuda::compileKernels(*program, cudaOptions, &ptx)))
        return failure();
      if (emit == Emit::PTX) {
        printedOS << ptx;
        continue;
      }
      if (failed(cuda::lowerHostToLLVM(*program, argTypes, kinds)))
        return failure();
    } else if (emulateCUDA) {
      if (failed(cuda::lowerForEmulation(
              *program, emit == Emit::GPU,
              options.emulateThreads == EmulatedThreads::Forward,
              options.outlineOps)))
        return failure();
      if (emit == Emit::GPU) {
        program->print(printedOS, flags);
        printedOS << "\n";
        continue;
      }
    } else {
      SmallVector<MemRefType> argTypes;
      if (failed(cpu::lowerToLoops(*program, argTypes)))
        return failure();
      if (reportMemory)
        rankMemory.back().planned = arenaPeak(*program);
      if (failed(cpu::lowerLoopsToLLVMDialect(*program, argTypes,
                                              options.outlineOps)))
        return failure();
    }
    if (pipeline || isEval || isServer) {
      // Stage k's symbols: dopt_main_k, dopt_entry_k; the evaluation
      // program's dopt_eval_main, dopt_eval_entry, the parameter server's
      // dopt_ps_main, dopt_ps_entry (one executable).
      for (StringRef base : {"dopt_main", "dopt_entry"}) {
        std::string renamed =
            isEval     ? ("dopt_eval_" + base.drop_front(5)).str()
            : isServer ? ("dopt_ps_" + base.drop_front(5)).str()
                       : (base + "_" + Twine(k)).str();
        if (failed(SymbolTable::replaceAllSymbolUses(
                StringAttr::get(&context, base),
                StringAttr::get(&context, renamed), *program)))
          return failure();
        if (Operation *sym = SymbolTable::lookupSymbolIn(*program, base))
          SymbolTable::setSymbolName(sym, renamed);
      }
    }
    llvmContexts.push_back(std::make_unique<llvm::LLVMContext>());
    std::unique_ptr<llvm::Module> llvmModule =
        cpu::translateToLLVMIR(*program, *llvmContexts.back(), cpuOptions);
    if (!llvmModule)
      return failure();
    if (emit == Emit::LLVM) {
      llvmModule->print(printedOS, nullptr);
      continue;
    }
    llvmModules.push_back(std::move(llvmModule));
  }
  // Each compiled step's device memory against the plan's prediction for
  // its stage.
  for (const RankMemory &mem : rankMemory) {
    const Partitioned::StageMemory &plan = servers.stageMemory[std::min<size_t>(
        mem.stage, servers.stageMemory.size() - 1)];
    double total = mem.weights + mem.optimizerState + mem.inputs + mem.outputs +
                   mem.planned;
    // One unit for the line: that of the larger total.
    double largest = std::max(total, plan.total());
    auto [unit, name] = largest >= (1 << 30) ? std::pair(double(1 << 30), "GiB")
                        : largest >= (1 << 20)
                            ? std::pair(double(1 << 20), "MiB")
                            : std::pair(1024.0, "KiB");
    auto n = [&, unit = unit](double bytes) {
      return llvm::format("%.2f", bytes / unit);
    };
    log << "distopt compile: memory of a "
        << (pipeline ? "stage-" + std::to_string(mem.stage) + " " : "")
        << "device: " << n(total) << " " << name << " = weights "
        << n(mem.weights) << " + optimizer state " << n(mem.optimizerState)
        << " + inputs " << n(mem.inputs) << " + step outputs " << n(mem.outputs)
        << " + activations and temporaries (the memory "
        << "plan) " << n(mem.planned) << "; the plan predicted "
        << n(plan.total()) << " " << name << " (weights " << n(plan.weights)
        << ", gradients " << n(plan.gradients) << ", optimizer state "
        << n(plan.optimizerState) << ", activations " << n(plan.activations)
        << "): " << llvm::format("%+.0f%%", 100.0 * (total / plan.total() - 1))
        << "\n";
  }
  if (emit != Emit::Bundle)
    return printTo(output, [&](llvm::raw_ostream &os) { os << printed; });

  if (!unsupported.empty()) {
    WithColor::error() << "the bundle's tensor " << unsupported
                       << " has a type the runtime does not hold\n";
    return failure();
  }
  // Write the bundle into a temporary directory, then move it into place.
  SmallString<256> bundle(output);
  if (bundle.empty()) {
    bundle = llvm::sys::path::stem(input);
    bundle += ".dx";
  }
  std::string exeName = llvm::sys::path::stem(bundle).str();
  SmallString<256> tmp(bundle);
  tmp += ".tmp-" + std::to_string(llvm::sys::Process::getProcessId());
  llvm::sys::fs::remove_directories(tmp);
  if (std::error_code ec = llvm::sys::fs::create_directories(tmp)) {
    WithColor::error() << "cannot create '" << tmp << "': " << ec.message()
                       << "\n";
    return failure();
  }
  auto fail = [&](const Twine &msg) {
    WithColor::error() << msg << "\n";
    llvm::sys::fs::remove_directories(tmp);
    return failure();
  };
  auto pathIn = [&](StringRef file) {
    SmallString<256> p(tmp);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };

  bool anyEmbedded = llvm::any_of(weightOrder, [&](const std::string &n) {
    return weightTable[n].embedded;
  });
  if (anyEmbedded) {
    std::string error;
    std::unique_ptr<ONNXWeightReader> reader =
        ONNXWeightReader::open(modelPath, error);
    if (!reader)
      return fail(error);
    std::ofstream bin(pathIn("weights.bin"), std::ios::binary);
    int64_t written = 0;
    std::vector<char> bytes;
    for (const std::string &name : weightOrder) {
      const WeightEntry &w = weightTable[name];
      if (!w.embedded)
        continue;
      int64_t n = w.fileType.getNumElements();
      Type stored = w.dataElement ? w.dataElement : w.fileType.getElementType();
      if (!w.dataFile.empty()) {
        if (!readFileRange(w.dataFile, w.dataOffset, n * elementBytes(stored),
                           bytes, error))
          return fail(error);
      } else if (!reader->readEmbedded(name, n, elementBytes(stored), bytes,
                                       error)) {
        return fail(modelPath + ": " + error);
      }
      if (w.dataElement)
        bytes = roundFloats(bytes, w.fileType.getElementType());
      std::vector<char> pad(w.offset - written, 0);
      bin.write(pad.data(), pad.size());
      bin.write(bytes.data(), bytes.size());
      written = w.offset + bytes.size();
    }
    if (!bin)
      return fail("cannot write " + pathIn("weights.bin"));
  }

  runtime::Manifest manifest;
  manifest.model = llvm::sys::path::stem(input).str();
  SmallString<256> sourcePath(modelPath);
  llvm::sys::fs::make_absolute(sourcePath);
  manifest.source = std::string(sourcePath);
  manifest.compiler = version();
  manifest.ranks = ranks;
  for (auto &[index, in] : modelInputs)
    manifest.inputs.push_back(std::move(in));
  for (auto &[index, out] : modelOutputs)
    manifest.outputs.push_back(std::move(out));
  llvm::StringMap<int64_t> weightIndex;
  for (const std::string &name : weightOrder) {
    weightIndex[name] = static_cast<int64_t>(manifest.weights.size());
    manifest.weights.push_back(std::move(weightTable[name].spec));
  }
  auto weightIndices = [&](const std::vector<std::string> &names) {
    std::vector<int64_t> indices;
    for (const std::string &name : names)
      indices.push_back(weightIndex[name]);
    return indices;
  };
  if (toCUDA)
    manifest.target = "cuda";
  if (emulateCUDA)
    manifest.codegen = "cuda-emu"; // a CPU bundle running GPU kernels
  if (precision != planner::DType::FP32)
    manifest.precision = planner::dtypeName(precision).str();
  // A planned IR carries the precision it was planned for.
  if (auto planned = inputPrecision.value_or(""); !planned.empty() &&
                                                  planned != "fp32")
    manifest.precision = planned;
  manifest.stepFlops = stepFlops;
  if (optimizer)
    manifest.accumulate = accumulateSteps;
  manifest.grid = grid;
  manifest.rank = options.rank;
  if (pipeline) {
    manifest.microbatches = microbatches;
    for (StageBuffers &b : stageBuffers) {
      runtime::PipelineStage stage;
      stage.inputs = std::move(b.inputs);
      stage.weights = weightIndices(b.weights);
      stage.outputs = std::move(b.outputs);
      manifest.stages.push_back(std::move(stage));
    }
  }
  if (servers.servers > 0) {
    // Parameter servers: ranks [0, servers) hold the trained weights'
    // pieces and run the update program; the workers follow.
    runtime::ParameterServers p;
    p.sync = planner::gradientSyncName(servers.sync).str();
    p.servers = servers.servers;
    p.workers = servers.workers;
    p.backupWorkers = servers.backupWorkers;
    p.shardLength = std::max<int64_t>(1, placement.shardLength());
    for (const ps::Piece &piece : placement.pieces)
      p.pieces.push_back({weightIndex[trainedWeights[piece.tensor]],
                          piece.offset, piece.length, piece.server,
                          piece.shardOffset});
    p.updateInputs = std::move(serverInputs);
    p.updateOutputs = std::move(serverOutputs);
    manifest.parameterServers = std::move(p);
  }
  if (!evalInputs.empty() || !evalOutputs.empty()) {
    // The evaluation program: its own inputs and outputs, the step's
    // weights by index.
    runtime::EvalProgram eval;
    for (auto &[index, in] : evalInputs)
      eval.inputs.push_back(std::move(in));
    for (auto &[index, out] : evalOutputs)
      eval.outputs.push_back(std::move(out));
    eval.weights = weightIndices(evalBuffers.weights);
    manifest.eval = std::move(eval);
  }
  if (failed(printTo(pathIn("manifest.json"), [&](llvm::raw_ostream &os) {
        os << manifest.toJson();
      })))
    return fail("cannot write the manifest");

  std::vector<std::string> objects;
  for (auto [k, llvmModule] : llvm::enumerate(llvmModules)) {
    std::string object = pathIn(exeName + "." + std::to_string(k) + ".o");
    FailureOr<std::vector<std::string>> parts = cpu::emitObjectFiles(
        *llvmModule, object, "dopt.m" + std::to_string(k), cpuOptions);
    if (failed(parts))
      return fail("cannot emit " + object);
    llvm::append_range(objects, *parts);
  }
  if (pipeline) {
    // The stage table the runtime's main() dispatches on.
    std::string table = pathIn("stages.c");
    if (failed(printTo(table, [&](llvm::raw_ostream &os) {
          os << "#include <stdint.h>\n";
          // (--rank: the other stages' entries are null.)
          auto compiled = [&](int64_t k) {
            return !rankStage || *rankStage == k;
          };
          for (int64_t k = 0; k < stages; ++k)
            if (compiled(k))
              os << "int32_t dopt_entry_" << k << "(void **);\n";
          os << "int32_t (*const dopt_stage_entries[])(void **) = {";
          for (int64_t k = 0; k < stages; ++k)
            os << (k ? ", " : "")
               << (compiled(k) ? "dopt_entry_" + std::to_string(k)
                               : std::string("0"));
          os << "};\nconst int32_t dopt_num_stages = " << stages << ";\n";
        })))
      return fail("cannot write " + table);
    objects.push_back(table);
  }
  std::string error;
  std::vector<std::string> targetLibs;
  if (toCUDA)
    targetLibs = cuda::linkLibraries();
  std::string shared;
  if (options.runtimeLink == RuntimeLink::Shared)
    shared = toCUDA ? "distopt_runtime_cuda_shared" : "distopt_runtime_shared";
  if (failed(cpu::linkExecutable(objects, pathIn(exeName), runtimeLibDir(),
                                 error, targetLibs, shared)))
    return fail(error);
  // A single CPU program also as a shared library, for host processes
  // (the Python package's Bundle.run; Runtime/BundleAPI.h).
  if (options.sharedLibrary && manifest.ranks == 1 && !toCUDA && !pipeline &&
      servers.servers == 0 &&
      failed(cpu::linkExecutable(objects, pathIn(exeName + ".so"),
                                 runtimeLibDir(), error, {},
                                 "distopt_runtime_shared", /*library=*/true)))
    return fail(error);
  for (const std::string &o : objects)
    llvm::sys::fs::remove(o);

  llvm::sys::fs::remove_directories(bundle);
  if (std::error_code ec = llvm::sys::fs::rename(tmp, bundle))
    return fail("cannot move the bundle to '" + bundle + "': " + ec.message());
  return success();
}
