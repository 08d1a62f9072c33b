//===- Accumulators.h - reduction accumulators of a loop --------*- C++ -*-===//
//
// A linalg reduction lowered to loops loads and stores its accumulator (one
// element at indices that do not change in the loop) on every iteration.
// Recognising that shape is one rule, used where a reduction is rewritten:
// distopt-promote-reductions keeps the accumulator in a register on the
// CPU, distopt-map-loops-to-gpu spreads the loop over a block's threads
// with a block all-reduce.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_CODEGEN_ACCUMULATORS_H
#define DISTOPT_CODEGEN_ACCUMULATORS_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace distopt {

/// One accumulator: a load and a later store of the same element, both
/// directly in the loop body.
struct Accumulator {
  mlir::memref::LoadOp load;
  mlir::memref::StoreOp store;
};

/// Whether an access reads or writes the same element on every iteration
/// of `loop`: its memref and indices are defined outside it.
bool sameElementEachIteration(mlir::scf::ForOp loop, mlir::Value memref,
                              mlir::ValueRange indices);

/// The read-modify-write updates of `body` (the innermost body of loops
/// rooted at `scope`): each store directly in `body` goes back to the
/// element a load before it in `body` read, of a buffer defined outside
/// `scope` that nothing else in `scope` touches. Nothing when `body` writes
/// memory otherwise. Which loops the indices vary with is the caller's to
/// check. Buffers are told apart by SSA value, which holds for loops
/// lowered from linalg: an op's inputs never alias its output, and the
/// memory plan gives values live at once disjoint parts of the arena.
llvm::SmallVector<Accumulator> findUpdates(mlir::Block *body,
                                           mlir::Operation *scope);

/// The accumulators of `loop`, or nothing when its body writes memory other
/// than through them (or has effects that are not understood). Each
/// accumulator's element is the only thing of its buffer the loop reads.
llvm::SmallVector<Accumulator> findAccumulators(mlir::scf::ForOp loop);

} // namespace distopt

#endif // DISTOPT_CODEGEN_ACCUMULATORS_H
