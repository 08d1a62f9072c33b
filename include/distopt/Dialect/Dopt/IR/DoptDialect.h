//===- DoptDialect.h - the dopt dialect -------------------------*- C++ -*-===//
#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTDIALECT_H
#define DISTOPT_DIALECT_DOPT_IR_DOPTDIALECT_H

#include "mlir/IR/Dialect.h"

#include "distopt/Dialect/Dopt/IR/DoptDialect.h.inc"

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTDIALECT_H
