//===- Precision.cpp - --precision on an imported model -------------------===//
//
// A 16-bit precision rewrites the imported model once (distopt-autocast),
// before planning: the planner then prices each tensor at the width it will
// have, and every later stage (partitioning, training, lowering) works on
// the 16-bit program.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace distopt;

LogicalResult driver::autocast(ModuleOp module,
                               std::optional<planner::DType> precision,
                               bool storeWeights) {
  if (!precision || !planner::isHalfPrecision(*precision))
    return success();
  AutocastPassOptions options;
  options.precision = *precision == planner::DType::BF16 ? "bf16" : "f16";
  options.storeWeights = storeWeights;
  PassManager pm(module.getContext());
  pm.addPass(createAutocastPass(options));
  return pm.run(module);
}

LogicalResult driver::fuseAttention(ModuleOp module) {
  PassManager pm(module.getContext());
  pm.addPass(createFuseAttentionPass());
  return pm.run(module);
}
