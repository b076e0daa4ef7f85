// 1000 reconfigure cycles leak no file descriptors, shared-memory segments
// or memory (ranks as threads; every cycle agrees, builds the next epoch's
// group and checks an allreduce). Over shared memory each epoch maps fresh
// segments; over UCX it keeps the previous epoch's worker and connections,
// and the 8-bit epoch in its message tags wraps around three times.
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <barrier>
#include <fstream>
#include <string>

#include "../dist/rank_threads.h"

namespace sinew::dist {
namespace {

using namespace std::chrono_literals;

int count_entries(const char* dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

// This process's segments only: ctest runs other tests beside this one, and
// their segments come and go. Rank 0 puts its pid into the segment nonce
// ("sinew-<random>-<pid>-r<rank>"), and here every rank is a thread of
// this process.
int count_own_segments() {
  const std::string mark = fmt::format("-{}-r", ::getpid());
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("sinew-", 0) == 0 && name.find(mark) != std::string::npos) ++n;
    }
    ::closedir(d);
  }
  return n;
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

class ReconfigureLeaks : public ::testing::TestWithParam<std::string> {};

TEST_P(ReconfigureLeaks, ThousandCyclesLeaveNoFdsSegmentsOrMemory) {
  const int W = 3, kCycles = 1000, kWarm = 50;
  auto store = make_memory_store();
  std::barrier sync(W);
  int fds_before = 0, shm_before = 0;
  int64_t keys_warm = 0;
  long rss_warm = 0;
  sinew::testing::run_ranks(W, [&](int r) {
    GroupOptions o;
    o.store = store;
    o.rank = r;
    o.size = W;
    o.timeout = Millis(30000);
    o.transport = GetParam();
    auto pg = create_process_group(o);
    for (int c = 0; c < kCycles; ++c) {
      if (c == kWarm) {
        sync.arrive_and_wait();
        if (r == 0) {
          fds_before = count_entries("/proc/self/fd");
          shm_before = count_own_segments();
          rss_warm = rss_kib();
          keys_warm = store->num_keys();
        }
        sync.arrive_and_wait();
      }
      auto next = pg->reconfigure(Deadline::after(30s));
      pg = next;  // the old epoch's group is destroyed here
      int64_t v = 1;
      pg->allreduce(TensorView::flat(&v, DType::kI64, 1))->wait();
      ASSERT_EQ(v, W);
      ASSERT_EQ(pg->epoch(), static_cast<uint64_t>(c + 1));
    }
    // Rank 0's init of each epoch (which drops epoch e-2's keys) was over
    // before its allreduce ran.
    pg.reset();
  });
  // Each epoch drops the keys of the one two before it: the store holds a
  // bounded number of keys however many cycles ran.
  EXPECT_LE(store->num_keys(), keys_warm + 20) << "store keys grew from " << keys_warm << " after " << kWarm
                                                << " cycles to " << store->num_keys() << " after " << kCycles;
  EXPECT_LE(count_entries("/proc/self/fd"), fds_before) << "file descriptors leaked";
  EXPECT_EQ(count_own_segments(), shm_before) << "shared-memory segments leaked";
#ifndef __SANITIZE_ADDRESS__
  // A leaked group would hold megabytes of mapped segments per cycle. (Under ASan the
  // allocator's quarantine inflates RSS by design; LeakSanitizer checks leaks
  // at exit there instead.)
  EXPECT_LT(rss_kib() - rss_warm, 64 * 1024) << "RSS grew by more than 64 MiB over " << kCycles << " cycles";
#else
  (void)rss_warm;
#endif
}

INSTANTIATE_TEST_SUITE_P(Transports, ReconfigureLeaks, ::testing::Values("shm", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sinew::dist
