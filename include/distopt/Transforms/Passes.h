//===- Passes.h - distopt transformation passes -----------------*- C++ -*-===//
#ifndef DISTOPT_TRANSFORMS_PASSES_H
#define DISTOPT_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace distopt {

#define GEN_PASS_DECL
#include "distopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Transforms/Passes.h.inc"

} // namespace distopt

#endif // DISTOPT_TRANSFORMS_PASSES_H
