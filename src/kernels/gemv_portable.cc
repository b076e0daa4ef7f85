// The plain C++ GEMV kernel: decodes one weight row at a time into f32 and
// takes its dot product with every row of x.
#include <cstring>
#include <vector>

#include "kernels/gemv_kernels.h"
#include "sinew/kernels/formats.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels::gemv_detail {

void gemv_portable(const GemvArgs& a, int64_t n0, int64_t n1) {
  std::vector<float> row(static_cast<size_t>(a.k));
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* w = a.w + n * a.ldw;
    switch (a.format) {
      case WeightFormat::kF32:
        std::memcpy(row.data(), w, static_cast<size_t>(a.k) * 4);
        break;
      case WeightFormat::kBF16:
        for (int64_t k = 0; k < a.k; ++k) {
          uint16_t v;
          std::memcpy(&v, w + 2 * k, 2);
          row[k] = bf16_to_f32(v);
        }
        break;
      case WeightFormat::kE4M3:
        for (int64_t k = 0; k < a.k; ++k) row[k] = decode_e4m3fn(w[k]);
        break;
      case WeightFormat::kE5M2:
        for (int64_t k = 0; k < a.k; ++k) row[k] = decode_e5m2(w[k]);
        break;
      case WeightFormat::kNVFP4: {
        const uint8_t* s = a.block_scale + n * a.ld_scale;
        for (int64_t k = 0; k < a.k; ++k) row[k] = e2m1_at(w, k) * decode_e4m3fn(s[k / 16]);
        break;
      }
    }
    for (int i = 0; i < a.m; ++i) {
      const float* x = a.x + i * a.ldx;
      float acc = 0;
      for (int64_t k = 0; k < a.k; ++k) acc += row[k] * x[k];
      a.y[i * a.ldy + n] = acc;
    }
  }
}

}  // namespace sinew::kernels::gemv_detail
