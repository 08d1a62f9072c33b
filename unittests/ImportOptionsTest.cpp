//===- ImportOptionsTest.cpp - parsing of import options ------------------===//

#include "distopt/Import/ONNX/Importer.h"

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>

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

TEST(RunIsolated, ReturnsTheChildsBytes) {
  // More than a pipe holds: the parent must read while the child writes.
  std::string big(5 << 20, 'x');
  big[12345] = '\0';
  std::string got;
  EXPECT_EQ(distopt::runIsolated(got, [&] { return big; }), std::nullopt);
  EXPECT_EQ(got, big);
}

TEST(RunIsolated, AnExceptionIsTheError) {
  std::string got = "unchanged";
  EXPECT_EQ(distopt::runIsolated(got,
                                 []() -> std::string {
                                   throw std::runtime_error("no adapter");
                                 }),
            std::string("no adapter"));
  EXPECT_EQ(got, "unchanged");
}

TEST(RunIsolated, ACrashIsAnError) {
  std::string got;
  std::optional<std::string> err =
      distopt::runIsolated(got, []() -> std::string {
        std::raise(SIGSEGV);
        return "not reached";
      });
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("crashed (signal 11"), std::string::npos) << *err;
  err = distopt::runIsolated(got, []() -> std::string { std::abort(); });
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("crashed (signal 6"), std::string::npos) << *err;
  err = distopt::runIsolated(got, []() -> std::string { _exit(7); });
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("exited abnormally (status 7)"), std::string::npos)
      << *err;
}
