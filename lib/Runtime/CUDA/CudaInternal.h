//===- CudaInternal.h - state the CUDA runtime files share ------*- C++ -*-===//
//
// Private to lib/Runtime/CUDA: the device state of the rank (its stream,
// cuBLAS handle, memory pool, graphs, carried buffers), the profiler, the
// error helpers and the device memory the runtime's files share. Each is
// defined once, in CudaDevice.cpp or CudaMemory.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_CUDA_CUDAINTERNAL_H
#define DISTOPT_RUNTIME_CUDA_CUDAINTERNAL_H

#include "distopt/Runtime/Device.h"
#include "distopt/Runtime/Kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distopt::runtime::cuda::detail {

//===----------------------------------------------------------------------===//
// Device state (CudaDevice.cpp)
//===----------------------------------------------------------------------===//

/// The rank's device, opened at the first call that needs it, and what the
/// runtime keeps for it between calls and runs.
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
    // Input slots the program writes in place (pairs of one slot), of the
    // runs given `writtenHost`: downloaded after each run when they are
    // not carried (DISTOPT_CUDA_RESIDENT=0).
    void **writtenHost = nullptr;
    std::vector<int64_t> written;
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
  // Index checks (CudaDevice::index_fault): per check (keyed by its message,
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

/// The rank's device state, one per process.
DeviceState &state();

/// Opens the device of this rank once; false (with state().error) when
/// there is no usable one.
bool ensureDevice();

/// Inside a capture: marks it broken (the caller then does nothing; the run
/// is redone without a graph) and returns true.
bool captureRefuses();

/// For a runtime call on the device: the device is up and no earlier step
/// failed (its results would be garbage). False otherwise, the device's
/// failure reported as the pending error.
bool deviceCallReady();

/// CUDA's name and description of `e`.
std::string cudaMessage(cudaError_t e);

/// True on success; otherwise a pending error "CUDA <what> failed: ...".
bool check(cudaError_t e, const char *what);

//===----------------------------------------------------------------------===//
// Profiler (CudaDevice.cpp)
//===----------------------------------------------------------------------===//

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
  std::vector<Span> open;         // recorded, not read yet
  std::vector<cudaEvent_t> spare; // events to reuse
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
  void collect(bool count = true);
  /// Prints the totals (at exit).
  void print();
};

Profiler &profiler();

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
                     : name.find("<<<") != std::string::npos ? "kernel launch"
                                                             : "copy";
  auto &h = p.hostOpen[kind];
  ++h.first;
  h.second += std::chrono::duration<double, std::milli>(t1 - t0).count();
}

//===----------------------------------------------------------------------===//
// Device memory (CudaMemory.cpp)
//===----------------------------------------------------------------------===//

/// A block of at least `size` bytes from the rank's pool (stream-ordered
/// reuse); null with `error` set when the device has no room.
void *deviceAlloc(size_t size, std::string &error);

/// Gives a block of deviceAlloc back to the pool.
void deviceFree(void *p);

/// The libraries' workspace (cuDNN's and cuBLASLt's, one call at a time on
/// the rank's stream): at least `bytes`, kept between calls.
void *libraryWorkspace(size_t bytes, std::string &error);

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

//===----------------------------------------------------------------------===//
// The CUDA device (Device.h)
//===----------------------------------------------------------------------===//

/// Device.h's interface on this rank's GPU: GEMMs with cuBLAS(Lt)
/// (CudaBlas.cpp), convolutions with cuDNN (CudaConv.cpp), collectives over
/// NCCL or staged through host memory into the CPU device's
/// (CudaCollectives.cpp), index faults (CudaDevice.cpp). Registered as the
/// current device when the CUDA runtime loads (CudaDevice.cpp).
class CudaDevice final : public Device {
public:
  const char *name() const override { return "cuda"; }

  DORT_DEVICE_METHODS(override)
};

} // namespace distopt::runtime::cuda::detail

#endif // DISTOPT_RUNTIME_CUDA_CUDAINTERNAL_H
