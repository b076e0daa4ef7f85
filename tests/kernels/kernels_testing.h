// What the kernels tests share:
//  - the differential harness for GEMM candidates: builds operands in any
//    layout (row-major, column-major, or strided with NaN in the gaps so that
//    a stray read shows), runs the reference family for the truth, then
//    every candidate on a fresh output surrounded by sentinel bytes, and
//    compares with per-dtype tolerances, NaN/Inf positions and untouched
//    sentinels;
//  - operands and references for the GEMV, scaled_mm and quantize tests:
//    random matrices, outputs with sentinel gaps between their rows, the f64
//    dot product the results are compared with;
//  - expect_invalid, for the validation messages.
#pragma once

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/epilogue/pass.h"
#include "kernels/tile_candidate.h"
#include "sinew/core/error.h"
#include "sinew/kernels/candidate.h"
#include "sinew/kernels/epilogue.h"
#include "sinew/kernels/gemm.h"

namespace sinew::kernels::testing {

constexpr uint8_t kSentinel = 0xA5;
constexpr size_t kGuard = 64;

// Expects fn() to throw InvalidArgument whose message contains every one of
// `fragments`.
template <class F>
void expect_invalid(F&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected InvalidArgument containing " << *fragments.begin();
  } catch (const InvalidArgument& e) {
    for (const std::string& p : fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}
template <class F>
void expect_invalid(F&& fn, const std::string& fragment) {
  expect_invalid(std::forward<F>(fn), {fragment});
}

// rows x cols normal values (row-major); with spread > 0 each is scaled by
// 2^u, u uniform in [-spread, spread], so that blocks get different scales.
inline std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float spread = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ex(-spread, spread);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  if (spread > 0)
    for (auto& x : v) x = nd(rng) * std::exp2(ex(rng));
  else
    for (auto& x : v) x = nd(rng);
  return v;
}

// The f64 dot product of x[0, k) and w[0, k) that results are compared
// with, and the sum of the magnitudes of its terms, which scales the
// tolerance.
struct ReferenceDot {
  double sum = 0, mag = 0;
};
template <class X, class W> ReferenceDot reference_dot(const X* x, const W* w, int64_t k) {
  ReferenceDot r;
  for (int64_t c = 0; c < k; ++c) {
    r.sum += static_cast<double>(x[c]) * w[c];
    r.mag += std::fabs(static_cast<double>(x[c]) * w[c]);
  }
  return r;
}

// NaN for dtypes that are not floating-point.
inline double load_value(const void* p, DType t) {
  double v = NAN;
  load_element(p, t, &v);
  return v;
}
inline void store_value(void* p, DType t, double v) { store_element(p, t, v); }

// A tensor in its own buffer: guard bytes on both sides, and for strided
// layouts gaps between the elements (NaN for inputs, sentinels for outputs).
class Tensor {
 public:
  Tensor() = default;
  // layout: 'N' row-major, 'T' column-major (last two dims), 'S' strided
  // (row pitch padded, column stride 2), for 1-D: 'N' unit stride, 'S' stride 3.
  Tensor(DType dtype, std::vector<int64_t> shape, char layout, bool output) : dtype_(dtype), shape_(std::move(shape)) {
    const size_t nd = shape_.size();
    strides_.assign(nd, 0);
    auto dim = [&](size_t i) { return std::max<int64_t>(shape_[i], 1); };
    if (nd == 1) {
      strides_[0] = layout == 'S' ? 3 : 1;
    } else {
      const size_t r = nd - 2, c = nd - 1;
      if (layout == 'T') {
        strides_[r] = 1;
        strides_[c] = dim(r);
      } else if (layout == 'S') {
        strides_[c] = 2;
        strides_[r] = 2 * dim(c) + 3;
      } else {
        strides_[c] = 1;
        strides_[r] = dim(c);
      }
      if (nd == 3) strides_[0] = std::max(strides_[r] * dim(r), strides_[c] * dim(c)) + (layout == 'S' ? 5 : 0);
    }
    int64_t span = 1;
    for (size_t i = 0; i < nd; ++i) span += (dim(i) - 1) * strides_[i];
    const size_t es = dtype_size(dtype_);
    bytes_.assign(static_cast<size_t>(span) * es + 2 * kGuard, kSentinel);
    if (!output)
      for (int64_t e = 0; e < span; ++e) store_value(data() + e * es, dtype_, NAN);
  }

  char* data() { return reinterpret_cast<char*>(bytes_.data()) + kGuard; }
  TensorView view() { return TensorView(data(), dtype_, shape_, strides_); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }
  // Byte offset (from data()) of the flat (row-major) element index.
  int64_t offset(int64_t flat) const {
    int64_t off = 0;
    for (size_t i = shape_.size(); i-- > 0;) {
      off += (flat % shape_[i]) * strides_[i];
      flat /= shape_[i];
    }
    return off * static_cast<int64_t>(dtype_size(dtype_));
  }
  double get(int64_t flat) { return load_value(data() + offset(flat), dtype_); }
  void set(int64_t flat, double v) { store_value(data() + offset(flat), dtype_, v); }
  void fill_random(std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (int64_t f = 0; f < numel(); ++f) set(f, d(rng));
  }
  void fill(double v) {
    for (int64_t f = 0; f < numel(); ++f) set(f, v);
  }
  // Bytes that are not elements (guards and gaps) still hold the sentinel.
  ::testing::AssertionResult sentinels_intact() {
    std::vector<bool> element(bytes_.size(), false);
    const size_t es = dtype_size(dtype_);
    for (int64_t f = 0; f < numel(); ++f)
      for (size_t b = 0; b < es; ++b) element[kGuard + static_cast<size_t>(offset(f)) + b] = true;
    for (size_t i = 0; i < bytes_.size(); ++i)
      if (!element[i] && bytes_[i] != kSentinel)
        return ::testing::AssertionFailure() << "byte " << static_cast<int64_t>(i) - static_cast<int64_t>(kGuard)
                                             << " outside the output's elements was written";
    return ::testing::AssertionSuccess();
  }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_, strides_;
  std::vector<uint8_t> bytes_;
};

// An m x n float32 or bfloat16 output whose rows are `pad` elements of
// sentinel bytes apart (and from the buffer's ends), so that a write past a
// row's end shows.
class PaddedRows {
 public:
  PaddedRows(DType dtype, int64_t m, int64_t n, int64_t pad)
      : dtype_(dtype), m_(m), n_(n), pad_(pad), ld_(n + 2 * pad), es_(dtype_size(dtype)),
        bytes_(static_cast<size_t>(m * ld_) * es_, kSentinel) {}
  TensorView view() { return TensorView(bytes_.data() + pad_ * es_, dtype_, {m_, n_}, {ld_, 1}); }
  ::testing::AssertionResult sentinels_intact(int64_t i) const {
    for (int64_t p = 0; p < pad_ * static_cast<int64_t>(es_); ++p) {
      if (bytes_[i * ld_ * es_ + p] != kSentinel) return ::testing::AssertionFailure() << "sentinel before row " << i;
      if (bytes_[(i * ld_ + pad_ + n_) * es_ + p] != kSentinel)
        return ::testing::AssertionFailure() << "sentinel after row " << i;
    }
    return ::testing::AssertionSuccess();
  }
  double get(int64_t i, int64_t j) const { return load_value(bytes_.data() + (i * ld_ + pad_ + j) * es_, dtype_); }

 private:
  DType dtype_;
  int64_t m_, n_, pad_, ld_;
  size_t es_;
  std::vector<uint8_t> bytes_;
};

// What to put into an epilogue; operands are made per case.
struct EpiSpec {
  int bias = -1;  // -1 none, else BiasKind
  bool has_activation = false;
  Activation activation = Activation::kRelu;
  bool residual = false;
  double scale = 1.0;  // 1: no scale step
  bool clamp = false;
  double lo = -0.5, hi = 0.5;
  bool cast = false;
  DType cast_dtype = DType::kBF16;
  double cast_scale = 1.0;
  std::vector<std::pair<Reduction, int64_t>> reductions;
  bool empty() const {
    return bias < 0 && !has_activation && !residual && scale == 1.0 && !clamp && !cast && reductions.empty();
  }
};

struct Case {
  GemmOp op = GemmOp::kMm;
  DType in = DType::kF32, out = DType::kF32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  char la = 'N', lb = 'N', lo = 'N';
  double alpha = 1.0, beta = 0.0;
  int addmm_bias = 0;  // addmm: BiasKind of the bias
  char lbias = 'S';    // addmm: the bias's layout (Tensor's)
  EpiSpec epi;
  int threads = 1;
  EpilogueMode mode = EpilogueMode::kAuto;

  std::string name() const {
    return fmt::format("{} {}->{} b{} {}x{}x{} {}{}{} a={} b={} epi={} t{}", gemm_op_name(op), dtype_name(in),
                       dtype_name(out), batch, m, n, k, la, lb, lo, alpha, beta, epi.empty() ? "none" : "yes", threads);
  }
};

inline std::vector<int64_t> dims(const Case& c, int64_t r, int64_t cols) {
  if (c.op == GemmOp::kBmm) return {c.batch, r, cols};
  return {r, cols};
}

// The shared inputs of one case and the outputs of one run.
struct Inputs {
  Tensor a, b, bias, epi_bias, residual;
  std::vector<double> out_init;
};

struct Outputs {
  Tensor out;
  std::vector<Tensor> reductions;
};

inline Inputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.a = Tensor(c.in, dims(c, c.m, c.k), c.la, false);
  in.b = Tensor(c.in, dims(c, c.k, c.n), c.lb, false);
  in.a.fill_random(rng);
  in.b.fill_random(rng);
  if (c.op == GemmOp::kAddmm) {
    std::vector<int64_t> shape = c.addmm_bias == 0 ? std::vector<int64_t>{c.n}
                                 : c.addmm_bias == 1 ? std::vector<int64_t>{c.m, 1}
                                                     : std::vector<int64_t>{c.m, c.n};
    in.bias = Tensor(c.in, shape, c.lbias, false);
    in.bias.fill_random(rng);
  }
  if (c.epi.bias >= 0) {
    std::vector<int64_t> shape = c.epi.bias == 0 ? std::vector<int64_t>{c.n}
                                 : c.epi.bias == 1 ? dims(c, c.m, 1)
                                                   : dims(c, c.m, c.n);
    in.epi_bias = Tensor(DType::kF32, shape, 'S', false);
    in.epi_bias.fill_random(rng);
  }
  if (c.epi.residual) {
    in.residual = Tensor(c.in == DType::kF64 ? DType::kF64 : DType::kBF16, dims(c, c.m, c.n), 'T', false);
    in.residual.fill_random(rng);
  }
  std::uniform_real_distribution<double> d(-1, 1);
  in.out_init.resize(static_cast<size_t>(c.batch * c.m * c.n));
  for (double& v : in.out_init) v = c.beta != 0 && c.op != GemmOp::kAddmm ? d(rng) : NAN;  // beta = 0 must not read out
  return in;
}

inline Outputs make_outputs(const Case& c, const Inputs& in) {
  Outputs o;
  o.out = Tensor(c.out, dims(c, c.m, c.n), c.lo, true);
  for (int64_t f = 0; f < o.out.numel(); ++f) o.out.set(f, in.out_init[static_cast<size_t>(f)]);
  for (const auto& [op, g] : c.epi.reductions) {
    o.reductions.emplace_back(DType::kF32, dims(c, c.m, c.n / g), 'N', true);
    o.reductions.back().fill(12345.0);  // overwritten by every implementation
  }
  return o;
}

inline Epilogue make_epilogue(const Case& c, Inputs& in, Outputs& o) {
  Epilogue e;
  const EpiSpec& s = c.epi;
  if (s.bias >= 0) e.bias(in.epi_bias.view());
  if (s.has_activation) e.activation(s.activation);
  if (s.residual) e.residual(in.residual.view());
  if (s.scale != 1.0) e.scale(s.scale);
  if (s.clamp) e.clamp(s.lo, s.hi);
  if (s.cast) e.cast(s.cast_dtype, s.cast_scale);
  for (size_t r = 0; r < s.reductions.size(); ++r) e.reduce(s.reductions[r].first, s.reductions[r].second, o.reductions[r].view());
  return e;
}

inline void run_case(const Case& c, Inputs& in, Outputs& o, const std::string& candidate) {
  Epilogue e = make_epilogue(c, in, o);
  GemmOptions opt;
  opt.alpha = c.alpha;
  opt.beta = c.beta;
  opt.threads = c.threads;
  opt.epilogue = c.epi.empty() ? nullptr : &e;
  opt.epilogue_mode = c.mode;
  if (candidate == "reference") opt.family = "reference";
  else opt.candidate = candidate;
  switch (c.op) {
    case GemmOp::kMm: mm(in.a.view(), in.b.view(), o.out.view(), opt); break;
    case GemmOp::kAddmm: addmm(in.bias.view(), in.a.view(), in.b.view(), o.out.view(), opt); break;
    case GemmOp::kBmm: bmm(in.a.view(), in.b.view(), o.out.view(), opt); break;
  }
}

// One unit in the last place of `dtype` at magnitude |v| (0 for f32/f64,
// whose rounding the accumulation tolerance covers).
inline double out_ulp(DType dtype, double v) {
  const double a = std::fabs(v);
  switch (dtype) {
    case DType::kBF16: return a * 0x1p-7;
    case DType::kF16: return a * 0x1p-10 + 0x1p-24;
    case DType::kF8E4M3FN: return a * 0x1p-3 + 0x1p-9;
    case DType::kF8E5M2: return a * 0x1p-2 + 0x1p-16;
    default: return 0;
  }
}

inline ::testing::AssertionResult close(const Case& c, double got, double want, double atol, double rtol,
                                        const char* what, int64_t index) {
  const bool want_nan = std::isnan(want);
  if (want_nan || std::isnan(got)) {
    if (want_nan == std::isnan(got)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << "[" << index << "] = " << got << ", want " << want;
  }
  if (std::isinf(want) || std::isinf(got)) {
    if (got == want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << "[" << index << "] = " << got << ", want " << want;
  }
  const double tol = atol + rtol * std::fabs(want) + out_ulp(c.out, want);
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << "[" << index << "] = " << got << ", want " << want << " (tol "
                                       << tol << ")";
}

// Tile ids with small, ragged cache blocks (not multiples of the register
// tile), so that small problems cross every block edge.
inline std::vector<std::string> ragged_tile_ids(const GemmProblem& p) {
  std::vector<std::string> ids;
  for (const Candidate* c : candidates_for(p, "tile")) {
    TileConfig cfg;
    if (!parse_tile_id(c->id(), &cfg) || cfg.direct || cfg.split != 'm') continue;
    for (char split : {'m', 'n'}) {
      TileConfig r = cfg;
      r.kc = 6 * cfg.kernel->kstep;
      r.mc = cfg.kernel->mr + 1;
      r.nc = cfg.kernel->nr + 3;
      r.split = split;
      ids.push_back(r.id());
    }
  }
  return ids;
}

// The case as a problem; `e` (which the problem points to) receives its epilogue.
inline GemmProblem problem_of(const Case& c, Inputs& in, Outputs& o, Epilogue* e) {
  *e = make_epilogue(c, in, o);
  GemmOptions opt;
  opt.alpha = c.alpha;
  opt.beta = c.beta;
  opt.threads = c.threads;
  opt.epilogue = e;
  switch (c.op) {
    case GemmOp::kMm: return make_mm_problem(in.a.view(), in.b.view(), o.out.view(), opt);
    case GemmOp::kAddmm: return make_addmm_problem(in.bias.view(), in.a.view(), in.b.view(), o.out.view(), opt);
    case GemmOp::kBmm: return make_bmm_problem(in.a.view(), in.b.view(), o.out.view(), opt);
  }
  return {};
}

// Every listed candidate that supports the case, plus ragged tile blockings.
inline std::vector<std::string> candidate_ids(const Case& c, Inputs& in) {
  Outputs o = make_outputs(c, in);
  Epilogue e;
  const GemmProblem p = problem_of(c, in, o, &e);
  std::vector<std::string> ids;
  for (const Candidate* cand : candidates_for(p)) ids.push_back(cand->id());
  for (const std::string& id : ragged_tile_ids(p)) ids.push_back(id);
  return ids;
}

// Runs `ids` (default: candidate_ids) on the case and compares each with the
// reference family.
inline void check_case(const Case& c, uint32_t seed = 1, std::vector<std::string> ids = {}) {
  SCOPED_TRACE(c.name());
  Inputs in = make_inputs(c, seed);
  Outputs want = make_outputs(c, in);
  run_case(c, in, want, "reference");
  if (ids.empty()) ids = candidate_ids(c, in);
  const bool f64 = c.in == DType::kF64;
  const double eps = f64 ? 0x1p-52 : 0x1p-23;
  const double amp = std::max(1.0, std::fabs(c.alpha)) * (c.epi.residual || c.epi.bias >= 0 ? 2.0 : 1.0) *
                     std::fabs(c.epi.scale) * (c.epi.cast ? std::fabs(c.epi.cast_scale) : 1.0);
  const double atol = amp * eps * 4.0 * static_cast<double>(c.k + 8) + (f64 ? 0 : 2e-6 * amp);
  const double rtol = f64 ? 1e-13 : 4e-6;
  for (const std::string& id : ids) {
    SCOPED_TRACE(id);
    Outputs got = make_outputs(c, in);
    run_case(c, in, got, id);
    ASSERT_TRUE(got.out.sentinels_intact());
    for (int64_t f = 0; f < got.out.numel(); ++f)
      ASSERT_TRUE(close(c, got.out.get(f), want.out.get(f), atol, rtol, "out", f));
    for (size_t r = 0; r < got.reductions.size(); ++r) {
      ASSERT_TRUE(got.reductions[r].sentinels_intact());
      const double g = static_cast<double>(c.epi.reductions[r].second);
      const Reduction op = c.epi.reductions[r].first;
      const double ratol = op == Reduction::kSum ? atol * g : atol * 2;
      Case f32 = c;
      f32.out = DType::kF32;
      for (int64_t f = 0; f < got.reductions[r].numel(); ++f)
        ASSERT_TRUE(close(f32, got.reductions[r].get(f), want.reductions[r].get(f), ratol, rtol, "reduction", f));
    }
  }
}

}  // namespace sinew::kernels::testing
