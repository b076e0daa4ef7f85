// LAPACK's divide and conquer (stedc) for the eigenvectors of a symmetric
// tridiagonal matrix, and OpenBLAS's process-wide thread count around it.
// Declared outside the ISA copies (see backend.h): LAPACK is compiled once.
#pragma once

#include <cstdint>

namespace sinew::linalg::detail {

// Orders above this use the QL method instead: stedc's workspace (1 + 4n +
// n² entries) must fit LAPACK's 32-bit integers.
constexpr int64_t kStedcMaxOrder = 46000;

// Eigenvalues (ascending, into d) and eigenvectors (z: n x n column-major,
// leading dimension ldz) of the symmetric tridiagonal matrix with diagonal
// d[n] and off-diagonal e[n-1] (overwritten), by LAPACK's stedc with
// compz = 'I' on `threads` OpenBLAS threads. Returns LAPACK's info: 0, or
// > 0 when a subproblem failed to converge (d and z are then undefined).
// Throws InternalError when LAPACK rejects an argument (a bug here).
int stedc(int64_t n, double* d, double* e, double* z, int64_t ldz, int threads);
int stedc(int64_t n, float* d, float* e, float* z, int64_t ldz, int threads);

// OpenBLAS's thread count is process-wide: this sets it to `threads` for a
// scope and restores the caller's value at exit, so that a program that also
// calls OpenBLAS itself finds its own setting after eigh. Made on the
// calling thread, before a batch's workers run, so that concurrent stedc
// calls (one thread each) find it already set and never write it.
class BlasThreadsScope {
 public:
  explicit BlasThreadsScope(int threads);
  ~BlasThreadsScope();
  BlasThreadsScope(const BlasThreadsScope&) = delete;
  BlasThreadsScope& operator=(const BlasThreadsScope&) = delete;

 private:
  int saved_;
};

}  // namespace sinew::linalg::detail
