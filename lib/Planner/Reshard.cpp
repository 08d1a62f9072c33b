//===- Reshard.cpp - the collectives that turn one layout into another ----===//
//
// See Reshard.h.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Reshard.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace distopt::planner;
using llvm::ArrayRef;
using llvm::SmallVector;

std::optional<CollectiveKind> ReshardStep::collective() const {
  switch (kind) {
  case AllReduce:
    return CollectiveKind::AllReduce;
  case ReduceScatter:
    return CollectiveKind::ReduceScatter;
  case AllGather:
    return CollectiveKind::AllGather;
  case AllToAll:
    return CollectiveKind::AllToAll;
  case Slice:
    return std::nullopt;
  }
  return std::nullopt;
}

/// Whether the axes `a` split a dimension first and `b` continues them.
static bool isPrefix(ArrayRef<int16_t> a, ArrayRef<int16_t> b) {
  return a.size() <= b.size() && llvm::equal(a, b.take_front(a.size()));
}

SmallVector<ReshardStep>
distopt::planner::reshardSteps(const GridLayout &from, const GridLayout &to,
                               int16_t partialAxis) {
  size_t rank = std::max(from.axes.size(), to.axes.size());
  SmallVector<SmallVector<int16_t>> cur(from.axes), want(to.axes);
  cur.resize(rank);
  want.resize(rank);
  SmallVector<ReshardStep> steps;
  if (from.partial) {
    // Reduce-scatter where `to` splits a dimension over the partial axis
    // next; else all-reduce.
    int64_t dst = -1;
    for (size_t d = 0; d < rank && dst < 0; ++d)
      if (llvm::is_contained(want[d], partialAxis))
        dst = static_cast<int64_t>(d);
    SmallVector<int16_t> next;
    if (dst >= 0) {
      next = cur[dst];
      next.push_back(partialAxis);
    }
    if (dst >= 0 && isPrefix(next, want[dst])) {
      steps.push_back({ReshardStep::ReduceScatter, partialAxis, dst});
      cur[dst] = next;
    } else {
      steps.push_back({ReshardStep::AllReduce, partialAxis, -1});
    }
  }
  // Undo splits that `to` does not keep, innermost axis first.
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t d = 0; d < rank; ++d) {
      if (isPrefix(cur[d], want[d]))
        continue;
      int16_t a = cur[d].back();
      cur[d].pop_back();
      // The same axis splits another dimension in `to`: move the split.
      std::optional<size_t> target;
      for (size_t e = 0; e < rank; ++e) {
        SmallVector<int16_t> next(cur[e]);
        next.push_back(a);
        if (e != d && isPrefix(next, want[e]))
          target = e;
      }
      if (target) {
        steps.push_back({ReshardStep::AllToAll, a,
                         static_cast<int64_t>(*target),
                         static_cast<int64_t>(d)});
        cur[*target].push_back(a);
      } else {
        steps.push_back({ReshardStep::AllGather, a, static_cast<int64_t>(d)});
      }
      progress = true;
    }
  }
  // Take the splits `to` adds, outermost axis first (local slices).
  for (size_t d = 0; d < rank; ++d)
    while (cur[d].size() < want[d].size()) {
      int16_t a = want[d][cur[d].size()];
      steps.push_back({ReshardStep::Slice, a, static_cast<int64_t>(d)});
      cur[d].push_back(a);
    }
  return steps;
}
