// The GEMM autotuner: picks, per problem class, the candidate (candidate.h)
// and epilogue mode that run fastest on this machine, and remembers the
// choice in a persistent cache.
//
// Tuning a problem:
//  1. enumerates candidates_for(problem) (not the reference family, and
//     tile kernels of the widest ISA only) plus a few other cache blockings
//     of the best tile kernels;
//  2. prescreens them with a cost model (cost_model.h: a roofline over the
//     candidate's params() with padding waste, packing, thread split and
//     memory traffic, whose coefficients were fitted to timings);
//  3. times the survivors on operands of the problem's shape (never the
//     caller's buffers): warm-up, several samples (the fastest counts:
//     other work on a shared machine only adds time), the caches flushed
//     before each sample, the problem's fixed thread count; the best
//     candidate that can fuse the epilogue is timed fused and unfused, so
//     the mode is decided by measurement; with a TuneGroup, ranks take
//     turns down the list and allgather the timings, so all pick alike;
//  4. confirms: the leading contenders of that pass (autotune/confirm.h)
//     are timed again, interleaved round by round, so that a moment of
//     load on a shared machine that hit one of them in the first pass does
//     not decide the pick;
//  5. records the fastest (over both passes) under the problem's key.
//
// The key: op, input/output dtypes, batch and M rounded up to powers of two
// (decode batches and token counts vary call to call), N, K, operand
// layouts and alignment, what beta reads, the epilogue's structure
// (Epilogue::key()), the ISA, the thread count; cache entries also carry
// the library version and a fingerprint of the candidate set, and are only
// used by a build with the same ones.
//
// The cache file (JSON, default $SINEW_TUNE_CACHE, else
// ~/.cache/sinew/gemm_tune.json) is versioned: a corrupt file, one of
// another format version, or malformed entries are never trusted: they are
// dropped with a warning and the file is rebuilt on the next save. Saves
// merge with what other processes saved meanwhile under a lock file and
// replace the file atomically (temporary file + rename).
//
// mm / addmm / bmm with GemmOptions.family and .candidate empty run the
// tuned pick when the process-wide tuner has one (tuned_pick: a packed key,
// one hash lookup under a shared lock, about 0.1-0.2 us); with
// SINEW_AUTOTUNE=1 a problem without one is tuned on first use and saved.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sinew/kernels/candidate.h"
#include "sinew/kernels/epilogue.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels {

// Bumped whenever the file layout or the meaning of a key changes.
inline constexpr int kTuneCacheVersion = 1;

// M (and bmm's batch) as the cache keys it: the next power of two.
int64_t tune_bucket(int64_t extent);

// The ISA part of keys: "avx512+bf16", "avx512", "avx2" or "generic".
std::string tune_isa_tag();

// The cache key of a problem, as the file spells it, e.g.
// "mm|float32>float32|b1|m128|n3072|k768|NN|a64|prior=none|e=bias_row+gelu_tanh|avx512+bf16|t2|v0.1.0|c<fingerprint>".
std::string tune_key(const GemmProblem& problem);

// A GEMM by its shape, to tune without the caller's data. Spelled
//   <op>:<dtype>[><out dtype>]:[<B>x]<M>x<N>x<K>[:<epilogue>][:<layout>]
// e.g. "mm:f32:1024x1024x1024", "addmm:bf16:128x3072x768:bias+gelu_tanh",
// "bmm:f32:8x64x64x64:NT". The epilogue is Epilogue::key()'s spelling
// (bias_row|bias_col|bias_matrix, relu, gelu_tanh, gelu_erf, silu, sigmoid,
// tanh, residual, scale, clamp, cast_<dtype>, <sum|mean|max|amax|logsumexp><group>)
// joined by '+'; for addmm a leading bias[_row|_col|_matrix] is addmm's own
// bias (a row vector when not given). The output dtype defaults to the
// input's (a cast decides it when there is one).
struct GemmShape {
  GemmOp op = GemmOp::kMm;
  DType in_dtype = DType::kF32;
  DType out_dtype = DType::kF32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  std::string layout = "NN";       // of a and b: N row-major, T column-major, S strided
  BiasKind addmm_bias = BiasKind::kRow;
  bool accumulate = false;         // mm/bmm with beta != 0 (reads out)
  std::string epilogue = "none";   // Epilogue::key()
  int align = 64;                  // operand alignment in bytes (a power of two up to 64)
  int threads = 1;

  // Throws InvalidArgument naming the part that is wrong.
  static GemmShape parse(std::string_view spec, int threads = 1);
  static GemmShape of(const GemmProblem& problem);
  // Round trips through parse() (alignment, accumulate and threads are not spelled).
  std::string to_string() const;
};

// Synthetic operands (random values) for a shape: what the tuner times, and
// what `sinew tune` and the benchmark run.
class GemmWorkload {
 public:
  explicit GemmWorkload(const GemmShape& shape, uint64_t seed = 1);
  ~GemmWorkload();
  GemmWorkload(const GemmWorkload&) = delete;
  GemmWorkload& operator=(const GemmWorkload&) = delete;

  const GemmShape& shape() const;
  // The validated problem over this workload's buffers.
  const GemmProblem& problem() const;
  const Epilogue* epilogue() const;  // nullptr when none
  // The same operands as views, to call mm/addmm/bmm or a peer library with.
  const TensorView& a() const;
  const TensorView& b() const;
  const TensorView& out() const;
  const TensorView& bias() const;  // addmm's bias; empty for mm and bmm

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every rank's timings, rank-major: given this rank's vector, returns the
// concatenation of all ranks' vectors (each of the same length). Kernels do
// not link the distributed layer; sinew/dist/gemm_tune.h adapts a
// ProcessGroup's allgather to this.
using AllgatherTimings = std::function<std::vector<double>(const std::vector<double>& mine)>;

struct TuneGroup {
  int rank = 0;
  int world = 1;
  AllgatherTimings allgather;  // required when world > 1
};

struct TuneOptions {
  int warmup = 1;                       // untimed calls before the first sample
  int samples = 5;                      // timed samples per variant (the fastest counts)
  double min_sample_seconds = 2e-4;     // a sample repeats the call until it lasts this long
  double max_variant_seconds = 1.5;     // fewer samples (at least 2) for long calls
  bool flush_caches = true;             // evict the operands from every cache before each sample
  int max_timed = 6;                    // survivors of the cost model's prescreen
  bool exhaustive = false;              // time every variant (no prescreen)
  // The confirmation round: the first pass's best variant, its other
  // epilogue mode, each family's best within confirm_family_band of it, and
  // the next fastest within confirm_band while the list is shorter than
  // max_confirmed (the pair and the families' best may take it past) are
  // timed again, one sample each per round, interleaved; at most
  // confirm_rounds rounds, fewer where they would add more than half the
  // first pass's time. 0 rounds: no confirmation.
  int confirm_rounds = 3;
  double confirm_band = 0.15;
  double confirm_family_band = 0.5;
  int max_confirmed = 4;
  bool retune = false;                  // ignore a cached pick
  std::string family;                   // only this family ("" = all but reference)
  TuneGroup group;                      // ranks split the timing
};

// One (candidate, epilogue mode) the tuner considered.
struct TuneVariant {
  std::string candidate;
  std::string family;
  EpilogueMode mode = EpilogueMode::kAuto;
  double model_us = 0;                                        // the cost model's estimate
  bool survivor = false;                                      // kept by the prescreen
  double measured_us = std::numeric_limits<double>::quiet_NaN();  // fastest sample; NaN: not timed
  int timed_by = -1;                                          // the rank that timed it
  // Fastest sample of the confirmation round, over all ranks; NaN: not re-timed.
  double confirmed_us = std::numeric_limits<double>::quiet_NaN();

  // What the pick compares: the fastest sample of either pass.
  double best_us() const { return std::fmin(measured_us, confirmed_us); }
};

struct TuneResult {
  std::string key;
  std::string candidate;  // the pick
  EpilogueMode mode = EpilogueMode::kAuto;
  double us = 0;          // its time per call (its best_us())
  bool cached = false;    // from the cache; nothing was timed
  std::vector<TuneVariant> variants;  // empty when cached
  double seconds = 0;     // spent tuning
};

const char* epilogue_mode_name(EpilogueMode mode);  // "auto", "fused", "unfused"

class GemmTuner {
 public:
  // The process-wide tuner run_gemm consults; its cache is the file at
  // default_tune_cache_path(), read on first use.
  static GemmTuner& global();
  // A tuner with its own cache file ("" keeps entries in memory only).
  // Reads the file now when it exists.
  explicit GemmTuner(std::string cache_path);
  ~GemmTuner();
  GemmTuner(const GemmTuner&) = delete;
  GemmTuner& operator=(const GemmTuner&) = delete;

  const std::string& cache_path() const;

  struct Pick {
    const Candidate* candidate = nullptr;  // nullptr: nothing tuned for this problem
    EpilogueMode mode = EpilogueMode::kAuto;
  };
  // The cached pick for this problem. The warm dispatch path: no I/O, no
  // allocation, one shared lock.
  Pick lookup(const GemmProblem& problem) const;

  // The cached result (unless options.retune), else tunes on a workload of
  // the problem's shape, records the pick in memory and returns it.
  TuneResult tune(const GemmProblem& problem, const TuneOptions& options = {});
  TuneResult tune(const GemmShape& shape, const TuneOptions& options = {});

  // Merges this tuner's entries into its file (see the top of this file).
  // Throws IoError when the file cannot be written, TimeoutError when the
  // lock is not granted within 10 s.
  void save();
  // Forgets every entry and re-reads the file.
  void reload();

  struct Stats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0;  // usable by this build
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// $SINEW_TUNE_CACHE, else $HOME/.cache/sinew/gemm_tune.json.
std::string default_tune_cache_path();

// What run_gemm runs when neither family nor candidate is pinned: the
// global tuner's pick; with SINEW_AUTOTUNE=1, a problem without one is
// tuned now and the cache saved. {nullptr} means default_candidate().
GemmTuner::Pick tuned_pick(const GemmProblem& problem);

}  // namespace sinew::kernels
