/*===- CUDA.h - the CUDA runtime that CUDA bundles call -------------*- C -*-===
 *
 * libdistopt_runtime_cuda (built where a CUDA toolkit is found; linked
 * with the CUDA runtime statically, so an executable starts on a machine
 * without a driver and reports it). What the CUDA target's generated host
 * code calls (lib/Target/CUDA, docs/cuda-codegen.md):
 *
 *  - dort_cuda_run: the body of a CUDA bundle's dopt_entry. On first use it
 *    picks the device (local rank modulo the visible devices), creates the
 *    rank's stream and cuBLAS handle. Each run uploads the inputs, uploads
 *    each weight once (cached by its host address), runs the device entry
 *    on device buffers and downloads the outputs, then waits for the stream.
 *    Buffers a training loop carries from outputs to inputs
 *    (dort_device_carry, Runtime.h) stay on the device: after each run their
 *    device buffers swap, nothing crosses PCIe for them, and
 *    dort_device_sync downloads them when the host needs them
 *    (DISTOPT_CUDA_RESIDENT=0: copied every run instead).
 *  - dort_cuda_launch: one kernel launch on the rank's stream; the image
 *    (a fatbin) is loaded once per process.
 *  - _mlir_memref_to_llvm_alloc/aligned_alloc/free: the host code's
 *    allocations (the arena of the static memory plan) are device memory,
 *    kept in a pool so a repeated run allocates nothing.
 *  - the CUDA device (Device.h), registered as the current device when
 *    the library loads, so a program's library calls and collectives
 *    (ABI.def) take device buffers:
 *    - the GEMMs (matmul_*, batch_matmul_*): Kernels.h's contract through
 *      cuBLAS (fp32 exact by default; DISTOPT_CUDA_TF32=1 allows TF32
 *      tensor cores); 16-bit operands with f32 accumulation and result
 *      through cublasGemmStridedBatchedEx on tensor cores;
 *    - matmul_epilogue_{f32,f16,bf16}: the GEMM with its bias, residual and
 *      activation, through cuBLASLt's epilogues (one plan per type, shape,
 *      layout and pointer alignment; the algorithm is cuBLASLt's
 *      heuristic's first);
 *    - the convolutions (conv2d_*, conv2d_backward_data_*) through cuDNN;
 *    - the collectives of Distributed.h, staged through host memory into
 *      the CPU device's (device -> host -> MPI -> host -> device). Debian's
 *      OpenMPI is not CUDA-aware, and NCCL refuses two ranks on one GPU:
 *      staging is what lets a partitioned program run multi-rank on one
 *      GPU. It tests the programs, not NCCL. DISTOPT_CUDA_COMM=nccl (opt-in
 *      until checked on several GPUs) sends the all-reduces, all-gathers and
 *      reduce-scatters of contiguous buffers through NCCL on the rank's
 *      stream instead, one communicator per grid axis (libnccl.so.2 loaded
 *      when first needed);
 *    - index_fault: Kernels.h's dort_index_fault with its fault pair on the
 *      device: copied (asynchronously) into pinned host memory, and reported
 *      after the run, when the stream has drained.
 *
 * Errors: a launch, GEMM or copy that fails records a pending error
 * (Runtime.h) naming the kernel or call and CUDA's message; dort_cuda_run
 * returns non-zero with dort_set_error when the device cannot be used (no
 * driver, no device, out of memory with the bytes asked and free).
 * DISTOPT_CUDA_SYNC=1 waits after every launch, so an error names the kernel
 * that raised it. DISTOPT_CUDA_PROFILE=1 times every kernel, GEMM and copy
 * with CUDA events and prints the largest by device time at exit (each
 * program's first run left out).
 *===----------------------------------------------------------------------===*/
#ifndef DISTOPT_RUNTIME_CUDA_H
#define DISTOPT_RUNTIME_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "distopt/Runtime/Comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kinds[i]: 0 input (uploaded each run), 1 weight (uploaded once), 2 output
 * (downloaded); bytes[i]: the buffer's size. */
int32_t dort_cuda_run(void **host_buffers, int32_t (*device_entry)(void **),
                      int32_t count, const int8_t *kinds,
                      const int64_t *bytes);

/* args: nargs 8-byte slots, one per kernel parameter (a pointer, an integer
 * zero-extended, a float's bits in the low bytes). */
void dort_cuda_launch(const void *image, const char *kernel, int64_t gx,
                      int64_t gy, int64_t gz, int64_t bx, int64_t by,
                      int64_t bz, int32_t smem, int64_t *args, int32_t nargs);

void *_mlir_memref_to_llvm_alloc(size_t size);
void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size);
void _mlir_memref_to_llvm_free(void *ptr);

/* NCCL's bootstrap over MPI: rank 0 of `comm` makes a unique id (bytes
 * must be NCCL's 128) and broadcasts it; every rank of `comm` calls this
 * and receives the same id. Needs libnccl.so.2 but no GPU. */
int dort_nccl_unique_id(dort_comm *comm, void *id, int64_t bytes);

/* Device properties for messages and tests: "NVIDIA H100 80GB HBM3 (sm_90)"
 * or "" when no device could be opened (dort_last_error_message says why). */
const char *dort_cuda_device_name(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RUNTIME_CUDA_H */
