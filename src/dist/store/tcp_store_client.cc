// The TCP store client: one non-blocking socket per store, requests serialised
// by a mutex. Every socket wait is a poll() bounded by a deadline; waits for
// keys carry their timeout to the server, which answers "timed out" itself,
// and the client allows a grace period on top before it gives up on the
// server. A connection that failed or timed out is closed for good: a late
// reply could otherwise be taken for the answer to the next request.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "dist/store/tcp_store_protocol.h"
#include "sinew/core/check.h"
#include "sinew/core/error.h"
#include "sinew/core/unique_fd.h"
#include "sinew/core/log.h"
#include "sinew/dist/tcp_store.h"

namespace sinew::dist {
namespace {

namespace wire = store_wire;
using wire::Command;
using wire::Message;
using wire::Reply;
using wire::errno_text;

// How long past a wait's own timeout the client waits for the server's answer.
constexpr Millis kReplyGrace{10'000};

// One attempt to connect to any address of host:port before `deadline`.
UniqueFd try_connect(const std::string& host, int port, Deadline deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = gai_strerror(rc);
    return {};
  }
  UniqueFd result;
  for (addrinfo* ai = res; ai && !result; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      *error = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *error = errno_text(errno);
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      int n = 0;
      do {
        n = ::poll(&p, 1, deadline.remaining_ms_for_poll());
      } while (n < 0 && errno == EINTR);
      if (n <= 0) {
        *error = n == 0 ? "connect timed out" : errno_text(errno);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        *error = errno_text(err);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    result = std::move(fd);
  }
  ::freeaddrinfo(res);
  return result;
}

class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& o)
      : options_(o), addr_(fmt::format("{}:{}", o.host, o.port)), limits_(wire::default_limits()) {
    timeout_ = o.timeout;
    connect(o);
  }

  StorePtr clone() override {
    TcpStoreOptions o = options_;
    o.timeout = timeout_;
    return std::make_shared<TcpStore>(o);
  }

  void set(const std::string& key, const Bytes& value) override {
    check_key(key);
    check_value(key, value);
    call(wire::request(Command::kSet, {key}, {value}), op_deadline());
  }

  Bytes get(const std::string& key) override {
    check_key(key);
    Message r = call(wire::request(Command::kGet, {key}, {}, wait_ms(timeout_)), wait_deadline(timeout_));
    expect_values(r, 1);
    return std::move(r.values[0]);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_key(key);
    return call(wire::request(Command::kAdd, {key}, {}, delta), op_deadline()).arg;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    check_key(key);
    check_value(key, expected);
    check_value(key, desired);
    Message r = call(wire::request(Command::kCompareSet, {key}, {expected, desired}), op_deadline());
    expect_values(r, 1);
    return std::move(r.values[0]);
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    check_keys(keys);
    call(wire::request(Command::kWait, keys, {}, wait_ms(timeout)), wait_deadline(timeout));
  }

  bool check(const std::vector<std::string>& keys) override {
    check_keys(keys);
    return call(wire::request(Command::kCheck, keys), op_deadline()).arg != 0;
  }

  bool delete_key(const std::string& key) override {
    check_key(key);
    return call(wire::request(Command::kDelete, {key}), op_deadline()).arg != 0;
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    check_keys(keys);
    Message r = call(wire::request(Command::kMultiGet, keys, {}, wait_ms(timeout_)),
                     wait_deadline(timeout_));
    expect_values(r, keys.size());
    return std::move(r.values);
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size())
      throw InvalidArgument::make("values", fmt::format("{} values", values.size()),
                                  fmt::format("one value per key ({} keys)", keys.size()));
    check_keys(keys);
    for (size_t i = 0; i < keys.size(); ++i) check_value(keys[i], values[i]);
    call(wire::request(Command::kMultiSet, keys, values), op_deadline());
  }

  int64_t num_keys() override { return call(wire::request(Command::kNumKeys), op_deadline()).arg; }

  int64_t delete_prefix(const std::string& prefix) override {
    SINEW_ARG_CHECK(!prefix.empty(), "prefix", "''", "a non-empty key prefix");
    check_key(prefix);
    return call(wire::request(Command::kDeletePrefix, {prefix}), op_deadline()).arg;
  }

  std::optional<int64_t> clock_offset_ns() override {
    // The round trip with the least delay bounds the error best (NTP's idea).
    auto wall = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
    int64_t best_rtt = INT64_MAX, offset = 0;
    for (int i = 0; i < 5; ++i) {
      const int64_t t0 = wall();
      const int64_t server = call(wire::request(Command::kTime), op_deadline()).arg;
      const int64_t t1 = wall();
      if (t1 - t0 < best_rtt) {
        best_rtt = t1 - t0;
        offset = (t0 + t1) / 2 - server;
      }
    }
    return offset;
  }

 private:
  void connect(const TcpStoreOptions& o) {
    Deadline deadline = Deadline::after(o.connect_timeout);
    std::string error = "no attempt made";
    Millis backoff{10};
    while (true) {
      fd_ = try_connect(o.host, o.port, deadline, &error);
      if (fd_) break;
      if (deadline.expired())
        throw TimeoutError(fmt::format(
            "could not connect to the store at {} within {} ms (last error: {}); is the store "
            "server running and MASTER_ADDR/MASTER_PORT right?",
            addr_, o.connect_timeout.count(), error));
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline.remaining()));
      backoff = std::min(backoff * 2, Millis(1'000));
    }
    std::lock_guard<std::mutex> g(mu_);
    // The answer to HELLO gets at least a second, even when connecting used up connect_timeout.
    Deadline floor = Deadline::after(Millis(1'000));
    exchange(wire::request(Command::kHello, {}, {to_bytes(o.token)}, wire::kProtocolVersion),
             deadline.time_point() > floor.time_point() ? deadline : floor);
    SINEW_DEBUG(kStore, "connected to the store at {}", addr_);
  }

  Message call(const Message& req, Deadline deadline) {
    std::lock_guard<std::mutex> g(mu_);
    return exchange(req, deadline);
  }

  // Sends one request and reads its reply; caller holds mu_.
  Message exchange(const Message& req, Deadline deadline) {
    if (!fd_)
      throw IoError(fmt::format("the connection to the store at {} is closed ({})", addr_, closed_why_));
    const char* what = wire::command_name(req.code);
    Message r;
    try {
      Bytes frame;
      wire::encode(req, &frame);
      send_all(frame, deadline, what);
      r = receive(deadline, what);
    } catch (const Error& e) {
      close(e.what());
      throw;
    }
    auto text = [&] { return r.values.empty() ? std::string("(no message)") : to_string(r.values[0]); };
    switch (static_cast<Reply>(r.code)) {
      case Reply::kOk: return r;
      case Reply::kTimeout:
        throw TimeoutError(fmt::format("store wait timed out after {} ms; missing keys {} (store at {})",
                                       r.arg, r.keys, addr_));
      case Reply::kInvalid: throw InvalidArgument(text());
      case Reply::kRefused:
        close("the server refused the token");
        throw InvalidArgument::make(
            "token", "<redacted>",
            fmt::format("the job's token (SINEW_STORE_TOKEN); the store at {} rejected the token "
                        "this process presented ({})",
                        addr_, text()));
      case Reply::kProtocolError:
        close(text());
        throw IoError(fmt::format("the store at {} closed the connection after {}: {}", addr_, what,
                                  text()));
    }
    close("unknown reply code");
    throw IoError(fmt::format("the store at {} sent an unknown reply code {} to {}", addr_,
                              static_cast<int>(r.code), what));
  }

  void close(const std::string& why) {
    fd_.reset();
    closed_why_ = why;
  }

  // Waits for the socket to be ready; TimeoutError when the deadline passes first.
  void await(short events, Deadline deadline, const char* what) {
    while (true) {
      pollfd p{fd_.get(), events, 0};
      int n = ::poll(&p, 1, deadline.remaining_ms_for_poll());
      if (n > 0) return;
      if (n < 0 && errno != EINTR)
        throw IoError(fmt::format("store connection to {}: poll failed: {}", addr_, errno_text(errno)));
      if (n == 0 && deadline.expired())
        throw TimeoutError(fmt::format("the store at {} did not answer {} in time; the connection "
                                       "is closed",
                                       addr_, what));
    }
  }

  void send_all(const Bytes& frame, Deadline deadline, const char* what) {
    size_t off = 0;
    while (off < frame.size()) {
      ssize_t w = ::send(fd_.get(), frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<size_t>(w);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        await(POLLOUT, deadline, what);
      } else if (errno != EINTR) {
        throw IoError(fmt::format("lost the connection to the store at {} sending {}: {}", addr_,
                                  what, errno_text(errno)));
      }
    }
  }

  Message receive(Deadline deadline, const char* what) {
    Bytes in;
    size_t filled = 0;
    size_t need = 1;
    Message r;
    while (true) {
      if (filled >= need) {
        auto p = wire::parse(in.data(), filled, limits_, &r);
        if (p.kind == wire::ParseResult::kDone) {
          if (p.size != filled)
            throw IoError(fmt::format("the store at {} sent more than one reply to {}", addr_, what));
          return r;
        }
        if (p.kind == wire::ParseResult::kBad)
          throw IoError(fmt::format("the store at {} sent a malformed reply to {}: {}", addr_, what,
                                    p.error));
        need = p.size;
      }
      // `need` is bounded by limits_, so growing to it is safe.
      in.resize(std::max(in.size(), std::max(need, filled + (size_t{64} << 10))));
      ssize_t n = ::recv(fd_.get(), in.data() + filled, in.size() - filled, 0);
      if (n > 0) {
        filled += static_cast<size_t>(n);
        continue;
      }
      if (n == 0)
        throw IoError(fmt::format("the store at {} closed the connection while answering {} (is the "
                                  "store server gone?)",
                                  addr_, what));
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        await(POLLIN, deadline, what);
      } else if (errno != EINTR) {
        throw IoError(fmt::format("lost the connection to the store at {} waiting for {}: {}", addr_,
                                  what, errno_text(errno)));
      }
    }
  }

  Deadline op_deadline() const { return Deadline::after(timeout_); }
  static int64_t wait_ms(Millis t) { return wire::clamp_wait_ms(t.count()); }
  static Deadline wait_deadline(Millis t) { return Deadline::after(Millis(wait_ms(t)) + kReplyGrace); }

  void check_key(const std::string& key) const {
    if (key.size() > limits_.max_key)
      throw InvalidArgument::make("key", fmt::format("a key of {} bytes", key.size()),
                                  fmt::format("at most {} bytes", limits_.max_key));
  }
  void check_keys(const std::vector<std::string>& keys) const {
    if (keys.size() > limits_.max_items)
      throw InvalidArgument::make("keys", fmt::format("{} keys", keys.size()),
                                  fmt::format("at most {} keys in one request", limits_.max_items));
    for (const auto& k : keys) check_key(k);
  }
  void check_value(const std::string& key, const Bytes& value) const {
    if (value.size() > limits_.max_value)
      throw InvalidArgument::make(
          "value", fmt::format("{} bytes for key '{}'", value.size(), key),
          fmt::format("at most {} bytes ({})", limits_.max_value, wire::kMaxValueBytes.name()));
  }
  static void expect_values(const Message& r, size_t n) {
    if (r.values.size() != n)
      throw IoError(fmt::format("the store sent {} values where {} were expected", r.values.size(), n));
  }

  const TcpStoreOptions options_;
  const std::string addr_;
  const wire::Limits limits_;
  std::mutex mu_;
  UniqueFd fd_;             // guarded by mu_
  std::string closed_why_;  // guarded by mu_
};

}  // namespace

StorePtr make_tcp_store(const TcpStoreOptions& options) {
  if (options.port <= 0 || options.port > 65535)
    throw InvalidArgument::make("port", std::to_string(options.port), "a TCP port in [1, 65535]");
  return std::make_shared<TcpStore>(options);
}

std::string make_job_token() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return token;
}

}  // namespace sinew::dist
