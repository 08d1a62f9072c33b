//===- DoptOps.h - dopt operations ------------------------------*- C++ -*-===//
#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTOPS_H
#define DISTOPT_DIALECT_DOPT_IR_DOPTOPS_H

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir {
class ImplicitLocOpBuilder;
} // namespace mlir
// The types of the questions the stages answer through external models
// (DoptInterfaces.td); each stage defines its own.
namespace distopt::planner {
struct OpShardingRule;
struct OpCost;
struct CostOptions;
} // namespace distopt::planner

#include "distopt/Dialect/Dopt/IR/DoptInterfaces.h.inc"

namespace distopt::dopt::OpTrait {
/// distopt-autocast's precision policy (DoptInterfaces.td): computes in
/// 16 bits with fp32 accumulation.
template <typename ConcreteType>
class Autocast16 : public mlir::OpTrait::TraitBase<ConcreteType, Autocast16> {
};
/// distopt-autocast's precision policy: stays fp32.
template <typename ConcreteType>
class AutocastF32
    : public mlir::OpTrait::TraitBase<ConcreteType, AutocastF32> {};
} // namespace distopt::dopt::OpTrait

#define GET_OP_CLASSES
#include "distopt/Dialect/Dopt/IR/DoptOps.h.inc"

namespace distopt::dopt {

/// NumPy/ONNX multidirectional broadcasting of static shapes. Returns
/// std::nullopt when two dimensions differ and neither is 1.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// Output size of one spatial dimension of a convolution or pooling window.
/// Returns a negative value when the window does not fit.
int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t padBegin, int64_t padEnd, int64_t dilation,
                         bool ceilMode);

/// Average pooling's divisor along one spatial dimension: how many of the
/// window's taps at output position `out` (input positions out·stride −
/// padBegin + k·dilation, k < kernel) lie in the input, or with
/// `countIncludePad` in the input plus its explicit pads; the overhang of a
/// ceil_mode window never counts (ONNX's rule; at least 1). A window's
/// divisor is the product over its dimensions.
int64_t windowTapCount(int64_t out, int64_t in, int64_t kernel,
                       int64_t stride, int64_t padBegin, int64_t padEnd,
                       int64_t dilation, bool countIncludePad);

/// Output size of one spatial dimension of a transposed convolution
/// (dopt.conv_transpose): stride·(in − 1) + outputPadding + dilation·(kernel
/// − 1) + 1 − padBegin − padEnd (may be non-positive: the caller checks).
int64_t transposedOutputSize(int64_t in, int64_t kernel, int64_t stride,
                             int64_t padBegin, int64_t padEnd,
                             int64_t dilation, int64_t outputPadding);

/// The value of `v` when it is a dopt.constant of floats holding one value
/// in every element (a splat, a scalar among them), else std::nullopt.
std::optional<double> splatFloatConstant(mlir::Value v);

/// Number of elements selected by a normalised slice (see dopt.slice).
int64_t sliceSize(int64_t start, int64_t end, int64_t step);

/// Whether every slice of `value` along dimension `dim` holds the same
/// elements (a splat, or a mask broadcast over the batch that the importer
/// folded into a constant). Such a constant can be cut along `dim` to any
/// size: see resizeUniform.
bool isUniformAlong(mlir::DenseElementsAttr value, int64_t dim);

/// `value` (uniform along `dim`) with dimension `dim` resized to
/// `size`.
mlir::DenseElementsAttr resizeUniform(mlir::DenseElementsAttr value,
                                      int64_t dim, int64_t size);

} // namespace distopt::dopt

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTOPS_H
