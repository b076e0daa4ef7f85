// Column-major matrix views, aligned buffers, loading and storing operands
// in any strides, the kernels::mm wrapper every blocked update goes through,
// and the batch driver. Included through isa_begin.h only.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

template <class T> struct Mat {
  T* p = nullptr;
  int64_t m = 0, n = 0, ld = 1;
  T& operator()(int64_t i, int64_t j) const { return p[i + j * ld]; }
  T* col(int64_t j) const { return p + j * ld; }
  Mat sub(int64_t i, int64_t j, int64_t r, int64_t c) const { return {p + i + j * ld, r, c, ld}; }
};

// AlignedBuffer (64-byte aligned, grow-only, contents undefined after
// growth) typed by its element, so that call sites ask for counts.
template <class T> class Buffer {
 public:
  T* get(size_t n) { return mem_.get_as<T>(n); }

 private:
  AlignedBuffer mem_{64};
};

// A leading dimension that keeps columns 64-byte aligned and avoids strides
// that are multiples of 1 KiB (which alias in the L1 sets when a kernel walks
// along a row).
template <class T> inline int64_t lead(int64_t m) {
  constexpr int64_t line = 64 / sizeof(T);
  int64_t ld = std::max<int64_t>((m + line - 1) / line * line, line);
  if ((ld * static_cast<int64_t>(sizeof(T))) % 1024 == 0) ld += line;
  return ld;
}

// A column-major matrix carved out of a buffer.
template <class T> inline Mat<T> carve(T*& cursor, int64_t m, int64_t n) {
  Mat<T> a{cursor, m, n, lead<T>(m)};
  cursor += a.ld * std::max<int64_t>(n, 1);
  return a;
}

template <class T> inline size_t carve_size(int64_t m, int64_t n) {
  return static_cast<size_t>(lead<T>(m) * std::max<int64_t>(n, 1));
}

template <class T> constexpr DType dtype_of() { return sizeof(T) == 8 ? DType::kF64 : DType::kF32; }

template <class T> inline void set_zero(Mat<T> a) {
  for (int64_t j = 0; j < a.n; ++j) std::fill(a.col(j), a.col(j) + a.m, T(0));
}

template <class T> inline void set_identity(Mat<T> a) {
  set_zero(a);
  for (int64_t i = 0; i < std::min(a.m, a.n); ++i) a(i, i) = T(1);
}

template <class T> inline void copy(Mat<T> src, Mat<T> dst) {
  for (int64_t j = 0; j < src.n; ++j) std::memcpy(dst.col(j), src.col(j), sizeof(T) * src.m);
}

// d[r + c ds] = s[r ss + c] for an 8 x 8 tile: rows of s become columns of d.
template <class T> inline void transpose8(const T* s, int64_t ss, T* d, int64_t ds) {
#ifdef SINEW_LINALG_AVX512
  if constexpr (sizeof(T) == 8) {
    // Two-source permutes throughout: GCC 12 warns on the _mm512_undefined_pd
    // inside unpack and shuffle_f64x2 (GCC PR 105593).
    __m512d r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm512_loadu_pd(s + i * ss);
    const __m512i even = _mm512_setr_epi64(0, 8, 2, 10, 4, 12, 6, 14);
    const __m512i odd = _mm512_setr_epi64(1, 9, 3, 11, 5, 13, 7, 15);
    for (int i = 0; i < 8; i += 2) {  // t[i + e]: (r[i][k], r[i + 1][k]) for k = e, e + 2, e + 4, e + 6
      t[i] = _mm512_permutex2var_pd(r[i], even, r[i + 1]);
      t[i + 1] = _mm512_permutex2var_pd(r[i], odd, r[i + 1]);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int h = 0; h < 8; h += 4) {  // u[h + k]: rows h to h + 3 of elements k and k + 4
      u[h] = _mm512_permutex2var_pd(t[h], lo, t[h + 2]);
      u[h + 1] = _mm512_permutex2var_pd(t[h + 1], lo, t[h + 3]);
      u[h + 2] = _mm512_permutex2var_pd(t[h], hi, t[h + 2]);
      u[h + 3] = _mm512_permutex2var_pd(t[h + 1], hi, t[h + 3]);
    }
    const __m512i first = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
    for (int k = 0; k < 4; ++k) {
      _mm512_storeu_pd(d + k * ds, _mm512_permutex2var_pd(u[k], first, u[k + 4]));
      _mm512_storeu_pd(d + (k + 4) * ds, _mm512_permutex2var_pd(u[k], second, u[k + 4]));
    }
    return;
  } else {
    __m256 r[8], t[8], q[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      q[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      q[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      q[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      q[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(d + k * ds, _mm256_permute2f128_ps(q[k], q[k + 4], 0x20));
      _mm256_storeu_ps(d + (k + 4) * ds, _mm256_permute2f128_ps(q[k], q[k + 4], 0x31));
    }
    return;
  }
#endif
  for (int c = 0; c < 8; ++c)
    for (int r = 0; r < 8; ++r) d[r + c * ds] = s[r * ss + c];
}

// Copies the rows x cols block at (r0, c0) of matrix b of `a` into M.
// Column-contiguous sources copy by columns, row-contiguous ones are
// transposed in 8 x 8 tiles.
template <class T>
inline void load(const MatArg& a, int64_t b, Mat<T> M, int64_t r0 = 0, int64_t c0 = 0) {
  const T* s = a.ptr<T>(b) + r0 * a.rs + c0 * a.cs;
  const int64_t rs = a.rs, cs = a.cs;
  if (rs == 1) {
    for (int64_t j = 0; j < M.n; ++j) std::memcpy(M.col(j), s + j * cs, sizeof(T) * M.m);
    return;
  }
  for (int64_t i0 = 0; i0 < M.m; i0 += 8)
    for (int64_t j0 = 0; j0 < M.n; j0 += 8) {
      const int64_t ie = std::min<int64_t>(i0 + 8, M.m), je = std::min<int64_t>(j0 + 8, M.n);
      if (cs == 1 && ie - i0 == 8 && je - j0 == 8) {
        transpose8(s + i0 * rs + j0, rs, &M(i0, j0), M.ld);
        continue;
      }
      for (int64_t i = i0; i < ie; ++i)
        for (int64_t j = j0; j < je; ++j) M(i, j) = s[i * rs + j * cs];
    }
}

// d[i rs + j cs] <- M(i, j).
template <class T> inline void store_strided(Mat<T> M, T* d, int64_t rs, int64_t cs) {
  if (rs == 1) {
    for (int64_t j = 0; j < M.n; ++j) std::memcpy(d + j * cs, M.col(j), sizeof(T) * M.m);
    return;
  }
  for (int64_t i0 = 0; i0 < M.m; i0 += 8)
    for (int64_t j0 = 0; j0 < M.n; j0 += 8) {
      const int64_t ie = std::min<int64_t>(i0 + 8, M.m), je = std::min<int64_t>(j0 + 8, M.n);
      if (cs == 1 && ie - i0 == 8 && je - j0 == 8) {
        transpose8(&M(i0, j0), M.ld, d + i0 * rs + j0, rs);
        continue;
      }
      for (int64_t i = i0; i < ie; ++i)
        for (int64_t j = j0; j < je; ++j) d[i * rs + j * cs] = M(i, j);
    }
}

template <class T>
inline void store(Mat<T> M, const MatArg& a, int64_t b, int64_t r0 = 0, int64_t c0 = 0) {
  store_strided(M, a.ptr<T>(b) + r0 * a.rs + c0 * a.cs, a.rs, a.cs);
}

// Writes `value` to every element of matrix b of `a`.
template <class T> inline void fill(const MatArg& a, int64_t b, T value) {
  T* d = a.ptr<T>(b);
  for (int64_t j = 0; j < a.cols; ++j)
    for (int64_t i = 0; i < a.rows; ++i) d[i * a.rs + j * a.cs] = value;
}

template <class T> inline void store_vector(const T* v, const MatArg& a, int64_t b) {
  T* d = a.ptr<T>(b);
  for (int64_t i = 0; i < a.rows; ++i) d[i * a.rs] = v[i];
}

// Copies the lower triangle of A (or, with from_upper, the transpose of its
// upper triangle) of matrix b into the lower triangle of M.
template <class T> inline void load_lower(const MatArg& a, int64_t b, Mat<T> M, bool from_upper) {
  const T* s = a.ptr<T>(b);
  const int64_t rs = from_upper ? a.cs : a.rs, cs = from_upper ? a.rs : a.cs;
  if (rs == 1) {
    for (int64_t j = 0; j < M.n; ++j) std::memcpy(M.col(j) + j, s + j + j * cs, sizeof(T) * (M.m - j));
    return;
  }
  // Transposing: 8 x 8 tiles on or below the diagonal (those on it
  // elementwise, so that nothing above the diagonal is written).
  for (int64_t j0 = 0; j0 < M.n; j0 += 8)
    for (int64_t i0 = j0; i0 < M.m; i0 += 8) {
      const int64_t ie = std::min<int64_t>(i0 + 8, M.m), je = std::min<int64_t>(j0 + 8, M.n);
      if (cs == 1 && i0 > j0 && ie - i0 == 8 && je - j0 == 8) {
        transpose8(s + i0 * rs + j0, rs, &M(i0, j0), M.ld);
        continue;
      }
      for (int64_t i = i0; i < ie; ++i)
        for (int64_t j = j0; j < std::min(je, i + 1); ++j) M(i, j) = s[i * rs + j * cs];
    }
}

// The first non-finite entry of the lower triangle (or all of M): true and
// its position and value in *f.
template <class T> inline bool find_nonfinite(Mat<T> M, bool lower_only, Failure* f) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V big = V::set1(std::numeric_limits<T>::max());
  for (int64_t j = 0; j < M.n; ++j) {
    const int64_t i0 = lower_only ? j : 0;
    const T* c = M.col(j);
    bool bad = false;
    int64_t i = i0;
    for (; i + W <= M.m && !bad; i += W) bad = V::any(V::not_(abs(V::load(c + i)) <= big));
    if (!bad && i < M.m) bad = V::any(V::not_(abs(V::load_n(c + i, static_cast<int>(M.m - i))) <= big));
    if (!bad) continue;
    for (int64_t r = i0; r < M.m; ++r)
      if (!std::isfinite(c[r])) {
        f->kind = FailKind::kNonFinite;
        f->i = r;
        f->j = j;
        f->value = static_cast<double>(c[r]);
        return true;
      }
  }
  return false;
}

// load_lower, then find_nonfinite(M, true, f): in one pass over a
// column-contiguous source.
template <class T> inline bool load_lower_checked(const MatArg& a, int64_t b, Mat<T> M, Failure* f) {
  if (a.rs != 1) {
    load_lower(a, b, M, false);
    return find_nonfinite(M, true, f);
  }
  using V = Vec<T>;
  constexpr int W = V::W;
  const T* s = a.ptr<T>(b);
  const V big = V::set1(std::numeric_limits<T>::max());
  typename V::Mask bad = V::not_(V::all_lanes());
  for (int64_t j = 0; j < M.n; ++j) {
    const T* c = s + j + j * a.cs;
    T* d = M.col(j) + j;
    const int64_t len = M.m - j;
    int64_t i = 0;
    for (; i + W <= len; i += W) {
      const V x = V::load(c + i);
      bad = bad | V::not_(abs(x) <= big);
      x.store(d + i);
    }
    if (i < len) {
      const int r = static_cast<int>(len - i);
      const V x = V::load_n(c + i, r);
      bad = bad | V::not_(abs(x) <= big);
      x.store_n(d + i, r);
    }
  }
  return V::any(bad) && find_nonfinite(M, true, f);
}

// A power of two near the largest |entry|, so that squares neither overflow
// nor underflow; divides M by it.
template <class T> T scale_down(Mat<T> M, bool lower_only) {
  T big = 0;
  for (int64_t j = 0; j < M.n; ++j) {
    const int64_t i0 = lower_only ? j : 0;
    big = std::max(big, amax(M.m - i0, M.col(j) + i0));
  }
  if (big == T(0)) return T(1);
  int e = 0;
  std::frexp(big, &e);
  const T s = std::ldexp(T(1), e);
  for (int64_t j = 0; j < M.n; ++j) {
    const int64_t i0 = lower_only ? j : 0;
    scal(M.m - i0, T(1) / s, M.col(j) + i0);
  }
  return s;
}

// Where recursive algorithms split n: about half, on a multiple of 16.
inline int64_t split_half(int64_t n) {
  int64_t h = (n / 2 + 15) / 16 * 16;
  return h > 0 && h < n ? h : std::max<int64_t>(n / 2, 1);
}

// Round-robin (tournament) pairing of `players` (even) in round r: pairs
// (first, second) with every two players meeting once in players - 1 rounds.
inline std::pair<int64_t, int64_t> round_robin(int64_t players, int64_t round, int64_t k) {
  auto at = [&](int64_t pos) { return pos == 0 ? int64_t{0} : 1 + (pos - 1 + round) % (players - 1); };
  return {at(k), at(players - 1 - k)};
}

// ---- GEMM -------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C through kernels::mm.
template <class T>
inline void gemm(bool ta, bool tb, T alpha, Mat<T> A, Mat<T> B, T beta, Mat<T> C, int threads) {
  const int64_t k = ta ? A.m : A.n;
  if (C.m == 0 || C.n == 0) return;
  if (k == 0 || alpha == T(0)) {
    for (int64_t j = 0; j < C.n; ++j)
      for (int64_t i = 0; i < C.m; ++i) C(i, j) = beta == T(0) ? T(0) : beta * C(i, j);
    return;
  }
  // A small product runs on one thread: splitting it is a fork-join (see fork_join_flops()).
  if (2 * C.m * C.n * k < fork_join_flops()) threads = 1;
  mm_colmajor(dtype_of<T>(), ta, tb, C.m, C.n, k, alpha, A.p, A.ld, B.p, B.ld, beta, C.p, C.ld, threads);
}

// ---- batch driver -------------------------------------------------------------

// fn(b, worker, threads_for_this_matrix) for every matrix of the batch: one
// matrix gets every thread, a batch is split across threads by matrix.
template <class F> inline void for_each_matrix(int64_t count, int threads, F&& fn) {
  if (count == 0) return;
  if (count == 1) {
    fn(int64_t{0}, 0, threads);
    return;
  }
  ThreadPool::global().parallel_for(count, threads, [&](int64_t b, int w) { fn(b, w, 1); });
}

// Per-worker scratch for a batch call.
template <class S> struct PerWorker {
  explicit PerWorker(int threads) : slots(static_cast<size_t>(std::max(threads, 1))) {}
  S& operator[](int w) { return slots[static_cast<size_t>(w)]; }
  std::vector<S> slots;
};

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
