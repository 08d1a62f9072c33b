//===- LoopSplit.h - split an scf.parallel into outer and inner loops -*- C++ -*-===//
//
// Shared by distopt-fuse-parallel-loops (fuses over leading dimensions, the
// rest stays a parallel loop inside) and distopt-parallelize-loops (keeps
// leading dimensions parallel, the rest becomes sequential).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TRANSFORMS_LOOPSPLIT_H
#define DISTOPT_LIB_TRANSFORMS_LOOPSPLIT_H

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace distopt {

/// How the dimensions after the outer ones are iterated.
enum class InnerLoops { Parallel, Sequential };

/// Replaces `op` (an scf.parallel without results) by the same iterations
/// as an scf.parallel over its first `outer` dimensions around the others:
/// one nested scf.parallel (`InnerLoops::Parallel`) or nested scf.for loops
/// in order (`InnerLoops::Sequential`). With outer == 0 there is no outer
/// loop; with outer equal to the number of dimensions, `op` is unchanged.
/// Returns the outer scf.parallel (`op` itself when unchanged), or null
/// when outer == 0.
mlir::scf::ParallelOp splitParallelLoop(mlir::scf::ParallelOp op,
                                        unsigned outer, InnerLoops inner);

} // namespace distopt

#endif // DISTOPT_LIB_TRANSFORMS_LOOPSPLIT_H
