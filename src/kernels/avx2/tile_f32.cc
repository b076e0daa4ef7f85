// AVX2 f32 FMA kernels (also run f16 and bf16 inputs, converted while
// packing): 12 ymm accumulators, B loads and a broadcast in 16 registers.
#include <iterator>

#include "kernels/avx2/vec.h"
#include "kernels/tile/block.h"
#include "kernels/tile/pack.h"

namespace sinew::kernels::tile {
namespace {

template <int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  using K = FmaKernel<avx2::F32, MR, NV>;
  return make_kernel<K>(name, Isa::kAvx2, &pack_a<K>, &pack_b<K>);
}

constexpr TileKernel kKernels[] = {
    kernel<6, 2>("f32/6x16"),
    kernel<4, 3>("f32/4x24"),
};

}  // namespace

KernelList avx2_f32_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
