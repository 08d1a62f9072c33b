//===- OutlineStages.cpp - a pipelined @main -> one function per stage ---===//
//
// See Passes.td (OutlineStagesPass). distopt-partition outlines the stages
// itself unless told not to (outline-stages=false: a training step first
// appends its loss to the partitioned @main).
//
//===----------------------------------------------------------------------===//

#include "distopt/Distributed/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Distributed/TensorVarying.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace distopt {
#define GEN_PASS_DEF_OUTLINESTAGESPASS
#include "distopt/Distributed/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

/// Pipelined plans: @main becomes one function per stage,
/// @dopt_stage_<k>(model inputs it reads..., activations from earlier
/// stages...) -> (activations for later stages..., model outputs it
/// makes...). An activation needed beyond the next stage passes through the
/// stages between (each stage talks to its neighbours only). Arguments and
/// results say what they are: `dopt.model_input = i` / `dopt.model_output =
/// i` (with @main's attributes), or `dopt.activation = id`.
LogicalResult distopt::outlinePipelineStages(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  auto pipeline = module->getAttrOfType<DictionaryAttr>("dopt.pipeline");
  if (!func || !func.getBody().hasOneBlock() || !pipeline)
    return module.emitError("outlining pipeline stages needs a partitioned, "
                            "single-block @main of a pipelined plan "
                            "(dopt.pipeline)");
  int64_t stages = pipeline.getAs<IntegerAttr>("stages").getInt();
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  // Activations that differ between the ranks of the tensor axis (a stage
  // boundary inside a tensor-parallel region) say so: the backward of a
  // pipelined training step needs to know (grid::tensorVarying).
  llvm::DenseSet<Value> varying = grid::tensorVarying(func, ops);
  // Stage of every op: its own, else that of its first user (collectives
  // inserted in front of a consumer, constants).
  llvm::DenseMap<Operation *, int64_t> stageOf;
  for (Operation *op : llvm::reverse(ops)) {
    if (auto s = op->getAttrOfType<IntegerAttr>("dopt.stage")) {
      stageOf[op] = s.getInt();
      continue;
    }
    int64_t st = stages;
    for (Operation *user : op->getUsers())
      if (stageOf.count(user))
        st = std::min(st, stageOf[user]);
    stageOf[op] = st == stages ? stages - 1 : st;
  }
  // Where each value is read.
  auto stageOfValue = [&](Value v) -> int64_t {
    if (Operation *def = v.getDefiningOp())
      return stageOf[def];
    return -1; // a model input
  };
  // Activations crossing stages, in program order, with their last reader.
  // (A constant is copied into every stage that reads it, below: it does
  // not travel.)
  auto isConstant = [](Value v) {
    return isa_and_nonnull<dopt::ConstantOp>(v.getDefiningOp());
  };
  SmallVector<Value> crossing;
  llvm::DenseMap<Value, int64_t> lastReader, activationId;
  for (Operation *op : ops)
    for (Value v : op->getOperands()) {
      int64_t from = stageOfValue(v), to = stageOf[op];
      if (from < 0 || from == to || isConstant(v))
        continue;
      if (from > to)
        return op->emitError("pipeline stage ")
               << to << " reads a value of the later stage " << from;
      if (!activationId.count(v)) {
        activationId[v] = crossing.size();
        crossing.push_back(v);
      }
      lastReader[v] = std::max(lastReader.lookup(v), to);
    }
  // Model outputs made by a stage other than the last pass to the last, so
  // the last stage's ranks hold every output.
  for (Value v : ret.getOperands()) {
    int64_t from = stageOfValue(v);
    if (from >= 0 && from < stages - 1 && !isConstant(v)) {
      if (!activationId.count(v)) {
        activationId[v] = crossing.size();
        crossing.push_back(v);
      }
      lastReader[v] = stages - 1;
    }
  }
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(func);
  for (int64_t k = 0; k < stages; ++k) {
    IRMapping map;
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<std::pair<BlockArgument *, Value>> pending;
    // Model inputs this stage reads.
    SmallVector<unsigned> modelInputs;
    for (BlockArgument arg : func.getArguments())
      if (llvm::any_of(arg.getUsers(), [&](Operation *u) {
            return stageOf.lookup(u) == k && !isa<func::ReturnOp>(u);
          }))
        modelInputs.push_back(arg.getArgNumber());
    // Activations entering (made before k, read at or after k).
    SmallVector<Value> entering, leaving;
    for (Value v : crossing) {
      int64_t from = stageOfValue(v);
      if (from < k && lastReader[v] >= k)
        entering.push_back(v);
      if (from <= k && lastReader[v] > k)
        leaving.push_back(v);
    }
    for (unsigned i : modelInputs) {
      argTypes.push_back(func.getArgument(i).getType());
      NamedAttrList attrs(func.getArgAttrDict(i));
      attrs.set("dopt.model_input", mb.getI64IntegerAttr(i));
      argAttrs.push_back(attrs.getDictionary(module.getContext()));
    }
    auto activationAttrs = [&](Value v) {
      NamedAttrList attrs;
      attrs.set("dopt.activation", mb.getI64IntegerAttr(activationId[v]));
      if (varying.count(v))
        attrs.set("dopt.tensor_varying", mb.getUnitAttr());
      return attrs.getDictionary(module.getContext());
    };
    for (Value v : entering) {
      argTypes.push_back(v.getType());
      argAttrs.push_back(activationAttrs(v));
    }
    // Results: activations leaving, then model outputs made here.
    SmallVector<Value> resultValues;
    SmallVector<DictionaryAttr> resultAttrs;
    for (Value v : leaving) {
      resultValues.push_back(v);
      resultAttrs.push_back(activationAttrs(v));
    }
    if (k == stages - 1)
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        resultValues.push_back(v);
        NamedAttrList attrs(func.getResultAttrDict(i));
        attrs.set("dopt.model_output", mb.getI64IntegerAttr(i));
        resultAttrs.push_back(attrs.getDictionary(module.getContext()));
      }
    SmallVector<Type> resultTypes;
    for (Value v : resultValues)
      resultTypes.push_back(v.getType());
    auto stageFn = func::FuncOp::create(
        mb, func.getLoc(), ("dopt_stage_" + Twine(k)).str(),
        mb.getFunctionType(argTypes, resultTypes));
    Block *entry = stageFn.addEntryBlock();
    unsigned a = 0;
    for (unsigned i : modelInputs)
      map.map(func.getArgument(i), entry->getArgument(a++));
    for (Value v : entering)
      map.map(v, entry->getArgument(a++));
    for (auto [i, attrs] : llvm::enumerate(argAttrs))
      stageFn.setArgAttrs(i, attrs);
    for (auto [i, attrs] : llvm::enumerate(resultAttrs))
      stageFn.setResultAttrs(i, attrs);
    OpBuilder fb = OpBuilder::atBlockEnd(entry);
    for (Operation *op : ops)
      if (stageOf[op] == k ||
          (isa<dopt::ConstantOp>(op) &&
           (llvm::any_of(
                op->getUsers(),
                [&](Operation *u) { return stageOf.lookup(u) == k; }) ||
            (k == stages - 1 &&
             llvm::is_contained(ret.getOperands(), op->getResult(0))))))
        fb.clone(*op, map);
    SmallVector<Value> results;
    for (Value v : resultValues)
      results.push_back(map.lookupOrDefault(v));
    func::ReturnOp::create(fb, ret.getLoc(), results);
    for (Value r : results)
      if (r.getParentRegion() != &stageFn.getBody())
        return stageFn.emitError("a value of stage ")
               << k << " was not placed in it";
  }
  func.erase();
  return success();
}

namespace {

struct OutlineStagesPass
    : distopt::impl::OutlineStagesPassBase<OutlineStagesPass> {
  void runOnOperation() override {
    if (failed(outlinePipelineStages(getOperation())))
      signalPassFailure();
  }
};

} // namespace
