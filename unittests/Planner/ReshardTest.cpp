//===- ReshardTest.cpp - the steps of a reshard ---------------------------===//

#include "distopt/Planner/Reshard.h"

#include <gtest/gtest.h>

#include <string>

using namespace distopt::planner;

namespace {

/// The steps as text: "kind(axis,dim[,fromDim])" joined by spaces.
std::string steps(const GridLayout &from, const GridLayout &to,
                  int16_t partialAxis = 2) {
  static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                "all_to_all", "slice"};
  std::string s;
  for (const ReshardStep &step : reshardSteps(from, to, partialAxis)) {
    if (!s.empty())
      s += " ";
    s += std::string(names[step.kind]) + "(" + std::to_string(step.axis) +
         "," + std::to_string(step.dim);
    if (step.kind == ReshardStep::AllToAll)
      s += "," + std::to_string(step.fromDim);
    s += ")";
  }
  return s;
}

GridLayout layout(llvm::SmallVector<llvm::SmallVector<int16_t>> axes,
                  bool partial = false) {
  return GridLayout{std::move(axes), partial};
}

TEST(Reshard, SameLayoutNeedsNothing) {
  EXPECT_EQ(steps(layout({{2}, {}}), layout({{2}, {}})), "");
  EXPECT_EQ(steps(layout({}), layout({{}, {}})), "");
}

TEST(Reshard, OneAxis) {
  // Partial to whole, and straight into a split.
  EXPECT_EQ(steps(layout({{}, {}}, true), layout({{}, {}})), "all_reduce(2,-1)");
  EXPECT_EQ(steps(layout({{}, {}}, true), layout({{}, {2}})),
            "reduce_scatter(2,1)");
  // A split undone, moved to another dimension, or added locally.
  EXPECT_EQ(steps(layout({{2}, {}}), layout({{}, {}})), "all_gather(2,0)");
  EXPECT_EQ(steps(layout({{2}, {}}), layout({{}, {2}})), "all_to_all(2,1,0)");
  EXPECT_EQ(steps(layout({{}, {}}), layout({{}, {2}})), "slice(2,1)");
}

TEST(Reshard, TwoAxes) {
  // Data and tensor axes on one dimension: the inner one goes first.
  EXPECT_EQ(steps(layout({{1, 2}, {}}), layout({{1}, {}})), "all_gather(2,0)");
  EXPECT_EQ(steps(layout({{1, 2}, {}}), layout({{}, {}})),
            "all_gather(2,0) all_gather(1,0)");
  // The tensor axis moves to the other dimension, the data axis stays.
  EXPECT_EQ(steps(layout({{1, 2}, {}}), layout({{1}, {2}})),
            "all_to_all(2,1,0)");
  // A partial value reduced into a split below the data axis's.
  EXPECT_EQ(steps(layout({{1}, {}}, true), layout({{1, 2}, {}})),
            "reduce_scatter(2,0)");
  EXPECT_EQ(steps(layout({{}, {}}, true), layout({{2, 1}, {}})),
            "reduce_scatter(2,0) slice(1,0)");
  // ... or reduced whole when the wanted split is not next on that
  // dimension, then sliced outermost axis first.
  EXPECT_EQ(steps(layout({{}, {}}, true), layout({{1, 2}, {}})),
            "all_reduce(2,-1) slice(1,0) slice(2,0)");
}

TEST(Reshard, CollectiveOfEachStep) {
  EXPECT_EQ(ReshardStep({ReshardStep::Slice, 2, 0}).collective(), std::nullopt);
  EXPECT_EQ(ReshardStep({ReshardStep::AllToAll, 2, 1, 0}).collective(),
            CollectiveKind::AllToAll);
  EXPECT_EQ(ReshardStep({ReshardStep::ReduceScatter, 2, 0}).collective(),
            CollectiveKind::ReduceScatter);
}

} // namespace
