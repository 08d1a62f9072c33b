//===- Nccl.cpp - NCCL for the CUDA runtime's all-reduces -----------------===//
//
// Opt-in (DISTOPT_CUDA_COMM=nccl) until it has run on a machine with several
// GPUs: the all-reduces of a program go to NCCL, on the rank's stream, with
// one communicator per grid axis bootstrapped over MPI (the axis's rank 0
// makes the unique id, an MPI broadcast hands it to the others). libnccl is
// loaded with dlopen, so an executable needs it only when NCCL is asked
// for. The other collectives, and all-reduces of views that are not
// contiguous, stay staged through host memory (CudaCollectives.cpp).
//
//===----------------------------------------------------------------------===//

#include "Dlsym.h"
#include "NcclEngine.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Distributed.h"
#include "distopt/Runtime/Runtime.h"

#include <nccl.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace {

using distopt::runtime::cuda::bindSymbol;

struct NcclApi {
  void *lib = nullptr;
  ncclResult_t (*getVersion)(int *) = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId *) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t,
                            ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t,
                            ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t,
                                ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*asyncError)(ncclComm_t, ncclResult_t *) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  const char *(*errorString)(ncclResult_t) = nullptr;
};


/// libnccl, loaded once; null with `error` set when it cannot be.
const NcclApi *api(std::string &error) {
  static NcclApi a;
  static std::string loadError;
  static bool tried = false;
  if (!tried) {
    tried = true;
    a.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char *why = dlerror();
      loadError = std::string("cannot load libnccl.so.2: ") + (why ? why : "");
    } else if (!bindSymbol(a.lib, "ncclGetVersion", a.getVersion) ||
               !bindSymbol(a.lib, "ncclGetUniqueId", a.getUniqueId) ||
               !bindSymbol(a.lib, "ncclCommInitRank", a.commInitRank) ||
               !bindSymbol(a.lib, "ncclCommDestroy", a.commDestroy) ||
               !bindSymbol(a.lib, "ncclAllReduce", a.allReduce) ||
               !bindSymbol(a.lib, "ncclAllGather", a.allGather) ||
               !bindSymbol(a.lib, "ncclReduceScatter", a.reduceScatter) ||
               !bindSymbol(a.lib, "ncclCommGetAsyncError", a.asyncError) ||
               !bindSymbol(a.lib, "ncclCommAbort", a.commAbort) ||
               !bindSymbol(a.lib, "ncclGetErrorString", a.errorString)) {
      loadError = "libnccl.so.2 lacks a function distopt needs";
    }
  }
  error = loadError;
  return loadError.empty() ? &a : nullptr;
}

std::map<int, ncclComm_t> &axisComms() {
  static std::map<int, ncclComm_t> comms;
  return comms;
}

/// An event recorded on the stream after the last NCCL call: the watchdog
/// bounds the wait for NCCL's work (not for everything else on the stream).
struct NcclProgress {
  cudaEvent_t last = nullptr;
  bool pending = false;
};
NcclProgress &progress() {
  static NcclProgress p;
  return p;
}

/// Records that NCCL work was just queued on `stream`.
void queued(cudaStream_t stream) {
  NcclProgress &p = progress();
  if (!p.last && cudaEventCreateWithFlags(&p.last, cudaEventDisableTiming) !=
                     cudaSuccess) {
    cudaGetLastError();
    p.last = nullptr;
    return;
  }
  if (cudaEventRecord(p.last, stream) == cudaSuccess)
    p.pending = true;
}

bool ncclType(dort_dtype d, ncclDataType_t &t) {
  switch (d) {
  case DORT_F32: t = ncclFloat32; return true;
  case DORT_F64: t = ncclFloat64; return true;
  case DORT_F16: t = ncclFloat16; return true;
  case DORT_BF16: t = ncclBfloat16; return true;
  case DORT_I32: t = ncclInt32; return true;
  case DORT_I64: t = ncclInt64; return true;
  case DORT_I8: t = ncclInt8; return true;
  case DORT_U8: t = ncclUint8; return true;
  }
  return false;
}

/// shard.ReductionKind: Sum=1, Max=2, Min=3, Product=4, Average=5.
bool ncclOp(int64_t kind, ncclRedOp_t &op, dort_dtype d) {
  // An average of integers is an error on the staged path: leave it there.
  if (kind == 5 && d != DORT_F32 && d != DORT_F64)
    return false;
  switch (kind) {
  case 1: op = ncclSum; return true;
  case 2: op = ncclMax; return true;
  case 3: op = ncclMin; return true;
  case 4: op = ncclProd; return true;
  case 5: op = ncclAvg; return true;
  }
  return false;
}

/// Whether a descriptor of `rank` dimensions is dense row-major.
bool contiguous(const DortUnrankedMemRef *m) {
  auto *d = static_cast<int64_t *>(m->descriptor);
  const int64_t *sizes = d + 3, *strides = d + 3 + m->rank;
  int64_t expect = 1;
  for (int64_t i = m->rank - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expect)
      return false;
    expect *= sizes[i];
  }
  return true;
}

int64_t numElements(const DortUnrankedMemRef *m) {
  auto *d = static_cast<int64_t *>(m->descriptor);
  int64_t n = 1;
  for (int64_t i = 0; i < m->rank; ++i)
    n *= d[3 + i];
  return n;
}

void *dataOf(const DortUnrankedMemRef *m, size_t elem) {
  auto *d = static_cast<int64_t *>(m->descriptor);
  char *aligned = reinterpret_cast<char *>(d[1]);
  return aligned + d[2] * static_cast<int64_t>(elem);
}

} // namespace

extern "C" int dort_nccl_unique_id(dort_comm *comm, void *id, int64_t bytes) {
  if (bytes != NCCL_UNIQUE_ID_BYTES)
    return dort_set_error(1, "dort_nccl_unique_id: an id has %d bytes, not %lld",
                          NCCL_UNIQUE_ID_BYTES, static_cast<long long>(bytes));
  std::string error;
  const NcclApi *nccl = api(error);
  if (!nccl)
    return dort_set_error(1, "%s", error.c_str());
  int rank = dort_comm_rank(comm);
  int rc = 0;
  if (rank == 0) {
    ncclResult_t r = nccl->getUniqueId(static_cast<ncclUniqueId *>(id));
    if (r != ncclSuccess)
      rc = dort_set_error(1, "ncclGetUniqueId: %s", nccl->errorString(r));
  }
  // Every rank takes part in the broadcast, even after a failure on rank 0
  // (then the others learn it from the status that follows).
  int status = rc;
  if (dort_broadcast(&status, &status, 1, DORT_I32, 0, comm, nullptr) != 0)
    return 1;
  if (status != 0)
    return rank == 0 ? rc
                     : dort_set_error(1, "NCCL bootstrap failed on rank 0 of "
                                         "the communicator");
  return dort_broadcast(id, id, bytes, DORT_U8, 0, comm, nullptr);
}

namespace distopt::runtime::cuda {

Comm commEngine() {
  static Comm engine = [] {
    const char *v = std::getenv("DISTOPT_CUDA_COMM");
    return v && std::strcmp(v, "nccl") == 0 ? Comm::Nccl : Comm::Staged;
  }();
  return engine;
}

} // namespace distopt::runtime::cuda

namespace {

/// NCCL and the communicator of grid axis `axis` (made at its first use:
/// the axis's rank 0 makes the unique id, an MPI broadcast hands it on);
/// null after a pending error naming `what`.
ncclComm_t axisComm(const NcclApi *&nccl, int64_t axis, const char *what) {
  std::string error;
  nccl = api(error);
  if (!nccl) {
    dort_set_pending_error(1, "DISTOPT_CUDA_COMM=nccl: %s", error.c_str());
    return nullptr;
  }
  auto &comms = axisComms();
  auto it = comms.find(static_cast<int>(axis));
  if (it != comms.end())
    return it->second;
  dort_comm *c = dort_grid_axis_comm(static_cast<int>(axis));
  if (!c) {
    dort_set_pending_error(1, "%s over grid axis %lld: no such axis", what,
                           static_cast<long long>(axis));
    return nullptr;
  }
  int local = dort_comm_local_size(dort_comm_world()), devices = 0;
  cudaGetDeviceCount(&devices);
  if (local > devices) {
    dort_set_pending_error(
        1,
        "DISTOPT_CUDA_COMM=nccl needs a GPU per rank: %d ranks share %d "
        "GPU(s) on this node (NCCL refuses two ranks on one GPU); use the "
        "staged collectives (unset DISTOPT_CUDA_COMM)",
        local, devices);
    return nullptr;
  }
  ncclUniqueId id;
  if (dort_nccl_unique_id(c, &id, sizeof id) != 0) {
    dort_set_pending_error(1, "%s", dort_last_error_message());
    return nullptr;
  }
  ncclComm_t comm;
  ncclResult_t r =
      nccl->commInitRank(&comm, dort_comm_size(c), id, dort_comm_rank(c));
  if (r != ncclSuccess) {
    dort_set_pending_error(1, "ncclCommInitRank (grid axis %lld): %s",
                           static_cast<long long>(axis), nccl->errorString(r));
    return nullptr;
  }
  comms.emplace(static_cast<int>(axis), comm);
  return comm;
}

/// Queues one NCCL collective (`call`, given the library and grid axis
/// `axis`'s communicator) on `stream`: a failure is a pending error naming
/// `what`, a success recorded for the watchdog. True: NCCL took it.
template <typename Call>
bool queue(const char *what, int64_t axis, void *stream, Call &&call) {
  const NcclApi *nccl = nullptr;
  ncclComm_t comm = axisComm(nccl, axis, what);
  if (!comm)
    return true;
  ncclResult_t r = call(nccl, comm);
  if (r != ncclSuccess)
    dort_set_pending_error(1, "%s (grid axis %lld): %s", what,
                           static_cast<long long>(axis), nccl->errorString(r));
  else
    queued(static_cast<cudaStream_t>(stream));
  return true;
}

/// Whether every dimension of `m` before `dim` has extent 1: NCCL's
/// rank-major concatenation of such views is the one along `dim`.
bool leadingDim(const DortUnrankedMemRef *m, int64_t dim) {
  auto *d = static_cast<int64_t *>(m->descriptor);
  if (dim < 0 || dim >= m->rank)
    return false;
  for (int64_t i = 0; i < dim; ++i)
    if (d[3 + i] != 1)
      return false;
  return true;
}

} // namespace

namespace distopt::runtime::cuda {

bool ncclAllReduce(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                   int64_t axis, int64_t kind, dort_dtype dtype,
                   void *stream) {
  if (!contiguous(in) || !contiguous(out))
    return false; // staged: it reads any strides
  ncclDataType_t type;
  ncclRedOp_t op;
  if (!ncclType(dtype, type) || !ncclOp(kind, op, dtype))
    return false;
  return queue("ncclAllReduce", axis, stream, [&](const NcclApi *nccl,
                                                   ncclComm_t comm) {
    return nccl->allReduce(dataOf(in, dort_dtype_size(dtype)),
                           dataOf(out, dort_dtype_size(dtype)),
                           static_cast<size_t>(numElements(in)), type, op,
                           comm, static_cast<cudaStream_t>(stream));
  });
}

bool ncclAllGather(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                   int64_t axis, int64_t dim, dort_dtype dtype, void *stream) {
  ncclDataType_t type;
  if (!contiguous(in) || !contiguous(out) || !leadingDim(out, dim) ||
      !leadingDim(in, dim) || !ncclType(dtype, type))
    return false;
  dort_comm *group = dort_grid_axis_comm(static_cast<int>(axis));
  if (group && numElements(out) != dort_comm_size(group) * numElements(in))
    return false; // not NCCL's shape: the staged path says what is wrong
  return queue("ncclAllGather", axis, stream, [&](const NcclApi *nccl,
                                                   ncclComm_t comm) {
    return nccl->allGather(dataOf(in, dort_dtype_size(dtype)),
                           dataOf(out, dort_dtype_size(dtype)),
                           static_cast<size_t>(numElements(in)), type, comm,
                           static_cast<cudaStream_t>(stream));
  });
}

bool ncclReduceScatter(DortUnrankedMemRef *in, DortUnrankedMemRef *out,
                       int64_t axis, int64_t kind, int64_t dim,
                       dort_dtype dtype, void *stream) {
  ncclDataType_t type;
  ncclRedOp_t op;
  if (!contiguous(in) || !contiguous(out) || !leadingDim(in, dim) ||
      !leadingDim(out, dim) || !ncclType(dtype, type) ||
      !ncclOp(kind, op, dtype))
    return false;
  dort_comm *group = dort_grid_axis_comm(static_cast<int>(axis));
  if (group && numElements(in) != dort_comm_size(group) * numElements(out))
    return false;
  return queue("ncclReduceScatter", axis, stream, [&](const NcclApi *nccl,
                                                       ncclComm_t comm) {
    return nccl->reduceScatter(dataOf(in, dort_dtype_size(dtype)),
                               dataOf(out, dort_dtype_size(dtype)),
                               static_cast<size_t>(numElements(out)), type, op,
                               comm, static_cast<cudaStream_t>(stream));
  });
}

bool ncclWatch(void *stream, std::string &error) {
  auto s = static_cast<cudaStream_t>(stream);
  auto &comms = axisComms();
  NcclProgress &p = progress();
  std::string loadError;
  const NcclApi *nccl =
      comms.empty() || !p.pending ? nullptr : api(loadError);
  if (nccl) {
    // NCCL's work, bounded: its errors polled, and no longer than the
    // timeout. On either, the communicators are aborted (NCCL's kernels
    // then return) and the stream drained, so that nothing is still being
    // written when the run reports the failure (the job then ends).
    auto fail = [&](const std::string &why) {
      error = why;
      for (auto &[axis, comm] : comms)
        nccl->commAbort(comm);
      comms.clear();
      p.pending = false;
      cudaStreamSynchronize(s);
      cudaGetLastError();
      return false;
    };
    auto start = std::chrono::steady_clock::now();
    double limit = dort_comm_timeout_seconds();
    for (;;) {
      cudaError_t e = cudaEventQuery(p.last);
      if (e == cudaSuccess)
        break;
      if (e != cudaErrorNotReady)
        return fail(std::string(cudaGetErrorName(e)) + ": " +
                    cudaGetErrorString(e));
      for (auto &[axis, comm] : comms) {
        ncclResult_t state = ncclSuccess;
        if (nccl->asyncError(comm, &state) == ncclSuccess &&
            state != ncclSuccess && state != ncclInProgress)
          return fail(std::string("NCCL failed on grid axis ") +
                      std::to_string(axis) + " (" + nccl->errorString(state) +
                      "): a peer failed; the communicators are aborted");
      }
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      if (waited > limit) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "NCCL's collectives did not finish within %g s "
                      "(DISTOPT_COMM_TIMEOUT): a peer died or hangs; the "
                      "communicators are aborted",
                      limit);
        return fail(buf);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    p.pending = false;
  }
  cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  return e == cudaSuccess;
}

} // namespace distopt::runtime::cuda
