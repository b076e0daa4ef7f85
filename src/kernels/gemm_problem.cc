#include "sinew/kernels/gemm_problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/epilogue/bound.h"
#include "sinew/core/error.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/epilogue.h"

namespace sinew::kernels {

const char* gemm_op_name(GemmOp op) {
  switch (op) {
    case GemmOp::kMm: return "mm";
    case GemmOp::kAddmm: return "addmm";
    case GemmOp::kBmm: return "bmm";
  }
  return "unknown";
}

TensorView MatrixRef::view(int64_t b, int64_t rows, int64_t cols) const {
  return TensorView(byte_ptr(b, 0, 0), dtype, {rows, cols}, {rs, cs});
}

namespace {

// Per-thread work below which waking another thread costs more than it saves.
constexpr double kMinFlopsPerThread = 4e6;

bool float_input(DType d) { return d == DType::kF32 || d == DType::kF64 || d == DType::kBF16 || d == DType::kF16; }

char layout_char(const MatrixRef& r, int64_t rows, int64_t cols) {
  if (r.cs == 1 || cols <= 1) return 'N';
  if (r.rs == 1 || rows <= 1) return 'T';
  return 'S';
}

struct Checker {
  GemmOp op;
  std::string arg(const char* name) const { return fmt::format("{}: {}", gemm_op_name(op), name); }

  void dims(const TensorView& t, const char* name, int64_t want, const char* shape) const {
    if (t.dim() != want)
      throw InvalidArgument::make(arg(name), t.to_string(), fmt::format("a {}-D tensor {}", want, shape));
  }
  void cpu(const TensorView& t, const char* name) const {
    if (t.device().type != DeviceType::kCPU)
      throw InvalidArgument::make(arg(name) + ".device", t.device().to_string(), "cpu");
  }
  // An output whose elements are all distinct memory: sorted by stride,
  // each dimension must step past everything the smaller ones span.
  void no_overlap(const TensorView& t, const char* name) const {
    std::vector<std::pair<int64_t, int64_t>> d;  // (stride, size)
    for (int64_t i = 0; i < t.dim(); ++i)
      if (t.shape()[i] > 1) d.emplace_back(t.strides()[i], t.shape()[i]);
    std::sort(d.begin(), d.end());
    int64_t span = 1;
    for (const auto& [stride, size] : d) {
      if (stride < span)
        throw InvalidArgument::make(arg(name), t.to_string(), "a view whose elements do not overlap");
      span = stride * size;
    }
  }
};

// Whether the bytes from the lowest to the highest element of a and of b
// intersect (views of distinct buffers never do).
bool spans_overlap(const TensorView& a, const TensorView& b) {
  auto span = [](const TensorView& t) {
    auto lo = reinterpret_cast<uintptr_t>(t.data()), hi = lo;
    for (int64_t i = 0; i < t.dim(); ++i) {
      if (t.shape()[i] == 0) return std::pair<uintptr_t, uintptr_t>{0, 0};
      const int64_t reach = (t.shape()[i] - 1) * t.strides()[i] * static_cast<int64_t>(dtype_size(t.dtype()));
      if (reach < 0) lo -= static_cast<uintptr_t>(-reach);
      else hi += static_cast<uintptr_t>(reach);
    }
    return std::pair<uintptr_t, uintptr_t>{lo, hi + dtype_size(t.dtype())};
  };
  const auto [alo, ahi] = span(a);
  const auto [blo, bhi] = span(b);
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

MatrixRef ref_of(const TensorView& t) {
  auto s = t.strides();
  if (t.dim() == 3) return MatrixRef{t.data(), t.dtype(), s[0], s[1], s[2]};
  return MatrixRef{t.data(), t.dtype(), 0, s[0], s[1]};
}

GemmProblem make_problem(GemmOp op, const TensorView* bias, const TensorView& a, const TensorView& b,
                         const TensorView& out, const GemmOptions& o) {
  const Checker c{op};
  const bool batched = op == GemmOp::kBmm;
  const int64_t nd = batched ? 3 : 2;
  c.dims(a, "a", nd, batched ? "[B, M, K]" : "[M, K]");
  c.dims(b, "b", nd, batched ? "[B, K, N]" : "[K, N]");
  c.dims(out, "out", nd, batched ? "[B, M, N]" : "[M, N]");
  c.cpu(a, "a");
  c.cpu(b, "b");
  c.cpu(out, "out");

  if (!float_input(a.dtype()))
    throw InvalidArgument::make(c.arg("a.dtype"), dtype_name(a.dtype()), "float32, float64, bfloat16 or float16");
  if (b.dtype() != a.dtype())
    throw InvalidArgument::make(c.arg("b.dtype"), dtype_name(b.dtype()),
                                fmt::format("{} (a's dtype)", dtype_name(a.dtype())));
  const Epilogue* epi = o.epilogue && !o.epilogue->empty() ? o.epilogue : nullptr;
  if (const auto cast = epi ? epi->cast_dtype() : std::nullopt) {
    if (out.dtype() != *cast)
      throw InvalidArgument::make(c.arg("out.dtype"), dtype_name(out.dtype()),
                                  fmt::format("{} (the epilogue's cast)", dtype_name(*cast)));
  } else {
    const bool narrow = a.dtype() == DType::kBF16 || a.dtype() == DType::kF16;
    if (out.dtype() != a.dtype() && !(narrow && out.dtype() == DType::kF32))
      throw InvalidArgument::make(c.arg("out.dtype"), dtype_name(out.dtype()),
                                  narrow ? fmt::format("{} or float32", dtype_name(a.dtype()))
                                         : fmt::format("{} (a's dtype)", dtype_name(a.dtype())));
  }

  GemmProblem p;
  p.op = op;
  const int64_t o0 = batched ? 1 : 0;
  p.batch = batched ? a.shape()[0] : 1;
  p.m = a.shape()[o0];
  p.k = a.shape()[o0 + 1];
  p.n = b.shape()[o0 + 1];
  if (batched && b.shape()[0] != p.batch)
    throw InvalidArgument::make(c.arg("b"), b.to_string(),
                                fmt::format("[B, K, N] with B = {} (a's batch) and K = {}", p.batch, p.k));
  if (b.shape()[o0] != p.k)
    throw InvalidArgument::make(c.arg("b"), b.to_string(),
                                batched ? fmt::format("[B, K, N] with K = {} (a's columns)", p.k)
                                        : fmt::format("[K, N] with K = {} (a's columns)", p.k));
  const bool out_ok = (!batched || out.shape()[0] == p.batch) && out.shape()[o0] == p.m && out.shape()[o0 + 1] == p.n;
  if (!out_ok)
    throw InvalidArgument::make(c.arg("out"), out.to_string(),
                                batched ? fmt::format("[B, M, N] = [{}, {}, {}]", p.batch, p.m, p.n)
                                        : fmt::format("[M, N] = [{}, {}]", p.m, p.n));
  c.no_overlap(out, "out");
  if (o.threads < 0)
    throw InvalidArgument::make(c.arg("options.threads"), std::to_string(o.threads), ">= 0 (0: the pool's default)");

  p.in_dtype = a.dtype();
  p.out_dtype = out.dtype();
  p.a = ref_of(a);
  p.b = ref_of(b);
  p.out = ref_of(out);
  p.alpha = o.alpha;
  p.beta = o.beta;
  p.prior = p.out;
  if (bias) {
    c.cpu(*bias, "bias");
    if (!float_input(bias->dtype()))
      throw InvalidArgument::make(c.arg("bias.dtype"), dtype_name(bias->dtype()),
                                  "float32, float64, bfloat16 or float16");
    const auto s = bias->shape();
    const auto st = bias->strides();
    if (bias->dim() == 1 && s[0] == p.n) {
      p.prior = MatrixRef{bias->data(), bias->dtype(), 0, 0, st[0]};
    } else if (bias->dim() == 2 && s[0] == p.m && (s[1] == p.n || s[1] == 1)) {
      p.prior = MatrixRef{bias->data(), bias->dtype(), 0, st[0], s[1] == 1 ? 0 : st[1]};
    } else {
      throw InvalidArgument::make(c.arg("bias"), bias->to_string(),
                                  fmt::format("[N] = [{1}], [M, 1] = [{0}, 1] or [M, N] = [{0}, {1}]", p.m, p.n));
    }
  }
  bind_epilogue(epi, gemm_op_name(op), p.batch, p.m, p.n, batched, p.out_dtype);
  // Every family writes out before its epilogue reads the operands (the
  // fused tile finishes into out, the separate pass runs on out), so an
  // operand sharing out's memory would be read after it was overwritten.
  if (epi)
    for (const EpilogueStep& step : epi->steps())
      if ((step.kind == EpilogueStep::Kind::kBias || step.kind == EpilogueStep::Kind::kResidual) &&
          step.operand.data() && spans_overlap(step.operand, out)) {
        throw InvalidArgument::make(
            c.arg(step.kind == EpilogueStep::Kind::kBias ? "epilogue.bias" : "epilogue.residual"),
            step.operand.to_string(),
            fmt::format("a view that does not share memory with out ({}); to add out's current values, use addmm "
                        "with out as its bias (C) and beta = 1",
                        out.to_string()));
      }
  p.epilogue = epi;

  if (o.threads > 0) {
    p.threads = o.threads;
  } else {
    const double flops = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) * static_cast<double>(p.n) *
                         static_cast<double>(p.k);
    p.threads = static_cast<int>(std::clamp<double>(flops / kMinFlopsPerThread, 1.0, ThreadPool::default_threads()));
  }
  return p;
}

}  // namespace

std::string GemmProblem::layout() const {
  return {layout_char(a, m, k), layout_char(b, k, n)};
}

std::string GemmProblem::to_string() const {
  return fmt::format("{} {}->{} [b={} m={} n={} k={}] {} alpha={} beta={} epilogue={} t{}", gemm_op_name(op),
                     dtype_name(in_dtype), dtype_name(out_dtype), batch, m, n, k, layout(), alpha, beta,
                     epilogue ? epilogue->key() : "none", threads);
}

GemmProblem make_mm_problem(const TensorView& a, const TensorView& b, const TensorView& out,
                            const GemmOptions& options) {
  return make_problem(GemmOp::kMm, nullptr, a, b, out, options);
}

GemmProblem make_addmm_problem(const TensorView& bias, const TensorView& a, const TensorView& b,
                               const TensorView& out, const GemmOptions& options) {
  return make_problem(GemmOp::kAddmm, &bias, a, b, out, options);
}

GemmProblem make_bmm_problem(const TensorView& a, const TensorView& b, const TensorView& out,
                             const GemmOptions& options) {
  return make_problem(GemmOp::kBmm, nullptr, a, b, out, options);
}

}  // namespace sinew::kernels
