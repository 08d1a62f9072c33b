//===- Passes.h - distopt code generation passes ----------------------------*- C++ -*-===//
#ifndef DISTOPT_CODEGEN_PASSES_H
#define DISTOPT_CODEGEN_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Codegen/Passes.h.inc"

} // namespace distopt

#endif // DISTOPT_CODEGEN_PASSES_H
