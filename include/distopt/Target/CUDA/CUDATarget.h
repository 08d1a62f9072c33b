//===- CUDATarget.h - dopt -> CUDA kernels + host code ----------*- C++ -*-===//
//
// The CUDA codegen tail (docs/cuda-codegen.md). It shares the CPU target's
// stages up to the loop nests on buffers (cpu::lowerToLoops); then
//   - the loop nests become gpu.launch (distopt-map-loops-to-gpu), outlined
//     into one gpu.module of kernels;
//   - the kernels go through upstream's NVVM path to PTX (libdevice from the
//     configured toolkit), which distopt assembles with ptxas for each
//     requested architecture and packs with fatbinary (SASS per
//     architecture plus the PTX, for GPUs newer than all of them);
//   - the host code calls the CUDA runtime (libdistopt_runtime_cuda):
//     launches, cuBLAS GEMMs, device allocations and staged collectives.
// The entry `dopt_entry(void **host_buffers)` has the CPU target's signature:
// the runtime uploads inputs (and weights, once), runs the device entry and
// downloads outputs, so the driver and the launchers are the same.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TARGET_CUDA_CUDATARGET_H
#define DISTOPT_TARGET_CUDA_CUDATARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace distopt::cuda {

struct CUDAOptions {
  /// The CUDA toolkit (ptxas, fatbinary, nvvm/libdevice).
  std::string toolkit;
  /// Architectures to assemble SASS for ("sm_80", "sm_90"); the PTX of the
  /// lowest is embedded too.
  std::vector<std::string> archs = {"sm_80", "sm_90"};
};

/// The toolkit this distopt was configured with ("" when none was found).
std::string defaultToolkit();
/// Whether this distopt was built with the CUDA runtime library.
bool runtimeAvailable();
/// Whether that runtime runs convolutions with cuDNN (its headers were
/// found): `--target cuda` then lowers them to dort_conv2d calls, else to
/// im2col + GEMM.
bool cudnnConvolutions();

/// Checks the options: the toolkit's tools exist, the architectures are
/// known (sm_75 and newer). Returns "" or the error.
std::string checkOptions(const CUDAOptions &options);

/// linalg on tensors -> kernels in a gpu.module (the `--emit=gpu` stage):
/// bufferization, loop mapping, outlining.
mlir::LogicalResult lowerToGPU(mlir::ModuleOp module,
                               llvm::SmallVectorImpl<mlir::MemRefType> &argTypes,
                               std::vector<int8_t> &bufferKinds);

/// The kernels' PTX (the `--emit=ptx` stage); the module keeps the binary.
mlir::LogicalResult compileKernels(mlir::ModuleOp module,
                                   const CUDAOptions &options,
                                   std::string *ptx = nullptr);

/// After compileKernels: the host code to the LLVM dialect with the
/// `dopt_entry` wrapper.
mlir::LogicalResult lowerHostToLLVM(mlir::ModuleOp module,
                                    llvm::ArrayRef<mlir::MemRefType> argTypes,
                                    llvm::ArrayRef<int8_t> bufferKinds);

/// The emulation target (`--target cuda-emu`): the same loop mapping as
/// lowerToGPU, then every kernel run on the host as sequential loops over
/// its blocks and threads (`distopt-emulate-gpu-launches`), and the rest of
/// the CPU pipeline; GEMMs and collectives use the CPU runtime. It checks
/// the kernels' logic where no GPU is present, not their speed, and not the
/// NVVM lowering or the CUDA runtime. `emitGPU` stops after the mapping
/// (the kernels as gpu.launch, before emulation). The executable asks the
/// runtime which order a block's threads run in between barriers
/// (DISTOPT_EMULATE_THREADS=forward or reverse); `forward` is the order when
/// the environment does not say (increasing; otherwise reverse).
mlir::LogicalResult
lowerForEmulation(mlir::ModuleOp module, bool emitGPU, bool forward = false,
                  std::optional<int64_t> outlineMinOps = std::nullopt);

/// Libraries a CUDA executable links (before the common runtime).
std::vector<std::string> linkLibraries();

} // namespace distopt::cuda

#endif // DISTOPT_TARGET_CUDA_CUDATARGET_H
