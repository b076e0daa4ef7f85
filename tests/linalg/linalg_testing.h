// Shared helpers of the linalg tests: small dense matrices in either layout,
// random and structured inputs, norms and residuals accumulated in long
// double, a fixture that runs a test on each ISA copy of the routines, and
// the fork-join threshold every linalg test runs with.
#pragma once

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "linalg/backend.h"
#include "sinew/tensor/tensor_view.h"

namespace sinew::linalg::testing {

// Split even tiny steps across threads, so that the threaded code paths of
// single matrices run at test sizes (read once, before the first call).
[[maybe_unused]] inline const bool kSplitAlways = setenv("SINEW_LINALG_FORK_JOIN_FLOPS", "0", 1) == 0;

// Runs the LAPACK references on one OpenBLAS thread while it lives.
// OpenBLAS 0.3.21 on a CPU it does not recognize (it falls back to its
// Prescott kernels, as on this VM when OPENBLAS_CORETYPE is unset) returned
// ssyevd info = 6 on every f32 7x7 matrix of
// EighTest.CompactBatchesBothMethods with two threads, in some runs and
// not in others; on one thread, or with its Haswell or SkylakeX kernels, it
// always converged. A reference must not be what fails.
class OneBlasThread {
 public:
  OneBlasThread() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~OneBlasThread() { openblas_set_num_threads(saved_); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_;
};

template <class T> constexpr DType dtype_of() { return sizeof(T) == 8 ? DType::kF64 : DType::kF32; }
template <class T> constexpr double eps() { return std::numeric_limits<T>::epsilon(); }

// A batch of `count` rows x cols matrices, each row-major or column-major.
template <class T> struct Mats {
  int64_t count = 1, rows = 0, cols = 0;
  bool colmajor = false;
  std::vector<T> data;

  Mats() = default;
  Mats(int64_t count_, int64_t rows_, int64_t cols_, bool colmajor_ = false)
      : count(count_), rows(rows_), cols(cols_), colmajor(colmajor_),
        data(static_cast<size_t>(count_ * rows_ * cols_), T(0)) {}
  static Mats single(int64_t rows, int64_t cols, bool colmajor = false) { return Mats(1, rows, cols, colmajor); }

  T& operator()(int64_t b, int64_t i, int64_t j) {
    return data[static_cast<size_t>(b * rows * cols + (colmajor ? i + j * rows : i * cols + j))];
  }
  T operator()(int64_t b, int64_t i, int64_t j) const {
    return data[static_cast<size_t>(b * rows * cols + (colmajor ? i + j * rows : i * cols + j))];
  }
  T& operator()(int64_t i, int64_t j) { return (*this)(0, i, j); }
  T operator()(int64_t i, int64_t j) const { return (*this)(0, i, j); }

  // [rows, cols] for a single matrix, [count, rows, cols] otherwise.
  TensorView view(bool batched = false) {
    std::vector<int64_t> shape = {rows, cols};
    std::vector<int64_t> strides = colmajor ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{cols, 1};
    if (batched || count != 1) {
      shape.insert(shape.begin(), count);
      strides.insert(strides.begin(), rows * cols);
    }
    return TensorView(data.data(), dtype_of<T>(), shape, strides);
  }
  // One matrix as a contiguous row-major std::vector<double>.
  std::vector<double> row_major(int64_t b = 0) const {
    std::vector<double> r(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) r[static_cast<size_t>(i * cols + j)] = (*this)(b, i, j);
    return r;
  }
};

// A vector batch [count, len] (or [len]).
template <class T> struct Vecs {
  int64_t count = 1, len = 0;
  std::vector<T> data;
  Vecs(int64_t count_, int64_t len_) : count(count_), len(len_), data(static_cast<size_t>(count_ * len_)) {}
  T& operator()(int64_t b, int64_t i) { return data[static_cast<size_t>(b * len + i)]; }
  TensorView view(bool batched = false) {
    if (batched || count != 1) return TensorView(data.data(), dtype_of<T>(), {count, len});
    return TensorView(data.data(), dtype_of<T>(), {len});
  }
};

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20261129);
  return g;
}

template <class T> void fill_normal(Mats<T>& a) {
  std::normal_distribution<double> d;
  for (auto& x : a.data) x = static_cast<T>(d(rng()));
}

// Symmetric positive definite: G Gᵀ / n + I.
template <class T> void fill_spd(Mats<T>& a) {
  const int64_t n = a.rows;
  std::normal_distribution<double> d;
  for (int64_t b = 0; b < a.count; ++b) {
    std::vector<double> g(static_cast<size_t>(n * n));
    for (auto& x : g) x = d(rng());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        long double s = 0;
        for (int64_t k = 0; k < n; ++k) s += g[i * n + k] * g[j * n + k];
        T v = static_cast<T>(s / n + (i == j ? 1.0L : 0.0L));
        a(b, i, j) = v;
        a(b, j, i) = v;
      }
  }
}

// Random symmetric with the given eigenvalues: Q diag(w) Qᵀ, Q from the QR
// of a Gaussian matrix (Gram-Schmidt twice in long double).
inline std::vector<long double> random_orthogonal(int64_t n) {
  std::normal_distribution<double> d;
  std::vector<long double> q(static_cast<size_t>(n * n));  // row-major, columns orthonormal
  for (auto& x : q) x = d(rng());
  for (int64_t j = 0; j < n; ++j)
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        long double s = 0;
        for (int64_t i = 0; i < n; ++i) s += q[i * n + j] * q[i * n + k];
        for (int64_t i = 0; i < n; ++i) q[i * n + j] -= s * q[i * n + k];
      }
      long double s = 0;
      for (int64_t i = 0; i < n; ++i) s += q[i * n + j] * q[i * n + j];
      s = std::sqrt(s);
      for (int64_t i = 0; i < n; ++i) q[i * n + j] /= s;
    }
  return q;
}

template <class T> void fill_symmetric_with_eigenvalues(Mats<T>& a, int64_t b, const std::vector<double>& w) {
  const int64_t n = a.rows;
  auto q = random_orthogonal(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      long double s = 0;
      for (int64_t k = 0; k < n; ++k) s += q[i * n + k] * w[k] * q[j * n + k];
      a(b, i, j) = static_cast<T>(s);
      a(b, j, i) = static_cast<T>(s);
    }
}

template <class T> long double frob(const Mats<T>& a, int64_t b = 0) {
  long double s = 0;
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) s += static_cast<long double>(a(b, i, j)) * a(b, i, j);
  return std::sqrt(s);
}

// ‖QᵀQ − I‖_F for the columns of q (matrix b).
template <class T> long double orthogonality(const Mats<T>& q, int64_t b = 0) {
  long double s = 0;
  for (int64_t i = 0; i < q.cols; ++i)
    for (int64_t j = 0; j < q.cols; ++j) {
      long double d = 0;
      for (int64_t k = 0; k < q.rows; ++k) d += static_cast<long double>(q(b, k, i)) * q(b, k, j);
      d -= i == j ? 1 : 0;
      s += d * d;
    }
  return std::sqrt(s);
}

// Runs the test once per ISA copy of the routines (generic, and avx512 when
// the CPU has it).
class IsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "avx512" && !detail::cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
    detail::force_backend(GetParam());
  }
  void TearDown() override { detail::force_backend(""); }
};

inline std::string isa_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace sinew::linalg::testing

#define SINEW_LINALG_ISA_TESTS(Fixture) \
  INSTANTIATE_TEST_SUITE_P(Isa, Fixture, ::testing::Values("generic", "avx512"), ::sinew::linalg::testing::isa_name)
