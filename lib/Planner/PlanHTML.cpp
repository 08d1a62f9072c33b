//===- PlanHTML.cpp - `distopt plan --report FILE.html` -------------------===//
//
// A self-contained page (inline CSS and SVG, no scripts, no network): the
// plan's summary, the pipeline schedule of one training step drawn on the
// devices (simulated 1F1B, or GPipe-style forward passes for inference),
// per-stage time and memory bars, and the rejected alternatives.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/PlanReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <deque>

using namespace distopt::planner;
using llvm::format;

namespace {

std::string escape(llvm::StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string secs(double s) { return formatSeconds(s); }
std::string gib(double b) { return formatGiB(b); }

/// One box of the schedule: stage, micro-batch, forward or backward.
struct Box {
  int64_t stage, micro;
  bool backward;
  double start, end;
};

/// Simulates one step: 1F1B (training) or forward passes (inference).
/// Stage k runs its ops in order; F(k,i) waits for F(k−1,i), B(k,i) for
/// B(k+1,i) (and F(k,i)); p2p time is part of the sender's box.
std::vector<Box> simulate(const Plan &plan, bool train, double &makespan) {
  int64_t p = plan.pp, m = plan.microbatches;
  std::vector<std::vector<std::pair<int64_t, bool>>> order(p);
  for (int64_t k = 0; k < p; ++k) {
    if (!train) {
      for (int64_t i = 0; i < m; ++i)
        order[k].push_back({i, false});
      continue;
    }
    int64_t warm = std::min(m, p - k);
    int64_t f = 0, b = 0;
    for (; f < warm; ++f)
      order[k].push_back({f, false});
    while (b < m) {
      order[k].push_back({b++, true});
      if (f < m)
        order[k].push_back({f++, false});
    }
  }
  std::vector<double> fwd(p), bwd(p);
  for (int64_t k = 0; k < p; ++k) {
    const StagePlan &s = plan.stages[k];
    double total = s.timePerMicrobatch;
    // Forward is a third of forward+backward (plus recomputation, which
    // runs in the backward box).
    double f = train ? total / (plan.recompute == Recompute::Full ? 4 : 3)
                     : total;
    fwd[k] = f;
    bwd[k] = train ? total - f : 0;
  }
  std::vector<std::vector<double>> doneF(p, std::vector<double>(m, -1)),
      doneB(p, std::vector<double>(m, -1));
  std::vector<size_t> next(p, 0);
  std::vector<double> free(p, 0);
  std::vector<Box> boxes;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t k = 0; k < p; ++k) {
      while (next[k] < order[k].size()) {
        auto [i, back] = order[k][next[k]];
        double ready = free[k];
        if (!back) {
          if (k > 0) {
            if (doneF[k - 1][i] < 0)
              break;
            ready = std::max(ready, doneF[k - 1][i]);
          }
        } else {
          if (k + 1 < p) {
            if (doneB[k + 1][i] < 0)
              break;
            ready = std::max(ready, doneB[k + 1][i]);
          }
          if (doneF[k][i] < 0)
            break;
        }
        double end = ready + (back ? bwd[k] : fwd[k]);
        (back ? doneB : doneF)[k][i] = end;
        free[k] = end;
        boxes.push_back({k, i, back, ready, end});
        ++next[k];
        progress = true;
      }
    }
  }
  makespan = *std::max_element(free.begin(), free.end());
  return boxes;
}

void writeScheduleSVG(llvm::raw_ostream &os, const Plan &plan, bool train) {
  double makespan = 0;
  std::vector<Box> boxes = simulate(plan, train, makespan);
  double tail = plan.dataParallelSync + plan.optimizerUpdate;
  double total = makespan + tail;
  const double left = 150, width = 900, row = 26, top = 30;
  double height = top + row * plan.pp + 40;
  auto x = [&](double t) { return left + width * t / std::max(total, 1e-30); };
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"schedule\" width=\""
     << left + width + 20 << "\" height=\"" << height << "\">\n";
  os << "<text x=\"" << left << "\" y=\"18\" class=\"axis\">0</text>"
     << "<text x=\"" << left + width << "\" y=\"18\" class=\"axis\" "
     << "text-anchor=\"end\">" << escape(secs(total)) << "</text>\n";
  for (int64_t k = 0; k < plan.pp; ++k) {
    const StagePlan &s = plan.stages[k];
    double y = top + row * k;
    os << "<text x=\"4\" y=\"" << y + row * 0.65 << "\" class=\"label\">stage "
       << k << " (dev " << s.firstDevice << "-"
       << s.firstDevice + s.numDevices - 1 << ")</text>\n";
    os << "<rect x=\"" << left << "\" y=\"" << y + 2 << "\" width=\"" << width
       << "\" height=\"" << row - 4 << "\" class=\"idle\"/>\n";
  }
  // Thin boxes are merged per stage when there are very many.
  for (const Box &b : boxes) {
    double y = top + row * b.stage;
    os << "<rect x=\"" << format("%.2f", x(b.start)) << "\" y=\"" << y + 2
       << "\" width=\"" << format("%.2f", std::max(0.3, x(b.end) - x(b.start)))
       << "\" height=\"" << row - 4 << "\" class=\""
       << (b.backward ? "bwd" : "fwd") << "\"><title>"
       << (b.backward ? "backward" : "forward") << " micro-batch " << b.micro
       << ", stage " << b.stage << ": " << escape(secs(b.end - b.start))
       << "</title></rect>\n";
  }
  if (tail > 0)
    for (int64_t k = 0; k < plan.pp; ++k) {
      double y = top + row * k;
      os << "<rect x=\"" << format("%.2f", x(makespan)) << "\" y=\"" << y + 2
         << "\" width=\"" << format("%.2f", x(total) - x(makespan))
         << "\" height=\"" << row - 4
         << "\" class=\"sync\"><title>data-parallel gradient all-reduce "
            "(exposed) and optimizer update: "
         << escape(secs(tail)) << "</title></rect>\n";
    }
  double y = top + row * plan.pp + 22;
  os << "<rect x=\"" << left << "\" y=\"" << y - 10
     << "\" width=\"12\" height=\"12\" class=\"fwd\"/><text x=\"" << left + 16
     << "\" y=\"" << y << "\" class=\"axis\">forward</text>";
  if (train)
    os << "<rect x=\"" << left + 90 << "\" y=\"" << y - 10
       << "\" width=\"12\" height=\"12\" class=\"bwd\"/><text x=\""
       << left + 106 << "\" y=\"" << y
       << "\" class=\"axis\">backward (with recomputation)</text>"
       << "<rect x=\"" << left + 320 << "\" y=\"" << y - 10
       << "\" width=\"12\" height=\"12\" class=\"sync\"/><text x=\""
       << left + 336 << "\" y=\"" << y
       << "\" class=\"axis\">gradient all-reduce + optimizer</text>";
  os << "</svg>\n";
  os << "<p class=\"note\">Simulated step: " << escape(secs(total))
     << " (pipeline " << escape(secs(makespan)) << "). The cost model "
     << "predicts with the closed form Σ τ<sub>k</sub> + (m−1)·max "
     << "τ<sub>k</sub> + sync + update = " << escape(secs(plan.stepTime))
     << ", equal to the simulation for balanced stages and an upper bound "
     << "when they are uneven.</p>\n";
}

void writeStageBars(llvm::raw_ostream &os, const Plan &plan,
                    const Cluster &cluster) {
  double maxTime = 0, maxMem = static_cast<double>(cluster.device.memoryCapacity);
  for (const StagePlan &s : plan.stages) {
    maxTime = std::max(maxTime, s.timePerMicrobatch);
    maxMem = std::max(maxMem, s.memory());
  }
  const double left = 80, width = 420, row = 22, top = 24;
  double height = top + row * plan.pp + 10;
  auto bar = [&](double x0, double w, double y, const char *cls,
                 const std::string &title) {
    if (w <= 0)
      return;
    os << "<rect x=\"" << format("%.2f", x0) << "\" y=\"" << y + 3
       << "\" width=\"" << format("%.2f", w) << "\" height=\"" << row - 6
       << "\" class=\"" << cls << "\"><title>" << escape(title)
       << "</title></rect>";
  };
  // Time per micro-batch.
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\""
     << left + width + 20 << "\" height=\"" << height << "\">\n"
     << "<text x=\"" << left << "\" y=\"14\" class=\"axis\">time per "
        "micro-batch (compute | tensor-parallel comm | stage-to-stage)</text>\n";
  for (auto [k, s] : llvm::enumerate(plan.stages)) {
    double y = top + row * k, x0 = left;
    os << "<text x=\"4\" y=\"" << y + row * 0.7 << "\" class=\"label\">stage "
       << k << "</text>";
    double scale = width / std::max(maxTime, 1e-30);
    bar(x0, s.computePerMicrobatch * scale, y, "fwd",
        "compute " + secs(s.computePerMicrobatch));
    x0 += s.computePerMicrobatch * scale;
    bar(x0, s.tpCommPerMicrobatch * scale, y, "comm",
        "tensor-parallel collectives " + secs(s.tpCommPerMicrobatch));
    x0 += s.tpCommPerMicrobatch * scale;
    bar(x0, s.p2pPerMicrobatch * scale, y, "p2p",
        "send/recv " + secs(s.p2pPerMicrobatch));
    os << "\n";
  }
  os << "</svg>\n";
  // Memory per device.
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\""
     << left + width + 20 << "\" height=\"" << height << "\">\n"
     << "<text x=\"" << left << "\" y=\"14\" class=\"axis\">memory per device "
        "(weights | gradients | optimizer | activations), line: capacity"
        "</text>\n";
  double scale = width / maxMem;
  for (auto [k, s] : llvm::enumerate(plan.stages)) {
    double y = top + row * k, x0 = left;
    os << "<text x=\"4\" y=\"" << y + row * 0.7 << "\" class=\"label\">stage "
       << k << "</text>";
    const std::pair<double, const char *> parts[] = {
        {s.weightBytes, "weights"},
        {s.gradientBytes, "gradients"},
        {s.optimizerBytes, "optimizer"},
        {s.activationBytes, "activations"}};
    for (auto [bytes, cls] : parts) {
      bar(x0, bytes * scale, y, cls, std::string(cls) + " " + gib(bytes));
      x0 += bytes * scale;
    }
    os << "\n";
  }
  double cap = left + static_cast<double>(cluster.device.memoryCapacity) * scale;
  os << "<line x1=\"" << cap << "\" y1=\"" << top - 4 << "\" x2=\"" << cap
     << "\" y2=\"" << height << "\" class=\"capacity\"/>\n</svg>\n";
}

} // namespace

void distopt::planner::writePlanHTML(llvm::raw_ostream &os,
                                     const PlanReport &report) {
  const Plan &p = report.result.best;
  bool train = report.options.mode == PlanMode::Train;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
     << "<title>distopt plan: " << escape(report.context.modelName) << " on "
     << escape(report.context.clusterSpec) << "</title>\n<style>\n"
     << "body{font-family:sans-serif;margin:24px;color:#222}"
        "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:3px 8px;font-size:13px;text-align:right}"
        "th{background:#f3f3f3}td.l,th.l{text-align:left}"
        ".label,.axis{font-size:11px;fill:#333}.idle{fill:#f4f4f4}"
        ".fwd{fill:#4e79a7}.bwd{fill:#f28e2b}.sync{fill:#76b7b2}"
        ".comm{fill:#e15759}.p2p{fill:#b07aa1}.weights{fill:#4e79a7}"
        ".gradients{fill:#59a14f}.optimizer{fill:#edc948}"
        ".activations{fill:#f28e2b}.capacity{stroke:#c00;stroke-width:2}"
        ".note{font-size:12px;color:#555}pre{font-size:12px;"
        "background:#f7f7f7;padding:8px}\n</style></head><body>\n";
  os << "<h1 id=\"title\">distopt plan: " << escape(report.context.modelName)
     << " on " << escape(report.context.clusterSpec) << "</h1>\n";
  os << "<p>" << report.cluster.numDevices() << " × "
     << escape(report.cluster.device.name) << " (" << report.cluster.nodes
     << (report.cluster.nodes == 1 ? " node" : " nodes") << "); "
     << (train ? "training" : "inference") << ", global batch "
     << report.options.globalBatch << ", "
     << dtypeName(report.options.precision)
     << "; model: " << format("%.4g", report.graph.parameters / 1e9)
     << " billion parameters, " << report.graph.segments.size()
     << " segments.</p>\n";
  os << "<h2>Plan</h2>\n<table id=\"plan\"><tr><th>dp</th><th>tp</th>"
        "<th>pp</th><th>devices</th><th>micro-batches</th><th>micro-batch "
        "size</th><th>recompute</th><th>step time</th><th>compute</th>"
        "<th>communication</th><th>bubble</th><th>peak memory</th></tr>\n";
  os << "<tr><td>" << p.dp << "</td><td>" << p.tp << "</td><td>" << p.pp
     << "</td><td>" << p.devices() << "</td><td>" << p.microbatches
     << "</td><td>" << p.microbatchSize << "</td><td>"
     << recomputeName(p.recompute) << "</td><td>" << secs(p.stepTime)
     << "</td><td>" << secs(p.compute) << "</td><td>" << secs(p.communication)
     << "</td><td>" << secs(p.bubble) << "</td><td>" << gib(p.peakMemory)
     << " of " << gib(static_cast<double>(report.cluster.device.memoryCapacity))
     << "</td></tr></table>\n";
  os << "<h2>Pipeline schedule of one step</h2>\n";
  writeScheduleSVG(os, p, train);
  os << "<h2>Stages</h2>\n";
  writeStageBars(os, p, report.cluster);
  os << "<table id=\"stages\"><tr><th>stage</th><th>devices</th><th "
        "class=\"l\">layers</th><th>time / micro-batch</th><th>parameters / "
        "device</th><th>memory</th></tr>\n";
  for (auto [k, s] : llvm::enumerate(p.stages))
    os << "<tr><td>" << k << "</td><td>" << s.firstDevice << "-"
       << s.firstDevice + s.numDevices - 1 << "</td><td class=\"l\">"
       << escape(stageLabel(report.graph, s)) << "</td><td>"
       << secs(s.timePerMicrobatch) << "</td><td>" << format("%.4g", s.params)
       << "</td><td>" << gib(s.memory()) << "</td></tr>\n";
  os << "</table>\n";
  if (!report.result.rejected.empty()) {
    os << "<h2>Rejected alternatives</h2>\n<table id=\"rejected\"><tr>"
          "<th>dp</th><th>tp</th><th>pp</th><th>micro-batches</th>"
          "<th>recompute</th><th>step time</th><th class=\"l\">why not"
          "</th></tr>\n";
    for (const RejectedPlan &r : report.result.rejected)
      os << "<tr><td>" << r.plan.dp << "</td><td>" << r.plan.tp << "</td><td>"
         << r.plan.pp << "</td><td>" << r.plan.microbatches << "</td><td>"
         << recomputeName(r.plan.recompute) << "</td><td>"
         << secs(r.plan.stepTime) << "</td><td class=\"l\">"
         << escape(r.reason) << "</td></tr>\n";
    os << "</table>\n";
  }
  std::string text;
  llvm::raw_string_ostream ts(text);
  printPlanSummary(ts, report);
  os << "<h2>Summary</h2>\n<pre>" << escape(text) << "</pre>\n";
  os << "</body></html>\n";
}
