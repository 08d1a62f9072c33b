//===- CudaRuntime.cpp - device, launches, GEMMs, staged collectives ------===//
//
// See include/distopt/Runtime/CUDA.h. CUDA runtime API (cudart_static) and
// cuBLAS; no LLVM/MLIR.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/CUDA.h"

#include "NcclEngine.h"

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct DeviceState {
  bool tried = false;
  bool ok = false;
  std::string error;
  int device = -1;
  std::string name;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  bool syncEachLaunch = false;
  std::unordered_map<const void *, cudaLibrary_t> libraries;
  std::unordered_map<const char *, cudaKernel_t> kernels;
  // Device memory pool: freed blocks by size, reused by exact size.
  std::multimap<size_t, void *> freeBlocks;
  std::unordered_map<void *, size_t> liveBlocks;
  // Per entry point: its device buffers (inputs, outputs) by position.
  std::unordered_map<void *, std::vector<void *>> entryBuffers;
  // Weights on the device, by host address.
  std::unordered_map<const void *, void *> weights;
  // Buffers carried from one run's outputs to the next run's inputs on the
  // device (dort_device_carry): the host buffer array of the runs they
  // belong to, the entry (bound at the first such run), the slot pairs,
  // whether the device holds their latest values (after a run; the host's
  // are stale then) and whether the host has them too (after a sync).
  struct Carry {
    void **host = nullptr;
    void *entry = nullptr;
    std::vector<std::pair<int64_t, int64_t>> pairs; // input slot, output slot
    std::vector<int8_t> carriedIn, carriedOut;      // by slot
    std::vector<int64_t> bytes;                     // by slot
    bool resident = false, hostFresh = false;
  } carry;
  int rank = 0; // for the profile's title
};

DeviceState &state() {
  static DeviceState s;
  return s;
}

bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

/// DISTOPT_CUDA_PROFILE=1: the device time of every kernel, GEMM and
/// upload or download of a run's buffers, measured with CUDA events around
/// it on the rank's stream,
/// summed by name and printed (the 25 largest) when the process ends.
struct Profiler {
  bool on = false;
  struct Span {
    std::string name;
    cudaEvent_t start, stop;
  };
  std::vector<Span> open;            // recorded, not read yet
  std::vector<cudaEvent_t> spare;    // events to reuse
  std::map<std::string, std::pair<int64_t, double>> total; // count, ms

  cudaEvent_t event() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess)
      return nullptr;
    return e;
  }
  int64_t skipped = 0; // first runs of entries, not counted
  /// Reads the spans (after the stream is synchronised); `count` false
  /// drops them (a warm-up run).
  void collect(bool count = true) {
    for (Span &sp : open) {
      float ms = 0;
      if (count && cudaEventElapsedTime(&ms, sp.start, sp.stop) == cudaSuccess) {
        auto &t = total[sp.name];
        ++t.first;
        t.second += ms;
      }
      spare.push_back(sp.start);
      spare.push_back(sp.stop);
    }
    open.clear();
  }
  void print() {
    if (total.empty())
      return;
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(
        total.begin(), total.end());
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
      return a.second.second > b.second.second;
    });
    double sum = 0;
    for (auto &r : rows)
      sum += r.second.second;
    if (sum <= 0)
      return;
    std::fprintf(stderr,
                 "distopt CUDA profile (rank %d): %.3f ms of device time in "
                 "%zu kinds of work (the first run of each program, %lld, "
                 "not counted: module loads, cuBLAS's first calls)\n"
                 "%10s %8s %6s  %s\n",
                 state().rank,
                 sum, rows.size(), static_cast<long long>(skipped), "ms",
                 "calls", "share", "what");
    for (size_t i = 0; i < rows.size() && i < 25; ++i)
      std::fprintf(stderr, "%10.3f %8lld %5.1f%%  %s\n", rows[i].second.second,
                   static_cast<long long>(rows[i].second.first),
                   100.0 * rows[i].second.second / sum, rows[i].first.c_str());
  }
};

Profiler &profiler() {
  static Profiler p;
  return p;
}

/// Times what `work` puts on `stream` (when profiling) under `name`.
template <typename Work>
void profiled(cudaStream_t stream, const std::string &name, Work &&work) {
  Profiler &p = profiler();
  if (!p.on) {
    work();
    return;
  }
  Profiler::Span sp{name, p.event(), p.event()};
  if (!sp.start || !sp.stop) {
    work();
    return;
  }
  cudaEventRecord(sp.start, stream);
  work();
  cudaEventRecord(sp.stop, stream);
  p.open.push_back(sp);
}

std::string cudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Opens the device of this rank once; false (with state().error) when
/// there is no usable one.
bool ensureDevice() {
  DeviceState &s = state();
  if (s.tried)
    return s.ok;
  s.tried = true;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    s.error = "no usable CUDA device (" + cudaMessage(e) +
              "); a CUDA bundle needs an NVIDIA GPU and its driver";
    return false;
  }
  if (count == 0) {
    s.error = "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
    return false;
  }
  int local = 0;
  if (dort_comm_initialized()) {
    local = dort_comm_local_rank(dort_comm_world());
    s.rank = dort_comm_rank(dort_comm_world());
  }
  s.device = local % count;
  if ((e = cudaSetDevice(s.device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) !=
          cudaSuccess) {
    s.error = "cannot open CUDA device " + std::to_string(s.device) + ": " +
              cudaMessage(e);
    return false;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, s.device) == cudaSuccess)
    s.name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
             std::to_string(prop.minor) + ")";
  cublasStatus_t st = cublasCreate(&s.blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    s.error = std::string("cuBLAS could not start: ") +
              cublasGetStatusString(st);
    return false;
  }
  cublasSetStream(s.blas, s.stream);
  cublasSetMathMode(s.blas, envFlag("DISTOPT_CUDA_TF32")
                                ? CUBLAS_TF32_TENSOR_OP_MATH
                                : CUBLAS_PEDANTIC_MATH);
  s.syncEachLaunch = envFlag("DISTOPT_CUDA_SYNC");
  if (envFlag("DISTOPT_CUDA_PROFILE")) {
    profiler().on = true;
    std::atexit([] {
      cudaStreamSynchronize(state().stream);
      profiler().collect();
      profiler().print();
    });
  }
  s.ok = true;
  return true;
}

void *deviceAlloc(size_t size, std::string &error) {
  DeviceState &s = state();
  if (size == 0)
    size = 1;
  auto it = s.freeBlocks.find(size);
  if (it != s.freeBlocks.end()) {
    void *p = it->second;
    s.freeBlocks.erase(it);
    s.liveBlocks[p] = size;
    return p;
  }
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e != cudaSuccess) {
    // Give the pool back and try once more.
    cudaGetLastError();
    cudaStreamSynchronize(s.stream);
    for (auto &[bytes, q] : s.freeBlocks)
      cudaFree(q);
    s.freeBlocks.clear();
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t freeBytes = 0, total = 0;
    cudaMemGetInfo(&freeBytes, &total);
    error = "out of device memory: asked for " + std::to_string(size) +
            " bytes, " + std::to_string(freeBytes) + " of " +
            std::to_string(total) + " free on device " +
            std::to_string(s.device);
    return nullptr;
  }
  s.liveBlocks[p] = size;
  return p;
}

void deviceFree(void *p) {
  DeviceState &s = state();
  auto it = s.liveBlocks.find(p);
  if (it == s.liveBlocks.end())
    return;
  // Stream-ordered reuse: the next user is on the same stream.
  s.freeBlocks.emplace(it->second, p);
  s.liveBlocks.erase(it);
}

bool check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  dort_set_pending_error(1, "CUDA %s failed: %s", what, cudaMessage(e).c_str());
  return false;
}

} // namespace

extern "C" {

const char *dort_cuda_device_name(void) {
  if (!ensureDevice()) {
    dort_set_error(1, "%s", state().error.c_str());
    return "";
  }
  return state().name.c_str();
}

void *_mlir_memref_to_llvm_alloc(size_t size) {
  std::string error;
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", state().error.c_str());
    return nullptr;
  }
  void *p = deviceAlloc(size, error);
  if (!p)
    dort_set_pending_error(1, "%s", error.c_str());
  return p;
}

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  (void)alignment; // cudaMalloc aligns to 256 bytes
  return _mlir_memref_to_llvm_alloc(size);
}

void _mlir_memref_to_llvm_free(void *ptr) { deviceFree(ptr); }

void dort_cuda_launch(const void *image, const char *kernel, int64_t gx,
                      int64_t gy, int64_t gz, int64_t bx, int64_t by,
                      int64_t bz, int32_t smem, int64_t *args, int32_t nargs) {
  DeviceState &s = state();
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", s.error.c_str());
    return;
  }
  if (dort_pending_error())
    return; // an earlier step failed: its result is garbage anyway
  if (gx == 0 || gy == 0 || gz == 0)
    return; // an empty iteration space
  cudaKernel_t fn;
  auto k = s.kernels.find(kernel);
  if (k != s.kernels.end()) {
    fn = k->second;
  } else {
    cudaLibrary_t lib;
    auto l = s.libraries.find(image);
    if (l != s.libraries.end()) {
      lib = l->second;
    } else {
      cudaError_t e = cudaLibraryLoadData(&lib, image, nullptr, nullptr, 0,
                                          nullptr, nullptr, 0);
      if (e != cudaSuccess) {
        dort_set_pending_error(
            1,
            "cannot load the bundle's GPU kernels on %s: %s (the bundle "
            "holds code for the architectures given to --cuda-arch, plus "
            "PTX of the lowest; a newer driver may be needed)",
            s.name.c_str(), cudaMessage(e).c_str());
        return;
      }
      s.libraries[image] = lib;
    }
    cudaError_t e = cudaLibraryGetKernel(&fn, lib, kernel);
    if (e != cudaSuccess) {
      dort_set_pending_error(1, "no kernel '%s' in the bundle's image: %s",
                             kernel, cudaMessage(e).c_str());
      return;
    }
    s.kernels[kernel] = fn;
  }
  std::vector<void *> params(nargs);
  for (int32_t i = 0; i < nargs; ++i)
    params[i] = &args[i];
  cudaError_t e = cudaSuccess;
  auto launch = [&] {
    e = cudaLaunchKernel(
        reinterpret_cast<const void *>(fn),
        dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
             static_cast<unsigned>(gz)),
        dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by),
             static_cast<unsigned>(bz)),
        params.data(), static_cast<size_t>(smem), s.stream);
  };
  if (profiler().on)
    profiled(s.stream,
             std::string(kernel) + " <<<" + std::to_string(gx * gy * gz) +
                 ", " + std::to_string(bx * by * bz) + ">>>",
             launch);
  else
    launch();
  if (e == cudaSuccess && s.syncEachLaunch)
    e = cudaStreamSynchronize(s.stream);
  if (e != cudaSuccess)
    dort_set_pending_error(1, "kernel %s (grid %lld, block %lld) failed: %s",
                           kernel, static_cast<long long>(gx),
                           static_cast<long long>(bx), cudaMessage(e).c_str());
}

int32_t dort_cuda_run(void **host, int32_t (*entry)(void **), int32_t count,
                      const int8_t *kinds, const int64_t *bytes) {
  DeviceState &s = state();
  if (!ensureDevice())
    return dort_set_error(1, "%s", s.error.c_str());
  void *key = reinterpret_cast<void *>(entry);
  std::vector<void *> &dev = s.entryBuffers[key];
  DeviceState::Carry &c = s.carry;
  bool firstRun = dev.empty();
  if (c.host == host && !c.entry) {
    // The first run given the carried buffer array: bind the pairs to it.
    c.carriedIn.assign(count, 0);
    c.carriedOut.assign(count, 0);
    c.bytes.assign(bytes, bytes + count);
    for (auto [in, out] : c.pairs) {
      if (in < 0 || out < 0 || in >= count || out >= count || kinds[in] != 0 ||
          kinds[out] != 2 || bytes[in] != bytes[out] || c.carriedIn[in] ||
          c.carriedOut[out]) {
        c = DeviceState::Carry();
        return dort_set_error(1,
                              "dort_device_carry: slot %lld cannot take output "
                              "slot %lld (%d buffers)",
                              static_cast<long long>(in),
                              static_cast<long long>(out), count);
      }
      c.carriedIn[in] = c.carriedOut[out] = 1;
    }
    c.entry = key;
  }
  bool carrying = c.entry == key && c.host == host;
  std::string error;
  if (dev.empty()) {
    dev.assign(count, nullptr);
    for (int32_t i = 0; i < count; ++i) {
      if (kinds[i] == 1)
        continue;
      dev[i] = deviceAlloc(static_cast<size_t>(bytes[i]), error);
      if (!dev[i]) {
        dev.clear();
        return dort_set_error(1, "buffer %d: %s", i, error.c_str());
      }
    }
  }
  for (int32_t i = 0; i < count; ++i) {
    size_t n = static_cast<size_t>(bytes[i]);
    if (kinds[i] == 1) {
      void *&w = s.weights[host[i]];
      if (!w) {
        w = deviceAlloc(n, error);
        if (!w)
          return dort_set_error(1, "weight buffer %d: %s", i, error.c_str());
        cudaError_t e = cudaMemcpy(w, host[i], n, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
          return dort_set_error(1, "uploading weight buffer %d: %s", i,
                                cudaMessage(e).c_str());
      }
      dev[i] = w;
    } else if (kinds[i] == 0) {
      if (carrying && c.resident && c.carriedIn[i])
        continue; // on the device already: the last run's output
      cudaError_t e = cudaSuccess;
      profiled(s.stream, "upload of inputs", [&] {
        e = cudaMemcpyAsync(dev[i], host[i], n, cudaMemcpyHostToDevice,
                            s.stream);
      });
      if (e != cudaSuccess)
        return dort_set_error(1, "uploading input buffer %d: %s", i,
                              cudaMessage(e).c_str());
    }
  }
  int32_t rc = entry(dev.data());
  if (rc != 0)
    return rc;
  for (int32_t i = 0; i < count; ++i) {
    if (kinds[i] != 2 || (carrying && c.carriedOut[i]))
      continue;
    cudaError_t e = cudaSuccess;
    profiled(s.stream, "download of outputs", [&] {
      e = cudaMemcpyAsync(host[i], dev[i], static_cast<size_t>(bytes[i]),
                          cudaMemcpyDeviceToHost, s.stream);
    });
    if (e != cudaSuccess && !dort_pending_error())
      return dort_set_error(1, "downloading output buffer %d: %s", i,
                            cudaMessage(e).c_str());
  }
  cudaError_t e = cudaStreamSynchronize(s.stream);
  if (e != cudaSuccess && !dort_pending_error())
    return dort_set_error(
        1, "the GPU program failed: %s (DISTOPT_CUDA_SYNC=1 names the kernel)",
        cudaMessage(e).c_str());
  if (profiler().on) {
    profiler().collect(!firstRun);
    profiler().skipped += firstRun;
  }
  if (carrying && !dort_pending_error()) {
    // The outputs become the next run's inputs where they are.
    for (auto [in, out] : c.pairs)
      std::swap(dev[in], dev[out]);
    c.resident = true;
    c.hostFresh = false;
  }
  return 0;
}

} // extern "C"

//===----------------------------------------------------------------------===//
// Device-resident buffers between runs (Runtime.h's dort_device_*)
//===----------------------------------------------------------------------===//

namespace {

void carryHook(void **host, int32_t n, const int64_t *in, const int64_t *out) {
  DeviceState::Carry &c = state().carry;
  c = DeviceState::Carry();
  // DISTOPT_CUDA_RESIDENT=0: upload and download them every run instead.
  const char *v = std::getenv("DISTOPT_CUDA_RESIDENT");
  if ((v && std::strcmp(v, "0") == 0) || n <= 0)
    return;
  c.host = host;
  for (int32_t k = 0; k < n; ++k)
    c.pairs.emplace_back(in[k], out[k]);
}

/// Weights cached by host address may hold other values now.
void dropCachedWeights() {
  DeviceState &s = state();
  for (auto &[h, d] : s.weights)
    deviceFree(d);
  s.weights.clear();
}

int syncHook(void **host) {
  DeviceState &s = state();
  DeviceState::Carry &c = s.carry;
  dropCachedWeights();
  if (!c.entry || !c.resident || c.hostFresh)
    return 0;
  std::vector<void *> &dev = s.entryBuffers[c.entry];
  for (auto [in, out] : c.pairs) {
    cudaError_t e = cudaMemcpyAsync(host[in], dev[in],
                                    static_cast<size_t>(c.bytes[in]),
                                    cudaMemcpyDeviceToHost, s.stream);
    if (e != cudaSuccess)
      return dort_set_error(1, "downloading carried buffer %lld: %s",
                            static_cast<long long>(in), cudaMessage(e).c_str());
  }
  cudaError_t e = cudaStreamSynchronize(s.stream);
  if (e != cudaSuccess)
    return dort_set_error(1, "downloading the carried buffers: %s",
                          cudaMessage(e).c_str());
  c.hostFresh = true;
  return 0;
}

void hostChangedHook() {
  state().carry.resident = false;
  dropCachedWeights();
}

const dort_device_hooks kHooks = {carryHook, syncHook, hostChangedHook};
[[maybe_unused]] const bool kHooksRegistered = (dort_register_device_hooks(&kHooks), true);

} // namespace

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

template <typename T> cublasStatus_t gemmBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
    int k, const T *alpha, const T *a, int lda, long long sa, const T *b,
    int ldb, long long sb, const T *beta, T *c, int ldc, long long sc,
    int batch);

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
cublasStatus_t gemmBatched<double>(cublasHandle_t h, cublasOperation_t ta,
                                   cublasOperation_t tb, int m, int n, int k,
                                   const double *alpha, const double *a,
                                   int lda, long long sa, const double *b,
                                   int ldb, long long sb, const double *beta,
                                   double *c, int ldc, long long sc,
                                   int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b,
                                   ldb, sb, beta, c, ldc, sc, batch);
}

/// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] on device views; 2-D views
/// are a batch of one (batch strides 0).
template <typename T>
void gemm(const char *name, T *a, const int64_t *aSizes, const int64_t *aStr,
          T *b, const int64_t *bSizes, const int64_t *bStr, T *c,
          const int64_t *cSizes, const int64_t *cStr, int64_t aBatch,
          int64_t aBatchStride, int64_t bBatch, int64_t bBatchStride,
          int64_t cBatch, int64_t cBatchStride, int32_t transA, int32_t transB,
          T alpha, T beta) {
  DeviceState &s = state();
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", s.error.c_str());
    return;
  }
  if (dort_pending_error())
    return;
  int64_t m = transA ? aSizes[1] : aSizes[0];
  int64_t k = transA ? aSizes[0] : aSizes[1];
  int64_t kb = transB ? bSizes[1] : bSizes[0];
  int64_t n = transB ? bSizes[0] : bSizes[1];
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
    st = gemmBatched<T>(
        s.blas, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
        b, static_cast<int>(ob.ld), bBatch == 1 ? 0 : bBatchStride, a,
        static_cast<int>(oa.ld), aBatch == 1 ? 0 : aBatchStride, &beta, c,
        static_cast<int>(oc.ld), cBatchStride, static_cast<int>(cBatch));
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

template <typename M, typename T>
void gemm2(const char *name, M *a, M *b, M *c, int32_t ta, int32_t tb, T alpha,
           T beta) {
  gemm<T>(name, a->aligned + a->offset, a->sizes, a->strides,
          b->aligned + b->offset, b->sizes, b->strides,
          c->aligned + c->offset, c->sizes, c->strides, 1, 0, 1, 0, 1, 0, ta,
          tb, alpha, beta);
}

template <typename M, typename T>
void gemm3(const char *name, M *a, M *b, M *c, int32_t ta, int32_t tb, T alpha,
           T beta) {
  gemm<T>(name, a->aligned + a->offset, a->sizes + 1, a->strides + 1,
          b->aligned + b->offset, b->sizes + 1, b->strides + 1,
          c->aligned + c->offset, c->sizes + 1, c->strides + 1, a->sizes[0],
          a->strides[0], b->sizes[0], b->strides[0], c->sizes[0],
          c->strides[0], ta, tb, alpha, beta);
}

} // namespace

extern "C" {

void _mlir_ciface_dort_cuda_matmul_f32(MemRef2DF32 *a, MemRef2DF32 *b,
                                       MemRef2DF32 *c, int32_t ta, int32_t tb,
                                       float alpha, float beta) {
  gemm2<MemRef2DF32, float>("dort_cuda_matmul_f32", a, b, c, ta, tb, alpha,
                            beta);
}
void _mlir_ciface_dort_cuda_matmul_f64(MemRef2DF64 *a, MemRef2DF64 *b,
                                       MemRef2DF64 *c, int32_t ta, int32_t tb,
                                       double alpha, double beta) {
  gemm2<MemRef2DF64, double>("dort_cuda_matmul_f64", a, b, c, ta, tb, alpha,
                             beta);
}
void _mlir_ciface_dort_cuda_batch_matmul_f32(MemRef3DF32 *a, MemRef3DF32 *b,
                                             MemRef3DF32 *c, int32_t ta,
                                             int32_t tb, float alpha,
                                             float beta) {
  gemm3<MemRef3DF32, float>("dort_cuda_batch_matmul_f32", a, b, c, ta, tb,
                            alpha, beta);
}
void _mlir_ciface_dort_cuda_batch_matmul_f64(MemRef3DF64 *a, MemRef3DF64 *b,
                                             MemRef3DF64 *c, int32_t ta,
                                             int32_t tb, double alpha,
                                             double beta) {
  gemm3<MemRef3DF64, double>("dort_cuda_batch_matmul_f64", a, b, c, ta, tb,
                             alpha, beta);
}

} // extern "C"

//===----------------------------------------------------------------------===//
// Collectives staged through host memory
//===----------------------------------------------------------------------===//

namespace {

/// A ranked memref descriptor of any rank, as MLIR lays it out.
struct AnyDescriptor {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t dims[]; // sizes[rank], then strides[rank]
};

/// The elements [first, first + count) a strided view touches, relative to
/// its aligned pointer.
void span(const DortUnrankedMemRef *m, int64_t &first, int64_t &count) {
  auto *d = static_cast<AnyDescriptor *>(m->descriptor);
  int64_t last = d->offset;
  bool empty = false;
  for (int64_t i = 0; i < m->rank; ++i) {
    int64_t size = d->dims[i], stride = d->dims[m->rank + i];
    if (size == 0)
      empty = true;
    else
      last += (size - 1) * stride;
  }
  first = d->offset;
  count = empty ? 0 : last - first + 1;
}

/// Whether a view covers its span whole (no gaps between its elements).
bool dense(const DortUnrankedMemRef *m) {
  auto *d = static_cast<AnyDescriptor *>(m->descriptor);
  int64_t first, count, n = 1;
  span(m, first, count);
  for (int64_t i = 0; i < m->rank; ++i)
    n *= d->dims[i];
  return n == count;
}

/// A host copy of a device view: the same strides over host memory.
struct Staged {
  std::vector<char> data;
  std::vector<char> descriptor;
  DortUnrankedMemRef memref;
  int64_t first = 0, count = 0;
  size_t elem = 0;
  const DortUnrankedMemRef *device = nullptr;

  bool stage(const DortUnrankedMemRef *m, size_t elemSize, bool download) {
    device = m;
    elem = elemSize;
    span(m, first, count);
    data.resize(std::max<int64_t>(count, 1) * elem);
    size_t descBytes = sizeof(AnyDescriptor) + 2 * m->rank * sizeof(int64_t);
    descriptor.resize(descBytes);
    std::memcpy(descriptor.data(), m->descriptor, descBytes);
    auto *d = reinterpret_cast<AnyDescriptor *>(descriptor.data());
    // aligned + offset*elem must land on data[0].
    d->aligned = data.data() - first * static_cast<int64_t>(elem);
    d->allocated = d->aligned;
    memref.rank = m->rank;
    memref.descriptor = d;
    if (!download || count == 0)
      return true;
    auto *src = static_cast<AnyDescriptor *>(m->descriptor);
    return check(cudaMemcpyAsync(data.data(), src->aligned + first * elem,
                                 count * elem, cudaMemcpyDeviceToHost,
                                 state().stream),
                 "download for a collective") &&
           check(cudaStreamSynchronize(state().stream),
                 "wait before a collective");
  }

  bool upload() {
    if (count == 0)
      return true;
    auto *dst = static_cast<AnyDescriptor *>(device->descriptor);
    return check(cudaMemcpyAsync(dst->aligned + first * elem, data.data(),
                                 count * elem, cudaMemcpyHostToDevice,
                                 state().stream),
                 "upload after a collective");
  }
};

template <typename Fn>
void staged(DortUnrankedMemRef *in, DortUnrankedMemRef *out, size_t elem,
            Fn &&collective) {
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", state().error.c_str());
    return;
  }
  if (dort_pending_error())
    return;
  Staged hin, hout;
  // An output view with gaps is downloaded too, so that uploading its span
  // back leaves the gaps as they were.
  if (!hin.stage(in, elem, true) || !hout.stage(out, elem, !dense(out)))
    return;
  collective(&hin.memref, &hout.memref);
  hout.upload();
}

/// A point-to-point message through host memory: a send downloads its view
/// first; a receive uploads what arrived.
template <typename Fn>
void stagedOne(DortUnrankedMemRef *m, size_t elem, bool send, Fn &&message) {
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", state().error.c_str());
    return;
  }
  if (dort_pending_error())
    return;
  Staged host;
  if (!host.stage(m, elem, send || !dense(m)))
    return;
  message(&host.memref);
  if (!send)
    host.upload();
}

/// Whether NCCL carried this all-reduce (DISTOPT_CUDA_COMM=nccl).
bool ncclTakes(DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,
               int64_t kind, dort_dtype dtype) {
  namespace rc = distopt::runtime::cuda;
  if (rc::commEngine() != rc::Comm::Nccl)
    return false;
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", state().error.c_str());
    return true;
  }
  if (dort_pending_error())
    return true;
  return rc::ncclAllReduce(in, out, axis, kind, dtype, state().stream);
}

} // namespace

#define DORT_CUDA_STAGED(SUFFIX, ELEM, DTYPE)                                         \
  void _mlir_ciface_dort_shard_all_reduce_##SUFFIX(                            \
      DortUnrankedMemRef *, DortUnrankedMemRef *, int64_t, int64_t);           \
  void _mlir_ciface_dort_shard_all_gather_##SUFFIX(                            \
      DortUnrankedMemRef *, DortUnrankedMemRef *, int64_t, int64_t);           \
  void _mlir_ciface_dort_shard_reduce_scatter_##SUFFIX(                        \
      DortUnrankedMemRef *, DortUnrankedMemRef *, int64_t, int64_t, int64_t);  \
  void _mlir_ciface_dort_shard_all_to_all_##SUFFIX(                            \
      DortUnrankedMemRef *, DortUnrankedMemRef *, int64_t, int64_t, int64_t);  \
  void _mlir_ciface_dort_shard_all_slice_##SUFFIX(                             \
      DortUnrankedMemRef *, DortUnrankedMemRef *, int64_t, int64_t);           \
  void _mlir_ciface_dort_shard_send_##SUFFIX(DortUnrankedMemRef *, int64_t,    \
                                             int64_t);                         \
  void _mlir_ciface_dort_shard_recv_##SUFFIX(DortUnrankedMemRef *, int64_t,    \
                                             int64_t);                         \
  void _mlir_ciface_dort_cuda_shard_all_reduce_##SUFFIX(                       \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t kind) {                                                          \
    if (ncclTakes(in, out, axis, kind, DTYPE))                                 \
      return;                                                                  \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_all_reduce_##SUFFIX(i, o, axis, kind);           \
    });                                                                        \
  }                                                                            \
  /* Bucket all-reduces run at their start on the GPU (no overlap yet: */     \
  /* NCCL on a side stream is the plan); the wait has nothing to do. */        \
  int64_t _mlir_ciface_dort_cuda_shard_start_all_reduce_##SUFFIX(              \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t kind, int64_t) {                                                 \
    _mlir_ciface_dort_cuda_shard_all_reduce_##SUFFIX(in, out, axis, kind);     \
    return 0;                                                                  \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_all_gather_##SUFFIX(                       \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t dim) {                                                           \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_all_gather_##SUFFIX(i, o, axis, dim);            \
    });                                                                        \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_reduce_scatter_##SUFFIX(                   \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t kind, int64_t dim) {                                             \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_reduce_scatter_##SUFFIX(i, o, axis, kind, dim);  \
    });                                                                        \
  }                                                                            \
  int64_t _mlir_ciface_dort_cuda_shard_start_reduce_scatter_##SUFFIX(          \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t kind, int64_t dim, int64_t) {                                    \
    _mlir_ciface_dort_cuda_shard_reduce_scatter_##SUFFIX(in, out, axis, kind,  \
                                                          dim);                \
    return 0;                                                                  \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_all_to_all_##SUFFIX(                       \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t splitDim, int64_t concatDim) {                                   \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_all_to_all_##SUFFIX(i, o, axis, splitDim,        \
                                                  concatDim);                  \
    });                                                                        \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_all_slice_##SUFFIX(                        \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t dim) {                                                           \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_all_slice_##SUFFIX(i, o, axis, dim);             \
    });                                                                        \
  }                                                                            \
  /* Pipeline stages: the host's send copies what it sends, so the staged */   \
  /* download can go once the send has started. */                             \
  void _mlir_ciface_dort_cuda_shard_send_##SUFFIX(DortUnrankedMemRef *in,      \
                                                  int64_t axis, int64_t peer) {\
    stagedOne(in, ELEM, true, [&](DortUnrankedMemRef *h) {                     \
      _mlir_ciface_dort_shard_send_##SUFFIX(h, axis, peer);                    \
    });                                                                        \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_recv_##SUFFIX(DortUnrankedMemRef *out,     \
                                                  int64_t axis, int64_t peer) {\
    stagedOne(out, ELEM, false, [&](DortUnrankedMemRef *h) {                   \
      _mlir_ciface_dort_shard_recv_##SUFFIX(h, axis, peer);                    \
    });                                                                        \
  }

extern "C" {
void dort_cuda_shard_wait(int64_t) {}
DORT_CUDA_STAGED(f32, 4, DORT_F32)
DORT_CUDA_STAGED(f64, 8, DORT_F64)
DORT_CUDA_STAGED(f16, 2, DORT_F16)
DORT_CUDA_STAGED(bf16, 2, DORT_BF16)
DORT_CUDA_STAGED(i64, 8, DORT_I64)
DORT_CUDA_STAGED(i32, 4, DORT_I32)
DORT_CUDA_STAGED(i8, 1, DORT_I8)
DORT_CUDA_STAGED(i1, 1, DORT_U8)
} // extern "C"
