// The autotuner's cost model: a time estimate for running a problem with a
// candidate, used to prescreen candidates before timing them. Accuracy only
// matters for ranking, so it is a roofline over the candidate's params()
// with the effects that separate candidates of one ISA: register-tile
// padding at the edges, the thread split's imbalance, packing (and
// converting) the operands, re-reading B in the unpacked mode, cache blocks
// that overflow their cache, partial sums written back per K block, and
// where the epilogue runs.
//
// The default coefficients were fitted by fit_cost_model() to exhaustive
// timings of training_shapes() at 1 and 2 threads (`sinew tune --fit
// --threads 1,2`: 603 timings on the 2-core AVX-512 reference machine while
// it was shared, root-mean-square log error 0.61 against 1.25 before the
// fit) and rounded; some absorb machine load (wake_cycles) or effects the
// model lacks, so they are not physical constants. Refit on a new machine
// kind. The benchmark's "pick within 3% of the exhaustive best" evaluation
// uses shapes outside the training set.
#pragma once

#include <string>
#include <vector>

#include "sinew/kernels/candidate.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels::tune {

struct CostCoefficients {
  double ghz = 2.0;               // cycles per ns the estimates are scaled by
  double eff_fma = 0.9;           // fraction of the vector FMA peak f32/f64 microkernels reach
  double eff_bf16dot = 0.26;       // ... and bf16 dot-product kernels (relative to 2x the f32 peak)
  double pack_cycles = 0.5;      // per element packed
  double convert_cycles = 0.92;    // extra per element converted to f32 while packing (bf16, f16)
  double partial_cycles = 9.9;   // per output element and extra K block (partial sums re-read)
  double l2_bytes_per_cycle = 7600; // B re-read per row panel in the unpacked mode, while it fits L2
  double cache_penalty = 0.005;    // compute slowdown when a cache block overflows its cache
  double mem_bytes_per_cycle = 8.1; // memory bandwidth per thread (also B re-reads beyond L2)
  double call_cycles = 330;      // per call
  double wake_cycles = 860000;      // per call that wakes other threads
  double blas_eff = 0.64;         // OpenBLAS's fraction of the f32 FMA peak
  double blas_small_m = 0.18;     // its efficiency for M below 16 (packs B whole)
  double blas_convert_cycles = 11; // per element copied through f32 for bf16/f16 inputs
  double epi_fused_cycles = 0.001;  // per output element and activation, fused in the tile store
  double epi_pass_cycles = 0.03;    // per output element and activation in the scalar separate pass
  double epi_pass_base = 10.8;       // per output element of any separate pass
};

// The coefficients the tuner uses (fitted on this project's reference machine).
const CostCoefficients& default_cost_coefficients();

// Estimated microseconds for `candidate` running `problem` in `mode`.
double estimate_us(const Candidate& candidate, EpilogueMode mode, const GemmProblem& problem,
                   const CostCoefficients& k = default_cost_coefficients());

// One measurement to fit against.
struct CostSample {
  const Candidate* candidate;
  EpilogueMode mode;
  GemmProblem problem;  // only sizes, dtypes, layouts, epilogue and threads are read
  double measured_us;
};

// The root-mean-square log error of the estimates over the samples.
double cost_model_error(const std::vector<CostSample>& samples, const CostCoefficients& k);

// Coordinate descent on the squared log error of estimate_us over the
// samples, from `start`; returns the fitted coefficients and sets *rms_log
// to the remaining root-mean-square log error.
CostCoefficients fit_cost_model(const std::vector<CostSample>& samples, CostCoefficients start, double* rms_log);

// JSON-ish one-line spelling of the coefficients, to paste into the source.
std::string describe(const CostCoefficients& k);

// The shapes the default coefficients were fitted on ("mm:f32:512x512x512", ...).
const std::vector<std::string>& training_shapes();

}  // namespace sinew::kernels::tune
