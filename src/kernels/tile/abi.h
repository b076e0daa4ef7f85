// The plain-data boundary between the tile driver (portable code: blocking,
// threads, buffers) and the per-ISA kernels (packing, microkernel, fused
// store). Kernels are compiled with their ISA's flags, so nothing here may
// be an inline function or a template that both sides instantiate.
#pragma once

#include <cstdint>

#include "kernels/epilogue/bound.h"
#include "sinew/kernels/cpu_features.h"
#include "sinew/kernels/gemm_problem.h"

namespace sinew::kernels::tile {

// What a kernel multiplies: f32 or f64 FMAs (any float input converted
// while packing), or bf16 pairs through the bf16 dot-product instruction.
enum class KernelKind : uint8_t { kF32, kF64, kBf16Dot };

// How one block's tiles are finished.
struct StoreArgs {
  double alpha, beta;
  bool first, last;     // the block's position along K
  MatrixRef prior;      // beta's operand for the matrix (batch already applied); read when first && beta != 0
  void* acc;            // partial sums of earlier K blocks (accumulation dtype), block element (i, j) at acc + i * acc_ld + j
  int64_t acc_ld;
  MatrixRef out;        // the final output of the matrix (batch already applied)
  const BoundEpilogue* epilogue;  // batch already applied; nullptr: none (a plain conversion)
};

// One block: a packed (or direct) A block times a packed (or direct) B block.
struct BlockArgs {
  const void* a;        // packed: MR-row panels of kc_pad steps; direct: A's element (0, 0) of the block
  int64_t a_rs, a_cs;   // direct A strides in elements
  bool a_packed;
  const void* b;        // packed: NR-column panels; direct: B's element (0, 0) of the block
  int64_t b_rs;         // direct B: rows at stride b_rs, columns contiguous
  int64_t b_cs;         // direct B with b_dot: columns at stride b_cs, rows contiguous (and A's too)
  bool b_packed;
  bool b_dot;
  int64_t mc, nc, kc;   // block extent; kc = 0 multiplies nothing
  int64_t i0, j0;       // block origin in the output matrix
  StoreArgs store;
};

struct TileKernel {
  const char* name;     // "f32/12x32"
  Isa isa;
  KernelKind kind;
  int mr, nr;
  int kstep;            // K elements per packed step: 1, or 2 for bf16 pairs
  int packed_bytes;     // bytes per packed element
  // Packs rows [0, rows) x k of src (origin at the block) into MR-row panels,
  // zero-padding rows to MR and k to kstep.
  void (*pack_a)(const MatrixRef& src, int64_t rows, int64_t k, void* dst);
  // Packs k x cols of src into NR-column panels, zero-padded likewise.
  void (*pack_b)(const MatrixRef& src, int64_t k, int64_t cols, void* dst);
  void (*block)(const BlockArgs& args);
  // The epilogue as a separate vectorised pass over summed values: finishes
  // the block [mc, nc] at (i0, j0) from store.prior (alpha = beta = 1).
  void (*pass)(const BlockArgs& args);
};

// The kernels compiled into each ISA's sources.
struct KernelList {
  const TileKernel* data;
  int size;
};
KernelList avx512_f32_kernels();
KernelList avx512_f64_kernels();
KernelList avx512_bf16_kernels();
KernelList avx2_f32_kernels();
KernelList avx2_f64_kernels();
KernelList generic_kernels();

}  // namespace sinew::kernels::tile
