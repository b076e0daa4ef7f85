// The compact Cholesky kernel: W small matrices factored at once, one per
// vector lane, held as packed lower triangles. Included through isa_begin.h
// only, after cholesky_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// Lower triangles packed by rows: element (i, k), k <= i, at i (i + 1) / 2 + k.
inline int64_t packed(int64_t i, int64_t k) { return i * (i + 1) / 2 + k; }

// P (packed lower triangles, W lanes) <- the lower triangles of the W full
// n x n matrices p[l] (element (i, k) at i rs + k cs, rs or cs 1), and back
// (zeros above the diagonal), W x W blocks at a time through
// transpose_block (compact.h): each matrix is read or written in memory
// order with whole vectors. The load returns the lanes that hold a NaN or
// an infinity (x * 0 is NaN for those, 0 for finite x).
template <class T>
typename Vec<T>::Mask load_packed_blocked(T* const* p, int64_t n, int64_t rs, int64_t cs, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V r[W];
  const V zero = V::zero();
  V nan0 = zero, nan1 = zero;
  const bool by_cols = rs == 1;
  for (int64_t o = 0; o < n; ++o) {
    // column o from row o down, or row o up to column o
    const int64_t lo = by_cols ? o : 0, hi = by_cols ? n : o + 1;
    for (int64_t k0 = lo; k0 < hi; k0 += W) {
      const int c = static_cast<int>(std::min<int64_t>(W, hi - k0));
      for (int l = 0; l < W; ++l) {
        const T* s = p[l] + (by_cols ? k0 + o * cs : o * rs + k0);
        r[l] = c == W ? V::load(s) : V::load_n(s, c);
      }
      transpose_block(r);
      for (int t = 0; t < c; ++t) {
        P[by_cols ? packed(k0 + t, o) : packed(o, k0 + t)] = r[t];
        if (t & 1) nan1 = fma(r[t], zero, nan1);
        else nan0 = fma(r[t], zero, nan0);
      }
    }
  }
  return V::not_(abs(nan0 + nan1) <= zero);
}

template <class T> void store_packed_blocked(const Vec<T>* P, int64_t n, T* const* p, int64_t rs, int64_t cs) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const bool by_cols = rs == 1;
  V r[W];
  for (int64_t o = 0; o < n; ++o)
    for (int64_t k0 = 0; k0 < n; k0 += W) {
      // entries (k0 + t, o) by columns, (o, k0 + t) by rows; zeros above the diagonal
      const int c = static_cast<int>(std::min<int64_t>(W, n - k0));
      const bool nonzero = by_cols ? k0 + c > o : k0 <= o;
      if (nonzero) {
        for (int t = 0; t < W; ++t) {
          const int64_t i = by_cols ? k0 + t : o, k = by_cols ? o : k0 + t;
          r[t] = t < c && k <= i ? P[packed(i, k)] : V::zero();
        }
        transpose_block(r);
      }
      for (int l = 0; l < W; ++l) {
        T* d = p[l] + (by_cols ? k0 + o * cs : o * rs + k0);
        const V x = nonzero ? r[l] : V::zero();
        if (c == W) x.store(d);
        else x.store_n(d, c);
      }
    }
}

// The packed position of element e = outer n + inner of an n x n matrix
// (outer the column when by_cols, else the row), -1 above the diagonal.
inline std::vector<int32_t> packed_map(int64_t n, bool by_cols) {
  std::vector<int32_t> m(static_cast<size_t>(n * n));
  for (int64_t outer = 0; outer < n; ++outer)
    for (int64_t inner = 0; inner < n; ++inner) {
      const int64_t i = by_cols ? inner : outer, k = by_cols ? outer : inner;
      m[static_cast<size_t>(outer * n + inner)] = k <= i ? static_cast<int32_t>(packed(i, k)) : -1;
    }
  return m;
}

// The moves of load_ and store_packed_blocked for W contiguous matrices
// (inner stride 1, outer n), by 64-byte lines of memory rather than by
// columns, with map from packed_map: the W matrices at one offset share
// their L1 sets, and a line that two column blocks split is evicted
// between its halves (16 lines to a 12-way set in f32). Each line of each matrix is read and
// written once, with whole aligned vectors where the W matrices share
// their alignment; lines above the diagonal are not read.
template <class T> typename Vec<T>::Mask load_packed_lines(T* const* p, int64_t n, const int32_t* map, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t nn = n * n, s = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p[0]) % 64 / sizeof(T));
  V r[W];
  const V zero = V::zero();
  V nan0 = zero, nan1 = zero;
  for (int64_t lo = 0, hi; lo < nn; lo = hi) {
    hi = std::min(nn, (lo + s) / W * W + W - s);
    const int c = static_cast<int>(hi - lo);
    bool lower = false;
    for (int t = 0; t < c; ++t) lower |= map[lo + t] >= 0;
    if (!lower) continue;
    for (int l = 0; l < W; ++l) r[l] = c == W ? V::load(p[l] + lo) : V::load_n(p[l] + lo, c);
    transpose_block(r);
    for (int t = 0; t < c; ++t)
      if (const int32_t e = map[lo + t]; e >= 0) {
        P[e] = r[t];
        if (t & 1) nan1 = fma(r[t], zero, nan1);
        else nan0 = fma(r[t], zero, nan0);
      }
  }
  return V::not_(abs(nan0 + nan1) <= zero);
}

template <class T> void store_packed_lines(const Vec<T>* P, int64_t n, const int32_t* map, T* const* p) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t nn = n * n, s = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p[0]) % 64 / sizeof(T));
  V r[W];
  for (int64_t lo = 0, hi; lo < nn; lo = hi) {
    hi = std::min(nn, (lo + s) / W * W + W - s);
    const int c = static_cast<int>(hi - lo);
    bool lower = false;
    for (int t = 0; t < W; ++t) {
      const int32_t e = t < c ? map[lo + t] : -1;
      r[t] = e >= 0 ? P[e] : V::zero();
      lower |= e >= 0;
    }
    if (lower) transpose_block(r);
    for (int l = 0; l < W; ++l) {
      if (c == W) r[l].store(p[l] + lo);
      else r[l].store_n(p[l] + lo, c);
    }
  }
}

// P (packed lower triangles, W lanes) <- the triangle of matrices b0 ..
// b0 + cnt - 1 of `a` that is read (upper: as the lower one of the
// transpose), lanes past cnt the identity; map: its packed_map() when it
// is contiguous. Returns false, after recording the first non-finite entry
// (by rows) of every lane that has one, when any has.
template <class T>
bool load_packed_lanes(const MatArg& a, bool upper, int64_t b0, int cnt, Vec<T>* P, FailureLog* log,
                       const int32_t* map = nullptr) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = a.rows;
  T* pt = reinterpret_cast<T*>(P);
  const int64_t rs = upper ? a.cs : a.rs, cs = upper ? a.rs : a.cs;
  typename V::Mask bad = V::not_(V::all_lanes());
  if (W > 1 && cnt == W && (rs == 1 || cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = a.ptr<T>(b0 + l);
    bad = map ? load_packed_lines(p, n, map, P) : load_packed_blocked(p, n, rs, cs, P);
  } else {
    for (int l = 0; l < W; ++l) {
      if (l < cnt) {
        const T* s = a.ptr<T>(b0 + l);
        if (rs == 1) {  // walk the source in memory order
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = k; i < n; ++i) pt[packed(i, k) * W + l] = s[i + k * cs];
        } else {
          for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k <= i; ++k) pt[packed(i, k) * W + l] = s[i * rs + k * cs];
        }
      } else {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k <= i; ++k) pt[packed(i, k) * W + l] = i == k ? T(1) : T(0);
      }
    }
    const V big = V::set1(std::numeric_limits<T>::max());
    for (int64_t e = 0; e < packed(n, 0); ++e) bad = bad | V::not_(abs(P[e]) <= big);
  }
  if (!V::any(bad)) return true;
  for (int l = 0; l < cnt; ++l) {
    if (!V::lane(bad, l)) continue;
    [&] {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k <= i; ++k)
          if (const T x = pt[packed(i, k) * W + l]; !std::isfinite(x)) {
            log->record({b0 + l, FailKind::kNonFinite, upper ? k : i, upper ? i : k, static_cast<double>(x)});
            return;
          }
    }();
  }
  return false;
}

// The square root of pivot d of column j, 1 in the lanes where d is not
// positive (or NaN), which are recorded as failing at j unless they failed
// before.
template <class T>
inline Vec<T> pivot_root(Vec<T> d, int64_t j, int64_t b0, int cnt, typename Vec<T>::Mask& failed, FailureLog* log) {
  using V = Vec<T>;
  const auto bad = V::not_(d > V::zero());
  if (V::any(bad & V::not_(failed))) {
    alignas(64) T dv[V::W];
    d.store(dv);
    for (int l = 0; l < cnt; ++l)
      if (V::lane(bad, l) && !V::lane(failed, l))
        log->record({b0 + l, FailKind::kNotPositiveDefinite, j, 0, static_cast<double>(dv[l])});
    failed = failed | bad;
  }
  return sqrt(select(bad, V::set1(T(1)), d));
}

// The lower Cholesky factors of the W packed matrices in P, in place,
// left-looking two columns at a time: the dot products of a row with both
// pivot rows share its loads, four rows at once (8 accumulators, 6 loads
// per 8 FMAs; the last block of rows repeats the last row). Returns the
// failed lanes.
template <class T>
typename Vec<T>::Mask factor_packed(Vec<T>* P, int64_t n, int64_t b0, int cnt, FailureLog* log) {
  using V = Vec<T>;
  typename V::Mask failed = V::not_(V::all_lanes());
  const V one = V::set1(T(1)), zero = V::zero();
  for (int64_t j = 0; j < n; j += 2) {
    V* rj = P + packed(j, 0);
    if (j + 1 == n) {
      V d0 = rj[j], d1 = zero;
      int64_t q = 0;
      for (; q + 1 < j; q += 2) {
        d0 = fnma(rj[q], rj[q], d0);
        d1 = fnma(rj[q + 1], rj[q + 1], d1);
      }
      if (q < j) d0 = fnma(rj[q], rj[q], d0);
      rj[j] = pivot_root(d0 + d1, j, b0, cnt, failed, log);
      break;
    }
    // Columns j and j + 1 of rows j and j + 1: L(j + 1, j) and both pivots.
    V* rk = P + packed(j + 1, 0);
    V dj0 = rj[j], ak0 = rk[j], dk0 = rk[j + 1], dj1 = zero, ak1 = zero, dk1 = zero;
    int64_t q = 0;
    for (; q + 1 < j; q += 2) {
      const V x0 = rj[q], y0 = rk[q], x1 = rj[q + 1], y1 = rk[q + 1];
      dj0 = fnma(x0, x0, dj0);
      ak0 = fnma(y0, x0, ak0);
      dk0 = fnma(y0, y0, dk0);
      dj1 = fnma(x1, x1, dj1);
      ak1 = fnma(y1, x1, ak1);
      dk1 = fnma(y1, y1, dk1);
    }
    if (q < j) {
      const V x = rj[q], y = rk[q];
      dj0 = fnma(x, x, dj0);
      ak0 = fnma(y, x, ak0);
      dk0 = fnma(y, y, dk0);
    }
    const V rjj = pivot_root(dj0 + dj1, j, b0, cnt, failed, log);
    const V ij = one / rjj;
    const V lkj = (ak0 + ak1) * ij;
    const V rkk = pivot_root(fnma(lkj, lkj, dk0 + dk1), j + 1, b0, cnt, failed, log);
    const V ik = one / rkk;
    rj[j] = rjj;
    rk[j] = lkj;
    rk[j + 1] = rkk;
    for (int64_t i = j + 2; i < n; i += 4) {
      V* r0 = P + packed(i, 0);
      V* r1 = P + packed(std::min(i + 1, n - 1), 0);
      V* r2 = P + packed(std::min(i + 2, n - 1), 0);
      V* r3 = P + packed(std::min(i + 3, n - 1), 0);
      V a0 = r0[j], a1 = r1[j], a2 = r2[j], a3 = r3[j];
      V c0 = r0[j + 1], c1 = r1[j + 1], c2 = r2[j + 1], c3 = r3[j + 1];
      for (int64_t k = 0; k < j; ++k) {
        const V x = rj[k], y = rk[k];
        const V s0 = r0[k], s1 = r1[k], s2 = r2[k], s3 = r3[k];
        a0 = fnma(s0, x, a0);
        c0 = fnma(s0, y, c0);
        a1 = fnma(s1, x, a1);
        c1 = fnma(s1, y, c1);
        a2 = fnma(s2, x, a2);
        c2 = fnma(s2, y, c2);
        a3 = fnma(s3, x, a3);
        c3 = fnma(s3, y, c3);
      }
      a0 = a0 * ij;
      a1 = a1 * ij;
      a2 = a2 * ij;
      a3 = a3 * ij;
      // Rows past n - 1 repeat row n - 1: the same values, stored again.
      r0[j] = a0;
      r0[j + 1] = fnma(a0, lkj, c0) * ik;
      r1[j] = a1;
      r1[j + 1] = fnma(a1, lkj, c1) * ik;
      r2[j] = a2;
      r2[j + 1] = fnma(a2, lkj, c2) * ik;
      r3[j] = a3;
      r3[j + 1] = fnma(a3, lkj, c3) * ik;
    }
  }
  return failed;
}

// packed_map()s of the input and the output read as lower, where they are
// contiguous (else empty: moved by columns).
struct CompactMaps {
  std::vector<int32_t> in, out;
  static std::vector<int32_t> of(const MatArg& lower, int64_t n) {
    if (lower.rs == 1 && lower.cs == n) return packed_map(n, true);
    if (lower.cs == 1 && lower.rs == n) return packed_map(n, false);
    return {};
  }
};

// Factors matrices b0 .. b0 + cnt - 1 (cnt <= W) in P.
template <class T>
void cholesky_compact(const CholeskyJob& job, const CompactMaps& maps, int64_t b0, int cnt, Vec<T>* P) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const int64_t n = job.a.rows;
  if (!load_packed_lanes(job.a, job.upper, b0, cnt, P, job.log, maps.in.empty() ? nullptr : maps.in.data())) return;
  if (V::any(factor_packed(P, n, b0, cnt, job.log))) return;
  const MatArg out = job.upper ? job.out.transposed() : job.out;
  if (W > 1 && cnt == W && (out.rs == 1 || out.cs == 1)) {
    T* p[W];
    for (int l = 0; l < W; ++l) p[l] = out.ptr<T>(b0 + l);
    if (maps.out.empty()) store_packed_blocked(P, n, p, out.rs, out.cs);
    else store_packed_lines(P, n, maps.out.data(), p);
    return;
  }
  const T* pt = reinterpret_cast<const T*>(P);
  for (int l = 0; l < cnt; ++l) {
    T* d = out.ptr<T>(b0 + l);
    if (out.rs == 1) {  // write the destination in memory order
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < n; ++i) d[i + k * out.cs] = k <= i ? pt[packed(i, k) * W + l] : T(0);
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < n; ++k) d[i * out.rs + k * out.cs] = k <= i ? pt[packed(i, k) * W + l] : T(0);
    }
  }
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
