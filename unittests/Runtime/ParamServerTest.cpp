//===- ParamServerTest.cpp - the rules of parameter servers ---------------===//
//
// Staleness accounting, the dropping rule, the warm-up switch, bounded
// staleness, backup workers' choice, the straggler flag
// (distopt/Runtime/ParamServer.h) and the servers' placement of the weights
// (distopt/Runtime/ServerPlacement.h).
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/ParamServer.h"
#include "distopt/Runtime/ServerPlacement.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ps = distopt::runtime::ps;
namespace placement = distopt::ps;

TEST(ParamServer, StalenessIsUpdatesSinceThePull) {
  ps::AsyncOptions o;
  EXPECT_EQ(ps::decide(o, 7, 7).staleness, 0);
  EXPECT_EQ(ps::decide(o, 7, 4).staleness, 3);
  EXPECT_TRUE(ps::decide(o, 100, 0).apply); // no bound: every gradient
  EXPECT_EQ(ps::decide(o, 9, 4).lrScale, 1.0);
}

TEST(ParamServer, DropStaleKeepsGradientsUpToTheBound) {
  ps::AsyncOptions o;
  o.dropStale = 2;
  EXPECT_TRUE(ps::decide(o, 5, 3).apply);  // 2: kept
  EXPECT_FALSE(ps::decide(o, 5, 2).apply); // 3: dropped
  o.dropStale = 0;
  EXPECT_TRUE(ps::decide(o, 5, 5).apply);
  EXPECT_FALSE(ps::decide(o, 6, 5).apply);
}

TEST(ParamServer, StaleLearningRateDividesByTheStaleness) {
  ps::AsyncOptions o;
  o.staleLr = true;
  EXPECT_EQ(ps::decide(o, 5, 5).lrScale, 1.0);
  EXPECT_EQ(ps::decide(o, 6, 5).lrScale, 1.0);
  EXPECT_DOUBLE_EQ(ps::decide(o, 9, 5).lrScale, 0.25);
}

TEST(ParamServer, WarmupSwitchesAfterItsSteps) {
  ps::AsyncOptions o;
  EXPECT_FALSE(ps::inWarmup(o, 0));
  o.syncWarmup = 3;
  EXPECT_TRUE(ps::inWarmup(o, 0));
  EXPECT_TRUE(ps::inWarmup(o, 2));
  EXPECT_FALSE(ps::inWarmup(o, 3));
}

TEST(ParamServer, BoundedStalenessHoldsTheFastest) {
  ps::AsyncOptions o;
  EXPECT_TRUE(ps::mayProceed(o, 50, {1, 2, 50})); // unbounded
  o.maxStaleness = 2;
  EXPECT_TRUE(ps::mayProceed(o, 5, {3, 4, 5}));
  EXPECT_FALSE(ps::mayProceed(o, 6, {3, 4, 6}));
  EXPECT_TRUE(ps::mayProceed(o, 6, {})); // nobody left to wait for
}

TEST(ParamServer, BackupsTakeTheFirstToArrive) {
  EXPECT_EQ(ps::firstToArrive({2, 0, 3, 1}, 2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(ps::firstToArrive({3, 3, 1, 0}, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ps::firstToArrive({1}, 2), (std::vector<int64_t>{1}));
}

TEST(ParamServer, HistogramCountsEveryGradient) {
  ps::StalenessHistogram h;
  for (int64_t s : {0, 2, 2, 5})
    h.add(s);
  EXPECT_EQ(h.total, 4);
  EXPECT_EQ(h.max, 5);
  EXPECT_DOUBLE_EQ(h.mean(), 9.0 / 4);
  EXPECT_EQ(h.json(), "{\"0\": 1, \"2\": 2, \"5\": 1}");
}

TEST(ParamServer, StragglerFlag) {
  std::vector<ps::Straggler> s;
  std::string error;
  ASSERT_TRUE(ps::parseStragglers("3:0.5,1:2:random", s, error)) << error;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rank, 3);
  EXPECT_DOUBLE_EQ(s[0].seconds, 0.5);
  EXPECT_FALSE(s[0].random);
  EXPECT_TRUE(s[1].random);
  for (const char *bad : {"3", "x:1", "1:-2", "1:2:later", "1:"})
    EXPECT_FALSE(ps::parseStragglers(bad, s, error)) << bad;
  EXPECT_NE(error.find("DISTOPT_STRAGGLER"), std::string::npos);
}

namespace {
/// Every element of every tensor is on exactly one server, pieces do not
/// overlap in a shard, and the loads add up.
void expectCovers(const placement::Placement &p, const std::vector<int64_t> &sizes) {
  std::vector<std::vector<int>> seen;
  for (int64_t n : sizes)
    seen.emplace_back(n, 0);
  std::vector<std::vector<int>> shard(p.servers);
  for (int64_t s = 0; s < p.servers; ++s)
    shard[s].assign(p.load[s], 0);
  for (const placement::Piece &piece : p.pieces) {
    for (int64_t i = 0; i < piece.length; ++i) {
      ++seen[piece.tensor][piece.offset + i];
      ++shard[piece.server][piece.shardOffset + i];
    }
  }
  for (auto &t : seen)
    for (int c : t)
      EXPECT_EQ(c, 1);
  for (auto &s : shard)
    for (int c : s)
      EXPECT_EQ(c, 1);
}
} // namespace

TEST(ServerPlacement, BalancesAndSplitsLargeTensors) {
  // An embedding of 1000 and small layers: the embedding is split over the
  // three servers, the rest placed whole, largest first.
  std::vector<int64_t> sizes{1000, 40, 30, 20, 10, 5};
  placement::Placement p = placement::placeOnServers(sizes, 3);
  expectCovers(p, sizes);
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  EXPECT_EQ(std::accumulate(p.load.begin(), p.load.end(), int64_t(0)), total);
  int64_t pieces0 = 0;
  for (const placement::Piece &piece : p.pieces)
    pieces0 += piece.tensor == 0;
  EXPECT_EQ(pieces0, 3);
  // Within a quarter of a fair share of each other.
  int64_t most = *std::max_element(p.load.begin(), p.load.end()),
          least = *std::min_element(p.load.begin(), p.load.end());
  EXPECT_LE(most - least, total / 3 / 4 + 1);
  EXPECT_EQ(p.shardLength(), most);
}

TEST(ServerPlacement, SmallTensorsStayWholeAndOneServerTakesAll) {
  // Sixteen tensors of 4, each under a quarter of a server's share (32):
  // placed whole, 8 on each server.
  std::vector<int64_t> sizes(16, 4);
  placement::Placement two = placement::placeOnServers(sizes, 2);
  expectCovers(two, sizes);
  for (const placement::Piece &piece : two.pieces)
    EXPECT_EQ(piece.length, sizes[piece.tensor]); // none split
  EXPECT_EQ(two.load, (std::vector<int64_t>{32, 32}));
  // {8, 7, 6, 5} over 2: each is over a quarter of the share (13), so each
  // is split in halves.
  std::vector<int64_t> big{8, 7, 6, 5};
  placement::Placement halves = placement::placeOnServers(big, 2);
  expectCovers(halves, big);
  EXPECT_EQ(halves.pieces.size(), 8u);
  EXPECT_EQ(halves.load, (std::vector<int64_t>{14, 12}));
  placement::Placement one = placement::placeOnServers(big, 1);
  expectCovers(one, big);
  EXPECT_EQ(one.shardLength(), 26);
}
