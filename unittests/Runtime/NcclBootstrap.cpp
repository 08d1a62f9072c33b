//===- NcclBootstrap.cpp - NCCL's bootstrap over MPI, and its collectives -===//
//
// Run under mpirun.
//
// Without arguments (test/Integration/nccl-bootstrap.test, no GPU needed):
// rank 0 makes NCCL's unique id, dort_nccl_unique_id broadcasts it, and
// every rank must hold the same bytes.
//
// With --all-reduce (on a GPU machine; scripts/gpu-check runs it): a grid
// of one axis over the world, then the engine DISTOPT_CUDA_COMM=nccl
// selects (communicator bootstrapped over MPI, ncclCommInitRank, the
// collectives on a stream): an all-reduce of a device buffer holding rank+1
// in every element, which must come back as size*(size+1)/2; then an
// all-gather and a reduce-scatter along the leading dimension, waited for
// through the runtime's watchdog (ncclWatch), checked element by element;
// and a gather along a later dimension, which NCCL must leave to the staged
// path. Ranks that share a GPU get the runtime's error (NCCL refuses them),
// printed, and exit 1.
//
//===----------------------------------------------------------------------===//

#include "NcclEngine.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Distributed.h"
#include "distopt/Runtime/Runtime.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int checkUniqueId(dort_comm *world, int rank, int size) {
  unsigned char id[128] = {0};
  if (dort_nccl_unique_id(world, id, sizeof id) != 0) {
    std::fprintf(stderr, "rank %d: %s\n", rank, dort_last_error_message());
    return 1;
  }
  std::vector<unsigned char> all(size * sizeof id);
  if (dort_gather(id, all.data(), sizeof id, DORT_U8, 0, world) != 0)
    return 1;
  int status = 0;
  if (rank == 0) {
    bool nonzero = false;
    for (unsigned char c : id)
      nonzero |= c != 0;
    for (int r = 1; r < size; ++r)
      for (size_t i = 0; i < sizeof id; ++i)
        if (all[r * sizeof id + i] != id[i])
          status = 1;
    if (!nonzero)
      status = 1;
    std::printf("nccl unique id %s on %d ranks\n",
                status == 0 ? "identical" : "DIFFERS", size);
  }
  // A wrong id size is refused.
  if (dort_nccl_unique_id(world, id, 64) == 0)
    status = 1;
  else if (rank == 0)
    std::printf("%s\n", dort_last_error_message());
  return status;
}

int fail(int rank, const char *what, cudaError_t e) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
  return 1;
}

/// The all-gather and reduce-scatter NCCL carries (along the leading
/// dimension), waited for through the runtime's watchdog (ncclWatch).
int checkGatherScatter(dort_comm *world, int rank, int size,
                       cudaStream_t stream) {
  const int64_t k = 1 << 16; // elements per rank
  float *part = nullptr, *all = nullptr;
  cudaError_t e;
  if ((e = cudaMalloc(reinterpret_cast<void **>(&part), k * sizeof(float))) !=
          cudaSuccess ||
      (e = cudaMalloc(reinterpret_cast<void **>(&all),
                      k * size * sizeof(float))) != cudaSuccess)
    return fail(rank, "cudaMalloc", e);
  std::vector<float> host(k * size);
  for (int64_t i = 0; i < k; ++i)
    host[i] = float(rank * k + i);
  if ((e = cudaMemcpy(part, host.data(), k * sizeof(float),
                      cudaMemcpyHostToDevice)) != cudaSuccess)
    return fail(rank, "cudaMemcpy", e);
  // Rank-1 descriptors: [k] and [size * k].
  int64_t partDesc[5] = {reinterpret_cast<int64_t>(part),
                         reinterpret_cast<int64_t>(part), 0, k, 1};
  int64_t allDesc[5] = {reinterpret_cast<int64_t>(all),
                        reinterpret_cast<int64_t>(all), 0, k * size, 1};
  DortUnrankedMemRef p{1, partDesc}, a{1, allDesc};
  namespace rc = distopt::runtime::cuda;
  std::string error;
  int64_t wrong = 0;
  if (!rc::ncclAllGather(&p, &a, 0, 0, DORT_F32, stream)) {
    std::fprintf(stderr, "rank %d: NCCL did not take a leading all-gather\n",
                 rank);
    return 1;
  }
  if (!rc::ncclWatch(stream, error) || dort_pending_error()) {
    std::fprintf(stderr, "rank %d: all-gather: %s\n", rank,
                 dort_pending_error() ? dort_pending_error() : error.c_str());
    return 1;
  }
  cudaMemcpy(host.data(), all, k * size * sizeof(float),
             cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < k * size; ++i)
    wrong += host[i] != float(i);
  // Reduce-scatter of the gathered buffer plus one: every rank holds the
  // same [size * k], so block r sums to size * (r * k + i + 1).
  for (int64_t i = 0; i < k * size; ++i)
    host[i] = float(i) + 1;
  cudaMemcpy(all, host.data(), k * size * sizeof(float),
             cudaMemcpyHostToDevice);
  if (!rc::ncclReduceScatter(&a, &p, 0, /*Sum*/ 1, 0, DORT_F32, stream)) {
    std::fprintf(stderr,
                 "rank %d: NCCL did not take a leading reduce-scatter\n", rank);
    return 1;
  }
  if (!rc::ncclWatch(stream, error) || dort_pending_error()) {
    std::fprintf(stderr, "rank %d: reduce-scatter: %s\n", rank,
                 dort_pending_error() ? dort_pending_error() : error.c_str());
    return 1;
  }
  cudaMemcpy(host.data(), part, k * sizeof(float), cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < k; ++i)
    wrong += host[i] != float(size) * float(rank * k + i + 1);
  // A view NCCL cannot take as is (the gather along a dimension after one
  // of extent 2) is left to the staged path.
  int64_t twoDim[7] = {reinterpret_cast<int64_t>(all),
                       reinterpret_cast<int64_t>(all), 0, 2, k * size / 2,
                       k * size / 2, 1};
  DortUnrankedMemRef t{2, twoDim};
  bool refused = !rc::ncclAllGather(&p, &t, 0, 1, DORT_F32, stream);
  int bad = wrong != 0 || !refused;
  int anyBad = 0;
  dort_all_reduce(&bad, &anyBad, 1, DORT_I32, DORT_MAX, world, nullptr);
  if (rank == 0)
    std::printf("nccl all-gather and reduce-scatter of %lld floats per rank "
                "on %d rank(s), waited for by the watchdog: %s\n",
                static_cast<long long>(k), size, anyBad ? "WRONG" : "ok");
  if (wrong)
    std::fprintf(stderr, "rank %d: %lld elements wrong\n", rank,
                 static_cast<long long>(wrong));
  if (!refused)
    std::fprintf(stderr, "rank %d: NCCL took a gather it cannot do\n", rank);
  cudaFree(part);
  cudaFree(all);
  return anyBad;
}

int checkAllReduce(dort_comm *world, int rank, int size) {
  int64_t shape[1] = {size};
  if (dort_grid_init(1, shape) != 0) {
    std::fprintf(stderr, "rank %d: %s\n", rank, dort_last_error_message());
    return 1;
  }
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "rank %d: no CUDA device\n", rank);
    return 1;
  }
  if ((e = cudaSetDevice(dort_comm_local_rank(world) % devices)) != cudaSuccess)
    return fail(rank, "cudaSetDevice", e);
  const int64_t n = int64_t(1) << 22; // 16 MiB of floats
  float *buf = nullptr;
  if ((e = cudaMalloc(reinterpret_cast<void **>(&buf), n * sizeof(float))) !=
      cudaSuccess)
    return fail(rank, "cudaMalloc", e);
  std::vector<float> host(n, float(rank + 1));
  if ((e = cudaMemcpy(buf, host.data(), n * sizeof(float),
                      cudaMemcpyHostToDevice)) != cudaSuccess)
    return fail(rank, "cudaMemcpy", e);
  cudaStream_t stream;
  if ((e = cudaStreamCreate(&stream)) != cudaSuccess)
    return fail(rank, "cudaStreamCreate", e);
  // A rank-1 memref descriptor: allocated, aligned, offset, size, stride.
  int64_t desc[5] = {reinterpret_cast<int64_t>(buf),
                     reinterpret_cast<int64_t>(buf), 0, n, 1};
  DortUnrankedMemRef m{1, desc};
  auto t0 = std::chrono::steady_clock::now();
  if (!distopt::runtime::cuda::ncclAllReduce(&m, &m, 0, /*Sum*/ 1, DORT_F32,
                                             stream)) {
    std::fprintf(stderr, "rank %d: NCCL did not take a contiguous f32 sum\n",
                 rank);
    return 1;
  }
  if (const char *why = dort_pending_error()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, why);
    return 1;
  }
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess)
    return fail(rank, "cudaStreamSynchronize", e);
  double firstMs = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  if ((e = cudaMemcpy(host.data(), buf, n * sizeof(float),
                      cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail(rank, "cudaMemcpy", e);
  const float want = float(size) * float(size + 1) / 2;
  int64_t wrong = 0;
  for (float v : host)
    wrong += v != want;
  // Timed: 20 more with the communicator made, as a max (which leaves the
  // buffer as it is).
  const int reps = 20;
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i)
    distopt::runtime::cuda::ncclAllReduce(&m, &m, 0, /*Max*/ 2, DORT_F32,
                                          stream);
  cudaStreamSynchronize(stream);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t1)
                  .count() /
              reps;
  int bad = wrong != 0 || dort_pending_error() != nullptr;
  int anyBad = 0;
  dort_all_reduce(&bad, &anyBad, 1, DORT_I32, DORT_MAX, world, nullptr);
  if (rank == 0) {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    std::printf("nccl all-reduce of %lld floats on %d rank(s), %s: %s "
                "(first call with the communicator's start %.1f ms, then "
                "%.3f ms per call)\n",
                static_cast<long long>(n), size, prop.name,
                anyBad ? "WRONG" : "ok", firstMs, ms);
  }
  if (wrong)
    std::fprintf(stderr, "rank %d: %lld elements differ from %g\n", rank,
                 static_cast<long long>(wrong), want);
  cudaFree(buf);
  if (anyBad)
    return anyBad;
  return checkGatherScatter(world, rank, size, stream);
}

} // namespace

int main(int argc, char **argv) {
  if (dort_comm_init(&argc, &argv) != 0) {
    std::fprintf(stderr, "%s\n", dort_last_error_message());
    return 1;
  }
  dort_comm *world = dort_comm_world();
  int rank = dort_comm_rank(world), size = dort_comm_size(world);
  bool allReduce = argc > 1 && std::strcmp(argv[1], "--all-reduce") == 0;
  int status = allReduce ? checkAllReduce(world, rank, size)
                         : checkUniqueId(world, rank, size);
  dort_comm_finalize();
  return status;
}
