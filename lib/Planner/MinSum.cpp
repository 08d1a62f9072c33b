//===- MinSum.cpp - exact minimum of a pairwise cost function -------------===//
//
// Variable elimination (bucket elimination) for min-sum: eliminating a
// variable replaces the costs that mention it by one table over its
// neighbours, the best of its values for each of their assignments; the
// argmins are kept to read the optimum back in reverse order. The order is
// chosen first, symbolically (fewest table entries, then fewest new edges),
// so a problem too wide for it is handed back before any table is built.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/MinSum.h"

#include "llvm/ADT/STLExtras.h"

#include <cstdint>
#include <limits>
#include <set>

using namespace distopt::planner;
using llvm::SmallVector;

namespace {
struct Factor {
  SmallVector<unsigned, 4> vars; ///< ascending
  std::vector<double> table;     ///< row-major over vars
  bool live = true;
};

struct Eliminated {
  SmallVector<unsigned, 4> scope; ///< ascending: its neighbours then
  std::vector<uint16_t> argmin;   ///< row-major over scope
};
} // namespace

std::optional<SmallVector<unsigned>>
distopt::planner::solveByElimination(const PairwiseProblem &problem,
                                     double workLimit, double &objective) {
  const unsigned n = problem.unary.size();
  auto dom = [&](unsigned v) { return problem.unary[v].size(); };
  for (unsigned v = 0; v < n; ++v)
    if (dom(v) == 0 || dom(v) > UINT16_MAX)
      return std::nullopt;

  // The order, on the interaction graph.
  std::vector<std::set<unsigned>> adj(n);
  for (const PairwiseProblem::Pair &p : problem.pairs) {
    if (p.u == p.v || p.u >= n || p.v >= n ||
        p.cost.size() != dom(p.u) * dom(p.v))
      return std::nullopt;
    adj[p.u].insert(p.v);
    adj[p.v].insert(p.u);
  }
  std::vector<bool> gone(n, false);
  std::vector<unsigned> order;
  std::vector<Eliminated> elim(n);
  double work = 0;
  for (unsigned step = 0; step < n; ++step) {
    unsigned best = n;
    double bestWeight = std::numeric_limits<double>::infinity();
    size_t bestFill = 0;
    for (unsigned v = 0; v < n; ++v) {
      if (gone[v])
        continue;
      double weight = static_cast<double>(dom(v));
      for (unsigned u : adj[v])
        weight *= static_cast<double>(dom(u));
      if (weight > bestWeight)
        continue;
      size_t fill = 0;
      for (auto i = adj[v].begin(); i != adj[v].end(); ++i)
        for (auto j = std::next(i); j != adj[v].end(); ++j)
          fill += !adj[*i].count(*j);
      if (weight < bestWeight || fill < bestFill) {
        best = v;
        bestWeight = weight;
        bestFill = fill;
      }
    }
    work += bestWeight;
    if (work > workLimit)
      return std::nullopt;
    gone[best] = true;
    order.push_back(best);
    elim[best].scope.assign(adj[best].begin(), adj[best].end());
    for (unsigned u : adj[best]) {
      adj[u].erase(best);
      for (unsigned w : adj[best])
        if (w != u)
          adj[u].insert(w);
    }
    adj[best].clear();
  }

  // The tables.
  std::vector<Factor> factors;
  std::vector<SmallVector<unsigned, 4>> mentions(n);
  auto addFactor = [&](Factor f) {
    for (unsigned v : f.vars)
      mentions[v].push_back(factors.size());
    factors.push_back(std::move(f));
  };
  for (const PairwiseProblem::Pair &p : problem.pairs) {
    Factor f;
    f.vars = {std::min(p.u, p.v), std::max(p.u, p.v)};
    if (p.u < p.v) {
      f.table = p.cost;
    } else {
      f.table.resize(p.cost.size());
      for (size_t a = 0; a < dom(p.u); ++a)
        for (size_t b = 0; b < dom(p.v); ++b)
          f.table[b * dom(p.u) + a] = p.cost[a * dom(p.v) + b];
    }
    addFactor(std::move(f));
  }
  double constant = 0;
  for (unsigned v : order) {
    Eliminated &e = elim[v];
    const SmallVector<unsigned, 4> &scope = e.scope;
    // For each cost mentioning v: its stride for v and, per scope
    // position, its stride for that variable (0 where it does not mention
    // it).
    struct Use {
      const std::vector<double> *table;
      size_t strideV = 0;
      SmallVector<size_t, 4> stride;
    };
    SmallVector<Use> uses;
    for (unsigned fi : mentions[v]) {
      Factor &f = factors[fi];
      if (!f.live)
        continue;
      f.live = false;
      Use use{&f.table, 0, SmallVector<size_t, 4>(scope.size(), 0)};
      size_t stride = 1;
      for (size_t k = f.vars.size(); k-- > 0;) {
        unsigned w = f.vars[k];
        if (w == v) {
          use.strideV = stride;
        } else {
          auto it = llvm::find(scope, w);
          if (it == scope.end())
            return std::nullopt; // cannot happen: the order saw every edge
          use.stride[it - scope.begin()] = stride;
        }
        stride *= dom(w);
      }
      uses.push_back(std::move(use));
    }
    size_t size = 1;
    for (unsigned u : scope)
      size *= dom(u);
    Factor out;
    out.vars = scope;
    out.table.assign(size, 0);
    e.argmin.assign(size, 0);
    SmallVector<size_t, 4> assignment(scope.size(), 0);
    SmallVector<size_t> base(uses.size(), 0);
    const std::vector<double> &own = problem.unary[v];
    for (size_t idx = 0; idx < size; ++idx) {
      double bestCost = std::numeric_limits<double>::infinity();
      uint16_t bestValue = 0;
      for (size_t s = 0; s < own.size(); ++s) {
        double c = own[s];
        for (auto [i, use] : llvm::enumerate(uses))
          c += (*use.table)[base[i] + s * use.strideV];
        if (c < bestCost) {
          bestCost = c;
          bestValue = static_cast<uint16_t>(s);
        }
      }
      out.table[idx] = bestCost;
      e.argmin[idx] = bestValue;
      // Next assignment (the last scope variable fastest, row-major).
      for (size_t k = scope.size(); k-- > 0;) {
        for (auto [i, use] : llvm::enumerate(uses))
          base[i] += use.stride[k];
        if (++assignment[k] < dom(scope[k]))
          break;
        for (auto [i, use] : llvm::enumerate(uses))
          base[i] -= use.stride[k] * dom(scope[k]);
        assignment[k] = 0;
      }
    }
    if (scope.empty())
      constant += out.table[0];
    else
      addFactor(std::move(out));
  }

  // Read the optimum back: a variable's scope was eliminated after it.
  SmallVector<unsigned> choice(n, 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Eliminated &e = elim[*it];
    size_t idx = 0;
    for (unsigned u : e.scope)
      idx = idx * dom(u) + choice[u];
    choice[*it] = e.argmin[idx];
  }
  objective = constant;
  return choice;
}
