// The tile family's driver: thread regions, cache blocking and packing
// around the per-ISA kernels (tile/abi.h).
//
// Loop order per region (BLIS's, with A and B swapped because the register
// tile is row-major): for each MC-row block of A and KC-deep slice, pack A
// (it stays in L2/L3); for each NC-column block, pack a KC x NC block of B
// (it stays in L2); then every MR-row panel of A (in L1) meets every
// NR-column panel of B. Threads split the rows (each region packing its own
// A, all sharing one packed B) or the columns. Partial sums of earlier K
// slices live in the output when it is f32/f64 with unit column stride,
// else in a per-thread workspace, so that the fused epilogue always sees
// full f32 sums. Unfused, the epilogue runs afterwards as the same kernel's
// vectorised pass.
#include "kernels/tile_candidate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "kernels/epilogue/pass.h"
#include "sinew/core/aligned_buffer.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/epilogue.h"

namespace sinew::kernels {
namespace {

using tile::KernelKind;
using tile::TileKernel;

// Bounds the per-thread partial-sum workspace (narrow or strided outputs
// with K > KC); row blocks shrink to fit it.
constexpr int64_t kWorkspaceBytes = 16 << 20;
// Direct mode packs B (when it cannot be read in place) in panels of this size.
constexpr int64_t kDirectPanelBytes = 2 << 20;
// Threads splitting the rows share one packed copy of B from this size (below
// it, packing B per thread costs less than another fork-join) up to the next.
constexpr int64_t kSharedBMinBytes = 4 << 20;
constexpr int64_t kSharedBBytes = 128 << 20;
// Row regions per thread when B is shared (so that more cost little).
constexpr int64_t kRegionsPerThread = 2;

// One per thread: the pool's workers persist, so steady-state calls allocate nothing.
thread_local AlignedBuffer t_pack_a, t_pack_b, t_partial;
// Owned by the calling thread, read by every worker of its parallel_for.
thread_local AlignedBuffer t_shared_b;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// The K step for kb steps in blocks of at most kc: the fewest blocks, of
// equal depth (a multiple of kstep), so that no block is a thin remainder
// (K = 768 in blocks of 704 left one of 64, which paid a whole block's tile
// loads and stores for a tenth of the work).
int64_t balanced_kc(int64_t kb, int64_t kc, int64_t kstep) {
  if (kb <= kc) return kc;
  return std::min(kc, round_up(ceil_div(kb, ceil_div(kb, kc)), kstep));
}

// The M step for `rows` rows in blocks of about mc: a last block of under a
// quarter of mc joins the one before it rather than repacking all of B for
// a few rows (M = 4096 in blocks of 4092 packed B twice, once for 4 rows).
int64_t merged_mc(int64_t rows, int64_t mc, int64_t mr) {
  const int64_t blocks = ceil_div(rows, mc), last = rows - (blocks - 1) * mc;
  if (blocks > 1 && last * 4 < mc) return round_up(ceil_div(rows, blocks - 1), mr);
  return mc;
}

DType packed_dtype(KernelKind k) { return k == KernelKind::kF64 ? DType::kF64 : (k == KernelKind::kF32 ? DType::kF32 : DType::kBF16); }

// The matrix of batch b with its origin moved to (i, j).
MatrixRef at(const MatrixRef& r, int64_t b, int64_t i, int64_t j) {
  MatrixRef s = r;
  s.data = r.byte_ptr(b, i, j);
  s.bs = 0;
  return s;
}

class TileCandidate final : public Candidate {
 public:
  explicit TileCandidate(const TileConfig& c) : Candidate("tile", c.kernel->isa, c.id()), c_(c) {}

  bool supports(const GemmProblem& p) const override {
    const TileKernel& k = *c_.kernel;
    if (!isa_available(k.isa)) return false;
    switch (k.kind) {
      case KernelKind::kF32:
        if (p.in_dtype != DType::kF32 && p.in_dtype != DType::kBF16 && p.in_dtype != DType::kF16) return false;
        break;
      case KernelKind::kF64:
        if (p.in_dtype != DType::kF64) return false;
        break;
      case KernelKind::kBf16Dot:
        if (p.in_dtype != DType::kBF16 || !bf16_dot_available()) return false;
        break;
    }
    return !c_.direct || p.in_dtype == packed_dtype(k.kind);  // direct reads A in place
  }

  bool can_fuse(const GemmProblem&) const override { return true; }

  void run(const GemmProblem& p, EpilogueMode mode) const override {
    const BoundEpilogue bound =
        bind_epilogue(p.epilogue, gemm_op_name(p.op), p.batch, p.m, p.n, p.op == GemmOp::kBmm, p.out_dtype);
    if (bound.trivial()) {
      if (c_.direct && p.n < p.m && p.a.cs == 1 && p.reads_ab()) return gemm_transposed(p);
      // Column-major C (LAPACK-style callers, linalg's blocked updates): the
      // kernels store rows of C, so solve C^T = B^T A^T, whose rows are
      // contiguous, rather than scatter every tile element (3.5x on the
      // m x n x 32 updates of QR and Cholesky).
      if (!c_.direct && p.out.rs == 1 && p.out.cs != 1 && p.m > 1 && p.n > 1) {
        const GemmProblem q = transposed(p);
        return gemm(q, q.out, nullptr);
      }
      return gemm(p, p.out, nullptr);
    }
    if (mode != EpilogueMode::kUnfused) {
      init_reductions(bound, p.batch, p.m, p.n);
      return gemm(p, p.out, &bound);
    }
    // Unfused: the plain GEMM, then the kernel's vectorised pass over its result.
    const DType acc = p.acc_dtype();
    init_reductions(bound, p.batch, p.m, p.n);
    if (p.out_dtype == acc) {
      gemm(p, p.out, nullptr);
      return pass(p, p.out, bound);
    }
    const int64_t count = p.batch * p.m * p.n;
    AlignedBuffer values;
    MatrixRef v{values.get(static_cast<size_t>(std::max<int64_t>(count, 1)) * dtype_size(acc)), acc, p.m * p.n, p.n, 1};
    gemm(p, v, nullptr);
    pass(p, v, bound);
  }

  std::vector<std::pair<std::string, int64_t>> params() const override {
    return {{"mr", c_.kernel->mr}, {"nr", c_.kernel->nr},   {"kc", c_.kc},
            {"mc", c_.mc},         {"nc", c_.nc},           {"direct", c_.direct ? 1 : 0},
            {"split_n", c_.split == 'n' ? 1 : 0}};
  }

 private:
  // out = alpha * a @ b + beta * prior, then `epi` (nullptr: none) and the
  // conversion to out's dtype, over thread regions.
  void gemm(const GemmProblem& p, const MatrixRef& out, const BoundEpilogue* epi) const {
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    const TileKernel& k = *c_.kernel;
    const int threads = std::max(1, p.threads);
    const bool by_rows = c_.split == 'm';
    // Split columns at multiples of every reduction group too, so that no
    // two threads fold into one group.
    int64_t unit = by_rows ? k.mr : k.nr;
    if (!by_rows && epi)
      for (int r = 0; r < epi->num_reductions; ++r) unit = std::lcm(unit, epi->reductions[r].group);
    const int64_t extent = by_rows ? p.m : p.n;
    const int64_t units = ceil_div(extent, unit);
    // A large B is packed once for all row regions (one more fork-join);
    // then rows split into a few regions per thread, so that a thread the
    // OS runs late leaves less to wait for.
    const bool share_b = by_rows && threads > 1 && p.batch == 1 && !c_.direct && p.reads_ab() &&
                         p.k * p.n * k.packed_bytes >= kSharedBMinBytes;
    const int64_t wanted = p.batch >= threads ? 1 : (share_b ? kRegionsPerThread : 1) * threads;
    const int64_t per_region = ceil_div(units, std::min(units, wanted)) * unit;
    const int64_t regions = ceil_div(extent, per_region);
    const SharedB shared = share_b && regions > 1 ? pack_shared_b(p, threads) : SharedB{};
    ThreadPool::global().parallel_for(p.batch * regions, threads, [&](int64_t task, int) {
      const int64_t b = task / regions, r = task % regions;
      const int64_t lo = r * per_region, hi = std::min(extent, lo + per_region);
      if (by_rows) region(p, b, lo, hi, 0, p.n, out, epi, shared);
      else region(p, b, 0, p.m, lo, hi, out, epi, shared);
    });
  }

  // out^T = b^T a^T, for a direct candidate given few columns: the rows of
  // A become contiguous columns that the dot-product path streams once. The
  // small b^T is copied when its rows are not contiguous along K.
  static GemmProblem transposed(const GemmProblem& p) {
    auto t = [](const MatrixRef& r) { return MatrixRef{r.data, r.dtype, r.bs, r.cs, r.rs}; };
    GemmProblem q = p;
    q.m = p.n;
    q.n = p.m;
    q.a = t(p.b);
    q.b = t(p.a);
    q.out = t(p.out);
    q.prior = t(p.prior);
    return q;
  }

  void gemm_transposed(const GemmProblem& p) const {
    GemmProblem q = transposed(p);
    AlignedBuffer copy;
    if (q.a.cs != 1 && q.k > 1) {
      const int64_t es = static_cast<int64_t>(dtype_size(q.a.dtype));
      char* buf = static_cast<char*>(copy.get(static_cast<size_t>(q.batch * q.m * q.k * es)));
      for (int64_t b = 0; b < q.batch; ++b)
        for (int64_t i = 0; i < q.m; ++i)
          for (int64_t k = 0; k < q.k; ++k)
            std::memcpy(buf + ((b * q.m + i) * q.k + k) * es, q.a.byte_ptr(b, i, k), static_cast<size_t>(es));
      q.a = MatrixRef{buf, q.a.dtype, q.m * q.k, q.k, 1};
    }
    gemm(q, q.out, nullptr);
  }

  // B packed once for all row regions (rather than by each thread), block
  // (pc, jc) at data + (pc / kc * blocks_n + jc / nc) * stride bytes.
  struct SharedB {
    const char* data = nullptr;
    int64_t blocks_n = 0, stride = 0;
  };

  SharedB pack_shared_b(const GemmProblem& p, int threads) const {
    const TileKernel& k = *c_.kernel;
    const int64_t kb = p.k;
    SharedB s;
    s.blocks_n = ceil_div(p.n, c_.nc);
    const int64_t kc_step = balanced_kc(kb, c_.kc, k.kstep);
    s.stride = round_up(std::min(c_.nc, p.n), k.nr) * round_up(std::min(kc_step, kb), k.kstep) * k.packed_bytes;
    const int64_t blocks_k = ceil_div(kb, kc_step);
    if (blocks_k * s.blocks_n * s.stride > kSharedBBytes) return {};
    char* buf = static_cast<char*>(t_shared_b.get(static_cast<size_t>(blocks_k * s.blocks_n * s.stride)));
    const MatrixRef b = at(p.b, 0, 0, 0);
    ThreadPool::global().parallel_for(blocks_k * s.blocks_n, threads, [&](int64_t task, int) {
      const int64_t pc = task / s.blocks_n * kc_step, jc = task % s.blocks_n * c_.nc;
      k.pack_b(at(b, 0, pc, jc), std::min(kc_step, kb - pc), std::min(c_.nc, p.n - jc), buf + task * s.stride);
    });
    s.data = buf;
    return s;
  }

  void pass(const GemmProblem& p, const MatrixRef& values, const BoundEpilogue& epi) const {
    finish_rows(*c_.kernel, p, values, epi);
  }

  void region(const GemmProblem& p, int64_t batch, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
              const MatrixRef& out_all, const BoundEpilogue* epi_all, const SharedB& shared) const {
    const TileKernel& k = *c_.kernel;
    const MatrixRef a = at(p.a, batch, 0, 0), b = at(p.b, batch, 0, 0), out = at(out_all, batch, 0, 0);
    BoundEpilogue epi_b;
    if (epi_all) epi_b = epi_all->at_batch(batch);
    tile::StoreArgs st{p.alpha, p.beta, true, true, at(p.prior, batch, 0, 0), nullptr, 0, out,
                       epi_all ? &epi_b : nullptr};
    const int64_t kb = p.reads_ab() ? p.k : 0;
    const DType acc = packed_dtype(k.kind) == DType::kF64 ? DType::kF64 : DType::kF32;
    const int64_t acc_bytes = static_cast<int64_t>(dtype_size(acc));

    if (c_.direct) {
      const bool same = b.dtype == packed_dtype(k.kind);
      const bool b_dot = same && b.rs == 1 && (a.cs == 1 || kb <= 1) && p.n > 1;
      const bool b_direct = b_dot || (same && (b.cs == 1 || p.n == 1));
      const int64_t k_pad = round_up(kb, k.kstep);
      const int64_t nc_step =
          b_direct ? j1 - j0 : std::max<int64_t>(k.nr, kDirectPanelBytes / std::max<int64_t>(1, k_pad * k.packed_bytes) / k.nr * k.nr);
      for (int64_t jc = j0; jc < j1; jc += nc_step) {
        const int64_t nc = std::min(nc_step, j1 - jc);
        tile::BlockArgs ba{};
        ba.a = a.byte_ptr(0, i0, 0);
        ba.a_rs = a.rs;
        ba.a_cs = a.cs;
        ba.a_packed = false;
        if (b_direct) {
          ba.b = b.byte_ptr(0, 0, jc);
          ba.b_rs = b.rs;
          ba.b_cs = b.cs;
          ba.b_packed = false;
          ba.b_dot = b_dot;
        } else {
          void* buf = t_pack_b.get(static_cast<size_t>(round_up(nc, k.nr) * k_pad * k.packed_bytes));
          if (kb > 0) k.pack_b(at(b, 0, 0, jc), kb, nc, buf);
          ba.b = buf;
          ba.b_packed = true;
        }
        ba.mc = i1 - i0;
        ba.nc = nc;
        ba.kc = kb;
        ba.i0 = i0;
        ba.j0 = jc;
        ba.store = st;
        k.block(ba);
      }
      return;
    }

    const bool partial_in_out = out.dtype == acc && out.cs == 1;
    const bool a_in_place = a.dtype == packed_dtype(k.kind) && k.kstep == 1 && a.cs == 1;  // as direct mode
    const int64_t kc_step = balanced_kc(kb, c_.kc, k.kstep);  // as pack_shared_b's
    const bool need_workspace = kb > kc_step && !partial_in_out;
    int64_t mc_step = merged_mc(i1 - i0, c_.mc, k.mr);
    if (need_workspace)
      mc_step = std::clamp<int64_t>(kWorkspaceBytes / ((j1 - j0) * acc_bytes) / k.mr * k.mr, k.mr, c_.mc);
    for (int64_t ic = i0; ic < i1; ic += mc_step) {
      const int64_t mc = std::min(mc_step, i1 - ic);
      for (int64_t pc = 0;; pc += kc_step) {
        const int64_t kc = std::min(kc_step, kb - pc);
        const int64_t kc_pad = round_up(kc, k.kstep);
        // A row-major A in the kernel's own dtype is read in place, MR rows
        // at a time, each row a sequential stream along K: packing it cost
        // more than it saved (f32 6x64, one thread: +3% at 1024^3, +1-2%
        // at 2048^3, +5-8% at 512^3; two threads +3-6%).
        void* pa = nullptr;
        if (!a_in_place) {
          pa = t_pack_a.get(static_cast<size_t>(std::max<int64_t>(1, round_up(mc, k.mr) * kc_pad * k.packed_bytes)));
          if (kc > 0) k.pack_a(at(a, 0, ic, pc), mc, kc, pa);
        }
        st.first = pc == 0;
        st.last = pc + kc >= kb;
        for (int64_t jc = j0; jc < j1; jc += c_.nc) {
          const int64_t nc = std::min(c_.nc, j1 - jc);
          const void* pb;
          if (shared.data) {
            pb = shared.data + (pc / kc_step * shared.blocks_n + jc / c_.nc) * shared.stride;
          } else {
            void* buf = t_pack_b.get(static_cast<size_t>(std::max<int64_t>(1, round_up(nc, k.nr) * kc_pad * k.packed_bytes)));
            if (kc > 0) k.pack_b(at(b, 0, pc, jc), kc, nc, buf);
            pb = buf;
          }
          if (need_workspace) {
            auto* ws = static_cast<char*>(t_partial.get(static_cast<size_t>(mc * (j1 - j0) * acc_bytes)));
            st.acc = ws + (jc - j0) * acc_bytes;
            st.acc_ld = j1 - j0;
          } else if (partial_in_out) {
            st.acc = out.byte_ptr(0, ic, jc);
            st.acc_ld = out.rs;
          }
          tile::BlockArgs ba{pa, 0, 0, true, pb, 0, 0, true, false, mc, nc, kc, ic, jc, st};
          if (a_in_place) {
            ba.a = a.byte_ptr(0, ic, pc);
            ba.a_rs = a.rs;
            ba.a_cs = a.cs;
            ba.a_packed = false;
          }
          k.block(ba);
        }
        if (st.last) break;
      }
    }
  }

  TileConfig c_;
};

}  // namespace

std::string TileConfig::id() const {
  const std::string blocking = direct ? "direct" : fmt::format("kc{}_mc{}_nc{}", kc, mc, nc);
  return fmt::format("tile/{}/{}/{}/split_{}", isa_name(kernel->isa), kernel->name, blocking, split);
}

std::vector<const TileKernel*> all_tile_kernels() {
  std::vector<const TileKernel*> out;
  for (tile::KernelList l : {tile::avx512_f32_kernels(), tile::avx512_f64_kernels(), tile::avx512_bf16_kernels(),
                             tile::avx2_f32_kernels(), tile::avx2_f64_kernels(), tile::generic_kernels()})
    for (int i = 0; i < l.size; ++i) out.push_back(&l.data[i]);
  return out;
}

bool parse_tile_id(std::string_view id, TileConfig* config) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t slash = id.find('/', pos);
    parts.push_back(id.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos));
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  if (parts.size() != 6 || parts[0] != "tile") return false;
  TileConfig c;
  const std::string name = fmt::format("{}/{}", parts[2], parts[3]);
  for (const TileKernel* k : all_tile_kernels())
    if (isa_name(k->isa) == parts[1] && name == k->name) c.kernel = k;
  if (!c.kernel) return false;
  if (parts[5] != "split_m" && parts[5] != "split_n") return false;
  c.split = parts[5].back();
  if (parts[4] == "direct") {
    if (c.kernel->kind == KernelKind::kBf16Dot) return false;  // B needs its pairs interleaved
    c.direct = true;
  } else {
    long long kc = 0, mc = 0, nc = 0;
    const std::string blocking(parts[4]);
    if (std::sscanf(blocking.c_str(), "kc%lld_mc%lld_nc%lld", &kc, &mc, &nc) != 3) return false;
    if (kc < 1 || kc > (1 << 16) || kc % c.kernel->kstep != 0 || mc < 1 || mc > (1 << 24) || nc < 1 || nc > (1 << 24))
      return false;
    c.kc = kc;
    c.mc = mc;
    c.nc = nc;
  }
  if (c.id() != id) return false;  // one spelling per candidate
  *config = c;
  return true;
}

TileConfig default_tile_config(const TileKernel* kernel, char split) {
  TileConfig c;
  c.kernel = kernel;
  c.split = split;
  // A 16 KiB A micro-panel (a third of L1) and 768 KiB of B (L2), measured
  // best on AVX-512 machines with 48 KiB L1 and 1-2 MiB L2; KC in steps of 64.
  const int64_t kc = (16 << 10) / (kernel->mr * kernel->packed_bytes);
  c.kc = std::clamp<int64_t>((kc + 32) / 64 * 64, 64, 1024);
  c.mc = 4096 / kernel->mr * kernel->mr;
  c.nc = std::max<int64_t>(kernel->nr, (768 << 10) / (c.kc * kernel->packed_bytes) / kernel->nr * kernel->nr);
  return c;
}

void finish_rows(const tile::TileKernel& kernel, const GemmProblem& p, const MatrixRef& values,
                 const BoundEpilogue& epi) {
  if (p.m == 0 || p.n == 0) return;
  const int64_t rows = std::max<int64_t>(kernel.mr, (1 << 16) / p.n / kernel.mr * kernel.mr);
  const int64_t chunks = ceil_div(p.m, rows);
  ThreadPool::global().parallel_for(p.batch * chunks, p.threads, [&](int64_t task, int) {
    const int64_t b = task / chunks, i0 = task % chunks * rows;
    const BoundEpilogue eb = epi.at_batch(b);
    tile::BlockArgs ba{};
    ba.mc = std::min(rows, p.m - i0);
    ba.nc = p.n;
    ba.i0 = i0;
    ba.store = tile::StoreArgs{1.0, 1.0, true, true, at(values, b, 0, 0), nullptr, 0, at(p.out, b, 0, 0), &eb};
    kernel.pass(ba);
  });
}

namespace {

// The widest runnable tile kernel that accumulates in `acc` (there is always
// a generic one). The scalar reference pass (f64 math per element) left the
// blas family at half the speed of OpenBLAS + a vectorised GELU pass on
// addmm f32 128x3072x768.
const tile::TileKernel* pass_kernel(DType acc) {
  auto pick = [](tile::KernelKind kind) {
    const tile::TileKernel* best = nullptr;
    for (const tile::TileKernel* k : all_tile_kernels())
      if (k->kind == kind && isa_available(k->isa) && (!best || k->isa > best->isa)) best = k;
    return best;
  };
  static const tile::TileKernel* const f32 = pick(tile::KernelKind::kF32);
  static const tile::TileKernel* const f64 = pick(tile::KernelKind::kF64);
  return acc == DType::kF64 ? f64 : f32;
}

}  // namespace

void finish_values(const GemmProblem& p, const BoundEpilogue& e, const MatrixRef& values) {
  init_reductions(e, p.batch, p.m, p.n);
  finish_rows(*pass_kernel(values.dtype), p, values, e);
}

std::unique_ptr<Candidate> make_tile_candidate(const TileConfig& config) {
  return std::make_unique<TileCandidate>(config);
}

}  // namespace sinew::kernels
