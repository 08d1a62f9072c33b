//===- RuntimeABI.h - the runtime functions compiled code calls -*- C++ -*-===//
//
// The runtime's ABI as the compiler sees it: every function a compiled
// program may call is listed once, in include/distopt/Runtime/ABI.def, which
// the runtime defines its entry points from. The targets check each call a
// program makes against it (cpu::translateToLLVMIR).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_RUNTIMEABI_H
#define DISTOPT_CONVERSION_RUNTIMEABI_H

#include "distopt/Runtime/ABI.def"

#include "llvm/ADT/StringRef.h"

namespace distopt {

/// dort_index_fault(fault, shape, text, low, high) (Kernels.h): reports an
/// index that a dopt.check_indices found out of range. Its `shape` and
/// `text` are constant globals that stay in host memory on a GPU, where the
/// CUDA device takes `fault` on the device.
inline constexpr llvm::StringLiteral kIndexFaultFunction = "dort_index_fault";

/// Whether `name` (as a program calls it: dort_..., or the C interface
/// _mlir_ciface_dort_... of one taking memrefs) is a function of the
/// runtime's ABI (ABI.def).
inline bool isRuntimeFunction(llvm::StringRef name) {
  name.consume_front("_mlir_ciface_");
  if (!name.consume_front("dort_"))
    return false;
  bool found = false;
#define DORT_MATCH_NAME(NAME, ...) found |= name == #NAME;
  DORT_DEVICE_CALLS(DORT_MATCH_NAME)
  DORT_HOST_CALLS(DORT_MATCH_NAME)
#undef DORT_MATCH_NAME
  llvm::StringRef collective = name;
  if (!found && collective.consume_front("shard_")) {
    llvm::StringRef op, suffix;
#define DORT_MATCH_SUFFIX(SUFFIX, ...)                                         \
  if (collective.ends_with("_" #SUFFIX))                                       \
    op = collective.drop_back(sizeof(#SUFFIX)), suffix = #SUFFIX;
    DORT_COLLECTIVE_TYPES(DORT_MATCH_SUFFIX)
#undef DORT_MATCH_SUFFIX
#define DORT_MATCH_COLLECTIVE(NAME, ...) found |= !suffix.empty() && op == #NAME;
    DORT_COLLECTIVES(DORT_MATCH_COLLECTIVE)
#undef DORT_MATCH_COLLECTIVE
  }
  return found;
}

} // namespace distopt

#endif // DISTOPT_CONVERSION_RUNTIMEABI_H
