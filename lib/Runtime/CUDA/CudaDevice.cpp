//===- CudaDevice.cpp - the device, launches and runs ---------------------===//
//
// See include/distopt/Runtime/CUDA.h. The rank's device (opened once), the
// profiler, kernel launches, runs of a bundle's device entry (its buffers
// uploaded and downloaded, CUDA graphs), index faults and the buffers a
// training loop carries on the device between runs (Runtime.h's
// dort_device_* hooks). CUDA runtime API (cudart_static) and cuBLAS; no
// LLVM/MLIR.
//
//===----------------------------------------------------------------------===//

#include "CudaInternal.h"
#include "NcclEngine.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace distopt::runtime::cuda::detail;

namespace {

bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

} // namespace

namespace distopt::runtime::cuda::detail {

DeviceState &state() {
  static DeviceState s;
  return s;
}

void Profiler::collect(bool count) {
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
  if (count)
    for (auto &[kind, t] : hostOpen) {
      hostTotal[kind].first += t.first;
      hostTotal[kind].second += t.second;
    }
  hostOpen.clear();
}

void Profiler::print() {
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
               state().rank, sum, rows.size(), static_cast<long long>(skipped),
               "ms", "calls", "share", "what");
  for (size_t i = 0; i < rows.size() && i < 25; ++i)
    std::fprintf(stderr, "%10.3f %8lld %5.1f%%  %s\n", rows[i].second.second,
                 static_cast<long long>(rows[i].second.first),
                 100.0 * rows[i].second.second / sum, rows[i].first.c_str());
  std::fprintf(stderr, "host time queueing the work, per call:");
  for (auto &[kind, t] : hostTotal)
    std::fprintf(stderr, " %s %.1f us (%lld calls);", kind.c_str(),
                 t.second * 1e3 / std::max<int64_t>(t.first, 1),
                 static_cast<long long>(t.first));
  std::fprintf(stderr, "\n");
}

Profiler &profiler() {
  static Profiler p;
  return p;
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
    s.error =
        std::string("cuBLAS could not start: ") + cublasGetStatusString(st);
    return false;
  }
  cublasSetStream(s.blas, s.stream);
  s.tf32 = envFlag("DISTOPT_CUDA_TF32");
  cublasSetMathMode(s.blas,
                    s.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
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

/// Inside a capture: marks it broken (the caller then does nothing; the run
/// is redone without a graph) and returns true.
bool captureRefuses() {
  DeviceState &s = state();
  if (!s.capturing)
    return false;
  s.captureBroken = true;
  return true;
}

/// For a runtime call on the device: the device is up and no earlier step
/// failed (its results would be garbage). False otherwise, the device's
/// failure reported as the pending error.
bool deviceCallReady() {
  if (!ensureDevice()) {
    dort_set_pending_error(1, "%s", state().error.c_str());
    return false;
  }
  return dort_pending_error() == nullptr;
}

bool check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  dort_set_pending_error(1, "CUDA %s failed: %s", what, cudaMessage(e).c_str());
  return false;
}

} // namespace distopt::runtime::cuda::detail

namespace {

/// After a run (its stream drained): the index checks that found an index
/// out of range, reported as the CPU runtime reports them; their pairs are
/// reset, so a later run that does not reach a check reports nothing.
void reportIndexFaults() {
  for (auto &[key, c] : state().indexChecks) {
    if (!c.pinned || c.pinned[0] == INT64_MAX)
      continue;
    MemRef1DI64 fault = {c.pinned, c.pinned, 0, {2}, {1}};
    _mlir_ciface_dort_index_fault(&fault, &c.shape, &c.text, c.low, c.high);
    c.pinned[0] = INT64_MAX;
  }
}

/// Runs `entry` on the device buffers, as a CUDA graph where it can be
/// (DISTOPT_CUDA_GRAPH=1, not profiling, not syncing each launch): the
/// first run of an entry runs as is (modules load, cuDNN searches); the
/// next with these buffers is captured, and later ones replay the graph.
/// A run that cannot be captured (collectives staged through the host)
/// is run as is, and so are all later runs of that entry.
int32_t runEntry(void *key, int32_t (*entry)(void **), std::vector<void *> &dev,
                 bool firstRun) {
  DeviceState &s = state();
  static const bool enabled = [] {
    const char *v = std::getenv("DISTOPT_CUDA_GRAPH");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (!enabled || firstRun || s.syncEachLaunch || profiler().on ||
      dort_pending_error())
    return entry(dev.data());
  DeviceState::Graphs &g = s.graphs[key];
  auto found = g.execs.find(dev);
  if (found != g.execs.end()) {
    cudaError_t e = cudaGraphLaunch(found->second, s.stream);
    if (e != cudaSuccess)
      return dort_set_error(1, "replaying the CUDA graph: %s",
                            cudaMessage(e).c_str());
    return 0;
  }
  // A refused capture, or buffers that keep changing: run as is.
  if (g.refused || g.execs.size() >= 4)
    return entry(dev.data());
  if (cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed) !=
      cudaSuccess) {
    cudaGetLastError();
    g.refused = true;
    return entry(dev.data());
  }
  s.capturing = true;
  s.captureBroken = false;
  int32_t rc = entry(dev.data());
  s.capturing = false;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(s.stream, &graph);
  cudaGraphExec_t exec = nullptr;
  bool ok = rc == 0 && !s.captureBroken && !dort_pending_error() &&
            e == cudaSuccess && graph &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph)
    cudaGraphDestroy(graph);
  if (!ok) {
    // Nothing the capture queued has run: give its blocks back and run the
    // entry as is, now and from now on.
    cudaGetLastError();
    dort_clear_pending_error();
    for (auto &[bytes, p] : s.captureFree)
      s.freeBlocks.emplace(bytes, p);
    s.captureFree.clear();
    s.captureOwned.clear();
    g.refused = true;
    return entry(dev.data());
  }
  // The graph's blocks stay its own.
  s.captureFree.clear();
  s.captureOwned.clear();
  g.execs.emplace(dev, exec);
  e = cudaGraphLaunch(exec, s.stream);
  if (e != cudaSuccess)
    return dort_set_error(1, "replaying the CUDA graph: %s",
                          cudaMessage(e).c_str());
  return 0;
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

void dort_cuda_launch(const void *image, const char *kernel, int64_t gx,
                      int64_t gy, int64_t gz, int64_t bx, int64_t by,
                      int64_t bz, int32_t smem, int64_t *args, int32_t nargs) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
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

void CudaDevice::index_fault(MemRef1DI64 *fault, MemRef1DI64 *shape,
                             MemRef1DI8 *text, int64_t low, int64_t high) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  DeviceState::IndexCheck &c = s.indexChecks[text->aligned + text->offset];
  if (!c.pinned) {
    // Pinned memory is allocated outside a capture (the first run is never
    // captured, so a replayed graph copies into this pair).
    if (captureRefuses())
      return;
    void *p = nullptr;
    cudaError_t e = cudaMallocHost(&p, 2 * sizeof(int64_t));
    if (e != cudaSuccess) {
      dort_set_pending_error(1, "allocating an index check's pinned memory: %s",
                             cudaMessage(e).c_str());
      return;
    }
    c.pinned = static_cast<int64_t *>(p);
    c.pinned[0] = INT64_MAX;
  }
  c.shape = *shape;
  c.text = *text;
  c.low = low;
  c.high = high;
  const int64_t *f = fault->aligned + fault->offset;
  cudaError_t e = cudaSuccess;
  for (int k = 0; k < 2 && e == cudaSuccess; ++k)
    e = cudaMemcpyAsync(c.pinned + k, f + k * fault->strides[0],
                        sizeof(int64_t), cudaMemcpyDeviceToHost, s.stream);
  if (e != cudaSuccess)
    dort_set_pending_error(1, "copying an index check's result: %s",
                           cudaMessage(e).c_str());
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
      // in == out: an update the program writes in place (its input slot
      // stays on the device).
      if (in < 0 || out < 0 || in >= count || out >= count || kinds[in] != 0 ||
          (out != in && kinds[out] != 2) || bytes[in] != bytes[out] ||
          c.carriedIn[in] || c.carriedOut[out]) {
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
        // On the rank's stream, which does not wait for the legacy default
        // one: a plain cudaMemcpy may return before its DMA from pageable
        // memory lands, and the first kernel could read the weight early.
        cudaError_t e =
            cudaMemcpyAsync(w, host[i], n, cudaMemcpyHostToDevice, s.stream);
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
  int32_t rc = runEntry(key, entry, dev, firstRun);
  if (rc != 0)
    return rc;
  // Outputs come back, and the inputs the program updated in place where
  // they do not stay on the device.
  bool writtenBack = !carrying && host == c.writtenHost;
  for (int32_t i = 0; i < count; ++i) {
    bool written =
        writtenBack && kinds[i] == 0 &&
        std::find(c.written.begin(), c.written.end(), i) != c.written.end();
    if ((kinds[i] != 2 && !written) || (carrying && c.carriedOut[i]))
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
  // With NCCL's communicators, the wait polls their errors and is bounded
  // (a dead peer aborts them and ends the run).
  std::string waitError;
  if (!distopt::runtime::cuda::ncclWatch(s.stream, waitError) &&
      !dort_pending_error())
    return dort_set_error(
        1, "the GPU program failed: %s (DISTOPT_CUDA_SYNC=1 names the kernel)",
        waitError.c_str());
  reportIndexFaults();
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
  c.writtenHost = host;
  for (int32_t k = 0; k < n; ++k)
    if (in[k] == out[k])
      c.written.push_back(in[k]);
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
    cudaError_t e =
        cudaMemcpyAsync(host[in], dev[in], static_cast<size_t>(c.bytes[in]),
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
[[maybe_unused]] const bool kHooksRegistered =
    (dort_register_device_hooks(&kHooks), true);

// Compiled programs' library calls and collectives go to this rank's GPU
// (Device.h) once the CUDA runtime is loaded: every program of a CUDA bundle
// runs on device buffers.
[[maybe_unused]] const bool kDeviceRegistered = [] {
  static CudaDevice device;
  distopt::runtime::registerDevice(&device);
  return true;
}();

} // namespace
