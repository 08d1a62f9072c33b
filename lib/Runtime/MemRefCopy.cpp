//===- MemRefCopy.cpp - memrefCopy for memref.copy lowering ---------------===//
//
// MLIR lowers memref.copy of non-contiguous memrefs to a call of
// `memrefCopy(elemSize, UnrankedMemRef *src, UnrankedMemRef *dst)`, which
// upstream lives in libmlir_c_runner_utils. Executables link the runtime
// instead, so it is provided here, in its own object file.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Kernels.h"

#include <cstring>
#include <vector>

namespace {
struct Descriptor {
  char *aligned;
  int64_t offset;
  const int64_t *sizes;
  const int64_t *strides;
};

Descriptor unpack(const DortUnrankedMemRef *m) {
  // { T *allocated; T *aligned; int64_t offset; int64_t sizes[rank];
  //   int64_t strides[rank]; }
  char *base = static_cast<char *>(m->descriptor);
  Descriptor d;
  std::memcpy(&d.aligned, base + sizeof(void *), sizeof(void *));
  std::memcpy(&d.offset, base + 2 * sizeof(void *), sizeof(int64_t));
  d.sizes = reinterpret_cast<const int64_t *>(base + 2 * sizeof(void *) +
                                              sizeof(int64_t));
  d.strides = d.sizes + m->rank;
  return d;
}
} // namespace

extern "C" void memrefCopy(int64_t elemSize, DortUnrankedMemRef *srcArg,
                           DortUnrankedMemRef *dstArg) {
  int64_t rank = srcArg->rank;
  Descriptor src = unpack(srcArg), dst = unpack(dstArg);
  char *s = src.aligned + src.offset * elemSize;
  char *d = dst.aligned + dst.offset * elemSize;
  if (rank == 0) {
    std::memcpy(d, s, static_cast<size_t>(elemSize));
    return;
  }
  for (int64_t i = 0; i < rank; ++i)
    if (src.sizes[i] == 0)
      return;
  // Both dense with identity layout: one memcpy.
  bool contiguous = true;
  int64_t expect = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (src.sizes[i] != 1 &&
        (src.strides[i] != expect || dst.strides[i] != expect))
      contiguous = false;
    expect *= src.sizes[i];
  }
  if (contiguous) {
    std::memmove(d, s, static_cast<size_t>(expect * elemSize));
    return;
  }
  int64_t inner = src.sizes[rank - 1];
  int64_t sIn = src.strides[rank - 1] * elemSize;
  int64_t dIn = dst.strides[rank - 1] * elemSize;
  bool innerDense = sIn == elemSize && dIn == elemSize;
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t sOff = 0, dOff = 0;
  for (;;) {
    if (innerDense) {
      std::memcpy(d + dOff, s + sOff, static_cast<size_t>(inner * elemSize));
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(d + dOff + j * dIn, s + sOff + j * sIn,
                    static_cast<size_t>(elemSize));
    }
    // Advance the outer indices.
    int64_t dim = rank - 2;
    for (; dim >= 0; --dim) {
      if (++index[dim] < src.sizes[dim]) {
        sOff += src.strides[dim] * elemSize;
        dOff += dst.strides[dim] * elemSize;
        break;
      }
      sOff -= (index[dim] - 1) * src.strides[dim] * elemSize;
      dOff -= (index[dim] - 1) * dst.strides[dim] * elemSize;
      index[dim] = 0;
    }
    if (dim < 0)
      return;
  }
}
