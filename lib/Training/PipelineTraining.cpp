//===- PipelineTraining.cpp - one pipeline stage's training step ----------===//
//
// See Passes.td (PipelineTrainingPass). @main is stage k's forward over one
// micro-batch (distopt-outline-stages, then distopt-outline-weights); it
// becomes stage k's whole training step over the M micro-batches of a
// replica's batch. The micro-batch's forward and backward become two
// functions (@dopt_stage_forward, @dopt_stage_backward), compiled once;
// @main calls them in the order the schedule gives (GPipe: every forward,
// then every backward; 1F1B: S - 1 - k warm-up forwards, then one forward
// and one backward in turn, then the remaining backwards), with the
// activations and their adjoints passed to and from the neighbouring
// stages by shard.send / shard.recv on the stage axis between the calls.
// The backward uses autodiff::differentiate on a copy of the forward's ops:
// the values it reads are the forward's (returned by the forward as the
// stash, kept until that backward), or recomputed in the backward from the
// stage inputs (recompute full: every forward op again; selective: all but
// the matmuls and convolutions, whose results are stashed).
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/TensorVarying.h"
#include "distopt/Training/Autodiff.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

namespace distopt {
#define GEN_PASS_DEF_PIPELINETRAININGPASS
#include "distopt/Training/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;
using autodiff::isFloatTensor;

namespace {

/// The events of stage `k` of `stages` over `m` micro-batches: (backward?,
/// micro-batch) in the order the stage runs them.
SmallVector<std::pair<bool, int64_t>> scheduleOf(StringRef schedule,
                                                 int64_t k, int64_t stages,
                                                 int64_t m) {
  SmallVector<std::pair<bool, int64_t>> events;
  if (schedule == "gpipe") {
    for (int64_t i = 0; i < m; ++i)
      events.push_back({false, i});
    for (int64_t i = 0; i < m; ++i)
      events.push_back({true, i});
    return events;
  }
  // 1F1B (PipeDream-Flush): warm-up forwards, steady one-forward-one-
  // backward, then the drain of backwards.
  int64_t warm = std::min(stages - 1 - k, m);
  for (int64_t i = 0; i < warm; ++i)
    events.push_back({false, i});
  for (int64_t i = 0; i < m - warm; ++i) {
    events.push_back({false, warm + i});
    events.push_back({true, i});
  }
  for (int64_t i = m - warm; i < m; ++i)
    events.push_back({true, i});
  return events;
}

struct PipelineTrainingPass
    : distopt::impl::PipelineTrainingPassBase<PipelineTrainingPass> {
  using PipelineTrainingPassBase::PipelineTrainingPassBase;

  ModuleOp module;
  func::FuncOp stageFn; ///< the forward of one micro-batch
  func::FuncOp step;    ///< the training step being built
  int64_t stages = 1, microbatches = 1;
  bool last = false;
  FlatSymbolRefAttr gridRef;
  DenseI16ArrayAttr stageAxis;

  /// Marks the start or end of a micro-batch's forward or backward for the
  /// timeline (dort_trace_pipeline(kind, micro-batch): 0/1 forward
  /// start/end, 2/3 backward start/end).
  void mark(OpBuilder &b, Location loc, int64_t kind, int64_t m) {
    auto i64 = b.getI64Type();
    auto fn = module.lookupSymbol<func::FuncOp>("dort_trace_pipeline");
    if (!fn) {
      OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
      fn = func::FuncOp::create(mb, loc, "dort_trace_pipeline",
                                mb.getFunctionType({i64, i64}, {}));
      fn.setPrivate();
    }
    Value k = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(kind));
    Value mv = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(m));
    func::CallOp::create(b, loc, fn, ValueRange{k, mv});
  }

  /// A message to or from stage `peer` (0-d tensors travel as [1]).
  void send(OpBuilder &b, Location loc, Value v, int64_t peer) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() == 0)
      v = dopt::ReshapeOp::create(b, loc, v, b.getDenseI64ArrayAttr({1}));
    shard::SendOp::create(b, loc, v.getType(), gridRef, stageAxis, v,
                          b.getDenseI64ArrayAttr({peer}), ValueRange{});
  }
  Value recv(OpBuilder &b, Location loc, RankedTensorType t, int64_t peer,
             bool varying) {
    auto wire = t.getRank() == 0
                    ? RankedTensorType::get({1}, t.getElementType())
                    : t;
    Value buffer = tensor::EmptyOp::create(b, loc, wire.getShape(),
                                           wire.getElementType());
    auto r = shard::RecvOp::create(b, loc, wire, gridRef, stageAxis, buffer,
                                   b.getDenseI64ArrayAttr({peer}),
                                   ValueRange{});
    if (varying)
      r->setAttr("dopt.tensor_varying", b.getUnitAttr());
    Value v = r.getResult();
    if (t.getRank() == 0)
      v = dopt::ReshapeOp::create(b, loc, v, b.getDenseI64ArrayAttr({}));
    return v;
  }

  void runOnOperation() override {
    module = getOperation();
    stageFn = module.lookupSymbol<func::FuncOp>("main");
    auto pipeline = module->getAttrOfType<DictionaryAttr>("dopt.pipeline");
    if (!stageFn || !stageFn.getBody().hasOneBlock() || !pipeline) {
      module.emitError("distopt-pipeline-training needs a pipeline stage's "
                       "single-block @main (dopt.pipeline)");
      return signalPassFailure();
    }
    stages = pipeline.getAs<IntegerAttr>("stages").getInt();
    microbatches = pipeline.getAs<IntegerAttr>("microbatches").getInt();
    if (stage < 0 || stage >= stages) {
      stageFn.emitError("stage ") << stage.getValue() << " of " << stages;
      return signalPassFailure();
    }
    if (schedule != "gpipe" && schedule != "1f1b") {
      stageFn.emitError("unknown pipeline schedule '")
          << schedule.getValue() << "' (expected gpipe or 1f1b)";
      return signalPassFailure();
    }
    if (recompute != "off" && recompute != "selective" && recompute != "full") {
      stageFn.emitError("unknown recomputation '")
          << recompute.getValue() << "' (expected off, selective or full)";
      return signalPassFailure();
    }
    llvm::Regex frozen(freezeWeights.getValue());
    std::string regexError;
    if (!freezeWeights.empty() && !frozen.isValid(regexError)) {
      stageFn.emitError("--freeze-weights: invalid regular expression: ")
          << regexError;
      return signalPassFailure();
    }
    // Each dropout continues its mask along its batch dimension; one whose
    // batch is not a block of a dimension cannot.
    if (microbatches > 1 &&
        failed(autodiff::checkMicrobatchDropouts(
            stageFn, "a pipeline of " + std::to_string(microbatches) +
                         " micro-batches")))
      return signalPassFailure();
    last = stage == stages - 1;
    MLIRContext *ctx = module.getContext();
    gridRef = FlatSymbolRefAttr::get(ctx, grid::kName);
    stageAxis = DenseI16ArrayAttr::get(ctx, {grid::kStageAxis});
    Block &body = stageFn.getBody().front();
    auto fret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      forwardOps.push_back(&op);

    // What the stage's arguments and results carry.
    SmallVector<unsigned> dataArgs, activationArgs, weightArgs, keyArgs;
    for (unsigned i = 0; i < stageFn.getNumArguments(); ++i) {
      if (stageFn.getArgAttr(i, "dopt.weight"))
        weightArgs.push_back(i);
      else if (stageFn.getArgAttr(i, "dopt.rng_key"))
        keyArgs.push_back(i);
      else if (stageFn.getArgAttr(i, "dopt.activation"))
        activationArgs.push_back(i);
      else
        dataArgs.push_back(i);
    }
    SmallVector<unsigned> leaving;
    int lossAt = -1, countedAt = -1;
    for (unsigned i = 0; i < stageFn.getNumResults(); ++i) {
      if (stageFn.getResultAttr(i, "dopt.activation")) {
        leaving.push_back(i);
        continue;
      }
      auto name = stageFn.getResultAttrOfType<StringAttr>(i, "dopt.name");
      if (name && name.getValue() == "loss")
        lossAt = i;
      else if (name && name.getValue() == "counted")
        countedAt = i;
    }
    if (last && (lossAt < 0 || countedAt < 0)) {
      stageFn.emitError("the last pipeline stage returns no 'loss' and "
                        "'counted' (append the loss with counted=true before "
                        "outlining the stages)");
      return signalPassFailure();
    }
    // Activations travel in the order of their ids on both sides.
    auto byId = [&](bool args) {
      return [this, args](unsigned a, unsigned b) {
        auto id = [&](unsigned i) {
          return (args ? stageFn.getArgAttrOfType<IntegerAttr>(i, "dopt.activation")
                       : stageFn.getResultAttrOfType<IntegerAttr>(i, "dopt.activation"))
              .getInt();
        };
        return id(a) < id(b);
      };
    };
    llvm::sort(activationArgs, byId(true));
    llvm::sort(leaving, byId(false));

    // The step: data inputs hold the replica's M micro-batches along their
    // batch dimension; the weights as before.
    OpBuilder mb(ctx);
    mb.setInsertionPoint(stageFn);
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<int64_t> batchDims;
    for (unsigned i : dataArgs) {
      auto t = cast<RankedTensorType>(stageFn.getArgument(i).getType());
      auto bd = stageFn.getArgAttrOfType<IntegerAttr>(i, "dopt.batch_dim");
      if (!bd || bd.getInt() < 0 || bd.getInt() >= t.getRank()) {
        stageFn.emitError("model input ")
            << i << " of a pipelined training step has no batch dimension "
                    "to take micro-batches from";
        return signalPassFailure();
      }
      SmallVector<int64_t> shape(t.getShape());
      shape[bd.getInt()] *= microbatches;
      argTypes.push_back(RankedTensorType::get(shape, t.getElementType()));
      argAttrs.push_back(stageFn.getArgAttrDict(i));
      batchDims.push_back(bd.getInt());
    }
    for (unsigned i : keyArgs) {
      argTypes.push_back(stageFn.getArgument(i).getType());
      argAttrs.push_back(stageFn.getArgAttrDict(i));
    }
    for (unsigned i : weightArgs) {
      argTypes.push_back(stageFn.getArgument(i).getType());
      argAttrs.push_back(stageFn.getArgAttrDict(i));
    }
    step = func::FuncOp::create(mb, stageFn.getLoc(), "dopt_pipeline_step",
                                mb.getFunctionType(argTypes, {}));
    Block *entry = step.addEntryBlock();
    for (auto [i, attrs] : llvm::enumerate(argAttrs))
      step.setArgAttrs(i, attrs);
    SmallVector<Value> stepData, stepWeights;
    for (unsigned i = 0; i < dataArgs.size(); ++i)
      stepData.push_back(entry->getArgument(i));
    for (unsigned i = 0; i < weightArgs.size(); ++i)
      stepWeights.push_back(
          entry->getArgument(dataArgs.size() + keyArgs.size() + i));
    // Dynamic loss scaling: the last stage's backward starts from the
    // scale (every stage's optimizer divides it out). Added after the
    // arguments above are taken by position.
    Value scaleArg = lossScale ? autodiff::lossScaleInput(step) : Value();
    // The trained weights (float, not frozen).
    SmallVector<unsigned> params; // indices into weightArgs
    for (auto [j, i] : llvm::enumerate(weightArgs)) {
      if (!autodiff::isTrainedWeight(stageFn, i,
                                     freezeWeights.empty() ? nullptr : &frozen))
        continue;
      params.push_back(j);
    }

    OpBuilder b = OpBuilder::atBlockEnd(entry);
    Location loc = stageFn.getLoc();
    auto f32 = b.getF32Type();
    auto scalar = RankedTensorType::get({}, f32);
    auto constant = [&](RankedTensorType t, double v) -> Value {
      return dopt::ConstantOp::create(
          b, loc, DenseElementsAttr::get(t, b.getFloatAttr(t.getElementType(), v)));
    };
    // Micro-batch m of a data input, sliced once (the last stage's label
    // counts read it before the forward does).
    llvm::DenseMap<std::pair<unsigned, int64_t>, Value> slices;
    auto sliceOf = [&](unsigned j, int64_t m) -> Value {
      Value &slice = slices[{j, m}];
      if (slice)
        return slice;
      Value arg = stepData[j];
      auto t = cast<RankedTensorType>(arg.getType());
      int64_t d = batchDims[j], rows = t.getDimSize(d) / microbatches;
      SmallVector<int64_t> starts(t.getRank(), 0), ends(t.getShape()),
          strides(t.getRank(), 1);
      starts[d] = m * rows;
      ends[d] = (m + 1) * rows;
      slice = dopt::SliceOp::create(b, loc, arg, b.getDenseI64ArrayAttr(starts),
                                    b.getDenseI64ArrayAttr(ends),
                                    b.getDenseI64ArrayAttr(strides));
      return slice;
    };
    // The inputs of micro-batch m: data slices and, past the first stage,
    // the received activations.
    SmallVector<IRMapping> inputs(microbatches);
    SmallVector<SmallVector<Operation *>> received(microbatches);
    // Weights the forward pass updates (batch norm's running statistics,
    // ops marked dopt.updates_weight): micro-batch m reads what m - 1
    // wrote (the forwards run in micro-batch order in either schedule),
    // as M forward calls in PyTorch do, and only the last forward's update
    // stays marked. (The planner cuts a batch with such statistics into
    // micro-batches only under --microbatch-statistics.)
    llvm::DenseMap<unsigned, StringAttr> updatedArgs =
        autodiff::forwardUpdatedWeights(stageFn, forwardOps);
    auto mapInputs = [&](IRMapping &map, int64_t m) {
      for (auto [j, i] : llvm::enumerate(dataArgs))
        map.map(stageFn.getArgument(i), sliceOf(j, m));
      for (auto [j, i] : llvm::enumerate(keyArgs))
        map.map(stageFn.getArgument(i), entry->getArgument(dataArgs.size() + j));
      for (auto [j, i] : llvm::enumerate(weightArgs))
        map.map(stageFn.getArgument(i), stepWeights[j]);
    };

    // The last stage weighs micro-batch m by its counted labels over all of
    // them (exactly the loss of the whole batch): the counts come from the
    // labels alone, so they are known before the first backward.
    SmallVector<Value> counts;
    Value total;
    if (last) {
      Value counted = fret.getOperand(countedAt);
      llvm::SetVector<Operation *> slice;
      SmallVector<Value> work{counted};
      while (!work.empty()) {
        Value v = work.pop_back_val();
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          if (!llvm::is_contained(dataArgs, arg.getArgNumber())) {
            stageFn.emitError("the loss's count depends on more than the "
                              "labels (internal error)");
            return signalPassFailure();
          }
          continue;
        }
        Operation *def = v.getDefiningOp();
        if (slice.insert(def))
          for (Value o : def->getOperands())
            work.push_back(o);
      }
      for (int64_t m = 0; m < microbatches; ++m) {
        IRMapping map;
        mapInputs(map, m);
        for (Operation *op : forwardOps)
          if (slice.contains(op))
            b.clone(*op, map);
        Value c = map.lookup(counted);
        counts.push_back(c);
        total = total ? Value(dopt::AddOp::create(b, loc, total, c)) : c;
      }
    }

    // Whether micro-batch m counts any label.
    auto alive = [&](int64_t m) -> Value {
      return dopt::GreaterOp::create(b, loc, counts[m], constant(scalar, 0.0));
    };

    // The stage's forward and backward of one micro-batch: two functions,
    // compiled once and called per micro-batch. Both take m (the
    // micro-batch's index: where its dropouts' masks lie in the batch) and
    // the stage's inputs of that micro-batch (data slices, key, weights,
    // received activations).
    auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
    auto i1Scalar = RankedTensorType::get({}, b.getI1Type());
    SmallVector<Type> stageTypes{i64Scalar};
    llvm::append_range(stageTypes, stageFn.getArgumentTypes());
    OpBuilder fnb(ctx);
    fnb.setInsertionPoint(step);
    auto fwd = func::FuncOp::create(fnb, loc, "dopt_stage_forward",
                                    fnb.getFunctionType(stageTypes, {}));
    auto bwd = func::FuncOp::create(fnb, loc, "dopt_stage_backward",
                                    fnb.getFunctionType(stageTypes, {}));
    fwd.setPrivate();
    bwd.setPrivate();
    Block *fEntry = fwd.addEntryBlock(), *bEntry = bwd.addEntryBlock();
    auto placeDropout = [&](OpBuilder &at, Operation *copy, Value m) {
      if (isa<dopt::DropoutOp>(copy))
        autodiff::placeDropoutMicrobatch(at, copy, m, microbatches);
    };

    // The 16-bit copies of the weights (autocast's casts of weight
    // arguments) are made once per step, in the step: each micro-batch's
    // forward and backward take them as arguments (the backward still
    // differentiates through the cast, to the fp32 weight).
    SmallVector<Operation *> weightCasts =
        autodiff::weightCopies(stageFn, &body, forwardOps, updatedArgs);

    // The forward: returns the activations leaving the stage, the loss (the
    // last stage), the weights it updates (batch norm's running statistics:
    // micro-batch m reads what m - 1 wrote, the forwards running in
    // micro-batch order in either schedule, as M forward calls in PyTorch
    // do), and what the backward reads of it (the stash, below).
    OpBuilder fb = OpBuilder::atBlockEnd(fEntry);
    IRMapping fMap;
    for (unsigned i = 0; i < stageFn.getNumArguments(); ++i)
      fMap.map(stageFn.getArgument(i), fEntry->getArgument(i + 1));
    SmallVector<Operation *> fClones;
    for (Operation *op : forwardOps) {
      Operation *copy = fb.clone(*op, fMap);
      placeDropout(fb, copy, fEntry->getArgument(0));
      fClones.push_back(copy);
    }
    // (weightArgs index, new value)
    SmallVector<std::pair<unsigned, Value>> updates =
        autodiff::takeForwardUpdates(updatedArgs, fClones);
    for (auto &u : updates)
      u.first = llvm::find(weightArgs, u.first) - weightArgs.begin();
    SmallVector<Value> fResults;
    for (unsigned i : leaving)
      fResults.push_back(fMap.lookup(fret.getOperand(i)));
    if (last)
      fResults.push_back(fMap.lookup(fret.getOperand(lossAt)));
    for (auto &u : updates)
      fResults.push_back(u.second);

    // The backward: the forward's ops again (a kept op is a placeholder for
    // its stashed results; the others are recomputed from the stage's
    // inputs), then the reverse mode from the seeds: the last stage's loss
    // weighed by the micro-batch's count over the total, and the adjoints
    // of the leaving activations from the stage after. It adds the
    // gradients to the sums it takes and returns them, followed by the
    // adjoints of the entering activations.
    OpBuilder bb = OpBuilder::atBlockEnd(bEntry);
    IRMapping bMap;
    for (unsigned i = 0; i < stageFn.getNumArguments(); ++i)
      bMap.map(stageFn.getArgument(i), bEntry->getArgument(i + 1));
    SmallVector<Operation *> bOps, keptClones, castClones;
    for (Operation *op : forwardOps) {
      if (llvm::is_contained(weightCasts, op)) {
        Operation *copy = bb.clone(*op, bMap);
        bOps.push_back(copy);
        keptClones.push_back(nullptr);
        castClones.push_back(copy);
        continue;
      }
      bool keep = recompute == "off" ||
                  (recompute == "selective" &&
                   isa<dopt::MatMulOp, dopt::GemmOp, dopt::ConvOp,
                       dopt::ConvTransposeOp>(op)) ||
                  isa<dopt::ConstantOp, dopt::WeightOp>(op);
      Operation *copy = bb.clone(*op, bMap);
      placeDropout(bb, copy, bEntry->getArgument(0));
      // The forward's update is the one; the backward's twin updates
      // nothing.
      copy->removeAttr("dopt.updates_weight");
      if (!keep)
        copy->setAttr("dopt.recomputed", bb.getUnitAttr());
      bOps.push_back(copy);
      keptClones.push_back(keep ? copy : nullptr);
    }
    SmallVector<std::pair<Value, Value>> seeds;
    Value aliveArg;
    if (last) {
      Value w = bEntry->addArgument(scalar, loc);
      aliveArg = bEntry->addArgument(i1Scalar, loc);
      Value l = bMap.lookup(fret.getOperand(lossAt));
      auto lt = cast<RankedTensorType>(l.getType());
      if (lt.getElementType() != f32)
        w = dopt::CastOp::create(bb, loc, w,
                                 TypeAttr::get(lt.getElementType()));
      seeds.push_back({l, w});
    }
    SmallVector<std::pair<unsigned, bool>>
        adjointsIn; // leaving result, varying
    for (unsigned i : leaving) {
      Value v = bMap.lookup(fret.getOperand(i));
      if (!isFloatTensor(v))
        continue;
      seeds.push_back({v, bEntry->addArgument(v.getType(), loc)});
      adjointsIn.push_back({i, static_cast<bool>(stageFn.getResultAttr(
                                   i, "dopt.tensor_varying"))});
    }
    // What differs between tensor-parallel ranks, from the arguments' marks:
    // split weights, varying activations and adjoints.
    bwd.setType(FunctionType::get(ctx, bEntry->getArgumentTypes(), {}));
    for (unsigned i = 0; i < stageFn.getNumArguments(); ++i) {
      Attribute split = stageFn.getArgAttr(i, "dopt.split_axes");
      if (auto ref = stageFn.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight"))
        split = ref.get("split_axes");
      if (split)
        bwd.setArgAttr(i + 1, "dopt.split_axes", split);
      if (stageFn.getArgAttr(i, "dopt.tensor_varying"))
        bwd.setArgAttr(i + 1, "dopt.tensor_varying", bb.getUnitAttr());
    }
    for (auto [k, in] : llvm::enumerate(adjointsIn))
      if (in.second)
        bwd.setArgAttr(bEntry->getNumArguments() - adjointsIn.size() + k,
                       "dopt.tensor_varying", bb.getUnitAttr());
    SmallVector<Value> wrt;
    for (unsigned j : params)
      wrt.push_back(bEntry->getArgument(1 + weightArgs[j]));
    SmallVector<Value> entering;
    for (unsigned i : activationArgs) {
      Value a = bEntry->getArgument(1 + i);
      if (isFloatTensor(a)) {
        entering.push_back(a);
        wrt.push_back(a);
      }
    }
    llvm::DenseSet<Value> varying = grid::tensorVarying(bwd, bOps);
    FailureOr<SmallVector<Value>> grads =
        autodiff::differentiate(bb, bOps, seeds, wrt, varying, nullptr);
    if (failed(grads))
      return signalPassFailure();
    // On the last stage a micro-batch without counted labels contributes
    // nothing: its mean's backward divides 0 by 0.
    auto zeroLike = [&](OpBuilder &at, Type t) -> Value {
      auto rt = cast<RankedTensorType>(t);
      return dopt::ConstantOp::create(
          at, loc,
          DenseElementsAttr::get(rt, at.getZeroAttr(rt.getElementType())));
    };
    auto masked = [&](Value g) -> Value {
      if (!last)
        return g;
      auto t = cast<RankedTensorType>(g.getType());
      return dopt::WhereOp::create(
          bb, loc, aliveArg, g,
          zeroLike(bb, RankedTensorType::get({}, t.getElementType())));
    };
    SmallVector<unsigned> gradParams; // indices into params with a gradient
    SmallVector<Value> bResults;
    SmallVector<unsigned> sumArgs; // the backward's argument of each sum
    for (auto [j, raw] :
         llvm::enumerate(ArrayRef<Value>(*grads).take_front(params.size()))) {
      if (!raw)
        continue; // not reached by the loss: no gradient (as PyTorch's None)
      Value sum = bEntry->addArgument(raw.getType(), loc);
      sumArgs.push_back(bEntry->getNumArguments() - 1);
      bResults.push_back(dopt::AddOp::create(bb, loc, sum, masked(raw)));
      gradParams.push_back(j);
    }
    // The entering activations' adjoints go back to the stage before
    // (zeros where the loss does not depend on one: it waits for them).
    for (auto [a, g] :
         llvm::zip(entering, ArrayRef<Value>(*grads).drop_front(params.size())))
      bResults.push_back(g ? masked(g) : zeroLike(bb, a.getType()));
    // The stash: the kept ops' results the backward reads, returned by the
    // forward and passed to the backward of the same micro-batch (alive in
    // between, as the schedule orders them).
    for (auto [k, clone] : llvm::enumerate(keptClones)) {
      if (!clone)
        continue;
      for (OpResult r : clone->getResults()) {
        if (r.use_empty())
          continue;
        r.replaceAllUsesWith(bEntry->addArgument(r.getType(), loc));
        fResults.push_back(fClones[k]->getResult(r.getResultNumber()));
      }
    }
    // The weights' 16-bit copies, after the stash.
    for (Operation *clone : castClones)
      clone->getResult(0).replaceAllUsesWith(
          bEntry->addArgument(clone->getResult(0).getType(), loc));
    func::ReturnOp::create(bb, loc, bResults);
    bwd.setType(FunctionType::get(ctx, bEntry->getArgumentTypes(),
                                  ValueRange(bResults).getTypes()));
    // Each gradient is added into the buffer of the sum it takes
    // (distopt-update-in-place): one set of sums for the whole schedule.
    for (auto [r, arg] : llvm::enumerate(sumArgs))
      bwd.setResultAttr(r, "dopt.accumulates", bb.getI64IntegerAttr(arg));
    for (Operation *clone : llvm::reverse(castClones))
      clone->erase();
    for (Operation *clone : llvm::reverse(keptClones))
      if (clone)
        clone->erase();
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*bEntry)))
      if (op.use_empty() && !op.hasTrait<OpTrait::IsTerminator>() &&
          isMemoryEffectFree(&op))
        op.erase();
    for (Operation *op : weightCasts) {
      Operation *clone =
          fClones[llvm::find(forwardOps, op) - forwardOps.begin()];
      Value copy = fEntry->addArgument(clone->getResult(0).getType(), loc);
      clone->getResult(0).replaceAllUsesWith(copy);
      std::replace(fResults.begin(), fResults.end(), Value(clone->getResult(0)),
                   copy);
      clone->erase();
    }
    func::ReturnOp::create(fb, loc, fResults);
    fwd.setType(FunctionType::get(ctx, fEntry->getArgumentTypes(),
                                  ValueRange(fResults).getTypes()));

    // The step: the schedule's calls, with the messages between stages.
    SmallVector<SmallVector<Value>> stageInputs(microbatches);
    SmallVector<SmallVector<Value>> stashed(microbatches);
    SmallVector<Value> weightsNow(stepWeights);
    SmallVector<Value> gradSums;
    for (unsigned j : gradParams)
      gradSums.push_back(zeroLike(b, stepWeights[params[j]].getType()));
    unsigned firstStash = leaving.size() + (last ? 1 : 0) + updates.size();
    SmallVector<Value> weightCopies;
    {
      IRMapping map;
      for (auto [j, i] : llvm::enumerate(weightArgs))
        map.map(stageFn.getArgument(i), stepWeights[j]);
      for (Operation *op : weightCasts)
        weightCopies.push_back(b.clone(*op, map)->getResult(0));
    }
    Value lossSum;
    for (auto [isBackward, m] :
         scheduleOf(schedule, stage, stages, microbatches)) {
      Value index = dopt::ConstantOp::create(
          b, loc, DenseElementsAttr::get(i64Scalar, ArrayRef<int64_t>{m}));
      if (!isBackward) {
        // Forward of micro-batch m: receive, compute, send on.
        mark(b, loc, 0, m);
        IRMapping map;
        mapInputs(map, m);
        for (auto [j, i] : llvm::enumerate(weightArgs))
          map.map(stageFn.getArgument(i), weightsNow[j]);
        for (unsigned i : activationArgs) {
          Value a = stageFn.getArgument(i);
          map.map(a,
                  recv(b, loc, cast<RankedTensorType>(a.getType()), stage - 1,
                       static_cast<bool>(
                           stageFn.getArgAttr(i, "dopt.tensor_varying"))));
        }
        for (Value a : stageFn.getArguments())
          stageInputs[m].push_back(map.lookup(a));
        SmallVector<Value> args{index};
        llvm::append_range(args, stageInputs[m]);
        llvm::append_range(args, weightCopies);
        auto call = func::CallOp::create(b, loc, fwd, args);
        unsigned r = 0;
        for (unsigned i : leaving) {
          (void)i;
          send(b, loc, call.getResult(r++), stage + 1);
        }
        if (last) {
          // A micro-batch without counted labels adds nothing (its mean is
          // 0/0).
          Value part = dopt::WhereOp::create(
              b, loc, alive(m),
              dopt::MulOp::create(b, loc, call.getResult(r++), counts[m]),
              constant(scalar, 0.0));
          lossSum = lossSum ? Value(dopt::AddOp::create(b, loc, lossSum, part))
                            : part;
        }
        for (auto &u : updates)
          weightsNow[u.first] = call.getResult(r++);
        // The last forward's updates are the step's.
        if (m + 1 == microbatches && !updates.empty()) {
          SmallVector<Attribute> names(call.getNumResults(), b.getUnitAttr());
          for (auto [k, u] : llvm::enumerate(updates))
            names[leaving.size() + (last ? 1 : 0) + k] =
                updatedArgs.lookup(weightArgs[u.first]);
          call->setAttr("dopt.updates_weights", b.getArrayAttr(names));
        }
        llvm::append_range(stashed[m],
                           call.getResults().drop_front(firstStash));
        mark(b, loc, 1, m);
        continue;
      }
      // Backward of micro-batch m, from its stash.
      mark(b, loc, 2, m);
      SmallVector<Value> args{index};
      llvm::append_range(args, stageInputs[m]);
      if (last) {
        Value w = dopt::DivOp::create(b, loc, counts[m], total);
        if (scaleArg)
          w = dopt::MulOp::create(b, loc, w, scaleArg);
        args.push_back(w);
        args.push_back(alive(m));
      }
      for (auto [i, isVarying] : adjointsIn) {
        args.push_back(
            recv(b, loc, cast<RankedTensorType>(fret.getOperand(i).getType()),
                 stage + 1, isVarying));
      }
      llvm::append_range(args, gradSums);
      llvm::append_range(args, stashed[m]);
      llvm::append_range(args, weightCopies);
      stashed[m].clear();
      auto call = func::CallOp::create(b, loc, bwd, args);
      for (unsigned k = 0; k < gradSums.size(); ++k)
        gradSums[k] = call.getResult(k);
      for (Value g : call.getResults().drop_front(gradSums.size()))
        send(b, loc, g, stage - 1);
      mark(b, loc, 3, m);
    }

    // The loss of the whole batch, on every stage (the others add zeros).
    Value loss = last ? Value(dopt::DivOp::create(b, loc, lossSum, total))
                      : constant(scalar, 0.0);
    if (cast<RankedTensorType>(loss.getType()).getElementType() != f32)
      loss = dopt::CastOp::create(b, loc, loss, TypeAttr::get(f32));
    loss = shard::AllReduceOp::create(
               b, loc, scalar, gridRef, stageAxis, loss,
               shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
               .getResult();
    SmallVector<Value> results{loss};
    SmallVector<DictionaryAttr> resultAttrs{
        b.getDictionaryAttr({b.getNamedAttr("dopt.name", b.getStringAttr("loss"))})};
    for (auto [j, g] : llvm::zip(gradParams, gradSums)) {
      auto ref = stageFn.getArgAttrOfType<DictionaryAttr>(weightArgs[params[j]],
                                                          "dopt.weight");
      auto name = cast<StringAttr>(ref.get("name"));
      results.push_back(g);
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("dopt.name", b.getStringAttr("grad:" + name.getValue().str())),
           b.getNamedAttr("dopt.grad_of", name)}));
    }
    func::ReturnOp::create(b, loc, results);
    step.setType(FunctionType::get(ctx, entry->getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    step.setAllResultAttrs(resultAttrs);
    stageFn.erase();
    step.setName("main");
  }
};

} // namespace
