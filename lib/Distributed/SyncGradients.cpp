//===- SyncGradients.cpp - data-parallel gradient all-reduce --------------===//
//
// distopt-sync-gradients: after distopt-autodiff on the program of one
// data-parallel replica, each `grad:<weight>` result is this replica's
// share of the gradient (its samples' part of the loss). The weights are
// replicated over the grid's data axis, so the gradient is the sum of the
// shares over that axis: this pass all-reduces them.
//
// As the best data-parallel systems do, the gradients travel in buckets:
// taken in the order backward produces them (the last layer's first), each
// bucket gathers gradients until it holds `bucket-bytes`, is flattened into
// one buffer, all-reduced once, and split back. Its all-reduce starts right
// after its last gradient is produced (`dopt.async`: the runtime runs it on
// its communication thread) and is waited for only where the update first
// reads it, before the return: the rest of backward overlaps it. The order
// of the buckets is fixed at compile time and the same on every replica.
// Fewer, larger messages pay the collective's latency fewer times.
//
// `grad-dtype` f16 or bf16 sends the buckets in 16 bits, the seed's cure for
// saturated links: each replica's share is scaled by 1/replicas first (the
// sum is then an average, which cannot overflow f16 where the shares did
// not), and the sum is cast back to f32 and scaled back.
//
//===----------------------------------------------------------------------===//

#include "distopt/Distributed/Passes.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"
#include "distopt/Distributed/ZeroSharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"

namespace distopt {
#define GEN_PASS_DEF_SYNCGRADIENTSPASS
#include "distopt/Distributed/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

struct SyncGradientsPass
    : public distopt::impl::SyncGradientsPassBase<SyncGradientsPass> {
  using SyncGradientsPassBase::SyncGradientsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto gridOp = module.lookupSymbol<shard::GridOp>(grid::kName);
    if (!gridOp)
      return; // not partitioned: one process holds the whole gradient
    ArrayRef<int64_t> shape = gridOp.getShape();
    if (shape.size() <= size_t(grid::kDataAxis) ||
        shape[grid::kDataAxis] == 1)
      return;
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal() || !main.getBody().hasOneBlock()) {
      module.emitError("distopt-sync-gradients needs a single-block @main");
      return signalPassFailure();
    }
    if (zeroStage != 0 && zeroStage != 1) {
      main.emitError("distopt-sync-gradients: zero-stage must be 0 or 1, got ")
          << static_cast<int>(zeroStage);
      return signalPassFailure();
    }
    if (bucketBytes < 1) {
      main.emitError("distopt-sync-gradients: bucket-bytes must be at least "
                     "1, got ")
          << static_cast<int64_t>(bucketBytes);
      return signalPassFailure();
    }
    Type f32 = Float32Type::get(module.getContext());
    Type wire;
    if (gradDtype == "f32")
      wire = f32;
    else if (gradDtype == "f16")
      wire = Float16Type::get(module.getContext());
    else if (gradDtype == "bf16")
      wire = BFloat16Type::get(module.getContext());
    else {
      main.emitError("distopt-sync-gradients: grad-dtype must be f32, f16 or "
                     "bf16, got '")
          << gradDtype << "'";
      return signalPassFailure();
    }
    int64_t replicas = shape[grid::kDataAxis];
    Block &body = main.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    // The gradients, in the order they are produced (block order of their
    // defining ops; an argument first).
    struct Grad {
      unsigned result;
      Value value;
      int64_t bytes;
    };
    SmallVector<Grad> grads;
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      if (!main.getResultAttr(i, "dopt.grad_of"))
        continue;
      Value g = ret.getOperand(i);
      auto type = cast<RankedTensorType>(g.getType());
      // Bytes on the wire.
      Type sent = type.getElementType() == f32 ? wire : type.getElementType();
      grads.push_back({i, g,
                       type.getNumElements() *
                           int64_t(sent.getIntOrFloatBitWidth() / 8)});
    }
    if (grads.empty())
      return;
    llvm::stable_sort(grads, [&](const Grad &a, const Grad &b) {
      Operation *x = a.value.getDefiningOp(), *y = b.value.getDefiningOp();
      if (!x || !y)
        return !x && y;
      return x->isBeforeInBlock(y);
    });

    // Buckets: consecutive gradients of one element type up to the size.
    SmallVector<SmallVector<Grad>> buckets;
    int64_t filled = 0;
    for (const Grad &g : grads) {
      Type elt = cast<RankedTensorType>(g.value.getType()).getElementType();
      bool fits = !buckets.empty() && filled + g.bytes <= bucketBytes &&
                  cast<RankedTensorType>(buckets.back().front().value.getType())
                          .getElementType() == elt;
      if (!fits) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(g);
      filled += g.bytes;
    }

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    auto gridRef = FlatSymbolRefAttr::get(ctx, grid::kName);
    auto axes = b.getDenseI16ArrayAttr({grid::kDataAxis});
    auto sum = shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum);
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      // After the bucket's last gradient.
      Operation *last = bucket.back().value.getDefiningOp();
      if (last)
        b.setInsertionPointAfter(last);
      else
        b.setInsertionPointToStart(&body);
      Location loc = bucket.back().value.getLoc();
      auto scaled = [&](Value v, double factor) -> Value {
        auto type = cast<RankedTensorType>(v.getType());
        Value c = dopt::ConstantOp::create(
            b, loc,
            DenseElementsAttr::get(
                RankedTensorType::get({}, type.getElementType()),
                b.getFloatAttr(type.getElementType(), factor)));
        return dopt::MulOp::create(b, loc, v, c);
      };
      // The bucket's collective over `v`, which `make` builds on the value
      // sent (f32 sent narrower: scaled down first, back up after). It
      // starts here (dopt.async); what reads its result is built before
      // the return, so the backward in between overlaps it.
      auto collective = [&](Value v,
                            function_ref<Operation *(Value)> make) -> Value {
        auto type = cast<RankedTensorType>(v.getType());
        bool narrow = type.getElementType() == f32 && wire != f32;
        if (narrow)
          v = dopt::CastOp::create(b, loc, scaled(v, 1.0 / double(replicas)),
                                   TypeAttr::get(wire));
        Operation *op = make(v);
        op->setAttr("dopt.bucket", b.getI64IntegerAttr(int64_t(k)));
        op->setAttr("dopt.async", b.getUnitAttr());
        Value r = op->getResult(0);
        b.setInsertionPoint(ret);
        if (narrow)
          r = scaled(dopt::CastOp::create(b, loc, r, TypeAttr::get(f32)),
                     double(replicas));
        return r;
      };
      auto reduce = [&](Value v) {
        return collective(v, [&](Value sent) -> Operation * {
          return shard::AllReduceOp::create(b, loc, sent.getType(), gridRef,
                                            axes, sent, sum);
        });
      };
      if (zeroStage == 1) {
        // Each gradient as [replicas, chunk], joined along the chunks,
        // reduce-scattered: row r of the sum is replica r's chunks.
        SmallVector<Value> rows;
        SmallVector<int64_t> chunks;
        int64_t total = 0;
        for (const Grad &g : bucket) {
          rows.push_back(zero::toChunks(b, loc, g.value, replicas));
          chunks.push_back(cast<RankedTensorType>(rows.back().getType())
                               .getDimSize(1));
          total += chunks.back();
        }
        Value joined = rows.size() == 1
                           ? rows[0]
                           : Value(dopt::ConcatOp::create(
                                 b, loc, rows, b.getI64IntegerAttr(1)));
        Value mine = collective(joined, [&](Value sent) -> Operation * {
          return shard::ReduceScatterOp::create(
              b, loc,
              RankedTensorType::get(
                  {1, total},
                  cast<RankedTensorType>(sent.getType()).getElementType()),
              gridRef, axes, sent, sum, b.getIndexAttr(0));
        });
        SmallVector<Value> pieces{mine};
        if (bucket.size() > 1) {
          auto split = dopt::SplitOp::create(b, loc, mine,
                                             b.getI64IntegerAttr(1),
                                             b.getDenseI64ArrayAttr(chunks));
          pieces.assign(split.getResults().begin(), split.getResults().end());
        }
        for (auto [g, piece, c] : llvm::zip(bucket, pieces, chunks)) {
          ret.setOperand(g.result,
                         dopt::ReshapeOp::create(b, loc, piece,
                                                 b.getDenseI64ArrayAttr({c})));
          main.setResultAttr(g.result, zero::kShardAttr, b.getUnitAttr());
        }
        continue;
      }
      if (bucket.size() == 1) {
        ret.setOperand(bucket[0].result, reduce(bucket[0].value));
        continue;
      }
      SmallVector<Value> flat;
      SmallVector<int64_t> sizes;
      for (const Grad &g : bucket) {
        int64_t n = cast<RankedTensorType>(g.value.getType()).getNumElements();
        flat.push_back(dopt::ReshapeOp::create(b, loc, g.value,
                                               b.getDenseI64ArrayAttr({n})));
        sizes.push_back(n);
      }
      Value joined = dopt::ConcatOp::create(b, loc, flat, b.getI64IntegerAttr(0));
      Value reduced = reduce(joined);
      auto split = dopt::SplitOp::create(b, loc, reduced, b.getI64IntegerAttr(0),
                                         b.getDenseI64ArrayAttr(sizes));
      for (auto [g, piece] : llvm::zip(bucket, split.getResults())) {
        auto type = cast<RankedTensorType>(g.value.getType());
        ret.setOperand(g.result,
                       dopt::ReshapeOp::create(
                           b, loc, piece,
                           b.getDenseI64ArrayAttr(type.getShape())));
      }
    }
    main.setType(FunctionType::get(module.getContext(),
                                   main.getArgumentTypes(),
                                   ret.getOperandTypes()));
  }
};

} // namespace
