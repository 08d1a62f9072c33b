//===- LoopsToGPU.cpp - bufferized loop nests -> gpu.launch ---------------===//
//
// The CUDA pipeline's mapping of the CPU pipeline's loops onto the GPU. The
// input is what the CPU target has after `distopt-fuse-parallel-loops` and
// `distopt-plan-buffers`: a function whose top level is a sequence of
// `scf.parallel` nests (one per fused linalg op, or one per row-fused group
// such as a softmax or a layer norm), runtime calls (GEMMs, collectives) and
// view arithmetic on the arena. Every op that touches memory becomes (part
// of) a `gpu.launch`; everything else stays on the host.
//
// Three shapes (docs/cuda-codegen.md):
//  - a flat nest (no `scf.parallel` directly in its body): one thread per
//    iteration of the whole nest, 256 threads a block, the innermost loop
//    dimension fastest so a warp touches consecutive addresses;
//  - a row-fused nest (inner `scf.parallel` loops between scalar steps): one
//    block per outer iteration; each inner loop is strided over the block's
//    threads, scalar steps that write memory (a reduction's `scf.for`, a
//    store of the row's statistic) run on thread 0, and barriers keep the
//    steps in order;
//  - anything else that reads or writes memory (a loop nest with no parallel
//    dimension, e.g. a reduction to one scalar): one thread.
// Nested parallel loops left inside a thread's work run sequentially.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"

namespace distopt {
#define GEN_PASS_DEF_MAPLOOPSTOGPUPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

constexpr int64_t kFlatBlock = 256;
constexpr int64_t kMaxRowBlock = 256;

/// Ops that stay on the host: they compute addresses or sizes, or are calls
/// into the runtime, and never dereference a buffer.
bool staysOnHost(Operation *op) {
  if (isa<func::CallOp, func::ReturnOp, memref::AllocOp, memref::DeallocOp,
          memref::GetGlobalOp, memref::CastOp,
          memref::ExtractStridedMetadataOp,
          memref::ExtractAlignedPointerAsIndexOp>(op))
    return true;
  if (isa<ViewLikeOpInterface>(op))
    return true;
  return op->getNumRegions() == 0 && isMemoryEffectFree(op);
}

/// What the kernels should carry in rather than receive as arguments: views
/// (so every kernel argument is a whole buffer with an identity layout, as
/// the bare-pointer calling convention needs), globals and pure scalars.
bool sinkIntoKernel(Operation *op) {
  if (isa<memref::GetGlobalOp, memref::CastOp>(op) ||
      isa<ViewLikeOpInterface>(op))
    return true;
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         !isa<memref::AllocOp, memref::AllocaOp>(op);
}

/// An op with no write to memory and no regions: every thread of a block can
/// execute it (it computes a value or loads one).
bool replicable(Operation *op) {
  if (op->getNumRegions() != 0)
    return false;
  if (isMemoryEffectFree(op))
    return true;
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  return effects && effects.onlyHasEffect<MemoryEffects::Read>();
}

Value cIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// ceil((ub - lb) / step) for each dimension of `par`, on the host.
SmallVector<Value> tripCounts(OpBuilder &b, scf::ParallelOp par) {
  Location loc = par.getLoc();
  SmallVector<Value> tcs;
  for (auto [lb, ub, step] : llvm::zip(par.getLowerBound(), par.getUpperBound(),
                                       par.getStep())) {
    Value span = b.createOrFold<arith::SubIOp>(loc, ub, lb);
    tcs.push_back(b.createOrFold<arith::CeilDivUIOp>(loc, span, step));
  }
  return tcs;
}

Value product(OpBuilder &b, Location loc, ArrayRef<Value> vs) {
  Value p = cIndex(b, loc, 1);
  for (Value v : vs)
    p = b.createOrFold<arith::MulIOp>(loc, p, v);
  return p;
}

std::optional<int64_t> constantTotal(scf::ParallelOp par) {
  int64_t total = 1;
  for (auto [lb, ub, step] : llvm::zip(par.getLowerBound(), par.getUpperBound(),
                                       par.getStep())) {
    auto l = getConstantIntValue(lb), u = getConstantIntValue(ub),
         s = getConstantIntValue(step);
    if (!l || !u || !s || *s <= 0)
      return std::nullopt;
    total *= std::max<int64_t>(0, (*u - *l + *s - 1) / *s);
  }
  return total;
}

/// Maps `par`'s induction variables to the point `linear` of its iteration
/// space (row-major: the last dimension fastest). `tcs` are the trip counts
/// (values usable at the insertion point).
void delinearize(OpBuilder &b, Location loc, scf::ParallelOp par,
                 ArrayRef<Value> tcs, Value linear, IRMapping &map) {
  Value rest = linear;
  SmallVector<Value> idx(tcs.size());
  for (int64_t d = static_cast<int64_t>(tcs.size()) - 1; d >= 0; --d) {
    if (d == 0) {
      idx[d] = rest;
      break;
    }
    idx[d] = b.createOrFold<arith::RemUIOp>(loc, rest, tcs[d]);
    rest = b.createOrFold<arith::DivUIOp>(loc, rest, tcs[d]);
  }
  for (auto [d, iv] : llvm::enumerate(par.getInductionVars())) {
    Value scaled =
        b.createOrFold<arith::MulIOp>(loc, idx[d], par.getStep()[d]);
    map.map(iv, b.createOrFold<arith::AddIOp>(loc, par.getLowerBound()[d],
                                               scaled));
  }
}

/// Clones the body of `par` (without its scf.reduce terminator).
void cloneBody(OpBuilder &b, scf::ParallelOp par, IRMapping &map) {
  for (Operation &op : par.getBody()->without_terminator())
    b.clone(op, map);
}

/// Clones into the launch the views, globals and scalars it uses (with what
/// they are computed from), so its remaining operands are whole buffers and
/// the few scalars that cannot move. Upstream's sinking only moves an op
/// whose operands are already available inside, which keeps a view of the
/// arena an argument.
void sinkIntoLaunch(gpu::LaunchOp launch) {
  Region &body = launch.getBody();
  OpBuilder b(&body.front(), body.front().begin());
  IRMapping map;
  std::function<Value(Value)> materialize = [&](Value v) -> Value {
    if (Value known = map.lookupOrNull(v))
      return known;
    Operation *def = v.getDefiningOp();
    if (!def || !sinkIntoKernel(def))
      return v;
    for (Value operand : def->getOperands())
      materialize(operand);
    b.clone(*def, map);
    return map.lookup(v);
  };
  llvm::SetVector<Value> above;
  getUsedValuesDefinedAbove(body, above);
  for (Value v : above) {
    Value inside = materialize(v);
    if (inside != v)
      replaceAllUsesInRegionWith(v, inside, body);
  }
}

/// Replaces each scf.parallel inside `root` by a nest of scf.for (one thread
/// runs it).
LogicalResult serializeNested(Operation *root) {
  SmallVector<scf::ParallelOp> pars;
  root->walk([&](scf::ParallelOp p) { pars.push_back(p); });
  // walk is post-order: inner loops come first, which is fine as each is
  // rewritten in place.
  for (scf::ParallelOp p : pars) {
    if (p.getNumResults() != 0)
      return p.emitError("a parallel loop with reductions cannot be mapped to "
                         "the GPU");
    OpBuilder b(p);
    Location loc = p.getLoc();
    IRMapping map;
    SmallVector<scf::ForOp> fors;
    for (auto [lb, ub, step, iv] :
         llvm::zip(p.getLowerBound(), p.getUpperBound(), p.getStep(),
                   p.getInductionVars())) {
      auto f = scf::ForOp::create(b, loc, lb, ub, step);
      map.map(iv, f.getInductionVar());
      b.setInsertionPoint(f.getBody()->getTerminator());
    }
    cloneBody(b, p, map);
    p.erase();
  }
  return success();
}

/// Splits a parallel loop whose body is only parallel loops and pure ops
/// into one loop per child over the combined iteration space (recursively),
/// returning the loops that replace it (or `par` itself). Valid because the
/// outer iterations are independent: each child's instances for all of them
/// may run before the next child's. On the CPU the children stay fused for
/// locality; on the GPU a small outer loop (a batch of 8 images, each with a
/// pad and an im2col of a million elements) would otherwise give 8 blocks.
SmallVector<scf::ParallelOp> fission(scf::ParallelOp par) {
  if (par.getNumResults() != 0)
    return {par};
  SmallVector<scf::ParallelOp> children;
  for (Operation &op : par.getBody()->without_terminator()) {
    if (auto child = dyn_cast<scf::ParallelOp>(op)) {
      if (child.getNumResults() != 0)
        return {par};
      children.push_back(child);
      continue;
    }
    if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op))
      return {par};
  }
  if (children.empty())
    return {par};
  OpBuilder b(par);
  Location loc = par.getLoc();
  SmallVector<scf::ParallelOp> result;
  for (scf::ParallelOp child : children) {
    SmallVector<Value> lbs(par.getLowerBound()), ubs(par.getUpperBound()),
        steps(par.getStep());
    llvm::append_range(lbs, child.getLowerBound());
    llvm::append_range(ubs, child.getUpperBound());
    llvm::append_range(steps, child.getStep());
    // Bounds of the child defined inside the parent (pure ops) cannot be
    // hoisted here: keep the loop whole then.
    for (Value v : llvm::concat<Value>(child.getLowerBound(),
                                       child.getUpperBound(), child.getStep()))
      if (par->isAncestor(v.getParentBlock()->getParentOp()))
        return {par};
    auto merged = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(merged.getBody()->getTerminator());
    IRMapping map;
    auto ivs = merged.getInductionVars();
    for (auto [i, iv] : llvm::enumerate(par.getInductionVars()))
      map.map(iv, ivs[i]);
    for (auto [i, iv] : llvm::enumerate(child.getInductionVars()))
      map.map(iv, ivs[par.getNumLoops() + i]);
    // The parent's pure ops, then the child's body.
    for (Operation &op : par.getBody()->without_terminator())
      if (!isa<scf::ParallelOp>(op))
        b.clone(op, map);
    cloneBody(b, child, map);
    llvm::append_range(result, fission(merged));
  }
  par.erase();
  return result;
}

struct MapLoopsToGPUPass
    : public distopt::impl::MapLoopsToGPUPassBase<MapLoopsToGPUPass> {
  using MapLoopsToGPUPassBase::MapLoopsToGPUPassBase;

  gpu::LaunchOp createLaunch(OpBuilder &b, Location loc, Value grid,
                             Value block) {
    Value one = cIndex(b, loc, 1);
    auto launch = gpu::LaunchOp::create(b, loc, grid, one, one, block, one, one);
    Block &body = launch.getBody().front();
    if (body.empty() || !body.back().hasTrait<OpTrait::IsTerminator>()) {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToEnd(&body);
      gpu::TerminatorOp::create(b, loc);
    }
    return launch;
  }

  /// One thread per iteration of the whole nest.
  gpu::LaunchOp mapFlat(scf::ParallelOp par) {
    OpBuilder b(par);
    Location loc = par.getLoc();
    SmallVector<Value> tcs = tripCounts(b, par);
    Value total = product(b, loc, tcs);
    Value block = cIndex(b, loc, kFlatBlock);
    Value grid = b.createOrFold<arith::CeilDivUIOp>(loc, total, block);
    gpu::LaunchOp launch = createLaunch(b, loc, grid, block);
    b.setInsertionPointToStart(&launch.getBody().front());
    Value linear = arith::AddIOp::create(
        b, loc,
        arith::MulIOp::create(b, loc, launch.getBlockIds().x,
                              launch.getBlockSize().x),
        launch.getThreadIds().x);
    Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                         linear, total);
    auto ifOp = scf::IfOp::create(b, loc, inside, /*withElse=*/false);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    IRMapping map;
    delinearize(b, loc, par, tcs, linear, map);
    cloneBody(b, par, map);
    return launch;
  }

  /// Whether `par` is a row-fused nest this pass can spread over a block:
  /// inner parallel loops directly in its body, and every op that writes
  /// memory outside them has no results used afterwards.
  bool isRowFused(scf::ParallelOp par) {
    bool anyInner = false;
    for (Operation &op : par.getBody()->without_terminator()) {
      if (auto inner = dyn_cast<scf::ParallelOp>(op)) {
        if (inner.getNumResults() != 0)
          return false;
        anyInner = true;
        continue;
      }
      if (!replicable(&op) && !op.use_empty())
        return false;
    }
    return anyInner;
  }

  /// One block per outer iteration; inner loops strided over the threads.
  gpu::LaunchOp mapRowFused(scf::ParallelOp par) {
    OpBuilder b(par);
    Location loc = par.getLoc();
    SmallVector<Value> tcs = tripCounts(b, par);
    Value grid = product(b, loc, tcs);
    // Threads: enough for the widest inner loop, in whole warps.
    int64_t widest = 0;
    for (auto inner : par.getBody()->getOps<scf::ParallelOp>()) {
      std::optional<int64_t> n = constantTotal(inner);
      widest = std::max(widest, n ? *n : kMaxRowBlock);
    }
    int64_t threads = std::clamp<int64_t>((widest + 31) / 32 * 32, 32,
                                          kMaxRowBlock);
    gpu::LaunchOp launch = createLaunch(b, loc, grid, cIndex(b, loc, threads));
    b.setInsertionPointToStart(&launch.getBody().front());
    IRMapping map;
    delinearize(b, loc, par, tcs, launch.getBlockIds().x, map);
    Value tid = launch.getThreadIds().x;
    Value nthreads = launch.getBlockSize().x;
    Value isFirst = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, tid, cIndex(b, loc, 0));
    // Memory touched since the last barrier: a read must wait for other
    // threads' writes, a write also for their reads.
    bool wrote = false, read = false;
    auto barrier = [&] {
      gpu::BarrierOp::create(b, loc);
      wrote = read = false;
    };
    scf::IfOp single; // the open thread-0 segment, if any
    for (Operation &op : par.getBody()->without_terminator()) {
      if (auto inner = dyn_cast<scf::ParallelOp>(op)) {
        single = nullptr;
        if (wrote || read)
          barrier();
        SmallVector<Value> innerTcs = tripCounts(b, inner);
        Value total = product(b, loc, innerTcs);
        auto loop = scf::ForOp::create(b, loc, tid, total, nthreads);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(loop.getBody()->getTerminator());
        delinearize(b, loc, inner, innerTcs, loop.getInductionVar(), map);
        cloneBody(b, inner, map);
        wrote = read = true;
        continue;
      }
      if (replicable(&op)) {
        single = nullptr;
        if (!isMemoryEffectFree(&op)) {
          if (wrote)
            barrier();
          read = true;
        }
        b.clone(op, map);
        continue;
      }
      if (!single) {
        if (wrote || read)
          barrier();
        single = scf::IfOp::create(b, loc, isFirst, /*withElse=*/false);
      }
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(single.thenBlock()->getTerminator());
      b.clone(op, map);
      wrote = read = true;
    }
    return launch;
  }

  /// One thread runs `ops` (consecutive top-level ops that touch memory).
  gpu::LaunchOp mapSingle(ArrayRef<Operation *> ops) {
    // At the last op: every value the group uses is defined by then (pure
    // host ops may sit between its members).
    OpBuilder b(ops.back());
    Location loc = ops.front()->getLoc();
    Value one = cIndex(b, loc, 1);
    gpu::LaunchOp launch = createLaunch(b, loc, one, one);
    b.setInsertionPoint(launch.getBody().front().getTerminator());
    IRMapping map;
    for (Operation *op : ops)
      b.clone(*op, map);
    return launch;
  }

  /// Moves the ops from `first` to `last` (one block) into a one-trip
  /// scf.parallel, so the row mapping runs them as one block. Pure host ops
  /// in the stretch whose results are used after it (a view a later GEMM
  /// reads) stay outside, before it.
  FailureOr<scf::ParallelOp> wrapStretch(Operation *first, Operation *last) {
    SmallVector<Operation *> stretch;
    for (Operation *op = first;; op = op->getNextNode()) {
      if (op->hasTrait<OpTrait::IsTerminator>())
        return first->emitError("cannot run this op on the GPU: its result "
                                "is used outside the kernel");
      stretch.push_back(op);
      if (op == last)
        break;
    }
    auto usedAfter = [&](Operation *op) {
      for (Operation *user : op->getUsers()) {
        Operation *top = last->getBlock()->findAncestorOpInBlock(*user);
        if (top && last->isBeforeInBlock(top))
          return true;
      }
      return false;
    };
    llvm::SmallPtrSet<Operation *, 16> inside;
    for (Operation *op : stretch) {
      bool host = staysOnHost(op);
      if (host && !isMemoryEffectFree(op))
        return op->emitError("cannot run this op on the GPU: a runtime call "
                             "sits between a kernel and the use of a value "
                             "it computes");
      bool dependsInside = llvm::any_of(op->getOperands(), [&](Value v) {
        Operation *d = v.getDefiningOp();
        return d && inside.count(d);
      });
      if (host && usedAfter(op) && !dependsInside)
        continue; // stays before the loop
      if (usedAfter(op))
        return op->emitError("cannot run this op on the GPU: its result is "
                             "used outside the kernel");
      inside.insert(op);
    }
    OpBuilder b(first);
    Location loc = first->getLoc();
    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    // Host ops that stay outside go before the loop, in order.
    for (Operation *op : stretch)
      if (!inside.count(op))
        op->moveBefore(first);
    b.setInsertionPoint(first);
    auto loop = scf::ParallelOp::create(b, loc, ValueRange{c0}, ValueRange{c1},
                                        ValueRange{c1});
    for (Operation *op : stretch)
      if (inside.count(op))
        op->moveBefore(loop.getBody()->getTerminator());
    return loop;
  }

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    SmallVector<gpu::LaunchOp> launches;
    bool ok = true;
    for (Block &block : fn.getBody()) {
      SmallVector<Operation *> ops;
      for (Operation &op : block)
        ops.push_back(&op);
      SmallVector<Operation *> pending; // consecutive single-thread ops
      // Maps the pending ops: one thread, or -- when later ops use what
      // they compute (a scalar reduction, then loops reading it: what a
      // softmax over one row is once its one-trip row loop is folded) --
      // the whole stretch up to the last such use, as one block.
      auto flush = [&] {
        if (pending.empty())
          return;
        Operation *last = pending.back();
        for (Operation *op : pending)
          for (Operation *user : op->getUsers()) {
            Operation *top = block.findAncestorOpInBlock(*user);
            if (top && last->isBeforeInBlock(top))
              last = top;
          }
        if (last == pending.back()) {
          launches.push_back(mapSingle(pending));
          for (Operation *op : llvm::reverse(pending))
            op->erase();
          pending.clear();
          return;
        }
        FailureOr<scf::ParallelOp> group = wrapStretch(pending.front(), last);
        pending.clear();
        if (failed(group)) {
          ok = false;
          return;
        }
        launches.push_back(isRowFused(*group) ? mapRowFused(*group)
                                              : mapFlat(*group));
        group->erase();
      };
      for (Operation *op : ops) {
        if (op->getBlock() != &block)
          continue; // moved into a stretch
        if (auto copy = dyn_cast<memref::CopyOp>(op)) {
          // A whole-buffer copy (what distopt-copies-to-linalg leaves: 0-d
          // values) lowers to llvm.memcpy, which the device has; a strided
          // one would call the host's memrefCopy.
          auto contiguous = [](Value v) {
            auto t = dyn_cast<MemRefType>(v.getType());
            return t && t.getLayout().isIdentity();
          };
          if (contiguous(copy.getSource()) && contiguous(copy.getTarget())) {
            pending.push_back(op);
            continue;
          }
          op->emitError("internal error: memref.copy left for the GPU "
                        "(distopt-copies-to-linalg should have turned it "
                        "into a loop)");
          ok = false;
          continue;
        }
        if (auto par = dyn_cast<scf::ParallelOp>(op)) {
          flush();
          if (par->getBlock() != &block)
            continue; // part of the stretch just mapped
          if (par.getNumResults() != 0) {
            par.emitError("a parallel loop with reductions cannot be mapped "
                          "to the GPU");
            ok = false;
            continue;
          }
          for (scf::ParallelOp loop : fission(par)) {
            launches.push_back(isRowFused(loop) ? mapRowFused(loop)
                                                : mapFlat(loop));
            loop.erase();
          }
          continue;
        }
        // A pure op computing from a value a kernel reads (a reciprocal of
        // a row sum) belongs to that kernel.
        bool fromKernel = llvm::any_of(op->getOperands(), [&](Value v) {
          return llvm::is_contained(pending, v.getDefiningOp());
        });
        bool intoKernel = fromKernel && isMemoryEffectFree(op) &&
                          !op->hasTrait<OpTrait::IsTerminator>();
        if (staysOnHost(op) && !intoKernel) {
          if (!isMemoryEffectFree(op))
            flush();
          continue;
        }
        pending.push_back(op);
      }
      flush();
    }
    if (!ok)
      return signalPassFailure();
    for (gpu::LaunchOp launch : launches) {
      if (failed(serializeNested(launch)))
        return signalPassFailure();
      sinkIntoLaunch(launch);
    }
  }
};

} // namespace
