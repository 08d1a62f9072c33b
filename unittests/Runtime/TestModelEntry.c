/*===- TestModelEntry.c - a hand-written "compiled model" ------------------===
 *
 * Stands in for the object file the compiler generates: defines dopt_entry
 * over the buffers of this manifest (see ExecutableTest.cpp):
 *   inputs:  x: float32 [2, 3]
 *   weights: w: float32 [2, 3]
 *   outputs: "sum:0" = x + w (float32 [2, 3]),
 *            "gram" = x * w^T (float32 [2, 2], through dort_matmul_f32)
 * Written in C to check the runtime headers are C and that the documented
 * link line works for a C object.
 *===----------------------------------------------------------------------===*/

#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <stdlib.h>

int32_t dopt_entry(void **buffers) {
  float *x = (float *)buffers[0];
  float *w = (float *)buffers[1];
  float *sum = (float *)buffers[2];
  float *gram = (float *)buffers[3];
  if (getenv("DORT_TEST_FAIL"))
    return dort_set_error(5, "injected failure (%s)", getenv("DORT_TEST_FAIL"));
  for (int i = 0; i < 6; ++i)
    sum[i] = x[i] + w[i];
  MemRef2DF32 a = {x, x, 0, {2, 3}, {3, 1}};
  MemRef2DF32 b = {w, w, 0, {2, 3}, {3, 1}};
  MemRef2DF32 c = {gram, gram, 0, {2, 2}, {2, 1}};
  _mlir_ciface_dort_matmul_f32(&a, &b, &c, 0, 1, 1.0f, 0.0f);
  return 0;
}
