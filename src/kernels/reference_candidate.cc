// The reference family: every product and sum in f64 (exact for bf16/f16
// inputs and nearly so for f32), the epilogue applied by the scalar pass.
#include <algorithm>
#include <vector>

#include "kernels/epilogue/pass.h"
#include "kernels/family_candidates.h"
#include "kernels/tile/scalar.h"
#include "sinew/core/thread_pool.h"

namespace sinew::kernels {
namespace {

class ReferenceCandidate final : public Candidate {
 public:
  ReferenceCandidate() : Candidate("reference", Isa::kGeneric, "reference/f64") {}

  bool supports(const GemmProblem&) const override { return true; }

  void run(const GemmProblem& p, EpilogueMode) const override {
    const BoundEpilogue e =
        bind_epilogue(p.epilogue, gemm_op_name(p.op), p.batch, p.m, p.n, p.op == GemmOp::kBmm, p.out_dtype);
    const int64_t rows = p.batch * p.m;
    ThreadPool::global().parallel_for(rows, p.threads, [&](int64_t r, int) {
      const int64_t b = r / p.m, i = r % p.m;
      std::vector<double> v(static_cast<size_t>(p.n));
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        if (p.reads_ab())
          for (int64_t k = 0; k < p.k; ++k)
            acc += tile::load_scalar(p.a.byte_ptr(b, i, k), p.a.dtype) * tile::load_scalar(p.b.byte_ptr(b, k, j), p.b.dtype);
        v[j] = p.alpha * acc;
        if (p.reads_prior()) v[j] += p.beta * tile::load_scalar(p.prior.byte_ptr(b, i, j), p.prior.dtype);
      }
      MatrixRef out = p.out;
      out.data = p.out.byte_ptr(b, 0, 0);
      finish_row(e.at_batch(b), i, v.data(), p.n, out);
    });
  }
};

}  // namespace

std::unique_ptr<Candidate> make_reference_candidate() { return std::make_unique<ReferenceCandidate>(); }

}  // namespace sinew::kernels
