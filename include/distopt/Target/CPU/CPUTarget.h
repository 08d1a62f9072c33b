//===- CPUTarget.h - dopt -> native CPU code --------------------*- C++ -*-===//
//
// The CPU codegen tail: lowers a dopt module (weights outlined into @main's
// arguments) through linalg, bufferization and loops to the LLVM dialect,
// adds the C entry point the runtime calls, and emits an object file through
// LLVM's target machine, in process.
//
// The entry point: `int32_t dopt_entry(void **buffers)`, buffers in the order
// of @main's arguments after outlining (graph inputs, then weights), then one
// per result: dense row-major, statically shaped.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TARGET_CPU_CPUTARGET_H
#define DISTOPT_TARGET_CPU_CPUTARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace mlir {
class DialectRegistry;
}
namespace llvm {
class Module;
class LLVMContext;
} // namespace llvm

namespace distopt::cpu {

struct CPUOptions {
  /// LLVM CPU name; "native" is the host CPU (with its features).
  std::string cpu = "native";
  unsigned optLevel = 3;
};

/// Dialects and interfaces (bufferization, translation) the pipeline needs.
void registerCPUTargetDialects(mlir::DialectRegistry &registry);

/// dopt -> linalg on tensors, with elementwise fusion (the `--emit=linalg`
/// stage). Renames @main to @dopt_main.
mlir::LogicalResult lowerToLinalg(mlir::ModuleOp module);

/// linalg on tensors -> LLVM dialect, plus the `dopt_entry` wrapper.
mlir::LogicalResult lowerToLLVMDialect(mlir::ModuleOp module);

/// LLVM dialect -> optimised LLVM IR for the host (or `options.cpu`).
std::unique_ptr<llvm::Module> translateToLLVMIR(mlir::ModuleOp module,
                                                llvm::LLVMContext &context,
                                                const CPUOptions &options);

/// Writes `llvmModule` as a relocatable object file.
mlir::LogicalResult emitObjectFile(llvm::Module &llvmModule,
                                   llvm::StringRef path,
                                   const CPUOptions &options);

/// Links objects with the runtime into an executable using the system
/// compiler driver (`cc`). `runtimeLibDir` holds libdistopt_runtime*.a.
mlir::LogicalResult linkExecutable(llvm::ArrayRef<std::string> objects,
                                   llvm::StringRef output,
                                   llvm::StringRef runtimeLibDir,
                                   std::string &errorMessage);

} // namespace distopt::cpu

#endif // DISTOPT_TARGET_CPU_CPUTARGET_H
