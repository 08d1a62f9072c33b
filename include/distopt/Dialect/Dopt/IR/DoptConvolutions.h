//===- DoptConvolutions.h - convolution shapes as dopt ops ------*- C++ -*-===//
//
// One truth for the transposed convolution as a plain one: the CPU target
// lowers dopt.conv_transpose through it (the CUDA targets call cuDNN's
// backward-data convolution instead), and autodiff's rules use its pieces.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTCONVOLUTIONS_H
#define DISTOPT_DIALECT_DOPT_IR_DOPTCONVOLUTIONS_H

#include "mlir/IR/Builders.h"
#include "mlir/Support/LLVM.h"

namespace distopt::dopt {

/// `v` padded with zeros (a positive entry) or cropped (a negative one) by
/// `begin`/`end` elements at the two ends of each dimension.
mlir::Value padOrCrop(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                      llvm::ArrayRef<int64_t> begin,
                      llvm::ArrayRef<int64_t> end);

/// The NCHW tensor `v` with sh − 1 (sw − 1) zero rows (columns) between
/// neighbouring rows (columns): [N, C, (H−1)·sh + 1, (W−1)·sw + 1].
mlir::Value dilateSpatial(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value v, int64_t sh, int64_t sw);

/// dopt.conv_transpose(x, w, bias; strides, pads, dilations, output
/// padding, group) as a dopt.conv of x dilated by the strides and padded to
/// full (ext − 1 − begin before, ext − 1 − end + output padding after,
/// ext = dilation·(k − 1) + 1), with w flipped and each group's [C/G, M/G]
/// block transposed to the conv's [M/G, C/G] (weights [M, C/G, kh, kw]),
/// stride 1 and the same dilations and group.
mlir::Value convTransposeAsConv(mlir::OpBuilder &b, mlir::Location loc,
                                mlir::Value x, mlir::Value w, mlir::Value bias,
                                llvm::ArrayRef<int64_t> strides,
                                llvm::ArrayRef<int64_t> pads,
                                llvm::ArrayRef<int64_t> dilations,
                                llvm::ArrayRef<int64_t> outputPadding,
                                int64_t group);

} // namespace distopt::dopt

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTCONVOLUTIONS_H
