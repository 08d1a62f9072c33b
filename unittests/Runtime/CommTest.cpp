//===- CommTest.cpp - collectives across ranks (run under mpirun) ---------===//
//
//   mpirun -np 4 distopt-comm-unittests            all tests, every rank
//   mpirun -np 2 distopt-comm-unittests --die-rank 1 --gtest_filter=Fail*
//       rank 1 kills itself (SIGKILL) while the others wait in a
//       collective: the job must end, naming the rank (failure injection).
//   DISTOPT_COMM_TIMEOUT=2 mpirun ... --hang-rank 1 --gtest_filter=Fail*
//       rank 1 never joins: the others' watchdog aborts the job.
//
// Every rank runs every test; rank 0 prints; the exit status is non-zero when
// any rank failed a test.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

int gDieRank = -1;
int gHangRank = -1;

dort_comm *world() { return dort_comm_world(); }
int rank() { return dort_comm_rank(world()); }
int size() { return dort_comm_size(world()); }

TEST(Comm, WorldRankSizeAndLocalRank) {
  ASSERT_NE(world(), nullptr);
  EXPECT_GE(size(), 2) << "run under mpirun with at least 2 ranks";
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), size());
  // One machine: every rank is local.
  EXPECT_EQ(dort_comm_local_size(world()), size());
  EXPECT_EQ(dort_comm_local_rank(world()), rank());
}

TEST(Comm, AllReduceEveryDTypeAndOp) {
  int r = rank(), n = size();
  std::vector<float> f(5), fout(5);
  for (int i = 0; i < 5; ++i)
    f[i] = static_cast<float>(r + i);
  ASSERT_EQ(dort_all_reduce(f.data(), fout.data(), 5, DORT_F32, DORT_SUM,
                            world(), nullptr),
            0)
      << dort_last_error_message();
  for (int i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(fout[i], n * (n - 1) / 2.0f + n * i);
  std::vector<int64_t> l{r * 10LL, -r * 1LL}, lout(2);
  ASSERT_EQ(dort_all_reduce(l.data(), lout.data(), 2, DORT_I64, DORT_MAX,
                            world(), nullptr),
            0);
  EXPECT_EQ(lout[0], (n - 1) * 10);
  EXPECT_EQ(lout[1], 0);
  // In place (NCCL allows sendbuf == recvbuf).
  std::vector<double> d{1.5, static_cast<double>(r)};
  ASSERT_EQ(dort_all_reduce(d.data(), d.data(), 2, DORT_F64, DORT_MIN,
                            world(), nullptr),
            0);
  EXPECT_DOUBLE_EQ(d[0], 1.5);
  EXPECT_DOUBLE_EQ(d[1], 0);
  // 16-bit floats reduce through float: 1.0 (0x3c00) + ... in f16; bf16 1.0
  // is 0x3f80.
  std::vector<uint16_t> h{0x3c00, 0x4000}, hout(2); // 1.0, 2.0
  ASSERT_EQ(dort_all_reduce(h.data(), hout.data(), 2, DORT_F16, DORT_SUM,
                            world(), nullptr),
            0);
  uint16_t expect1 = n == 2 ? 0x4000 : n == 4 ? 0x4400 : 0; // 2.0, 4.0
  if (expect1)
    EXPECT_EQ(hout[0], expect1);
  std::vector<uint16_t> b{0x3f80}, bout(1);
  ASSERT_EQ(dort_all_reduce(b.data(), bout.data(), 1, DORT_BF16, DORT_PROD,
                            world(), nullptr),
            0);
  EXPECT_EQ(bout[0], 0x3f80); // 1^n
}

TEST(Comm, AllGatherReduceScatterAllToAll) {
  int r = rank(), n = size();
  std::vector<int32_t> mine{r, 100 + r}, all(2 * n);
  ASSERT_EQ(dort_all_gather(mine.data(), all.data(), 2, DORT_I32, world(),
                            nullptr),
            0);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all[2 * i], i);
    EXPECT_EQ(all[2 * i + 1], 100 + i);
  }
  // In place: this rank's block already sits in the output.
  std::vector<int32_t> inplace(n, -1);
  inplace[r] = r * r;
  ASSERT_EQ(dort_all_gather(inplace.data() + r, inplace.data(), 1, DORT_I32,
                            world(), nullptr),
            0);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(inplace[i], i * i);

  // Reduce-scatter: block i of every rank's input is (i + 1); rank r keeps
  // n·(r + 1) twice.
  std::vector<float> in(2 * n), out(2);
  for (int i = 0; i < n; ++i)
    in[2 * i] = in[2 * i + 1] = static_cast<float>(i + 1);
  ASSERT_EQ(dort_reduce_scatter(in.data(), out.data(), 2, DORT_F32, DORT_SUM,
                                world(), nullptr),
            0);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(n * (r + 1)));
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(n * (r + 1)));

  // All-to-all: block i goes to rank i.
  std::vector<int64_t> send(n), recv(n);
  for (int i = 0; i < n; ++i)
    send[i] = 1000 * r + i;
  ASSERT_EQ(dort_all_to_all(send.data(), recv.data(), 1, DORT_I64, world(),
                            nullptr),
            0);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(recv[i], 1000 * i + r);
}

TEST(Comm, BroadcastAndSendRecvRing) {
  int r = rank(), n = size();
  std::vector<uint8_t> buf(3, 0);
  std::vector<uint8_t> src{7, 8, 9};
  ASSERT_EQ(dort_broadcast(src.data(), buf.data(), 3, DORT_U8, n - 1, world(),
                           nullptr),
            0);
  EXPECT_EQ(buf, src);
  // A ring: even ranks send first, odd ranks receive first.
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  float out = static_cast<float>(r), in = -1;
  if (r % 2 == 0) {
    ASSERT_EQ(dort_send(&out, 1, DORT_F32, next, world(), nullptr), 0);
    ASSERT_EQ(dort_recv(&in, 1, DORT_F32, prev, world(), nullptr), 0);
  } else {
    ASSERT_EQ(dort_recv(&in, 1, DORT_F32, prev, world(), nullptr), 0);
    ASSERT_EQ(dort_send(&out, 1, DORT_F32, next, world(), nullptr), 0);
  }
  EXPECT_FLOAT_EQ(in, static_cast<float>(prev));
}

TEST(Comm, GridAxisCommunicators) {
  int n = size();
  if (n % 2 != 0)
    GTEST_SKIP() << "needs an even number of ranks";
  // Grid (n/2) x 2, row-major: axis 1 pairs {2k, 2k+1}, axis 0 the ranks
  // with the same parity.
  int64_t shape[2] = {n / 2, 2};
  dort_comm *axis0 = nullptr, *axis1 = nullptr;
  ASSERT_EQ(dort_comm_grid_axis(world(), 2, shape, 0, &axis0), 0)
      << dort_last_error_message();
  ASSERT_EQ(dort_comm_grid_axis(world(), 2, shape, 1, &axis1), 0);
  EXPECT_EQ(dort_comm_size(axis0), n / 2);
  EXPECT_EQ(dort_comm_size(axis1), 2);
  EXPECT_EQ(dort_comm_rank(axis1), rank() % 2);
  EXPECT_EQ(dort_comm_rank(axis0), rank() / 2);
  int me = rank();
  std::vector<int> members(n / 2);
  ASSERT_EQ(dort_all_gather(&me, members.data(), 1, DORT_I32, axis0, nullptr),
            0);
  for (int i = 0; i < n / 2; ++i)
    EXPECT_EQ(members[i], 2 * i + rank() % 2);
  dort_comm_free(axis0);
  dort_comm_free(axis1);
  // Wrong grids are errors, not hangs.
  int64_t bad[2] = {3, 3};
  dort_comm *none = nullptr;
  EXPECT_NE(dort_comm_grid_axis(world(), 2, bad, 0, &none), 0);
  EXPECT_NE(std::string(dort_last_error_message()).find("the grid has 9 ranks"),
            std::string::npos);
  EXPECT_NE(dort_comm_grid_axis(world(), 2, shape, 2, &none), 0);
}

TEST(Comm, NonBlockingOverlapsCompute) {
  int n = size();
  std::vector<float> x(1 << 16, 1.0f), y(1 << 16);
  dort_request *req = nullptr;
  ASSERT_EQ(dort_iall_reduce(x.data(), y.data(), x.size(), DORT_F32, DORT_SUM,
                             world(), &req),
            0);
  // Work while the reduction is in flight.
  double acc = 0;
  for (int i = 0; i < 100000; ++i)
    acc += i * 1e-9;
  EXPECT_GT(acc, 0);
  ASSERT_EQ(dort_wait(req), 0);
  EXPECT_FLOAT_EQ(y.front(), static_cast<float>(n));
  EXPECT_FLOAT_EQ(y.back(), static_cast<float>(n));

  int r = rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  int64_t out = r, in = -1;
  dort_request *s = nullptr, *rv = nullptr;
  ASSERT_EQ(dort_irecv(&in, 1, DORT_I64, prev, world(), &rv), 0);
  ASSERT_EQ(dort_isend(&out, 1, DORT_I64, next, world(), &s), 0);
  int done = 0;
  while (!done)
    ASSERT_EQ(dort_test(rv, &done), 0);
  ASSERT_EQ(dort_wait(s), 0);
  EXPECT_EQ(in, prev);

  std::vector<int32_t> blocks(2 * n, 1), mine(2);
  dort_request *rs = nullptr;
  ASSERT_EQ(dort_ireduce_scatter(blocks.data(), mine.data(), 2, DORT_I32,
                                 DORT_SUM, world(), &rs),
            0);
  ASSERT_EQ(dort_wait(rs), 0);
  EXPECT_EQ(mine[0], n);
  std::vector<int32_t> gathered(n);
  dort_request *ag = nullptr;
  ASSERT_EQ(dort_iall_gather(&r, gathered.data(), 1, DORT_I32, world(), &ag),
            0);
  ASSERT_EQ(dort_wait(ag), 0);
  EXPECT_EQ(gathered[n - 1], n - 1);
}

TEST(Comm, BadArgumentsAreErrors) {
  float x = 0;
  int dummy = 1;
  EXPECT_NE(dort_all_reduce(&x, &x, 1, DORT_F32, DORT_SUM, world(), &dummy), 0);
  EXPECT_NE(std::string(dort_last_error_message()).find("streams need NCCL"),
            std::string::npos);
  EXPECT_NE(dort_all_reduce(&x, &x, -1, DORT_F32, DORT_SUM, world(), nullptr),
            0);
  EXPECT_NE(dort_all_reduce(&x, &x, 1, static_cast<dort_dtype>(42), DORT_SUM,
                            world(), nullptr),
            0);
  EXPECT_NE(dort_all_reduce(&x, &x, 1, DORT_F32, static_cast<dort_redop>(9),
                            world(), nullptr),
            0);
  EXPECT_NE(dort_all_reduce(&x, &x, 1, DORT_F32, DORT_SUM, nullptr, nullptr),
            0);
  EXPECT_NE(dort_send(&x, 1, DORT_F32, size(), world(), nullptr), 0);
  EXPECT_NE(std::string(dort_last_error_message()).find("peer"),
            std::string::npos);
  EXPECT_NE(dort_broadcast(&x, &x, 1, DORT_F32, -1, world(), nullptr), 0);
  EXPECT_NE(dort_wait(nullptr), 0);
  EXPECT_NE(dort_all_gather(&x, &x, int64_t(1) << 33, DORT_F32, world(),
                            nullptr),
            0);
  EXPECT_NE(std::string(dort_last_error_message()).find("2^31-1"),
            std::string::npos);
}

// Failure injection (run separately with --die-rank R): rank R dies while
// the others wait in an all-reduce. Nobody may hang: mpirun ends the job and
// names the rank; with a short DISTOPT_COMM_TIMEOUT our own watchdog fires
// first where mpirun does not act.
TEST(FailureInjection, ARankDiesInACollective) {
  if (gDieRank < 0)
    GTEST_SKIP() << "only with --die-rank";
  dort_barrier(world());
  if (rank() == gDieRank) {
    std::fprintf(stderr, "rank %d: killing itself (test)\n", rank());
    std::fflush(stderr);
    raise(SIGKILL);
  }
  float x = 1, y = 0;
  dort_all_reduce(&x, &y, 1, DORT_F32, DORT_SUM, world(), nullptr);
  ADD_FAILURE() << "the all-reduce completed without rank " << gDieRank;
}

// A rank that hangs (never enters the collective) while the others wait:
// mpirun cannot tell, so the runtime's watchdog (DISTOPT_COMM_TIMEOUT) must
// end the job.
TEST(FailureInjection, ARankHangsOutsideACollective) {
  if (gHangRank < 0)
    GTEST_SKIP() << "only with --hang-rank";
  if (rank() == gHangRank) {
    for (;;)
      pause();
  }
  float x = 1, y = 0;
  dort_all_reduce(&x, &y, 1, DORT_F32, DORT_SUM, world(), nullptr);
  ADD_FAILURE() << "the all-reduce completed without rank " << gHangRank;
}

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--die-rank") == 0 && i + 1 < argc)
      gDieRank = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--hang-rank") == 0 && i + 1 < argc)
      gHangRank = std::atoi(argv[i + 1]);
  if (dort_comm_init(&argc, &argv) != 0) {
    std::fprintf(stderr, "%s\n", dort_last_error_message());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (dort_comm_rank(dort_comm_world()) != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, anyFailed = 0;
  dort_all_reduce(&failed, &anyFailed, 1, DORT_I32, DORT_MAX,
                  dort_comm_world(), nullptr);
  if (dort_comm_rank(dort_comm_world()) == 0 && anyFailed && !failed)
    std::fprintf(stderr, "a test failed on another rank\n");
  dort_comm_finalize();
  return anyFailed;
}
