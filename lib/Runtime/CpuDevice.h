//===- CpuDevice.h - the CPU device -----------------------------*- C++ -*-===//
//
// Device.h's interface on host memory: its library calls live with the
// kernels (Kernels.cpp, IndexChecks.cpp), its collectives with the MPI
// grid (Distributed.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_RUNTIME_CPUDEVICE_H
#define DISTOPT_LIB_RUNTIME_CPUDEVICE_H

#include "distopt/Runtime/Device.h"

namespace distopt::runtime {

class CpuDevice final : public Device {
public:
  const char *name() const override { return "cpu"; }

  DORT_DEVICE_METHODS(override)
};

} // namespace distopt::runtime

#endif // DISTOPT_LIB_RUNTIME_CPUDEVICE_H
