//===- Tool.h - pieces of the distopt driver --------------------*- C++ -*-===//
#ifndef DISTOPT_TOOLS_DISTOPT_TOOL_H
#define DISTOPT_TOOLS_DISTOPT_TOOL_H

#include "distopt/Import/ONNX/Importer.h"
#include "distopt/Planner/Search.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <string>
#include <vector>
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

namespace distopt::tool {

/// Fills import options from --shape/--dim/--inline-weights/--text; prints
/// a usage error and returns false when a flag is malformed.
bool importOptionsFromFlags(ONNXImportOptions &options);

/// The `plan` subcommand (a function-local static, so options in other
/// files can name it safely during static initialisation).
llvm::cl::SubCommand &planCommand();
llvm::cl::SubCommand &compileCommand();
llvm::cl::SubCommand &runCommand();
/// `distopt run [-n N] BUNDLE ARGS...` (Run.cpp).
int runBundle();
/// `distopt compile --cluster SPEC [--dp N --tp N --pp N]`: plans inference
/// (or, with `training`, a training step: `module` then ends in its scalar
/// loss) of `module` (imported at its real batch) for the cluster and
/// rewrites it into the program of one rank (distopt-partition). `grid`
/// receives the device grid (stages x data x tensor); it stays empty
/// without --cluster. Prints its errors; returns false on failure.
/// `sameAs`: partition with exactly this grid (stages x data x tensor) --
/// the evaluation program of a training step takes the step's plan.
/// `servers`: receives the parameter-server layout of a --sync ps|async
/// plan (the grid is then the workers' data-parallel grid).
struct ServerPlan {
  planner::GradientSync sync = planner::GradientSync::AllReduce;
  int64_t servers = 0, workers = 0, backupWorkers = 0;
};
/// `loss`: the --loss flag (KIND[:OUTPUT]) of a training step: under
/// cross-entropy or NLL the planner may leave that output split along its
/// classes for a vocabulary-parallel loss.
bool partitionForCluster(mlir::MLIRContext &context, mlir::ModuleOp module,
                         std::vector<int64_t> &grid, bool training = false,
                         const std::vector<int64_t> *sameAs = nullptr,
                         ServerPlan *servers = nullptr,
                         llvm::StringRef loss = "");
/// What stops a model's batch from being cut into micro-batches that each
/// compute what the whole batch would (--accumulate): an op that mixes the
/// samples, or a statistic over the batch (batch norm in training form),
/// which a micro-batch computes over its own samples only. `why` names the
/// op. nullopt: nothing (or a graph the planner cannot read).
struct MicrobatchObstacle {
  enum Kind { Mixes, Statistic } kind;
  std::string why;
};
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
/// --microbatch-statistics (plan and compile).
bool microbatchStatisticsFlag();

/// --bucket-mb, --grad-dtype and --zero, shared by `plan` and `compile`:
/// how a data-parallel training step sends its gradients and keeps its
/// optimizer state.
struct GradientSyncFlags {
  double bucketBytes = 0;
  /// "fp32", "fp16" or "bf16".
  std::string dtype;
  /// --zero: -1 when not given (the planner decides).
  int zero = -1;
  bool given = false; ///< any of the flags was given
};
/// Reads the flags; false with `error` when a value is not allowed.
bool gradientSyncFlags(GradientSyncFlags &out, std::string &error);
/// Whether --cluster (or a degree) was given.
bool clusterGiven();
int runPlan(mlir::MLIRContext &context, llvm::StringRef input);

/// `distopt compile`: import, lower, emit the object, link, write the bundle
/// (or stop at `emit` = graph|linalg|llvm and print IR to `output`).
int runCompile(mlir::MLIRContext &context, llvm::StringRef input,
               llvm::StringRef output, llvm::StringRef emit,
               llvm::StringRef cpu, bool printGeneric);

} // namespace distopt::tool

#endif // DISTOPT_TOOLS_DISTOPT_TOOL_H
