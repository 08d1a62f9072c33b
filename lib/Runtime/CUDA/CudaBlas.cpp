//===- CudaBlas.cpp - GEMMs through cuBLAS and cuBLASLt -------------------===//
//
// Kernels.h's GEMM contract on device buffers: plain and batched GEMMs
// through cuBLAS (f32, f64, and 16-bit operands with f32 accumulation), and
// GEMMs with a bias, residual and activation through cuBLASLt's epilogues.
//
//===----------------------------------------------------------------------===//

#include "CudaInternal.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

using namespace distopt::runtime::cuda::detail;

//===----------------------------------------------------------------------===//
// GEMMs (Kernels.h's contract) through cuBLAS
//===----------------------------------------------------------------------===//

namespace {

/// A row-major matrix view [rows, cols] with strides [rs, cs], as cuBLAS's
/// column-major operand: its transpose with leading dimension ld, or (when
/// the view is column-major itself) the matrix with `flip` set.
struct BlasOperand {
  bool ok = false;
  bool flip = false;
  int64_t ld = 0;
};

BlasOperand asBlas(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  BlasOperand o;
  if (cols == 1 || cs == 1) {
    o.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    o.ok = o.ld >= std::max<int64_t>(cols, 1);
    return o;
  }
  if (rows == 1 || rs == 1) {
    o.flip = true;
    o.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    o.ok = o.ld >= std::max<int64_t>(rows, 1);
    return o;
  }
  return o;
}

/// op(A) is m x k, op(B) kb x n (they fit when k == kb).
std::array<int64_t, 4> gemmDims(const int64_t *aSizes, const int64_t *bSizes,
                                int32_t transA, int32_t transB) {
  return {transA ? aSizes[1] : aSizes[0], transA ? aSizes[0] : aSizes[1],
          transB ? bSizes[1] : bSizes[0], transB ? bSizes[0] : bSizes[1]};
}

template <typename T>
cublasStatus_t gemmBatched(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           const T *alpha, const T *a, int lda, long long sa,
                           const T *b, int ldb, long long sb, const T *beta,
                           T *c, int ldc, long long sc, int batch);

template <>
cublasStatus_t gemmBatched<float>(cublasHandle_t h, cublasOperation_t ta,
                                  cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *a, int lda,
                                  long long sa, const float *b, int ldb,
                                  long long sb, const float *beta, float *c,
                                  int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b,
                                   ldb, sb, beta, c, ldc, sc, batch);
}

template <>
cublasStatus_t
gemmBatched<double>(cublasHandle_t h, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k,
                    const double *alpha, const double *a, int lda, long long sa,
                    const double *b, int ldb, long long sb, const double *beta,
                    double *c, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b,
                                   ldb, sb, beta, c, ldc, sc, batch);
}

/// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] on device views; 2-D views
/// are a batch of one (batch strides 0). A and B are T, or 16-bit (TI =
/// uint16_t, `abType` CUDA_R_16F or CUDA_R_16BF) with T = float.
template <typename T, typename TI = T>
void gemm(const char *name, TI *a, const int64_t *aSizes, const int64_t *aStr,
          TI *b, const int64_t *bSizes, const int64_t *bStr, T *c,
          const int64_t *cSizes, const int64_t *cStr, int64_t aBatch,
          int64_t aBatchStride, int64_t bBatch, int64_t bBatchStride,
          int64_t cBatch, int64_t cBatchStride, int32_t transA, int32_t transB,
          T alpha, T beta, cudaDataType abType = CUDA_R_32F) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  auto [m, k, kb, n] = gemmDims(aSizes, bSizes, transA, transB);
  if (k != kb || cSizes[0] != m || cSizes[1] != n ||
      (aBatch != 1 && aBatch != cBatch) || (bBatch != 1 && bBatch != cBatch)) {
    dort_set_pending_error(1, "%s: shapes do not match", name);
    return;
  }
  if (m == 0 || n == 0 || cBatch == 0)
    return;
  BlasOperand oa = asBlas(aSizes[0], aSizes[1], aStr[0], aStr[1]);
  BlasOperand ob = asBlas(bSizes[0], bSizes[1], bStr[0], bStr[1]);
  BlasOperand oc = asBlas(cSizes[0], cSizes[1], cStr[0], cStr[1]);
  if (!oa.ok || !ob.ok || !oc.ok || oc.flip) {
    dort_set_pending_error(1,
                           "%s: a strided view cuBLAS cannot take (no unit "
                           "stride in either dimension)",
                           name);
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  bool tA = (transA != 0) != oa.flip, tB = (transB != 0) != ob.flip;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  auto call = [&] {
    cublasOperation_t opB = tB ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opA = tA ? CUBLAS_OP_T : CUBLAS_OP_N;
    long long sa = aBatch == 1 ? 0 : aBatchStride,
              sb = bBatch == 1 ? 0 : bBatchStride;
    if constexpr (std::is_same_v<TI, T>) {
      st = gemmBatched<T>(
          s.blas, opB, opA, static_cast<int>(n), static_cast<int>(m),
          static_cast<int>(k), &alpha, b, static_cast<int>(ob.ld), sb, a,
          static_cast<int>(oa.ld), sa, &beta, c, static_cast<int>(oc.ld),
          cBatchStride, static_cast<int>(cBatch));
    } else {
      // 16-bit operands, f32 accumulation: the default math mode lets
      // cuBLAS use tensor cores (the products are exact in f32).
      cublasSetMathMode(s.blas, CUBLAS_DEFAULT_MATH);
      st = cublasGemmStridedBatchedEx(
          s.blas, opB, opA, static_cast<int>(n), static_cast<int>(m),
          static_cast<int>(k), &alpha, b, abType, static_cast<int>(ob.ld), sb,
          a, abType, static_cast<int>(oa.ld), sa, &beta, c, CUDA_R_32F,
          static_cast<int>(oc.ld), cBatchStride, static_cast<int>(cBatch),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      cublasSetMathMode(s.blas, s.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                       : CUBLAS_PEDANTIC_MATH);
    }
  };
  if (profiler().on)
    profiled(s.stream,
             std::string("cuBLAS ") + name + " " + std::to_string(m) + "x" +
                 std::to_string(n) + "x" + std::to_string(k) +
                 (cBatch > 1 ? " batch " + std::to_string(cBatch) : "") +
                 (transA ? " A^T" : "") + (transB ? " B^T" : ""),
             call);
  else
    call();
  if (st != CUBLAS_STATUS_SUCCESS)
    dort_set_pending_error(1, "%s (%lldx%lldx%lld, batch %lld): cuBLAS: %s",
                           name, static_cast<long long>(m),
                           static_cast<long long>(n), static_cast<long long>(k),
                           static_cast<long long>(cBatch),
                           cublasGetStatusString(st));
  else if (s.syncEachLaunch)
    check(cudaStreamSynchronize(s.stream), name);
}

/// gemm on memref descriptors: 2-D, or 3-D with the batch first. A and B
/// of C's element type T, or 16-bit (`abType`) with an f32 C.
template <typename T, typename MA, typename MC>
void gemmOn(const char *name, MA *a, MA *b, MC *c, int32_t ta, int32_t tb,
            T alpha, T beta, cudaDataType abType = CUDA_R_32F) {
  constexpr int d = std::size(decltype(MA::sizes){}) - 2; // batch dims
  using TI = std::remove_pointer_t<decltype(MA::aligned)>;
  gemm<T, TI>(name, a->aligned + a->offset, a->sizes + d, a->strides + d,
              b->aligned + b->offset, b->sizes + d, b->strides + d,
              c->aligned + c->offset, c->sizes + d, c->strides + d,
              d ? a->sizes[0] : 1, d ? a->strides[0] : 0, d ? b->sizes[0] : 1,
              d ? b->strides[0] : 0, d ? c->sizes[0] : 1, d ? c->strides[0] : 0,
              ta, tb, alpha, beta, abType);
}

//===----------------------------------------------------------------------===//
// GEMMs with epilogues (Kernels.h's dort_matmul_epilogue_f32) through cuBLASLt
//===----------------------------------------------------------------------===//

/// The largest power of two up to 256 that divides the address: what
/// cuBLASLt's algorithm choice may assume of a pointer (a 16-bit view at an
/// odd element: 2).
uint32_t alignmentOf(const void *p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a)
    a /= 2;
  return a;
}

/// A cuBLASLt matmul for one shape, layout, epilogue and set of pointer
/// alignments: descriptors and the heuristic's algorithm, made once.
struct LtPlan {
  std::string error;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

struct LtState {
  cublasLtHandle_t handle = nullptr;
  std::string error;
  std::map<std::vector<int64_t>, LtPlan> plans;
};

LtState &ltState() {
  static LtState l;
  return l;
}

/// How much workspace cuBLASLt's algorithms may use (what NVIDIA suggests
/// for Hopper).
constexpr uint64_t kLtWorkspace = 32u << 20;

std::string ltMessage(const char *what, cublasStatus_t st) {
  return std::string(what) + ": " + cublasGetStatusString(st);
}

/// The plan of a row-major D[m, n] = act(alpha op(A) op(B) + beta R + bias)
/// as cuBLASLt's column-major D^T = op(B)^T op(A)^T: cuBLASLt's A is our B
/// (its rows are D's columns, so the bias runs along them), its B our A.
LtPlan &ltPlan(cudaDataType type, int64_t m, int64_t n, int64_t k, bool tA,
               bool tB, const BlasOperand &oa, const BlasOperand &ob,
               int64_t ldr, int64_t ldd, cublasLtEpilogue_t epilogue,
               const void *pa, const void *pb, const void *pr, const void *pd,
               const void *pbias) {
  DeviceState &s = state();
  LtState &l = ltState();
  uint32_t align[5] = {alignmentOf(pa), alignmentOf(pb), alignmentOf(pr),
                       alignmentOf(pd), pbias ? alignmentOf(pbias) : 0};
  std::vector<int64_t> key = {m,      n,
                              k,      tA,
                              tB,     oa.ld,
                              ob.ld,  ldr,
                              ldd,    static_cast<int64_t>(epilogue),
                              s.tf32, static_cast<int64_t>(type)};
  key.insert(key.end(), align, align + 5);
  auto found = l.plans.find(key);
  if (found != l.plans.end())
    return found->second;
  LtPlan &plan = l.plans[key];
  cublasStatus_t st;
  auto fail = [&](const char *what) -> LtPlan & {
    plan.error = ltMessage(what, st);
    return plan;
  };
  if (!l.handle && (st = cublasLtCreate(&l.handle)) != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtCreate");
  cublasOperation_t opA = tB ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opB = tA ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint64_t u32 = static_cast<uint64_t>(n), um = static_cast<uint64_t>(m),
           uk = static_cast<uint64_t>(k);
  // f32: TF32 only when asked; 16-bit operands: tensor cores, f32
  // accumulation (the FAST_TF32 compute type takes f32 operands only).
  if ((st = cublasLtMatmulDescCreate(&plan.desc,
                                     s.tf32 && type == CUDA_R_32F
                                         ? CUBLAS_COMPUTE_32F_FAST_TF32
                                         : CUBLAS_COMPUTE_32F,
                                     CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulDescCreate");
  if ((st = cublasLtMatmulDescSetAttribute(
           plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA))) ||
      (st = cublasLtMatmulDescSetAttribute(
           plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB))) ||
      (st = cublasLtMatmulDescSetAttribute(plan.desc,
                                           CUBLASLT_MATMUL_DESC_EPILOGUE,
                                           &epilogue, sizeof(epilogue))) ||
      (pbias && (st = cublasLtMatmulDescSetAttribute(
                     plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pbias,
                     sizeof(pbias)))))
    return fail("cublasLtMatmulDescSetAttribute");
  // Stored shapes, column-major: cuBLASLt's A is n x k (k x n transposed),
  // its B k x m (m x k transposed), C and D n x m.
  if ((st = cublasLtMatrixLayoutCreate(&plan.a, type, tB ? uk : u32,
                                       tB ? u32 : uk, ob.ld)) ||
      (st = cublasLtMatrixLayoutCreate(&plan.b, type, tA ? um : uk,
                                       tA ? uk : um, oa.ld)) ||
      (st = cublasLtMatrixLayoutCreate(&plan.c, type, u32, um, ldr)) ||
      (st = cublasLtMatrixLayoutCreate(&plan.d, type, u32, um, ldd)))
    return fail("cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t pref = nullptr;
  if ((st = cublasLtMatmulPreferenceCreate(&pref)))
    return fail("cublasLtMatmulPreferenceCreate");
  uint64_t wsMax = kLtWorkspace;
  cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsMax, sizeof(wsMax));
  // cuBLASLt's A is our B, and so on.
  const cublasLtMatmulPreferenceAttributes_t alignAttr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t alignOf[4] = {align[1], align[0], align[2], align[3]};
  for (int i = 0; i < 4; ++i)
    cublasLtMatmulPreferenceSetAttribute(pref, alignAttr[i], &alignOf[i],
                                         sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  st = cublasLtMatmulAlgoGetHeuristic(l.handle, plan.desc, plan.a, plan.b,
                                      plan.c, plan.d, pref, 1, &result,
                                      &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0) {
    plan.error = "cuBLASLt has no algorithm for this GEMM and epilogue";
    return plan;
  }
  plan.algo = result.algo;
  plan.workspace = result.workspaceSize;
  return plan;
}

/// D = act(alpha op(A) op(B) + beta R + bias) on device views of `type`
/// (f32, or f16/bf16 computed in f32), M2/M1 their descriptors.
template <typename M2, typename M1>
void gemmEpilogue(const char *name, cudaDataType type, const M2 *a, const M2 *b,
                  const M2 *d, const M2 *r, const M1 *bias, int32_t transA,
                  int32_t transB, float alpha, float beta, int32_t act,
                  int32_t hasBias) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  auto [m, k, kb, n] = gemmDims(a->sizes, b->sizes, transA, transB);
  if (k != kb || d->sizes[0] != m || d->sizes[1] != n ||
      (beta != 0.0f && (r->sizes[0] != m || r->sizes[1] != n)) ||
      (hasBias && bias->sizes[0] != n)) {
    dort_set_pending_error(1, "%s: shapes do not match", name);
    return;
  }
  if (act != DORT_ACT_NONE && act != DORT_ACT_RELU &&
      act != DORT_ACT_GELU_TANH) {
    dort_set_pending_error(1, "%s: unknown activation %d", name, (int)act);
    return;
  }
  if (m == 0 || n == 0)
    return;
  BlasOperand oa =
      asBlas(a->sizes[0], a->sizes[1], a->strides[0], a->strides[1]);
  BlasOperand ob =
      asBlas(b->sizes[0], b->sizes[1], b->strides[0], b->strides[1]);
  BlasOperand od = asBlas(m, n, d->strides[0], d->strides[1]);
  BlasOperand orr =
      beta != 0.0f ? asBlas(m, n, r->strides[0], r->strides[1]) : od;
  if (!oa.ok || !ob.ok || !od.ok || od.flip || !orr.ok || orr.flip ||
      (hasBias && bias->sizes[0] > 1 && bias->strides[0] != 1)) {
    dort_set_pending_error(1,
                           "%s: a strided view cuBLASLt cannot take (no unit "
                           "stride in either dimension, or a strided bias)",
                           name);
    return;
  }
  bool tA = (transA != 0) != oa.flip, tB = (transB != 0) != ob.flip;
  const void *pa = a->aligned + a->offset, *pb = b->aligned + b->offset;
  void *pd = d->aligned + d->offset;
  const void *pr = beta != 0.0f ? r->aligned + r->offset : pd;
  const void *pbias = hasBias ? bias->aligned + bias->offset : nullptr;
  cublasLtEpilogue_t epilogue =
      act == DORT_ACT_RELU
          ? (hasBias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
      : act == DORT_ACT_GELU_TANH
          ? (hasBias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
          : (hasBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  LtPlan &plan = ltPlan(type, m, n, k, tA, tB, oa, ob, orr.ld, od.ld, epilogue,
                        pa, pb, pr, pd, pbias);
  std::string error = plan.error;
  void *work = nullptr;
  if (error.empty() && plan.workspace)
    work = libraryWorkspace(plan.workspace, error);
  if (!error.empty()) {
    if (!s.captureBroken)
      dort_set_pending_error(1, "%s (%lldx%lldx%lld): %s", name, (long long)m,
                             (long long)n, (long long)k, error.c_str());
    return;
  }
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  auto call = [&] {
    if (pbias)
      st = cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pbias, sizeof(pbias));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmul(ltState().handle, plan.desc, &alpha, pb, plan.a, pa,
                          plan.b, &beta, pr, plan.c, pd, plan.d, &plan.algo,
                          work, plan.workspace, s.stream);
  };
  static const char *actNames[] = {"", " + ReLU", " + GELU"};
  if (profiler().on)
    profiled(s.stream,
             std::string("cuBLASLt ") + name + " " + std::to_string(m) + "x" +
                 std::to_string(n) + "x" + std::to_string(k) +
                 (hasBias ? " + bias" : "") + (beta != 0.0f ? " + R" : "") +
                 actNames[act],
             call);
  else
    call();
  if (st != CUBLAS_STATUS_SUCCESS)
    dort_set_pending_error(1, "%s (%lldx%lldx%lld): cuBLASLt: %s", name,
                           (long long)m, (long long)n, (long long)k,
                           cublasGetStatusString(st));
  else if (s.syncEachLaunch)
    check(cudaStreamSynchronize(s.stream), name);
}

} // namespace

/// Kernels.h's GEMMs of element type T on device views M: 2-D, or 3-D with
/// the batch first.
#define DORT_CUDA_GEMM(NAME, M, T)                                             \
  void CudaDevice::NAME(M *a, M *b, M *c, int32_t ta, int32_t tb, T alpha,     \
                        T beta) {                                              \
    gemmOn<T>("dort_cuda_" #NAME, a, b, c, ta, tb, alpha, beta);               \
  }
DORT_CUDA_GEMM(matmul_f32, MemRef2DF32, float)
DORT_CUDA_GEMM(matmul_f64, MemRef2DF64, double)
DORT_CUDA_GEMM(batch_matmul_f32, MemRef3DF32, float)
DORT_CUDA_GEMM(batch_matmul_f64, MemRef3DF64, double)
#undef DORT_CUDA_GEMM

/// 16-bit operands (`TYPE` CUDA_R_16F or CUDA_R_16BF), f32 accumulation
/// and result.
#define DORT_CUDA_GEMM16(NAME, TYPE)                                           \
  void CudaDevice::matmul_##NAME##_f32(                             \
      MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DF32 *c, int32_t ta, int32_t tb,  \
      float alpha, float beta) {                                               \
    gemmOn<float>("dort_cuda_matmul_" #NAME "_f32", a, b, c, ta, tb, alpha,    \
                  beta, TYPE);                                                 \
  }                                                                            \
  void CudaDevice::batch_matmul_##NAME##_f32(                       \
      MemRef3DU16 *a, MemRef3DU16 *b, MemRef3DF32 *c, int32_t ta, int32_t tb,  \
      float alpha, float beta) {                                               \
    gemmOn<float>("dort_cuda_batch_matmul_" #NAME "_f32", a, b, c, ta, tb,     \
                  alpha, beta, TYPE);                                          \
  }
DORT_CUDA_GEMM16(f16, CUDA_R_16F)
DORT_CUDA_GEMM16(bf16, CUDA_R_16BF)
#undef DORT_CUDA_GEMM16

/// Kernels.h's GEMM with its epilogue on device views of `TYPE`: M2 the
/// matrices' descriptor, M1 the bias's.
#define DORT_CUDA_GEMM_EPILOGUE(NAME, M2, M1, TYPE)                            \
  void CudaDevice::matmul_epilogue_##NAME(                          \
      M2 *a, M2 *b, M2 *d, M2 *r, M1 *bias, int32_t ta, int32_t tb,            \
      float alpha, float beta, int32_t act, int32_t hasBias) {                 \
    gemmEpilogue("dort_cuda_matmul_epilogue_" #NAME, TYPE, a, b, d, r, bias,   \
                 ta, tb, alpha, beta, act, hasBias);                           \
  }
DORT_CUDA_GEMM_EPILOGUE(f32, MemRef2DF32, MemRef1DF32, CUDA_R_32F)
DORT_CUDA_GEMM_EPILOGUE(f16, MemRef2DU16, MemRef1DU16, CUDA_R_16F)
DORT_CUDA_GEMM_EPILOGUE(bf16, MemRef2DU16, MemRef1DU16, CUDA_R_16BF)
#undef DORT_CUDA_GEMM_EPILOGUE
