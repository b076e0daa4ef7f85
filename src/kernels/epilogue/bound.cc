#include "kernels/epilogue/bound.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "sinew/core/error.h"

namespace sinew::kernels {
namespace {

std::string batch_note(bool batched, int64_t batch) {
  return batched ? fmt::format(", optionally with a leading batch dimension of {}", batch) : "";
}

// The operand as [batch, m, n] with zero strides where it broadcasts, or
// false when its shape is not one of `shapes` (each [rows, cols], with a
// leading batch dimension allowed when `batched`).
bool broadcast(const TensorView& t, int64_t batch, int64_t m, int64_t n, bool batched, bool row_ok, bool col_ok,
               MatrixRef* ref) {
  auto s = t.shape();
  auto st = t.strides();
  *ref = MatrixRef{t.data(), t.dtype(), 0, 0, 0};
  int64_t d = t.dim();
  if (d == 1) {
    if (!row_ok || s[0] != n) return false;
    ref->cs = st[0];
    return true;
  }
  if (d == 3) {
    if (!batched || s[0] != batch) return false;
    ref->bs = st[0];
  } else if (d != 2) {
    return false;
  }
  const int64_t rows = s[d - 2], cols = s[d - 1];
  if (rows != m) return false;
  ref->rs = st[d - 2];
  if (cols == n) {
    ref->cs = st[d - 1];
    return true;
  }
  if (cols == 1 && col_ok) return true;  // column vector: cs stays 0
  return false;
}

void check_cpu(const TensorView& t, std::string_view op, const char* what) {
  if (t.device().type != DeviceType::kCPU)
    throw InvalidArgument::make(fmt::format("{}: {}.device", op, what), t.device().to_string(), "cpu");
}

}  // namespace

double reduction_identity(Reduction op) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kMean:
    case Reduction::kAmax: return 0.0;
    case Reduction::kMax:
    case Reduction::kLogSumExp: return -std::numeric_limits<double>::infinity();
  }
  return 0.0;
}

BoundEpilogue BoundEpilogue::at_batch(int64_t b) const {
  BoundEpilogue e = *this;
  auto shift = [b](MatrixRef& r) {
    r.data = static_cast<char*>(r.data) + b * r.bs * static_cast<int64_t>(dtype_size(r.dtype));
    r.bs = 0;
  };
  for (int s = 0; s < e.num_steps; ++s)
    if (e.steps[s].operand.data) shift(e.steps[s].operand);
  for (int r = 0; r < e.num_reductions; ++r) shift(e.reductions[r].out);
  return e;
}

BoundEpilogue bind_epilogue(const Epilogue* epilogue, std::string_view op, int64_t batch, int64_t m, int64_t n,
                            bool batched, DType out_dtype) {
  BoundEpilogue e;
  e.out_dtype = out_dtype;
  if (!epilogue) return e;
  const std::string dims = batch_note(batched, batch);
  for (const EpilogueStep& s : epilogue->steps()) {
    if (s.kind == EpilogueStep::Kind::kCast) {
      e.cast_scale = s.scale;
      continue;
    }
    if (e.num_steps == BoundEpilogue::kMaxSteps)
      throw InvalidArgument::make(fmt::format("{}: epilogue", op), fmt::format("{} steps", epilogue->steps().size()),
                                  fmt::format("at most {} steps besides the cast", BoundEpilogue::kMaxSteps));
    BoundStep& b = e.steps[e.num_steps++];
    b = BoundStep{s.kind, s.activation, s.scale, s.lo, s.hi, MatrixRef{}};
    if (s.kind == EpilogueStep::Kind::kBias) {
      check_cpu(s.operand, op, "epilogue.bias");
      if (!broadcast(s.operand, batch, m, n, batched, true, true, &b.operand))
        throw InvalidArgument::make(fmt::format("{}: epilogue.bias", op), s.operand.to_string(),
                                    fmt::format("[N] = [{1}], [M, 1] = [{0}, 1] or [M, N] = [{0}, {1}]{2}", m, n, dims));
    } else if (s.kind == EpilogueStep::Kind::kResidual) {
      check_cpu(s.operand, op, "epilogue.residual");
      if (!broadcast(s.operand, batch, m, n, batched, false, false, &b.operand))
        throw InvalidArgument::make(fmt::format("{}: epilogue.residual", op), s.operand.to_string(),
                                    fmt::format("[M, N] = [{}, {}]{}", m, n, dims));
    }
  }
  for (const GroupReduction& r : epilogue->reductions()) {
    if (e.num_reductions == BoundEpilogue::kMaxReductions)
      throw InvalidArgument::make(fmt::format("{}: epilogue", op),
                                  fmt::format("{} reductions", epilogue->reductions().size()),
                                  fmt::format("at most {} reductions", BoundEpilogue::kMaxReductions));
    if (n % r.group != 0)
      throw InvalidArgument::make(fmt::format("{}: epilogue.reduce.group", op), std::to_string(r.group),
                                  fmt::format("a power of two dividing N = {}", n));
    check_cpu(r.out, op, "epilogue.reduce.out");
    BoundReduction& b = e.reductions[e.num_reductions++];
    b.op = r.op;
    b.group = r.group;
    if (!broadcast(r.out, batch, m, n / r.group, batched, false, false, &b.out) ||
        (batch > 1 && m > 0 && n > 0 && b.out.bs == 0) || (m > 1 && b.out.rs == 0) ||
        (n / r.group > 1 && b.out.cs == 0))
      throw InvalidArgument::make(fmt::format("{}: epilogue.reduce.out", op), r.out.to_string(),
                                  fmt::format("[M, N / group] = [{}, {}]{} without zero strides", m, n / r.group,
                                              batched ? fmt::format(" ([B, M, N / group] = [{}, {}, {}] for bmm)",
                                                                    batch, m, n / r.group)
                                                      : ""));
  }
  return e;
}

}  // namespace sinew::kernels
