//===- OutlineLoopNests.cpp - bounded-size functions for LLVM -------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>

namespace distopt {
#define GEN_PASS_DEF_OUTLINELOOPNESTSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

int64_t countOps(Operation *op) {
  int64_t n = 0;
  op->walk([&](Operation *) { ++n; });
  return n;
}

/// An operation with results that may stay in the caller while the
/// operations around it move into one function: nothing it does can be
/// reordered against them (no effects, or only an allocation). It stays
/// unless it reads a result of the chunk being formed.
bool staysInCaller(Operation *op) {
  if (op->getNumRegions() != 0)
    return false;
  if (isMemoryEffectFree(op))
    return true;
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  return effects && effects.onlyHasEffect<MemoryEffects::Allocate>();
}

struct OutlineLoopNestsPass
    : distopt::impl::OutlineLoopNestsPassBase<OutlineLoopNestsPass> {
  using OutlineLoopNestsPassBase::OutlineLoopNestsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp f : funcs) {
      if (f.isExternal() || !f.getBody().hasOneBlock() ||
          countOps(f) < minOps)
        continue;
      Block &body = f.getBody().front();
      SmallVector<SmallVector<Operation *>> chunks(1);
      llvm::SmallPtrSet<Operation *, 16> inChunk; // the current chunk's
      int64_t size = 0;
      auto startChunk = [&] {
        if (chunks.back().empty())
          return;
        chunks.emplace_back();
        inChunk.clear();
        size = 0;
      };
      for (Operation &op : body.without_terminator()) {
        bool readsChunk = llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          return def && inChunk.contains(def);
        });
        if (op.getNumResults() > 0 && staysInCaller(&op)) {
          if (!readsChunk)
            continue; // stays where it is, before the chunk's call
          // A stack allocation must not move into a function that returns
          // it: the chunk ends, its results come back first.
          if (hasEffect<MemoryEffects::Allocate>(&op)) {
            startChunk();
            continue;
          }
        }
        int64_t n = countOps(&op);
        if (size > 0 && size + n > chunkOps && !readsChunk)
          startChunk();
        chunks.back().push_back(&op);
        inChunk.insert(&op);
        size += n;
      }
      unsigned index = 0;
      for (ArrayRef<Operation *> chunk : chunks)
        if (!chunk.empty())
          outline(f, chunk, index++, symbols);
    }
  }

  /// Moves `chunk` (top-level operations of `f`, in order) into a new
  /// private function called where its last operation was; the function
  /// returns the chunk's values used after it.
  void outline(func::FuncOp f, ArrayRef<Operation *> chunk, unsigned index,
               SymbolTable &symbols) {
    Block &body = f.getBody().front();
    // Values of the caller's top level the chunk reads: what side-effect-
    // free operations compute (constants, views of the arena, index
    // arithmetic) is recomputed in the function, so loop bounds stay
    // constants and every buffer stays a known offset of the arena (LLVM's
    // alias analysis tells them apart as in one function); the rest
    // (the arena, entry arguments, results of calls) become arguments.
    llvm::SmallPtrSet<Operation *, 16> members(chunk.begin(), chunk.end());
    llvm::SetVector<Value> arguments;
    llvm::SetVector<Operation *> recomputed; // operands first
    std::function<void(Value)> use = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (v.getParentBlock() != &body || members.contains(def) ||
          recomputed.contains(def))
        return;
      if (!def || def->getNumRegions() != 0 || !isMemoryEffectFree(def)) {
        arguments.insert(v);
        return;
      }
      for (Value operand : def->getOperands())
        use(operand);
      recomputed.insert(def);
    };
    for (Operation *top : chunk)
      top->walk([&](Operation *op) {
        for (Value v : op->getOperands())
          use(v);
      });
    SmallVector<Value> results;
    for (Operation *op : chunk)
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *user) {
              return !members.contains(body.findAncestorOpInBlock(*user));
            }))
          results.push_back(r);
    OpBuilder b(f);
    SmallVector<Type> types, resultTypes;
    for (Value v : arguments)
      types.push_back(v.getType());
    for (Value v : results)
      resultTypes.push_back(v.getType());
    auto part = func::FuncOp::create(
        b, chunk.front()->getLoc(),
        (f.getSymName() + "_part" + Twine(index)).str(),
        b.getFunctionType(types, resultTypes));
    part.setPrivate();
    part->setAttr("passthrough", b.getArrayAttr({b.getStringAttr("noinline")}));
    // A buffer the caller allocated (the arena) is a distinct allocation, as
    // LLVM knew inside one function: its aligned pointer (the second field
    // of the memref's LLVM arguments) is marked noalias once lowered
    // (cpu::lowerLoopsToLLVMDialect). Computed here, where the arguments
    // are still memrefs.
    SmallVector<int64_t> noalias;
    int64_t position = 0;
    bool known = true;
    for (Value v : arguments) {
      if (auto m = dyn_cast<MemRefType>(v.getType())) {
        if (isa_and_nonnull<memref::AllocOp, memref::AllocaOp>(v.getDefiningOp()))
          noalias.push_back(position + 1);
        position += 3 + 2 * m.getRank();
      } else if (v.getType().isIntOrIndexOrFloat()) {
        position += 1;
      } else {
        known = false;
      }
    }
    if (!known)
      noalias.clear();
    // Also what marks the function as one of ours once lowered: it gets
    // internal linkage there (several programs of a bundle have one).
    part->setAttr("dopt.outlined", b.getDenseI64ArrayAttr(noalias));
    symbols.insert(part); // renames on a clash
    Block *entry = part.addEntryBlock();
    b.setInsertionPointToStart(entry);
    IRMapping map;
    for (auto [v, arg] : llvm::zip(arguments, entry->getArguments()))
      map.map(v, arg);
    for (Operation *op : recomputed)
      b.clone(*op, map);
    for (Operation *op : chunk)
      b.clone(*op, map);
    SmallVector<Value> returned;
    for (Value r : results)
      returned.push_back(map.lookup(r));
    func::ReturnOp::create(b, f.getLoc(), returned);

    b.setInsertionPoint(chunk.back());
    auto call = func::CallOp::create(b, chunk.back()->getLoc(), part,
                                     arguments.getArrayRef());
    for (auto [r, v] : llvm::zip(results, call.getResults()))
      r.replaceAllUsesWith(v);
    for (Operation *op : llvm::reverse(chunk))
      op->erase();
  }
};

} // namespace
