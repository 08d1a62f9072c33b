//===- CudaConv.cpp - convolutions through cuDNN --------------------------===//
//
// Kernels.h's dort_conv2d and dort_conv2d_backward_data contracts on device
// buffers, through cuDNN (libcudnn.so.9, loaded with dlopen at the first
// convolution): one plan per call, shape and layout, its algorithm chosen
// by cuDNN's timing or heuristic. A runtime built without cuDNN's headers
// keeps the entry points, which report that.
//
//===----------------------------------------------------------------------===//

#include "CudaInternal.h"

#include "distopt/Runtime/CUDA.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#ifdef DISTOPT_HAVE_CUDNN
#include "Dlsym.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <unordered_map>
#endif

using namespace distopt::runtime::cuda::detail;

#ifdef DISTOPT_HAVE_CUDNN
namespace {

// cuDNN 9 marks its convolution API deprecated (for the graph API); it is
// what every framework still calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using distopt::runtime::MemRef;

using distopt::runtime::cuda::bindSymbol;

/// libcudnn, loaded with dlopen at the first convolution: an executable
/// without convolutions never needs it, and one that needs it and lacks it
/// says so.
struct CudnnApi {
  void *lib = nullptr;
  cudnnHandle_t handle = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) setStream = nullptr;
  decltype(&cudnnGetErrorString) errorString = nullptr;
  decltype(&cudnnCreateTensorDescriptor) createTensor = nullptr;
  decltype(&cudnnSetTensorNdDescriptor) setTensor = nullptr;
  decltype(&cudnnCreateFilterDescriptor) createFilter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) setFilter = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) createConv = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) setConv = nullptr;
  decltype(&cudnnSetConvolutionGroupCount) setGroups = nullptr;
  decltype(&cudnnSetConvolutionMathType) setMath = nullptr;
  decltype(&cudnnFindConvolutionForwardAlgorithmEx) findForward = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnFindConvolutionBackwardFilterAlgorithmEx) findFilter = nullptr;
  decltype(&cudnnConvolutionBackwardFilter) backwardFilter = nullptr;
  decltype(&cudnnFindConvolutionBackwardDataAlgorithmEx) findData = nullptr;
  decltype(&cudnnConvolutionBackwardData) backwardData = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) heuristicData =
      nullptr;
  decltype(&cudnnTransformTensor) transform = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) heuristicForward = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) heuristicFilter =
      nullptr;
};

/// cuDNN with a handle on the rank's stream; null with `error` set when it
/// cannot be had.
CudnnApi *cudnn(std::string &error) {
  static CudnnApi a;
  static std::string loadError;
  static bool tried = false;
  if (!tried) {
    tried = true;
    a.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char *why = dlerror();
      loadError = std::string("convolutions need cuDNN 9 and libcudnn.so.9 "
                              "cannot be loaded (LD_LIBRARY_PATH?): ") +
                  (why ? why : "");
    } else if (!bindSymbol(a.lib, "cudnnCreate", a.create) ||
               !bindSymbol(a.lib, "cudnnSetStream", a.setStream) ||
               !bindSymbol(a.lib, "cudnnGetErrorString", a.errorString) ||
               !bindSymbol(a.lib, "cudnnCreateTensorDescriptor",
                           a.createTensor) ||
               !bindSymbol(a.lib, "cudnnSetTensorNdDescriptor", a.setTensor) ||
               !bindSymbol(a.lib, "cudnnCreateFilterDescriptor",
                           a.createFilter) ||
               !bindSymbol(a.lib, "cudnnSetFilter4dDescriptor", a.setFilter) ||
               !bindSymbol(a.lib, "cudnnCreateConvolutionDescriptor",
                           a.createConv) ||
               !bindSymbol(a.lib, "cudnnSetConvolution2dDescriptor",
                           a.setConv) ||
               !bindSymbol(a.lib, "cudnnSetConvolutionGroupCount",
                           a.setGroups) ||
               !bindSymbol(a.lib, "cudnnSetConvolutionMathType", a.setMath) ||
               !bindSymbol(a.lib, "cudnnFindConvolutionForwardAlgorithmEx",
                           a.findForward) ||
               !bindSymbol(a.lib, "cudnnConvolutionForward", a.forward) ||
               !bindSymbol(a.lib,
                           "cudnnFindConvolutionBackwardFilterAlgorithmEx",
                           a.findFilter) ||
               !bindSymbol(a.lib, "cudnnConvolutionBackwardFilter",
                           a.backwardFilter) ||
               !bindSymbol(a.lib, "cudnnFindConvolutionBackwardDataAlgorithmEx",
                           a.findData) ||
               !bindSymbol(a.lib, "cudnnConvolutionBackwardData",
                           a.backwardData) ||
               !bindSymbol(a.lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                           a.heuristicData) ||
               !bindSymbol(a.lib, "cudnnTransformTensor", a.transform) ||
               !bindSymbol(a.lib, "cudnnGetConvolutionForwardAlgorithm_v7",
                           a.heuristicForward) ||
               !bindSymbol(a.lib,
                           "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                           a.heuristicFilter)) {
      loadError = "libcudnn.so.9 lacks a function distopt needs";
    } else if (cudnnStatus_t st = a.create(&a.handle);
               st != CUDNN_STATUS_SUCCESS) {
      loadError = std::string("cuDNN could not start: ") + a.errorString(st);
    } else {
      a.setStream(a.handle, state().stream);
    }
  }
  error = loadError;
  return loadError.empty() ? &a : nullptr;
}

template <typename T> constexpr cudnnDataType_t cudnnType();
template <> constexpr cudnnDataType_t cudnnType<float>() {
  return CUDNN_DATA_FLOAT;
}
template <> constexpr cudnnDataType_t cudnnType<double>() {
  return CUDNN_DATA_DOUBLE;
}

/// A 4-D view for cuDNN: sizes and strides, dimensions 0 and 1 swapped on
/// request; strides of extent-1 dimensions made positive (they never step).
struct View4 {
  int dims[4];
  int strides[4];
  bool ok = true;
  View4(const int64_t *sizes, const int64_t *str, bool swap) {
    int64_t inner = 1;
    for (int i = 3; i >= 0; --i) {
      int src = swap && i < 2 ? 1 - i : i;
      int64_t d = sizes[src], st = str[src];
      if (d == 1 && st <= 0)
        st = inner;
      ok = ok && d > 0 && st > 0 && d <= INT32_MAX && st <= INT32_MAX;
      dims[i] = static_cast<int>(d);
      strides[i] = static_cast<int>(st);
      inner *= std::max<int64_t>(d, 1);
    }
  }
  bool packed() const {
    int64_t expect = 1;
    for (int i = 3; i >= 0; --i) {
      if (dims[i] != 1 && strides[i] != expect)
        return false;
      expect *= dims[i];
    }
    return true;
  }
};

/// How one convolution (by shapes, strides and parameters) runs: cuDNN's
/// forward convolution, or -- when it is the weight gradient of another
/// convolution (a small result from a large "filter": what Autodiff's conv
/// rule makes of a weight gradient) -- cuDNN's backward-filter convolution
/// of that one, whichever cuDNN finds faster. Descriptors are made once.
struct ConvPlan {
  std::string error;
  std::string label;
  bool asFilterGrad = false;
  int algo = 0;
  size_t workspace = 0;
  // The forward convolution: x and y as given, w packed NCHW (copied there
  // through stridedW when the view is not).
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, stridedW = nullptr,
                          packedW = nullptr, packedX = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool wPacked = true, xPacked = true;
  size_t wBytes = 0, xBytesFwd = 0;
  // The backward-filter form: X = x with batch and channels swapped, dy = w
  // swapped (each copied packed when the swap is not), dW = y swapped,
  // computed packed into a scratch buffer and copied into y.
  bool gradForm = false;
  cudnnTensorDescriptor_t gradX = nullptr, gradXPacked = nullptr,
                          gradDy = nullptr, gradDyPacked = nullptr,
                          gradOut = nullptr, gradY = nullptr;
  cudnnFilterDescriptor_t gradW = nullptr;
  cudnnConvolutionDescriptor_t gradConv = nullptr;
  bool packX = false, packDy = false;
  size_t xBytes = 0, dyBytes = 0, outBytes = 0;
};

struct ConvState {
  std::unordered_map<std::string, ConvPlan> plans;
};

ConvState &convState() {
  static ConvState c;
  return c;
}

int packedStrides4(const int *dims, int *strides) {
  strides[3] = 1;
  for (int i = 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return 0;
}

/// The algorithm to run: DISTOPT_CUDNN_ALGO=heuristic takes cuDNN's
/// heuristic ranking (the same choice in every process); by default cuDNN
/// times its algorithms on the call's buffers (as PyTorch's
/// cudnn.benchmark). Only deterministic algorithms are taken.
bool heuristicAlgorithms() {
  static const bool on = [] {
    const char *v = std::getenv("DISTOPT_CUDNN_ALGO");
    return v && std::strcmp(v, "heuristic") == 0;
  }();
  return on;
}

/// cuDNN descriptors of one element type.
struct Describe {
  CudnnApi *api;
  cudnnDataType_t type;
  bool tf32;

  cudnnStatus_t tensor(cudnnTensorDescriptor_t &d, const int *dims,
                       const int *strides) const {
    cudnnStatus_t st = api->createTensor(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setTensor(d, type, 4, dims, strides);
    return st;
  }
  cudnnStatus_t packedTensor(cudnnTensorDescriptor_t &d,
                             const int *dims) const {
    int strides[4];
    packedStrides4(dims, strides);
    return tensor(d, dims, strides);
  }
  cudnnStatus_t filter(cudnnFilterDescriptor_t &d, const int *dims) const {
    cudnnStatus_t st = api->createFilter(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setFilter(d, type, CUDNN_TENSOR_NCHW, dims[0], dims[1], dims[2],
                          dims[3]);
    return st;
  }
  /// Cross-correlation with TF32 tensor cores as the runtime's setting.
  cudnnStatus_t convolution(cudnnConvolutionDescriptor_t &d, int64_t ph,
                            int64_t pw, int64_t sh, int64_t sw, int64_t dh,
                            int64_t dw, int64_t groups) const {
    cudnnMathType_t math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    cudnnStatus_t st = api->createConv(&d);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setConv(d, static_cast<int>(ph), static_cast<int>(pw),
                        static_cast<int>(sh), static_cast<int>(sw),
                        static_cast<int>(dh), static_cast<int>(dw),
                        CUDNN_CROSS_CORRELATION, type);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setGroups(d, static_cast<int>(groups));
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->setMath(d, math);
    return st;
  }
};

/// The workspace an algorithm search may use: by default cuDNN times its
/// algorithms on the call's buffers with what the device can spare (at
/// most 1 GiB, allocated for the search); with DISTOPT_CUDNN_ALGO=heuristic
/// a fixed cap, so that the choice does not depend on the memory free.
struct SearchSpace {
  bool heuristic = heuristicAlgorithms();
  size_t cap = 0;
  void *memory = nullptr;
  SearchSpace() {
    size_t freeBytes = 0, total = 0;
    cudaMemGetInfo(&freeBytes, &total);
    cap = heuristic ? size_t(256) << 20
                    : std::min<size_t>(size_t(1) << 30, freeBytes / 4);
    if (!heuristic && cudaMalloc(&memory, cap) != cudaSuccess) {
      cudaGetLastError();
      memory = nullptr;
      cap = 0;
    }
  }
  ~SearchSpace() {
    if (memory) {
      cudaStreamSynchronize(state().stream);
      cudaFree(memory);
    }
    cudaGetLastError();
  }
};

/// A convolution's plan key: the call, its views' sizes and strides, its
/// parameters.
template <typename T>
std::string convKey(const char *name,
                    std::initializer_list<const MemRef<T, 4> *> views,
                    std::initializer_list<int64_t> parameters) {
  std::string key = name;
  for (const MemRef<T, 4> *m : views)
    for (int i = 0; i < 4; ++i)
      key += " " + std::to_string(m->sizes[i]) + "/" +
             std::to_string(m->strides[i]);
  for (int64_t v : parameters)
    key += " " + std::to_string(v);
  return key;
}

/// A convolution's output where nothing is summed into it: zeros, written
/// whole (a packed view; a strided one is an error).
template <typename T> void zeroWhole(const char *name, MemRef<T, 4> *y) {
  const int64_t *ys = y->sizes;
  View4 vy(ys, y->strides, false);
  if (!vy.packed()) {
    dort_set_pending_error(1, "%s: an empty convolution into a strided view",
                           name);
    return;
  }
  check(cudaMemsetAsync(y->aligned + y->offset, 0,
                        sizeof(T) * ys[0] * ys[1] * ys[2] * ys[3],
                        state().stream),
        name);
}

/// A copy of `src` (laid out as `from`) into scratch memory laid out as
/// `to` (cuDNN's transform); `dst` points at it. False with `error` set.
template <typename T>
bool cudnnCopy(CudnnApi *api, Scratch &scratch, cudnnTensorDescriptor_t from,
               const void *src, cudnnTensorDescriptor_t to, size_t bytes,
               const void *&dst, std::string &error) {
  const T one = 1, zero = 0;
  void *p = scratch.get(bytes, error);
  if (!p)
    return false;
  cudnnStatus_t st = api->transform(api->handle, &one, from, src, &zero, to, p);
  if (st != CUDNN_STATUS_SUCCESS) {
    error = std::string("cuDNN copy: ") + api->errorString(st);
    return false;
  }
  dst = p;
  return true;
}

/// cuDNN for the call `name`; null with the pending error set when it
/// cannot be had.
CudnnApi *cudnnFor(const char *name, std::string &error) {
  CudnnApi *api = cudnn(error);
  if (!api)
    dort_set_pending_error(1, "%s: %s", name, error.c_str());
  return api;
}

/// Whether a convolution's plan failed (cuDNN could not describe or choose
/// it); the failure becomes the pending error naming the call and its plan.
template <typename Plan> bool planFailed(const char *name, const Plan &plan) {
  if (plan.error.empty())
    return false;
  dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, plan.label.c_str(),
                         plan.error.c_str());
  return true;
}

/// The library workspace a planned call needs (`work`, null when it needs
/// none); false with the pending error set when it cannot be had.
template <typename Plan>
bool workspaceFor(const char *name, const Plan &plan, void *&work,
                  std::string &error) {
  work = libraryWorkspace(plan.workspace, error);
  if (plan.workspace && !work) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    return false;
  }
  return true;
}

/// Runs `call` (which sets `st`), under the profiler when it is on; a
/// failure becomes the pending error naming the call and its plan.
template <typename Fn>
void runCudnn(const char *name, const std::string &label, CudnnApi *api,
              cudnnStatus_t &st, Fn &&call) {
  DeviceState &s = state();
  if (profiler().on)
    profiled(s.stream, "cuDNN " + label, call);
  else
    call();
  if (st != CUDNN_STATUS_SUCCESS)
    dort_set_pending_error(1, "%s (%s): cuDNN: %s", name, label.c_str(),
                           api->errorString(st));
  else if (s.syncEachLaunch)
    check(cudaStreamSynchronize(s.stream), name);
}

template <typename T>
void conv2d(const char *name, MemRef<T, 4> *x, MemRef<T, 4> *w, MemRef<T, 4> *y,
            int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, int64_t groups) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  const int64_t *xs = x->sizes, *ws = w->sizes, *ys = y->sizes;
  using distopt::runtime::convOutputSize;
  if (!distopt::runtime::conv2dShapesFit(name, xs, ws, ys, sh, sw, ph, pw, dh,
                                         dw, groups))
    return;
  T *xp = x->aligned + x->offset, *wp = w->aligned + w->offset,
    *yp = y->aligned + y->offset;
  if (ys[0] == 0 || ys[1] == 0 || ys[2] == 0 || ys[3] == 0)
    return; // y is empty
  if (xs[1] == 0 || ws[2] == 0 || ws[3] == 0) {
    // A sum of nothing: y is zero (written whole, as the contract says).
    zeroWhole(name, y);
    return;
  }
  std::string key = convKey(name, {x, w, y}, {sh, sw, ph, pw, dh, dw, groups});
  ConvState &cs = convState();
  auto found = cs.plans.find(key);
  bool fresh = found == cs.plans.end();
  if (fresh && captureRefuses())
    return; // cuDNN's start and its search: not inside a graph
  std::string error;
  CudnnApi *api = cudnnFor(name, error);
  if (!api)
    return;
  ConvPlan &plan = fresh ? cs.plans[key] : found->second;
  const T one = 1, zero = 0;
  cudnnDataType_t type = cudnnType<T>();
  auto failed = [&](cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS)
      return false;
    plan.error = std::string(what) + ": " + api->errorString(st);
    return true;
  };
  Describe describe{api, type, s.tf32};
  auto bytes4 = [](const int *dims) {
    return sizeof(T) * size_t(dims[0]) * dims[1] * dims[2] * dims[3];
  };
  if (fresh) {
    View4 vx(xs, x->strides, false), vw(ws, w->strides, false),
        vy(ys, y->strides, false);
    View4 gx(xs, x->strides, true), gdy(ws, w->strides, true),
        gy(ys, y->strides, true);
    // Descriptors for the forward convolution and, where this convolution
    // is the weight gradient of another, for cuDNN's backward filter: its
    // stride is this one's dilation and its dilation this one's stride.
    plan.label = std::to_string(xs[0]) + "x" + std::to_string(xs[1]) + "x" +
                 std::to_string(xs[2]) + "x" + std::to_string(xs[3]) + " * " +
                 std::to_string(ws[0]) + "x" + std::to_string(ws[1]) + "x" +
                 std::to_string(ws[2]) + "x" + std::to_string(ws[3]) +
                 (sh > 1 || sw > 1 ? " stride " + std::to_string(sh) : "") +
                 (dh > 1 || dw > 1 ? " dilation " + std::to_string(dh) : "") +
                 (groups > 1 ? " groups " + std::to_string(groups) : "");
    if (!vx.ok || !vw.ok || !vy.ok) {
      plan.error = "a view cuDNN cannot describe (a zero or negative stride, "
                   "or a dimension past 2^31)";
    } else if (!failed(describe.tensor(plan.x, vx.dims, vx.strides),
                       "x descriptor") &&
               !failed(describe.tensor(plan.y, vy.dims, vy.strides),
                       "y descriptor") &&
               !failed(describe.filter(plan.w, vw.dims), "w descriptor") &&
               !failed(describe.convolution(plan.conv, ph, pw, sh, sw, dh, dw,
                                            groups),
                       "convolution descriptor")) {
      plan.wPacked = vw.packed();
      plan.wBytes = bytes4(vw.dims);
      if (!plan.wPacked &&
          !failed(describe.tensor(plan.stridedW, vw.dims, vw.strides),
                  "w view"))
        failed(describe.packedTensor(plan.packedW, vw.dims), "w copy");
      // An input view that is not NCHW (a transposed operand) is copied
      // packed too: not every algorithm takes any strides.
      plan.xPacked = vx.packed();
      plan.xBytesFwd = bytes4(vx.dims);
      if (!plan.xPacked && plan.error.empty())
        failed(describe.packedTensor(plan.packedX, vx.dims), "x copy");
    }
    plan.gradForm = plan.error.empty() && groups == 1 &&
                    convOutputSize(xs[2], ys[2], dh, ph, sh) == ws[2] &&
                    convOutputSize(xs[3], ys[3], dw, pw, sw) == ws[3] &&
                    std::getenv("DISTOPT_CUDNN_FORWARD_ONLY") == nullptr &&
                    gx.ok && gdy.ok && gy.ok;
    if (plan.gradForm) {
      plan.packX = !gx.packed();
      plan.packDy = !gdy.packed();
      plan.xBytes = bytes4(gx.dims);
      plan.dyBytes = bytes4(gdy.dims);
      plan.outBytes = bytes4(gy.dims);
      plan.gradForm =
          describe.tensor(plan.gradX, gx.dims, gx.strides) ==
              CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradXPacked, gx.dims) ==
              CUDNN_STATUS_SUCCESS &&
          describe.tensor(plan.gradDy, gdy.dims, gdy.strides) ==
              CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradDyPacked, gdy.dims) ==
              CUDNN_STATUS_SUCCESS &&
          describe.packedTensor(plan.gradOut, gy.dims) ==
              CUDNN_STATUS_SUCCESS &&
          describe.tensor(plan.gradY, gy.dims, gy.strides) ==
              CUDNN_STATUS_SUCCESS &&
          describe.filter(plan.gradW, gy.dims) == CUDNN_STATUS_SUCCESS &&
          describe.convolution(plan.gradConv, ph, pw, dh, dw, sh, sw, 1) ==
              CUDNN_STATUS_SUCCESS;
    }
  }
  if (planFailed(name, plan))
    return;
  Scratch scratch;
  auto copy = [&](cudnnTensorDescriptor_t from, const void *src,
                  cudnnTensorDescriptor_t to, size_t bytes, const void *&dst) {
    return cudnnCopy<T>(api, scratch, from, src, to, bytes, dst, error);
  };
  // Operands in the layouts the chosen form needs.
  const void *wUse = wp, *xUse = xp, *gradXUse = xp, *gradDyUse = wp;
  void *gradOut = nullptr;
  bool needForward = fresh || !plan.asFilterGrad;
  bool needGrad = plan.gradForm && (fresh || plan.asFilterGrad);
  bool ok = true;
  if (needForward && !plan.wPacked)
    ok = copy(plan.stridedW, wp, plan.packedW, plan.wBytes, wUse);
  if (ok && needForward && !plan.xPacked)
    ok = copy(plan.x, xp, plan.packedX, plan.xBytesFwd, xUse);
  if (ok && needGrad && plan.packX)
    ok = copy(plan.gradX, xp, plan.gradXPacked, plan.xBytes, gradXUse);
  if (ok && needGrad && plan.packDy)
    ok = copy(plan.gradDy, wp, plan.gradDyPacked, plan.dyBytes, gradDyUse);
  if (ok && needGrad && !(gradOut = scratch.get(plan.outBytes, error)))
    ok = false;
  if (!ok) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    if (fresh) // no algorithm chosen yet: the next call starts again
      cs.plans.erase(key);
    return;
  }
  if (fresh) {
    // Choose: cuDNN's timing of its algorithms on these buffers (the
    // search's workspace: what the device can spare, at most 1 GiB), or
    // its heuristic ranking.
    // (The heuristic's cap is fixed, so that its choice does not depend on
    // the memory free at the time.)
    SearchSpace space;
    bool heuristic = space.heuristic;
    size_t cap = space.cap;
    void *search = space.memory;
    float best = -1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    auto consider = [&](const auto &perf, bool asGrad) {
      if (perf.status != CUDNN_STATUS_SUCCESS ||
          perf.determinism != CUDNN_DETERMINISTIC || perf.memory > cap)
        return;
      // Heuristic: the first acceptable of the ranking, the backward
      // filter first where it applies.
      if (heuristic ? best >= 0 : (best >= 0 && perf.time >= best))
        return;
      best = heuristic ? 0 : perf.time;
      plan.asFilterGrad = asGrad;
      plan.algo = perf.algo;
      plan.workspace = perf.memory;
      math = perf.mathType;
    };
    const char *where = "";
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (needGrad) {
      cudnnConvolutionBwdFilterAlgoPerf_t
          perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      const cudnnTensorDescriptor_t gxd =
          plan.packX ? plan.gradXPacked : plan.gradX;
      const cudnnTensorDescriptor_t gdyd =
          plan.packDy ? plan.gradDyPacked : plan.gradDy;
      st = heuristic
               ? api->heuristicFilter(
                     api->handle, gxd, gdyd, plan.gradConv, plan.gradW,
                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf)
               : api->findFilter(api->handle, gxd, gradXUse, gdyd, gradDyUse,
                                 plan.gradConv, plan.gradW, gradOut,
                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                 perf, search, cap);
      if (st == CUDNN_STATUS_SUCCESS)
        for (int i = 0; i < n; ++i)
          consider(perf[i], true);
    }
    if (best < 0 || !heuristic) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int n = 0;
      st = heuristic ? api->heuristicForward(
                           api->handle, plan.xPacked ? plan.x : plan.packedX,
                           plan.w, plan.conv, plan.y,
                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf)
                     : api->findForward(api->handle,
                                        plan.xPacked ? plan.x : plan.packedX,
                                        xUse, plan.w, wUse, plan.conv, plan.y,
                                        yp, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                        &n, perf, search, cap);
      where = "forward";
      if (st == CUDNN_STATUS_SUCCESS)
        for (int i = 0; i < n; ++i)
          consider(perf[i], false);
    }
    if (best < 0)
      plan.error = st != CUDNN_STATUS_SUCCESS
                       ? std::string("no algorithm (") + where +
                             " search: " + api->errorString(st) + ")"
                       : "no deterministic algorithm takes these shapes";
    // An algorithm is timed with a math type (TF32 tensor cores or not):
    // run it with that one, as the search did.
    else if ((st = api->setMath(plan.asFilterGrad ? plan.gradConv : plan.conv,
                                math)) != CUDNN_STATUS_SUCCESS)
      plan.error =
          std::string("setting the math type: ") + api->errorString(st);
    plan.label =
        std::string(plan.asFilterGrad ? "as backward filter " : "forward ") +
        plan.label + " algo " + std::to_string(plan.algo);
    if (planFailed(name, plan))
      return;
  }
  void *work = nullptr;
  if (!workspaceFor(name, plan, work, error))
    return;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  runCudnn(name, plan.label, api, st, [&] {
    if (!plan.asFilterGrad) {
      st = api->forward(api->handle, &one, plan.xPacked ? plan.x : plan.packedX,
                        xUse, plan.w, wUse, plan.conv,
                        static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), work,
                        plan.workspace, &zero, plan.y, yp);
      return;
    }
    st = api->backwardFilter(
        api->handle, &one, plan.packX ? plan.gradXPacked : plan.gradX, gradXUse,
        plan.packDy ? plan.gradDyPacked : plan.gradDy, gradDyUse, plan.gradConv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo), work,
        plan.workspace, &zero, plan.gradW, gradOut);
    if (st == CUDNN_STATUS_SUCCESS)
      st = api->transform(api->handle, &one, plan.gradOut, gradOut, &zero,
                          plan.gradY, yp);
  });
}

/// How one backward-data convolution runs (cuDNN's choice of algorithm on
/// these shapes): dy and w packed NCHW (copied there when the views are
/// not), dx written as given, through a packed scratch when its view is
/// not packed.
struct DataGradPlan {
  std::string error;
  std::string label;
  int algo = 0;
  size_t workspace = 0;
  cudnnTensorDescriptor_t dy = nullptr, dyView = nullptr, wView = nullptr,
                          wPacked = nullptr, dx = nullptr, dxView = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool packDy = false, packW = false, packDx = false;
  size_t dyBytes = 0, wBytes = 0, dxBytes = 0;
};

std::unordered_map<std::string, DataGradPlan> &dataGradPlans() {
  static std::unordered_map<std::string, DataGradPlan> plans;
  return plans;
}

/// Kernels.h's dort_conv2d_backward_data contract on the device: cuDNN's
/// backward-data convolution (the input gradient of a convolution, and
/// dopt.conv_transpose).
template <typename T>
void conv2dBackwardData(const char *name, MemRef<T, 4> *dy, MemRef<T, 4> *w,
                        MemRef<T, 4> *dx, int64_t sh, int64_t sw, int64_t ph,
                        int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  DeviceState &s = state();
  if (!deviceCallReady())
    return;
  const int64_t *ys = dy->sizes, *ws = w->sizes, *xs = dx->sizes;
  if (!distopt::runtime::conv2dShapesFit(name, xs, ws, ys, sh, sw, ph, pw, dh,
                                         dw, groups))
    return;
  T *yp = dy->aligned + dy->offset, *wp = w->aligned + w->offset,
    *xp = dx->aligned + dx->offset;
  if (xs[0] == 0 || xs[1] == 0 || xs[2] == 0 || xs[3] == 0)
    return; // dx is empty
  if (ys[1] == 0 || ys[2] == 0 || ys[3] == 0 || ws[2] == 0 || ws[3] == 0) {
    // Nothing lands: dx is zero (written whole, as the contract says).
    zeroWhole(name, dx);
    return;
  }
  std::string key =
      convKey(name, {dy, w, dx}, {sh, sw, ph, pw, dh, dw, groups});
  auto &plans = dataGradPlans();
  auto found = plans.find(key);
  bool fresh = found == plans.end();
  if (fresh && captureRefuses())
    return; // cuDNN's start and its search: not inside a graph
  std::string error;
  CudnnApi *api = cudnnFor(name, error);
  if (!api)
    return;
  DataGradPlan &plan = fresh ? plans[key] : found->second;
  const T one = 1, zero = 0;
  Describe describe{api, cudnnType<T>(), s.tf32};
  auto failed = [&](cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS)
      return false;
    plan.error = std::string(what) + ": " + api->errorString(st);
    return true;
  };
  auto bytes4 = [](const int *dims) {
    return sizeof(T) * size_t(dims[0]) * dims[1] * dims[2] * dims[3];
  };
  if (fresh) {
    View4 vy(ys, dy->strides, false), vw(ws, w->strides, false),
        vx(xs, dx->strides, false);
    plan.label = "backward data " + std::to_string(ys[0]) + "x" +
                 std::to_string(ys[1]) + "x" + std::to_string(ys[2]) + "x" +
                 std::to_string(ys[3]) + " * " + std::to_string(ws[0]) + "x" +
                 std::to_string(ws[1]) + "x" + std::to_string(ws[2]) + "x" +
                 std::to_string(ws[3]) + " -> " + std::to_string(xs[2]) + "x" +
                 std::to_string(xs[3]) +
                 (sh > 1 || sw > 1 ? " stride " + std::to_string(sh) : "") +
                 (dh > 1 || dw > 1 ? " dilation " + std::to_string(dh) : "") +
                 (groups > 1 ? " groups " + std::to_string(groups) : "");
    plan.packDy = !vy.packed();
    plan.packW = !vw.packed();
    plan.packDx = !vx.packed();
    plan.dyBytes = bytes4(vy.dims);
    plan.wBytes = bytes4(vw.dims);
    plan.dxBytes = bytes4(vx.dims);
    if (!vy.ok || !vw.ok || !vx.ok)
      plan.error = "a view cuDNN cannot describe (a zero or negative stride, "
                   "or a dimension past 2^31)";
    else if (!failed(describe.packedTensor(plan.dy, vy.dims),
                     "dy descriptor") &&
             !failed(describe.filter(plan.w, vw.dims), "w descriptor") &&
             !failed(describe.packedTensor(plan.dx, vx.dims),
                     "dx descriptor") &&
             !failed(describe.convolution(plan.conv, ph, pw, sh, sw, dh, dw,
                                          groups),
                     "convolution descriptor") &&
             !(plan.packDy &&
               failed(describe.tensor(plan.dyView, vy.dims, vy.strides),
                      "dy view")) &&
             !(plan.packW &&
               failed(describe.tensor(plan.wView, vw.dims, vw.strides),
                      "w view")) &&
             !(plan.packW &&
               failed(describe.packedTensor(plan.wPacked, vw.dims), "w copy")))
      if (plan.packDx)
        failed(describe.tensor(plan.dxView, vx.dims, vx.strides), "dx view");
  }
  if (planFailed(name, plan))
    return;
  // Operands in the packed layouts the plan describes.
  Scratch scratch;
  auto copy = [&](cudnnTensorDescriptor_t from, const void *src,
                  cudnnTensorDescriptor_t to, size_t bytes, const void *&dst) {
    return cudnnCopy<T>(api, scratch, from, src, to, bytes, dst, error);
  };
  const void *dyUse = yp, *wUse = wp;
  void *dxUse = xp;
  bool ok = !plan.packDy || copy(plan.dyView, yp, plan.dy, plan.dyBytes, dyUse);
  if (ok && plan.packW)
    ok = copy(plan.wView, wp, plan.wPacked, plan.wBytes, wUse);
  if (ok && plan.packDx && !(dxUse = scratch.get(plan.dxBytes, error)))
    ok = false;
  if (!ok) {
    dort_set_pending_error(1, "%s (%s): %s", name, plan.label.c_str(),
                           error.c_str());
    if (fresh) // no algorithm chosen yet: the next call starts again
      plans.erase(key);
    return;
  }
  if (fresh) {
    SearchSpace space;
    cudnnConvolutionBwdDataAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    cudnnStatus_t st =
        space.heuristic
            ? api->heuristicData(api->handle, plan.w, plan.dy, plan.conv,
                                 plan.dx, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                 &n, perf)
            : api->findData(api->handle, plan.w, wUse, plan.dy, dyUse,
                            plan.conv, plan.dx, dxUse,
                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf,
                            space.memory, space.cap);
    // The heuristic's first acceptable, or the fastest timed one; only
    // deterministic algorithms.
    float best = -1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n; ++i) {
      const auto &pf = perf[i];
      if (pf.status != CUDNN_STATUS_SUCCESS ||
          pf.determinism != CUDNN_DETERMINISTIC || pf.memory > space.cap)
        continue;
      if (space.heuristic ? best >= 0 : (best >= 0 && pf.time >= best))
        continue;
      best = space.heuristic ? 0 : pf.time;
      plan.algo = pf.algo;
      plan.workspace = pf.memory;
      math = pf.mathType;
    }
    if (best < 0)
      plan.error = st != CUDNN_STATUS_SUCCESS
                       ? std::string("no algorithm (backward-data search: ") +
                             api->errorString(st) + ")"
                       : "no deterministic algorithm takes these shapes";
    else if ((st = api->setMath(plan.conv, math)) != CUDNN_STATUS_SUCCESS)
      plan.error =
          std::string("setting the math type: ") + api->errorString(st);
    plan.label += " algo " + std::to_string(plan.algo);
    if (planFailed(name, plan))
      return;
  }
  void *work = nullptr;
  if (!workspaceFor(name, plan, work, error))
    return;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  runCudnn(name, plan.label, api, st, [&] {
    st = api->backwardData(
        api->handle, &one, plan.w, wUse, plan.dy, dyUse, plan.conv,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), work,
        plan.workspace, &zero, plan.dx, dxUse);
    if (st == CUDNN_STATUS_SUCCESS && plan.packDx)
      st = api->transform(api->handle, &one, plan.dx, dxUse, &zero, plan.dxView,
                          xp);
  });
}

#pragma GCC diagnostic pop

} // namespace
#endif // DISTOPT_HAVE_CUDNN

// The entry points: FN<T> on the descriptors, or (without cuDNN) the error
// saying so.
#ifdef DISTOPT_HAVE_CUDNN
#define DORT_CUDA_CONV_CALL(NAME, FN, T)                                       \
  FN<T>(NAME, reinterpret_cast<MemRef<T, 4> *>(a),                             \
        reinterpret_cast<MemRef<T, 4> *>(w),                                   \
        reinterpret_cast<MemRef<T, 4> *>(b), sh, sw, ph, pw, dh, dw, groups)
#else
#define DORT_CUDA_CONV_CALL(NAME, FN, T)                                       \
  (void)a, (void)w, (void)b, (void)sh, (void)sw, (void)ph, (void)pw, (void)dh, \
      (void)dw, (void)groups;                                                  \
  dort_set_pending_error(1, NAME ": this runtime was built without cuDNN")
#endif

/// The CUDA device's <ENTRY>: a and b are x and y (conv2d), or dy and
/// dx (conv2d_backward_data).
#define DORT_CUDA_CONV(ENTRY, FN, T, M)                                        \
  void CudaDevice::ENTRY(                                                      \
      M *a, M *w, M *b, int64_t sh, int64_t sw, int64_t ph, int64_t pw,        \
      int64_t dh, int64_t dw, int64_t groups) {                                \
    DORT_CUDA_CONV_CALL("dort_cuda_" #ENTRY, FN, T);                           \
  }

DORT_CUDA_CONV(conv2d_f32, conv2d, float, MemRef4DF32)
DORT_CUDA_CONV(conv2d_f64, conv2d, double, MemRef4DF64)
DORT_CUDA_CONV(conv2d_backward_data_f32, conv2dBackwardData, float, MemRef4DF32)
DORT_CUDA_CONV(conv2d_backward_data_f64, conv2dBackwardData, double,
               MemRef4DF64)

#undef DORT_CUDA_CONV
#undef DORT_CUDA_CONV_CALL
