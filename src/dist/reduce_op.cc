#include "sinew/dist/reduce_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "sinew/core/error.h"

namespace sinew::dist {

const char* reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProd: return "prod";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kAvg: return "avg";
    case ReduceKind::kBand: return "band";
    case ReduceKind::kBor: return "bor";
    case ReduceKind::kBxor: return "bxor";
    case ReduceKind::kPremulSum: return "premul_sum";
  }
  return "?";
}

ReduceKind parse_reduce_kind(const std::string& name) {
  for (auto k : {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMin, ReduceKind::kMax,
                 ReduceKind::kAvg, ReduceKind::kBand, ReduceKind::kBor, ReduceKind::kBxor,
                 ReduceKind::kPremulSum})
    if (name == reduce_kind_name(k)) return k;
  throw InvalidArgument::make("op", fmt::format("'{}'", name),
                              "one of sum, prod, min, max, avg, band, bor, bxor, premul_sum");
}

std::string ReduceOp::name() const {
  if (kind == ReduceKind::kPremulSum) return fmt::format("premul_sum({})", factor);
  return reduce_kind_name(kind);
}

void check_reduce_op(const ReduceOp& op, DType dtype) {
  bool bitwise = op.kind == ReduceKind::kBand || op.kind == ReduceKind::kBor || op.kind == ReduceKind::kBxor;
  if (bitwise && dtype_is_floating(dtype))
    throw InvalidArgument::make("op", op.name(),
                                fmt::format("an arithmetic op for floating dtype {} (bitwise "
                                            "ops need an integer or bool dtype)", dtype_name(dtype)));
  if ((op.kind == ReduceKind::kPremulSum) && !dtype_is_floating(dtype))
    throw InvalidArgument::make("op", op.name(),
                                fmt::format("a floating dtype for premul_sum, got {}", dtype_name(dtype)));
  if (op.kind == ReduceKind::kAvg && dtype == DType::kBool)
    throw InvalidArgument::make("op", op.name(), "a numeric dtype for avg, got bool");
}

namespace {

// Storage type <-> compute type for narrow floats.
template <DType D> struct Elem;
template <> struct Elem<DType::kF32> { using S = float; using C = float; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kF64> { using S = double; using C = double; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kF16> { using S = uint16_t; using C = float; static C ld(S v) { return f16_to_f32(v); } static S st(C v) { return f32_to_f16(v); } };
template <> struct Elem<DType::kBF16> { using S = uint16_t; using C = float; static C ld(S v) { return bf16_to_f32(v); } static S st(C v) { return f32_to_bf16(v); } };
template <> struct Elem<DType::kF8E4M3FN> { using S = uint8_t; using C = float; static C ld(S v) { return e4m3fn_to_f32(v); } static S st(C v) { return f32_to_e4m3fn(v); } };
template <> struct Elem<DType::kF8E5M2> { using S = uint8_t; using C = float; static C ld(S v) { return e5m2_to_f32(v); } static S st(C v) { return f32_to_e5m2(v); } };
template <> struct Elem<DType::kI8> { using S = int8_t; using C = int8_t; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kU8> { using S = uint8_t; using C = uint8_t; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kI32> { using S = int32_t; using C = int32_t; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kI64> { using S = int64_t; using C = int64_t; static C ld(S v) { return v; } static S st(C v) { return v; } };
template <> struct Elem<DType::kBool> { using S = uint8_t; using C = uint8_t; static C ld(S v) { return v != 0; } static S st(C v) { return v != 0; } };

template <class C>
C combine(C a, C b, ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPremulSum: return static_cast<C>(a + b);
    case ReduceKind::kProd: return static_cast<C>(a * b);
    case ReduceKind::kMin: return std::min(a, b);
    case ReduceKind::kMax: return std::max(a, b);
    default: break;
  }
  if constexpr (std::is_integral_v<C>) {
    if (k == ReduceKind::kBand) return static_cast<C>(a & b);
    if (k == ReduceKind::kBor) return static_cast<C>(a | b);
    if (k == ReduceKind::kBxor) return static_cast<C>(a ^ b);
  }
  return a;
}

template <DType D, ReduceKind K>
void reduce_loop(typename Elem<D>::S* __restrict dst, const typename Elem<D>::S* a,
                 const typename Elem<D>::S* b, size_t n) {
  using E = Elem<D>;
  for (size_t i = 0; i < n; ++i) dst[i] = E::st(combine<typename E::C>(E::ld(a[i]), E::ld(b[i]), K));
}

template <DType D>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, ReduceKind k) {
  using S = typename Elem<D>::S;
  auto* d = static_cast<S*>(dst);
  auto* x = static_cast<const S*>(a);
  auto* y = static_cast<const S*>(b);
  // bool sums are logical or (as in PyTorch); bool prod is and.
  if constexpr (D == DType::kBool) {
    if (k == ReduceKind::kSum || k == ReduceKind::kMax) k = ReduceKind::kBor;
    if (k == ReduceKind::kProd || k == ReduceKind::kMin) k = ReduceKind::kBand;
  }
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPremulSum: reduce_loop<D, ReduceKind::kSum>(d, x, y, n); break;
    case ReduceKind::kProd: reduce_loop<D, ReduceKind::kProd>(d, x, y, n); break;
    case ReduceKind::kMin: reduce_loop<D, ReduceKind::kMin>(d, x, y, n); break;
    case ReduceKind::kMax: reduce_loop<D, ReduceKind::kMax>(d, x, y, n); break;
    case ReduceKind::kBand: reduce_loop<D, ReduceKind::kBand>(d, x, y, n); break;
    case ReduceKind::kBor: reduce_loop<D, ReduceKind::kBor>(d, x, y, n); break;
    case ReduceKind::kBxor: reduce_loop<D, ReduceKind::kBxor>(d, x, y, n); break;
  }
}

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f.template operator()<DType::kF32>(); break;
    case DType::kF64: f.template operator()<DType::kF64>(); break;
    case DType::kF16: f.template operator()<DType::kF16>(); break;
    case DType::kBF16: f.template operator()<DType::kBF16>(); break;
    case DType::kI8: f.template operator()<DType::kI8>(); break;
    case DType::kU8: f.template operator()<DType::kU8>(); break;
    case DType::kI32: f.template operator()<DType::kI32>(); break;
    case DType::kI64: f.template operator()<DType::kI64>(); break;
    case DType::kBool: f.template operator()<DType::kBool>(); break;
    case DType::kF8E4M3FN: f.template operator()<DType::kF8E4M3FN>(); break;
    case DType::kF8E5M2: f.template operator()<DType::kF8E5M2>(); break;
  }
}

}  // namespace

void reduce_pair(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceKind kind) {
  dispatch(dtype, [&]<DType D>() { reduce_typed<D>(dst, a, b, count, kind); });
}

void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceKind kind) {
  reduce_pair(dst, dst, src, count, dtype, kind);
}

void prepare_reduction(void* data, size_t count, DType dtype, const ReduceOp& op) {
  if (op.kind != ReduceKind::kPremulSum || op.factor == 1.0) return;
  dispatch(dtype, [&]<DType D>() {
    using E = Elem<D>;
    if constexpr (std::is_floating_point_v<typename E::C>) {
      auto* p = static_cast<typename E::S*>(data);
      for (size_t i = 0; i < count; ++i)
        p[i] = E::st(static_cast<typename E::C>(E::ld(p[i]) * op.factor));
    }
  });
}

void finalize_reduction(void* data, size_t count, DType dtype, const ReduceOp& op, int world_size) {
  if (op.kind != ReduceKind::kAvg || world_size <= 1) return;
  dispatch(dtype, [&]<DType D>() {
    using E = Elem<D>;
    auto* p = static_cast<typename E::S*>(data);
    for (size_t i = 0; i < count; ++i)
      p[i] = E::st(static_cast<typename E::C>(E::ld(p[i]) / static_cast<typename E::C>(world_size)));
  });
}

}  // namespace sinew::dist
