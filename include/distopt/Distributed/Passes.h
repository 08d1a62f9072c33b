//===- Passes.h - distopt distribution passes -------------------------------*- C++ -*-===//
#ifndef DISTOPT_DISTRIBUTED_PASSES_H
#define DISTOPT_DISTRIBUTED_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Distributed/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Distributed/Passes.h.inc"

/// A partitioned pipelined @main (module attribute dopt.pipeline) becomes one
/// function per stage (OutlineStagesPass; distopt-partition calls it unless
/// outline-stages=false).
mlir::LogicalResult outlinePipelineStages(mlir::ModuleOp module);

} // namespace distopt

#endif // DISTOPT_DISTRIBUTED_PASSES_H
