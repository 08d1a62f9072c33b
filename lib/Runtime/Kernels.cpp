//===- Kernels.cpp - GEMM kernels on OpenBLAS -----------------------------===//

#include "distopt/Runtime/Kernels.h"

#include "CpuDevice.h"

#include "distopt/Runtime/Runtime.h"

#include "distopt/Runtime/Half.h"
#include "OneDNN.h"

#include <cblas.h>
#include <omp.h>


#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sched.h>
#include <thread>
#include <vector>

// OpenBLAS extension; declared here too so any cblas.h will do.
extern "C" void openblas_set_num_threads(int numThreads);
// OpenBLAS's pthreads build starts its worker threads when it is loaded;
// they spin (sched_yield) for a while after each call, and first for a
// while after start. This stops them. Weak: other builds lack it.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
// OpenBLAS's name for the kernels it chose when it was loaded (from
// $OPENBLAS_CORETYPE if set, else its table of CPUs). Weak, as above.
extern "C" char *openblas_get_corename(void) __attribute__((weak));

// Threads: the generated loops and these kernels share one OpenMP thread
// pool (libomp; this file is compiled with -fopenmp and its GOMP_* calls
// resolve to libomp's compatible entry points). OpenBLAS runs
// single-threaded inside it: a GEMM is cut into one block per thread here.
// Two pools -- OpenMP's for the loops and OpenBLAS's own -- would spin
// against each other for the same cores between calls.

namespace {

std::atomic<bool> threadsConfigured{false};

int positiveEnv(const char *name) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return 0;
  char *end;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n <= 0 || n > INT_MAX)
    return 0;
  return static_cast<int>(n);
}

/// Processes of this job on this node, from the launcher's environment
/// (Open MPI, MPICH/Hydra, Slurm); 1 outside a launcher.
int localProcesses() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"})
    if (int n = positiveEnv(name))
      return n;
  return 1;
}

int availableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

void ensureThreads() {
  if (!threadsConfigured.load(std::memory_order_acquire)) {
    static std::once_flag once;
    std::call_once(once, [] {
      if (!threadsConfigured.load())
        dort_set_num_threads(0);
    });
  }
}

/// Multiply-adds a thread must get for a fork to pay: below, a product (or
/// a batch of them) uses fewer threads, down to the calling thread alone.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 17;

/// Threads worth using for `macs` multiply-adds, at most `threads`.
int threadsFor(int64_t macs, int threads) {
  return static_cast<int>(
      std::min<int64_t>(threads, std::max<int64_t>(1, macs / kMinMacsPerThread)));
}

/// Threads a parallel region started here would get (1 inside one).
int teamSize() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

/// Runs body(i) for i in [0, n) on the thread pool, in contiguous chunks.
template <typename F> void parallelFor(int64_t n, int threads, F body) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i)
      body(i);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i)
    body(i);
}

template <typename T> struct Blas;
template <> struct Blas<float> {
  static constexpr const char *suffix = "f32";
  static void gemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb,
                   int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc) {
    cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int m, int n, float alpha,
                   const float *a, int lda, const float *x, int incx,
                   float beta, float *y, int incy) {
    cblas_sgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
  }
};
template <> struct Blas<double> {
  static constexpr const char *suffix = "f64";
  static void gemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb,
                   int m, int n, int k, double alpha, const double *a, int lda,
                   const double *b, int ldb, double beta, double *c, int ldc) {
    cblas_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int m, int n, double alpha,
                   const double *a, int lda, const double *x, int incx,
                   double beta, double *y, int incy) {
    cblas_dgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
  }
};

/// A logical matrix: element (i, j) at base[i * s0 + j * s1].
template <typename T> struct View {
  T *base;
  int64_t rows, cols, s0, s1;
};

/// How BLAS sees a view: its storage order and leading dimension.
struct Layout {
  bool colMajor;
  int64_t ld;
};

/// Row-major (unit column stride) or column-major (unit row stride) with a
/// valid leading dimension; false when the view needs a copy. Strides of
/// size-1 dimensions do not matter.
template <typename T> bool blasLayout(const View<T> &v, Layout &layout) {
  if ((v.s1 == 1 || v.cols == 1) &&
      (v.rows == 1 || v.s0 >= std::max<int64_t>(1, v.cols))) {
    layout = {false, v.rows == 1 ? std::max<int64_t>(1, v.cols) : v.s0};
    return true;
  }
  if ((v.s0 == 1 || v.rows == 1) &&
      (v.cols == 1 || v.s1 >= std::max<int64_t>(1, v.rows))) {
    layout = {true, v.cols == 1 ? std::max<int64_t>(1, v.rows) : v.s1};
    return true;
  }
  return false;
}

/// Copies a view into a dense row-major buffer.
template <typename T> void gather(const View<T> &v, T *dst) {
  for (int64_t i = 0; i < v.rows; ++i)
    for (int64_t j = 0; j < v.cols; ++j)
      dst[i * v.cols + j] = v.base[i * v.s0 + j * v.s1];
}

/// Copies a dense row-major buffer into a view.
template <typename T> void scatter(const T *src, const View<T> &v) {
  for (int64_t i = 0; i < v.rows; ++i)
    for (int64_t j = 0; j < v.cols; ++j)
      v.base[i * v.s0 + j * v.s1] = src[i * v.cols + j];
}

bool fitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

/// C = alpha * A * B + beta * C on logical views (A: MxK, B: KxN, C: MxN),
/// on the calling thread. Returns false (after reporting) when a dimension
/// exceeds BLAS's int.
template <typename T>
bool gemmSerial(const char *name, View<T> a, View<T> b, View<T> c, T alpha,
               T beta) {
  int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0)
    return true;
  if (k == 0 || alpha == T(0)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T &x = c.base[i * c.s0 + j * c.s1];
        x = beta == T(0) ? T(0) : beta * x;
      }
    return true;
  }
  std::vector<T> tmpA, tmpB, tmpC;
  Layout la, lb, lc;
  if (!blasLayout(a, la)) {
    tmpA.resize(static_cast<size_t>(a.rows * a.cols));
    gather(a, tmpA.data());
    a = {tmpA.data(), a.rows, a.cols, a.cols, 1};
    la = {false, std::max<int64_t>(1, a.cols)};
  }
  if (!blasLayout(b, lb)) {
    tmpB.resize(static_cast<size_t>(b.rows * b.cols));
    gather(b, tmpB.data());
    b = {tmpB.data(), b.rows, b.cols, b.cols, 1};
    lb = {false, std::max<int64_t>(1, b.cols)};
  }
  View<T> out = c;
  bool copyC = !blasLayout(c, lc);
  if (copyC) {
    tmpC.assign(static_cast<size_t>(m * n), T(0));
    if (beta != T(0))
      gather(c, tmpC.data());
    out = {tmpC.data(), m, n, n, 1};
    lc = {false, std::max<int64_t>(1, n)};
  }
  if (!fitsInt(m) || !fitsInt(n) || !fitsInt(k) || !fitsInt(la.ld) ||
      !fitsInt(lb.ld) || !fitsInt(lc.ld)) {
    dort_set_pending_error(1,
                           "%s: dimensions or strides exceed the BLAS int "
                           "range (M=%lld N=%lld K=%lld)",
                           name, (long long)m, (long long)n, (long long)k);
    return false;
  }
  // One row or one column of C: a matrix-vector product. GEMM would pack
  // the whole matrix operand on every call (Debian's OpenBLAS 0.3.21 does
  // not forward these shapes to GEMV): a batch-1 MLP spent most of its
  // time packing weights. The matrix is read row-major as stored (or as its
  // transpose when stored column-major); vector strides are the views'.
  if (m == 1 || n == 1) {
    bool row = m == 1; // c^T = B^T a^T; else c = A b
    const View<T> &mat = row ? b : a, &vec = row ? a : b;
    const Layout &lm = row ? lb : la;
    int64_t incx = k == 1 ? 1 : (row ? vec.s1 : vec.s0);
    int64_t incy = row ? (n == 1 ? 1 : out.s1) : (m == 1 ? 1 : out.s0);
    if (fitsInt(incx) && fitsInt(incy) && incx > 0 && incy > 0) {
      // mat is k x n (row) or m x k; stored row-major it is used as is
      // (row: transposed), stored column-major as its transpose.
      int64_t rows = lm.colMajor ? mat.cols : mat.rows;
      int64_t cols = lm.colMajor ? mat.rows : mat.cols;
      CBLAS_TRANSPOSE t = lm.colMajor == row ? CblasNoTrans : CblasTrans;
      // beta = 0 ignores what C held (NaN included) whatever BLAS's scaling.
      if (beta == T(0))
        for (int64_t i = 0; i < std::max(m, n); ++i)
          out.base[i * incy] = T(0);
      Blas<T>::gemv(t, static_cast<int>(rows), static_cast<int>(cols), alpha,
                    mat.base, static_cast<int>(lm.ld), vec.base,
                    static_cast<int>(incx), beta, out.base,
                    static_cast<int>(incy));
      if (copyC)
        scatter(tmpC.data(), c);
      return true;
    }
  }
  // Compute in C's storage order; an operand stored the other way is
  // passed transposed.
  CBLAS_ORDER order = lc.colMajor ? CblasColMajor : CblasRowMajor;
  CBLAS_TRANSPOSE ta = la.colMajor == lc.colMajor ? CblasNoTrans : CblasTrans;
  CBLAS_TRANSPOSE tb = lb.colMajor == lc.colMajor ? CblasNoTrans : CblasTrans;
  Blas<T>::gemm(order, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a.base, static_cast<int>(la.ld),
                b.base, static_cast<int>(lb.ld), beta, out.base,
                static_cast<int>(lc.ld));
  if (copyC)
    scatter(tmpC.data(), c);
  return true;
}

/// What a block of C needs besides its GEMM: nothing.
struct NoEpilogue {
  template <typename T> void before(const View<T> &, int64_t, int64_t) const {}
  template <typename T> void after(const View<T> &, int64_t, int64_t) const {}
};

/// gemmSerial on up to `threads` threads: C is cut into row blocks (or
/// column blocks when C is wider than tall, so that each thread packs only
/// its part of B), one per thread; each block is an independent GEMM on
/// views of the operands. `epi.before` and `epi.after` run on each block of
/// C (with its first row and column) on its thread, before and after its
/// GEMM, while it is in cache.
template <typename T, typename Epi = NoEpilogue>
bool gemmViews(const char *name, View<T> a, View<T> b, View<T> c, T alpha,
               T beta, int threads, const Epi &epi = Epi()) {
  int64_t m = c.rows, n = c.cols, k = a.cols;
  threads = threadsFor(m * n * std::max<int64_t>(k, 1), threads);
  if (threads <= 1 || (m < 2 && n < 2)) {
    epi.before(c, 0, 0);
    bool ok = gemmSerial(name, a, b, c, alpha, beta);
    if (ok)
      epi.after(c, 0, 0);
    return ok;
  }
  bool byRows = m >= n;
  int64_t extent = byRows ? m : n;
  int parts = static_cast<int>(std::min<int64_t>(threads, extent));
  std::atomic<bool> ok{true};
  parallelFor(parts, parts, [&](int64_t p) {
    int64_t lo = extent * p / parts, hi = extent * (p + 1) / parts;
    View<T> pa = a, pb = b, pc = c;
    if (byRows) {
      pa.base += lo * a.s0;
      pa.rows = hi - lo;
      pc.base += lo * c.s0;
      pc.rows = hi - lo;
    } else {
      pb.base += lo * b.s1;
      pb.cols = hi - lo;
      pc.base += lo * c.s1;
      pc.cols = hi - lo;
    }
    epi.before(pc, byRows ? lo : 0, byRows ? 0 : lo);
    if (!gemmSerial(name, pa, pb, pc, alpha, beta))
      ok = false;
    else
      epi.after(pc, byRows ? lo : 0, byRows ? 0 : lo);
  });
  return ok;
}

using distopt::runtime::MemRef;

/// The view of op(X) for the last two dimensions of a memref at `base`.
template <typename T, int R>
View<T> opView(const MemRef<T, R> &m, T *base, bool trans) {
  int64_t r = m.sizes[R - 2], c = m.sizes[R - 1];
  int64_t s0 = m.strides[R - 2], s1 = m.strides[R - 1];
  if (trans)
    return {base, c, r, s1, s0};
  return {base, r, c, s0, s1};
}

template <typename T, int R>
bool checkSizes(const char *name, const char *which, const MemRef<T, R> *m) {
  if (!m || !m->aligned) {
    dort_set_pending_error(1, "%s: memref %s is null", name, which);
    return false;
  }
  for (int i = 0; i < R; ++i)
    if (m->sizes[i] < 0) {
      dort_set_pending_error(1, "%s: memref %s has negative size %lld", name,
                             which, (long long)m->sizes[i]);
      return false;
    }
  return true;
}

/// The operands of a (batched) matrix product: the kernel's name for its
/// errors (`caller`, else `dort_<kind>_<suffix>`), and op(A), op(B) and C
/// as views of their last two dimensions; false after a pending error on
/// negative sizes.
template <typename T, int R> struct GemmOperands {
  char name[64];
  View<T> a, b, c;

  bool take(const MemRef<T, R> *ma, const MemRef<T, R> *mb,
            const MemRef<T, R> *mc, int32_t transA, int32_t transB,
            const char *kind, const char *caller) {
    if (caller)
      std::snprintf(name, sizeof(name), "%s", caller);
    else
      std::snprintf(name, sizeof(name), "dort_%s_%s", kind, Blas<T>::suffix);
    if (!checkSizes(name, "A", ma) || !checkSizes(name, "B", mb) ||
        !checkSizes(name, "C", mc))
      return false;
    a = opView(*ma, ma->aligned + ma->offset, transA != 0);
    b = opView(*mb, mb->aligned + mb->offset, transB != 0);
    c = opView(*mc, mc->aligned + mc->offset, false);
    return true;
  }
};

template <typename T>
void matmul2d(const MemRef<T, 2> *a, const MemRef<T, 2> *b,
              const MemRef<T, 2> *c, int32_t transA, int32_t transB, T alpha,
              T beta, const char *caller = nullptr) {
  GemmOperands<T, 2> ops;
  if (!ops.take(a, b, c, transA, transB, "matmul", caller))
    return;
  const char *name = ops.name;
  View<T> &va = ops.a, &vb = ops.b, &vc = ops.c;
  if (va.cols != vb.rows || va.rows != vc.rows || vb.cols != vc.cols) {
    dort_set_pending_error(
        1,
        "%s: shape mismatch: op(A) is %lldx%lld, op(B) is %lldx%lld, C is "
        "%lldx%lld (transA=%d, transB=%d)",
        name, (long long)va.rows, (long long)va.cols, (long long)vb.rows,
        (long long)vb.cols, (long long)vc.rows, (long long)vc.cols, (int)transA,
        (int)transB);
    return;
  }
  ensureThreads();
  gemmViews(name, va, vb, vc, alpha, beta, teamSize());
}

template <typename T>
void matmul3d(const MemRef<T, 3> *a, const MemRef<T, 3> *b,
              const MemRef<T, 3> *c, int32_t transA, int32_t transB, T alpha,
              T beta, const char *caller = nullptr) {
  GemmOperands<T, 3> ops;
  if (!ops.take(a, b, c, transA, transB, "batch_matmul", caller))
    return;
  const char *name = ops.name;
  View<T> &va = ops.a, &vb = ops.b, &vc = ops.c;
  int64_t batch = c->sizes[0];
  bool batchOk = (a->sizes[0] == batch || a->sizes[0] == 1) &&
                 (b->sizes[0] == batch || b->sizes[0] == 1);
  if (!batchOk || va.cols != vb.rows || va.rows != vc.rows ||
      vb.cols != vc.cols) {
    dort_set_pending_error(
        1,
        "%s: shape mismatch: op(A) is %lldx%lldx%lld, op(B) is "
        "%lldx%lldx%lld, C is %lldx%lldx%lld (transA=%d, transB=%d)",
        name, (long long)a->sizes[0], (long long)va.rows, (long long)va.cols,
        (long long)b->sizes[0], (long long)vb.rows, (long long)vb.cols,
        (long long)batch, (long long)vc.rows, (long long)vc.cols, (int)transA,
        (int)transB);
    return;
  }
  if (batch == 0)
    return;
  ensureThreads();
  // Batch strides; a batch of size 1 is broadcast whatever its stride.
  int64_t sa = a->sizes[0] == 1 ? 0 : a->strides[0];
  int64_t sb = b->sizes[0] == 1 ? 0 : b->strides[0];
  int64_t sc = c->strides[0];
  int64_t m = vc.rows;
  // Shared B and row-major op(A)/C whose batches follow each other row by
  // row: one GEMM of (batch*M) x K by K x N.
  if (batch > 1 && sb == 0 && m > 0) {
    auto stacked = [&](const View<T> &v, int64_t batchStride, int64_t &ld) {
      if (!(v.s1 == 1 || v.cols == 1))
        return false;
      ld = v.rows == 1 ? batchStride : v.s0;
      return ld >= std::max<int64_t>(1, v.cols) && batchStride == m * ld;
    };
    int64_t lda, ldc;
    if (stacked(va, sa, lda) && stacked(vc, sc, ldc)) {
      View<T> fa{va.base, batch * m, va.cols, lda, 1};
      View<T> fc{vc.base, batch * m, vc.cols, ldc, 1};
      gemmViews(name, fa, vb, fc, alpha, beta, teamSize());
      return;
    }
  }
  auto item = [&](int64_t i, int threads) {
    View<T> ba = va, bb = vb, bc = vc;
    ba.base += i * sa;
    bb.base += i * sb;
    bc.base += i * sc;
    return gemmViews(name, ba, bb, bc, alpha, beta, threads);
  };
  // Enough batch items for every thread: one thread per item, each GEMM
  // serial. Otherwise the items run one after another, each cut across the
  // threads.
  int threads = teamSize();
  if (batch >= threads) {
    std::atomic<bool> ok{true};
    int use = threadsFor(batch * m * vc.cols * std::max<int64_t>(va.cols, 1),
                         threads);
    parallelFor(batch, use, [&](int64_t i) {
      if (ok && !item(i, 1))
        ok = false;
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    if (!item(i, threads))
      return;
}

template <typename T, int R, typename D> const MemRef<T, R> *cast(D *d) {
  static_assert(sizeof(D) == sizeof(MemRef<T, R>), "descriptor layout");
  return reinterpret_cast<const MemRef<T, R> *>(d);
}

} // namespace

namespace {
/// $DISTOPT_EMULATE_THREADS: 1 forward, 0 reverse, -1 unset or empty, -2
/// anything else.
int emulationOrderFromEnv() {
  const char *v = std::getenv("DISTOPT_EMULATE_THREADS");
  if (!v || !*v)
    return -1;
  if (std::strcmp(v, "forward") == 0)
    return 1;
  if (std::strcmp(v, "reverse") == 0)
    return 0;
  return -2;
}
} // namespace

extern "C" int32_t dort_emulate_threads_forward(int32_t dflt) {
  static const int order = emulationOrderFromEnv();
  return order >= 0 ? order : (dflt != 0);
}

extern "C" int dort_emulate_threads_check(void) {
  if (emulationOrderFromEnv() != -2)
    return 0;
  return dort_set_error(1,
                        "DISTOPT_EMULATE_THREADS must be forward or reverse, "
                        "got '%s'",
                        std::getenv("DISTOPT_EMULATE_THREADS"));
}

extern "C" const char *dort_blas_kernels(void) {
  const char *name = openblas_get_corename ? openblas_get_corename() : nullptr;
  return name && *name ? name : "unknown";
}

extern "C" int dort_set_num_threads(int n) {
  int cpus = availableCpus();
  unsigned hw = std::thread::hardware_concurrency();
  bool bound = hw != 0 && cpus < static_cast<int>(hw);
  if (n <= 0)
    n = positiveEnv("DISTOPT_NUM_THREADS");
  if (n <= 0)
    n = positiveEnv("OMP_NUM_THREADS");
  if (n <= 0) {
    // A process the launcher bound to some cores uses them all; unbound
    // processes of one job share the node's cores.
    n = bound ? cpus : std::max(1, cpus / localProcesses());
  }
  // Pin the threads to distinct cores (unless the user chose a policy),
  // so that two never share a core while another idles; Linux can leave
  // them so for tens of milliseconds. Only where this process owns its
  // cores: unbound processes of one job would all pin to the first ones.
  // libomp reads this when it starts, at its first call just below.
  if (bound || localProcesses() == 1) {
    if (!std::getenv("OMP_PROC_BIND") && !std::getenv("OMP_PLACES")) {
      ::setenv("OMP_PROC_BIND", "spread", 0);
      ::setenv("OMP_PLACES", "cores", 0);
    }
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
  static std::once_flag stopWorkers;
  std::call_once(stopWorkers, [] {
    if (blas_thread_shutdown_)
      blas_thread_shutdown_();
  });
  threadsConfigured.store(true, std::memory_order_release);
  return n;
}

namespace {

/// A convolution's weights [M, C/G, kh, kw] (any strides) as a packed
/// [M, K] matrix, K = C/G·kh·kw: the weights themselves when they are
/// packed already, else a packed copy.
template <typename T> struct PackedWeights {
  std::vector<T> copy;
  const T *data;
};

template <typename T> PackedWeights<T> packedWeights(const MemRef<T, 4> *w) {
  const int64_t m = w->sizes[0], cg = w->sizes[1], kh = w->sizes[2],
                kw = w->sizes[3];
  const T *wb = w->aligned + w->offset;
  const int64_t *st = w->strides;
  auto dense = [&](int d, int64_t stride) {
    return w->sizes[d] == 1 || st[d] == stride;
  };
  if (dense(3, 1) && dense(2, kw) && dense(1, kh * kw) &&
      dense(0, cg * kh * kw))
    return {{}, wb};
  PackedWeights<T> p{std::vector<T>(static_cast<size_t>(m * cg * kh * kw)),
                     nullptr};
  for (int64_t o = 0; o < m; ++o)
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t u = 0; u < kh; ++u)
        for (int64_t v = 0; v < kw; ++v)
          p.copy[((o * cg + ci) * kh + u) * kw + v] =
              wb[o * st[0] + ci * st[1] + u * st[2] + v * st[3]];
  p.data = p.copy.data();
  return p;
}

/// The convolution on the CPU (for cuda-emu bundles): per sample and group,
/// an im2col of the sample into a scratch matrix and one GEMM with the
/// group's weights; samples and groups spread over the thread pool.
template <typename T>
void conv2d(const MemRef<T, 4> *x, const MemRef<T, 4> *w, const MemRef<T, 4> *y,
            int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, int64_t groups) {
  char name[64];
  std::snprintf(name, sizeof(name), "dort_conv2d_%s", Blas<T>::suffix);
  if (!checkSizes(name, "x", x) || !checkSizes(name, "w", w) ||
      !checkSizes(name, "y", y) ||
      !distopt::runtime::conv2dShapesFit(name, x->sizes, w->sizes, y->sizes,
                                         sh, sw, ph, pw, dh, dw, groups))
    return;
  const int64_t n = x->sizes[0], c = x->sizes[1], h = x->sizes[2],
                wd = x->sizes[3];
  const int64_t m = w->sizes[0], kh = w->sizes[2], kw = w->sizes[3];
  const int64_t ho = y->sizes[2], wo = y->sizes[3];
  const int64_t cg = c / groups, mg = m / groups, k = cg * kh * kw,
                p = ho * wo;
  if (n == 0 || m == 0 || p == 0)
    return;
  const T *xb = x->aligned + x->offset;
  T *yb = y->aligned + y->offset;
  if (k == 0) { // a sum of nothing
    for (int64_t a = 0; a < n; ++a)
      for (int64_t o = 0; o < m; ++o)
        for (int64_t i = 0; i < ho; ++i)
          for (int64_t j = 0; j < wo; ++j)
            yb[a * y->strides[0] + o * y->strides[1] + i * y->strides[2] +
               j * y->strides[3]] = T(0);
    return;
  }
  const PackedWeights<T> wp = packedWeights(w);
  const int64_t *xs = x->strides, *ys = y->strides;
  ensureThreads();
  int threads = threadsFor(n * m * p * k, teamSize());
  parallelFor(n * groups, threads, [&](int64_t item) {
    int64_t ni = item / groups, g = item % groups;
    std::vector<T> col(static_cast<size_t>(k * p)),
        out(static_cast<size_t>(mg * p));
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t u = 0; u < kh; ++u)
        for (int64_t v = 0; v < kw; ++v) {
          T *row = col.data() + ((ci * kh + u) * kw + v) * p;
          const T *plane = xb + ni * xs[0] + (g * cg + ci) * xs[1];
          for (int64_t i = 0; i < ho; ++i) {
            int64_t r = i * sh + u * dh - ph;
            for (int64_t j = 0; j < wo; ++j) {
              int64_t q = j * sw + v * dw - pw;
              row[i * wo + j] = (r >= 0 && r < h && q >= 0 && q < wd)
                                    ? plane[r * xs[2] + q * xs[3]]
                                    : T(0);
            }
          }
        }
    Blas<T>::gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                  static_cast<int>(mg), static_cast<int>(p),
                  static_cast<int>(k), T(1), wp.data + g * mg * k,
                  static_cast<int>(k), col.data(), static_cast<int>(p), T(0),
                  out.data(), static_cast<int>(p));
    for (int64_t o = 0; o < mg; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j)
          yb[ni * ys[0] + (g * mg + o) * ys[1] + i * ys[2] + j * ys[3]] =
              out[(o * ho + i) * wo + j];
  });
}

/// The input gradient of that convolution (a transposed convolution: what
/// every target runs dopt.conv_transpose as, on CPUs this): per chunk of
/// samples and group, one GEMM of the group's weights (transposed) with the
/// samples' dy into columns [C/G·kh·kw, samples·ho·wo], added back into dx
/// where each column's window lies (col2im); chunks, groups and blocks of
/// input channels spread over the thread pool.
template <typename T>
void conv2dBackwardData(const MemRef<T, 4> *dy, const MemRef<T, 4> *w,
                        const MemRef<T, 4> *dx, int64_t sh, int64_t sw,
                        int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                        int64_t groups) {
  char name[64];
  std::snprintf(name, sizeof(name), "dort_conv2d_backward_data_%s",
                Blas<T>::suffix);
  if (!checkSizes(name, "dy", dy) || !checkSizes(name, "w", w) ||
      !checkSizes(name, "dx", dx) ||
      !distopt::runtime::conv2dShapesFit(name, dx->sizes, w->sizes, dy->sizes,
                                         sh, sw, ph, pw, dh, dw, groups))
    return;
  const int64_t n = dx->sizes[0], c = dx->sizes[1], h = dx->sizes[2],
                wd = dx->sizes[3];
  const int64_t m = w->sizes[0], kh = w->sizes[2], kw = w->sizes[3];
  const int64_t ho = dy->sizes[2], wo = dy->sizes[3];
  const int64_t cg = c / groups, mg = m / groups, k = cg * kh * kw,
                p = ho * wo;
  if (n == 0 || c == 0 || h == 0 || wd == 0)
    return; // dx is empty
  const T *db = dy->aligned + dy->offset;
  T *xb = dx->aligned + dx->offset;
  const int64_t *xs = dx->strides, *ys = dy->strides;
  const PackedWeights<T> wp = packedWeights(w);
  ensureThreads();
  int threads = threadsFor(n * m * p * k, teamSize());
  // Items: a chunk of samples, a group and a block of the group's input
  // channels, each writing its own part of dx. A chunk's samples share one
  // GEMM (their dy side by side: [M/G, samples·P]; one sample's P can be a
  // single pixel, a GEMV), as many as keep the columns under about 2 M
  // elements; as many channel blocks as keep every thread busy when chunks
  // x groups are fewer than threads.
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // (n, groups and cg are at least 1 here.)
  const int64_t perSample = std::max<int64_t>(std::max(k, mg) * p, 1);
  int64_t chunk = std::clamp<int64_t>((int64_t(1) << 21) / perSample, 1, n);
  // Enough items for every thread before splitting channels further.
  chunk = std::min(chunk, ceilDiv(n, ceilDiv(threads, groups * cg)));
  const int64_t chunks = ceilDiv(n, chunk);
  const int64_t blocks =
      std::clamp<int64_t>(ceilDiv(threads, chunks * groups), 1, cg);
  const int64_t items = chunks * groups * blocks;
  parallelFor(items, static_cast<int>(std::min<int64_t>(threads, items)),
              [&](int64_t item) {
    int64_t ch = item / (groups * blocks), g = item / blocks % groups,
            blk = item % blocks;
    int64_t n0 = ch * chunk, n1 = std::min(n, n0 + chunk), cols = (n1 - n0) * p;
    int64_t c0 = cg * blk / blocks, c1 = cg * (blk + 1) / blocks;
    for (int64_t a = n0; a < n1; ++a)
      for (int64_t ci = c0; ci < c1; ++ci)
        for (int64_t r = 0; r < h; ++r)
          for (int64_t q = 0; q < wd; ++q)
            xb[a * xs[0] + (g * cg + ci) * xs[1] + r * xs[2] + q * xs[3]] =
                T(0);
    const int64_t rows = (c1 - c0) * kh * kw;
    if (mg == 0 || cols == 0 || rows == 0)
      return; // a sum of nothing
    std::vector<T> grad(static_cast<size_t>(mg * cols)),
        col(static_cast<size_t>(rows * cols));
    for (int64_t o = 0; o < mg; ++o)
      for (int64_t a = n0; a < n1; ++a)
        for (int64_t i = 0; i < ho; ++i)
          for (int64_t j = 0; j < wo; ++j)
            grad[o * cols + (a - n0) * p + i * wo + j] =
                db[a * ys[0] + (g * mg + o) * ys[1] + i * ys[2] + j * ys[3]];
    // col = W[g][:, block's columns]^T @ grad: [rows, samples·P].
    Blas<T>::gemm(CblasRowMajor, CblasTrans, CblasNoTrans,
                  static_cast<int>(rows), static_cast<int>(cols),
                  static_cast<int>(mg), T(1),
                  wp.data + g * mg * k + c0 * kh * kw, static_cast<int>(k),
                  grad.data(), static_cast<int>(cols), T(0), col.data(),
                  static_cast<int>(cols));
    // The output columns j whose q = j·sw + v·dw − pw lies in [0, W), per
    // kernel column v: no test in the innermost loop.
    auto firstInside = [](int64_t offset, int64_t stride) {
      return offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    };
    for (int64_t a = n0; a < n1; ++a)
      for (int64_t ci = c0; ci < c1; ++ci)
        for (int64_t u = 0; u < kh; ++u)
          for (int64_t v = 0; v < kw; ++v) {
            const T *row = col.data() +
                           (((ci - c0) * kh + u) * kw + v) * cols +
                           (a - n0) * p;
            T *plane = xb + a * xs[0] + (g * cg + ci) * xs[1];
            const int64_t q0 = v * dw - pw;
            const int64_t jlo = firstInside(q0, sw);
            const int64_t jhi =
                wd - 1 - q0 < 0 ? 0 : std::min(wo, (wd - 1 - q0) / sw + 1);
            const int64_t i0 = u * dh - ph;
            const int64_t ilo = firstInside(i0, sh);
            const int64_t ihi =
                h - 1 - i0 < 0 ? 0 : std::min(ho, (h - 1 - i0) / sh + 1);
            const int64_t step = sw * xs[3];
            for (int64_t i = ilo; i < ihi; ++i) {
              // From the first column inside dx (q >= 0).
              T *out = plane + (i * sh + i0) * xs[2] + (jlo * sw + q0) * xs[3];
              const T *in = row + i * wo + jlo;
              for (int64_t j = 0; j < jhi - jlo; ++j)
                out[j * step] += in[j];
            }
          }
  });
}

} // namespace

bool distopt::runtime::conv2dShapesFit(const char *name, const int64_t *xs,
                                       const int64_t *ws, const int64_t *ys,
                                       int64_t sh, int64_t sw, int64_t ph,
                                       int64_t pw, int64_t dh, int64_t dw,
                                       int64_t groups) {
  bool ok = sh > 0 && sw > 0 && dh > 0 && dw > 0 && ph >= 0 && pw >= 0 &&
            groups > 0 && xs[1] % groups == 0 && ws[0] % groups == 0 &&
            ws[1] == xs[1] / groups && ys[0] == xs[0] && ys[1] == ws[0] &&
            ys[2] == convOutputSize(xs[2], ws[2], sh, ph, dh) &&
            ys[3] == convOutputSize(xs[3], ws[3], sw, pw, dw);
  if (!ok)
    dort_set_pending_error(
        1,
        "%s: shapes do not fit: x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, "
        "y %lldx%lldx%lldx%lld, strides %lldx%lld, pads %lldx%lld, dilations "
        "%lldx%lld, groups %lld",
        name, (long long)xs[0], (long long)xs[1], (long long)xs[2],
        (long long)xs[3], (long long)ws[0], (long long)ws[1], (long long)ws[2],
        (long long)ws[3], (long long)ys[0], (long long)ys[1], (long long)ys[2],
        (long long)ys[3], (long long)sh, (long long)sw, (long long)ph,
        (long long)pw, (long long)dh, (long long)dw, (long long)groups);
  return ok;
}

void distopt::runtime::CpuDevice::conv2d_f32(MemRef4DF32 *x, MemRef4DF32 *w,
                                             MemRef4DF32 *y, int64_t sh,
                                             int64_t sw, int64_t ph, int64_t pw,
                                             int64_t dh, int64_t dw,
                                             int64_t groups) {
  conv2d<float>(cast<float, 4>(x), cast<float, 4>(w), cast<float, 4>(y), sh,
                sw, ph, pw, dh, dw, groups);
}

void distopt::runtime::CpuDevice::conv2d_f64(MemRef4DF64 *x, MemRef4DF64 *w,
                                             MemRef4DF64 *y, int64_t sh,
                                             int64_t sw, int64_t ph, int64_t pw,
                                             int64_t dh, int64_t dw,
                                             int64_t groups) {
  conv2d<double>(cast<double, 4>(x), cast<double, 4>(w), cast<double, 4>(y),
                 sh, sw, ph, pw, dh, dw, groups);
}

void distopt::runtime::CpuDevice::conv2d_backward_data_f32(
    MemRef4DF32 *dy, MemRef4DF32 *w, MemRef4DF32 *dx, int64_t sh, int64_t sw,
    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  conv2dBackwardData<float>(cast<float, 4>(dy), cast<float, 4>(w),
                            cast<float, 4>(dx), sh, sw, ph, pw, dh, dw,
                            groups);
}

void distopt::runtime::CpuDevice::conv2d_backward_data_f64(
    MemRef4DF64 *dy, MemRef4DF64 *w, MemRef4DF64 *dx, int64_t sh, int64_t sw,
    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  conv2dBackwardData<double>(cast<double, 4>(dy), cast<double, 4>(w),
                             cast<double, 4>(dx), sh, sw, ph, pw, dh, dw,
                             groups);
}

void distopt::runtime::CpuDevice::matmul_f32(MemRef2DF32 *a, MemRef2DF32 *b,
                                             MemRef2DF32 *c, int32_t transA,
                                             int32_t transB, float alpha,
                                             float beta) {
  matmul2d<float>(cast<float, 2>(a), cast<float, 2>(b), cast<float, 2>(c),
                  transA, transB, alpha, beta);
}

void distopt::runtime::CpuDevice::matmul_f64(MemRef2DF64 *a, MemRef2DF64 *b,
                                             MemRef2DF64 *c, int32_t transA,
                                             int32_t transB, double alpha,
                                             double beta) {
  matmul2d<double>(cast<double, 2>(a), cast<double, 2>(b), cast<double, 2>(c),
                   transA, transB, alpha, beta);
}

namespace {

/// A 16-bit operand widened to a dense f32 copy (same sizes, row-major),
/// for OpenBLAS's f32 GEMM: exact, as the f32 accumulation of the GPU's
/// 16-bit GEMM is.
template <int R, float (*Widen)(uint16_t)> struct WidenedOperand {
  std::vector<float> data;
  MemRef<float, R> ref{};
  explicit WidenedOperand(const MemRef<uint16_t, R> *m) {
    int64_t n = 1;
    for (int i = 0; i < R; ++i)
      n *= std::max<int64_t>(m->sizes[i], 0);
    data.resize(static_cast<size_t>(n));
    ref.allocated = ref.aligned = data.data();
    ref.offset = 0;
    int64_t stride = 1;
    for (int i = R - 1; i >= 0; --i) {
      ref.sizes[i] = m->sizes[i];
      ref.strides[i] = stride;
      stride *= std::max<int64_t>(m->sizes[i], 1);
    }
    const uint16_t *base = m->aligned + m->offset;
    // Packed row-major (the common case): chunks converted in parallel.
    bool packed = true;
    for (int i = R - 1, want = 1; i >= 0; --i) {
      packed &= m->sizes[i] <= 1 || m->strides[i] == want;
      want *= std::max<int64_t>(m->sizes[i], 1);
    }
    if (packed) {
      constexpr int64_t kChunk = 1 << 14;
      int64_t chunks = (n + kChunk - 1) / kChunk;
      float *out = data.data();
      parallelFor(chunks, std::min<int64_t>(teamSize(), chunks), [&](int64_t c) {
        int64_t end = std::min(n, (c + 1) * kChunk);
        for (int64_t e = c * kChunk; e < end; ++e)
          out[e] = Widen(base[e]);
      });
      return;
    }
    int64_t index[R] = {};
    for (int64_t e = 0; e < n; ++e) {
      int64_t at = 0;
      for (int i = 0; i < R; ++i)
        at += index[i] * m->strides[i];
      data[static_cast<size_t>(e)] = Widen(base[at]);
      for (int i = R - 1; i >= 0 && ++index[i] == m->sizes[i]; --i)
        index[i] = 0;
    }
  }
};

/// A bf16 GEMM on oneDNN (OneDNN.h), the operands read in place: false
/// where oneDNN is not there or declines (the caller widens to f32 then).
template <int R>
bool onednnGemm(const MemRef<uint16_t, R> *a, const MemRef<uint16_t, R> *b,
                const MemRef<float, R> *c, bool transA, bool transB,
                float alpha, float beta) {
  int64_t batch = R == 3 ? c->sizes[0] : 1;
  if (R == 3 && (a->sizes[0] != batch || b->sizes[0] != batch))
    return false; // a broadcast batch: the widening path handles it
  // op(X) as BLAS sees it (opView), with the batch in front.
  auto logical = [&](const auto &m, auto *base, bool trans, int64_t shape[3],
                     int64_t strides[3]) {
    auto v = opView(m, base, trans);
    shape[0] = batch, shape[1] = v.rows, shape[2] = v.cols;
    strides[0] = R == 3 ? m.strides[0] : v.rows * v.cols;
    strides[1] = v.s0, strides[2] = v.s1;
  };
  uint16_t *aBase = a->aligned + a->offset, *bBase = b->aligned + b->offset;
  float *cBase = c->aligned + c->offset;
  distopt::runtime::GemmOperand ga{aBase, {}, {}}, gb{bBase, {}, {}};
  int64_t cs[3], cst[3];
  logical(*a, aBase, transA, ga.shape, ga.strides);
  logical(*b, bBase, transB, gb.shape, gb.strides);
  logical(*c, cBase, false, cs, cst);
  if (ga.shape[2] != gb.shape[1] || ga.shape[1] != cs[1] ||
      gb.shape[2] != cs[2])
    return false; // the widening path reports the mismatch
  if (cs[1] == 0 || cs[2] == 0)
    return true;
  return distopt::runtime::onednnGemmBF16(ga, gb, cBase, cs, cst, alpha, beta);
}

template <int R, float (*Widen)(uint16_t), typename D16, typename D32,
          typename Gemm>
void gemm16(const char *name, D16 *a, D16 *b, D32 *c, Gemm gemm,
            bool bf16 = false, bool transA = false, bool transB = false,
            float alpha = 1.0f, float beta = 0.0f) {
  const auto *ma = reinterpret_cast<const MemRef<uint16_t, R> *>(a);
  const auto *mb = reinterpret_cast<const MemRef<uint16_t, R> *>(b);
  if (!checkSizes(name, "A", ma) || !checkSizes(name, "B", mb))
    return;
  if (bf16 && checkSizes(name, "C", cast<float, R>(c)) &&
      onednnGemm<R>(ma, mb, cast<float, R>(c), transA, transB, alpha, beta))
    return;
  WidenedOperand<R, Widen> wa(ma), wb(mb);
  gemm(&wa.ref, &wb.ref, cast<float, R>(c));
}

} // namespace

#define DORT_GEMM16(NAME, WIDEN, BF16)                                         \
  void distopt::runtime::CpuDevice::matmul_##NAME##_f32(                      \
      MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DF32 *c, int32_t transA,          \
      int32_t transB, float alpha, float beta) {                               \
    gemm16<2, WIDEN>(                                                          \
        "dort_matmul_" #NAME "_f32", a, b, c,                                  \
        [&](auto *wa, auto *wb, auto *wc) {                                    \
          matmul2d<float>(wa, wb, wc, transA, transB, alpha, beta,             \
                          "dort_matmul_" #NAME "_f32");                        \
        },                                                                     \
        BF16, transA != 0, transB != 0, alpha, beta);                          \
  }                                                                            \
  void distopt::runtime::CpuDevice::batch_matmul_##NAME##_f32(                \
      MemRef3DU16 *a, MemRef3DU16 *b, MemRef3DF32 *c, int32_t transA,          \
      int32_t transB, float alpha, float beta) {                               \
    gemm16<3, WIDEN>(                                                          \
        "dort_batch_matmul_" #NAME "_f32", a, b, c,                            \
        [&](auto *wa, auto *wb, auto *wc) {                                    \
          matmul3d<float>(wa, wb, wc, transA, transB, alpha, beta,             \
                          "dort_batch_matmul_" #NAME "_f32");                  \
        },                                                                     \
        BF16, transA != 0, transB != 0, alpha, beta);                          \
  }
DORT_GEMM16(f16, distopt::runtime::f16ToFloat, false)
DORT_GEMM16(bf16, distopt::runtime::bf16ToFloat, true)
#undef DORT_GEMM16

namespace {

/// dort_matmul_epilogue_f32's steps around each thread's block of D: R
/// copied in before (unless R is D), bias and activation after.
struct BiasActivation {
  View<float> r;
  bool copyR;
  const float *bias;
  int64_t biasStride;
  int32_t act;
  void before(const View<float> &d, int64_t row0, int64_t col0) const {
    if (!copyR)
      return;
    for (int64_t i = 0; i < d.rows; ++i)
      for (int64_t j = 0; j < d.cols; ++j)
        d.base[i * d.s0 + j * d.s1] =
            r.base[(row0 + i) * r.s0 + (col0 + j) * r.s1];
  }
  void after(const View<float> &d, int64_t, int64_t col0) const {
    for (int64_t i = 0; i < d.rows; ++i)
      for (int64_t j = 0; j < d.cols; ++j) {
        float &x = d.base[i * d.s0 + j * d.s1];
        float v = bias ? x + bias[(col0 + j) * biasStride] : x;
        if (act == DORT_ACT_RELU)
          v = v < 0.0f ? 0.0f : v; // NaN stays NaN, as arith.maximumf
        else if (act == DORT_ACT_GELU_TANH)
          v = 0.5f * v *
              (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
        x = v;
      }
  }
};

} // namespace

namespace {

/// False (after reporting) when the call cannot be made.
bool matmulEpilogue(const char *name, const MemRef<float, 2> *ma,
                    const MemRef<float, 2> *mb, const MemRef<float, 2> *md,
                    const MemRef<float, 2> *mr, const MemRef<float, 1> *mbias,
                    int32_t transA, int32_t transB, float alpha, float beta,
                    int32_t act, int32_t hasBias) {
  if (!checkSizes(name, "A", ma) || !checkSizes(name, "B", mb) ||
      !checkSizes(name, "D", md) ||
      (beta != 0.0f && !checkSizes(name, "R", mr)))
    return false;
  View<float> va = opView(*ma, ma->aligned + ma->offset, transA != 0);
  View<float> vb = opView(*mb, mb->aligned + mb->offset, transB != 0);
  View<float> vd = opView(*md, md->aligned + md->offset, false);
  int64_t m = vd.rows, n = vd.cols;
  if (va.cols != vb.rows || va.rows != m || vb.cols != n) {
    dort_set_pending_error(
        1,
        "%s: shape mismatch: op(A) is %lldx%lld, op(B) is %lldx%lld, D is "
        "%lldx%lld (transA=%d, transB=%d)",
        name, (long long)va.rows, (long long)va.cols, (long long)vb.rows,
        (long long)vb.cols, (long long)m, (long long)n, (int)transA,
        (int)transB);
    return false;
  }
  if (beta != 0.0f && (mr->sizes[0] != m || mr->sizes[1] != n)) {
    dort_set_pending_error(1, "%s: R is %lldx%lld, D is %lldx%lld", name,
                           (long long)mr->sizes[0], (long long)mr->sizes[1],
                           (long long)m, (long long)n);
    return false;
  }
  if (hasBias && (!mbias || !mbias->aligned || mbias->sizes[0] != n)) {
    dort_set_pending_error(1, "%s: the bias has %lld elements, D %lld columns",
                           name, mbias ? (long long)mbias->sizes[0] : -1LL,
                           (long long)n);
    return false;
  }
  if (act != DORT_ACT_NONE && act != DORT_ACT_RELU &&
      act != DORT_ACT_GELU_TANH) {
    dort_set_pending_error(1, "%s: unknown activation %d", name, (int)act);
    return false;
  }
  BiasActivation epi{};
  if (beta != 0.0f) {
    epi.r = opView(*mr, mr->aligned + mr->offset, false);
    epi.copyR = epi.r.base != vd.base || epi.r.s0 != vd.s0 || epi.r.s1 != vd.s1;
  }
  epi.bias = hasBias ? mbias->aligned + mbias->offset : nullptr;
  epi.biasStride = hasBias ? mbias->strides[0] : 0;
  epi.act = act;
  ensureThreads();
  return gemmViews(name, va, vb, vd, alpha, beta, teamSize(), epi);
}

/// The 16-bit epilogue GEMM: the f32 one on widened copies, D rounded once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void matmulEpilogue16(const char *name, MemRef2DU16 *a, MemRef2DU16 *b,
                      MemRef2DU16 *d, MemRef2DU16 *r, MemRef1DU16 *bias,
                      int32_t transA, int32_t transB, float alpha, float beta,
                      int32_t act, int32_t hasBias) {
  using M2 = MemRef<uint16_t, 2>;
  const auto *ma = reinterpret_cast<const M2 *>(a);
  const auto *mb = reinterpret_cast<const M2 *>(b);
  const auto *md = reinterpret_cast<const M2 *>(d);
  const auto *mr = reinterpret_cast<const M2 *>(r);
  const auto *mbias = reinterpret_cast<const MemRef<uint16_t, 1> *>(bias);
  if (!checkSizes(name, "A", ma) || !checkSizes(name, "B", mb) ||
      !checkSizes(name, "D", md) ||
      (beta != 0.0f && !checkSizes(name, "R", mr)) ||
      (hasBias && !checkSizes(name, "bias", mbias)))
    return;
  WidenedOperand<2, Widen> wa(ma), wb(mb);
  // D in f32, dense: written whole by the GEMM (R widened on its own).
  std::vector<float> dense(static_cast<size_t>(md->sizes[0] * md->sizes[1]));
  MemRef<float, 2> wd{dense.data(), dense.data(), 0,
                      {md->sizes[0], md->sizes[1]}, {md->sizes[1], 1}};
  std::optional<WidenedOperand<2, Widen>> wr;
  std::optional<WidenedOperand<1, Widen>> wbias;
  if (beta != 0.0f)
    wr.emplace(mr);
  if (hasBias)
    wbias.emplace(mbias);
  if (!matmulEpilogue(name, &wa.ref, &wb.ref, &wd, wr ? &wr->ref : &wd,
                      wbias ? &wbias->ref : nullptr, transA, transB, alpha,
                      beta, act, hasBias))
    return;
  uint16_t *base = md->aligned + md->offset;
  for (int64_t i = 0; i < md->sizes[0]; ++i)
    for (int64_t j = 0; j < md->sizes[1]; ++j)
      base[i * md->strides[0] + j * md->strides[1]] =
          Narrow(dense[static_cast<size_t>(i * md->sizes[1] + j)]);
}

} // namespace

void distopt::runtime::CpuDevice::matmul_epilogue_f32(
    MemRef2DF32 *a, MemRef2DF32 *b, MemRef2DF32 *d, MemRef2DF32 *r,
    MemRef1DF32 *bias, int32_t transA, int32_t transB, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  matmulEpilogue("dort_matmul_epilogue_f32", cast<float, 2>(a),
                 cast<float, 2>(b), cast<float, 2>(d), cast<float, 2>(r),
                 cast<float, 1>(bias), transA, transB, alpha, beta, act,
                 hasBias);
}

void distopt::runtime::CpuDevice::matmul_epilogue_f16(
    MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DU16 *d, MemRef2DU16 *r,
    MemRef1DU16 *bias, int32_t transA, int32_t transB, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  matmulEpilogue16<distopt::runtime::f16ToFloat, distopt::runtime::floatToF16>(
      "dort_matmul_epilogue_f16", a, b, d, r, bias, transA, transB, alpha,
      beta, act, hasBias);
}

void distopt::runtime::CpuDevice::matmul_epilogue_bf16(
    MemRef2DU16 *a, MemRef2DU16 *b, MemRef2DU16 *d, MemRef2DU16 *r,
    MemRef1DU16 *bias, int32_t transA, int32_t transB, float alpha, float beta,
    int32_t act, int32_t hasBias) {
  matmulEpilogue16<distopt::runtime::bf16ToFloat, distopt::runtime::floatToBF16>(
      "dort_matmul_epilogue_bf16", a, b, d, r, bias, transA, transB, alpha,
      beta, act, hasBias);
}

void distopt::runtime::CpuDevice::batch_matmul_f32(MemRef3DF32 *a, MemRef3DF32 *b,
                                   MemRef3DF32 *c, int32_t transA,
                                   int32_t transB, float alpha, float beta) {
  matmul3d<float>(cast<float, 3>(a), cast<float, 3>(b), cast<float, 3>(c),
                  transA, transB, alpha, beta);
}

void distopt::runtime::CpuDevice::batch_matmul_f64(MemRef3DF64 *a, MemRef3DF64 *b,
                                   MemRef3DF64 *c, int32_t transA,
                                   int32_t transB, double alpha, double beta) {
  matmul3d<double>(cast<double, 3>(a), cast<double, 3>(b), cast<double, 3>(c),
                   transA, transB, alpha, beta);
}
