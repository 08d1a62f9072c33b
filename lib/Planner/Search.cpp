//===- Search.cpp - the plan search (DP × TP × PP) ------------------------===//

#include "distopt/Planner/Search.h"

#include "distopt/Runtime/ServerPlacement.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

using namespace distopt::planner;
using llvm::SmallVector;

//===----------------------------------------------------------------------===//
// Contiguous min-max partition
//===----------------------------------------------------------------------===//

double distopt::planner::minMaxPartitionDP(
    llvm::ArrayRef<double> times, int64_t parts,
    llvm::function_ref<bool(int64_t, int64_t, int64_t)> fits) {
  int64_t n = static_cast<int64_t>(times.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + times[i];
  // best[k][j]: first j items in k parts.
  std::vector<std::vector<double>> best(parts + 1,
                                        std::vector<double>(n + 1, inf));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k)
    for (int64_t j = 1; j <= n; ++j)
      for (int64_t i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == inf || !fits(k - 1, i, j))
          continue;
        best[k][j] =
            std::min(best[k][j], std::max(best[k - 1][i], prefix[j] - prefix[i]));
      }
  return best[parts][n] == inf ? -1.0 : best[parts][n];
}

double distopt::planner::minMaxPartitionGreedy(
    llvm::ArrayRef<double> times, int64_t parts,
    llvm::function_ref<bool(int64_t, int64_t, int64_t)> fits,
    std::vector<int64_t> *boundsOut) {
  int64_t n = static_cast<int64_t>(times.size());
  if (parts < 1 || n < parts)
    return -1.0;
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + times[i];
  auto sum = [&](int64_t i, int64_t j) { return prefix[j] - prefix[i]; };
  // Greedy maximal prefixes under bound T; returns the starts, or empty.
  auto greedy = [&](double bound, std::vector<int64_t> &starts) {
    starts.clear();
    int64_t i = 0, k = 0;
    while (i < n) {
      if (k == parts)
        return false;
      int64_t j = i + 1;
      if (sum(i, j) > bound || !fits(k, i, j))
        return false;
      while (j < n && sum(i, j + 1) <= bound && fits(k, i, j + 1))
        ++j;
      starts.push_back(i);
      i = j;
      ++k;
    }
    // Fewer parts than asked: split the longest parts (costs and memory only
    // shrink, and later parts hold fewer micro-batches).
    while (static_cast<int64_t>(starts.size()) < parts) {
      int64_t bestPart = -1, bestLen = 1;
      for (size_t p = 0; p < starts.size(); ++p) {
        int64_t end = p + 1 < starts.size() ? starts[p + 1] : n;
        if (end - starts[p] > bestLen) {
          bestLen = end - starts[p];
          bestPart = static_cast<int64_t>(p);
        }
      }
      if (bestPart < 0)
        return false;
      starts.insert(starts.begin() + bestPart + 1,
                    starts[bestPart] + bestLen / 2);
    }
    for (size_t p = 0; p < starts.size(); ++p)
      if (!fits(static_cast<int64_t>(p), starts[p],
                p + 1 < starts.size() ? starts[p + 1] : n))
        return false;
    return true;
  };
  auto maxOf = [&](const std::vector<int64_t> &starts) {
    double m = 0;
    for (size_t p = 0; p < starts.size(); ++p)
      m = std::max(m, sum(starts[p], p + 1 < starts.size() ? starts[p + 1] : n));
    return m;
  };
  double lo = 0, hi = prefix[n];
  std::vector<int64_t> starts;
  if (!greedy(hi, starts))
    return -1.0;
  std::vector<int64_t> bestStarts = starts;
  double best = maxOf(starts);
  hi = best;
  for (int iter = 0; iter < 64 && hi - lo > 1e-12 * std::max(1.0, hi); ++iter) {
    double mid = 0.5 * (lo + hi);
    if (greedy(mid, starts)) {
      double m = maxOf(starts);
      if (m < best) {
        best = m;
        bestStarts = starts;
      }
      hi = std::min(mid, m);
    } else {
      lo = mid;
    }
  }
  if (boundsOut)
    *boundsOut = bestStarts;
  return best;
}

//===----------------------------------------------------------------------===//
// Search
//===----------------------------------------------------------------------===//

namespace {

/// Per-segment figures of one chain solution, per micro-batch.
struct SegmentFigures {
  double forward = 0, selective = 0, forwardComm = 0, backwardComm = 0;
  double params = 0, stored = 0, dropped = 0, input = 0, output = 0;
};

struct Chain {
  std::vector<SegmentFigures> segments;
  std::vector<int64_t> boundary;
  std::vector<const SegmentSolution *> solutions;
  /// A vocabulary-parallel loss's collectives (empty: the output is
  /// gathered for the loss).
  std::vector<PlannedCollective> lossCollectives;
};

/// Range maximum in O(1) after O(L log L) preparation.
struct SparseMax {
  std::vector<std::vector<double>> table;
  explicit SparseMax(const std::vector<double> &v) {
    table.push_back(v);
    for (size_t w = 1; (size_t(1) << w) <= v.size(); ++w) {
      const auto &prev = table.back();
      std::vector<double> next(v.size() - (size_t(1) << w) + 1);
      for (size_t i = 0; i < next.size(); ++i)
        next[i] = std::max(prev[i], prev[i + (size_t(1) << (w - 1))]);
      table.push_back(std::move(next));
    }
  }
  double query(int64_t i, int64_t j) const { // [i, j)
    if (j <= i)
      return 0;
    unsigned w = 63 - __builtin_clzll(static_cast<uint64_t>(j - i));
    return std::max(table[w][i], table[w][j - (int64_t(1) << w)]);
  }
};


/// The degrees and sizes the search tries: every value up to 8, then
/// 2^a and 3·2^a (forced values may be anything).
bool smooth(int64_t v) {
  if (v <= 0)
    return false;
  if (v <= 8)
    return true;
  while (v % 2 == 0)
    v /= 2;
  return v == 1 || v == 3;
}

std::string formatBytes(double b) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  return s;
}

class Searcher {
public:
  Searcher(const PlanGraph &g, const Cluster &c, const PlanOptions &o)
      : g(g), cluster(c), opts(o) {}

  llvm::Expected<PlanResult> run();

private:
  const PlanGraph &g;
  const Cluster &cluster;
  const PlanOptions &opts;
  bool train() const { return opts.mode == PlanMode::Train; }

  std::shared_ptr<std::deque<SegmentSolution>> solutions =
      std::make_shared<std::deque<SegmentSolution>>();
  std::map<std::tuple<unsigned, int64_t, int64_t, int64_t, int64_t, int>,
           const SegmentSolution *>
      memo;
  std::map<std::tuple<int64_t, int64_t, int>, Chain> chains;
  int64_t ilpSolves = 0, cbcSolves = 0;
  double ilpSeconds = 0;

  IntraOpOptions intraOptions(int64_t tp, int64_t b, bool full) const {
    IntraOpOptions io;
    io.solver = opts.segmentSolver;
    io.tensorParallel = tp;
    io.microBatch = b;
    io.batchScale = static_cast<double>(b) / static_cast<double>(g.probeBatch);
    io.cluster = &cluster;
    io.efficiency = &opts.efficiency;
    if (train()) {
      io.kCompute = full ? 4 : 3;
      io.kForward = full ? 2 : 1;
      io.kBackward = 1;
    } else {
      io.kCompute = 1;
      io.kForward = 1;
      io.kBackward = 0;
    }
    return io;
  }

  llvm::Expected<const Chain *> chain(int64_t tp, int64_t b, bool full);

  /// The class axis of the loss's output when a vocabulary-parallel loss
  /// may read it split over `tp` ranks (the last segment's output, its
  /// classes divisible by tp), or -1.
  int64_t vocabularyParallelAxis(int64_t tp) const {
    if (!train() || tp <= 1 || opts.classLossOutput < 0 ||
        opts.classLossOutput >= static_cast<int64_t>(g.outputs.size()) ||
        g.segments.empty())
      return -1;
    int64_t t = g.outputs[opts.classLossOutput];
    if (t != g.segments.back().output)
      return -1;
    const PlanTensor &out = g.tensors[t];
    int64_t axis = static_cast<int64_t>(out.shape.size()) - 1;
    if (axis < 1 || axis == out.batchDim || out.shape[axis] % tp != 0 ||
        !out.isFloat)
      return -1;
    return axis;
  }

  /// What a vocabulary-parallel loss moves per micro-batch over the tensor
  /// axis (docs/training.md): each of the M rows' log-sum-exp gathered
  /// ([M, tp]) and its picked score all-reduced, and backward the
  /// log-sum-exps' adjoint shares all-reduced ([M, 1]).
  std::vector<PlannedCollective> vocabularyLossCollectives(
      int64_t tp, const IntraOpOptions &io) const {
    int64_t t = g.outputs[opts.classLossOutput];
    const PlanTensor &out = g.tensors[t];
    double rows = out.elements() * (out.batchDim >= 0 ? io.batchScale : 1.0) /
                  static_cast<double>(out.shape.back());
    double row = rows * out.elemBytes;
    DeviceGroup group = DeviceGroup::range(0, tp);
    auto bytes = [](double b) { return static_cast<int64_t>(std::llround(b)); };
    double gather = allGatherTime(cluster, group, bytes(row * tp), opts.efficiency);
    double reduce = bestAllReduce(cluster, group, bytes(row), opts.efficiency).second;
    return {{CollectiveKind::AllGather, t, row * tp, false, gather},
            {CollectiveKind::AllReduce, t, row, false, reduce},
            {CollectiveKind::AllReduce, t, row, true, reduce}};
  }
  std::optional<Plan> evaluate(const Chain &chain, int64_t tp, int64_t dp,
                               int64_t pp, int64_t b, Recompute rc,
                               double *leanestMemory);
};

llvm::Expected<const Chain *> Searcher::chain(int64_t tp, int64_t b,
                                              bool full) {
  auto key = std::make_tuple(tp, b, full ? 1 : 0);
  auto it = chains.find(key);
  if (it != chains.end())
    return &it->second;
  IntraOpOptions io = intraOptions(tp, b, full);
  size_t n = g.segments.size();
  auto solve = [&](unsigned s, int64_t in,
                   std::optional<int64_t> out) -> llvm::Expected<const SegmentSolution *> {
    auto mkey = std::make_tuple(g.segments[s].classId, in, out.value_or(-100),
                                tp, b, full ? 1 : 0);
    auto found = memo.find(mkey);
    if (found != memo.end())
      return found->second;
    auto sol = solveSegment(g, s, in, out, io);
    if (!sol)
      return sol.takeError();
    ++ilpSolves;
    cbcSolves += sol->usedILP;
    ilpSeconds += sol->solveSeconds;
    solutions->push_back(std::move(*sol));
    memo[mkey] = &solutions->back();
    return &solutions->back();
  };
  // Chain DP over boundary states.
  std::vector<SmallVector<int64_t>> states(n);
  int64_t classAxis = vocabularyParallelAxis(tp);
  for (size_t s = 0; s < n; ++s) {
    // The model's output: replicated -- for inference it is written out,
    // for training the loss takes whole rows (distopt-append-loss), so a
    // split output's gather is priced where the program makes it; or,
    // under a cross-entropy or NLL loss, split along its classes, read in
    // place by a vocabulary-parallel loss (priced below).
    if (s + 1 == n) {
      states[s] = SmallVector<int64_t>{kReplicated};
      if (classAxis >= 0)
        states[s].push_back(classAxis);
    } else {
      states[s] = boundaryStates(g, g.segments[s].output, io);
    }
  }
  std::vector<PlannedCollective> lossCollectives =
      classAxis >= 0 ? vocabularyLossCollectives(tp, io) : std::vector<PlannedCollective>{};
  double lossForward = 0, lossBackward = 0;
  for (const PlannedCollective &c : lossCollectives)
    (c.backward ? lossBackward : lossForward) += c.time;
  auto lossCost = [&](size_t s, int64_t state) {
    return s + 1 == n && classAxis >= 0 && state == classAxis
               ? io.kForward * lossForward + io.kBackward * lossBackward
               : 0.0;
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> cost(n);
  std::vector<std::vector<int>> from(n);
  std::vector<std::vector<const SegmentSolution *>> pick(n);
  for (size_t s = 0; s < n; ++s) {
    cost[s].assign(states[s].size(), inf);
    from[s].assign(states[s].size(), -1);
    pick[s].assign(states[s].size(), nullptr);
    SmallVector<int64_t> ins =
        s == 0 ? SmallVector<int64_t>{kReplicated} : states[s - 1];
    for (auto [oi, out] : llvm::enumerate(states[s])) {
      std::optional<int64_t> outState;
      if (out != -100)
        outState = out;
      for (auto [ii, in] : llvm::enumerate(ins)) {
        double before = s == 0 ? 0 : cost[s - 1][ii];
        if (before == inf)
          continue;
        auto sol = solve(static_cast<unsigned>(s), in, outState);
        if (!sol)
          return sol.takeError();
        double total = before + (*sol)->objective + lossCost(s, out);
        if (total < cost[s][oi]) {
          cost[s][oi] = total;
          from[s][oi] = static_cast<int>(ii);
          pick[s][oi] = *sol;
        }
      }
    }
  }
  Chain c;
  c.segments.resize(n);
  c.boundary.resize(n);
  c.solutions.resize(n);
  size_t bestOut = 0;
  for (size_t i = 1; i < cost[n - 1].size(); ++i)
    if (cost[n - 1][i] < cost[n - 1][bestOut])
      bestOut = i;
  int state = static_cast<int>(bestOut);
  for (size_t s = n; s-- > 0;) {
    const SegmentSolution *sol = pick[s][state];
    c.solutions[s] = sol;
    c.boundary[s] = states[s][state];
    SegmentFigures &f = c.segments[s];
    f.forward = sol->forwardCompute;
    f.selective = sol->selectiveCompute;
    f.forwardComm = sol->forwardComm;
    f.backwardComm = sol->backwardComm;
    if (lossCost(s, c.boundary[s]) > 0) {
      f.forwardComm += lossForward;
      f.backwardComm += lossBackward;
      c.lossCollectives = lossCollectives;
    }
    f.params = sol->localParams;
    f.stored = sol->storedBytes;
    f.dropped = sol->selectiveDropped;
    f.input = sol->inputBytes;
    f.output = sol->outputBytes;
    state = from[s][state];
  }
  return &chains.emplace(key, std::move(c)).first->second;
}

std::optional<Plan> Searcher::evaluate(const Chain &ch, int64_t tp, int64_t dp,
                                       int64_t pp, int64_t b, Recompute rc,
                                       double *leanestMemory) {
  int64_t n = static_cast<int64_t>(ch.segments.size());
  int64_t m = (opts.globalBatch + dp - 1) / dp / b;
  bool full = rc == Recompute::Full, sel = rc == Recompute::Selective;
  std::vector<double> time(n), computeT(n), commT(n), params(n), stash(n),
      workspace(n);
  for (int64_t i = 0; i < n; ++i) {
    const SegmentFigures &f = ch.segments[i];
    if (train()) {
      computeT[i] = f.forward * (full ? 4 : 3) + (sel ? f.selective : 0);
      commT[i] = f.forwardComm * (full ? 2 : 1) + f.backwardComm;
      stash[i] = full ? f.input : sel ? f.stored - f.dropped : f.stored;
      workspace[i] = full ? f.stored : 0;
    } else {
      computeT[i] = f.forward;
      commT[i] = f.forwardComm;
      stash[i] = 0;
      workspace[i] = f.stored;
    }
    params[i] = f.params;
  }
  // Sums and means over the batch (batch norm's statistics) split over the
  // replicas: each result is all-reduced over the data axis (again when
  // full recomputation reruns the forward), and in training its adjoint's
  // shares once more (distopt-autodiff). Latency-bound: a few channels each.
  std::vector<PlannedCollective> dataCollectives;
  if (dp > 1 && !g.batchReductions.empty()) {
    DeviceGroup group = DeviceGroup::range(0, dp, tp);
    for (int64_t node : g.batchReductions) {
      int64_t seg = 0;
      while (seg + 1 < n && node >= g.segments[seg].end)
        ++seg;
      // A result split over the tensor axis (per-channel statistics of
      // channel-split activations) is all-reduced in its rank's part: the
      // segment's solution says, in its class's first segment's numbering.
      const Segment &in = g.segments[seg];
      int64_t rep = 0;
      while (g.segments[rep].classId != in.classId)
        ++rep;
      int64_t solved = g.segments[rep].begin + (node - in.begin);
      SmallVector<int64_t, 2> states;
      for (const NodeChoice &c : ch.solutions[seg]->choices)
        if (c.node == solved)
          states.assign(c.resultStates.begin(), c.resultStates.end());
      for (auto [r, t] : llvm::enumerate(g.nodes[node].results)) {
        double bytes = g.tensors[t].bytes(1);
        if (r < states.size() && states[r] >= 0)
          bytes /= static_cast<double>(tp);
        double one =
            bestAllReduce(cluster, group, static_cast<int64_t>(std::llround(bytes)),
                          opts.efficiency)
                .second;
        dataCollectives.push_back({CollectiveKind::AllReduce, t, bytes, false, one});
        commT[seg] += one * (train() && full ? 2 : 1);
        if (train()) {
          dataCollectives.push_back({CollectiveKind::AllReduce, t, bytes, true, one});
          commT[seg] += one;
        }
      }
    }
  }
  for (int64_t i = 0; i < n; ++i)
    time[i] = computeT[i] + commT[i];
  std::vector<double> prefixParams(n + 1, 0), prefixStash(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    prefixParams[i + 1] = prefixParams[i] + params[i];
    prefixStash[i + 1] = prefixStash[i] + stash[i];
  }
  SparseMax maxWorkspace(workspace);
  int64_t stageDevices = dp * tp;
  const double capacity = static_cast<double>(cluster.device.memoryCapacity) *
                          opts.usableMemoryFraction;
  auto memoryOf = [&](int64_t k, int64_t i, int64_t j, StagePlan *out) {
    double p = prefixParams[j] - prefixParams[i];
    ModelStateMemory ms =
        modelStateMemory(p, opts.precision, opts.optimizer, train(),
                         opts.zeroStage.value_or(0), dp);
    double acts;
    if (train()) {
      int64_t inflight = microbatchesInFlight(opts.schedule, pp, k, m);
      acts = inflight * (prefixStash[j] - prefixStash[i]) +
             maxWorkspace.query(i, j);
    } else {
      acts = maxWorkspace.query(i, j) * std::min<int64_t>(m, 2);
    }
    if (out) {
      out->params = p;
      out->weightBytes = ms.weights;
      out->gradientBytes = ms.gradients;
      out->optimizerBytes = ms.optimizerState;
      out->activationBytes = acts;
    }
    return ms.total() + acts;
  };
  auto p2p = [&](int64_t k, int64_t lastSegment) {
    if (k + 1 >= pp)
      return 0.0;
    int64_t src = k * stageDevices, dst = (k + 1) * stageDevices;
    int64_t perNode = std::min(stageDevices, cluster.devicesPerNode);
    double bytes = ch.segments[lastSegment].output;
    double one = pointToPointTime(cluster, src, dst,
                                  static_cast<int64_t>(std::llround(bytes)),
                                  perNode, opts.efficiency);
    return train() ? 2 * one : one;
  };
  auto fits = [&](int64_t k, int64_t i, int64_t j) {
    return memoryOf(k, i, j, nullptr) <= capacity;
  };
  // p2p is charged per stage after partitioning; the partition balances
  // compute and tensor-parallel time (p2p depends only on the boundary).
  std::vector<int64_t> starts;
  double bound = minMaxPartitionGreedy(time, pp, fits, &starts);
  Plan plan;
  plan.dp = dp;
  plan.tp = tp;
  plan.pp = pp;
  plan.microbatchSize = b;
  plan.microbatches = m;
  plan.recompute = rc;
  plan.schedule = opts.schedule;
  plan.dataCollectives = std::move(dataCollectives);
  plan.vocabularyParallelLoss = !ch.lossCollectives.empty();
  plan.lossCollectives = ch.lossCollectives;
  if (bound < 0) {
    // Does not fit: record the memory of the time-balanced partition.
    plan.fits = false;
    minMaxPartitionGreedy(
        time, pp, [](int64_t, int64_t, int64_t) { return true; }, &starts);
    if (starts.empty())
      return std::nullopt;
  }
  double sumStage = 0, maxStage = 0;
  int64_t bottleneck = 0;
  for (int64_t k = 0; k < pp; ++k) {
    StagePlan st;
    st.firstSegment = starts[k];
    st.endSegment = k + 1 < pp ? starts[k + 1] : n;
    st.firstDevice = k * stageDevices;
    st.numDevices = stageDevices;
    for (int64_t i = st.firstSegment; i < st.endSegment; ++i) {
      st.computePerMicrobatch += computeT[i];
      st.tpCommPerMicrobatch += commT[i];
    }
    st.p2pPerMicrobatch = p2p(k, st.endSegment - 1);
    st.timePerMicrobatch =
        st.computePerMicrobatch + st.tpCommPerMicrobatch + st.p2pPerMicrobatch;
    memoryOf(k, st.firstSegment, st.endSegment, &st);
    plan.peakMemory = std::max(plan.peakMemory, st.memory());
    sumStage += st.timePerMicrobatch;
    if (st.timePerMicrobatch > maxStage) {
      maxStage = st.timePerMicrobatch;
      bottleneck = k;
    }
    plan.stages.push_back(st);
  }
  if (leanestMemory)
    *leanestMemory = std::min(*leanestMemory, plan.peakMemory);
  double pipeline = sumStage + static_cast<double>(m - 1) * maxStage;
  // Data-parallel gradient all-reduce and optimizer update of each stage;
  // stages do theirs at the same time, the slowest counts.
  double sync = 0, syncTotal = 0, update = 0;
  if (train()) {
    for (int64_t k = 0; k < pp; ++k) {
      const StagePlan &st = plan.stages[k];
      double gradBytes =
          st.params * dtypeBytes(opts.gradDtype.value_or(opts.precision));
      if (dp > 1) {
        DeviceGroup group = DeviceGroup::range(st.firstDevice, dp, tp);
        double t = bestAllReduce(cluster, group,
                                 static_cast<int64_t>(std::llround(gradBytes)),
                                 opts.efficiency)
                       .second;
        // Bucketed gradient all-reduce (PyTorch DDP, Li et al. 2020):
        // buckets go out while the last micro-batch's backward still runs;
        // what outlasts that backward, and at least the last bucket, is
        // exposed.
        double backward = 0;
        for (int64_t i = st.firstSegment; i < st.endSegment; ++i)
          backward += 2 * ch.segments[i].forward;
        double lastBucket =
            t * std::min(1.0, opts.bucketBytes / std::max(gradBytes, 1.0));
        syncTotal = std::max(syncTotal, t);
        sync = std::max(sync, std::max(t - backward, lastBucket));
      }
      // Read and write the weights, gradients and optimizer state once.
      double bytes = 2 * (st.weightBytes + st.optimizerBytes) +
                     st.gradientBytes;
      double bw = cluster.device.memoryBandwidth *
                  opts.efficiency.memoryEfficiency(OpClass::Elementwise);
      update = std::max(update, bytes / bw);
    }
  }
  const StagePlan &bn = plan.stages[bottleneck];
  plan.dataParallelSync = sync;
  plan.dataParallelSyncTotal = syncTotal;
  plan.optimizerUpdate = update;
  plan.compute = static_cast<double>(m) * bn.computePerMicrobatch + update;
  plan.communication = static_cast<double>(m) *
                           (bn.tpCommPerMicrobatch + bn.p2pPerMicrobatch) +
                       sync;
  plan.bubble = pipeline - static_cast<double>(m) * maxStage;
  plan.stepTime = pipeline + sync + update;
  plan.boundaryStates = ch.boundary;
  plan.segmentSolutions = ch.solutions;
  plan.fits = plan.fits && plan.peakMemory <= capacity;
  return plan;
}

llvm::Expected<PlanResult> Searcher::run() {
  auto start = std::chrono::steady_clock::now();
  int64_t devices = cluster.numDevices();
  int64_t batch = opts.globalBatch;
  int64_t segments = static_cast<int64_t>(g.segments.size());
  auto fail = [](const std::string &msg) {
    return llvm::createStringError(msg);
  };
  if (batch < 1)
    return fail("the global batch must be at least 1");
  // A forced data-parallel degree may split the batch unevenly (replicas
  // get ceil(B/dp) samples, the last ones padded), but every replica needs
  // at least one sample.
  if (opts.dp && (*opts.dp < 1 || *opts.dp > batch))
    return fail("--dp " + std::to_string(*opts.dp) +
                " exceeds the global batch of " + std::to_string(batch) +
                " (the batch dimension of the model inputs): a replica would "
                "get no samples");
  if (opts.tp && *opts.tp < 1)
    return fail("--tp must be at least 1");
  // A model that mixes samples cannot split its batch, over replicas or
  // into micro-batches.
  bool batchSplits = g.batchMixer < 0;
  if (!batchSplits && opts.dp && *opts.dp > 1)
    return fail("--dp " + std::to_string(*opts.dp) + " splits the batch, but " +
                g.batchMixerWhy + ", so the samples of a batch cannot be "
                "split; only --dp 1 is possible for this model");
  if (!batchSplits && opts.microbatches && *opts.microbatches > 1)
    return fail("--microbatches " + std::to_string(*opts.microbatches) +
                " splits the batch, but " + g.batchMixerWhy +
                ", so the samples of a batch cannot be split; only "
                "--microbatches 1 is possible for this model");
  // Sums and means over the batch split over replicas (an all-reduce
  // completes them), but a micro-batch's statistic is not the batch's, and
  // a padded share would count its padding.
  bool statistics = !g.batchReductions.empty();
  // Micro-batches would each compute their own statistics: only where the
  // user asked for that.
  bool wholeStatistics = statistics && !opts.microbatchStatistics;
  if (batchSplits && wholeStatistics && opts.microbatches &&
      *opts.microbatches > 1)
    return fail("--microbatches " + std::to_string(*opts.microbatches) +
                " splits the batch, but " + g.batchReductionWhy +
                " (a statistic of a micro-batch is not the batch's); only "
                "--microbatches 1 is possible for this model, or add "
                "--microbatch-statistics to normalise each micro-batch by "
                "its own statistics (as GPipe does)");
  if (batchSplits && statistics && opts.dp && batch % *opts.dp != 0)
    return fail("--dp " + std::to_string(*opts.dp) + " does not divide the "
                "global batch of " + std::to_string(batch) + ", but " +
                g.batchReductionWhy + ", which padded samples would enter; "
                "use a data-parallel degree that divides the batch");
  if (opts.pp && (*opts.pp < 1 || *opts.pp > segments))
    return fail("--pp " + std::to_string(*opts.pp) + " exceeds the " +
                std::to_string(segments) +
                " segments the model can be cut into");
  int64_t forcedProduct =
      opts.dp.value_or(1) * opts.tp.value_or(1) * opts.pp.value_or(1);
  if (forcedProduct > devices)
    return fail("the forced degrees need " + std::to_string(forcedProduct) +
                " devices; the cluster has " + std::to_string(devices));
  if (opts.microbatches && *opts.microbatches < 1)
    return fail("--microbatches must be at least 1");

  SmallVector<int64_t> tps, pps;
  if (opts.tp)
    tps.push_back(*opts.tp);
  else
    // Tensor-parallel groups are consecutive ranks inside one node: t must
    // divide the devices of a node, so no group straddles two.
    for (int64_t t = 1; t <= std::min(cluster.devicesPerNode, devices); ++t)
      if (cluster.devicesPerNode % t == 0 && smooth(t))
        tps.push_back(t);
  SmallVector<Recompute> rcs;
  if (!train())
    rcs.push_back(Recompute::Off);
  else if (opts.recompute)
    rcs.push_back(*opts.recompute);
  else
    rcs = {Recompute::Off, Recompute::Selective, Recompute::Full};

  PlanResult result;
  std::optional<Plan> best;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> bestPerShape;
  std::optional<Plan> fastestUnfit;
  double leanest = std::numeric_limits<double>::infinity();
  std::optional<Plan> leanestPlan;
  auto better = [](const Plan &a, const Plan &b) {
    if (a.stepTime != b.stepTime)
      return a.stepTime < b.stepTime;
    return a.devices() < b.devices();
  };
  for (int64_t tp : tps) {
    for (int64_t pp = 1; pp <= segments && tp * pp <= devices; ++pp) {
      if (opts.pp ? pp != *opts.pp : !smooth(pp))
        continue;
      for (int64_t dp = 1; dp * tp * pp <= devices && dp <= batch; ++dp) {
        if (opts.dp ? dp != *opts.dp : (batch % dp != 0 || !smooth(dp)))
          continue;
        if (!batchSplits && dp > 1)
          continue;
        int64_t perReplica = (batch + dp - 1) / dp;
        for (int64_t b = 1; b <= perReplica; ++b) {
          // The replica's batch in one piece where it cannot be cut.
          bool whole = !batchSplits || wholeStatistics;
          if (perReplica % b != 0 || (whole && b != perReplica))
            continue;
          if (opts.microbatches) {
            if (perReplica / b != *opts.microbatches)
              continue;
          } else if (!whole && (!smooth(b) || b > (train() ? 32 : 256))) {
            if (b != 1)
              continue;
          }
          for (Recompute rc : rcs) {
            auto ch = chain(tp, b, rc == Recompute::Full);
            if (!ch)
              return ch.takeError();
            double lean = std::numeric_limits<double>::infinity();
            std::optional<Plan> plan =
                evaluate(**ch, tp, dp, pp, b, rc, &lean);
            ++result.candidates;
            if (!plan)
              continue;
            if (lean < leanest) {
              leanest = lean;
              leanestPlan = plan;
            }
            if (!plan->fits) {
              if (!fastestUnfit || better(*plan, *fastestUnfit))
                fastestUnfit = plan;
              continue;
            }
            auto shape = std::make_tuple(dp, tp, pp);
            auto it = bestPerShape.find(shape);
            if (it == bestPerShape.end() || better(*plan, it->second))
              bestPerShape[shape] = *plan;
            if (!best || better(*plan, *best))
              best = plan;
          }
        }
      }
    }
  }
  if (opts.microbatches && result.candidates == 0)
    return fail("--microbatches " + std::to_string(*opts.microbatches) +
                " does not divide the per-replica batch");
  if (!best) {
    std::string msg = "the model does not fit: ";
    if (leanestPlan) {
      const Plan &p = *leanestPlan;
      msg += "the leanest plan (dp " + std::to_string(p.dp) + ", tp " +
             std::to_string(p.tp) + ", pp " + std::to_string(p.pp) +
             ", micro-batch " + std::to_string(p.microbatchSize) +
             ", recompute " + recomputeName(p.recompute).str() + ") needs " +
             formatBytes(p.peakMemory) + " per device; a device has " +
             formatBytes(static_cast<double>(cluster.device.memoryCapacity) *
                         opts.usableMemoryFraction) +
             " usable (" +
             std::to_string(static_cast<int>(opts.usableMemoryFraction * 100 +
                                             0.5)) +
             "% of " +
             formatBytes(static_cast<double>(cluster.device.memoryCapacity)) +
             ")";
    } else {
      msg += "no candidate plan exists for these constraints";
    }
    return fail(msg);
  }
  result.best = *best;
  // Alternatives: the best plan of each other (dp, tp, pp), fastest first.
  std::vector<Plan> others;
  for (auto &[shape, plan] : bestPerShape)
    if (shape != std::make_tuple(best->dp, best->tp, best->pp))
      others.push_back(plan);
  llvm::sort(others, better);
  auto describe = [&](const Plan &p) {
    std::string s;
    llvm::raw_string_ostream os(s);
    if (best->stepTime > 0)
      os << llvm::format("%.1f%% slower",
                         (p.stepTime / best->stepTime - 1) * 100);
    else
      os << "slower";
    // The component that grew most.
    double dc = p.compute - best->compute, dm = p.communication -
                                                  best->communication,
           db = p.bubble - best->bubble;
    auto delta = [&](double d) {
      double a = std::fabs(d);
      const char *sign = d < 0 ? "-" : "+";
      if (a >= 1)
        os << llvm::format("%s%.3f s", sign, a);
      else if (a >= 1e-3)
        os << llvm::format("%s%.3f ms", sign, a * 1e3);
      else
        os << llvm::format("%s%.3f us", sign, a * 1e6);
    };
    if (dm >= dc && dm >= db) {
      os << ": communication ";
      delta(dm);
    } else if (db >= dc) {
      os << ": pipeline bubble ";
      delta(db);
    } else {
      os << ": compute ";
      delta(dc);
    }
    return s;
  };
  // A tensor-parallel plan that splits no op only idles devices: it is the
  // tp = 1 plan in disguise, not an alternative worth listing.
  auto splitsSomething = [&](const Plan &p) {
    if (p.tp == 1)
      return true;
    for (const SegmentSolution *sol : p.segmentSolutions)
      for (const NodeChoice &c : sol->choices)
        if (c.factor >= 0 && g.nodes[c.node].kind == NodeKind::Compute)
          return true;
    return false;
  };
  for (const Plan &p : others) {
    if (result.rejected.size() + 1 >= opts.maxAlternatives)
      break;
    if (!splitsSomething(p))
      continue;
    result.rejected.push_back({p, describe(p)});
  }
  if (fastestUnfit && fastestUnfit->stepTime < best->stepTime)
    result.rejected.push_back(
        {*fastestUnfit,
         "does not fit: needs " + formatBytes(fastestUnfit->peakMemory) +
             " per device, " +
             formatBytes(static_cast<double>(cluster.device.memoryCapacity) *
                         opts.usableMemoryFraction) +
             " usable"});
  result.ilpSolves = ilpSolves;
  result.cbcSolves = cbcSolves;
  result.ilpSeconds = ilpSeconds;
  result.storage = solutions;
  result.searchSeconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  return result;
}

} // namespace

namespace {

/// The elements of each float weight of the graph (what servers hold).
std::vector<int64_t> trainedWeightSizes(const PlanGraph &g) {
  std::vector<int64_t> sizes;
  for (const PlanNode &n : g.nodes)
    if (n.kind == NodeKind::Weight && !n.results.empty()) {
      const PlanTensor &t = g.tensors[n.results[0]];
      if (t.isFloat)
        sizes.push_back(static_cast<int64_t>(std::llround(t.elements())));
    }
  return sizes;
}

/// `p`, a pure data-parallel plan of `p.dp` workers, with its gradient
/// all-reduce replaced by the exchange with `servers` parameter servers.
Plan asParameterServerPlan(Plan p, const PlanGraph &g, const Cluster &cluster,
                           const PlanOptions &opts, int64_t servers) {
  distopt::ps::Placement placement = distopt::ps::placeOnServers(trainedWeightSizes(g), servers);
  std::vector<double> shardBytes;
  // Gradients and weights travel in fp32 (the servers keep fp32 masters).
  for (int64_t load : placement.load)
    shardBytes.push_back(4.0 * static_cast<double>(load));
  double exchange = parameterServerExchangeTime(cluster, shardBytes, p.dp,
                                                opts.efficiency);
  p.stepTime += exchange - p.dataParallelSync;
  p.communication += exchange - p.dataParallelSync;
  p.dataParallelSync = p.dataParallelSyncTotal = exchange;
  p.sync = opts.sync == GradientSync::AllReduce ? GradientSync::ParameterServer
                                                : opts.sync;
  p.servers = servers;
  p.backupWorkers = opts.backupWorkers;
  p.serverBytes.clear();
  for (double b : shardBytes)
    p.serverBytes.push_back(b * static_cast<double>(p.dp));
  return p;
}

} // namespace

namespace {

llvm::Expected<PlanResult> searchAllReduce(const PlanGraph &graph,
                                         const Cluster &cluster,
                                         const PlanOptions &options);

/// Parameter servers: K server ranks and dp = devices - K workers of pure
/// data parallelism; the fastest K unless --servers says.
llvm::Expected<PlanResult> searchServers(const PlanGraph &graph,
                                       const Cluster &cluster,
                                       const PlanOptions &options) {
  int64_t devices = cluster.numDevices();
  auto fail = [](const llvm::Twine &msg) -> llvm::Expected<PlanResult> {
    return llvm::createStringError(msg.str());
  };
  if (options.tp.value_or(1) != 1 || options.pp.value_or(1) != 1)
    return fail("parameter servers serve data-parallel workers: --tp and "
                "--pp must be 1 with --sync " +
                gradientSyncName(options.sync));
  // Workers run apart (no collective among them): a statistic of the whole
  // batch, all-reduced over the replicas, has no place there.
  if (!graph.batchReductions.empty())
    return fail("parameter-server workers run apart, but " +
                graph.batchReductionWhy +
                ", which needs the replicas' all-reduce; train this model "
                "with --sync allreduce");
  if (options.servers && (*options.servers < 1 ||
                          *options.servers + 1 + options.backupWorkers > devices))
    return fail("--servers " + llvm::Twine(*options.servers) + " with " +
                llvm::Twine(options.backupWorkers) +
                " backup worker(s) leaves no worker on the " +
                llvm::Twine(devices) + " devices of the cluster");
  if (devices < 2 + options.backupWorkers)
    return fail("parameter servers need at least " +
                llvm::Twine(2 + options.backupWorkers) +
                " devices (a server and a worker" +
                (options.backupWorkers ? " plus the backups" : "") +
                "); the cluster has " + llvm::Twine(devices));
  std::optional<PlanResult> best;
  std::vector<Plan> alternatives;
  for (int64_t k = 1; k + 1 + options.backupWorkers <= devices; ++k) {
    // Without --servers: 1, 2, 4, ... servers (each count costs a search).
    if (options.servers ? k != *options.servers : (k & (k - 1)) != 0)
      continue;
    PlanOptions o = options;
    o.sync = GradientSync::AllReduce;
    o.servers.reset();
    o.dp = devices - k;
    o.tp = o.pp = 1;
    o.zeroStage = 0;
    llvm::Expected<PlanResult> r = searchAllReduce(graph, cluster, o);
    if (!r) {
      if (options.servers || k + 2 + options.backupWorkers > devices)
        return r.takeError();
      llvm::consumeError(r.takeError());
      continue;
    }
    r->best = asParameterServerPlan(r->best, graph, cluster, options, k);
    alternatives.push_back(r->best);
    if (!best || r->best.stepTime < best->best.stepTime)
      best = std::move(*r);
  }
  if (!best)
    return fail("no parameter-server plan: the batch splits over no "
                "worker count the cluster leaves");
  best->rejected.clear();
  best->serverAlternatives = std::move(alternatives);
  return std::move(*best);
}

llvm::Expected<PlanResult> searchAllReduce(const PlanGraph &graph,
                                           const Cluster &cluster,
                                           const PlanOptions &options) {
  auto search = [&](const PlanOptions &o) -> llvm::Expected<PlanResult> {
    Searcher s(graph, cluster, o);
    llvm::Expected<PlanResult> r = s.run();
    if (r) {
      int zero = o.zeroStage.value_or(0);
      r->best.zeroStage = zero;
      for (RejectedPlan &p : r->rejected)
        p.plan.zeroStage = zero;
    }
    return r;
  };
  llvm::Expected<PlanResult> first = search(options);
  if (first || options.zeroStage || options.mode != PlanMode::Train)
    return first;
  // Nothing fits with the optimizer state on every replica: shard it over
  // the data-parallel replicas (ZeRO-1), which costs no extra
  // communication (reduce-scatter + all-gather move what all-reduce does).
  PlanOptions zero1 = options;
  zero1.zeroStage = 1;
  llvm::Expected<PlanResult> second = search(zero1);
  if (!second) {
    llvm::consumeError(second.takeError());
    return first;
  }
  llvm::consumeError(first.takeError());
  return second;
}

} // namespace

llvm::Expected<PlanResult>
distopt::planner::searchPlan(const PlanGraph &graph, const Cluster &cluster,
                             const PlanOptions &options) {
  if (options.mode == PlanMode::Train &&
      (options.sync != GradientSync::AllReduce || options.servers))
    return searchServers(graph, cluster, options);
  // What parameter servers would do with the same devices, for the
  // summary's comparison (pure data-parallel training plans).
  auto compareServers = [&](llvm::Expected<PlanResult> r)
      -> llvm::Expected<PlanResult> {
    if (!r || !options.compareServers || options.mode != PlanMode::Train ||
        r->best.tp != 1 ||
        r->best.pp != 1 || r->best.dp < 2 || cluster.numDevices() < 2)
      return r;
    PlanOptions o = options;
    o.sync = GradientSync::ParameterServer;
    o.dp.reset();
    llvm::Expected<PlanResult> ps = searchServers(graph, cluster, o);
    if (ps)
      r->serverAlternatives = std::move(ps->serverAlternatives);
    else
      llvm::consumeError(ps.takeError());
    return r;
  };
  return compareServers(searchAllReduce(graph, cluster, options));
}
