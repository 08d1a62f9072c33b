//===- Options.h - typed options of the compile pipeline --------*- C++ -*-===//
//
// What `distopt plan` and `distopt compile` are asked to do, as values the
// driver library takes (tools/distopt fills them from its flags; a Python
// API fills them from keyword arguments). The fields are named after the
// command-line flags they come from, and an unset optional means the flag
// was not given: several rules depend on whether a choice was made at all
// (--zero given as 0 is not the planner's choice).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DRIVER_OPTIONS_H
#define DISTOPT_DRIVER_OPTIONS_H

#include "distopt/Import/ONNX/Importer.h"
#include "distopt/Planner/Search.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace distopt::driver {

/// How a model is split over a cluster: shared by `plan` and `compile`.
struct DistributionOptions {
  /// --cluster: a preset (local:N, dgx-a100x8, ...) or a YAML file; empty:
  /// one process, no plan.
  std::string cluster;
  /// --dp, --tp, --pp, --microbatches: forced degrees (unset: the
  /// planner's). Values below 1 are refused.
  std::optional<int64_t> dp, tp, pp, microbatches;
  /// --recompute, --schedule, --microbatch-statistics.
  std::optional<planner::Recompute> recompute;
  std::optional<planner::PipelineSchedule> schedule;
  bool microbatchStatistics = false;
  /// --bucket-mb (MiB; default 25), --grad-dtype (default fp32), --zero
  /// (0 or 1; unset: the planner decides).
  std::optional<double> bucketMiB;
  std::optional<planner::DType> gradDtype;
  std::optional<int> zero;
  /// --sync, --servers, --backup-workers.
  planner::GradientSync sync = planner::GradientSync::AllReduce;
  std::optional<int64_t> servers, backupWorkers;
  /// --profile: an efficiency profile (YAML) over the defaults.
  std::string profile;

  /// Whether a cluster or a degree was given (what asks for a plan).
  bool clusterGiven() const {
    return !cluster.empty() || dp || tp || pp || microbatches;
  }
  /// Whether any of --bucket-mb, --grad-dtype and --zero was given.
  bool gradientSyncGiven() const { return bucketMiB || gradDtype || zero; }
  /// The bytes of one gradient bucket.
  double bucketBytes() const { return bucketMiB.value_or(25.0) * 1024 * 1024; }
};

/// Where a compiled program runs.
enum class Target { CPU, CUDA, CUDAEmulation };
/// Where `compile` stops: a bundle, or IR printed at one of the stages.
enum class Emit { Bundle, Graph, Linalg, LLVM, GPU, PTX };
/// How a bundle links the runtime.
enum class RuntimeLink { Static, Shared };
/// The order the CUDA emulation runs a kernel's threads in.
enum class EmulatedThreads { Reverse, Forward };

/// The names of the driver's choices, as the command line and a Python API
/// spell them (the planner's choices are named beside their enums:
/// planner::kDTypes, kOptimizers, kPlanModes, kGradientSyncs, ...).
inline constexpr NamedValue<Target> kTargets[] = {
    {"cpu", Target::CPU},
    {"cuda", Target::CUDA},
    {"cuda-emu", Target::CUDAEmulation}};
inline constexpr NamedValue<Emit> kEmits[] = {{"graph", Emit::Graph},
                                              {"linalg", Emit::Linalg},
                                              {"llvm", Emit::LLVM},
                                              {"gpu", Emit::GPU},
                                              {"ptx", Emit::PTX}};
inline constexpr NamedValue<RuntimeLink> kRuntimeLinks[] = {
    {"static", RuntimeLink::Static}, {"shared", RuntimeLink::Shared}};
inline constexpr NamedValue<EmulatedThreads> kEmulatedThreads[] = {
    {"reverse", EmulatedThreads::Reverse},
    {"forward", EmulatedThreads::Forward}};
inline constexpr NamedValue<planner::DType> kGradDtypes[] = {
    {"fp32", planner::DType::FP32},
    {"fp16", planner::DType::FP16},
    {"bf16", planner::DType::BF16}};

/// `distopt compile`.
struct CompileOptions {
  /// The model: an ONNX file, or a planned IR (`distopt plan --emit=ir`,
  /// `.mlir`) naming its ONNX model in `dopt.source`.
  std::string input;
  /// The bundle directory (default `<model>.dx`), or where IR is printed
  /// for an `emit` other than Bundle ("-" or empty: stdout).
  std::string output;
  Emit emit = Emit::Bundle;
  bool printGeneric = false;

  ONNXImportOptions import;
  DistributionOptions distribution;

  /// Training: --gradients (the loss's gradients as outputs), --loss
  /// KIND[:OUTPUT], --labels, --optimizer (a training step), --nesterov,
  /// --accumulate K, --freeze-weights REGEX.
  bool gradients = false;
  std::string loss;
  std::optional<std::string> labels;
  std::optional<planner::Optimizer> optimizer;
  bool nesterov = false;
  /// --train: says that a training step is meant (it then needs --loss and
  /// --optimizer).
  bool train = false;
  std::optional<int64_t> accumulate;
  std::optional<std::string> freezeWeights;

  /// --precision: fp32 (also unset), tf32 (fp32 tensors, TF32 tensor-core
  /// GEMMs and convolutions on CUDA), bf16 or fp16 (mixed precision:
  /// distopt-autocast).
  std::optional<planner::DType> precision;

  /// Code generation.
  Target target = Target::CPU;
  RuntimeLink runtimeLink = RuntimeLink::Static;
  /// --cpu (default: the host's).
  std::string cpu = "native";
  /// --codegen-threads (0: one per hardware thread), --codegen-split-min.
  unsigned codegenThreads = 0, codegenSplitMin = 20000;
  /// --outline-ops: loop nests of at least this many ops become functions
  /// of their own (unset: the target's default).
  std::optional<int64_t> outlineOps;
  /// --fuse-attention: attention chains become dopt.attention, computed
  /// without their score matrix (false: the chains as exported; for
  /// comparisons).
  bool fuseAttention = true;
  /// --outline-repeats: each run of repeated op sequences (a model's
  /// layers) is compiled once, a function called per copy
  /// (distopt-outline-repeats; false: every copy, for comparisons).
  bool outlineRepeats = true;
  /// --shared-library: a single-rank CPU bundle also holds its program as
  /// `<model>.so`, which a host process (the Python package) loads to run
  /// it in process (Runtime/BundleAPI.h).
  bool sharedLibrary = false;
  /// --cuda-toolkit (empty: the default one) and --cuda-arch.
  std::string cudaToolkit;
  std::vector<std::string> cudaArchs;
  /// --emulate-threads (Target::CUDAEmulation).
  std::optional<EmulatedThreads> emulateThreads;
  /// --rank R: generate code only for the programs rank R runs (its
  /// pipeline stage's step; the evaluation program where R's stage holds
  /// rank 0, which runs it). The manifest still describes every rank; the
  /// executable refuses to run the others. Not with parameter servers.
  std::optional<int64_t> rank;

  bool training() const { return gradients || !loss.empty() || optimizer; }
  bool trainingStep() const { return optimizer && !loss.empty(); }
  int64_t accumulateSteps() const { return accumulate.value_or(1); }
};

} // namespace distopt::driver

#endif // DISTOPT_DRIVER_OPTIONS_H
