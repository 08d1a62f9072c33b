//===- DoptToLinalgInternal.h - the lowering's parts -----------*- C++ -*-===//
//
// Internal to lib/Conversion/DoptToLinalg: the patterns kept in files of
// their own, for the pass in DoptToLinalg.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_CONVERSION_DOPTTOLINALG_INTERNAL_H
#define DISTOPT_LIB_CONVERSION_DOPTTOLINALG_INTERNAL_H

#include "distopt/Conversion/RuntimeABI.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"

namespace distopt {

/// The row-major coordinates in `shape` of the flat index `flat` (an
/// index value), as index values.
llvm::SmallVector<mlir::Value> rowMajorCoords(mlir::OpBuilder &b,
                                              mlir::Location loc,
                                              mlir::Value flat,
                                              llvm::ArrayRef<int64_t> shape);

/// Declares dort_index_fault in `module` when a dopt.check_indices will
/// call it.
void declareIndexFault(mlir::ModuleOp module);

/// dopt.check_indices (CheckIndices.cpp); `checks` counts the checks
/// lowered, which name their globals.
void populateCheckIndicesPattern(mlir::RewritePatternSet &patterns,
                                 mlir::TypeConverter &converter,
                                 int64_t *checks);

} // namespace distopt

#endif // DISTOPT_LIB_CONVERSION_DOPTTOLINALG_INTERNAL_H
