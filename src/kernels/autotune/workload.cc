// GemmShape's spelling and the synthetic operands the tuner times.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "kernels/autotune/key.h"
#include "sinew/core/aligned_buffer.h"
#include "sinew/core/error.h"
#include "sinew/kernels/autotune.h"

namespace sinew::kernels {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t pos = 0;;) {
    const size_t at = s.find(sep, pos);
    out.push_back(s.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) return out;
    pos = at + 1;
  }
}

const char* short_dtype(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    default: return dtype_name(t);
  }
}

// One token of an epilogue key, as data.
struct Token {
  EpilogueStep::Kind kind = EpilogueStep::Kind::kScale;
  bool reduction = false;
  BiasKind bias = BiasKind::kRow;
  Activation activation = Activation::kRelu;
  DType cast = DType::kF32;
  Reduction reduce = Reduction::kSum;
  int64_t group = 0;
};

std::optional<Token> parse_token(std::string_view t) {
  Token k;
  using K = EpilogueStep::Kind;
  if (t == "bias" || t == "bias_row") return Token{K::kBias, false, BiasKind::kRow};
  if (t == "bias_col") return Token{K::kBias, false, BiasKind::kColumn};
  if (t == "bias_matrix") return Token{K::kBias, false, BiasKind::kMatrix};
  if (t == "residual") return Token{K::kResidual};
  if (t == "scale") return Token{K::kScale};
  if (t == "clamp") return Token{K::kClamp};
  for (Activation a : {Activation::kRelu, Activation::kGeluTanh, Activation::kGeluErf, Activation::kSilu,
                       Activation::kSigmoid, Activation::kTanh})
    if (t == activation_name(a)) {
      k.kind = K::kActivation;
      k.activation = a;
      return k;
    }
  if (t.starts_with("cast_")) {
    try {
      k.cast = parse_dtype(t.substr(5));
    } catch (const InvalidArgument&) {
      return std::nullopt;
    }
    k.kind = K::kCast;
    return k;
  }
  for (Reduction r : {Reduction::kSum, Reduction::kMean, Reduction::kMax, Reduction::kAmax, Reduction::kLogSumExp}) {
    const std::string_view name = reduction_name(r);
    if (!t.starts_with(name)) continue;
    const std::string_view digits = t.substr(name.size());
    int64_t g = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), g);
    if (ec != std::errc() || end != digits.data() + digits.size() || g < 1) continue;
    k.reduction = true;
    k.reduce = r;
    k.group = g;
    return k;
  }
  return std::nullopt;
}

std::string token_name(const Token& t) {
  using K = EpilogueStep::Kind;
  if (t.reduction) return fmt::format("{}{}", reduction_name(t.reduce), t.group);
  switch (t.kind) {
    case K::kBias: return fmt::format("bias_{}", bias_kind_name(t.bias));
    case K::kActivation: return activation_name(t.activation);
    case K::kResidual: return "residual";
    case K::kScale: return "scale";
    case K::kClamp: return "clamp";
    case K::kCast: return fmt::format("cast_{}", dtype_name(t.cast));
  }
  return "?";
}

std::vector<Token> parse_epilogue(std::string_view epi, std::string_view spec) {
  std::vector<Token> out;
  if (epi == "none" || epi.empty()) return out;
  for (std::string_view t : split(epi, '+')) {
    auto tok = parse_token(t);
    if (!tok)
      throw InvalidArgument::make(
          "gemm shape epilogue", fmt::format("'{}' in '{}'", t, spec),
          "bias[_row|_col|_matrix], relu, gelu_tanh, gelu_erf, silu, sigmoid, tanh, residual, scale, clamp, "
          "cast_<dtype> or <sum|mean|max|amax|logsumexp><group>");
    out.push_back(*tok);
  }
  return out;
}

std::string join_tokens(const std::vector<Token>& ts) {
  if (ts.empty()) return "none";
  std::string s;
  // Epilogue::key() lists steps before reductions.
  for (bool reductions : {false, true})
    for (const Token& t : ts)
      if (t.reduction == reductions) {
        if (!s.empty()) s += '+';
        s += token_name(t);
      }
  return s;
}

bool is_layout(std::string_view f) {
  return f.size() == 2 && std::string_view("NTS").find(f[0]) != std::string_view::npos &&
         std::string_view("NTS").find(f[1]) != std::string_view::npos;
}

int64_t parse_dim(std::string_view d, std::string_view spec) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
  if (ec != std::errc() || end != d.data() + d.size() || v < 0)
    throw InvalidArgument::make("gemm shape", fmt::format("'{}'", spec),
                                "<op>:<dtype>:[<B>x]<M>x<N>x<K>[:<epilogue>][:<layout>] with sizes >= 0");
  return v;
}

}  // namespace

GemmShape GemmShape::parse(std::string_view spec, int threads) {
  const std::string expected = "<op>:<dtype>[><out dtype>]:[<B>x]<M>x<N>x<K>[:<epilogue>][:<layout>]";
  const auto fields = split(spec, ':');
  if (fields.size() < 3 || fields.size() > 5)
    throw InvalidArgument::make("gemm shape", fmt::format("'{}'", spec), expected);
  GemmShape s;
  s.threads = std::max(1, threads);
  if (fields[0] == "mm") s.op = GemmOp::kMm;
  else if (fields[0] == "addmm") s.op = GemmOp::kAddmm;
  else if (fields[0] == "bmm") s.op = GemmOp::kBmm;
  else throw InvalidArgument::make("gemm shape op", fmt::format("'{}' in '{}'", fields[0], spec), "mm, addmm or bmm");

  const auto dtypes = split(fields[1], '>');
  if (dtypes.size() > 2) throw InvalidArgument::make("gemm shape dtype", fmt::format("'{}'", fields[1]), "<dtype>[><out dtype>]");
  s.in_dtype = parse_dtype(dtypes[0]);
  if (s.in_dtype != DType::kF32 && s.in_dtype != DType::kF64 && s.in_dtype != DType::kBF16 && s.in_dtype != DType::kF16)
    throw InvalidArgument::make("gemm shape dtype", fmt::format("'{}' in '{}'", dtypes[0], spec),
                                "f32, f64, bf16 or f16");
  s.out_dtype = dtypes.size() == 2 ? parse_dtype(dtypes[1]) : s.in_dtype;

  const auto dims = split(fields[2], 'x');
  const size_t want = s.op == GemmOp::kBmm ? 4 : 3;
  if (dims.size() != want && !(s.op == GemmOp::kBmm && dims.size() == 3))
    throw InvalidArgument::make("gemm shape sizes", fmt::format("'{}' in '{}'", fields[2], spec),
                                s.op == GemmOp::kBmm ? "<B>x<M>x<N>x<K>" : "<M>x<N>x<K>");
  size_t d = 0;
  if (dims.size() == 4) s.batch = parse_dim(dims[d++], spec);
  s.m = parse_dim(dims[d++], spec);
  s.n = parse_dim(dims[d++], spec);
  s.k = parse_dim(dims[d++], spec);

  std::vector<Token> tokens;
  for (size_t f = 3; f < fields.size(); ++f) {
    if (is_layout(fields[f])) {
      s.layout = std::string(fields[f]);
      continue;
    }
    tokens = parse_epilogue(fields[f], spec);
  }
  if (s.op == GemmOp::kAddmm && !tokens.empty() && !tokens[0].reduction && tokens[0].kind == EpilogueStep::Kind::kBias) {
    s.addmm_bias = tokens[0].bias;
    tokens.erase(tokens.begin());
  }
  s.epilogue = join_tokens(tokens);
  for (const Token& t : tokens)
    if (!t.reduction && t.kind == EpilogueStep::Kind::kCast) s.out_dtype = t.cast;
  return s;
}

GemmShape GemmShape::of(const GemmProblem& p) {
  GemmShape s;
  s.op = p.op;
  s.in_dtype = p.in_dtype;
  s.out_dtype = p.out_dtype;
  s.batch = p.batch;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.layout = p.layout();
  switch (tune::prior_kind(p)) {
    case tune::PriorKind::kCol: s.addmm_bias = BiasKind::kColumn; break;
    case tune::PriorKind::kMatrix: s.addmm_bias = BiasKind::kMatrix; break;
    default: s.addmm_bias = BiasKind::kRow; break;
  }
  s.accumulate = tune::prior_kind(p) == tune::PriorKind::kOut;
  s.epilogue = p.epilogue ? p.epilogue->key() : "none";
  s.align = tune::operand_alignment(p);
  s.threads = p.threads;
  return s;
}

std::string GemmShape::to_string() const {
  std::string dt = short_dtype(in_dtype);
  const bool cast = epilogue.find("cast_") != std::string::npos;
  if (!cast && out_dtype != in_dtype) dt += fmt::format(">{}", short_dtype(out_dtype));
  std::string dims = op == GemmOp::kBmm ? fmt::format("{}x{}x{}x{}", batch, m, n, k) : fmt::format("{}x{}x{}", m, n, k);
  std::string epi = epilogue;
  if (op == GemmOp::kAddmm)
    epi = epi == "none" ? fmt::format("bias_{}", bias_kind_name(addmm_bias))
                        : fmt::format("bias_{}+{}", bias_kind_name(addmm_bias), epi);
  std::string s = fmt::format("{}:{}:{}", gemm_op_name(op), dt, dims);
  if (epi != "none") s += ":" + epi;
  if (layout != "NN") s += ":" + layout;
  return s;
}

// ---------------------------------------------------------------------------

namespace {

// Owned, 128-byte aligned storage whose views start `offset` bytes in, so
// that the views have exactly the alignment a key asks for.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset) {
    char* p = static_cast<char*>(mem_.get(bytes + offset + 128));
    std::memset(p, 0, mem_.capacity());
    data_ = p + offset;
  }
  char* data() const { return data_; }

 private:
  AlignedBuffer mem_{128};
  char* data_;
};

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Uniform values in [-1, 1) in every element of a view.
void fill(const TensorView& t, uint64_t& seed) {
  if (t.numel() == 0) return;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (float& x : v) x = static_cast<float>(static_cast<int64_t>(next(seed) >> 40) - (int64_t{1} << 23)) / (1 << 23);
  std::vector<char> bytes(v.size() * dtype_size(t.dtype()));
  for (size_t i = 0; i < v.size(); ++i) {
    char* p = bytes.data() + i * dtype_size(t.dtype());
    switch (t.dtype()) {
      case DType::kF32: std::memcpy(p, &v[i], 4); break;
      case DType::kF64: {
        const double d = v[i];
        std::memcpy(p, &d, 8);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kF16: {
        const uint16_t h = f32_to_f16(v[i]);
        std::memcpy(p, &h, 2);
        break;
      }
      default: break;
    }
  }
  t.copy_from_contiguous(bytes.data());
}

}  // namespace

struct GemmWorkload::Impl {
  GemmShape shape;
  std::vector<std::unique_ptr<Buffer>> buffers;
  TensorView a, b, out, bias;
  Epilogue epilogue;
  bool has_epilogue = false;
  GemmProblem problem;

  // A [batch?, rows, cols] view in `layout` ('N', 'T', 'S') with the
  // shape's alignment.
  TensorView matrix(DType dt, int64_t rows, int64_t cols, char layout, bool batched) {
    const int64_t size = static_cast<int64_t>(dtype_size(dt));
    const int64_t pad = std::max<int64_t>(1, shape.align / size);  // leading stride a multiple of this
    auto up = [&](int64_t x) { return (std::max<int64_t>(x, 1) + pad - 1) / pad * pad; };
    int64_t rs = 0, cs = 0, span = 0;
    if (layout == 'T') {
      rs = 1;
      cs = up(rows);
      span = cs * std::max<int64_t>(cols, 1);
    } else if (layout == 'S') {
      cs = 2;
      rs = up(2 * cols + 1);
      span = rs * std::max<int64_t>(rows, 1);
    } else {
      cs = 1;
      rs = up(cols);
      span = rs * std::max<int64_t>(rows, 1);
    }
    const int64_t batch = batched ? shape.batch : 1;
    const int64_t bs = up(span);
    const size_t offset = shape.align < 64 ? static_cast<size_t>(shape.align) : 0;
    buffers.push_back(std::make_unique<Buffer>(static_cast<size_t>(bs * std::max<int64_t>(batch, 1) * size), offset));
    char* p = buffers.back()->data();
    if (batched) return TensorView(p, dt, {batch, rows, cols}, {bs, rs, cs});
    return TensorView(p, dt, {rows, cols}, {rs, cs});
  }

  TensorView vector(DType dt, int64_t n) {
    buffers.push_back(std::make_unique<Buffer>(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dt), 0));
    return TensorView(buffers.back()->data(), dt, {n});
  }
};

GemmWorkload::GemmWorkload(const GemmShape& shape, uint64_t seed) : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  w.shape = shape;
  if (shape.align < 1 || shape.align > 64 || (shape.align & (shape.align - 1)) != 0)
    throw InvalidArgument::make("gemm shape align", std::to_string(shape.align), "a power of two from 1 to 64");
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  const bool batched = shape.op == GemmOp::kBmm;
  const DType operand_dt = shape.in_dtype == DType::kF64 ? DType::kF64
                           : (shape.in_dtype == DType::kBF16 || shape.in_dtype == DType::kF16) ? shape.in_dtype
                                                                                               : DType::kF32;
  w.a = w.matrix(shape.in_dtype, shape.m, shape.k, shape.layout[0], batched);
  w.b = w.matrix(shape.in_dtype, shape.k, shape.n, shape.layout[1], batched);
  w.out = w.matrix(shape.out_dtype, shape.m, shape.n, 'N', batched);
  fill(w.a, s);
  fill(w.b, s);

  for (const Token& t : parse_epilogue(shape.epilogue, shape.epilogue)) {
    w.has_epilogue = true;
    if (t.reduction) {
      if (t.group < 1 || shape.n % t.group != 0)
        throw InvalidArgument::make("gemm shape epilogue", token_name(t),
                                    fmt::format("a group dividing N = {}", shape.n));
      const int64_t g = shape.n / t.group;
      TensorView r = batched ? w.matrix(DType::kF32, shape.m, g, 'N', true) : w.matrix(DType::kF32, shape.m, g, 'N', false);
      w.epilogue.reduce(t.reduce, t.group, r);
      continue;
    }
    switch (t.kind) {
      case EpilogueStep::Kind::kBias: {
        TensorView bias = t.bias == BiasKind::kRow      ? w.vector(operand_dt, shape.n)
                          : t.bias == BiasKind::kColumn ? w.matrix(operand_dt, shape.m, 1, 'N', false)
                                                        : w.matrix(operand_dt, shape.m, shape.n, 'N', false);
        fill(bias, s);
        w.epilogue.bias(bias);
        break;
      }
      case EpilogueStep::Kind::kActivation: w.epilogue.activation(t.activation); break;
      case EpilogueStep::Kind::kResidual: {
        TensorView r = w.matrix(operand_dt, shape.m, shape.n, 'N', batched);
        fill(r, s);
        w.epilogue.residual(r);
        break;
      }
      case EpilogueStep::Kind::kScale: w.epilogue.scale(0.5); break;
      case EpilogueStep::Kind::kClamp: w.epilogue.clamp(-1.0, 1.0); break;
      case EpilogueStep::Kind::kCast: w.epilogue.cast(t.cast, 1.0); break;
    }
  }

  GemmOptions o;
  o.epilogue = w.has_epilogue ? &w.epilogue : nullptr;
  o.threads = std::max(1, shape.threads);
  o.beta = shape.accumulate ? 1.0 : 0.0;
  switch (shape.op) {
    case GemmOp::kMm: w.problem = make_mm_problem(w.a, w.b, w.out, o); break;
    case GemmOp::kBmm: w.problem = make_bmm_problem(w.a, w.b, w.out, o); break;
    case GemmOp::kAddmm:
      o.beta = 1.0;
      w.bias = shape.addmm_bias == BiasKind::kRow      ? w.vector(operand_dt, shape.n)
               : shape.addmm_bias == BiasKind::kColumn ? w.matrix(operand_dt, shape.m, 1, 'N', false)
                                                       : w.matrix(operand_dt, shape.m, shape.n, 'N', false);
      fill(w.bias, s);
      w.problem = make_addmm_problem(w.bias, w.a, w.b, w.out, o);
      break;
  }
}

GemmWorkload::~GemmWorkload() = default;
const GemmShape& GemmWorkload::shape() const { return impl_->shape; }
const GemmProblem& GemmWorkload::problem() const { return impl_->problem; }
const Epilogue* GemmWorkload::epilogue() const { return impl_->has_epilogue ? &impl_->epilogue : nullptr; }
const TensorView& GemmWorkload::a() const { return impl_->a; }
const TensorView& GemmWorkload::b() const { return impl_->b; }
const TensorView& GemmWorkload::out() const { return impl_->out; }
const TensorView& GemmWorkload::bias() const { return impl_->bias; }

}  // namespace sinew::kernels
