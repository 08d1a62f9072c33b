//===- IndexChecks.cpp - the report of an index out of range -------------===//
//
// dort_index_fault (Kernels.h): what a compiled program's index check calls,
// on the CPU device.
//
//===----------------------------------------------------------------------===//

#include "CpuDevice.h"

#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <cstdint>
#include <limits>
#include <string>

void distopt::runtime::CpuDevice::index_fault(MemRef1DI64 *fault,
                                              MemRef1DI64 *shape,
                                              MemRef1DI8 *text, int64_t low,
                                              int64_t high) {
  const int64_t *f = fault->aligned + fault->offset;
  int64_t position = f[0], value = f[fault->strides[0]];
  if (position == std::numeric_limits<int64_t>::max())
    return;
  // The flat position as coordinates in the indices' shape.
  int64_t rank = shape->sizes[0];
  const int64_t *dims = shape->aligned + shape->offset;
  std::string at;
  int64_t rest = position;
  for (int64_t d = rank - 1; d >= 0; --d) {
    int64_t size = dims[d * shape->strides[0]];
    int64_t i = size > 0 ? rest % size : 0;
    rest = size > 0 ? rest / size : 0;
    at = std::to_string(i) + (at.empty() ? "" : ", ") + at;
  }
  const char *what = reinterpret_cast<const char *>(text->aligned + text->offset);
  dort_set_pending_error(1, "%s: index %lld at [%s] is outside [%lld, %lld]",
                         what, static_cast<long long>(value), at.c_str(),
                         static_cast<long long>(low),
                         static_cast<long long>(high));
}
