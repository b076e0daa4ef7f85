// BLIS as a peer, loaded at run time with its symbols kept private
// (RTLD_LOCAL | RTLD_DEEPBIND): libblis also exports the CBLAS and BLAS
// names, and linking it would let it take OpenBLAS's place for every caller
// of cblas_sgemm in the process (sinew's blas family included). The header
// only gives the function types (and stays in this file: BLIS ships a
// cblas.h of its own).
#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <type_traits>

#include "gemm_peers.h"
#include "sinew/core/error.h"

#ifdef SINEW_HAVE_BLIS
#include <blis.h>
#endif

namespace sinew::bench {

#ifdef SINEW_HAVE_BLIS
namespace {

struct Blis {
  decltype(&bli_init) init = nullptr;
  decltype(&bli_sgemm) sgemm = nullptr;
  decltype(&bli_thread_set_num_threads) set_threads = nullptr;
  decltype(&bli_info_get_version_str) version = nullptr;
  decltype(&bli_arch_query_id) arch_id = nullptr;
  decltype(&bli_arch_string) arch_name = nullptr;
  std::string error;
};

const Blis& blis() {
  static const Blis b = [] {
    Blis r;
    void* h = nullptr;
    for (const char* name : {"libblis.so.4", "libblis.so"})
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND))) break;
    if (!h) {
      r.error = ::dlerror();
      return r;
    }
    auto sym = [&](auto& f, const char* name) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(::dlsym(h, name)); };
    sym(r.init, "bli_init");
    sym(r.sgemm, "bli_sgemm");
    sym(r.set_threads, "bli_thread_set_num_threads");
    sym(r.version, "bli_info_get_version_str");
    sym(r.arch_id, "bli_arch_query_id");
    sym(r.arch_name, "bli_arch_string");
    if (!r.init || !r.sgemm || !r.set_threads || !r.version || !r.arch_id || !r.arch_name) {
      r.sgemm = nullptr;
      r.error = "libblis lacks bli_sgemm or its info functions";
      return r;
    }
    // Reads BLIS_ARCH_TYPE: a numeric arch id, which "skx" parses as (0).
    r.init();
    return r;
  }();
  return b;
}

}  // namespace

bool blis_available() { return blis().sgemm != nullptr; }

std::string blis_description() {
  const Blis& b = blis();
  if (!b.sgemm) return fmt::format("BLIS not loaded ({})", b.error);
  return fmt::format("BLIS {} ({} kernels)", b.version(), b.arch_name(b.arch_id()));
}

void blis_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc) {
  const Blis& l = blis();
  if (!l.sgemm) throw InternalError("blis_sgemm: " + blis_description());
  l.set_threads(threads);
  float one = 1.0f, zero = 0.0f;
  l.sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a), lda, 1, const_cast<float*>(b),
          ldb, 1, &zero, c, ldc, 1);
}

#else

bool blis_available() { return false; }
std::string blis_description() { return "BLIS not built in (install libblis-dev and reconfigure)"; }
void blis_sgemm(int, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {
  throw InternalError("blis_sgemm: the CLI was built without BLIS");
}

#endif

}  // namespace sinew::bench
