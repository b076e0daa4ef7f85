// SVD / svdvals against LAPACKE gesdd, with residuals ‖A − UΣVᵀ‖ and the
// orthogonality of U and V scaled by n·ε, on both ISA copies, single
// matrices (tall, wide, square; thin and full), compact batches, rank-
// deficient, zero and identity inputs, and graded matrices whose smallest
// singular values are checked against a long-double one-sided Jacobi.
#include "sinew/linalg/svd.h"

#include <gmock/gmock.h>
#include <lapacke.h>

#include <cstdlib>

#include <algorithm>

#include "linalg_testing.h"
#include "sinew/core/error.h"

namespace sinew::linalg {
namespace {

using namespace testing;
using ::testing::HasSubstr;

int gesdd_ref(int64_t m, int64_t n, double* a, double* s) {
  OneBlasThread one;
  double u = 0, vt = 0;
  return LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'N', m, n, a, n, s, &u, std::max<int64_t>(m, 1), &vt, std::max<int64_t>(n, 1));
}
int gesdd_ref(int64_t m, int64_t n, float* a, float* s) {
  OneBlasThread one;
  float u = 0, vt = 0;
  return LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'N', m, n, a, n, s, &u, std::max<int64_t>(m, 1), &vt, std::max<int64_t>(n, 1));
}

// Singular values of a (row-major m x n) by cyclic one-sided Jacobi in long
// double: the high-precision reference.
std::vector<long double> reference_sv(std::vector<long double> a, int64_t m, int64_t n) {
  if (m < n) {
    std::vector<long double> t(a.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
    a = t;
    std::swap(m, n);
  }
  auto col = [&](int64_t i, int64_t j) -> long double& { return a[i * n + j]; };
  const long double tol = std::numeric_limits<long double>::epsilon() * std::sqrt(static_cast<long double>(m));
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        long double al = 0, be = 0, ga = 0;
        for (int64_t i = 0; i < m; ++i) {
          al += col(i, p) * col(i, p);
          be += col(i, q) * col(i, q);
          ga += col(i, p) * col(i, q);
        }
        if (al == 0 || be == 0 || std::abs(ga) <= tol * std::sqrt(al) * std::sqrt(be)) continue;
        rotated = true;
        const long double zeta = (be - al) / (2 * ga);
        const long double t = std::copysign(1.0L / (std::abs(zeta) + std::sqrt(1 + zeta * zeta)), zeta);
        const long double c = 1 / std::sqrt(1 + t * t), s = t * c;
        for (int64_t i = 0; i < m; ++i) {
          const long double x = col(i, p), y = col(i, q);
          col(i, p) = c * x - s * y;
          col(i, q) = s * x + c * y;
        }
      }
    if (!rotated) break;
  }
  std::vector<long double> sv(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    long double s = 0;
    for (int64_t i = 0; i < m; ++i) s += col(i, j) * col(i, j);
    sv[j] = std::sqrt(s);
  }
  std::sort(sv.rbegin(), sv.rend());
  return sv;
}

template <class T> struct SvdErrors {
  double residual = 0, orth_u = 0, orth_v = 0, vs_lapack = 0;
};

template <class T>
SvdErrors<T> svd_errors(const Mats<T>& a, const Mats<T>& u, Vecs<T>& s, const Mats<T>& vh, int64_t b, bool vectors) {
  const int64_t m = a.rows, n = a.cols, k = std::min(m, n);
  SvdErrors<T> e;
  const long double scale = std::max<int64_t>({m, n, 1}) * eps<T>();
  const long double an = std::max<long double>(frob(a, b), 1e-300L);
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_GE(s(b, i), T(0));
    if (i + 1 < k) EXPECT_GE(s(b, i), s(b, i + 1)) << "not descending";
  }
  if (vectors) {
    long double r = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += static_cast<long double>(u(b, i, p)) * s(b, p) * vh(b, p, j);
        r += (acc - a(b, i, j)) * (acc - a(b, i, j));
      }
    e.residual = static_cast<double>(std::sqrt(r) / (scale * an));
    e.orth_u = static_cast<double>(orthogonality(u, b) / scale);
    // Rows of vh orthonormal.
    long double o = 0;
    for (int64_t i = 0; i < vh.rows; ++i)
      for (int64_t j = 0; j < vh.rows; ++j) {
        long double d = 0;
        for (int64_t q = 0; q < n; ++q) d += static_cast<long double>(vh(b, i, q)) * vh(b, j, q);
        d -= i == j ? 1 : 0;
        o += d * d;
      }
    e.orth_v = static_cast<double>(std::sqrt(o) / scale);
  }
  std::vector<T> ref(static_cast<size_t>(m * n)), sr(static_cast<size_t>(k + 1));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) ref[i * n + j] = a(b, i, j);
  EXPECT_EQ(gesdd_ref(m, n, ref.data(), sr.data()), 0);
  long double d = 0;
  for (int64_t i = 0; i < k; ++i) d = std::max<long double>(d, std::abs(static_cast<long double>(s(b, i)) - sr[i]));
  e.vs_lapack = static_cast<double>(k ? d / (scale * std::max<long double>(sr[0], 1e-300L)) : 0);
  return e;
}

template <class T> void expect_good(const SvdErrors<T>& e, int64_t b) {
  EXPECT_LT(e.residual, 10.0) << "b " << b;
  EXPECT_LT(e.orth_u, 10.0) << "b " << b;
  EXPECT_LT(e.orth_v, 10.0) << "b " << b;
  EXPECT_LT(e.vs_lapack, 10.0) << "b " << b;
}

template <class T> void check_svd(int64_t count, int64_t m, int64_t n, bool full, bool colmajor, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " " << m << "x" << n << " full " << full
                                    << " colmajor " << colmajor << " bytes " << sizeof(T));
  const int64_t k = std::min(m, n);
  Mats<T> a(count, m, n, colmajor);
  fill_normal(a);
  Mats<T> u(count, m, full ? m : k, !colmajor), vh(count, full ? n : k, n);
  Vecs<T> s(count, k), s2(count, k);
  svd(a.view(true), u.view(true), s.view(true), vh.view(true), {full, threads});
  svdvals(a.view(true), s2.view(true), {full, threads});
  for (int64_t b = 0; b < count; ++b) {
    expect_good(svd_errors(a, u, s, vh, b, true), b);
    for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(s(b, i), s2(b, i), 4 * k * eps<T>() * s(b, 0)) << "svdvals";
  }
}

class SvdTest : public IsaTest {};

TEST_P(SvdTest, SingleMatricesThinAndFull) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 5}, {6, 1}, {9, 4}, {4, 9}, {33, 33}}) {
    for (bool full : {false, true}) {
      check_svd<double>(1, m, n, full, false, 2);
      check_svd<float>(1, m, n, full, true, 1);
    }
  }
  check_svd<double>(1, 80, 70, true, true, 2);  // three blocks of the pair ordering, two threads
  check_svd<float>(1, 50, 66, false, false, 2);
}

TEST_P(SvdTest, BatchesCompactAndPerMatrix) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {3, 7}, {32, 32}, {40, 25}}) {
    check_svd<double>(9, m, n, false, false, 2);
    check_svd<float>(17, m, n, true, true, 2);
  }
  check_svd<double>(3, 45, 41, true, false, 2);
}

// f64 batches take Jacobi preconditioned by the Gram matrix's eigenvectors
// for matrices with condition number up to 1e4 and leave the others to
// Jacobi after a pivoted QR: a batch that mixes both (a fifth of its
// matrices with one column 1e-6 of the others), thin and full, square and
// not (full U of a non-square batch: the QR path throughout), values only,
// one and two threads.
TEST_P(SvdTest, GramPathAndTheMatricesItLeaves) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{32, 32}, {20, 33}, {40, 17}}) {
    for (bool full : {false, true}) {
      const int64_t count = 21, k = std::min(m, n);
      Mats<double> a(count, m, n);
      fill_normal(a);
      for (int64_t b = 0; b < count; b += 5)
        for (int64_t i = 0; i < m; ++i) a(b, i, b % n) *= 1e-6;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << m << "x" << n << " full " << full << " threads " << threads);
        Mats<double> u(count, m, full ? m : k), vh(count, full ? n : k, n);
        Vecs<double> s(count, k), s2(count, k);
        svd(a.view(true), u.view(true), s.view(true), vh.view(true), {full, threads});
        svdvals(a.view(true), s2.view(true), {full, threads});
        for (int64_t b = 0; b < count; ++b) {
          expect_good(svd_errors(a, u, s, vh, b, true), b);
          for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(s(b, i), s2(b, i), 4 * k * eps<double>() * s(b, 0)) << b;
        }
      }
    }
  }
}

template <class T> void check_structured(Mats<T> a, bool full) {
  const int64_t m = a.rows, n = a.cols, k = std::min(m, n), count = a.count;
  Mats<T> u(count, m, full ? m : k), vh(count, full ? n : k, n);
  Vecs<T> s(count, k);
  svd(a.view(true), u.view(true), s.view(true), vh.view(true), {full});
  for (int64_t b = 0; b < count; ++b) expect_good(svd_errors(a, u, s, vh, b, true), b);
}

TEST_P(SvdTest, RankDeficientZeroAndIdentity) {
  for (int64_t count : {1, 10}) {
    Mats<double> r(count, 30, 20);
    fill_normal(r);
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < 30; ++i) {
        r(b, i, 3) = 0;
        r(b, i, 7) = r(b, i, 1) - r(b, i, 2);
        r(b, i, 11) = 3 * r(b, i, 7);
      }
    check_structured(r, true);
    check_structured(r, false);
    Mats<double> z(count, 12, 17);
    check_structured(z, true);
    Mats<double> id(count, 20, 20);
    for (int64_t b = 0; b < count; ++b)
      for (int64_t i = 0; i < 20; ++i) id(b, i, i) = 1;
    check_structured(id, true);
  }
}

// One-sided Jacobi works with squared column norms. Columns 1e-140 (f64) or
// 1e-17 (f32) of the largest are still factored accurately; columns whose
// squared norms would be subnormal (1e-160, 1e-21) are refused with an error
// that says so, never answered with NaN or with a U that is not orthogonal.
template <class T>
Mats<T> with_small_columns(int64_t m, int64_t n, T factor, int64_t count = 1) {
  Mats<T> a(count, m, n);
  fill_normal(a);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j : {3, 7, 8}) a(b, i, j) *= factor;
  return a;
}

TEST_P(SvdTest, ColumnsFarBelowTheLargest) {
  // Batches of small matrices (the compact path, whose rotations scale by
  // the larger squared norm).
  check_structured(with_small_columns<double>(30, 20, 1e-140, 10), true);
  check_structured(with_small_columns<float>(30, 20, 1e-17f, 18), false);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{30, 20}, {72, 70}}) {
    check_structured(with_small_columns<double>(m, n, 1e-140), true);
    check_structured(with_small_columns<float>(m, n, 1e-17f), false);
    for (bool dbl : {true, false}) {
      try {
        if (dbl) check_structured(with_small_columns<double>(m, n, 1e-160), false);
        else check_structured(with_small_columns<float>(m, n, 1e-21f), false);
        ADD_FAILURE() << "expected InvalidArgument for " << m << "x" << n << (dbl ? " f64" : " f32");
      } catch (const InvalidArgument& e) {
        EXPECT_THAT(e.what(), HasSubstr("too wide a range")) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("1e154 (float64)")) << e.what();
      }
    }
  }
}

// Graded A = D_r B D_c with B orthonormal and D growing along the rows and
// columns: Jacobi with QR preconditioning keeps the small singular values
// relatively accurate; bidiagonalization without pivoting (gesdd) does not.
template <class T> void check_graded(int64_t count, int64_t m, int64_t n, double row_decades, double col_decades) {
  SCOPED_TRACE(::testing::Message() << "graded " << m << "x" << n << " rows 1e" << row_decades << " cols 1e"
                                    << col_decades << " bytes " << sizeof(T));
  Mats<T> a(count, m, n);
  const int64_t big = std::max(m, n);
  for (int64_t b = 0; b < count; ++b) {
    const auto q = random_orthogonal(big);  // B: orthonormal columns (or rows), so κ(B) = 1
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        a(b, i, j) = static_cast<T>(q[i * big + j] * std::pow(10.0L, row_decades * i / std::max<int64_t>(m - 1, 1)) *
                                    std::pow(10.0L, col_decades * j / std::max<int64_t>(n - 1, 1)));
  }
  const int64_t k = std::min(m, n);
  Vecs<T> s(count, k);
  Mats<T> u(count, m, k), vh(count, k, n);
  svd(a.view(true), u.view(true), s.view(true), vh.view(true), {false});
  for (int64_t b = 0; b < count; ++b) {
    std::vector<long double> la(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) la[i * n + j] = a(b, i, j);
    auto ref = reference_sv(la, m, n);
    std::vector<T> lap(static_cast<size_t>(m * n)), ls(static_cast<size_t>(k));
    for (int64_t i = 0; i < m * n; ++i) lap[i] = a.data[b * m * n + i];
    if (a.colmajor) FAIL();
    ASSERT_EQ(gesdd_ref(m, n, lap.data(), ls.data()), 0);
    double mine = 0, lapack = 0;
    for (int64_t i = k - 3; i < k; ++i) {  // the three smallest
      mine = std::max(mine, static_cast<double>(std::abs(s(b, i) - ref[i]) / ref[i]));
      lapack = std::max(lapack, static_cast<double>(std::abs(ls[i] - ref[i]) / ref[i]));
    }
    EXPECT_LT(mine, 100 * k * eps<T>()) << "b " << b << " smallest sv " << static_cast<double>(ref[k - 1]);
    EXPECT_GT(lapack, 100 * mine) << "b " << b << ": the input should be hard for gesdd";
    expect_good(svd_errors(a, u, s, vh, b, true), b);
  }
}

TEST_P(SvdTest, GradedMatricesKeepSmallSingularValuesAccurate) {
  check_graded<double>(1, 40, 30, 0, 14);  // column graded
  check_graded<double>(1, 30, 30, 14, 0);  // row graded
  check_graded<double>(1, 36, 24, 7, 8);   // both
  check_graded<double>(1, 24, 36, 8, 7);   // wide
  check_graded<double>(9, 24, 24, 0, 13);  // compact batch
  check_graded<double>(9, 24, 24, 0, 6);   // compact, mild enough for the Gram matrix's eigenvalues
  check_graded<double>(9, 24, 24, 6, 0);
  check_graded<float>(1, 30, 20, 0, 6);
  check_graded<float>(17, 16, 16, 4, 5);
}

// From n = 64 the sweeps start from the eigenvectors W of the Gram matrix
// XᵀX: sizes that leave a partial 32-column block, tall and wide, thin and
// full, f32 and f64, one and two threads, a batch, rank-deficient (a singular
// triangular factor: the restart from W = I), graded mildly enough for W to
// be kept, and strongly (eigenvalues below ε_f64 ‖XᵀX‖: the restart).
TEST_P(SvdTest, DeferredRotationsOnLargerMatrices) {
  check_svd<double>(1, 100, 100, false, false, 1);
  check_svd<double>(1, 130, 100, true, true, 2);
  check_svd<double>(1, 70, 130, false, false, 2);
  check_svd<float>(1, 130, 130, true, false, 2);
  check_svd<float>(1, 100, 66, false, true, 1);
  check_svd<double>(3, 70, 66, false, false, 2);  // a batch: one matrix per thread
  Mats<double> r(1, 90, 80);
  fill_normal(r);
  for (int64_t i = 0; i < 90; ++i) {
    r(0, i, 5) = 0;
    r(0, i, 9) = r(0, i, 1) - 2 * r(0, i, 2);
    for (int64_t j = 40; j < 80; ++j) r(0, i, j) = r(0, i, j - 40) + r(0, i, j - 39);
  }
  check_structured(r, true);
  check_structured(r, false);
  Mats<float> z(1, 70, 80);
  check_structured(z, false);
  check_graded<double>(1, 100, 90, 0, 5);     // W passes the check
  check_graded<double>(1, 120, 100, 0, 8);   // passes too, costing sweeps
  check_graded<double>(1, 100, 100, 0, 14);  // fails it: the restart
  check_graded<double>(1, 110, 70, 7, 7);
  check_graded<float>(1, 80, 70, 0, 6);
}

// From min(m, n) = 97 the pivoted QR runs in blocks of 32 columns whose
// trailing update waits for the block's end, the pivots chosen from
// downdated norms; a block stops early where a norm must be recomputed
// (the rank-40 product). Tall and wide, f32 and f64, one and two threads,
// dependent columns, grading.
TEST_P(SvdTest, BlockedPivotedQr) {
  check_svd<double>(1, 180, 160, false, false, 2);
  check_svd<float>(1, 150, 170, true, true, 1);
  Mats<double> r(1, 170, 150);
  fill_normal(r);
  for (int64_t i = 0; i < 170; ++i) {
    r(0, i, 3) = 0;
    r(0, i, 40) = r(0, i, 1) - 2 * r(0, i, 2);
    for (int64_t j = 100; j < 150; ++j) r(0, i, j) = r(0, i, j - 100) + r(0, i, j - 99);
  }
  check_structured(r, true);
  check_structured(r, false);
  Mats<double> left(1, 160, 40), right(1, 40, 140), low(1, 160, 140);  // rank 40: norms drop inside a block
  fill_normal(left);
  fill_normal(right);
  for (int64_t i = 0; i < 160; ++i)
    for (int64_t j = 0; j < 140; ++j)
      for (int64_t p = 0; p < 40; ++p) low(0, i, j) += left(0, i, p) * right(0, p, j);
  check_structured(low, false);
  check_graded<double>(1, 150, 150, 0, 14);
  check_graded<double>(1, 160, 130, 7, 7);
  check_graded<float>(1, 140, 130, 0, 6);
}

TEST_P(SvdTest, EdgeShapesAndErrors) {
  Mats<double> a(1, 0, 3), u(1, 0, 0), vh(1, 3, 3);
  Vecs<double> s(1, 0);
  svd(a.view(), u.view(), s.view(), vh.view(), {true});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(vh(i, j), i == j ? 1.0 : 0.0);
  for (int64_t count : {1, 11}) {
    Mats<float> bad(count, 5, 4), ub(count, 5, 4), vb(count, 4, 4);
    Vecs<float> sb(count, 4);
    bad(count - 1, 1, 3) = std::numeric_limits<float>::quiet_NaN();
    try {
      svd(bad.view(true), ub.view(true), sb.view(true), vb.view(true), {false});
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(count == 1 ? "'svd: a[0]'" : "'svd: a[10]'"));
      EXPECT_THAT(e.what(), HasSubstr("nan at row 1, column 3"));
    }
    Mats<float> wide(count, 4, 5);
    wide(count - 1, 3, 1) = std::numeric_limits<float>::infinity();
    Vecs<float> sw(count, 4);
    try {
      svdvals(wide.view(true), sw.view(true));
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("inf at row 3, column 1"));
    }
  }
  Mats<double> sq(1, 4, 4), uw(1, 4, 3), vw(1, 4, 4);
  Vecs<double> sw(1, 4);
  EXPECT_THROW(svd(sq.view(), uw.view(), sw.view(), vw.view()), InvalidArgument);
}

SINEW_LINALG_ISA_TESTS(SvdTest);

}  // namespace
}  // namespace sinew::linalg
