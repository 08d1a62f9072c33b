//===- CudaMemory.cpp - device memory of the CUDA runtime -----------------===//
//
// The rank's device memory pool (blocks reused by exact size, in stream
// order; inside a CUDA graph's capture, the graph's own), the host code's
// allocations on it (_mlir_memref_to_llvm_*), and the workspace the
// libraries (cuDNN, cuBLASLt) share.
//
//===----------------------------------------------------------------------===//

#include "CudaInternal.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace distopt::runtime::cuda::detail;

namespace {

/// The libraries' workspace, kept between calls (libraryWorkspace).
struct Workspace {
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};

} // namespace

namespace distopt::runtime::cuda::detail {

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
  if (s.capturing && std::find(s.captureOwned.begin(), s.captureOwned.end(),
                               p) != s.captureOwned.end())
    s.captureFree.emplace(it->second, p);
  else
    s.freeBlocks.emplace(it->second, p);
  s.liveBlocks.erase(it);
}

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

} // namespace distopt::runtime::cuda::detail

extern "C" {

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

} // extern "C"
