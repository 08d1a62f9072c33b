//===- BufferAccess.h - loads and stores in terms of buffers -----*- C++ -*-===//
//
// Shared by the loop passes that run after bufferization
// (distopt-fuse-parallel-loops, distopt-promote-reductions). They rely on
// one fact of the CPU pipeline: two different buffers never overlap.
// Bufferization gives every tensor live at the same time its own buffer,
// distopt-plan-buffers gives buffers live at the same time disjoint bytes
// of the arena (each its own memref.view), and the entry arguments (inputs,
// weights, outputs) are distinct buffers. So accesses through different
// bases touch different memory.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TRANSFORMS_BUFFERACCESS_H
#define DISTOPT_LIB_TRANSFORMS_BUFFERACCESS_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/TypeRange.h"
#include "mlir/IR/Value.h"
#include "mlir/IR/ValueRange.h"
#include "llvm/ADT/SmallVector.h"

namespace distopt {

/// A load or store, in terms of the buffer behind the views it goes
/// through: `indices[p]` is the index of dimension p of `base`, or null
/// where it is not one of the access's index values.
struct Access {
  mlir::Value base;
  llvm::SmallVector<mlir::Value> indices;
  bool write = false;
};

/// Follows a memref through views -- casts, subviews of the same rank (an
/// index value carries over in the dimensions with offset 0 and stride 1,
/// and is unknown in the others), and reshapes whose reassociation groups
/// have at most one non-unit dimension -- down to a buffer of its
/// own: a function argument, an allocation, a global, or one buffer's view
/// of the memory plan's arena. False for anything else (other views, whose
/// elements this cannot place, or memrefs of unknown origin).
bool resolveAccess(mlir::Value memref, mlir::ValueRange indices,
                   Access &access);

/// Whether `op` may touch memory in a way a walk over loads and stores does
/// not see: anything but loads, stores, effect-free ops, and ops whose
/// effects are those of the ops they hold (scf loops and ifs, visited by
/// the walk). A linalg op on buffers, a call or a memref.copy counts.
bool hasOpaqueMemoryEffects(mlir::Operation *op);

} // namespace distopt

#endif // DISTOPT_LIB_TRANSFORMS_BUFFERACCESS_H
