// Portable vector traits for the tile templates: W lanes as a plain array,
// which compilers turn into whatever SIMD the build targets. The fallback
// where neither AVX2 nor AVX-512 is present.
#pragma once

#include <cmath>
#include <cstdint>

namespace sinew::kernels::generic {

template <class Elem, int kW>
struct Lanes {
  using T = Elem;
  struct reg {
    T v[kW];
  };
  using mask = uint32_t;
  static constexpr int W = kW;
  static constexpr int kRegs = 16;  // what the baseline ISA (SSE2) has

  static mask first(int n) { return n >= W ? mask((1u << W) - 1) : mask((1u << (n > 0 ? n : 0)) - 1); }
  static reg zero() { return set1(T(0)); }
  static reg set1(T x) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = x;
    return r;
  }
  static reg load(const T* p) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = p[l];
    return r;
  }
  static reg load(const T* p, mask m) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = (m >> l & 1) ? p[l] : T(0);
    return r;
  }
  static void store(T* p, reg a) {
    for (int l = 0; l < W; ++l) p[l] = a.v[l];
  }
  static void store(T* p, reg a, mask m) {
    for (int l = 0; l < W; ++l)
      if (m >> l & 1) p[l] = a.v[l];
  }
  template <class F>
  static reg map(reg a, reg b, F f) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = f(a.v[l], b.v[l]);
    return r;
  }
  static reg fma(reg a, reg b, reg c) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = a.v[l] * b.v[l] + c.v[l];
    return r;
  }
  static reg add(reg a, reg b) { return map(a, b, [](T x, T y) { return x + y; }); }
  static reg sub(reg a, reg b) { return map(a, b, [](T x, T y) { return x - y; }); }
  static reg mul(reg a, reg b) { return map(a, b, [](T x, T y) { return x * y; }); }
  static reg div(reg a, reg b) { return map(a, b, [](T x, T y) { return x / y; }); }
  // b where either is NaN, as the x86 instructions do.
  static reg max(reg a, reg b) { return map(a, b, [](T x, T y) { return x > y ? x : y; }); }
  static reg min(reg a, reg b) { return map(a, b, [](T x, T y) { return x < y ? x : y; }); }
  static reg abs(reg a) { return map(a, a, [](T x, T) { return std::fabs(x); }); }
  static reg neg(reg a) { return map(a, a, [](T x, T) { return -x; }); }
  static mask lt(reg a, reg b) {
    mask m = 0;
    for (int l = 0; l < W; ++l) m |= mask(a.v[l] < b.v[l]) << l;
    return m;
  }
  static mask isnan(reg a) {
    mask m = 0;
    for (int l = 0; l < W; ++l) m |= mask(a.v[l] != a.v[l]) << l;
    return m;
  }
  static bool any(mask m) { return m != 0; }
  static reg select(mask m, reg if_true, reg if_false) {
    reg r;
    for (int l = 0; l < W; ++l) r.v[l] = (m >> l & 1) ? if_true.v[l] : if_false.v[l];
    return r;
  }
  static reg round(reg a) { return map(a, a, [](T x, T) { return std::nearbyint(x); }); }
  static reg scale2(reg a, reg n) {
    return map(a, n, [](T x, T e) { return std::ldexp(x, static_cast<int>(e)); });
  }
  static T sum(reg a) {
    T s = 0;
    for (int l = 0; l < W; ++l) s += a.v[l];
    return s;
  }
};

using F32 = Lanes<float, 8>;
using F64 = Lanes<double, 4>;

}  // namespace sinew::kernels::generic
