//===- NcclEngine.h - which engine carries the collectives --------*- C++ -*-===//
#ifndef DISTOPT_RUNTIME_CUDA_NCCLENGINE_H
#define DISTOPT_RUNTIME_CUDA_NCCLENGINE_H

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"

#include <cstdint>

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

} // namespace distopt::runtime::cuda

#endif // DISTOPT_RUNTIME_CUDA_NCCLENGINE_H
