//===- CudaCollectives.cpp - collectives staged through host memory -------===//
//
// The CUDA device's collectives (Distributed.h's, on device buffers):
// each view is downloaded to host memory, handed to the CPU device's
// collective (MPI), and what it wrote uploaded back. With
// DISTOPT_CUDA_COMM=nccl the all-reduces, all-gathers and reduce-scatters
// NCCL can take go to NCCL on the rank's stream instead (Nccl.cpp).
//
//===----------------------------------------------------------------------===//

#include "CudaInternal.h"
#include "NcclEngine.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace distopt::runtime::cuda::detail;

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

// The CUDA device's collectives (Device.h): NCCL where it carries them
// (DISTOPT_CUDA_COMM=nccl: all-reduce, all-gather, reduce-scatter), else the
// CPU device's on host copies of the views.

void CudaDevice::all_reduce(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                            int64_t axis, int64_t kind, dort_dtype dtype) {
  if (ncclTakes([&](void *st) {
        return distopt::runtime::cuda::ncclAllReduce(in, out, axis, kind,
                                                     dtype, st);
      }))
    return;
  staged(in, out, dort_dtype_size(dtype),
         [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {
           cpuDevice().all_reduce(i, o, axis, kind, dtype);
         });
}

// Bucket all-reduces run at their start on the GPU (no overlap yet: NCCL on
// a side stream is the plan); the wait has nothing to do.
int64_t CudaDevice::start_all_reduce(DortUnrankedMemRef *in,
                                     DortUnrankedMemRef *out, int64_t axis,
                                     int64_t kind, int64_t, dort_dtype dtype) {
  all_reduce(in, out, axis, kind, dtype);
  return 0;
}

void CudaDevice::all_gather(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                            int64_t axis, int64_t dim, dort_dtype dtype) {
  if (ncclTakes([&](void *st) {
        return distopt::runtime::cuda::ncclAllGather(in, out, axis, dim, dtype,
                                                     st);
      }))
    return;
  staged(in, out, dort_dtype_size(dtype),
         [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {
           cpuDevice().all_gather(i, o, axis, dim, dtype);
         });
}

void CudaDevice::reduce_scatter(DortUnrankedMemRef *in,
                                DortUnrankedMemRef *out, int64_t axis,
                                int64_t kind, int64_t dim, dort_dtype dtype) {
  if (ncclTakes([&](void *st) {
        return distopt::runtime::cuda::ncclReduceScatter(in, out, axis, kind,
                                                         dim, dtype, st);
      }))
    return;
  staged(in, out, dort_dtype_size(dtype),
         [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {
           cpuDevice().reduce_scatter(i, o, axis, kind, dim, dtype);
         });
}

int64_t CudaDevice::start_reduce_scatter(DortUnrankedMemRef *in,
                                         DortUnrankedMemRef *out, int64_t axis,
                                         int64_t kind, int64_t dim, int64_t,
                                         dort_dtype dtype) {
  reduce_scatter(in, out, axis, kind, dim, dtype);
  return 0;
}

void CudaDevice::wait(int64_t) {}

void CudaDevice::all_to_all(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                            int64_t axis, int64_t splitDim, int64_t concatDim,
                            dort_dtype dtype) {
  staged(in, out, dort_dtype_size(dtype),
         [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {
           cpuDevice().all_to_all(i, o, axis, splitDim, concatDim, dtype);
         });
}

void CudaDevice::all_slice(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                           int64_t axis, int64_t dim, dort_dtype dtype) {
  staged(in, out, dort_dtype_size(dtype),
         [&](DortUnrankedMemRef *i, DortUnrankedMemRef *o) {
           cpuDevice().all_slice(i, o, axis, dim, dtype);
         });
}

// Pipeline stages: the host's send copies what it sends, so the staged
// download can go once the send has started.
void CudaDevice::send(DortUnrankedMemRef *in, int64_t axis, int64_t peer,
                      dort_dtype dtype) {
  stagedOne(in, dort_dtype_size(dtype), true, [&](DortUnrankedMemRef *h) {
    cpuDevice().send(h, axis, peer, dtype);
  });
}

void CudaDevice::recv(DortUnrankedMemRef *out, int64_t axis, int64_t peer,
                      dort_dtype dtype) {
  stagedOne(out, dort_dtype_size(dtype), false, [&](DortUnrankedMemRef *h) {
    cpuDevice().recv(h, axis, peer, dtype);
  });
}
