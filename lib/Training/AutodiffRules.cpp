//===- AutodiffRules.cpp - the gradient of each dopt op --------------------===//
//
// Vector-Jacobian products, one per op kind, built from dopt ops (so the
// backward program is planned, partitioned and compiled like any other).
// Notation: g is the adjoint of the op's result y; x, a, b its operands.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/Autodiff.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/DenseMap.h"

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace distopt;

namespace {

using Adjoints = SmallVectorImpl<Value>;
using RuleFn = std::function<LogicalResult(ImplicitLocOpBuilder &, Operation *,
                                           ArrayRef<Value>, Adjoints &)>;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloat(Value v) { return isa<FloatType>(typeOf(v).getElementType()); }

/// A 0-d constant of `like`'s element type (broadcasts in binary ops).
Value scalar(ImplicitLocOpBuilder &b, Value like, double v) {
  Type elt = typeOf(like).getElementType();
  auto t = RankedTensorType::get({}, elt);
  return dopt::ConstantOp::create(
      b, DenseElementsAttr::get(t, b.getFloatAttr(elt, v)));
}

/// The ranks a collective of `op` over grid `axes` of its module's grid
/// spans.
int64_t ranksOver(Operation *op, ArrayRef<int16_t> axes) {
  auto grid = op->getParentOfType<ModuleOp>().lookupSymbol<shard::GridOp>(
      grid::kName);
  int64_t n = 1;
  if (grid)
    for (int16_t a : axes)
      if (a >= 0 && static_cast<size_t>(a) < grid.getShape().size())
        n *= grid.getShape()[a];
  return n;
}

Value reduceSum(ImplicitLocOpBuilder &b, Value v, ArrayRef<int64_t> axes,
                bool keepdims) {
  return dopt::ReduceSumOp::create(b, v, b.getDenseI64ArrayAttr(axes),
                                   b.getBoolAttr(keepdims));
}

Value reshape(ImplicitLocOpBuilder &b, Value v, ArrayRef<int64_t> shape) {
  if (typeOf(v).getShape() == shape)
    return v;
  return dopt::ReshapeOp::create(b, v, b.getDenseI64ArrayAttr(shape));
}

/// Swaps the last two dimensions.
Value transposeLast2(ImplicitLocOpBuilder &b, Value v) {
  int64_t r = typeOf(v).getRank();
  SmallVector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[r - 1], perm[r - 2]);
  return dopt::TransposeOp::create(b, v, b.getDenseI64ArrayAttr(perm));
}

/// The reduced adjoint g (reduced over `axes` of x, with or without kept
/// dimensions) broadcast back to x's shape.
Value spread(ImplicitLocOpBuilder &b, Value g, RankedTensorType x,
             ArrayRef<int64_t> axes) {
  SmallVector<int64_t> kept(x.getShape());
  for (int64_t a : axes)
    kept[a] = 1;
  if (axes.empty()) // no reduction: the identity
    return g;
  return dopt::ExpandOp::create(b, reshape(b, g, kept),
                                b.getDenseI64ArrayAttr(x.getShape()));
}

Value neg(ImplicitLocOpBuilder &b, Value v) { return dopt::NegOp::create(b, v); }
Value mul(ImplicitLocOpBuilder &b, Value x, Value y) {
  return dopt::MulOp::create(b, x, y);
}
Value div(ImplicitLocOpBuilder &b, Value x, Value y) {
  return dopt::DivOp::create(b, x, y);
}
Value add(ImplicitLocOpBuilder &b, Value x, Value y) {
  return dopt::AddOp::create(b, x, y);
}
Value sub(ImplicitLocOpBuilder &b, Value x, Value y) {
  return dopt::SubOp::create(b, x, y);
}

/// op(x) @ op(y) where op transposes the last two dimensions when asked: a
/// gemm with transpose flags for matrices (the BLAS call reads them
/// transposed, nothing is copied), a batched product of explicit
/// transposes otherwise.
Value product(ImplicitLocOpBuilder &b, Value x, bool tx, Value y, bool ty,
              double alpha = 1.0) {
  if (typeOf(x).getRank() == 2 && typeOf(y).getRank() == 2)
    return dopt::GemmOp::create(b, x, y, Value(), b.getF32FloatAttr(alpha),
                                b.getF32FloatAttr(1.0), b.getBoolAttr(tx),
                                b.getBoolAttr(ty));
  Value r = dopt::MatMulOp::create(b, tx ? transposeLast2(b, x) : x,
                                   ty ? transposeLast2(b, y) : y);
  return alpha == 1.0 ? r : mul(b, r, scalar(b, r, alpha));
}

/// Adjoint of a matrix product's operands, NumPy semantics: 1-D operands
/// are promoted, batch dimensions broadcast (and are summed back).
void matmulGrad(ImplicitLocOpBuilder &b, Value a, Value bb, Value g,
                Adjoints &out) {
  RankedTensorType at = typeOf(a), bt = typeOf(bb);
  Value a2 = a, b2 = bb, g2 = g;
  SmallVector<int64_t> gShape(typeOf(g).getShape());
  if (at.getRank() == 1) { // [K] -> [1, K]; g lacks M
    a2 = reshape(b, a, {1, at.getDimSize(0)});
    gShape.insert(gShape.end() - (bt.getRank() == 1 ? 0 : 1), 1);
  }
  if (bt.getRank() == 1) { // [K] -> [K, 1]; g lacks N
    b2 = reshape(b, bb, {bt.getDimSize(0), 1});
    gShape.push_back(1);
  }
  g2 = reshape(b, g, gShape);
  Value ga = product(b, g2, false, b2, true);
  Value gb = product(b, a2, true, g2, false);
  // Batch broadcasting: sum back to the promoted operand, then unpromote.
  ga = autodiff::unbroadcast(b, b.getLoc(), ga, typeOf(a2));
  gb = autodiff::unbroadcast(b, b.getLoc(), gb, typeOf(b2));
  out.push_back(reshape(b, ga, at.getShape()));
  out.push_back(reshape(b, gb, bt.getShape()));
}

/// `v` padded with zeros (a positive entry) or cropped (a negative one) by
/// `begin`/`end` elements at the two ends of each dimension.
Value padOrCrop(ImplicitLocOpBuilder &b, Value v, ArrayRef<int64_t> begin,
                ArrayRef<int64_t> end) {
  // Padded first, then cropped: a crop at one end may reach into the
  // padding added at the other.
  ArrayRef<int64_t> shape = typeOf(v).getShape();
  int64_t r = shape.size();
  SmallVector<int64_t> pads(2 * r, 0), starts(r, 0), ends(r), steps(r, 1);
  bool pad = false, crop = false;
  for (int64_t i = 0; i < r; ++i) {
    pads[i] = std::max<int64_t>(begin[i], 0);
    pads[r + i] = std::max<int64_t>(end[i], 0);
    pad = pad || pads[i] > 0 || pads[r + i] > 0;
    starts[i] = std::max<int64_t>(-begin[i], 0);
    ends[i] = shape[i] + pads[i] + pads[r + i] - std::max<int64_t>(-end[i], 0);
    crop = crop || begin[i] < 0 || end[i] < 0;
  }
  if (pad)
    v = dopt::PadOp::create(b, v, b.getDenseI64ArrayAttr(pads),
                            b.getStringAttr("constant"),
                            b.getF64FloatAttr(0.0));
  if (crop)
    v = dopt::SliceOp::create(b, v, b.getDenseI64ArrayAttr(starts),
                              b.getDenseI64ArrayAttr(ends),
                              b.getDenseI64ArrayAttr(steps));
  return v;
}

/// `v` with factors[i] - 1 zeros between neighbouring entries of each
/// dimension i: size (d - 1)·factors[i] + 1 (0 stays 0).
Value dilateAxes(ImplicitLocOpBuilder &b, Value v, ArrayRef<int64_t> factors) {
  if (llvm::all_of(factors, [](int64_t f) { return f == 1; }))
    return v;
  ArrayRef<int64_t> s = typeOf(v).getShape();
  // Each entry followed by its zeros (a size-1 axis after each dilated one,
  // padded), then the trailing zeros cut.
  SmallVector<int64_t> split, padEnds, merged, ends;
  for (auto [d, f] : llvm::zip(s, factors)) {
    split.push_back(d);
    padEnds.push_back(0);
    if (f != 1) {
      split.push_back(1);
      padEnds.push_back(f - 1);
    }
    merged.push_back(d * f);
    ends.push_back(d == 0 ? 0 : (d - 1) * f + 1);
  }
  SmallVector<int64_t> pads(padEnds.size(), 0);
  pads.append(padEnds);
  v = reshape(b, v, split);
  v = dopt::PadOp::create(b, v, b.getDenseI64ArrayAttr(pads),
                          b.getStringAttr("constant"), b.getF64FloatAttr(0.0));
  v = reshape(b, v, merged);
  return dopt::SliceOp::create(
      b, v, b.getDenseI64ArrayAttr(SmallVector<int64_t>(s.size(), 0)),
      b.getDenseI64ArrayAttr(ends),
      b.getDenseI64ArrayAttr(SmallVector<int64_t>(s.size(), 1)));
}

/// The NCHW tensor `v` with sh - 1 (sw - 1) zero rows (columns) between
/// neighbouring rows (columns): [N, C, (H-1)·sh + 1, (W-1)·sw + 1].
Value dilateSpatial(ImplicitLocOpBuilder &b, Value v, int64_t sh, int64_t sw) {
  return dilateAxes(b, v, {1, 1, sh, sw});
}

/// The input adjoint of y = conv(x, w; strides st, pads pd, dilations dl,
/// groups G), x of shape `xs`: the transposed convolution of g with the same
/// weight and parameters (a backward-data convolution: cuDNN's on a GPU),
/// its output padding what the strides skipped at the end of x.
Value convInputGrad(ImplicitLocOpBuilder &b, Value g, Value w,
                    ArrayRef<int64_t> xs, ArrayRef<int64_t> st,
                    ArrayRef<int64_t> pd, ArrayRef<int64_t> dl,
                    int64_t groups) {
  auto ws = typeOf(w).getShape(), gsz = typeOf(g).getShape();
  SmallVector<int64_t> outPad;
  for (int i = 0; i < 2; ++i)
    outPad.push_back(xs[2 + i] - dopt::transposedOutputSize(
                                     gsz[2 + i], ws[2 + i], st[i], pd[i],
                                     pd[2 + i], dl[i], 0));
  return dopt::ConvTransposeOp::create(
      b, g, w, Value(), b.getDenseI64ArrayAttr(st), b.getDenseI64ArrayAttr(pd),
      b.getDenseI64ArrayAttr(dl), b.getDenseI64ArrayAttr(outPad),
      b.getI64IntegerAttr(groups));
}

/// The weight adjoint of the same convolution, w of shape `ws`: N becomes
/// the contraction. Each group's input channels become the batch and its
/// samples the channels, [C/G, G·N, H, W]; g per group [F, N, h, w]; a
/// convolution with groups G, strides dl, dilations st, pads pd gives
/// [C/G, F, ...], cut to the kernel and transposed to [F, C/G, kh, kw].
Value convWeightGrad(ImplicitLocOpBuilder &b, Value x, Value g,
                     ArrayRef<int64_t> ws, ArrayRef<int64_t> st,
                     ArrayRef<int64_t> pd, ArrayRef<int64_t> dl,
                     int64_t groups) {
  auto xs = typeOf(x).getShape(), gsz = typeOf(g).getShape();
  auto swap = b.getDenseI64ArrayAttr({1, 0, 2, 3});
  Value xt, gt;
  if (groups == 1) {
    xt = dopt::TransposeOp::create(b, x, swap);
    gt = dopt::TransposeOp::create(b, g, swap);
  } else {
    int64_t n = xs[0], c = xs[1] / groups, f = gsz[1] / groups;
    Value v = reshape(b, x, {n, groups, c, xs[2], xs[3]});
    v = dopt::TransposeOp::create(b, v, b.getDenseI64ArrayAttr({2, 1, 0, 3, 4}));
    xt = reshape(b, v, {c, groups * n, xs[2], xs[3]});
    Value u = reshape(b, g, {n, groups, f, gsz[2], gsz[3]});
    u = dopt::TransposeOp::create(b, u, b.getDenseI64ArrayAttr({1, 2, 0, 3, 4}));
    gt = reshape(b, u, {groups * f, n, gsz[2], gsz[3]});
  }
  Value r = dopt::ConvOp::create(b, xt, gt, Value(), b.getDenseI64ArrayAttr(dl),
                                 b.getDenseI64ArrayAttr(pd),
                                 b.getDenseI64ArrayAttr(st),
                                 b.getI64IntegerAttr(groups));
  auto rs = typeOf(r).getShape();
  if (rs[2] != ws[2] || rs[3] != ws[3])
    r = dopt::SliceOp::create(b, r, b.getDenseI64ArrayAttr({0, 0, 0, 0}),
                              b.getDenseI64ArrayAttr({rs[0], rs[1], ws[2], ws[3]}),
                              b.getDenseI64ArrayAttr({1, 1, 1, 1}));
  return dopt::TransposeOp::create(b, r, swap);
}

/// The rules, by op class; each op in the table gets GradientModel attached
/// (registerOpModels).
struct RuleTable {
  llvm::DenseMap<TypeID, RuleFn> rules;
  /// Attaches the model to each op of the table in a dialect (by namespace).
  llvm::SmallVector<std::pair<StringRef, void (*)(MLIRContext *)>> attach;

  template <typename OpT> RuleFn &at();
};

const RuleTable &ruleTable();

/// Asks the table for OpT's rule: every stage asks dopt::GradientOpInterface.
template <typename OpT>
struct GradientModel
    : dopt::GradientOpInterface::ExternalModel<GradientModel<OpT>, OpT> {
  LogicalResult buildGradient(Operation *op, ImplicitLocOpBuilder &b,
                              ArrayRef<Value> resultGrads,
                              SmallVectorImpl<Value> &operandGrads) const {
    return ruleTable()
        .rules.find(TypeID::get<OpT>())
        ->second(b, op, resultGrads, operandGrads);
  }
};

template <typename OpT> RuleFn &RuleTable::at() {
  attach.emplace_back(OpT::getOperationName().split('.').first,
                      [](MLIRContext *ctx) {
                        OpT::template attachInterface<GradientModel<OpT>>(*ctx);
                      });
  return rules[TypeID::get<OpT>()];
}

const RuleTable &ruleTable() {
  static const RuleTable table = [] {
    RuleTable t;
    auto binary = [](auto fn) {
      return [fn](ImplicitLocOpBuilder &b, Operation *op, ArrayRef<Value> gs,
                  Adjoints &out) -> LogicalResult {
        Value x = op->getOperand(0), y = op->getOperand(1), g = gs[0];
        auto [gx, gy] = fn(b, x, y, op->getResult(0), g);
        out.push_back(gx ? autodiff::unbroadcast(b, b.getLoc(), gx, typeOf(x))
                         : Value());
        out.push_back(gy ? autodiff::unbroadcast(b, b.getLoc(), gy, typeOf(y))
                         : Value());
        return success();
      };
    };
    auto unary = [](auto fn) {
      return [fn](ImplicitLocOpBuilder &b, Operation *op, ArrayRef<Value> gs,
                  Adjoints &out) -> LogicalResult {
        out.push_back(fn(b, op->getOperand(0), op->getResult(0), gs[0]));
        return success();
      };
    };
    using B = ImplicitLocOpBuilder;
    using P = std::pair<Value, Value>;
    t.at<dopt::AddOp>() = binary([](B &, Value, Value, Value, Value g) {
      return P{g, g};
    });
    t.at<dopt::SubOp>() = binary([](B &b, Value, Value, Value, Value g) {
      return P{g, neg(b, g)};
    });
    t.at<dopt::MulOp>() = binary([](B &b, Value x, Value y, Value, Value g) {
      return P{mul(b, g, y), mul(b, g, x)};
    });
    // max/min (Clip, ReLU6): the adjoint goes to the operand selected, the
    // first one on ties (as torch.clamp passes it to its input at the
    // bounds). The mask and g broadcast to the result's shape; unbroadcast
    // sums back.
    auto selected = [](bool isMax) {
      return [isMax](B &b, Value x, Value y, Value, Value g) {
        Value first = isMax ? Value(dopt::GreaterEqualOp::create(b, x, y))
                            : Value(dopt::LessEqualOp::create(b, x, y));
        Value zero = scalar(b, g, 0.0);
        return P{dopt::WhereOp::create(b, first, g, zero),
                 dopt::WhereOp::create(b, first, zero, g)};
      };
    };
    t.at<dopt::MaxOp>() = binary(selected(true));
    t.at<dopt::MinOp>() = binary(selected(false));
    t.at<dopt::DivOp>() = binary([](B &b, Value, Value y, Value r, Value g) {
      Value gx = div(b, g, y);
      return P{gx, neg(b, mul(b, gx, r))}; // d(x/y)/dy = -(x/y)/y
    });
    // y = x^e: dy/dx = e x^(e-1) (x^(e-1) as y/x would divide by zero);
    // dy/de = y ln x (only where e is a float that depends on a weight).
    t.at<dopt::PowOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                             Adjoints &out) -> LogicalResult {
      Value x = op->getOperand(0), e = op->getOperand(1), y = op->getResult(0);
      Value g = gs[0];
      Value eAsX = isFloat(e) && typeOf(e).getElementType() ==
                                     typeOf(x).getElementType()
                       ? e
                       : dopt::CastOp::create(
                             b, e, TypeAttr::get(typeOf(x).getElementType()));
      Value em1 = sub(b, eAsX, scalar(b, eAsX, 1.0));
      Value dx = mul(b, eAsX, dopt::PowOp::create(b, x, em1));
      out.push_back(autodiff::unbroadcast(b, b.getLoc(), mul(b, g, dx), typeOf(x)));
      if (isFloat(e)) {
        Value de = mul(b, g, mul(b, y, dopt::LogOp::create(b, x)));
        if (typeOf(de).getElementType() != typeOf(e).getElementType())
          de = dopt::CastOp::create(b, de,
                                    TypeAttr::get(typeOf(e).getElementType()));
        out.push_back(autodiff::unbroadcast(b, b.getLoc(), de, typeOf(e)));
      } else {
        out.push_back(Value());
      }
      return success();
    };
    t.at<dopt::ErfOp>() = unary([](B &b, Value x, Value, Value g) {
      // d erf(x)/dx = 2/sqrt(pi) exp(-x^2)
      Value e = dopt::ExpOp::create(b, neg(b, mul(b, x, x)));
      return mul(b, g, mul(b, e, scalar(b, x, 2.0 / std::sqrt(M_PI))));
    });
    // Split: the pieces' adjoints side by side (zeros for a piece the loss
    // does not use); concat: each input's slice of the adjoint.
    t.at<dopt::SplitOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                               Adjoints &out) -> LogicalResult {
      auto sp = cast<dopt::SplitOp>(op);
      SmallVector<Value> pieces;
      for (auto [r, g] : llvm::zip(op->getResults(), gs)) {
        auto t = typeOf(r);
        pieces.push_back(g ? g
                           : Value(dopt::ConstantOp::create(
                                 b, DenseElementsAttr::get(
                                        t, b.getFloatAttr(t.getElementType(), 0.0)))));
      }
      out.push_back(dopt::ConcatOp::create(b, pieces,
                                           b.getI64IntegerAttr(sp.getAxis())));
      return success();
    };
    t.at<dopt::ConcatOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                Adjoints &out) -> LogicalResult {
      int64_t axis = cast<dopt::ConcatOp>(op).getAxis();
      RankedTensorType gt = typeOf(gs[0]);
      int64_t offset = 0;
      for (Value in : op->getOperands()) {
        RankedTensorType it = typeOf(in);
        SmallVector<int64_t> starts(gt.getRank(), 0), ends(gt.getShape()),
            steps(gt.getRank(), 1);
        starts[axis] = offset;
        ends[axis] = offset + it.getDimSize(axis);
        offset = ends[axis];
        out.push_back(isFloat(in) ? Value(dopt::SliceOp::create(
                                        b, gs[0], b.getDenseI64ArrayAttr(starts),
                                        b.getDenseI64ArrayAttr(ends),
                                        b.getDenseI64ArrayAttr(steps)))
                                  : Value());
      }
      return success();
    };
    // Layer norm over axes axis..rank-1, x^ = (x - mean) / sqrt(var + eps):
    // dx = (g s - mean(g s) - x^ mean(g s x^)) / sqrt(var + eps),
    // dscale = sum(g x^), dbias = sum(g) over what broadcast them.
    t.at<dopt::LayerNormOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      auto ln = cast<dopt::LayerNormOp>(op);
      Value x = ln.getInput(), g = gs[0];
      int64_t rank = typeOf(x).getRank();
      SmallVector<int64_t> axes;
      for (int64_t a = ln.getAxis(); a < rank; ++a)
        axes.push_back(a);
      auto mean = [&](Value v) {
        return dopt::ReduceMeanOp::create(b, v, b.getDenseI64ArrayAttr(axes),
                                          b.getBoolAttr(true));
      };
      Value xc = sub(b, x, mean(x));
      Value var = mean(mul(b, xc, xc));
      Value rstd = dopt::ReciprocalOp::create(
          b, dopt::SqrtOp::create(
                 b, add(b, var, scalar(b, var,
                                       ln.getEpsilon().convertToDouble()))));
      Value xhat = mul(b, xc, rstd);
      Value gh = mul(b, g, ln.getScale());
      Value dx = mul(b, rstd, sub(b, sub(b, gh, mean(gh)),
                                  mul(b, xhat, mean(mul(b, gh, xhat)))));
      out.push_back(dx);
      out.push_back(autodiff::unbroadcast(b, b.getLoc(), mul(b, g, xhat),
                                          typeOf(ln.getScale())));
      if (Value bias = ln.getBias())
        out.push_back(autodiff::unbroadcast(b, b.getLoc(), g, typeOf(bias)));
      return success();
    };
    // Gather along an axis (an embedding lookup): the adjoint is added back
    // at each gathered index -- a scatter-add, written as a product with the
    // one-hot matrix of the indices: d data[p, a, r] = sum_s [I_s = a] g[p, s, r].
    t.at<dopt::GatherOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                Adjoints &out) -> LogicalResult {
      auto ga = cast<dopt::GatherOp>(op);
      Value data = ga.getData(), idx = ga.getIndices(), g = gs[0];
      RankedTensorType dt = typeOf(data), it = typeOf(idx);
      int64_t axis = ga.getAxis(), extent = dt.getDimSize(axis);
      auto product = [](ArrayRef<int64_t> dims) {
        int64_t n = 1;
        for (int64_t d : dims)
          n *= d;
        return n;
      };
      int64_t pre = product(dt.getShape().take_front(axis));
      int64_t post = product(dt.getShape().drop_front(axis + 1));
      int64_t n = it.getNumElements();
      auto i64 = b.getI64Type();
      Value flat = reshape(b, idx, {n, 1});
      if (!it.getElementType().isInteger(64))
        flat = dopt::CastOp::create(b, flat, TypeAttr::get(i64));
      // Negative indices count from the end.
      Value zero = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(RankedTensorType::get({}, i64),
                                    ArrayRef<int64_t>{0}));
      Value size = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(RankedTensorType::get({}, i64),
                                    ArrayRef<int64_t>{extent}));
      flat = dopt::WhereOp::create(b, dopt::LessOp::create(b, flat, zero),
                                   add(b, flat, size), flat);
      SmallVector<int64_t> iota(extent);
      std::iota(iota.begin(), iota.end(), 0);
      Value classes = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(RankedTensorType::get({1, extent}, i64),
                                    ArrayRef<int64_t>(iota)));
      Value onehot = dopt::CastOp::create(
          b, dopt::EqualOp::create(b, flat, classes),
          TypeAttr::get(dt.getElementType())); // [n, extent]
      Value g3 = reshape(b, g, {pre, n, post});
      Value d = dopt::MatMulOp::create(b, transposeLast2(b, onehot), g3);
      out.push_back(reshape(b, d, dt.getShape()));
      out.push_back(Value());
      return success();
    };
    // GatherElements (torch.gather): the adjoint added back at each index,
    // a scatter-add into zeros; duplicates add up.
    t.at<dopt::GatherElementsOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                        Adjoints &out) -> LogicalResult {
      auto ge = cast<dopt::GatherElementsOp>(op);
      RankedTensorType dt = typeOf(ge.getData());
      Value zeros = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(dt, b.getZeroAttr(dt.getElementType())));
      out.push_back(dopt::ScatterElementsOp::create(
          b, zeros, ge.getIndices(), gs[0], ge.getAxisAttr(),
          b.getStringAttr("add")));
      out.push_back(Value());
      return success();
    };
    // TopK: the values' adjoint goes back to the positions they were taken
    // from (a scatter-add into zeros; the indices have none).
    t.at<dopt::TopKOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                              Adjoints &out) -> LogicalResult {
      auto tk = cast<dopt::TopKOp>(op);
      if (!gs[0]) {
        out.push_back(Value());
        return success();
      }
      RankedTensorType xt = typeOf(tk.getInput());
      Value zeros = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(xt, b.getZeroAttr(xt.getElementType())));
      out.push_back(dopt::ScatterElementsOp::create(
          b, zeros, tk.getIndices(), gs[0], tk.getAxisAttr(),
          b.getStringAttr("add")));
      return success();
    };
    // ScatterElements (torch.scatter, scatter_add): each update's adjoint is
    // the result's at the position it went to (a gather, as PyTorch's: with
    // duplicate indices every one of them gets it); the data's is the
    // result's, except, when updates replace, where one was written.
    t.at<dopt::ScatterElementsOp>() = [](B &b, Operation *op,
                                         ArrayRef<Value> gs,
                                         Adjoints &out) -> LogicalResult {
      auto se = cast<dopt::ScatterElementsOp>(op);
      StringRef red = se.getReduction();
      if (red != "none" && red != "add")
        return op->emitError("no gradient rule for dopt.scatter_elements "
                             "with reduction '")
               << red << "' yet (none and add have one)";
      Value g = gs[0];
      Value dData = g;
      if (red == "none") {
        RankedTensorType ut = typeOf(se.getUpdates());
        Value zeros = dopt::ConstantOp::create(
            b, DenseElementsAttr::get(ut, b.getZeroAttr(ut.getElementType())));
        dData = dopt::ScatterElementsOp::create(b, g, se.getIndices(), zeros,
                                                se.getAxisAttr(),
                                                b.getStringAttr("none"));
      }
      out.push_back(dData);
      out.push_back(Value());
      out.push_back(dopt::GatherElementsOp::create(b, g, se.getIndices(),
                                                   se.getAxisAttr()));
      return success();
    };
    // Slice: the adjoint put back where the slice read, zeros elsewhere --
    // reversed along dimensions read backwards (negative steps), dilated by
    // the step along strided ones (3-D pooling reads strided slices), then
    // padded back to the input's shape. A constant pad: the adjoint sliced
    // back.
    t.at<dopt::SliceOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                               Adjoints &out) -> LogicalResult {
      auto sl = cast<dopt::SliceOp>(op);
      ArrayRef<int64_t> xs = typeOf(sl.getInput()).getShape();
      int64_t r = xs.size();
      Value g = gs[0];
      ArrayRef<int64_t> gsz = typeOf(g).getShape();
      SmallVector<int64_t> rs(r, 0), re(gsz), rst(r, 1), factors(r, 1),
          pads(2 * r, 0);
      bool reverse = false;
      for (int64_t i = 0; i < r; ++i) {
        int64_t start = sl.getStarts()[i], step = sl.getSteps()[i];
        int64_t count = gsz[i];
        if (count == 0) {
          pads[r + i] = xs[i];
          continue;
        }
        // The lowest index read, and the distance between reads.
        int64_t lo = step > 0 ? start : start + (count - 1) * step;
        int64_t stride = step > 0 ? step : -step;
        if (step < 0) {
          reverse = true;
          rs[i] = count - 1;
          re[i] = -1;
          rst[i] = -1;
        }
        factors[i] = stride;
        pads[i] = lo;
        pads[r + i] = xs[i] - (lo + (count - 1) * stride + 1);
      }
      if (reverse)
        g = dopt::SliceOp::create(b, g, b.getDenseI64ArrayAttr(rs),
                                  b.getDenseI64ArrayAttr(re),
                                  b.getDenseI64ArrayAttr(rst));
      g = dilateAxes(b, g, factors);
      out.push_back(dopt::PadOp::create(b, g, b.getDenseI64ArrayAttr(pads),
                                        b.getStringAttr("constant"),
                                        b.getF64FloatAttr(0.0)));
      return success();
    };
    t.at<dopt::PadOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                             Adjoints &out) -> LogicalResult {
      auto pd = cast<dopt::PadOp>(op);
      if (pd.getMode() != "constant")
        return op->emitError("no gradient rule for dopt.pad in mode '")
               << pd.getMode() << "' yet";
      RankedTensorType xt = typeOf(pd.getInput());
      int64_t r = xt.getRank();
      ArrayRef<int64_t> pads = pd.getPads();
      SmallVector<int64_t> starts(pads.take_front(r)), ends, steps(r, 1);
      for (int64_t i = 0; i < r; ++i)
        ends.push_back(starts[i] + xt.getDimSize(i));
      out.push_back(dopt::SliceOp::create(b, gs[0], b.getDenseI64ArrayAttr(starts),
                                          b.getDenseI64ArrayAttr(ends),
                                          b.getDenseI64ArrayAttr(steps)));
      return success();
    };
    // 2-D convolution, any group count (convInputGrad, convWeightGrad);
    // dbias = sum of g over N, H, W.
    t.at<dopt::ConvOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                              Adjoints &out) -> LogicalResult {
      auto cv = cast<dopt::ConvOp>(op);
      Value x = cv.getInput(), w = cv.getWeight(), g = gs[0];
      ArrayRef<int64_t> st = cv.getStrides(), pd = cv.getPads(),
                        dl = cv.getDilations();
      int64_t groups = cv.getGroup();
      out.push_back(convInputGrad(b, g, w, typeOf(x).getShape(), st, pd, dl,
                                  groups));
      out.push_back(convWeightGrad(b, x, g, typeOf(w).getShape(), st, pd, dl,
                                   groups));
      if (Value bias = cv.getBias())
        out.push_back(reduceSum(b, g, {0, 2, 3}, false));
      return success();
    };
    // 2-D transposed convolution y = convT(x, w): the adjoint of
    // x' = conv(y', w) with the same parameters, so dx = conv(g, w) (cut to
    // x where an output padding of a stride or more lets the convolution
    // reach past it) and dw the weight adjoint of that convolution with g
    // as its input and x as its output's adjoint; dbias = sum of g over N,
    // H, W.
    t.at<dopt::ConvTransposeOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                       Adjoints &out) -> LogicalResult {
      auto ct = cast<dopt::ConvTransposeOp>(op);
      Value x = ct.getInput(), w = ct.getWeight(), g = gs[0];
      ArrayRef<int64_t> st = ct.getStrides(), pd = ct.getPads(),
                        dl = ct.getDilations();
      int64_t groups = ct.getGroup();
      Value dx = dopt::ConvOp::create(
          b, g, w, Value(), b.getDenseI64ArrayAttr(st),
          b.getDenseI64ArrayAttr(pd), b.getDenseI64ArrayAttr(dl),
          b.getI64IntegerAttr(groups));
      auto xs = typeOf(x).getShape(), ds = typeOf(dx).getShape();
      if (ds != xs)
        dx = padOrCrop(b, dx, {0, 0, 0, 0},
                             {0, 0, xs[2] - ds[2], xs[3] - ds[3]});
      out.push_back(dx);
      out.push_back(convWeightGrad(b, g, x, typeOf(w).getShape(), st, pd, dl,
                                   groups));
      if (ct.getBias())
        out.push_back(reduceSum(b, g, {0, 2, 3}, false));
      return success();
    };
    // 2-D average pooling: a depthwise convolution with a ones kernel,
    // divided by each window's count (kh·kw, or its elements inside the
    // input without count_include_pad); its adjoint is that convolution's
    // input adjoint of g / count.
    t.at<dopt::AvgPoolOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                 Adjoints &out) -> LogicalResult {
      auto ap = cast<dopt::AvgPoolOp>(op);
      auto xs = typeOf(ap.getInput()).getShape();
      auto ys = typeOf(op->getResult(0)).getShape();
      if (xs.size() != 4)
        return op->emitError("no gradient rule for a ")
               << xs.size() - 2 << "-D average pool yet (2-D only)";
      ArrayRef<int64_t> k = ap.getKernelShape(), st = ap.getStrides(),
                        pd = ap.getPads();
      // Windows must lie within the padded input (ceil_mode may add a
      // last, partial one).
      for (int i = 0; i < 2; ++i)
        if ((ys[2 + i] - 1) * st[i] + k[i] > xs[2 + i] + pd[i] + pd[2 + i])
          return op->emitError("no gradient rule for an average pool whose "
                               "last window passes the padded input "
                               "(ceil_mode) yet");
      Type elt = typeOf(gs[0]).getElementType();
      SmallVector<float> counts(ys[2] * ys[3]);
      for (int64_t i = 0; i < ys[2]; ++i)
        for (int64_t j = 0; j < ys[3]; ++j) {
          auto inside = [&](int64_t start, int64_t size, int64_t extent) {
            return std::min(start + size, extent) - std::max<int64_t>(start, 0);
          };
          counts[i * ys[3] + j] =
              ap.getCountIncludePad()
                  ? float(k[0] * k[1])
                  : float(inside(i * st[0] - pd[0], k[0], xs[2]) *
                          inside(j * st[1] - pd[1], k[1], xs[3]));
        }
      Value count = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(
                 RankedTensorType::get({1, 1, ys[2], ys[3]}, b.getF32Type()),
                 ArrayRef<float>(counts)));
      if (!elt.isF32())
        count = dopt::CastOp::create(b, count, TypeAttr::get(elt));
      Value g = div(b, gs[0], count);
      Value ones = dopt::ConstantOp::create(
          b, DenseElementsAttr::get(RankedTensorType::get({xs[1], 1, k[0], k[1]}, elt),
                                    b.getFloatAttr(elt, 1.0)));
      out.push_back(convInputGrad(b, g, ones, xs, st, pd, {1, 1}, xs[1]));
      return success();
    };
    t.at<dopt::GlobalAvgPoolOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                       Adjoints &out) -> LogicalResult {
      RankedTensorType x = typeOf(op->getOperand(0));
      int64_t n = 1;
      for (int64_t d = 2; d < x.getRank(); ++d)
        n *= x.getDimSize(d);
      Value g = mul(b, gs[0], scalar(b, gs[0], 1.0 / double(n)));
      out.push_back(dopt::ExpandOp::create(b, g, b.getDenseI64ArrayAttr(x.getShape())));
      return success();
    };
    // 2-D max pooling: each window's adjoint goes to the first position
    // (in window order) holding its maximum, as PyTorch does. For each
    // kernel offset: the strided slice of the padded input, a mask of
    // "is the maximum and no earlier offset was", the masked adjoint
    // placed back at the offset's positions (zeros between strides).
    t.at<dopt::MaxPoolOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                 Adjoints &out) -> LogicalResult {
      auto mp = cast<dopt::MaxPoolOp>(op);
      Value x = mp.getInput(), y = op->getResult(0), g = gs[0];
      if (!isFloat(x)) {
        out.push_back(Value());
        return success();
      }
      auto xs = typeOf(x).getShape(), ys = typeOf(y).getShape();
      ArrayRef<int64_t> k = mp.getKernelShape(), st = mp.getStrides(),
                        pd = mp.getPads(), dl = mp.getDilations();
      // Padded with -inf, and at the end with whatever ceil_mode reaches.
      SmallVector<int64_t> extra(2);
      for (int i = 0; i < 2; ++i)
        extra[i] = std::max<int64_t>(
            0, (ys[2 + i] - 1) * st[i] + dl[i] * (k[i] - 1) + 1 -
                   (xs[2 + i] + pd[i] + pd[2 + i]));
      SmallVector<int64_t> pads{0, 0, pd[0], pd[1], 0, 0, pd[2] + extra[0],
                                pd[3] + extra[1]};
      Value xp = dopt::PadOp::create(b, x, b.getDenseI64ArrayAttr(pads),
                                     b.getStringAttr("constant"),
                                     b.getF64FloatAttr(-INFINITY));
      int64_t hp = xs[2] + pd[0] + pd[2] + extra[0],
              wp = xs[3] + pd[1] + pd[3] + extra[1];
      Value zero = scalar(b, g, 0.0);
      Value taken;
      Value total;
      for (int64_t i = 0; i < k[0]; ++i)
        for (int64_t j = 0; j < k[1]; ++j) {
          int64_t h0 = i * dl[0], w0 = j * dl[1];
          Value at = dopt::SliceOp::create(
              b, xp, b.getDenseI64ArrayAttr({0, 0, h0, w0}),
              b.getDenseI64ArrayAttr({xs[0], xs[1], h0 + (ys[2] - 1) * st[0] + 1,
                                      w0 + (ys[3] - 1) * st[1] + 1}),
              b.getDenseI64ArrayAttr({1, 1, st[0], st[1]}));
          Value isMax = dopt::EqualOp::create(b, at, y);
          Value mask = taken ? Value(dopt::AndOp::create(
                                   b, isMax, dopt::NotOp::create(b, taken)))
                             : isMax;
          taken = taken ? Value(dopt::OrOp::create(b, taken, isMax)) : isMax;
          Value part = dopt::WhereOp::create(b, mask, g, zero);
          // Back to the padded input's grid at this offset.
          Value placed = dilateSpatial(b, part, st[0], st[1]);
          auto ps = typeOf(placed).getShape();
          placed = padOrCrop(b, placed, {0, 0, h0, w0},
                             {0, 0, hp - h0 - ps[2], wp - w0 - ps[3]});
          total = total ? add(b, total, placed) : placed;
        }
      // Drop the padding.
      out.push_back(padOrCrop(b, total, {0, 0, -pd[0], -pd[1]},
                              {0, 0, -(pd[2] + extra[0]), -(pd[3] + extra[1])}));
      return success();
    };
    t.at<dopt::NegOp>() =
        unary([](B &b, Value, Value, Value g) { return neg(b, g); });
    // Piecewise constant: no gradient (PyTorch's is zero).
    // The bits read as another type (ONNX's BitCast): no derivative.
    auto none = unary([](B &, Value, Value, Value) { return Value(); });
    t.at<dopt::FloorOp>() = none;
    t.at<dopt::CeilOp>() = none;
    t.at<dopt::RoundOp>() = none;
    t.at<dopt::BitcastOp>() = none;
    t.at<dopt::SinOp>() = unary([](B &b, Value x, Value, Value g) {
      return mul(b, g, dopt::CosOp::create(b, x));
    });
    t.at<dopt::CosOp>() = unary([](B &b, Value x, Value, Value g) {
      return neg(b, mul(b, g, dopt::SinOp::create(b, x)));
    });
    // The inverse trigonometric and hyperbolic functions: PyTorch's
    // formulas (acosh's is infinite at 1, atanh's at +-1, as PyTorch's).
    auto oneMinusSquare = [](B &b, Value x) {
      return sub(b, scalar(b, x, 1.0), mul(b, x, x));
    };
    t.at<dopt::AsinOp>() = unary([=](B &b, Value x, Value, Value g) {
      return div(b, g, dopt::SqrtOp::create(b, oneMinusSquare(b, x)));
    });
    t.at<dopt::AcosOp>() = unary([=](B &b, Value x, Value, Value g) {
      return neg(b, div(b, g, dopt::SqrtOp::create(b, oneMinusSquare(b, x))));
    });
    t.at<dopt::AtanOp>() = unary([](B &b, Value x, Value, Value g) {
      return div(b, g, add(b, scalar(b, x, 1.0), mul(b, x, x)));
    });
    t.at<dopt::SinhOp>() = unary([](B &b, Value x, Value, Value g) {
      return mul(b, g, dopt::CoshOp::create(b, x));
    });
    t.at<dopt::CoshOp>() = unary([](B &b, Value x, Value, Value g) {
      return mul(b, g, dopt::SinhOp::create(b, x));
    });
    t.at<dopt::AsinhOp>() = unary([](B &b, Value x, Value, Value g) {
      return div(b, g,
                 dopt::SqrtOp::create(b, add(b, mul(b, x, x),
                                             scalar(b, x, 1.0))));
    });
    t.at<dopt::AcoshOp>() = unary([](B &b, Value x, Value, Value g) {
      return div(b, g,
                 dopt::SqrtOp::create(b, sub(b, mul(b, x, x),
                                             scalar(b, x, 1.0))));
    });
    t.at<dopt::AtanhOp>() = unary([=](B &b, Value x, Value, Value g) {
      return div(b, g, oneMinusSquare(b, x));
    });
    t.at<dopt::ExpOp>() =
        unary([](B &b, Value, Value y, Value g) { return mul(b, g, y); });
    t.at<dopt::LogOp>() =
        unary([](B &b, Value x, Value, Value g) { return div(b, g, x); });
    t.at<dopt::SqrtOp>() = unary([](B &b, Value, Value y, Value g) {
      return div(b, mul(b, g, scalar(b, y, 0.5)), y);
    });
    t.at<dopt::ReciprocalOp>() = unary([](B &b, Value, Value y, Value g) {
      return neg(b, mul(b, g, mul(b, y, y)));
    });
    t.at<dopt::TanhOp>() = unary([](B &b, Value, Value y, Value g) {
      return mul(b, g, sub(b, scalar(b, y, 1.0), mul(b, y, y)));
    });
    t.at<dopt::SigmoidOp>() = unary([](B &b, Value, Value y, Value g) {
      return mul(b, g, mul(b, y, sub(b, scalar(b, y, 1.0), y)));
    });
    // |x|' = sign(x), 0 at 0 (PyTorch's choice).
    t.at<dopt::AbsOp>() = unary([](B &b, Value x, Value, Value g) {
      Value zero = scalar(b, g, 0.0);
      Value pos = dopt::GreaterOp::create(b, x, scalar(b, x, 0.0));
      Value neg_ = dopt::LessOp::create(b, x, scalar(b, x, 0.0));
      return Value(dopt::WhereOp::create(
          b, pos, g, dopt::WhereOp::create(b, neg_, neg(b, g), zero)));
    });
    t.at<dopt::ReluOp>() = unary([](B &b, Value x, Value, Value g) {
      Value pos = dopt::GreaterOp::create(b, x, scalar(b, x, 0.0));
      return Value(dopt::WhereOp::create(b, pos, g, scalar(b, g, 0.0)));
    });
    t.at<dopt::LeakyReluOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      auto lr = cast<dopt::LeakyReluOp>(op);
      Value x = lr.getInput(), g = gs[0];
      Value pos = dopt::GreaterEqualOp::create(b, x, scalar(b, x, 0.0));
      Value slope = mul(b, g, scalar(b, g, lr.getAlpha().convertToDouble()));
      out.push_back(dopt::WhereOp::create(b, pos, g, slope));
      return success();
    };
    t.at<dopt::GeluOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                              Adjoints &out) -> LogicalResult {
      auto ge = cast<dopt::GeluOp>(op);
      Value x = ge.getInput(), g = gs[0];
      Value d;
      if (ge.getApproximate() == "tanh") {
        // y = 0.5 x (1 + t), t = tanh(u), u = c (x + 0.044715 x^3):
        // dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)
        double c = std::sqrt(2.0 / M_PI);
        Value x2 = mul(b, x, x);
        Value u = mul(b, scalar(b, x, c),
                      add(b, x, mul(b, scalar(b, x, 0.044715), mul(b, x2, x))));
        Value tt = dopt::TanhOp::create(b, u);
        Value du = mul(b, scalar(b, x, c),
                       add(b, scalar(b, x, 1.0),
                           mul(b, scalar(b, x, 3 * 0.044715), x2)));
        Value left = mul(b, scalar(b, x, 0.5), add(b, scalar(b, x, 1.0), tt));
        Value right = mul(b, mul(b, scalar(b, x, 0.5), x),
                          mul(b, sub(b, scalar(b, x, 1.0), mul(b, tt, tt)), du));
        d = add(b, left, right);
      } else {
        // y = x Phi(x): dy/dx = Phi(x) + x phi(x)
        Value phi = mul(b, scalar(b, x, 0.5),
                        add(b, scalar(b, x, 1.0),
                            dopt::ErfOp::create(
                                b, mul(b, x, scalar(b, x, M_SQRT1_2)))));
        Value density = mul(
            b, scalar(b, x, 1.0 / std::sqrt(2.0 * M_PI)),
            dopt::ExpOp::create(b, mul(b, scalar(b, x, -0.5), mul(b, x, x))));
        d = add(b, phi, mul(b, x, density));
      }
      out.push_back(mul(b, g, d));
      return success();
    };
    t.at<dopt::MatMulOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                Adjoints &out) -> LogicalResult {
      matmulGrad(b, op->getOperand(0), op->getOperand(1), gs[0], out);
      return success();
    };
    t.at<dopt::GemmOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                              Adjoints &out) -> LogicalResult {
      auto gm = cast<dopt::GemmOp>(op);
      Value g = gs[0];
      bool ta = gm.getTransA(), tb = gm.getTransB();
      double alpha = gm.getAlpha().convertToDouble();
      // y = alpha op(A) op(B): d op(A) = alpha g op(B)^T, d op(B) = alpha
      // op(A)^T g, and a transposed operand's adjoint is the transpose,
      // written as the product with its factors swapped.
      Value ga = ta ? product(b, gm.getB(), tb, g, true, alpha)
                    : product(b, g, false, gm.getB(), !tb, alpha);
      Value gb = tb ? product(b, g, true, gm.getA(), ta, alpha)
                    : product(b, gm.getA(), !ta, g, false, alpha);
      out.push_back(ga);
      out.push_back(gb);
      if (Value c = gm.getC()) {
        double beta = gm.getBeta().convertToDouble();
        Value gc = beta == 1.0 ? g : mul(b, g, scalar(b, g, beta));
        out.push_back(autodiff::unbroadcast(b, b.getLoc(), gc, typeOf(c)));
      }
      return success();
    };
    t.at<dopt::ReduceSumOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      auto r = cast<dopt::ReduceSumOp>(op);
      out.push_back(spread(b, gs[0], typeOf(r.getInput()), r.getAxes()));
      return success();
    };
    t.at<dopt::ReduceMeanOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                    Adjoints &out) -> LogicalResult {
      auto r = cast<dopt::ReduceMeanOp>(op);
      RankedTensorType x = typeOf(r.getInput());
      int64_t n = 1;
      for (int64_t a : r.getAxes())
        n *= x.getDimSize(a);
      Value g = mul(b, gs[0], scalar(b, gs[0], 1.0 / double(n)));
      out.push_back(spread(b, g, x, r.getAxes()));
      return success();
    };
    // reduce_max: the adjoint to the positions holding the maximum, shared
    // evenly among ties (as torch.amax).
    t.at<dopt::ReduceMaxOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      auto r = cast<dopt::ReduceMaxOp>(op);
      RankedTensorType x = typeOf(r.getInput());
      if (!isa<FloatType>(x.getElementType()))
        return success();
      Value best = spread(b, r.getResult(), x, r.getAxes());
      Value at = dopt::EqualOp::create(b, r.getInput(), best);
      Value ties = spread(
          b,
          reduceSum(b, dopt::CastOp::create(b, at, TypeAttr::get(x.getElementType())),
                    r.getAxes(), false),
          x, r.getAxes());
      Value g = spread(b, gs[0], x, r.getAxes());
      out.push_back(dopt::WhereOp::create(b, at, div(b, g, ties),
                                          scalar(b, gs[0], 0.0)));
      return success();
    };
    t.at<dopt::ReshapeOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                 Adjoints &out) -> LogicalResult {
      out.push_back(reshape(b, gs[0], typeOf(op->getOperand(0)).getShape()));
      return success();
    };
    t.at<dopt::TransposeOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      ArrayRef<int64_t> perm = cast<dopt::TransposeOp>(op).getPerm();
      SmallVector<int64_t> inverse(perm.size());
      for (auto [i, p] : llvm::enumerate(perm))
        inverse[p] = i;
      out.push_back(dopt::TransposeOp::create(b, gs[0],
                                              b.getDenseI64ArrayAttr(inverse)));
      return success();
    };
    t.at<dopt::ExpandOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                Adjoints &out) -> LogicalResult {
      out.push_back(autodiff::unbroadcast(b, b.getLoc(), gs[0],
                                          typeOf(op->getOperand(0))));
      return success();
    };
    // Attention recomputes its probabilities P from the query and key (it
    // stored none), in the softmax's type (fp32 for 16-bit operands, as the
    // forward): with g the output's adjoint, dV = Pᵀ g, dS = P (g Vᵀ −
    // rowsum(g Vᵀ ∘ P)), dQ = scale dS K, dK = scale dSᵀ Q, the bias's
    // adjoint dS summed over its broadcast dimensions, none for the mask.
    t.at<dopt::AttentionOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                   Adjoints &out) -> LogicalResult {
      auto a = cast<dopt::AttentionOp>(op);
      Value q = a.getQuery(), k = a.getKey(), v = a.getValue(), g = gs[0];
      Type elt = typeOf(q).getElementType();
      Type wide = elt.getIntOrFloatBitWidth() < 32 ? b.getF32Type() : elt;
      auto as = [&](Value x, Type t) -> Value {
        if (typeOf(x).getElementType() == t)
          return x;
        return dopt::CastOp::create(b, x, TypeAttr::get(t));
      };
      int64_t last = typeOf(q).getRank() - 1;
      double scale = a.getScale().convertToDouble();
      Value s = as(dopt::MatMulOp::create(b, q, transposeLast2(b, k)), wide);
      if (scale != 1.0)
        s = mul(b, s, scalar(b, s, scale));
      if (Value keep = a.getKeep())
        s = dopt::WhereOp::create(
            b, keep, s, scalar(b, s, -std::numeric_limits<double>::infinity()));
      if (Value bias = a.getBias())
        s = add(b, s, as(bias, wide));
      Value p = dopt::SoftmaxOp::create(b, s, b.getI64IntegerAttr(last));
      if (a.getEmptyRowsZero()) {
        double inf = std::numeric_limits<double>::infinity();
        Value rowMax = dopt::ReduceMaxOp::create(
            b, s, b.getDenseI64ArrayAttr({last}), b.getBoolAttr(true));
        p = dopt::WhereOp::create(
            b, dopt::EqualOp::create(b, rowMax, scalar(b, rowMax, -inf)),
            scalar(b, p, 0.0), p);
      }
      Value pNarrow = as(p, elt);
      Value dv = dopt::MatMulOp::create(b, transposeLast2(b, pNarrow), g);
      Value dp = as(dopt::MatMulOp::create(b, g, transposeLast2(b, v)), wide);
      Value ds = mul(b, p, sub(b, dp, reduceSum(b, mul(b, dp, p), {last}, true)));
      Value dsScaled = as(scale == 1.0 ? ds : mul(b, ds, scalar(b, ds, scale)),
                          elt);
      out.push_back(dopt::MatMulOp::create(b, dsScaled, k));
      out.push_back(
          dopt::MatMulOp::create(b, transposeLast2(b, dsScaled), q));
      out.push_back(dv);
      if (a.getKeep())
        out.push_back(Value());
      if (Value bias = a.getBias())
        out.push_back(autodiff::unbroadcast(b, b.getLoc(), as(ds, elt),
                                            typeOf(bias)));
      return success();
    };
    t.at<dopt::SoftmaxOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                 Adjoints &out) -> LogicalResult {
      int64_t axis = cast<dopt::SoftmaxOp>(op).getAxis();
      Value y = op->getResult(0), g = gs[0];
      Value dot = reduceSum(b, mul(b, g, y), {axis}, true);
      out.push_back(mul(b, y, sub(b, g, dot)));
      return success();
    };
    t.at<dopt::LogSoftmaxOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                                    Adjoints &out) -> LogicalResult {
      int64_t axis = cast<dopt::LogSoftmaxOp>(op).getAxis();
      Value y = op->getResult(0), g = gs[0];
      Value total = reduceSum(b, g, {axis}, true);
      out.push_back(sub(b, g, mul(b, dopt::ExpOp::create(b, y), total)));
      return success();
    };
    t.at<dopt::WhereOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                               Adjoints &out) -> LogicalResult {
      auto w = cast<dopt::WhereOp>(op);
      Value g = gs[0], zero = scalar(b, g, 0.0);
      out.push_back(Value()); // the condition
      Value branches[] = {w.getLhs(), w.getRhs()};
      for (auto [i, branch] : llvm::enumerate(branches)) {
        if (!isFloat(branch)) {
          out.push_back(Value());
          continue;
        }
        Value picked = i == 0 ? dopt::WhereOp::create(b, w.getCondition(), g, zero)
                              : dopt::WhereOp::create(b, w.getCondition(), zero, g);
        out.push_back(autodiff::unbroadcast(b, b.getLoc(), picked, typeOf(branch)));
      }
      return success();
    };
    t.at<dopt::CastOp>() = [](B &b, Operation *op, ArrayRef<Value> gs,
                              Adjoints &out) -> LogicalResult {
      Value x = op->getOperand(0);
      // Through integers and booleans nothing flows.
      if (!isFloat(x) || !isFloat(op->getResult(0))) {
        out.push_back(Value());
        return success();
      }
      out.push_back(dopt::CastOp::create(
          b, gs[0], TypeAttr::get(typeOf(x).getElementType())));
      return success();
    };
    // Dropout: the same mask (the same key, stream and positions) on the
    // adjoint, scaled alike; the key and offsets carry no gradient.
    t.at<dopt::DropoutOp>() = [](ImplicitLocOpBuilder &b, Operation *op,
                                 ArrayRef<Value> gs,
                                 Adjoints &out) -> LogicalResult {
      auto d = cast<dopt::DropoutOp>(op);
      auto adjoint = dopt::DropoutOp::create(b, gs[0], d.getKey(),
                                             d.getOffsets(), d.getRatioAttr(),
                                             d.getStreamAttr(),
                                             d.getGlobalShapeAttr());
      // Where its batch is (micro-batches place both masks alike).
      if (Attribute batchDim = d->getAttr("dopt.batch_dim"))
        adjoint->setAttr("dopt.batch_dim", batchDim);
      out.push_back(adjoint);
      return success();
    };
    // A sum over the replicas of a data-parallel program (the loss's sums,
    // distopt-append-loss): the result, and so its adjoint, is the same on
    // every replica, and each replica's share contributed to it with
    // weight one, so the share's adjoint is the result's. The weights'
    // adjoints are then partial sums over the replicas, which
    // distopt-sync-gradients adds up.
    // An average (the partial means of a split mean) passes 1/n of it to
    // each of its n shares.
    t.at<shard::AllReduceOp>() = [](ImplicitLocOpBuilder &b, Operation *op,
                                    ArrayRef<Value> gs,
                                    Adjoints &out) -> LogicalResult {
      auto ar = cast<shard::AllReduceOp>(op);
      switch (ar.getReduction()) {
      case shard::ReductionKind::Sum:
        out.push_back(gs[0]);
        return success();
      case shard::ReductionKind::Average:
        out.push_back(
            mul(b, gs[0], scalar(b, gs[0], 1.0 / ranksOver(op, ar.getGridAxes()))));
        return success();
      default:
        return op->emitError("no gradient rule for a ")
               << shard::stringifyReductionKind(ar.getReduction())
               << " all-reduce (only sums and averages over ranks are "
                  "differentiated)";
      }
    };
    // The collectives the partitioner puts between tensor-parallel ops, each
    // transposed into its dual over the same axes. The adjoint a rule gets
    // is complete (the same whole adjoint on every rank of the axis, as
    // distopt-autodiff keeps the adjoints of values replicated over it), so:
    //   all_gather  -> all_slice   (each rank keeps its block of the adjoint)
    //   all_slice   -> all_gather  (the blocks' adjoints, put together, are
    //                               the whole operand's: complete)
    //   reduce_scatter -> all_gather (every partial sum's adjoint is the
    //                               whole sum's)
    //   all_to_all  -> all_to_all with the split and concat axes swapped.
    // Over the data axis the replicas' adjoints are partial sums instead
    // (distopt-sync-gradients adds the weights' up); no partitioned step
    // moves data-parallel values through these collectives.
    // Backward collectives say so: the plan/program check counts them
    // (planner::checkBackwardCollectives).
    auto backward = [](ImplicitLocOpBuilder &b, Operation *op) -> Value {
      op->setAttr("dopt.backward", b.getUnitAttr());
      return op->getResult(0);
    };
    auto tensorAxisOnly = [](Operation *op, ArrayRef<int16_t> axes) {
      if (llvm::is_contained(axes, grid::kDataAxis) ||
          llvm::is_contained(axes, grid::kStageAxis))
        return LogicalResult(op->emitError("no gradient rule for ")
                             << op->getName()
                             << " over the data or stage axis (only "
                                "tensor-parallel collectives are "
                                "differentiated)");
      return success();
    };
    t.at<shard::AllGatherOp>() = [=](ImplicitLocOpBuilder &b, Operation *op,
                                     ArrayRef<Value> gs,
                                     Adjoints &out) -> LogicalResult {
      auto c = cast<shard::AllGatherOp>(op);
      if (failed(tensorAxisOnly(op, c.getGridAxes())))
        return failure();
      out.push_back(backward(b, shard::AllSliceOp::create(
          b, c.getInput().getType(), c.getGridAttr(), c.getGridAxesAttr(),
          gs[0], c.getGatherAxisAttr())));
      return success();
    };
    t.at<shard::AllSliceOp>() = [=](ImplicitLocOpBuilder &b, Operation *op,
                                    ArrayRef<Value> gs,
                                    Adjoints &out) -> LogicalResult {
      auto c = cast<shard::AllSliceOp>(op);
      if (failed(tensorAxisOnly(op, c.getGridAxes())))
        return failure();
      out.push_back(backward(b, shard::AllGatherOp::create(
          b, c.getInput().getType(), c.getGridAttr(), c.getGridAxesAttr(),
          gs[0], c.getSliceAxisAttr())));
      return success();
    };
    t.at<shard::ReduceScatterOp>() = [=](ImplicitLocOpBuilder &b, Operation *op,
                                         ArrayRef<Value> gs,
                                         Adjoints &out) -> LogicalResult {
      auto c = cast<shard::ReduceScatterOp>(op);
      if (failed(tensorAxisOnly(op, c.getGridAxes())))
        return failure();
      bool average = c.getReduction() == shard::ReductionKind::Average;
      if (c.getReduction() != shard::ReductionKind::Sum && !average)
        return op->emitError("no gradient rule for a ")
               << shard::stringifyReductionKind(c.getReduction())
               << " reduce-scatter (only sums and averages are differentiated)";
      Value g = backward(b, shard::AllGatherOp::create(
          b, c.getInput().getType(), c.getGridAttr(), c.getGridAxesAttr(),
          gs[0], c.getScatterAxisAttr()));
      if (average)
        g = mul(b, g, scalar(b, g, 1.0 / ranksOver(op, c.getGridAxes())));
      out.push_back(g);
      return success();
    };
    t.at<shard::AllToAllOp>() = [=](ImplicitLocOpBuilder &b, Operation *op,
                                    ArrayRef<Value> gs,
                                    Adjoints &out) -> LogicalResult {
      auto c = cast<shard::AllToAllOp>(op);
      if (failed(tensorAxisOnly(op, c.getGridAxes())))
        return failure();
      out.push_back(backward(b, shard::AllToAllOp::create(
          b, c.getInput().getType(), c.getGridAttr(), c.getGridAxesAttr(),
          gs[0], c.getConcatAxisAttr(), c.getSplitAxisAttr())));
      return success();
    };
    return t;
  }();
  return table;
}

} // namespace

/// Attaches GradientModel to the ops of `dialect` that have a rule.
static void attachRules(MLIRContext *ctx, StringRef dialect) {
  for (const auto &[ns, attach] : ruleTable().attach)
    if (ns == dialect)
      attach(ctx);
}

void autodiff::registerOpModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, dopt::DoptDialect *) {
    attachRules(ctx, dopt::DoptDialect::getDialectNamespace());
  });
  registry.addExtension(+[](MLIRContext *ctx, shard::ShardDialect *) {
    attachRules(ctx, shard::ShardDialect::getDialectNamespace());
  });
}

Value autodiff::unbroadcast(OpBuilder &ob, Location loc, Value grad,
                            RankedTensorType type) {
  ImplicitLocOpBuilder b(loc, ob);
  RankedTensorType gt = typeOf(grad);
  if (gt.getShape() == type.getShape())
    return grad;
  int64_t extra = gt.getRank() - type.getRank();
  SmallVector<int64_t> axes;
  for (int64_t i = 0; i < gt.getRank(); ++i)
    if (i < extra || (type.getDimSize(i - extra) == 1 && gt.getDimSize(i) != 1))
      axes.push_back(i);
  Value summed = axes.empty() ? grad : reduceSum(b, grad, axes, true);
  return reshape(b, summed, type.getShape());
}

LogicalResult autodiff::applyRule(OpBuilder &ob, Operation *op,
                                  ArrayRef<Value> resultAdjoints,
                                  SmallVectorImpl<Value> &operandAdjoints) {
  auto differentiable = dyn_cast<dopt::GradientOpInterface>(op);
  if (!differentiable)
    return op->emitError("no gradient rule for ")
           << op->getName()
           << " yet: the loss depends on the weights through it (freeze "
              "the weights before it with --freeze-weights, or file the rule)";
  ImplicitLocOpBuilder b(op->getLoc(), ob);
  // Ops with one result: a missing adjoint is a zero (none reaches here
  // without one).
  operandAdjoints.clear();
  if (failed(differentiable.buildGradient(b, resultAdjoints, operandAdjoints)))
    return failure();
  operandAdjoints.resize(op->getNumOperands());
  return success();
}
