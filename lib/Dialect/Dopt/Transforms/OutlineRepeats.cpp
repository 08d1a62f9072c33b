//===- OutlineRepeats.cpp - repeated runs of ops -> one function ----------===//
//
// distopt-outline-repeats: where a function's body holds one sequence of ops
// several times in a row -- the layers of a transformer (each layer's
// forward, each layer's backward in reverse order, each layer's optimizer
// updates), the cells of an unrolled recurrence -- the sequence becomes one
// private function, called once per repetition with the values it reads
// from outside it (its weights, the output of the repetition before), and
// returning the values read after it. Everything downstream (lowering,
// bufferization, LLVM) then compiles the sequence once: compile time grows
// with the distinct blocks of a program, not with its depth.
//
// Repetitions are found on the op sequence itself, not on names: ops are
// alike when their name, attributes and operand and result types are; a
// run of `copies` consecutive copies of a `period`-op sequence is kept when
// its dataflow is the same in every copy (each operand read inside a copy
// reads the same op of that copy; everything else becomes an argument).
// The run saving the most ops is outlined first, and the search repeats on
// the shorter body.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace distopt {
#define GEN_PASS_DEF_OUTLINEREPEATSPASS
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// The longest sequence looked for: a transformer layer's backward is a few
/// hundred ops; the search costs ops x periods per round.
constexpr size_t kMaxPeriod = 4096;

/// A run of `copies` consecutive copies of the `period` ops at `start`.
struct Run {
  size_t start = 0, period = 0, copies = 0;
  size_t saved() const { return (copies - 1) * period; }
};

/// Whether two ops compute alike, operands aside.
bool alike(Operation *a, Operation *b) {
  return a->getName() == b->getName() &&
         a->getAttrDictionary() == b->getAttrDictionary() &&
         a->getOperandTypes() == b->getOperandTypes() &&
         a->getResultTypes() == b->getResultTypes() &&
         a->getNumRegions() == 0 && b->getNumRegions() == 0;
}

/// A constant: an op without operands whose value is its attributes.
bool isConstant(Operation *op) {
  return op->hasTrait<OpTrait::ConstantLike>() && op->getNumOperands() == 0 &&
         op->getNumResults() == 1;
}

/// Whether two ops may stand at the same place of two copies: alike, or
/// constants of one type (a constant that differs between the copies is
/// an argument of the function).
bool interchangeable(Operation *a, Operation *b) {
  if (isConstant(a) && isConstant(b))
    return a->getName() == b->getName() &&
           a->getResultTypes() == b->getResultTypes();
  return alike(a, b);
}

/// A dropout's stream as part of its key: stream s draws from `key` the
/// mask stream 0 draws from key + DropoutOp::streamKeyOffset(s), so the
/// dropouts of different layers become alike (their keys, differing
/// constants, are arguments).
void streamsIntoKeys(func::FuncOp f) {
  // Every dropout, stream 0's too (with 0), so that the copies' ops match.
  f.walk([](dopt::DropoutOp d) {
    OpBuilder b(d);
    auto type = cast<RankedTensorType>(d.getKey().getType());
    Value offset = dopt::ConstantOp::create(
        b, d.getLoc(),
        DenseElementsAttr::get(
            type, ArrayRef<int64_t>{
                      dopt::DropoutOp::streamKeyOffset(d.getStream())}));
    d.getKeyMutable().assign(
        dopt::AddOp::create(b, d.getLoc(), d.getKey(), offset));
    d.setStream(0);
  });
}

struct OutlineRepeatsPass
    : distopt::impl::OutlineRepeatsPassBase<OutlineRepeatsPass> {
  using OutlineRepeatsPassBase::OutlineRepeatsPassBase;

  unsigned blocks = 0; ///< the next function's number

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal() && f.getBody().hasOneBlock())
        funcs.push_back(f);
    for (func::FuncOp f : funcs)
      streamsIntoKeys(f);
    for (func::FuncOp f : funcs)
      for (int round = 0; round < 64; ++round)
        if (!outlineOne(f))
          break;
  }

  /// Outlines the run of `f`'s body that saves the most ops (of those whose
  /// dataflow allows it); false when none does.
  bool outlineOne(func::FuncOp f) {
    Block &body = f.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    size_t n = ops.size();
    if (n < 2 * static_cast<size_t>(minOps))
      return false;
    // Ops as ids: equal ids for alike ops (hashes bucket them; alike()
    // decides).
    SmallVector<int> ids(n);
    llvm::DenseMap<llvm::hash_code, SmallVector<std::pair<Operation *, int>>>
        buckets;
    int next = 0;
    for (size_t i = 0; i < n; ++i) {
      Operation *op = ops[i];
      if (op->getNumRegions() != 0) {
        ids[i] = next++; // never alike
        continue;
      }
      llvm::hash_code h = llvm::hash_combine(
          op->getName().getAsOpaquePointer(),
          isConstant(op) ? nullptr
                         : op->getAttrDictionary().getAsOpaquePointer(),
          llvm::hash_combine_range(op->getOperandTypes().begin(),
                                   op->getOperandTypes().end()),
          llvm::hash_combine_range(op->getResultTypes().begin(),
                                   op->getResultTypes().end()));
      auto &bucket = buckets[h];
      int id = -1;
      for (auto &[other, otherId] : bucket)
        if (interchangeable(op, other)) {
          id = otherId;
          break;
        }
      if (id < 0) {
        id = next++;
        bucket.push_back({op, id});
      }
      ids[i] = id;
    }
    // Runs: for each period p, the maximal stretches where ids[j] ==
    // ids[j + p]; a stretch of length L from s holds 1 + L / p copies.
    SmallVector<Run> runs;
    for (size_t p = minOps; 2 * p <= n && p <= kMaxPeriod; ++p) {
      size_t j = 0;
      while (j + p < n) {
        if (ids[j] != ids[j + p]) {
          ++j;
          continue;
        }
        size_t s = j;
        while (j + p < n && ids[j] == ids[j + p])
          ++j;
        size_t copies = 1 + (j - s) / p;
        if (copies >= 2)
          runs.push_back({s, p, copies});
      }
    }
    llvm::stable_sort(
        runs, [](const Run &a, const Run &b) { return a.saved() > b.saved(); });
    llvm::DenseMap<Operation *, size_t> position;
    for (size_t i = 0; i < n; ++i)
      position[ops[i]] = i;
    for (const Run &run : llvm::make_range(
             runs.begin(), runs.begin() + std::min<size_t>(runs.size(), 32)))
      if (outline(f, ops, position, run))
        return true;
    return false;
  }

  /// Outlines `run` of `ops` (f's body) when every copy's dataflow is the
  /// first copy's; false (nothing changed) otherwise.
  bool outline(func::FuncOp f, ArrayRef<Operation *> ops,
               const llvm::DenseMap<Operation *, size_t> &position, Run run) {
    size_t p = run.period;
    auto opAt = [&](size_t copy, size_t k) {
      return ops[run.start + copy * p + k];
    };
    // Where each operand of the first copy comes from: an op of the copy
    // (k', result), or outside (an argument).
    struct Source {
      bool inside = false;
      size_t k = 0;
      unsigned result = 0;
    };
    auto sourceOf = [&](size_t copy, Value v) {
      Source s;
      if (Operation *def = v.getDefiningOp()) {
        auto it = position.find(def);
        size_t lo = run.start + copy * p;
        if (it != position.end() && it->second >= lo && it->second < lo + p) {
          s.inside = true;
          s.k = it->second - lo;
          s.result = cast<OpResult>(v).getResultNumber();
        }
      }
      return s;
    };
    // The arguments: operand positions read from outside, merged where
    // every copy reads the same value at both; a constant alike in every
    // copy is cloned into the function instead.
    SmallVector<std::pair<size_t, unsigned>> outside; // (k, operand)
    for (size_t k = 0; k < p; ++k)
      for (unsigned o = 0; o < opAt(0, k)->getNumOperands(); ++o) {
        Source s0 = sourceOf(0, opAt(0, k)->getOperand(o));
        for (size_t c = 1; c < run.copies; ++c) {
          Source s = sourceOf(c, opAt(c, k)->getOperand(o));
          if (s.inside != s0.inside ||
              (s.inside && (s.k != s0.k || s.result != s0.result)))
            return false;
        }
        if (!s0.inside)
          outside.push_back({k, o});
      }
    llvm::MapVector<SmallVector<Value>, unsigned> argOf;
    SmallVector<int> argAt(outside.size(), -1); // -1: a cloned constant
    SmallVector<Operation *> constantAt(outside.size(), nullptr);
    for (auto [i, pos] : llvm::enumerate(outside)) {
      SmallVector<Value> values;
      for (size_t c = 0; c < run.copies; ++c)
        values.push_back(opAt(c, pos.first)->getOperand(pos.second));
      Operation *def = values[0].getDefiningOp();
      if (def && def->hasTrait<OpTrait::ConstantLike>() &&
          def->getNumResults() == 1 && llvm::all_of(values, [&](Value v) {
            Operation *d = v.getDefiningOp();
            return d && alike(d, def);
          })) {
        constantAt[i] = def;
        continue;
      }
      auto [it, inserted] = argOf.insert({values, argOf.size()});
      argAt[i] = it->second;
    }
    // Constants that differ between the copies: arguments, each copy's
    // staying where it is.
    SmallVector<size_t> varying;
    for (size_t k = 0; k < p; ++k)
      for (size_t c = 1; c < run.copies; ++c)
        if (!alike(opAt(0, k), opAt(c, k))) {
          varying.push_back(k);
          break;
        }
    auto isVarying = [&](size_t k) { return llvm::is_contained(varying, k); };
    // What the function computes: a copy of constants alone (a pipeline's
    // micro-batch indices around its calls) is not worth a function.
    int64_t computing = 0;
    for (size_t k = 0; k < p; ++k)
      computing += !isConstant(opAt(0, k)) && !isa<func::CallOp>(opAt(0, k));
    if (computing < minOps)
      return false;
    // The results: values of a copy read outside it (in any copy).
    SmallVector<std::pair<size_t, unsigned>> escaping;
    for (size_t k = 0; k < p; ++k)
      for (unsigned r = 0; !isVarying(k) && r < opAt(0, k)->getNumResults();
           ++r) {
        bool escapes = false;
        for (size_t c = 0; c < run.copies && !escapes; ++c)
          for (Operation *user : opAt(c, k)->getResult(r).getUsers()) {
            auto it = position.find(user);
            size_t lo = run.start + c * p;
            if (it == position.end() || it->second < lo ||
                it->second >= lo + p) {
              escapes = true;
              break;
            }
          }
        if (escapes)
          escaping.push_back({k, r});
      }

    // The function: the first copy's ops.
    ModuleOp module = f->getParentOfType<ModuleOp>();
    MLIRContext *ctx = module.getContext();
    SmallVector<Type> argTypes;
    for (auto &entry : argOf)
      argTypes.push_back(entry.first.front().getType());
    for (size_t k : varying)
      argTypes.push_back(opAt(0, k)->getResult(0).getType());
    SmallVector<Type> resultTypes;
    for (auto [k, r] : escaping)
      resultTypes.push_back(opAt(0, k)->getResult(r).getType());
    OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
    Location loc = opAt(0, 0)->getLoc();
    std::string name;
    do
      name = "dopt_block_" + std::to_string(blocks++);
    while (module.lookupSymbol(name));
    auto fn = func::FuncOp::create(
        mb, loc, name, FunctionType::get(ctx, argTypes, resultTypes));
    fn.setPrivate();
    Block *entry = fn.addEntryBlock();
    OpBuilder b = OpBuilder::atBlockEnd(entry);
    SmallVector<Operation *> clones;
    for (size_t k = 0; k < p; ++k)
      clones.push_back(b.clone(*opAt(0, k)));
    for (auto [i, pos] : llvm::enumerate(outside)) {
      Value v;
      if (Operation *c = constantAt[i]) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(entry);
        v = b.clone(*c)->getResult(0);
      } else {
        v = entry->getArgument(argAt[i]);
      }
      clones[pos.first]->setOperand(pos.second, v);
    }
    for (size_t k = 0; k < p; ++k)
      for (OpOperand &use : clones[k]->getOpOperands()) {
        Source s = sourceOf(0, opAt(0, k)->getOperand(use.getOperandNumber()));
        if (s.inside)
          use.set(clones[s.k]->getResult(s.result));
      }
    for (auto [i, k] : llvm::enumerate(varying)) {
      clones[k]->getResult(0).replaceAllUsesWith(
          entry->getArgument(argOf.size() + i));
      clones[k]->erase();
    }
    SmallVector<Value> results;
    for (auto [k, r] : escaping)
      results.push_back(clones[k]->getResult(r));
    func::ReturnOp::create(b, loc, results);

    // Each copy becomes a call. (The constants cloned into the function:
    // those read from before the run go where nothing reads them now.)
    llvm::SmallSetVector<Operation *, 8> cloned;
    size_t runEnd = run.start + run.copies * p;
    for (size_t c = 0; c < run.copies; ++c)
      for (auto [i, pos] : llvm::enumerate(outside))
        if (constantAt[i]) {
          Operation *def =
              opAt(c, pos.first)->getOperand(pos.second).getDefiningOp();
          auto it = position.find(def);
          if (it == position.end() || it->second < run.start ||
              it->second >= runEnd)
            cloned.insert(def);
        }
    for (size_t c = 0; c < run.copies; ++c) {
      // After the copy's last op: everything the call reads is defined by
      // then (its varying constants are the copy's own), and nothing after
      // the copy has read its results yet.
      OpBuilder cb(ctx);
      cb.setInsertionPointAfter(opAt(c, p - 1));
      SmallVector<Value> args(argOf.size());
      // The values read from outside as they are now (an earlier copy's
      // results are its call's by now).
      for (auto [i, pos] : llvm::enumerate(outside))
        if (argAt[i] >= 0)
          args[argAt[i]] = opAt(c, pos.first)->getOperand(pos.second);
      for (size_t k : varying)
        args.push_back(opAt(c, k)->getResult(0));
      auto call = func::CallOp::create(cb, opAt(c, 0)->getLoc(), fn, args);
      for (auto [i, kr] : llvm::enumerate(escaping))
        opAt(c, kr.first)
            ->getResult(kr.second)
            .replaceAllUsesWith(call.getResult(i));
      for (size_t k = p; k-- > 0;)
        if (!isVarying(k))
          opAt(c, k)->erase();
    }
    // Constants the copies read and the function now has of its own.
    for (Operation *c : cloned)
      if (c->use_empty())
        c->erase();
    return true;
  }
};

} // namespace
