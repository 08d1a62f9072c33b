//===- FunctionBody.h - a function body of one block ------------*- C++ -*-===//
//
// The passes that work on a whole function body at once (the memory plan,
// the in-place updates) take functions of one block: the form bufferized
// programs have before their loops are lowered to branches.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_LIB_CODEGEN_FUNCTIONBODY_H
#define DISTOPT_LIB_CODEGEN_FUNCTIONBODY_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace distopt {

/// The return of `func` when its body is one block; null for a declaration
/// or a body of several blocks.
inline mlir::func::ReturnOp singleBlockReturn(mlir::func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return nullptr;
  return mlir::dyn_cast<mlir::func::ReturnOp>(
      func.getBody().front().getTerminator());
}

} // namespace distopt

#endif // DISTOPT_LIB_CODEGEN_FUNCTIONBODY_H
