//===- PlanGraph.h - the planner's view of a dopt function ------*- C++ -*-===//
//
// The planner works on a flat graph of one dopt function: nodes are ops in
// program order, tensors are their results and the function arguments.
// Two analyses run when it is built:
//  * batch analysis: which dimension of each tensor carries the batch
//    (propagated from dimension 0 of the batch-carrying arguments through
//    the sharding rules), so costs at any micro-batch size follow from one
//    import at a probe batch size: work and bytes of batch-carrying tensors
//    scale linearly with the batch, the rest (weights) does not;
//  * segmentation: the graph is cut wherever exactly one activation is live
//    (weights and constants do not count). Segments are the units the
//    pipeline search assigns to stages; segments with the same structure
//    (the layers of a transformer) share one class, so the intra-op search
//    solves each class once.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_PLANGRAPH_H
#define DISTOPT_PLANNER_PLANGRAPH_H

#include "distopt/Planner/CostModel.h"
#include "distopt/Planner/ShardingRules.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class Operation;
} // namespace mlir

namespace distopt::planner {

struct PlanTensor {
  mlir::Value value;
  llvm::SmallVector<int64_t, 4> shape; ///< at the probe batch
  double elemBytes = 0;                ///< under the cost options' precision
  int64_t batchDim = -1;               ///< -1: does not carry the batch
  /// Elements of dimension batchDim below the batch: 1 when the batch is
  /// the whole dimension (or its minor part), H for a [B*H] dimension that
  /// folds heads into the batch. The batch is then the atom of that size
  /// between (shape[batchDim] / (batch * batchInner)) above and
  /// batchInner below; a data-parallel split takes it, wherever it sits.
  int64_t batchInner = 1;
  int64_t producer = -1;               ///< node index; -1 for arguments
  unsigned resultIndex = 0;
  llvm::SmallVector<std::pair<int64_t, unsigned>> uses; ///< (node, operand)
  bool isFloat = false;

  double elements() const;
  /// Bytes at batch scale `scale` (micro-batch / probe batch).
  double bytes(double scale) const {
    return elements() * elemBytes * (batchDim >= 0 ? scale : 1.0);
  }
};

enum class NodeKind { Compute, Weight, Constant };

struct PlanNode {
  mlir::Operation *op = nullptr;
  NodeKind kind = NodeKind::Compute;
  OpCost cost;                 ///< at the probe batch
  bool batchScaled = false;    ///< FLOPs scale with the batch
  std::optional<OpShardingRule> rule;
  llvm::SmallVector<int64_t, 4> operands; ///< tensor ids
  llvm::SmallVector<int64_t, 2> results;  ///< tensor ids
  /// Both operands are activations (attention scores, context): selective
  /// recomputation drops such GEMM outputs too.
  bool activationGemm = false;
  /// Weights: read by ops of more than one segment (tied embeddings). Such
  /// weights are stored replicated, so every segment's choice agrees.
  bool sharedAcrossSegments = false;
  /// A sum or mean over the batch (batch norm's statistics in training
  /// form): split over the data axis, each replica reduces its samples and
  /// an all-reduce of the result (dataReduction's kind) completes it.
  std::optional<PartialKind> dataReduction;
};

struct Segment {
  int64_t begin = 0, end = 0; ///< node range [begin, end) in program order
  int64_t input = -1;  ///< the one activation entering (-1: none)
  int64_t output = -1; ///< the one activation leaving
  unsigned classId = 0;
  /// Human-readable description: the common prefix of its nodes' names.
  std::string label;
};

struct PlanGraph {
  std::vector<PlanNode> nodes;
  std::vector<PlanTensor> tensors;
  std::vector<Segment> segments;
  /// The function's results (tensor ids), in order.
  std::vector<int64_t> outputs;
  unsigned numClasses = 0;
  int64_t probeBatch = 1;
  CostOptions costOptions;

  /// The first node that mixes samples: it reads a batch-carrying tensor
  /// and makes a result in which the batch is no longer one block (a
  /// reshape that spreads it over two dimensions, a reduction or slice
  /// along it, an op without a rule), or -1. A model with such a node
  /// cannot split its batch: no data parallelism, no micro-batches.
  int64_t batchMixer = -1;
  std::string batchMixerWhy;
  /// The nodes that sum or average over the whole batch (PlanNode::
  /// dataReduction), in program order. They split over data-parallel
  /// replicas (an all-reduce of each result, priced per replica), but not
  /// into micro-batches: a statistic of a micro-batch is not the batch's.
  std::vector<int64_t> batchReductions;
  std::string batchReductionWhy; ///< the first one, for messages

  /// Parameters (weight elements) in the whole function.
  double parameters = 0;
  /// Forward FLOPs of one sample.
  double forwardFlopsPerSample() const;
};

/// The dimension of argument `arg` of `func` that carries the batch, or -1:
/// where the argument has the module's `dopt.batch_symbol` (the importer's
/// choice of symbolic dimension); in IR without one, dimension 0 of the
/// arguments left symbolic there (of every argument when none is).
int64_t argumentBatchDim(mlir::Operation *func, unsigned arg);

/// Builds the graph of `func` (a func.func holding dopt ops). The batch is
/// carried by the arguments whose argumentBatchDim has size `probeBatch`.
/// Errors: a function that is not a single straight-line block, dynamic
/// shapes, or no argument carrying the batch.
llvm::Expected<PlanGraph> buildPlanGraph(mlir::Operation *func,
                                         int64_t probeBatch,
                                         const CostOptions &options);

/// The same graph on another import of the same model (e.g. at the real
/// batch instead of the probe batch): the analysis (batch dimensions,
/// segments, classes) is kept, ops and values are rebound node for node.
/// Errors when the two functions differ in their ops.
llvm::Expected<PlanGraph> rebindPlanGraph(const PlanGraph &graph,
                                          mlir::Operation *func);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_PLANGRAPH_H
