// The collective contract, ranks as threads, against exact expected values:
// world sizes x element counts (0, 1, primes, larger than one shared-memory
// slot) x dtypes x reduce ops, and the shared collective checks, on every
// backend built in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "rank_threads.h"
#include "sinew/core/error.h"
#include "sinew/dist/transport.h"

namespace sinew::dist {
namespace {

using sinew::testing::get_value;
using sinew::testing::input_value;
using sinew::testing::run_group;
using sinew::testing::set_value;

// (backend, transport): the native backend over shared memory and over UCX
// (the between-hosts algorithms), and gloo as the reference peer.
std::vector<std::pair<std::string, std::string>> backends_under_test() {
  std::vector<std::pair<std::string, std::string>> out = {{"sinew", "auto"}};
  if (ucx_transport_available()) out.push_back({"sinew", "ucx"});
  for (const auto& b : available_backends())
    if (b == "gloo") out.push_back({b, "auto"});
  return out;
}

struct Buf {
  std::vector<uint8_t> bytes;
  DType dt;
  Buf(DType t, int64_t n) : bytes(std::max<int64_t>(n, 1) * dtype_size(t)), dt(t) {}
  TensorView view(int64_t n) { return TensorView::flat(bytes.data(), dt, n); }
  double at(size_t i) const { return get_value(bytes.data(), dt, i); }
  void set(size_t i, double v) { set_value(bytes.data(), dt, i, v); }
};

// Products of the usual inputs overflow exact ranges: prod uses 1s and 2s.
double op_input(DType t, ReduceKind k, int r, size_t i) {
  return k == ReduceKind::kProd ? 1.0 + static_cast<double>((r + i) % 2) : input_value(t, r, i);
}

double expected_reduce(DType t, ReduceKind k, int world, size_t i, double factor = 1.0) {
  double acc = 0;
  for (int r = 0; r < world; ++r) {
    double v = op_input(t, k, r, i);
    if (k == ReduceKind::kPremulSum) v *= factor;
    if (r == 0) {
      acc = v;
      continue;
    }
    auto a = static_cast<int64_t>(acc), b = static_cast<int64_t>(v);
    switch (k) {
      case ReduceKind::kSum:
      case ReduceKind::kAvg:
      case ReduceKind::kPremulSum: acc += v; break;
      case ReduceKind::kProd: acc *= v; break;
      case ReduceKind::kMin: acc = std::min(acc, v); break;
      case ReduceKind::kMax: acc = std::max(acc, v); break;
      case ReduceKind::kBand: acc = static_cast<double>(a & b); break;
      case ReduceKind::kBor: acc = static_cast<double>(a | b); break;
      case ReduceKind::kBxor: acc = static_cast<double>(a ^ b); break;
    }
  }
  if (t == DType::kBool && (k == ReduceKind::kSum || k == ReduceKind::kMax)) acc = acc != 0;
  if (k == ReduceKind::kAvg) acc /= world;
  // Round through the dtype like the backend's final store.
  Buf b(t, 1);
  b.set(0, acc);
  return b.at(0);
}

struct Case {
  std::string backend;
  int world;
  std::string transport;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.backend << "/" << c.transport << "/ws" << c.world; }

void run_case(const Case& c, const std::function<void(ProcessGroup&)>& fn) {
  run_group(c.world, c.backend, fn, std::chrono::milliseconds(60000), c.transport);
}

class Collectives : public ::testing::TestWithParam<Case> {};

const int64_t kCounts[] = {0, 1, 7, 1031, 300007};  // 300007 f32 > one 1 MiB slot

TEST_P(Collectives, AllreduceEveryDtypeAndOp) {
  const auto& [backend, W, transport] = GetParam();
  struct Combo {
    DType t;
    ReduceKind k;
  };
  std::vector<Combo> combos;
  for (DType t : kAllDTypes) {
    combos.push_back({t, ReduceKind::kSum});
    combos.push_back({t, ReduceKind::kMax});
    combos.push_back({t, ReduceKind::kMin});
  }
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    combos.push_back({t, ReduceKind::kAvg});
    combos.push_back({t, ReduceKind::kPremulSum});
  }
  for (DType t : {DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    combos.push_back({t, ReduceKind::kBand});
    combos.push_back({t, ReduceKind::kBor});
    combos.push_back({t, ReduceKind::kBxor});
  }
  combos.push_back({DType::kF32, ReduceKind::kProd});
  combos.push_back({DType::kI64, ReduceKind::kProd});
  run_case(GetParam(), [&](ProcessGroup& pg) {
    for (auto [t, k] : combos) {
      for (int64_t n : kCounts) {
        if (n > 2000 && !(t == DType::kF32 || t == DType::kBF16)) continue;  // keep it quick
        Buf b(t, n);
        for (int64_t i = 0; i < n; ++i) b.set(i, op_input(t, k, pg.rank(), i));
        ReduceOp op = k == ReduceKind::kPremulSum ? ReduceOp::premul_sum(2.0) : ReduceOp(k);
        pg.allreduce(b.view(n), op)->wait();
        for (int64_t i = 0; i < n; ++i) {
          double want = expected_reduce(t, k, W, i, 2.0);
          if (k == ReduceKind::kAvg)
            ASSERT_NEAR(b.at(i), want, std::abs(want) * 1e-2 + 1e-6) << dtype_name(t) << " n=" << n << " i=" << i;
          else
            ASSERT_EQ(b.at(i), want) << dtype_name(t) << " " << reduce_kind_name(k) << " n=" << n << " i=" << i
                                     << " rank " << pg.rank();
        }
      }
    }
  });
}

TEST_P(Collectives, BroadcastReduceFromEveryRoot) {
  const auto& [backend, W, transport] = GetParam();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    for (int root = 0; root < W; ++root) {
      for (int64_t n : kCounts) {
        Buf b(DType::kF32, n);
        for (int64_t i = 0; i < n; ++i) b.set(i, pg.rank() == root ? input_value(DType::kF32, root, i) : -1);
        pg.broadcast(b.view(n), root)->wait();
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b.at(i), input_value(DType::kF32, root, i));

        Buf c(DType::kI64, n);
        for (int64_t i = 0; i < n; ++i) c.set(i, input_value(DType::kI64, pg.rank(), i));
        pg.reduce(c.view(n), root, ReduceKind::kSum)->wait();
        for (int64_t i = 0; i < n; ++i) {
          double want = pg.rank() == root ? expected_reduce(DType::kI64, ReduceKind::kSum, W, i)
                                          : input_value(DType::kI64, pg.rank(), i);
          ASSERT_EQ(c.at(i), want) << "root " << root << " n " << n;
        }
      }
    }
  });
}

TEST_P(Collectives, GatherFamilies) {
  const auto& [backend, W, transport] = GetParam();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    for (int64_t m : kCounts) {
      DType t = DType::kI32;
      Buf in(t, m);
      for (int64_t i = 0; i < m; ++i) in.set(i, me * 1000 + i % 1000);
      // allgather into one tensor
      Buf out(t, m * W);
      pg.allgather_into_tensor(out.view(m * W), in.view(m))->wait();
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < m; ++i) ASSERT_EQ(out.at(r * m + i), r * 1000 + i % 1000);
      // list form
      std::vector<Buf> outs;
      for (int r = 0; r < W; ++r) outs.emplace_back(t, m);
      std::vector<TensorView> views;
      for (auto& o : outs) views.push_back(o.view(m));
      pg.allgather(views, in.view(m))->wait();
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < m; ++i) ASSERT_EQ(outs[r].at(i), r * 1000 + i % 1000);
      // gather and scatter at a middle root
      const int root = W / 2;
      std::vector<Buf> g;
      std::vector<TensorView> gv;
      for (int r = 0; r < W; ++r) g.emplace_back(t, m);
      for (auto& o : g) gv.push_back(o.view(m));
      pg.gather(me == root ? gv : std::vector<TensorView>{}, in.view(m), root)->wait();
      if (me == root)
        for (int r = 0; r < W; ++r)
          for (int64_t i = 0; i < m; ++i) ASSERT_EQ(g[r].at(i), r * 1000 + i % 1000);
      Buf s(t, m);
      pg.scatter(s.view(m), me == root ? gv : std::vector<TensorView>{}, root)->wait();
      for (int64_t i = 0; i < m; ++i) ASSERT_EQ(s.at(i), me * 1000 + i % 1000);
    }
  });
}

TEST_P(Collectives, ReduceScatterBothForms) {
  const auto& [backend, W, transport] = GetParam();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    for (int64_t m : kCounts) {
      for (auto t : {DType::kF32, DType::kI64, DType::kBF16}) {
        if (m > 2000 && t != DType::kF32) continue;
        Buf in(t, m * W);
        for (int64_t i = 0; i < m * W; ++i) in.set(i, input_value(t, me, i));
        Buf out(t, m);
        pg.reduce_scatter_tensor(out.view(m), in.view(m * W), ReduceKind::kSum)->wait();
        for (int64_t i = 0; i < m; ++i)
          ASSERT_EQ(out.at(i), expected_reduce(t, ReduceKind::kSum, W, me * m + i)) << dtype_name(t) << " m " << m;
        // input untouched
        for (int64_t i = 0; i < m * W; ++i) ASSERT_EQ(in.at(i), input_value(t, me, i));
        std::vector<TensorView> list;
        for (int r = 0; r < W; ++r)
          list.push_back(TensorView::flat(in.bytes.data() + r * m * dtype_size(t), t, m));
        Buf out2(t, m);
        pg.reduce_scatter(out2.view(m), list, ReduceKind::kMax)->wait();
        for (int64_t i = 0; i < m; ++i) ASSERT_EQ(out2.at(i), expected_reduce(t, ReduceKind::kMax, W, me * m + i));
      }
    }
  });
}

TEST_P(Collectives, AllToAllEvenAndUneven) {
  const auto& [backend, W, transport] = GetParam();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{70001}}) {
      Buf in(DType::kI32, m * W), out(DType::kI32, m * W);
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < m; ++i) in.set(r * m + i, me * 100000 + r * 1000 + i % 1000);
      pg.all_to_all(out.view(m * W), in.view(m * W))->wait();
      for (int r = 0; r < W; ++r)
        for (int64_t i = 0; i < m; ++i) ASSERT_EQ(out.at(r * m + i), r * 100000 + me * 1000 + i % 1000);
    }
    // Uneven: rank s sends (s + d) % 3 * k elements to rank d.
    for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{90001}}) {
      std::vector<int64_t> in_splits(W), out_splits(W);
      for (int d = 0; d < W; ++d) in_splits[d] = (me + d) % 3 * k;
      for (int s = 0; s < W; ++s) out_splits[s] = (s + me) % 3 * k;
      int64_t nin = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
      int64_t nout = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
      Buf in(DType::kI64, nin), out(DType::kI64, nout);
      int64_t off = 0;
      for (int d = 0; d < W; ++d)
        for (int64_t i = 0; i < in_splits[d]; ++i) in.set(off++, me * 1000000 + d * 100000 + i);
      pg.all_to_all_v(out.view(nout), in.view(nin), out_splits, in_splits)->wait();
      off = 0;
      for (int s = 0; s < W; ++s)
        for (int64_t i = 0; i < out_splits[s]; ++i) ASSERT_EQ(out.at(off++), s * 1000000 + me * 100000 + i);
    }
  });
}

TEST_P(Collectives, BarrierSendRecvAndBatch) {
  const auto& [backend, W, transport] = GetParam();
  if (W < 2) GTEST_SKIP() << "point-to-point needs two ranks";
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    pg.barrier()->wait();
    const int right = (me + 1) % W, left = (me - 1 + W) % W;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{200003}}) {
      Buf s(DType::kF32, n), r(DType::kF32, n);
      for (int64_t i = 0; i < n; ++i) s.set(i, me * 10 + i % 10);
      // A ring exchange in one batch cannot deadlock.
      pg.batch_isend_irecv({{P2POp::Kind::kSend, s.view(n), right, 3}, {P2POp::Kind::kRecv, r.view(n), left, 3}})
          ->wait();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.at(i), left * 10 + i % 10);
    }
    // Plain send then recv between 0 and 1.
    int64_t v = me == 0 ? 42 : 0;
    if (me == 0) pg.send(TensorView::flat(&v, DType::kI64, 1), 1, 7)->wait();
    if (me == 1) {
      pg.recv(TensorView::flat(&v, DType::kI64, 1), 0, 7)->wait();
      EXPECT_EQ(v, 42);
    }
    pg.barrier()->wait();
  });
}

TEST_P(Collectives, StridedTensors) {
  const auto& [backend, W, transport] = GetParam();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    // A 4x3 view of the first three columns of a 4x5 matrix.
    std::vector<float> m(20, -7.0f);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) m[i * 5 + j] = static_cast<float>(pg.rank() + i * 3 + j);
    TensorView v(m.data(), DType::kF32, {4, 3}, {5, 1});
    ASSERT_FALSE(v.is_contiguous());
    pg.allreduce(v, ReduceKind::kSum)->wait();
    float base = static_cast<float>(W * (W - 1) / 2);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 3; ++j) ASSERT_EQ(m[i * 5 + j], base + W * (i * 3 + j));
      for (int j = 3; j < 5; ++j) ASSERT_EQ(m[i * 5 + j], -7.0f) << "padding must be untouched";
    }
  });
}

TEST_P(Collectives, SplitAndNewGroup) {
  const auto& [backend, W, transport] = GetParam();
  if (W < 2) GTEST_SKIP();
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    // Even and odd ranks, ordered by descending key.
    auto sub = pg.split(me % 2, -me);
    ASSERT_NE(sub, nullptr);
    int members = (W + (me % 2 == 0 ? 1 : 0)) / 2;
    EXPECT_EQ(sub->size(), members);
    int64_t v = me;
    sub->allreduce(TensorView::flat(&v, DType::kI64, 1), ReduceKind::kSum)->wait();
    int64_t want = 0;
    for (int r = me % 2; r < W; r += 2) want += r;
    EXPECT_EQ(v, want);
    // Ranks outside the color list get nullptr.
    auto none = pg.split(me == 0 ? -1 : 1, me);
    if (me == 0) EXPECT_EQ(none, nullptr);
    else EXPECT_EQ(none->size(), W - 1);
    auto g = pg.new_group({0, W - 1});
    if (me == 0 || me == W - 1) {
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->rank(), me == 0 ? 0 : 1);
      int64_t x = 1;
      g->allreduce(TensorView::flat(&x, DType::kI64, 1))->wait();
      EXPECT_EQ(x, W > 1 ? 2 : 1);
    } else {
      EXPECT_EQ(g, nullptr);
    }
  });
}

TEST_P(Collectives, MismatchedArgumentsNameBothSides) {
  const auto& [backend, W, transport] = GetParam();
  if (W < 2 || backend != "sinew") GTEST_SKIP() << "cross-checks are the sinew backend's";
  run_case(GetParam(), [&](ProcessGroup& pg) {
    const int me = pg.rank();
    // count mismatch
    std::vector<float> a(me == W - 1 ? 5 : 4, 1.0f);
    try {
      pg.allreduce(TensorView::flat(a.data(), DType::kF32, static_cast<int64_t>(a.size())))->wait();
      ADD_FAILURE() << "count mismatch not detected on rank " << me;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("count 4"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("count 5"));
    }
    // dtype mismatch
    std::vector<int64_t> b(4, 1);
    try {
      pg.allreduce(TensorView::flat(b.data(), me == 0 ? DType::kI64 : DType::kF64, 4))->wait();
      ADD_FAILURE() << "dtype mismatch not detected";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("int64"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("float64"));
    }
    // root mismatch
    try {
      pg.broadcast(TensorView::flat(b.data(), DType::kI64, 4), me == 0 ? 0 : 1)->wait();
      ADD_FAILURE() << "root mismatch not detected";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("root"));
    }
    // op mismatch
    try {
      pg.allreduce(TensorView::flat(b.data(), DType::kI64, 4), me == 0 ? ReduceKind::kSum : ReduceKind::kMax)->wait();
      ADD_FAILURE() << "op mismatch not detected";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("op max"));
    }
    // different collectives
    try {
      if (me == 0) pg.barrier()->wait();
      else pg.allreduce(TensorView::flat(b.data(), DType::kI64, 4))->wait();
      ADD_FAILURE() << "collective mismatch not detected";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("barrier"));
    }
    // Every other collective with one rank's count off by one.
    std::vector<int64_t> in(2 * W + 2, 1), out(2 * W * W + 2, 0);
    const int64_t m = me == W - 1 ? 2 : 1;  // elements per rank
    auto view = [](std::vector<int64_t>& x, int64_t n) { return TensorView::flat(x.data(), DType::kI64, n); };
    std::vector<std::pair<const char*, std::function<WorkPtr()>>> calls = {
        {"broadcast", [&] { return pg.broadcast(view(in, m), 0); }},
        {"reduce", [&] { return pg.reduce(view(in, m), 0); }},
        {"allgather", [&] { return pg.allgather_into_tensor(view(out, m * W), view(in, m)); }},
        {"reduce_scatter", [&] { return pg.reduce_scatter_tensor(view(out, m), view(in, m * W)); }},
        {"gather", [&] {
           std::vector<TensorView> outs;
           for (int r = 0; r < W; ++r) outs.push_back(TensorView::flat(out.data() + r * m, DType::kI64, m));
           return pg.gather(me == 0 ? outs : std::vector<TensorView>{}, view(in, m), 0);
         }},
        {"scatter", [&] {
           std::vector<TensorView> ins;
           for (int r = 0; r < W; ++r) ins.push_back(TensorView::flat(in.data() + r * m, DType::kI64, m));
           return pg.scatter(view(out, m), me == 0 ? ins : std::vector<TensorView>{}, 0);
         }},
    };
    for (auto& [name, call] : calls) {
      try {
        call()->wait();
        ADD_FAILURE() << name << ": count mismatch not detected on rank " << me;
      } catch (const InvalidArgument& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr(name)) << name;
        EXPECT_THAT(e.what(), ::testing::HasSubstr("count 1")) << name;
        EXPECT_THAT(e.what(), ::testing::HasSubstr("count 2")) << name;
      }
    }
    // uneven all_to_all splits that disagree
    std::vector<int64_t> in_s(W, 1), out_s(W, 1);
    if (me == 0) {
      in_s[1] = 2;
      in_s[0] = 0;
    }
    std::vector<int64_t> ib(W, 0), ob(W, 0);
    try {
      pg.all_to_all_v(TensorView::flat(ob.data(), DType::kI64, W), TensorView::flat(ib.data(), DType::kI64, W), out_s,
                      in_s)
          ->wait();
      ADD_FAILURE() << "split mismatch not detected";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("split"));
    }
    // The group still works after argument errors.
    int64_t v = 1;
    pg.allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
    EXPECT_EQ(v, W);
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& [b, t] : backends_under_test())
    for (int w : {1, 2, 3, 4, 8}) out.push_back({b, w, t});
  return out;
}

std::string case_name(const Case& c);

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

// The shared collective checks (collective_checks.h, which the mpi backend
// runs too) and abort, on every backend under test: worlds of 1-4 ranks.
class CollectiveChecks : public ::testing::TestWithParam<std::tuple<Case, size_t>> {};

void expect_no_failures(const std::vector<std::string>& failures) {
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
}

TEST_P(CollectiveChecks, MatchExpectedValues) {
  const auto& [c, index] = GetParam();
  const auto& check = checks::all_checks()[index];
  expect_no_failures(sinew::testing::run_checks(
      c.world, c.backend, std::chrono::seconds(30),
      [&](ProcessGroupPtr& pg, checks::CheckLog& log) { check.fn(*pg, log); }, c.transport));
}

std::vector<Case> check_cases() {
  std::vector<Case> out;
  for (const auto& [b, t] : backends_under_test())
    for (int w : {1, 2, 3, 4}) out.push_back({b, w, t});
  return out;
}

std::string case_name(const Case& c) {
  std::string t = c.transport == "auto" ? "" : "_" + c.transport;
  return c.backend + t + "_ws" + std::to_string(c.world);
}

INSTANTIATE_TEST_SUITE_P(
    All, CollectiveChecks,
    ::testing::Combine(::testing::ValuesIn(check_cases()), ::testing::Range<size_t>(0, checks::all_checks().size())),
    [](const auto& info) {
      return case_name(std::get<0>(info.param)) + "_" + checks::all_checks()[std::get<1>(info.param)].name;
    });

class AbortChecks : public ::testing::TestWithParam<Case> {};

TEST_P(AbortChecks, AbortUnblocksPendingRecv) {
  const Case& c = GetParam();
  expect_no_failures(sinew::testing::run_checks(
      c.world, c.backend, std::chrono::seconds(60),
      [](ProcessGroupPtr& pg, checks::CheckLog& log) {
        if (pg->rank() == 0) checks::check_abort_unblocks_pending_recv(pg, log);
      },
      c.transport));
}

std::vector<Case> pair_cases() {
  std::vector<Case> out;
  for (const auto& [b, t] : backends_under_test()) out.push_back({b, 2, t});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, AbortChecks, ::testing::ValuesIn(pair_cases()),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace sinew::dist
