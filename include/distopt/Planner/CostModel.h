//===- CostModel.h - analytical cost model for the planner ------*- C++ -*-===//
//
// Three parts, each a set of documented formulas (docs/cost-model.md):
//  * compute: FLOPs and bytes per dopt op from its static shapes, turned into
//    time by a roofline with per-op-class efficiency factors;
//  * communication: α–β time per collective and algorithm on a device group
//    of a Cluster, with β picked by where the group sits (one node or many);
//  * memory: bytes per device for weights, gradients, optimizer state and the
//    activations a pipeline schedule keeps alive, with recomputation.
// Everything works from shapes alone; no weight data is read.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_COSTMODEL_H
#define DISTOPT_PLANNER_COSTMODEL_H

#include "distopt/Planner/Cluster.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace mlir {
class DialectRegistry;
class Operation;
} // namespace mlir

namespace distopt::planner {

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

/// Op classes with their own achievable-efficiency factors.
enum class OpClass : unsigned {
  Gemm = 0,      ///< matmul, gemm
  Conv,          ///< conv
  Elementwise,   ///< arithmetic, comparisons, activations, where, cast
  Normalization, ///< layer_norm, batch_norm
  Softmax,       ///< softmax, log_softmax
  Reduction,     ///< reduce_*, global_avg_pool
  Pooling,       ///< max_pool, avg_pool
  DataMovement,  ///< transpose, concat, split, slice, gather, expand, pad
  None,          ///< free: weight, constant, reshape, shape, non-dopt ops
};
constexpr unsigned kNumOpClasses = 8; ///< classes with factors (not None)

/// "gemm", "conv", "elementwise", "normalization", "softmax", "reduction",
/// "pooling", "data_movement", "none".
llvm::StringRef opClassName(OpClass cls);
/// Inverse of opClassName for the classes with factors.
std::optional<OpClass> parseOpClass(llvm::StringRef name);

/// Work of one op (or a sum of ops) on one device.
struct OpCost {
  double flops = 0;
  double bytesRead = 0;
  double bytesWritten = 0;
  OpClass opClass = OpClass::None;
  /// The dtype whose peak the FLOPs run at.
  DType dtype = DType::FP32;

  double bytes() const { return bytesRead + bytesWritten; }
};

/// How IR types map onto the cost model.
struct CostOptions {
  /// `--precision`: when set, every floating-point tensor is costed with
  /// this dtype's element size and its FLOPs at this dtype's peak. When
  /// unset: f32 → fp32, f16 → fp16, bf16 → bf16, f64 → fp32 peak at 8 bytes
  /// (cluster specs carry no fp64 figure), integer ops → fp32 peak.
  std::optional<DType> precision;
};

/// Attaches each op's formula to it (dopt::CostOpInterface); a context that
/// plans registers it (planner::registerOpModels).
void registerCostModels(mlir::DialectRegistry &registry);

/// FLOPs and bytes of one op from its operand/result shapes: elementwise ops
/// by their FLOPs per element, other dopt ops through
/// dopt::CostOpInterface, the rest of them as data movement (their bytes).
/// See docs/cost-model.md for the per-op formulas. Ops of other dialects
/// (and dopt.weight, dopt.constant, dopt.reshape, dopt.shape) cost nothing.
OpCost estimateOpCost(mlir::Operation *op, const CostOptions &options = {});

/// estimateOpCost for every op nested under `root`, in walk order, skipping
/// ops that cost nothing. Under a function root, a call counts its callee's
/// ops once per call; a loop of constant trips counts its body's per trip.
llvm::SmallVector<std::pair<mlir::Operation *, OpCost>>
estimateCosts(mlir::Operation *root, const CostOptions &options = {});

/// Number of parameters: elements of all dopt.weight results under `root`.
double countParameters(mlir::Operation *root);

/// Achievable fraction of peak, per op class (and dtype for compute), plus
/// the fraction of link bandwidth collectives achieve. The defaults are
/// documented, and checked against published runs, in docs/cost-model.md;
/// a profile file overrides any of them.
struct EfficiencyProfile {
  /// compute[class][dtype], in (0, 1].
  std::array<std::array<double, kNumDTypes>, kNumOpClasses> compute;
  /// memory[class], in (0, 1].
  std::array<double, kNumOpClasses> memory;
  /// Achieved fraction of the intra-/inter-node link bandwidth.
  double intraNodeLink;
  double interNodeLink;

  EfficiencyProfile(); ///< the documented defaults
  double computeEfficiency(OpClass cls, DType dtype) const;
  double memoryEfficiency(OpClass cls) const;
};

/// Reads a profile (YAML) over `base`; keys left out keep base's values:
///
///   op_classes:
///     gemm:
///       compute: {fp32: 0.8, tf32: 0.7, bf16: 0.7, fp16: 0.7}
///       memory: 0.85
///     elementwise: {memory: 0.9}
///   links: {intra_node: 0.8, inter_node: 0.9}
///
/// Values must lie in (0, 1]; errors carry the YAML line like parseCluster's.
llvm::Expected<EfficiencyProfile>
parseEfficiencyProfile(llvm::StringRef yaml, llvm::StringRef bufferName,
                       const EfficiencyProfile &base = EfficiencyProfile());

/// Roofline time on one device:
///   max(flops / (peak(dtype) · eff.compute[class][dtype]),
///       (bytesRead + bytesWritten) / (memoryBandwidth · eff.memory[class])).
/// OpClass::None costs 0.
double computeTime(const OpCost &cost, const DeviceSpec &device,
                   const EfficiencyProfile &eff = EfficiencyProfile());

/// Work of the backward pass of an op with forward cost `forward`: about
/// twice the forward FLOPs (input gradient and weight gradient each cost one
/// forward's worth) and twice its bytes.
OpCost backwardCost(const OpCost &forward);

/// Activation recomputation policy (Korthikanti et al. 2022).
enum class Recompute { Off, Selective, Full };
inline constexpr NamedValue<Recompute> kRecomputes[] = {
    {"off", Recompute::Off},
    {"selective", Recompute::Selective},
    {"full", Recompute::Full}};
inline llvm::StringRef recomputeName(Recompute r) {
  return nameOf(kRecomputes, r);
}

/// FLOPs of one training step for a model whose forward pass costs
/// `forwardFlops`: forward + backward (2×) = 3·F; full recomputation reruns
/// the forward once more (4·F); selective recomputation reruns only the
/// recomputed part, whose forward FLOPs are `selectiveRecomputeFlops`
/// (3·F + that).
double trainingStepFlops(double forwardFlops, Recompute recompute,
                         double selectiveRecomputeFlops = 0);

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

/// α (s) and β (bytes/s) of the α–β model.
struct LinkParams {
  double alpha = 0;
  double beta = 0;
};

enum class CollectiveAlgo { Ring, Tree, Hierarchical };
inline constexpr NamedValue<CollectiveAlgo> kCollectiveAlgos[] = {
    {"ring", CollectiveAlgo::Ring},
    {"tree", CollectiveAlgo::Tree},
    {"hierarchical", CollectiveAlgo::Hierarchical}};
inline llvm::StringRef collectiveAlgoName(CollectiveAlgo algo) {
  return nameOf(kCollectiveAlgos, algo);
}

/// Pure α–β formulas for n ranks and S bytes (see each function).
/// All return 0 for n <= 1.
/// Ring all-reduce: 2(n−1)/n · S/β + 2(n−1)·α.
double ringAllReduceTime(int64_t n, double bytes, LinkParams link);
/// Binary-tree all-reduce (reduce to the root, then broadcast; each of the
/// 2·⌈log2 n⌉ levels sends the whole buffer): 2·⌈log2 n⌉·(α + S/β).
double treeAllReduceTime(int64_t n, double bytes, LinkParams link);
/// Ring all-gather; S is the gathered (output) size, each rank owns S/n:
/// (n−1)/n · S/β + (n−1)·α.
double ringAllGatherTime(int64_t n, double bytes, LinkParams link);
/// Ring reduce-scatter; S is the input size per rank, each keeps S/n:
/// (n−1)/n · S/β + (n−1)·α.
double ringReduceScatterTime(int64_t n, double bytes, LinkParams link);
/// Pairwise all-to-all; S is the data each rank holds, (n−1)/n of which
/// leaves it: (n−1)/n · S/β + (n−1)·α.
double allToAllTime(int64_t n, double bytes, LinkParams link);
/// One message: α + S/β.
double pointToPointTime(double bytes, LinkParams link);

/// A set of devices taking part in a collective, by global rank (node-major:
/// node = rank / devicesPerNode).
struct DeviceGroup {
  llvm::SmallVector<int64_t> ranks;

  /// {first, first + stride, ..., first + (count−1)·stride}.
  static DeviceGroup range(int64_t first, int64_t count, int64_t stride = 1);
  int64_t size() const { return static_cast<int64_t>(ranks.size()); }
};

/// Where a group sits.
struct GroupPlacement {
  int64_t size = 0;
  int64_t nodes = 0;      ///< distinct nodes touched
  int64_t maxPerNode = 0; ///< most devices of the group on one node
  bool uniform = true;    ///< every touched node holds maxPerNode devices
};
GroupPlacement placementOf(const Cluster &cluster, const DeviceGroup &group);

/// Checks that every rank exists in the cluster and appears once.
llvm::Error verifyGroup(const Cluster &cluster, const DeviceGroup &group);

/// The link a collective over `group` runs on:
///  * one node: α = intra latency, β = intra bandwidth · eff.intraNodeLink;
///  * several nodes: α = inter latency, β = min(intra β, inter-node
///    bandwidth · eff.interNodeLink / max(maxPerNode, nics)): the node's
///    network is shared by the group's devices on that node, and one device
///    drives at most one NIC.
/// Pass `nominal` (all efficiencies 1) for the raw link figures.
LinkParams linkFor(const Cluster &cluster, const GroupPlacement &placement,
                   const EfficiencyProfile &eff);
/// An EfficiencyProfile whose link efficiencies are 1 (compute and memory
/// factors are the defaults): collectives at nominal link bandwidth.
const EfficiencyProfile &nominalLinks();

/// All-reduce of `bytes` (per rank) over `group`.
///  * Ring, Tree: the formulas above on linkFor(group).
///  * Hierarchical (g = maxPerNode devices on each of k nodes):
///      ring reduce-scatter inside the node on S (intra link)
///    + ring all-reduce across the k nodes on S/g, the g shards in parallel
///      (α = inter latency, β = inter bandwidth · eff / max(g, nics))
///    + ring all-gather inside the node on S (intra link).
///    On one node it equals the ring; groups with uneven per-node counts are
///    costed as if every node held maxPerNode.
double allReduceTime(const Cluster &cluster, const DeviceGroup &group,
                     int64_t bytes, CollectiveAlgo algo,
                     const EfficiencyProfile &eff = nominalLinks());
/// The fastest algorithm for this all-reduce and its time.
std::pair<CollectiveAlgo, double>
bestAllReduce(const Cluster &cluster, const DeviceGroup &group, int64_t bytes,
              const EfficiencyProfile &eff = nominalLinks());
double allGatherTime(const Cluster &cluster, const DeviceGroup &group,
                     int64_t bytes,
                     const EfficiencyProfile &eff = nominalLinks());
double reduceScatterTime(const Cluster &cluster, const DeviceGroup &group,
                         int64_t bytes,
                         const EfficiencyProfile &eff = nominalLinks());
double allToAllTime(const Cluster &cluster, const DeviceGroup &group,
                    int64_t bytes,
                    const EfficiencyProfile &eff = nominalLinks());
/// One synchronous parameter-server exchange: every worker pushes its
/// gradient's piece to each server and pulls the updated piece back.
/// Servers are ranks [0, K) (K = shardBytes.size()), workers the `workers`
/// ranks after them. Server s carries its shard to and from each worker
/// over its own link, one message after another (full duplex: pushes and
/// pulls overlap); a worker carries the whole gradient out and the weights
/// in. The slowest link bounds the exchange -- the bottleneck a ring
/// all-reduce avoids by spreading the traffic over every link.
double parameterServerExchangeTime(const Cluster &cluster,
                                   llvm::ArrayRef<double> shardBytes,
                                   int64_t workers,
                                   const EfficiencyProfile &eff);
/// A message from `src` to `dst` while `concurrentPerNode` devices of the
/// sending node send across nodes at the same time (pipeline stages: the
/// stage's devices on that node). Same node: intra link.
double pointToPointTime(const Cluster &cluster, int64_t src, int64_t dst,
                        int64_t bytes, int64_t concurrentPerNode = 1,
                        const EfficiencyProfile &eff = nominalLinks());

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// The optimizers distopt trains with: one list, the names `distopt plan
/// --optimizer` and `distopt compile --optimizer` take.
enum class Optimizer { SGD, Momentum, Adam, AdamW };
inline constexpr NamedValue<Optimizer> kOptimizers[] = {
    {"sgd", Optimizer::SGD},
    {"momentum", Optimizer::Momentum},
    {"adam", Optimizer::Adam},
    {"adamw", Optimizer::AdamW}};
inline llvm::StringRef optimizerName(Optimizer opt) {
  return nameOf(kOptimizers, opt);
}
inline std::optional<Optimizer> parseOptimizer(llvm::StringRef name) {
  return valueNamed(kOptimizers, name);
}
/// The error for an --optimizer not in the list: "--optimizer: unknown
/// optimizer 'lion' (expected sgd, momentum, adam or adamw)".
std::string unknownOptimizer(llvm::StringRef name);

/// Bytes per parameter of the optimizer's state (ZeRO paper, §3.1, K):
///  * Adam and AdamW: fp32 momentum + variance (8); in 16-bit mixed
///    precision also the fp32 master weights: 12.
///  * Momentum: 4 (+4 master copy in 16-bit) ; SGD: 0 (+4 master copy).
double optimizerStateBytesPerParam(Optimizer opt, DType precision);

/// Memory of the model state on one device holding `params` parameters.
struct ModelStateMemory {
  double weights = 0;
  double gradients = 0;
  double optimizerState = 0;
  double total() const { return weights + gradients + optimizerState; }
};

/// weights = params · bytes(precision); when training also gradients =
/// params · bytes(precision) and optimizer state = params ·
/// optimizerStateBytesPerParam. ZeRO stage s over `dataParallel` replicas
/// divides the optimizer state (s ≥ 1), gradients (s ≥ 2) and weights
/// (s = 3) by dataParallel. Adam in 16-bit: 2 + 2 + 12 = 16 bytes/param.
ModelStateMemory modelStateMemory(double params, DType precision, Optimizer opt,
                                  bool training, int zeroStage = 0,
                                  int64_t dataParallel = 1);

/// Activation bytes of one layer for one micro-batch.
struct LayerActivation {
  /// Bytes kept from forward to backward with no recomputation.
  double stored = 0;
  /// Bytes of the layer's input: what full recomputation keeps.
  double input = 0;
  /// Of `stored`, the bytes selective recomputation drops (recomputed
  /// instead: attention scores, softmax, dropout masks).
  double selectiveDropped = 0;
};

/// Activations of a transformer layer in 16-bit (Korthikanti et al.,
/// "Reducing Activation Recomputation in Large Transformer Models", 2022,
/// §4): seq s, micro-batch b, hidden h, heads a, tensor parallel t:
///  * tensor parallel:           stored = s·b·h·(10 + 24/t + 5·a·s/(h·t))
///  * + sequence parallel:       stored = s·b·h/t·(34 + 5·a·s/h)
///  * selectiveDropped = 5·a·s²·b/t (the 5as/h term) in both;
///  * input = 2·s·b·h (2·s·b·h/t with sequence parallelism).
LayerActivation transformerLayerActivation(int64_t seq, int64_t microBatch,
                                           int64_t hidden, int64_t heads,
                                           int64_t tensorParallel,
                                           bool sequenceParallel);

enum class PipelineSchedule { GPipe, OneFOneB };
inline constexpr NamedValue<PipelineSchedule> kSchedules[] = {
    {"1f1b", PipelineSchedule::OneFOneB}, {"gpipe", PipelineSchedule::GPipe}};
inline llvm::StringRef pipelineScheduleName(PipelineSchedule s) {
  return nameOf(kSchedules, s);
}

/// Micro-batches whose activations stage `stageIndex` (0-based) of `stages`
/// holds at its peak: GPipe all m; 1F1B min(m, stages − stageIndex).
int64_t microbatchesInFlight(PipelineSchedule schedule, int64_t stages,
                             int64_t stageIndex, int64_t microbatches);

/// Bytes one micro-batch keeps alive in the layers of a stage:
///  * Off:       Σ stored
///  * Selective: Σ (stored − selectiveDropped)
///  * Full:      Σ input
double stashedActivationBytes(llvm::ArrayRef<LayerActivation> layers,
                              Recompute recompute);
/// Extra bytes while the backward of one layer runs: with full
/// recomputation one layer's activations are rebuilt at a time,
/// max stored; otherwise 0 (selective recomputation rebuilds a part of
/// what is already counted).
double recomputeWorkspaceBytes(llvm::ArrayRef<LayerActivation> layers,
                               Recompute recompute);
/// Peak activation bytes of a stage:
///   microbatchesInFlight · stashedActivationBytes + recomputeWorkspaceBytes.
double stageActivationBytes(llvm::ArrayRef<LayerActivation> layers,
                            Recompute recompute, PipelineSchedule schedule,
                            int64_t stages, int64_t stageIndex,
                            int64_t microbatches);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_COSTMODEL_H
