//===- Passes.h - distopt conversion passes ---------------------*- C++ -*-===//
#ifndef DISTOPT_CONVERSION_PASSES_H
#define DISTOPT_CONVERSION_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Conversion/Passes.h.inc"

} // namespace distopt

#endif // DISTOPT_CONVERSION_PASSES_H
