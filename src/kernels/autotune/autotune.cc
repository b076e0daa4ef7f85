// The autotuner's search (enumerate, prescreen, time, confirm, pick, agree
// across ranks) and its in-memory cache in front of the file (autotune/cache.cc).
#include "sinew/kernels/autotune.h"

#include <fmt/format.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "kernels/autotune/cache.h"
#include "kernels/autotune/confirm.h"
#include "kernels/autotune/key.h"
#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "sinew/core/log.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/cost_model.h"
#include "sinew/kernels/cpu_features.h"

namespace sinew::kernels {
namespace {

// Only for the default cache path (XDG-style, under ~/.cache).
inline const EnvParam<std::string> kHome{"HOME", "", "the default tuning cache is $HOME/.cache/sinew/gemm_tune.json",
                                         EnvSource::kLauncher};
inline const EnvParam<std::string> kTuneCache{"SINEW_TUNE_CACHE", "",
                                              "GEMM tuning cache file (default ~/.cache/sinew/gemm_tune.json)"};
inline const EnvParam<bool> kAutotune{"SINEW_AUTOTUNE", false,
                                      "tune each new GEMM problem class on first use and save the pick"};

using Clock = std::chrono::steady_clock;
using tune::CachedPick;
using tune::PackedKey;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

#if defined(__x86_64__)
// clflush orders itself against every other flush: 180 MB took 360 ms here,
// clflushopt 7 ms.
__attribute__((target("clflushopt"))) void flush_lines_opt(uintptr_t lo, uintptr_t hi) {
  for (auto line = lo; line < hi; line += 64) _mm_clflushopt(reinterpret_cast<void*>(line));
}
void flush_lines(uintptr_t lo, uintptr_t hi) {
  if (cpu_features().clflushopt) return flush_lines_opt(lo, hi);
  for (auto line = lo; line < hi; line += 64) _mm_clflush(reinterpret_cast<const void*>(line));
}
#endif

// Writes every line of a matrix back and out of every cache (the flush
// reaches all cores' caches): for each row, or each column where that
// stride is the smaller, the byte span from its first to its last element
// (gaps of a strided view included).
void evict(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols) {
#if defined(__x86_64__)
  if (!m.data || batch <= 0 || rows <= 0 || cols <= 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(m.dtype));
  const bool by_rows = std::abs(m.cs) <= std::abs(m.rs);
  const int64_t outer = by_rows ? (m.rs == 0 ? 1 : rows) : (m.cs == 0 ? 1 : cols);
  const int64_t inner = by_rows ? cols : rows;
  for (int64_t b = 0; b < (m.bs == 0 ? 1 : batch); ++b)
    for (int64_t o = 0; o < outer; ++o) {
      const char* first = by_rows ? m.byte_ptr(b, o, 0) : m.byte_ptr(b, 0, o);
      const char* last = by_rows ? m.byte_ptr(b, o, inner - 1) : m.byte_ptr(b, inner - 1, o);
      flush_lines(reinterpret_cast<uintptr_t>(std::min(first, last)) & ~uintptr_t{63},
                  reinterpret_cast<uintptr_t>(std::max(first, last)) + static_cast<uintptr_t>(es));
    }
  _mm_mfence();
#else
  (void)m, (void)batch, (void)rows, (void)cols;
#endif
}

// Seconds of the first variant before timing with several threads (search).
constexpr double kWarmupSeconds = 0.2;

// Evicts the operands from every thread's caches: each worker rewrites its
// own buffer, larger than a core's L2 and a slice of L3, and the problem's
// operands are flushed out of every cache level. The sweep alone left them
// in a large L3: a 180 MB weight stayed in the 300 MB L3 of the machine
// here, where the direct tile kernel, which reads B in 64-column panels
// down its rows, timed as fast as the blocked one at M = 1, and from memory
// (as in decode) took twice as long.
class CacheFlusher {
 public:
  void flush(const GemmProblem& p, int threads) {
    if (p.reads_ab()) {
      evict(p.a, p.batch, p.m, p.k);
      evict(p.b, p.batch, p.k, p.n);
    }
    if (p.reads_prior()) evict(p.prior, p.batch, p.m, p.n);
    evict(p.out, p.batch, p.m, p.n);
    const size_t bytes = flush_bytes();
    std::lock_guard<std::mutex> lock(mu_);  // tuners in several threads share the buffers
    if (buffers_.size() < static_cast<size_t>(threads)) buffers_.resize(static_cast<size_t>(threads));
    for (auto& b : buffers_)
      if (b.size() < bytes) b.assign(bytes, 1);
    ThreadPool::global().parallel_for(threads, threads, [&](int64_t task, int) {
      std::vector<char>& b = buffers_[static_cast<size_t>(task)];
      for (size_t i = 0; i < b.size(); i += 64) b[i] = static_cast<char>(b[i] + 1);
    });
  }

 private:
  static size_t flush_bytes() {
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::max<size_t>(size_t{8} << 20, l2 > 0 ? 4 * static_cast<size_t>(l2) : 0);
  }
  std::mutex mu_;
  std::vector<std::vector<char>> buffers_;
};

CacheFlusher& flusher() {
  static CacheFlusher f;
  return f;
}

// Seconds per call in one sample: `reps` calls from flushed caches.
double time_sample(const Candidate& c, EpilogueMode mode, const GemmProblem& p, const TuneOptions& o, int reps) {
  if (o.flush_caches) flusher().flush(p, std::max(1, p.threads));
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) c.run(p, mode);
  return seconds_since(t0) / reps;
}

// Microseconds per call of `c` on `p` in `mode`: the fastest sample, as
// other work on the machine only ever adds time.
double time_variant(const Candidate& c, EpilogueMode mode, const GemmProblem& p, const TuneOptions& o) {
  auto t0 = Clock::now();
  c.run(p, mode);
  double once = seconds_since(t0);
  for (int i = 1; i < o.warmup; ++i) {
    t0 = Clock::now();
    c.run(p, mode);
    once = std::min(once, seconds_since(t0));
  }
  const int reps = tune::sample_reps(once, o);
  const int samples = static_cast<int>(
      std::clamp(std::floor(o.max_variant_seconds / std::max(once * reps, 1e-9)), 2.0, std::max(2.0, 1.0 * o.samples)));
  double best = INFINITY;
  for (int s = 0; s < samples; ++s) best = std::min(best, time_sample(c, mode, p, o, reps));
  return best * 1e6;
}

// Microseconds per call of each listed variant: the fastest of `rounds`
// samples, one of each per round, so that a burst of load hits them alike.
// Every other round runs the list backwards, so that no variant always
// follows the same one (OpenBLAS's workers spin for a while after a call,
// sharing the cores with whatever runs next).
std::vector<double> time_interleaved(const std::vector<TuneVariant>& vs, const std::vector<size_t>& list, int rounds,
                                     const GemmProblem& p, const TuneOptions& o) {
  std::vector<double> best(list.size(), INFINITY);
  std::vector<int> reps(list.size());
  for (size_t j = 0; j < list.size(); ++j) reps[j] = tune::sample_reps(vs[list[j]].measured_us * 1e-6, o);
  for (int round = 0; round < rounds; ++round)
    for (size_t n = 0; n < list.size(); ++n) {
      const size_t j = round % 2 == 0 ? n : list.size() - 1 - n;
      const TuneVariant& v = vs[list[j]];
      best[j] = std::min(best[j], time_sample(*find_candidate(v.candidate), v.mode, p, o, reps[j]) * 1e6);
    }
  return best;
}

// The blocking of a packed tile id changed to kc, nc refitted to a 1 MiB
// packed B block (half the 2 MiB L2 of the AVX-512 machines here; against
// 768 KiB, f32 6x64 at 2048^3 gained 1-2% at every kc, measured), e.g. for
// exploring around the listed configurations.
std::string with_kc(const std::string& id, int64_t kc, const std::vector<std::pair<std::string, int64_t>>& params) {
  int64_t nr = 0, mc = 0;
  for (const auto& [n, v] : params) {
    if (n == "nr") nr = v;
    if (n == "mc") mc = v;
  }
  const bool bf16 = id.find("/bf16dot/") != std::string::npos, f64 = id.find("/f64/") != std::string::npos;
  const int64_t bytes = bf16 ? 2 : (f64 ? 8 : 4);
  const int64_t nc = std::max<int64_t>(nr, (1 << 20) / (kc * bytes) / std::max<int64_t>(nr, 1) * nr);
  const size_t blk = id.find("/kc");
  const size_t end = id.find('/', blk + 1);
  return fmt::format("{}/kc{}_mc{}_nc{}{}", id.substr(0, blk), kc, mc, nc, id.substr(end));
}

// The variants the tuner considers for `p`, with the model's estimates,
// sorted by estimate (then id) so that every rank lists them alike.
std::vector<TuneVariant> enumerate(const GemmProblem& p, const TuneOptions& o) {
  // Tile kernels of the widest ISA only: a narrower one runs the same
  // microkernel design on half the vector width.
  std::vector<const Candidate*> cands;
  for (const Candidate* c : candidates_for(p, o.family))
    if ((c->family() != "reference" || o.family == "reference") && (c->family() != "tile" || c->isa() == best_isa()))
      cands.push_back(c);
  if (cands.empty()) cands = candidates_for(p, o.family);

  // Other cache blockings around the two best-modelled packed tile kernels.
  std::vector<std::pair<double, const Candidate*>> packed;
  for (const Candidate* c : cands)
    if (c->family() == "tile" && c->id().find("/kc") != std::string::npos)
      packed.emplace_back(tune::estimate_us(*c, EpilogueMode::kFused, p), c);
  std::sort(packed.begin(), packed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::unordered_set<std::string> ids;
  for (const Candidate* c : cands) ids.insert(c->id());
  for (size_t i = 0; i < std::min<size_t>(2, packed.size()); ++i) {
    const Candidate* c = packed[i].second;
    const bool bf16 = c->id().find("/bf16dot/") != std::string::npos, f64 = c->id().find("/f64/") != std::string::npos;
    // f32 up to kc 2048: one K block writes C once, with no partial sums
    // to re-read (2048^3: kc2048_nc128 234 GFLOP/s on one thread, 467 on
    // two, against 227 and 458 for kc512_nc384).
    const std::vector<int64_t> kcs = bf16  ? std::vector<int64_t>{512, 1024}
                                     : f64 ? std::vector<int64_t>{128, 256}
                                           : std::vector<int64_t>{256, 512, 1024, 2048};
    // A kc past the first that holds all of K runs the same single K block
    // with a narrower nc (fitted to kc, not K): only less of L2 used. At
    // 1024^3 on two threads kc2048_nc128 (kc 1024 in effect) timed within
    // noise of kc1024_nc256 while tuning and was picked in two of five full
    // runs, then read 88-89% of the FMA peak against 92-93%: twice the
    // column blocks, each re-reading A from L3 beside the other thread.
    for (size_t i = 0; i < kcs.size() && (i == 0 || kcs[i - 1] < p.k); ++i) {
      const int64_t kc = kcs[i];
      const std::string id = with_kc(c->id(), kc, c->params());
      if (ids.count(id)) continue;
      if (const Candidate* v = find_candidate(id); v && v->supports(p)) {
        cands.push_back(v);
        ids.insert(id);
      }
    }
  }

  // One thread runs one region: the split is moot, keep one of each pair.
  std::unordered_set<std::string> seen;
  const bool single_region = p.threads <= 1;
  std::vector<TuneVariant> out;
  const bool has_epilogue = p.epilogue != nullptr;
  for (const Candidate* c : cands) {
    if (single_region && c->family() == "tile") {
      const size_t split = c->id().rfind("/split_");
      if (!seen.insert(c->id().substr(0, split)).second) continue;
    }
    std::vector<EpilogueMode> modes{EpilogueMode::kAuto};
    if (has_epilogue && c->can_fuse(p)) modes = {EpilogueMode::kFused, EpilogueMode::kUnfused};
    for (EpilogueMode m : modes) {
      TuneVariant v;
      v.candidate = c->id();
      v.family = c->family();
      v.mode = m;
      v.model_us = tune::estimate_us(*c, m, p);
      out.push_back(std::move(v));
    }
  }
  std::sort(out.begin(), out.end(), [](const TuneVariant& x, const TuneVariant& y) {
    return x.model_us != y.model_us ? x.model_us < y.model_us
                                    : std::tie(x.candidate, x.mode) < std::tie(y.candidate, y.mode);
  });
  return out;
}

// The prescreen: the best `max_timed` by the model, and any the model
// cannot tell from the last of those (within 0.5%: e.g. blockings that
// differ only in a kc beyond K, which the model does not see), plus each
// family's best-modelled variant and the heuristic default pick (so that a
// poor estimate can never make tuning worse than not tuning).
void prescreen(std::vector<TuneVariant>& vs, const GemmProblem& p, const TuneOptions& o) {
  std::unordered_set<std::string> families;
  const Candidate& fallback = default_candidate(p, o.family);
  bool fallback_in = false;
  const size_t top = std::min(vs.size(), static_cast<size_t>(std::max(1, o.max_timed)));
  const double cutoff = vs.empty() ? 0.0 : vs[top - 1].model_us * 1.005;
  for (size_t i = 0; i < vs.size(); ++i) {
    TuneVariant& v = vs[i];
    bool keep = i < top || v.model_us <= cutoff;
    keep |= families.insert(v.family).second;
    if (v.candidate == fallback.id() && !fallback_in) {
      keep = true;
      fallback_in = true;
    }
    v.survivor = keep;
  }
  // The best fusable survivor is timed in both modes, so that fusing is
  // decided by measurement.
  for (const TuneVariant& v : vs) {
    if (!v.survivor || v.mode == EpilogueMode::kAuto) continue;
    for (TuneVariant& w : vs)
      if (w.candidate == v.candidate) w.survivor = true;
    break;
  }
}

uint64_t list_hash(const std::vector<TuneVariant>& vs, const std::vector<size_t>& which) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i : which) {
    for (char c : vs[i].candidate) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(vs[i].mode)) * 1099511628211ull;
  }
  return h & ((uint64_t{1} << 52) - 1);  // exact in a double
}

// A tuning group's ranks pooling what each timed.
struct GroupExchange {
  const TuneOptions& o;
  int world;
  const std::string& key;

  // Every rank's `mine` (the hash of what it timed, then its times),
  // rank-major; a rank that listed other variants is refused, not mixed in.
  std::vector<double> gather(const std::vector<double>& mine) const {
    if (world == 1) return mine;
    std::vector<double> all = o.group.allgather(mine);
    if (all.size() != mine.size() * static_cast<size_t>(world))
      throw InternalError(fmt::format("GEMM tuning: the allgather returned {} values, expected {} ranks x {}",
                                      all.size(), world, mine.size()));
    for (int q = 0; q < world; ++q)
      if (all[q * mine.size()] != mine[0])
        throw InvalidArgument::make(
            "GEMM tuning group", fmt::format("rank {} listed other candidates than rank {} for {}", q, o.group.rank,
                                             key),
            "every rank running the same build on the same kind of CPU");
    return all;
  }
};

// With several threads, 0.2 s of the first variant before any timing:
// here the second vCPU, after idling, ran the first 0.1-0.2 s or more of
// work at about half speed, so the first variant timed at 1024^3 on two
// threads read 9.5 ms per call against 4.6-4.8 in every later sample and
// was left out of the confirmation (after 50 ms of warm-up: 5.0 ms, after
// 0.2 s 4.8-5.3, so the first variant is also timed again at the end of
// the pass).
void warm_up(const TuneVariant& v, const GemmProblem& p) {
  try {
    const Candidate& c = *find_candidate(v.candidate);
    const auto w0 = Clock::now();
    do c.run(p, v.mode);
    while (seconds_since(w0) < kWarmupSeconds);
  } catch (const std::exception&) {
    // It is left untimed by the first pass all the same.
  }
}

// The first pass: ranks take turns down the list of variants to time.
// Sets measured_us and timed_by of the variants it timed and returns them.
std::vector<size_t> first_pass(std::vector<TuneVariant>& vs, const GemmProblem& p, const TuneOptions& o,
                               const GroupExchange& group) {
  std::vector<size_t> timed;
  for (size_t i = 0; i < vs.size(); ++i)
    if (o.exhaustive || vs[i].survivor) timed.push_back(i);
  if (p.threads > 1 && !timed.empty()) warm_up(vs[timed[0]], p);
  std::vector<double> mine(timed.size() + 1, std::nan(""));
  mine[0] = static_cast<double>(list_hash(vs, timed));
  // A variant that throws is left untimed (NaN: never picked) rather than
  // thrown out of here: with a process group, a rank that left early would
  // leave the others waiting in the allgather below.
  for (size_t i = 0; i < timed.size(); ++i)
    if (static_cast<int>(i % group.world) == o.group.rank) {
      const TuneVariant& v = vs[timed[i]];
      try {
        mine[i + 1] = time_variant(*find_candidate(v.candidate), v.mode, p, o);
      } catch (const std::exception& e) {
        SINEW_WARN(kKernels, "GEMM tuning: {} ({}) failed on {} and is not considered: {}", v.candidate,
                   epilogue_mode_name(v.mode), group.key, e.what());
      }
    }
  // The first variant again, now that the others have run: whatever the
  // warm-up left over fell on its samples alone.
  if (p.threads > 1 && timed.size() > 1 && o.group.rank == 0 && std::isfinite(mine[1])) {
    const TuneVariant& v = vs[timed[0]];
    mine[1] = std::min(mine[1], time_variant(*find_candidate(v.candidate), v.mode, p, o));
  }
  const std::vector<double> all = group.gather(mine);
  for (size_t i = 0; i < timed.size(); ++i) {
    const size_t owner = i % group.world;
    TuneVariant& v = vs[timed[i]];
    v.measured_us = all[owner * mine.size() + 1 + i];
    v.timed_by = static_cast<int>(owner);
  }
  return timed;
}

// The confirmation round. Its list follows from the allgathered times,
// so it is the same on every rank; every rank times all of it (not a
// share) because interleaving is the point: contenders split across ranks
// would again be timed at different moments. Each variant keeps the
// fastest sample of any rank, which all ranks compute alike. With
// several ranks the allgather runs even for an empty list, so that ranks
// whose options differ are refused rather than left waiting.
// The gathered vector has a slot per first-pass variant, a size every
// rank agreed on in the first pass: ranks whose options list other
// contenders are refused by the hash, not by a collective of mismatched
// sizes. Sets confirmed_us of the listed variants.
void confirmation_round(std::vector<TuneVariant>& vs, const std::vector<size_t>& timed, const GemmProblem& p,
                        const TuneOptions& o, const GroupExchange& group, Clock::time_point t0) {
  const std::vector<size_t> list = tune::confirmation_list(vs, o);
  if (list.empty() && group.world == 1) return;
  std::vector<double> confirm(timed.size() + 1, std::nan(""));
  confirm[0] = static_cast<double>(list_hash(vs, list));
  std::vector<size_t> at(list.size());  // list[j]'s slot
  for (size_t j = 0; j < list.size(); ++j)
    at[j] = 1 + static_cast<size_t>(std::find(timed.begin(), timed.end(), list[j]) - timed.begin());
  if (!list.empty()) {
    const int rounds = tune::confirmation_rounds(vs, list, o, seconds_since(t0));
    try {
      const std::vector<double> us = time_interleaved(vs, list, rounds, p, o);
      for (size_t j = 0; j < list.size(); ++j) confirm[at[j]] = us[j];
    } catch (const std::exception& e) {  // the first pass's times stand
      SINEW_WARN(kKernels, "GEMM tuning: the confirmation round on {} failed: {}", group.key, e.what());
    }
  }
  const std::vector<double> every = group.gather(confirm);
  for (size_t j = 0; j < list.size(); ++j) {
    double us = INFINITY;
    for (int q = 0; q < group.world; ++q) us = std::fmin(us, every[q * confirm.size() + at[j]]);
    vs[list[j]].confirmed_us = std::isfinite(us) ? us : std::nan("");
  }
}

}  // namespace

const char* epilogue_mode_name(EpilogueMode mode) {
  switch (mode) {
    case EpilogueMode::kAuto: return "auto";
    case EpilogueMode::kFused: return "fused";
    case EpilogueMode::kUnfused: return "unfused";
  }
  return "?";
}

std::string default_tune_cache_path() {
  if (const std::string& p = kTuneCache.get(); !p.empty()) return p;
  const auto home = kHome.read();
  return home ? *home + "/.cache/sinew/gemm_tune.json" : std::string();
}

struct GemmTuner::Impl {
  std::string path;
  mutable std::shared_mutex mu;  // picks, recorded
  std::unordered_map<PackedKey, CachedPick, tune::PackedKeyHash> picks;
  std::atomic<size_t> count{0};  // picks.size(), read without the lock
  nlohmann::json recorded = nlohmann::json::object();  // what this tuner timed, for save()
  bool file_bad = false;         // warned about; the next save replaces the file
  mutable std::atomic<uint64_t> hits{0}, misses{0};
  std::mutex tuning;  // one search at a time: they would time each other

  void load() {
    std::unique_lock lock(mu);
    picks.clear();
    count = 0;
    file_bad = false;
    if (path.empty()) return;
    tune::FileContents f = tune::read_cache_file(path);
    if (f.bad) {
      file_bad = true;
      SINEW_WARN(kKernels, "GEMM tuning cache {} is {}; ignoring it (it is rebuilt on the next save)", path, f.problem);
      return;
    }
    int malformed = f.malformed;
    for (auto it = f.entries.begin(); it != f.entries.end(); ++it) {
      bool bad = false;
      if (auto e = tune::usable_entry(it.key(), it.value(), &bad)) picks[e->first] = e->second;
      malformed += bad ? 1 : 0;
    }
    if (malformed > 0)
      SINEW_WARN(kKernels, "GEMM tuning cache {}: ignored {} malformed entr{} (rewritten on the next save)", path,
                 malformed, malformed == 1 ? "y" : "ies");
    count = picks.size();
  }

  void record(const PackedKey& k, const std::string& epilogue_key, const CachedPick& pick) {
    std::unique_lock lock(mu);
    picks[k] = pick;
    count = picks.size();
    recorded[tune::key_string(k, epilogue_key)] = tune::make_entry(k, epilogue_key, pick);
  }

  std::optional<CachedPick> find(const PackedKey& k) const {
    std::shared_lock lock(mu);
    auto it = picks.find(k);
    if (it == picks.end()) return std::nullopt;
    return it->second;
  }

  // The recorded pick for p, unless o asks to retune.
  std::optional<TuneResult> cached(const GemmProblem& p, const PackedKey& key, const std::string& epilogue_key,
                                   const TuneOptions& o) {
    if (o.retune) return std::nullopt;
    const auto e = find(key);
    if (!e || !e->candidate->supports(p)) return std::nullopt;
    hits.fetch_add(1, std::memory_order_relaxed);
    return TuneResult{tune::key_string(key, epilogue_key), e->candidate->id(), e->mode, e->us, true, {}, 0};
  }

  TuneResult search(const GemmProblem& p, const PackedKey& key, const std::string& epilogue_key, const TuneOptions& o);
};

GemmTuner& GemmTuner::global() {
  static GemmTuner* t = new GemmTuner(default_tune_cache_path());  // never destroyed: used until exit
  return *t;
}

GemmTuner::GemmTuner(std::string cache_path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(cache_path);
  impl_->load();
}

GemmTuner::~GemmTuner() = default;

const std::string& GemmTuner::cache_path() const { return impl_->path; }

GemmTuner::Pick GemmTuner::lookup(const GemmProblem& p) const {
  if (impl_->count.load(std::memory_order_acquire) == 0) {
    impl_->misses.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  const PackedKey k = tune::pack_key(p);
  const auto e = impl_->find(k);
  if (!e || !e->candidate->supports(p)) {
    impl_->misses.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  impl_->hits.fetch_add(1, std::memory_order_relaxed);
  return {e->candidate, e->mode};
}

TuneResult GemmTuner::tune(const GemmProblem& p, const TuneOptions& o) {
  const PackedKey key = tune::pack_key(p);
  const std::string epi = p.epilogue ? p.epilogue->key() : "none";
  if (auto hit = impl_->cached(p, key, epi, o)) return *hit;
  // Time on operands of the same shape, never the caller's.
  const GemmWorkload w(GemmShape::of(p));
  return impl_->search(w.problem(), key, epi, o);
}

TuneResult GemmTuner::tune(const GemmShape& shape, const TuneOptions& o) {
  const GemmWorkload w(shape);
  const GemmProblem& p = w.problem();
  const PackedKey key = tune::pack_key(p);
  const std::string epi = p.epilogue ? p.epilogue->key() : "none";
  if (auto hit = impl_->cached(p, key, epi, o)) return *hit;
  return impl_->search(p, key, epi, o);
}

TuneResult GemmTuner::Impl::search(const GemmProblem& p, const PackedKey& key, const std::string& epilogue_key,
                                   const TuneOptions& o) {
  const int world = std::max(1, o.group.world);
  if (world > 1 && !o.group.allgather)
    throw InvalidArgument::make("TuneOptions.group.allgather", "empty", "a callback when group.world > 1");
  if (o.group.rank < 0 || o.group.rank >= world)
    throw InvalidArgument::make("TuneOptions.group.rank", std::to_string(o.group.rank),
                                fmt::format("a rank in [0, {})", world));
  std::lock_guard<std::mutex> serial(tuning);
  const auto t0 = Clock::now();
  TuneResult r;
  r.key = tune::key_string(key, epilogue_key);
  r.variants = enumerate(p, o);
  if (r.variants.empty())
    throw InvalidArgument::make("tune: family", fmt::format("'{}'", o.family),
                                fmt::format("a family with a candidate for {}", p.to_string()));
  prescreen(r.variants, p, o);

  const GroupExchange group{o, world, r.key};
  const std::vector<size_t> timed = first_pass(r.variants, p, o, group);
  confirmation_round(r.variants, timed, p, o, group, t0);

  const size_t best_index = tune::pick_fastest(r.variants);
  if (best_index == r.variants.size()) throw InternalError(fmt::format("GEMM tuning timed nothing for {}", r.key));
  const TuneVariant& best = r.variants[best_index];
  r.candidate = best.candidate;
  r.mode = best.mode;
  r.us = best.best_us();
  r.seconds = seconds_since(t0);
  record(key, epilogue_key, CachedPick{find_candidate(best.candidate), best.mode, r.us});
  return r;
}

void GemmTuner::save() {
  if (impl_->path.empty()) return;
  nlohmann::json recorded;
  {
    std::shared_lock lock(impl_->mu);
    recorded = impl_->recorded;
  }
  const tune::FileContents before = tune::merge_into_cache_file(impl_->path, recorded);
  std::unique_lock lock(impl_->mu);
  if (before.bad && !impl_->file_bad)
    SINEW_WARN(kKernels, "GEMM tuning cache {} was {}; rebuilt it", impl_->path, before.problem);
  impl_->file_bad = false;
}

void GemmTuner::reload() { impl_->load(); }

GemmTuner::Stats GemmTuner::stats() const {
  return Stats{impl_->hits.load(), impl_->misses.load(), impl_->count.load()};
}

GemmTuner::Pick tuned_pick(const GemmProblem& problem) {
  GemmTuner& t = GemmTuner::global();
  const GemmTuner::Pick pick = t.lookup(problem);
  if (pick.candidate || !kAutotune.get()) return pick;
  try {
    t.tune(problem);
  } catch (const Error& e) {
    SINEW_WARN(kKernels, "GEMM autotuning of {} failed ({}); using the default candidate", problem.to_string(), e.what());
    return {};
  }
  try {
    t.save();
  } catch (const Error& e) {
    SINEW_WARN(kKernels, "cannot save the GEMM tuning cache {}: {}", t.cache_path(), e.what());
  }
  return t.lookup(problem);
}

}  // namespace sinew::kernels
