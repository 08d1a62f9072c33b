//===- IntraOp.h - intra-op (tensor-parallel) sharding search ---*- C++ -*-===//
//
// For one segment of the PlanGraph on a tensor-parallel group of t devices,
// picks a strategy for every op (replicate, or split one factor of its
// sharding rule) and a storage sharding for every weight, minimising
//   Σ ops     kCompute · compute time of the op's local slice
// + Σ edges   kForward · forward resharding + kBackward · backward resharding
// + memoryWeight · local weight bytes,
// exactly: by dynamic programming where the edges between ops that still
// have a choice form a forest (chains of GEMMs and elementwise ops), else as
// an integer linear program solved by COIN-OR CBC (Alpa's formulation: one
// binary per op strategy, one continuous variable per pair of strategies on
// an edge, linked by marginal constraints).
//
// Resharding a tensor of B bytes between the states of the α–β model:
//   split → replicated: all-gather(B); split d → split e: all-to-all(B/t);
//   partial → replicated: all-reduce(B); partial → split: reduce-scatter(B);
//   replicated → split: free (a local slice).
// The backward pass moves gradients the other way: an op split on a factor
// its operand lacks (a column-split matmul's replicated input) produces a
// partial gradient for that operand, which is reduced to the producer's
// forward state (Megatron's f and g operators fall out of this rule).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_INTRAOP_H
#define DISTOPT_PLANNER_INTRAOP_H

#include "distopt/Planner/Cluster.h"
#include "distopt/Planner/CostModel.h"
#include "distopt/Planner/PlanGraph.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace distopt::planner {

/// Sharding state of a tensor over the tensor-parallel group, as an integer:
/// >= 0: split along that dimension; kReplicated; kPartialSum, kPartialMax,
/// kPartialMean.
constexpr int64_t kReplicated = -1;
constexpr int64_t kPartialSum = -2;
constexpr int64_t kPartialMax = -3;
constexpr int64_t kPartialMean = -4;
/// "R", "S(d)", "P(sum)", "P(max)", "P(mean)".
std::string shardingStateName(int64_t state);

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll };
inline constexpr NamedValue<CollectiveKind> kCollectiveKinds[] = {
    {"all_reduce", CollectiveKind::AllReduce},
    {"all_gather", CollectiveKind::AllGather},
    {"reduce_scatter", CollectiveKind::ReduceScatter},
    {"all_to_all", CollectiveKind::AllToAll}};
inline llvm::StringRef collectiveKindName(CollectiveKind kind) {
  return nameOf(kCollectiveKinds, kind);
}

/// One collective the chosen strategies need, per micro-batch.
struct PlannedCollective {
  CollectiveKind kind;
  int64_t tensor = -1; ///< PlanGraph tensor id
  double bytes = 0;    ///< the tensor's full (unsplit) size in bytes
  bool backward = false;
  double time = 0;
};

/// How a segment's problem is solved: Auto uses exact variable elimination
/// (MinSum.h) where its tables stay within `eliminationLimit` entries and
/// the ILP elsewhere; the others force one (Elimination fails on a problem
/// too wide for it).
enum class IntraOpSolver { Auto, ILP, Elimination };
inline constexpr NamedValue<IntraOpSolver> kIntraOpSolvers[] = {
    {"auto", IntraOpSolver::Auto},
    {"ilp", IntraOpSolver::ILP},
    {"elimination", IntraOpSolver::Elimination}};

struct IntraOpOptions {
  IntraOpSolver solver = IntraOpSolver::Auto;
  /// Table entries variable elimination may fill in all before CBC takes
  /// the problem (about 10 ms of work; CBC takes 5-20 ms a problem).
  double eliminationLimit = 1e7;
  int64_t tensorParallel = 1;
  /// Micro-batch size divided by the graph's probe batch.
  double batchScale = 1;
  /// The micro-batch size itself (divisibility of the batch factor).
  int64_t microBatch = 1;
  double kCompute = 1, kForward = 1, kBackward = 0;
  double memoryWeight = 1e-18; ///< seconds per byte of local weights
  /// Ranks of the tensor-parallel group (t consecutive ranks from 0).
  const Cluster *cluster = nullptr;
  const EfficiencyProfile *efficiency = nullptr;
};

/// The strategy picked for one node: for compute ops the split factor of
/// its sharding rule (kReplicated: none) with the operand states it needs
/// and the result states it produces; for weights and constants the storage
/// state (factor = that state, one result state).
struct NodeChoice {
  int64_t node = -1;
  int64_t factor = kReplicated;
  llvm::SmallVector<int64_t, 4> operandStates;
  llvm::SmallVector<int64_t, 2> resultStates;
};

struct SegmentSolution {
  double objective = 0;
  /// Forward compute time of the local slices, per micro-batch.
  double forwardCompute = 0;
  /// Of forwardCompute, what selective recomputation reruns.
  double selectiveCompute = 0;
  double forwardComm = 0, backwardComm = 0;
  double localParams = 0;      ///< weight elements held by one device
  double storedBytes = 0;      ///< activations kept for the backward pass
  double selectiveDropped = 0; ///< of storedBytes, what selective drops
  double inputBytes = 0;       ///< the local boundary input
  double outputBytes = 0;      ///< the local boundary output
  /// The choice for every node of the segment and every weight or constant
  /// it uses from elsewhere (node indices of the segment solved: segments
  /// of one class share a solution; map with PlanGraph offsets).
  llvm::SmallVector<NodeChoice> choices;
  llvm::SmallVector<PlannedCollective> collectives;
  double solveSeconds = 0;
  bool usedILP = false; ///< CBC solved it (else variable elimination)
};

/// The boundary states worth considering for tensor `tensor` at these
/// options: replicated plus every evenly divisible split.
llvm::SmallVector<int64_t> boundaryStates(const PlanGraph &graph,
                                          int64_t tensor,
                                          const IntraOpOptions &options);

/// Solves segment `segment` with its input fixed to `inState` and its output
/// resharded to `outState` (std::nullopt: any state).
llvm::Expected<SegmentSolution>
solveSegment(const PlanGraph &graph, unsigned segment, int64_t inState,
             std::optional<int64_t> outState, const IntraOpOptions &options);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_INTRAOP_H
