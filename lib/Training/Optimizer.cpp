//===- Optimizer.cpp - the update step after the gradients ----------------===//
//
// distopt-optimizer: after distopt-autodiff, @main returns the loss and
// `grad:<weight>` for each trained weight. This pass turns it into one
// training step: it adds the optimizer's state (one buffer per weight for
// SGD's momentum, two for Adam's moments) and its hyperparameters as inputs,
// and returns the loss, the gradients' global norm, the updated weights and
// the updated state, with PyTorch's formulas (torch.optim.SGD, Adam, AdamW;
// torch.nn.utils.clip_grad_norm_). The runtime feeds the updates back as the
// next step's weights and state.
//
// ZeRO-1: a gradient marked dopt.zero_shard (distopt-sync-gradients) is
// this data-parallel replica's chunk of the weight (ZeroSharding.h). The
// replica then updates that chunk only -- its slice of the weight, its
// optimizer state (inputs and outputs of the chunk's shape, split over the
// data axis) -- and all-gathers the updated chunks into the whole weight.
// The gradients' global norm adds the chunks' squares over the replicas.
//
// Hyperparameters are 0-d f32 inputs, so the runtime can change them per
// step (schedules): opt.lr, opt.step (1, 2, ...: Adam's bias correction),
// opt.weight_decay, opt.clip_norm (0: no clipping), and opt.momentum (SGD)
// or opt.beta1, opt.beta2, opt.eps (Adam, AdamW). Each weight's update is
// one chain of elementwise ops, which the elementwise fusion makes one pass
// over the weight.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/ZeroSharding.h"
#include "distopt/Training/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/StringSet.h"

#include <numeric>

namespace distopt {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "distopt/Training/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {


struct OptimizerPass
    : public distopt::impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal() || !main.getBody().hasOneBlock()) {
      module.emitError("distopt-optimizer needs a single-block @main");
      return signalPassFailure();
    }
    StringRef k = kind.getValue();
    if (k != "sgd" && k != "adam" && k != "adamw") {
      main.emitError("unknown optimizer '")
          << k << "' (expected sgd, adam or adamw)";
      return signalPassFailure();
    }
    MLIRContext *ctx = module.getContext();
    auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());

    // The trained weights: the results autodiff named grad:<weight>.
    llvm::StringMap<unsigned> weightArg;
    for (unsigned i = 0; i < main.getNumArguments(); ++i)
      if (auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight"))
        weightArg[cast<StringAttr>(ref.get("name")).getValue()] = i;
    struct Param {
      std::string name;
      Value weight, grad;
      bool shard = false; ///< ZeRO-1: grad is this replica's chunk
      bool split = false; ///< tensor parallelism: the weight is a block
    };
    SmallVector<Param> params;
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      auto of = main.getResultAttrOfType<StringAttr>(i, "dopt.grad_of");
      if (!of)
        continue;
      auto it = weightArg.find(of.getValue());
      if (it == weightArg.end()) {
        main.emitError("internal error: a gradient of '")
            << of.getValue() << "', which is not a weight argument";
        return signalPassFailure();
      }
      auto ref = main.getArgAttrOfType<DictionaryAttr>(it->second, "dopt.weight");
      params.push_back({of.getValue().str(), main.getArgument(it->second),
                        ret.getOperand(i),
                        static_cast<bool>(main.getResultAttr(i, zero::kShardAttr)),
                        grid::splitsOver(ref.get("split_axes"), grid::kTensorAxis)});
    }
    // A pipeline stage may train nothing (all its weights frozen, or none):
    // it still takes part in the step's loss and global norm.
    bool stage = static_cast<bool>(module->getAttr("dopt.pipeline"));
    if (params.empty() && !stage) {
      main.emitError("distopt-optimizer: no gradients to apply (run "
                     "distopt-autodiff first; are all weights frozen?)");
      return signalPassFailure();
    }
    Value loss = ret.getOperand(0);
    // ZeRO-1 chunks live on the data axis of the grid.
    int64_t replicas = 1;
    if (llvm::any_of(params, [](const Param &p) { return p.shard; })) {
      auto grid = module.lookupSymbol<shard::GridOp>(grid::kName);
      if (!grid || grid.getShape().size() <= size_t(grid::kDataAxis)) {
        main.emitError("distopt-optimizer: ZeRO-1 gradient chunks without a "
                       "data-parallel grid");
        return signalPassFailure();
      }
      replicas = grid.getShape()[grid::kDataAxis];
    }
    auto gridRef = FlatSymbolRefAttr::get(ctx, grid::kName);
    auto dataAxis = DenseI16ArrayAttr::get(ctx, {grid::kDataAxis});
    auto tensorAxis = DenseI16ArrayAttr::get(ctx, {grid::kTensorAxis});

    ImplicitLocOpBuilder b(ret.getLoc(), ret);
    auto f32 = b.getF32Type();
    auto scalarType = RankedTensorType::get({}, f32);
    // New inputs go after the model's inputs, before the weights: the
    // entry's buffers are inputs, then weights, then outputs.
    auto addInput = [&](Type type, StringRef name, NamedAttribute role,
                        ArrayRef<NamedAttribute> extra = {}) {
      unsigned index = 0;
      while (index < main.getNumArguments() &&
             !main.getArgAttr(index, "dopt.weight"))
        ++index;
      SmallVector<NamedAttribute> attrs{
          b.getNamedAttr("dopt.name", b.getStringAttr(name)), role};
      attrs.append(extra.begin(), extra.end());
      (void)main.insertArgument(index, type, b.getDictionaryAttr(attrs),
                                main.getLoc());
      return main.getArgument(index);
    };
    // A chunk's tensors are split over the data axis: the manifest's blocks.
    auto chunkAttrs = [&](RankedTensorType chunkType) {
      auto whole = RankedTensorType::get(
          {chunkType.getDimSize(0) * replicas}, chunkType.getElementType());
      return SmallVector<NamedAttribute>{
          b.getNamedAttr("dopt.split_axes",
                         b.getArrayAttr({b.getI64ArrayAttr({grid::kDataAxis})})),
          b.getNamedAttr("dopt.global_type", TypeAttr::get(whole))};
    };
    auto hyper = [&](StringRef name) {
      return addInput(scalarType, ("opt." + name).str(),
                      b.getNamedAttr("dopt.hyper", b.getStringAttr(name)));
    };
    Value lr = hyper("lr"), step = hyper("step"),
          decay = hyper("weight_decay"), clip = hyper("clip_norm");
    Value momentum, beta1, beta2, eps;
    if (k == "sgd") {
      momentum = hyper("momentum");
    } else {
      beta1 = hyper("beta1");
      beta2 = hyper("beta2");
      eps = hyper("eps");
    }
    auto constant = [&](double v) -> Value {
      return dopt::ConstantOp::create(
          b, DenseElementsAttr::get(scalarType, b.getF32FloatAttr(v)));
    };
    auto add = [&](Value x, Value y) -> Value { return dopt::AddOp::create(b, x, y); };
    auto sub = [&](Value x, Value y) -> Value { return dopt::SubOp::create(b, x, y); };
    auto mul = [&](Value x, Value y) -> Value { return dopt::MulOp::create(b, x, y); };
    auto div = [&](Value x, Value y) -> Value { return dopt::DivOp::create(b, x, y); };
    // Scalars in the weight's element type.
    auto as = [&](Value s, Value like) -> Value {
      Type elt = cast<RankedTensorType>(like.getType()).getElementType();
      return elt == f32 ? s : Value(dopt::CastOp::create(b, s, TypeAttr::get(elt)));
    };

    // The gradients' squares and the update are elementwise: they run on
    // the tensors viewed in one dimension (reshapes in and out, views once
    // bufferized), so that LLVM vectorizes them along contiguous memory. On
    // a [M, C, 3, 3] weight the 3x3 loops are unrolled away and the loop
    // around them is strided by 9: AVX-512 gathers and scatters, 14% of a
    // ResNet-18 step on the CPU.
    auto flat = [&](Value v) -> Value {
      auto t = cast<RankedTensorType>(v.getType());
      if (t.getRank() <= 1)
        return v;
      return dopt::ReshapeOp::create(
          b, v, b.getDenseI64ArrayAttr({t.getNumElements()}));
    };
    auto shaped = [&](Value v, Type to) -> Value {
      if (v.getType() == to)
        return v;
      return dopt::ReshapeOp::create(
          b, v, b.getDenseI64ArrayAttr(cast<RankedTensorType>(to).getShape()));
    };
    for (Param &p : params)
      p.grad = flat(p.grad);
    // Dynamic loss scaling: the gradients arrive multiplied by the scale.
    if (lossScale) {
      Value inverse = div(constant(1.0), autodiff::lossScaleInput(main));
      for (Param &p : params)
        p.grad = mul(p.grad, as(inverse, p.grad));
    }
    // Global norm of all gradients, in f32; clipping as clip_grad_norm_:
    // g *= min(1, clip / (norm + 1e-6)) when clip > 0.
    // Every element is counted once: ZeRO-1 chunks are summed over the
    // data-parallel replicas, tensor-parallel blocks over the tensor axis
    // (a replicated gradient is the same on every rank: counted as it is).
    Value sumSquares = constant(0.0);
    Value partSquares[2][2] = {}; // [chunk][block]
    for (Param &p : params) {
      Value g = p.grad;
      if (cast<RankedTensorType>(g.getType()).getElementType() != f32)
        g = dopt::CastOp::create(b, g, TypeAttr::get(f32));
      SmallVector<int64_t> all(cast<RankedTensorType>(g.getType()).getRank());
      std::iota(all.begin(), all.end(), 0);
      Value s = dopt::ReduceSumOp::create(b, mul(g, g), b.getDenseI64ArrayAttr(all),
                                          b.getBoolAttr(false));
      Value &part = partSquares[p.shard][p.split];
      part = part ? add(part, s) : s;
    }
    auto sumOver = [&](DenseI16ArrayAttr axis, Value v) -> Value {
      return shard::AllReduceOp::create(
                 b, scalarType, gridRef, axis, v,
                 shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
          .getResult();
    };
    for (int chunk = 0; chunk < 2; ++chunk)
      for (int block = 0; block < 2; ++block)
        if (Value v = partSquares[chunk][block]) {
          if (chunk)
            v = sumOver(dataAxis, v);
          if (block)
            v = sumOver(tensorAxis, v);
          sumSquares = add(sumSquares, v);
        }
    // A pipeline's stages hold different weights: their squares add up.
    if (grid::axisSize(module, grid::kStageAxis) > 1)
      sumSquares = sumOver(DenseI16ArrayAttr::get(ctx, {grid::kStageAxis}),
                           sumSquares);
    Value norm = dopt::SqrtOp::create(b, sumSquares);
    Value coef = dopt::MinOp::create(
        b, constant(1.0), div(clip, add(norm, constant(1e-6))));
    Value clipping = dopt::GreaterOp::create(b, clip, constant(0.0));
    Value scale = dopt::WhereOp::create(b, clipping, coef, constant(1.0));

    SmallVector<Value> results{loss, norm};
    SmallVector<DictionaryAttr> attrs{
        b.getDictionaryAttr({b.getNamedAttr("dopt.name", b.getStringAttr("loss"))}),
        b.getDictionaryAttr(
            {b.getNamedAttr("dopt.name", b.getStringAttr("grad_norm"))})};
    // Loss scaling: a step whose gradients are not all finite (on any rank:
    // the sum of squares is reduced over every axis that holds different
    // gradients) changes nothing. x - x is 0 for every finite x, NaN for
    // inf and NaN.
    Value finite;
    if (lossScale) {
      finite = dopt::EqualOp::create(b, sub(sumSquares, sumSquares),
                                     constant(0.0));
      results.push_back(
          dopt::WhereOp::create(b, finite, constant(0.0), constant(1.0)));
      attrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("dopt.name", b.getStringAttr("found_inf"))}));
    }
    auto kept = [&](Value updated, Value old) -> Value {
      return finite ? Value(dopt::WhereOp::create(b, finite, updated, old))
                    : updated;
    };
    auto update = [&](Value v, StringRef name, NamedAttribute role,
                      ArrayRef<NamedAttribute> extra = {}) {
      results.push_back(v);
      SmallVector<NamedAttribute> a{
          b.getNamedAttr("dopt.name", b.getStringAttr(name)), role};
      a.append(extra.begin(), extra.end());
      attrs.push_back(b.getDictionaryAttr(a));
    };
    for (Param &p : params) {
      Value w = p.weight;
      auto weightType = cast<RankedTensorType>(w.getType());
      SmallVector<NamedAttribute> split;
      if (p.shard) {
        // This replica's chunk of the weight (ZeroSharding.h's layout).
        Value rows = zero::toChunks(b, b.getLoc(), w, replicas);
        auto rowsType = cast<RankedTensorType>(rows.getType());
        Value mine = shard::AllSliceOp::create(
            b,
            RankedTensorType::get({1, rowsType.getDimSize(1)},
                                  rowsType.getElementType()),
            gridRef, dataAxis, rows, b.getIndexAttr(0));
        w = dopt::ReshapeOp::create(
            b, mine, b.getDenseI64ArrayAttr({rowsType.getDimSize(1)}));
        split = chunkAttrs(cast<RankedTensorType>(w.getType()));
      }
      Type type = w.getType(); // the optimizer state's (a chunk when sharded)
      w = flat(w);
      Value before = w; // what a skipped step keeps
      Value g = mul(p.grad, as(scale, w));
      auto stateOf = [&](StringRef which) {
        return flat(addInput(type, ("opt." + which + ":" + p.name).str(),
                        b.getNamedAttr("dopt.optimizer_state",
                                       b.getDictionaryAttr(
                                           {b.getNamedAttr("weight", b.getStringAttr(p.name)),
                                            b.getNamedAttr("kind", b.getStringAttr(which))})),
                        split));
      };
      auto updatesState = [&](StringRef which) {
        return b.getNamedAttr("dopt.updates",
                              b.getStringAttr(("opt." + which + ":" + p.name).str()));
      };
      Value newW;
      if (k == "sgd") {
        // torch.optim.SGD (dampening 0): g += wd w; buf = mu buf + g;
        // g = nesterov ? g + mu buf : buf; w -= lr g.
        Value buf = stateOf("momentum");
        g = add(g, mul(as(decay, w), w));
        Value mu = as(momentum, w);
        Value newBuf = add(mul(mu, buf), g);
        Value dir = nesterov ? add(g, mul(mu, newBuf)) : newBuf;
        newW = sub(w, mul(as(lr, w), dir));
        update(shaped(kept(newBuf, buf), type), ("opt.momentum:" + p.name),
               updatesState("momentum"), split);
      } else {
        // torch.optim.Adam / AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
        // w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps);
        // Adam adds wd w to g, AdamW first scales w by (1 - lr wd).
        Value m = stateOf("m"), v = stateOf("v");
        Value b1 = as(beta1, w), b2 = as(beta2, w), one = as(constant(1.0), w);
        if (k == "adam")
          g = add(g, mul(as(decay, w), w));
        else
          w = mul(w, sub(one, mul(as(lr, w), as(decay, w))));
        Value newM = add(mul(b1, m), mul(sub(one, b1), g));
        Value newV = add(mul(b2, v), mul(sub(one, b2), mul(g, g)));
        Value bc1 = sub(one, dopt::PowOp::create(b, b1, as(step, w)));
        Value bc2 = sub(one, dopt::PowOp::create(b, b2, as(step, w)));
        Value denom = add(div(dopt::SqrtOp::create(b, newV), dopt::SqrtOp::create(b, bc2)),
                          as(eps, w));
        newW = sub(w, mul(div(as(lr, w), bc1), div(newM, denom)));
        update(shaped(kept(newM, m), type), ("opt.m:" + p.name), updatesState("m"),
               split);
        update(shaped(kept(newV, v), type), ("opt.v:" + p.name), updatesState("v"),
               split);
      }
      newW = kept(newW, before);
      if (p.shard) {
        // The updated chunks of every replica, back into the weight.
        auto chunkType = cast<RankedTensorType>(newW.getType());
        Value all = shard::AllGatherOp::create(
            b,
            RankedTensorType::get({chunkType.getDimSize(0) * replicas},
                                  chunkType.getElementType()),
            gridRef, dataAxis, newW, b.getIndexAttr(0));
        newW = zero::fromChunks(b, b.getLoc(), all, weightType);
      }
      newW = shaped(newW, weightType);
      update(newW, ("update:" + p.name),
             b.getNamedAttr("dopt.updates_weight", b.getStringAttr(p.name)));
    }
    // Weights the forward pass itself updates (batch norm's running
    // statistics, marked by the importer): their new values are updates
    // too.
    llvm::StringSet<> trained;
    for (Param &p : params)
      trained.insert(p.name);
    SmallVector<std::pair<StringAttr, Value>> forwardUpdates;
    autodiff::forEachForwardUpdate(main, [&](StringAttr name, Value v) {
      forwardUpdates.push_back({name, v});
    });
    for (auto [name, value] : forwardUpdates) {
      if (!weightArg.count(name.getValue()))
        continue; // not a weight of this program
      if (trained.count(name.getValue())) {
        emitError(value.getLoc(), "weight '")
            << name.getValue()
            << "' is both trained and updated by the forward pass";
        return signalPassFailure();
      }
      update(value, ("update:" + name.getValue()).str(),
             b.getNamedAttr("dopt.updates_weight", name));
    }
    func::ReturnOp::create(b, results);
    ret.erase();
    SmallVector<Type> types;
    for (Value r : results)
      types.push_back(r.getType());
    main.setType(FunctionType::get(ctx, main.getArgumentTypes(), types));
    main.setAllResultAttrs(attrs);
  }
};

} // namespace
