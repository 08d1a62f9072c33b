//===- MinSum.h - exact minimum of a pairwise cost function -----*- C++ -*-===//
//
// The segment sharding problem of the intra-op planner (IntraOp.cpp) is a
// pairwise min-sum problem: pick one strategy per node minimising the sum of
// per-node costs and per-edge resharding costs. Variable elimination solves
// it exactly in time exponential only in the induced width of the graph
// (a chain or tree: 1; a residual block or attention's rejoining Q, K and V:
// 2 or 3), which is what the graphs of neural networks have.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_MINSUM_H
#define DISTOPT_PLANNER_MINSUM_H

#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

namespace distopt::planner {

struct PairwiseProblem {
  /// Per variable: the cost of each of its values (the domain's size is the
  /// vector's; every domain is non-empty).
  std::vector<std::vector<double>> unary;
  /// A cost over two distinct variables, indexed [a * |dom v| + b] for u = a,
  /// v = b. Several may join the same pair (they add).
  struct Pair {
    unsigned u, v;
    std::vector<double> cost;
  };
  std::vector<Pair> pairs;
};

/// The exact minimum by variable elimination (greedy min-weight order), or
/// std::nullopt when that order would need more than `workLimit` table
/// entries in all (the caller then uses a general solver). Ties go to the
/// lowest value. `objective` receives the minimum.
std::optional<llvm::SmallVector<unsigned>>
solveByElimination(const PairwiseProblem &problem, double workLimit,
                   double &objective);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_MINSUM_H
