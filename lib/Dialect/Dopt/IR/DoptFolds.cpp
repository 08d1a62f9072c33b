//===- DoptFolds.cpp - constant folding for dopt ops ----------------------===//
//
// Folders evaluate ops whose operands are constants, so that the shape
// arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, Where(Equal(...))) disappears at import and under
// --canonicalize. Folding is limited to small results: large constant
// computations are left for codegen rather than inflating the IR.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

#include <cmath>

using namespace mlir;
using namespace distopt;
using namespace distopt::dopt;

namespace {
/// Largest result (in elements) a folder will materialise.
constexpr int64_t kMaxFoldElements = 1 << 16;

/// A constant tensor read into host values: integers (sign-extended; i1 and
/// unsigned ones zero-extended) or floats (as double).
struct HostTensor {
  RankedTensorType type;
  bool isFloat = false;
  SmallVector<int64_t> ints;
  SmallVector<double> floats;

  int64_t size() const { return isFloat ? floats.size() : ints.size(); }
};

std::optional<HostTensor> readConstant(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  auto type = dyn_cast<RankedTensorType>(dense.getType());
  if (!type || type.getNumElements() > kMaxFoldElements)
    return std::nullopt;
  HostTensor t;
  t.type = type;
  Type elt = type.getElementType();
  if (isa<FloatType>(elt)) {
    t.isFloat = true;
    for (APFloat v : dense.getValues<APFloat>())
      t.floats.push_back(v.convertToDouble());
  } else if (auto it = dyn_cast<IntegerType>(elt)) {
    bool zext = it.getWidth() == 1 || it.isUnsigned();
    for (APInt v : dense.getValues<APInt>()) {
      // A ui64 value of 2^63 or more has no int64_t host value: not folded.
      if (zext && v.getActiveBits() > 63)
        return std::nullopt;
      t.ints.push_back(zext ? (int64_t)v.getZExtValue() : v.getSExtValue());
    }
  } else {
    return std::nullopt;
  }
  return t;
}

Attribute makeConstant(RankedTensorType type, ArrayRef<int64_t> ints,
                       ArrayRef<double> floats) {
  Type elt = type.getElementType();
  if (auto ft = dyn_cast<FloatType>(elt)) {
    SmallVector<APFloat> values;
    for (double d : floats) {
      APFloat v(d);
      bool lost;
      v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      values.push_back(v);
    }
    return DenseElementsAttr::get(type, values);
  }
  auto it = cast<IntegerType>(elt);
  SmallVector<APInt> values;
  for (int64_t v : ints)
    values.push_back(it.getWidth() == 1
                         ? APInt(1, v != 0)
                         : APInt(it.getWidth(), (uint64_t)v, /*isSigned=*/true,
                                 /*implicitTrunc=*/true));
  return DenseElementsAttr::get(type, values);
}

Attribute makeConstant(const HostTensor &t) {
  return makeConstant(t.type, t.ints, t.floats);
}

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// For each element of a result of `shape`, in row-major order, its linear
/// index in the source: `source(idx)` of the element's coordinates.
template <typename Source>
SmallVector<int64_t> sourceIndices(ArrayRef<int64_t> shape, Source source) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  SmallVector<int64_t> indices;
  SmallVector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    indices.push_back(source(ArrayRef<int64_t>(idx)));
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  return indices;
}

/// For each element of `outShape`, the linear index of the element of
/// `inShape` it reads under NumPy broadcasting.
SmallVector<int64_t> broadcastIndices(ArrayRef<int64_t> outShape,
                                      ArrayRef<int64_t> inShape) {
  SmallVector<int64_t> inStrides = stridesOf(inShape);
  size_t offset = outShape.size() - inShape.size();
  return sourceIndices(outShape, [&](ArrayRef<int64_t> idx) {
    int64_t src = 0;
    for (size_t i = 0; i < inShape.size(); ++i)
      if (inShape[i] != 1)
        src += idx[offset + i] * inStrides[i];
    return src;
  });
}

/// Gathers `src` elements at `indices` into a tensor of `type`.
HostTensor take(const HostTensor &src, RankedTensorType type,
                ArrayRef<int64_t> indices) {
  HostTensor out;
  out.type = type;
  out.isFloat = src.isFloat;
  for (int64_t i : indices) {
    if (src.isFloat)
      out.floats.push_back(src.floats[i]);
    else
      out.ints.push_back(src.ints[i]);
  }
  return out;
}

/// Binary folding with broadcasting; `fi`/`ff` compute one integer/float
/// element, `std::nullopt` means "do not fold" (e.g. division by zero).
template <typename IntFn, typename FloatFn>
Attribute foldBinary(Attribute lhsAttr, Attribute rhsAttr, Type resultType,
                     IntFn fi, FloatFn ff) {
  auto type = dyn_cast<RankedTensorType>(resultType);
  if (!lhsAttr || !rhsAttr || !type ||
      type.getNumElements() > kMaxFoldElements)
    return {};
  std::optional<HostTensor> lhs = readConstant(lhsAttr);
  std::optional<HostTensor> rhs = readConstant(rhsAttr);
  if (!lhs || !rhs || lhs->isFloat != rhs->isFloat)
    return {};
  SmallVector<int64_t> li = broadcastIndices(type.getShape(),
                                             lhs->type.getShape());
  SmallVector<int64_t> ri = broadcastIndices(type.getShape(),
                                             rhs->type.getShape());
  bool resultIsFloat = isa<FloatType>(type.getElementType());
  SmallVector<int64_t> ints;
  SmallVector<double> floats;
  for (size_t k = 0; k < li.size(); ++k) {
    if (lhs->isFloat) {
      std::optional<double> v = ff(lhs->floats[li[k]], rhs->floats[ri[k]]);
      if (!v)
        return {};
      if (resultIsFloat)
        floats.push_back(*v);
      else
        ints.push_back((int64_t)*v);
    } else {
      std::optional<int64_t> v = fi(lhs->ints[li[k]], rhs->ints[ri[k]]);
      if (!v)
        return {};
      ints.push_back(*v);
    }
  }
  return makeConstant(type, ints, floats);
}

using OptI = std::optional<int64_t>;
using OptF = std::optional<double>;

/// Two's-complement wrapping arithmetic on the sign-extended values (signed
/// overflow is undefined in C++); makeConstant truncates to the element width.
int64_t wrapAdd(int64_t x, int64_t y) {
  return (int64_t)((uint64_t)x + (uint64_t)y);
}
int64_t wrapSub(int64_t x, int64_t y) {
  return (int64_t)((uint64_t)x - (uint64_t)y);
}
int64_t wrapMul(int64_t x, int64_t y) {
  return (int64_t)((uint64_t)x * (uint64_t)y);
}

/// Whether the float `d`, truncated toward zero, is a value of `type` (not i1).
bool fitsInteger(double d, IntegerType type) {
  if (!std::isfinite(d))
    return false;
  double t = std::trunc(d);
  unsigned width = type.getWidth();
  if (type.isUnsigned())
    return t >= 0.0 && t < std::ldexp(1.0, width);
  return t >= -std::ldexp(1.0, width - 1) && t < std::ldexp(1.0, width - 1);
}

/// max or min: `pick` (std::max or std::min, on int64_t and double) of two
/// constants; a NaN propagates, as in ONNX/NumPy maximum and arith.maximumf.
template <typename Pick>
Attribute foldMinMax(Attribute lhs, Attribute rhs, Type resultType, Pick pick) {
  return foldBinary(
      lhs, rhs, resultType,
      [pick](int64_t x, int64_t y) -> OptI { return pick(x, y); },
      [pick](double x, double y) -> OptF {
        return std::isnan(x) || std::isnan(y) ? NAN : pick(x, y);
      });
}
} // namespace

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

OpFoldResult AddOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](int64_t x, int64_t y) -> OptI { return wrapAdd(x, y); },
      [](double x, double y) -> OptF { return x + y; });
}
OpFoldResult SubOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](int64_t x, int64_t y) -> OptI { return wrapSub(x, y); },
      [](double x, double y) -> OptF { return x - y; });
}
OpFoldResult MulOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](int64_t x, int64_t y) -> OptI { return wrapMul(x, y); },
      [](double x, double y) -> OptF { return x * y; });
}
OpFoldResult DivOp::fold(FoldAdaptor a) {
  // The most negative signed value divided by -1 overflows (for i64 it traps
  // on x86); like division by zero, it is left to the runtime.
  int64_t minValue = 0;
  if (auto it = dyn_cast<IntegerType>(getType().getElementType()))
    if (!it.isUnsigned())
      minValue = APInt::getSignedMinValue(it.getWidth()).getSExtValue();
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [minValue](int64_t x, int64_t y) -> OptI {
        if (y == 0 || (y == -1 && x == minValue && minValue != 0))
          return std::nullopt;
        return x / y;
      },
      [](double x, double y) -> OptF { return x / y; });
}
OpFoldResult MaxOp::fold(FoldAdaptor a) {
  return foldMinMax(a.getLhs(), a.getRhs(), getType(),
                    [](auto x, auto y) { return std::max(x, y); });
}
OpFoldResult MinOp::fold(FoldAdaptor a) {
  return foldMinMax(a.getLhs(), a.getRhs(), getType(),
                    [](auto x, auto y) { return std::min(x, y); });
}
#define DOPT_COMPARE_FOLD(OP, EXPR)                                            \
  OpFoldResult OP::fold(FoldAdaptor a) {                                       \
    return foldBinary(                                                         \
        a.getLhs(), a.getRhs(), getType(),                                     \
        [](int64_t x, int64_t y) -> OptI { return (EXPR) ? 1 : 0; },           \
        [](double x, double y) -> OptF { return (EXPR) ? 1.0 : 0.0; });        \
  }
DOPT_COMPARE_FOLD(EqualOp, x == y)
DOPT_COMPARE_FOLD(LessOp, x < y)
DOPT_COMPARE_FOLD(LessEqualOp, x <= y)
DOPT_COMPARE_FOLD(GreaterOp, x > y)
DOPT_COMPARE_FOLD(GreaterEqualOp, x >= y)
#undef DOPT_COMPARE_FOLD
// Bitwise on the values' two's-complement bits (booleans are 0 and 1;
// makeConstant truncates to the type's width).
#define DOPT_BITWISE_FOLD(OP, EXPR)                                            \
  OpFoldResult OP::fold(FoldAdaptor a) {                                       \
    return foldBinary(                                                         \
        a.getLhs(), a.getRhs(), getType(),                                     \
        [](int64_t x, int64_t y) -> OptI { return EXPR; },                     \
        [](double, double) -> OptF { return std::nullopt; });                  \
  }
DOPT_BITWISE_FOLD(AndOp, x & y)
DOPT_BITWISE_FOLD(OrOp, x | y)
DOPT_BITWISE_FOLD(XorOp, x ^ y)
#undef DOPT_BITWISE_FOLD

OpFoldResult NegOp::fold(FoldAdaptor a) {
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t)
    return {};
  for (int64_t &v : t->ints)
    v = wrapSub(0, v);
  for (double &v : t->floats)
    v = -v;
  return makeConstant(*t);
}

/// Floor, Ceil and Round of constants (exporters' shape code: the output
/// size of an interpolation by a scale factor is a Floor).
static OpFoldResult foldRounding(Attribute input, double (*fn)(double)) {
  std::optional<HostTensor> t = readConstant(input);
  if (!t || !t->isFloat)
    return {};
  for (double &v : t->floats)
    v = fn(v);
  return makeConstant(*t);
}
OpFoldResult FloorOp::fold(FoldAdaptor a) {
  return foldRounding(a.getInput(), [](double v) { return std::floor(v); });
}
OpFoldResult CeilOp::fold(FoldAdaptor a) {
  return foldRounding(a.getInput(), [](double v) { return std::ceil(v); });
}
OpFoldResult RoundOp::fold(FoldAdaptor a) {
  // Halves to even, as ONNX's Round (nearbyint in the default rounding mode).
  return foldRounding(a.getInput(), [](double v) { return std::nearbyint(v); });
}

OpFoldResult NotOp::fold(FoldAdaptor a) {
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t || t->isFloat)
    return {};
  bool isBool = t->type.getElementType().isInteger(1);
  for (int64_t &v : t->ints)
    v = isBool ? (v ? 0 : 1) : ~v;
  return makeConstant(*t);
}

OpFoldResult WhereOp::fold(FoldAdaptor a) {
  auto type = getType();
  if (getLhs() == getRhs() && getLhs().getType() == type)
    return getLhs();
  std::optional<HostTensor> c = readConstant(a.getCondition());
  std::optional<HostTensor> x = readConstant(a.getLhs());
  std::optional<HostTensor> y = readConstant(a.getRhs());
  // The importer folds ops before the module is verified: check the types
  // the code below relies on rather than trust the ODS constraints.
  if (!c || !x || !y || c->isFloat || x->isFloat != y->isFloat ||
      type.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<int64_t> ci = broadcastIndices(type.getShape(),
                                             c->type.getShape());
  SmallVector<int64_t> xi = broadcastIndices(type.getShape(),
                                             x->type.getShape());
  SmallVector<int64_t> yi = broadcastIndices(type.getShape(),
                                             y->type.getShape());
  HostTensor out;
  out.type = type;
  out.isFloat = x->isFloat;
  for (size_t k = 0; k < ci.size(); ++k) {
    bool pick = c->ints[ci[k]] != 0;
    if (out.isFloat)
      out.floats.push_back(pick ? x->floats[xi[k]] : y->floats[yi[k]]);
    else
      out.ints.push_back(pick ? x->ints[xi[k]] : y->ints[yi[k]]);
  }
  return makeConstant(out);
}

OpFoldResult BitcastOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType())
    return getInput();
  auto dense = dyn_cast_or_null<DenseElementsAttr>(a.getInput());
  if (!dense)
    return {};
  Type from = dense.getElementType(), to = getType().getElementType();
  if (!from.isInteger(1) && !to.isInteger(1))
    return dense.bitcast(to);
  // A boolean's byte is 0 or 1; a byte other than 0 reads as true.
  std::optional<HostTensor> t = readConstant(dense);
  if (!t)
    return {};
  t->type = getType();
  return makeConstant(*t);
}

OpFoldResult CastOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType())
    return getInput();
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t)
    return {};
  RankedTensorType type = getType();
  Type to = type.getElementType();
  HostTensor out;
  out.type = type;
  out.isFloat = isa<FloatType>(to);
  auto intType = dyn_cast<IntegerType>(to);
  unsigned width = intType ? intType.getWidth() : 0;
  for (int64_t i = 0; i < t->size(); ++i) {
    if (out.isFloat) {
      out.floats.push_back(t->isFloat ? t->floats[i] : (double)t->ints[i]);
      continue;
    }
    int64_t v;
    if (t->isFloat) {
      double d = t->floats[i];
      if (width == 1) {
        v = d != 0.0;
      } else {
        // Out-of-range float -> int conversion is undefined in ONNX; leave
        // it to the runtime rather than folding an arbitrary value.
        if (!fitsInteger(d, intType))
          return {};
        v = (int64_t)d;
      }
    } else {
      v = width == 1 ? t->ints[i] != 0 : t->ints[i];
    }
    out.ints.push_back(v);
  }
  return makeConstant(out);
}

OpFoldResult ReshapeOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType())
    return getInput();
  // A reshaped copy of a large constant is not materialised (as for the
  // other folders); a splat costs nothing.
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(a.getInput()))
    if (dense.isSplat() || dense.getNumElements() <= kMaxFoldElements)
      return dense.reshape(getType());
  // reshape(reshape(x)) -> reshape(x)
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

OpFoldResult TransposeOp::fold(FoldAdaptor a) {
  ArrayRef<int64_t> perm = getPerm();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t)
    return {};
  RankedTensorType type = getType();
  SmallVector<int64_t> inStrides = stridesOf(t->type.getShape());
  SmallVector<int64_t> indices =
      sourceIndices(type.getShape(), [&](ArrayRef<int64_t> idx) {
        int64_t src = 0;
        for (size_t d = 0; d < perm.size(); ++d)
          src += idx[d] * inStrides[perm[d]];
        return src;
      });
  return makeConstant(take(*t, type, indices));
}

OpFoldResult ConcatOp::fold(FoldAdaptor a) {
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  RankedTensorType type = getType();
  if (type.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<HostTensor> parts;
  for (Attribute attr : a.getInputs()) {
    std::optional<HostTensor> t = readConstant(attr);
    if (!t)
      return {};
    parts.push_back(std::move(*t));
  }
  int64_t axis = getAxis();
  // Elements are copied in blocks: for each outer index, each part's slab.
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= type.getDimSize(i);
  HostTensor out;
  out.type = type;
  out.isFloat = parts.front().isFloat;
  for (int64_t o = 0; o < outer; ++o) {
    for (const HostTensor &p : parts) {
      int64_t slab = p.size() / std::max<int64_t>(outer, 1);
      for (int64_t i = 0; i < slab; ++i) {
        if (out.isFloat)
          out.floats.push_back(p.floats[o * slab + i]);
        else
          out.ints.push_back(p.ints[o * slab + i]);
      }
    }
  }
  return makeConstant(out);
}

OpFoldResult SliceOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType() &&
      llvm::all_of(getSteps(), [](int64_t s) { return s == 1; }))
    return getInput();
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t)
    return {};
  RankedTensorType type = getType();
  ArrayRef<int64_t> starts = getStarts(), steps = getSteps();
  SmallVector<int64_t> inStrides = stridesOf(t->type.getShape());
  SmallVector<int64_t> indices =
      sourceIndices(type.getShape(), [&](ArrayRef<int64_t> idx) {
        int64_t src = 0;
        for (int64_t d = 0; d < type.getRank(); ++d)
          src += (starts[d] + idx[d] * steps[d]) * inStrides[d];
        return src;
      });
  return makeConstant(take(*t, type, indices));
}

/// A constant split into its pieces (the exporters' shape arithmetic:
/// torch's repeat_interleave splits a constant shape).
LogicalResult SplitOp::fold(FoldAdaptor a, SmallVectorImpl<OpFoldResult> &results) {
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t)
    return failure();
  int64_t axis = getAxis(), offset = 0;
  ArrayRef<int64_t> shape = t->type.getShape();
  SmallVector<int64_t> inStrides = stridesOf(shape);
  for (Value piece : getOutputs()) {
    auto type = cast<RankedTensorType>(piece.getType());
    SmallVector<int64_t> indices =
        sourceIndices(type.getShape(), [&](ArrayRef<int64_t> idx) {
          int64_t src = 0;
          for (int64_t d = 0; d < type.getRank(); ++d)
            src += (idx[d] + (d == axis ? offset : 0)) * inStrides[d];
          return src;
        });
    results.push_back(makeConstant(take(*t, type, indices)));
    offset += type.getDimSize(axis);
  }
  return success();
}

/// Constant indices in range need no check; out of range, the check stays
/// and reports them when the program runs.
OpFoldResult CheckIndicesOp::fold(FoldAdaptor a) {
  std::optional<HostTensor> t = readConstant(a.getIndices());
  if (!t || t->isFloat)
    return {};
  int64_t extent = getExtent(), low = getNegative() ? -extent : 0;
  std::optional<uint64_t> ignore = getIgnore();
  for (int64_t i : t->ints)
    if ((i < low || i >= extent) && !(ignore && i == (int64_t)*ignore))
      return {};
  return getIndices();
}

OpFoldResult GatherOp::fold(FoldAdaptor a) {
  std::optional<HostTensor> data = readConstant(a.getData());
  std::optional<HostTensor> indices = readConstant(a.getIndices());
  RankedTensorType type = getType();
  // (Float indices are possible in an unverified op, see WhereOp::fold.)
  if (!data || !indices || indices->isFloat ||
      type.getNumElements() > kMaxFoldElements)
    return {};
  int64_t axis = getAxis();
  ArrayRef<int64_t> shape = data->type.getShape();
  int64_t outer = 1, inner = 1, dim = shape[axis];
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
  SmallVector<int64_t> src;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t index : indices->ints) {
      if (index < -dim || index >= dim)
        return {}; // out of range: a runtime error, not a fold
      if (index < 0)
        index += dim;
      for (int64_t i = 0; i < inner; ++i)
        src.push_back((o * dim + index) * inner + i);
    }
  return makeConstant(take(*data, type, src));
}

OpFoldResult ExpandOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType())
    return getInput();
  auto dense = dyn_cast_or_null<DenseElementsAttr>(a.getInput());
  if (dense && dense.isSplat())
    return dense.resizeSplat(getType());
  std::optional<HostTensor> t = readConstant(a.getInput());
  if (!t || getType().getNumElements() > kMaxFoldElements)
    return {};
  return makeConstant(take(*t, getType(),
                           broadcastIndices(getType().getShape(),
                                            t->type.getShape())));
}

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto shape = cast<RankedTensorType>(getInput().getType()).getShape();
  ArrayRef<int64_t> dims = shape.slice(getStart(), getEnd() - getStart());
  return DenseElementsAttr::get(getType(), dims);
}
