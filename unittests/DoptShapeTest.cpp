//===- DoptShapeTest.cpp - shape helpers of the dopt dialect --------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include <gtest/gtest.h>

using namespace distopt::dopt;

TEST(BroadcastShapes, NumPyRules) {
  llvm::SmallVector<int64_t> a = {2, 1, 4}, b = {3, 1}, c = {5};
  auto r = broadcastShapes({a, b});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (llvm::SmallVector<int64_t>{2, 3, 4}));
  EXPECT_FALSE(broadcastShapes({a, c}).has_value());
  llvm::SmallVector<int64_t> scalar = {};
  auto s = broadcastShapes({scalar, a});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, a);
  // A zero-size dimension broadcasts against 1 but not against 3.
  llvm::SmallVector<int64_t> z = {0}, one = {1}, three = {3};
  EXPECT_EQ(*broadcastShapes({z, one}), z);
  EXPECT_FALSE(broadcastShapes({z, three}).has_value());
}

TEST(WindowOutputSize, ConvAndPoolFormulas) {
  // 32 input, 3x3 kernel, pad 1, stride 1 -> 32; stride 2 -> 16.
  EXPECT_EQ(windowOutputSize(32, 3, 1, 1, 1, 1, false), 32);
  EXPECT_EQ(windowOutputSize(32, 3, 2, 1, 1, 1, false), 16);
  // Dilation 2 makes a 3-tap kernel span 5.
  EXPECT_EQ(windowOutputSize(10, 3, 1, 0, 0, 2, false), 6);
  // floor vs ceil: 7 input, kernel 2, stride 2 -> 3 (floor) or 4 (ceil).
  EXPECT_EQ(windowOutputSize(7, 2, 2, 0, 0, 1, false), 3);
  EXPECT_EQ(windowOutputSize(7, 2, 2, 0, 0, 1, true), 4);
  // ceil mode never starts a window in the end padding: 6 input, k=2, s=2,
  // end pad 1 gives ceil(5/2)+1 = 4 windows, but the 4th would start at
  // index 6, inside the padding, so it is dropped (PyTorch's rule) -> 3.
  EXPECT_EQ(windowOutputSize(6, 2, 2, 0, 1, 1, true), 3);
  // Kernel larger than the padded input.
  EXPECT_LT(windowOutputSize(2, 5, 1, 0, 0, 1, false), 0);
}

TEST(SliceSize, PositiveAndNegativeSteps) {
  EXPECT_EQ(sliceSize(0, 10, 1), 10);
  EXPECT_EQ(sliceSize(1, 10, 3), 3); // 1, 4, 7
  EXPECT_EQ(sliceSize(5, 5, 1), 0);
  EXPECT_EQ(sliceSize(9, -1, -1), 10); // whole axis reversed
  EXPECT_EQ(sliceSize(9, 0, -4), 3);   // 9, 5, 1
  EXPECT_EQ(sliceSize(2, 4, -1), 0);
}
