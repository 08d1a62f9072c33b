//===- Prepare.cpp - the imported model as the stages after it want it ---===//
//
// Before planning, the imported model is rewritten once: its attention
// chains become dopt.attention (distopt-fuse-attention), and a 16-bit
// precision rewrites it to compute in 16 bits (distopt-autocast). The
// planner then prices what will run, at the widths it will have, and every
// later stage (partitioning, training, lowering) works on that program.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace distopt;

LogicalResult driver::prepareImported(ModuleOp module, bool fuseAttention,
                                      std::optional<planner::DType> precision,
                                      bool storeWeights) {
  PassManager pm(module.getContext());
  if (fuseAttention)
    pm.addPass(createFuseAttentionPass());
  if (precision && planner::isHalfPrecision(*precision)) {
    AutocastPassOptions options;
    options.precision = *precision == planner::DType::BF16 ? "bf16" : "f16";
    options.storeWeights = storeWeights;
    pm.addPass(createAutocastPass(options));
  }
  return pm.run(module);
}
