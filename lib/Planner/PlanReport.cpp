//===- PlanReport.cpp - printing a plan -----------------------------------===//

#include "distopt/Planner/PlanReport.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <map>
#include <set>

using namespace distopt::planner;
using llvm::format;
namespace json = llvm::json;

namespace {

std::string gib(double bytes) { return formatGiB(bytes); }
std::string seconds(double s) { return formatSeconds(s); }

std::string human(double v) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (v >= 1e12)
    os << format("%.2f T", v / 1e12);
  else if (v >= 1e9)
    os << format("%.2f G", v / 1e9);
  else if (v >= 1e6)
    os << format("%.2f M", v / 1e6);
  else if (v >= 1e3)
    os << format("%.2f k", v / 1e3);
  else
    os << format("%.0f ", v);
  return out;
}

std::string count(double v) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (v >= 1e12)
    os << format("%.2f trillion", v / 1e12);
  else if (v >= 1e9)
    os << format("%.2f billion", v / 1e9);
  else if (v >= 1e6)
    os << format("%.2f million", v / 1e6);
  else if (v >= 1e3)
    os << format("%.2f thousand", v / 1e3);
  else
    os << format("%.0f", v);
  return out;
}

/// Bytes in B, KB, MB or GB (powers of 1000, as link rates are given).
std::string bytesText(double b) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (b >= 1e9)
    os << llvm::format("%.2f GB", b / 1e9);
  else if (b >= 1e6)
    os << llvm::format("%.2f MB", b / 1e6);
  else if (b >= 1e3)
    os << llvm::format("%.1f KB", b / 1e3);
  else
    os << llvm::format("%.0f B", b);
  return out;
}

std::string shape(const Plan &p) {
  std::string s;
  llvm::raw_string_ostream(s) << "dp " << p.dp << " x tp " << p.tp << " x pp "
                              << p.pp;
  return s;
}

/// Collectives of one micro-batch, grouped by kind and direction.
struct CollectiveSummary {
  std::map<std::pair<std::string, bool>, std::pair<int64_t, double>> byKind;
};

/// Counts (forward, backward), bytes and time of a list of collectives.
struct Totals {
  int64_t forward = 0, backward = 0;
  double bytes = 0, time = 0;
};
Totals totals(const std::vector<PlannedCollective> &list) {
  Totals t;
  for (const PlannedCollective &c : list) {
    (c.backward ? t.backward : t.forward) += 1;
    t.bytes += c.bytes;
    t.time += c.time;
  }
  return t;
}

CollectiveSummary summarize(const Plan &plan, int64_t first, int64_t end) {
  CollectiveSummary s;
  for (int64_t i = first; i < end; ++i)
    for (const PlannedCollective &c : plan.segmentSolutions[i]->collectives) {
      auto &e = s.byKind[{collectiveKindName(c.kind).str(), c.backward}];
      e.first += 1;
      e.second += c.bytes;
    }
  return s;
}

std::string opLabel(mlir::Operation *op) {
  std::string name;
  mlir::Location loc = op->getLoc();
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location l : fused.getLocations())
      if (auto n = llvm::dyn_cast<mlir::NameLoc>(l)) {
        name = n.getName().str();
        break;
      }
  if (auto n = llvm::dyn_cast<mlir::NameLoc>(loc))
    name = n.getName().str();
  std::string out = op->getName().getStringRef().str();
  if (!name.empty())
    out += " '" + name + "'";
  return out;
}

} // namespace

std::string distopt::planner::formatSeconds(double s) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (s >= 1)
    os << format("%.3f s", s);
  else if (s >= 1e-3)
    os << format("%.3f ms", s * 1e3);
  else
    os << format("%.3f us", s * 1e6);
  return out;
}

std::string distopt::planner::formatGiB(double bytes) {
  std::string out;
  llvm::raw_string_ostream(out) << format("%.2f GiB", bytes / 1073741824.0);
  return out;
}

std::string distopt::planner::stageLabel(const PlanGraph &graph,
                                         const StagePlan &stage) {
  const std::string &first = graph.segments[stage.firstSegment].label;
  const std::string &last = graph.segments[stage.endSegment - 1].label;
  if (first.empty() && last.empty())
    return "-";
  if (first == last)
    return first;
  return first + " .. " + last;
}

void distopt::planner::printPlanSummary(llvm::raw_ostream &os,
                                        const PlanReport &report) {
  // Named references, not a structured binding: lambdas below capture
  // them (C++17 compilers such as the fuzz build's clang 14 refuse that).
  const PlanGraph &graph = report.graph;
  const Cluster &cluster = report.cluster;
  const PlanOptions &options = report.options;
  const PlanResult &result = report.result;
  const PlanContext &context = report.context;
  const Plan &p = result.best;
  bool train = options.mode == PlanMode::Train;
  os << "distopt plan: " << context.modelName << " on " << context.clusterSpec
     << " (" << cluster.numDevices() << " x " << cluster.device.name << ", "
     << cluster.nodes << (cluster.nodes == 1 ? " node" : " nodes") << ")\n";
  os << "  " << (train ? "training" : "inference") << ", global batch "
     << options.globalBatch << ", " << dtypeName(options.precision);
  if (train)
    os << ", " << optimizerName(options.optimizer)
       << (isHalfPrecision(options.precision) ? " (fp32 master weights)" : "");
  os << "\n";
  os << "  model: " << count(graph.parameters) << " parameters, "
     << human(graph.forwardFlopsPerSample()) << "FLOP forward per sample, "
     << graph.segments.size() << " segments (" << graph.numClasses
     << " distinct)\n\n";

  os << "plan: " << shape(p) << " = " << p.devices() << " of "
     << cluster.numDevices() << " devices; " << p.microbatches
     << (p.microbatches == 1 ? " micro-batch" : " micro-batches") << " of "
     << p.microbatchSize;
  if (train)
    os << "; recompute " << recomputeName(p.recompute) << "; "
       << (p.pp > 1 ? (p.schedule == PipelineSchedule::GPipe ? "GPipe schedule"
                                                             : "1F1B schedule")
                    : "no pipeline");
  os << "\n";
  os << "predicted step time " << seconds(p.stepTime) << " = compute "
     << seconds(p.compute) << " + communication " << seconds(p.communication)
     << " + pipeline bubble " << seconds(p.bubble) << "\n";
  if (train && p.sync != GradientSync::AllReduce) {
    double busiest = 0;
    for (double b : p.serverBytes)
      busiest = std::max(busiest, b);
    os << "  (" << (p.sync == GradientSync::Async ? "asynchronous" : "synchronous")
       << " parameter servers: " << p.servers
       << (p.servers == 1 ? " server (rank 0), " : " servers (ranks 0-" +
                                                    std::to_string(p.servers - 1) +
                                                    "), ")
       << p.dp << (p.dp == 1 ? " worker" : " workers");
    if (p.backupWorkers)
      os << " (" << p.backupWorkers << " of them backups: a step applies the "
         << "first " << p.dp - p.backupWorkers << " gradients)";
    os << "; push and pull " << seconds(p.dataParallelSync)
       << " per step, the busiest server's link carrying "
       << bytesText(busiest) << " each way; optimizer update "
       << seconds(p.optimizerUpdate) << ")\n";
    os << "  bytes each server receives and sends per step:";
    for (auto [s, b] : llvm::enumerate(p.serverBytes))
      os << " [" << s << "] " << bytesText(b);
    os << "\n";
  } else if (train) {
    os << "  (data-parallel gradient all-reduce " << seconds(p.dataParallelSync)
       << " exposed of " << seconds(p.dataParallelSyncTotal);
    if (p.dp > 1)
      os << ": " << dtypeName(options.gradDtype.value_or(options.precision))
         << " gradients in buckets of "
         << format("%g", options.bucketBytes / (1024.0 * 1024.0)) << " MiB"
         << (p.zeroStage >= 1 ? ", reduce-scattered; ZeRO-1: optimizer state "
                                "sharded over the replicas"
                              : "");
    os << "; optimizer update " << seconds(p.optimizerUpdate) << ")\n";
  }
  if (p.vocabularyParallelLoss) {
    Totals t = totals(p.lossCollectives);
    os << "  loss: vocabulary-parallel over the " << p.tp
       << " tensor-parallel ranks (the logits stay split; each row's "
          "log-sum-exp gathered and its label's score all-reduced: "
       << bytesText(t.bytes) << " per micro-batch, " << seconds(t.time)
       << ")\n";
  }
  if (!p.dataCollectives.empty()) {
    // Sums and means over the batch (batch norm's statistics in training
    // form) are completed over the replicas.
    Totals t = totals(p.dataCollectives);
    os << "  batch statistics synchronised over the " << p.dp << " replicas: "
       << t.forward << " all-reduce" << (t.forward == 1 ? "" : "s");
    if (t.backward)
      os << " forward and " << t.backward << " backward";
    os << " per step, " << bytesText(t.bytes) << " in all, "
       << seconds(t.time) << " (" << graph.batchReductionWhy << ")\n";
  }
  if (!graph.batchReductions.empty() && p.pp > 1 && p.microbatches > 1)
    // Only under --microbatch-statistics (Search refuses it otherwise).
    os << "  batch statistics are each micro-batch's own (of "
       << p.microbatchSize << " samples; --microbatch-statistics), the "
       << "running statistics updated once per micro-batch ("
       << graph.batchReductionWhy << ")\n";
  os << "peak memory per device " << gib(p.peakMemory) << " of "
     << gib(static_cast<double>(cluster.device.memoryCapacity) *
            options.usableMemoryFraction)
     << " usable (" << format("%.0f%%", options.usableMemoryFraction * 100)
     << " of " << gib(static_cast<double>(cluster.device.memoryCapacity))
     << ")\n";
  if (train && !p.stages.empty()) {
    // Where the bytes go on the fullest stage's devices.
    const StagePlan *fullest = &p.stages.front();
    for (const StagePlan &st : p.stages)
      if (st.memory() > fullest->memory())
        fullest = &st;
    os << "  weights " << gib(fullest->weightBytes) << " + gradients "
       << gib(fullest->gradientBytes) << " + optimizer state "
       << gib(fullest->optimizerBytes)
       << (p.zeroStage >= 1 ? " (ZeRO-1: 1/" + std::to_string(p.dp) +
                                  " of it)"
                            : std::string())
       << " + activations " << gib(fullest->activationBytes) << "\n";
  }
  if (train && !result.serverAlternatives.empty()) {
    // All-reduce against parameter servers on the same devices.
    os << "\ngradient synchronisation on " << cluster.numDevices()
       << " devices (step time):\n";
    const Plan *fastestPS = nullptr;
    for (const Plan &alt : result.serverAlternatives)
      if (!fastestPS || alt.stepTime < fastestPS->stepTime)
        fastestPS = &alt;
    if (p.sync == GradientSync::AllReduce)
      os << format("  %-34s %12s\n",
                   ("ring all-reduce, " + std::to_string(p.dp) + " replicas")
                       .c_str(),
                   seconds(p.stepTime).c_str());
    for (const Plan &alt : result.serverAlternatives) {
      double busiest = 0;
      for (double b : alt.serverBytes)
        busiest = std::max(busiest, b);
      os << format("  %-34s %12s   busiest server link %s each way\n",
                   (std::to_string(alt.servers) +
                    (alt.servers == 1 ? " server + " : " servers + ") +
                    std::to_string(alt.dp) + " workers")
                       .c_str(),
                   seconds(alt.stepTime).c_str(), bytesText(busiest).c_str());
    }
    if (p.sync == GradientSync::AllReduce && fastestPS) {
      if (fastestPS->stepTime >= p.stepTime)
        os << "  all-reduce wins (" << format("%.2fx", fastestPS->stepTime / p.stepTime)
           << " faster than the best parameter-server plan, "
           << fastestPS->servers << " server(s)): a server's link carries its "
              "shard to and from every worker each step, and servers take "
              "devices from the workers; a ring spreads the same bytes over "
              "every link\n";
      else
        os << "  parameter servers would be faster here ("
           << fastestPS->servers << " server(s), "
           << format("%.2fx", p.stepTime / fastestPS->stepTime)
           << "): compile with --sync ps --servers " << fastestPS->servers
           << "\n";
    } else if (p.sync != GradientSync::AllReduce && !options.servers) {
      os << "  chosen: " << p.servers
         << " server(s), the fastest count priced\n";
    }
  }
  os << "\n";

  os << "stages:\n";
  os << format("  %-5s %-10s %-12s %-12s %-12s  %s\n", "stage", "segments",
               "devices", "time/mb", "memory", "layers");
  for (auto [k, st] : llvm::enumerate(p.stages)) {
    std::string segs = std::to_string(st.firstSegment) + "-" +
                       std::to_string(st.endSegment - 1);
    std::string devs = std::to_string(st.firstDevice) + "-" +
                       std::to_string(st.firstDevice + st.numDevices - 1);
    os << format("  %-5u %-10s %-12s %-12s %-12s  %s\n", unsigned(k),
                 segs.c_str(), devs.c_str(),
                 seconds(st.timePerMicrobatch).c_str(),
                 gib(st.memory()).c_str(), stageLabel(graph, st).c_str());
  }
  if (p.tp > 1) {
    os << "\ntensor parallelism (tp " << p.tp
       << "), per distinct segment: split ops and collectives per "
          "micro-batch\n";
    std::set<unsigned> seen;
    for (auto [i, seg] : llvm::enumerate(graph.segments)) {
      if (!seen.insert(seg.classId).second)
        continue;
      const SegmentSolution *sol = p.segmentSolutions[i];
      int64_t split = 0, total = 0;
      for (const NodeChoice &choice : sol->choices) {
      int64_t node = choice.node, factor = choice.factor;
        if (graph.nodes[node].kind != NodeKind::Compute ||
            graph.nodes[node].cost.opClass == OpClass::None)
          continue;
        ++total;
        split += factor >= 0;
      }
      os << "  segment " << i << " (" << seg.label << "): " << split << " of "
         << total << " ops split";
      CollectiveSummary cs = summarize(p, i, i + 1);
      for (auto &[key, val] : cs.byKind)
        os << "; " << val.first << " " << key.first
           << (key.second ? " (backward)" : "") << " of "
           << human(val.second / val.first) << "B";
      os << "\n";
      for (const NodeChoice &choice : sol->choices) {
      int64_t node = choice.node, factor = choice.factor;
        const PlanNode &n = graph.nodes[node];
        if (n.kind != NodeKind::Compute || factor < 0 ||
            n.cost.opClass != OpClass::Gemm)
          continue;
        // Name the GEMM split the way Megatron does.
        const OpShardingRule &rule = *n.rule;
        std::string how = rule.factors[factor].kind == FactorKind::Reduction
                              ? "row (K)"
                              : "column/batch dim";
        int64_t d = rule.resultDim(0, factor);
        if (d >= 0 && d + 1 == static_cast<int64_t>(
                                   graph.tensors[n.results[0]].shape.size()))
          how = "column (N)";
        else if (d >= 0)
          how = "dim " + std::to_string(d);
        os << "    " << opLabel(n.op) << ": split " << how << "\n";
      }
    }
  }
  if (!result.rejected.empty()) {
    os << "\nrejected alternatives:\n";
    for (const RejectedPlan &r : result.rejected)
      os << "  " << shape(r.plan) << ", " << r.plan.microbatches
         << " x mb " << r.plan.microbatchSize << ", recompute "
         << recomputeName(r.plan.recompute) << ": "
         << seconds(r.plan.stepTime) << ", " << r.reason << "\n";
  }
  os << "\nsearch: " << result.candidates << " candidates, "
     << result.ilpSolves << " segment problems (" << result.cbcSolves
     << " by ILP, the rest by variable elimination; "
     << format("%.2f", result.ilpSeconds) << " s), "
     << format("%.2f", result.searchSeconds) << " s in all\n";
}

json::Value distopt::planner::planToJSON(const PlanReport &report) {
  // Named references, not a structured binding: lambdas below capture
  // them (C++17 compilers such as the fuzz build's clang 14 refuse that).
  const PlanGraph &graph = report.graph;
  const Cluster &cluster = report.cluster;
  const PlanOptions &options = report.options;
  const PlanResult &result = report.result;
  const PlanContext &context = report.context;
  auto planObject = [&](const Plan &p) {
    json::Array stages;
    for (auto [k, st] : llvm::enumerate(p.stages)) {
      json::Array layers;
      stages.push_back(json::Object{
          {"index", static_cast<int64_t>(k)},
          {"segments", json::Array{st.firstSegment, st.endSegment}},
          {"layers", stageLabel(graph, st)},
          {"first_device", st.firstDevice},
          {"devices", st.numDevices},
          {"time_per_microbatch_s", st.timePerMicrobatch},
          {"compute_per_microbatch_s", st.computePerMicrobatch},
          {"tp_communication_per_microbatch_s", st.tpCommPerMicrobatch},
          {"p2p_per_microbatch_s", st.p2pPerMicrobatch},
          {"parameters_per_device", st.params},
          {"memory_bytes",
           json::Object{{"weights", st.weightBytes},
                        {"gradients", st.gradientBytes},
                        {"optimizer_state", st.optimizerBytes},
                        {"activations", st.activationBytes},
                        {"total", st.memory()}}},
      });
    }
    json::Object collectives;
    for (auto &[key, val] : summarize(p, 0, p.segmentSolutions.size()).byKind)
      collectives[key.first + (key.second ? "_backward" : "_forward")] =
          json::Object{{"count", val.first}, {"bytes", val.second}};
    return json::Object{
        {"dp", p.dp},
        {"tp", p.tp},
        {"pp", p.pp},
        {"devices_used", p.devices()},
        {"microbatches", p.microbatches},
        {"microbatch_size", p.microbatchSize},
        {"recompute", recomputeName(p.recompute)},
        {"schedule", pipelineScheduleName(p.schedule)},
        {"predicted_step_time_s", p.stepTime},
        {"compute_s", p.compute},
        {"communication_s", p.communication},
        {"bubble_s", p.bubble},
        {"data_parallel_sync_s", p.dataParallelSync},
        {"data_parallel_sync_total_s", p.dataParallelSyncTotal},
        {"optimizer_update_s", p.optimizerUpdate},
        {"gradient_dtype",
         dtypeName(options.gradDtype.value_or(options.precision))},
        {"gradient_bucket_bytes", options.bucketBytes},
        {"zero_stage", p.zeroStage},
        {"sync", gradientSyncName(p.sync)},
        {"servers", p.servers},
        {"backup_workers", p.backupWorkers},
        {"server_bytes_per_step", [&] {
           json::Array a;
           for (double b : p.serverBytes)
             a.push_back(b);
           return a;
         }()},
        {"peak_memory_bytes_per_device", p.peakMemory},
        {"fits", p.fits},
        {"stages", std::move(stages)},
        {"tp_collectives_per_microbatch", std::move(collectives)},
        {"vocabulary_parallel_loss", p.vocabularyParallelLoss},
        {"batch_statistics_all_reduces_per_microbatch", [&] {
           // Sums and means over the batch completed over the replicas.
           Totals t = totals(p.dataCollectives);
           return json::Object{{"forward", t.forward},
                               {"backward", t.backward},
                               {"bytes", t.bytes},
                               {"time_s", t.time}};
         }()},
    };
  };
  json::Object root = planObject(result.best);
  json::Array rejected;
  for (const RejectedPlan &r : result.rejected) {
    json::Object o = planObject(r.plan);
    o["reason"] = r.reason;
    o.erase("stages");
    rejected.push_back(std::move(o));
  }
  root["rejected"] = std::move(rejected);
  root["model"] = context.modelName;
  root["cluster"] = json::Object{
      {"spec", context.clusterSpec},
      {"devices", cluster.numDevices()},
      {"nodes", cluster.nodes},
      {"device", cluster.device.name},
      {"device_memory_bytes", cluster.device.memoryCapacity}};
  root["mode"] = options.mode == PlanMode::Train ? "train" : "infer";
  root["global_batch"] = options.globalBatch;
  root["precision"] = dtypeName(options.precision);
  root["parameters"] = graph.parameters;
  root["segments"] = static_cast<int64_t>(graph.segments.size());
  root["search"] = json::Object{{"candidates", result.candidates},
                                {"segment_problems", result.ilpSolves},
                                {"ilp_solves", result.cbcSolves},
                                {"ilp_seconds", result.ilpSeconds},
                                {"seconds", result.searchSeconds}};
  return root;
}
