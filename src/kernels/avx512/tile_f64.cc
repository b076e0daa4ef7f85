// AVX-512 f64 FMA kernels.
#include <iterator>

#include "kernels/avx512/vec.h"
#include "kernels/tile/block.h"
#include "kernels/tile/pack.h"

namespace sinew::kernels::tile {
namespace {

template <int MR, int NV>
using K = FmaKernel<avx512::F64, MR, NV>;

template <int MR, int NV>
constexpr TileKernel kernel(const char* name) {
  return make_kernel<K<MR, NV>>(name, Isa::kAvx512, &pack_a<K<MR, NV>>, &pack_b<K<MR, NV>>);
}

constexpr TileKernel kKernels[] = {
    kernel<12, 2>("f64/12x16"),
    kernel<8, 3>("f64/8x24"),
};

}  // namespace

KernelList avx512_f64_kernels() { return {kKernels, static_cast<int>(std::size(kKernels))}; }

}  // namespace sinew::kernels::tile
