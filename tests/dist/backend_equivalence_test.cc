// The same random inputs through every backend give the same outputs:
// sinew over shared memory, sinew over UCX, and gloo as the reference peer.
// Two ranks, so every sum has one order and float results must match
// bitwise; integer ops are exact at any world size.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "rank_threads.h"
#include "sinew/dist/transport.h"

namespace sinew::dist {
namespace {

struct Outputs {
  std::map<std::string, std::vector<std::vector<uint8_t>>> per_op;  // op -> per-rank bytes
};

template <class T>
std::vector<T> random_vec(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  if constexpr (std::is_floating_point_v<T>) {
    std::normal_distribution<double> d(0.0, 1e3);
    for (auto& x : v) x = static_cast<T>(d(gen));
  } else {
    std::uniform_int_distribution<int64_t> d(-1000000, 1000000);
    for (auto& x : v) x = static_cast<T>(d(gen));
  }
  return v;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

Outputs run_all(int W, const std::string& backend, const std::string& transport) {
  Outputs out;
  std::mutex mu;
  auto record = [&](const std::string& op, int rank, std::vector<uint8_t> b) {
    std::lock_guard<std::mutex> g(mu);
    auto& slot = out.per_op[op];
    slot.resize(W);
    slot[rank] = std::move(b);
  };
  sinew::testing::run_group(
      W, backend,
      [&](ProcessGroup& pg) {
        const int me = pg.rank();
        const int64_t n = 100003;  // prime: uneven segments and chunks everywhere
        {
          auto v = random_vec<float>(n, 17 + me);
          pg.allreduce(TensorView::flat(v.data(), DType::kF32, n), ReduceKind::kSum)->wait();
          record("allreduce_f32_sum", me, bytes_of(v));
        }
        {
          auto v = random_vec<double>(n, 29 + me);
          pg.allreduce(TensorView::flat(v.data(), DType::kF64, n), ReduceKind::kMax)->wait();
          record("allreduce_f64_max", me, bytes_of(v));
        }
        {
          auto v = random_vec<int64_t>(n, 31 + me);
          pg.allreduce(TensorView::flat(v.data(), DType::kI64, n), ReduceKind::kBxor)->wait();
          record("allreduce_i64_bxor", me, bytes_of(v));
        }
        {
          auto in = random_vec<float>(n * W, 41 + me);
          std::vector<float> o(n);
          pg.reduce_scatter_tensor(TensorView::flat(o.data(), DType::kF32, n),
                                   TensorView::flat(in.data(), DType::kF32, n * W), ReduceKind::kSum)
              ->wait();
          record("reduce_scatter_f32", me, bytes_of(o));
        }
        {
          auto in = random_vec<int32_t>(n, 53 + me);
          std::vector<int32_t> o(n * W);
          pg.allgather_into_tensor(TensorView::flat(o.data(), DType::kI32, n * W),
                                   TensorView::flat(in.data(), DType::kI32, n))
              ->wait();
          record("allgather_i32", me, bytes_of(o));
        }
        {
          auto in = random_vec<int64_t>(n * W, 67 + me);
          std::vector<int64_t> o(n * W);
          pg.all_to_all(TensorView::flat(o.data(), DType::kI64, n * W), TensorView::flat(in.data(), DType::kI64, n * W))
              ->wait();
          record("all_to_all_i64", me, bytes_of(o));
        }
        {
          auto v = random_vec<double>(n, 71 + me);
          pg.broadcast(TensorView::flat(v.data(), DType::kF64, n), W - 1)->wait();
          record("broadcast_f64", me, bytes_of(v));
        }
      },
      std::chrono::milliseconds(60000), transport);
  return out;
}

TEST(BackendEquivalence, SameInputsSameOutputsOnEveryBackend) {
  const int W = 2;
  std::vector<std::pair<std::string, std::string>> backends = {{"sinew", "auto"}};
  if (ucx_transport_available()) backends.push_back({"sinew", "ucx"});
  for (const auto& b : available_backends())
    if (b == "gloo") backends.push_back({"gloo", "auto"});
  ASSERT_GE(backends.size(), 2u) << "need a peer backend to compare with";
  Outputs ref = run_all(W, backends[0].first, backends[0].second);
  for (size_t i = 1; i < backends.size(); ++i) {
    Outputs got = run_all(W, backends[i].first, backends[i].second);
    for (const auto& [op, per_rank] : ref.per_op)
      for (int r = 0; r < W; ++r)
        EXPECT_TRUE(got.per_op[op][r] == per_rank[r])
            << op << " rank " << r << ": " << backends[i].first << "/" << backends[i].second
            << " differs from sinew/shm";
  }
}

}  // namespace
}  // namespace sinew::dist
