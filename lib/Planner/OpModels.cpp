//===- OpModels.cpp - the planner's answers attached to the ops ----------===//

#include "distopt/Planner/OpModels.h"

#include "distopt/Planner/CostModel.h"
#include "distopt/Planner/ShardingRules.h"

void distopt::planner::registerOpModels(mlir::DialectRegistry &registry) {
  registerShardingRuleModels(registry);
  registerCostModels(registry);
}
