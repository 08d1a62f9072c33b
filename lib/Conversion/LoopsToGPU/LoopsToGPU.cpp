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
#include "distopt/Codegen/Accumulators.h"
#include "distopt/Conversion/RuntimeABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

namespace distopt {
#define GEN_PASS_DEF_MAPLOOPSTOGPUPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

constexpr int64_t kFlatBlock = 256;
constexpr int64_t kMaxRowBlock = 256;
/// Reductions at least this long are shared by a block's threads; shorter
/// ones stay on one thread (a block all-reduce costs two barriers).
constexpr int64_t kMinBlockReduction = 32;

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

/// The all-reduce operation of a combining op, if gpu.all_reduce has it.
std::optional<gpu::AllReduceOperation> allReduceKind(Operation *op) {
  using K = gpu::AllReduceOperation;
  return llvm::TypeSwitch<Operation *, std::optional<K>>(op)
      .Case<arith::AddFOp, arith::AddIOp>([](auto) { return K::ADD; })
      .Case<arith::MulFOp, arith::MulIOp>([](auto) { return K::MUL; })
      .Case<arith::MaximumFOp>([](auto) { return K::MAXIMUMF; })
      .Case<arith::MinimumFOp>([](auto) { return K::MINIMUMF; })
      .Case<arith::MaxNumFOp>([](auto) { return K::MAXNUMF; })
      .Case<arith::MinNumFOp>([](auto) { return K::MINNUMF; })
      .Case<arith::MaxSIOp>([](auto) { return K::MAXSI; })
      .Case<arith::MinSIOp>([](auto) { return K::MINSI; })
      .Case<arith::MaxUIOp>([](auto) { return K::MAXUI; })
      .Case<arith::MinUIOp>([](auto) { return K::MINUI; })
      .Case<arith::AndIOp>([](auto) { return K::AND; })
      .Case<arith::OrIOp>([](auto) { return K::OR; })
      .Case<arith::XOrIOp>([](auto) { return K::XOR; })
      .Default([](Operation *) { return std::nullopt; });
}

/// The neutral element of `kind` on `type` (what a thread with no element
/// of the reduction contributes).
TypedAttr identity(gpu::AllReduceOperation kind, Type type) {
  using K = gpu::AllReduceOperation;
  if (auto ft = dyn_cast<FloatType>(type)) {
    const llvm::fltSemantics &sem = ft.getFloatSemantics();
    switch (kind) {
    case K::ADD:
      return FloatAttr::get(ft, APFloat::getZero(sem, /*Negative=*/true));
    case K::MUL:
      return FloatAttr::get(ft, APFloat::getOne(sem));
    case K::MAXIMUMF:
    case K::MAXNUMF:
      return FloatAttr::get(ft, APFloat::getInf(sem, /*Negative=*/true));
    case K::MINIMUMF:
    case K::MINNUMF:
      return FloatAttr::get(ft, APFloat::getInf(sem));
    default:
      return {};
    }
  }
  auto it = cast<IntegerType>(type);
  unsigned w = it.getWidth();
  switch (kind) {
  case K::ADD:
  case K::OR:
  case K::XOR:
  case K::MAXUI:
    return IntegerAttr::get(it, APInt::getZero(w));
  case K::MUL:
    return IntegerAttr::get(it, APInt(w, 1));
  case K::AND:
  case K::MINUI:
    return IntegerAttr::get(it, APInt::getAllOnes(w));
  case K::MAXSI:
    return IntegerAttr::get(it, APInt::getSignedMinValue(w));
  case K::MINSI:
    return IntegerAttr::get(it, APInt::getSignedMaxValue(w));
  default:
    return {};
  }
}

/// A reduction loop that a block's threads can share. Two shapes:
///  - in memory (distopt::findAccumulators): the loop loads, combines and
///    stores accumulator elements; thread 0 folds the block's total into
///    each element;
///  - in registers (`iter_args`, what a reduction to a scalar folded out of
///    a one-trip row loop leaves): the loop writes no memory; every thread
///    gets the total from the all-reduce and folds the initial value in, so
///    the results are there for all threads.
/// Each value is combined with the iteration's by one op gpu.all_reduce
/// knows, on f32, f64, i32 or i64 (64-bit shuffles are split in two by the
/// NVVM lowering), and nothing else reads the running value. Each thread
/// reduces a strided part of the loop from the neutral element, and
/// gpu.all_reduce combines the parts. This reorders float sums, as every
/// GPU reduction does.
struct BlockReduction {
  scf::ForOp loop;
  SmallVector<distopt::Accumulator> accs; // empty for the register shape
  SmallVector<Operation *> combiners;
  SmallVector<gpu::AllReduceOperation> kinds;
  bool inRegisters() const { return accs.empty(); }

  /// The running values: the accumulators' loads, or the loop's iter_args.
  SmallVector<Value> running() {
    SmallVector<Value> values;
    for (distopt::Accumulator &acc : accs)
      values.push_back(acc.load.getResult());
    if (inRegisters())
      llvm::append_range(values, loop.getRegionIterArgs());
    return values;
  }

  /// The loop from `lo` to `hi` by `step` (values at the builder), each
  /// value carried from the neutral element; its results are the parts.
  /// `map` holds what the loop's operands are at the builder.
  scf::ForOp partLoop(OpBuilder &b, Value lo, Value hi, Value step,
                      const IRMapping &map);

  /// One buffer of `shape` per accumulator, for partial results.
  SmallVector<Value> allocPartials(OpBuilder &b, ArrayRef<int64_t> shape) {
    SmallVector<Value> buffers;
    for (distopt::Accumulator &acc : accs)
      buffers.push_back(memref::AllocOp::create(
          b, loop.getLoc(), MemRefType::get(shape, acc.load.getType())));
    return buffers;
  }

  /// A loop at the builder folding `partials[i][c, outer...]`, c from 0 to
  /// `count`, into accumulator i, in order.
  scf::ForOp foldPartials(OpBuilder &b, ArrayRef<Value> partials, int64_t count,
                          ValueRange outer);

  /// Combiner `i` applied to `start` and `total` in the loop's operand order.
  Value fold(OpBuilder &b, unsigned i, Value start, Value total) {
    Value value = running()[i];
    Operation *c = combiners[i];
    IRMapping m;
    m.map(c->getOperand(0) == value ? c->getOperand(1) : c->getOperand(0),
          total);
    m.map(value, start);
    return b.clone(*c, m)->getResult(0);
  }
};

scf::ForOp BlockReduction::partLoop(OpBuilder &b, Value lo, Value hi,
                                    Value step, const IRMapping &map) {
  Location loc = loop.getLoc();
  SmallVector<Value> values = running();
  SmallVector<Value> inits;
  for (auto [value, kind] : llvm::zip(values, kinds))
    inits.push_back(
        arith::ConstantOp::create(b, loc, identity(kind, value.getType())));
  auto part = scf::ForOp::create(b, loc, lo, hi, step, inits);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(part.getBody());
  IRMapping inner = map;
  inner.map(loop.getInductionVar(), part.getInductionVar());
  for (auto [i, value] : llvm::enumerate(values))
    inner.map(value, part.getRegionIterArgs()[i]);
  llvm::SmallPtrSet<Operation *, 8> skip;
  for (distopt::Accumulator &acc : accs) {
    skip.insert(acc.load);
    skip.insert(acc.store);
  }
  for (Operation &op : loop.getBody()->without_terminator())
    if (!skip.count(&op))
      b.clone(op, inner);
  SmallVector<Value> yields;
  for (Operation *c : combiners)
    yields.push_back(inner.lookup(c->getResult(0)));
  scf::YieldOp::create(b, loc, yields);
  return part;
}

scf::ForOp BlockReduction::foldPartials(OpBuilder &b, ArrayRef<Value> partials,
                                        int64_t count, ValueRange outer) {
  Location loc = loop.getLoc();
  auto fold = scf::ForOp::create(b, loc, cIndex(b, loc, 0),
                                 cIndex(b, loc, count), cIndex(b, loc, 1));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(fold.getBody()->getTerminator());
  for (auto [i, acc] : llvm::enumerate(accs)) {
    SmallVector<Value> at = {fold.getInductionVar()};
    llvm::append_range(at, outer);
    Value piece = memref::LoadOp::create(b, loc, partials[i], at);
    Value old = memref::LoadOp::create(b, loc, acc.load.getMemRef(),
                                       acc.load.getIndices());
    memref::StoreOp::create(b, loc, this->fold(b, i, old, piece),
                            acc.store.getMemRef(), acc.store.getIndices());
  }
  return fold;
}

/// The all-reduce kind of `combiner` when it combines `running` (used by
/// nothing else) with another value, and its result is used once.
std::optional<gpu::AllReduceOperation> combinerKind(Operation *combiner,
                                                    Value running,
                                                    Block *body) {
  Type t = running.getType();
  if (!t.isF32() && !t.isF64() && !t.isInteger(32) && !t.isInteger(64))
    return std::nullopt;
  if (!running.hasOneUse() || *running.user_begin() != combiner ||
      combiner->getBlock() != body || combiner->getNumOperands() != 2 ||
      combiner->getOperand(0) == combiner->getOperand(1) ||
      !combiner->getResult(0).hasOneUse())
    return std::nullopt;
  return allReduceKind(combiner);
}

std::optional<BlockReduction> matchBlockReduction(Operation *op) {
  auto loop = dyn_cast<scf::ForOp>(op);
  if (!loop)
    return std::nullopt;
  std::optional<APInt> trips = loop.getStaticTripCount();
  if (trips && trips->getZExtValue() < kMinBlockReduction)
    return std::nullopt;
  BlockReduction r{loop, {}, {}, {}};
  Block *body = loop.getBody();
  if (loop.getNumRegionIterArgs() == 0) {
    r.accs = distopt::findAccumulators(loop);
    if (r.accs.empty())
      return std::nullopt;
    for (distopt::Accumulator &acc : r.accs) {
      Value running = acc.load.getResult();
      if (running.use_empty())
        return std::nullopt;
      Operation *combiner = *running.user_begin();
      std::optional<gpu::AllReduceOperation> kind =
          combinerKind(combiner, running, body);
      if (!kind || acc.store.getValueToStore() != combiner->getResult(0))
        return std::nullopt;
      r.combiners.push_back(combiner);
      r.kinds.push_back(*kind);
    }
    return r;
  }
  // In registers: no memory written, each carried value combined once.
  bool writes = false;
  body->walk([&](Operation *inner) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(inner);
    if (isa<memref::StoreOp>(inner) ||
        (!effects && !isMemoryEffectFree(inner) &&
         !inner->hasTrait<OpTrait::HasRecursiveMemoryEffects>()) ||
        (effects && (effects.hasEffect<MemoryEffects::Write>() ||
                     effects.hasEffect<MemoryEffects::Allocate>() ||
                     effects.hasEffect<MemoryEffects::Free>())))
      writes = true;
  });
  if (writes)
    return std::nullopt;
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  for (auto [i, running] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (running.use_empty())
      return std::nullopt;
    Operation *combiner = *running.user_begin();
    std::optional<gpu::AllReduceOperation> kind =
        combinerKind(combiner, running, body);
    if (!kind || yield.getOperand(i) != combiner->getResult(0))
      return std::nullopt;
    r.combiners.push_back(combiner);
    r.kinds.push_back(*kind);
  }
  return r;
}

/// Whether the loop of `r` walks memory contiguously: every load that
/// changes with the loop has the induction variable (plus an invariant) as
/// its last index and invariant other indices. A block's threads then read
/// consecutive elements; a reduction down a column (a bias gradient's sum
/// over the batch) would have each thread touch a different row.
bool walksContiguously(const BlockReduction &r) {
  scf::ForOp loop = r.loop;
  Value iv = loop.getInductionVar();
  auto isIv = [&](Value v) {
    if (v == iv)
      return true;
    // The innermost dimension of a flattened nest (normalizeReductionNest).
    if (auto rem = v.getDefiningOp<arith::RemUIOp>())
      return rem.getLhs() == iv && loop.isDefinedOutsideOfLoop(rem.getRhs());
    auto add = v.getDefiningOp<arith::AddIOp>();
    return add && ((add.getLhs() == iv && loop.isDefinedOutsideOfLoop(add.getRhs())) ||
                   (add.getRhs() == iv && loop.isDefinedOutsideOfLoop(add.getLhs())));
  };
  bool contiguous = true;
  loop.getBody()->walk([&](memref::LoadOp load) {
    ValueRange idx = load.getIndices();
    if (llvm::all_of(idx, [&](Value v) { return loop.isDefinedOutsideOfLoop(v); }))
      return;
    if (idx.empty() || !isIv(idx.back()) ||
        !llvm::all_of(idx.drop_back(),
                      [&](Value v) { return loop.isDefinedOutsideOfLoop(v); }))
      contiguous = false;
  });
  return contiguous;
}

/// Rewrites a perfect loop nest whose outermost loop is an scf.for and
/// whose innermost body updates accumulators (a linalg reduction whose
/// outermost dimension is reduced: a bias gradient's sum over the batch,
/// batch-norm statistics over N, H and W, a reduction over every axis), so
/// that the GPU mapping sees its parallelism: the dimensions that index the
/// accumulators become one scf.parallel, the others one scf.for over their
/// combined iteration space (outermost slowest, so each accumulator sums in
/// the original order). As lowered, the nest starts with a sequential loop
/// and would run on one thread. Inside a row (accumulators indexed by the
/// row alone) the whole nest becomes the one loop, which a block can share.
void normalizeReductionNest(scf::ForOp outer) {
  // The nest's dimensions (scf.for and scf.parallel levels, outermost first).
  struct Dim {
    Value iv, lb, ub, step;
  };
  SmallVector<Dim> dims;
  Operation *level = outer;
  Block *body = nullptr;
  while (true) {
    if (auto f = dyn_cast<scf::ForOp>(level)) {
      if (f.getNumRegionIterArgs() != 0)
        return;
      dims.push_back({f.getInductionVar(), f.getLowerBound(),
                      f.getUpperBound(), f.getStep()});
      body = f.getBody();
    } else if (auto p = dyn_cast<scf::ParallelOp>(level)) {
      if (p.getNumResults() != 0)
        return;
      for (auto [iv, lb, ub, step] :
           llvm::zip(p.getInductionVars(), p.getLowerBound(),
                     p.getUpperBound(), p.getStep()))
        dims.push_back({iv, lb, ub, step});
      body = p.getBody();
    } else {
      break;
    }
    Operation &first = body->front();
    if (!isa<scf::ForOp, scf::ParallelOp>(first) ||
        std::next(body->begin()) != std::prev(body->end()))
      break;
    level = &first;
  }
  if (dims.size() < 2)
    return;
  SmallVector<distopt::Accumulator> accs = distopt::findUpdates(body, outer);
  if (accs.empty())
    return;
  // Constant bounds (static shapes): the flattened trip count must not
  // wrap for an empty loop.
  for (const Dim &d : dims) {
    std::optional<int64_t> lb = getConstantIntValue(d.lb),
                           ub = getConstantIntValue(d.ub),
                           step = getConstantIntValue(d.step);
    if (!lb || !ub || !step || *step <= 0 || *ub < *lb)
      return;
  }
  // The dimensions that index the accumulators: each must be an index
  // itself (so distinct iterations update distinct elements).
  auto dimOf = [&](Value v) -> int {
    for (auto [k, d] : llvm::enumerate(dims))
      if (d.iv == v)
        return static_cast<int>(k);
    return -1;
  };
  llvm::SmallBitVector outputs(dims.size());
  for (auto [i, acc] : llvm::enumerate(accs)) {
    llvm::SmallBitVector these(dims.size());
    for (Value v : acc.store.getIndices()) {
      int k = dimOf(v);
      if (k >= 0)
        these.set(k);
      else if (!outer.isDefinedOutsideOfLoop(v))
        return; // an index computed from the loops
    }
    if (i == 0)
      outputs = these;
    else if (these != outputs)
      return;
  }
  if (outputs.all())
    return; // nothing is reduced
  OpBuilder b(outer);
  Location loc = outer.getLoc();
  IRMapping map;
  SmallVector<Value> lbs, ubs, steps;
  for (auto [k, d] : llvm::enumerate(dims))
    if (outputs.test(k)) {
      lbs.push_back(d.lb);
      ubs.push_back(d.ub);
      steps.push_back(d.step);
    }
  if (!lbs.empty()) {
    auto par = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
    int n = 0;
    for (auto [k, d] : llvm::enumerate(dims))
      if (outputs.test(k))
        map.map(d.iv, par.getInductionVars()[n++]);
    b.setInsertionPoint(par.getBody()->getTerminator());
  }
  SmallVector<Dim> reduced;
  SmallVector<Value> tcs;
  for (auto [k, d] : llvm::enumerate(dims))
    if (!outputs.test(k)) {
      reduced.push_back(d);
      Value span = b.createOrFold<arith::SubIOp>(loc, d.ub, d.lb);
      tcs.push_back(b.createOrFold<arith::CeilDivUIOp>(loc, span, d.step));
    }
  Value total = product(b, loc, tcs);
  auto flat = scf::ForOp::create(b, loc, cIndex(b, loc, 0), total,
                                 cIndex(b, loc, 1));
  b.setInsertionPoint(flat.getBody()->getTerminator());
  Value rest = flat.getInductionVar();
  for (int k = static_cast<int>(reduced.size()) - 1; k >= 0; --k) {
    Value idx = rest;
    if (k > 0) {
      idx = b.createOrFold<arith::RemUIOp>(loc, rest, tcs[k]);
      rest = b.createOrFold<arith::DivUIOp>(loc, rest, tcs[k]);
    }
    Value scaled = b.createOrFold<arith::MulIOp>(loc, idx, reduced[k].step);
    map.map(reduced[k].iv,
            b.createOrFold<arith::AddIOp>(loc, reduced[k].lb, scaled));
  }
  for (Operation &op : body->without_terminator())
    b.clone(op, map);
  outer.erase();
}

/// A long reduction down columns is split over this many threads' worth of
/// partial sums at least (an H100 keeps 132 x 2048 threads in flight).
constexpr int64_t kSplitThreads = 65536;
/// ... when it is at least this long, in chunks of at least kSplitChunk.
constexpr int64_t kSplitMinLength = 1024;
constexpr int64_t kSplitChunk = 64;

/// Splits a flat nest of reductions (one thread per output, as a bias
/// gradient's column sums are mapped) whose reductions are long and whose
/// outputs are too few to fill the GPU (768 columns of 8192 rows: 3 blocks
/// of threads summing 8192 elements each) into two nests: S chunks of each
/// reduction summed into a temporary buffer [S, outputs...] in parallel,
/// then each output's S partial sums folded into its accumulator in chunk
/// order. Deterministic; the sums are reassociated, as on any GPU.
/// `rowFused` says whether the nest would be mapped a block per row (then
/// it is left alone).
/// What splitLongReduction would do with `par`: its reduction, the number
/// of chunks and their length (in iterations); nothing when it does not
/// apply (mapping aside).
struct SplitPlan {
  BlockReduction r;
  int64_t chunks, chunk, lb, step;
};

std::optional<SplitPlan> planSplit(scf::ParallelOp par) {
  if (par.getNumResults() != 0)
    return std::nullopt;
  for (auto [lb, step] : llvm::zip(par.getLowerBound(), par.getStep()))
    if (getConstantIntValue(lb) != 0 || getConstantIntValue(step) != 1)
      return std::nullopt;
  std::optional<int64_t> outputs = constantTotal(par);
  if (!outputs || *outputs <= 0 || *outputs >= kSplitThreads)
    return std::nullopt;
  // The body: pure ops, stores that initialise the accumulators, then one
  // reduction loop in memory, last.
  std::optional<BlockReduction> r;
  for (Operation &op : par.getBody()->without_terminator()) {
    if (r)
      return std::nullopt; // something after the loop
    if ((r = matchBlockReduction(&op))) {
      if (r->inRegisters())
        return std::nullopt;
      continue;
    }
    if (isa<memref::StoreOp>(op))
      continue; // checked below, once the accumulators are known
    if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op))
      return std::nullopt;
  }
  if (!r)
    return std::nullopt;
  for (auto store : par.getBody()->getOps<memref::StoreOp>())
    if (!llvm::any_of(r->accs, [&](distopt::Accumulator &acc) {
          return acc.store.getMemRef() == store.getMemRef() &&
                 acc.store.getIndices() == store.getIndices();
        }))
      return std::nullopt;
  scf::ForOp loop = r->loop;
  std::optional<APInt> trips = loop.getStaticTripCount();
  std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()),
                         step = getConstantIntValue(loop.getStep());
  if (!trips || !lb || !step || trips->getZExtValue() < kSplitMinLength)
    return std::nullopt;
  int64_t length = trips->getZExtValue();
  int64_t chunks = std::min((kSplitThreads + *outputs - 1) / *outputs,
                            length / kSplitChunk);
  if (chunks < 2)
    return std::nullopt;
  return SplitPlan{*r, chunks, (length + chunks - 1) / chunks, *lb, *step};
}

/// Marks the second pass of a split reduction (the fold of the partial
/// sums): not to be split again.
constexpr llvm::StringLiteral kSplitFold = "distopt.split_fold";

bool splitLongReduction(scf::ParallelOp par, bool rowFused) {
  if (rowFused)
    return false;
  std::optional<SplitPlan> plan = planSplit(par);
  if (!plan)
    return false;
  BlockReduction *r = &plan->r;
  scf::ForOp loop = r->loop;
  int64_t chunks = plan->chunks, chunk = plan->chunk;
  std::optional<int64_t> lb = plan->lb, step = plan->step;

  OpBuilder b(par);
  Location loc = par.getLoc();
  SmallVector<int64_t> shape = {chunks};
  for (Value ub : par.getUpperBound())
    shape.push_back(*getConstantIntValue(ub));
  SmallVector<Value> partials = r->allocPartials(b, shape);

  // Pass 1: chunk s of every output's reduction, from the neutral element.
  SmallVector<Value> lbs = {cIndex(b, loc, 0)}, ubs = {cIndex(b, loc, chunks)},
                     steps = {cIndex(b, loc, 1)};
  llvm::append_range(lbs, par.getLowerBound());
  llvm::append_range(ubs, par.getUpperBound());
  llvm::append_range(steps, par.getStep());
  auto first = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(first.getBody()->getTerminator());
    IRMapping map;
    for (auto [iv, to] : llvm::zip(par.getInductionVars(),
                                   ValueRange(first.getInductionVars()).drop_front()))
      map.map(iv, to);
    for (Operation &op : par.getBody()->without_terminator())
      if (&op != loop && !isa<memref::StoreOp>(op))
        b.clone(op, map);
    Value sIdx = first.getInductionVars().front();
    Value lo = arith::AddIOp::create(
        b, loc, cIndex(b, loc, *lb),
        arith::MulIOp::create(b, loc, sIdx, cIndex(b, loc, chunk * *step)));
    Value hi = arith::MinSIOp::create(
        b, loc, arith::AddIOp::create(b, loc, lo, cIndex(b, loc, chunk * *step)),
        map.lookupOrDefault(loop.getUpperBound()));
    scf::ForOp part = r->partLoop(b, lo, hi, cIndex(b, loc, *step), map);
    for (auto [i, buffer] : llvm::enumerate(partials))
      memref::StoreOp::create(b, loc, part.getResult(i), buffer,
                              first.getInductionVars());
  }

  // Pass 2: the original nest, its loop now over the chunks' partial sums
  // (few outputs: a block each shares its fold, isRowFused).
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(loop);
    r->foldPartials(b, partials, chunks, par.getInductionVars());
    loop.erase();
  }
  par->setAttr(kSplitFold, b.getUnitAttr());
  b.setInsertionPointAfter(par);
  for (Value buffer : partials)
    memref::DeallocOp::create(b, loc, buffer);
  return true;
}

/// A reduction to one element (a scalar: a sum of squares for the global
/// gradient norm, a loss) is split across the GPU when it is at least this
/// long; shorter ones stay one block's (kMinBlockReduction and up).
constexpr int64_t kSplitScalarMinLength = int64_t(1) << 16;
/// ... over at most this many threads, each reading at least kSplitChunk
/// elements.
constexpr int64_t kSplitScalarThreads = int64_t(1) << 18;

/// Splits a long top-level reduction loop whose accumulators are single
/// elements in memory (what one block would otherwise share: 16 M squares
/// of a 4096x4096 gradient summed by 256 threads) into a parallel pass of
/// T partial reductions, thread t folding elements t, t + T, t + 2T, ...
/// (so a warp reads consecutive elements) into a temporary buffer [T], then
/// the original loop over the T partials (a block reduction). Deterministic;
/// the sums are reassociated, as on any GPU.
/// Marks a parallel loop that the split made for one thread per iteration
/// (its strided parts are read in step across a warp: a block per
/// iteration would read them 256 at a time, far apart).
constexpr llvm::StringLiteral kThreadPerIteration = "distopt.thread_per_iteration";

bool splitLongScalarReduction(scf::ForOp loop) {
  std::optional<BlockReduction> r = matchBlockReduction(loop);
  if (!r || r->inRegisters())
    return false;
  std::optional<APInt> trips = loop.getStaticTripCount();
  std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()),
                         step = getConstantIntValue(loop.getStep());
  if (!trips || !lb || !step || trips->getZExtValue() < kSplitScalarMinLength)
    return false;
  int64_t length = trips->getZExtValue();
  int64_t threads = std::min(kSplitScalarThreads, length / kSplitChunk);

  // The stores that initialise the accumulators before the loop (pure ops
  // may sit between) move to the fold, which pass 1 does not need: they
  // join its kernel instead of making a kernel of one thread.
  SmallVector<Operation *> inits;
  for (Operation *op = loop->getPrevNode(); op; op = op->getPrevNode()) {
    auto store = dyn_cast<memref::StoreOp>(op);
    if (!store) {
      if (op->getNumRegions() == 0 && isMemoryEffectFree(op))
        continue;
      break;
    }
    if (!llvm::any_of(r->accs, [&](distopt::Accumulator &acc) {
          return acc.store.getMemRef() == store.getMemRef() &&
                 acc.store.getIndices() == store.getIndices();
        }))
      break;
    inits.push_back(op);
  }
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  SmallVector<Value> partials = r->allocPartials(b, {threads});
  // Pass 1: thread t's strided part, from the neutral element.
  auto first = scf::ParallelOp::create(b, loc, ValueRange{cIndex(b, loc, 0)},
                                       ValueRange{cIndex(b, loc, threads)},
                                       ValueRange{cIndex(b, loc, 1)});
  first->setAttr(kThreadPerIteration, b.getUnitAttr());
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(first.getBody()->getTerminator());
    Value t = first.getInductionVars().front();
    Value lo = arith::AddIOp::create(
        b, loc, cIndex(b, loc, *lb),
        arith::MulIOp::create(b, loc, t, cIndex(b, loc, *step)));
    IRMapping map;
    scf::ForOp part = r->partLoop(b, lo, loop.getUpperBound(),
                                  cIndex(b, loc, threads * *step), map);
    for (auto [i, buffer] : llvm::enumerate(partials))
      memref::StoreOp::create(b, loc, part.getResult(i), buffer, ValueRange{t});
  }
  // Pass 2: the accumulators fold the partials, in order.
  b.setInsertionPoint(loop);
  for (Operation *op : llvm::reverse(inits))
    op->moveBefore(loop);
  scf::ForOp fold = r->foldPartials(b, partials, threads, ValueRange{});
  b.setInsertionPointAfter(fold);
  for (Value buffer : partials)
    memref::DeallocOp::create(b, loc, buffer);
  loop.erase();
  // Many partials (262144 for 16 M elements) are split again rather than
  // read 1024 a thread by one block.
  splitLongScalarReduction(fold);
  return true;
}

/// Whether `memref`'s data starts on a 16-byte boundary on the device: an
/// entry buffer or an allocation (cudaMalloc: 256-byte aligned), a view of
/// one at a multiple of 16 bytes (the arena's buffers are 64-byte aligned),
/// or a reshape of one.
bool alignedTo16(Value memref) {
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(memref)) {
      // An argument of an entry function (a public one: the runtime calls
      // those, with whole buffers; the pipelines' own calls go to private
      // declarations), not of a private callee that could get a view. (Not
      // "nothing in the module calls it": this pass runs on functions in
      // parallel and must not read the others while they change.)
      auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      return fn && arg.getOwner()->isEntryBlock() && fn.isPublic();
    }
    Operation *def = memref.getDefiningOp();
    if (isa<memref::AllocOp>(def))
      return true;
    if (auto view = dyn_cast<memref::ViewOp>(def)) {
      std::optional<int64_t> shift = getConstantIntValue(view.getByteShift());
      if (!shift || *shift % 16 != 0)
        return false;
      memref = view.getSource();
      continue;
    }
    if (isa<memref::ExpandShapeOp, memref::CollapseShapeOp, memref::CastOp>(
            def)) {
      memref = def->getOperand(0);
      continue;
    }
    return false;
  }
}

/// How a flat nest's innermost dimension is vectorised: each thread takes
/// `width` consecutive iterations (16 bytes of each access), the accesses
/// along that dimension become vector loads and stores, the arithmetic
/// stays scalar per lane.
struct FlatVectorPlan {
  int64_t width = 0;
  llvm::SmallPtrSet<Operation *, 8> accesses; // loads/stores made vectors
};

/// The plan for `par`, or nothing. Needs: the innermost loop from 0 by 1 to
/// a multiple of the width; its induction variable used only as the last
/// index of loads and stores of one element size (16, 32 or 64 bits) on
/// 16-byte aligned, dense buffers whose last dimension is a multiple of the
/// width; no store of an element the lanes share; no load after a store
/// (the stores are made at the end of the lanes); no regions.
std::optional<FlatVectorPlan> planFlatVectors(scf::ParallelOp par) {
  Value iv = par.getInductionVars().back();
  std::optional<int64_t> lb = getConstantIntValue(par.getLowerBound().back()),
                         ub = getConstantIntValue(par.getUpperBound().back()),
                         step = getConstantIntValue(par.getStep().back());
  if (!lb || !ub || !step || *lb != 0 || *step != 1)
    return std::nullopt;
  FlatVectorPlan plan;
  unsigned bits = 0;
  bool stored = false;
  for (Operation &op : par.getBody()->without_terminator()) {
    if (op.getNumRegions() != 0)
      return std::nullopt;
    auto load = dyn_cast<memref::LoadOp>(op);
    auto store = dyn_cast<memref::StoreOp>(op);
    if (load && stored)
      return std::nullopt;
    if (!load && !store) {
      if (llvm::is_contained(op.getOperands(), iv))
        return std::nullopt; // the index used as a value
      if (!isMemoryEffectFree(&op))
        return std::nullopt;
      continue;
    }
    stored |= bool(store);
    ValueRange idx = load ? load.getIndices() : store.getIndices();
    Value buffer = load ? load.getMemRef() : store.getMemRef();
    bool alongLast = !idx.empty() && idx.back() == iv;
    if (llvm::is_contained(idx.drop_back(idx.empty() ? 0 : 1), iv))
      return std::nullopt;
    if (!alongLast) {
      if (store)
        return std::nullopt; // every lane would store the same element
      continue;
    }
    auto type = cast<MemRefType>(buffer.getType());
    if (!type.getElementType().isIntOrFloat())
      return std::nullopt;
    unsigned b = type.getElementTypeBitWidth();
    if ((b != 16 && b != 32 && b != 64) || (bits && b != bits) ||
        !type.getLayout().isIdentity() || !type.hasStaticShape() ||
        !alignedTo16(buffer) || par->isAncestor(buffer.getParentBlock()->getParentOp()))
      return std::nullopt;
    bits = b;
    plan.accesses.insert(&op);
  }
  if (plan.accesses.empty())
    return std::nullopt;
  plan.width = 128 / bits;
  for (Operation *access : plan.accesses) {
    auto type = cast<MemRefType>(access->getOperand(isa<memref::StoreOp>(access) ? 1 : 0)
                                     .getType());
    if (type.getShape().back() % plan.width != 0)
      return std::nullopt;
  }
  if (*ub % plan.width != 0)
    return std::nullopt;
  return plan;
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
    std::optional<FlatVectorPlan> vectors = planFlatVectors(par);
    if (vectors) // a thread per `width` iterations of the innermost loop
      tcs.back() = cIndex(b, loc,
                          *getConstantIntValue(par.getUpperBound().back()) /
                              vectors->width);
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
    if (!vectors) {
      cloneBody(b, par, map);
      return launch;
    }
    // The lanes: the body once per lane, the accesses along the innermost
    // dimension loaded as one vector (at the first lane) and stored as one
    // (at the last); iterations of a parallel loop are independent, so
    // the later lanes may read before the earlier ones store.
    Value iv = par.getInductionVars().back();
    int64_t width = vectors->width;
    Value base = b.createOrFold<arith::MulIOp>(loc, map.lookup(iv),
                                               cIndex(b, loc, width));
    llvm::DenseMap<Operation *, Value> loaded;
    llvm::DenseMap<Operation *, SmallVector<Value>> toStore;
    for (int64_t lane = 0; lane < width; ++lane) {
      IRMapping m = map;
      m.map(iv, b.createOrFold<arith::AddIOp>(loc, base, cIndex(b, loc, lane)));
      for (Operation &op : par.getBody()->without_terminator()) {
        if (!vectors->accesses.count(&op)) {
          b.clone(op, m);
          continue;
        }
        auto indices = [&](ValueRange idx) {
          SmallVector<Value> out;
          for (Value v : idx.drop_back())
            out.push_back(m.lookupOrDefault(v));
          out.push_back(base);
          return out;
        };
        if (auto load = dyn_cast<memref::LoadOp>(op)) {
          Value &vec = loaded[&op];
          if (!vec)
            vec = vector::LoadOp::create(
                b, loc, VectorType::get({width}, load.getType()),
                m.lookupOrDefault(load.getMemRef()), indices(load.getIndices()),
                /*nontemporal=*/false, llvm::MaybeAlign(16));
          m.map(load.getResult(), vector::ExtractOp::create(
                                      b, loc, vec, ArrayRef<int64_t>{lane}));
          continue;
        }
        auto store = cast<memref::StoreOp>(op);
        SmallVector<Value> &values = toStore[&op];
        values.push_back(m.lookupOrDefault(store.getValueToStore()));
        if (lane + 1 == width) {
          Value vec = vector::FromElementsOp::create(
              b, loc, VectorType::get({width}, values.front().getType()),
              values);
          vector::StoreOp::create(b, loc, vec,
                                  m.lookupOrDefault(store.getMemRef()),
                                  indices(store.getIndices()),
                                  /*nontemporal=*/false, llvm::MaybeAlign(16));
        }
      }
    }
    return launch;
  }

  /// Whether `par` is a row-fused nest this pass can spread over a block:
  /// inner parallel loops or block reductions directly in its body (see
  /// below for reductions alone), and every op that writes memory outside
  /// them has no results used afterwards.
  bool isRowFused(scf::ParallelOp par) {
    if (par->hasAttr(kThreadPerIteration))
      return false;
    bool anyInner = false, anyReduction = false, allContiguous = true;
    for (Operation &op : par.getBody()->without_terminator()) {
      if (auto inner = dyn_cast<scf::ParallelOp>(op)) {
        if (inner.getNumResults() != 0)
          return false;
        anyInner = true;
        continue;
      }
      if (std::optional<BlockReduction> r = matchBlockReduction(&op)) {
        anyReduction = true;
        allContiguous &= walksContiguously(*r);
      } else if (!replicable(&op) && !op.use_empty()) {
        return false;
      }
    }
    if (anyInner)
      return true;
    // Only reductions: a block per row when the rows are read contiguously
    // or are too few to fill a block of the flat mapping (one thread per
    // row, which reads a column's elements in step across a warp) and too
    // short to split (splitLongReduction: chunks of columns, read in step).
    // The fold of a split reduction is short by construction (its chunks):
    // with few outputs, a block each folds them (64 batch-norm channels'
    // 1024 partials each: 64 blocks, not one block of 64 threads each
    // reading 1024 in turn).
    std::optional<int64_t> rows = constantTotal(par);
    return anyReduction &&
           (allContiguous ||
            (rows && *rows < kFlatBlock &&
             (par->hasAttr(kSplitFold) || !planSplit(par).has_value())));
  }

  /// One block per outer iteration; inner loops strided over the threads.
  /// `segmentEnds` (a one-trip stretch of independent reductions,
  /// `independentReductions`): block k runs the ops after the (k-1)-th of
  /// these loops up to the k-th, the others skip them.
  gpu::LaunchOp mapRowFused(scf::ParallelOp par,
                            ArrayRef<Operation *> segmentEnds = {}) {
    OpBuilder b(par);
    Location loc = par.getLoc();
    SmallVector<Value> tcs = tripCounts(b, par);
    Value grid = segmentEnds.empty()
                     ? product(b, loc, tcs)
                     : cIndex(b, loc, static_cast<int64_t>(segmentEnds.size()));
    // Threads: enough for the widest inner loop, in whole warps.
    int64_t widest = 0;
    for (Operation &op : par.getBody()->without_terminator()) {
      if (auto inner = dyn_cast<scf::ParallelOp>(op)) {
        std::optional<int64_t> n = constantTotal(inner);
        widest = std::max(widest, n ? *n : kMaxRowBlock);
      } else if (std::optional<BlockReduction> r = matchBlockReduction(&op)) {
        std::optional<APInt> n = r->loop.getStaticTripCount();
        widest = std::max<int64_t>(widest, n ? n->getZExtValue() : kMaxRowBlock);
      }
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
    int64_t segment = -1;
    bool segmentDone = true;
    // With parts, the pure ops first (every part may use them).
    llvm::SmallPtrSet<Operation *, 16> hoisted;
    if (!segmentEnds.empty())
      for (Operation &op : par.getBody()->without_terminator())
        if (isMemoryEffectFree(&op) && op.getNumRegions() == 0) {
          b.clone(op, map);
          hoisted.insert(&op);
        }
    for (Operation &op : par.getBody()->without_terminator()) {
      if (hoisted.count(&op))
        continue;
      if (!segmentEnds.empty() && segmentDone) {
        // The next block's part: a block-uniform branch (its barriers and
        // all-reduces are reached by all of the block's threads or none).
        b.setInsertionPoint(launch.getBody().front().getTerminator());
        Value mine = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq, launch.getBlockIds().x,
            cIndex(b, loc, ++segment));
        auto part = scf::IfOp::create(b, loc, mine, /*withElse=*/false);
        b.setInsertionPoint(part.thenBlock()->getTerminator());
        single = nullptr;
        wrote = read = false;
        segmentDone = false;
      }
      if (llvm::is_contained(segmentEnds, &op))
        segmentDone = true;
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
      if (std::optional<BlockReduction> r = matchBlockReduction(&op)) {
        // The parts read only what the loop reads, not the accumulators:
        // an open thread-0 step that just initialised them needs no
        // barrier (thread 0 itself folds the parts in).
        bool onlyInits = single && llvm::all_of(
            single.thenBlock()->without_terminator(), [&](Operation &o) {
              auto store = dyn_cast<memref::StoreOp>(o);
              return store && llvm::any_of(r->accs, [&](auto &acc) {
                return map.lookupOrDefault(acc.store.getMemRef()) ==
                       store.getMemRef();
              });
            });
        single = nullptr;
        if (wrote && !onlyInits) // the parts read what other threads wrote
          barrier();
        // gpu.all_reduce synchronises the block (every thread's part is in
        // before any thread has the total), so thread 0's fold after it
        // cannot race with reads of the accumulator before it; the
        // emulation cuts a phase there too.
        single = mapBlockReduction(b, *r, tid, nthreads, isFirst, map);
        read = true;
        wrote |= !r->inRegisters(); // thread 0 stored the totals
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

  /// Emits `r` shared by the block: each thread's strided part, a
  /// gpu.all_reduce per value, and thread 0 folding the results into the
  /// accumulators (returned: that thread-0 segment), or, in registers,
  /// every thread folding the initial values in (`map` then gives the
  /// loop's results; returns null).
  scf::IfOp mapBlockReduction(OpBuilder &b, BlockReduction &r, Value tid,
                              Value nthreads, Value isFirst, IRMapping &map) {
    scf::ForOp loop = r.loop;
    Location loc = loop.getLoc();
    Value lb = map.lookupOrDefault(loop.getLowerBound());
    Value ub = map.lookupOrDefault(loop.getUpperBound());
    Value step = map.lookupOrDefault(loop.getStep());
    Value start = arith::AddIOp::create(
        b, loc, lb, arith::MulIOp::create(b, loc, tid, step));
    Value stride = arith::MulIOp::create(b, loc, step, nthreads);
    scf::ForOp part = r.partLoop(b, start, ub, stride, map);
    SmallVector<Value> totals;
    for (auto [i, kind] : llvm::enumerate(r.kinds)) {
      auto reduce = gpu::AllReduceOp::create(
          b, loc, part.getResult(i),
          gpu::AllReduceOperationAttr::get(b.getContext(), kind),
          b.getUnitAttr());
      totals.push_back(reduce.getResult());
    }
    if (r.inRegisters()) {
      // Every thread has the totals: the loop's results on all of them.
      for (auto [i, init] : llvm::enumerate(loop.getInitArgs()))
        map.map(loop.getResult(i),
                r.fold(b, i, map.lookupOrDefault(init), totals[i]));
      return nullptr;
    }
    auto single = scf::IfOp::create(b, loc, isFirst, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(single.thenBlock()->getTerminator());
    for (auto [i, acc] : llvm::enumerate(r.accs)) {
      Value buffer = map.lookupOrDefault(acc.load.getMemRef());
      SmallVector<Value> indices;
      for (Value v : acc.load.getIndices())
        indices.push_back(map.lookupOrDefault(v));
      Value old = memref::LoadOp::create(b, loc, buffer, indices);
      memref::StoreOp::create(b, loc, r.fold(b, i, old, totals[i]), buffer,
                              indices);
    }
    return single;
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

  /// Where a buffer access lands: its root buffer (through views) and, for
  /// a static view at a constant byte offset into an arena
  /// (`memref.view`), the bytes it covers; otherwise all of the root.
  struct Footprint {
    Value root;
    bool whole = false; // all of the root (bytes unknown)
    int64_t begin = 0, end = 0;
  };
  /// Function arguments are distinct buffers (the runtime's entry buffers:
  /// one allocation each), so they are roots of their own.
  static std::optional<Footprint> footprint(Value v) {
    Footprint f;
    bool narrowed = false;
    while (Operation *def = v.getDefiningOp()) {
      if (auto view = dyn_cast<memref::ViewOp>(def)) {
        // The bytes of a static view at a constant offset into its source
        // (the arena), unless a view of it already covers unknown bytes.
        auto type = cast<MemRefType>(view.getType());
        std::optional<int64_t> offset =
            getConstantIntValue(view.getByteShift());
        if (!narrowed && !f.whole && offset && type.hasStaticShape() &&
            type.getLayout().isIdentity() &&
            type.getElementType().isIntOrFloat()) {
          f.begin = *offset;
          f.end = *offset + type.getNumElements() *
                                ((type.getElementTypeBitWidth() + 7) / 8);
          narrowed = true;
        } else {
          f.whole = true;
        }
        v = view.getSource();
        continue;
      }
      if (isa<ViewLikeOpInterface, memref::CastOp>(def)) {
        // Any other view (a subview, a reinterpret_cast that may reach past
        // its source): the whole root, never narrowed again.
        f.whole = true;
        v = def->getOperand(0);
        continue;
      }
      if (isa<memref::AllocOp, memref::AllocaOp>(def))
        break;
      return std::nullopt; // a buffer of unknown origin
    }
    if (!v.getDefiningOp()) {
      auto arg = cast<BlockArgument>(v);
      if (!arg.getOwner()->isEntryBlock() ||
          !isa<func::FuncOp>(arg.getOwner()->getParentOp()))
        return std::nullopt;
    }
    if (!narrowed)
      f.whole = true;
    f.root = v;
    return f;
  }

  /// A stretch (`first` to `last`, one block) that is only independent
  /// reductions to scalars -- each some stores (the accumulators' initial
  /// values) and one block reduction, none touching what another writes,
  /// no value of one used by another: the global norm's sums of squares of
  /// a model's small gradients, one after another -- gives the loops that
  /// end its parts (two or more), which can then run in a block each
  /// instead of one after another in one block; empty otherwise.
  SmallVector<Operation *> independentReductions(Operation *first,
                                                 Operation *last) {
    struct Part {
      SmallVector<Operation *> ops;
      SmallVector<Footprint> reads, writes;
    };
    SmallVector<Part> parts(1);
    SmallVector<Operation *> ends;
    for (Operation *op = first;; op = op->getNextNode()) {
      Part &part = parts.back();
      part.ops.push_back(op);
      auto add = [&](SmallVectorImpl<Footprint> &list, Value buffer) {
        std::optional<Footprint> f = footprint(buffer);
        if (f)
          list.push_back(*f);
        return f.has_value();
      };
      if (std::optional<BlockReduction> r = matchBlockReduction(op)) {
        if (r->inRegisters())
          return {};
        bool ok = true;
        op->walk([&](Operation *inner) {
          if (auto load = dyn_cast<memref::LoadOp>(inner))
            ok &= add(part.reads, load.getMemRef());
          else if (auto store = dyn_cast<memref::StoreOp>(inner))
            ok &= add(part.writes, store.getMemRef());
          else if (inner != op && !isMemoryEffectFree(inner) &&
                   inner->getNumRegions() == 0)
            ok = false;
        });
        if (!ok)
          return {};
        ends.push_back(op);
        if (op == last)
          break;
        parts.emplace_back();
        continue;
      }
      if (auto store = dyn_cast<memref::StoreOp>(op)) {
        if (!add(part.writes, store.getMemRef()))
          return {};
      } else if (op->getNumRegions() != 0 || !isMemoryEffectFree(op)) {
        return {};
      }
      if (op == last)
        return {}; // the stretch must end with a reduction
    }
    if (ends.size() < 2)
      return {};
    auto overlap = [](const Footprint &a, const Footprint &b) {
      return a.root == b.root &&
             (a.whole || b.whole || (a.begin < b.end && b.begin < a.end));
    };
    for (size_t i = 0; i < parts.size(); ++i)
      for (size_t j = 0; j < parts.size(); ++j) {
        if (i == j)
          continue;
        for (const Footprint &w : parts[i].writes) {
          for (const Footprint &o : parts[j].writes)
            if (overlap(w, o))
              return {};
          for (const Footprint &o : parts[j].reads)
            if (overlap(w, o))
              return {};
        }
        // No value of part i used in part j (pure ops aside: the mapping
        // computes those before the parts).
        for (Operation *op : parts[i].ops) {
          if (isMemoryEffectFree(op) && op->getNumRegions() == 0)
            continue;
          for (Operation *user : op->getUsers()) {
            Operation *top = first->getBlock()->findAncestorOpInBlock(*user);
            if (top && llvm::is_contained(parts[j].ops, top))
              return {};
          }
        }
      }
    return ends;
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
    for (Operation *op : stretch)
      if (staysOnHost(op) && !isMemoryEffectFree(op))
        return op->emitError("cannot run this op on the GPU: a runtime call "
                             "sits between a kernel and the use of a value "
                             "it computes");
    // Pure host ops (views) whose results are used after the stretch stay
    // outside, before it, with the pure host ops they are computed from.
    llvm::SmallPtrSet<Operation *, 16> outside;
    for (Operation *op : llvm::reverse(stretch)) {
      if (!staysOnHost(op))
        continue;
      bool feedsOutside = llvm::any_of(op->getUsers(), [&](Operation *user) {
        return outside.count(stretch.front()->getBlock()->findAncestorOpInBlock(
            *user));
      });
      if (usedAfter(op) || feedsOutside)
        outside.insert(op);
    }
    llvm::SmallPtrSet<Operation *, 16> inside;
    for (Operation *op : stretch) {
      bool dependsInside = llvm::any_of(op->getOperands(), [&](Value v) {
        Operation *d = v.getDefiningOp();
        return d && inside.count(d);
      });
      if (outside.count(op) && !dependsInside)
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

  /// A runtime call (a GEMM, a collective, a pipeline send) takes device
  /// buffers, but a global (a constant the compiler folded: the 0 a
  /// pipeline's first stage adds to the loss all-reduce) lives in host
  /// memory. Each global a runtime call reads is copied into a device buffer
  /// first (a copy loop, which becomes a kernel reading the kernels' own
  /// copy of the global), freed at the end of its block; every use of the
  /// global in that block reads the copy. The index fault's (RuntimeABI.h)
  /// stay on the host.
  LogicalResult copyGlobalsForRuntimeCalls(func::FuncOp fn) {
    SmallVector<memref::GetGlobalOp> globals;
    fn.walk([&](memref::GetGlobalOp g) {
      SmallVector<Value> work = {g.getResult()};
      while (!work.empty()) {
        Value v = work.pop_back_val();
        for (Operation *user : v.getUsers()) {
          if (auto call = dyn_cast<func::CallOp>(user)) {
            // Except the index fault's shape and message, which the
            // runtime reads on the host.
            if (call.getCallee() == distopt::kIndexFaultFunction)
              continue;
            globals.push_back(g);
            return;
          }
          if (isa<memref::CastOp, ViewLikeOpInterface>(user))
            for (Value r : user->getResults())
              work.push_back(r);
        }
      }
    });
    for (memref::GetGlobalOp g : globals) {
      auto type = cast<MemRefType>(g.getType());
      if (!type.hasStaticShape() || !type.getLayout().isIdentity())
        return g.emitError("cannot copy this global to the GPU for the "
                           "runtime call that reads it (a dynamic shape or "
                           "a strided layout)");
      OpBuilder b(g->getContext());
      b.setInsertionPointAfter(g);
      Location loc = g.getLoc();
      auto copy = memref::AllocOp::create(b, loc, type);
      g.getResult().replaceAllUsesWith(copy.getResult());
      SmallVector<Value> lbs, ubs, steps;
      for (int64_t d : type.getShape()) {
        lbs.push_back(cIndex(b, loc, 0));
        ubs.push_back(cIndex(b, loc, d));
        steps.push_back(cIndex(b, loc, 1));
      }
      if (type.getRank() == 0) {
        Value v = memref::LoadOp::create(b, loc, g.getResult(), ValueRange{});
        memref::StoreOp::create(b, loc, v, copy.getResult(), ValueRange{});
      } else {
        scf::ParallelOp::create(
            b, loc, lbs, ubs, steps,
            [&](OpBuilder &nb, Location l, ValueRange ivs) {
              Value v = memref::LoadOp::create(nb, l, g.getResult(), ivs);
              memref::StoreOp::create(nb, l, v, copy.getResult(), ivs);
            });
      }
      b.setInsertionPoint(g->getBlock()->getTerminator());
      memref::DeallocOp::create(b, loc, copy.getResult());
    }
    return success();
  }

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (failed(copyGlobalsForRuntimeCalls(fn)))
      return signalPassFailure();
    SmallVector<gpu::LaunchOp> launches;
    bool ok = true;
    // Reduction nests at the top level, and in the body of a top-level
    // parallel loop (a layer norm over the last two axes: its row's
    // statistics are a two-deep nest, flattened to one loop the block
    // shares).
    SmallVector<scf::ForOp> nests;
    for (Block &block : fn.getBody())
      for (Operation &op : block) {
        if (auto loop = dyn_cast<scf::ForOp>(op))
          nests.push_back(loop);
        if (auto par = dyn_cast<scf::ParallelOp>(op))
          for (auto loop : par.getBody()->getOps<scf::ForOp>())
            nests.push_back(loop);
      }
    for (scf::ForOp loop : nests)
      normalizeReductionNest(loop);
    SmallVector<scf::ParallelOp> pars;
    for (Block &block : fn.getBody())
      for (auto par : block.getOps<scf::ParallelOp>())
        pars.push_back(par);
    for (scf::ParallelOp par : pars)
      splitLongReduction(par, isRowFused(par));
    SmallVector<scf::ForOp> scalars;
    for (Block &block : fn.getBody())
      for (auto loop : block.getOps<scf::ForOp>())
        scalars.push_back(loop);
    for (scf::ForOp loop : scalars)
      splitLongScalarReduction(loop);
    // Maps the ops of `block` (the function's, or the body of a host loop
    // that calls the runtime) to kernels; defined below, recursive.
    std::function<void(Block &)> mapBlock;
    mapBlock = [&](Block &block) {
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
        bool reduces = llvm::any_of(pending, [&](Operation *op) {
          return matchBlockReduction(op).has_value();
        });
        if (last == pending.back() && !reduces) {
          launches.push_back(mapSingle(pending));
          for (Operation *op : llvm::reverse(pending))
            op->erase();
          pending.clear();
          return;
        }
        // Independent reductions (each its own accumulators): a block each.
        SmallVector<Operation *> ends;
        if (last == pending.back())
          ends = independentReductions(pending.front(), last);
        FailureOr<scf::ParallelOp> group = wrapStretch(pending.front(), last);
        pending.clear();
        if (failed(group)) {
          ok = false;
          return;
        }
        if (!ends.empty())
          launches.push_back(mapRowFused(*group, ends));
        else
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
        // A sequential loop that calls the runtime (fused attention's loop
        // over blocks of keys, whose GEMMs are library calls) runs on the
        // host; its body's loops become kernels of their own.
        if (auto loop = dyn_cast<scf::ForOp>(op)) {
          bool calls = loop->walk([](func::CallOp) {
                             return WalkResult::interrupt();
                           }).wasInterrupted();
          if (calls) {
            flush();
            mapBlock(*loop.getBody());
            continue;
          }
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
    };
    for (Block &block : fn.getBody())
      mapBlock(block);
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
