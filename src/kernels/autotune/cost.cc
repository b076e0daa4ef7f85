#include "sinew/kernels/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sinew/kernels/epilogue.h"

namespace sinew::kernels::tune {
namespace {

// Caches the blocking is checked against: the A micro-panel (MR x KC)
// should stay in L1 beside the B micro-panel, the packed KC x NC block of B
// in L2. Per core, on the machines sinew targets (48 KiB L1, 1-2 MiB L2).
constexpr double kL1Bytes = 48 << 10;
constexpr double kL2Bytes = 1 << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t param(const std::vector<std::pair<std::string, int64_t>>& ps, const char* name, int64_t fallback = 0) {
  for (const auto& [n, v] : ps)
    if (n == name) return v;
  return fallback;
}

// Vector FMA flops per cycle of one core: two FMA pipes.
double fma_flops_per_cycle(Isa isa, bool f64) {
  switch (isa) {
    case Isa::kAvx512: return f64 ? 32 : 64;
    case Isa::kAvx2: return f64 ? 16 : 32;
    case Isa::kGeneric: return f64 ? 1 : 2;  // portable C++: what the compiler makes of it
  }
  return 8;
}

int lanes(Isa isa, bool f64) {
  switch (isa) {
    case Isa::kAvx512: return f64 ? 8 : 16;
    case Isa::kAvx2: return f64 ? 4 : 8;
    case Isa::kGeneric: return f64 ? 2 : 4;
  }
  return 4;
}

// Weighted epilogue work per output element: activations dominate.
double epilogue_weight(const GemmProblem& p) {
  if (!p.epilogue) return 0;
  double w = 0;
  for (const EpilogueStep& s : p.epilogue->steps())
    w += s.kind == EpilogueStep::Kind::kActivation ? (s.activation == Activation::kRelu ? 0.15 : 1.0) : 0.15;
  w += 0.3 * static_cast<double>(p.epilogue->reductions().size());
  return w;
}

// The kernel's element kind from a tile id "tile/<isa>/<kind>/<MRxNR>/...".
std::string tile_kind(const std::string& id) {
  const size_t a = id.find('/', 5);
  const size_t b = id.find('/', a + 1);
  return id.substr(a + 1, b - a - 1);
}

double tile_cycles(const Candidate& c, EpilogueMode mode, const GemmProblem& p, const CostCoefficients& k) {
  const auto ps = c.params();
  const int64_t mr = param(ps, "mr", 8), nr = param(ps, "nr", 16);
  const int64_t kc = param(ps, "kc", 256), mc = param(ps, "mc", 4096), nc = param(ps, "nc", 4096);
  const bool direct = param(ps, "direct") != 0, split_n = param(ps, "split_n") != 0;
  const bool stream = param(ps, "stream") != 0;  // tile/<isa>/f32/stream_b: rows of A unpadded
  const std::string kind = tile_kind(c.id());
  const bool f64 = kind == "f64", bf16dot = kind == "bf16dot";
  const double in_size = static_cast<double>(dtype_size(p.in_dtype));
  const double packed_size = f64 ? 8 : (bf16dot ? 2 : 4);
  const int threads = std::max(1, p.threads);

  // The largest thread region (regions beyond the first are no larger).
  int64_t rows = p.m, cols = p.n, mats = p.batch;
  int64_t used = 1;
  if (p.batch >= threads) {
    mats = ceil_div(p.batch, threads);
    used = std::min<int64_t>(threads, p.batch);
  } else {
    mats = 1;
    const int64_t unit = split_n ? nr : mr;
    const int64_t extent = split_n ? p.n : p.m;
    const int64_t units = std::max<int64_t>(1, ceil_div(extent, unit));
    const int64_t per = ceil_div(units, std::min<int64_t>(units, threads)) * unit;
    used = std::min<int64_t>(threads, units) * p.batch;
    (split_n ? cols : rows) = std::min(extent, per);
  }
  const double K = static_cast<double>(p.reads_ab() ? p.k : 0);
  const double R = static_cast<double>(rows), C = static_cast<double>(cols), B = static_cast<double>(mats);
  const double Rp = stream ? R : static_cast<double>(ceil_div(rows, mr) * mr);
  const double Cp = static_cast<double>(ceil_div(cols, nr) * nr);

  const double peak = fma_flops_per_cycle(c.isa(), f64) * (bf16dot ? 2 * k.eff_bf16dot : k.eff_fma);
  double compute = 2 * Rp * Cp * K / peak;
  const double convert = (p.in_dtype == DType::kBF16 || p.in_dtype == DType::kF16) && !bf16dot ? k.convert_cycles : 0;
  const double per_pack = k.pack_cycles + convert;
  double pack = 0, traffic = 0;
  if (stream) {
    // B read once in place; each group of 4 rows of B loads and stores the
    // output rows (in cache), about halving the FMA rate.
    compute *= 2;
  } else if (direct) {
    const bool b_in_place = p.layout()[1] == 'N' && p.in_dtype == (f64 ? DType::kF64 : DType::kF32);
    if (!b_in_place) pack += K * C * per_pack;
    // B streams past every MR-row panel of A: from L2 while it fits, else
    // from memory every time.
    const double b_bytes = K * C * (b_in_place ? in_size : packed_size);
    const double panels = static_cast<double>(ceil_div(rows, mr));
    traffic += b_bytes > kL2Bytes ? panels * b_bytes / k.mem_bytes_per_cycle
                                  : std::max(0.0, panels - 1) * b_bytes / k.l2_bytes_per_cycle;
    if (p.layout()[0] != 'N') compute *= 1 + k.cache_penalty;  // A's K steps are strided
  } else {
    const double mblocks = std::ceil(R / static_cast<double>(mc));
    // A row-major A in the kernel's own dtype is read in place (tile_candidate.cc).
    const bool a_in_place = p.layout()[0] == 'N' && !bf16dot && p.in_dtype == (f64 ? DType::kF64 : DType::kF32);
    pack += (a_in_place ? 0.0 : R * K * per_pack) + mblocks * K * C * per_pack;
    const double kblocks = std::max(1.0, std::ceil(K / static_cast<double>(kc)));
    traffic += (kblocks - 1) * R * C * k.partial_cycles;
    if (static_cast<double>(kc * nc) * packed_size > kL2Bytes) compute *= 1 + k.cache_penalty;
    if (static_cast<double>((mr + nr) * kc) * packed_size > kL1Bytes) compute *= 1 + k.cache_penalty;
    // A K block shorter than the default wastes the store's fixed costs.
    compute *= 1 + 16.0 / static_cast<double>(std::min<int64_t>(kc, std::max<int64_t>(1, p.k)));
  }

  const double w = epilogue_weight(p);
  double epi = 0;
  if (w > 0) {
    if (mode == EpilogueMode::kUnfused)
      epi = R * C * (k.epi_pass_base + w * k.epi_pass_cycles);
    else
      epi = R * C * w * k.epi_fused_cycles * 16.0 / lanes(c.isa(), f64);
  }
  const double bytes = (R * K + K * C) * in_size + R * C * static_cast<double>(dtype_size(p.out_dtype));
  const double mem = bytes / k.mem_bytes_per_cycle;
  const double work = B * std::max(compute + pack + traffic + epi, mem);
  return work + k.call_cycles + (used > 1 ? k.wake_cycles : 0);
}

double blas_cycles(const GemmProblem& p, const CostCoefficients& k) {
  const bool f64 = p.in_dtype == DType::kF64;
  const int threads = std::max(1, p.threads);
  const double M = static_cast<double>(p.m), N = static_cast<double>(p.n), K = static_cast<double>(p.reads_ab() ? p.k : 0);
  const double Bt = static_cast<double>(p.batch);
  const double eff = p.m < 16 ? k.blas_small_m : k.blas_eff;
  const double peak = fma_flops_per_cycle(best_isa(), f64) * eff;
  const double t = static_cast<double>(std::min<int64_t>(threads, std::max<int64_t>(1, p.m * p.n / 256)));
  double cycles = Bt * (2 * M * N * K / peak + (M * K + K * N) * k.pack_cycles) / t;
  if (p.in_dtype == DType::kBF16 || p.in_dtype == DType::kF16) cycles += Bt * (M * K + K * N) * k.blas_convert_cycles;
  const double w = epilogue_weight(p);
  const bool pass = w > 0 || p.out_dtype != p.acc_dtype();
  if (pass) cycles += Bt * M * N * (k.epi_pass_base + w * k.epi_pass_cycles) / threads;
  const double bytes = Bt * ((M * K + K * N) * static_cast<double>(dtype_size(p.in_dtype)) +
                             M * N * static_cast<double>(dtype_size(p.out_dtype)));
  cycles = std::max(cycles, bytes / (k.mem_bytes_per_cycle * threads));
  return cycles + k.call_cycles + (threads > 1 ? k.wake_cycles : 0);
}

}  // namespace

const CostCoefficients& default_cost_coefficients() {
  static const CostCoefficients k;
  return k;
}

double estimate_us(const Candidate& c, EpilogueMode mode, const GemmProblem& p, const CostCoefficients& k) {
  double cycles = 0;
  if (c.family() == "tile") cycles = tile_cycles(c, mode, p, k);
  else if (c.family() == "blas") cycles = blas_cycles(p, k);
  else cycles = 100 * (2.0 * static_cast<double>(p.batch * p.m * p.n * std::max<int64_t>(1, p.k))) + k.call_cycles;
  return cycles / (k.ghz * 1e3);
}

namespace {

double mean_square_log_error(const std::vector<CostSample>& samples, const CostCoefficients& k) {
  double s = 0;
  size_t n = 0;
  for (const CostSample& x : samples) {
    if (!(x.measured_us > 0) || !x.candidate) continue;
    const double e = std::log(estimate_us(*x.candidate, x.mode, x.problem, k) / x.measured_us);
    s += e * e;
    ++n;
  }
  return n ? s / static_cast<double>(n) : 0.0;
}

}  // namespace

double cost_model_error(const std::vector<CostSample>& samples, const CostCoefficients& k) {
  return std::sqrt(mean_square_log_error(samples, k));
}

CostCoefficients fit_cost_model(const std::vector<CostSample>& samples, CostCoefficients start, double* rms_log) {
  auto loss = [&](const CostCoefficients& k) { return mean_square_log_error(samples, k); };
  double* fields[] = {&start.ghz,           &start.eff_fma,        &start.eff_bf16dot,    &start.pack_cycles,
                      &start.convert_cycles, &start.partial_cycles, &start.l2_bytes_per_cycle, &start.cache_penalty,
                      &start.mem_bytes_per_cycle, &start.call_cycles, &start.wake_cycles, &start.blas_eff,
                      &start.blas_small_m, &start.blas_convert_cycles, &start.epi_fused_cycles,
                      &start.epi_pass_cycles, &start.epi_pass_base};
  double best = loss(start);
  // Multiplicative steps, shrinking when no coordinate improves.
  for (double step = 1.5; step > 1.01; step = std::sqrt(step)) {
    for (int round = 0; round < 8; ++round) {
      bool improved = false;
      for (double* f : fields) {
        for (double factor : {step, 1 / step}) {
          const double old = *f;
          *f = old * factor;
          if (f == &start.eff_fma || f == &start.eff_bf16dot || f == &start.blas_eff || f == &start.blas_small_m)
            *f = std::min(*f, 1.0);
          const double l = loss(start);
          if (l < best - 1e-12) {
            best = l;
            improved = true;
          } else {
            *f = old;
          }
        }
      }
      if (!improved) break;
    }
  }
  if (rms_log) *rms_log = std::sqrt(best);
  return start;
}

std::string describe(const CostCoefficients& k) {
  return fmt::format(
      "ghz={:.4g} eff_fma={:.4g} eff_bf16dot={:.4g} pack_cycles={:.4g} convert_cycles={:.4g} partial_cycles={:.4g} "
      "l2_bytes_per_cycle={:.4g} cache_penalty={:.4g} mem_bytes_per_cycle={:.4g} call_cycles={:.4g} wake_cycles={:.4g} "
      "blas_eff={:.4g} blas_small_m={:.4g} blas_convert_cycles={:.4g} epi_fused_cycles={:.4g} epi_pass_cycles={:.4g} "
      "epi_pass_base={:.4g}",
      k.ghz, k.eff_fma, k.eff_bf16dot, k.pack_cycles, k.convert_cycles, k.partial_cycles, k.l2_bytes_per_cycle,
      k.cache_penalty, k.mem_bytes_per_cycle, k.call_cycles, k.wake_cycles, k.blas_eff, k.blas_small_m,
      k.blas_convert_cycles, k.epi_fused_cycles, k.epi_pass_cycles, k.epi_pass_base);
}

const std::vector<std::string>& training_shapes() {
  static const std::vector<std::string> shapes = {
      "mm:f32:64x64x64",          "mm:f32:200x300x100",        "mm:f32:512x512x512",
      "mm:f32:1536x1536x1536",    "mm:f32:1x1024x1024",        "mm:f32:4x2048x512",
      "mm:f32:16x1024x4096",      "mm:f32:96x2048x2048",       "mm:f32:768x256x1024",
      "mm:bf16:256x256x256",      "mm:bf16:1x2048x2048",       "mm:bf16:64x1024x1024",
      "mm:bf16:1024x1024x1024",   "mm:f64:256x256x256",        "mm:f32:512x512x512:NT",
      "mm:f32:300x200x500:TN",    "addmm:f32:64x1024x512:bias+gelu_tanh",
      "addmm:f32:512x1024x256:bias+relu",                       "mm:f32:256x512x256:bias_row+silu",
      "bmm:f32:16x64x64x64",
  };
  return shapes;
}

}  // namespace sinew::kernels::tune
