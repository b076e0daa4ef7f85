// Finishing a register tile: alpha/beta (or the partial sums of earlier K
// blocks), then on the last K block the fused epilogue, the grouped
// reductions and the conversion to the output dtype. Written once over a
// vector-traits type V; every template depends on V, so each ISA gets its
// own instantiations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/epilogue/math.h"
#include "kernels/tile/abi.h"
#include "kernels/tile/scalar.h"
#include "kernels/tile/vec_math.h"

namespace sinew::kernels::tile {

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kF32 : DType::kF64;
}

template <class V>
constexpr bool kHasNarrow = requires(uint16_t* p, typename V::reg v, typename V::mask m) {
  V::store_bf16(p, v, m);
  V::load_bf16(p, m);
};

// Lanes [0, n) of row i, columns j.. of a broadcast operand, in V::T (the
// other lanes are unspecified).
template <class V>
typename V::reg load_row(const MatrixRef& r, int64_t i, int64_t j, int n) {
  using T = typename V::T;
  const char* p = elem_ptr(r, i, j);
  if (r.cs == 0) return V::set1(static_cast<T>(load_scalar(p, r.dtype)));
  if (r.cs == 1) {
    if (r.dtype == dtype_of<T>()) return V::load(reinterpret_cast<const T*>(p), V::first(n));
    if constexpr (kHasNarrow<V>) {
      if (r.dtype == DType::kBF16) return V::load_bf16(reinterpret_cast<const uint16_t*>(p), V::first(n));
      if (r.dtype == DType::kF16) return V::load_f16(reinterpret_cast<const uint16_t*>(p), V::first(n));
    }
  }
  alignas(64) T lanes[V::W] = {};
  const int64_t step = r.cs * static_cast<int64_t>(dtype_size(r.dtype));
  for (int l = 0; l < n; ++l) lanes[l] = static_cast<T>(load_scalar(p + l * step, r.dtype));
  return V::load(lanes);
}

template <class V>
typename V::reg activate(Activation a, typename V::reg x) {
  using T = typename V::T;
  if (a == Activation::kRelu) return V::max(V::zero(), x);
  if constexpr (sizeof(T) == 4) {
    switch (a) {
      case Activation::kGeluTanh: {
        auto x3 = V::mul(V::mul(x, x), x);
        auto u2 = V::mul(V::fma(x3, V::set1(0.044715f), x), V::set1(2.0f * 0.7978845608028654f));
        return V::mul(x, math::sigmoid<V>(u2));
      }
      case Activation::kGeluErf:
        return V::mul(V::mul(x, V::set1(0.5f)), math::one_plus_erf<V>(V::mul(x, V::set1(0.7071067811865476f))));
      case Activation::kSilu: return V::mul(x, math::sigmoid<V>(x));
      case Activation::kSigmoid: return math::sigmoid<V>(x);
      case Activation::kTanh: return math::tanh<V>(x);
      case Activation::kRelu: break;
    }
    return x;
  } else {
    switch (a) {
      case Activation::kGeluTanh: return math::lanewise<V>(x, act_gelu_tanh);
      case Activation::kGeluErf: return math::lanewise<V>(x, act_gelu_erf);
      case Activation::kSilu: return math::lanewise<V>(x, act_silu);
      case Activation::kSigmoid: return math::lanewise<V>(x, act_sigmoid);
      case Activation::kTanh: return math::lanewise<V>(x, act_tanh);
      case Activation::kRelu: break;
    }
    return x;
  }
}

// The reduction of `count` contiguous values (a group, or the part of one
// inside this tile). kMean returns the plain sum.
template <class V>
double reduce_segment(Reduction op, const typename V::T* x, int count) {
  using T = typename V::T;
  using R = typename V::reg;
  constexpr int W = V::W;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  if (op == Reduction::kSum || op == Reduction::kMean) {
    R s = V::zero();
    for (int c = 0; c < count; c += W) s = V::add(s, V::load(x + c, V::first(count - c)));
    return V::sum(s);
  }
  // Max (of magnitudes for amax) with NaN tracked apart: the vector max drops NaNs.
  const bool mag = op == Reduction::kAmax;
  R m = V::set1(mag ? T(0) : -kInf);
  bool nan = false;
  for (int c = 0; c < count; c += W) {
    auto k = V::first(count - c);
    R v = V::select(k, V::load(x + c, k), V::set1(mag ? T(0) : -kInf));
    if (mag) v = V::abs(v);
    nan = nan || V::any(V::isnan(v));
    m = V::max(m, v);
  }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  alignas(64) T lanes[W];
  V::store(lanes, m);
  T best = lanes[0];
  for (int l = 1; l < W; ++l) best = lanes[l] > best ? lanes[l] : best;
  if (op != Reduction::kLogSumExp || std::isinf(best)) return best;
  R s = V::zero();
  for (int c = 0; c < count; c += W) {
    auto k = V::first(count - c);
    R d = V::sub(V::load(x + c, k), V::set1(best));
    R e;
    if constexpr (sizeof(T) == 4) e = math::exp<V>(d);
    else e = math::lanewise<V>(d, [](double v) { return std::exp(v); });
    s = V::add(s, V::select(k, e, V::zero()));
  }
  return static_cast<double>(best) + std::log(static_cast<double>(V::sum(s)));
}

// Folds row `row` (global i), columns [j, j + count) of the finished values
// into each reduction's output.
template <class V>
void reduce_row(const BoundEpilogue& e, const typename V::T* vals, int64_t i, int64_t j, int count) {
  for (int r = 0; r < e.num_reductions; ++r) {
    const BoundReduction& red = e.reductions[r];
    for (int c = 0; c < count;) {
      const int64_t g = (j + c) / red.group;
      const int len = static_cast<int>(std::min<int64_t>(count - c, (g + 1) * red.group - (j + c)));
      double part = reduce_segment<V>(red.op, vals + c, len);
      if (red.op == Reduction::kMean) part /= static_cast<double>(red.group);
      char* p = elem_ptr(red.out, i, g);
      store_scalar(p, red.out.dtype, reduction_combine(red.op, load_scalar(p, red.out.dtype), part));
      c += len;
    }
  }
}

// Converts and writes `count` values of one output row.
template <class V>
void store_row(const MatrixRef& out, int64_t i, int64_t j, const typename V::T* vals, int count) {
  using T = typename V::T;
  constexpr int W = V::W;
  char* p = elem_ptr(out, i, j);
  if (out.cs == 1) {
    if (out.dtype == dtype_of<T>()) {
      for (int c = 0; c < count; c += W)
        V::store(reinterpret_cast<T*>(p) + c, V::load(vals + c), V::first(count - c));
      return;
    }
    if constexpr (kHasNarrow<V>) {
      if (out.dtype == DType::kBF16 || out.dtype == DType::kF16) {
        auto* q = reinterpret_cast<uint16_t*>(p);
        for (int c = 0; c < count; c += W) {
          if (out.dtype == DType::kBF16) V::store_bf16(q + c, V::load(vals + c), V::first(count - c));
          else V::store_f16(q + c, V::load(vals + c), V::first(count - c));
        }
        return;
      }
    }
  }
  const int64_t step = out.cs * static_cast<int64_t>(dtype_size(out.dtype));
  for (int c = 0; c < count; ++c) store_scalar(p + c * step, out.dtype, static_cast<double>(vals[c]));
}

// The epilogue's steps and grouped reductions on the mr x nr results at
// rows (element stride ld) of base, element (gi, gj) of the output; not its
// final scale and conversion. The step's kind is switched on once per step.
template <class V>
void epilogue_rows(const BoundEpilogue& e, typename V::T* base, int64_t ld, int64_t gi, int64_t gj, int mr, int nr) {
  using T = typename V::T;
  using R = typename V::reg;
  constexpr int W = V::W;
  auto each = [&](auto&& f) {
    for (int i = 0; i < mr; ++i)
      for (int c = 0; c < nr; c += W) {
        T* q = base + i * ld + c;
        const int n = std::min(W, nr - c);
        const R x = f(V::load(q, V::first(n)), i, c, n);
        V::store(q, x, V::first(n));
      }
  };
  for (int s = 0; s < e.num_steps; ++s) {
    const BoundStep& step = e.steps[s];
    switch (step.kind) {
      case EpilogueStep::Kind::kBias:
      case EpilogueStep::Kind::kResidual:
        each([&](R x, int i, int c, int n) { return V::add(x, load_row<V>(step.operand, gi + i, gj + c, n)); });
        break;
      case EpilogueStep::Kind::kActivation:
        each([&](R x, int, int, int) { return activate<V>(step.activation, x); });
        break;
      case EpilogueStep::Kind::kScale: {
        const R sc = V::set1(static_cast<T>(step.scale));
        each([&](R x, int, int, int) { return V::mul(x, sc); });
        break;
      }
      case EpilogueStep::Kind::kClamp: {
        const R lo = V::set1(static_cast<T>(step.lo)), hi = V::set1(static_cast<T>(step.hi));
        each([&](R x, int, int, int) { return V::min(hi, V::max(lo, x)); });
        break;
      }
      case EpilogueStep::Kind::kCast: break;
    }
  }
  if (e.num_reductions > 0)
    for (int i = 0; i < mr; ++i) reduce_row<V>(e, base + i * ld, gi + i, gj, nr);
}

// Finishes the tile whose products are in `tile` (MR x NR, row-major; rows
// >= mr and columns >= nr are padding). (bi, bj): the tile's origin in the
// block; the block's origin in the matrix is (i0, j0).
template <class V, int MR, int NR>
void finish_tile(const StoreArgs& st, int64_t i0, int64_t j0, int64_t bi, int64_t bj, int mr, int nr,
                 typename V::T (&tile)[MR][NR]) {
  using T = typename V::T;
  using R = typename V::reg;
  constexpr int W = V::W;
  const R alpha = V::set1(static_cast<T>(st.alpha));
  const R beta = V::set1(static_cast<T>(st.beta));
  const int64_t gi = i0 + bi, gj = j0 + bj;
  T* partial = st.acc ? static_cast<T*>(st.acc) + bi * st.acc_ld + bj : nullptr;  // set unless first && last
  const bool direct = st.last && st.epilogue == nullptr && st.out.cs == 1 && st.out.dtype == dtype_of<T>();
  T* dst = partial;
  int64_t ld = st.acc_ld;
  if (direct) {
    dst = reinterpret_cast<T*>(elem_ptr(st.out, gi, gj));
    ld = st.out.rs;
  } else if (st.last) {
    dst = &tile[0][0];  // finish in place, then run the epilogue and convert
    ld = NR;
  }
  // The usual prior (C itself, rows contiguous, same dtype) is read with
  // plain vector loads: load_row's general path (broadcasts, conversions)
  // is an out-of-line call per row and cost ~40% of an m x n x 32 update.
  const T* prior = nullptr;
  int64_t prior_ld = 0;
  if (st.first && st.beta != 0 && st.prior.cs == 1 && st.prior.dtype == dtype_of<T>()) {
    prior = reinterpret_cast<const T*>(elem_ptr(st.prior, gi, gj));
    prior_ld = st.prior.rs;
  }
  for (int i = 0; i < mr; ++i) {
    for (int c = 0; c < nr; c += W) {
      const int n = std::min(W, nr - c);
      R x = V::mul(V::load(&tile[i][c]), alpha);
      if (!st.first) x = V::add(x, V::load(partial + i * st.acc_ld + c, V::first(n)));
      else if (prior) x = V::fma(beta, V::load(prior + i * prior_ld + c, V::first(n)), x);
      else if (st.beta != 0) x = V::fma(beta, load_row<V>(st.prior, gi + i, gj + c, n), x);
      if (dst == &tile[0][0]) V::store(dst + i * ld + c, x);
      else V::store(dst + i * ld + c, x, V::first(n));
    }
  }
  if (!st.last || direct) return;

  if (const BoundEpilogue* e = st.epilogue) {
    epilogue_rows<V>(*e, &tile[0][0], NR, gi, gj, mr, nr);
    if (e->cast_scale != 1.0) {
      const R s = V::set1(static_cast<T>(e->cast_scale));
      for (int i = 0; i < mr; ++i)
        for (int c = 0; c < nr; c += W) V::store(&tile[i][c], V::mul(V::load(&tile[i][c]), s));
    }
  }
  for (int i = 0; i < mr; ++i) store_row<V>(st.out, gi + i, gj, tile[i], nr);
}

}  // namespace sinew::kernels::tile
