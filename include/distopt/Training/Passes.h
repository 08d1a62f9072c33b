//===- Passes.h - distopt training passes -----------------------------------*- C++ -*-===//
#ifndef DISTOPT_TRAINING_PASSES_H
#define DISTOPT_TRAINING_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Training/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Training/Passes.h.inc"

} // namespace distopt

#endif // DISTOPT_TRAINING_PASSES_H
