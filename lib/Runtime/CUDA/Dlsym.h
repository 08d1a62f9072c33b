//===- Dlsym.h - functions of a library loaded with dlopen ------*- C++ -*-===//
//
// The CUDA runtime loads NCCL and cuDNN with dlopen, so that an executable
// needs each only when it is used.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_CUDA_DLSYM_H
#define DISTOPT_RUNTIME_CUDA_DLSYM_H

#include <dlfcn.h>

namespace distopt::runtime::cuda {

/// Binds `fn` to the function `name` of `lib`; false when it lacks it.
template <typename F> bool bindSymbol(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

} // namespace distopt::runtime::cuda

#endif // DISTOPT_RUNTIME_CUDA_DLSYM_H
