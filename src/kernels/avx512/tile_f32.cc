// AVX-512 f32 FMA kernels (also run f16 and bf16 inputs, converted while
// packing). 24-28 zmm accumulators: enough independent FMAs to cover the
// latency of two FMA pipes, with loads of B and broadcasts of A to spare.
#include <iterator>

#include "kernels/avx512/vec.h"
#include "kernels/tile/block.h"
#include "kernels/tile/pack.h"

namespace sinew::kernels::tile {
namespace {

template <int MR, int NV>
using K = FmaKernel<avx512::F32, MR, NV>;

template <int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  return make_kernel<K<MR, NV>>(name, Isa::kAvx512, &pack_a<K<MR, NV>>, &pack_b<K<MR, NV>>);
}

constexpr TileKernel kKernels[] = {
    kernel<12, 2>("f32/12x32"),
    kernel<14, 2>("f32/14x32"),
    kernel<8, 3>("f32/8x48"),
    kernel<6, 4>("f32/6x64"),
};

}  // namespace

KernelList avx512_f32_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
