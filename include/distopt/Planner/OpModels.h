//===- OpModels.h - the planner's answers attached to the ops ---*- C++ -*-===//
//
// The planner answers two questions for the dopt ops, as external models of
// the interfaces in DoptInterfaces.td: how an op may be split
// (ShardingRuleOpInterface, ShardingRules.cpp) and what it costs
// (CostOpInterface, CostModel.cpp). A context that plans or partitions
// registers them before loading the dialect.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_OPMODELS_H
#define DISTOPT_PLANNER_OPMODELS_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace distopt::planner {

/// registerShardingRuleModels and registerCostModels.
void registerOpModels(mlir::DialectRegistry &registry);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_OPMODELS_H
