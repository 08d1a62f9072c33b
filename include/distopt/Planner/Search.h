//===- Search.h - the plan search (DP × TP × PP) ----------------*- C++ -*-===//
//
// Finds the fastest plan that fits memory:
//  1. for every tensor-parallel degree t and micro-batch size b, the
//     intra-op ILP (IntraOp.h) is solved once per segment class and pair of
//     boundary states, and a dynamic program over the chain of segments
//     picks the boundary states (the sharding of the activation between
//     segments) that minimise the total;
//  2. for every data-parallel degree d and stage count p with d·t·p at most
//     the cluster's devices (fewer is legal), every recomputation policy and
//     the resulting micro-batch count m = B/(d·b), the segments are split
//     into p contiguous stages minimising the slowest stage subject to each
//     stage's memory (the 1F1B schedule holds min(m, p−k) micro-batches on
//     stage k). Exact: bisection on the stage-time bound with a greedy
//     maximal-prefix check, which is optimal for contiguous partitions under
//     monotone per-stage constraints (tested against the O(L²·p) DP);
//  3. step time = Σ_k τ_k + (m−1)·max_k τ_k (pipeline, τ_k = stage k's time
//     per micro-batch: compute, tensor-parallel collectives, stage-to-stage
//     sends) + the exposed part of the data-parallel gradient all-reduce
//     (bucketed, overlapping the last backward; the slowest stage counts) +
//     the optimizer update.
// Parameter servers (PlanOptions::sync): K server ranks hold the trained
// weights in shards (ServerPlacement.h) and dp = devices - K worker ranks
// (backup workers included) compute gradients; the data-parallel all-reduce
// is replaced by each worker's push and pull of every server's shard
// (parameterServerExchangeTime). Every K is priced, so the plan can say
// when all-reduce beats parameter servers and how many servers a PS plan
// needs (PlanResult::serverAlternatives).
// Device layout: tensor-parallel ranks are consecutive (innermost, on the
// fastest links), then data-parallel, then stages (outermost), as in
// Megatron-LM: heavy traffic stays inside nodes.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_SEARCH_H
#define DISTOPT_PLANNER_SEARCH_H

#include "distopt/Planner/IntraOp.h"

#include <optional>
#include <string>
#include <vector>

namespace distopt::planner {

enum class PlanMode { Train, Infer };
inline constexpr NamedValue<PlanMode> kPlanModes[] = {
    {"train", PlanMode::Train}, {"infer", PlanMode::Infer}};

/// How data-parallel training combines the replicas' gradients: a ring
/// all-reduce among them, synchronous parameter servers (every worker's
/// gradient, or the first N of N + backups, per step), or asynchronous ones
/// (each gradient applied when it arrives).
enum class GradientSync { AllReduce, ParameterServer, Async };
inline constexpr NamedValue<GradientSync> kGradientSyncs[] = {
    {"allreduce", GradientSync::AllReduce},
    {"ps", GradientSync::ParameterServer},
    {"async", GradientSync::Async}};
inline llvm::StringRef gradientSyncName(GradientSync s) {
  return nameOf(kGradientSyncs, s);
}

struct PlanOptions {
  PlanMode mode = PlanMode::Train;
  int64_t globalBatch = 1;
  Optimizer optimizer = Optimizer::Adam;
  /// The dtype weights, gradients and messages use (CostOptions::precision
  /// of the graph, or fp32).
  DType precision = DType::FP32;
  /// The dtype data-parallel gradients travel in (fp16/bf16: scaled by
  /// 1/dp before the sum, the seed's cure for saturated links); unset: as
  /// `precision`.
  std::optional<DType> gradDtype;
  /// The largest bucket of gradients one all-reduce carries (PyTorch DDP's
  /// default bucket_cap_mb = 25).
  double bucketBytes = 25.0 * 1024 * 1024;
  /// ZeRO stage of data-parallel training (0: replicated optimizer state;
  /// 1: each replica keeps its shard). Unset: 0, or 1 when no plan fits
  /// without it.
  std::optional<int> zeroStage;
  std::optional<int64_t> dp, tp, pp, microbatches;
  std::optional<Recompute> recompute;
  /// Statistics over the batch (PlanGraph::batchReductions) may be each
  /// micro-batch's own (--microbatch-statistics): such a model is then cut
  /// into micro-batches like any other; without it, never.
  bool microbatchStatistics = false;
  /// Gradient synchronisation; with parameter servers, `servers` (unset:
  /// the fastest count) and `backupWorkers` (workers beyond those whose
  /// gradients a synchronous step applies).
  GradientSync sync = GradientSync::AllReduce;
  std::optional<int64_t> servers;
  int64_t backupWorkers = 0;
  /// All-reduce training plans of pure data parallelism: also price them
  /// under parameter servers (PlanResult::serverAlternatives; `distopt
  /// plan` prints the comparison, `compile` does not need it).
  bool compareServers = false;
  /// The pipeline schedule of a training step (the activations it keeps
  /// in flight: GPipe every micro-batch's, 1F1B at most the stages').
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  EfficiencyProfile efficiency;
  unsigned maxAlternatives = 5;
  /// The fraction of a device's memory a plan may fill: the rest is left to
  /// the runtime context, allocator fragmentation and workspaces (CUDA and
  /// NCCL take 1–3 GB of an 80 GB GPU before the model allocates anything).
  double usableMemoryFraction = 0.9;
  /// Training: the model output (index into the graph's outputs) whose
  /// last axis a cross-entropy or NLL loss takes as its classes
  /// (distopt-append-loss), or -1. The search may leave it split along
  /// that axis over the tensor axis -- a vocabulary-parallel loss (Megatron)
  /// -- instead of gathering it.
  int64_t classLossOutput = -1;
  /// How segment problems are solved (IntraOp.h; Auto: variable
  /// elimination, CBC where that is too wide). The others for benchmarks
  /// and tests (`distopt plan --segment-solver`, hidden).
  IntraOpSolver segmentSolver = IntraOpSolver::Auto;
};

struct StagePlan {
  int64_t firstSegment = 0, endSegment = 0; ///< [first, end)
  int64_t firstDevice = 0, numDevices = 0;  ///< dp·tp devices from firstDevice
  double timePerMicrobatch = 0;
  double computePerMicrobatch = 0;
  double tpCommPerMicrobatch = 0;
  double p2pPerMicrobatch = 0;
  double params = 0; ///< parameters held by one device
  double weightBytes = 0, gradientBytes = 0, optimizerBytes = 0;
  double activationBytes = 0;
  double memory() const {
    return weightBytes + gradientBytes + optimizerBytes + activationBytes;
  }
};

struct Plan {
  int64_t dp = 1, tp = 1, pp = 1;
  /// ZeRO stage the memory was counted with (PlanOptions::zeroStage).
  int zeroStage = 0;
  int64_t microbatches = 1, microbatchSize = 1;
  Recompute recompute = Recompute::Off;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  double stepTime = 0, compute = 0, communication = 0, bubble = 0;
  /// Exposed data-parallel gradient all-reduce (after overlap with the
  /// last backward), and its full duration.
  double dataParallelSync = 0, dataParallelSyncTotal = 0;
  double optimizerUpdate = 0;
  double peakMemory = 0;
  bool fits = true;
  /// Parameter servers: their count (ranks 0..servers-1; the dp workers
  /// follow, backups included), the bytes each server receives and sends
  /// per step (its shard, to and from every worker), and the exchange
  /// time (dataParallelSync holds it too).
  GradientSync sync = GradientSync::AllReduce;
  int64_t servers = 0, backupWorkers = 0;
  std::vector<double> serverBytes;
  std::vector<StagePlan> stages;
  /// Sharding state of each segment's output (the chain DP's choice).
  std::vector<int64_t> boundaryStates;
  /// The intra-op solution of each segment (shared by a class's segments).
  std::vector<const SegmentSolution *> segmentSolutions;
  /// Under data parallelism, the all-reduces over the replicas that complete
  /// the sums and means over the batch (PlanGraph::batchReductions: batch
  /// norm's statistics), one per result; in training also the backward one
  /// of each (its adjoint's shares). Per micro-batch, priced in the stages'
  /// communication time.
  std::vector<PlannedCollective> dataCollectives;
  /// The loss reads its class scores split over the tensor axis (a
  /// vocabulary-parallel cross-entropy): the collectives it adds per
  /// micro-batch -- forward an all-gather of each row's log-sum-exps and an
  /// all-reduce of the picked scores, backward an all-reduce of the
  /// log-sum-exps' adjoint shares -- priced in the last segment.
  bool vocabularyParallelLoss = false;
  std::vector<PlannedCollective> lossCollectives;
  int64_t devices() const { return dp * tp * pp + servers; }
};

struct RejectedPlan {
  Plan plan;
  std::string reason;
};

struct PlanResult {
  Plan best;
  std::vector<RejectedPlan> rejected;
  /// Training plans of pure data parallelism: the same cluster under
  /// parameter servers, one plan per server count (the best of each), for
  /// the comparison with all-reduce the summary prints.
  std::vector<Plan> serverAlternatives;
  int64_t candidates = 0;  ///< (dp, tp, pp, b, recompute) evaluated
  int64_t ilpSolves = 0;   ///< segment problems solved
  int64_t cbcSolves = 0;   ///< of which by CBC (the rest: variable elimination)
  double ilpSeconds = 0;
  double searchSeconds = 0;
  /// Keeps the solutions the plans point to alive.
  std::shared_ptr<void> storage;
};

/// Runs the search. Errors: forced degrees the model or cluster cannot take
/// (naming the dimension), or no plan that fits (with the smallest memory
/// per device any plan needs).
llvm::Expected<PlanResult> searchPlan(const PlanGraph &graph,
                                      const Cluster &cluster,
                                      const PlanOptions &options);

/// Exact minimum over contiguous partitions of `times` into `parts`
/// non-empty parts of the largest part's sum, subject to
/// `fits(part index, first, end)`; by dynamic programming in O(L²·parts).
/// Used to test the bisection search. Returns a negative value when no
/// partition fits.
double minMaxPartitionDP(llvm::ArrayRef<double> times, int64_t parts,
                         llvm::function_ref<bool(int64_t, int64_t, int64_t)>
                             fits);
/// The same by bisection and greedy maximal prefixes; fills `bounds` with
/// the parts' first indices.
double minMaxPartitionGreedy(llvm::ArrayRef<double> times, int64_t parts,
                             llvm::function_ref<bool(int64_t, int64_t, int64_t)>
                                 fits,
                             std::vector<int64_t> *bounds = nullptr);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_SEARCH_H
