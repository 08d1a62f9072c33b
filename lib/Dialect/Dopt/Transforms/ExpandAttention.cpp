//===- ExpandAttention.cpp - dopt.attention over blocks of keys -----------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <algorithm>

#include <limits>

namespace distopt {
#define GEN_PASS_DEF_EXPANDATTENTIONPASS
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A splat constant of `type`.
Value splat(ImplicitLocOpBuilder &b, RankedTensorType type, double v) {
  return dopt::ConstantOp::create(
      b, DenseElementsAttr::get(
             type, b.getFloatAttr(type.getElementType(), v).getValue()));
}

Value scalar(ImplicitLocOpBuilder &b, Type elt, double v) {
  return splat(b, RankedTensorType::get({}, elt), v);
}

Value castTo(ImplicitLocOpBuilder &b, Value v, Type elt) {
  if (typeOf(v).getElementType() == elt)
    return v;
  return dopt::CastOp::create(b, v, TypeAttr::get(elt));
}

/// What one step carries: each query's running maximum and sum of its
/// scores' exponentials ([..., Tq, 1]) and its unnormalised output
/// ([..., Tq, Dv]), in the compute type.
struct Carried {
  Value max, sum, out;
};

struct Expander {
  ImplicitLocOpBuilder &b;
  dopt::AttentionOp op;
  Type elt;     ///< the operands' element type
  Type compute; ///< the softmax's: f32 for 16-bit operands
  int64_t rank;

  /// The scores of keys [offset, offset + size) and the carried values
  /// updated with them. `offset` is a constant or the loop's index.
  Carried step(OpFoldResult offset, int64_t size, Carried in) {
    int64_t keys = typeOf(op.getKey()).getDimSize(rank - 2);
    // Rows [offset, offset + size) of `v` along `axis`, where it has the
    // keys' extent (a mask broadcast along the keys is read whole).
    auto block = [&](Value v, int64_t axis) -> Value {
      if (!v || size == keys)
        return v;
      RankedTensorType t = typeOf(v);
      if (axis < 0 || t.getDimSize(axis) != keys)
        return v;
      SmallVector<OpFoldResult> offsets(t.getRank(), b.getIndexAttr(0)),
          sizes, strides(t.getRank(), b.getIndexAttr(1));
      for (int64_t d : t.getShape())
        sizes.push_back(b.getIndexAttr(d));
      offsets[axis] = offset;
      sizes[axis] = b.getIndexAttr(size);
      return tensor::ExtractSliceOp::create(b, v, offsets, sizes, strides);
    };
    Value key = block(op.getKey(), rank - 2);
    Value value = block(op.getValue(), rank - 2);
    auto maskAxis = [&](Value m) { return m ? typeOf(m).getRank() - 1 : -1; };
    Value keep = block(op.getKeep(), maskAxis(op.getKeep()));
    Value bias = block(op.getBias(), maskAxis(op.getBias()));

    SmallVector<int64_t> swap;
    for (int64_t i = 0; i < rank; ++i)
      swap.push_back(i);
    std::swap(swap[rank - 1], swap[rank - 2]);
    Value keyT =
        dopt::TransposeOp::create(b, key, b.getDenseI64ArrayAttr(swap));
    Value s = castTo(b, dopt::MatMulOp::create(b, op.getQuery(), keyT),
                     compute);
    double scale = op.getScale().convertToDouble();
    if (scale != 1.0)
      s = dopt::MulOp::create(b, s, scalar(b, compute, scale));
    double inf = std::numeric_limits<double>::infinity();
    if (keep)
      s = dopt::WhereOp::create(b, keep, s, scalar(b, compute, -inf));
    if (bias)
      s = dopt::AddOp::create(b, s, castTo(b, bias, compute));
    auto lastAxis = b.getDenseI64ArrayAttr({rank - 1});
    Value blockMax =
        dopt::ReduceMaxOp::create(b, s, lastAxis, b.getBoolAttr(true));
    Value max = dopt::MaxOp::create(b, in.max, blockMax);
    // Where every score so far is -inf (masked), subtract 0: the
    // exponentials are then 0, not exp(-inf + inf) = NaN.
    Value safe = dopt::WhereOp::create(
        b, dopt::EqualOp::create(b, max, scalar(b, compute, -inf)),
        scalar(b, compute, 0.0), max);
    Value p = dopt::ExpOp::create(b, dopt::SubOp::create(b, s, safe));
    Value rescale =
        dopt::ExpOp::create(b, dopt::SubOp::create(b, in.max, safe));
    Value sum = dopt::AddOp::create(
        b, dopt::MulOp::create(b, in.sum, rescale),
        dopt::ReduceSumOp::create(b, p, lastAxis, b.getBoolAttr(true)));
    Value pv = castTo(b, dopt::MatMulOp::create(b, castTo(b, p, elt), value),
                      compute);
    Value out =
        dopt::AddOp::create(b, dopt::MulOp::create(b, in.out, rescale), pv);
    return {max, sum, out};
  }
};

struct ExpandAttentionPass
    : distopt::impl::ExpandAttentionPassBase<ExpandAttentionPass> {
  using ExpandAttentionPassBase::ExpandAttentionPassBase;

  void runOnOperation() override {
    if (block < 1) {
      getOperation().emitError("distopt-expand-attention: block must be at "
                               "least 1, got ")
          << static_cast<int64_t>(block);
      return signalPassFailure();
    }
    SmallVector<dopt::AttentionOp> ops;
    getOperation().walk([&](dopt::AttentionOp op) { ops.push_back(op); });
    for (dopt::AttentionOp op : ops)
      expand(op);
  }

  void expand(dopt::AttentionOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    RankedTensorType q = typeOf(op.getQuery());
    Type elt = q.getElementType();
    Type compute = elt.getIntOrFloatBitWidth() < 32 ? b.getF32Type() : elt;
    int64_t rank = q.getRank();
    int64_t keys = typeOf(op.getKey()).getDimSize(rank - 2);
    Expander x{b, op, elt, compute, rank};

    SmallVector<int64_t> rowShape(q.getShape().drop_back(1));
    rowShape.push_back(1);
    SmallVector<int64_t> outShape(q.getShape().drop_back(1));
    outShape.push_back(typeOf(op.getValue()).getDimSize(rank - 1));
    auto rows = RankedTensorType::get(rowShape, compute);
    Carried c{splat(b, rows, -std::numeric_limits<double>::infinity()),
              splat(b, rows, 0.0),
              splat(b, RankedTensorType::get(outShape, compute), 0.0)};

    int64_t size = std::min<int64_t>(block, keys);
    int64_t full = keys / size, done = 0;
    if (full == 1) {
      c = x.step(b.getIndexAttr(0), size, c);
      done = size;
    } else if (full > 1) {
      Value lb = arith::ConstantIndexOp::create(b, 0);
      Value ub = arith::ConstantIndexOp::create(b, full);
      Value one = arith::ConstantIndexOp::create(b, 1);
      Value stride = arith::ConstantIndexOp::create(b, size);
      auto loop = scf::ForOp::create(
          b, lb, ub, one, ValueRange{c.max, c.sum, c.out},
          [&](OpBuilder &nested, Location loc, Value iv, ValueRange args) {
            ImplicitLocOpBuilder ib(loc, nested);
            Expander inner{ib, op, elt, compute, rank};
            Value offset = arith::MulIOp::create(ib, iv, stride);
            Carried next =
                inner.step(offset, size, {args[0], args[1], args[2]});
            // Each step writes what it carries over what it read, so the
            // loop's buffers are updated in place (bufferization wants a
            // loop's results equivalent to its arguments).
            SmallVector<Value> values = {next.max, next.sum, next.out},
                               yielded;
            for (auto [value, into] : llvm::zip(values, args))
              yielded.push_back(
                  bufferization::MaterializeInDestinationOp::create(ib, value,
                                                                    into)
                      .getResult());
            scf::YieldOp::create(ib, yielded);
          });
      c = {loop.getResult(0), loop.getResult(1), loop.getResult(2)};
      done = full * size;
    }
    if (done < keys)
      c = x.step(b.getIndexAttr(done), keys - done, c);
    Value out = dopt::DivOp::create(b, c.out, c.sum);
    // A row whose every key is masked summed nothing: 0 (else 0/0, NaN).
    if (op.getEmptyRowsZero())
      out = dopt::WhereOp::create(
          b, dopt::EqualOp::create(b, c.sum, scalar(b, compute, 0.0)),
          scalar(b, compute, 0.0), out);
    out = castTo(b, out, elt);
    op.getResult().replaceAllUsesWith(out);
    op.erase();
  }
};

} // namespace
