// Placeholder dispatch: a plain loop for f32/f64 until the tile and blas
// families land (the kernels issue replaces this file).
#include "sinew/kernels/gemm.h"

#include "sinew/core/error.h"
#include "sinew/tensor/dtype.h"

namespace sinew::kernels {
namespace {

template <class T>
void loop_mm(const TensorView& a, const TensorView& b, const TensorView& out, double alpha, double beta,
             const TensorView* bias) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const auto as = a.strides(), bs = b.strides(), os = out.strides();
  const T* pa = a.data_as<T>();
  const T* pb = b.data_as<T>();
  T* po = out.data_as<T>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(pa[i * as[0] + p * as[1]]) * double(pb[p * bs[0] + j * bs[1]]);
      double prior = 0;
      if (bias) {
        const T* pbias = bias->data_as<T>();
        auto bst = bias->strides();
        if (bias->dim() == 1) prior = pbias[j * bst[0]];
        else prior = pbias[i * bst[0] + (bias->shape()[1] == 1 ? 0 : j * bst[1])];
      } else if (beta != 0) {
        prior = po[i * os[0] + j * os[1]];
      }
      po[i * os[0] + j * os[1]] = static_cast<T>(alpha * acc + beta * prior);
    }
}

void check_mm(const TensorView& a, const TensorView& b, const TensorView& out) {
  if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2)
    throw InvalidArgument::make("a, b, out", a.to_string() + ", " + b.to_string() + ", " + out.to_string(),
                                "2-D views");
  if (a.shape()[1] != b.shape()[0] || out.shape()[0] != a.shape()[0] || out.shape()[1] != b.shape()[1])
    throw InvalidArgument::make("shapes", a.to_string() + " @ " + b.to_string() + " -> " + out.to_string(),
                                "a[M,K] @ b[K,N] -> out[M,N]");
  if (a.dtype() != b.dtype() || a.dtype() != out.dtype() ||
      (a.dtype() != DType::kF32 && a.dtype() != DType::kF64))
    throw InvalidArgument::make("dtype", std::string(dtype_name(a.dtype())), "f32 or f64 for all operands");
}

void run(const TensorView& a, const TensorView& b, const TensorView& out, double alpha, double beta,
         const TensorView* bias) {
  if (a.dtype() == DType::kF64) loop_mm<double>(a, b, out, alpha, beta, bias);
  else loop_mm<float>(a, b, out, alpha, beta, bias);
}

}  // namespace

void mm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& o) {
  check_mm(a, b, out);
  run(a, b, out, o.alpha, o.beta, nullptr);
}

void addmm(const TensorView& bias, const TensorView& a, const TensorView& b, const TensorView& out,
           const GemmOptions& o) {
  check_mm(a, b, out);
  run(a, b, out, o.alpha, o.beta, &bias);
}

void bmm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmOptions& o) {
  if (a.dim() != 3 || b.dim() != 3 || out.dim() != 3 || a.shape()[0] != b.shape()[0] ||
      a.shape()[0] != out.shape()[0])
    throw InvalidArgument::make("a, b, out", a.to_string() + ", " + b.to_string() + ", " + out.to_string(),
                                "3-D views with the same batch size");
  const size_t es = a.element_size();
  for (int64_t i = 0; i < a.shape()[0]; ++i) {
    auto slice = [&](const TensorView& t) {
      return TensorView(static_cast<char*>(t.data()) + i * t.strides()[0] * es, t.dtype(),
                        {t.shape()[1], t.shape()[2]}, {t.strides()[1], t.strides()[2]});
    };
    mm(slice(a), slice(b), slice(out), o);
  }
}

}  // namespace sinew::kernels
