//===- CudaRuntime.cpp - device, launches, GEMMs, staged collectives ------===//
//
// See include/distopt/Runtime/CUDA.h. CUDA runtime API (cudart_static) and
// cuBLAS; no LLVM/MLIR.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/CUDA.h"

#include "Dlsym.h"
#include "NcclEngine.h"

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef DISTOPT_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
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
  bool tf32 = false; // DISTOPT_CUDA_TF32: cuBLAS and cuDNN may use TF32
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
  // CUDA graphs (DISTOPT_CUDA_GRAPH=1): per entry point, one executable
  // graph per set of device buffers (the carried state alternates between
  // two), replayed instead of running the entry's host code.
  struct Graphs {
    std::map<std::vector<void *>, cudaGraphExec_t> execs;
    bool refused = false; // a capture failed: no new ones (old ones replay)
  };
  std::unordered_map<void *, Graphs> graphs;
  // While a run is being captured: runtime calls that need the host (staged
  // collectives, a cuDNN search, a growing workspace) break the capture
  // instead of running; the blocks it allocates belong to the graph (its
  // own frees are reused only inside it), never to the pool again.
  bool capturing = false, captureBroken = false;
  std::multimap<size_t, void *> captureFree;
  std::vector<void *> captureOwned;
  // Index checks (dort_cuda_index_fault): per check (keyed by its message,
  // a host global), the pinned pair its fault is copied into during a run
  // and read after it (reportIndexFaults), and the check's host operands.
  struct IndexCheck {
    int64_t *pinned = nullptr;
    MemRef1DI64 shape;
    MemRef1DI8 text;
    int64_t low = 0, high = 0;
  };
  std::unordered_map<const void *, IndexCheck> indexChecks;
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
  // Host time inside the calls that queue work (the launch overhead), by
  // kind: the open run's, and the counted runs'.
  std::map<std::string, std::pair<int64_t, double>> hostOpen, hostTotal;

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
    if (count)
      for (auto &[kind, t] : hostOpen) {
        hostTotal[kind].first += t.first;
        hostTotal[kind].second += t.second;
      }
    hostOpen.clear();
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
    std::fprintf(stderr, "host time queueing the work, per call:");
    for (auto &[kind, t] : hostTotal)
      std::fprintf(stderr, " %s %.1f us (%lld calls);", kind.c_str(),
                   t.second * 1e3 / std::max<int64_t>(t.first, 1),
                   static_cast<long long>(t.first));
    std::fprintf(stderr, "\n");
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
  auto t0 = std::chrono::steady_clock::now();
  work();
  auto t1 = std::chrono::steady_clock::now();
  cudaEventRecord(sp.stop, stream);
  p.open.push_back(sp);
  std::string kind = name.compare(0, 6, "cuDNN ") == 0 ? "cuDNN"
                     : name.compare(0, 7, "cuBLAS ") == 0 ||
                             name.compare(0, 9, "cuBLASLt ") == 0
                         ? "cuBLAS"
                     : name.find("<<<") != std::string::npos
                         ? "kernel launch"
                         : "copy";
  auto &h = p.hostOpen[kind];
  ++h.first;
  h.second += std::chrono::duration<double, std::milli>(t1 - t0).count();
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
  s.tf32 = envFlag("DISTOPT_CUDA_TF32");
  cublasSetMathMode(s.blas, s.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
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

void *deviceAlloc(size_t size, std::string &error) {
  DeviceState &s = state();
  if (size == 0)
    size = 1;
  if (s.capturing) {
    auto c = s.captureFree.find(size);
    if (c != s.captureFree.end()) {
      void *p = c->second;
      s.captureFree.erase(c);
      s.liveBlocks[p] = size;
      return p;
    }
  }
  auto it = s.freeBlocks.find(size);
  if (it != s.freeBlocks.end()) {
    void *p = it->second;
    s.freeBlocks.erase(it);
    s.liveBlocks[p] = size;
    if (s.capturing)
      s.captureOwned.push_back(p);
    return p;
  }
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e != cudaSuccess && s.capturing) {
    cudaGetLastError();
    s.captureBroken = true;
    error = "out of device memory while capturing a CUDA graph";
    return nullptr;
  }
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
  if (s.capturing)
    s.captureOwned.push_back(p);
  return p;
}

void deviceFree(void *p) {
  DeviceState &s = state();
  auto it = s.liveBlocks.find(p);
  if (it == s.liveBlocks.end())
    return;
  // Stream-ordered reuse: the next user is on the same stream (inside a
  // capture, the next user inside the same graph).
  if (s.capturing &&
      std::find(s.captureOwned.begin(), s.captureOwned.end(), p) !=
          s.captureOwned.end())
    s.captureFree.emplace(it->second, p);
  else
    s.freeBlocks.emplace(it->second, p);
  s.liveBlocks.erase(it);
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

void _mlir_ciface_dort_cuda_index_fault(MemRef1DI64 *fault,
                                        MemRef1DI64 *shape, MemRef1DI8 *text,
                                        int64_t low, int64_t high) {
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
// Scratch memory of library calls
//===----------------------------------------------------------------------===//

namespace {

/// The libraries' workspace (cuDNN's and cuBLASLt's, one call at a time on
/// the rank's stream): at least `bytes`, kept between calls.
struct Workspace {
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};

void *libraryWorkspace(size_t bytes, std::string &error) {
  static Workspace c;
  if (bytes <= c.workspaceBytes)
    return c.workspace;
  if (captureRefuses()) {
    error = "a workspace that grows inside a CUDA graph";
    return nullptr;
  }
  if (c.workspace) {
    // A CUDA graph may hold the old workspace's address: keep it then.
    bool graphed = false;
    for (auto &[entry, g] : state().graphs)
      graphed = graphed || !g.execs.empty();
    if (!graphed) {
      cudaStreamSynchronize(state().stream);
      cudaFree(c.workspace);
    }
    c.workspace = nullptr;
    c.workspaceBytes = 0;
  }
  cudaError_t e = cudaMalloc(&c.workspace, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    c.workspace = nullptr;
    error = "library workspace of " + std::to_string(bytes) +
            " bytes: " + cudaMessage(e);
    return nullptr;
  }
  c.workspaceBytes = bytes;
  return c.workspace;
}

/// Scratch device buffers for one call, given back (stream-ordered) at the
/// end of it.
struct Scratch {
  std::vector<void *> blocks;
  void *get(size_t bytes, std::string &error) {
    void *p = deviceAlloc(bytes, error);
    if (p)
      blocks.push_back(p);
    return p;
  }
  ~Scratch() {
    for (void *p : blocks)
      deviceFree(p);
  }
};

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

/// op(A) is m x k, op(B) kb x n (they fit when k == kb).
std::array<int64_t, 4> gemmDims(const int64_t *aSizes, const int64_t *bSizes,
                                int32_t transA, int32_t transB) {
  return {transA ? aSizes[1] : aSizes[0], transA ? aSizes[0] : aSizes[1],
          transB ? bSizes[1] : bSizes[0], transB ? bSizes[0] : bSizes[1]};
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
      st = gemmBatched<T>(s.blas, opB, opA, static_cast<int>(n),
                          static_cast<int>(m), static_cast<int>(k), &alpha, b,
                          static_cast<int>(ob.ld), sb, a,
                          static_cast<int>(oa.ld), sa, &beta, c,
                          static_cast<int>(oc.ld), cBatchStride,
                          static_cast<int>(cBatch));
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
              d ? b->strides[0] : 0, d ? c->sizes[0] : 1,
              d ? c->strides[0] : 0, ta, tb, alpha, beta, abType);
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
  std::vector<int64_t> key = {m, n, k, tA, tB, oa.ld, ob.ld, ldr, ldd,
                              static_cast<int64_t>(epilogue), s.tf32,
                              static_cast<int64_t>(type)};
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
  if ((st = cublasLtMatmulDescCreate(
           &plan.desc,
           s.tf32 && type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : CUBLAS_COMPUTE_32F,
           CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulDescCreate");
  if ((st = cublasLtMatmulDescSetAttribute(plan.desc,
                                           CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                           sizeof(opA))) ||
      (st = cublasLtMatmulDescSetAttribute(plan.desc,
                                           CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                           sizeof(opB))) ||
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
void gemmEpilogue(const char *name, cudaDataType type, const M2 *a,
                  const M2 *b, const M2 *d, const M2 *r, const M1 *bias,
                  int32_t transA, int32_t transB, float alpha, float beta,
                  int32_t act, int32_t hasBias) {
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
  BlasOperand oa = asBlas(a->sizes[0], a->sizes[1], a->strides[0],
                          a->strides[1]);
  BlasOperand ob = asBlas(b->sizes[0], b->sizes[1], b->strides[0],
                          b->strides[1]);
  BlasOperand od = asBlas(m, n, d->strides[0], d->strides[1]);
  BlasOperand orr = beta != 0.0f
                        ? asBlas(m, n, r->strides[0], r->strides[1])
                        : od;
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
  LtPlan &plan = ltPlan(type, m, n, k, tA, tB, oa, ob, orr.ld, od.ld,
                        epilogue, pa, pb, pr, pd, pbias);
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

extern "C" {

void _mlir_ciface_dort_cuda_matmul_f32(MemRef2DF32 *a, MemRef2DF32 *b,
                                       MemRef2DF32 *c, int32_t ta, int32_t tb,
                                       float alpha, float beta) {
  gemmOn<float>("dort_cuda_matmul_f32", a, b, c, ta, tb, alpha,
                            beta);
}
#define DORT_CUDA_GEMM16(NAME, TYPE)                                           \
  void _mlir_ciface_dort_cuda_matmul_##NAME##_f32(                             \
      MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DF32 *c, int32_t ta, int32_t tb,  \
      float alpha, float beta) {                                               \
    gemmOn<float>("dort_cuda_matmul_" #NAME "_f32", a, b, c, ta, tb, alpha,    \
                  beta, TYPE);                                                 \
  }                                                                            \
  void _mlir_ciface_dort_cuda_batch_matmul_##NAME##_f32(                       \
      MemRef3DU16 *a, MemRef3DU16 *b, MemRef3DF32 *c, int32_t ta, int32_t tb,  \
      float alpha, float beta) {                                               \
    gemmOn<float>("dort_cuda_batch_matmul_" #NAME "_f32", a, b, c, ta, tb,     \
                  alpha, beta, TYPE);                                          \
  }
DORT_CUDA_GEMM16(f16, CUDA_R_16F)
DORT_CUDA_GEMM16(bf16, CUDA_R_16BF)
#undef DORT_CUDA_GEMM16

void _mlir_ciface_dort_cuda_matmul_epilogue_f32(
    MemRef2DF32 *a, MemRef2DF32 *b, MemRef2DF32 *d, MemRef2DF32 *r,
    MemRef1DF32 *bias, int32_t ta, int32_t tb, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  gemmEpilogue("dort_cuda_matmul_epilogue_f32", CUDA_R_32F, a, b, d, r, bias,
               ta, tb, alpha, beta, act, hasBias);
}
void _mlir_ciface_dort_cuda_matmul_epilogue_f16(
    MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DU16 *d, MemRef2DU16 *r,
    MemRef1DU16 *bias, int32_t ta, int32_t tb, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  gemmEpilogue("dort_cuda_matmul_epilogue_f16", CUDA_R_16F, a, b, d, r, bias,
               ta, tb, alpha, beta, act, hasBias);
}
void _mlir_ciface_dort_cuda_matmul_epilogue_bf16(
    MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DU16 *d, MemRef2DU16 *r,
    MemRef1DU16 *bias, int32_t ta, int32_t tb, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  gemmEpilogue("dort_cuda_matmul_epilogue_bf16", CUDA_R_16BF, a, b, d, r,
               bias, ta, tb, alpha, beta, act, hasBias);
}
void _mlir_ciface_dort_cuda_matmul_f64(MemRef2DF64 *a, MemRef2DF64 *b,
                                       MemRef2DF64 *c, int32_t ta, int32_t tb,
                                       double alpha, double beta) {
  gemmOn<double>("dort_cuda_matmul_f64", a, b, c, ta, tb, alpha,
                             beta);
}
void _mlir_ciface_dort_cuda_batch_matmul_f32(MemRef3DF32 *a, MemRef3DF32 *b,
                                             MemRef3DF32 *c, int32_t ta,
                                             int32_t tb, float alpha,
                                             float beta) {
  gemmOn<float>("dort_cuda_batch_matmul_f32", a, b, c, ta, tb,
                            alpha, beta);
}
void _mlir_ciface_dort_cuda_batch_matmul_f64(MemRef3DF64 *a, MemRef3DF64 *b,
                                             MemRef3DF64 *c, int32_t ta,
                                             int32_t tb, double alpha,
                                             double beta) {
  gemmOn<double>("dort_cuda_batch_matmul_f64", a, b, c, ta, tb,
                             alpha, beta);
}

} // extern "C"

//===----------------------------------------------------------------------===//
// Convolutions (Kernels.h's dort_conv2d contract) through cuDNN
//===----------------------------------------------------------------------===//

#ifdef DISTOPT_HAVE_CUDNN
namespace {

// cuDNN 9 marks its convolution API deprecated (for the graph API); it is
// what every framework still calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using distopt::runtime::MemRef;

using distopt::runtime::cuda::bindSymbol;

/// libcudnn, loaded with dlopen at the first convolution: an executable
/// without convolutions never needs it, and one that needs it and lacks it
/// says so.
struct CudnnApi {
  void *lib = nullptr;
  cudnnHandle_t handle = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) setStream = nullptr;
  decltype(&cudnnGetErrorString) errorString = nullptr;
  decltype(&cudnnCreateTensorDescriptor) createTensor = nullptr;
  decltype(&cudnnSetTensorNdDescriptor) setTensor = nullptr;
  decltype(&cudnnCreateFilterDescriptor) createFilter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) setFilter = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) createConv = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) setConv = nullptr;
  decltype(&cudnnSetConvolutionGroupCount) setGroups = nullptr;
  decltype(&cudnnSetConvolutionMathType) setMath = nullptr;
  decltype(&cudnnFindConvolutionForwardAlgorithmEx) findForward = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnFindConvolutionBackwardFilterAlgorithmEx) findFilter =
      nullptr;
  decltype(&cudnnConvolutionBackwardFilter) backwardFilter = nullptr;
  decltype(&cudnnFindConvolutionBackwardDataAlgorithmEx) findData = nullptr;
  decltype(&cudnnConvolutionBackwardData) backwardData = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) heuristicData =
      nullptr;
  decltype(&cudnnTransformTensor) transform = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) heuristicForward = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) heuristicFilter =
      nullptr;
};


/// cuDNN with a handle on the rank's stream; null with `error` set when it
/// cannot be had.
CudnnApi *cudnn(std::string &error) {
  static CudnnApi a;
  static std::string loadError;
  static bool tried = false;
  if (!tried) {
    tried = true;
    a.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char *why = dlerror();
      loadError = std::string("convolutions need cuDNN 9 and libcudnn.so.9 "
                              "cannot be loaded (LD_LIBRARY_PATH?): ") +
                  (why ? why : "");
    } else if (!bindSymbol(a.lib, "cudnnCreate", a.create) ||
               !bindSymbol(a.lib, "cudnnSetStream", a.setStream) ||
               !bindSymbol(a.lib, "cudnnGetErrorString", a.errorString) ||
               !bindSymbol(a.lib, "cudnnCreateTensorDescriptor",
                           a.createTensor) ||
               !bindSymbol(a.lib, "cudnnSetTensorNdDescriptor", a.setTensor) ||
               !bindSymbol(a.lib, "cudnnCreateFilterDescriptor",
                           a.createFilter) ||
               !bindSymbol(a.lib, "cudnnSetFilter4dDescriptor", a.setFilter) ||
               !bindSymbol(a.lib, "cudnnCreateConvolutionDescriptor",
                           a.createConv) ||
               !bindSymbol(a.lib, "cudnnSetConvolution2dDescriptor",
                           a.setConv) ||
               !bindSymbol(a.lib, "cudnnSetConvolutionGroupCount",
                           a.setGroups) ||
               !bindSymbol(a.lib, "cudnnSetConvolutionMathType", a.setMath) ||
               !bindSymbol(a.lib, "cudnnFindConvolutionForwardAlgorithmEx",
                           a.findForward) ||
               !bindSymbol(a.lib, "cudnnConvolutionForward", a.forward) ||
               !bindSymbol(a.lib,
                           "cudnnFindConvolutionBackwardFilterAlgorithmEx",
                           a.findFilter) ||
               !bindSymbol(a.lib, "cudnnConvolutionBackwardFilter",
                           a.backwardFilter) ||
               !bindSymbol(a.lib, "cudnnFindConvolutionBackwardDataAlgorithmEx",
                           a.findData) ||
               !bindSymbol(a.lib, "cudnnConvolutionBackwardData",
                           a.backwardData) ||
               !bindSymbol(a.lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                           a.heuristicData) ||
               !bindSymbol(a.lib, "cudnnTransformTensor", a.transform) ||
               !bindSymbol(a.lib, "cudnnGetConvolutionForwardAlgorithm_v7",
                           a.heuristicForward) ||
               !bindSymbol(a.lib,
                           "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                           a.heuristicFilter)) {
      loadError = "libcudnn.so.9 lacks a function distopt needs";
    } else if (cudnnStatus_t st = a.create(&a.handle);
               st != CUDNN_STATUS_SUCCESS) {
      loadError = std::string("cuDNN could not start: ") + a.errorString(st);
    } else {
      a.setStream(a.handle, state().stream);
    }
  }
  error = loadError;
  return loadError.empty() ? &a : nullptr;
}

template <typename T> constexpr cudnnDataType_t cudnnType();
template <> constexpr cudnnDataType_t cudnnType<float>() {
  return CUDNN_DATA_FLOAT;
}
template <> constexpr cudnnDataType_t cudnnType<double>() {
  return CUDNN_DATA_DOUBLE;
}

/// A 4-D view for cuDNN: sizes and strides, dimensions 0 and 1 swapped on
/// request; strides of extent-1 dimensions made positive (they never step).
struct View4 {
  int dims[4];
  int strides[4];
  bool ok = true;
  View4(const int64_t *sizes, const int64_t *str, bool swap) {
    int64_t inner = 1;
    for (int i = 3; i >= 0; --i) {
      int src = swap && i < 2 ? 1 - i : i;
      int64_t d = sizes[src], st = str[src];
      if (d == 1 && st <= 0)
        st = inner;
      ok = ok && d > 0 && st > 0 && d <= INT32_MAX && st <= INT32_MAX;
      dims[i] = static_cast<int>(d);
      strides[i] = static_cast<int>(st);
      inner *= std::max<int64_t>(d, 1);
    }
  }
  bool packed() const {
    int64_t expect = 1;
    for (int i = 3; i >= 0; --i) {
      if (dims[i] != 1 && strides[i] != expect)
        return false;
      expect *= dims[i];
    }
    return true;
  }
};

/// How one convolution (by shapes, strides and parameters) runs: cuDNN's
/// forward convolution, or -- when it is the weight gradient of another
/// convolution (a small result from a large "filter": what Autodiff's conv
/// rule makes of a weight gradient) -- cuDNN's backward-filter convolution
/// of that one, whichever cuDNN finds faster. Descriptors are made once.
struct ConvPlan {
  std::string error;
  std::string label;
  bool asFilterGrad = false;
  int algo = 0;
  size_t workspace = 0;
  // The forward convolution: x and y as given, w packed NCHW (copied there
  // through stridedW when the view is not).
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, stridedW = nullptr,
                          packedW = nullptr, packedX = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool wPacked = true, xPacked = true;
  size_t wBytes = 0, xBytesFwd = 0;
  // The backward-filter form: X = x with batch and channels swapped, dy = w
  // swapped (each copied packed when the swap is not), dW = y swapped,
  // computed packed into a scratch buffer and copied into y.
  bool gradForm = false;
  cudnnTensorDescriptor_t gradX = nullptr, gradXPacked = nullptr,
                          gradDy = nullptr, gradDyPacked = nullptr,
                          gradOut = nullptr, gradY = nullptr;
  cudnnFilterDescriptor_t gradW = nullptr;
  cudnnConvolutionDescriptor_t gradConv = nullptr;
  bool packX = false, packDy = false;
  size_t xBytes = 0, dyBytes = 0, outBytes = 0;
};

struct ConvState {
  std::unordered_map<std::string, ConvPlan> plans;
};

ConvState &convState() {
  static ConvState c;
  return c;
}

int packedStrides4(const int *dims, int *strides) {
  strides[3] = 1;
  for (int i = 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return 0;
}

/// The algorithm to run: DISTOPT_CUDNN_ALGO=heuristic takes cuDNN's
/// heuristic ranking (the same choice in every process); by default cuDNN
/// times its algorithms on the call's buffers (as PyTorch's
/// cudnn.benchmark). Only deterministic algorithms are taken.
bool heuristicAlgorithms() {
  static const bool on = [] {
    const char *v = std::getenv("DISTOPT_CUDNN_ALGO");
    return v && std::strcmp(v, "heuristic") == 0;
  }();
  return on;
}

/// cuDNN descriptors of one element type.
struct Describe {
  CudnnApi *api;
  cudnnDataType_t type;
  bool tf32;

  cudnnStatus_t tensor(cudnnTensorDescriptor_t &d, const int *dims,
                       const int *strides) const {
    cudnnStatus_t st = api->createTensor(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setTensor(d, type, 4, dims, strides);
    return st;
  }
  cudnnStatus_t packedTensor(cudnnTensorDescriptor_t &d,
                             const int *dims) const {
    int strides[4];
    packedStrides4(dims, strides);
    return tensor(d, dims, strides);
  }
  cudnnStatus_t filter(cudnnFilterDescriptor_t &d, const int *dims) const {
    cudnnStatus_t st = api->createFilter(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setFilter(d, type, CUDNN_TENSOR_NCHW, dims[0], dims[1],
                          dims[2], dims[3]);
    return st;
  }
  /// Cross-correlation with TF32 tensor cores as the runtime's setting.
  cudnnStatus_t convolution(cudnnConvolutionDescriptor_t &d, int64_t ph,
                            int64_t pw, int64_t sh, int64_t sw, int64_t dh,
                            int64_t dw, int64_t groups) const {
    cudnnMathType_t math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    cudnnStatus_t st = api->createConv(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setConv(d, static_cast<int>(ph), static_cast<int>(pw),
                        static_cast<int>(sh), static_cast<int>(sw),
                        static_cast<int>(dh), static_cast<int>(dw),
                        CUDNN_CROSS_CORRELATION, type);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setGroups(d, static_cast<int>(groups));
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setMath(d, math);
    return st;
  }
};

/// The workspace an algorithm search may use: by default cuDNN times its
/// algorithms on the call's buffers with what the device can spare (at
/// most 1 GiB, allocated for the search); with DISTOPT_CUDNN_ALGO=heuristic
/// a fixed cap, so that the choice does not depend on the memory free.
struct SearchSpace {
  bool heuristic = heuristicAlgorithms();
  size_t cap = 0;
  void *memory = nullptr;
  SearchSpace() {
    size_t freeBytes = 0, total = 0;
    cudaMemGetInfo(&freeBytes, &total);
    cap = heuristic ? size_t(256) << 20
                    : std::min<size_t>(size_t(1) << 30, freeBytes / 4);
    if (!heuristic && cudaMalloc(&memory, cap) != cudaSuccess) {
      cudaGetLastError();
      memory = nullptr;
      cap = 0;
    }
  }
  ~SearchSpace() {
    if (memory) {
      cudaStreamSynchronize(state().stream);
      cudaFree(memory);
    }
    cudaGetLastError();
  }
};

/// A convolution's plan key: the call, its views' sizes and strides, its
/// parameters.
template <typename T>
std::string convKey(const char *name,
                    std::initializer_list<const MemRef<T, 4> *> views,
                    std::initializer_list<int64_t> parameters) {
  std::string key = name;
  for (const MemRef<T, 4> *m : views)
    for (int i = 0; i < 4; ++i)
      key += " " + std::to_string(m->sizes[i]) + "/" +
             std::to_string(m->strides[i]);
  for (int64_t v : parameters)
    key += " " + std::to_string(v);
  return key;
}

/// A convolution's output where nothing is summed into it: zeros, written
/// whole (a packed view; a strided one is an error).
template <typename T> void zeroWhole(const char *name, MemRef<T, 4> *y) {
  const int64_t *ys = y->sizes;
  View4 vy(ys, y->strides, false);
  if (!vy.packed()) {
    dort_set_pending_error(1, "%s: an empty convolution into a strided view",
                           name);
    return;
  }
  check(cudaMemsetAsync(y->aligned + y->offset, 0,
                        sizeof(T) * ys[0] * ys[1] * ys[2] * ys[3],
                        state().stream),
        name);
}

/// A copy of `src` (laid out as `from`) into scratch memory laid out as
/// `to` (cuDNN's transform); `dst` points at it. False with `error` set.
template <typename T>
bool cudnnCopy(CudnnApi *api, Scratch &scratch, cudnnTensorDescriptor_t from,
               const void *src, cudnnTensorDescriptor_t to, size_t bytes,
               const void *&dst, std::string &error) {
  const T one = 1, zero = 0;
  void *p = scratch.get(bytes, error);
  if (!p)
    return false;
  cudnnStatus_t st = api->transform(api->handle, &one, from, src, &zero, to, p);
  if (st != CUDNN_STATUS_SUCCESS) {
    error = std::string("cuDNN copy: ") + api->errorString(st);
    return false;
  }
  dst = p;
  return true;
}

/// Runs `call` (which sets `st`), under the profiler when it is on; a
/// failure becomes the pending error naming the call and its plan.
template <typename Fn>
void runCudnn(const char *name, const std::string &label, CudnnApi *api,
              cudnnStatus_t &st, Fn &&call) {
  DeviceState &s = state();
  if (profiler().on)
    profiled(s.stream, "cuDNN " + label, call);
  else
    call();
  if (st != CUDNN_STATUS_SUCCESS)
    dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, label.c_str(),
                           api->errorString(st));
  else if (s.syncEachLaunch)
    check(cudaStreamSynchronize(s.stream), name);
}

template <typename T>
void conv2d(const char *name, MemRef<T, 4> *x, MemRef<T, 4> *w,
            MemRef<T, 4> *y, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
            int64_t dh, int64_t dw, int64_t groups) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  const int64_t *xs = x->sizes, *ws = w->sizes, *ys = y->sizes;
  using distopt::runtime::convOutputSize;
  if (!distopt::runtime::conv2dShapesFit(name, xs, ws, ys, sh, sw, ph, pw, dh,
                                         dw, groups))
    return;
  T *xp = x->aligned + x->offset, *wp = w->aligned + w->offset,
    *yp = y->aligned + y->offset;
  if (ys[0] == 0 || ys[1] == 0 || ys[2] == 0 || ys[3] == 0)
    return; // y is empty
  if (xs[1] == 0 || ws[2] == 0 || ws[3] == 0) {
    // A sum of nothing: y is zero (written whole, as the contract says).
    zeroWhole(name, y);
    return;
  }
  std::string key = convKey(name, {x, w, y}, {sh, sw, ph, pw, dh, dw, groups});
  ConvState &cs = convState();
  auto found = cs.plans.find(key);
  bool fresh = found == cs.plans.end();
  if (fresh && captureRefuses())
    return; // cuDNN's start and its search: not inside a graph
  std::string error;
  CudnnApi *api = cudnn(error);
  if (!api) {
    dort_set_pending_error(1, "%s: %s", name, error.c_str());
    return;
  }
  ConvPlan &plan = fresh ? cs.plans[key] : found->second;
  const T one = 1, zero = 0;
  cudnnDataType_t type = cudnnType<T>();
  auto failed = [&](cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS)
      return false;
    plan.error = std::string(what) + ": " + api->errorString(st);
    return true;
  };
  Describe describe{api, type, s.tf32};
  auto bytes4 = [](const int *dims) {
    return sizeof(T) * size_t(dims[0]) * dims[1] * dims[2] * dims[3];
  };
  if (fresh) {
    View4 vx(xs, x->strides, false), vw(ws, w->strides, false),
        vy(ys, y->strides, false);
    View4 gx(xs, x->strides, true), gdy(ws, w->strides, true),
        gy(ys, y->strides, true);
    // Descriptors for the forward convolution and, where this convolution
    // is the weight gradient of another, for cuDNN's backward filter: its
    // stride is this one's dilation and its dilation this one's stride.
    plan.label = std::to_string(xs[0]) + "x" + std::to_string(xs[1]) + "x" +
                 std::to_string(xs[2]) + "x" + std::to_string(xs[3]) + " * " +
                 std::to_string(ws[0]) + "x" + std::to_string(ws[1]) + "x" +
                 std::to_string(ws[2]) + "x" + std::to_string(ws[3]) +
                 (sh > 1 || sw > 1 ? " stride " + std::to_string(sh) : "") +
                 (dh > 1 || dw > 1 ? " dilation " + std::to_string(dh) : "") +
                 (groups > 1 ? " groups " + std::to_string(groups) : "");
    if (!vx.ok || !vw.ok || !vy.ok) {
      plan.error = "a view cuDNN cannot describe (a zero or negative stride, "
                   "or a dimension past 2^31)";
    } else if (!failed(describe.tensor(plan.x, vx.dims, vx.strides), "x descriptor") &&
               !failed(describe.tensor(plan.y, vy.dims, vy.strides), "y descriptor") &&
               !failed(describe.filter(plan.w, vw.dims), "w descriptor") &&
               !failed(describe.convolution(plan.conv, ph, pw, sh, sw, dh, dw, groups),
                       "convolution descriptor")) {
      plan.wPacked = vw.packed();
      plan.wBytes = bytes4(vw.dims);
      if (!plan.wPacked &&
          !failed(describe.tensor(plan.stridedW, vw.dims, vw.strides), "w view"))
        failed(describe.packedTensor(plan.packedW, vw.dims), "w copy");
      // An input view that is not NCHW (a transposed operand) is copied
      // packed too: not every algorithm takes any strides.
      plan.xPacked = vx.packed();
      plan.xBytesFwd = bytes4(vx.dims);
      if (!plan.xPacked && plan.error.empty())
        failed(describe.packedTensor(plan.packedX, vx.dims), "x copy");
    }
    plan.gradForm = plan.error.empty() && groups == 1 &&
                    convOutputSize(xs[2], ys[2], dh, ph, sh) == ws[2] &&
                    convOutputSize(xs[3], ys[3], dw, pw, sw) == ws[3] &&
                    std::getenv("DISTOPT_CUDNN_FORWARD_ONLY") == nullptr &&
                    gx.ok && gdy.ok && gy.ok;
    if (plan.gradForm) {
      plan.packX = !gx.packed();
      plan.packDy = !gdy.packed();
      plan.xBytes = bytes4(gx.dims);
      plan.dyBytes = bytes4(gdy.dims);
      plan.outBytes = bytes4(gy.dims);
      plan.gradForm =
          describe.tensor(plan.gradX, gx.dims, gx.strides) == CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradXPacked, gx.dims) == CUDNN_STATUS_SUCCESS &&
          describe.tensor(plan.gradDy, gdy.dims, gdy.strides) == CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradDyPacked, gdy.dims) == CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradOut, gy.dims) == CUDNN_STATUS_SUCCESS &&
          describe.tensor(plan.gradY, gy.dims, gy.strides) == CUDNN_STATUS_SUCCESS &&
          describe.filter(plan.gradW, gy.dims) == CUDNN_STATUS_SUCCESS &&
          describe.convolution(plan.gradConv, ph, pw, dh, dw, sh, sw, 1) ==
              CUDNN_STATUS_SUCCESS;
    }
  }
  if (!plan.error.empty()) {
    dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, plan.label.c_str(),
                           plan.error.c_str());
    return;
  }
  Scratch scratch;
  auto copy = [&](cudnnTensorDescriptor_t from, const void *src,
                  cudnnTensorDescriptor_t to, size_t bytes,
                  const void *&dst) {
    return cudnnCopy<T>(api, scratch, from, src, to, bytes, dst, error);
  };
  // Operands in the layouts the chosen form needs.
  const void *wUse = wp, *xUse = xp, *gradXUse = xp, *gradDyUse = wp;
  void *gradOut = nullptr;
  bool needForward = fresh || !plan.asFilterGrad;
  bool needGrad = plan.gradForm && (fresh || plan.asFilterGrad);
  bool ok = true;
  if (needForward && !plan.wPacked)
    ok = copy(plan.stridedW, wp, plan.packedW, plan.wBytes, wUse);
  if (ok && needForward && !plan.xPacked)
    ok = copy(plan.x, xp, plan.packedX, plan.xBytesFwd, xUse);
  if (ok && needGrad && plan.packX)
    ok = copy(plan.gradX, xp, plan.gradXPacked, plan.xBytes, gradXUse);
  if (ok && needGrad && plan.packDy)
    ok = copy(plan.gradDy, wp, plan.gradDyPacked, plan.dyBytes, gradDyUse);
  if (ok && needGrad && !(gradOut = scratch.get(plan.outBytes, error)))
    ok = false;
  if (!ok) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    if (fresh) // no algorithm chosen yet: the next call starts again
      cs.plans.erase(key);
    return;
  }
  if (fresh) {
    // Choose: cuDNN's timing of its algorithms on these buffers (the
    // search's workspace: what the device can spare, at most 1 GiB), or
    // its heuristic ranking.
    // (The heuristic's cap is fixed, so that its choice does not depend on
    // the memory free at the time.)
    SearchSpace space;
    bool heuristic = space.heuristic;
    size_t cap = space.cap;
    void *search = space.memory;
    float best = -1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    auto consider = [&](const auto &perf, bool asGrad) {
      if (perf.status != CUDNN_STATUS_SUCCESS ||
          perf.determinism != CUDNN_DETERMINISTIC || perf.memory > cap)
        return;
      // Heuristic: the first acceptable of the ranking, the backward
      // filter first where it applies.
      if (heuristic ? best >= 0 : (best >= 0 && perf.time >= best))
        return;
      best = heuristic ? 0 : perf.time;
      plan.asFilterGrad = asGrad;
      plan.algo = perf.algo;
      plan.workspace = perf.memory;
      math = perf.mathType;
    };
    const char *where = "";
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (needGrad) {
      cudnnConvolutionBwdFilterAlgoPerf_t perf
          [CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      const cudnnTensorDescriptor_t gxd =
          plan.packX ? plan.gradXPacked : plan.gradX;
      const cudnnTensorDescriptor_t gdyd =
          plan.packDy ? plan.gradDyPacked : plan.gradDy;
      st = heuristic
               ? api->heuristicFilter(api->handle, gxd, gdyd, plan.gradConv,
                                      plan.gradW,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                      &n, perf)
               : api->findFilter(api->handle, gxd, gradXUse, gdyd, gradDyUse,
                                 plan.gradConv, plan.gradW, gradOut,
                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                 perf, search, cap);
      if (st == CUDNN_STATUS_SUCCESS)
        for (int i = 0; i < n; ++i)
          consider(perf[i], true);
    }
    if (best < 0 || !heuristic) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int n = 0;
      st = heuristic
               ? api->heuristicForward(api->handle,
                                       plan.xPacked ? plan.x : plan.packedX,
                                       plan.w, plan.conv, plan.y,
                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                       perf)
               : api->findForward(api->handle,
                                  plan.xPacked ? plan.x : plan.packedX, xUse,
                                  plan.w, wUse,
                                  plan.conv, plan.y, yp,
                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf,
                                  search, cap);
      where = "forward";
      if (st == CUDNN_STATUS_SUCCESS)
        for (int i = 0; i < n; ++i)
          consider(perf[i], false);
    }
    if (best < 0)
      plan.error = st != CUDNN_STATUS_SUCCESS
                       ? std::string("no algorithm (") + where + " search: " +
                             api->errorString(st) + ")"
                       : "no deterministic algorithm takes these shapes";
    // An algorithm is timed with a math type (TF32 tensor cores or not):
    // run it with that one, as the search did.
    else if ((st = api->setMath(plan.asFilterGrad ? plan.gradConv : plan.conv,
                                math)) != CUDNN_STATUS_SUCCESS)
      plan.error = std::string("setting the math type: ") +
                   api->errorString(st);
    plan.label = std::string(plan.asFilterGrad ? "as backward filter "
                                               : "forward ") +
                 plan.label + " algo " + std::to_string(plan.algo);
    if (!plan.error.empty()) {
      dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, plan.label.c_str(),
                             plan.error.c_str());
      return;
    }
  }
  void *work = libraryWorkspace(plan.workspace, error);
  if (plan.workspace && !work) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    return;
  }
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  runCudnn(name, plan.label, api, st, [&] {
    if (!plan.asFilterGrad) {
      st = api->forward(api->handle, &one,
                        plan.xPacked ? plan.x : plan.packedX, xUse, plan.w,
                        wUse, plan.conv,
                        static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo),
                        work, plan.workspace, &zero, plan.y, yp);
      return;
    }
    st = api->backwardFilter(
        api->handle, &one, plan.packX ? plan.gradXPacked : plan.gradX,
        gradXUse, plan.packDy ? plan.gradDyPacked : plan.gradDy, gradDyUse,
        plan.gradConv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo),
        work, plan.workspace, &zero, plan.gradW, gradOut);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->transform(api->handle, &one, plan.gradOut, gradOut, &zero,
                          plan.gradY, yp);
  });
}

/// How one backward-data convolution runs (cuDNN's choice of algorithm on
/// these shapes): dy and w packed NCHW (copied there when the views are
/// not), dx written as given, through a packed scratch when its view is
/// not packed.
struct DataGradPlan {
  std::string error;
  std::string label;
  int algo = 0;
  size_t workspace = 0;
  cudnnTensorDescriptor_t dy = nullptr, dyView = nullptr, wView = nullptr,
                          wPacked = nullptr, dx = nullptr, dxView = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool packDy = false, packW = false, packDx = false;
  size_t dyBytes = 0, wBytes = 0, dxBytes = 0;
};

std::unordered_map<std::string, DataGradPlan> &dataGradPlans() {
  static std::unordered_map<std::string, DataGradPlan> plans;
  return plans;
}

/// Kernels.h's dort_conv2d_backward_data contract on the device: cuDNN's
/// backward-data convolution (the input gradient of a convolution, and
/// dopt.conv_transpose).
template <typename T>
void conv2dBackwardData(const char *name, MemRef<T, 4> *dy, MemRef<T, 4> *w,
                        MemRef<T, 4> *dx, int64_t sh, int64_t sw, int64_t ph,
                        int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  const int64_t *ys = dy->sizes, *ws = w->sizes, *xs = dx->sizes;
  if (!distopt::runtime::conv2dShapesFit(name, xs, ws, ys, sh, sw, ph, pw, dh,
                                         dw, groups))
    return;
  T *yp = dy->aligned + dy->offset, *wp = w->aligned + w->offset,
    *xp = dx->aligned + dx->offset;
  if (xs[0] == 0 || xs[1] == 0 || xs[2] == 0 || xs[3] == 0)
    return; // dx is empty
  if (ys[1] == 0 || ys[2] == 0 || ys[3] == 0 || ws[2] == 0 || ws[3] == 0) {
    // Nothing lands: dx is zero (written whole, as the contract says).
    zeroWhole(name, dx);
    return;
  }
  std::string key =
      convKey(name, {dy, w, dx}, {sh, sw, ph, pw, dh, dw, groups});
  auto &plans = dataGradPlans();
  auto found = plans.find(key);
  bool fresh = found == plans.end();
  if (fresh && captureRefuses())
    return; // cuDNN's start and its search: not inside a graph
  std::string error;
  CudnnApi *api = cudnn(error);
  if (!api) {
    dort_set_pending_error(1, "%s: %s", name, error.c_str());
    return;
  }
  DataGradPlan &plan = fresh ? plans[key] : found->second;
  const T one = 1, zero = 0;
  Describe describe{api, cudnnType<T>(), s.tf32};
  auto failed = [&](cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS)
      return false;
    plan.error = std::string(what) + ": " + api->errorString(st);
    return true;
  };
  auto bytes4 = [](const int *dims) {
    return sizeof(T) * size_t(dims[0]) * dims[1] * dims[2] * dims[3];
  };
  if (fresh) {
    View4 vy(ys, dy->strides, false), vw(ws, w->strides, false),
        vx(xs, dx->strides, false);
    plan.label = "backward data " + std::to_string(ys[0]) + "x" +
                 std::to_string(ys[1]) + "x" + std::to_string(ys[2]) + "x" +
                 std::to_string(ys[3]) + " * " + std::to_string(ws[0]) + "x" +
                 std::to_string(ws[1]) + "x" + std::to_string(ws[2]) + "x" +
                 std::to_string(ws[3]) + " -> " + std::to_string(xs[2]) + "x" +
                 std::to_string(xs[3]) +
                 (sh > 1 || sw > 1 ? " stride " + std::to_string(sh) : "") +
                 (dh > 1 || dw > 1 ? " dilation " + std::to_string(dh) : "") +
                 (groups > 1 ? " groups " + std::to_string(groups) : "");
    plan.packDy = !vy.packed();
    plan.packW = !vw.packed();
    plan.packDx = !vx.packed();
    plan.dyBytes = bytes4(vy.dims);
    plan.wBytes = bytes4(vw.dims);
    plan.dxBytes = bytes4(vx.dims);
    if (!vy.ok || !vw.ok || !vx.ok)
      plan.error = "a view cuDNN cannot describe (a zero or negative stride, "
                   "or a dimension past 2^31)";
    else if (!failed(describe.packedTensor(plan.dy, vy.dims), "dy descriptor") &&
             !failed(describe.filter(plan.w, vw.dims), "w descriptor") &&
             !failed(describe.packedTensor(plan.dx, vx.dims), "dx descriptor") &&
             !failed(describe.convolution(plan.conv, ph, pw, sh, sw, dh, dw,
                                          groups),
                     "convolution descriptor") &&
             !(plan.packDy && failed(describe.tensor(plan.dyView, vy.dims,
                                                     vy.strides),
                                     "dy view")) &&
             !(plan.packW && failed(describe.tensor(plan.wView, vw.dims,
                                                    vw.strides),
                                    "w view")) &&
             !(plan.packW &&
               failed(describe.packedTensor(plan.wPacked, vw.dims), "w copy")))
      if (plan.packDx)
        failed(describe.tensor(plan.dxView, vx.dims, vx.strides), "dx view");
  }
  if (!plan.error.empty()) {
    dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, plan.label.c_str(),
                           plan.error.c_str());
    return;
  }
  // Operands in the packed layouts the plan describes.
  Scratch scratch;
  auto copy = [&](cudnnTensorDescriptor_t from, const void *src,
                  cudnnTensorDescriptor_t to, size_t bytes,
                  const void *&dst) {
    return cudnnCopy<T>(api, scratch, from, src, to, bytes, dst, error);
  };
  const void *dyUse = yp, *wUse = wp;
  void *dxUse = xp;
  bool ok = !plan.packDy || copy(plan.dyView, yp, plan.dy, plan.dyBytes, dyUse);
  if (ok && plan.packW)
    ok = copy(plan.wView, wp, plan.wPacked, plan.wBytes, wUse);
  if (ok && plan.packDx && !(dxUse = scratch.get(plan.dxBytes, error)))
    ok = false;
  if (!ok) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    if (fresh) // no algorithm chosen yet: the next call starts again
      plans.erase(key);
    return;
  }
  if (fresh) {
    SearchSpace space;
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    cudnnStatus_t st =
        space.heuristic
            ? api->heuristicData(api->handle, plan.w, plan.dy, plan.conv,
                                 plan.dx,
                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                 perf)
            : api->findData(api->handle, plan.w, wUse, plan.dy, dyUse,
                            plan.conv, plan.dx, dxUse,
                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf,
                            space.memory, space.cap);
    // The heuristic's first acceptable, or the fastest timed one; only
    // deterministic algorithms.
    float best = -1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n; ++i) {
      const auto &pf = perf[i];
      if (pf.status != CUDNN_STATUS_SUCCESS ||
          pf.determinism != CUDNN_DETERMINISTIC || pf.memory > space.cap)
        continue;
      if (space.heuristic ? best >= 0 : (best >= 0 && pf.time >= best))
        continue;
      best = space.heuristic ? 0 : pf.time;
      plan.algo = pf.algo;
      plan.workspace = pf.memory;
      math = pf.mathType;
    }
    if (best < 0)
      plan.error = st != CUDNN_STATUS_SUCCESS
                       ? std::string("no algorithm (backward-data search: ") +
                             api->errorString(st) + ")"
                       : "no deterministic algorithm takes these shapes";
    else if ((st = api->setMath(plan.conv, math)) != CUDNN_STATUS_SUCCESS)
      plan.error = std::string("setting the math type: ") +
                   api->errorString(st);
    plan.label += " algo " + std::to_string(plan.algo);
    if (!plan.error.empty()) {
      dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, plan.label.c_str(),
                             plan.error.c_str());
      return;
    }
  }
  void *work = libraryWorkspace(plan.workspace, error);
  if (plan.workspace && !work) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    return;
  }
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  runCudnn(name, plan.label, api, st, [&] {
    st = api->backwardData(
        api->handle, &one, plan.w, wUse, plan.dy, dyUse, plan.conv,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), work,
        plan.workspace, &zero, plan.dx, dxUse);
    if (st == CUDNN_STATUS_SUCCESS && plan.packDx)
      st = api->transform(api->handle, &one, plan.dx, dxUse, &zero,
                          plan.dxView, xp);
  });
}

#pragma GCC diagnostic pop

} // namespace
#endif // DISTOPT_HAVE_CUDNN

extern "C" {

void _mlir_ciface_dort_cuda_conv2d_f32(MemRef4DF32 *x, MemRef4DF32 *w,
                                       MemRef4DF32 *y, int64_t sh, int64_t sw,
                                       int64_t ph, int64_t pw, int64_t dh,
                                       int64_t dw, int64_t groups) {
#ifdef DISTOPT_HAVE_CUDNN
  conv2d<float>("dort_cuda_conv2d_f32", reinterpret_cast<MemRef<float, 4> *>(x),
                reinterpret_cast<MemRef<float, 4> *>(w),
                reinterpret_cast<MemRef<float, 4> *>(y), sh, sw, ph, pw, dh, dw,
                groups);
#else
  (void)x, (void)w, (void)y, (void)sh, (void)sw, (void)ph, (void)pw, (void)dh,
      (void)dw, (void)groups;
  dort_set_pending_error(1, "dort_cuda_conv2d_f32: this runtime was built "
                            "without cuDNN");
#endif
}

void _mlir_ciface_dort_cuda_conv2d_f64(MemRef4DF64 *x, MemRef4DF64 *w,
                                       MemRef4DF64 *y, int64_t sh, int64_t sw,
                                       int64_t ph, int64_t pw, int64_t dh,
                                       int64_t dw, int64_t groups) {
#ifdef DISTOPT_HAVE_CUDNN
  conv2d<double>("dort_cuda_conv2d_f64",
                 reinterpret_cast<MemRef<double, 4> *>(x),
                 reinterpret_cast<MemRef<double, 4> *>(w),
                 reinterpret_cast<MemRef<double, 4> *>(y), sh, sw, ph, pw, dh,
                 dw, groups);
#else
  (void)x, (void)w, (void)y, (void)sh, (void)sw, (void)ph, (void)pw, (void)dh,
      (void)dw, (void)groups;
  dort_set_pending_error(1, "dort_cuda_conv2d_f64: this runtime was built "
                            "without cuDNN");
#endif
}

void _mlir_ciface_dort_cuda_conv2d_backward_data_f32(
    MemRef4DF32 *dy, MemRef4DF32 *w, MemRef4DF32 *dx, int64_t sh, int64_t sw,
    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
#ifdef DISTOPT_HAVE_CUDNN
  conv2dBackwardData<float>("dort_cuda_conv2d_backward_data_f32",
                            reinterpret_cast<MemRef<float, 4> *>(dy),
                            reinterpret_cast<MemRef<float, 4> *>(w),
                            reinterpret_cast<MemRef<float, 4> *>(dx), sh, sw, ph,
                            pw, dh, dw, groups);
#else
  (void)dy, (void)w, (void)dx, (void)sh, (void)sw, (void)ph, (void)pw,
      (void)dh, (void)dw, (void)groups;
  dort_set_pending_error(1, "dort_cuda_conv2d_backward_data_f32: this runtime "
                            "was built without cuDNN");
#endif
}

void _mlir_ciface_dort_cuda_conv2d_backward_data_f64(
    MemRef4DF64 *dy, MemRef4DF64 *w, MemRef4DF64 *dx, int64_t sh, int64_t sw,
    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
#ifdef DISTOPT_HAVE_CUDNN
  conv2dBackwardData<double>("dort_cuda_conv2d_backward_data_f64",
                            reinterpret_cast<MemRef<double, 4> *>(dy),
                            reinterpret_cast<MemRef<double, 4> *>(w),
                            reinterpret_cast<MemRef<double, 4> *>(dx), sh, sw, ph,
                            pw, dh, dw, groups);
#else
  (void)dy, (void)w, (void)dx, (void)sh, (void)sw, (void)ph, (void)pw,
      (void)dh, (void)dw, (void)groups;
  dort_set_pending_error(1, "dort_cuda_conv2d_backward_data_f64: this runtime "
                            "was built without cuDNN");
#endif
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
    if (!check(cudaMemcpyAsync(data.data(), src->aligned + first * elem,
                               count * elem, cudaMemcpyDeviceToHost,
                               state().stream),
               "download for a collective"))
      return false;
    // (Bounded where NCCL work is queued ahead of it.)
    std::string error;
    if (!distopt::runtime::cuda::ncclWatch(state().stream, error)) {
      dort_set_pending_error(1, "wait before a collective: %s", error.c_str());
      return false;
    }
    return true;
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
  if (captureRefuses())
    return;
  if (!deviceCallReady())
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
  if (captureRefuses())
    return;
  if (!deviceCallReady())
    return;
  Staged host;
  if (!host.stage(m, elem, send || !dense(m)))
    return;
  message(&host.memref);
  if (!send)
    host.upload();
}

/// Whether NCCL carried a collective (DISTOPT_CUDA_COMM=nccl): `call`
/// queues it on the rank's stream and says whether NCCL took it (the
/// engine's ncclAllReduce, ncclAllGather or ncclReduceScatter).
template <typename Call> bool ncclTakes(Call &&call) {
  namespace rc = distopt::runtime::cuda;
  if (rc::commEngine() != rc::Comm::Nccl)
    return false;
  if (captureRefuses())
    return true;
  if (!deviceCallReady())
    return true;
  return call(static_cast<void *>(state().stream));
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
    if (ncclTakes([&](void *st) {                                              \
          return distopt::runtime::cuda::ncclAllReduce(in, out, axis, kind,    \
                                                       DTYPE, st);             \
        }))                                                                    \
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
    if (ncclTakes([&](void *st) {                                              \
          return distopt::runtime::cuda::ncclAllGather(in, out, axis, dim,     \
                                                       DTYPE, st);             \
        }))                                                                    \
      return;                                                                  \
    staged(in, out, ELEM, [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {  \
      _mlir_ciface_dort_shard_all_gather_##SUFFIX(i, o, axis, dim);            \
    });                                                                        \
  }                                                                            \
  void _mlir_ciface_dort_cuda_shard_reduce_scatter_##SUFFIX(                   \
      DortUnrankedMemRef *in, DortUnrankedMemRef *out, int64_t axis,           \
      int64_t kind, int64_t dim) {                                             \
    if (ncclTakes([&](void *st) {                                              \
          return distopt::runtime::cuda::ncclReduceScatter(in, out, axis,      \
                                                           kind, dim, DTYPE,   \
                                                           st);                \
        }))                                                                    \
      return;                                                                  \
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
