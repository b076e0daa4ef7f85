// The tile family: one compiled kernel (ISA, dtype, MR x NR) plus blocking
// and thread split, driven BLIS-style by portable code (tile_candidate.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tile/abi.h"
#include "sinew/kernels/candidate.h"

namespace sinew::kernels {

struct TileConfig {
  const tile::TileKernel* kernel = nullptr;
  // No K blocking: A and B are read in place where dtype and layout allow
  // (packed otherwise). For small M, where packing costs as much as the GEMM.
  bool direct = false;
  int64_t kc = 0, mc = 0, nc = 0;  // cache blocks along K, M, N (packed mode)
  char split = 'm';                // threads split the rows ('m') or the columns ('n')

  // "tile/avx512/f32/12x32/kc384_mc4096_nc512/split_m", "tile/avx512/f32/12x32/direct/split_n".
  std::string id() const;
};

// Parses a tile id; nullopt-like false when malformed or the kernel is not
// compiled in. Does not check that the CPU has the ISA.
bool parse_tile_id(std::string_view id, TileConfig* config);

// Every compiled kernel, of every ISA.
std::vector<const tile::TileKernel*> all_tile_kernels();

// The blocking the listed candidates use for a kernel, sized for 48 KiB L1
// and 1-2 MiB L2 per core (the A micro-panel of kc steps stays in L1, a
// kc x nc block of B in L2, an mc x kc block of A in L3).
TileConfig default_tile_config(const tile::TileKernel* kernel, char split);

std::unique_ptr<Candidate> make_tile_candidate(const TileConfig& config);

// tile/avx512/f32/stream_b (avx512/stream_b_avx512.cc): up to 8 rows of A
// against a row-major f32 B, which it reads once as sequential row streams.
// Register it only where the CPU runs AVX-512.
std::unique_ptr<Candidate> make_stream_b_candidate();

// Finishes `values` (p.batch x p.m x p.n summed products, accumulation
// dtype; p.out itself or a temporary) into p.out through `epi` with
// `kernel`'s vectorised pass, whole rows per task so that reductions never
// race (the caller starts them at their identity). The tile family's
// unfused mode, and the blas family's epilogue.
void finish_rows(const tile::TileKernel& kernel, const GemmProblem& p, const MatrixRef& values,
                 const BoundEpilogue& epi);

// finish_rows with the widest runnable tile kernel of values' dtype, the
// reductions started at their identity first: the epilogue of the kernels
// that compute plain values (the blas family, the streaming small-M one).
// Values may be p.out itself.
void finish_values(const GemmProblem& p, const BoundEpilogue& e, const MatrixRef& values);

}  // namespace sinew::kernels
