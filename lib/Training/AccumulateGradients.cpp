//===- AccumulateGradients.cpp - K micro-batches per training step --------===//
//
// distopt-accumulate-gradients: after distopt-autodiff on a program whose
// @main returns (loss, counted, grad:<w>...) for one micro-batch (counted:
// what its loss's mean divides by, distopt-append-loss counted=true), the
// step becomes K micro-batches: its data inputs (every input that is not a
// weight, the random key or a hyperparameter) hold K times the samples
// along their batch dimension, and the micro-batch program, moved into a
// function of its own (@dopt_microbatch), is called in a loop over the K
// slices, so the program does not grow with K. Each micro-batch's forward
// and backward complete before the next starts (one micro-batch's
// activations alive), adding its gradients to running sums the function
// takes and returns. Exactly as one batch of K times the samples: each
// micro-batch weighs by its count over the total
// (sum_k counted_k grad_k / sum_k counted_k), the loss likewise.
// distopt-sync-gradients, run after, communicates the sums once per step.
// A dropout's positions continue across the micro-batches (micro-batch k
// stacked after the k - 1 before it along the batch dimension: the
// function takes k). Weights the forward pass updates (batch norm's running
// statistics, ops marked dopt.updates_weight) are returned by the function
// and carried to the next iteration: micro-batch k reads what k - 1 wrote,
// as K forward calls in PyTorch do, and the loop's results are marked
// (dopt.updates_weights) as the step's. A statistic over the batch is then
// each micro-batch's own: the driver allows that only where the user asked
// for it (distopt compile --microbatch-statistics).
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Training/Autodiff.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace distopt {
#define GEN_PASS_DEF_ACCUMULATEGRADIENTSPASS
#include "distopt/Training/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

struct AccumulateGradientsPass
    : public distopt::impl::AccumulateGradientsPassBase<
          AccumulateGradientsPass> {
  using AccumulateGradientsPassBase::AccumulateGradientsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (steps <= 1)
      return;
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal() || !main.getBody().hasOneBlock()) {
      module.emitError("distopt-accumulate-gradients needs a single-block @main");
      return signalPassFailure();
    }
    int64_t k = steps;
    Block &body = main.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    int countedAt = -1;
    for (unsigned i = 0; i < main.getNumResults(); ++i)
      if (auto n = main.getResultAttrOfType<StringAttr>(i, "dopt.name"))
        if (n.getValue() == "counted")
          countedAt = static_cast<int>(i);
    if (countedAt < 0) {
      main.emitError("distopt-accumulate-gradients: @main returns no "
                     "'counted' (append the loss with counted=true)");
      return signalPassFailure();
    }
    // The data inputs, K times the samples.
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    SmallVector<unsigned> dataArgs;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      // Weights, the random key and hyperparameters (fp16's loss scale) are
      // the step's, not the samples'.
      if (main.getArgAttr(i, "dopt.weight") ||
          main.getArgAttr(i, "dopt.rng_key") ||
          main.getArgAttr(i, "dopt.hyper"))
        continue;
      auto t = cast<RankedTensorType>(main.getArgument(i).getType());
      if (t.getRank() == 0) {
        main.emitError("distopt-accumulate-gradients: data input ")
            << i << " has no samples dimension";
        return signalPassFailure();
      }
      int64_t d = 0;
      if (auto bd = main.getArgAttrOfType<IntegerAttr>(i, "dopt.batch_dim"))
        d = bd.getInt();
      if (d < 0 || d >= t.getRank()) {
        main.emitError("distopt-accumulate-gradients: data input ")
            << i << " has its batch in dimension " << d << ", outside its "
            << t.getRank() << " dimensions";
        return signalPassFailure();
      }
      argBatchDims[i] = d;
      dataArgs.push_back(i);
    }
    // Each dropout continues its mask along its batch dimension; one whose
    // batch is not a block of a dimension cannot.
    if (failed(autodiff::checkMicrobatchDropouts(
            main, "--accumulate " + std::to_string(k))))
      return signalPassFailure();
    // The micro-batch program: the old body, moved into a function of its
    // own (compiled once, called once per micro-batch).
    OpBuilder mod = OpBuilder::atBlockEnd(module.getBody());
    auto micro = func::FuncOp::create(mod, main.getLoc(), "dopt_microbatch",
                                      main.getFunctionType());
    micro.setPrivate();
    Block *entry = micro.addEntryBlock();
    IRMapping toMicro;
    for (auto [o, n] : llvm::zip(body.getArguments(), entry->getArguments()))
      toMicro.map(o, n);
    {
      OpBuilder mb = OpBuilder::atBlockEnd(entry);
      for (Operation &op : body)
        mb.clone(op, toMicro);
    }
    // Empty the body, widen the data arguments.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      op.erase();
    for (unsigned i : dataArgs) {
      BlockArgument a = main.getArgument(i);
      auto t = cast<RankedTensorType>(a.getType());
      int64_t d = batchDimOf(i);
      SmallVector<int64_t> shape(t.getShape());
      shape[d] *= k;
      a.setType(RankedTensorType::get(shape, t.getElementType()));
      if (auto g = main.getArgAttrOfType<TypeAttr>(i, "dopt.global_type")) {
        auto gt = cast<RankedTensorType>(g.getValue());
        SmallVector<int64_t> gs(gt.getShape());
        gs[d] *= k;
        main.setArgAttr(i, "dopt.global_type",
                        TypeAttr::get(RankedTensorType::get(gs, gt.getElementType())));
      }
    }
    // The function adds its micro-batch to running sums: it takes the
    // micro-batch's index (its dropouts' place in the batch), the sums so
    // far and the count so far, and returns them updated, followed by the
    // weights its forward pass updates (batch norm's running statistics:
    // micro-batch m reads what m - 1 wrote).
    Location loc = main.getLoc();
    auto microRet = cast<func::ReturnOp>(entry->getTerminator());
    unsigned results = microRet.getNumOperands();
    SmallVector<Operation *> microOps;
    for (Operation &op : entry->without_terminator())
      microOps.push_back(&op);
    llvm::DenseMap<unsigned, StringAttr> updatedArgs =
        autodiff::forwardUpdatedWeights(main, microOps);
    // (main argument, new value)
    SmallVector<std::pair<unsigned, Value>> updates =
        autodiff::takeForwardUpdates(updatedArgs, microOps);
    auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
    Value index = entry->addArgument(i64Scalar, loc);
    SmallVector<Value> sumsIn, sumsOut;
    for (unsigned r = 0; r < results; ++r)
      sumsIn.push_back(
          entry->addArgument(microRet.getOperand(r).getType(), loc));
    b.setInsertionPoint(microRet);
    for (Operation *op : microOps)
      if (isa<dopt::DropoutOp>(op))
        autodiff::placeDropoutMicrobatch(b, op, index, k);
    Value c = microRet.getOperand(countedAt);
    auto zeroOf = [&](Type elt) -> Value {
      return dopt::ConstantOp::create(
          b, loc,
          DenseElementsAttr::get(RankedTensorType::get({}, elt),
                                 b.getZeroAttr(elt)));
    };
    Value alive = dopt::GreaterOp::create(b, loc, c, zeroOf(b.getF32Type()));
    for (unsigned r = 0; r < results; ++r) {
      Value out = microRet.getOperand(r);
      if (static_cast<int>(r) == countedAt) {
        sumsOut.push_back(dopt::AddOp::create(b, loc, sumsIn[r], c));
        continue;
      }
      // Weighted by the micro-batch's count (divided by the total below).
      Value w = c;
      Type elt = cast<RankedTensorType>(out.getType()).getElementType();
      if (elt != b.getF32Type())
        w = dopt::CastOp::create(b, loc, w, TypeAttr::get(elt));
      // A micro-batch without counted labels adds nothing (its mean, 0/0,
      // and the gradients of it are NaN).
      Value part = dopt::WhereOp::create(
          b, loc, alive, dopt::MulOp::create(b, loc, out, w), zeroOf(elt));
      sumsOut.push_back(dopt::AddOp::create(b, loc, sumsIn[r], part));
    }
    SmallVector<Value> microResults(sumsOut);
    for (auto [arg, v] : updates)
      microResults.push_back(v);
    func::ReturnOp::create(b, loc, microResults);
    microRet.erase();
    // The weights' 16-bit copies (autocast's casts of weight arguments) are
    // made once per step in @main and passed to every call, after the sums
    // (the backward differentiates through the cast's adjoint, which does
    // not read the copy).
    SmallVector<std::pair<unsigned, TypeAttr>> weightCasts; // (arg, to)
    for (Operation *op :
         autodiff::weightCopies(main, entry, microOps, updatedArgs)) {
      auto copy = cast<dopt::CastOp>(op);
      weightCasts.push_back(
          {cast<BlockArgument>(copy.getInput()).getArgNumber(),
           copy.getToAttr()});
      copy.getResult().replaceAllUsesWith(
          entry->addArgument(copy.getType(), loc));
      copy.erase();
    }
    micro.setType(FunctionType::get(ctx, entry->getArgumentTypes(),
                                    ValueRange(microResults).getTypes()));
    // Each sum is added into the buffer of the sum it takes
    // (distopt-update-in-place): one set of sums for the whole loop.
    for (unsigned r = 0; r < results; ++r)
      micro.setResultAttr(
          r, "dopt.accumulates",
          b.getI64IntegerAttr(cast<BlockArgument>(sumsIn[r]).getArgNumber()));

    // @main: a loop over the K micro-batches (the program does not grow
    // with K), each iteration calling the function on its micro-batch's
    // slice of the data with the sums and the updated weights it carries.
    // Without `loop`, K calls one after the other (the CUDA target: see
    // Passes.td).
    b.setInsertionPointToEnd(&body);
    SmallVector<Value> carried;
    for (Value v : sumsIn) {
      auto t = cast<RankedTensorType>(v.getType());
      carried.push_back(dopt::ConstantOp::create(
          b, loc,
          DenseElementsAttr::get(t, b.getZeroAttr(t.getElementType()))));
    }
    for (auto [arg, v] : updates)
      carried.push_back(main.getArgument(arg));
    SmallVector<Value> weightCopies;
    for (auto [arg, to] : weightCasts)
      weightCopies.push_back(
          dopt::CastOp::create(b, loc, main.getArgument(arg), to));
    auto constIndex = [&](OpBuilder &at, int64_t v) -> Value {
      return arith::ConstantIndexOp::create(at, loc, v);
    };
    // Micro-batch m (an index) with what is carried: the function's results.
    auto microbatch = [&](OpBuilder &at, Value m, ValueRange iter) {
      SmallVector<Value> args;
      for (unsigned i = 0; i < main.getNumArguments(); ++i) {
        Value arg = main.getArgument(i);
        auto updated =
            llvm::find_if(updates, [&](auto &u) { return u.first == i; });
        if (updated != updates.end()) {
          args.push_back(iter[results + (updated - updates.begin())]);
          continue;
        }
        if (!llvm::is_contained(dataArgs, i)) {
          args.push_back(arg);
          continue;
        }
        // Rows [m * rows, (m + 1) * rows) along the batch dimension.
        auto t = cast<RankedTensorType>(arg.getType());
        int64_t d = batchDimOf(i);
        int64_t rows = t.getDimSize(d) / k;
        SmallVector<OpFoldResult> offsets(t.getRank(), at.getIndexAttr(0)),
            sizes, strides(t.getRank(), at.getIndexAttr(1));
        for (int64_t s : t.getShape())
          sizes.push_back(at.getIndexAttr(s));
        sizes[d] = at.getIndexAttr(rows);
        offsets[d] =
            arith::MulIOp::create(at, loc, m, constIndex(at, rows)).getResult();
        SmallVector<int64_t> microShape(t.getShape());
        microShape[d] = rows;
        args.push_back(tensor::ExtractSliceOp::create(
            at, loc, RankedTensorType::get(microShape, t.getElementType()), arg,
            offsets, sizes, strides));
      }
      Value m64 = arith::IndexCastOp::create(at, loc, at.getI64Type(), m);
      args.push_back(tensor::FromElementsOp::create(at, loc, i64Scalar, m64));
      llvm::append_range(args, iter.take_front(results));
      llvm::append_range(args, weightCopies);
      return func::CallOp::create(at, loc, micro, args);
    };
    Operation *last;
    if (loop) {
      last = scf::ForOp::create(
          b, loc, constIndex(b, 0), constIndex(b, k), constIndex(b, 1), carried,
          [&](OpBuilder &lb, Location l, Value m, ValueRange iter) {
            scf::YieldOp::create(lb, l, microbatch(lb, m, iter).getResults());
          });
    } else {
      for (int64_t m = 0; m < k; ++m) {
        last = microbatch(b, constIndex(b, m), carried);
        carried.assign(last->getResults().begin(), last->getResults().end());
      }
    }
    SmallVector<Value> sums(last->getResults().take_front(results));
    // The last micro-batch's updates are the step's.
    if (!updates.empty()) {
      SmallVector<Attribute> names(results, b.getUnitAttr());
      for (auto [arg, v] : updates)
        names.push_back(updatedArgs.lookup(arg));
      last->setAttr("dopt.updates_weights", b.getArrayAttr(names));
    }
    SmallVector<Value> finals;
    Value total = sums[countedAt];
    for (unsigned r = 0; r < results; ++r) {
      if (static_cast<int>(r) == countedAt) {
        finals.push_back(total);
        continue;
      }
      Value t = total;
      Type elt = cast<RankedTensorType>(sums[r].getType()).getElementType();
      if (elt != b.getF32Type())
        t = dopt::CastOp::create(b, loc, t, TypeAttr::get(elt));
      finals.push_back(dopt::DivOp::create(b, loc, sums[r], t));
    }
    func::ReturnOp::create(b, loc, finals);
    // The step's collectives are the plan's K times over
    // (planner::checkBackwardCollectives).
    module->setAttr("dopt.accumulate", b.getI64IntegerAttr(k));
    main.setType(FunctionType::get(ctx, body.getArgumentTypes(),
                                   ValueRange(finals).getTypes()));
  }

  /// Data inputs: the dimension holding the samples (`dopt.batch_dim`).
  llvm::DenseMap<unsigned, int64_t> argBatchDims;
  int64_t batchDimOf(unsigned arg) const { return argBatchDims.lookup(arg); }
};

} // namespace
