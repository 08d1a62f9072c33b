//===- DeviceTest.cpp - the ABI's entry points call the current device ---===//
//
// A compiled program calls the same runtime functions on every target; the
// runtime passes each to the device registered (Device.h). A device that
// records its calls (and computes them on the CPU) stands in for the CUDA
// one here.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Device.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace distopt::runtime;

namespace {

/// Records the name of each call and passes it to the CPU device.
class RecordingDevice final : public Device {
public:
  const char *name() const override { return "recording"; }
#define RECORD_CALL(NAME, PARAMS, ARGS, ...)                                   \
  void NAME PARAMS override {                                                  \
    calls.push_back(#NAME);                                                    \
    cpuDevice().NAME ARGS;                                                     \
  }
  DORT_DEVICE_CALLS(RECORD_CALL)
#undef RECORD_CALL
#define RECORD_COLLECTIVE(NAME, RET, PARAMS, ARGS, ...)                        \
  RET NAME(DORT_UNPAREN PARAMS, dort_dtype dtype) override {                   \
    calls.push_back(#NAME);                                                    \
    return cpuDevice().NAME(DORT_UNPAREN ARGS, dtype);                         \
  }
  DORT_COLLECTIVES(RECORD_COLLECTIVE)
#undef RECORD_COLLECTIVE
  void wait(int64_t handle) override {
    calls.push_back("wait");
    cpuDevice().wait(handle);
  }
  std::vector<std::string> calls;
};

/// Registers a device for one test, and the CPU's again after it.
struct Registered {
  explicit Registered(Device *d) { registerDevice(d); }
  ~Registered() { registerDevice(nullptr); }
};

MemRef2DF32 matrix(std::vector<float> &data, int64_t rows, int64_t cols) {
  return MemRef2DF32{data.data(), data.data(), 0, {rows, cols}, {cols, 1}};
}

} // namespace

TEST(Device, TheCPUIsCurrentUntilAnotherRegisters) {
  EXPECT_STREQ(currentDevice().name(), "cpu");
  EXPECT_EQ(&currentDevice(), &cpuDevice());
  RecordingDevice recording;
  {
    Registered r(&recording);
    EXPECT_EQ(&currentDevice(), &recording);
  }
  EXPECT_EQ(&currentDevice(), &cpuDevice());
}

TEST(Device, GemmEntryPointCallsTheCurrentDevice) {
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c(4, -1);
  MemRef2DF32 ma = matrix(a, 2, 2), mb = matrix(b, 2, 2), mc = matrix(c, 2, 2);
  RecordingDevice recording;
  {
    Registered r(&recording);
    _mlir_ciface_dort_matmul_f32(&ma, &mb, &mc, 0, 0, 1.0f, 0.0f);
  }
  ASSERT_EQ(recording.calls, std::vector<std::string>{"matmul_f32"});
  // Computed by the CPU device it passed the call to.
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
  // With no device registered, the CPU's computes and nothing is recorded.
  std::fill(c.begin(), c.end(), -1.0f);
  _mlir_ciface_dort_matmul_f32(&ma, &mb, &mc, 1, 0, 1.0f, 0.0f);
  EXPECT_EQ(recording.calls.size(), 1u);
  EXPECT_EQ(c, (std::vector<float>{26, 30, 38, 44}));
}

TEST(Device, IndexFaultEntryPointCallsTheCurrentDevice) {
  dort_clear_pending_error();
  std::vector<int64_t> fault = {3, 100}, shape = {2, 2};
  const char text[] = "node 'Gather_0' (Gather) indices";
  MemRef1DI64 mf{fault.data(), fault.data(), 0, {2}, {1}};
  MemRef1DI64 ms{shape.data(), shape.data(), 0, {2}, {1}};
  auto *t = reinterpret_cast<int8_t *>(const_cast<char *>(text));
  MemRef1DI8 mt{t, t, 0, {static_cast<int64_t>(sizeof text)}, {1}};
  RecordingDevice recording;
  {
    Registered r(&recording);
    _mlir_ciface_dort_index_fault(&mf, &ms, &mt, -10, 9);
  }
  ASSERT_EQ(recording.calls, std::vector<std::string>{"index_fault"});
  ASSERT_NE(dort_pending_error(), nullptr);
  EXPECT_EQ(std::string(dort_pending_error()),
            "node 'Gather_0' (Gather) indices: index 100 at [1, 1] is "
            "outside [-10, 9]");
  dort_clear_pending_error();
}
