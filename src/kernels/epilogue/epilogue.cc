#include "sinew/kernels/epilogue.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "sinew/core/error.h"

namespace sinew::kernels {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kSilu: return "silu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
  }
  return "unknown";
}

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kSum: return "sum";
    case Reduction::kMean: return "mean";
    case Reduction::kMax: return "max";
    case Reduction::kAmax: return "amax";
    case Reduction::kLogSumExp: return "logsumexp";
  }
  return "unknown";
}

const char* bias_kind_name(BiasKind k) {
  switch (k) {
    case BiasKind::kRow: return "row";
    case BiasKind::kColumn: return "col";
    case BiasKind::kMatrix: return "matrix";
  }
  return "unknown";
}

namespace {

void check_not_after_cast(const std::vector<EpilogueStep>& steps, const char* what) {
  if (!steps.empty() && steps.back().kind == EpilogueStep::Kind::kCast)
    throw InvalidArgument::make(fmt::format("epilogue.{}", what), "a step after cast()",
                                "cast() as the last step (it decides the output dtype)");
}

void check_operand_dtype(const TensorView& t, const char* what) {
  const DType d = t.dtype();
  if (d != DType::kF32 && d != DType::kF64 && d != DType::kBF16 && d != DType::kF16)
    throw InvalidArgument::make(fmt::format("epilogue.{}.dtype", what), dtype_name(d),
                                "float32, float64, bfloat16 or float16");
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data() != b.data() || a.dtype() != b.dtype() || a.dim() != b.dim() || a.device() != b.device()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.shape()[d] != b.shape()[d] || a.strides()[d] != b.strides()[d]) return false;
  return true;
}

std::string view_brief(const TensorView& t) { return fmt::format("{}[{}]", dtype_name(t.dtype()), fmt::join(t.shape(), ", ")); }

}  // namespace

Epilogue& Epilogue::bias(const TensorView& b) {
  check_not_after_cast(steps_, "bias");
  check_operand_dtype(b, "bias");
  if (b.dim() < 1 || b.dim() > 3)
    throw InvalidArgument::make("epilogue.bias", b.to_string(), "[N], [M, 1], [M, N] (or with a batch dimension)");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kBias;
  s.bias = b.dim() == 1 ? BiasKind::kRow : (b.shape()[b.dim() - 1] == 1 ? BiasKind::kColumn : BiasKind::kMatrix);
  s.operand = b;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::activation(Activation a) {
  check_not_after_cast(steps_, "activation");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kActivation;
  s.activation = a;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::residual(const TensorView& r) {
  check_not_after_cast(steps_, "residual");
  check_operand_dtype(r, "residual");
  if (r.dim() < 2 || r.dim() > 3)
    throw InvalidArgument::make("epilogue.residual", r.to_string(), "[M, N] (or [B, M, N])");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kResidual;
  s.operand = r;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::scale(double v) {
  check_not_after_cast(steps_, "scale");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kScale;
  s.scale = v;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::clamp(double lo, double hi) {
  check_not_after_cast(steps_, "clamp");
  if (!(lo <= hi))
    throw InvalidArgument::make("epilogue.clamp", fmt::format("[{}, {}]", lo, hi), "lo <= hi");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kClamp;
  s.lo = lo;
  s.hi = hi;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::cast(DType dtype, double scale) {
  check_not_after_cast(steps_, "cast");
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF8E4M3FN && dtype != DType::kF8E5M2)
    throw InvalidArgument::make("epilogue.cast.dtype", dtype_name(dtype),
                                "bfloat16, float16, float8_e4m3fn or float8_e5m2");
  if (!std::isfinite(scale))
    throw InvalidArgument::make("epilogue.cast.scale", fmt::format("{}", scale), "a finite number");
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::kCast;
  s.dtype = dtype;
  s.scale = scale;
  steps_.push_back(s);
  return *this;
}

Epilogue& Epilogue::reduce(Reduction op, int64_t group, const TensorView& out) {
  if (group < 1 || (group & (group - 1)) != 0)
    throw InvalidArgument::make("epilogue.reduce.group", std::to_string(group), "a power of two");
  if (out.dtype() != DType::kF32 && out.dtype() != DType::kF64)
    throw InvalidArgument::make("epilogue.reduce.out.dtype", dtype_name(out.dtype()), "float32 or float64");
  reductions_.push_back(GroupReduction{op, group, out});
  return *this;
}

std::optional<DType> Epilogue::cast_dtype() const {
  if (!steps_.empty() && steps_.back().kind == EpilogueStep::Kind::kCast) return steps_.back().dtype;
  return std::nullopt;
}

std::string Epilogue::key() const {
  std::vector<std::string> parts;
  for (const EpilogueStep& s : steps_) {
    switch (s.kind) {
      case EpilogueStep::Kind::kBias: parts.push_back(fmt::format("bias_{}", bias_kind_name(s.bias))); break;
      case EpilogueStep::Kind::kActivation: parts.push_back(activation_name(s.activation)); break;
      case EpilogueStep::Kind::kResidual: parts.push_back("residual"); break;
      case EpilogueStep::Kind::kScale: parts.push_back("scale"); break;
      case EpilogueStep::Kind::kClamp: parts.push_back("clamp"); break;
      case EpilogueStep::Kind::kCast: parts.push_back(fmt::format("cast_{}", dtype_name(s.dtype))); break;
    }
  }
  for (const GroupReduction& r : reductions_) parts.push_back(fmt::format("{}{}", reduction_name(r.op), r.group));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, "+"));
}

std::string Epilogue::to_string() const {
  std::vector<std::string> parts;
  for (const EpilogueStep& s : steps_) {
    switch (s.kind) {
      case EpilogueStep::Kind::kBias:
        parts.push_back(fmt::format("bias({} {})", bias_kind_name(s.bias), view_brief(s.operand)));
        break;
      case EpilogueStep::Kind::kActivation: parts.push_back(activation_name(s.activation)); break;
      case EpilogueStep::Kind::kResidual: parts.push_back(fmt::format("residual({})", view_brief(s.operand))); break;
      case EpilogueStep::Kind::kScale: parts.push_back(fmt::format("scale({})", s.scale)); break;
      case EpilogueStep::Kind::kClamp: parts.push_back(fmt::format("clamp({}, {})", s.lo, s.hi)); break;
      case EpilogueStep::Kind::kCast: parts.push_back(fmt::format("cast({}, {})", dtype_name(s.dtype), s.scale)); break;
    }
  }
  for (const GroupReduction& r : reductions_)
    parts.push_back(fmt::format("{}(group {} -> {})", reduction_name(r.op), r.group, view_brief(r.out)));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, "+"));
}

size_t Epilogue::hash() const { return std::hash<std::string>{}(key()); }

bool Epilogue::operator==(const Epilogue& o) const {
  if (steps_.size() != o.steps_.size() || reductions_.size() != o.reductions_.size()) return false;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const EpilogueStep &a = steps_[i], &b = o.steps_[i];
    if (a.kind != b.kind || a.bias != b.bias || a.activation != b.activation || a.scale != b.scale || a.lo != b.lo ||
        a.hi != b.hi || a.dtype != b.dtype || !same_view(a.operand, b.operand))
      return false;
  }
  for (size_t i = 0; i < reductions_.size(); ++i) {
    const GroupReduction &a = reductions_[i], &b = o.reductions_[i];
    if (a.op != b.op || a.group != b.group || !same_view(a.out, b.out)) return false;
  }
  return true;
}

}  // namespace sinew::kernels
