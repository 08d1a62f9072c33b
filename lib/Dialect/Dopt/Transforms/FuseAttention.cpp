//===- FuseAttention.cpp - an exporter's attention chain as dopt.attention ===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <optional>

namespace distopt {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// Whether `v` is read by `user` alone.
bool onlyFeeds(Value v, Operation *user) {
  return v.hasOneUse() && *v.getUsers().begin() == user;
}

/// The parts of an attention chain, read backwards from its last product.
struct Chain {
  Value query, keyT, value, keep, bias;
  double scale = 1.0;
  /// A where after the softmax zeroes the rows whose every key the bias
  /// masks (ONNX Attention's rule): the value it tests.
  Value emptyRowsOf;
  /// Ops the chain reads that may have no reader left after it (the test
  /// of the empty rows).
  SmallVector<Operation *> maybeDead;
  /// A scale computed at run time (a scalar tensor): the query is
  /// multiplied (or, with `divide`, divided) by it instead.
  Value scaleValue;
  bool divide = false;
  SmallVector<Operation *> ops; ///< the chain's ops, last first
};

/// Matches `matmul(softmax(add?(where?(scale?(matmul(q, kT))))), v)` ending
/// at `product`.
std::optional<Chain> matchChain(dopt::MatMulOp product) {
  Chain c;
  c.value = product.getRhs();
  Value probabilities = product.getLhs();
  Operation *reader = product;
  // where(reduce_max(m, last axis) == -inf, 0, softmax(...)): rows whose
  // every key m masks are 0.
  if (auto zero = probabilities.getDefiningOp<dopt::WhereOp>();
      zero && onlyFeeds(zero.getResult(), product)) {
    std::optional<double> fill = dopt::splatFloatConstant(zero.getLhs());
    auto eq = zero.getCondition().getDefiningOp<dopt::EqualOp>();
    auto max = eq ? eq.getLhs().getDefiningOp<dopt::ReduceMaxOp>()
                  : dopt::ReduceMaxOp();
    std::optional<double> inf =
        eq ? dopt::splatFloatConstant(eq.getRhs()) : std::nullopt;
    if (!fill || *fill != 0.0 || !max || !inf || !std::isinf(*inf) ||
        *inf > 0 || !max.getKeepdims() ||
        max.getAxes() !=
            ArrayRef<int64_t>{
                cast<RankedTensorType>(max.getInput().getType()).getRank() -
                1} ||
        zero.getRhs().getType() != zero.getType())
      return std::nullopt;
    c.emptyRowsOf = max.getInput();
    c.maybeDead = {eq, max};
    probabilities = zero.getRhs();
    reader = zero;
  }
  auto softmax = probabilities.getDefiningOp<dopt::SoftmaxOp>();
  if (!softmax || !onlyFeeds(softmax.getResult(), reader))
    return std::nullopt;
  auto type = cast<RankedTensorType>(softmax.getType());
  if (softmax.getAxis() != type.getRank() - 1 || type.getRank() < 2)
    return std::nullopt;
  c.ops = {product};
  if (reader != product.getOperation())
    c.ops.push_back(reader);
  c.ops.push_back(softmax);
  Value s = softmax.getInput();
  auto step = [&](Operation *op) {
    if (!op || !onlyFeeds(op->getResult(0), c.ops.back()))
      return false;
    c.ops.push_back(op);
    return true;
  };
  // The additive mask: either operand of an add of two tensors of the
  // scores' element type, the other continuing the chain (the one that is
  // a where, a scale or a product).
  if (auto add = s.getDefiningOp<dopt::AddOp>(); add && step(add)) {
    auto continues = [](Value v) {
      Operation *d = v.getDefiningOp();
      return d && isa<dopt::WhereOp, dopt::MulOp, dopt::DivOp, dopt::MatMulOp>(
                      d);
    };
    bool lhs = continues(add.getLhs());
    s = lhs ? add.getLhs() : add.getRhs();
    c.bias = lhs ? add.getRhs() : add.getLhs();
    if (!continues(s) || s.getType() != add.getType())
      return std::nullopt;
  }
  if (auto where = s.getDefiningOp<dopt::WhereOp>(); where && step(where)) {
    std::optional<double> fill = dopt::splatFloatConstant(where.getRhs());
    if (!fill || !(std::isinf(*fill) ? *fill < 0 : *fill <= -1e30) ||
        where.getLhs().getType() != where.getType())
      return std::nullopt;
    c.keep = where.getCondition();
    s = where.getLhs();
  }
  // A scalar: every dimension 1 (a rank-0 tensor, or one that broadcasts as
  // a scalar does).
  auto isScalar = [](Value v) {
    return llvm::all_of(cast<RankedTensorType>(v.getType()).getShape(),
                        [](int64_t d) { return d == 1; });
  };
  if (auto mul = s.getDefiningOp<dopt::MulOp>(); mul && step(mul)) {
    Value factor = mul.getRhs(), other = mul.getLhs();
    if (!isScalar(factor))
      std::swap(factor, other);
    if (!isScalar(factor) || other.getType() != mul.getType())
      return std::nullopt;
    if (std::optional<double> k = dopt::splatFloatConstant(factor))
      c.scale = *k;
    else
      c.scaleValue = factor;
    s = other;
  } else if (auto div = s.getDefiningOp<dopt::DivOp>(); div && step(div)) {
    if (!isScalar(div.getRhs()) || div.getLhs().getType() != div.getType())
      return std::nullopt;
    std::optional<double> k = dopt::splatFloatConstant(div.getRhs());
    if (k && *k == 0)
      return std::nullopt;
    if (k)
      c.scale = 1.0 / *k;
    else
      c.scaleValue = div.getRhs(), c.divide = true;
    s = div.getLhs();
  }
  auto scores = s.getDefiningOp<dopt::MatMulOp>();
  if (!scores || !step(scores))
    return std::nullopt;
  // The rows zeroed must be those the bias masks whole, with no keep mask
  // beside it.
  if (c.emptyRowsOf && (c.emptyRowsOf != c.bias || c.keep))
    return std::nullopt;
  c.query = scores.getLhs();
  c.keyT = scores.getRhs();
  return c;
}

struct FuseAttentionPass
    : distopt::impl::FuseAttentionPassBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<dopt::MatMulOp> products;
    getOperation().walk([&](dopt::MatMulOp m) { products.push_back(m); });
    for (dopt::MatMulOp product : products) {
      if (!product->getBlock())
        continue; // erased as part of an earlier chain
      std::optional<Chain> c = matchChain(product);
      if (!c)
        continue;
      auto q = cast<RankedTensorType>(c->query.getType());
      auto kT = cast<RankedTensorType>(c->keyT.getType());
      auto v = cast<RankedTensorType>(c->value.getType());
      int64_t r = q.getRank();
      if (kT.getRank() != r || v.getRank() != r ||
          q.getShape().drop_back(2) != kT.getShape().drop_back(2) ||
          q.getShape().drop_back(2) != v.getShape().drop_back(2) ||
          !isa<FloatType>(q.getElementType()))
        continue;
      // A run-time scale of the query's type that does not broadcast it.
      if (auto t = c->scaleValue
                       ? cast<RankedTensorType>(c->scaleValue.getType())
                       : RankedTensorType();
          t && (t.getElementType() != q.getElementType() || t.getRank() > r))
        continue;
      OpBuilder b(product);
      Location loc = product.getLoc();
      // The key: the transpose's operand, or the transpose of kᵀ.
      SmallVector<int64_t> swap;
      for (int64_t i = 0; i < r; ++i)
        swap.push_back(i);
      std::swap(swap[r - 1], swap[r - 2]);
      Value key;
      auto t = c->keyT.getDefiningOp<dopt::TransposeOp>();
      if (t && t.getPerm() == ArrayRef<int64_t>(swap))
        key = t.getInput();
      else
        key = dopt::TransposeOp::create(b, loc, c->keyT,
                                        b.getDenseI64ArrayAttr(swap));
      // A scale computed at run time scales the query: (q / c)·kᵀ is
      // q·kᵀ / c up to rounding.
      Value query = c->query;
      if (c->scaleValue && c->divide)
        query = dopt::DivOp::create(b, loc, query, c->scaleValue);
      else if (c->scaleValue)
        query = dopt::MulOp::create(b, loc, query, c->scaleValue);
      auto attention = dopt::AttentionOp::create(
          b, loc, query, key, c->value, c->keep, c->bias,
          b.getF64FloatAttr(c->scale),
          c->emptyRowsOf ? b.getUnitAttr() : UnitAttr());
      product.getResult().replaceAllUsesWith(attention.getResult());
      for (Operation *op : c->ops)
        op->erase();
      for (Operation *op : c->maybeDead)
        if (op->use_empty())
          op->erase();
      if (t && t->use_empty())
        t->erase();
    }
  }
};

} // namespace
