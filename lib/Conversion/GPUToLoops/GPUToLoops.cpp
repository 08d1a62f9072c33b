//===- GPUToLoops.cpp - gpu.launch -> sequential host loops (emulation) ---===//
//
// Runs the kernels `distopt-map-loops-to-gpu` makes on the host, so that the
// GPU mapping (delinearisation, strided loops, thread-0 steps, barriers,
// block reductions) can be checked against a reference where no GPU is
// present (`distopt compile --target cuda-emu`).
//
// A kernel body is cut into phases at its top-level `gpu.barrier` and
// `gpu.all_reduce` ops. Each block runs its phases one after another, and
// each phase runs every thread of the block to completion before the next
// phase starts: what a barrier guarantees, and nothing more. The threads of
// a phase run in *reverse* order, so a step that thread 0 writes and other
// threads read without a barrier between them reads stale memory here, as it
// may on a GPU; with `forward=true` they run in order, which shows the
// opposite race (thread 0 reading what the others write); with
// `runtime-order=true` each launch asks the runtime
// (`dort_emulate_threads_forward`, DISTOPT_EMULATE_THREADS), so that one
// executable checks both orders. A value loaded (or computed by control flow) in one phase and
// used in a later one lives in a per-thread array; pure values (views,
// indices) are recomputed where they are used. An all-reduce combines
// the threads' values in thread order and gives every thread the result.
//
// A kernel whose blocks each run a part of their own (independent
// reductions: `scf.if (block id == k)` around each part) is emulated as one
// single-block kernel per part: the parts are independent, so that is what
// the GPU computes, though not the branch structure itself (ptxas and the
// GPU runs check that).
//
// What the emulation cannot represent (a barrier inside control flow, shared
// memory, warp shuffles) is an error naming the op: such kernels are not what
// distopt's mapping makes.
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

namespace distopt {
#define GEN_PASS_DEF_EMULATEGPULAUNCHESPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

Value cIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// `a <op> b` for the all-reduce operation `kind` on scalars of `a`'s type.
FailureOr<Value> combine(OpBuilder &b, Location loc, gpu::AllReduceOperation kind,
                         Value x, Value y) {
  bool isFloat = isa<FloatType>(x.getType());
  using K = gpu::AllReduceOperation;
  switch (kind) {
  case K::ADD:
    return isFloat ? arith::AddFOp::create(b, loc, x, y).getResult()
                   : arith::AddIOp::create(b, loc, x, y).getResult();
  case K::MUL:
    return isFloat ? arith::MulFOp::create(b, loc, x, y).getResult()
                   : arith::MulIOp::create(b, loc, x, y).getResult();
  case K::MINUI:
    return arith::MinUIOp::create(b, loc, x, y).getResult();
  case K::MINSI:
    return arith::MinSIOp::create(b, loc, x, y).getResult();
  case K::MAXUI:
    return arith::MaxUIOp::create(b, loc, x, y).getResult();
  case K::MAXSI:
    return arith::MaxSIOp::create(b, loc, x, y).getResult();
  case K::MINNUMF:
    return arith::MinNumFOp::create(b, loc, x, y).getResult();
  case K::MAXNUMF:
    return arith::MaxNumFOp::create(b, loc, x, y).getResult();
  case K::MINIMUMF:
    return arith::MinimumFOp::create(b, loc, x, y).getResult();
  case K::MAXIMUMF:
    return arith::MaximumFOp::create(b, loc, x, y).getResult();
  case K::AND:
    return arith::AndIOp::create(b, loc, x, y).getResult();
  case K::OR:
    return arith::OrIOp::create(b, loc, x, y).getResult();
  case K::XOR:
    return arith::XOrIOp::create(b, loc, x, y).getResult();
  }
  return failure();
}

/// Phase boundaries: a barrier, or an all-reduce (every thread's operand is
/// needed before any thread has the result).
bool isPhaseEnd(Operation *op) {
  return isa<gpu::BarrierOp, gpu::AllReduceOp>(op);
}

/// The runtime's answer to "which order" (`runtime-order`).
constexpr llvm::StringLiteral kOrderFunction = "dort_emulate_threads_forward";

struct EmulateGPULaunchesPass
    : public distopt::impl::EmulateGPULaunchesPassBase<EmulateGPULaunchesPass> {
  using EmulateGPULaunchesPassBase::EmulateGPULaunchesPassBase;

  LogicalResult emulate(gpu::LaunchOp launch) {
    if (launch.getAsyncToken() || !launch.getAsyncDependencies().empty() ||
        launch.getDynamicSharedMemorySize() || launch.hasClusterSize())
      return launch.emitError("cannot emulate an asynchronous launch, a "
                              "cluster or dynamic shared memory");
    if (!launch.getWorkgroupAttributions().empty() ||
        !launch.getPrivateAttributions().empty())
      return launch.emitError("cannot emulate memory attributions");
    Block &body = launch.getBody().front();
    // Everything the emulation does not model, named.
    WalkResult unsupported = launch.getBody().walk([&](Operation *op) {
      if (isPhaseEnd(op) && op->getBlock() != &body)
        return op->emitError("cannot emulate a '")
                   << op->getName()
                   << "' inside control flow (threads could not all reach "
                      "it)",
               WalkResult::interrupt();
      if (auto reduce = dyn_cast<gpu::AllReduceOp>(op))
        if (!reduce.getOp() || !reduce.getBody().empty())
          return reduce.emitError("cannot emulate an all-reduce with a "
                                  "region"),
                 WalkResult::interrupt();
      if (op->getDialect() == launch->getDialect() &&
          !isa<gpu::BarrierOp, gpu::AllReduceOp, gpu::TerminatorOp,
               gpu::ThreadIdOp, gpu::BlockIdOp, gpu::BlockDimOp,
               gpu::GridDimOp>(op))
        return op->emitError("cannot emulate '") << op->getName() << "'",
               WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (unsupported.wasInterrupted())
      return failure();
    // gpu index ops become the launch's block arguments, so that the rest
    // sees only those.
    {
      auto dim = [](gpu::KernelDim3 d, gpu::Dimension which) {
        return std::array<Value, 3>{d.x, d.y, d.z}[static_cast<unsigned>(which)];
      };
      SmallVector<Operation *> indexOps;
      launch.getBody().walk([&](Operation *op) {
        if (isa<gpu::ThreadIdOp, gpu::BlockIdOp, gpu::BlockDimOp, gpu::GridDimOp>(op))
          indexOps.push_back(op);
      });
      for (Operation *op : indexOps) {
        Value arg;
        if (auto o = dyn_cast<gpu::ThreadIdOp>(op))
          arg = dim(launch.getThreadIds(), o.getDimension());
        else if (auto o = dyn_cast<gpu::BlockIdOp>(op))
          arg = dim(launch.getBlockIds(), o.getDimension());
        else if (auto o = dyn_cast<gpu::BlockDimOp>(op))
          arg = dim(launch.getBlockSize(), o.getDimension());
        else
          arg = dim(launch.getGridSize(),
                    cast<gpu::GridDimOp>(op).getDimension());
        op->getResult(0).replaceAllUsesWith(arg);
        op->erase();
      }
    }
    gpu::KernelDim3 blockSize = launch.getBlockSizeOperandValues();
    SmallVector<int64_t> dims;
    for (Value v : {blockSize.x, blockSize.y, blockSize.z}) {
      std::optional<int64_t> c = getConstantIntValue(v);
      if (!c || *c <= 0)
        return launch.emitError("cannot emulate a launch whose block size "
                                "is not a positive constant");
      dims.push_back(*c);
    }
    int64_t nthreads = dims[0] * dims[1] * dims[2];

    // Phases, and the phase of each top-level op.
    SmallVector<SmallVector<Operation *>> phases(1);
    llvm::DenseMap<Operation *, unsigned> phaseOf;
    for (Operation &op : body.without_terminator()) {
      phaseOf[&op] = phases.size() - 1;
      phases.back().push_back(&op);
      if (isPhaseEnd(&op))
        phases.emplace_back();
    }

    OpBuilder b(launch);
    Location loc = launch.getLoc();
    // Per-thread arrays for the values a later phase needs: each value a
    // later phase uses, directly or through pure ops it recomputes, that
    // comes from an op with effects or regions (a load, an scf.if); and each
    // all-reduce's operand. Pure values (views, indices) are recomputed.
    llvm::MapVector<Value, Value> spills;
    auto isPure = [](Operation *op) {
      return isMemoryEffectFree(op) && op->getNumRegions() == 0;
    };
    auto addSpill = [&](Value v, Operation *at) -> LogicalResult {
      if (spills.count(v))
        return success();
      if (isa<MemRefType>(v.getType()))
        return at->emitError("cannot emulate: a buffer made in one phase "
                             "of the kernel is used in another");
      if (!v.getType().isIntOrIndexOrFloat())
        return at->emitError("cannot emulate a value of type ")
               << v.getType() << " used across a barrier";
      spills[v] = memref::AllocaOp::create(
          b, loc, MemRefType::get({nthreads}, v.getType()));
      return success();
    };
    // `v` is used in phase `usePhase`.
    std::function<LogicalResult(Value, unsigned)> need =
        [&](Value v, unsigned usePhase) -> LogicalResult {
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != &body || isa<gpu::AllReduceOp>(def) ||
          phaseOf.lookup(def) >= usePhase)
        return success(); // outside, uniform, or of the same phase
      if (!isPure(def))
        return addSpill(v, def);
      for (Value operand : def->getOperands())
        if (failed(need(operand, usePhase)))
          return failure();
      return success();
    };
    for (Operation &op : body.without_terminator()) {
      unsigned phase = phaseOf.lookup(&op);
      if (auto reduce = dyn_cast<gpu::AllReduceOp>(op)) {
        if (failed(addSpill(reduce.getValue(), &op)))
          return failure();
        continue;
      }
      WalkResult r = op.walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (failed(need(operand, phase)))
            return WalkResult::interrupt();
        return WalkResult::advance();
      });
      if (r.wasInterrupted())
        return failure();
    }

    gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    // The thread order: fixed, or asked of the runtime once per launch.
    Value forwardAtRun;
    if (runtimeOrder) {
      // By name: a function pass does not look at its siblings; the
      // module's declaration is checked when the module is verified.
      Type i32 = b.getI32Type();
      Value dflt = arith::ConstantIntOp::create(b, loc, i32, forward ? 1 : 0);
      Value got = func::CallOp::create(b, loc, kOrderFunction,
                                       TypeRange{i32}, ValueRange{dflt})
                      .getResult(0);
      forwardAtRun = arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::ne, got,
          arith::ConstantIntOp::create(b, loc, i32, 0));
    }
    Value blocks = arith::MulIOp::create(
        b, loc, arith::MulIOp::create(b, loc, grid.x, grid.y), grid.z);
    auto blockLoop = scf::ForOp::create(b, loc, c0, blocks, c1);
    b.setInsertionPoint(blockLoop.getBody()->getTerminator());
    Value blockId = blockLoop.getInductionVar();
    IRMapping blockMap; // values shared by the block's threads
    {
      Value bx = arith::RemUIOp::create(b, loc, blockId, grid.x);
      Value rest = arith::DivUIOp::create(b, loc, blockId, grid.x);
      Value by = arith::RemUIOp::create(b, loc, rest, grid.y);
      Value bz = arith::DivUIOp::create(b, loc, rest, grid.y);
      gpu::KernelDim3 ids = launch.getBlockIds();
      blockMap.map(ids.x, bx);
      blockMap.map(ids.y, by);
      blockMap.map(ids.z, bz);
      gpu::KernelDim3 g = launch.getGridSize(), s = launch.getBlockSize();
      blockMap.map(g.x, grid.x);
      blockMap.map(g.y, grid.y);
      blockMap.map(g.z, grid.z);
      blockMap.map(s.x, blockSize.x);
      blockMap.map(s.y, blockSize.y);
      blockMap.map(s.z, blockSize.z);
    }

    for (ArrayRef<Operation *> phase : phases) {
      if (phase.empty())
        continue;
      // Threads in reverse order (or forward).
      Value n = cIndex(b, loc, nthreads);
      auto threadLoop = scf::ForOp::create(b, loc, c0, n, c1);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(threadLoop.getBody()->getTerminator());
        Value i = threadLoop.getInductionVar();
        auto reversed = [&] {
          return arith::SubIOp::create(
                     b, loc, arith::SubIOp::create(b, loc, n, c1), i)
              .getResult();
        };
        Value t = forwardAtRun
                      ? arith::SelectOp::create(b, loc, forwardAtRun, i,
                                                reversed())
                            .getResult()
                      : (forward ? i : reversed());
        IRMapping map = blockMap;
        gpu::KernelDim3 tids = launch.getThreadIds();
        Value tx = arith::RemUIOp::create(b, loc, t, blockSize.x);
        Value rest = arith::DivUIOp::create(b, loc, t, blockSize.x);
        map.map(tids.x, tx);
        map.map(tids.y, arith::RemUIOp::create(b, loc, rest, blockSize.y));
        map.map(tids.z, arith::DivUIOp::create(b, loc, rest, blockSize.y));
        // Values of earlier phases: reloaded, or (views) recomputed.
        std::function<void(Value)> bring = [&](Value v) {
          if (map.contains(v))
            return;
          Operation *def = v.getDefiningOp();
          if (!def || def->getBlock() != &body)
            return; // defined outside the launch, or a block argument
          auto spill = spills.find(v);
          if (spill != spills.end()) {
            map.map(v, memref::LoadOp::create(b, loc, spill->second, t));
            return;
          }
          // Pure (the analysis above kept everything else): recomputed.
          for (Value operand : def->getOperands())
            bring(operand);
          b.clone(*def, map);
        };
        for (Operation *op : phase) {
          if (isa<gpu::BarrierOp>(op))
            continue;
          if (auto reduce = dyn_cast<gpu::AllReduceOp>(op)) {
            bring(reduce.getValue());
            continue;
          }
          op->walk([&](Operation *inner) {
            for (Value operand : inner->getOperands())
              bring(operand);
          });
          b.clone(*op, map);
        }
        // Values the later phases (or the all-reduce) need.
        for (Operation *op : phase)
          for (Value r : op->getResults())
            if (auto spill = spills.find(r); spill != spills.end())
              memref::StoreOp::create(b, loc, map.lookup(r), spill->second,
                                      t);
        if (auto reduce = dyn_cast<gpu::AllReduceOp>(phase.back())) {
          Value v = reduce.getValue();
          Operation *def = v.getDefiningOp();
          if (!def || def->getBlock() != &body) // uniform, from outside
            memref::StoreOp::create(b, loc, map.lookupOrDefault(v),
                                    spills.lookup(v), t);
        }
      }
      // An all-reduce at the end of the phase: the threads' values in thread
      // order, the result shared by the block.
      if (auto reduce = dyn_cast<gpu::AllReduceOp>(phase.back())) {
        Value array = spills.lookup(reduce.getValue());
        Value first = memref::LoadOp::create(b, loc, array, c0);
        auto fold = scf::ForOp::create(b, loc, c1, n, c1, ValueRange{first});
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(fold.getBody());
        Value x = memref::LoadOp::create(b, loc, array, fold.getInductionVar());
        FailureOr<Value> next = combine(b, loc, *reduce.getOp(),
                                        fold.getRegionIterArgs()[0], x);
        if (failed(next))
          return reduce.emitError("cannot emulate this all-reduce operation");
        scf::YieldOp::create(b, loc, *next);
        blockMap.map(reduce.getResult(), fold.getResult(0));
      }
    }
    launch.erase();
    return success();
  }

  /// A launch whose blocks each run their own part (what the loop mapping
  /// makes of independent reductions: pure ops, then `scf.if (block id x
  /// == k)` for k = 0, 1, ..., nothing else) becomes one single-block
  /// launch per part, the block id a constant in each: the parts touch
  /// disjoint memory, so running them one after another is what the GPU
  /// computes, and each part's barriers and all-reduces are at its top
  /// level, where the emulation takes them. Returns the launches to
  /// emulate (`launch` itself when it is not of that form).
  SmallVector<gpu::LaunchOp> splitBlockParts(gpu::LaunchOp launch) {
    Block &body = launch.getBody().front();
    Value bx = launch.getBlockIds().x;
    SmallVector<std::pair<scf::IfOp, int64_t>> parts;
    for (Operation &op : body.without_terminator()) {
      if (auto part = dyn_cast<scf::IfOp>(op)) {
        auto cmp = part.getCondition().getDefiningOp<arith::CmpIOp>();
        std::optional<int64_t> k =
            cmp ? getConstantIntValue(cmp.getRhs()) : std::nullopt;
        if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq ||
            cmp.getLhs() != bx || !k || part.elseBlock() ||
            part.getNumResults() != 0 ||
            *k != static_cast<int64_t>(parts.size()))
          return {launch};
        parts.push_back({part, *k});
        continue;
      }
      if (!isMemoryEffectFree(&op) || op.getNumRegions() != 0)
        return {launch};
    }
    gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
    std::optional<int64_t> gx = getConstantIntValue(grid.x);
    if (parts.size() < 2 || !gx || *gx != static_cast<int64_t>(parts.size()) ||
        getConstantIntValue(grid.y) != 1 || getConstantIntValue(grid.z) != 1)
      return {launch};
    SmallVector<gpu::LaunchOp> split;
    OpBuilder b(launch);
    Location loc = launch.getLoc();
    gpu::KernelDim3 size = launch.getBlockSizeOperandValues();
    for (auto [part, k] : parts) {
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      auto single = gpu::LaunchOp::create(b, loc, one, one, one, size.x,
                                          size.y, size.z);
      Block &to = single.getBody().front();
      OpBuilder in = OpBuilder::atBlockEnd(&to);
      IRMapping map;
      map.map(launch.getBody().getArguments(),
              single.getBody().getArguments());
      map.map(bx, arith::ConstantIndexOp::create(in, loc, k).getResult());
      for (Operation &op : body.without_terminator())
        if (!isa<scf::IfOp>(op))
          in.clone(op, map);
      for (Operation &op : part.thenBlock()->without_terminator())
        in.clone(op, map);
      gpu::TerminatorOp::create(in, loc);
      split.push_back(single);
    }
    launch.erase();
    return split;
  }

  void runOnOperation() override {
    SmallVector<gpu::LaunchOp> launches;
    getOperation().walk([&](gpu::LaunchOp l) { launches.push_back(l); });
    for (gpu::LaunchOp launch : launches)
      for (gpu::LaunchOp one : splitBlockParts(launch))
        if (failed(emulate(one)))
          return signalPassFailure();
  }
};

} // namespace
