//===- IntraOp.cpp - intra-op (tensor-parallel) sharding search -----------===//

#include "distopt/Planner/IntraOp.h"
#include "distopt/Planner/MinSum.h"
#include "distopt/Planner/Reshard.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include "coin/Cbc_C_Interface.h"

#include <chrono>
#include <map>
#include <cmath>
#include <limits>

using namespace distopt::planner;
using llvm::SmallVector;

std::string distopt::planner::shardingStateName(int64_t state) {
  if (state == kReplicated)
    return "R";
  if (state == kPartialSum)
    return "P(sum)";
  if (state == kPartialMax)
    return "P(max)";
  if (state == kPartialMean)
    return "P(mean)";
  return "S(" + std::to_string(state) + ")";
}

namespace {

bool isPartial(int64_t s) {
  return s == kPartialSum || s == kPartialMax || s == kPartialMean;
}

struct Strategy {
  int64_t factor = kReplicated; ///< compute: split factor; source: state
  SmallVector<int64_t, 4> req;  ///< required operand states
  SmallVector<int64_t, 2> out;  ///< result states
  double unary = 0;             ///< objective contribution of the node
  double forwardTime = 0;
};

struct LocalNode {
  int64_t node = -1; ///< PlanGraph node, -1 for pseudo sources
  bool needsGrad = false; ///< gradients flow into it
  SmallVector<Strategy, 4> strategies;
};

struct Edge {
  unsigned producer, consumer; ///< local node indices
  unsigned result, operand;
  int64_t tensor;
  bool gradient; ///< a gradient flows back along it
};

/// Times of the collectives of one tensor size on the TP group.
struct Resharder {
  const IntraOpOptions &opts;
  DeviceGroup group;
  llvm::DenseMap<uint64_t, std::array<double, 4>> cache;

  explicit Resharder(const IntraOpOptions &o)
      : opts(o), group(DeviceGroup::range(0, o.tensorParallel)) {}

  const std::array<double, 4> &times(double bytes) {
    uint64_t key;
    std::memcpy(&key, &bytes, sizeof(key));
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;
    const Cluster &c = *opts.cluster;
    const EfficiencyProfile &eff = *opts.efficiency;
    auto b = static_cast<int64_t>(std::llround(bytes));
    std::array<double, 4> t;
    t[static_cast<unsigned>(CollectiveKind::AllReduce)] =
        bestAllReduce(c, group, b, eff).second;
    t[static_cast<unsigned>(CollectiveKind::AllGather)] =
        allGatherTime(c, group, b, eff);
    t[static_cast<unsigned>(CollectiveKind::ReduceScatter)] =
        reduceScatterTime(c, group, b, eff);
    t[static_cast<unsigned>(CollectiveKind::AllToAll)] = allToAllTime(
        c, group, static_cast<int64_t>(std::llround(bytes / group.size())),
        eff);
    return cache.try_emplace(key, t).first->second;
  }

  /// The collectives that turn `from` into `to` on the tensor-parallel
  /// group: those of the partitioner's steps (reshardSteps) on a one-axis
  /// grid, memoised (the search asks for the same few pairs many times).
  const SmallVector<CollectiveKind, 2> &collectives(int64_t from, int64_t to) {
    auto key = std::make_pair(from, to);
    auto it = collectiveCache.find(key);
    if (it != collectiveCache.end())
      return it->second;
    SmallVector<CollectiveKind, 2> kinds;
    if (from != to) {
      auto layout = [](int64_t state) {
        GridLayout l;
        l.partial = isPartial(state);
        if (state >= 0) {
          l.axes.resize(state + 1);
          l.axes[state].push_back(kAxis);
        }
        return l;
      };
      for (const ReshardStep &step :
           reshardSteps(layout(from), layout(to), kAxis))
        if (std::optional<CollectiveKind> k = step.collective())
          kinds.push_back(*k);
    }
    return collectiveCache.try_emplace(key, std::move(kinds)).first->second;
  }
  llvm::DenseMap<std::pair<int64_t, int64_t>, SmallVector<CollectiveKind, 2>>
      collectiveCache;

  /// The collective that turns `from` into `to`, if any (on one axis there
  /// is at most one).
  std::optional<CollectiveKind> kind(int64_t from, int64_t to) {
    const SmallVector<CollectiveKind, 2> &kinds = collectives(from, to);
    if (kinds.empty())
      return std::nullopt;
    return kinds.front();
  }

  double time(int64_t from, int64_t to, double bytes) {
    double t = 0;
    for (CollectiveKind k : collectives(from, to))
      t += times(bytes)[static_cast<unsigned>(k)];
    return t;
  }

  /// The group's axis, as the layouts name it.
  static constexpr int16_t kAxis = 0;
};

/// Gradient state at a consumer's operand: what the consumer's backward
/// produces for it.
int64_t gradientState(const Strategy &consumer, unsigned operand) {
  if (consumer.factor == kReplicated)
    return kReplicated;
  int64_t req = consumer.req[operand];
  return req >= 0 ? req : kPartialSum;
}

/// The gradient state a producer needs for its result in `state`.
int64_t neededGradient(int64_t state) {
  return isPartial(state) ? kReplicated : state;
}

struct Problem {
  const PlanGraph &g;
  const Segment &seg;
  const IntraOpOptions &opts;
  Resharder resharder;
  std::vector<LocalNode> nodes;
  SmallVector<Edge> edges;
  /// (tensor id) → (local node, result index)
  llvm::DenseMap<int64_t, std::pair<unsigned, unsigned>> producerOf;
  llvm::DenseMap<int64_t, unsigned> sourceOf; ///< graph node → local
  std::optional<unsigned> outputPseudo;
  SmallVector<unsigned> extraOutputs; ///< pseudo consumers of other outputs
  bool isOutputPseudo(unsigned v) const {
    return v == outputPseudo || llvm::is_contained(extraOutputs, v);
  }

  Problem(const PlanGraph &g, const Segment &seg, const IntraOpOptions &o)
      : g(g), seg(seg), opts(o), resharder(o) {}

  int64_t t() const { return opts.tensorParallel; }

  double factorSize(const PlanNode &node, int64_t f) const {
    // The batch factor is as large as the micro-batch.
    for (auto [r, tid] : llvm::enumerate(node.results)) {
      const PlanTensor &tensor = g.tensors[tid];
      if (tensor.batchDim >= 0 &&
          node.rule->resultDims[r][tensor.batchDim] == f)
        return static_cast<double>(opts.microBatch);
    }
    for (auto [i, tid] : llvm::enumerate(node.operands)) {
      const PlanTensor &tensor = g.tensors[tid];
      if (tensor.batchDim >= 0 &&
          node.rule->operandDims[i][tensor.batchDim] == f)
        return static_cast<double>(opts.microBatch);
    }
    return static_cast<double>(node.rule->factors[f].size);
  }

  double localBytes(int64_t tensor, int64_t state) const {
    double b = g.tensors[tensor].bytes(opts.batchScale);
    return state >= 0 ? b / t() : b;
  }

  void addComputeStrategies(LocalNode &ln) {
    const PlanNode &node = g.nodes[ln.node];
    auto finish = [&](Strategy s) {
      double flops = node.cost.flops *
                     (node.batchScaled ? opts.batchScale : 1.0) /
                     (s.factor == kReplicated ? 1.0 : t());
      OpCost local;
      local.flops = flops;
      local.opClass = node.cost.opClass;
      local.dtype = node.cost.dtype;
      for (auto [i, tid] : llvm::enumerate(node.operands))
        local.bytesRead += localBytes(tid, s.req[i]);
      for (auto [r, tid] : llvm::enumerate(node.results))
        local.bytesWritten += localBytes(tid, s.out[r]);
      s.forwardTime = computeTime(local, opts.cluster->device, *opts.efficiency);
      s.unary = opts.kCompute * s.forwardTime;
      ln.strategies.push_back(std::move(s));
    };
    Strategy rep;
    rep.req.assign(node.operands.size(), kReplicated);
    rep.out.assign(node.results.size(), kReplicated);
    finish(rep);
    if (!node.rule || t() == 1)
      return;
    const OpShardingRule &rule = *node.rule;
    for (auto [f, factor] : llvm::enumerate(rule.factors)) {
      if (factor.kind == FactorKind::NeedReplication)
        continue;
      double size = factorSize(node, f);
      if (size < t() || std::fmod(size, static_cast<double>(t())) != 0)
        continue;
      Strategy s;
      s.factor = static_cast<int64_t>(f);
      bool used = false, valid = true;
      for (unsigned i = 0; i < node.operands.size(); ++i) {
        int64_t d = rule.operandDim(i, f);
        s.req.push_back(d >= 0 ? d : kReplicated);
        used |= d >= 0;
      }
      for (unsigned r = 0; r < node.results.size(); ++r) {
        int64_t d = rule.resultDim(r, f);
        if (d >= 0) {
          s.out.push_back(d);
          used = true;
        } else if (factor.kind == FactorKind::Reduction) {
          s.out.push_back(factor.partial == PartialKind::Max    ? kPartialMax
                          : factor.partial == PartialKind::Mean ? kPartialMean
                                                                : kPartialSum);
        } else {
          valid = false;
        }
      }
      if (used && valid)
        finish(std::move(s));
    }
  }

  void addSourceStrategies(LocalNode &ln, int64_t tensor, bool weight) {
    const PlanTensor &tt = g.tensors[tensor];
    auto add = [&](int64_t state) {
      Strategy s;
      s.factor = state;
      s.out.push_back(state);
      if (weight)
        s.unary = opts.memoryWeight * localBytes(tensor, state);
      ln.strategies.push_back(std::move(s));
    };
    add(kReplicated);
    if (!weight || t() == 1)
      return;
    if (tt.producer >= 0 && g.nodes[tt.producer].sharedAcrossSegments)
      return; // one storage for every segment: replicated
    for (auto [d, size] : llvm::enumerate(tt.shape))
      if (size > 1 && size % t() == 0)
        add(static_cast<int64_t>(d));
  }

  unsigned addPseudo(int64_t tensor, int64_t state, bool needsGrad) {
    LocalNode ln;
    ln.needsGrad = needsGrad;
    Strategy s;
    s.factor = state;
    s.out.push_back(state);
    ln.strategies.push_back(std::move(s));
    nodes.push_back(std::move(ln));
    unsigned id = nodes.size() - 1;
    producerOf[tensor] = {id, 0};
    return id;
  }

  void build(int64_t inState, std::optional<int64_t> outState) {
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      const PlanNode &node = g.nodes[i];
      LocalNode ln;
      ln.node = i;
      if (node.kind == NodeKind::Compute) {
        ln.needsGrad = true;
        addComputeStrategies(ln);
      } else {
        ln.needsGrad = node.kind == NodeKind::Weight;
        addSourceStrategies(ln, node.results[0], node.kind == NodeKind::Weight);
      }
      nodes.push_back(std::move(ln));
      unsigned id = nodes.size() - 1;
      sourceOf[i] = id;
      for (auto [r, tid] : llvm::enumerate(node.results))
        producerOf[tid] = {id, static_cast<unsigned>(r)};
    }
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      const PlanNode &node = g.nodes[i];
      if (node.kind != NodeKind::Compute)
        continue;
      unsigned consumer = sourceOf[i];
      for (auto [operand, tid] : llvm::enumerate(node.operands)) {
        if (!producerOf.count(tid)) {
          const PlanTensor &tensor = g.tensors[tid];
          if (tid == seg.input) {
            addPseudo(tid, inState, /*needsGrad=*/true);
          } else if (tensor.producer >= 0 &&
                     g.nodes[tensor.producer].kind != NodeKind::Compute) {
            const PlanNode &src = g.nodes[tensor.producer];
            LocalNode ln;
            ln.node = tensor.producer;
            ln.needsGrad = src.kind == NodeKind::Weight;
            addSourceStrategies(ln, tid, src.kind == NodeKind::Weight);
            nodes.push_back(std::move(ln));
            sourceOf[tensor.producer] = nodes.size() - 1;
            producerOf[tid] = {static_cast<unsigned>(nodes.size() - 1), 0};
          } else {
            // Model inputs and tensors computed from weights alone in an
            // earlier segment: available replicated.
            addPseudo(tid, kReplicated, /*needsGrad=*/false);
          }
        }
        auto [producer, result] = producerOf[tid];
        const PlanTensor &tensor = g.tensors[tid];
        edges.push_back({producer, consumer, result,
                         static_cast<unsigned>(operand), tid,
                         tensor.isFloat && nodes[producer].needsGrad});
      }
    }
    // Other model outputs made here are delivered replicated (a partial or
    // split output would be priced as free otherwise).
    for (int64_t out : g.outputs) {
      if (out == seg.output || !producerOf.count(out))
        continue;
      LocalNode ln;
      Strategy s;
      s.factor = kReplicated;
      s.req.push_back(kReplicated);
      ln.strategies.push_back(std::move(s));
      nodes.push_back(std::move(ln));
      auto [producer, result] = producerOf[out];
      edges.push_back({producer, static_cast<unsigned>(nodes.size() - 1),
                       result, 0, out, g.tensors[out].isFloat});
      extraOutputs.push_back(nodes.size() - 1);
    }
    if (outState && seg.output >= 0 && producerOf.count(seg.output)) {
      // A pseudo consumer that needs the output in outState.
      LocalNode ln;
      Strategy s;
      s.factor = kReplicated;
      s.req.push_back(*outState);
      ln.strategies.push_back(std::move(s));
      nodes.push_back(std::move(ln));
      outputPseudo = nodes.size() - 1;
      auto [producer, result] = producerOf[seg.output];
      edges.push_back({producer, *outputPseudo, result, 0, seg.output,
                       g.tensors[seg.output].isFloat});
    }
  }

  /// Forward + backward resharding cost of an edge for a pair of strategies.
  double edgeCost(const Edge &e, unsigned sp, unsigned sc) {
    const Strategy &p = nodes[e.producer].strategies[sp];
    const Strategy &c = nodes[e.consumer].strategies[sc];
    int64_t from = p.out[e.result], to = c.req[e.operand];
    double bytes = g.tensors[e.tensor].bytes(opts.batchScale);
    double cost = opts.kForward * resharder.time(from, to, bytes);
    if (e.gradient && opts.kBackward != 0) {
      int64_t grad =
          isOutputPseudo(e.consumer) ? to : gradientState(c, e.operand);
      cost += opts.kBackward *
              resharder.time(grad, neededGradient(from), bytes);
    }
    return cost;
  }

  bool usedILP = false;

  /// The objective of a full choice, from the costs themselves.
  double evaluate(llvm::ArrayRef<unsigned> choice) {
    double total = 0;
    for (unsigned v = 0; v < nodes.size(); ++v)
      total += nodes[v].strategies[choice[v]].unary;
    for (const Edge &e : edges)
      total += edgeCost(e, choice[e.producer], choice[e.consumer]);
    return total;
  }

  /// Solves; returns the chosen strategy per local node.
  llvm::Expected<SmallVector<unsigned>> solve(double &objective) {
    SmallVector<unsigned> choice(nodes.size(), 0);
    SmallVector<double> unaryExtra; // per (node, strategy) flattened
    SmallVector<unsigned> offset(nodes.size() + 1, 0);
    for (unsigned v = 0; v < nodes.size(); ++v)
      offset[v + 1] = offset[v] + nodes[v].strategies.size();
    SmallVector<double> unary(offset.back(), 0);
    for (unsigned v = 0; v < nodes.size(); ++v)
      for (auto [s, st] : llvm::enumerate(nodes[v].strategies))
        unary[offset[v] + s] = st.unary;
    double constant = 0;
    SmallVector<const Edge *> pairEdges;
    for (const Edge &e : edges) {
      size_t np = nodes[e.producer].strategies.size();
      size_t nc = nodes[e.consumer].strategies.size();
      if (np == 1 && nc == 1)
        constant += edgeCost(e, 0, 0);
      else if (np == 1)
        for (unsigned s = 0; s < nc; ++s)
          unary[offset[e.consumer] + s] += edgeCost(e, 0, s);
      else if (nc == 1)
        for (unsigned s = 0; s < np; ++s)
          unary[offset[e.producer] + s] += edgeCost(e, s, 0);
      else
        pairEdges.push_back(&e);
    }
    // Variable elimination is exact and, on the narrow graphs of neural
    // networks (chains, residual blocks, attention's Q, K and V rejoining),
    // far cheaper than an ILP solve; CBC takes what is too wide for it.
    // Each edge's costs, [producer strategy * |consumer| + consumer's]:
    // computed once for either solver.
    std::vector<std::vector<double>> pairCost(pairEdges.size());
    for (auto [i, e] : llvm::enumerate(pairEdges)) {
      unsigned np = nodes[e->producer].strategies.size();
      unsigned nc = nodes[e->consumer].strategies.size();
      pairCost[i].resize(np * nc);
      for (unsigned a = 0; a < np; ++a)
        for (unsigned b = 0; b < nc; ++b)
          pairCost[i][a * nc + b] = edgeCost(*e, a, b);
    }
    if (opts.solver != IntraOpSolver::ILP) {
      PairwiseProblem pw;
      pw.unary.resize(nodes.size());
      for (unsigned v = 0; v < nodes.size(); ++v)
        pw.unary[v].assign(unary.begin() + offset[v],
                           unary.begin() + offset[v + 1]);
      for (auto [i, e] : llvm::enumerate(pairEdges))
        pw.pairs.push_back({e->producer, e->consumer, pairCost[i]});
      if (auto exact = solveByElimination(pw, opts.eliminationLimit,
                                          objective)) {
        objective += constant;
        usedILP = false;
        return *exact;
      }
    }
    if (opts.solver == IntraOpSolver::Elimination)
      return llvm::createStringError(
          "the segment's sharding problem is too wide for variable "
          "elimination");
    usedILP = true;

    // Costs are seconds (1e-7 .. 1e-1): scale them so the largest is 1e3,
    // or CBC's absolute tolerances would treat real differences as noise.
    double largest = 0;
    for (unsigned v = 0; v < nodes.size(); ++v)
      if (nodes[v].strategies.size() > 1)
        for (unsigned st = 0; st < nodes[v].strategies.size(); ++st)
          largest = std::max(largest, std::fabs(unary[offset[v] + st]));
    for (const std::vector<double> &costs : pairCost)
      for (double c : costs)
        largest = std::max(largest, std::fabs(c));
    const double scale = largest > 0 ? 1e3 / largest : 1.0;

    // The model is built in compressed-column form and loaded at once:
    // CBC's Cbc_addCol/Cbc_addRow copy the whole matrix on every call,
    // which made a wide segment's ILP (an unrolled recurrent network's,
    // thousands of rows) quadratic to build.
    // x columns: one per (node, strategy) of multi-strategy nodes.
    SmallVector<double> columnCost;
    SmallVector<std::pair<int, double>> entries; // (row, coefficient)
    SmallVector<int> entryColumn;
    SmallVector<double> rowBound;
    auto addColumn = [&](double cost) {
      columnCost.push_back(cost);
      return static_cast<int>(columnCost.size()) - 1;
    };
    // Σ coef·column = rhs over the given (column, coef) terms.
    auto addRow = [&](llvm::ArrayRef<std::pair<int, double>> terms, double rhs) {
      int row = static_cast<int>(rowBound.size());
      rowBound.push_back(rhs);
      for (auto [column, coef] : terms) {
        entries.push_back({row, coef});
        entryColumn.push_back(column);
      }
    };
    SmallVector<int> xcol(offset.back(), -1);
    for (unsigned v = 0; v < nodes.size(); ++v) {
      if (nodes[v].strategies.size() == 1) {
        constant += unary[offset[v]];
        continue;
      }
      SmallVector<std::pair<int, double>> terms;
      for (unsigned s = 0; s < nodes[v].strategies.size(); ++s) {
        xcol[offset[v] + s] = addColumn(scale * unary[offset[v] + s]);
        terms.push_back({xcol[offset[v] + s], 1.0});
      }
      addRow(terms, 1.0); // one strategy per node
    }
    const int xColumns = static_cast<int>(columnCost.size());
    if (xColumns == 0) // nothing to decide (CBC does not prove an empty model)
      return choice;
    for (auto [ei, e] : llvm::enumerate(pairEdges)) {
      unsigned np = nodes[e->producer].strategies.size();
      unsigned nc = nodes[e->consumer].strategies.size();
      int first = static_cast<int>(columnCost.size());
      for (unsigned a = 0; a < np; ++a)
        for (unsigned b = 0; b < nc; ++b)
          addColumn(scale * pairCost[ei][a * nc + b]);
      // Marginals: Σ_b y[a][b] = x_p[a] and Σ_a y[a][b] = x_c[b].
      auto marginal = [&](unsigned count, auto pairColumn, int xColumn) {
        SmallVector<std::pair<int, double>> terms;
        for (unsigned j = 0; j < count; ++j)
          terms.push_back({pairColumn(j), 1.0});
        terms.push_back({xColumn, -1.0});
        addRow(terms, 0.0);
      };
      for (unsigned a = 0; a < np; ++a)
        marginal(nc, [&](unsigned b) { return first + a * nc + b; },
                 xcol[offset[e->producer] + a]);
      for (unsigned b = 0; b < nc; ++b)
        marginal(np, [&](unsigned a) { return first + a * nc + b; },
                 xcol[offset[e->consumer] + b]);
    }
    // Rows' entries regrouped by column (a counting sort).
    const int cols = static_cast<int>(columnCost.size());
    std::vector<CoinBigIndex> start(cols + 1, 0);
    for (int c : entryColumn)
      ++start[c + 1];
    for (int c = 0; c < cols; ++c)
      start[c + 1] += start[c];
    std::vector<int> index(entries.size());
    std::vector<double> value(entries.size());
    std::vector<CoinBigIndex> next(start.begin(), start.end() - 1);
    for (auto [i, entry] : llvm::enumerate(entries)) {
      CoinBigIndex at = next[entryColumn[i]]++;
      index[at] = entry.first;
      value[at] = entry.second;
    }
    std::vector<double> lower(cols, 0.0), upper(cols, 1.0);
    Cbc_Model *model = Cbc_newModel();
    Cbc_loadProblem(model, cols, static_cast<int>(rowBound.size()),
                    start.data(), index.data(), value.data(), lower.data(),
                    upper.data(), columnCost.data(), rowBound.data(),
                    rowBound.data());
    for (int c = 0; c < xColumns; ++c)
      Cbc_setInteger(model, c);
    Cbc_setLogLevel(model, 0);
    Cbc_setAllowableGap(model, 0.0);
    Cbc_setAllowableFractionGap(model, 0.0);
    // The marginal-constraint formulation is tight: its LP relaxation is
    // usually integral already. Preprocessing, cut generation and
    // heuristics cost far more than they save on problems this small.
    Cbc_setParameter(model, "preprocess", "off");
    Cbc_setParameter(model, "cuts", "off");
    Cbc_setParameter(model, "heuristicsOnOff", "off");
    Cbc_solve(model);
    if (!Cbc_isProvenOptimal(model)) {
      Cbc_deleteModel(model);
      return llvm::createStringError(
          "the sharding ILP of a segment was not solved to optimality");
    }
    const double *x = Cbc_getColSolution(model);
    (void)constant;
    for (unsigned v = 0; v < nodes.size(); ++v) {
      if (nodes[v].strategies.size() == 1)
        continue;
      for (unsigned s = 0; s < nodes[v].strategies.size(); ++s)
        if (x[xcol[offset[v] + s]] > 0.5)
          choice[v] = s;
    }
    Cbc_deleteModel(model);
    return choice;
  }
};

bool selectiveDrops(const PlanNode &node) {
  OpClass c = node.cost.opClass;
  if (c == OpClass::Gemm || c == OpClass::Conv)
    return node.activationGemm;
  return true;
}

} // namespace

SmallVector<int64_t>
distopt::planner::boundaryStates(const PlanGraph &graph, int64_t tensor,
                                 const IntraOpOptions &options) {
  SmallVector<int64_t> states{kReplicated};
  if (tensor < 0 || options.tensorParallel == 1)
    return states;
  const PlanTensor &t = graph.tensors[tensor];
  for (auto [d, size] : llvm::enumerate(t.shape)) {
    int64_t actual = static_cast<int64_t>(d) == t.batchDim
                         ? options.microBatch
                         : size;
    if (actual > 1 && actual % options.tensorParallel == 0)
      states.push_back(static_cast<int64_t>(d));
  }
  return states;
}

llvm::Expected<SegmentSolution>
distopt::planner::solveSegment(const PlanGraph &graph, unsigned segment,
                               int64_t inState,
                               std::optional<int64_t> outState,
                               const IntraOpOptions &options) {
  auto start = std::chrono::steady_clock::now();
  const Segment &seg = graph.segments[segment];
  Problem p(graph, seg, options);
  p.build(inState, outState);
  SegmentSolution sol;
  auto choice = p.solve(sol.objective);
  if (!choice)
    return choice.takeError();
  sol.objective = p.evaluate(*choice);

  for (auto [v, ln] : llvm::enumerate(p.nodes)) {
    const Strategy &s = ln.strategies[(*choice)[v]];
    if (ln.node < 0)
      continue;
    const PlanNode &node = graph.nodes[ln.node];
    sol.choices.push_back({ln.node, s.factor, s.req, s.out});
    if (node.kind == NodeKind::Weight) {
      double e = graph.tensors[node.results[0]].elements();
      sol.localParams += s.factor >= 0 ? e / options.tensorParallel : e;
      continue;
    }
    if (node.kind != NodeKind::Compute)
      continue;
    sol.forwardCompute += s.forwardTime;
    if (selectiveDrops(node))
      sol.selectiveCompute += s.forwardTime;
  }
  // Activations kept for the backward pass: every batch-carrying tensor an
  // op of the segment reads (backward needs an op's inputs), once, as it
  // is read; reshapes are views and save nothing; elementwise chains save
  // their inputs only. Selective recomputation
  // keeps only what weight GEMMs/convolutions read, and the segment input
  // (what the recomputation starts from).
  {
    llvm::DenseMap<int64_t, std::pair<double, bool>> saved; // bytes, kept
    for (const Edge &e : p.edges) {
      const LocalNode &consumer = p.nodes[e.consumer];
      if (consumer.node < 0 || graph.tensors[e.tensor].batchDim < 0)
        continue;
      const PlanNode &node = graph.nodes[consumer.node];
      if (node.kind != NodeKind::Compute ||
          llvm::isa<dopt::ReshapeOp>(node.op))
        continue;
      // Inside a chain of elementwise ops (fused into one loop nest by the
      // code generators) only the chain's inputs are saved.
      const PlanTensor &t = graph.tensors[e.tensor];
      if (node.cost.opClass == OpClass::Elementwise && t.producer >= 0 &&
          graph.nodes[t.producer].cost.opClass == OpClass::Elementwise)
        continue;
      const Strategy &cs = consumer.strategies[(*choice)[e.consumer]];
      double bytes = p.localBytes(e.tensor, cs.req[e.operand]);
      bool weightGemm = (node.cost.opClass == OpClass::Gemm ||
                         node.cost.opClass == OpClass::Conv) &&
                        !node.activationGemm;
      auto &entry = saved[e.tensor];
      entry.first = std::max(entry.first, bytes);
      entry.second |= weightGemm || e.tensor == seg.input;
    }
    for (auto &[tensor, entry] : saved) {
      sol.storedBytes += entry.first;
      if (!entry.second)
        sol.selectiveDropped += entry.first;
    }
  }
  for (const Edge &e : p.edges) {
    const Strategy &ps = p.nodes[e.producer].strategies[(*choice)[e.producer]];
    const Strategy &cs = p.nodes[e.consumer].strategies[(*choice)[e.consumer]];
    int64_t from = ps.out[e.result], to = cs.req[e.operand];
    double bytes = graph.tensors[e.tensor].bytes(options.batchScale);
    if (auto k = p.resharder.kind(from, to)) {
      double time = p.resharder.time(from, to, bytes);
      sol.forwardComm += time;
      sol.collectives.push_back({*k, e.tensor, bytes, false, time});
    }
    if (e.gradient && options.kBackward != 0) {
      int64_t grad =
          p.isOutputPseudo(e.consumer) ? to : gradientState(cs, e.operand);
      if (auto k = p.resharder.kind(grad, neededGradient(from))) {
        double time = p.resharder.time(grad, neededGradient(from), bytes);
        sol.backwardComm += time;
        sol.collectives.push_back({*k, e.tensor, bytes, true, time});
      }
    }
  }
  if (seg.input >= 0)
    sol.inputBytes = p.localBytes(seg.input, inState);
  if (seg.output >= 0 && p.producerOf.count(seg.output)) {
    int64_t state = outState.value_or(kReplicated);
    if (!outState) {
      auto [producer, result] = p.producerOf[seg.output];
      state = p.nodes[producer].strategies[(*choice)[producer]].out[result];
    }
    sol.outputBytes = p.localBytes(seg.output, state);
  }
  sol.usedILP = p.usedILP;
  sol.solveSeconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  return sol;
}
