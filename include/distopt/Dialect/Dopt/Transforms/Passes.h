//===- Passes.h - distopt dopt program preparation passes -------------------*- C++ -*-===//
#ifndef DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_H
#define DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"

} // namespace distopt

#endif // DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_H
