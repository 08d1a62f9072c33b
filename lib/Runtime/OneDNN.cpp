//===- OneDNN.cpp - bf16 GEMMs on oneDNN, loaded at run time ---------------===//
//
// oneDNN's matmul primitive computes bf16 GEMMs with the CPU's AVX512_BF16
// dot products or AMX tiles. The runtime loads libdnnl.so.2 when a bf16 GEMM
// first runs (dlopen), so a bundle runs on machines without oneDNN (the
// GEMMs then widen to f32 for OpenBLAS): it is an accelerator, not a
// dependency. DISTOPT_ONEDNN=0 turns it off. Built where the oneDNN headers
// are (DISTOPT_HAVE_DNNL); elsewhere it reports itself unavailable.
//
//===----------------------------------------------------------------------===//

#include "OneDNN.h"

#include <cstdlib>
#include <cstring>

#ifdef DISTOPT_HAVE_DNNL
#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

namespace distopt::runtime {
namespace {

/// The C API functions the GEMM uses, bound from libdnnl.so.2.
struct Api {
#define DNNL_FN(name) decltype(&::name) name = nullptr;
  DNNL_FN(dnnl_engine_create)
  DNNL_FN(dnnl_stream_create)
  DNNL_FN(dnnl_stream_wait)
  DNNL_FN(dnnl_memory_desc_init_by_strides)
  DNNL_FN(dnnl_matmul_desc_init)
  DNNL_FN(dnnl_primitive_attr_create)
  DNNL_FN(dnnl_primitive_attr_destroy)
  DNNL_FN(dnnl_primitive_attr_set_output_scales)
  DNNL_FN(dnnl_post_ops_create)
  DNNL_FN(dnnl_post_ops_destroy)
  DNNL_FN(dnnl_post_ops_append_sum)
  DNNL_FN(dnnl_primitive_attr_set_post_ops)
  DNNL_FN(dnnl_primitive_desc_create)
  DNNL_FN(dnnl_primitive_desc_destroy)
  DNNL_FN(dnnl_primitive_create)
  DNNL_FN(dnnl_primitive_execute)
  DNNL_FN(dnnl_memory_create)
  DNNL_FN(dnnl_memory_destroy)
#undef DNNL_FN
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  bool ok = false;
};

template <typename F> bool bind(void *lib, const char *name, F &out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

Api &api() {
  static Api a = [] {
    Api a;
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return a;
    bool all = true;
#define DNNL_BIND(name) all &= bind(lib, #name, a.name);
    DNNL_BIND(dnnl_engine_create)
    DNNL_BIND(dnnl_stream_create)
    DNNL_BIND(dnnl_stream_wait)
    DNNL_BIND(dnnl_memory_desc_init_by_strides)
    DNNL_BIND(dnnl_matmul_desc_init)
    DNNL_BIND(dnnl_primitive_attr_create)
    DNNL_BIND(dnnl_primitive_attr_destroy)
    DNNL_BIND(dnnl_primitive_attr_set_output_scales)
    DNNL_BIND(dnnl_post_ops_create)
    DNNL_BIND(dnnl_post_ops_destroy)
    DNNL_BIND(dnnl_post_ops_append_sum)
    DNNL_BIND(dnnl_primitive_attr_set_post_ops)
    DNNL_BIND(dnnl_primitive_desc_create)
    DNNL_BIND(dnnl_primitive_desc_destroy)
    DNNL_BIND(dnnl_primitive_create)
    DNNL_BIND(dnnl_primitive_execute)
    DNNL_BIND(dnnl_memory_create)
    DNNL_BIND(dnnl_memory_destroy)
#undef DNNL_BIND
    a.ok = all &&
           a.dnnl_engine_create(&a.engine, dnnl_cpu, 0) == dnnl_success &&
           a.dnnl_stream_create(&a.stream, a.engine,
                                dnnl_stream_default_flags) == dnnl_success;
    return a;
  }();
  return a;
}

using Dims3 = std::array<int64_t, 3>;
struct Key {
  Dims3 shape[3], strides[3];
  float alpha, beta;
  bool operator<(const Key &o) const {
    return std::tie(shape[0], shape[1], shape[2], strides[0], strides[1],
                    strides[2], alpha, beta) <
           std::tie(o.shape[0], o.shape[1], o.shape[2], o.strides[0],
                    o.strides[1], o.strides[2], o.alpha, o.beta);
  }
};

/// A primitive and its memory descriptors (A, B, C), built once per key.
struct Gemm {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t md[3];
};

bool describe(Api &a, const Dims3 &shape, const Dims3 &strides,
              dnnl_data_type_t type, dnnl_memory_desc_t &md) {
  dnnl_dims_t d = {shape[0], shape[1], shape[2]};
  dnnl_dims_t s = {strides[0], strides[1], strides[2]};
  return a.dnnl_memory_desc_init_by_strides(&md, 3, d, type, s) ==
         dnnl_success;
}

bool build(Api &a, const Key &k, Gemm &g) {
  if (!describe(a, k.shape[0], k.strides[0], dnnl_bf16, g.md[0]) ||
      !describe(a, k.shape[1], k.strides[1], dnnl_bf16, g.md[1]) ||
      !describe(a, k.shape[2], k.strides[2], dnnl_f32, g.md[2]))
    return false;
  dnnl_matmul_desc_t desc;
  if (a.dnnl_matmul_desc_init(&desc, &g.md[0], &g.md[1], nullptr, &g.md[2]) !=
      dnnl_success)
    return false;
  dnnl_primitive_attr_t attr = nullptr;
  if (a.dnnl_primitive_attr_create(&attr) != dnnl_success)
    return false;
  bool ok = true;
  if (k.alpha != 1.0f)
    ok &= a.dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k.alpha) ==
          dnnl_success;
  if (k.beta != 0.0f) {
    dnnl_post_ops_t ops = nullptr;
    ok &= a.dnnl_post_ops_create(&ops) == dnnl_success &&
          a.dnnl_post_ops_append_sum(ops, k.beta) == dnnl_success &&
          a.dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
    if (ops)
      a.dnnl_post_ops_destroy(ops);
  }
  dnnl_primitive_desc_t pd = nullptr;
  ok = ok && a.dnnl_primitive_desc_create(&pd, &desc, attr, a.engine,
                                          nullptr) == dnnl_success;
  ok = ok && a.dnnl_primitive_create(&g.prim, pd) == dnnl_success;
  if (pd)
    a.dnnl_primitive_desc_destroy(pd);
  a.dnnl_primitive_attr_destroy(attr);
  return ok;
}

} // namespace

bool onednnGemmBF16(const GemmOperand &a, const GemmOperand &b, float *c,
                    const int64_t cShape[3], const int64_t cStrides[3],
                    float alpha, float beta) {
  if (const char *v = std::getenv("DISTOPT_ONEDNN"); v && !std::strcmp(v, "0"))
    return false;
  Api &dnnl = api();
  if (!dnnl.ok)
    return false;
  Key key{{{a.shape[0], a.shape[1], a.shape[2]},
           {b.shape[0], b.shape[1], b.shape[2]},
           {cShape[0], cShape[1], cShape[2]}},
          {{a.strides[0], a.strides[1], a.strides[2]},
           {b.strides[0], b.strides[1], b.strides[2]},
           {cStrides[0], cStrides[1], cStrides[2]}},
          alpha,
          beta};
  // One stream and its primitives, one GEMM at a time (the caller's
  // threads are oneDNN's: it parallelises inside).
  static std::mutex mutex;
  static std::map<Key, Gemm> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    Gemm g;
    if (!build(dnnl, key, g))
      return false; // oneDNN declines this shape or layout
    it = cache.emplace(key, g).first;
  }
  Gemm &g = it->second;
  dnnl_memory_t mem[3] = {};
  void *data[3] = {const_cast<uint16_t *>(a.data),
                   const_cast<uint16_t *>(b.data), c};
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i)
    ok = dnnl.dnnl_memory_create(&mem[i], &g.md[i], dnnl.engine, data[i]) ==
         dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]},
                               {DNNL_ARG_WEIGHTS, mem[1]},
                               {DNNL_ARG_DST, mem[2]}};
    ok = dnnl.dnnl_primitive_execute(g.prim, dnnl.stream, 3, args) ==
             dnnl_success &&
         dnnl.dnnl_stream_wait(dnnl.stream) == dnnl_success;
  }
  for (dnnl_memory_t m : mem)
    if (m)
      dnnl.dnnl_memory_destroy(m);
  return ok;
}


} // namespace distopt::runtime

#else

namespace distopt::runtime {
bool onednnGemmBF16(const GemmOperand &, const GemmOperand &, float *,
                    const int64_t[3], const int64_t[3], float, float) {
  return false;
}
} // namespace distopt::runtime

#endif
