//===- RuntimeErrorTest.cpp - runtime error state -------------------------===//

#include "distopt/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

TEST(RuntimeError, SetClearAndThreadLocal) {
  dort_clear_error();
  EXPECT_EQ(dort_last_error_code(), 0);
  EXPECT_STREQ(dort_last_error_message(), "");
  EXPECT_EQ(dort_set_error(3, "rank %d: %s", 2, "boom"), 3);
  EXPECT_EQ(dort_last_error_code(), 3);
  EXPECT_STREQ(dort_last_error_message(), "rank 2: boom");
  // Another thread sees its own (empty) state.
  std::string other = "unset";
  std::thread([&] { other = dort_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  dort_clear_error();
  EXPECT_EQ(dort_last_error_code(), 0);
  EXPECT_FALSE(std::string(dort_version()).empty());
}
