// The Store contract, run over every store kind, plus the TCP store's
// authentication, bounds and failure behaviour.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "dist/store/tcp_store_protocol.h"
#include "sinew/core/error.h"
#include "sinew/core/unique_fd.h"
#include "sinew/core/log.h"
#include "sinew/dist/store.h"
#include "sinew/dist/tcp_store.h"

namespace sinew::dist {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace wire = store_wire;

constexpr Millis kLongTimeout{30'000};

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  return (std::filesystem::path(::testing::TempDir()) /
          fmt::format("sinew_{}_{}_{}", stem, ::getpid(), counter++))
      .string();
}

// Each harness hands out clients of one shared store; make() gives a new
// client (its own connection or file descriptor where the kind has one).
struct MemoryHarness {
  StorePtr base = make_memory_store();
  StorePtr make() { return base; }
};

struct PrefixHarness {
  StorePtr base = make_memory_store();
  StorePtr make() { return make_prefix_store("job", base); }
};

struct FileHarness {
  std::string path = temp_path("file_store");
  ~FileHarness() { std::filesystem::remove(path); }
  StorePtr make() { return make_file_store(path, kLongTimeout); }
};

struct TcpHarness {
  TcpStoreServer server{"127.0.0.1", 0, "test-token"};
  StorePtr make() {
    TcpStoreOptions o;
    o.port = server.port();
    o.token = "test-token";
    o.timeout = kLongTimeout;
    o.connect_timeout = Millis(10'000);
    return make_tcp_store(o);
  }
};

template <class H>
class StoreTest : public ::testing::Test {
 protected:
  H harness;
  StorePtr store = harness.make();
};

using StoreKinds = ::testing::Types<MemoryHarness, PrefixHarness, FileHarness, TcpHarness>;
class KindNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, MemoryHarness>) return "Memory";
    if (std::is_same_v<T, PrefixHarness>) return "Prefix";
    if (std::is_same_v<T, FileHarness>) return "File";
    return "Tcp";
  }
};
TYPED_TEST_SUITE(StoreTest, StoreKinds, KindNames);

TYPED_TEST(StoreTest, SetGetRoundTrip) {
  auto& s = *this->store;
  Bytes binary(256);
  std::iota(binary.begin(), binary.end(), 0);  // includes NUL and high bytes
  s.set("text", "hello");
  s.set("empty", Bytes{});
  s.set("binary", binary);
  EXPECT_EQ(s.get_string("text"), "hello");
  EXPECT_EQ(s.get("empty"), Bytes{});
  EXPECT_EQ(s.get("binary"), binary);
  s.set("text", "again");
  EXPECT_EQ(s.get_string("text"), "again");
  // Another client sees the same values.
  auto other = this->harness.make();
  EXPECT_EQ(other->get("binary"), binary);
}

TYPED_TEST(StoreTest, AddStartsAtZeroAndStoresDecimalText) {
  auto& s = *this->store;
  EXPECT_EQ(s.add("counter", 5), 5);
  EXPECT_EQ(s.add("counter", -7), -2);
  EXPECT_EQ(s.get_string("counter"), "-2");
  EXPECT_EQ(s.add("zero", 0), 0);
  EXPECT_EQ(s.get_string("zero"), "0");
}

TYPED_TEST(StoreTest, ConcurrentAddsFromSeveralClientsAreExact) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 50;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto client = this->harness.make();
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(client->add("n", 1));
    });
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);  // every add saw a distinct count
  EXPECT_EQ(this->store->get_string("n"), std::to_string(kThreads * kAdds));
}

TYPED_TEST(StoreTest, ConcurrentAddsThroughOneClientAreExact) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) this->store->add("shared", 2);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(this->store->get_string("shared"), "200");
}

TYPED_TEST(StoreTest, CompareSet) {
  auto& s = *this->store;
  // A missing key matches an empty expected value.
  EXPECT_EQ(to_string(s.compare_set("k", {}, to_bytes("first"))), "first");
  EXPECT_EQ(s.get_string("k"), "first");
  // Missing key, non-empty expected: nothing is set and `expected` comes back.
  EXPECT_EQ(to_string(s.compare_set("absent", to_bytes("x"), to_bytes("y"))), "x");
  EXPECT_FALSE(s.check({"absent"}));
  // Match swaps.
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("first"), to_bytes("second"))), "second");
  EXPECT_EQ(s.get_string("k"), "second");
  // Mismatch returns the current value and leaves it.
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("first"), to_bytes("third"))), "second");
  EXPECT_EQ(s.get_string("k"), "second");
}

TYPED_TEST(StoreTest, WaitTimeoutNamesTheMissingKey) {
  auto& s = *this->store;
  s.set("present", "1");
  try {
    s.wait({"present", "absent_key"}, Millis(100));
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("absent_key"));
    EXPECT_THAT(e.what(), Not(HasSubstr("present")));
  }
  s.set_timeout(Millis(100));
  try {
    s.get("never_set");
    FAIL() << "get did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("never_set"));
  }
  s.wait({"present"}, Millis(100));  // existing keys return at once
  s.wait({}, Millis(0));
}

TYPED_TEST(StoreTest, Check) {
  auto& s = *this->store;
  EXPECT_TRUE(s.check({}));
  EXPECT_FALSE(s.check({"a"}));
  s.set("a", "");
  EXPECT_TRUE(s.check({"a"}));
  EXPECT_FALSE(s.check({"a", "b"}));
  s.set("b", "x");
  EXPECT_TRUE(s.check({"a", "b"}));
}

TYPED_TEST(StoreTest, DeleteKey) {
  auto& s = *this->store;
  EXPECT_FALSE(s.delete_key("k"));
  s.set("k", "v");
  s.set("other", "v");
  EXPECT_EQ(s.num_keys(), 2);
  EXPECT_TRUE(s.delete_key("k"));
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_FALSE(s.delete_key("k"));
  EXPECT_EQ(s.num_keys(), 1);
  EXPECT_EQ(s.add("k", 3), 3);  // a deleted counter starts again at 0
}

TYPED_TEST(StoreTest, DeletePrefixDropsExactlyTheKeysUnderIt) {
  auto& s = *this->store;
  for (const char* k : {"e1/a", "e1/b/c", "e10/a", "e1", "ft/e1/x", "e2/a", "d"}) s.set(k, "v");
  EXPECT_EQ(s.delete_prefix("e1/"), 2);  // not "e10/a", "e1" or "ft/e1/x"
  EXPECT_FALSE(s.check({"e1/a"}));
  EXPECT_FALSE(s.check({"e1/b/c"}));
  EXPECT_TRUE(s.check({"e10/a", "e1", "ft/e1/x", "e2/a", "d"}));
  EXPECT_EQ(s.num_keys(), 5);
  EXPECT_EQ(s.delete_prefix("e1/"), 0);
  EXPECT_EQ(s.delete_prefix("zz"), 0);
  try {
    s.delete_prefix("");
    ADD_FAILURE() << "an empty prefix (every key) was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("prefix"));
  }
  EXPECT_EQ(s.num_keys(), 5);
}

TYPED_TEST(StoreTest, MultiSetAndMultiGet) {
  auto& s = *this->store;
  s.multi_set({"x", "y", "z"}, {to_bytes("1"), Bytes{}, to_bytes("three")});
  auto got = s.multi_get({"z", "x", "y", "x"});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(to_string(got[0]), "three");
  EXPECT_EQ(to_string(got[1]), "1");
  EXPECT_EQ(got[2], Bytes{});
  EXPECT_EQ(to_string(got[3]), "1");
  EXPECT_TRUE(s.multi_get({}).empty());
}

TYPED_TEST(StoreTest, NumKeys) {
  auto& s = *this->store;
  EXPECT_EQ(s.num_keys(), 0);
  s.set("a", "1");
  s.set("b", "2");
  s.set("a", "3");
  EXPECT_EQ(s.num_keys(), 2);
  s.add("c", 1);
  EXPECT_EQ(s.num_keys(), 3);
}

TYPED_TEST(StoreTest, GetBlocksUntilAnotherClientSets) {
  auto& s = *this->store;
  s.set_timeout(kLongTimeout);
  auto writer = std::async(std::launch::async, [&] {
    auto client = this->harness.make();
    std::this_thread::sleep_for(Millis(50));
    client->set("late", "arrived");
    std::this_thread::sleep_for(Millis(20));
    client->multi_set({"m1", "m2"}, {to_bytes("a"), to_bytes("b")});
  });
  EXPECT_EQ(s.get_string("late"), "arrived");
  s.wait({"m1", "m2"});
  auto got = s.multi_get({"m2", "m1"});
  EXPECT_EQ(to_string(got[0]), "b");
  EXPECT_EQ(to_string(got[1]), "a");
  writer.get();
}

// --- TCP store specifics ------------------------------------------------

TcpStoreOptions client_options(int port, std::string token) {
  TcpStoreOptions o;
  o.port = port;
  o.token = std::move(token);
  o.timeout = kLongTimeout;
  o.connect_timeout = Millis(10'000);
  return o;
}

// Captures log lines for the duration of a test.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](const LogRecord& r) {
      std::lock_guard<std::mutex> g(mu_);
      lines_.push_back(r.message);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::string joined() {
    std::lock_guard<std::mutex> g(mu_);
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

UniqueFd raw_connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

void raw_send(const UniqueFd& fd, const Bytes& bytes) {
  ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads until the server closes the connection; fails the test after 5 s.
Bytes read_until_closed(const UniqueFd& fd) {
  Bytes all;
  Deadline deadline = Deadline::after(Millis(5'000));
  while (true) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms_for_poll()) <= 0) {
      ADD_FAILURE() << "the server did not close the connection within 5 s";
      return all;
    }
    uint8_t buf[4096];
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) return all;
    all.insert(all.end(), buf, buf + n);
  }
}

wire::Message parse_reply(const Bytes& bytes) {
  wire::Message m;
  auto r = wire::parse(bytes.data(), bytes.size(), wire::default_limits(), &m);
  EXPECT_EQ(r.kind, wire::ParseResult::kDone);
  return m;
}

Bytes frame(const wire::Message& m) {
  Bytes out;
  wire::encode(m, &out);
  return out;
}

Bytes hello(const std::string& token) {
  return frame(wire::request(wire::Command::kHello, {}, {to_bytes(token)}, wire::kProtocolVersion));
}

// The clock offset to the store host (the Flight Recorder's timelines use
// it): one host here, so it is within the round trip of zero; a clone is a
// second connection that works while the first is blocked in a wait.
TEST(TcpStore, ClockOffsetAndCloneThroughAPrefix) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto store = make_prefix_store("p", make_tcp_store(client_options(server.port(), "tok")));
  auto offset = store->clock_offset_ns();
  ASSERT_TRUE(offset.has_value());
  EXPECT_LT(std::llabs(*offset), 1'000'000'000LL);  // same clock; the bound only rules out garbage
  EXPECT_FALSE(make_memory_store()->clock_offset_ns().has_value());
  auto other = store->clone();
  ASSERT_NE(other, nullptr);
  std::thread waiter([&] { store->wait({"late"}, Millis(5000)); });
  other->set("late", to_bytes("x"));  // would queue behind the wait on a shared connection
  waiter.join();
  EXPECT_EQ(to_string(store->get("late")), "x");
  EXPECT_EQ(make_memory_store()->clone(), nullptr);
}

TEST(TcpStore, WrongTokenIsRefusedAndTheServerKeepsServing) {
  LogCapture logs;
  TcpStoreServer server("127.0.0.1", 0, "right-token-7f3a");
  try {
    make_tcp_store(client_options(server.port(), "wrong-token-91bc"));
    FAIL() << "a wrong token was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("token"));
    EXPECT_THAT(e.what(), HasSubstr("SINEW_STORE_TOKEN"));
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", server.port())));
    EXPECT_THAT(e.what(), Not(HasSubstr("wrong-token-91bc")));
    EXPECT_THAT(e.what(), Not(HasSubstr("right-token-7f3a")));
  }
  EXPECT_EQ(server.refused_connections(), 1);
  EXPECT_THROW(make_tcp_store(client_options(server.port(), "")), InvalidArgument);
  EXPECT_EQ(server.refused_connections(), 2);

  auto good = make_tcp_store(client_options(server.port(), "right-token-7f3a"));
  good->set("k", "v");
  EXPECT_EQ(good->get_string("k"), "v");
  EXPECT_EQ(server.refused_connections(), 2);

  std::string log = logs.joined();
  EXPECT_THAT(log, HasSubstr("token rejected"));
  EXPECT_THAT(log, HasSubstr("127.0.0.1:"));  // the peer's address
  EXPECT_THAT(log, Not(HasSubstr("wrong-token-91bc")));
  EXPECT_THAT(log, Not(HasSubstr("right-token-7f3a")));
}

TEST(TcpStore, FirstMessageMustBeHello) {
  LogCapture logs;
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto fd = raw_connect(server.port());
  raw_send(fd, frame(wire::request(wire::Command::kSet, {"k"}, {to_bytes("v")})));
  auto reply = parse_reply(read_until_closed(fd));
  EXPECT_EQ(reply.code, static_cast<uint8_t>(wire::Reply::kRefused));
  EXPECT_EQ(server.refused_connections(), 1);
  auto good = make_tcp_store(client_options(server.port(), "tok"));
  EXPECT_FALSE(good->check({"k"}));
}

TEST(TcpStore, OversizedLengthClosesOnlyThatConnection) {
  LogCapture logs;
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto good = make_tcp_store(client_options(server.port(), "tok"));
  good->set("before", "1");

  // An authenticated peer claims a 4 GiB key.
  auto fd = raw_connect(server.port());
  raw_send(fd, hello("tok"));
  Bytes bad = {static_cast<uint8_t>(wire::Command::kSet), 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  raw_send(fd, bad);
  Bytes got = read_until_closed(fd);
  wire::Message ok;
  auto first = wire::parse(got.data(), got.size(), wire::default_limits(), &ok);
  ASSERT_EQ(first.kind, wire::ParseResult::kDone);
  EXPECT_EQ(ok.code, static_cast<uint8_t>(wire::Reply::kOk));  // the HELLO
  auto err = parse_reply(Bytes(got.begin() + static_cast<ptrdiff_t>(first.size), got.end()));
  EXPECT_EQ(err.code, static_cast<uint8_t>(wire::Reply::kProtocolError));
  ASSERT_EQ(err.values.size(), 1u);
  EXPECT_THAT(to_string(err.values[0]), HasSubstr("4294967295"));

  // Before authenticating, a peer claims a 256 MiB token.
  auto fd2 = raw_connect(server.port());
  raw_send(fd2, {static_cast<uint8_t>(wire::Command::kHello), 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10});
  read_until_closed(fd2);

  // A peer that dies half-way through a request.
  {
    auto fd3 = raw_connect(server.port());
    raw_send(fd3, hello("tok"));
    Bytes half = frame(wire::request(wire::Command::kSet, {"half"}, {Bytes(1000, 7)}));
    half.resize(half.size() / 2);
    raw_send(fd3, half);
  }

  good->set("after", "2");
  EXPECT_EQ(good->get_string("before"), "1");
  EXPECT_EQ(good->get_string("after"), "2");
  EXPECT_FALSE(good->check({"half"}));
  EXPECT_EQ(server.refused_connections(), 0);
  EXPECT_THAT(logs.joined(), HasSubstr("4294967295"));
}

TEST(TcpStore, NoServerTimesOutWithinConnectTimeout) {
  // A bound socket that never listens: connections to its port are refused.
  UniqueFd holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);

  auto o = client_options(port, "tok");
  o.connect_timeout = Millis(300);
  auto start = Clock::now();
  try {
    make_tcp_store(o);
    FAIL() << "connected to a port with no server";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", port)));
    EXPECT_THAT(e.what(), HasSubstr("300 ms"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // guards against a hang only
}

TEST(TcpStore, LargeValuesAndAClientThatNeverReadsDoNotBlockOthers) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto good = make_tcp_store(client_options(server.port(), "tok"));
  Bytes big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  good->set("big", big);

  // A peer asks for the big value over and over and never reads the replies.
  auto stuck = raw_connect(server.port());
  raw_send(stuck, hello("tok"));
  Bytes get_big = frame(wire::request(wire::Command::kGet, {"big"}, {}, 1'000));
  Bytes requests;
  for (int i = 0; i < 20; ++i) requests.insert(requests.end(), get_big.begin(), get_big.end());
  raw_send(stuck, requests);

  auto other = make_tcp_store(client_options(server.port(), "tok"));
  other->set("small", "ok");
  EXPECT_EQ(good->get_string("small"), "ok");
  EXPECT_EQ(other->get("big"), big);
}

TEST(TcpStore, ServerDestroyedWhileClientWaitsGivesIoError) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "tok");
  int port = server->port();
  auto client = make_tcp_store(client_options(port, "tok"));
  client->set("k", "v");
  auto waiter = std::async(std::launch::async, [&] { return client->get("never"); });
  std::this_thread::sleep_for(Millis(100));
  server.reset();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  try {
    waiter.get();
    FAIL() << "get returned without a server";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", port)));
  }
  // The connection stays closed: later calls fail at once.
  EXPECT_THROW(client->set("k", "v"), IoError);
}

TEST(TcpStore, ManyClientsConcurrently) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  constexpr int kClients = 8;
  constexpr int kAdds = 25;
  std::vector<std::future<std::string>> results;
  for (int r = 0; r < kClients; ++r)
    results.push_back(std::async(std::launch::async, [&, r] {
      auto s = make_tcp_store(client_options(server.port(), "tok"));
      for (int i = 0; i < kAdds; ++i) s->add("counter", 1);
      s->set(fmt::format("rank/{}", r), std::to_string(r * r));
      std::vector<std::string> keys;
      for (int k = 0; k < kClients; ++k) keys.push_back(fmt::format("rank/{}", k));
      s->wait(keys);  // a barrier: every client waits for all
      std::string all;
      for (const auto& v : s->multi_get(keys)) all += to_string(v) + ",";
      return all;
    }));
  for (auto& f : results) EXPECT_EQ(f.get(), "0,1,4,9,16,25,36,49,");
  auto s = make_tcp_store(client_options(server.port(), "tok"));
  EXPECT_EQ(s->get_string("counter"), std::to_string(kClients * kAdds));
  EXPECT_EQ(s->num_keys(), kClients + 1);
}

TEST(TcpStore, AddOnNonIntegerIsInvalidArgumentAndConnectionSurvives) {
  TcpStoreServer server("127.0.0.1", 0, "");
  auto s = make_tcp_store(client_options(server.port(), ""));
  s->set("text", "abc");
  try {
    s->add("text", 1);
    FAIL() << "add on a non-integer succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("text"));
  }
  EXPECT_EQ(s->add("n", 2), 2);
}

TEST(TcpStore, JobTokensAreRandomHex) {
  std::string a = make_job_token();
  std::string b = make_job_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(StoreWire, ParseBoundsEveryLength) {
  wire::Limits limits{8, 16, 2};
  wire::Message m;
  Bytes f = frame(wire::request(wire::Command::kSet, {"key"}, {to_bytes("value")}, 42));
  // Every strict prefix asks for more, never for less than it has.
  for (size_t n = 0; n < f.size(); ++n) {
    auto r = wire::parse(f.data(), n, limits, &m);
    ASSERT_EQ(r.kind, wire::ParseResult::kNeedMore) << n;
    EXPECT_GT(r.size, n);
    EXPECT_LE(r.size, f.size());
  }
  auto r = wire::parse(f.data(), f.size(), limits, &m);
  ASSERT_EQ(r.kind, wire::ParseResult::kDone);
  EXPECT_EQ(r.size, f.size());
  EXPECT_EQ(m.keys, std::vector<std::string>{"key"});
  EXPECT_EQ(to_string(m.values.at(0)), "value");
  EXPECT_EQ(m.arg, 42);

  Bytes long_key = frame(wire::request(wire::Command::kGet, {"123456789"}));
  EXPECT_EQ(wire::parse(long_key.data(), 9, limits, &m).kind, wire::ParseResult::kBad);
  Bytes many = frame(wire::request(wire::Command::kWait, {"a", "b", "c"}));
  EXPECT_EQ(wire::parse(many.data(), 5, limits, &m).kind, wire::ParseResult::kBad);
  Bytes big = frame(wire::request(wire::Command::kSet, {"k"}, {Bytes(17, 1)}));
  auto rb = wire::parse(big.data(), big.size(), limits, &m);
  EXPECT_EQ(rb.kind, wire::ParseResult::kBad);
  EXPECT_THAT(rb.error, HasSubstr("17"));
}

TEST(FileStore, CorruptFileIsIoErrorNamingThePath) {
  std::string path = temp_path("corrupt_store");
  {
    std::ofstream f(path, std::ios::binary);
    f << "definitely not a store";
  }
  auto s = make_file_store(path, Millis(1'000));
  try {
    s->set("k", "v");
    FAIL() << "a corrupt file was accepted";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  std::filesystem::remove(path);
}

TEST(FileStore, ReopeningSeesEarlierValues) {
  std::string path = temp_path("reopen_store");
  make_file_store(path)->set("k", "persisted");
  EXPECT_EQ(make_file_store(path)->get_string("k"), "persisted");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sinew::dist
