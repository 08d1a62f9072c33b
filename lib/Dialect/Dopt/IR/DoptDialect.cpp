//===- DoptDialect.cpp - the dopt dialect ---------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace distopt::dopt;

#include "distopt/Dialect/Dopt/IR/DoptDialect.cpp.inc"

void DoptDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "distopt/Dialect/Dopt/IR/DoptOps.cpp.inc"
      >();
}

Operation *DoptDialect::materializeConstant(OpBuilder &builder,
                                            Attribute value, Type type,
                                            Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
