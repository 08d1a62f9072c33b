//===- BufferAccess.cpp - loads and stores in terms of buffers ------------===//

#include "BufferAccess.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;

bool distopt::resolveAccess(Value memref, ValueRange operandIndices,
                            Access &access) {
  SmallVector<Value> indices(operandIndices);
  Value m = memref;
  while (Operation *def = m.getDefiningOp()) {
    if (auto cast = dyn_cast<memref::CastOp>(def)) {
      m = cast.getSource();
      continue;
    }
    if (auto sub = dyn_cast<memref::SubViewOp>(def)) {
      // Same rank: dimension p of the view is dimension p of the source,
      // at offset_p + stride_p * index. The index value carries over where
      // the offset is 0 and the stride 1; elsewhere it is unknown.
      if (sub.getSourceType().getRank() != sub.getType().getRank())
        return false;
      for (auto [p, off, st] : llvm::enumerate(sub.getMixedOffsets(),
                                               sub.getMixedStrides()))
        if (!isConstantIntValue(off, 0) || !isConstantIntValue(st, 1))
          indices[p] = Value();
      m = sub.getSource();
      continue;
    }
    auto expand = dyn_cast<memref::ExpandShapeOp>(def);
    auto collapse = dyn_cast<memref::CollapseShapeOp>(def);
    if (!expand && !collapse) {
      // A buffer of its own: an allocation, a global, or (after the memory
      // plan) one buffer's view of the arena. Any other way of making a
      // memref may alias something else.
      if (isa<memref::AllocOp, memref::AllocaOp, memref::GetGlobalOp,
              memref::ViewOp>(def))
        break;
      return false;
    }
    // Groups: for an expand, groups of result dims per source dim; for a
    // collapse, groups of source dims per result dim.
    SmallVector<ReassociationIndices> groups =
        expand ? expand.getReassociationIndices()
               : collapse.getReassociationIndices();
    ArrayRef<int64_t> wide = expand ? expand.getResultType().getShape()
                                    : collapse.getSrcType().getShape();
    auto nonUnit = [&](const ReassociationIndices &g) {
      int64_t found = -1;
      for (int64_t d : g)
        if (wide[d] != 1) {
          if (found >= 0)
            return int64_t(-2);
          found = d;
        }
      return found;
    };
    SmallVector<Value> next;
    if (expand) {
      // One source index per group: the index of its non-unit dim.
      for (const ReassociationIndices &g : groups) {
        int64_t d = nonUnit(g);
        next.push_back(d >= 0 ? indices[d] : Value());
      }
      m = expand.getSrc();
    } else {
      next.assign(collapse.getSrcType().getRank(), Value());
      for (auto [r, g] : llvm::enumerate(groups)) {
        int64_t d = nonUnit(g);
        if (d >= 0)
          next[d] = indices[r];
      }
      m = collapse.getSrc();
    }
    indices = std::move(next);
  }
  // A block argument is a buffer of its own only as an argument of the
  // function (inputs, weights, outputs); a loop-carried memref may be any.
  if (auto arg = dyn_cast<BlockArgument>(m)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (!isa_and_nonnull<func::FuncOp>(owner) || !arg.getOwner()->isEntryBlock())
      return false;
  }
  access.base = m;
  access.indices = std::move(indices);
  return true;
}


bool distopt::hasOpaqueMemoryEffects(Operation *op) {
  if (isa<memref::LoadOp, memref::StoreOp>(op))
    return false;
  // An op that states effects of its own (a linalg op on buffers) touches
  // memory the walk does not see, whatever its region holds.
  if (auto iface = dyn_cast<MemoryEffectOpInterface>(op)) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    iface.getEffects(effects);
    if (!effects.empty())
      return true;
  }
  // Loops and ifs: their effects are those of the ops inside, which the
  // walk visits.
  if (op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
    return false;
  return !isMemoryEffectFree(op);
}
