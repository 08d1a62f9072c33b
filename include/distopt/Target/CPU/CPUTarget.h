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
#include <vector>

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
  /// Threads for machine code generation (emitObjectFiles); 0: one per
  /// hardware thread.
  unsigned codegenThreads = 0;
  /// Modules of fewer LLVM instructions are compiled whole (a part is at
  /// least a quarter of this).
  size_t codegenSplitMin = 20000;
};

/// Dialects and interfaces (bufferization, translation) the pipeline needs.
void registerCPUTargetDialects(mlir::DialectRegistry &registry);

/// Runs `pipeline`, a textual pass list anchored on the module (no
/// `builtin.module(...)` wrapper), with every upstream and distopt pass
/// registered.
mlir::LogicalResult runPipeline(mlir::ModuleOp module, llvm::StringRef pipeline);

/// dopt -> linalg on tensors, with elementwise fusion (the `--emit=linalg`
/// stage). Renames @main to @dopt_main. With `libraryConvolutions` (the
/// CUDA targets), float convolutions become calls of the runtime's
/// dort_conv2d_<type> (cuDNN on a GPU) instead of im2col + GEMM; transposed
/// convolutions are dort_conv2d_backward_data_<type> calls either way.
/// With `fuseAttention`, attention chains whose scores nothing else reads
/// become dopt.attention (distopt-fuse-attention); every dopt.attention is
/// computed over blocks of keys (distopt-expand-attention). With
/// `outlineRepeats`, each run of repeated op sequences becomes one function
/// called per copy (distopt-outline-repeats) before anything is lowered.
mlir::LogicalResult lowerToLinalg(mlir::ModuleOp module,
                                  bool libraryConvolutions = false,
                                  bool fuseAttention = true,
                                  bool outlineRepeats = true);

/// A program's own private functions (a micro-batch's forward and backward,
/// an outlined layer) are local to its object file: the programs of a
/// bundle each have their own. Marked on the func ops before lowering to
/// LLVM, made internal on the LLVM functions after.
void markLocalFunctions(mlir::ModuleOp module);
void internalizeLocalFunctions(mlir::ModuleOp module);

/// Contiguous copies of at most this many bytes stay memcpys on CPUs
/// (distopt-copies-to-linalg's memcpy-max-bytes): an f32 copy that small
/// is under distopt-parallelize-loops' 32768 iterations, so as a loop it
/// would run on one thread too.
inline constexpr int64_t kCpuMemcpyMaxBytes = 128 * 1024;

/// linalg on tensors -> loops on buffers: bufferization (results become
/// out-parameters), GEMMs as runtime calls, linalg as `scf.parallel` nests,
/// row-local fusion and the static memory plan. The stage every target
/// shares; `argTypes` receives dopt_main's buffer types (the entry's
/// buffers). With `gemmEpilogues` (the CUDA targets), a GEMM's bias,
/// residual and activation step joins its call (cuBLASLt's epilogues).
/// Contiguous copies of at most `memcpyMaxBytes` stay memref.copy (memcpy;
/// 0 for the GPU targets, whose copies are kernels).
mlir::LogicalResult
lowerToLoops(mlir::ModuleOp module,
             llvm::SmallVectorImpl<mlir::MemRefType> &argTypes,
             bool gemmEpilogues = false,
             int64_t memcpyMaxBytes = kCpuMemcpyMaxBytes);

/// linalg on tensors -> LLVM dialect, plus the `dopt_entry` wrapper.
/// `outlineMinOps`: distopt-outline-loop-nests' min-ops (unset: its
/// default).
mlir::LogicalResult
lowerToLLVMDialect(mlir::ModuleOp module,
                   std::optional<int64_t> outlineMinOps = std::nullopt);
/// The second half of lowerToLLVMDialect: loops on buffers (what
/// lowerToLoops leaves; `argTypes` its buffer types) -> LLVM dialect, with
/// large functions split into functions of bounded size
/// (distopt-outline-loop-nests) and OpenMP for the parallel loops, plus the
/// `dopt_entry` wrapper.
mlir::LogicalResult
lowerLoopsToLLVMDialect(mlir::ModuleOp module,
                        llvm::ArrayRef<mlir::MemRefType> argTypes,
                        std::optional<int64_t> outlineMinOps = std::nullopt);

/// Adds `int32_t NAME(void **buffers)` calling the lowered dopt_main with one
/// memref descriptor per buffer (static shape, identity layout).
mlir::LogicalResult addEntryPoint(mlir::ModuleOp module,
                                  llvm::ArrayRef<mlir::MemRefType> argTypes,
                                  llvm::StringRef name);

/// LLVM dialect -> optimised LLVM IR for the host (or `options.cpu`).
std::unique_ptr<llvm::Module> translateToLLVMIR(mlir::ModuleOp module,
                                                llvm::LLVMContext &context,
                                                const CPUOptions &options);

/// Writes `llvmModule` as a relocatable object file.
mlir::LogicalResult emitObjectFile(llvm::Module &llvmModule,
                                   llvm::StringRef path,
                                   const CPUOptions &options);

/// Writes `llvmModule` (optimised) as relocatable object files and returns
/// their paths: `path` alone for a small module or one thread; a large one
/// is cut between functions into parts of about equal size, each compiled on
/// its own thread (`path` with ".partN" inserted before ".o"). The module's
/// local symbols become hidden globals named `<tag>.<name>`: `tag` must
/// differ between the modules linked into one executable.
mlir::FailureOr<std::vector<std::string>>
emitObjectFiles(llvm::Module &llvmModule, llvm::StringRef path,
                llvm::StringRef tag, const CPUOptions &options);

/// Links objects with the runtime into an executable using the system
/// compiler driver (`cc`). `runtimeLibDir` holds libdistopt_runtime*.a;
/// `targetLibs` (a device target's runtime and libraries) come before it.
/// With `sharedRuntime` (a shared library name, e.g. distopt_runtime_shared)
/// the executable loads that library instead of linking the runtime's
/// archives and `targetLibs` (the shared library holds them). With
/// `library`, the output is a shared library (`<model>.so`: the program
/// without main(), for a host process; BundleAPI.h), which needs
/// `sharedRuntime`.
mlir::LogicalResult
linkExecutable(llvm::ArrayRef<std::string> objects, llvm::StringRef output,
               llvm::StringRef runtimeLibDir, std::string &errorMessage,
               llvm::ArrayRef<std::string> targetLibs = {},
               llvm::StringRef sharedRuntime = {}, bool library = false);

} // namespace distopt::cpu

#endif // DISTOPT_TARGET_CPU_CPUTARGET_H
