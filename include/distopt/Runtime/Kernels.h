/*===- Kernels.h - library kernels called by generated code ---*- C -*-===
 *
 * GEMM kernels on OpenBLAS, called through MLIR's C-interface memref ABI
 * (functions declared with `llvm.emit_c_interface` and called as
 * `_mlir_ciface_<name>`): a ranked memref argument arrives as a pointer to
 *   struct { T *allocated; T *aligned; int64_t offset;
 *            int64_t sizes[R]; int64_t strides[R]; }
 * with strides in elements. Scalars are passed by value.
 *
 * MLIR declaration matching the f32 2-D kernel:
 *   func.func private @dort_matmul_f32(memref<?x?xf32, strided<[?, ?], offset:
 *?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?,
 *?], offset: ?>>, i32, i32, f32, f32) attributes {llvm.emit_c_interface}
 *
 * Semantics: C = alpha * op(A) * op(B) + beta * C, op(X) = X^T when transX
 * is non-zero. 2-D: op(A) is MxK, op(B) is KxN, C is MxN. Batched 3-D:
 * the same per batch b; A or B with batch size 1 or batch stride 0 is
 * broadcast over the batch of C. When beta == 0, C is not read (NaNs in C
 * do not propagate). A and B may be any strided views (unit stride in one
 * dimension is used in place, others are copied); C may be strided too.
 * Shape mismatches are reported with dort_set_pending_error and leave C
 * untouched.
 *
 * Never includes LLVM/MLIR headers.
 *===----------------------------------------------------------------------===*/
#ifndef DISTOPT_RUNTIME_KERNELS_H
#define DISTOPT_RUNTIME_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MemRef1DF32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} MemRef1DF32;

typedef struct MemRef2DF32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
} MemRef2DF32;

typedef struct MemRef2DF64 {
  double *allocated;
  double *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
} MemRef2DF64;

typedef struct MemRef3DF32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[3];
  int64_t strides[3];
} MemRef3DF32;

typedef struct MemRef3DF64 {
  double *allocated;
  double *aligned;
  int64_t offset;
  int64_t sizes[3];
  int64_t strides[3];
} MemRef3DF64;

typedef struct MemRef4DF32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[4];
  int64_t strides[4];
} MemRef4DF32;

typedef struct MemRef4DF64 {
  double *allocated;
  double *aligned;
  int64_t offset;
  int64_t sizes[4];
  int64_t strides[4];
} MemRef4DF64;

/* An unranked memref as MLIR passes it (memrefCopy below). */
typedef struct DortUnrankedMemRef {
  int64_t rank;
  void *descriptor;
} DortUnrankedMemRef;

void _mlir_ciface_dort_matmul_f32(MemRef2DF32 *a, MemRef2DF32 *b,
                                  MemRef2DF32 *c, int32_t transA,
                                  int32_t transB, float alpha, float beta);
void _mlir_ciface_dort_matmul_f64(MemRef2DF64 *a, MemRef2DF64 *b,
                                  MemRef2DF64 *c, int32_t transA,
                                  int32_t transB, double alpha, double beta);
void _mlir_ciface_dort_batch_matmul_f32(MemRef3DF32 *a, MemRef3DF32 *b,
                                        MemRef3DF32 *c, int32_t transA,
                                        int32_t transB, float alpha,
                                        float beta);
void _mlir_ciface_dort_batch_matmul_f64(MemRef3DF64 *a, MemRef3DF64 *b,
                                        MemRef3DF64 *c, int32_t transA,
                                        int32_t transB, double alpha,
                                        double beta);

/* GEMMs of 16-bit operands (f16 or bf16 bits in uint16_t) accumulated
 * and written in f32: the same contract, op(A) and op(B) widened exactly
 * (cuBLAS's tensor cores on a GPU). */
typedef struct MemRef2DU16 {
  uint16_t *allocated;
  uint16_t *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
} MemRef2DU16;

typedef struct MemRef3DU16 {
  uint16_t *allocated;
  uint16_t *aligned;
  int64_t offset;
  int64_t sizes[3];
  int64_t strides[3];
} MemRef3DU16;

void _mlir_ciface_dort_matmul_f16_f32(MemRef2DU16 *a, MemRef2DU16 *b,
                                      MemRef2DF32 *c, int32_t transA,
                                      int32_t transB, float alpha, float beta);
void _mlir_ciface_dort_matmul_bf16_f32(MemRef2DU16 *a, MemRef2DU16 *b,
                                       MemRef2DF32 *c, int32_t transA,
                                       int32_t transB, float alpha, float beta);
void _mlir_ciface_dort_batch_matmul_f16_f32(MemRef3DU16 *a, MemRef3DU16 *b,
                                            MemRef3DF32 *c, int32_t transA,
                                            int32_t transB, float alpha,
                                            float beta);
void _mlir_ciface_dort_batch_matmul_bf16_f32(MemRef3DU16 *a, MemRef3DU16 *b,
                                             MemRef3DF32 *c, int32_t transA,
                                             int32_t transB, float alpha,
                                             float beta);

/* A GEMM with its epilogue (what `--target cuda` and `cuda-emu` make of a
 * GEMM followed by a bias, residual or activation step; the CUDA runtime's
 * device runs it with cuBLASLt):
 *   D = act(alpha * op(A) * op(B) + beta * R + bias[column])
 * R is read only when beta != 0 (it may be D itself); bias only when
 * hasBias, with one element per column of D. act: DORT_ACT_NONE,
 * DORT_ACT_RELU (max(x, 0)) or DORT_ACT_GELU_TANH
 * (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))). */
enum { DORT_ACT_NONE = 0, DORT_ACT_RELU = 1, DORT_ACT_GELU_TANH = 2 };
void _mlir_ciface_dort_matmul_epilogue_f32(MemRef2DF32 *a, MemRef2DF32 *b,
                                           MemRef2DF32 *d, MemRef2DF32 *r,
                                           MemRef1DF32 *bias, int32_t transA,
                                           int32_t transB, float alpha,
                                           float beta, int32_t act,
                                           int32_t hasBias);
/* The same with A, B, D, R and the bias f16 (bf16): computed in f32, D
 * rounded once. */
typedef struct MemRef1DU16 {
  uint16_t *allocated;
  uint16_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} MemRef1DU16;
void _mlir_ciface_dort_matmul_epilogue_f16(MemRef2DU16 *a, MemRef2DU16 *b,
                                           MemRef2DU16 *d, MemRef2DU16 *r,
                                           MemRef1DU16 *bias, int32_t transA,
                                           int32_t transB, float alpha,
                                           float beta, int32_t act,
                                           int32_t hasBias);
void _mlir_ciface_dort_matmul_epilogue_bf16(MemRef2DU16 *a, MemRef2DU16 *b,
                                            MemRef2DU16 *d, MemRef2DU16 *r,
                                            MemRef1DU16 *bias, int32_t transA,
                                            int32_t transB, float alpha,
                                            float beta, int32_t act,
                                            int32_t hasBias);

/* A 2-D convolution (what `--target cuda` and `cuda-emu` lower dopt.conv
 * to; the CUDA device runs it with cuDNN):
 *   y[n, m, i, j] = sum_{c, u, v} x[n, g*C/G + c, i*sh + u*dh - ph,
 *                                   j*sw + v*dw - pw] * w[m, c, u, v]
 * with g = m / (M/G), zero outside x, on strided views x [N, C, H, W],
 * w [M, C/G, kh, kw], y [N, M, ho, wo] (written whole). */
void _mlir_ciface_dort_conv2d_f32(MemRef4DF32 *x, MemRef4DF32 *w,
                                  MemRef4DF32 *y, int64_t strideH,
                                  int64_t strideW, int64_t padH, int64_t padW,
                                  int64_t dilationH, int64_t dilationW,
                                  int64_t groups);
void _mlir_ciface_dort_conv2d_f64(MemRef4DF64 *x, MemRef4DF64 *w,
                                  MemRef4DF64 *y, int64_t strideH,
                                  int64_t strideW, int64_t padH, int64_t padW,
                                  int64_t dilationH, int64_t dilationW,
                                  int64_t groups);

/* The input gradient of that convolution, a transposed convolution (what
 * the CUDA targets lower dopt.conv_transpose to; the CUDA runtime's
 * device runs it with cuDNN's backward data):
 *   dx[n, g*C/G + c, i*sh + u*dh - ph, j*sw + v*dw - pw] +=
 *       sum_m dy[n, g*M/G + m, i, j] * w[g*M/G + m, c, u, v]
 * over every (i, j, u, v) that lands inside dx, on strided views dy
 * [N, M, ho, wo], w [M, C/G, kh, kw], dx [N, C, H, W] (written whole: zero
 * where nothing lands). The shapes fit as for dort_conv2d with x = dx. */
void _mlir_ciface_dort_conv2d_backward_data_f32(
    MemRef4DF32 *dy, MemRef4DF32 *w, MemRef4DF32 *dx, int64_t strideH,
    int64_t strideW, int64_t padH, int64_t padW, int64_t dilationH,
    int64_t dilationW, int64_t groups);
void _mlir_ciface_dort_conv2d_backward_data_f64(
    MemRef4DF64 *dy, MemRef4DF64 *w, MemRef4DF64 *dx, int64_t strideH,
    int64_t strideW, int64_t padH, int64_t padW, int64_t dilationH,
    int64_t dilationW, int64_t groups);

/* Sets the number of threads of the run: the OpenMP pool shared by the
 * generated loops and the GEMM kernels (OpenBLAS itself is set to one
 * thread; the kernels cut GEMMs into one block per thread). n > 0: use n.
 * n <= 0: $DISTOPT_NUM_THREADS, else $OMP_NUM_THREADS when set to a positive
 * integer, else the CPUs this process may run on (sched_getaffinity) -- and
 * when the process is not bound to a subset of the machine, those divided
 * by the processes of its job on this node ($OMPI_COMM_WORLD_LOCAL_SIZE,
 * $MPI_LOCALNRANKS, $SLURM_NTASKS_PER_NODE). Returns the count set. Called
 * by dort_main at start and by the kernels on first use. */
int dort_set_num_threads(int n);

/* For `--target cuda-emu` bundles: whether an emulated kernel runs a
 * block's threads in increasing order between barriers (1) or in reverse
 * (0). $DISTOPT_EMULATE_THREADS=forward or reverse decides; unset or empty,
 * `dflt` (the compile's --emulate-threads). Any other value is refused by
 * dort_emulate_threads_check (dort_main calls it at start); here it counts as
 * unset. Read once. */
int32_t dort_emulate_threads_forward(int32_t dflt);

/* 0 when $DISTOPT_EMULATE_THREADS is unset, empty, "forward" or "reverse";
 * otherwise non-zero after dort_set_error naming the value. */
int dort_emulate_threads_check(void);

/* The BLAS library's kernels, for logs: OpenBLAS's name for the CPU type
 * whose kernels it loaded ("SkylakeX", "Haswell", ...; it honours
 * $OPENBLAS_CORETYPE), or "unknown" for a library that does not say. */
const char *dort_blas_kernels(void);

/* The runtime's implementation of MLIR's `memrefCopy` (what memref.copy of
 * non-contiguous memrefs lowers to; normally in libmlir_c_runner_utils):
 * copies src to dst element-wise, both of rank src->rank, any strides.
 * Lives in its own object file, so it is linked only when referenced. */
void memrefCopy(int64_t elemSize, DortUnrankedMemRef *src,
                DortUnrankedMemRef *dst);

typedef struct MemRef1DI64 {
  int64_t *allocated;
  int64_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} MemRef1DI64;

typedef struct MemRef1DI8 {
  int8_t *allocated;
  int8_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} MemRef1DI8;

/* What a dopt.check_indices calls (lib/Conversion/DoptToLinalg/
 * CheckIndices.cpp): `fault` holds [the flat position of the first index
 * outside [low, high], that index], the position INT64_MAX when every index
 * is in range; `shape` the indices' shape and `text` (NUL-terminated) what
 * they index, with its ONNX node. An index out of range records a pending
 * error (dort_set_pending_error), "<text>: index V at [i, j, ...] is outside
 * [low, high]", which fails the run after the entry point returns. The
 * CUDA device takes `fault` on the device. */
void _mlir_ciface_dort_index_fault(MemRef1DI64 *fault, MemRef1DI64 *shape,
                                   MemRef1DI8 *text, int64_t low,
                                   int64_t high);

#ifdef __cplusplus
}

namespace distopt::runtime {
/* A ranked memref descriptor of element type T and rank R, as MLIR lays it
 * out (the typed structs above, generically). */
template <typename T, int R> struct MemRef {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[R];
  int64_t strides[R];
};

/* The output extent of a convolution along one dimension. */
inline int64_t convOutputSize(int64_t in, int64_t kernel, int64_t stride,
                              int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

/* Whether dort_conv2d's operands (sizes x [N, C, H, W], w [M, C/groups, kh,
 * kw], y [N, M, ho, wo]) fit its parameters; false after a pending error
 * naming `name` and every shape. The CPU and CUDA runtimes' one rule. */
bool conv2dShapesFit(const char *name, const int64_t *xs, const int64_t *ws,
                     const int64_t *ys, int64_t strideH, int64_t strideW,
                     int64_t padH, int64_t padW, int64_t dilationH,
                     int64_t dilationW, int64_t groups);
} // namespace distopt::runtime
#endif

#endif /* DISTOPT_RUNTIME_KERNELS_H */
