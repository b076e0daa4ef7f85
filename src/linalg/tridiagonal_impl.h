// Symmetric eigendecomposition through a tridiagonal matrix: Householder
// tridiagonalization (LAPACK sytrd/latrd, lower; the trailing rank-2k
// updates are kernels::mm calls), applying Q to the eigenvectors of the
// tridiagonal matrix (ormtr) or forming it (orgtr, blocked QR code), and
// the implicit QL method whose plane rotations are recorded and applied to
// the eigenvectors in batches, row block by row block, so that each column
// of the eigenvector matrix is loaded and stored once per rotation instead
// of streamed from memory. Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

constexpr int64_t kTrdBlock = 32;      // columns per latrd panel
constexpr int64_t kTrdBlockedMin = 96;  // unblocked sytd2 below this
constexpr int kQlMaxIterations = 60;   // per eigenvalue

// Returns Σ a_i x_i and does y += alpha a, reading a once (the two halves of
// a symmetric matrix-vector product over one stored column).
template <class T> inline T dot_axpy(int64_t n, const T* a, const T* x, T alpha, T* y) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V va = V::set1(alpha);
  V d0 = V::zero(), d1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const V a0 = V::load(a + i), a1 = V::load(a + i + W);
    d0 = fma(a0, V::load(x + i), d0);
    d1 = fma(a1, V::load(x + i + W), d1);
    fma(va, a0, V::load(y + i)).store(y + i);
    fma(va, a1, V::load(y + i + W)).store(y + i + W);
  }
  for (; i + W <= n; i += W) {
    const V a0 = V::load(a + i);
    d0 = fma(a0, V::load(x + i), d0);
    fma(va, a0, V::load(y + i)).store(y + i);
  }
  if (i < n) {
    const int r = static_cast<int>(n - i);
    const V a0 = V::load_n(a + i, r);
    d1 = fma(a0, V::load_n(x + i, r), d1);
    fma(va, a0, V::load_n(y + i, r)).store_n(y + i, r);
  }
  return reduce_add(d0 + d1);
}

// y += the part of A x that the four stored columns j..j+3 of a symmetric A
// (lower triangle) contribute. Below their diagonal block each pass loads a
// stretch of y and x once for four columns: a column at a time, y's load and
// store outnumbered the matrix's own loads (symv is most of sytrd's time).
template <class T> inline void symv_lower_cols4(Mat<T> A, int64_t j, const T* x, T* y) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = A.n;
  const T* c[4] = {A.col(j), A.col(j + 1), A.col(j + 2), A.col(j + 3)};
  for (int k = 0; k < 4; ++k) {
    y[j + k] += c[k][j + k] * x[j + k];
    for (int i = k + 1; i < 4; ++i) {
      y[j + i] += c[k][j + i] * x[j + k];
      y[j + k] += c[k][j + i] * x[j + i];
    }
  }
  const int64_t i0 = j + 4, m = n - i0;
  const T *c0 = c[0] + i0, *c1 = c[1] + i0, *c2 = c[2] + i0, *c3 = c[3] + i0, *xs = x + i0;
  T* ys = y + i0;
  const V x0 = V::set1(x[j]), x1 = V::set1(x[j + 1]), x2 = V::set1(x[j + 2]), x3 = V::set1(x[j + 3]);
  V d0 = V::zero(), d1 = V::zero(), d2 = V::zero(), d3 = V::zero();
  int64_t i = 0;
  for (; i + W <= m; i += W) {
    const V a0 = V::load(c0 + i), a1 = V::load(c1 + i), a2 = V::load(c2 + i), a3 = V::load(c3 + i);
    const V xv = V::load(xs + i);
    d0 = fma(a0, xv, d0);
    d1 = fma(a1, xv, d1);
    d2 = fma(a2, xv, d2);
    d3 = fma(a3, xv, d3);
    fma(a3, x3, fma(a2, x2, fma(a1, x1, fma(a0, x0, V::load(ys + i))))).store(ys + i);
  }
  if (i < m) {
    const int r = static_cast<int>(m - i);
    const V a0 = V::load_n(c0 + i, r), a1 = V::load_n(c1 + i, r), a2 = V::load_n(c2 + i, r),
            a3 = V::load_n(c3 + i, r);
    const V xv = V::load_n(xs + i, r);
    d0 = fma(a0, xv, d0);
    d1 = fma(a1, xv, d1);
    d2 = fma(a2, xv, d2);
    d3 = fma(a3, xv, d3);
    fma(a3, x3, fma(a2, x2, fma(a1, x1, fma(a0, x0, V::load_n(ys + i, r))))).store_n(ys + i, r);
  }
  y[j] += reduce_add(d0);
  y[j + 1] += reduce_add(d1);
  y[j + 2] += reduce_add(d2);
  y[j + 3] += reduce_add(d3);
}

// y = A x for symmetric A stored in its lower triangle; with threads > 1 and
// a large n the columns are split in two halves of equal work, each with its
// own y. It reads the matrix for two flops an element and is bound by memory,
// so it pays for a fork-join from a far smaller n than a step that computes:
// from n² >= fork_join_flops() / kSymvForkJoinScale (eigh at n = 1024 on 2
// threads: 164 ms with the plain threshold, where symv never split).
constexpr int64_t kSymvForkJoinScale = 64;
template <class T> void symv_lower(Mat<T> A, const T* x, T* y, T* y2, int threads) {
  const int64_t n = A.n;
  auto cols = [&](int64_t j0, int64_t j1, T* out) {
    std::fill(out, out + n, T(0));
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) symv_lower_cols4(A, j, x, out);
    for (; j < j1; ++j) {
      const T* c = A.col(j);
      out[j] += c[j] * x[j] + dot_axpy(n - j - 1, c + j + 1, x + j + 1, x[j], out + j + 1);
    }
  };
  if (threads < 2 || kSymvForkJoinScale * n * n < fork_join_flops() || !y2) {
    cols(0, n, y);
    return;
  }
  const int64_t split = n - static_cast<int64_t>(static_cast<double>(n) / std::sqrt(2.0));
  ThreadPool::global().parallel_for(2, 2, [&](int64_t t, int) { t == 0 ? cols(0, split, y) : cols(split, n, y2); });
  for (int64_t i = 0; i < n; ++i) y[i] += y2[i];
}

// y = alpha M x (M m x k column-major), or Mᵀ x with trans; beta y added.
template <class T> void gemv(bool trans, T alpha, Mat<T> M, const T* x, T beta, T* y) {
  if (trans) {
    for (int64_t j = 0; j < M.n; ++j) y[j] = (beta == T(0) ? T(0) : beta * y[j]) + alpha * dot(M.m, M.col(j), x);
  } else {
    if (beta == T(0)) std::fill(y, y + M.m, T(0));
    else if (beta != T(1)) scal(M.m, beta, y);
    for (int64_t j = 0; j < M.n; ++j) axpy(M.m, alpha * x[j], M.col(j), y);
  }
}

// Lower triangle of C (n x n) -= V Wᵀ + W Vᵀ (V, W n x k). Diagonal blocks
// are done as full squares (the strictly upper part of A is never read).
template <class T> void syr2k_ln(Mat<T> Vm, Mat<T> Wm, Mat<T> C, int threads) {
  const int64_t n = C.n, k = Vm.n;
  if (n <= kSyrkBase) {
    gemm(false, true, T(-1), Vm, Wm, T(1), C, threads);
    gemm(false, true, T(-1), Wm, Vm, T(1), C, threads);
    return;
  }
  const int64_t n1 = split_half(n), n2 = n - n1;
  syr2k_ln(Vm.sub(0, 0, n1, k), Wm.sub(0, 0, n1, k), C.sub(0, 0, n1, n1), threads);
  gemm(false, true, T(-1), Vm.sub(n1, 0, n2, k), Wm.sub(0, 0, n1, k), T(1), C.sub(n1, 0, n2, n1), threads);
  gemm(false, true, T(-1), Wm.sub(n1, 0, n2, k), Vm.sub(0, 0, n1, k), T(1), C.sub(n1, 0, n2, n1), threads);
  syr2k_ln(Vm.sub(n1, 0, n2, k), Wm.sub(n1, 0, n2, k), C.sub(n1, n1, n2, n2), threads);
}

template <class T> struct TrdScratch {
  Buffer<T> buf;
  T *w = nullptr, *w2 = nullptr;  // n-vectors
  Mat<T> W;                       // n x kTrdBlock
  void reserve(int64_t n) {
    T* cur = buf.get(2 * static_cast<size_t>(n) + 32 + carve_size<T>(n, kTrdBlock));
    w = cur;
    w2 = cur + n + 16;
    cur += 2 * n + 32;
    W = carve<T>(cur, n, kTrdBlock);
  }
};

// Unblocked tridiagonalization of the lower triangle of A (n x n): d[n],
// e[n-1], the reflectors below the subdiagonal, tau[n-1] (LAPACK sytd2).
template <class T> void sytd2(Mat<T> A, T* d, T* e, T* tau, TrdScratch<T>& s, int threads) {
  const int64_t n = A.n;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t len = n - i - 1;
    T* v = A.col(i) + i + 1;
    const T taui = larfg(len, v[0], v + 1);
    e[i] = v[0];
    if (taui != T(0)) {
      v[0] = T(1);
      Mat<T> A22 = A.sub(i + 1, i + 1, len, len);
      T* x = s.w;
      symv_lower(A22, v, x, s.w2, threads);
      scal(len, taui, x);
      const T alpha = T(-0.5) * taui * dot(len, x, v);
      axpy(len, alpha, v, x);
      for (int64_t j = 0; j < len; ++j) {  // A22 -= v xᵀ + x vᵀ (lower)
        T* c = A22.col(j) + j;
        axpy(len - j, -x[j], v + j, c);
        axpy(len - j, -v[j], x + j, c);
      }
      v[0] = e[i];
    }
    d[i] = A(i, i);
    tau[i] = taui;
  }
  if (n > 0) d[n - 1] = A(n - 1, n - 1);
}

// Reduces the first nb columns of the lower triangle of A (n x n) and forms
// W (n x nb) so that A22 -= V Wᵀ + W Vᵀ finishes the step (LAPACK latrd).
template <class T> void latrd(Mat<T> A, int64_t nb, T* e, T* tau, Mat<T> W, TrdScratch<T>& s, int threads) {
  const int64_t n = A.n;
  for (int64_t i = 0; i < nb; ++i) {
    // A(i:n, i) -= A(i:n, 0:i) W(i, 0:i)ᵀ + W(i:n, 0:i) A(i, 0:i)ᵀ
    for (int64_t j = 0; j < i; ++j) {
      axpy(n - i, -W(i, j), A.col(j) + i, A.col(i) + i);
      axpy(n - i, -A(i, j), W.col(j) + i, A.col(i) + i);
    }
    if (i + 1 >= n) continue;
    const int64_t len = n - i - 1;
    T* v = A.col(i) + i + 1;
    tau[i] = larfg(len, v[0], v + 1);
    e[i] = v[0];
    v[0] = T(1);
    T* wi = W.col(i) + i + 1;
    symv_lower(A.sub(i + 1, i + 1, len, len), v, wi, s.w2, threads);
    T* t = W.col(i);  // W(0:i, i) is free scratch
    Mat<T> Wb = W.sub(i + 1, 0, len, i), Ab = A.sub(i + 1, 0, len, i);
    gemv(true, T(1), Wb, v, T(0), t);
    gemv(false, T(-1), Ab, t, T(1), wi);
    gemv(true, T(1), Ab, v, T(0), t);
    gemv(false, T(-1), Wb, t, T(1), wi);
    scal(len, tau[i], wi);
    const T alpha = T(-0.5) * tau[i] * dot(len, wi, v);
    axpy(len, alpha, v, wi);
  }
}

// Tridiagonalizes the symmetric matrix in the lower triangle of A: d[n],
// e[n-1], reflectors below the subdiagonal and tau[n-1] (LAPACK sytrd).
template <class T> void sytrd(Mat<T> A, T* d, T* e, T* tau, TrdScratch<T>& s, int threads) {
  const int64_t n = A.n;
  s.reserve(n);
  int64_t i = 0;
  {
    for (; n - i > kTrdBlockedMin; i += kTrdBlock) {
      const int64_t m = n - i, nb = kTrdBlock;
      Mat<T> Ai = A.sub(i, i, m, m), W = s.W.sub(0, 0, m, nb);
      latrd(Ai, nb, e + i, tau + i, W, s, threads);
      syr2k_ln(Ai.sub(nb, 0, m - nb, nb), W.sub(nb, 0, m - nb, nb), Ai.sub(nb, nb, m - nb, m - nb), threads);
      for (int64_t j = i; j < i + nb; ++j) {
        A(j + 1, j) = e[j];
        d[j] = A(j, j);
      }
    }
  }
  sytd2(A.sub(i, i, n - i, n - i), d + i, e + i, tau + i, s, threads);
}

// Q (n x n) of the tridiagonalization (LAPACK orgtr, lower).
template <class T> void orgtr(Mat<T> A, const T* tau, Mat<T> Q, QrScratch<T>& s, int threads) {
  const int64_t n = A.n;
  set_identity(Q);
  if (n < 2) return;
  Mat<T> R = A.sub(1, 0, n - 1, n - 1);  // reflector j at R(j:, j), implicit 1 at R(j, j)
  apply_q(R, tau, false, Q.sub(1, 1, n - 1, n - 1), s, threads, true);
}

// Z (n x c) <- Q Z for the Q of the tridiagonalization (LAPACK ormtr, left,
// lower): Q = diag(1, H_0 ... H_{n-2}) in compact WY blocks, applied last
// block first. Columns of Z transform independently, so the T factors are
// formed once and then each worker applies every block to its own panels of
// columns: one fork-join in all, where threaded GEMMs would take three per
// block (and a descheduled worker on a busy machine stalls each one).
// Overwrites A's diagonal and strict upper triangle with the explicit V.
template <class T> void ormtr(Mat<T> A, const T* tau, Mat<T> Z, int threads) {
  const int64_t n = A.n;
  if (n < 2 || Z.n == 0) return;
  const int64_t m = n - 1, nb = kQrBlock, blocks = (m + nb - 1) / nb;
  Mat<T> V = A.sub(1, 0, m, m);  // reflector j at V(j:, j), its implicit 1 at V(j, j)
  for (int64_t j = 0; j < m; ++j) {
    std::fill(V.col(j), V.col(j) + j, T(0));
    V(j, j) = T(1);
  }
  Buffer<T> tbuf;
  T* cur = tbuf.get(carve_size<T>(nb, blocks * nb));
  Mat<T> Ts = carve<T>(cur, nb, blocks * nb);  // block t's T at columns t nb
  for (int64_t j0 = 0; j0 < m; j0 += nb) {
    const int64_t jb = std::min(nb, m - j0);
    larft(V.sub(j0, j0, m - j0, jb), tau + j0, Ts.sub(0, j0, jb, jb), threads);
  }
  Mat<T> C = Z.sub(1, 0, m, Z.n);
  // Two panels per worker, so that a worker slowed down by the machine
  // leaves its second one to the other.
  const int64_t panels = threads > 1 ? std::min<int64_t>(2 * threads, (C.n + 15) / 16) : 1;
  const int64_t width = (C.n + panels - 1) / panels;
  PerWorker<Buffer<T>> bufs(threads);
  auto run = [&](int64_t p, int w) {
    const int64_t c0 = p * width, nc = std::min(width, C.n - c0);
    if (nc <= 0) return;
    T* wcur = bufs[w].get(2 * carve_size<T>(nb, nc));
    Mat<T> W1 = carve<T>(wcur, nb, nc), W2 = carve<T>(wcur, nb, nc);
    for (int64_t j0 = (blocks - 1) * nb; j0 >= 0; j0 -= nb) {
      const int64_t jb = std::min(nb, m - j0);
      larfb(V.sub(j0, j0, m - j0, jb), Ts.sub(0, j0, jb, jb), false, C.sub(j0, c0, m - j0, nc),
            W1.sub(0, 0, jb, nc), W2.sub(0, 0, jb, nc), 1);
    }
  };
  if (panels == 1) run(0, 0);
  else ThreadPool::global().parallel_for(panels, threads, run);
}

// Plane rotations recorded by QL sweeps. A sequence applies rotations
// i = top, top-1, ..., top-count+1 in that order, each to columns (i, i+1):
// (z_i, z_{i+1}) <- (c z_i - s z_{i+1}, s z_i + c z_{i+1}).
template <class T> struct Rotations {
  struct Seq {
    int64_t top, count, at;
  };
  std::vector<Seq> seqs;
  std::vector<T> c, s;
  void add(int64_t i, T ci, T si) {
    if (seqs.empty() || seqs.back().top - seqs.back().count + 1 != i + 1 ||
        static_cast<size_t>(seqs.back().at + seqs.back().count) != c.size())
      seqs.push_back({i, 0, static_cast<int64_t>(c.size())});
    ++seqs.back().count;
    c.push_back(ci);
    s.push_back(si);
  }
  size_t size() const { return c.size(); }
  void clear() {
    seqs.clear();
    c.clear();
    s.clear();
  }
};

// Rotations of kFused consecutive sequences, laid out for the wavefront
// kernel: sequence j at global step g applies its rotation at index g + j,
// identity outside its own range.
constexpr int kFused = 8;

template <class T> struct FusedBatch {
  int64_t lo = 0, hi = 0;  // union of the index ranges
  std::vector<T> c, s;     // [kFused][hi - lo + 2 kFused], index i at i - (lo - kFused + 1)
  int64_t len() const { return hi - lo + 2 * kFused; }
};

template <class T> void fuse(const Rotations<T>& rot, size_t first, FusedBatch<T>& fb) {
  const size_t last = std::min(rot.seqs.size(), first + kFused);
  fb.lo = std::numeric_limits<int64_t>::max();
  fb.hi = std::numeric_limits<int64_t>::min();
  for (size_t q = first; q < last; ++q) {
    fb.hi = std::max(fb.hi, rot.seqs[q].top);
    fb.lo = std::min(fb.lo, rot.seqs[q].top - rot.seqs[q].count + 1);
  }
  const int64_t len = fb.len(), base = fb.lo - kFused + 1;
  fb.c.assign(static_cast<size_t>(kFused * len), T(1));
  fb.s.assign(static_cast<size_t>(kFused * len), T(0));
  for (size_t q = first; q < last; ++q) {
    const auto& sq = rot.seqs[q];
    const int64_t j = static_cast<int64_t>(q - first);
    for (int64_t k = 0; k < sq.count; ++k) {
      const int64_t at = j * len + (sq.top - k - base);
      fb.c[at] = rot.c[sq.at + k];
      fb.s[at] = rot.s[sq.at + k];
    }
  }
}

// Applies a fused batch to rows [r0, r0 + rows) of Z (rows <= 2 W): one
// pass down the columns, each loaded and stored once for all kFused
// sequences, whose rotations chain in registers (Van Zee, van de Geijn and
// Quintana-Ortí's wavefront).
template <class T> inline void apply_fused_rows(const FusedBatch<T>& fb, Mat<T> Z, int64_t r0, int64_t rows) {
  using V = Vec<T>;
  constexpr int W = V::W;
  constexpr int K = kFused;
  const int c0 = static_cast<int>(std::min<int64_t>(rows, W)), c1 = static_cast<int>(std::max<int64_t>(rows - W, 0));
  const int64_t n = Z.n, len = fb.len(), base = fb.lo - K + 1;
  auto load = [&](int64_t col, V& a, V& b) {
    if (col < 0 || col >= n) {
      a = b = V::zero();
      return;
    }
    a = V::load_n(Z.col(col) + r0, c0);
    b = V::load_n(Z.col(col) + r0 + W, c1);
  };
  auto store = [&](int64_t col, V a, V b) {
    if (col < 0 || col >= n) return;
    a.store_n(Z.col(col) + r0, c0);
    b.store_n(Z.col(col) + r0 + W, c1);
  };
  V ya[K], yb[K];
  for (int j = 0; j < K; ++j) load(fb.hi + 1 + j, ya[j], yb[j]);
  const T* cs = fb.c.data();
  const T* ss = fb.s.data();
  for (int64_t g = fb.hi; g >= base; --g) {
    V xa, xb;
    load(g, xa, xb);
    for (int j = 0; j < K; ++j) {
      const int64_t at = j * len + (g + j - base);
      const V c = V::set1(cs[at]), s = V::set1(ss[at]);
      const V oa = fma(s, xa, c * ya[j]), ob = fma(s, xb, c * yb[j]);
      ya[j] = fnma(s, ya[j], c * xa);
      yb[j] = fnma(s, yb[j], c * xb);
      xa = oa;
      xb = ob;
    }
    store(g + K, xa, xb);
  }
  for (int j = 0; j < K; ++j) store(base + j, ya[j], yb[j]);
}

template <class T> void apply_rotations(Rotations<T>& rot, Mat<T> Z, int threads) {
  if (rot.size() == 0) return;
  std::vector<FusedBatch<T>> batches((rot.seqs.size() + kFused - 1) / kFused);
  for (size_t q = 0; q < batches.size(); ++q) fuse(rot, q * kFused, batches[q]);
  constexpr int64_t R = 2 * Vec<T>::W;
  const int64_t chunks = (Z.m + R - 1) / R;
  auto run = [&](int64_t c) {
    for (const auto& fb : batches) apply_fused_rows(fb, Z, c * R, std::min(R, Z.m - c * R));
  };
  if (threads > 1 && chunks >= 4) {
    ThreadPool::global().parallel_for(chunks, threads, [&](int64_t c, int) { run(c); });
  } else {
    for (int64_t c = 0; c < chunks; ++c) run(c);
  }
  rot.clear();
}

// Implicit QL with Wilkinson shifts on the tridiagonal (d[n], e[n-1]); the
// rotations go to Z (n x n) when Z.p is set. Returns false if an eigenvalue
// took more than kQlMaxIterations sweeps.
template <class T> bool tridiagonal_ql(int64_t n, T* d, T* e, Mat<T> Z, int threads) {
  if (n < 2) return true;
  std::vector<T> ev(e, e + n - 1);
  ev.push_back(T(0));
  const T eps = std::numeric_limits<T>::epsilon();
  Rotations<T> rot;
  const size_t flush = static_cast<size_t>(std::max<int64_t>(32 * n, 4096));
  bool ok = true;
  for (int64_t l = 0; l < n && ok; ++l) {
    for (int iter = 0;; ++iter) {
      int64_t m = l;
      for (; m + 1 < n; ++m) {
        const T dd = std::abs(d[m]) + std::abs(d[m + 1]);
        if (std::abs(ev[m]) <= eps * dd) break;
      }
      if (m == l) break;
      if (iter == kQlMaxIterations) {
        ok = false;
        break;
      }
      T g = (d[l + 1] - d[l]) / (T(2) * ev[l]);
      T r = std::hypot(g, T(1));
      g = d[m] - d[l] + ev[l] / (g + std::copysign(r, g));
      T s = 1, c = 1, p = 0;
      int64_t i = m - 1;
      bool underflow = false;
      for (; i >= l; --i) {
        const T f = s * ev[i], b = c * ev[i];
        r = std::sqrt(f * f + g * g);  // the input was scaled to |entries| <= 1: no overflow
        ev[i + 1] = r;
        if (r == T(0)) {
          d[i + 1] -= p;
          ev[m] = 0;
          underflow = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = d[i + 1] - p;
        r = (d[i] - g) * s + T(2) * c * b;
        p = s * r;
        d[i + 1] = g + p;
        g = c * r - b;
        if (Z.p) rot.add(i, c, s);
      }
      if (underflow) continue;
      d[l] -= p;
      ev[l] = g;
      ev[m] = 0;
      if (Z.p && rot.size() >= flush) apply_rotations(rot, Z, threads);
    }
  }
  if (Z.p) apply_rotations(rot, Z, threads);
  return ok;
}

// Sorts d ascending, permuting the columns of Z (when set) alike.
template <class T> void sort_eigenpairs(int64_t n, T* d, Mat<T> Z) {
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t k = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (d[j] < d[k]) k = j;
    if (k == i) continue;
    std::swap(d[i], d[k]);
    if (Z.p) std::swap_ranges(Z.col(i), Z.col(i) + Z.m, Z.col(k));
  }
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
