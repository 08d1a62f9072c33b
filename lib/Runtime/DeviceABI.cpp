//===- DeviceABI.cpp - the entry points compiled programs call ------------===//
//
// Each device call and collective of ABI.def, exported under the name a
// compiled program calls (_mlir_ciface_dort_...), passed to the current
// device (Device.h).
//
//===----------------------------------------------------------------------===//

#include "CpuDevice.h"

#include "distopt/Runtime/Distributed.h"

#include <atomic>

using namespace distopt::runtime;

namespace {
std::atomic<Device *> gRegistered{nullptr};
} // namespace

Device::~Device() = default;

Device &distopt::runtime::cpuDevice() {
  static CpuDevice cpu;
  return cpu;
}

Device &distopt::runtime::currentDevice() {
  Device *d = gRegistered.load(std::memory_order_acquire);
  return d ? *d : cpuDevice();
}

void distopt::runtime::registerDevice(Device *device) {
  gRegistered.store(device, std::memory_order_release);
}

extern "C" {

#define DORT_CALL_ENTRY(NAME, PARAMS, ARGS, ...)                               \
  void _mlir_ciface_dort_##NAME PARAMS { currentDevice().NAME ARGS; }
DORT_DEVICE_CALLS(DORT_CALL_ENTRY)

// One entry point per collective and element type.
#define DORT_COLLECTIVE_ENTRY(NAME, RET, PARAMS, ARGS, SUFFIX, DTYPE)          \
  RET _mlir_ciface_dort_shard_##NAME##_##SUFFIX PARAMS {                       \
    return currentDevice().NAME(DORT_UNPAREN ARGS, DTYPE);                     \
  }
#define DORT_COLLECTIVES_OF_TYPE(SUFFIX, DTYPE, ...)                           \
  DORT_COLLECTIVES(DORT_COLLECTIVE_ENTRY, SUFFIX, DTYPE)
DORT_COLLECTIVE_TYPES(DORT_COLLECTIVES_OF_TYPE)

void dort_shard_wait(int64_t handle) { currentDevice().wait(handle); }

} // extern "C"
