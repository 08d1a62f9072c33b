//===- Passes.h - distopt transformation passes -----------------*- C++ -*-===//
#ifndef DISTOPT_TRANSFORMS_PASSES_H
#define DISTOPT_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Transforms/Passes.h.inc"

/// A partitioned pipelined @main (module attribute dopt.pipeline) becomes one
/// function per stage (OutlineStagesPass; distopt-partition calls it unless
/// outline-stages=false).
mlir::LogicalResult outlinePipelineStages(mlir::ModuleOp module);

} // namespace distopt

#endif // DISTOPT_TRANSFORMS_PASSES_H
