// The blas family (ATen's role): OpenBLAS's sgemm/dgemm; bf16 through
// sbgemm where the library exports it (Debian's 0.3.21 declares it but is
// built without it), else, like f16, through f32 copies. The GEMM writes f32/f64 values (into the output
// when it has that dtype and a BLAS layout, else into a temporary) and a
// separate pass then applies the epilogue and converts: the tile family's
// vectorised pass (the widest ISA's kernel of the accumulation dtype), so
// that this family runs what an unfused framework runs (BLAS, then a
// vectorised elementwise pass) and stays a competitive fallback.
#include <cblas.h>
// Resolved at load time: null when this OpenBLAS lacks bf16 support.
#pragma weak cblas_sbgemm

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/epilogue/pass.h"
#include "kernels/family_candidates.h"
#include "kernels/tile/scalar.h"
#include "kernels/tile_candidate.h"

namespace sinew::kernels {
namespace {

struct BlasOperand {
  bool ok = false;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  blasint ld = 1;
};

// How CBLAS (row-major) can read a rows x cols matrix in place, if it can.
BlasOperand classify(const MatrixRef& r, int64_t rows, int64_t cols) {
  if (r.cs == 1 || cols <= 1) {
    const int64_t ld = rows <= 1 ? std::max<int64_t>(1, cols) : r.rs;
    if (ld >= std::max<int64_t>(1, cols)) return {true, CblasNoTrans, static_cast<blasint>(ld)};
  }
  if (r.rs == 1 || rows <= 1) {
    const int64_t ld = cols <= 1 ? std::max<int64_t>(1, rows) : r.cs;
    if (ld >= std::max<int64_t>(1, rows)) return {true, CblasTrans, static_cast<blasint>(ld)};
  }
  return {};
}

// An output CBLAS can write in place: rows contiguous.
bool writable(const MatrixRef& c, int64_t rows, int64_t cols) {
  const BlasOperand o = classify(c, rows, cols);
  return o.ok && o.trans == CblasNoTrans;
}

MatrixRef transposed(const MatrixRef& r) { return MatrixRef{r.data, r.dtype, r.bs, r.cs, r.rs}; }

// A contiguous row-major copy of batch b's rows x cols, converted to `to`.
MatrixRef copy_contiguous(const MatrixRef& r, int64_t b, int64_t rows, int64_t cols, DType to, std::vector<char>* buf) {
  buf->resize(static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * dtype_size(to));
  MatrixRef c{buf->data(), to, 0, cols, 1};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      tile::store_scalar(c.byte_ptr(0, i, j), to, tile::load_scalar(r.byte_ptr(b, i, j), r.dtype));
  return c;
}

// values(b) = prior(b), before BLAS scales it by beta. A row bias (row
// stride 0), a column bias (column stride 0) and a matrix of the
// accumulation dtype are copied a contiguous row at a time (memcpy, fill or
// a plain typed loop), like an unfused framework's broadcast; the
// element-wise conversion through load_scalar/store_scalar (an out-of-line
// dtype switch per element) is left to other dtypes and layouts.
template <class T>
void copy_rows(const MatrixRef& prior, const MatrixRef& values, int64_t b, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    T* dst = reinterpret_cast<T*>(values.byte_ptr(b, i, 0));
    const T* src = reinterpret_cast<const T*>(prior.byte_ptr(b, i, 0));
    if (prior.cs == 1) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    else if (prior.cs == 0) std::fill(dst, dst + n, *src);
    else
      for (int64_t j = 0; j < n; ++j) dst[j] = src[j * prior.cs];
  }
}

void copy_prior(MatrixRef prior, MatrixRef values, int64_t b, int64_t m, int64_t n) {
  if (values.cs != 1 && values.rs == 1) {  // column-major values: copy its contiguous columns
    prior = transposed(prior);
    values = transposed(values);
    std::swap(m, n);
  }
  if (values.cs == 1 && prior.dtype == values.dtype) {
    if (values.dtype == DType::kF64) return copy_rows<double>(prior, values, b, m, n);
    if (values.dtype == DType::kF32) return copy_rows<float>(prior, values, b, m, n);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      tile::store_scalar(values.byte_ptr(b, i, j), values.dtype, tile::load_scalar(prior.byte_ptr(b, i, j), prior.dtype));
}

class BlasCandidate final : public Candidate {
 public:
  BlasCandidate() : Candidate("blas", Isa::kGeneric, "blas/openblas") {}

  bool supports(const GemmProblem&) const override { return true; }

  void run(const GemmProblem& p, EpilogueMode) const override {
    const BoundEpilogue e =
        bind_epilogue(p.epilogue, gemm_op_name(p.op), p.batch, p.m, p.n, p.op == GemmOp::kBmm, p.out_dtype);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    if (openblas_get_num_threads() != p.threads) openblas_set_num_threads(p.threads);
    const DType acc = p.acc_dtype();
    // Values land in the output when it can hold them for CBLAS.
    const bool in_out = p.out_dtype == acc && (writable(p.out, p.m, p.n) || writable(transposed(p.out), p.n, p.m));
    std::vector<char> values_buf;
    MatrixRef values = p.out;
    if (!in_out) {
      values_buf.resize(static_cast<size_t>(p.batch * p.m * p.n) * dtype_size(acc));
      values = MatrixRef{values_buf.data(), acc, p.m * p.n, p.n, 1};
    }
    for (int64_t b = 0; b < p.batch; ++b) gemm(p, b, values);
    if (!in_out || !e.trivial()) finish_values(p, e, values);
  }

 private:
  // values(b) = alpha * a(b) @ b(b) + beta * prior(b).
  static void gemm(const GemmProblem& p, int64_t b, const MatrixRef& values) {
    const DType acc = values.dtype;
    const bool prior_is_values = p.prior.data == values.data && p.prior.rs == values.rs && p.prior.cs == values.cs;
    double beta = p.reads_prior() ? p.beta : 0.0;
    // Copy the (broadcast) prior in, then let BLAS scale it.
    if (beta != 0.0 && !prior_is_values) copy_prior(p.prior, values, b, p.m, p.n);
    if (!p.reads_ab()) {
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          char* v = values.byte_ptr(b, i, j);
          tile::store_scalar(v, acc, beta == 0.0 ? 0.0 : beta * tile::load_scalar(v, acc));
        }
      return;
    }
    // C = A B, or for a column-major C: C^T = B^T A^T.
    MatrixRef a = p.a, bm = p.b, c = values;
    int64_t m = p.m, n = p.n;
    if (!writable(c, m, n)) {
      std::swap(a, bm);
      a = transposed(a);
      bm = transposed(bm);
      c = transposed(c);
      std::swap(m, n);
    }
    const bool sb = p.in_dtype == DType::kBF16 && &cblas_sbgemm != nullptr;
    const DType operand_dtype = sb ? DType::kBF16 : acc;
    std::vector<char> abuf, bbuf;
    BlasOperand oa = classify(a, m, p.k), ob = classify(bm, p.k, n);
    const char* pa = a.byte_ptr(b, 0, 0);
    const char* pb = bm.byte_ptr(b, 0, 0);
    if (!oa.ok || a.dtype != operand_dtype) {
      pa = static_cast<const char*>(copy_contiguous(a, b, m, p.k, operand_dtype, &abuf).data);
      oa = {true, CblasNoTrans, static_cast<blasint>(std::max<int64_t>(1, p.k))};
    }
    if (!ob.ok || bm.dtype != operand_dtype) {
      pb = static_cast<const char*>(copy_contiguous(bm, b, p.k, n, operand_dtype, &bbuf).data);
      ob = {true, CblasNoTrans, static_cast<blasint>(std::max<int64_t>(1, n))};
    }
    const BlasOperand oc = classify(c, m, n);
    char* pc = c.byte_ptr(b, 0, 0);
    const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(p.k);
    if (acc == DType::kF64) {
      cblas_dgemm(CblasRowMajor, oa.trans, ob.trans, M, N, K, p.alpha, reinterpret_cast<const double*>(pa), oa.ld,
                  reinterpret_cast<const double*>(pb), ob.ld, beta, reinterpret_cast<double*>(pc), oc.ld);
    } else if (sb) {
      cblas_sbgemm(CblasRowMajor, oa.trans, ob.trans, M, N, K, static_cast<float>(p.alpha),
                   reinterpret_cast<const bfloat16*>(pa), oa.ld, reinterpret_cast<const bfloat16*>(pb), ob.ld,
                   static_cast<float>(beta), reinterpret_cast<float*>(pc), oc.ld);
    } else {
      cblas_sgemm(CblasRowMajor, oa.trans, ob.trans, M, N, K, static_cast<float>(p.alpha),
                  reinterpret_cast<const float*>(pa), oa.ld, reinterpret_cast<const float*>(pb), ob.ld,
                  static_cast<float>(beta), reinterpret_cast<float*>(pc), oc.ld);
    }
  }
};

}  // namespace

std::unique_ptr<Candidate> make_blas_candidate() { return std::make_unique<BlasCandidate>(); }

}  // namespace sinew::kernels
