//===- SharedRuntime.cpp - the runtime as one shared library --------------===//
//
// libdistopt_runtime_shared.so and libdistopt_runtime_cuda_shared.so are the
// runtime's archives linked whole (lib/Runtime/CMakeLists.txt); CMake wants
// a source of the library's own, and this is it: it defines nothing.
//
//===----------------------------------------------------------------------===//
