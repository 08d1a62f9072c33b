//===- RuntimeABI.h - runtime functions the lowerings call -----*- C++ -*-===//
//
// Names of the runtime's C functions (include/distopt/Runtime/*.h) that more
// than one compiler stage refers to.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_RUNTIMEABI_H
#define DISTOPT_CONVERSION_RUNTIMEABI_H

#include "llvm/ADT/StringRef.h"

namespace distopt {

/// dort_index_fault(fault, shape, text, low, high) (Kernels.h): reports an
/// index that a dopt.check_indices found out of range. Its `shape` and
/// `text` are constant globals that stay in host memory on a GPU; the CUDA
/// target calls its `dort_cuda_` twin, which takes `fault` on the device.
inline constexpr llvm::StringLiteral kIndexFaultFunction = "dort_index_fault";
inline constexpr llvm::StringLiteral kCudaIndexFaultFunction =
    "dort_cuda_index_fault";

/// Whether `callee` is the index fault or its CUDA twin.
inline bool isIndexFaultFunction(llvm::StringRef callee) {
  return callee == kIndexFaultFunction || callee == kCudaIndexFaultFunction;
}

} // namespace distopt

#endif // DISTOPT_CONVERSION_RUNTIMEABI_H
