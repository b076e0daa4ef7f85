// Cholesky, triangular solve and Cholesky solve against LAPACKE, with
// residuals scaled by n·ε, on both ISA copies, single matrices, batches
// (compact and per-matrix paths), both layouts and the error cases.
#include "sinew/linalg/cholesky.h"

#include <gmock/gmock.h>
#include <lapacke.h>

#include <cstdlib>
#include <string>

#include "linalg_testing.h"
#include "sinew/core/error.h"

namespace sinew::linalg {
namespace {

using namespace testing;
using ::testing::HasSubstr;

int potrf_ref(double* a, int64_t n) {
  OneBlasThread one;
  return LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', n, a, n);
}
int potrf_ref(float* a, int64_t n) {
  OneBlasThread one;
  return LAPACKE_spotrf(LAPACK_ROW_MAJOR, 'L', n, a, n);
}

// LAPACK's lower factor of matrix b of a, row-major; `info` is potrf's.
template <class T> std::vector<T> lapack_factor(const Mats<T>& a, int64_t b, int& info) {
  const int64_t n = a.rows;
  std::vector<T> ref(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) ref[i * n + j] = a(b, i, j);
  info = potrf_ref(ref.data(), n);
  return ref;
}

// ‖A − L Lᵀ‖_F / (n ε ‖A‖_F) of matrix b, with l lower (or upper: A = Uᵀ U).
template <class T> double factor_residual(const Mats<T>& a, const Mats<T>& l, int64_t b, bool upper) {
  const int64_t n = a.rows;
  long double r = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double s = 0;
      for (int64_t k = 0; k < n; ++k)
        s += upper ? static_cast<long double>(l(b, k, i)) * l(b, k, j) : static_cast<long double>(l(b, i, k)) * l(b, j, k);
      const long double d = a(b, i, j) - s;
      r += d * d;
    }
  return static_cast<double>(std::sqrt(r) / (n * eps<T>() * frob(a, b)));
}

template <class T> void check_cholesky(int64_t count, int64_t n, bool colmajor, bool upper, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " colmajor " << colmajor << " upper "
                                    << upper << " threads " << threads << " bytes " << sizeof(T));
  Mats<T> a(count, n, n, colmajor);
  fill_spd(a);
  Mats<T> l(count, n, n, !colmajor);
  cholesky(a.view(), l.view(), {upper, threads});
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (upper ? i > j : i < j) ASSERT_EQ(l(b, i, j), T(0)) << "b " << b << " (" << i << ", " << j << ")";
    EXPECT_LT(factor_residual(a, l, b, upper), 4.0) << "b " << b;
    int info = -1;
    const std::vector<T> ref = lapack_factor(a, b, info);
    ASSERT_EQ(info, 0);
    long double d = 0, s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const long double mine = upper ? l(b, j, i) : l(b, i, j);
        d += (mine - ref[i * n + j]) * (mine - ref[i * n + j]);
        s += mine * mine;
      }
    EXPECT_LT(std::sqrt(d / s), 20 * n * eps<T>()) << "b " << b << " differs from LAPACK potrf";
  }
}

class CholeskyTest : public IsaTest {};

TEST_P(CholeskyTest, SingleMatricesMatchLapack) {
  for (int64_t n : {1, 2, 7, 31, 32, 33, 64, 97, 150}) {
    check_cholesky<double>(1, n, false, false, 1);
    check_cholesky<float>(1, n, true, false, 1);
  }
  check_cholesky<double>(1, 150, true, true, 2);
  check_cholesky<float>(1, 70, false, true, 2);
}

TEST_P(CholeskyTest, BatchesMatchLapack) {
  for (int64_t n : {1, 3, 8, 17, 32, 48}) {  // the compact path: Vec<T>::W matrices per call
    check_cholesky<double>(21, n, false, false, 2);
    check_cholesky<float>(19, n, true, true, 2);
  }
  check_cholesky<double>(5, 49, true, false, 2);  // per-matrix path
  check_cholesky<float>(3, 80, false, true, 1);
}

TEST_P(CholeskyTest, IdentityGivesIdentityAndInPlaceWorks) {
  Mats<double> a(3, 40, 40);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 40; ++i) a(b, i, i) = 4.0;
  cholesky(a.view(), a.view());
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 40; ++i)
      for (int64_t j = 0; j < 40; ++j) ASSERT_EQ(a(b, i, j), i == j ? 2.0 : 0.0);
}

TEST_P(CholeskyTest, NotPositiveDefiniteNamesThePivot) {
  for (int64_t n : {6, 40, 100}) {
    for (int64_t count : {1, 4}) {
      Mats<double> a(count, n, n);
      fill_spd(a);
      // Make the leading 3x3 minor of matrix count-1 indefinite: A[2][2] tiny.
      const int64_t b = count - 1;
      a(b, 2, 2) = 1e-3;
      a(b, 2, 1) = a(b, 1, 2) = 3.0;
      Mats<double> l(count, n, n);
      try {
        cholesky(a.view(), l.view());
        FAIL() << "expected InvalidArgument";
      } catch (const InvalidArgument& e) {
        EXPECT_THAT(e.what(), HasSubstr("not positive definite"));
        EXPECT_THAT(e.what(), HasSubstr("pivot 2 is -"));
        EXPECT_THAT(e.what(), HasSubstr(count == 1 ? "'cholesky: a'" : "'cholesky: a[3]'"));
      }
    }
  }
}

TEST_P(CholeskyTest, NonFiniteAndShapeErrors) {
  for (int64_t count : {1, 9}) {
    Mats<float> a(count, 5, 5);
    fill_spd(a);
    a(count - 1, 4, 1) = std::numeric_limits<float>::quiet_NaN();
    Mats<float> l(count, 5, 5);
    try {
      cholesky(a.view(), l.view());
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("nan at row 4, column 1"));
    }
    // The upper triangle is not read.
    a(count - 1, 4, 1) = 1;
    a(count - 1, 1, 4) = std::numeric_limits<float>::infinity();
    EXPECT_NO_THROW(cholesky(a.view(), l.view()));
  }
  Mats<double> rect(1, 3, 4), out(1, 3, 4);
  EXPECT_THROW(cholesky(rect.view(), out.view()), InvalidArgument);
  Mats<double> sq(1, 3, 3);
  Mats<float> wrong(1, 3, 3);
  EXPECT_THROW(cholesky(sq.view(), wrong.view()), InvalidArgument);
  Mats<double> empty(1, 0, 0), empty_out(1, 0, 0);
  EXPECT_NO_THROW(cholesky(empty.view(), empty_out.view()));
  Mats<double> none(0, 4, 4), none_out(0, 4, 4);
  EXPECT_NO_THROW(cholesky(none.view(true), none_out.view(true)));
}

// A batch of n x n matrices at b * bs + i * rs + j * cs of `data`: any
// layout, strided ones included, for the paths that factor in the output.
template <class T> struct Strided {
  int64_t count, n, rs, cs, bs;
  std::vector<T> data;
  Strided(int64_t count_, int64_t n_, int64_t rs_, int64_t cs_, int64_t ld)
      : count(count_), n(n_), rs(rs_), cs(cs_), bs(ld * n_), data(static_cast<size_t>(count_ * ld * n_), T(-7)) {}
  T& operator()(int64_t b, int64_t i, int64_t j) { return data[static_cast<size_t>(b * bs + i * rs + j * cs)]; }
  TensorView view() {
    if (count == 1) return TensorView(data.data(), dtype_of<T>(), {n, n}, {rs, cs});
    return TensorView(data.data(), dtype_of<T>(), {count, n, n}, {bs, rs, cs});
  }
};

// Column-major (rs 1) or row-major, with `pad` unused elements after each
// column (row): leading dimension n + pad.
template <class T> Strided<T> strided(int64_t count, int64_t n, bool colmajor, int64_t pad) {
  const int64_t ld = n + pad;
  return colmajor ? Strided<T>(count, n, 1, ld, ld) : Strided<T>(count, n, ld, 1, ld);
}

// The triangle cholesky reads from a copied in, NaN in the other one.
template <class T> void copy_triangle(const Mats<T>& a, Strided<T>& s, bool upper) {
  for (int64_t b = 0; b < a.count; ++b)
    for (int64_t i = 0; i < a.rows; ++i)
      for (int64_t j = 0; j < a.rows; ++j)
        s(b, i, j) = (upper ? i <= j : i >= j) ? a(b, i, j) : std::numeric_limits<T>::quiet_NaN();
}

// out (may be `in` itself) against LAPACK's factor of a.
template <class T> void expect_factor(const Mats<T>& a, Strided<T>& out, bool upper) {
  const int64_t n = a.rows;
  for (int64_t b = 0; b < a.count; ++b) {
    int info = -1;
    const std::vector<T> ref = lapack_factor(a, b, info);
    ASSERT_EQ(info, 0);
    long double d = 0, s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const T mine = upper ? out(b, j, i) : out(b, i, j);
        if (j > i) {
          ASSERT_EQ(mine, T(0)) << "b " << b << " (" << i << ", " << j << ") of the lower factor";
          continue;
        }
        d += (mine - static_cast<long double>(ref[i * n + j])) * (mine - ref[i * n + j]);
        s += static_cast<long double>(mine) * mine;
      }
    EXPECT_LT(std::sqrt(d / s), 20 * n * eps<T>()) << "b " << b << " differs from LAPACK potrf";
  }
}

// Every layout, in place and into a separate output, padded leading
// dimensions, single matrices (threaded blocked steps above 128) and a batch.
template <class T> void check_layouts(int64_t count, int64_t n, int threads) {
  Mats<T> a(count, n, n);
  fill_spd(a);
  for (bool upper : {false, true})
    for (bool colmajor : {false, true})
      for (int64_t pad : {0, 3}) {
        SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " upper " << upper << " colmajor "
                                          << colmajor << " pad " << pad << " threads " << threads);
        Strided<T> in = strided<T>(count, n, colmajor, pad);
        copy_triangle(a, in, upper);
        Strided<T> out = strided<T>(count, n, !colmajor, 2 * pad);
        cholesky(in.view(), out.view(), {upper, threads});
        expect_factor(a, out, upper);
        Strided<T> same = strided<T>(count, n, colmajor, pad);
        copy_triangle(a, same, upper);
        cholesky(same.view(), same.view(), {upper, threads});
        expect_factor(a, same, upper);
        out = strided<T>(count, n, colmajor, 2 * pad);
        cholesky(in.view(), out.view(), {upper, threads});
        expect_factor(a, out, upper);
      }
}

TEST_P(CholeskyTest, EveryLayoutInPlaceAndOut) {
  for (int64_t n : {1, 9, 64, 131}) check_layouts<double>(1, n, 1);
  check_layouts<double>(1, 200, 2);
  check_layouts<float>(1, 150, 2);
  check_layouts<float>(3, 70, 2);
  check_layouts<double>(2, 129, 1);
}

// Pivot p of L Lᵀ (L lower, positive diagonal) made -1 by lowering A[p][p].
template <class T> void fill_failing_at(Mats<T>& a, int64_t p) {
  const int64_t n = a.rows;
  std::normal_distribution<double> d;
  std::vector<double> l(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) l[i * n + j] = i == j ? 1.0 + std::abs(d(rng())) : 0.25 * d(rng());
  for (int64_t b = 0; b < a.count; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        long double s = 0;
        for (int64_t k = 0; k <= j; ++k) s += static_cast<long double>(l[i * n + k]) * l[j * n + k];
        if (i == p && j == p) s -= static_cast<long double>(l[p * n + p]) * l[p * n + p] + 1;
        a(b, i, j) = a(b, j, i) = static_cast<T>(s);
      }
}

TEST_P(CholeskyTest, InPlaceErrorsNameThePivotAndTheEntry) {
  for (bool upper : {false, true})
    for (bool colmajor : {false, true})
      for (int64_t p : {3, 100, 170}) {
        SCOPED_TRACE(::testing::Message() << "upper " << upper << " colmajor " << colmajor << " pivot " << p);
        Mats<double> a(2, 180, 180);
        fill_failing_at(a, p);
        for (int64_t i = 0; i < 180; ++i) a(0, i, i) += 1e3;  // matrix 0 is fine
        Strided<double> s = strided<double>(2, 180, colmajor, 1);
        copy_triangle(a, s, upper);
        try {
          cholesky(s.view(), s.view(), {upper, 2});
          FAIL() << "expected InvalidArgument";
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr("'cholesky: a[1]'"));
          EXPECT_THAT(e.what(), HasSubstr("pivot " + std::to_string(p) + " is -1"));
        }
        Mats<double> one(1, 180, 180);
        fill_failing_at(one, p);
        Strided<double> t = strided<double>(1, 180, colmajor, 0);
        copy_triangle(one, t, upper);
        t(0, upper ? 5 : 150, upper ? 150 : 5) = std::numeric_limits<double>::infinity();
        try {
          cholesky(t.view(), t.view(), {upper, 2});
          FAIL() << "expected InvalidArgument";
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr("'cholesky: a'"));
          EXPECT_THAT(e.what(), HasSubstr(upper ? "inf at row 5, column 150" : "inf at row 150, column 5"));
        }
      }
}

// A batch on the compact path (count not a multiple of W, so a partial
// last group) with matrices that fail in the middle of a full group: the
// lowest failing index is named, with LAPACK's pivot or the non-finite
// entry, whichever thread meets which failure first.
// A matrix that LAPACK finds not positive definite at pivot p (0-based).
template <class T> Mats<T> failing_at(int64_t n, int64_t p) {
  Mats<T> bad(1, n, n);
  fill_failing_at(bad, p);
  int info = 0;
  lapack_factor(bad, 0, info);
  EXPECT_EQ(info, p + 1);
  return bad;
}

// Runs `run`, which must throw InvalidArgument naming batch index `index`
// and containing `what`.
template <class F> void expect_named_failure(F&& run, int64_t index, const std::string& what) {
  try {
    run();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'cholesky: a[" + std::to_string(index) + "]'"));
    EXPECT_THAT(e.what(), HasSubstr(what));
  }
}

template <class T> void check_compact_failures(int64_t count, int64_t n, bool colmajor, bool upper, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " colmajor " << colmajor << " upper "
                                    << upper << " threads " << threads << " bytes " << sizeof(T));
  const int64_t p = n - 2, first = 19, later = count - 2, nan_at = 11;
  const Mats<T> bad = failing_at<T>(n, p);
  Mats<T> a(count, n, n, colmajor);
  fill_spd(a);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a(first, i, j) = a(later, i, j) = bad(0, i, j);
  a(later, 1, 1) = -a(later, 1, 1);  // fails at an earlier pivot, in a later matrix
  Mats<T> l(count, n, n);
  expect_named_failure([&] { cholesky(a.view(), l.view(), {upper, threads}); }, first,
                       "pivot " + std::to_string(p) + " is -");
  const int64_t r = upper ? 2 : 5, c = upper ? 5 : 2;
  a(nan_at, r, c) = std::numeric_limits<T>::quiet_NaN();
  expect_named_failure([&] { cholesky(a.view(), l.view(), {upper, threads}); }, nan_at,
                       "nan at row " + std::to_string(r) + ", column " + std::to_string(c));
}

// In place, column-major lower or row-major upper (the path that factors
// each matrix where it lies, one at a time): a batch matches LAPACK, and
// failures in the middle of a thread's run name the lowest failing index
// with LAPACK's pivot, or the first non-finite entry by rows.
template <class T> void check_in_place_batch(int64_t count, int64_t n, bool upper, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " upper " << upper << " threads "
                                    << threads << " bytes " << sizeof(T));
  Mats<T> a(count, n, n);
  fill_spd(a);
  Strided<T> s = strided<T>(count, n, !upper, 0);
  copy_triangle(a, s, upper);
  cholesky(s.view(), s.view(), {upper, threads});
  expect_factor(a, s, upper);
  const int64_t p = n - 2, first = 19, later = count - 2, nan_at = 11;
  const Mats<T> bad = failing_at<T>(n, p);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a(first, i, j) = a(later, i, j) = bad(0, i, j);
  a(later, 1, 1) = -a(later, 1, 1);  // fails at an earlier pivot, in a later matrix
  copy_triangle(a, s, upper);
  expect_named_failure([&] { cholesky(s.view(), s.view(), {upper, threads}); }, first,
                       "pivot " + std::to_string(p) + " is -");
  const int64_t r = upper ? 2 : 5, c = upper ? 5 : 2;
  copy_triangle(a, s, upper);
  s(nan_at, r, c) = std::numeric_limits<T>::quiet_NaN();
  s(nan_at, upper ? 1 : 6, upper ? 6 : 1) = std::numeric_limits<T>::infinity();  // first by columns, not rows
  expect_named_failure([&] { cholesky(s.view(), s.view(), {upper, threads}); }, nan_at,
                       "nan at row " + std::to_string(r) + ", column " + std::to_string(c));
  // Met late in the factorization, after a failed pivot: the entry is still
  // named, the first by rows.
  for (bool inf_too : {false, true}) {
    copy_triangle(a, s, upper);
    s(nan_at, 1, 1) = -s(nan_at, 1, 1);
    const int64_t i = n - 1, j = inf_too ? 0 : n - 3;
    s(nan_at, upper ? j : i, upper ? i : j) = std::numeric_limits<T>::quiet_NaN();
    if (inf_too) s(nan_at, n - 2, n - 2) = std::numeric_limits<T>::infinity();
    const std::string at = inf_too ? "inf at row " + std::to_string(n - 2) + ", column " + std::to_string(n - 2)
                                   : "nan at row " + std::to_string(upper ? j : i) + ", column " +
                                         std::to_string(upper ? i : j);
    expect_named_failure([&] { cholesky(s.view(), s.view(), {upper, threads}); }, nan_at, at);
  }
}

TEST_P(CholeskyTest, InPlaceBatchesOneAtATime) {
  for (int threads : {1, 2})
    for (bool upper : {false, true}) {
      check_in_place_batch<double>(45, 32, upper, threads);
      check_in_place_batch<float>(45, 32, upper, threads);
      check_in_place_batch<double>(37, 13, upper, threads);
      check_in_place_batch<float>(29, 48, upper, threads);
    }
  check_in_place_batch<double>(150, 47, false, 2);
  check_in_place_batch<float>(131, 33, true, 2);
}

TEST_P(CholeskyTest, CompactBatchesMatchLapackAndNameTheLowestFailure) {
  for (int threads : {1, 2}) {
    check_compact_failures<double>(45, 32, false, false, threads);
    check_compact_failures<float>(45, 32, true, true, threads);
    check_compact_failures<double>(45, 13, true, true, threads);
    check_compact_failures<float>(45, 13, false, false, threads);
  }
  // Several runs of groups per thread.
  check_cholesky<double>(261, 32, true, false, 2);
  check_cholesky<float>(517, 32, false, true, 2);
  check_cholesky<float>(70, 31, true, false, 1);
  // Contiguous (moved by lines) and padded (by columns), NaN in the triangle not read.
  check_layouts<double>(19, 32, 2);
  check_layouts<float>(37, 13, 1);
}

// ‖op(A) X − B‖_F / (n ε ‖A‖_F ‖X‖_F) for the triangular part of a.
template <class T>
double solve_residual(const Mats<T>& a, const Mats<T>& x, const Mats<T>& bm, int64_t b, bool upper, bool left,
                      bool unit) {
  const int64_t n = a.rows;
  auto tri = [&](int64_t i, int64_t j) -> long double {
    if (i == j) return unit ? 1 : a(b, i, j);
    return (upper ? i < j : i > j) ? a(b, i, j) : 0;
  };
  long double r = 0, an = 0, xn = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) an += tri(i, j) * tri(i, j);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) {
      long double s = 0;
      if (left)
        for (int64_t k = 0; k < n; ++k) s += tri(i, k) * x(b, k, j);
      else
        for (int64_t k = 0; k < n; ++k) s += x(b, i, k) * tri(k, j);
      r += (s - bm(b, i, j)) * (s - bm(b, i, j));
      xn += static_cast<long double>(x(b, i, j)) * x(b, i, j);
    }
  return static_cast<double>(std::sqrt(r) / (n * eps<T>() * std::sqrt(an) * std::sqrt(xn)));
}

template <class T> void check_trsm(int64_t count, int64_t n, int64_t k, bool upper, bool left, bool unit) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " k " << k << " upper " << upper
                                    << " left " << left << " unit " << unit);
  Mats<T> a(count, n, n, upper);
  fill_normal(a);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < n; ++i) a(b, i, i) = static_cast<T>(n + std::abs(a(b, i, i)));  // well conditioned
  Mats<T> bm(count, left ? n : k, left ? k : n, !upper);
  fill_normal(bm);
  Mats<T> x(count, bm.rows, bm.cols);
  solve_triangular(a.view(), bm.view(), x.view(), {upper, left, unit, 2});
  for (int64_t b = 0; b < count; ++b) EXPECT_LT(solve_residual(a, x, bm, b, upper, left, unit), 2.0);
}

TEST_P(CholeskyTest, TriangularSolvesAllVariants) {
  for (bool upper : {false, true})
    for (bool left : {false, true})
      for (bool unit : {false, true}) {
        check_trsm<double>(1, 70, 5, upper, left, unit);
        check_trsm<float>(3, 17, 40, upper, left, unit);
      }
  check_trsm<double>(1, 130, 130, false, true, false);
}

TEST_P(CholeskyTest, TriangularSolveErrorsAndInPlace) {
  Mats<double> a(1, 4, 4), b(1, 4, 2);
  for (int i = 0; i < 4; ++i) a(i, i) = 1;
  a(2, 2) = 0;
  try {
    solve_triangular(a.view(), b.view(), b.view());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("diagonal entry 2"));
  }
  EXPECT_NO_THROW(solve_triangular(a.view(), b.view(), b.view(), {.unit_diagonal = true}));
  a(2, 2) = 2;
  b(1, 0) = 6;
  b(2, 1) = 4;
  solve_triangular(a.view(), b.view(), b.view());
  EXPECT_EQ(b(1, 0), 6);
  EXPECT_EQ(b(2, 1), 2);
  Mats<double> wrong(1, 5, 2);
  EXPECT_THROW(solve_triangular(a.view(), wrong.view(), wrong.view()), InvalidArgument);
  b(3, 1) = std::numeric_limits<double>::infinity();
  try {
    solve_triangular(a.view(), b.view(), b.view());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'solve_triangular: b'"));
    EXPECT_THAT(e.what(), HasSubstr("inf at row 3, column 1"));
  }
}

template <class T> void check_cholesky_solve(int64_t count, int64_t n, int64_t k, bool upper) {
  Mats<T> a(count, n, n);
  fill_spd(a);
  Mats<T> f(count, n, n), bm(count, n, k, true), x(count, n, k);
  fill_normal(bm);
  cholesky(a.view(), f.view(), {upper});
  cholesky_solve(f.view(), bm.view(), x.view(), {upper, 2});
  for (int64_t b = 0; b < count; ++b) {
    long double r = 0, xn = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        long double s = 0;
        for (int64_t q = 0; q < n; ++q) s += static_cast<long double>(a(b, i, q)) * x(b, q, j);
        r += (s - bm(b, i, j)) * (s - bm(b, i, j));
        xn += static_cast<long double>(x(b, i, j)) * x(b, i, j);
      }
    EXPECT_LT(std::sqrt(r) / (n * eps<T>() * frob(a, b) * std::sqrt(xn)), 4.0) << "n " << n << " b " << b;
  }
}

TEST_P(CholeskyTest, CholeskySolve) {
  check_cholesky_solve<double>(1, 100, 3, false);
  check_cholesky_solve<double>(4, 20, 1, true);
  check_cholesky_solve<float>(2, 45, 7, false);
}

SINEW_LINALG_ISA_TESTS(CholeskyTest);

}  // namespace
}  // namespace sinew::linalg
