// Compact QR that applies Householder reflectors two at a time: W small
// matrices at once, one per lane (LAPACK geqr2 / org2r with larfg_lanes and
// reflect_lanes of householder_impl.h), each pass over the trailing columns
// applying a pair, so every entry is loaded and stored half as often for
// the same FMAs. A 32 x 32 f64 group (A and Q, 64 KiB each) does not fit in
// L1, and one reflector per pass waited on L2. Included through isa_begin.h
// only, after householder_impl.h.
#pragma once

namespace sinew::linalg::detail::SINEW_LINALG_ISA {

// Columns [c0, c1) of C (ld m) <- H_b H_a C (a_first) or H_a H_b C, where
// H_a = I - ta va vaᵀ with va = [1; a[ja+1 .. m)] on rows ja .. m, and H_b
// likewise with b on rows ja+1 .. m. Per column both dot products come from
// one pass and the two rank-1 updates from a second one; vaᵀvb corrects the
// second dot product for the first update.
template <class T>
void reflect2_lanes(const Vec<T>* a, const Vec<T>* b, int64_t ja, int64_t m, Vec<T> ta, Vec<T> tb, bool a_first,
                    Vec<T>* C, int64_t c0, int64_t c1) {
  using V = Vec<T>;
  const int64_t jb = ja + 1;
  V vab = a[jb];
  for (int64_t i = jb + 1; i < m; ++i) vab = fma(a[i], b[i], vab);
  auto weights = [&](V da, V db, V& wa, V& wb) {
    if (a_first) {
      wa = ta * da;
      wb = tb * fnma(wa, vab, db);
    } else {
      wb = tb * db;
      wa = ta * fnma(wb, vab, da);
    }
  };
  int64_t c = c0;
  for (; c + 4 <= c1; c += 4) {
    V* x0 = C + c * m;
    V* x1 = x0 + m;
    V* x2 = x1 + m;
    V* x3 = x2 + m;
    const V ab = a[jb];
    V da0 = fma(ab, x0[jb], x0[ja]), da1 = fma(ab, x1[jb], x1[ja]), da2 = fma(ab, x2[jb], x2[ja]),
      da3 = fma(ab, x3[jb], x3[ja]);
    V db0 = x0[jb], db1 = x1[jb], db2 = x2[jb], db3 = x3[jb];
    for (int64_t i = jb + 1; i < m; ++i) {
      const V ai = a[i], bi = b[i];
      const V y0 = x0[i], y1 = x1[i], y2 = x2[i], y3 = x3[i];
      da0 = fma(ai, y0, da0);
      da1 = fma(ai, y1, da1);
      da2 = fma(ai, y2, da2);
      da3 = fma(ai, y3, da3);
      db0 = fma(bi, y0, db0);
      db1 = fma(bi, y1, db1);
      db2 = fma(bi, y2, db2);
      db3 = fma(bi, y3, db3);
    }
    V wa0, wa1, wa2, wa3, wb0, wb1, wb2, wb3;
    weights(da0, db0, wa0, wb0);
    weights(da1, db1, wa1, wb1);
    weights(da2, db2, wa2, wb2);
    weights(da3, db3, wa3, wb3);
    x0[ja] = x0[ja] - wa0;
    x1[ja] = x1[ja] - wa1;
    x2[ja] = x2[ja] - wa2;
    x3[ja] = x3[ja] - wa3;
    x0[jb] = fnma(wa0, ab, x0[jb] - wb0);
    x1[jb] = fnma(wa1, ab, x1[jb] - wb1);
    x2[jb] = fnma(wa2, ab, x2[jb] - wb2);
    x3[jb] = fnma(wa3, ab, x3[jb] - wb3);
    for (int64_t i = jb + 1; i < m; ++i) {
      const V ai = a[i], bi = b[i];
      x0[i] = fnma(wb0, bi, fnma(wa0, ai, x0[i]));
      x1[i] = fnma(wb1, bi, fnma(wa1, ai, x1[i]));
      x2[i] = fnma(wb2, bi, fnma(wa2, ai, x2[i]));
      x3[i] = fnma(wb3, bi, fnma(wa3, ai, x3[i]));
    }
  }
  for (; c < c1; ++c) {
    V* x = C + c * m;
    const V ab = a[jb];
    V da = fma(ab, x[jb], x[ja]), db = x[jb], ea = V::zero(), eb = V::zero();
    int64_t i = jb + 1;
    for (; i + 1 < m; i += 2) {
      da = fma(a[i], x[i], da);
      db = fma(b[i], x[i], db);
      ea = fma(a[i + 1], x[i + 1], ea);
      eb = fma(b[i + 1], x[i + 1], eb);
    }
    if (i < m) {
      da = fma(a[i], x[i], da);
      db = fma(b[i], x[i], db);
    }
    V wa, wb;
    weights(da + ea, db + eb, wa, wb);
    x[ja] = x[ja] - wa;
    x[jb] = fnma(wa, ab, x[jb] - wb);
    for (i = jb + 1; i < m; ++i) x[i] = fnma(wb, b[i], fnma(wa, a[i], x[i]));
  }
}

// QR of the m x n matrices in the lanes of A (column-major, ld m), as
// LAPACK geqr2: R above the diagonal, reflectors below, tau[min(m, n)].
// Reflector j + 1 comes from column j + 1 after H_j alone; the columns
// past it then take H_j and H_{j+1} in one pass.
template <class T> void geqr2_pairs_lanes(Vec<T>* A, int64_t m, int64_t n, Vec<T>* tau) {
  const int64_t k = std::min(m, n);
  for (int64_t j = 0; j < k; j += 2) {
    Vec<T>* a = A + j * m;
    tau[j] = larfg_lanes(a, j, m);
    if (j + 1 >= k) {
      reflect_lanes(a, j, m, tau[j], A, j + 1, n);
      break;
    }
    reflect_lanes(a, j, m, tau[j], A, j + 1, j + 2);
    Vec<T>* b = a + m;
    tau[j + 1] = larfg_lanes(b, j + 1, m);
    reflect2_lanes(a, b, j, m, tau[j], tau[j + 1], true, A, j + 2, n);
  }
}

// Q (m x q, ld m) <- the first q columns of H_0 ... H_{k-1} (LAPACK org2r),
// two reflectors per pass.
template <class T>
void org2r_pairs_lanes(const Vec<T>* A, int64_t m, int64_t k, const Vec<T>* tau, Vec<T>* Q, int64_t q) {
  using V = Vec<T>;
  for (int64_t c = 0; c < q; ++c)
    for (int64_t i = 0; i < m; ++i) Q[i + c * m] = V::set1(i == c ? T(1) : T(0));
  int64_t j = k - 1;
  for (; j >= 1; j -= 2) {
    // H_{j-1} H_j on columns j ..; column j - 1 is still e_{j-1}, which H_j keeps.
    reflect2_lanes(A + (j - 1) * m, A + j * m, j - 1, m, tau[j - 1], tau[j], false, Q, j, q);
    reflect_lanes(A + (j - 1) * m, j - 1, m, tau[j - 1], Q, j - 1, j);
  }
  if (j == 0) reflect_lanes(A, 0, m, tau[0], Q, 0, q);
}

}  // namespace sinew::linalg::detail::SINEW_LINALG_ISA
