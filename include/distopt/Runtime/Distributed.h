//===- Distributed.h - multi-rank bundles: grid, blocks, collectives -*- C++ -*-===//
//
// A multi-rank bundle runs one SPMD program per rank on a grid of devices
// (stages x data x tensor, row-major rank order). The runtime
//  * sets up one communicator per grid axis (dort_grid_init);
//  * cuts each rank's block out of whole inputs and weights and puts the
//    blocks of outputs back together (extractBlock / insertBlock), following
//    the tensor's split axes (and block parts for fused-QKV weights);
//  * implements the `shard` collectives the partitioner leaves in the
//    program (dort_shard_* below, called through MLIR's C interface on
//    strided memrefs), over the axis communicators of Comm.h.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RUNTIME_DISTRIBUTED_H
#define DISTOPT_RUNTIME_DISTRIBUTED_H

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Manifest.h"

#include <cstdint>
#include <vector>

namespace distopt::runtime {

/// Ranks this process was launched among (mpirun's environment), else 1.
int64_t launchedRanks();

/// Grid coordinates of `rank` (row-major).
std::vector<int64_t> gridCoords(const std::vector<int64_t> &grid,
                                int64_t rank);

/// Copies this rank's block of a whole tensor (row-major, `spec.fileShape()`)
/// into `local` (row-major, `spec.shape`). Where the block runs past the
/// end (an uneven split of the batch) it holds zeros, or the element at
/// `pad` (one element of the dtype).
void extractBlock(const void *global, void *local, const TensorSpec &spec,
                  const std::vector<int64_t> &grid,
                  const std::vector<int64_t> &coords,
                  const void *pad = nullptr);
/// The inverse: writes the block of the rank at `coords` into `global`.
void insertBlock(const void *local, void *global, const TensorSpec &spec,
                 const std::vector<int64_t> &grid,
                 const std::vector<int64_t> &coords);

} // namespace distopt::runtime

extern "C" {
/// Creates the communicator of every grid axis (collective over the world).
int dort_grid_init(int ndims, const int64_t *shape);
/// dort_grid_init over the ranks of `parent` (parameter servers: the
/// workers' grid over the workers, the servers' over the servers).
int dort_grid_init_on(dort_comm *parent, int ndims, const int64_t *shape);
void dort_grid_finalize(void);
/// The communicator of grid axis `axis` (NULL before dort_grid_init).
dort_comm *dort_grid_axis_comm(int axis);
/// This rank's coordinate on `axis`.
int64_t dort_grid_coord(int axis);
/// Waits for the asynchronous collective `handle`
/// (_mlir_ciface_dort_shard_start_all_reduce_*) and writes its result.
void dort_shard_wait(int64_t handle);
/// Completes every pipeline send still in flight
/// (_mlir_ciface_dort_shard_send_*); a no-op when there are none.
void dort_p2p_flush(void);
/// A pipelined step's timeline marks (distopt-pipeline-training): kind 0/1
/// starts/ends micro-batch `microbatch`'s forward, 2/3 its backward; the
/// span is recorded (name "F<m>" or "B<m>") when tracing is on.
void dort_trace_pipeline(int64_t kind, int64_t microbatch);
}

#endif // DISTOPT_RUNTIME_DISTRIBUTED_H
