#include "kernels/autotune/key.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "sinew/kernels/autotune.h"
#include "sinew/kernels/candidate.h"
#include "sinew/kernels/epilogue.h"

#ifndef SINEW_VERSION
#error "SINEW_VERSION (the project version) must be defined for the kernels layer"
#endif

namespace sinew::kernels {
namespace tune {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void fnv(uint64_t& h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
}

int64_t pow2_alignment(uint64_t v) { return v == 0 ? 64 : std::min<int64_t>(64, int64_t{1} << std::countr_zero(v)); }

int64_t matrix_alignment(const MatrixRef& r, int64_t rows, int64_t cols) {
  const auto size = static_cast<int64_t>(dtype_size(r.dtype));
  const int64_t addr = pow2_alignment(reinterpret_cast<uintptr_t>(r.data));
  // The leading stride: the one that is not 1 (the larger for strided views).
  int64_t lead = r.cs == 1 || cols <= 1 ? r.rs : (r.rs == 1 || rows <= 1 ? r.cs : std::max(r.rs, r.cs));
  if (rows <= 1 && cols <= 1) lead = 0;
  return std::min(addr, pow2_alignment(static_cast<uint64_t>(std::abs(lead * size))));
}

}  // namespace

const char* prior_kind_name(PriorKind k) {
  switch (k) {
    case PriorKind::kNone: return "none";
    case PriorKind::kOut: return "out";
    case PriorKind::kRow: return "row";
    case PriorKind::kCol: return "col";
    case PriorKind::kMatrix: return "matrix";
  }
  return "?";
}

size_t PackedKeyHash::operator()(const PackedKey& k) const {
  uint64_t h = kFnvOffset;
  fnv(h, uint64_t{k.op} | uint64_t{k.in} << 8 | uint64_t{k.out} << 16 | uint64_t{k.layout_a} << 24 |
             uint64_t{k.layout_b} << 32 | uint64_t{k.align} << 40 | uint64_t{k.prior} << 48);
  fnv(h, static_cast<uint64_t>(k.threads));
  fnv(h, static_cast<uint64_t>(k.batch));
  fnv(h, static_cast<uint64_t>(k.m));
  fnv(h, static_cast<uint64_t>(k.n));
  fnv(h, static_cast<uint64_t>(k.k));
  fnv(h, k.epilogue);
  return static_cast<size_t>(h);
}

uint64_t epilogue_signature(const Epilogue* e) {
  if (!e || e->empty()) return 0;
  uint64_t h = kFnvOffset;
  for (const EpilogueStep& s : e->steps()) {
    uint64_t v = 1 + static_cast<uint64_t>(s.kind);
    if (s.kind == EpilogueStep::Kind::kBias) v |= uint64_t{1 + static_cast<unsigned>(s.bias)} << 8;
    if (s.kind == EpilogueStep::Kind::kActivation) v |= uint64_t{1 + static_cast<unsigned>(s.activation)} << 16;
    if (s.kind == EpilogueStep::Kind::kCast) v |= uint64_t{1 + static_cast<unsigned>(s.dtype)} << 24;
    fnv(h, v);
  }
  for (const GroupReduction& r : e->reductions()) {
    fnv(h, 0x100 + static_cast<uint64_t>(r.op));
    fnv(h, static_cast<uint64_t>(r.group));
  }
  return h == 0 ? 1 : h;
}

int operand_alignment(const GemmProblem& p) {
  int64_t a = std::min({matrix_alignment(p.a, p.m, p.k), matrix_alignment(p.b, p.k, p.n),
                        matrix_alignment(p.out, p.m, p.n)});
  return static_cast<int>(a);
}

PriorKind prior_kind(const GemmProblem& p) {
  if (!p.reads_prior()) return PriorKind::kNone;
  if (p.op != GemmOp::kAddmm) return PriorKind::kOut;
  if (p.prior.rs == 0 && p.m > 1) return PriorKind::kRow;
  if (p.prior.cs == 0 && p.n > 1) return PriorKind::kCol;
  return PriorKind::kMatrix;
}

PackedKey pack_key(const GemmProblem& p) {
  PackedKey k;
  k.op = static_cast<uint8_t>(p.op);
  k.in = static_cast<uint8_t>(p.in_dtype);
  k.out = static_cast<uint8_t>(p.out_dtype);
  const std::string layout = p.layout();
  k.layout_a = static_cast<uint8_t>(layout[0]);
  k.layout_b = static_cast<uint8_t>(layout[1]);
  k.align = static_cast<uint8_t>(operand_alignment(p));
  k.prior = static_cast<uint8_t>(prior_kind(p));
  k.threads = static_cast<uint16_t>(std::clamp(p.threads, 1, 65535));
  k.batch = tune_bucket(p.batch);
  k.m = tune_bucket(p.m);
  k.n = p.n;
  k.k = p.reads_ab() ? p.k : 0;
  k.epilogue = epilogue_signature(p.epilogue);
  return k;
}

std::string key_string(const PackedKey& k, const std::string& epilogue_key) {
  return fmt::format("{}|{}>{}|b{}|m{}|n{}|k{}|{}{}|a{}|prior={}|e={}|{}|t{}|v{}|c{}",
                     gemm_op_name(static_cast<GemmOp>(k.op)), dtype_name(static_cast<DType>(k.in)),
                     dtype_name(static_cast<DType>(k.out)), k.batch, k.m, k.n, k.k, static_cast<char>(k.layout_a),
                     static_cast<char>(k.layout_b), k.align, prior_kind_name(static_cast<PriorKind>(k.prior)),
                     epilogue_key, tune_isa_tag(), k.threads, library_version(), candidate_fingerprint());
}

const std::string& library_version() {
  static const std::string v = SINEW_VERSION;
  return v;
}

const std::string& candidate_fingerprint() {
  static const std::string fp = [] {
    uint64_t h = kFnvOffset;
    fnv(h, kTuneCacheVersion);
    for (const Candidate* c : all_candidates())
      for (char ch : c->id()) fnv(h, static_cast<unsigned char>(ch));
    return fmt::format("{:012x}", h & 0xffffffffffffull);
  }();
  return fp;
}

}  // namespace tune

int64_t tune_bucket(int64_t extent) {
  return extent <= 1 ? std::max<int64_t>(extent, 0) : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(extent)));
}

std::string tune_isa_tag() {
  const Isa isa = best_isa();
  return isa == Isa::kAvx512 && bf16_dot_available() ? "avx512+bf16" : isa_name(isa);
}

std::string tune_key(const GemmProblem& problem) {
  return tune::key_string(tune::pack_key(problem), problem.epilogue ? problem.epilogue->key() : "none");
}

}  // namespace sinew::kernels
