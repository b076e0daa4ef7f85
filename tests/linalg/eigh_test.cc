// eigh / eigvalsh against LAPACKE syevd, with residuals ‖AV − VΛ‖ and
// ‖VᵀV − I‖ scaled by n·ε, for the Jacobi (small, blocked, compact) and
// tridiagonal methods on both ISA copies; identity, zero, clustered and
// indefinite matrices, both triangles, both layouts and the error cases.
#include "sinew/linalg/eigh.h"

#include <cblas.h>
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

int syevd_ref(int64_t n, double* a, double* w) {
  OneBlasThread one;
  return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'N', 'L', n, a, n, w);
}
int syevd_ref(int64_t n, float* a, float* w) {
  OneBlasThread one;
  return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, 'N', 'L', n, a, n, w);
}

struct EighErrors {
  double residual = 0, orthogonality = 0, vs_lapack = 0;
};

// Scaled errors of (w, v) for matrix b of a (symmetric, both triangles set).
template <class T> EighErrors eigh_errors(const Mats<T>& a, Vecs<T>& w, const Mats<T>* v, int64_t b) {
  const int64_t n = a.rows;
  EighErrors e;
  const long double an = std::max<long double>(frob(a, b), 1e-300L), scale = n * eps<T>();
  for (int64_t i = 0; i + 1 < n; ++i) EXPECT_LE(w(b, i), w(b, i + 1)) << "not ascending";
  if (v) {
    long double r = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double s = 0;
        for (int64_t k = 0; k < n; ++k) s += static_cast<long double>(a(b, i, k)) * (*v)(b, k, j);
        s -= static_cast<long double>((*v)(b, i, j)) * w(b, j);
        r += s * s;
      }
    e.residual = static_cast<double>(std::sqrt(r) / (scale * an));
    e.orthogonality = static_cast<double>(orthogonality(*v, b) / scale);
  }
  std::vector<T> ref(static_cast<size_t>(n * n)), wr(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) ref[i * n + j] = a(b, i, j);
  EXPECT_EQ(syevd_ref(n, ref.data(), wr.data()), 0);
  long double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max<long double>(d, std::abs(static_cast<long double>(w(b, i)) - wr[i]));
  e.vs_lapack = static_cast<double>(d / (scale * an));
  return e;
}

template <class T> void expect_good(const EighErrors& e, int64_t b) {
  EXPECT_LT(e.residual, 10.0) << "b " << b;
  EXPECT_LT(e.orthogonality, 10.0) << "b " << b;
  EXPECT_LT(e.vs_lapack, 4.0) << "b " << b;
}

template <class T>
void check_eigh(int64_t count, int64_t n, EighMethod method, bool upper, bool colmajor, int threads) {
  SCOPED_TRACE(::testing::Message() << "count " << count << " n " << n << " method " << int(method) << " upper "
                                    << upper << " colmajor " << colmajor << " bytes " << sizeof(T));
  Mats<T> a(count, n, n, colmajor);
  fill_normal(a);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) a(b, i, j) = a(b, j, i);
  // The triangle that is not read holds garbage (NaN) in a copy.
  Mats<T> in = a;
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (upper ? i > j : i < j) in(b, i, j) = std::numeric_limits<T>::quiet_NaN();
  Vecs<T> w(count, n), w2(count, n);
  Mats<T> v(count, n, n, !colmajor);
  eigh(in.view(true), w.view(true), v.view(true), {upper, method, threads});
  eigvalsh(in.view(true), w2.view(true), {upper, method, threads});
  for (int64_t b = 0; b < count; ++b) {
    expect_good<T>(eigh_errors(a, w, &v, b), b);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(w(b, i), w2(b, i), 4 * n * eps<T>() * frob(a, b)) << "eigvalsh";
  }
}

class EighTest : public IsaTest {};

TEST_P(EighTest, SingleMatricesEachMethod) {
  for (EighMethod m : {EighMethod::kAuto, EighMethod::kJacobi, EighMethod::kTridiagonal}) {
    for (int64_t n : {1, 2, 5, 16, 17, 40}) {
      check_eigh<double>(1, n, m, false, false, 2);
      check_eigh<float>(1, n, m, true, true, 1);
    }
  }
  check_eigh<double>(1, 130, EighMethod::kTridiagonal, false, true, 2);  // blocked tridiagonalization
  check_eigh<float>(1, 100, EighMethod::kAuto, true, false, 2);
}

TEST_P(EighTest, BlockedJacobi) {
  check_eigh<double>(1, 66, EighMethod::kJacobi, false, false, 2);  // 3 blocks: one sits out each round
  check_eigh<float>(1, 64, EighMethod::kJacobi, true, true, 2);
}

TEST_P(EighTest, BatchesCompactAndPerMatrix) {
  for (int64_t n : {1, 2, 7, 32, 48}) {  // compact: W matrices per group, a partial last group
    check_eigh<double>(9, n, EighMethod::kAuto, false, false, 2);
    check_eigh<float>(17, n, EighMethod::kAuto, true, true, 2);
  }
  check_eigh<double>(3, 50, EighMethod::kAuto, true, false, 2);
  check_eigh<double>(3, 20, EighMethod::kTridiagonal, false, true, 2);
}

template <class T> void check_spectrum(const std::vector<double>& lambda, EighMethod method, int64_t count) {
  const int64_t n = static_cast<int64_t>(lambda.size());
  Mats<T> a(count, n, n);
  for (int64_t b = 0; b < count; ++b) fill_symmetric_with_eigenvalues(a, b, lambda);
  Vecs<T> w(count, n);
  Mats<T> v(count, n, n);
  eigh(a.view(true), w.view(true), v.view(true), {false, method});
  auto sorted = lambda;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t b = 0; b < count; ++b) {
    expect_good<T>(eigh_errors(a, w, &v, b), b);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(w(b, i), sorted[i], 8 * n * eps<T>() * std::abs(sorted.back()));
  }
}

TEST_P(EighTest, ClusteredIndefiniteAndRankDeficient) {
  for (EighMethod m : {EighMethod::kJacobi, EighMethod::kTridiagonal}) {
    std::vector<double> cl(60, 1.0);
    for (int i = 0; i < 60; ++i) cl[i] += (i % 3) * 1e-12 + (i < 10 ? 5.0 : 0.0);
    check_spectrum<double>(cl, m, 1);
    std::vector<double> indef(33);
    for (int i = 0; i < 33; ++i) indef[i] = (i % 2 ? -1.0 : 1.0) * (1 + i);
    check_spectrum<double>(indef, m, 1);
    std::vector<double> rank(40, 0.0);
    for (int i = 0; i < 7; ++i) rank[i] = i + 1;
    check_spectrum<double>(rank, m, 1);
  }
  std::vector<double> cl(24, 2.0);
  cl[3] = 2 + 1e-9;
  check_spectrum<double>(cl, EighMethod::kAuto, 17);  // compact
  check_spectrum<float>(cl, EighMethod::kAuto, 17);
}

TEST_P(EighTest, IdentityAndZeroAreExact) {
  for (EighMethod m : {EighMethod::kJacobi, EighMethod::kTridiagonal})
    for (int64_t count : {1, 10}) {
      Mats<double> a(count, 30, 30), v(count, 30, 30);
      Vecs<double> w(count, 30);
      eigh(a.view(true), w.view(true), v.view(true), {false, m});
      for (int64_t b = 0; b < count; ++b)
        for (int64_t i = 0; i < 30; ++i) {
          ASSERT_EQ(w(b, i), 0.0);
          for (int64_t j = 0; j < 30; ++j) ASSERT_EQ(v(b, i, j), i == j ? 1.0 : 0.0);
        }
      for (int64_t b = 0; b < count; ++b)
        for (int64_t i = 0; i < 30; ++i) a(b, i, i) = 3.0;
      eigh(a.view(true), w.view(true), v.view(true), {false, m});
      for (int64_t b = 0; b < count; ++b)
        for (int64_t i = 0; i < 30; ++i) ASSERT_EQ(w(b, i), 3.0);
    }
}

TEST_P(EighTest, Errors) {
  for (int64_t count : {1, 12}) {
    Mats<double> a(count, 6, 6), v(count, 6, 6);
    Vecs<double> w(count, 6);
    a(count - 1, 4, 2) = std::numeric_limits<double>::quiet_NaN();
    try {
      eigh(a.view(true), w.view(true), v.view(true));
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(count == 1 ? "'eigh: a[0]'" : "'eigh: a[11]'"));
      EXPECT_THAT(e.what(), HasSubstr("nan at row 4, column 2"));
    }
    EXPECT_NO_THROW(eigh(a.view(true), w.view(true), v.view(true), {.upper = true}));
  }
  Mats<double> rect(1, 3, 4), v(1, 3, 3);
  Vecs<double> w(1, 3);
  EXPECT_THROW(eigh(rect.view(), w.view(), v.view()), InvalidArgument);
  Mats<double> sq(1, 3, 3);
  Vecs<double> wrong(1, 4);
  EXPECT_THROW(eigvalsh(sq.view(), wrong.view()), InvalidArgument);
  Mats<double> e0(1, 0, 0), v0(1, 0, 0);
  Vecs<double> w0(1, 0);
  EXPECT_NO_THROW(eigh(e0.view(), w0.view(), v0.view()));
}

// The divide-and-conquer path (orders >= 96 with eigenvectors): random
// matrices against LAPACKE syevd's eigenvectors (column by column, up to
// sign: their eigenvalues are well separated), and spectra with repeated
// eigenvalues and tight clusters, which deflate in stedc's merges.
template <class T> void check_against_syevd(int64_t n, bool colmajor, int threads) {
  SCOPED_TRACE(::testing::Message() << "n " << n << " threads " << threads << " bytes " << sizeof(T));
  Mats<T> a(1, n, n, colmajor);
  fill_normal(a);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) a(i, j) = a(j, i);
  Vecs<T> w(1, n);
  Mats<T> v(1, n, n, colmajor);
  eigh(a.view(), w.view(), v.view(), {false, EighMethod::kAuto, threads});
  expect_good<T>(eigh_errors(a, w, &v, 0), 0);
  std::vector<T> ref(static_cast<size_t>(n * n)), wr(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) ref[i * n + j] = a(i, j);
  OneBlasThread one;
  if constexpr (sizeof(T) == 8) {
    ASSERT_EQ(LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', n, ref.data(), n, wr.data()), 0);
  } else {
    ASSERT_EQ(LAPACKE_ssyevd(LAPACK_ROW_MAJOR, 'V', 'L', n, ref.data(), n, wr.data()), 0);
  }
  // Each column's angle to syevd's is at most ~ n ε ‖A‖₂ / gap (both are).
  double gap = std::numeric_limits<double>::max();
  for (int64_t j = 0; j + 1 < n; ++j) gap = std::min<double>(gap, wr[j + 1] - wr[j]);
  const double norm2 = std::max(std::abs(wr[0]), std::abs(wr[n - 1]));
  const double tol = 4 * n * eps<T>() * norm2 / gap;
  ASSERT_LT(tol, 0.1) << "the eigenvalues are too close for this check";
  for (int64_t j = 0; j < n; ++j) {
    long double dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += static_cast<long double>(v(i, j)) * ref[i * n + j];
    long double dist = 0;  // ‖v_j ∓ ref_j‖
    for (int64_t i = 0; i < n; ++i) {
      const long double x = v(i, j) - (dot < 0 ? -1.0L : 1.0L) * ref[i * n + j];
      dist += x * x;
    }
    dist = std::sqrt(dist);
    EXPECT_LT(static_cast<double>(dist), tol) << "column " << j;
  }
}

TEST_P(EighTest, DivideAndConquerMatchesSyevd) {
  check_against_syevd<double>(100, false, 1);
  check_against_syevd<double>(150, true, 2);  // blocked back-transformation, a partial last block
  check_against_syevd<float>(100, true, 2);
}

TEST_P(EighTest, DivideAndConquerRepeatedAndClustered) {
  std::vector<double> rep(112);
  for (int i = 0; i < 112; ++i) rep[i] = static_cast<double>(i % 7) - 3.0;  // 7 values, each 16 times
  check_spectrum<double>(rep, EighMethod::kAuto, 1);
  std::vector<double> cl(100);
  for (int i = 0; i < 100; ++i) cl[i] = i < 50 ? 1.0 + i * 1e-13 : -2.0 + (i % 4) * 1e-9;
  check_spectrum<double>(cl, EighMethod::kTridiagonal, 1);
  check_spectrum<double>(cl, EighMethod::kAuto, 3);  // a batch: one thread per matrix
  std::vector<double> clf(100, 0.5);
  for (int i = 0; i < 30; ++i) clf[i] = -1.0 + i * 1e-6;
  check_spectrum<float>(clf, EighMethod::kAuto, 1);
}

TEST_P(EighTest, DivideAndConquerRestoresOpenBlasThreads) {
  const int before = openblas_get_num_threads();
  openblas_set_num_threads(1);
  Mats<double> a(1, 120, 120);
  fill_spd(a);
  Vecs<double> w(1, 120);
  Mats<double> v(1, 120, 120);
  eigh(a.view(), w.view(), v.view(), {false, EighMethod::kAuto, 2});
  EXPECT_EQ(openblas_get_num_threads(), 1);
  expect_good<double>(eigh_errors(a, w, &v, 0), 0);
  openblas_set_num_threads(before);
}

// (Defined last: the tests above draw their random matrices from one
// generator in order.)
//
// Lanes of one compact group that need very different work: the
// tridiagonal QL iterates each lane on its own (its own shift and splits)
// until all have converged, and the reduction must leave already reduced
// columns alone. A partial last group too (W = 8 for f64, 16 for f32).
template <class T> void check_mixed_lanes(EighMethod method, bool upper, bool colmajor) {
  SCOPED_TRACE(::testing::Message() << "method " << int(method) << " bytes " << sizeof(T) << " upper " << upper);
  const int64_t n = 32, count = 37;
  Mats<T> a(count, n, n, colmajor);
  fill_normal(a);
  const T tiny = sizeof(T) == 8 ? T(1e-150) : T(1e-18), huge = sizeof(T) == 8 ? T(1e150) : T(1e18);
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        T& x = a(b, i, j);
        switch (b % 7) {
          case 1: x = 0; break;                       // diagonal, unsorted
          case 2: x = i == j + 1 ? x : T(0); break;   // tridiagonal
          case 3: x = 0; a(b, i, i) = 0; break;       // zero
          case 4: x *= tiny; break;
          case 5: x *= huge; break;
          case 6: x = i == 5 && j == 2 ? T(1e-3) : T(0); break;  // one tiny off-diagonal pair
          default: break;
        }
        a(b, j, i) = x;
      }
    if (b % 7 == 3) a(b, 0, 0) = 0;
    if (b % 7 == 4 || b % 7 == 5)
      for (int64_t i = 0; i < n; ++i) a(b, i, i) *= b % 7 == 4 ? tiny : huge;
  }
  Vecs<T> w(count, n), w2(count, n);
  Mats<T> v(count, n, n);
  eigh(a.view(true), w.view(true), v.view(true), {upper, method});
  eigvalsh(a.view(true), w2.view(true), {upper, method});
  for (int64_t b = 0; b < count; ++b) {
    expect_good<T>(eigh_errors(a, w, &v, b), b);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(w(b, i), w2(b, i), 4 * n * eps<T>() * frob(a, b)) << "eigvalsh " << b;
  }
}

TEST_P(EighTest, CompactLanesOfDifferentDifficulty) {
  for (EighMethod m : {EighMethod::kAuto, EighMethod::kJacobi, EighMethod::kTridiagonal}) {
    check_mixed_lanes<double>(m, false, false);
    check_mixed_lanes<float>(m, true, true);
  }
}

TEST_P(EighTest, CompactBatchesBothMethods) {
  for (EighMethod m : {EighMethod::kJacobi, EighMethod::kTridiagonal})
    for (int64_t n : {2, 3, 7, 32, 48}) {
      check_eigh<double>(9, n, m, n % 2 == 1, false, 2);
      check_eigh<float>(17, n, m, true, n % 2 == 0, 1);
    }
  std::vector<double> repeated(32, -1.0);  // a few distinct values, each many times
  for (int i = 0; i < 32; ++i) repeated[i] = (i % 4) - 1.5;
  check_spectrum<double>(repeated, EighMethod::kAuto, 9);
  check_spectrum<float>(repeated, EighMethod::kAuto, 17);
  std::vector<double> graded(32);  // eigenvalues from 1 down to 1e-12
  for (int i = 0; i < 32; ++i) graded[i] = std::pow(10.0, -12.0 * i / 31);
  check_spectrum<double>(graded, EighMethod::kAuto, 9);
}

SINEW_LINALG_ISA_TESTS(EighTest);

}  // namespace
}  // namespace sinew::linalg
