//===- PlanToIR.h - write a plan onto the dopt IR ---------------*- C++ -*-===//
//
// The plan becomes IR the partitioner reads:
//  * `shard.grid @dopt_grid(shape = PPxDPxTP)`: axis 0 the pipeline stages,
//    axis 1 data parallelism, axis 2 tensor parallelism;
//  * every op result (and function argument) is annotated with
//    `shard.shard %v to %sharding`: the batch dimension split over axis 1,
//    the tensor-parallel split over axis 2; a partial result (a row-split
//    matmul before its all-reduce) carries `dopt.partial = "sum"|"max"`
//    over axis 2 on that shard.shard;
//  * an operand that needs another sharding than its producer gives gets a
//    `shard.shard ... annotate_for_users` in front of its user: the
//    resharding the cost model priced;
//  * ops carry `dopt.stage = k` (their pipeline stage), the module
//    `dopt.plan = {dp, tp, pp, microbatches, microbatch_size, recompute}`.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_PLANTOIR_H
#define DISTOPT_PLANNER_PLANTOIR_H

#include "distopt/Planner/Search.h"

#include "mlir/IR/BuiltinOps.h"

namespace distopt::planner {

/// Annotates the function `graph` was built from (inside `module`). The IR
/// stays valid; fails only on a graph that does not match the module.
llvm::Error annotatePlan(mlir::ModuleOp module, const PlanGraph &graph,
                         const Plan &plan);

/// After distopt-partition: checks that the program's collectives are the
/// ones the cost model priced — the same kinds, counts and tensor sizes
/// (the plan prices one micro-batch; the program runs all of them at once)
/// — so plan and program cannot drift apart. The error lists both.
/// A plan made for a `precision` prices every floating-point tensor at its
/// width (CostOptions::precision); they are counted so here.
llvm::Error checkPlannedCollectives(mlir::ModuleOp partitioned,
                                    const Plan &plan,
                                    std::optional<DType> precision = {});

/// Records on the module (`dopt.planned_backward`) the backward collectives
/// the plan priced for one step of one rank: what the program's
/// differentiation may execute over the tensor axis.
/// With a `precision`, floating-point tensors count at its width
/// (`dopt.planned_float_bytes`), as in checkPlannedCollectives.
void recordPlannedBackward(mlir::ModuleOp partitioned, const Plan &plan,
                           std::optional<DType> precision = {});

/// After differentiation (distopt-autodiff or distopt-pipeline-training):
/// every backward collective the program executes over the tensor axis
/// (ops marked `dopt.backward`) must be one the plan priced -- the same
/// kind and tensor size, no more of them than priced (the backward sums a
/// replicated value's shares once, where the plan prices each consumer's
/// edge, so the program may run fewer). The error lists both.
llvm::Error checkBackwardCollectives(mlir::ModuleOp program);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_PLANTOIR_H
