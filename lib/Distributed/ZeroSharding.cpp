//===- ZeroSharding.cpp - ZeRO-1's layout of a parameter's shards ---------===//

#include "distopt/Distributed/ZeroSharding.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

using namespace mlir;

Value distopt::zero::toChunks(OpBuilder &b, Location loc, Value v,
                              int64_t replicas) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t n = type.getNumElements(), c = chunk(n, replicas);
  Value flat = dopt::ReshapeOp::create(b, loc, v, b.getDenseI64ArrayAttr({n}));
  if (c * replicas > n) {
    auto padType = RankedTensorType::get({c * replicas - n}, type.getElementType());
    Value zeros = dopt::ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(padType, b.getZeroAttr(type.getElementType())));
    flat = dopt::ConcatOp::create(b, loc, ValueRange{flat, zeros},
                                  b.getI64IntegerAttr(0));
  }
  return dopt::ReshapeOp::create(b, loc, flat,
                                 b.getDenseI64ArrayAttr({replicas, c}));
}

Value distopt::zero::fromChunks(OpBuilder &b, Location loc, Value flat,
                                RankedTensorType type) {
  int64_t n = type.getNumElements();
  if (cast<RankedTensorType>(flat.getType()).getDimSize(0) != n)
    flat = dopt::SliceOp::create(b, loc, flat, b.getDenseI64ArrayAttr({0}),
                                 b.getDenseI64ArrayAttr({n}),
                                 b.getDenseI64ArrayAttr({1}));
  return dopt::ReshapeOp::create(b, loc, flat,
                                 b.getDenseI64ArrayAttr(type.getShape()));
}
