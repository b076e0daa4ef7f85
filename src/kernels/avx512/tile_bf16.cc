// AVX-512 BF16 kernels: vdpbf16ps multiplies pairs of bf16 along K and
// adds both products into f32 lanes, so A is packed as one 32-bit pair per
// row and step (broadcast), and B with each column's pair interleaved
// (one zmm of 16 pairs per 16 columns and step).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "kernels/avx512/vec.h"
#include "kernels/tile/block.h"

namespace sinew::kernels::tile {
namespace {

template <int MR, int NV>
struct Bf16DotKernel {
  using Vec = avx512::F32;
  using T = float;
  using P = uint32_t;  // a pair of bf16 along K, the lower k in the low half
  static constexpr int kMR = MR;
  static constexpr int kNR = NV * 16;
  static constexpr int kStep = 2;
  static constexpr KernelKind kKind = KernelKind::kBf16Dot;
  static constexpr bool kDirectOk = false;

  template <bool kPackedA, BMode kB>
  [[gnu::always_inline]] static inline void multiply(int64_t steps, const P* a, int64_t, int64_t, int, const P* b,
                                                     int64_t, int, float (&tile)[MR][kNR]) {
    __m512 c[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < steps; ++p) {
      __m512bh bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) c[i][v] = _mm512_dpbf16_ps(c[i][v], ai, bv[v]);
      }
      a += MR;
      b += kNR;
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(&tile[i][v * 16], c[i][v]);
  }
};

uint16_t bf16_at(const char* base, int64_t offset_elems) {
  uint16_t v;
  std::memcpy(&v, base + offset_elems * 2, 2);
  return v;
}

template <class K>
void pack_a_pairs(const MatrixRef& src, int64_t rows, int64_t k, void* out) {
  constexpr int MR = K::kMR;
  const int64_t steps = (k + 1) / 2;
  uint32_t* dst = static_cast<uint32_t*>(out);
  for (int64_t r0 = 0; r0 < rows; r0 += MR, dst += MR * steps) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, rows - r0));
    const char* base = static_cast<const char*>(src.data) + r0 * src.rs * 2;
    if (mr < MR) std::memset(dst, 0, sizeof(uint32_t) * MR * steps);
    if (src.cs == 1) {  // pairs are adjacent: 16 pairs of every row per chunk, transposed through L1
      alignas(64) uint32_t chunk[MR][16];
      for (int64_t s0 = 0; s0 < steps; s0 += 16) {
        const int n = static_cast<int>(std::min<int64_t>(32, k - 2 * s0));  // bf16 values left
        const __mmask32 m = n >= 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1);
        for (int i = 0; i < mr; ++i)
          _mm512_store_si512(chunk[i], _mm512_maskz_loadu_epi16(m, base + (i * src.rs + 2 * s0) * 2));
        const int ns = (n + 1) / 2;
        for (int l = 0; l < ns; ++l)
          for (int i = 0; i < mr; ++i) dst[(s0 + l) * MR + i] = chunk[i][l];
      }
    } else {
      for (int i = 0; i < mr; ++i)
        for (int64_t s = 0; s < steps; ++s) {
          const uint32_t lo = bf16_at(base, i * src.rs + 2 * s * src.cs);
          const uint32_t hi = 2 * s + 1 < k ? bf16_at(base, i * src.rs + (2 * s + 1) * src.cs) : 0;
          dst[s * MR + i] = lo | hi << 16;
        }
    }
  }
}

template <class K>
void pack_b_pairs(const MatrixRef& src, int64_t k, int64_t cols, void* out) {
  constexpr int NR = K::kNR;
  const int64_t steps = (k + 1) / 2;
  uint32_t* dst = static_cast<uint32_t*>(out);
  for (int64_t c0 = 0; c0 < cols; c0 += NR, dst += NR * steps) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, cols - c0));
    const char* base = static_cast<const char*>(src.data) + c0 * src.cs * 2;
    if (src.cs == 1 || nr == 1) {  // rows contiguous: interleave two rows 16 columns at a time
      for (int64_t s = 0; s < steps; ++s) {
        const char* r0 = base + 2 * s * src.rs * 2;
        const char* r1 = base + (2 * s + 1) * src.rs * 2;
        const bool has_hi = 2 * s + 1 < k;
        for (int c = 0; c < NR; c += 16) {
          const int n = std::max(0, std::min(16, nr - c));
          const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
          __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + c * 2));
          __m512i hi = has_hi ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + c * 2)) : _mm512_setzero_si512();
          _mm512_storeu_si512(dst + s * NR + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
      }
    } else {
      if (nr < NR) std::memset(dst, 0, sizeof(uint32_t) * NR * steps);
      for (int j = 0; j < nr; ++j)
        for (int64_t s = 0; s < steps; ++s) {
          const uint32_t lo = bf16_at(base, j * src.cs + 2 * s * src.rs);
          const uint32_t hi = 2 * s + 1 < k ? bf16_at(base, j * src.cs + (2 * s + 1) * src.rs) : 0;
          dst[s * NR + j] = lo | hi << 16;
        }
    }
  }
}

template <int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  using K = Bf16DotKernel<MR, NV>;
  return make_kernel<K>(name, Isa::kAvx512, &pack_a_pairs<K>, &pack_b_pairs<K>);
}

constexpr TileKernel kKernels[] = {
    kernel<12, 2>("bf16dot/12x32"),
    kernel<6, 4>("bf16dot/6x64"),
};

}  // namespace

KernelList avx512_bf16_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
