// The FMA microkernel: an MR x NR register tile, NR = NV vectors along N,
// updated per K step by NV loads of B and MR broadcasts of A (an outer
// product). Rows along M and vectors along N keep the store to a row-major
// output contiguous and the epilogue's per-column operands vector loads.
//
// A is packed (MR values per step) or read in place through its strides
// (small M, where packing would cost as much as the product); B is packed
// (NR values per step), or read in place from a row-major B, with masked
// loads for a ragged last panel. In place with A and B both contiguous
// along K, multiply_dot computes the tile by dot products instead.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/tile/abi.h"

namespace sinew::kernels::tile {

enum class BMode { kPacked, kDirect, kDirectTail };

template <class V, int MR, int NV>
struct FmaKernel {
  using Vec = V;
  using T = typename V::T;  // accumulation type
  using P = T;              // packed element type
  static constexpr int kMR = MR;
  static constexpr int kNR = NV * V::W;
  static constexpr int kStep = 1;
  static constexpr KernelKind kKind = sizeof(T) == 4 ? KernelKind::kF32 : KernelKind::kF64;
  static constexpr bool kDirectOk = true;  // A and B may be read in place
  // The same kernel for fewer rows: a block's ragged last row panel.
  template <int R>
  using WithRows = FmaKernel<V, R, NV>;

  // tile = A (MR x steps) * B (steps x NR).
  template <bool kPackedA, BMode kB>
  [[gnu::always_inline]] static inline void multiply(int64_t steps, const P* a, int64_t a_rs, int64_t a_cs, int mr,
                                                     const P* b, int64_t b_rs, int nr, T (&tile)[MR][kNR]) {
    constexpr int W = V::W;
    accumulate<kPackedA, kB>(steps, a, a_rs, a_cs, mr, b, b_rs, nr, [&](typename V::reg(&c)[MR][NV]) {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) V::store(&tile[i][v * W], c[i][v]);
    });
  }

  // A full tile finished in registers: out = alpha * A B + beta * prior
  // (prior may be out; nullptr: beta is 0), both row-major with contiguous
  // rows. Saves the tile's round trip through memory, which costs a fifth
  // of the time when K is short (the rank-k updates of QR and Cholesky).
  template <bool kPackedA, BMode kB>
  [[gnu::always_inline]] static inline void multiply_update(int64_t steps, const P* a, int64_t a_rs, int64_t a_cs,
                                                            const P* b, int64_t b_rs, T alpha, T beta,
                                                            const T* prior, int64_t prior_ld, T* out,
                                                            int64_t out_ld) {
    using R = typename V::reg;
    constexpr int W = V::W;
    accumulate<kPackedA, kB>(steps, a, a_rs, a_cs, MR, b, b_rs, kNR, [&](R(&c)[MR][NV]) {
      const R va = V::set1(alpha), vb = V::set1(beta);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          R x = V::mul(c[i][v], va);
          if (prior) x = V::fma(vb, V::load(prior + i * prior_ld + v * W), x);
          V::store(out + i * out_ld + v * W, x);
        }
    });
  }

 private:
  template <bool kPackedA, BMode kB, class Finish>
  [[gnu::always_inline]] static inline void accumulate(int64_t steps, const P* a, int64_t a_rs, int64_t a_cs, int mr,
                                                       const P* b, int64_t b_rs, int nr, Finish&& finish) {
    using R = typename V::reg;
    constexpr int W = V::W;
    R c[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[i][v] = V::zero();
    typename V::mask tail[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) tail[v] = V::first(std::max(0, nr - v * W));
    const P* rows[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) rows[i] = a + (kPackedA ? i : std::min(i, mr - 1) * a_rs);
    const int64_t a_step = kPackedA ? MR : a_cs;

#pragma GCC unroll 4
    for (int64_t p = 0; p < steps; ++p) {
      R bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        if constexpr (kB == BMode::kDirectTail) bv[v] = V::load(b + v * W, tail[v]);
        else bv[v] = V::load(b + v * W);
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const R ai = V::set1(kPackedA ? a[i] : rows[i][p * a_step]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) c[i][v] = V::fma(ai, bv[v], c[i][v]);
      }
      if constexpr (kPackedA) a += MR;
      b += (kB == BMode::kPacked ? kNR : b_rs);
    }
    finish(c);
  }

 public:
  // tile = A (mr x k) * B (k x nr) for A's rows and B's columns both
  // contiguous along K (B in the nn.Linear layout): dot products vectorised
  // along K, ROWS rows by as many columns as the registers allow, so that
  // small M streams B once without packing it.
  static void multiply_dot(int64_t k, const P* a, int64_t a_rs, int mr, const P* b, int64_t b_cs, int nr,
                           T (&tile)[MR][kNR]) {
    if (mr == 1) return dot_rows<1>(k, a, a_rs, 0, 1, b, b_cs, nr, tile);
    if (mr == 2) return dot_rows<2>(k, a, a_rs, 0, 2, b, b_cs, nr, tile);
    if (mr <= 4) return dot_rows<4>(k, a, a_rs, 0, mr, b, b_cs, nr, tile);
    for (int i0 = 0; i0 < mr; i0 += 8) dot_rows<8>(k, a, a_rs, i0, std::min(8, mr - i0), b, b_cs, nr, tile);
  }

 private:
  template <int ROWS>
  static void dot_rows(int64_t k, const P* a, int64_t a_rs, int i0, int rows, const P* b, int64_t b_cs, int nr,
                       T (&tile)[MR][kNR]) {
    using R = typename V::reg;
    constexpr int W = V::W;
    constexpr int kCols = std::clamp((V::kRegs - 3) / (ROWS + 1), 1, 8);
    const P* ar[ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; ++i) ar[i] = a + (i0 + std::min(i, rows - 1)) * a_rs;
    for (int j0 = 0; j0 < nr; j0 += kCols) {
      const P* bc[kCols];
#pragma GCC unroll 8
      for (int j = 0; j < kCols; ++j) bc[j] = b + std::min(j0 + j, nr - 1) * b_cs;
      R c[ROWS][kCols];
#pragma GCC unroll 8
      for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < kCols; ++j) c[i][j] = V::zero();
      for (int64_t p = 0; p < k; p += W) {
        const auto m = V::first(static_cast<int>(std::min<int64_t>(W, k - p)));
        R bv[kCols];
#pragma GCC unroll 8
        for (int j = 0; j < kCols; ++j) bv[j] = V::load(bc[j] + p, m);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; ++i) {
          const R av = V::load(ar[i] + p, m);
#pragma GCC unroll 8
          for (int j = 0; j < kCols; ++j) c[i][j] = V::fma(av, bv[j], c[i][j]);
        }
      }
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < kCols && j0 + j < nr; ++j) tile[i0 + i][j0 + j] = V::sum(c[i][j]);
    }
  }
};

}  // namespace sinew::kernels::tile
