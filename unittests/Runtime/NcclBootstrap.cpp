//===- NcclBootstrap.cpp - NCCL's unique id over MPI, without a GPU -------===//
//
// Run under mpirun (test/Integration/nccl-bootstrap.test): rank 0 makes
// NCCL's unique id, dort_nccl_unique_id broadcasts it, and every rank must
// hold the same bytes. This is the part of the NCCL bootstrap a machine
// without a GPU can check (ncclCommInitRank needs one).
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Runtime.h"

#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  if (dort_comm_init(&argc, &argv) != 0) {
    std::fprintf(stderr, "%s\n", dort_last_error_message());
    return 1;
  }
  dort_comm *world = dort_comm_world();
  int rank = dort_comm_rank(world), size = dort_comm_size(world);
  unsigned char id[128] = {0};
  if (dort_nccl_unique_id(world, id, sizeof id) != 0) {
    std::fprintf(stderr, "rank %d: %s\n", rank, dort_last_error_message());
    dort_comm_finalize();
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
  dort_comm_finalize();
  return status;
}
