/*===- Comm.h - distopt runtime collectives (C ABI) -----------------*- C -*-===
 *
 * One collective interface for generated code and launchers. The call shapes
 * follow NCCL's (send buffer, receive buffer, element count, dtype, op,
 * communicator, stream) so a NCCL implementation slots in behind the same
 * names; `stream` is an opaque handle (NULL for CPU buffers, a cudaStream_t
 * for NCCL) and NCCL communicators will bootstrap through the MPI world.
 * This implementation is MPI (OpenMPI) on CPU buffers.
 *
 * Errors: every call returns 0 or a non-zero status after dort_set_error
 * (Runtime.h). A collective that does not complete within the timeout
 * (DISTOPT_COMM_TIMEOUT seconds, default 300; a peer died or hangs) aborts
 * the whole job with a message naming this rank and the collective, so no
 * rank waits forever.
 *
 *===----------------------------------------------------------------------===*/

#ifndef DISTOPT_RUNTIME_COMM_H
#define DISTOPT_RUNTIME_COMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dort_comm dort_comm;
typedef struct dort_request dort_request;
typedef void *dort_stream;

typedef enum {
  DORT_F32 = 0,
  DORT_F64 = 1,
  DORT_F16 = 2,
  DORT_BF16 = 3,
  DORT_I32 = 4,
  DORT_I64 = 5,
  DORT_I8 = 6,
  DORT_U8 = 7,
} dort_dtype;

typedef enum { DORT_SUM = 0, DORT_MAX = 1, DORT_MIN = 2, DORT_PROD = 3 } dort_redop;

/* Bytes of one element. */
int dort_dtype_size(dort_dtype dtype);

/* Starts the communication layer (MPI_Init_thread, thread level FUNNELED);
 * idempotent. Launched without mpirun it runs as a world of one. */
int dort_comm_init(int *argc, char ***argv);
/* Whether dort_comm_init ran (and dort_comm_finalize did not). */
int dort_comm_initialized(void);
/* Frees communicators and finalizes MPI; idempotent. */
int dort_comm_finalize(void);
/* Ends every rank of the job: prints "rank R: MESSAGE" and aborts. */
void dort_comm_abort(int code, const char *message);

/* The bound on waiting for peers, in seconds (DISTOPT_COMM_TIMEOUT, default
 * 300): what the MPI collectives wait, and what the CUDA runtime waits for
 * NCCL's work before aborting its communicators. */
double dort_comm_timeout_seconds(void);

/* The world communicator (valid after dort_comm_init). */
dort_comm *dort_comm_world(void);
int dort_comm_rank(const dort_comm *comm);
int dort_comm_size(const dort_comm *comm);
/* Rank among the processes of this node, and their count. For the world
 * communicator these are known from dort_comm_init on (not collective);
 * for others the first call is collective over `comm`. */
int dort_comm_local_rank(const dort_comm *comm);
int dort_comm_local_size(const dort_comm *comm);

/* Ranks with the same `color` form a communicator, ordered by `key`.
 * Collective over `parent`. */
/* What this rank is doing ("step 12"), named in failure messages (a
 * collective that times out); NULL or "" clears it. */
void dort_set_context(const char *context);
/* Whether MPI runs with MPI_THREAD_MULTIPLE (several threads may call it). */
int dort_comm_thread_multiple(void);
int dort_comm_split(dort_comm *parent, int color, int key, dort_comm **out);
/* For ranks laid out row-major on a grid of `ndims` dimensions (the product
 * of `shape` must equal the size of `parent`), the communicator of the
 * ranks that differ from this one only along dimension `axis`: the DP, TP
 * or PP group of a plan's grid. Collective over `parent`. */
int dort_comm_grid_axis(dort_comm *parent, int ndims, const int64_t *shape,
                        int axis, dort_comm **out);
int dort_comm_free(dort_comm *comm);

/* Collectives (blocking). Counts are elements. */
int dort_all_reduce(const void *sendbuf, void *recvbuf, int64_t count,
                    dort_dtype dtype, dort_redop op, dort_comm *comm,
                    dort_stream stream);
/* Every rank contributes `sendcount` elements; recvbuf holds size·sendcount
 * in rank order. */
int dort_all_gather(const void *sendbuf, void *recvbuf, int64_t sendcount,
                    dort_dtype dtype, dort_comm *comm, dort_stream stream);
/* sendbuf holds size·recvcount elements; rank r keeps the reduction of
 * block r. */
int dort_reduce_scatter(const void *sendbuf, void *recvbuf, int64_t recvcount,
                        dort_dtype dtype, dort_redop op, dort_comm *comm,
                        dort_stream stream);
/* Block r of sendbuf (`count` elements) goes to rank r; block r of recvbuf
 * comes from rank r. */
int dort_all_to_all(const void *sendbuf, void *recvbuf, int64_t count,
                    dort_dtype dtype, dort_comm *comm, dort_stream stream);
int dort_broadcast(const void *sendbuf, void *recvbuf, int64_t count,
                   dort_dtype dtype, int root, dort_comm *comm,
                   dort_stream stream);
int dort_send(const void *sendbuf, int64_t count, dort_dtype dtype, int peer,
              dort_comm *comm, dort_stream stream);
int dort_recv(void *recvbuf, int64_t count, dort_dtype dtype, int peer,
              dort_comm *comm, dort_stream stream);
int dort_barrier(dort_comm *comm);
/* Rank `root` receives every rank's `count` elements in rank order (not in
 * NCCL; the MPI backend uses it to collect outputs). */
int dort_gather(const void *sendbuf, void *recvbuf, int64_t count,
                dort_dtype dtype, int root, dort_comm *comm);

/* Non-blocking variants: start, overlap compute, then dort_wait. */
int dort_iall_reduce(const void *sendbuf, void *recvbuf, int64_t count,
                     dort_dtype dtype, dort_redop op, dort_comm *comm,
                     dort_request **request);
int dort_iall_gather(const void *sendbuf, void *recvbuf, int64_t sendcount,
                     dort_dtype dtype, dort_comm *comm, dort_request **request);
int dort_ireduce_scatter(const void *sendbuf, void *recvbuf,
                         int64_t recvcount, dort_dtype dtype, dort_redop op,
                         dort_comm *comm, dort_request **request);
int dort_isend(const void *sendbuf, int64_t count, dort_dtype dtype, int peer,
               dort_comm *comm, dort_request **request);
int dort_irecv(void *recvbuf, int64_t count, dort_dtype dtype, int peer,
               dort_comm *comm, dort_request **request);
/* Receives one message of `count` elements from any rank of `comm` (with
 * the timeout above); *source is the sender. Parameter servers take
 * gradients in the order they arrive. */
int dort_recv_any(void *recvbuf, int64_t count, dort_dtype dtype,
                  dort_comm *comm, int *source);
/* Sets *ready to 1 when a message from `peer` is waiting to be received. */
int dort_iprobe(int peer, dort_comm *comm, int *ready);
/* Completes and frees the request (with the timeout above). */
int dort_wait(dort_request *request);
/* Sets *done to 1 (and frees the request) when it completed, else 0. */
int dort_test(dort_request *request, int *done);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RUNTIME_COMM_H */
