// Householder QR and least squares against LAPACKE (geqrf, gels), with
// residuals scaled by n·ε, on both ISA copies, blocked and unblocked sizes,
// compact batches, both layouts and the edge cases.
#include "sinew/linalg/qr.h"

#include <gmock/gmock.h>
#include <lapacke.h>

#include "linalg_testing.h"
#include "sinew/core/error.h"

namespace sinew::linalg {
namespace {

using namespace testing;
using ::testing::HasSubstr;

int geqrf_ref(int64_t m, int64_t n, double* a, double* tau) {
  OneBlasThread one;
  return LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
}
int geqrf_ref(int64_t m, int64_t n, float* a, float* tau) {
  OneBlasThread one;
  return LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
}
int gels_ref(int64_t m, int64_t n, int64_t k, double* a, double* b) {
  OneBlasThread one;
  return LAPACKE_dgels(LAPACK_ROW_MAJOR, 'N', m, n, k, a, n, b, k);
}
int gels_ref(int64_t m, int64_t n, int64_t k, float* a, float* b) {
  OneBlasThread one;
  return LAPACKE_sgels(LAPACK_ROW_MAJOR, 'N', m, n, k, a, n, b, k);
}

template <class T> struct QrCheck {
  double residual = 0, orthogonality = 0, vs_lapack = 0;
};

template <class T> QrCheck<T> check_qr_one(const Mats<T>& a, const Mats<T>& q, const Mats<T>& r, int64_t b, bool has_q) {
  const int64_t m = a.rows, n = a.cols, rr = r.rows;
  QrCheck<T> c;
  for (int64_t i = 0; i < rr; ++i)
    for (int64_t j = 0; j < std::min(i, n); ++j) EXPECT_EQ(r(b, i, j), T(0)) << "R not upper at " << i << "," << j;
  const long double scale = std::max<int64_t>({m, n, 1}) * eps<T>();
  if (has_q) {
    long double d = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double s = 0;
        for (int64_t p = 0; p < std::min<int64_t>(q.cols, rr); ++p) s += static_cast<long double>(q(b, i, p)) * r(b, p, j);
        d += (s - a(b, i, j)) * (s - a(b, i, j));
      }
    const long double an = frob(a, b);
    c.residual = static_cast<double>(an > 0 ? std::sqrt(d) / (scale * an) : std::sqrt(d));
    c.orthogonality = static_cast<double>(orthogonality(q, b) / scale);
  }
  // R against LAPACK geqrf (same Householder sign convention).
  std::vector<T> ref(static_cast<size_t>(m * n)), tau(static_cast<size_t>(std::min(m, n) + 1));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) ref[i * n + j] = a(b, i, j);
  EXPECT_EQ(geqrf_ref(m, n, ref.data(), tau.data()), 0);
  long double d = 0, s = 0;
  for (int64_t i = 0; i < std::min(m, n); ++i)
    for (int64_t j = i; j < n; ++j) {
      d += (static_cast<long double>(r(b, i, j)) - ref[i * n + j]) * (static_cast<long double>(r(b, i, j)) - ref[i * n + j]);
      s += static_cast<long double>(ref[i * n + j]) * ref[i * n + j];
    }
  c.vs_lapack = static_cast<double>(s > 0 ? std::sqrt(d / s) / scale : std::sqrt(d));
  return c;
}

template <class T> void check_qr(int64_t count, int64_t m, int64_t n, QrMode mode, bool colmajor, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " " << m << "x" << n << " mode " << int(mode)
                                    << " colmajor " << colmajor << " bytes " << sizeof(T));
  const int64_t k = std::min(m, n);
  const bool complete = mode == QrMode::kComplete;
  Mats<T> a(count, m, n, colmajor);
  fill_normal(a);
  Mats<T> q(count, m, complete ? m : k, !colmajor), r(count, complete ? m : k, n);
  qr(a.view(true), mode == QrMode::kR ? TensorView{} : q.view(true), r.view(true), {mode, threads});
  for (int64_t b = 0; b < count; ++b) {
    auto c = check_qr_one(a, q, r, b, mode != QrMode::kR);
    EXPECT_LT(c.residual, 4.0) << "b " << b;
    EXPECT_LT(c.orthogonality, 4.0) << "b " << b;
    EXPECT_LT(c.vs_lapack, 200.0) << "b " << b;
  }
}

class QrTest : public IsaTest {};

TEST_P(QrTest, SingleMatricesAllModes) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {3, 7}, {40, 40}}) {
    for (QrMode mode : {QrMode::kReduced, QrMode::kComplete, QrMode::kR}) {
      check_qr<double>(1, m, n, mode, false, 2);
      check_qr<float>(1, m, n, mode, true, 1);
    }
  }
  // Blocked: at least kQrBlockedMin (96) reflectors.
  check_qr<double>(1, 130, 100, QrMode::kComplete, false, 2);
  check_qr<double>(1, 100, 130, QrMode::kReduced, true, 2);
  check_qr<float>(1, 110, 110, QrMode::kReduced, false, 2);
  // Several 64-column panels (each factored in 32-column blocks), and a last
  // panel narrower than one block.
  check_qr<double>(1, 300, 200, QrMode::kComplete, false, 2);
  check_qr<float>(1, 200, 257, QrMode::kReduced, true, 2);
}

// A batch (compact path) whose columns' entries are so small (1e-160 in
// f64, 1e-21 in f32, with the others around 1) that their sums of squares
// underflow: the reflectors are taken on the scaled column, so Q stays
// orthogonal (without that, tau no longer matched v and Q lost its
// orthogonality outright).
TEST_P(QrTest, CompactBatchWithColumnsWhoseSquaresUnderflow) {
  auto run = [](auto tiny) {
    using T = decltype(tiny);
    const int64_t count = 9, m = 24, n = 20;
    Mats<T> a(count, m, n);
    fill_normal(a);
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j : {0, 5, 6}) a(b, i, j) *= tiny;
    Mats<T> q(count, m, n), r(count, n, n);
    qr(a.view(true), q.view(true), r.view(true), {QrMode::kReduced, 2});
    for (int64_t b = 0; b < count; ++b) {
      const double orth = static_cast<double>(orthogonality(q, b) / (m * eps<T>()));
      EXPECT_LT(orth, 4.0) << "b " << b << " " << sizeof(T);
    }
  };
  run(1e-160);
  run(1e-21f);
}

TEST_P(QrTest, BatchesCompactAndPerMatrix) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {3, 5}, {32, 32}, {40, 17}}) {
    check_qr<double>(19, m, n, QrMode::kReduced, false, 2);
    check_qr<float>(17, m, n, QrMode::kComplete, true, 2);
  }
  check_qr<double>(3, 60, 50, QrMode::kComplete, true, 2);
}

// The compact path's reflector updates run four columns at a time: every
// remainder of columns, batches that leave lanes empty, both layouts.
TEST_P(QrTest, CompactBatchSizesAndLayouts) {
  for (int64_t count : {2, 7, 9, 17})
    for (bool colmajor : {false, true}) {
      check_qr<double>(count, 33, 31, QrMode::kComplete, colmajor, 2);
      check_qr<float>(count, 30, 29, QrMode::kReduced, colmajor, 1);
      check_qr<double>(count, 6, 11, QrMode::kReduced, colmajor, 1);
    }
}

// A non-finite matrix in the middle of a compact batch is named by its index.
TEST_P(QrTest, CompactBatchNamesTheBadMatrix) {
  Mats<double> a(17, 32, 32), q(17, 32, 32), r(17, 32, 32);
  fill_normal(a);
  a(9, 5, 30) = std::numeric_limits<double>::quiet_NaN();
  try {
    qr(a.view(true), q.view(true), r.view(true));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'qr: a[9]'"));
    EXPECT_THAT(e.what(), HasSubstr("nan at row 5, column 30"));
  }
}

TEST_P(QrTest, RankDeficientZeroAndIdentity) {
  for (int64_t count : {1, 9}) {
    Mats<double> a(count, 36, 36);
    fill_normal(a);
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < 36; ++i) {
        a(b, i, 5) = 2 * a(b, i, 3);  // rank 34
        a(b, i, 7) = 0;
      }
    Mats<double> q(count, 36, 36), r(count, 36, 36);
    qr(a.view(true), q.view(true), r.view(true));
    for (int64_t b = 0; b < count; ++b) {
      auto c = check_qr_one(a, q, r, b, true);
      EXPECT_LT(c.residual, 4.0);
      EXPECT_LT(c.orthogonality, 4.0);
    }
    Mats<double> z(count, 12, 9), qz(count, 12, 12), rz(count, 12, 9);
    qr(z.view(true), qz.view(true), rz.view(true), {QrMode::kComplete});
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < 12; ++i) {
        for (int64_t j = 0; j < 12; ++j) ASSERT_EQ(qz(b, i, j), i == j ? 1.0 : 0.0);
        for (int64_t j = 0; j < 9; ++j) ASSERT_EQ(rz(b, i, j), 0.0);
      }
  }
}

TEST_P(QrTest, EdgeShapesAndErrors) {
  Mats<double> a(1, 0, 4), q(1, 0, 0), r(1, 0, 4);
  EXPECT_NO_THROW(qr(a.view(), q.view(), r.view()));
  Mats<double> a2(1, 3, 0), q2(1, 3, 3), r2(1, 3, 0);
  qr(a2.view(), q2.view(), r2.view(), {QrMode::kComplete});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(q2(i, j), i == j ? 1.0 : 0.0);
  Mats<float> bad(1, 4, 4), qb(1, 4, 4), rb(1, 4, 4);
  bad(2, 3) = -std::numeric_limits<float>::infinity();
  try {
    qr(bad.view(), qb.view(), rb.view());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'qr: a'"));
    EXPECT_THAT(e.what(), HasSubstr("-inf at row 2, column 3"));
  }
  Mats<float> wrong(1, 4, 3);
  EXPECT_THROW(qr(bad.view(), wrong.view(), rb.view()), InvalidArgument);
}

// lstsq against LAPACK gels: both solve the same full-rank problem.
template <class T> void check_lstsq(int64_t count, int64_t m, int64_t n, int64_t k) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " " << m << "x" << n << " k " << k);
  Mats<T> a(count, m, n, true), b(count, m, k), x(count, n, k);
  fill_normal(a);
  fill_normal(b);
  lstsq(a.view(true), b.view(true), x.view(true), {2});
  for (int64_t bi = 0; bi < count; ++bi) {
    std::vector<T> ra(static_cast<size_t>(m * n)), rb(static_cast<size_t>(std::max(m, n) * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) ra[i * n + j] = a(bi, i, j);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) rb[i * k + j] = b(bi, i, j);
    ASSERT_EQ(gels_ref(m, n, k, ra.data(), rb.data()), 0);
    long double d = 0, s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        d += (static_cast<long double>(x(bi, i, j)) - rb[i * k + j]) * (static_cast<long double>(x(bi, i, j)) - rb[i * k + j]);
        s += static_cast<long double>(rb[i * k + j]) * rb[i * k + j];
      }
    EXPECT_LT(std::sqrt(d / s), 1000 * std::max(m, n) * eps<T>()) << "b " << bi;
  }
}

TEST_P(QrTest, LeastSquaresMatchesGels) {
  check_lstsq<double>(1, 60, 20, 3);
  check_lstsq<double>(1, 20, 60, 2);   // minimum norm
  check_lstsq<double>(1, 130, 100, 4);
  check_lstsq<double>(1, 100, 120, 1);
  check_lstsq<float>(5, 30, 10, 2);
  check_lstsq<float>(4, 10, 30, 3);
  check_lstsq<double>(2, 16, 16, 16);
}

TEST_P(QrTest, LeastSquaresErrorsAndEmpty) {
  Mats<double> a(1, 10, 4), b(1, 10, 1), x(1, 4, 1);
  fill_normal(a);
  for (int64_t i = 0; i < 10; ++i) a(i, 2) = a(i, 0) + a(i, 1);
  try {
    lstsq(a.view(), b.view(), x.view());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank-deficient"));
    EXPECT_THAT(e.what(), HasSubstr("R[2, 2]"));
  }
  Mats<double> a0(1, 0, 3), b0(1, 0, 2), x0(1, 3, 2);
  x0(1, 1) = 5;
  lstsq(a0.view(), b0.view(), x0.view());
  EXPECT_EQ(x0(1, 1), 0.0);
  Mats<double> xb(1, 5, 1);
  EXPECT_THROW(lstsq(a.view(), b.view(), xb.view()), InvalidArgument);
}

SINEW_LINALG_ISA_TESTS(QrTest);

}  // namespace
}  // namespace sinew::linalg
