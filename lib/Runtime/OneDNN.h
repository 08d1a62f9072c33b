//===- OneDNN.h - bf16 GEMMs on oneDNN (runtime-internal) -----------*- C++ -*-===//
//
// The runtime's use of oneDNN, loaded at run time where it is installed
// (OneDNN.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_ONEDNN_H
#define DISTOPT_RUNTIME_ONEDNN_H

#include <cstdint>

namespace distopt::runtime {

/// A GEMM operand: [batch, rows, cols] elements at any strides (a
/// transposed operand is a strided view).
struct GemmOperand {
  const uint16_t *data;
  int64_t shape[3], strides[3];
};

/// C = alpha A B + beta C, A [batch, M, K] and B [batch, K, N] bf16, C
/// [batch, M, N] f32, accumulated in f32 by oneDNN's matmul primitive.
/// False, C untouched, where oneDNN is not available (not built with its
/// headers, libdnnl.so.2 not installed, DISTOPT_ONEDNN=0) or declines.
bool onednnGemmBF16(const GemmOperand &a, const GemmOperand &b, float *c,
                    const int64_t cShape[3], const int64_t cStrides[3],
                    float alpha, float beta);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_ONEDNN_H
