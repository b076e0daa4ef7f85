// Vector exp, tanh, sigmoid, erf and GELU for the fused epilogue, written
// once over a vector-traits type V (avx512/vec.h, avx2/vec.h,
// tile/generic_vec.h). f32 uses polynomial approximations (a few ulp, NaN
// propagating); f64 applies the C library lane by lane, as f64 GEMMs are
// compute bound long before their epilogue matters.
//
// Every template depends on V, whose type differs per ISA, so kernels
// compiled with different flags never share an instantiation.
#pragma once

namespace sinew::kernels::tile::math {

template <class V>
typename V::reg lanewise(typename V::reg x, double (*fn)(double)) {
  alignas(64) typename V::T lanes[V::W];
  V::store(lanes, x);
  for (int l = 0; l < V::W; ++l) lanes[l] = static_cast<typename V::T>(fn(static_cast<double>(lanes[l])));
  return V::load(lanes);
}

// e^x for f32: 0 below -87.3 and inf above 88 (no subnormal or largest
// finite results, which the activations only divide into 0 or 1), NaN in,
// NaN out.
template <class V>
typename V::reg exp(typename V::reg in) {
  using R = typename V::reg;
  R x = V::min(V::set1(88.0f), in);
  x = V::max(V::set1(-87.3f), x);
  R n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  R r = V::fma(n, V::set1(-0.693359375f), x);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  R p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  p = V::fma(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  R y = V::scale2(p, n);
  y = V::select(V::lt(in, V::set1(-87.3f)), V::zero(), y);
  return V::select(V::lt(V::set1(88.0f), in), V::set1(__builtin_inff()), y);
}

template <class V>
typename V::reg sigmoid(typename V::reg x) {
  return V::div(V::set1(1.0f), V::add(V::set1(1.0f), exp<V>(V::neg(x))));
}

// Cephes tanhf: an odd polynomial near 0, 1 - 2 / (e^2|x| + 1) elsewhere.
template <class V>
typename V::reg tanh(typename V::reg x) {
  using R = typename V::reg;
  R ax = V::abs(x);
  R z = V::mul(x, x);
  R p = V::set1(-5.70498872745e-3f);
  p = V::fma(p, z, V::set1(2.06390887954e-2f));
  p = V::fma(p, z, V::set1(-5.37397155531e-2f));
  p = V::fma(p, z, V::set1(1.33314422036e-1f));
  p = V::fma(p, z, V::set1(-3.33332819422e-1f));
  R small = V::fma(V::mul(p, z), x, x);
  R e = exp<V>(V::add(ax, ax));
  R big = V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
  big = V::select(V::lt(x, V::zero()), V::neg(big), big);
  return V::select(V::lt(ax, V::set1(0.625f)), small, big);
}

// 1 + erf(x) (so that GELU's left tail keeps its precision): a polynomial
// for |x| <= 0.9277, else 1 -/+ e^p(|x|) (N. Juffa's erff, < 1 ulp).
template <class V>
typename V::reg one_plus_erf(typename V::reg a) {
  using R = typename V::reg;
  R t = V::abs(a);
  R s = V::mul(a, a);
  R r = V::fma(V::set1(-1.72853470e-5f), t, V::set1(3.83197126e-4f));
  R u = V::fma(V::set1(-3.88396438e-3f), t, V::set1(2.42546219e-2f));
  r = V::fma(r, s, u);
  r = V::fma(r, t, V::set1(-1.06777877e-1f));
  r = V::fma(r, t, V::set1(-6.34846687e-1f));
  r = V::fma(r, t, V::set1(-1.28717512e-1f));
  r = V::fma(r, t, V::neg(t));
  R tail = exp<V>(r);  // erfc(|a|)
  R big = V::select(V::lt(a, V::zero()), tail, V::sub(V::set1(2.0f), tail));
  R q = V::set1(-5.96761703e-4f);
  q = V::fma(q, s, V::set1(4.99119423e-3f));
  q = V::fma(q, s, V::set1(-2.67681349e-2f));
  q = V::fma(q, s, V::set1(1.12819925e-1f));
  q = V::fma(q, s, V::set1(-3.76125336e-1f));
  q = V::fma(q, s, V::set1(1.28379166e-1f));
  R small = V::add(V::set1(1.0f), V::fma(q, a, a));
  return V::select(V::lt(V::set1(0.927734375f), t), big, small);
}

}  // namespace sinew::kernels::tile::math
