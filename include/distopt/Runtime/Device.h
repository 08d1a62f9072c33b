//===- Device.h - what a compiled program asks of its device ----*- C++ -*-===//
//
// A compiled program's library calls and collectives run on the device its
// buffers live on. Each device (the CPU, a CUDA GPU) implements this
// interface; the runtime's exported ABI entry points (ABI.def) call the
// current device, so a program calls the same functions whatever its
// target:
//  * the CPU device (always present): OpenBLAS or oneDNN GEMMs, im2col
//    convolutions, MPI collectives (Kernels.cpp, Distributed.cpp);
//  * the CUDA device (lib/Runtime/CUDA, linked into CUDA bundles, which
//    register it when they load): cuBLAS(Lt) GEMMs, cuDNN convolutions,
//    collectives over NCCL or staged through host memory into the CPU
//    device's.
// Kernel launches and the upload and download of a run's buffers belong to
// the CUDA device alone (dort_cuda_run, dort_cuda_launch in CUDA.h).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RUNTIME_DEVICE_H
#define DISTOPT_RUNTIME_DEVICE_H

#include "distopt/Runtime/ABI.def"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Kernels.h"

#include <cstdint>

/// Declares every method of Device, each followed by SPEC (`= 0` in Device,
/// `override` in a device).
#define DORT_DEVICE_METHODS(SPEC)                                              \
  DORT_DEVICE_CALLS(DORT_DEVICE_DECLARE_CALL, SPEC)                            \
  DORT_COLLECTIVES(DORT_DEVICE_DECLARE_COLLECTIVE, SPEC)                       \
  virtual void wait(int64_t handle) SPEC;
#define DORT_DEVICE_DECLARE_CALL(NAME, PARAMS, ARGS, SPEC)                     \
  virtual void NAME PARAMS SPEC;
#define DORT_DEVICE_DECLARE_COLLECTIVE(NAME, RET, PARAMS, ARGS, SPEC)          \
  virtual RET NAME(DORT_UNPAREN PARAMS, dort_dtype dtype) SPEC;

namespace distopt::runtime {

class Device {
public:
  virtual ~Device();
  /// "cpu", "cuda".
  virtual const char *name() const = 0;

  // Library calls, one per device call of ABI.def (Kernels.h's contracts);
  // collectives, one per collective of ABI.def, on elements of `dtype`
  // (Distributed.h's contracts); and the wait for an asynchronous one
  // (start_*).
  DORT_DEVICE_METHODS(= 0)
};

/// The device compiled programs call: the CUDA device where a CUDA runtime
/// registered itself, else the CPU's.
Device &currentDevice();
/// The CPU device (a device runtime stages through it).
Device &cpuDevice();
/// Makes `device` the current one (a device runtime does it when it loads);
/// nullptr restores the CPU's.
void registerDevice(Device *device);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_DEVICE_H
