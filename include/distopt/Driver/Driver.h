//===- Driver.h - the compile pipeline as a library -------------*- C++ -*-===//
//
// import -> plan -> partition -> training passes -> lower -> bundle, as
// functions of typed options (Options.h). `distopt compile` and `distopt
// plan` (tools/distopt) parse flags into these options and call them; so
// can anything else that compiles models (a Python API, a service).
//
// Errors go to the context's diagnostic handler (those of passes, with the
// ONNX node's location) or to llvm::errs() as `error: ...` lines (those of
// the options and files); a failed call has printed why.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DRIVER_DRIVER_H
#define DISTOPT_DRIVER_DRIVER_H

#include "distopt/Driver/Options.h"
#include "distopt/Planner/Cluster.h"
#include "distopt/Planner/PlanGraph.h"
#include "distopt/Planner/PlanReport.h"
#include "distopt/Planner/Search.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace distopt::driver {

//===----------------------------------------------------------------------===//
// Registration (Registration.cpp)
//===----------------------------------------------------------------------===//

/// Registers what planning needs in `registry`: the importer's dialects and
/// the stages' answers for the ops (the planner's sharding rules and costs,
/// autodiff's gradients: external models of the interfaces in
/// DoptInterfaces.td). Every context the driver is handed needs it.
void registerDialects(mlir::DialectRegistry &registry);

/// `--freeze NAME=FILE`: the value of a .npy or TensorProto (.pb) file as a
/// graph input bound at compile time; false with `error` saying why.
bool readFrozenInput(llvm::StringRef file, ONNXFrozenInput &out,
                     std::string &error);

/// What a `NAME=VALUE` import setting sets (Import.cpp).
enum class ImportSetting {
  Shape,  ///< `--shape x=32x256`: a graph input's concrete shape
  Dim,    ///< `--dim batch=32`: a symbolic dimension's value
  Freeze, ///< `--freeze name=file.npy`: an input bound at compile time
};

/// Parses `NAME=VALUE` (`arg`) as `setting` into `options`; false with
/// `error` naming the flag and saying what was expected.
bool addImportSetting(ImportSetting setting, llvm::StringRef arg,
                      ONNXImportOptions &options, std::string &error);

/// `distopt import`: imports `input` and writes its dopt IR to `output`
/// ("-": stdout), in generic form where asked. Import errors are printed as
/// diagnostics; a file that cannot be written fails with `error`.
mlir::LogicalResult importToFile(mlir::MLIRContext &context,
                                 llvm::StringRef input,
                                 const ONNXImportOptions &options,
                                 llvm::StringRef output, bool printGeneric,
                                 std::string &error);

/// "distopt 0.1.0 (LLVM/MLIR 22.1.0, git 1a2b3c4d5e6f)": `distopt
/// --version`, and what every bundle's manifest records as its compiler.
std::string version();

//===----------------------------------------------------------------------===//
// Diagnostics (Diagnostics.cpp)
//===----------------------------------------------------------------------===//

/// Prints the context's diagnostics to `os` as `file: node 'name': error:
/// message` (ONNX models have no line numbers: the node names the place),
/// with their notes, and without a dump of the IR the pass was looking at
/// (that helps compiler developers, who use distopt-opt, not users).
void printDiagnosticsTo(mlir::MLIRContext &context, llvm::raw_ostream &os);

//===----------------------------------------------------------------------===//
// Where the batch is (Batch.cpp)
//===----------------------------------------------------------------------===//

/// The batch of a model: the size of the batch dimension
/// (planner::argumentBatchDim) of the first input that has one and is
/// symbolic (`symbolic` = true), else dimension 0 of the first input;
/// nullopt for a scalar first input.
std::optional<int64_t> batchOf(mlir::func::FuncOp func, bool &symbolic);

/// What stops a model's batch from being cut into micro-batches that each
/// compute what the whole batch would (--accumulate): an op that mixes the
/// samples, or a statistic over the batch (batch norm in training form),
/// which a micro-batch computes over its own samples only. `why` names the
/// op.
struct MicrobatchObstacle {
  enum Kind { Mixes, Statistic } kind;
  std::string why;
};
/// nullopt: nothing (or a graph the planner cannot read).
std::optional<MicrobatchObstacle> microbatchObstacle(mlir::ModuleOp module);

/// Before a training step is built from the imported `main`: where each
/// data input, each output and each dropout's input hold the batch, as the
/// planner's graph sees it (`dopt.batch_dim` on main's arguments and results,
/// for the manifest, the loss's labels and the runtime's loader, which
/// place samples along it; on `dopt.dropout` ops, for micro-batches, which
/// continue the mask's positions along it: -1 where the batch is not one
/// block of that dimension). False with `error` where the inputs carry the
/// batch past dimension 0 and an output's batch cannot be found.
bool annotateBatchDims(mlir::ModuleOp module, std::string &error);

/// The output (by name, or position; default the first) a --loss of a kind
/// that takes its last axis as classes (cross-entropy, nll) reads, or -1.
int64_t classLossOutputOf(mlir::func::FuncOp func, llvm::StringRef loss);

//===----------------------------------------------------------------------===//
// Planning and partitioning (Distribution.cpp)
//===----------------------------------------------------------------------===//

/// The planner's options for `distribution` in `options.mode` (set it
/// first): forced degrees, gradient synchronisation, pipeline schedule and
/// recomputation, parameter servers, the efficiency profile. An error says
/// which flag is wrong (flags are named as on the command line).
llvm::Error applyDistribution(const DistributionOptions &distribution,
                              planner::PlanOptions &options);

/// The values of --zero and --bucket-mb (also checked without a cluster).
llvm::Error checkGradientSync(const DistributionOptions &distribution);

/// What partitioning for a cluster decided.
struct Partitioned {
  /// The device grid (stages x data x tensor); empty without a cluster.
  std::vector<int64_t> grid;
  /// Parameter servers of a --sync ps|async plan (the grid is then the
  /// workers' data-parallel grid).
  planner::GradientSync sync = planner::GradientSync::AllReduce;
  int64_t servers = 0, workers = 0, backupWorkers = 0;
  /// The plan in one line (`plan dp 2 x tp 1 x pp 1 = 2 ranks on ...`);
  /// empty without a cluster.
  std::string summary;
  /// The plan's memory per device of each pipeline stage, in bytes.
  struct StageMemory {
    double weights = 0, gradients = 0, optimizerState = 0, activations = 0;
    double total() const {
      return weights + gradients + optimizerState + activations;
    }
  };
  std::vector<StageMemory> stageMemory;
  /// One device's memory, in bytes (0 without a cluster).
  int64_t deviceMemory = 0;
};

/// What a partitioned program is for.
struct PartitionRequest {
  /// Plans a training step (`module` ends in what --loss will read).
  bool training = false;
  /// --loss KIND[:OUTPUT]: under cross-entropy or NLL the planner may leave
  /// that output split along its classes (a vocabulary-parallel loss).
  std::string loss;
  /// The optimizer whose state the memory plan holds.
  planner::Optimizer optimizer = planner::Optimizer::Adam;
  /// The precision the program computes in (--precision): the plan prices
  /// its FLOPs and bytes in it.
  std::optional<planner::DType> precision;
  /// Partition with exactly this grid (stages x data x tensor): the
  /// evaluation program of a training step takes the step's plan.
  const std::vector<int64_t> *sameAs = nullptr;
};

/// Plans `module` (imported at its real batch) for `distribution`'s cluster
/// and rewrites it into the program of one rank (distopt-partition). Does
/// nothing (an empty grid) without a cluster. Prints its errors.
mlir::FailureOr<Partitioned>
partitionForCluster(mlir::MLIRContext &context, mlir::ModuleOp module,
                    const DistributionOptions &distribution,
                    const PartitionRequest &request);

//===----------------------------------------------------------------------===//
// Preparing the imported model (Prepare.cpp)
//===----------------------------------------------------------------------===//

/// Rewrites `module` as imported, before it is planned, so the plan prices
/// the program that runs: with `fuseAttention`, its attention chains become
/// one dopt.attention each (distopt-fuse-attention; autodiff then
/// differentiates the fused op); with --precision bf16|fp16, it computes in
/// 16 bits where each op's policy says (distopt-autocast; `storeWeights`,
/// for inference: the weights read only in 16 bits become 16-bit weights).
/// fp32, tf32 and no precision leave the widths alone.
mlir::LogicalResult prepareImported(mlir::ModuleOp module, bool fuseAttention,
                                    std::optional<planner::DType> precision,
                                    bool storeWeights);

//===----------------------------------------------------------------------===//
// Planning alone (Plan.cpp)
//===----------------------------------------------------------------------===//

/// `distopt plan`: the best plan of a model for a cluster, with the
/// alternatives it beat.
struct PlanRequest {
  /// The ONNX model, and how to import it.
  std::string input;
  ONNXImportOptions import;
  /// The cluster (required) and what is forced.
  DistributionOptions distribution;
  planner::PlanMode mode = planner::PlanMode::Train;
  /// --global-batch (samples per step over the cluster; unset: the model's
  /// batch) and --seq-len (binds a symbolic dimension 1 of the inputs).
  std::optional<int64_t> globalBatch, seqLen;
  /// --precision (unset: the model's).
  std::optional<planner::DType> precision;
  planner::Optimizer optimizer = planner::Optimizer::Adam;
  /// --loss KIND[:OUTPUT] (training): see PartitionRequest::loss.
  std::string loss;
  planner::IntraOpSolver segmentSolver = planner::IntraOpSolver::Auto;
  /// Also annotate the model at its real batch with the plan (the shard
  /// dialect's grid and shardings, stage attributes): `--emit=ir`.
  bool annotate = false;
};

/// A plan and what it was made from (the graph's values live in `module`).
struct PlannedModel {
  /// The model imported at the probe batch.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  planner::PlanGraph graph;
  planner::Cluster cluster;
  planner::PlanOptions options;
  planner::PlanResult result;
  /// With PlanRequest::annotate, where the batch differs from the probe's:
  /// the model at its real batch (annotatedModule() says which holds the
  /// plan).
  mlir::OwningOpRef<mlir::ModuleOp> annotated;
  mlir::ModuleOp annotatedModule() const {
    return annotated ? *annotated : *module;
  }
  /// What the reports name: the model's file name and the cluster spec.
  planner::PlanContext context;

  /// The plan as `distopt plan` prints it, as JSON (`--json`), and as a
  /// self-contained HTML page (`--report`).
  void printSummary(llvm::raw_ostream &os) const;
  llvm::json::Value toJSON() const;
  void writeHTML(llvm::raw_ostream &os) const;
};

/// Writes a file through `write` ('-': stdout); false with `error` where it
/// cannot be opened.
bool writeOutputFile(llvm::StringRef path,
                     llvm::function_ref<void(llvm::raw_ostream &)> write,
                     std::string &error);

/// Plans `request.input`. Prints its errors.
mlir::FailureOr<std::unique_ptr<PlannedModel>>
plan(mlir::MLIRContext &context, const PlanRequest &request);

//===----------------------------------------------------------------------===//
// Launching a bundle (Launch.cpp)
//===----------------------------------------------------------------------===//

/// What starts the ranks of a multi-rank bundle.
enum class Launcher {
  Auto,   ///< srun inside a Slurm allocation without hosts given; else mpirun
  MPIRun, ///< Open MPI's mpirun (on this machine, or on the hosts given)
  Srun,   ///< Slurm's srun (the ranks of the allocation)
};
inline constexpr NamedValue<Launcher> kLaunchers[] = {
    {"auto", Launcher::Auto},
    {"mpirun", Launcher::MPIRun},
    {"srun", Launcher::Srun}};

/// A host and how many ranks it runs; an Open MPI hostfile's hosts
/// (planner/Cluster.h: a cluster spec can be made of them too).
using planner::HostSlots;
using planner::readHostfile;
/// `--hosts a:8,b:8` (a host without `:N` takes one rank) into `hosts`;
/// false with `error` = "--hosts: 'ENTRY' is not HOST or HOST:SLOTS".
bool parseHosts(llvm::StringRef spec, std::vector<HostSlots> &hosts,
                std::string &error);

/// How `distopt run` starts a bundle.
struct LaunchOptions {
  /// The rank count; must equal the bundle's where given.
  std::optional<int64_t> ranks;
  /// The hosts to place ranks on, in order, each up to its slots (rank r
  /// on the host whose slots hold it); empty: this machine.
  std::vector<HostSlots> hosts;
  Launcher launcher = Launcher::Auto;
};

/// The command that runs a bundle: `program` and its argv (args[0] is the
/// program), and what the launcher should say before starting it.
struct LaunchCommand {
  std::string program;
  std::vector<std::string> args;
  /// Placement the plan did not assume (a tensor-parallel group split over
  /// hosts): the run works, with its collectives over the network.
  std::vector<std::string> warnings;
};

/// `distopt run`'s command for `bundle`: its executable alone for a
/// single-rank bundle on this machine; for N ranks (N from the manifest;
/// `options.ranks`, where given, must equal it) `mpirun -np N` on this
/// machine (`--oversubscribe` beyond its hardware threads) or on
/// `options.hosts` (`--host a:8,b:8 --map-by slot`, the DISTOPT_, OMP_,
/// OPENBLAS_ and NCCL_ variables and LD_LIBRARY_PATH exported to every
/// rank), or `srun --ntasks N` in a Slurm allocation; `modelArgs` after.
/// Ranks are numbered row-major over the bundle's grid (stages x data x
/// tensor), so filling hosts in order keeps tensor groups inside a host and
/// puts pipeline stages on successive hosts. Fails with `error` saying why
/// (no manifest, no executable, no launcher, another rank count, fewer
/// slots or Slurm tasks than ranks).
mlir::FailureOr<LaunchCommand>
launchCommand(llvm::StringRef bundle, const LaunchOptions &options,
              llvm::ArrayRef<std::string> modelArgs, std::string &error);

/// Takes `distopt run`'s own flags from the front of `modelArgs` (the
/// arguments after the bundle, where users also put them) into `options`:
/// `-n N` (`-nN`, `-n=N`), `--hosts SPEC`, `--hostfile FILE` and
/// `--launcher NAME` (also as `--flag=value`); false with `error` where a
/// value is malformed or an `-n` disagrees with one already given.
bool takeLaunchFlags(std::vector<std::string> &modelArgs,
                     LaunchOptions &options, std::string &error);

/// Runs `command` and waits: its exit status, or -1 with `error` where it
/// could not be started.
int runLaunchCommand(const LaunchCommand &command, std::string &error);

/// `distopt run`: takes the launcher's flags after the bundle
/// (takeLaunchFlags), builds the command (launchCommand), prints its
/// warnings to `log`, and runs it, or with `dryRun` prints it to `out` (an
/// argument a line). The bundle's exit status, or -1 with `error` where it
/// could not be started or the flags are wrong.
int runBundle(llvm::StringRef bundle, LaunchOptions options,
              std::vector<std::string> modelArgs, bool dryRun,
              llvm::raw_ostream &out, llvm::raw_ostream &log,
              std::string &error);

//===----------------------------------------------------------------------===//
// Compiling (Compile.cpp)
//===----------------------------------------------------------------------===//

/// Registers what `compile` needs in `registry`: registerDialects and the
/// targets' dialects and interfaces.
void registerCompileDialects(mlir::DialectRegistry &registry);

/// `distopt compile`: import (or read a planned IR), plan and partition,
/// build the training step, lower, and write the bundle `options.output`
/// (or print IR at `options.emit`). The plan's one-line summary goes to
/// `log` where there is one. Prints its errors.
mlir::LogicalResult compile(mlir::MLIRContext &context,
                            const CompileOptions &options,
                            llvm::raw_ostream &log);

} // namespace distopt::driver

#endif // DISTOPT_DRIVER_DRIVER_H
