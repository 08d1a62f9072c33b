//===- DoptLosses.cpp - losses as compositions of dopt ops ----------------===//

#include "distopt/Dialect/Dopt/IR/DoptLosses.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include <numeric>
#include <sstream>

using namespace mlir;
using namespace distopt;

static std::string shapeOf(ArrayRef<int64_t> dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

FailureOr<Value> dopt::buildNegativeLogLikelihood(
    OpBuilder &b, Location loc, Value logp, Value target, Value weight,
    std::optional<int64_t> ignoreIndex, StringRef reduction,
    std::string &error, function_ref<Value(Value)> acrossReplicas,
    std::optional<ClassSplit> split) {
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    error = ("reduction must be \"none\", \"sum\" or \"mean\", got \"" +
             reduction + "\"")
                .str();
    return failure();
  }
  auto type = cast<RankedTensorType>(logp.getType());
  auto ttype = cast<RankedTensorType>(target.getType());
  int64_t rank = type.getRank();
  if (rank < 2 || !isa<FloatType>(type.getElementType())) {
    error = "the scores must be floats of shape [N, C, d1, ...], got " +
            shapeOf(type.getShape());
    return failure();
  }
  SmallVector<int64_t> expect{type.getDimSize(0)};
  llvm::append_range(expect, type.getShape().drop_front(2));
  if (ttype.getShape() != ArrayRef<int64_t>(expect)) {
    error = "target shape " + shapeOf(ttype.getShape()) +
            " does not match the scores' " + shapeOf(type.getShape()) +
            " without their class axis";
    return failure();
  }
  if (!ttype.getElementType().isInteger(32) &&
      !ttype.getElementType().isInteger(64)) {
    error = "target must hold int32 or int64 class indices";
    return failure();
  }
  Type elt = type.getElementType();
  auto i64 = b.getI64Type();
  int64_t classes = type.getDimSize(1);
  if (weight && split) {
    error = "per-class weights with a split class axis are not supported";
    return failure();
  }
  if (weight) {
    auto wtype = cast<RankedTensorType>(weight.getType());
    if (wtype.getShape() != ArrayRef<int64_t>{classes} ||
        wtype.getElementType() != elt) {
      error = "weight must be a [" + std::to_string(classes) +
              "] tensor of the scores' element type";
      return failure();
    }
  }
  if (!ttype.getElementType().isInteger(64))
    target = CastOp::create(b, loc, target, TypeAttr::get(i64));
  // target as [N, 1, d...] against iota [1, C, 1, ...].
  SmallVector<int64_t> withClass(expect);
  withClass.insert(withClass.begin() + 1, 1);
  Value t1 = ReshapeOp::create(b, loc, target, b.getDenseI64ArrayAttr(withClass));
  SmallVector<int64_t> iotaShape(rank, 1);
  iotaShape[1] = classes;
  SmallVector<int64_t> iota(classes);
  std::iota(iota.begin(), iota.end(), 0);
  Value classesIota = ConstantOp::create(
      b, loc, DenseElementsAttr::get(RankedTensorType::get(iotaShape, i64),
                                     ArrayRef<int64_t>(iota)));
  // A split class axis: this rank's classes start at the offset.
  if (split)
    classesIota = AddOp::create(b, loc, classesIota, split->offset);
  Value mask = EqualOp::create(b, loc, t1, classesIota);
  Value zero = ConstantOp::create(
      b, loc, DenseElementsAttr::get(RankedTensorType::get({}, elt),
                                     b.getZeroAttr(elt)));
  auto sumClasses = [&](Value v) -> Value {
    return ReduceSumOp::create(b, loc, v, b.getDenseI64ArrayAttr({1}),
                               b.getBoolAttr(false));
  };
  Value picked = sumClasses(WhereOp::create(b, loc, mask, logp, zero));
  if (split)
    picked = split->acrossClasses(picked);
  Value w;
  if (split) {
    w = ConstantOp::create(b, loc,
                           DenseElementsAttr::get(
                               RankedTensorType::get(expect, elt),
                               b.getFloatAttr(elt, 1.0)));
  } else if (weight) {
    Value wb = ReshapeOp::create(b, loc, weight, b.getDenseI64ArrayAttr(iotaShape));
    w = sumClasses(WhereOp::create(b, loc, mask, wb, zero));
  } else {
    w = sumClasses(CastOp::create(b, loc, mask, TypeAttr::get(elt)));
  }
  if (ignoreIndex) {
    Value ii = ConstantOp::create(
        b, loc, DenseElementsAttr::get(RankedTensorType::get({}, i64),
                                       ArrayRef<int64_t>{*ignoreIndex}));
    Value counted = NotOp::create(b, loc, EqualOp::create(b, loc, target, ii));
    w = WhereOp::create(b, loc, counted, w, zero);
  }
  Value loss = NegOp::create(b, loc, MulOp::create(b, loc, picked, w));
  if (reduction == "none")
    return loss;
  SmallVector<int64_t> all(rank - 1);
  std::iota(all.begin(), all.end(), 0);
  auto sumAll = [&](Value v) -> Value {
    Value local = ReduceSumOp::create(b, loc, v, b.getDenseI64ArrayAttr(all),
                                      b.getBoolAttr(false));
    return acrossReplicas ? acrossReplicas(local) : local;
  };
  Value total = sumAll(loss);
  if (reduction == "sum")
    return total;
  return Value(DivOp::create(b, loc, total, sumAll(w)));
}
