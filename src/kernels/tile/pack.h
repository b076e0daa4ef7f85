// Packing for the FMA kernels: A into MR-row panels (MR values per K step),
// B into NR-column panels (NR values per K step), converting any float
// input (bf16, f16) to the kernel's type and zero-padding ragged edges, so
// that the microkernel reads both with unit stride and no edge cases.
//
// Each operand is either contiguous along the panel's lines (a straight
// vector copy per K step) or along K (W steps of every line are loaded,
// which the prefetchers follow as parallel streams, and transposed
// through L1); anything else is gathered element by element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/tile/scalar.h"
#include "kernels/tile/store.h"

namespace sinew::kernels::tile {

// Lanes [0, n) of a contiguous run of `dtype` values as V::T, zero beyond.
template <class V>
[[gnu::always_inline]] inline typename V::reg load_run(const char* p, DType dtype, int n) {
  using T = typename V::T;
  if (dtype == dtype_of<T>()) return V::load(reinterpret_cast<const T*>(p), V::first(n));
  if constexpr (kHasNarrow<V>) {
    if (dtype == DType::kBF16) return V::load_bf16(reinterpret_cast<const uint16_t*>(p), V::first(n));
    if (dtype == DType::kF16) return V::load_f16(reinterpret_cast<const uint16_t*>(p), V::first(n));
  }
  return load_row<V>(MatrixRef{const_cast<char*>(p), dtype, 0, 0, 1}, 0, 0, n);
}

// dst[p * L + line] = src(line, p) for lines [0, lines) (the rest zero) and
// p in [0, k), where line `line` starts at base + line * line_stride
// elements and runs along K with unit stride.
template <class V, int L>
void pack_transposed(const char* base, DType dtype, int64_t line_stride, int lines, int64_t k, typename V::T* dst) {
  using T = typename V::T;
  constexpr int W = V::W;
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  alignas(64) T chunk[L][W];
  if (lines < L) std::memset(dst, 0, sizeof(T) * L * k);
  for (int64_t p0 = 0; p0 < k; p0 += W) {
    const int n = static_cast<int>(std::min<int64_t>(W, k - p0));
    for (int line = 0; line < lines; ++line) {
      const char* s = base + (line * line_stride + p0) * es;
      __builtin_prefetch(s + 8 * W * es, 0, 0);
      V::store(chunk[line], load_run<V>(s, dtype, n));
    }
    for (int l = 0; l < n; ++l)
      for (int line = 0; line < lines; ++line) dst[(p0 + l) * L + line] = chunk[line][l];
  }
}

// dst[p * L + line] = src(line, p), the lines contiguous: one vector copy
// (masked to `lines`, zero beyond) per K step, p's start at base + p * step.
template <class V, int L>
void pack_straight(const char* base, DType dtype, int64_t step, int lines, int64_t k, typename V::T* dst) {
  constexpr int W = V::W;
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t p = 0; p < k; ++p) {
    const char* s = base + p * step * es;
#pragma GCC unroll 8
    for (int c = 0; c < L; c += W)
      V::store(dst + p * L + c, load_run<V>(s + c * es, dtype, std::clamp(lines - c, 0, W)), V::first(L - c));
  }
}

template <class V, int L>
void pack_gather(const char* base, DType dtype, int64_t line_stride, int64_t step, int lines, int64_t k,
                 typename V::T* dst) {
  using T = typename V::T;
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  if (lines < L) std::memset(dst, 0, sizeof(T) * L * k);
  for (int line = 0; line < lines; ++line)
    for (int64_t p = 0; p < k; ++p)
      dst[p * L + line] = static_cast<T>(load_scalar(base + (line * line_stride + p * step) * es, dtype));
}

template <class V, int L>
void pack_panel(const char* base, DType dtype, int64_t line_stride, int64_t step, int lines, int64_t k,
                typename V::T* dst) {
  if (line_stride == 1 || lines == 1) pack_straight<V, L>(base, dtype, step, lines, k, dst);
  else if (step == 1) pack_transposed<V, L>(base, dtype, line_stride, lines, k, dst);
  else pack_gather<V, L>(base, dtype, line_stride, step, lines, k, dst);
}

template <class K>
void pack_a(const MatrixRef& src, int64_t rows, int64_t k, void* out) {
  constexpr int MR = K::kMR;
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  auto* dst = static_cast<typename K::P*>(out);
  for (int64_t r0 = 0; r0 < rows; r0 += MR, dst += MR * k) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, rows - r0));
    const char* base = static_cast<const char*>(src.data) + r0 * src.rs * es;
    pack_panel<typename K::Vec, MR>(base, src.dtype, src.rs, src.cs, mr, k, dst);
  }
}

template <class K>
void pack_b(const MatrixRef& src, int64_t k, int64_t cols, void* out) {
  constexpr int NR = K::kNR;
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  auto* dst = static_cast<typename K::P*>(out);
  for (int64_t c0 = 0; c0 < cols; c0 += NR, dst += NR * k) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, cols - c0));
    const char* base = static_cast<const char*>(src.data) + c0 * src.cs * es;
    pack_panel<typename K::Vec, NR>(base, src.dtype, src.cs, src.rs, nr, k, dst);
  }
}

}  // namespace sinew::kernels::tile
