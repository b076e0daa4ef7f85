// Opens one ISA's copy of the linalg templates (see backend.h). A *_<isa>.cc
// defines SINEW_LINALG_AVX512 (or not), includes this, its *_impl.h headers
// and isa_end.h. Everything a template needs from outside is included here,
// before the target pragma, so that only sinew::linalg::detail::<isa> code
// is compiled for the wider ISA.
//
// GCC 12 flags the _mm512_undefined_* inside its own intrinsics headers
// (_mm512_reduce_add_* among them) as maybe- or plainly uninitialized (GCC
// PR 105593) wherever they inline.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <utility>
#include <vector>

#include "linalg/backend.h"
#include "sinew/core/aligned_buffer.h"
#include "sinew/core/thread_pool.h"
#include "sinew/kernels/gemm.h"
#include "sinew/tensor/tensor_view.h"

#ifdef SINEW_LINALG_AVX512
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw")
#define SINEW_LINALG_ISA avx512
#define SINEW_LINALG_TARGET __attribute__((target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw")))
#else
#define SINEW_LINALG_ISA generic
#define SINEW_LINALG_TARGET
#endif
