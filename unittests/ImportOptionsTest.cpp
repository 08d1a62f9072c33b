//===- ImportOptionsTest.cpp - parsing of import options ------------------===//

#include "distopt/Import/ONNX/Importer.h"

#include <gtest/gtest.h>

using distopt::parseShapeSpec;

TEST(ParseShapeSpec, Forms) {
  EXPECT_EQ(*parseShapeSpec("32x256"), (llvm::SmallVector<int64_t>{32, 256}));
  EXPECT_EQ(*parseShapeSpec("2,3,4"), (llvm::SmallVector<int64_t>{2, 3, 4}));
  EXPECT_EQ(*parseShapeSpec("7"), (llvm::SmallVector<int64_t>{7}));
  EXPECT_TRUE(parseShapeSpec("")->empty());
  EXPECT_TRUE(parseShapeSpec("scalar")->empty());
  EXPECT_FALSE(parseShapeSpec("2xx3").has_value());
  EXPECT_FALSE(parseShapeSpec("-1x3").has_value());
  EXPECT_FALSE(parseShapeSpec("ax3").has_value());
}
