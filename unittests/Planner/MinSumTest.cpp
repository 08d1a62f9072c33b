//===- MinSumTest.cpp - variable elimination against brute force ---------===//

#include "distopt/Planner/MinSum.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

using namespace distopt::planner;

namespace {

double cost(const PairwiseProblem &p, const llvm::SmallVector<unsigned> &x) {
  double c = 0;
  for (unsigned v = 0; v < p.unary.size(); ++v)
    c += p.unary[v][x[v]];
  for (const PairwiseProblem::Pair &e : p.pairs)
    c += e.cost[x[e.u] * p.unary[e.v].size() + x[e.v]];
  return c;
}

double bruteForce(const PairwiseProblem &p) {
  unsigned n = p.unary.size();
  llvm::SmallVector<unsigned> x(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    best = std::min(best, cost(p, x));
    unsigned k = 0;
    while (k < n && ++x[k] == p.unary[k].size())
      x[k++] = 0;
    if (k == n)
      return best;
  }
}

PairwiseProblem randomProblem(std::mt19937 &rng, unsigned n, double density) {
  PairwiseProblem p;
  std::uniform_int_distribution<unsigned> domain(1, 4);
  std::uniform_real_distribution<double> value(0, 1);
  p.unary.resize(n);
  for (auto &u : p.unary) {
    u.resize(domain(rng));
    for (double &c : u)
      c = value(rng);
  }
  for (unsigned a = 0; a < n; ++a)
    for (unsigned b = 0; b < n; ++b) {
      // Some pairs twice (the same two ops joined by two tensors), in
      // either order.
      if (a == b || value(rng) > density / 2)
        continue;
      PairwiseProblem::Pair e{a, b, {}};
      e.cost.resize(p.unary[a].size() * p.unary[b].size());
      for (double &c : e.cost)
        c = value(rng);
      p.pairs.push_back(std::move(e));
    }
  return p;
}

} // namespace

TEST(MinSum, EliminationFindsTheBruteForceMinimum) {
  std::mt19937 rng(7);
  int solved = 0;
  for (int trial = 0; trial < 300; ++trial) {
    unsigned n = 1 + trial % 8;
    double density = (trial % 5 + 1) / 5.0; // trees .. dense graphs
    PairwiseProblem p = randomProblem(rng, n, density);
    double objective = -1;
    auto x = solveByElimination(p, 1e9, objective);
    ASSERT_TRUE(x.has_value());
    double want = bruteForce(p);
    EXPECT_NEAR(objective, want, 1e-12) << "trial " << trial;
    EXPECT_NEAR(cost(p, *x), want, 1e-12) << "trial " << trial;
    ++solved;
  }
  EXPECT_EQ(solved, 300);
}

TEST(MinSum, AResidualCycleIsSolvedWithSmallTables) {
  // A ring of 40 four-valued variables (what a residual block is): width 2,
  // about 40 * 4^3 table entries, where brute force would need 4^40.
  PairwiseProblem p;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> value(0, 1);
  p.unary.assign(40, std::vector<double>(4));
  for (auto &u : p.unary)
    for (double &c : u)
      c = value(rng);
  for (unsigned v = 0; v < 40; ++v) {
    PairwiseProblem::Pair e{v, (v + 1) % 40, std::vector<double>(16)};
    for (double &c : e.cost)
      c = value(rng);
    p.pairs.push_back(std::move(e));
  }
  double objective = 0;
  auto x = solveByElimination(p, 40 * 64, objective);
  ASSERT_TRUE(x.has_value());
  EXPECT_NEAR(cost(p, *x), objective, 1e-12);
  // Fixing variable 0 breaks the ring into a chain: the minimum over its
  // four values, each by a chain's dynamic program, must agree.
  double best = std::numeric_limits<double>::infinity();
  for (unsigned s0 = 0; s0 < 4; ++s0) {
    std::vector<double> m(4, std::numeric_limits<double>::infinity());
    m[s0] = p.unary[0][s0];
    for (unsigned v = 1; v < 40; ++v) {
      std::vector<double> next(4, std::numeric_limits<double>::infinity());
      for (unsigned a = 0; a < 4; ++a)
        for (unsigned b = 0; b < 4; ++b)
          next[b] = std::min(next[b], m[a] + p.pairs[v - 1].cost[a * 4 + b] +
                                          p.unary[v][b]);
      m = next;
    }
    for (unsigned b = 0; b < 4; ++b)
      best = std::min(best, m[b] + p.pairs[39].cost[b * 4 + s0]);
  }
  EXPECT_NEAR(objective, best, 1e-12);
}

TEST(MinSum, TooWideForTheLimitIsHandedBack) {
  // A complete graph on 12 four-valued variables: eliminating any variable
  // makes a table over the other eleven (4^12 entries).
  PairwiseProblem p;
  p.unary.assign(12, std::vector<double>(4, 1.0));
  for (unsigned a = 0; a < 12; ++a)
    for (unsigned b = a + 1; b < 12; ++b)
      p.pairs.push_back({a, b, std::vector<double>(16, 0.5)});
  double objective = 0;
  EXPECT_FALSE(solveByElimination(p, 1e6, objective).has_value());
  // Malformed input is handed back too, never read out of bounds.
  PairwiseProblem bad;
  bad.unary.assign(2, std::vector<double>(2, 0.0));
  bad.pairs.push_back({0, 1, std::vector<double>(3, 0.0)});
  EXPECT_FALSE(solveByElimination(bad, 1e9, objective).has_value());
}

TEST(MinSum, TiesGoToTheLowestValue) {
  PairwiseProblem p;
  p.unary = {{1, 1, 1}, {2, 2}};
  p.pairs.push_back({0, 1, std::vector<double>(6, 0.0)});
  double objective = 0;
  auto x = solveByElimination(p, 1e9, objective);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ((*x)[0], 0u);
  EXPECT_EQ((*x)[1], 0u);
  EXPECT_DOUBLE_EQ(objective, 3.0);
}
