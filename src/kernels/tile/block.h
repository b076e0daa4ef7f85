// The two inner loops of the GEMM over one block: each MR-row panel of A
// (kept in L1) meets every NR-column panel of B (the block stays in L2),
// and each product is finished by finish_tile. Instantiated per kernel
// policy K (FmaKernel, or the bf16 dot-product kernel) in each ISA's sources.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/tile/abi.h"
#include "kernels/tile/micro.h"
#include "kernels/tile/store.h"

namespace sinew::kernels::tile {

template <class K, bool kPackedA>
void multiply_any_b(BMode mode, int64_t steps, const typename K::P* a, int64_t a_rs, int64_t a_cs, int mr,
                    const typename K::P* b, int64_t b_rs, int nr, typename K::T (&tile)[K::kMR][K::kNR]) {
  if constexpr (K::kDirectOk) {
    if (mode == BMode::kDirect) return K::template multiply<kPackedA, BMode::kDirect>(steps, a, a_rs, a_cs, mr, b, b_rs, nr, tile);
    if (mode == BMode::kDirectTail)
      return K::template multiply<kPackedA, BMode::kDirectTail>(steps, a, a_rs, a_cs, mr, b, b_rs, nr, tile);
  }
  K::template multiply<kPackedA, BMode::kPacked>(steps, a, a_rs, a_cs, mr, b, b_rs, nr, tile);
}

// tile[0, mr) = A (mr < MR rows) * B through the kernel built for exactly
// mr rows, where the kernel has such siblings (FmaKernel::WithRows): the
// full-height tile spends MR rows' FMAs on mr rows, which was 3% of M = 128
// with MR = 6. A packed panel is read as a strided A (rows 1 apart, steps
// MR apart). Returns false where the caller must use the full-height tile.
template <class K, bool kPackedA>
bool multiply_short(BMode mode, int64_t steps, const typename K::P* a, int64_t a_rs, int64_t a_cs, int mr,
                    const typename K::P* b, int64_t b_rs, int nr, typename K::T (&tile)[K::kMR][K::kNR]) {
  if constexpr (requires { typename K::template WithRows<1>; }) {
    if (mode == BMode::kDirectTail) return false;
    const int64_t rs = kPackedA ? 1 : a_rs, cs = kPackedA ? K::kMR : a_cs;
    auto rows = [&]<int R>(std::integral_constant<int, R>) {
      using S = typename K::template WithRows<R>;
      typename K::T sub[R][K::kNR];
      if (mode == BMode::kPacked) S::template multiply<false, BMode::kPacked>(steps, a, rs, cs, R, b, b_rs, nr, sub);
      else S::template multiply<false, BMode::kDirect>(steps, a, rs, cs, R, b, b_rs, nr, sub);
      std::memcpy(tile, sub, sizeof(sub));
      return true;
    };
    return [&]<int... R>(std::integer_sequence<int, R...>) {
      return ((mr == R + 1 && rows(std::integral_constant<int, R + 1>{})) || ...);
    }(std::make_integer_sequence<int, K::kMR - 1>{});
  }
  return false;
}

// Starts loading the rows of C the tile's finish will read (partial sums,
// or the output), so that they arrive while the microkernel runs.
template <class K>
[[gnu::always_inline]] inline void prefetch_c(const BlockArgs& ba, int64_t ir, int64_t jr, int mr) {
  using T = typename K::T;
  constexpr int NR = K::kNR;
  const StoreArgs& st = ba.store;
  const char* p;
  int64_t ld;
  if (!st.first) {
    p = reinterpret_cast<const char*>(static_cast<const T*>(st.acc) + ir * st.acc_ld + jr);
    ld = st.acc_ld * static_cast<int64_t>(sizeof(T));
  } else if (st.last && st.out.cs == 1) {
    p = elem_ptr(st.out, ba.i0 + ir, ba.j0 + jr);
    ld = st.out.rs * static_cast<int64_t>(dtype_size(st.out.dtype));
  } else {
    return;
  }
  for (int i = 0; i < mr; ++i)
    for (int c = 0; c < NR * static_cast<int>(sizeof(T)); c += 64) __builtin_prefetch(p + i * ld + c, 1, 3);
}

template <class K>
void run_block(const BlockArgs& ba) {
  using P = typename K::P;
  using T = typename K::T;
  constexpr int MR = K::kMR;
  constexpr int NR = K::kNR;
  const int64_t steps = (ba.kc + K::kStep - 1) / K::kStep;
  alignas(64) T tile[MR][NR];
  for (int64_t ir = 0; ir < ba.mc; ir += MR) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, ba.mc - ir));
    for (int64_t jr = 0; jr < ba.nc; jr += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, ba.nc - jr));
      const P* b;
      BMode mode = BMode::kPacked;
      if (ba.b_packed) {
        b = static_cast<const P*>(ba.b) + (jr / NR) * NR * steps;
      } else {
        b = static_cast<const P*>(ba.b) + jr;
        mode = nr == NR ? BMode::kDirect : BMode::kDirectTail;
      }
      prefetch_c<K>(ba, ir, jr, mr);
      if constexpr (requires { &K::template multiply_update<true, BMode::kPacked>; }) {
        // A full tile whose result goes to a plain row-major array (the
        // output, or the partial sums of earlier K blocks) with no epilogue
        // yet: finish in registers (micro.h, multiply_update), as
        // finish_tile would, without the tile's round trip through memory.
        const StoreArgs& st = ba.store;
        const bool plain_out = st.last && st.out.cs == 1 && st.out.dtype == dtype_of<T>();
        // An epilogue without a final scale then runs on the stored rows,
        // still in L1 (epilogue_rows), instead of on the tile array.
        const BoundEpilogue* epi = plain_out && st.epilogue && st.epilogue->cast_scale == 1.0 ? st.epilogue : nullptr;
        const bool to_out = plain_out && (!st.epilogue || epi);
        if (mr == MR && nr == NR && (ba.a_packed || K::kDirectOk) && mode != BMode::kDirectTail && !ba.b_dot &&
            (to_out || !st.last) &&
            (!st.first || st.beta == 0 || (st.prior.cs == 1 && st.prior.dtype == dtype_of<T>()))) {
          T* partial = st.acc ? static_cast<T*>(st.acc) + ir * st.acc_ld + jr : nullptr;
          T* out = to_out ? reinterpret_cast<T*>(elem_ptr(st.out, ba.i0 + ir, ba.j0 + jr)) : partial;
          const int64_t out_ld = to_out ? st.out.rs : st.acc_ld;
          const T* prior = partial;  // later K blocks add to the partial sums
          int64_t prior_ld = st.acc_ld;
          T beta = 1;
          if (st.first) {
            prior = st.beta == 0 ? nullptr : reinterpret_cast<const T*>(elem_ptr(st.prior, ba.i0 + ir, ba.j0 + jr));
            prior_ld = st.prior.rs;
            beta = static_cast<T>(st.beta);
          }
          const T alpha = static_cast<T>(st.alpha);
          auto update = [&](auto packed_a, const P* a, int64_t a_rs, int64_t a_cs) {
            constexpr bool kPackedA = decltype(packed_a)::value;
            if (mode == BMode::kPacked)
              K::template multiply_update<kPackedA, BMode::kPacked>(steps, a, a_rs, a_cs, b, ba.b_rs, alpha, beta,
                                                                    prior, prior_ld, out, out_ld);
            else
              K::template multiply_update<kPackedA, BMode::kDirect>(steps, a, a_rs, a_cs, b, ba.b_rs, alpha, beta,
                                                                    prior, prior_ld, out, out_ld);
          };
          // The condition above admits an unpacked A only where the kernel reads one.
          if (ba.a_packed)
            update(std::true_type{}, static_cast<const P*>(ba.a) + (ir / MR) * MR * steps, 0, 0);
          else if constexpr (K::kDirectOk)
            update(std::false_type{}, static_cast<const P*>(ba.a) + ir * ba.a_rs, ba.a_rs, ba.a_cs);
          if (epi) epilogue_rows<typename K::Vec>(*epi, out, out_ld, ba.i0 + ir, ba.j0 + jr, MR, NR);
          continue;
        }
      }
      if constexpr (K::kDirectOk) {
        if (!ba.b_packed && ba.b_dot) {
          const P* a = static_cast<const P*>(ba.a) + ir * ba.a_rs;
          K::multiply_dot(ba.kc, a, ba.a_rs, mr, static_cast<const P*>(ba.b) + jr * ba.b_cs, ba.b_cs, nr, tile);
          finish_tile<typename K::Vec, MR, NR>(ba.store, ba.i0, ba.j0, ir, jr, mr, nr, tile);
          continue;
        }
      }
      if (ba.a_packed) {
        const P* a = static_cast<const P*>(ba.a) + (ir / MR) * MR * steps;
        if (mr == MR || !multiply_short<K, true>(mode, steps, a, 0, 0, mr, b, ba.b_rs, nr, tile))
          multiply_any_b<K, true>(mode, steps, a, 0, 0, mr, b, ba.b_rs, nr, tile);
      } else {
        const P* a = static_cast<const P*>(ba.a) + ir * ba.a_rs;
        if (mr == MR || !multiply_short<K, false>(mode, steps, a, ba.a_rs, ba.a_cs, mr, b, ba.b_rs, nr, tile))
          multiply_any_b<K, false>(mode, steps, a, ba.a_rs, ba.a_cs, mr, b, ba.b_rs, nr, tile);
      }
      finish_tile<typename K::Vec, MR, NR>(ba.store, ba.i0, ba.j0, ir, jr, mr, nr, tile);
    }
  }
}

template <class K>
void run_pass(const BlockArgs& ba) {
  using T = typename K::T;
  constexpr int MR = K::kMR;
  constexpr int NR = K::kNR;
  alignas(64) T tile[MR][NR];
  for (int64_t ir = 0; ir < ba.mc; ir += MR) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, ba.mc - ir));
    for (int64_t jr = 0; jr < ba.nc; jr += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, ba.nc - jr));
      std::memset(tile, 0, sizeof(tile));
      finish_tile<typename K::Vec, MR, NR>(ba.store, ba.i0, ba.j0, ir, jr, mr, nr, tile);
    }
  }
}

template <class K>
constexpr TileKernel make_kernel(const char* name, Isa isa,
                                 void (*pack_a)(const MatrixRef&, int64_t, int64_t, void*),
                                 void (*pack_b)(const MatrixRef&, int64_t, int64_t, void*)) {
  return TileKernel{name,     isa,    K::kKind, K::kMR, K::kNR, K::kStep, static_cast<int>(sizeof(typename K::P)) / K::kStep,
                    pack_a, pack_b, &run_block<K>, &run_pass<K>};
}

}  // namespace sinew::kernels::tile
