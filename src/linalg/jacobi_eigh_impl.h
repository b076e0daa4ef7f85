// Symmetric eigendecomposition by Jacobi rotations: the cyclic method on a
// small matrix, its blocked form for large n (block pairs in round-robin
// order, each pair diagonalized by the small method and applied to the rest
// of the matrix with kernels::mm, disjoint pairs in parallel), and a compact
// kernel that diagonalizes W small matrices at once. Included through
// isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int kJacobiMaxSweeps = 40;
constexpr int64_t kJacobiBlock = 32;  // columns per block of the blocked method

// The Jacobi rotation that zeroes apq of [[app, apq], [apq, aqq]]:
// t = tan, from Rutishauser's formula (smaller angle).
template <class T> inline T jacobi_tangent(T app, T aqq, T apq) {
  const T theta = (aqq - app) / (T(2) * apq);
  const T at = std::abs(theta);
  if (at > T(1) / std::sqrt(std::numeric_limits<T>::epsilon())) return T(0.5) / theta;
  return std::copysign(T(1) / (at + std::sqrt(at * at + T(1))), theta);
}

// Whether apq is negligible next to the diagonal (relative criterion of
// Demmel and Veselić, which keeps small eigenvalues of definite matrices
// relatively accurate).
template <class T> inline bool jacobi_small_enough(T app, T aqq, T apq) {
  const T a = std::abs(apq);
  return a <= std::numeric_limits<T>::epsilon() * std::sqrt(std::abs(app)) * std::sqrt(std::abs(aqq)) ||
         a < std::numeric_limits<T>::min();
}

// Cyclic Jacobi on the full symmetric A (n x n); V <- V J for every rotation
// J when V.p is set. Returns the sweeps that rotated (kJacobiMaxSweeps + 1
// if it did not converge).
template <class T> int jacobi_small(Mat<T> A, Mat<T> V) {
  const int64_t n = A.n;
  for (int sweep = 0; sweep < kJacobiMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p + 1 < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        const T apq = A(p, q), app = A(p, p), aqq = A(q, q);
        if (jacobi_small_enough(app, aqq, apq)) continue;
        rotated = true;
        const T t = jacobi_tangent(app, aqq, apq);
        const T c = T(1) / std::sqrt(T(1) + t * t), s = t * c;
        rot(n, A.col(p), A.col(q), c, s);
        A(p, p) = app - t * apq;
        A(q, q) = aqq + t * apq;
        A(p, q) = T(0);
        A(q, p) = T(0);
        for (int64_t r = 0; r < n; ++r) {
          A(p, r) = A(r, p);
          A(q, r) = A(r, q);
        }
        if (V.p) rot(V.m, V.col(p), V.col(q), c, s);
      }
    if (!rotated) return sweep;
  }
  return kJacobiMaxSweeps + 1;
}

// Modified Gram-Schmidt, twice, on the columns of the nearly orthogonal W:
// the accumulated product of many rotations drifts from orthogonality by a
// few ε per rotation, and the blocked method multiplies the eigenvectors by
// one such W per pair and round.
template <class T> void orthonormalize(Mat<T> W) {
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t j = 0; j < W.n; ++j) {
      T* wj = W.col(j);
      for (int64_t k = 0; k < j; ++k) axpy(W.m, -dot(W.m, W.col(k), wj), W.col(k), wj);
      scal(W.m, T(1) / std::sqrt(dot(W.m, wj, wj)), wj);
    }
}

// Blocked Jacobi on the full symmetric A (n x n); V (n x n) <- the
// accumulated rotations when V.p is set. Returns the sweeps (as jacobi_small).
template <class T> int jacobi_blocked(Mat<T> A, Mat<T> V, int threads) {
  const int64_t n = A.n, b = kJacobiBlock;
  const int64_t real_blocks = (n + b - 1) / b, blocks = real_blocks + (real_blocks & 1);
  const int64_t pairs = blocks / 2, s_max = 2 * b;
  auto range = [&](int64_t blk) {
    const int64_t lo = std::min(blk * b, n);
    return std::pair<int64_t, int64_t>{lo, std::min(lo + b, n) - lo};
  };
  // Per pair: S and W (s x s), C (n x s) for the columns, R (s x n) for the rows.
  struct PairScratch {
    Mat<T> S, Wm, C, R;
  };
  const size_t per_pair = 2 * carve_size<T>(s_max, s_max) + carve_size<T>(n, s_max) + carve_size<T>(s_max, n);
  Buffer<T> buf;
  T* base = buf.get(per_pair * static_cast<size_t>(pairs));
  auto scratch = [&](int64_t k, int64_t s) {
    T* cur = base + per_pair * static_cast<size_t>(k);
    PairScratch p;
    p.S = carve<T>(cur, s_max, s_max).sub(0, 0, s, s);
    p.Wm = carve<T>(cur, s_max, s_max).sub(0, 0, s, s);
    p.C = carve<T>(cur, n, s_max).sub(0, 0, n, s);
    p.R = carve<T>(cur, s_max, n).sub(0, 0, s, n);
    return p;
  };
  std::vector<char> active(static_cast<size_t>(pairs));
  std::atomic<bool> any{false};
  for (int sweep = 0; sweep < kJacobiMaxSweeps; ++sweep) {
    any = false;
    for (int64_t round = 0; round < blocks - 1; ++round) {
      // Phase 1: diagonalize each pair's block and apply it to the columns.
      ThreadPool::global().parallel_for(pairs, threads, [&](int64_t k, int) {
        auto [bi, bj] = round_robin(blocks, round, k);
        auto [i0, ni] = range(bi);
        auto [j0, nj] = range(bj);
        const int64_t s = ni + nj;
        active[k] = 0;
        if (s == 0) return;
        PairScratch ps = scratch(k, s);
        auto idx = [&](int64_t t) { return t < ni ? i0 + t : j0 + t - ni; };
        for (int64_t q = 0; q < s; ++q)
          for (int64_t p = 0; p < s; ++p) ps.S(p, q) = A(idx(p), idx(q));
        bool done = true;
        for (int64_t q = 1; q < s && done; ++q)
          for (int64_t p = 0; p < q && done; ++p) done = jacobi_small_enough(ps.S(p, p), ps.S(q, q), ps.S(p, q));
        if (done) return;
        set_identity(ps.Wm);
        jacobi_small(ps.S, ps.Wm);
        orthonormalize(ps.Wm);
        active[k] = 1;
        any = true;
        // A[:, idx] <- A[:, idx] W, then V likewise.
        for (int pass = 0; pass < (V.p ? 2 : 1); ++pass) {
          Mat<T> X = pass == 0 ? A : V;
          gemm(false, false, T(1), X.sub(0, i0, n, ni), ps.Wm.sub(0, 0, ni, s), T(0), ps.C, 1);
          if (nj) gemm(false, false, T(1), X.sub(0, j0, n, nj), ps.Wm.sub(ni, 0, nj, s), T(1), ps.C, 1);
          copy(ps.C.sub(0, 0, n, ni), X.sub(0, i0, n, ni));
          if (nj) copy(ps.C.sub(0, ni, n, nj), X.sub(0, j0, n, nj));
        }
      });
      // Phase 2: the rows, A[idx, :] <- Wᵀ A[idx, :].
      ThreadPool::global().parallel_for(pairs, threads, [&](int64_t k, int) {
        if (!active[k]) return;
        auto [bi, bj] = round_robin(blocks, round, k);
        auto [i0, ni] = range(bi);
        auto [j0, nj] = range(bj);
        const int64_t s = ni + nj;
        PairScratch ps = scratch(k, s);
        gemm(true, false, T(1), ps.Wm.sub(0, 0, ni, s), A.sub(i0, 0, ni, n), T(0), ps.R, 1);
        if (nj) gemm(true, false, T(1), ps.Wm.sub(ni, 0, nj, s), A.sub(j0, 0, nj, n), T(1), ps.R, 1);
        for (int64_t c = 0; c < n; ++c) {
          std::memcpy(&A(i0, c), &ps.R(0, c), sizeof(T) * ni);
          if (nj) std::memcpy(&A(j0, c), &ps.R(ni, c), sizeof(T) * nj);
        }
        // The pair's own block is the diagonalized S, not Wᵀ S W with the
        // rounding of the products (which would keep it from converging).
        auto idx = [&](int64_t t) { return t < ni ? i0 + t : j0 + t - ni; };
        for (int64_t q = 0; q < s; ++q)
          for (int64_t p = 0; p < s; ++p) A(idx(p), idx(q)) = ps.S(p, q);
      });
    }
    if (!any) return sweep;
  }
  return kJacobiMaxSweeps + 1;
}

// ---- compact: W matrices at once --------------------------------------------

// Cyclic Jacobi on the symmetric n x n matrices in the lanes of A, stored
// as packed lower triangles by rows (packed(i, j), j <= i, see
// cholesky_compact_impl.h) so that a 32 x 32 f64 group stays in L1 and a rotation
// writes each element once; V (n x n, column-major, ld n) <- accumulated
// rotations when given. Lanes that have converged rotate by the identity
// until all have. (A round-robin ordering, whose disjoint rotations could
// be computed together, measured slower here: its block-wise updates touch
// all of A and V every round.)
template <class T> int jacobi_lanes(Vec<T>* A, int64_t n, Vec<T>* V) {
  using V_ = Vec<T>;
  const V_ zero = V_::zero(), one = V_::set1(T(1)), two = V_::set1(T(2)), half = V_::set1(T(0.5));
  const V_ eps = V_::set1(std::numeric_limits<T>::epsilon()), tiny = V_::set1(std::numeric_limits<T>::min());
  const V_ big = V_::set1(T(1) / std::sqrt(std::numeric_limits<T>::epsilon()));
  auto rotate2 = [](V_& x, V_& y, V_ c, V_ s) {
    const V_ u = fnma(s, y, c * x), w = fma(s, x, c * y);
    x = u;
    y = w;
  };
  for (int sweep = 0; sweep < kJacobiMaxSweeps; ++sweep) {
    typename V_::Mask any = V_::not_(V_::all_lanes());
    // The first sweeps skip the small entries (threshold Jacobi): 1/5 of
    // the mean off-diagonal magnitude.
    V_ floor = zero;
    if (sweep < 3) {
      for (int64_t i = 1; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) floor = floor + abs(A[packed(i, j)]);
      floor = floor * V_::set1(T(0.2) / static_cast<T>(n * n));
    }
    for (int64_t p = 0; p + 1 < n; ++p) {
      V_* rp = A + packed(p, 0);
      for (int64_t q = p + 1; q < n; ++q) {
        V_* rq = A + packed(q, 0);
        const V_ apq = rq[p], app = rp[p], aqq = rq[q];
        const V_ mag = abs(apq);
        const auto rotate = (mag > eps * sqrt(abs(app)) * sqrt(abs(aqq))) & (mag >= tiny) & (mag >= floor);
        if (!V_::any(rotate)) continue;
        any = any | rotate;
        const V_ theta = (aqq - app) / (two * apq);
        const V_ at = abs(theta);
        V_ t = copysign(one / (at + sqrt(fma(at, at, one))), theta);
        t = select(at > big, half / theta, t);
        t = select(rotate, t, zero);
        const V_ c = one / sqrt(fma(t, t, one)), s = t * c;
        for (int64_t r = 0; r < p; ++r) rotate2(rp[r], rq[r], c, s);
        for (int64_t r = p + 1; r < q; ++r) rotate2(A[packed(r, p)], rq[r], c, s);
        for (int64_t r = q + 1; r < n; ++r) {
          V_* rr = A + packed(r, 0);
          rotate2(rr[p], rr[q], c, s);
        }
        rp[p] = fnma(t, apq, app);
        rq[q] = fma(t, apq, aqq);
        rq[p] = select(rotate, zero, apq);
        if (V) {
          V_* vp = V + p * n;
          V_* vq = V + q * n;
          for (int64_t r = 0; r < n; ++r) rotate2(vp[r], vq[r], c, s);
        }
      }
    }
    if (!V_::any(any)) return sweep;
  }
  return kJacobiMaxSweeps + 1;
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
