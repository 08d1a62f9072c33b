//===- PlanReport.h - printing a plan ---------------------------*- C++ -*-===//
//
// The readable summary `distopt plan` prints, and its JSON form (--json).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_PLANREPORT_H
#define DISTOPT_PLANNER_PLANREPORT_H

#include "distopt/Planner/Search.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace distopt::planner {

/// What the report says about the problem besides the plan.
struct PlanContext {
  std::string modelName;
  std::string clusterSpec;
};

/// A plan and what its reports show with it: the graph it was found on,
/// the cluster, the options of the search, and the problem's names.
struct PlanReport {
  const PlanGraph &graph;
  const Cluster &cluster;
  const PlanOptions &options;
  const PlanResult &result;
  PlanContext context;
};

/// The readable summary `distopt plan` prints.
void printPlanSummary(llvm::raw_ostream &os, const PlanReport &report);

/// The plan as JSON (`distopt plan --json`).
llvm::json::Value planToJSON(const PlanReport &report);

/// A self-contained HTML page: summary, SVG pipeline schedule of one step
/// on the devices, per-stage time and memory bars, rejected alternatives.
void writePlanHTML(llvm::raw_ostream &os, const PlanReport &report);

/// "1.234 s", "5.678 ms", "9.0 us".
std::string formatSeconds(double seconds);
/// "12.34 GiB".
std::string formatGiB(double bytes);

/// "layers /a/h.0 .. /a/h.5" style label of a stage's segments.
std::string stageLabel(const PlanGraph &graph, const StagePlan &stage);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_PLANREPORT_H
