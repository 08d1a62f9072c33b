//===- Comm.cpp - collectives over MPI (CPU buffers) ----------------------===//
//
// Blocking calls are the non-blocking ones completed by waitWithTimeout, so
// one rank that died or hangs cannot keep the others waiting forever: after
// DISTOPT_COMM_TIMEOUT seconds (default 300) the job is aborted with a
// message naming this rank and the call. mpirun reports which rank died.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Comm.h"

#include "distopt/Runtime/Runtime.h"

#include "distopt/Runtime/Half.h"

// The C API only (OpenMPI and MPICH otherwise pull in C++ bindings that
// need libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct dort_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm local = MPI_COMM_NULL; ///< ranks of this node (world: at init)
  bool owned = true;
};

struct dort_request {
  MPI_Request request = MPI_REQUEST_NULL;
  std::string what;
  /// Scratch that must live until completion (in-place reduce-scatter).
  std::vector<char> scratch;
};

namespace {

using namespace distopt::runtime;

bool gInitialized = false;
bool gWeInitializedMPI = false;
bool gThreadMultiple = false;
/// What the program is doing (dort_set_context), for failure messages;
/// set by the main thread, read by whichever thread fails.
std::mutex gContextMutex;
std::string gContext;
std::string contextPrefix() {
  std::lock_guard<std::mutex> lock(gContextMutex);
  return gContext.empty() ? std::string() : gContext + ": ";
}
dort_comm gWorld;
MPI_Op gHalfOps[2][4]; // [f16, bf16][sum, max, min, prod]

double timeoutSeconds() {
  static double t = [] {
    const char *env = std::getenv("DISTOPT_COMM_TIMEOUT");
    if (env && *env) {
      char *end = nullptr;
      double v = std::strtod(env, &end);
      if (end && *end == 0 && v > 0)
        return v;
    }
    return 300.0;
  }();
  return t;
}

int worldRank() {
  int r = -1;
  if (gInitialized)
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// --- 16-bit floating point reductions --------------------------------------

template <float (*Load)(uint16_t), uint16_t (*Store)(float), int Op>
void halfOp(void *in, void *inout, int *len, MPI_Datatype *) {
  auto *a = static_cast<uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = Load(a[i]), y = Load(b[i]), r;
    switch (Op) {
    case DORT_SUM:
      r = x + y;
      break;
    case DORT_MAX:
      r = std::fmax(x, y);
      break;
    case DORT_MIN:
      r = std::fmin(x, y);
      break;
    default:
      r = x * y;
      break;
    }
    b[i] = Store(r);
  }
}

void createHalfOps() {
  MPI_Op_create(halfOp<f16ToFloat, floatToF16, DORT_SUM>, 1, &gHalfOps[0][0]);
  MPI_Op_create(halfOp<f16ToFloat, floatToF16, DORT_MAX>, 1, &gHalfOps[0][1]);
  MPI_Op_create(halfOp<f16ToFloat, floatToF16, DORT_MIN>, 1, &gHalfOps[0][2]);
  MPI_Op_create(halfOp<f16ToFloat, floatToF16, DORT_PROD>, 1, &gHalfOps[0][3]);
  MPI_Op_create(halfOp<bf16ToFloat, floatToBF16, DORT_SUM>, 1, &gHalfOps[1][0]);
  MPI_Op_create(halfOp<bf16ToFloat, floatToBF16, DORT_MAX>, 1, &gHalfOps[1][1]);
  MPI_Op_create(halfOp<bf16ToFloat, floatToBF16, DORT_MIN>, 1, &gHalfOps[1][2]);
  MPI_Op_create(halfOp<bf16ToFloat, floatToBF16, DORT_PROD>, 1,
                &gHalfOps[1][3]);
}

// --- argument checking --------------------------------------------------------

bool validDType(int d) { return d >= DORT_F32 && d <= DORT_U8; }

MPI_Datatype mpiType(dort_dtype d) {
  switch (d) {
  case DORT_F32:
    return MPI_FLOAT;
  case DORT_F64:
    return MPI_DOUBLE;
  case DORT_F16:
  case DORT_BF16:
    return MPI_UINT16_T;
  case DORT_I32:
    return MPI_INT32_T;
  case DORT_I64:
    return MPI_INT64_T;
  case DORT_I8:
    return MPI_INT8_T;
  case DORT_U8:
    return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

bool mpiOp(dort_dtype d, dort_redop op, MPI_Op &out) {
  if (op < DORT_SUM || op > DORT_PROD)
    return false;
  if (d == DORT_F16 || d == DORT_BF16) {
    out = gHalfOps[d == DORT_BF16][op];
    return true;
  }
  static const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_PROD};
  out = ops[op];
  return true;
}

int check(const char *what, dort_comm *comm, int64_t count, int dtype,
          dort_stream stream) {
  if (!gInitialized)
    return dort_set_error(1, "%s: the communication layer is not initialised "
                             "(dort_comm_init)", what);
  if (!comm || comm->comm == MPI_COMM_NULL)
    return dort_set_error(1, "%s: null communicator", what);
  if (!validDType(dtype))
    return dort_set_error(1, "%s: unknown dtype %d", what, dtype);
  if (count < 0)
    return dort_set_error(1, "%s: negative count %lld", what,
                          static_cast<long long>(count));
  if (count > INT_MAX)
    return dort_set_error(1,
                          "%s: %lld elements in one call exceed MPI's int "
                          "counts (2^31-1)",
                          what, static_cast<long long>(count));
  if (stream)
    return dort_set_error(1, "%s: a stream was given, but the MPI backend "
                             "moves CPU buffers (streams need NCCL)", what);
  return 0;
}

int mpiError(const char *what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return dort_set_error(1, "%s: MPI error: %.*s", what, len, text);
}

/// Waits for `request`, aborting the job after the timeout; `status`
/// receives the completed request's status (a receive's sender).
int waitWithTimeout(MPI_Request &request, const char *what,
                    MPI_Status *status = MPI_STATUS_IGNORE) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto deadline = start + std::chrono::duration<double>(timeoutSeconds());
  int done = 0;
  for (unsigned spins = 0;; ++spins) {
    int rc = MPI_Test(&request, &done, status);
    if (rc != MPI_SUCCESS)
      return mpiError(what, rc);
    if (done)
      return 0;
    if (spins > 1000) {
      if (clock::now() > deadline) {
        char msg[384];
        std::snprintf(msg, sizeof msg,
                      "%s%s did not complete within %.0f s (a peer rank died "
                      "or hangs; set DISTOPT_COMM_TIMEOUT to wait longer)",
                      contextPrefix().c_str(), what, timeoutSeconds());
        dort_comm_abort(3, msg);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

int finish(MPI_Request request, int rc, const char *what) {
  if (rc != MPI_SUCCESS)
    return mpiError(what, rc);
  return waitWithTimeout(request, what);
}

int start(dort_request **out, MPI_Request request, int rc, const char *what,
          std::vector<char> scratch = {}) {
  if (rc != MPI_SUCCESS)
    return mpiError(what, rc);
  if (!out)
    return dort_set_error(1, "%s: null request pointer", what);
  auto *r = new dort_request;
  r->request = request;
  r->what = what;
  r->scratch = std::move(scratch);
  *out = r;
  return 0;
}

int commSize(dort_comm *c) {
  int n = 0;
  MPI_Comm_size(c->comm, &n);
  return n;
}
int commRank(dort_comm *c) {
  int r = 0;
  MPI_Comm_rank(c->comm, &r);
  return r;
}

/// MPI requires send and receive buffers of a collective not to overlap
/// except through MPI_IN_PLACE; NCCL allows sendbuf == recvbuf.
const void *sendOrInPlace(const void *send, const void *recv) {
  return send == recv ? MPI_IN_PLACE : send;
}

// The collective starters, shared by the blocking and non-blocking calls.

int startAllReduce(const void *s, void *r, int64_t count, dort_dtype d,
                   dort_redop op, dort_comm *c, MPI_Request &req) {
  MPI_Op mop;
  if (!mpiOp(d, op, mop))
    return dort_set_error(1, "dort_all_reduce: unknown reduction %d", op);
  int rc = MPI_Iallreduce(sendOrInPlace(s, r), r, static_cast<int>(count),
                          mpiType(d), mop, c->comm, &req);
  return rc == MPI_SUCCESS ? 0 : mpiError("dort_all_reduce", rc);
}

int startAllGather(const void *s, void *r, int64_t count, dort_dtype d,
                   dort_comm *c, MPI_Request &req) {
  const void *send = s;
  int64_t bytes = count * dort_dtype_size(d);
  if (static_cast<const char *>(s) ==
      static_cast<char *>(r) + commRank(c) * bytes)
    send = MPI_IN_PLACE;
  int rc = MPI_Iallgather(send, static_cast<int>(count), mpiType(d), r,
                          static_cast<int>(count), mpiType(d), c->comm, &req);
  return rc == MPI_SUCCESS ? 0 : mpiError("dort_all_gather", rc);
}

int startReduceScatter(const void *s, void *r, int64_t count, dort_dtype d,
                       dort_redop op, dort_comm *c, MPI_Request &req,
                       std::vector<char> &scratch) {
  MPI_Op mop;
  if (!mpiOp(d, op, mop))
    return dort_set_error(1, "dort_reduce_scatter: unknown reduction %d", op);
  int64_t total = count * commSize(c) * dort_dtype_size(d);
  const char *sb = static_cast<const char *>(s);
  const char *rb = static_cast<const char *>(r);
  int64_t recvBytes = count * dort_dtype_size(d);
  if (rb < sb + total && sb < rb + recvBytes) {
    scratch.assign(sb, sb + total); // overlapping: reduce from a copy
    s = scratch.data();
  }
  int rc = MPI_Ireduce_scatter_block(s, r, static_cast<int>(count),
                                     mpiType(d), mop, c->comm, &req);
  return rc == MPI_SUCCESS ? 0 : mpiError("dort_reduce_scatter", rc);
}

} // namespace

extern "C" {

int dort_dtype_size(dort_dtype d) {
  switch (d) {
  case DORT_F32:
  case DORT_I32:
    return 4;
  case DORT_F64:
  case DORT_I64:
    return 8;
  case DORT_F16:
  case DORT_BF16:
    return 2;
  case DORT_I8:
  case DORT_U8:
    return 1;
  }
  return 0;
}

static MPI_Comm localOf(const dort_comm *c) {
  auto *m = const_cast<dort_comm *>(c);
  if (m->local == MPI_COMM_NULL)
    MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                        &m->local);
  return m->local;
}

int dort_comm_init(int *argc, char ***argv) {
  if (gInitialized)
    return 0;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    // MPI_THREAD_MULTIPLE lets the communication thread run the
    // asynchronous collectives (dort_shard_start_*) while the main thread
    // computes; with less, they run at their start.
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return dort_set_error(1, "dort_comm_init: MPI_Init_thread failed");
    gWeInitializedMPI = true;
  }
  {
    int level = 0;
    MPI_Query_thread(&level);
    gThreadMultiple = level >= MPI_THREAD_MULTIPLE;
  }
  // Errors come back as codes (reported with the call's name) instead of
  // MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  gWorld.comm = MPI_COMM_WORLD;
  gWorld.owned = false;
  createHalfOps();
  gInitialized = true;
  // The node-local communicator is made now, while every rank is here:
  // made lazily it would be a collective inside whatever first asks for
  // the local rank (a pipeline stage's first run, while its neighbour
  // waits in a receive: a deadlock).
  localOf(&gWorld);
  return 0;
}

int dort_comm_initialized(void) { return gInitialized ? 1 : 0; }

int dort_comm_thread_multiple(void) { return gThreadMultiple ? 1 : 0; }

void dort_set_context(const char *context) {
  std::lock_guard<std::mutex> lock(gContextMutex);
  gContext = context ? context : "";
}

int dort_comm_finalize(void) {
  if (!gInitialized)
    return 0;
  if (gWorld.local != MPI_COMM_NULL)
    MPI_Comm_free(&gWorld.local);
  for (auto &row : gHalfOps)
    for (MPI_Op &op : row)
      MPI_Op_free(&op);
  gInitialized = false;
  if (gWeInitializedMPI)
    MPI_Finalize();
  return 0;
}

void dort_comm_abort(int code, const char *message) {
  int rank = worldRank();
  if (rank >= 0)
    std::fprintf(stderr, "rank %d: %s\n", rank, message);
  else
    std::fprintf(stderr, "%s\n", message);
  std::fflush(stderr);
  if (gInitialized)
    MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
  std::_Exit(code == 0 ? 1 : code);
}

dort_comm *dort_comm_world(void) { return gInitialized ? &gWorld : nullptr; }

int dort_comm_rank(const dort_comm *c) {
  if (!c || c->comm == MPI_COMM_NULL)
    return -1;
  int r = 0;
  MPI_Comm_rank(c->comm, &r);
  return r;
}

int dort_comm_size(const dort_comm *c) {
  if (!c || c->comm == MPI_COMM_NULL)
    return 0;
  int n = 0;
  MPI_Comm_size(c->comm, &n);
  return n;
}


int dort_comm_local_rank(const dort_comm *c) {
  if (!c || c->comm == MPI_COMM_NULL)
    return -1;
  int r = 0;
  MPI_Comm_rank(localOf(c), &r);
  return r;
}

int dort_comm_local_size(const dort_comm *c) {
  if (!c || c->comm == MPI_COMM_NULL)
    return 0;
  int n = 0;
  MPI_Comm_size(localOf(c), &n);
  return n;
}

int dort_comm_split(dort_comm *parent, int color, int key, dort_comm **out) {
  if (int rc = check("dort_comm_split", parent, 0, DORT_F32, nullptr))
    return rc;
  if (!out)
    return dort_set_error(1, "dort_comm_split: null output");
  MPI_Comm comm;
  int rc = MPI_Comm_split(parent->comm, color, key, &comm);
  if (rc != MPI_SUCCESS)
    return mpiError("dort_comm_split", rc);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  *out = new dort_comm;
  (*out)->comm = comm;
  return 0;
}

int dort_comm_grid_axis(dort_comm *parent, int ndims, const int64_t *shape,
                        int axis, dort_comm **out) {
  if (int rc = check("dort_comm_grid_axis", parent, 0, DORT_F32, nullptr))
    return rc;
  if (ndims < 1 || !shape || axis < 0 || axis >= ndims)
    return dort_set_error(1, "dort_comm_grid_axis: axis %d of a %d-d grid",
                          axis, ndims);
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    if (shape[d] < 1)
      return dort_set_error(1, "dort_comm_grid_axis: grid dimension %d is %lld",
                            d, static_cast<long long>(shape[d]));
    total *= shape[d];
  }
  int size = commSize(parent), rank = commRank(parent);
  if (total != size)
    return dort_set_error(1,
                          "dort_comm_grid_axis: the grid has %lld ranks, the "
                          "communicator %d",
                          static_cast<long long>(total), size);
  // Row-major coordinates; color = the rank with this axis' coordinate 0.
  std::vector<int64_t> coord(ndims);
  int64_t rest = rank;
  for (int d = ndims - 1; d >= 0; --d) {
    coord[d] = rest % shape[d];
    rest /= shape[d];
  }
  int64_t stride = 1;
  for (int d = ndims - 1; d > axis; --d)
    stride *= shape[d];
  int color = static_cast<int>(rank - coord[axis] * stride);
  return dort_comm_split(parent, color, static_cast<int>(coord[axis]), out);
}

int dort_comm_free(dort_comm *c) {
  if (!c || c == &gWorld)
    return 0;
  if (c->local != MPI_COMM_NULL)
    MPI_Comm_free(&c->local);
  if (c->owned && c->comm != MPI_COMM_NULL)
    MPI_Comm_free(&c->comm);
  delete c;
  return 0;
}

int dort_all_reduce(const void *s, void *r, int64_t count, dort_dtype d,
                    dort_redop op, dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_all_reduce", c, count, d, stream))
    return rc;
  MPI_Request req;
  if (int rc = startAllReduce(s, r, count, d, op, c, req))
    return rc;
  return waitWithTimeout(req, "dort_all_reduce");
}

int dort_all_gather(const void *s, void *r, int64_t count, dort_dtype d,
                    dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_all_gather", c, count, d, stream))
    return rc;
  MPI_Request req;
  if (int rc = startAllGather(s, r, count, d, c, req))
    return rc;
  return waitWithTimeout(req, "dort_all_gather");
}

int dort_reduce_scatter(const void *s, void *r, int64_t count, dort_dtype d,
                        dort_redop op, dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_reduce_scatter", c, count, d, stream))
    return rc;
  MPI_Request req;
  std::vector<char> scratch;
  if (int rc = startReduceScatter(s, r, count, d, op, c, req, scratch))
    return rc;
  return waitWithTimeout(req, "dort_reduce_scatter");
}

int dort_all_to_all(const void *s, void *r, int64_t count, dort_dtype d,
                    dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_all_to_all", c, count, d, stream))
    return rc;
  std::vector<char> copy;
  if (s == r) {
    int64_t bytes = count * commSize(c) * dort_dtype_size(d);
    copy.assign(static_cast<const char *>(s),
                static_cast<const char *>(s) + bytes);
    s = copy.data();
  }
  MPI_Request req;
  int rc = MPI_Ialltoall(s, static_cast<int>(count), mpiType(d), r,
                         static_cast<int>(count), mpiType(d), c->comm, &req);
  return finish(req, rc, "dort_all_to_all");
}

int dort_broadcast(const void *s, void *r, int64_t count, dort_dtype d,
                   int root, dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_broadcast", c, count, d, stream))
    return rc;
  if (root < 0 || root >= commSize(c))
    return dort_set_error(1, "dort_broadcast: root %d of %d ranks", root,
                          commSize(c));
  if (commRank(c) == root && s != r)
    std::memmove(r, s, count * dort_dtype_size(d));
  MPI_Request req;
  int rc = MPI_Ibcast(r, static_cast<int>(count), mpiType(d), root, c->comm,
                      &req);
  return finish(req, rc, "dort_broadcast");
}

int dort_send(const void *s, int64_t count, dort_dtype d, int peer,
              dort_comm *c, dort_stream stream) {
  if (int rc = check("dort_send", c, count, d, stream))
    return rc;
  if (peer < 0 || peer >= commSize(c))
    return dort_set_error(1, "dort_send: peer %d of %d ranks", peer,
                          commSize(c));
  MPI_Request req;
  int rc = MPI_Isend(s, static_cast<int>(count), mpiType(d), peer, 0, c->comm,
                     &req);
  return finish(req, rc, "dort_send");
}

int dort_recv(void *r, int64_t count, dort_dtype d, int peer, dort_comm *c,
              dort_stream stream) {
  if (int rc = check("dort_recv", c, count, d, stream))
    return rc;
  if (peer < 0 || peer >= commSize(c))
    return dort_set_error(1, "dort_recv: peer %d of %d ranks", peer,
                          commSize(c));
  MPI_Request req;
  int rc = MPI_Irecv(r, static_cast<int>(count), mpiType(d), peer, 0, c->comm,
                     &req);
  return finish(req, rc, "dort_recv");
}

int dort_gather(const void *s, void *r, int64_t count, dort_dtype d, int root,
                dort_comm *c) {
  if (int rc = check("dort_gather", c, count, d, nullptr))
    return rc;
  if (root < 0 || root >= commSize(c))
    return dort_set_error(1, "dort_gather: root %d of %d ranks", root,
                          commSize(c));
  MPI_Request req;
  int rc = MPI_Igather(s, static_cast<int>(count), mpiType(d), r,
                       static_cast<int>(count), mpiType(d), root, c->comm,
                       &req);
  return finish(req, rc, "dort_gather");
}

int dort_barrier(dort_comm *c) {
  if (int rc = check("dort_barrier", c, 0, DORT_F32, nullptr))
    return rc;
  MPI_Request req;
  int rc = MPI_Ibarrier(c->comm, &req);
  return finish(req, rc, "dort_barrier");
}

int dort_iall_reduce(const void *s, void *r, int64_t count, dort_dtype d,
                     dort_redop op, dort_comm *c, dort_request **out) {
  if (int rc = check("dort_iall_reduce", c, count, d, nullptr))
    return rc;
  MPI_Request req;
  if (int rc = startAllReduce(s, r, count, d, op, c, req))
    return rc;
  return start(out, req, MPI_SUCCESS, "dort_iall_reduce");
}

int dort_iall_gather(const void *s, void *r, int64_t count, dort_dtype d,
                     dort_comm *c, dort_request **out) {
  if (int rc = check("dort_iall_gather", c, count, d, nullptr))
    return rc;
  MPI_Request req;
  if (int rc = startAllGather(s, r, count, d, c, req))
    return rc;
  return start(out, req, MPI_SUCCESS, "dort_iall_gather");
}

int dort_ireduce_scatter(const void *s, void *r, int64_t count, dort_dtype d,
                         dort_redop op, dort_comm *c, dort_request **out) {
  if (int rc = check("dort_ireduce_scatter", c, count, d, nullptr))
    return rc;
  MPI_Request req;
  std::vector<char> scratch;
  if (int rc = startReduceScatter(s, r, count, d, op, c, req, scratch))
    return rc;
  return start(out, req, MPI_SUCCESS, "dort_ireduce_scatter",
               std::move(scratch));
}

int dort_isend(const void *s, int64_t count, dort_dtype d, int peer,
               dort_comm *c, dort_request **out) {
  if (int rc = check("dort_isend", c, count, d, nullptr))
    return rc;
  if (peer < 0 || peer >= commSize(c))
    return dort_set_error(1, "dort_isend: peer %d of %d ranks", peer,
                          commSize(c));
  MPI_Request req;
  int rc = MPI_Isend(s, static_cast<int>(count), mpiType(d), peer, 0, c->comm,
                     &req);
  return start(out, req, rc, "dort_isend");
}

int dort_irecv(void *r, int64_t count, dort_dtype d, int peer, dort_comm *c,
               dort_request **out) {
  if (int rc = check("dort_irecv", c, count, d, nullptr))
    return rc;
  if (peer < 0 || peer >= commSize(c))
    return dort_set_error(1, "dort_irecv: peer %d of %d ranks", peer,
                          commSize(c));
  MPI_Request req;
  int rc = MPI_Irecv(r, static_cast<int>(count), mpiType(d), peer, 0, c->comm,
                     &req);
  return start(out, req, rc, "dort_irecv");
}

int dort_recv_any(void *r, int64_t count, dort_dtype d, dort_comm *c,
                  int *source) {
  if (int rc = check("dort_recv_any", c, count, d, nullptr))
    return rc;
  MPI_Request req;
  int rc = MPI_Irecv(r, static_cast<int>(count), mpiType(d), MPI_ANY_SOURCE, 0,
                     c->comm, &req);
  if (rc != MPI_SUCCESS)
    return mpiError("dort_recv_any", rc);
  MPI_Status status;
  if (int wrc = waitWithTimeout(req, "dort_recv_any", &status))
    return wrc;
  if (source)
    *source = status.MPI_SOURCE;
  return 0;
}

int dort_iprobe(int peer, dort_comm *c, int *ready) {
  if (int rc = check("dort_iprobe", c, 0, DORT_U8, nullptr))
    return rc;
  if (!ready)
    return dort_set_error(1, "dort_iprobe: null output");
  int flag = 0;
  int rc = MPI_Iprobe(peer, 0, c->comm, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    return mpiError("dort_iprobe", rc);
  *ready = flag;
  return 0;
}

int dort_wait(dort_request *r) {
  if (!r)
    return dort_set_error(1, "dort_wait: null request");
  std::unique_ptr<dort_request> owned(r);
  return waitWithTimeout(r->request, r->what.c_str());
}

int dort_test(dort_request *r, int *done) {
  if (!r || !done)
    return dort_set_error(1, "dort_test: null argument");
  int flag = 0;
  int rc = MPI_Test(&r->request, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    return mpiError(r->what.c_str(), rc);
  *done = flag;
  if (flag)
    delete r;
  return 0;
}

} // extern "C"

extern "C" double dort_comm_timeout_seconds(void) { return timeoutSeconds(); }
