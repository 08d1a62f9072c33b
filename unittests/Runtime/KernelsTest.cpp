//===- KernelsTest.cpp - GEMM kernels against a naive loop ----------------===//

#include "distopt/Runtime/Half.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

extern "C" int openblas_get_num_threads(void);

namespace {

/// The pending error `call` raises, cleared before and after (a failure if
/// it raises none).
template <typename Call> std::string pendingErrorOf(Call call) {
  dort_clear_pending_error();
  call();
  const char *pending = dort_pending_error();
  EXPECT_NE(pending, nullptr) << "no pending error";
  std::string error = pending ? pending : "";
  dort_clear_pending_error();
  return error;
}

/// How a stored rows x cols matrix is laid out in its buffer.
enum class Layout { Row, RowPadded, Col, ColPadded, Strided };
const Layout kLayouts[] = {Layout::Row, Layout::RowPadded, Layout::Col,
                           Layout::ColPadded, Layout::Strided};
const char *layoutName(Layout l) {
  static const char *const kNames[] = {"row", "row-padded", "col",
                                       "col-padded", "strided"};
  return kNames[static_cast<unsigned>(l)];
}

struct Placement {
  int64_t offset, s0, s1, span; // span: elements from offset to last + 1
};

Placement place(Layout l, int64_t r, int64_t c) {
  Placement p{};
  switch (l) {
  case Layout::Row:
    p = {0, c, 1, 0};
    break;
  case Layout::RowPadded:
    p = {3, c + 5, 1, 0};
    break;
  case Layout::Col:
    p = {0, 1, r, 0};
    break;
  case Layout::ColPadded:
    p = {2, 1, r + 4, 0};
    break;
  case Layout::Strided:
    p = {1, 2 * c + 3, 2, 0};
    break;
  }
  p.span = (r == 0 || c == 0) ? 0 : (r - 1) * p.s0 + (c - 1) * p.s1 + 1;
  return p;
}

template <typename T> struct Traits;
template <> struct Traits<float> {
  using D2 = MemRef2DF32;
  using D3 = MemRef3DF32;
  static constexpr double tol = 1e-4;
  static void mm(D2 *a, D2 *b, D2 *c, int ta, int tb, float al, float be) {
    _mlir_ciface_dort_matmul_f32(a, b, c, ta, tb, al, be);
  }
  static void bmm(D3 *a, D3 *b, D3 *c, int ta, int tb, float al, float be) {
    _mlir_ciface_dort_batch_matmul_f32(a, b, c, ta, tb, al, be);
  }
};
template <> struct Traits<double> {
  using D2 = MemRef2DF64;
  using D3 = MemRef3DF64;
  static constexpr double tol = 1e-11;
  static void mm(D2 *a, D2 *b, D2 *c, int ta, int tb, double al, double be) {
    _mlir_ciface_dort_matmul_f64(a, b, c, ta, tb, al, be);
  }
  static void bmm(D3 *a, D3 *b, D3 *c, int ta, int tb, double al, double be) {
    _mlir_ciface_dort_batch_matmul_f64(a, b, c, ta, tb, al, be);
  }
};

/// A batch x rows x cols tensor in a buffer with a given layout per matrix
/// and a batch stride (0 = one matrix shared by every batch).
template <typename T> struct Stored {
  std::vector<T> buffer;
  int64_t batch, rows, cols, offset, sb, s0, s1;

  Stored(int64_t batch, int64_t rows, int64_t cols, Layout l, bool zeroBatch,
         std::mt19937 &rng, T sentinel = T(777))
      : batch(batch), rows(rows), cols(cols) {
    Placement p = place(l, rows, cols);
    offset = p.offset;
    s0 = p.s0;
    s1 = p.s1;
    sb = zeroBatch ? 0 : p.span + 7;
    int64_t matrices = zeroBatch ? 1 : batch;
    buffer.assign(static_cast<size_t>(offset +
                                      sb * std::max<int64_t>(0, matrices - 1) +
                                      p.span + 11),
                  sentinel);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int64_t b = 0; b < matrices; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          at(b, i, j) = static_cast<T>(dist(rng));
  }
  T &at(int64_t b, int64_t i, int64_t j) {
    return buffer[static_cast<size_t>(offset + b * sb + i * s0 + j * s1)];
  }
  /// Element (i, j) of op(X) for batch b.
  T op(int64_t b, int64_t i, int64_t j, bool trans) {
    return trans ? at(b, j, i) : at(b, i, j);
  }
  /// Which buffer positions hold elements.
  std::vector<bool> mask() const {
    std::vector<bool> m(buffer.size(), false);
    for (int64_t b = 0; b < (sb == 0 ? 1 : batch); ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          m[static_cast<size_t>(offset + b * sb + i * s0 + j * s1)] = true;
    return m;
  }
  template <typename D> D desc2() {
    return D{buffer.data(), buffer.data(), offset, {rows, cols}, {s0, s1}};
  }
  template <typename D> D desc3(int64_t batchSize) {
    return D{buffer.data(),
             buffer.data(),
             offset,
             {batchSize, rows, cols},
             {sb, s0, s1}};
  }
};

template <typename T>
void check2d(int64_t m, int64_t n, int64_t k, bool ta, bool tb, Layout la,
             Layout lb, Layout lc, T alpha, T beta, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message()
               << "M=" << m << " N=" << n << " K=" << k << " ta=" << ta
               << " tb=" << tb << " A:" << layoutName(la)
               << " B:" << layoutName(lb) << " C:" << layoutName(lc)
               << " alpha=" << alpha << " beta=" << beta);
  Stored<T> a(1, ta ? k : m, ta ? m : k, la, false, rng);
  Stored<T> b(1, tb ? n : k, tb ? k : n, lb, false, rng);
  Stored<T> c(1, m, n, lc, false, rng);
  std::vector<T> before = c.buffer;
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double(a.op(0, i, p, ta)) * double(b.op(0, p, j, tb));
      expected[i * n + j] =
          double(alpha) * sum + double(beta) * double(c.at(0, i, j));
    }
  auto da = a.template desc2<typename Traits<T>::D2>();
  auto db = b.template desc2<typename Traits<T>::D2>();
  auto dc = c.template desc2<typename Traits<T>::D2>();
  dort_clear_pending_error();
  Traits<T>::mm(&da, &db, &dc, ta, tb, alpha, beta);
  ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_NEAR(double(c.at(0, i, j)), expected[i * n + j], Traits<T>::tol)
          << "at " << i << "," << j;
  std::vector<bool> inC = c.mask();
  for (size_t i = 0; i < c.buffer.size(); ++i)
    if (!inC[i])
      ASSERT_EQ(c.buffer[i], before[i]) << "wrote outside C at " << i;
}

template <typename T>
void check3d(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
             Layout la, Layout lb, Layout lc, int64_t aBatch, bool aZero,
             int64_t bBatch, bool bZero, T alpha, T beta, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message()
               << "batch=" << batch << " M=" << m << " N=" << n << " K=" << k
               << " ta=" << ta << " tb=" << tb << " A:" << layoutName(la) << "/"
               << aBatch << (aZero ? "z" : "") << " B:" << layoutName(lb) << "/"
               << bBatch << (bZero ? "z" : "") << " C:" << layoutName(lc));
  Stored<T> a(aBatch, ta ? k : m, ta ? m : k, la, aZero, rng);
  Stored<T> b(bBatch, tb ? n : k, tb ? k : n, lb, bZero, rng);
  Stored<T> c(batch, m, n, lc, false, rng);
  std::vector<T> before = c.buffer;
  std::vector<double> expected(static_cast<size_t>(batch * m * n));
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        int64_t qa = aBatch == 1 ? 0 : q, qb = bBatch == 1 ? 0 : q;
        for (int64_t p = 0; p < k; ++p)
          sum += double(a.op(qa, i, p, ta)) * double(b.op(qb, p, j, tb));
        expected[(q * m + i) * n + j] =
            double(alpha) * sum + double(beta) * double(c.at(q, i, j));
      }
  auto da = a.template desc3<typename Traits<T>::D3>(aBatch);
  auto db = b.template desc3<typename Traits<T>::D3>(bBatch);
  auto dc = c.template desc3<typename Traits<T>::D3>(batch);
  dort_clear_pending_error();
  Traits<T>::bmm(&da, &db, &dc, ta, tb, alpha, beta);
  ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(double(c.at(q, i, j)), expected[(q * m + i) * n + j],
                    Traits<T>::tol)
            << "at " << q << "," << i << "," << j;
  std::vector<bool> inC = c.mask();
  for (size_t i = 0; i < c.buffer.size(); ++i)
    if (!inC[i])
      ASSERT_EQ(c.buffer[i], before[i]) << "wrote outside C at " << i;
}

template <typename T> void allLayouts2d() {
  std::mt19937 rng(1234);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Layout la : kLayouts)
        for (Layout lb : kLayouts)
          for (Layout lc : kLayouts)
            check2d<T>(5, 7, 3, ta, tb, la, lb, lc, T(1.5), T(0.5), rng);
}

} // namespace

TEST(Kernels, MatmulF32AllTransposesAndLayouts) { allLayouts2d<float>(); }
TEST(Kernels, MatmulF64AllTransposesAndLayouts) { allLayouts2d<double>(); }

TEST(Kernels, MatmulEdgeShapes) {
  std::mt19937 rng(7);
  // Vectors and size-1 dimensions with any strides.
  for (Layout l : kLayouts) {
    check2d<float>(1, 9, 4, false, false, l, l, l, 1.0f, 0.0f, rng);
    check2d<float>(6, 1, 4, true, false, l, l, l, 1.0f, 1.0f, rng);
    check2d<float>(6, 5, 1, false, true, l, l, l, 2.0f, 0.0f, rng);
    check2d<double>(1, 1, 1, true, true, l, l, l, 1.0, 1.0, rng);
    // K = 0: C = beta * C. M = 0 / N = 0: nothing happens.
    check2d<float>(3, 4, 0, false, false, l, l, l, 1.0f, 0.5f, rng);
    check2d<double>(3, 4, 0, false, false, l, l, l, 1.0, 0.0, rng);
    check2d<float>(0, 4, 3, false, false, l, l, l, 1.0f, 0.5f, rng);
    check2d<float>(3, 0, 3, true, true, l, l, l, 1.0f, 0.5f, rng);
    // alpha = 0.
    check2d<double>(3, 4, 2, false, false, l, l, l, 0.0, 2.0, rng);
  }
  // Larger sizes (threaded OpenBLAS paths).
  check2d<float>(130, 70, 257, false, true, Layout::Row, Layout::Row,
                 Layout::Row, 1.0f, 0.0f, rng);
  check2d<double>(64, 129, 33, true, false, Layout::ColPadded,
                  Layout::RowPadded, Layout::Col, 0.5, 2.0, rng);
}

TEST(Kernels, MatrixVectorShapesAllLayouts) {
  // One row or one column of C goes to GEMV: every transpose and layout,
  // beta kept, large enough that C is cut into blocks per thread.
  std::mt19937 rng(11);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Layout la : kLayouts)
        for (Layout lb : kLayouts)
          for (Layout lc : kLayouts) {
            check2d<float>(1, 37, 19, ta, tb, la, lb, lc, 1.5f, 0.5f, rng);
            check2d<double>(41, 1, 23, ta, tb, la, lb, lc, -1.0, 2.0, rng);
            check2d<float>(1, 1, 29, ta, tb, la, lb, lc, 1.0f, 1.0f, rng);
          }
}

TEST(Kernels, BetaZeroIgnoresNaNInC) {
  float a[] = {1, 2, 3, 4}, b[] = {1, 0, 0, 1};
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t cs1 : {1, 3}) { // Contiguous C, and a C that needs a copy.
    std::vector<float> c(12, nan);
    MemRef2DF32 da{a, a, 0, {2, 2}, {2, 1}}, db{b, b, 0, {2, 2}, {2, 1}};
    MemRef2DF32 dc{c.data(), c.data(), 0, {2, 2}, {cs1 == 1 ? 2 : 6, cs1}};
    _mlir_ciface_dort_matmul_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(c[i * dc.strides[0] + j * cs1], a[i * 2 + j]);
  }
  // So does a row of C (a matrix-vector product), contiguous or strided.
  for (int64_t cs1 : {1, 3}) {
    std::vector<float> c(6, nan);
    MemRef2DF32 da{a, a, 0, {1, 2}, {2, 1}}, db{b, b, 0, {2, 2}, {2, 1}};
    MemRef2DF32 dc{c.data(), c.data(), 0, {1, 2}, {6, cs1}};
    _mlir_ciface_dort_matmul_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
    EXPECT_EQ(c[0], 1.0f);
    EXPECT_EQ(c[cs1], 2.0f);
  }
  // K = 0 and beta = 0 also clears NaN.
  std::vector<float> c(4, nan);
  MemRef2DF32 da{a, a, 0, {2, 0}, {0, 1}}, db{b, b, 0, {0, 2}, {2, 1}};
  MemRef2DF32 dc{c.data(), c.data(), 0, {2, 2}, {2, 1}};
  _mlir_ciface_dort_matmul_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
  for (float v : c)
    EXPECT_EQ(v, 0.0f);
}

TEST(Kernels, ShapeMismatchRaisesPendingError) {
  float a[6] = {}, b[6] = {};
  float c[4] = {9, 9, 9, 9};
  MemRef2DF32 da{a, a, 0, {2, 3}, {3, 1}}, db{b, b, 0, {2, 3}, {3, 1}};
  MemRef2DF32 dc{c, c, 0, {2, 2}, {2, 1}};
  dort_clear_pending_error();
  _mlir_ciface_dort_matmul_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
  ASSERT_NE(dort_pending_error(), nullptr);
  EXPECT_EQ(std::string(dort_pending_error()),
            "dort_matmul_f32: shape mismatch: op(A) is 2x3, op(B) is 2x3, C is "
            "2x2 (transA=0, transB=0)");
  EXPECT_STREQ(dort_last_error_message(), dort_pending_error());
  for (float v : c)
    EXPECT_EQ(v, 9.0f);
  // The first pending error is kept.
  _mlir_ciface_dort_matmul_f32(nullptr, &db, &dc, 0, 0, 1.0f, 0.0f);
  EXPECT_NE(std::string(dort_pending_error()).find("shape mismatch"),
            std::string::npos);
  dort_clear_pending_error();
  _mlir_ciface_dort_matmul_f32(nullptr, &db, &dc, 0, 0, 1.0f, 0.0f);
  EXPECT_STREQ(dort_pending_error(), "dort_matmul_f32: memref A is null");
  dort_clear_pending_error();
  // With transB the shapes agree.
  _mlir_ciface_dort_matmul_f32(&da, &db, &dc, 0, 1, 1.0f, 0.0f);
  EXPECT_EQ(dort_pending_error(), nullptr);

  double x[8] = {}, y[8] = {}, z[8] = {};
  MemRef3DF64 dx{x, x, 0, {2, 2, 2}, {4, 2, 1}};
  MemRef3DF64 dy{y, y, 0, {3, 2, 2}, {4, 2, 1}};
  MemRef3DF64 dz{z, z, 0, {2, 2, 2}, {4, 2, 1}};
  _mlir_ciface_dort_batch_matmul_f64(&dx, &dy, &dz, 0, 0, 1.0, 0.0);
  ASSERT_NE(dort_pending_error(), nullptr);
  EXPECT_EQ(std::string(dort_pending_error()),
            "dort_batch_matmul_f64: shape mismatch: op(A) is 2x2x2, op(B) is "
            "3x2x2, C is 2x2x2 (transA=0, transB=0)");
  dort_clear_pending_error();
  // Thread-local error is separate from the pending one, which any thread
  // can see.
  std::thread([&] {
    _mlir_ciface_dort_batch_matmul_f64(&dx, &dy, &dz, 1, 0, 1.0, 0.0);
  }).join();
  EXPECT_NE(dort_pending_error(), nullptr);
  dort_clear_pending_error();
}

TEST(Kernels, BatchMatmulBroadcastAndLayouts) {
  std::mt19937 rng(99);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Layout la : kLayouts)
        for (Layout lb : kLayouts)
          for (Layout lc : {Layout::Row, Layout::ColPadded, Layout::Strided}) {
            // No broadcast.
            check3d<float>(3, 4, 5, 6, ta, tb, la, lb, lc, 3, false, 3, false,
                           1.0f, 0.0f, rng);
            // B shared by batch size 1, A by batch stride 0.
            check3d<float>(3, 4, 5, 6, ta, tb, la, lb, lc, 3, false, 1, false,
                           1.0f, 1.0f, rng);
            check3d<double>(3, 4, 5, 6, ta, tb, la, lb, lc, 3, true, 3, false,
                            2.0, 0.5, rng);
            check3d<double>(2, 3, 2, 4, ta, tb, la, lb, lc, 1, false, 2, true,
                            1.0, 0.0, rng);
          }
}

TEST(Kernels, BatchMatmulFoldedIntoOneGemm) {
  // Shared B with A and C batches packed row after row: the fold path.
  std::mt19937 rng(5);
  for (bool tb : {false, true}) {
    check3d<float>(4, 3, 5, 6, false, tb, Layout::Row, Layout::Row, Layout::Row,
                   4, false, 1, false, 1.0f, 0.0f, rng);
    check3d<double>(4, 3, 5, 6, false, tb, Layout::Row, Layout::Col,
                    Layout::Row, 4, false, 4, true, 1.0, 1.0, rng);
    check3d<float>(5, 1, 5, 6, false, tb, Layout::Row, Layout::Row, Layout::Row,
                   5, false, 1, false, 1.0f, 0.0f, rng);
  }
  // Exactly packed buffers (batch stride == M * row stride).
  std::vector<float> a(2 * 3 * 4), b(4 * 5), c(2 * 3 * 5, -1.0f);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = float(i % 7) - 3;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = float(i % 5) - 2;
  MemRef3DF32 da{a.data(), a.data(), 0, {2, 3, 4}, {12, 4, 1}};
  MemRef3DF32 db{b.data(), b.data(), 0, {2, 4, 5}, {0, 5, 1}};
  MemRef3DF32 dc{c.data(), c.data(), 0, {2, 3, 5}, {15, 5, 1}};
  _mlir_ciface_dort_batch_matmul_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
  for (int q = 0; q < 2; ++q)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        float s = 0;
        for (int p = 0; p < 4; ++p)
          s += a[q * 12 + i * 4 + p] * b[p * 5 + j];
        EXPECT_FLOAT_EQ(c[q * 15 + i * 5 + j], s);
      }
  // Empty batch is a no-op.
  MemRef3DF32 de{c.data(), c.data(), 0, {0, 3, 5}, {15, 5, 1}};
  MemRef3DF32 da0{a.data(), a.data(), 0, {0, 3, 4}, {12, 4, 1}};
  MemRef3DF32 db1{b.data(), b.data(), 0, {1, 4, 5}, {0, 5, 1}};
  _mlir_ciface_dort_batch_matmul_f32(&da0, &db1, &de, 0, 0, 1.0f, 0.0f);
  EXPECT_EQ(dort_pending_error(), nullptr);
}

namespace {
/// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    const char *old = std::getenv(name);
    had = old != nullptr;
    if (had)
      saved = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had)
      ::setenv(name, saved.c_str(), 1);
    else
      ::unsetenv(name);
  }

private:
  const char *name;
  bool had = false;
  std::string saved;
};
} // namespace

TEST(Kernels, ThreadsFromEnvironment) {
  {
    ScopedEnv omp("OMP_NUM_THREADS", "2");
    ScopedEnv ours("DISTOPT_NUM_THREADS", "3");
    EXPECT_EQ(dort_set_num_threads(0), 3);
    EXPECT_EQ(omp_get_max_threads(), 3);
    // OpenBLAS runs inside the pool, single-threaded.
    EXPECT_EQ(openblas_get_num_threads(), 1);
    EXPECT_EQ(dort_set_num_threads(2), 2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  {
    ScopedEnv ours("DISTOPT_NUM_THREADS", "zero");
    ScopedEnv omp("OMP_NUM_THREADS", "1");
    EXPECT_EQ(dort_set_num_threads(0), 1);
  }
  ScopedEnv ours("DISTOPT_NUM_THREADS", nullptr);
  ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int n = dort_set_num_threads(0);
  EXPECT_GE(n, 1);
  EXPECT_LE(n, cpus);
  {
    // Unbound processes of one job share the node: many of them get one
    // thread each.
    ScopedEnv local("OMPI_COMM_WORLD_LOCAL_SIZE", "100000");
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    if (CPU_COUNT(&set) == cpus)
      EXPECT_EQ(dort_set_num_threads(0), 1);
  }
  dort_set_num_threads(0);
}

TEST(Kernels, ParallelGemmMatchesReference) {
  // Shapes big enough to be cut across threads, by rows and (few rows) by
  // columns, with strided and transposed operands and beta != 0.
  dort_set_num_threads(4);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto [m, n, k, transA] : {std::tuple<int, int, int, int>{300, 70, 90, 0},
                                 {3, 500, 200, 1},
                                 {1, 2000, 300, 0}}) {
    std::vector<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n),
        ref(c.size());
    for (float &x : a) x = dist(rng);
    for (float &x : b) x = dist(rng);
    for (float &x : c) x = dist(rng);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int p = 0; p < k; ++p)
          acc += double(transA ? a[size_t(p) * m + i] : a[size_t(i) * k + p]) *
                 b[size_t(p) * n + j];
        ref[size_t(i) * n + j] = float(2.0 * acc + 0.5 * c[size_t(i) * n + j]);
      }
    MemRef2DF32 da{a.data(), a.data(), 0, {transA ? k : m, transA ? m : k},
                   {transA ? m : k, 1}};
    MemRef2DF32 db{b.data(), b.data(), 0, {k, n}, {n, 1}};
    MemRef2DF32 dc{c.data(), c.data(), 0, {m, n}, {n, 1}};
    _mlir_ciface_dort_matmul_f32(&da, &db, &dc, transA, 0, 2.0f, 0.5f);
    ASSERT_EQ(dort_pending_error(), nullptr);
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_NEAR(c[i], ref[i], 1e-3f) << "m=" << m << " n=" << n << " at " << i;
  }
  // A batch with fewer items than threads (each item cut) and with more
  // (one item per thread), B shared across the batch.
  for (int batch : {2, 9}) {
    int m = 64, n = 96, k = 80;
    std::vector<float> a(size_t(batch) * m * k), b(size_t(k) * n),
        c(size_t(batch) * m * n);
    for (float &x : a) x = dist(rng);
    for (float &x : b) x = dist(rng);
    // A transposed per item, so the stacked single-GEMM path does not apply.
    MemRef3DF32 da{a.data(), a.data(), 0, {batch, k, m}, {k * m, m, 1}};
    MemRef3DF32 db{b.data(), b.data(), 0, {1, k, n}, {0, n, 1}};
    MemRef3DF32 dc{c.data(), c.data(), 0, {batch, m, n}, {m * n, n, 1}};
    _mlir_ciface_dort_batch_matmul_f32(&da, &db, &dc, 1, 0, 1.0f, 0.0f);
    ASSERT_EQ(dort_pending_error(), nullptr);
    for (int t = 0; t < batch; ++t)
      for (int i = 0; i < m; i += 7)
        for (int j = 0; j < n; j += 5) {
          double acc = 0;
          for (int p = 0; p < k; ++p)
            acc += double(a[size_t(t) * k * m + size_t(p) * m + i]) *
                   b[size_t(p) * n + j];
          ASSERT_NEAR(c[size_t(t) * m * n + size_t(i) * n + j], acc, 1e-3)
              << "batch " << batch << " item " << t;
        }
  }
  dort_set_num_threads(0);
}

namespace {
struct Desc3 {
  int32_t *allocated, *aligned;
  int64_t offset, sizes[3], strides[3];
};
} // namespace

TEST(Kernels, MemrefCopy) {
  // Rank 0.
  int32_t s0 = 5, d0 = 0;
  struct {
    int32_t *allocated, *aligned;
    int64_t offset;
  } r0s{&s0, &s0, 0}, r0d{&d0, &d0, 0};
  DortUnrankedMemRef us{0, &r0s}, ud{0, &r0d};
  memrefCopy(sizeof(int32_t), &us, &ud);
  EXPECT_EQ(d0, 5);

  // Rank 3: contiguous source into a transposed, padded destination, and
  // back through a strided source.
  std::vector<int32_t> src(2 * 3 * 4), dst(200, -1), back(24, -1);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<int32_t>(i);
  Desc3 ds{src.data(), src.data(), 0, {2, 3, 4}, {12, 4, 1}};
  Desc3 dd{dst.data(), dst.data(), 5, {2, 3, 4}, {1, 2 * 5, 2 * 3 * 5}};
  DortUnrankedMemRef a{3, &ds}, b{3, &dd};
  memrefCopy(sizeof(int32_t), &a, &b);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(dst[5 + i + j * 10 + k * 30], i * 12 + j * 4 + k);
  Desc3 db{back.data(), back.data(), 0, {2, 3, 4}, {12, 4, 1}};
  DortUnrankedMemRef c{3, &dd}, d{3, &db};
  memrefCopy(sizeof(int32_t), &c, &d);
  EXPECT_EQ(back, src);
  // Contiguous fast path, and an empty copy.
  std::vector<int32_t> flat(24, 0);
  Desc3 df{flat.data(), flat.data(), 0, {2, 3, 4}, {12, 4, 1}};
  DortUnrankedMemRef e{3, &df};
  memrefCopy(sizeof(int32_t), &a, &e);
  EXPECT_EQ(flat, src);
  Desc3 empty{flat.data(), flat.data(), 0, {2, 0, 4}, {0, 4, 1}};
  DortUnrankedMemRef f{3, &empty};
  memrefCopy(sizeof(int32_t), &f, &f);
}

// dort_conv2d_<type>: what --target cuda-emu runs for a convolution (the
// CUDA runtime's twin is cuDNN). Checked against a direct sum on views that
// are not packed NCHW: x is a [C, N, H, W] buffer seen as [N, C, H, W] (as
// Autodiff's weight gradients transpose it), y a view into a larger buffer.
template <typename T, typename M>
void checkConv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t m,
               int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
               int64_t pw, int64_t dh, int64_t dw, int64_t groups,
               void (*conv)(M *, M *, M *, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, int64_t)) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  int64_t cg = c / groups, mg = m / groups;
  int64_t ho = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  int64_t wo = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  std::vector<T> xb(n * c * h * w), wb(m * cg * kh * kw),
      yb(n * (m + 1) * ho * wo, T(-7));
  for (T &v : xb) v = static_cast<T>(u(rng));
  for (T &v : wb) v = static_cast<T>(u(rng));
  // x: buffer [c, n, h, w]; view [n, c, h, w].
  M x{xb.data(), xb.data(), 0, {n, c, h, w}, {h * w, n * h * w, w, 1}};
  M wt{wb.data(), wb.data(), 0, {m, cg, kh, kw}, {cg * kh * kw, kh * kw, kw, 1}};
  // y: channels 1..m of a [n, m + 1, ho, wo] buffer.
  M y{yb.data(), yb.data(), ho * wo, {n, m, ho, wo},
      {(m + 1) * ho * wo, ho * wo, wo, 1}};
  dort_clear_pending_error();
  conv(&x, &wt, &y, sh, sw, ph, pw, dh, dw, groups);
  ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
  for (int64_t a = 0; a < n; ++a)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double want = 0;
          int64_t g = o / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                int64_t r = i * sh + p * dh - ph, s = j * sw + q * dw - pw;
                if (r < 0 || r >= h || s < 0 || s >= w)
                  continue;
                want += double(xb[((g * cg + ci) * n + a) * h * w + r * w + s]) *
                        double(wb[((o * cg + ci) * kh + p) * kw + q]);
              }
          double got = yb[(a * (m + 1) + o + 1) * ho * wo + i * wo + j];
          EXPECT_NEAR(got, want, 1e-4 * (1 + std::abs(want)))
              << "y[" << a << "," << o << "," << i << "," << j << "]";
        }
  // Channel 0 of the buffer is outside the view: untouched.
  for (int64_t a = 0; a < n; ++a)
    for (int64_t k = 0; k < ho * wo; ++k)
      EXPECT_EQ(yb[a * (m + 1) * ho * wo + k], T(-7));
}

TEST(Kernels, Conv2dF32StridedViews) {
  checkConv<float, MemRef4DF32>(2, 3, 9, 8, 4, 3, 3, 2, 1, 1, 0, 1, 2, 1,
                                _mlir_ciface_dort_conv2d_f32);
}
TEST(Kernels, Conv2dF32Groups) {
  checkConv<float, MemRef4DF32>(3, 6, 7, 7, 4, 2, 3, 1, 2, 2, 1, 2, 1, 2,
                                _mlir_ciface_dort_conv2d_f32);
}
TEST(Kernels, Conv2dF64Depthwise) {
  checkConv<double, MemRef4DF64>(2, 5, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 5,
                                 _mlir_ciface_dort_conv2d_f64);
}

TEST(Kernels, Conv2dShapeMismatchRaisesPendingError) {
  std::vector<float> buf(4096);
  MemRef4DF32 x{buf.data(), buf.data(), 0, {1, 2, 5, 5}, {50, 25, 5, 1}};
  MemRef4DF32 w{buf.data(), buf.data(), 0, {3, 2, 3, 3}, {18, 9, 3, 1}};
  MemRef4DF32 y{buf.data(), buf.data(), 0, {1, 3, 4, 3}, {36, 12, 3, 1}};
  std::string error = pendingErrorOf(
      [&] { _mlir_ciface_dort_conv2d_f32(&x, &w, &y, 1, 1, 0, 0, 1, 1, 1); });
  EXPECT_NE(error.find("dort_conv2d_f32: shapes do not fit: x 1x2x5x5, w "
                       "3x2x3x3, y 1x3x4x3"),
            std::string::npos)
      << error;
}

// dort_conv2d_backward_data_<type>: the input gradient of a convolution
// (dopt.conv_transpose on the CUDA targets; cuDNN's backward data on a GPU).
// Checked against the direct scatter of dy through the weights, on a dy
// that is a [M, N, ho, wo] buffer seen as [N, M, ho, wo] and a dx that is a
// view into a larger buffer whose elements start as garbage (dx is written
// whole: rows no window reaches, past what the stride covers, are zero).
template <typename T, typename M>
void checkConvBackwardData(
    int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t kh,
    int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
    int64_t dw, int64_t groups,
    void (*grad)(M *, M *, M *, int64_t, int64_t, int64_t, int64_t, int64_t,
                 int64_t, int64_t),
    bool paddedWeight = false) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  int64_t cg = c / groups, mg = m / groups;
  int64_t ho = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  int64_t wo = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  // The weight: packed, or (paddedWeight) each output channel followed by
  // one unused element, a view the kernel must copy packed.
  const int64_t wStride = cg * kh * kw + (paddedWeight ? 1 : 0);
  std::vector<T> yb(n * m * ho * wo), wb(m * wStride),
      xb(n * (c + 1) * h * w, T(-7));
  for (T &v : yb) v = static_cast<T>(u(rng));
  for (T &v : wb) v = static_cast<T>(u(rng));
  // dy: buffer [m, n, ho, wo]; view [n, m, ho, wo].
  M dy{yb.data(), yb.data(), 0, {n, m, ho, wo},
       {ho * wo, n * ho * wo, wo, 1}};
  M wt{wb.data(), wb.data(), 0, {m, cg, kh, kw}, {wStride, kh * kw, kw, 1}};
  // dx: channels 1..c of a [n, c + 1, h, w] buffer.
  M dx{xb.data(), xb.data(), h * w, {n, c, h, w},
       {(c + 1) * h * w, h * w, w, 1}};
  std::vector<double> want(n * c * h * w, 0.0);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          int64_t g = o / mg;
          double d = yb[(o * n + a) * ho * wo + i * wo + j];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                int64_t r = i * sh + p * dh - ph, s = j * sw + q * dw - pw;
                if (r < 0 || r >= h || s < 0 || s >= w)
                  continue;
                want[((a * c + g * cg + ci) * h + r) * w + s] +=
                    d * double(wb[o * wStride + (ci * kh + p) * kw + q]);
              }
        }
  dort_clear_pending_error();
  grad(&dy, &wt, &dx, sh, sw, ph, pw, dh, dw, groups);
  ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
  for (int64_t a = 0; a < n; ++a)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t k = 0; k < h * w; ++k) {
        double e = want[(a * c + ci) * h * w + k];
        EXPECT_NEAR(xb[(a * (c + 1) + ci + 1) * h * w + k], e,
                    1e-4 * (1 + std::abs(e)))
            << "dx[" << a << "," << ci << "," << k / w << "," << k % w << "]";
      }
  for (int64_t a = 0; a < n; ++a)
    for (int64_t k = 0; k < h * w; ++k)
      EXPECT_EQ(xb[a * (c + 1) * h * w + k], T(-7));
}

TEST(Kernels, Conv2dBackwardDataF32StridedViews) {
  // Stride 2 over 10 rows with a 3-row kernel and pad 1: the last row is
  // reached by no window (the output padding of a transposed convolution).
  checkConvBackwardData<float, MemRef4DF32>(
      2, 3, 10, 8, 4, 3, 3, 2, 1, 1, 0, 1, 2, 1,
      _mlir_ciface_dort_conv2d_backward_data_f32);
}
TEST(Kernels, Conv2dBackwardDataF32Groups) {
  checkConvBackwardData<float, MemRef4DF32>(
      3, 6, 7, 7, 4, 2, 3, 1, 2, 2, 1, 2, 1, 2,
      _mlir_ciface_dort_conv2d_backward_data_f32, /*paddedWeight=*/true);
}
TEST(Kernels, Conv2dBackwardDataF64Depthwise) {
  checkConvBackwardData<double, MemRef4DF64>(
      2, 5, 6, 6, 5, 3, 3, 2, 2, 1, 1, 1, 1, 5,
      _mlir_ciface_dort_conv2d_backward_data_f64);
}

TEST(Kernels, Conv2dBackwardDataOneSampleSplitsChannels) {
  // A batch of 1 and one group on 4 threads, work enough for all of them
  // (2.9 M multiply-adds): the input channels (5) are cut into blocks, one
  // per item.
  dort_set_num_threads(4);
  checkConvBackwardData<float, MemRef4DF32>(
      1, 5, 32, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1,
      _mlir_ciface_dort_conv2d_backward_data_f32);
  dort_set_num_threads(0);
}

TEST(Kernels, Conv2dBackwardDataChunksOfSamples) {
  // 72 x 16384 columns a sample (over the 2 M elements a GEMM's columns
  // may take): one sample a chunk, four chunks.
  checkConvBackwardData<float, MemRef4DF32>(
      4, 8, 128, 128, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1,
      _mlir_ciface_dort_conv2d_backward_data_f32);
}

TEST(Kernels, Conv2dBackwardDataShapeMismatchNamesTheCall) {
  std::vector<float> buf(4096);
  MemRef4DF32 dy{buf.data(), buf.data(), 0, {1, 3, 4, 3}, {36, 12, 3, 1}};
  MemRef4DF32 w{buf.data(), buf.data(), 0, {3, 2, 3, 3}, {18, 9, 3, 1}};
  MemRef4DF32 dx{buf.data(), buf.data(), 0, {1, 2, 5, 5}, {50, 25, 5, 1}};
  std::string error = pendingErrorOf([&] {
    _mlir_ciface_dort_conv2d_backward_data_f32(&dy, &w, &dx, 1, 1, 0, 0, 1, 1,
                                               1);
  });
  EXPECT_NE(error.find("dort_conv2d_backward_data_f32: shapes do not fit: x "
                       "1x2x5x5, w 3x2x3x3, y 1x3x4x3"),
            std::string::npos)
      << error;
}

/// dort_matmul_epilogue_f32 against a naive act(alpha A B^T + beta R + bias):
/// each activation, with and without bias and residual, D padded (a view),
/// R in place (R = D) or separate.
TEST(Kernels, MatmulEpilogueMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t m = 5, n = 7, k = 6, ldd = n + 3;
  std::vector<float> a(m * k), b(n * k), bias(n), r(m * n);
  for (auto *v : {&a, &b, &bias, &r})
    for (float &x : *v)
      x = dist(rng);
  auto gelu = [](double x) {
    return 0.5 * x *
           (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  for (int act : {DORT_ACT_NONE, DORT_ACT_RELU, DORT_ACT_GELU_TANH})
    for (int hasBias : {0, 1})
      for (int residual : {0, 1, 2}) { // none, separate, in place (R = D)
        std::vector<float> d(m * ldd + 2, 123.0f);
        float *pd = d.data() + 2;
        if (residual == 2)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
              pd[i * ldd + j] = r[i * n + j];
        MemRef2DF32 da{a.data(), a.data(), 0, {m, k}, {k, 1}};
        MemRef2DF32 db{b.data(), b.data(), 0, {n, k}, {k, 1}};
        MemRef2DF32 dd{d.data(), d.data(), 2, {m, n}, {ldd, 1}};
        MemRef2DF32 dr = residual == 1
                             ? MemRef2DF32{r.data(), r.data(), 0, {m, n}, {n, 1}}
                             : dd;
        MemRef1DF32 dbias{bias.data(), bias.data(), 0, {n}, {1}};
        float beta = residual ? 1.0f : 0.0f;
        dort_clear_pending_error();
        _mlir_ciface_dort_matmul_epilogue_f32(&da, &db, &dd, &dr, &dbias, 0, 1,
                                              0.5f, beta, act, hasBias);
        ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double z = 0;
            for (int64_t p = 0; p < k; ++p)
              z += double(a[i * k + p]) * b[j * k + p];
            z = 0.5 * z + (residual ? r[i * n + j] : 0.0) +
                (hasBias ? bias[j] : 0.0);
            double want = act == DORT_ACT_RELU        ? std::max(z, 0.0)
                          : act == DORT_ACT_GELU_TANH ? gelu(z)
                                                      : z;
            EXPECT_NEAR(pd[i * ldd + j], want, 1e-4)
                << "act " << act << " bias " << hasBias << " residual "
                << residual << " at " << i << "," << j;
          }
        // The padding between D's rows is untouched.
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = n; j < ldd && i * ldd + j < m * ldd; ++j)
            if (i + 1 < m)
              EXPECT_EQ(pd[i * ldd + j], 123.0f);
      }
  // A bias of the wrong length and an unknown activation are errors.
  std::vector<float> d(m * n);
  MemRef2DF32 da{a.data(), a.data(), 0, {m, k}, {k, 1}};
  MemRef2DF32 db{b.data(), b.data(), 0, {n, k}, {k, 1}};
  MemRef2DF32 dd{d.data(), d.data(), 0, {m, n}, {n, 1}};
  MemRef1DF32 shortBias{bias.data(), bias.data(), 0, {n - 1}, {1}};
  EXPECT_EQ(pendingErrorOf([&] {
              _mlir_ciface_dort_matmul_epilogue_f32(&da, &db, &dd, &dd,
                                                    &shortBias, 0, 1, 1.0f,
                                                    0.0f, DORT_ACT_NONE, 1);
            }),
            "dort_matmul_epilogue_f32: the bias has 6 elements, D 7 columns");
  EXPECT_EQ(pendingErrorOf([&] {
              _mlir_ciface_dort_matmul_epilogue_f32(
                  &da, &db, &dd, &dd, &shortBias, 0, 1, 1.0f, 0.0f, 9, 0);
            }),
            "dort_matmul_epilogue_f32: unknown activation 9");
}

/// The 16-bit epilogue GEMM is the f32 one on the widened values, D rounded
/// once (bf16: round to nearest even), into a padded D.
TEST(Kernels, MatmulEpilogueBf16IsTheF32OneRounded) {
  auto bf16 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  auto widen = [](uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t m = 3, n = 5, k = 4, ldd = 7;
  std::vector<uint16_t> a(m * k), b(k * n), bias(n), r(m * n);
  for (auto *v : {&a, &b, &bias, &r})
    for (uint16_t &x : *v)
      x = bf16(dist(rng));
  std::vector<float> af(a.size()), bf(b.size()), biasf(n), rf(r.size()),
      df(m * n);
  for (size_t i = 0; i < a.size(); ++i)
    af[i] = widen(a[i]);
  for (size_t i = 0; i < b.size(); ++i)
    bf[i] = widen(b[i]);
  for (int64_t i = 0; i < n; ++i)
    biasf[i] = widen(bias[i]);
  for (size_t i = 0; i < r.size(); ++i)
    rf[i] = widen(r[i]);
  MemRef2DF32 fa{af.data(), af.data(), 0, {m, k}, {k, 1}};
  MemRef2DF32 fb{bf.data(), bf.data(), 0, {k, n}, {n, 1}};
  MemRef2DF32 fd{df.data(), df.data(), 0, {m, n}, {n, 1}};
  MemRef2DF32 fr{rf.data(), rf.data(), 0, {m, n}, {n, 1}};
  MemRef1DF32 fbias{biasf.data(), biasf.data(), 0, {n}, {1}};
  dort_clear_pending_error();
  _mlir_ciface_dort_matmul_epilogue_f32(&fa, &fb, &fd, &fr, &fbias, 0, 0, 1.0f,
                                        1.0f, DORT_ACT_GELU_TANH, 1);
  std::vector<uint16_t> d(m * ldd, 0xffff);
  MemRef2DU16 ha{a.data(), a.data(), 0, {m, k}, {k, 1}};
  MemRef2DU16 hb{b.data(), b.data(), 0, {k, n}, {n, 1}};
  MemRef2DU16 hd{d.data(), d.data(), 0, {m, n}, {ldd, 1}};
  MemRef2DU16 hr{r.data(), r.data(), 0, {m, n}, {n, 1}};
  MemRef1DU16 hbias{bias.data(), bias.data(), 0, {n}, {1}};
  _mlir_ciface_dort_matmul_epilogue_bf16(&ha, &hb, &hd, &hr, &hbias, 0, 0, 1.0f,
                                         1.0f, DORT_ACT_GELU_TANH, 1);
  ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(d[i * ldd + j], bf16(df[i * n + j])) << i << "," << j;
    for (int64_t j = n; j < ldd; ++j)
      EXPECT_EQ(d[i * ldd + j], 0xffff); // the padding is untouched
  }
}

/// bf16 GEMMs (oneDNN's where the runtime can load it, and widened to f32
/// for OpenBLAS with DISTOPT_ONEDNN=0): f32 accumulation of the exact bf16
/// values, both transposes, alpha and beta, a padded leading dimension, and
/// batches.
TEST(Kernels, BF16GemmsAccumulateInF32) {
  using distopt::runtime::bf16ToFloat;
  using distopt::runtime::floatToBF16;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const char *onednn : {"1", "0"}) {
  SCOPED_TRACE(std::string("DISTOPT_ONEDNN=") + onednn);
  setenv("DISTOPT_ONEDNN", onednn, 1);
  for (int transA = 0; transA < 2; ++transA)
    for (int transB = 0; transB < 2; ++transB)
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
        const int64_t batch = 3, m = 37, n = 29, k = 70, ldc = n + 3;
        int64_t ar = transA ? k : m, ac = transA ? m : k;
        int64_t br = transB ? n : k, bc = transB ? k : n;
        std::vector<uint16_t> a(batch * ar * ac), b(batch * br * bc);
        for (auto &x : a)
          x = floatToBF16(normal(rng));
        for (auto &x : b)
          x = floatToBF16(normal(rng));
        std::vector<float> c(batch * m * ldc), c0;
        for (auto &x : c)
          x = normal(rng);
        c0 = c;
        auto A = [&](int64_t t, int64_t i, int64_t l) {
          return bf16ToFloat(a[t * ar * ac + (transA ? l * ac + i : i * ac + l)]);
        };
        auto B = [&](int64_t t, int64_t l, int64_t j) {
          return bf16ToFloat(b[t * br * bc + (transB ? j * bc + l : l * bc + j)]);
        };
        MemRef3DU16 ma{a.data(), a.data(), 0, {batch, ar, ac}, {ar * ac, ac, 1}};
        MemRef3DU16 mb{b.data(), b.data(), 0, {batch, br, bc}, {br * bc, bc, 1}};
        MemRef3DF32 mc{c.data(), c.data(), 0, {batch, m, n}, {m * ldc, ldc, 1}};
        dort_clear_pending_error();
        _mlir_ciface_dort_batch_matmul_bf16_f32(&ma, &mb, &mc, transA, transB,
                                                alpha, beta);
        ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
        // And the 2-D call on batch 1's matrices.
        std::vector<float> d(m * ldc), d0(d.size(), 0.25f);
        d = d0;
        MemRef2DU16 a2{a.data(), a.data(), ar * ac, {ar, ac}, {ac, 1}};
        MemRef2DU16 b2{b.data(), b.data(), br * bc, {br, bc}, {bc, 1}};
        MemRef2DF32 d2{d.data(), d.data(), 0, {m, n}, {ldc, 1}};
        _mlir_ciface_dort_matmul_bf16_f32(&a2, &b2, &d2, transA, transB, alpha,
                                          beta);
        ASSERT_EQ(dort_pending_error(), nullptr) << dort_pending_error();
        for (int64_t t = 0; t < batch; ++t)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              float got = c[t * m * ldc + i * ldc + j];
              if (j >= n) { // the padding is untouched
                EXPECT_EQ(got, c0[t * m * ldc + i * ldc + j]);
                continue;
              }
              double dot = 0, mag = 0;
              for (int64_t l = 0; l < k; ++l) {
                dot += double(A(t, i, l)) * B(t, l, j);
                mag += std::fabs(double(A(t, i, l)) * B(t, l, j));
              }
              double want = alpha * dot + beta * c0[t * m * ldc + i * ldc + j];
              double tol =
                  1e-5 * (alpha * mag + std::fabs(beta * c0[t * m * ldc + i * ldc + j]));
              ASSERT_NEAR(got, want, tol) << t << "," << i << "," << j;
              if (t == 1)
                ASSERT_NEAR(d[i * ldc + j], alpha * dot + beta * 0.25, tol)
                    << i << "," << j;
            }
      }
  }
  unsetenv("DISTOPT_ONEDNN");
}

/// A 16-bit GEMM's shape mismatch names the 16-bit call.
TEST(Kernels, SixteenBitShapeMismatchNamesTheCall) {
  uint16_t a[6] = {}, b[6] = {};
  float c[4] = {9, 9, 9, 9};
  MemRef2DU16 da{a, a, 0, {2, 3}, {3, 1}}, db{b, b, 0, {2, 3}, {3, 1}};
  MemRef2DF32 dc{c, c, 0, {2, 2}, {2, 1}};
  EXPECT_EQ(pendingErrorOf([&] {
              _mlir_ciface_dort_matmul_f16_f32(&da, &db, &dc, 0, 0, 1.0f, 0.0f);
            }),
            "dort_matmul_f16_f32: shape mismatch: op(A) is 2x3, op(B) is 2x3, "
            "C is 2x2 (transA=0, transB=0)");
  for (float v : c)
    EXPECT_EQ(v, 9.0f);
  MemRef3DU16 ta{a, a, 0, {2, 1, 3}, {3, 3, 1}}, tb{b, b, 0, {3, 1, 2}, {2, 2, 1}};
  MemRef3DF32 tc{c, c, 0, {2, 1, 2}, {2, 2, 1}};
  std::string error = pendingErrorOf([&] {
    _mlir_ciface_dort_batch_matmul_bf16_f32(&ta, &tb, &tc, 0, 0, 1.0f, 0.0f);
  });
  EXPECT_NE(error.find("dort_batch_matmul_bf16_f32"), std::string::npos)
      << error;
}

namespace {

MemRef1DI64 view(std::vector<int64_t> &v, int64_t stride = 1) {
  return {v.data(), v.data(), 0, {(int64_t)v.size() / stride}, {stride}};
}

} // namespace

TEST(IndexFault, NothingOutOfRangeReportsNothing) {
  std::vector<int64_t> fault = {std::numeric_limits<int64_t>::max(), 0};
  std::vector<int64_t> shape = {2, 3};
  char text[] = "ONNX node 'g' (Gather): the indices";
  MemRef1DI8 t = {(int8_t *)text, (int8_t *)text, 0, {sizeof text}, {1}};
  MemRef1DI64 f = view(fault), s = view(shape);
  dort_clear_pending_error();
  _mlir_ciface_dort_index_fault(&f, &s, &t, -10, 9);
  EXPECT_EQ(dort_pending_error(), nullptr);
}

TEST(IndexFault, NamesTheIndexItsPositionAndTheRange) {
  // The pair with a stride (a view), the flat position 5 in [2, 3].
  std::vector<int64_t> fault = {5, -1, 1LL << 40, -1};
  std::vector<int64_t> shape = {2, 3};
  char text[] = "ONNX node 'g' (Gather): the indices";
  MemRef1DI8 t = {(int8_t *)text, (int8_t *)text, 0, {sizeof text}, {1}};
  MemRef1DI64 f = view(fault, 2), s = view(shape);
  dort_clear_pending_error();
  _mlir_ciface_dort_index_fault(&f, &s, &t, -10, 9);
  ASSERT_NE(dort_pending_error(), nullptr);
  EXPECT_STREQ(dort_pending_error(),
               "ONNX node 'g' (Gather): the indices: index 1099511627776 at "
               "[1, 2] is outside [-10, 9]");
  // The first report stands; a scalar's position is [].
  std::vector<int64_t> scalarFault = {0, 7};
  MemRef1DI64 f2 = view(scalarFault);
  MemRef1DI64 s2 = {nullptr, nullptr, 0, {0}, {1}};
  _mlir_ciface_dort_index_fault(&f2, &s2, &t, 0, 4);
  EXPECT_NE(std::string(dort_pending_error()).find("[1, 2]"), std::string::npos);
  dort_clear_pending_error();
  _mlir_ciface_dort_index_fault(&f2, &s2, &t, 0, 4);
  EXPECT_STREQ(dort_pending_error(),
               "ONNX node 'g' (Gather): the indices: index 7 at [] is outside "
               "[0, 4]");
  dort_clear_pending_error();
}
