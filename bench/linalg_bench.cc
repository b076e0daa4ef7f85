// `sinew bench linalg`: Cholesky, QR (with Q), eigh and SVD (with vectors)
// for sinew and OpenBLAS's LAPACK on the same inputs, f64 and f32, single
// matrices of order 64 to 1024 and a batch of 10,000 32x32 matrices, 1 and 2
// threads. Cases are `<op>/<dtype>/n<size>[/batch<count>]/t<threads>`; impls
// `sinew`, `lapack` (potrf, geqrf+orgqr, syevd) and, for the SVD,
// `lapack-gesvj` and `lapack-gesdd`; a batched Cholesky also times
// `memory-floor`, an in-place pass that reads and writes every element.
// Metrics: `ms` (median), `residual` (‖A − factors‖_F / (‖A‖_F n ε)),
// `orthogonality` (‖QᵀQ − I‖_F / (n ε), the worse of U and V for the SVD)
// and, for the SVD, `rel_err_small_sv`: the largest relative error of the
// smallest tenth of the singular values of a graded matrix D₁ Q D₂ (Q
// orthogonal, D growing over 8 decades each side in f64, 3 in f32) against
// one-sided Jacobi in long double.
//
// A batch runs LAPACK as a loop of calls split across the same number of
// threads as sinew (one OpenBLAS thread each); a single matrix gives
// OpenBLAS `t` threads. The CLI runs it in the peers' environment
// (ensure_peer_bench_env: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, and
// the core forced where OpenBLAS does not recognize the CPU).
#include "linalg_bench.h"

#include <cblas.h>
#include <fmt/format.h>
#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "gemm_peers.h"
#include "sinew/core/thread_pool.h"
#include "sinew/linalg/cholesky.h"
#include "sinew/linalg/eigh.h"
#include "sinew/linalg/qr.h"
#include "sinew/linalg/svd.h"

extern "C" void openblas_set_num_threads(int);

namespace sinew::bench {
namespace {

using Clock = std::chrono::steady_clock;

// ---- LAPACKE by type ------------------------------------------------------------

int potrf(int n, double* a) { return LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, a, n); }
int potrf(int n, float* a) { return LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', n, a, n); }
int geqrf(int n, double* a, double* tau) { return LAPACKE_dgeqrf(LAPACK_COL_MAJOR, n, n, a, n, tau); }
int geqrf(int n, float* a, float* tau) { return LAPACKE_sgeqrf(LAPACK_COL_MAJOR, n, n, a, n, tau); }
int orgqr(int n, double* a, double* tau) { return LAPACKE_dorgqr(LAPACK_COL_MAJOR, n, n, n, a, n, tau); }
int orgqr(int n, float* a, float* tau) { return LAPACKE_sorgqr(LAPACK_COL_MAJOR, n, n, n, a, n, tau); }
int syevd(int n, double* a, double* w) { return LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a, n, w); }
int syevd(int n, float* a, float* w) { return LAPACKE_ssyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a, n, w); }
int gesdd(int n, double* a, double* s, double* u, double* vt) {
  return LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', n, n, a, n, s, u, n, vt, n);
}
int gesdd(int n, float* a, float* s, float* u, float* vt) {
  return LAPACKE_sgesdd(LAPACK_COL_MAJOR, 'S', n, n, a, n, s, u, n, vt, n);
}
// U overwrites a; σ = stat[0] * sva.
int gesvj(int n, double* a, double* s, double* v) {
  double stat[6];
  int info = LAPACKE_dgesvj(LAPACK_COL_MAJOR, 'G', 'U', 'V', n, n, a, n, s, n, v, n, stat);
  for (int i = 0; i < n; ++i) s[i] *= stat[0];
  return info;
}
int gesvj(int n, float* a, float* s, float* v) {
  float stat[6];
  int info = LAPACKE_sgesvj(LAPACK_COL_MAJOR, 'G', 'U', 'V', n, n, a, n, s, n, v, n, stat);
  for (int i = 0; i < n; ++i) s[i] *= stat[0];
  return info;
}

template <class T> constexpr DType dtype_of() { return sizeof(T) == 8 ? DType::kF64 : DType::kF32; }

// ---- inputs and checks (column-major, in double) ------------------------------------

std::mt19937_64& rng() {
  static std::mt19937_64 g(7);
  return g;
}

std::vector<double> gaussian(int64_t count) {
  std::normal_distribution<double> d;
  std::vector<double> v(static_cast<size_t>(count));
  for (auto& x : v) x = d(rng());
  return v;
}

// C (n x n) = alpha op(A) op(B) + beta C, all column-major double.
void dgemm(bool ta, bool tb, int n, double alpha, const double* a, const double* b, double beta, double* c) {
  cblas_dgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, n, n, alpha, a, n, b,
              n, beta, c, n);
}

std::vector<double> spd(int n) {
  auto g = gaussian(int64_t{n} * n);
  std::vector<double> a(g.size());
  dgemm(false, true, n, 1.0 / n, g.data(), g.data(), 0, a.data());
  for (int i = 0; i < n; ++i) a[i + i * n] += 1;
  return a;
}

std::vector<double> symmetric(int n) {
  auto a = gaussian(int64_t{n} * n);
  for (int j = 0; j < n; ++j)
    for (int i = j + 1; i < n; ++i) a[j + i * n] = a[i + j * n];
  return a;
}

std::vector<double> orthogonal(int n) {
  auto q = gaussian(int64_t{n} * n);
  std::vector<double> tau(static_cast<size_t>(n));
  LAPACKE_dgeqrf(LAPACK_COL_MAJOR, n, n, q.data(), n, tau.data());
  LAPACKE_dorgqr(LAPACK_COL_MAJOR, n, n, n, q.data(), n, tau.data());
  return q;
}

// D₁ Q D₂ with D growing over `decades` along rows and columns.
std::vector<double> graded(int n, double decades) {
  auto q = orthogonal(n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i)
      q[i + j * n] *= std::pow(10.0, decades * i / std::max(n - 1, 1)) * std::pow(10.0, decades * j / std::max(n - 1, 1));
  return q;
}

double frob(const std::vector<double>& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

// ‖QᵀQ − I‖_F for the n x n column-major q.
double orth_error(int n, const std::vector<double>& q) {
  std::vector<double> g(q.size());
  dgemm(true, false, n, 1, q.data(), q.data(), 0, g.data());
  for (int i = 0; i < n; ++i) g[i + i * n] -= 1;
  return frob(g);
}

template <class T> std::vector<double> widen(const T* p, int64_t count) { return std::vector<double>(p, p + count); }

// Singular values of the n x n column-major a by cyclic one-sided Jacobi in
// long double, descending.
std::vector<long double> reference_sv(const std::vector<double>& a, int n) {
  std::vector<long double> x(a.begin(), a.end());
  const long double tol = std::numeric_limits<long double>::epsilon() * std::sqrt(static_cast<long double>(n));
  std::vector<long double> nrm(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    long double s = 0;
    for (int i = 0; i < n; ++i) s += x[i + j * n] * x[i + j * n];
    nrm[j] = s;
  }
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        long double* xp = &x[static_cast<size_t>(p) * n];
        long double* xq = &x[static_cast<size_t>(q) * n];
        long double g = 0;
        for (int i = 0; i < n; ++i) g += xp[i] * xq[i];
        if (nrm[p] == 0 || nrm[q] == 0 || std::abs(g) <= tol * std::sqrt(nrm[p]) * std::sqrt(nrm[q])) continue;
        rotated = true;
        const long double zeta = (nrm[q] - nrm[p]) / (2 * g);
        const long double t = std::copysign(1.0L / (std::abs(zeta) + std::sqrt(1 + zeta * zeta)), zeta);
        const long double c = 1 / std::sqrt(1 + t * t), s = t * c;
        long double sp = 0, sq = 0;
        for (int i = 0; i < n; ++i) {
          const long double u = c * xp[i] - s * xq[i], v = s * xp[i] + c * xq[i];
          xp[i] = u;
          xq[i] = v;
          sp += u * u;
          sq += v * v;
        }
        nrm[p] = sp;
        nrm[q] = sq;
      }
    if (!rotated) break;
  }
  std::vector<long double> sv(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) sv[j] = std::sqrt(nrm[j]);
  std::sort(sv.rbegin(), sv.rend());
  return sv;
}

// The largest relative error of the smallest tenth of the singular values.
double small_sv_error(const std::vector<long double>& ref, const std::vector<double>& s) {
  const size_t n = ref.size(), from = n - std::max<size_t>(1, n / 10);
  std::vector<double> sorted = s;
  std::sort(sorted.rbegin(), sorted.rend());
  double e = 0;
  for (size_t i = from; i < n; ++i) e = std::max(e, static_cast<double>(std::abs(sorted[i] - ref[i]) / ref[i]));
  return e;
}

// ---- timing -------------------------------------------------------------------------

// Median milliseconds of run() over samples of about cfg.sample_seconds in
// all; prep() (untimed) restores the inputs before each run.
double time_ms(const LinalgConfig& cfg, const std::function<void()>& prep, const std::function<void()>& run) {
  prep();
  run();  // warm-up: first touch, thread start, autotuning
  std::vector<double> ms;
  double total = 0;
  while (ms.size() < 3 || (total < cfg.sample_seconds * 1e3 && static_cast<int>(ms.size()) < cfg.max_samples)) {
    prep();
    auto t0 = Clock::now();
    run();
    const double v = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ms.push_back(v);
    total += v;
  }
  return median(ms);
}

struct Case {
  const LinalgConfig* cfg;
  Report* report;
  std::string name;
  int n = 0, threads = 1;
  int64_t batch = 1;  // 1: a single matrix
  void add(const std::string& impl, const std::string& metric, double value, const std::string& unit) const {
    report->add({"linalg", name, impl, metric, value, unit});
  }
};

// Runs fn(b) for b in [0, count) split across `threads` threads, each with
// one OpenBLAS thread (the batch loop of LAPACK calls).
void lapack_loop(int64_t count, int threads, const std::function<void(int64_t)>& fn) {
  openblas_set_num_threads(1);
  ThreadPool::global().parallel_for(threads, threads, [&](int64_t t, int) {
    for (int64_t b = count * t / threads; b < count * (t + 1) / threads; ++b) fn(b);
  });
}

void lapack_threads(int threads) { openblas_set_num_threads(threads); }

// Input matrices of a case as T, column-major, `count` of them.
template <class T> std::vector<T> narrow(const std::vector<double>& one, int64_t count, const std::function<std::vector<double>()>& more) {
  const size_t nn = one.size();
  std::vector<T> out(nn * static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const std::vector<double> m = b == 0 ? one : more();
    std::copy(m.begin(), m.end(), out.begin() + static_cast<std::ptrdiff_t>(b * nn));
  }
  return out;
}

template <class T> TensorView view(T* p, int64_t batch, int n) {
  if (batch == 1) return TensorView(p, dtype_of<T>(), {n, n}, {1, n});
  return TensorView(p, dtype_of<T>(), {batch, n, n}, {int64_t{n} * n, 1, n});
}
template <class T> TensorView vview(T* p, int64_t batch, int n) {
  if (batch == 1) return TensorView(p, dtype_of<T>(), {n});
  return TensorView(p, dtype_of<T>(), {batch, n});
}

// Matrices checked for the accuracy metrics of a batch.
constexpr int64_t kChecked = 8;

// ---- the ops ------------------------------------------------------------------------

template <class T> void bench_cholesky(const Case& c) {
  const int n = c.n;
  const int64_t nn = int64_t{n} * n, count = c.batch;
  const auto in = narrow<T>(spd(n), count, [&] { return spd(n); });
  std::vector<T> work(in.size());
  const double eps = std::numeric_limits<T>::epsilon();
  auto residual = [&](const std::vector<T>& l, bool lower_only) {
    double worst = 0;
    for (int64_t b = 0; b < std::min(count, kChecked); ++b) {
      auto L = widen(l.data() + b * nn, nn);
      auto A = widen(in.data() + b * nn, nn);
      if (lower_only)
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < j; ++i) L[i + j * n] = 0;
      const double an = frob(A);
      dgemm(false, true, n, -1, L.data(), L.data(), 1, A.data());
      worst = std::max(worst, frob(A) / (an * n * eps));
    }
    return worst;
  };
  // Both factor a fresh copy in place (LAPACK's way; sinew's out may be a).
  auto prep = [&] { std::copy(in.begin(), in.end(), work.begin()); };
  const linalg::CholeskyOptions opt{false, c.threads};
  c.add("sinew", "ms", time_ms(*c.cfg, prep, [&] { linalg::cholesky(view(work.data(), count, n), view(work.data(), count, n), opt); }), "ms");
  c.add("sinew", "residual", residual(work, false), "n·eps");
  auto run = [&] {
    if (count == 1) {
      lapack_threads(c.threads);
      potrf(n, work.data());
    } else {
      lapack_loop(count, c.threads, [&](int64_t b) { potrf(n, work.data() + b * nn); });
    }
  };
  c.add("lapack", "ms", time_ms(*c.cfg, prep, run), "ms");
  c.add("lapack", "residual", residual(work, true), "n·eps");
  if (count > 1) {
    // The batch is memory-bound: what reading and writing back every
    // element in place takes on the same threads is the floor for an op
    // that writes whole matrices, as sinew does (zeros above the diagonal).
    // LAPACK's potrf touches only the lower triangle's cache lines.
    volatile T one_v = T(1);
    const T one = one_v;
    auto touch = [&] {
      ThreadPool::global().parallel_for(c.threads, c.threads, [&](int64_t t, int) {
        T* p = work.data();
        const size_t lo = work.size() * static_cast<size_t>(t) / c.threads;
        const size_t hi = work.size() * static_cast<size_t>(t + 1) / c.threads;
        for (size_t i = lo; i < hi; ++i) p[i] *= one;
      });
    };
    c.add("memory-floor", "ms", time_ms(*c.cfg, prep, touch), "ms");
  }
}

template <class T> void bench_qr(const Case& c) {
  const int n = c.n;
  const int64_t nn = int64_t{n} * n, count = c.batch;
  const auto in = narrow<T>(gaussian(nn), count, [&] { return gaussian(nn); });
  std::vector<T> q(in.size()), work(in.size()), tau(static_cast<size_t>(n * count));
  const double eps = std::numeric_limits<T>::epsilon();
  // Worst residual and orthogonality of (Q, R); R from `rsrc` (upper part).
  auto check = [&](const std::vector<T>& qv, const std::vector<T>& rsrc) {
    double res = 0, orth = 0;
    for (int64_t b = 0; b < std::min(count, kChecked); ++b) {
      auto Q = widen(qv.data() + b * nn, nn);
      auto R = widen(rsrc.data() + b * nn, nn);
      auto A = widen(in.data() + b * nn, nn);
      for (int j = 0; j < n; ++j)
        for (int i = j + 1; i < n; ++i) R[i + j * n] = 0;
      const double an = frob(A);
      dgemm(false, false, n, -1, Q.data(), R.data(), 1, A.data());
      res = std::max(res, frob(A) / (an * n * eps));
      orth = std::max(orth, orth_error(n, Q) / (n * eps));
    }
    return std::pair<double, double>{res, orth};
  };
  // Both start from a fresh copy of a; sinew writes R over it (r may be a).
  const linalg::QrOptions opt{linalg::QrMode::kReduced, c.threads};
  auto prep = [&] { std::copy(in.begin(), in.end(), work.begin()); };
  c.add("sinew", "ms", time_ms(*c.cfg, prep, [&] { linalg::qr(view(work.data(), count, n), view(q.data(), count, n), view(work.data(), count, n), opt); }), "ms");
  auto [res, orth] = check(q, work);
  c.add("sinew", "residual", res, "n·eps");
  c.add("sinew", "orthogonality", orth, "n·eps");
  // LAPACK: geqrf, keep R, then orgqr in place.
  std::vector<T> rl(in.size());
  auto one = [&](int64_t b) {
    T* w = work.data() + b * nn;
    geqrf(n, w, tau.data() + b * n);
    if (b < kChecked) std::copy(w, w + nn, rl.data() + b * nn);
    orgqr(n, w, tau.data() + b * n);
  };
  auto run = [&] {
    if (count == 1) {
      lapack_threads(c.threads);
      one(0);
    } else {
      lapack_loop(count, c.threads, one);
    }
  };
  c.add("lapack", "ms", time_ms(*c.cfg, prep, run), "ms");
  std::tie(res, orth) = check(work, rl);
  c.add("lapack", "residual", res, "n·eps");
  c.add("lapack", "orthogonality", orth, "n·eps");
}

template <class T> void bench_eigh(const Case& c) {
  const int n = c.n;
  const int64_t nn = int64_t{n} * n, count = c.batch;
  const auto in = narrow<T>(symmetric(n), count, [&] { return symmetric(n); });
  std::vector<T> w(static_cast<size_t>(n * count)), work(in.size());
  const double eps = std::numeric_limits<T>::epsilon();
  auto check = [&](const std::vector<T>& vv) {
    double res = 0, orth = 0;
    for (int64_t b = 0; b < std::min(count, kChecked); ++b) {
      auto V = widen(vv.data() + b * nn, nn);
      auto A = widen(in.data() + b * nn, nn);
      std::vector<double> AV(static_cast<size_t>(nn));
      dgemm(false, false, n, 1, A.data(), V.data(), 0, AV.data());
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) AV[i + j * n] -= V[i + j * n] * w[b * n + j];
      res = std::max(res, frob(AV) / (frob(A) * n * eps));
      orth = std::max(orth, orth_error(n, V) / (n * eps));
    }
    return std::pair<double, double>{res, orth};
  };
  // Both overwrite a fresh copy of a with the eigenvectors (sinew's v may be a).
  auto prep = [&] { std::copy(in.begin(), in.end(), work.begin()); };
  const linalg::EighOptions opt{false, linalg::EighMethod::kAuto, c.threads};
  c.add("sinew", "ms", time_ms(*c.cfg, prep, [&] { linalg::eigh(view(work.data(), count, n), vview(w.data(), count, n), view(work.data(), count, n), opt); }), "ms");
  auto [res, orth] = check(work);
  c.add("sinew", "residual", res, "n·eps");
  c.add("sinew", "orthogonality", orth, "n·eps");
  auto run = [&] {
    if (count == 1) {
      lapack_threads(c.threads);
      syevd(n, work.data(), w.data());
    } else {
      lapack_loop(count, c.threads, [&](int64_t b) { syevd(n, work.data() + b * nn, w.data() + b * n); });
    }
  };
  c.add("lapack", "ms", time_ms(*c.cfg, prep, run), "ms");
  std::tie(res, orth) = check(work);
  c.add("lapack", "residual", res, "n·eps");
  c.add("lapack", "orthogonality", orth, "n·eps");
}

template <class T> void bench_svd(const Case& c) {
  const int n = c.n;
  const int64_t nn = int64_t{n} * n, count = c.batch;
  const auto in = narrow<T>(gaussian(nn), count, [&] { return gaussian(nn); });
  std::vector<T> u(in.size()), vt(in.size()), s(static_cast<size_t>(n * count)), work(in.size());
  const double eps = std::numeric_limits<T>::epsilon();
  // Residual and orthogonality from U, s and Vᵀ (vt_is_v: the buffer holds V).
  auto check = [&](const std::vector<T>& uu, const std::vector<T>& vv, bool vt_is_v) {
    double res = 0, orth = 0;
    for (int64_t b = 0; b < std::min(count, kChecked); ++b) {
      auto U = widen(uu.data() + b * nn, nn);
      auto Vt = widen(vv.data() + b * nn, nn);
      auto A = widen(in.data() + b * nn, nn);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) U[i + j * n] *= s[b * n + j];
      const double an = frob(A);
      dgemm(false, vt_is_v, n, -1, U.data(), Vt.data(), 1, A.data());
      res = std::max(res, frob(A) / (an * n * eps));
      auto U2 = widen(uu.data() + b * nn, nn);
      std::vector<double> V(static_cast<size_t>(nn));
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) V[i + j * n] = vt_is_v ? Vt[i + j * n] : Vt[j + i * n];
      orth = std::max({orth, orth_error(n, U2) / (n * eps), orth_error(n, V) / (n * eps)});
    }
    return std::pair<double, double>{res, orth};
  };
  const linalg::SvdOptions opt{false, c.threads};
  c.add("sinew", "ms", time_ms(*c.cfg, [] {}, [&] { linalg::svd(view(const_cast<T*>(in.data()), count, n), view(u.data(), count, n), vview(s.data(), count, n), view(vt.data(), count, n), opt); }), "ms");
  auto [res, orth] = check(u, vt, false);
  c.add("sinew", "residual", res, "n·eps");
  c.add("sinew", "orthogonality", orth, "n·eps");
  auto prep = [&] { std::copy(in.begin(), in.end(), work.begin()); };
  auto run_sdd = [&] {
    if (count == 1) {
      lapack_threads(c.threads);
      gesdd(n, work.data(), s.data(), u.data(), vt.data());
    } else {
      lapack_loop(count, c.threads, [&](int64_t b) {
        gesdd(n, work.data() + b * nn, s.data() + b * n, u.data() + b * nn, vt.data() + b * nn);
      });
    }
  };
  c.add("lapack-gesdd", "ms", time_ms(*c.cfg, prep, run_sdd), "ms");
  std::tie(res, orth) = check(u, vt, false);
  c.add("lapack-gesdd", "residual", res, "n·eps");
  c.add("lapack-gesdd", "orthogonality", orth, "n·eps");
  if (n <= c.cfg->gesvj_max_n) {
    auto run_svj = [&] {
      if (count == 1) {
        lapack_threads(c.threads);
        gesvj(n, work.data(), s.data(), vt.data());
      } else {
        lapack_loop(count, c.threads, [&](int64_t b) { gesvj(n, work.data() + b * nn, s.data() + b * n, vt.data() + b * nn); });
      }
    };
    c.add("lapack-gesvj", "ms", time_ms(*c.cfg, prep, run_svj), "ms");
    std::tie(res, orth) = check(work, vt, true);
    c.add("lapack-gesvj", "residual", res, "n·eps");
    c.add("lapack-gesvj", "orthogonality", orth, "n·eps");
  }
  // Relative accuracy of the small singular values of a graded matrix.
  if (count == 1 && n <= c.cfg->rel_err_max_n && c.threads == c.cfg->threads.front()) {
    const auto g = graded(n, sizeof(T) == 8 ? 8.0 : 3.0);
    std::vector<T> gt(g.begin(), g.end()), sv(static_cast<size_t>(n));
    const auto ref = reference_sv(std::vector<double>(gt.begin(), gt.end()), n);
    auto err = [&] { return small_sv_error(ref, std::vector<double>(sv.begin(), sv.end())); };
    linalg::svdvals(view(gt.data(), 1, n), vview(sv.data(), 1, n), opt);
    c.add("sinew", "rel_err_small_sv", err(), "relative");
    std::vector<T> w2(gt), uu(static_cast<size_t>(nn)), vv(static_cast<size_t>(nn));
    gesdd(n, w2.data(), sv.data(), uu.data(), vv.data());
    c.add("lapack-gesdd", "rel_err_small_sv", err(), "relative");
    if (n <= c.cfg->gesvj_max_n) {
      w2 = gt;
      gesvj(n, w2.data(), sv.data(), vv.data());
      c.add("lapack-gesvj", "rel_err_small_sv", err(), "relative");
    }
  }
}

template <class T> void run_op(const std::string& op, const Case& c) {
  if (op == "cholesky") bench_cholesky<T>(c);
  else if (op == "qr") bench_qr<T>(c);
  else if (op == "eigh") bench_eigh<T>(c);
  else if (op == "svd") bench_svd<T>(c);
  else throw std::invalid_argument("unknown op " + op);
}

}  // namespace

int run_linalg_bench(const LinalgConfig& cfg, Report& report) {
  struct Shape {
    int n;
    int64_t batch;
  };
  std::vector<Shape> shapes;
  for (int64_t n : cfg.sizes) shapes.push_back({static_cast<int>(n), 1});
  if (cfg.batch > 0) shapes.push_back({static_cast<int>(cfg.batch_n), cfg.batch});
  fmt::print("peer: {}\n", openblas_description());
  if (const std::string w = openblas_fallback_warning(); !w.empty()) fmt::print(stderr, "{}\n", w);
  int failed = 0;
  for (const auto& op : cfg.ops)
    for (const auto& dt : cfg.dtypes)
      for (const auto& sh : shapes)
        for (int t : cfg.threads) {
          Case c{&cfg, &report, fmt::format("{}/{}/n{}{}/t{}", op, dt, sh.n, sh.batch > 1 ? fmt::format("/batch{}", sh.batch) : "", t), sh.n, t, sh.batch};
          fmt::print("{} ...\n", c.name);
          std::fflush(stdout);
          try {
            if (dt == "f64") run_op<double>(op, c);
            else if (dt == "f32") run_op<float>(op, c);
            else throw std::invalid_argument("unknown dtype " + dt);
          } catch (const std::exception& e) {
            fmt::print(stderr, "{}: {}\n", c.name, e.what());
            ++failed;
          }
        }
  openblas_set_num_threads(ThreadPool::default_threads());
  return failed;
}

}  // namespace sinew::bench
