//===- AppendLoss.cpp - a training loss on an inference model -------------===//
//
// distopt-append-loss: @main of an imported inference model becomes the
// model's loss on a labels input, so it can be differentiated
// (distopt-autodiff) and trained. `kind`:
//   cross-entropy  softmax over the output's last axis, integer labels of
//                  the output's shape without that axis, ignore_index -100,
//                  mean over counted elements (PyTorch's CrossEntropyLoss
//                  on the flattened logits);
//   nll            the same on log-probabilities (no softmax);
//   mse            float targets of the output's shape, mean squared error;
//   output         the output is the loss already (one float value); labels
//                  are ordinary model inputs.
// The labels input is appended to @main's inputs (named by `labels`), and
// @main returns the loss alone.
//
// In a partitioned program (the program of one data-parallel replica) the
// output holds this replica's share of the samples: the labels are split
// the same way, and the loss's sums (the mean's count included) are
// all-reduced over the grid axes the samples are split on, so every replica
// holds the exact loss of the whole batch. With `local` (a parameter-server
// worker) it is the loss of the replica's own samples.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptLosses.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/StringExtras.h"

#include <numeric>

namespace distopt {
#define GEN_PASS_DEF_APPENDLOSSPASS
#include "distopt/Training/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// log sum_j exp(x[i, j]) of [M, K] scores, as [M, 1]: the row's maximum
/// taken out first.
Value logSumExp(OpBuilder &b, Location loc, Value x) {
  auto axis = b.getDenseI64ArrayAttr({1});
  Value max = dopt::ReduceMaxOp::create(b, loc, x, axis, b.getBoolAttr(true));
  Value e = dopt::ExpOp::create(b, loc, dopt::SubOp::create(b, loc, x, max));
  Value s = dopt::ReduceSumOp::create(b, loc, e, axis, b.getBoolAttr(true));
  return dopt::AddOp::create(b, loc, dopt::LogOp::create(b, loc, s), max);
}

struct AppendLossPass
    : public distopt::impl::AppendLossPassBase<AppendLossPass> {
  using AppendLossPassBase::AppendLossPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal() || !main.getBody().hasOneBlock()) {
      module.emitError("distopt-append-loss needs a single-block @main");
      return signalPassFailure();
    }
    StringRef k = kind.getValue();
    if (k != "cross-entropy" && k != "nll" && k != "mse" && k != "output") {
      main.emitError("unknown loss '")
          << k << "' (expected cross-entropy, nll, mse or output)";
      return signalPassFailure();
    }
    // The output the loss is taken of: by name, or by position.
    int64_t index = -1;
    SmallVector<std::string> names;
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      auto name = main.getResultAttrOfType<StringAttr>(i, "dopt.name");
      names.push_back(name ? name.getValue().str() : "#" + std::to_string(i));
      if (name && name.getValue() == output.getValue())
        index = i;
    }
    unsigned position;
    if (index < 0 && !StringRef(output).getAsInteger(10, position) &&
        position < main.getNumResults())
      index = position;
    if (index < 0) {
      main.emitError("--loss: the model has no output '")
          << output.getValue() << "' (its outputs: "
          << llvm::join(names, ", ") << ")";
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
    Value y = ret.getOperand(index);
    if (!isa<FloatType>(cast<RankedTensorType>(y.getType()).getElementType())) {
      main.emitError("--loss: output '")
          << names[index] << "' is " << y.getType() << ", not floats";
      return signalPassFailure();
    }
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ret);
    Location loc = ret.getLoc();
    // A partitioned output: the grid axes each of its dimensions is split
    // over (dopt.split_axes), and its whole type.
    auto splitAxes = main.getResultAttrOfType<ArrayAttr>(index, "dopt.split_axes");
    auto globalType = main.getResultAttrOfType<TypeAttr>(index, "dopt.global_type");
    // An output split over the tensor axis (a column-parallel head's
    // logits) is gathered first: the loss is taken of whole rows, the same
    // on every rank of the axis -- except class scores split along their
    // class axis (the vocabulary) under cross-entropy or NLL, whose loss is
    // vocabulary-parallel (Megatron): each rank keeps its classes and the
    // rows' log-sum-exps and picked scores are combined over the axis.
    int64_t classRanks = 1;
    if (splitAxes) {
      SmallVector<Attribute> kept;
      for (auto [d, axes] : llvm::enumerate(splitAxes)) {
        auto list = cast<ArrayAttr>(axes);
        SmallVector<Attribute> dimAxes(list.begin(), list.end());
        bool tensorSplit =
            !dimAxes.empty() &&
            cast<IntegerAttr>(dimAxes.back()).getInt() == grid::kTensorAxis;
        auto grid = module.lookupSymbol<shard::GridOp>(grid::kName);
        if (tensorSplit && grid && (k == "cross-entropy" || k == "nll") &&
            dimAxes.size() == 1 &&
            d + 1 == size_t(cast<RankedTensorType>(y.getType()).getRank())) {
          classRanks = grid.getShape()[grid::kTensorAxis];
          dimAxes.pop_back();
        } else if (tensorSplit) {
          auto t = cast<RankedTensorType>(y.getType());
          SmallVector<int64_t> shape(t.getShape());
          auto grid = module.lookupSymbol<shard::GridOp>(grid::kName);
          if (!grid) {
            main.emitError("--loss: a split output without a shard.grid");
            return signalPassFailure();
          }
          shape[d] *= grid.getShape()[grid::kTensorAxis];
          y = shard::AllGatherOp::create(
                  b, loc, RankedTensorType::get(shape, t.getElementType()),
                  FlatSymbolRefAttr::get(module.getContext(), grid::kName),
                  b.getDenseI16ArrayAttr({grid::kTensorAxis}), y,
                  b.getIndexAttr(d))
                  .getResult();
          dimAxes.pop_back();
        }
        kept.push_back(b.getArrayAttr(dimAxes));
      }
      splitAxes = b.getArrayAttr(kept);
    }
    auto yt = cast<RankedTensorType>(y.getType());
    SmallVector<int16_t> replicaAxes;
    if (splitAxes)
      for (auto [d, axes] : llvm::enumerate(splitAxes))
        for (Attribute a : cast<ArrayAttr>(axes)) {
          int16_t axis = static_cast<int16_t>(cast<IntegerAttr>(a).getInt());
          if (axis != grid::kDataAxis || (k != "mse" && k != "output" &&
                                          d + 1 == size_t(yt.getRank()))) {
            main.emitError("--loss: output '")
                << names[index] << "' is split over grid axis " << axis
                << " along its dimension " << d
                << "; a loss is taken of outputs split along their samples "
                   "only (data parallelism)";
            return signalPassFailure();
          }
          replicaAxes.push_back(axis);
        }
    // A parameter-server worker's loss is its own samples' (`local`).
    if (local)
      replicaAxes.clear();
    auto acrossReplicas = [&](Value part) -> Value {
      if (replicaAxes.empty())
        return part;
      return shard::AllReduceOp::create(
                 b, loc, part.getType(),
                 FlatSymbolRefAttr::get(ctx, grid::kName),
                 b.getDenseI16ArrayAttr(replicaAxes), part,
                 shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
          .getResult();
    };
    Value loss;
    SmallVector<std::pair<StringRef, Value>> extraResults;
    if (k == "output") {
      if (yt.getNumElements() != 1) {
        main.emitError("--loss output: output '")
            << names[index] << "' is " << yt << ", not one value";
        return signalPassFailure();
      }
      if (!replicaAxes.empty()) {
        main.emitError("--loss output: output '")
            << names[index] << "' is split across replicas";
        return signalPassFailure();
      }
      loss = y;
    } else {
      for (unsigned i = 0; i < main.getNumArguments(); ++i)
        if (auto n = main.getArgAttrOfType<StringAttr>(i, "dopt.name"))
          if (n.getValue() == labels.getValue()) {
            main.emitError("--loss: the model already has an input named '")
                << labels.getValue() << "' (name the labels with --labels)";
            return signalPassFailure();
          }
      RankedTensorType labelType;
      if (k == "mse") {
        labelType = yt;
      } else {
        if (yt.getRank() < 1) {
          main.emitError("--loss ") << k << ": output '" << names[index]
                                    << "' has no class axis";
          return signalPassFailure();
        }
        labelType = RankedTensorType::get(yt.getShape().drop_back(),
                                          b.getI64Type());
      }
      // The labels are split as the output is (without the class axis).
      SmallVector<NamedAttribute> labelAttrs{
          b.getNamedAttr("dopt.name", b.getStringAttr(labels))};
      // Class indices: the train loop checks them against the class count
      // (the whole axis's, when the ranks of the tensor axis split it).
      if (k != "mse")
        labelAttrs.push_back(b.getNamedAttr(
            "dopt.classes",
            b.getI64IntegerAttr(yt.getShape().back() * classRanks)));
      if (splitAxes && globalType) {
        auto whole = cast<RankedTensorType>(globalType.getValue());
        ArrayRef<Attribute> axes = splitAxes.getValue();
        ArrayRef<int64_t> shape = whole.getShape();
        if (k != "mse") {
          axes = axes.take_front(std::min<size_t>(axes.size(), yt.getRank() - 1));
          shape = shape.drop_back();
        }
        labelAttrs.push_back(
            b.getNamedAttr("dopt.split_axes", b.getArrayAttr(axes)));
        labelAttrs.push_back(b.getNamedAttr(
            "dopt.global_type",
            TypeAttr::get(RankedTensorType::get(shape, labelType.getElementType()))));
      }
      // The samples are where the output has them (the class axis, last,
      // is not the batch's).
      if (auto bd = main.getResultAttrOfType<IntegerAttr>(index, "dopt.batch_dim"))
        if (bd.getInt() >= 0 && bd.getInt() < labelType.getRank())
          labelAttrs.push_back(b.getNamedAttr("dopt.batch_dim", bd));
      unsigned argIndex = main.getNumArguments();
      if (failed(main.insertArgument(argIndex, labelType,
                                     b.getDictionaryAttr(labelAttrs),
                                     main.getLoc())))
        return signalPassFailure();
      Value t = main.getArgument(argIndex);
      if (k == "mse") {
        Value d = dopt::SubOp::create(b, loc, y, t);
        SmallVector<int64_t> all(yt.getRank());
        std::iota(all.begin(), all.end(), 0);
        Value squares = dopt::MulOp::create(b, loc, d, d);
        if (replicaAxes.empty()) {
          loss = dopt::ReduceMeanOp::create(b, loc, squares,
                                            b.getDenseI64ArrayAttr(all),
                                            b.getBoolAttr(false));
        } else {
          // The mean over the whole output: its element count is static.
          Value sum = acrossReplicas(dopt::ReduceSumOp::create(
              b, loc, squares, b.getDenseI64ArrayAttr(all),
              b.getBoolAttr(false)));
          auto whole = cast<RankedTensorType>(globalType.getValue());
          Type elt = yt.getElementType();
          Value count = dopt::ConstantOp::create(
              b, loc,
              DenseElementsAttr::get(
                  RankedTensorType::get({}, elt),
                  b.getFloatAttr(elt, double(whole.getNumElements()))));
          loss = dopt::DivOp::create(b, loc, sum, count);
        }
        if (counted) {
          int64_t n = globalType && !local
                          ? cast<RankedTensorType>(globalType.getValue())
                                .getNumElements()
                          : yt.getNumElements();
          extraResults.push_back(
              {"counted", dopt::ConstantOp::create(
                              b, loc,
                              DenseElementsAttr::get(
                                  RankedTensorType::get({}, b.getF32Type()),
                                  b.getF32FloatAttr(float(n))))});
        }
      } else {
        // Flattened: [M, C] scores, [M] labels.
        int64_t classes = yt.getShape().back();
        int64_t m = yt.getNumElements() / std::max<int64_t>(classes, 1);
        Value scores = dopt::ReshapeOp::create(
            b, loc, y, b.getDenseI64ArrayAttr({m, classes}));
        Value flat = dopt::ReshapeOp::create(b, loc, t,
                                             b.getDenseI64ArrayAttr({m}));
        // Vocabulary-parallel: this rank holds classes [offset, offset +
        // classes); a value summed over them is completed over the tensor
        // axis.
        std::optional<dopt::ClassSplit> split;
        auto acrossClasses = [&](Value part) -> Value {
          return shard::AllReduceOp::create(
                     b, loc, part.getType(),
                     FlatSymbolRefAttr::get(ctx, grid::kName),
                     b.getDenseI16ArrayAttr({grid::kTensorAxis}), part,
                     shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum))
              .getResult();
        };
        if (classRanks > 1) {
          auto coord = shard::ProcessMultiIndexOp::create(
              b, loc, grid::kName, ArrayRef<shard::GridAxis>{grid::kTensorAxis});
          Value c = arith::IndexCastOp::create(b, loc, b.getI64Type(),
                                               coord.getResult()[0]);
          Value lo = arith::MulIOp::create(
              b, loc, c,
              arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(classes)));
          Value offset = tensor::FromElementsOp::create(
              b, loc, RankedTensorType::get({}, b.getI64Type()), lo);
          split = dopt::ClassSplit{offset, acrossClasses};
        }
        if (k == "cross-entropy" && classRanks > 1) {
          // log p = x - lse(row): each rank's log-sum-exp of its classes,
          // gathered over the axis ([M, ranks], a few bytes a row) and
          // combined there -- the same on every rank.
          Value mine = logSumExp(b, loc, scores);
          Value all = shard::AllGatherOp::create(
                          b, loc, RankedTensorType::get({m, classRanks}, yt.getElementType()),
                          FlatSymbolRefAttr::get(ctx, grid::kName),
                          b.getDenseI16ArrayAttr({grid::kTensorAxis}), mine,
                          b.getIndexAttr(1))
                          .getResult();
          scores = dopt::SubOp::create(b, loc, scores, logSumExp(b, loc, all));
        } else if (k == "cross-entropy") {
          scores = dopt::LogSoftmaxOp::create(b, loc, scores,
                                              b.getI64IntegerAttr(1));
        }
        std::string error;
        FailureOr<Value> l = dopt::buildNegativeLogLikelihood(
            b, loc, scores, flat, Value(), int64_t(-100), "mean", error,
            acrossReplicas, split);
        if (failed(l)) {
          main.emitError("--loss ") << k << ": " << error;
          return signalPassFailure();
        }
        loss = *l;
        if (accuracy || counted) {
          // The counted labels (not -100) over the whole batch; with
          // accuracy also the samples whose label's score is the largest
          // (ties count).
          auto sumAll = [&](Value v) -> Value {
            Value f = dopt::CastOp::create(b, loc, v, TypeAttr::get(b.getF32Type()));
            return acrossReplicas(dopt::ReduceSumOp::create(
                b, loc, f, b.getDenseI64ArrayAttr({0}), b.getBoolAttr(false)));
          };
          Value ignore = dopt::ConstantOp::create(
              b, loc, DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                             ArrayRef<int64_t>{-100}));
          Value kept =
              dopt::NotOp::create(b, loc, dopt::EqualOp::create(b, loc, flat, ignore));
          if (accuracy) {
            Type elt = yt.getElementType();
            SmallVector<int64_t> iota(classes);
            std::iota(iota.begin(), iota.end(), 0);
            Value classIds = dopt::ConstantOp::create(
                b, loc,
                DenseElementsAttr::get(RankedTensorType::get({1, classes}, b.getI64Type()),
                                       ArrayRef<int64_t>(iota)));
            // Split classes: this rank's start at the offset.
            if (split)
              classIds = dopt::AddOp::create(b, loc, classIds, split->offset);
            Value onehot = dopt::EqualOp::create(
                b, loc,
                dopt::ReshapeOp::create(b, loc, flat, b.getDenseI64ArrayAttr({m, 1})),
                classIds);
            Value zero = dopt::ConstantOp::create(
                b, loc, DenseElementsAttr::get(RankedTensorType::get({}, elt),
                                               b.getZeroAttr(elt)));
            Value labelScore = dopt::ReduceSumOp::create(
                b, loc, dopt::WhereOp::create(b, loc, onehot, scores, zero),
                b.getDenseI64ArrayAttr({1}), b.getBoolAttr(false));
            Value best = dopt::ReduceMaxOp::create(b, loc, scores,
                                                   b.getDenseI64ArrayAttr({1}),
                                                   b.getBoolAttr(false));
            if (split) {
              // The label's score is on one rank (the others add zeros);
              // the best over the whole axis.
              labelScore = acrossClasses(labelScore);
              best = shard::AllReduceOp::create(
                         b, loc, best.getType(),
                         FlatSymbolRefAttr::get(ctx, grid::kName),
                         b.getDenseI16ArrayAttr({grid::kTensorAxis}), best,
                         shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Max))
                         .getResult();
            }
            Value correct = dopt::AndOp::create(
                b, loc, dopt::GreaterEqualOp::create(b, loc, labelScore, best), kept);
            extraResults.push_back({"correct", sumAll(correct)});
          }
          extraResults.push_back({"counted", sumAll(kept)});
        }
      }
    }
    SmallVector<Value> results{loss};
    for (auto &[name, v] : extraResults)
      results.push_back(v);
    func::ReturnOp::create(b, loc, results);
    ret.erase();
    main.setType(FunctionType::get(ctx, main.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    SmallVector<NamedAttribute> lossAttrs{
        b.getNamedAttr("dopt.name", b.getStringAttr("loss"))};
    if (splitAxes)
      lossAttrs.push_back(
          b.getNamedAttr("dopt.split_axes", b.getArrayAttr({})));
    if (globalType)
      lossAttrs.push_back(
          b.getNamedAttr("dopt.global_type", TypeAttr::get(loss.getType())));
    SmallVector<DictionaryAttr> attrs{b.getDictionaryAttr(lossAttrs)};
    for (auto &[name, v] : extraResults) {
      SmallVector<NamedAttribute> a{
          b.getNamedAttr("dopt.name", b.getStringAttr(name))};
      if (splitAxes)
        a.push_back(b.getNamedAttr("dopt.split_axes", b.getArrayAttr({})));
      if (globalType)
        a.push_back(b.getNamedAttr("dopt.global_type", TypeAttr::get(v.getType())));
      attrs.push_back(b.getDictionaryAttr(a));
    }
    main.setAllResultAttrs(attrs);
  }
};

} // namespace
