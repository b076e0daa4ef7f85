// The candidate registry and the heuristic pick used until a tuned choice
// exists.
#include "sinew/kernels/candidate.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/family_candidates.h"
#include "kernels/tile_candidate.h"
#include "sinew/core/error.h"
#include "sinew/kernels/autotune.h"

namespace sinew::kernels {
namespace {

constexpr std::array<std::string_view, 3> kFamilies{"tile", "blas", "reference"};

struct ListedTile {
  const tile::TileKernel* kernel;
  bool direct;
  char split;
  const Candidate* candidate;
};

struct Registry {
  std::mutex mu;  // guards by_id and owned against find_candidate's additions
  std::vector<std::unique_ptr<Candidate>> owned;
  std::map<std::string, const Candidate*, std::less<>> by_id;
  std::vector<const Candidate*> listed;
  std::vector<ListedTile> tiles;
  const Candidate* blas = nullptr;
  const Candidate* reference = nullptr;
  const Candidate* stream_b = nullptr;  // tile/avx512/f32/stream_b, where AVX-512 runs

  const Candidate* add(std::unique_ptr<Candidate> c) {
    const Candidate* p = c.get();
    by_id.emplace(p->id(), p);
    owned.push_back(std::move(c));
    return p;
  }
};

bool runnable(const tile::TileKernel& k) {
  return isa_available(k.isa) && (k.kind != tile::KernelKind::kBf16Dot || bf16_dot_available());
}

// Built on first use and never destroyed: candidates stay valid for
// callers running during static destruction (e.g. a tuner saving a cache).
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (const tile::TileKernel* k : all_tile_kernels()) {
      if (!runnable(*k)) continue;
      for (char split : {'m', 'n'}) {
        TileConfig c = default_tile_config(k, split);
        const Candidate* p = reg->add(make_tile_candidate(c));
        reg->listed.push_back(p);
        reg->tiles.push_back({k, false, split, p});
      }
      if (k->kind != tile::KernelKind::kBf16Dot) {
        TileConfig c;
        c.kernel = k;
        c.direct = true;
        c.split = 'n';
        const Candidate* p = reg->add(make_tile_candidate(c));
        reg->listed.push_back(p);
        reg->tiles.push_back({k, true, 'n', p});
      }
    }
    if (isa_available(Isa::kAvx512)) {
      reg->stream_b = reg->add(make_stream_b_candidate());
      reg->listed.push_back(reg->stream_b);
    }
    reg->blas = reg->add(make_blas_candidate());
    reg->listed.push_back(reg->blas);
    reg->reference = reg->add(make_reference_candidate());
    reg->listed.push_back(reg->reference);
    return reg;
  }();
  return *r;
}

const Candidate* listed_tile(const tile::TileKernel* k, bool direct, char split) {
  for (const ListedTile& t : registry().tiles)
    if (t.kernel == k && t.direct == direct && (direct || t.split == split)) return t.candidate;
  return nullptr;
}

const tile::TileKernel* kernel_named(Isa isa, std::string_view name) {
  for (const ListedTile& t : registry().tiles)
    if (t.kernel->isa == isa && name == t.kernel->name) return t.kernel;
  return nullptr;
}

// The tile candidate expected to be fastest: the widest ISA; f32 FMAs for
// bf16 unless the CPU's bf16 dot product outruns them (AMD's does; Intel's
// AVX-512 BF16 issues at half the f32 FMA rate). Small M reads A and B in
// place: by dot products when both run along K (B in the nn.Linear layout),
// else with one register tile as tall as M, whose wide rows of B keep the
// prefetchers streaming; packing pays off from about one tile of rows.
const Candidate* pick_tile(const GemmProblem& p) {
  const Isa isa = best_isa();
  const bool f64 = p.in_dtype == DType::kF64;
  const bool in_place = p.in_dtype == DType::kF32 || f64;
  // Few columns and no epilogue: the transposed problem takes the dot path.
  const bool few_columns = in_place && p.a.cs == 1 && p.n <= 16 && p.n < p.m && !p.epilogue;
  const bool dot = in_place && ((p.b.rs == 1 && p.a.cs == 1 && p.m <= 16) || few_columns);
  const tile::TileKernel* k = nullptr;
  bool direct = false;
  if (isa == Isa::kAvx512) {
    // One row, or B past the L2: streaming B row by row beat the one-tile
    // direct kernel at 1 x 256 x 256 and at every shape with B of 9 MB and
    // more (1.5-2x with M = 1, 1.1x with M = 8, B in L3; 2x from memory);
    // with M = 8 and B in L2 the direct 8x48 tile was faster.
    const double b_bytes = static_cast<double>(p.k) * static_cast<double>(p.n) * 4.0;
    if (registry().stream_b && !dot && (p.m == 1 || b_bytes >= (8 << 20)) && registry().stream_b->supports(p))
      return registry().stream_b;
    if (p.in_dtype == DType::kBF16 && bf16_dot_available() && cpu_features().vendor == "AuthenticAMD") {
      k = kernel_named(isa, "bf16dot/12x32");
    } else if (!f64 && !dot && in_place && p.m <= 6) {
      k = kernel_named(isa, "f32/6x64");
      direct = true;
    } else {
      k = kernel_named(isa, f64 ? "f64/12x16" : (dot ? "f32/12x32" : "f32/8x48"));
      direct = dot;
    }
  } else if (isa == Isa::kAvx2) {
    k = kernel_named(isa, f64 ? "f64/6x8" : "f32/6x16");
    direct = dot || (in_place && p.m <= 6);
  } else {
    k = kernel_named(isa, f64 ? "f64/4x8" : "f32/4x16");
    direct = dot || (in_place && p.m <= 4);
  }
  if (!k) return nullptr;
  // Split the longer side so that each thread keeps whole panels of the other.
  return listed_tile(k, direct, p.m >= p.n ? 'm' : 'n');
}

}  // namespace

std::span<const std::string_view> candidate_families() { return kFamilies; }

std::vector<const Candidate*> all_candidates() { return registry().listed; }

std::vector<const Candidate*> candidates_for(const GemmProblem& problem, std::string_view family) {
  std::vector<const Candidate*> out;
  for (const Candidate* c : registry().listed)
    if ((family.empty() || c->family() == family) && c->supports(problem)) out.push_back(c);
  return out;
}

const Candidate* find_candidate(std::string_view id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto it = r.by_id.find(id); it != r.by_id.end()) return it->second;
  TileConfig c;
  if (!parse_tile_id(id, &c) || !runnable(*c.kernel)) return nullptr;
  return r.add(make_tile_candidate(c));
}

const Candidate& default_candidate(const GemmProblem& problem, std::string_view family) {
  Registry& r = registry();
  if (family == "reference") return *r.reference;
  if (family == "blas") return *r.blas;
  if (!family.empty() && family != "tile")
    throw InvalidArgument::make(fmt::format("{}: options.family", gemm_op_name(problem.op)),
                                fmt::format("'{}'", family), "'' (automatic), 'tile', 'blas' or 'reference'");
  if (const Candidate* c = pick_tile(problem); c && c->supports(problem)) return *c;
  for (const Candidate* c : r.listed)
    if (c->family() == "tile" && c->supports(problem)) return *c;
  if (family == "tile")
    throw InvalidArgument::make(fmt::format("{}: options.family", gemm_op_name(problem.op)), "'tile'",
                                fmt::format("a family with a kernel for {}", problem.to_string()));
  return *r.blas;
}

void run_gemm(const GemmProblem& problem, const GemmOptions& options) {
  const Candidate* c = nullptr;
  if (!options.candidate.empty()) {
    c = find_candidate(options.candidate);
    if (!c)
      throw InvalidArgument::make(fmt::format("{}: options.candidate", gemm_op_name(problem.op)),
                                  fmt::format("'{}'", options.candidate),
                                  "the id of a candidate this CPU can run (see candidates_for())");
    if (!c->supports(problem))
      throw InvalidArgument::make(fmt::format("{}: options.candidate", gemm_op_name(problem.op)),
                                  fmt::format("'{}'", options.candidate),
                                  fmt::format("a candidate that supports {}", problem.to_string()));
  } else if (const GemmTuner::Pick t = options.family.empty() ? tuned_pick(problem) : GemmTuner::Pick{}; t.candidate) {
    return t.candidate->run(problem, options.epilogue_mode == EpilogueMode::kAuto ? t.mode : options.epilogue_mode);
  } else {
    c = &default_candidate(problem, options.family);
  }
  c->run(problem, options.epilogue_mode);
}

}  // namespace sinew::kernels
