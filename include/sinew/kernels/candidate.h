// GEMM candidates: every way sinew can run a GemmProblem, behind one
// interface, so that an autotuner can enumerate, time and cache them.
//
// Families:
//   reference  f64-accumulating loops (the truth for tests)
//   blas       OpenBLAS through CBLAS; the epilogue runs as a separate pass
//   tile       sinew's own microkernels (register tile MR x NR, cache blocks
//              KC/MC/NC, packing, thread split), one per ISA and dtype; the
//              epilogue is fused into the store of the last K block
//
// A candidate's id is stable across runs and builds of one version and is
// all a tuning cache needs to store: find_candidate(id) gives it back. Tile
// ids spell their parameters, e.g.
//   tile/avx512/f32/12x32/kc384_mc192_nc4096/split_m   (packed, K blocked)
//   tile/avx512/f32/8x32/direct/split_n                (no packing where the
//                                                      layout allows; for small M)
// and find_candidate accepts any well-formed tile id, not only the listed
// ones, so that a tuner may explore other block sizes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sinew/kernels/cpu_features.h"
#include "sinew/kernels/gemm.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels {

class Candidate {
 public:
  virtual ~Candidate() = default;
  Candidate(const Candidate&) = delete;
  Candidate& operator=(const Candidate&) = delete;

  const std::string& id() const { return id_; }
  const std::string& family() const { return family_; }
  Isa isa() const { return isa_; }

  // Whether run() accepts this problem (dtypes, layouts, epilogue).
  virtual bool supports(const GemmProblem& problem) const = 0;
  // Whether the epilogue can run inside the kernel (else kFused == kUnfused).
  virtual bool can_fuse(const GemmProblem& problem) const { return false; }
  // Runs a problem that supports() accepted. Safe to call concurrently.
  virtual void run(const GemmProblem& problem, EpilogueMode mode = EpilogueMode::kAuto) const = 0;
  // Named tuning parameters (mr, nr, kc, mc, nc, ...), for cost models.
  virtual std::vector<std::pair<std::string, int64_t>> params() const { return {}; }

 protected:
  Candidate(std::string family, Isa isa, std::string id)
      : family_(std::move(family)), isa_(isa), id_(std::move(id)) {}

 private:
  std::string family_;
  Isa isa_;
  std::string id_;
};

// The families, in the order candidates are listed: "tile", "blas", "reference".
std::span<const std::string_view> candidate_families();

// Every listed candidate this CPU can run (ISAs capped by SINEW_KERNELS_ISA).
std::vector<const Candidate*> all_candidates();
// The listed candidates that support `problem`, optionally of one family.
std::vector<const Candidate*> candidates_for(const GemmProblem& problem, std::string_view family = "");
// The candidate with this id (listed or any well-formed tile id), or nullptr
// when the id is malformed or names an ISA this CPU lacks. Pointers stay valid.
const Candidate* find_candidate(std::string_view id);

// The heuristic pick until a tuned one exists: the fastest family and
// configuration expected for this shape, dtype and CPU. `family` restricts
// the choice; throws InvalidArgument for an unknown family.
const Candidate& default_candidate(const GemmProblem& problem, std::string_view family = "");

// What mm/addmm/bmm do after validation: options.candidate, else
// options.family's or the default pick, run with options.epilogue_mode.
void run_gemm(const GemmProblem& problem, const GemmOptions& options);

}  // namespace sinew::kernels
