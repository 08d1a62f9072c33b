//===- NcclEngine.h - which engine carries the collectives --------*- C++ -*-===//
#ifndef DISTOPT_RUNTIME_CUDA_NCCLENGINE_H
#define DISTOPT_RUNTIME_CUDA_NCCLENGINE_H

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"

#include <cstdint>
#include <string>

namespace distopt::runtime::cuda {

enum class Comm { Staged, Nccl };

/// DISTOPT_CUDA_COMM: "nccl" selects NCCL for all-reduces; anything else
/// (the default) stages every collective through host memory.
Comm commEngine();

/// The all-reduce of a shard collective through NCCL on `stream`. Returns
/// false when NCCL does not take it (a strided view, a type or reduction
/// it lacks): the caller stages it. Failures are pending errors.
bool ncclAllReduce(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                   int64_t axis, int64_t kind, dort_dtype dtype, void *stream);

/// The all-gather of a shard collective along `dim` through NCCL, where
/// NCCL's rank-major concatenation is that (contiguous views, every
/// dimension before `dim` of extent 1); false otherwise (staged).
bool ncclAllGather(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                   int64_t axis, int64_t dim, dort_dtype dtype, void *stream);

/// The reduce-scatter along `dim`, on the same terms.
bool ncclReduceScatter(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                       int64_t axis, int64_t kind, int64_t dim,
                       dort_dtype dtype, void *stream);

/// Waits for `stream`. NCCL work queued on it since the last wait is
/// watched first: its communicators' asynchronous errors polled, and no
/// longer than dort_comm_timeout_seconds() (a peer died or hangs); on
/// either, every communicator is aborted (ncclCommAbort), the stream
/// drained, and false returned with `error` set. Then (and without NCCL
/// work) cudaStreamSynchronize.
bool ncclWatch(void *stream, std::string &error);

} // namespace distopt::runtime::cuda

#endif // DISTOPT_RUNTIME_CUDA_NCCLENGINE_H
