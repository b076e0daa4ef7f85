// The TCP store server: one thread polls the listening socket, a wake-up
// eventfd and every client. Sockets are non-blocking with per-connection
// buffers, so a slow or dead client never holds up the others; GET/WAIT on
// missing keys are parked and answered when the keys appear or their timeout
// passes. Anything a client sends that breaks the protocol closes only that
// client's connection.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "dist/store/tcp_store_protocol.h"
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

constexpr size_t kReadChunk = size_t{64} << 10;
// Bytes read from one client per wake-up, so one fast sender cannot starve the rest.
constexpr size_t kMaxReadPerWake = size_t{4} << 20;
// A client that does not read its replies stops being read until it catches up.
constexpr size_t kMaxPendingOutput = size_t{8} << 20;

// Before HELLO succeeds a peer may only send a small frame.
constexpr wire::Limits kPreAuthLimits{wire::kMaxKeyBytes, wire::kMaxKeyBytes, 4};

std::string peer_name(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "<unknown peer>";
  return addr.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, serv)
                                    : fmt::format("{}:{}", host, serv);
}

bool same_token(const std::string& want, const Bytes& got) {
  // Constant time in the content, so the reply timing leaks nothing but the length.
  if (want.size() != got.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<uint8_t>(want[i]) ^ got[i];
  return diff == 0;
}

std::optional<int64_t> parse_int(const Bytes& b) {
  const char* first = reinterpret_cast<const char*>(b.data());
  const char* last = first + b.size();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc{} || end != last) return std::nullopt;
  return v;
}

struct Conn {
  UniqueFd fd;
  std::string peer;
  bool authed = false;
  Bytes in;
  size_t in_pos = 0;
  size_t in_need = 1;  // unread bytes needed before the next parse can progress
  Bytes out;
  size_t out_pos = 0;
  bool closing = false;  // close once `out` is flushed
  bool dead = false;
  std::optional<Message> parked;  // a GET/WAIT/MULTI_GET waiting for keys
  Deadline parked_until = Deadline::never();

  size_t pending_out() const { return out.size() - out_pos; }
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string host;
  int port = 0;
  std::string token;
  UniqueFd listen_fd;
  UniqueFd wake_fd;
  std::atomic<int64_t> refused{0};
  std::thread thread;

  // Owned by the server thread once it runs.
  wire::Limits limits = wire::default_limits();
  std::map<std::string, Bytes> data;
  std::vector<std::unique_ptr<Conn>> conns;
  bool changed = false;  // a key was written since parked requests were last retried

  void bind_and_listen();
  void run();
  void serve_one_round(std::vector<pollfd>& fds);
  int poll_timeout_ms() const;
  void accept_all();
  void on_readable(Conn& c);
  void flush(Conn& c);
  void process(Conn& c);
  void handle(Conn& c, Message& m);
  bool arity(Conn& c, const Message& m, size_t keys, size_t values);
  void write_keys(Conn& c, Message& m);  // SET, MULTI_SET, COMPARE_SET
  void add(Conn& c, const Message& m);
  void read_keys(Conn& c, Message& m);   // GET, WAIT, MULTI_GET (may park), CHECK
  void delete_keys(Conn& c, const Message& m);  // DELETE, DELETE_PREFIX
  void query(Conn& c, const Message& m);        // NUM_KEYS, TIME
  void hello(Conn& c, const Message& m);
  bool try_answer(Conn& c, const Message& m);
  void send(Conn& c, const Message& m);
  void refuse(Conn& c, const std::string& why);
  void protocol_error(Conn& c, const std::string& why);
  void expire_parked();
  void retry_parked();
  template <class F>
  void guarded(Conn& c, F&& f);
};

void TcpStoreServer::Impl::bind_and_listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0)
    throw IoError(fmt::format("store server cannot resolve {}:{}: {}", host, port, gai_strerror(rc)));
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_error = errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = errno_text(errno);
      continue;
    }
    listen_fd = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (!listen_fd)
    throw IoError(fmt::format("store server cannot listen on {}:{}: {}", host, port, last_error));
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw IoError(fmt::format("store server: getsockname failed: {}", errno_text(errno)));
  port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_fd.get(), POLLIN, 0});
    fds.push_back({listen_fd.get(), POLLIN, 0});
    for (const auto& c : conns) {
      short events = c->pending_out() ? POLLOUT : 0;
      if (c->parked)
        events |= POLLRDHUP;  // notice a waiting client that gave up and hung up
      else if (!c->closing && c->pending_out() < kMaxPendingOutput)
        events |= POLLIN;
      fds.push_back({c->fd.get(), events, 0});
    }
    int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (rc < 0) {
      if (errno == EINTR) continue;
      SINEW_ERROR(kStore, "store server on port {} stops: poll failed: {}", port, errno_text(errno));
      return;
    }
    if (fds[0].revents) return;
    serve_one_round(fds);
  }
}

void TcpStoreServer::Impl::serve_one_round(std::vector<pollfd>& fds) {
  for (size_t i = 0; i + 2 < fds.size(); ++i) {
    Conn& c = *conns[i];
    short re = fds[i + 2].revents;
    if (!re) continue;
    guarded(c, [&] {
      if (re & POLLOUT) flush(c);
      if (re & POLLIN) on_readable(c);
      if (re & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) c.dead = true;
    });
  }
  if (fds[1].revents & POLLIN) accept_all();
  expire_parked();
  retry_parked();
  std::erase_if(conns, [](const std::unique_ptr<Conn>& c) {
    return c->dead || (c->closing && c->pending_out() == 0);
  });
}

int TcpStoreServer::Impl::poll_timeout_ms() const {
  std::optional<Clock::duration> soonest;
  for (const auto& c : conns)
    if (c->parked && !c->parked_until.is_never()) {
      auto r = c->parked_until.remaining();
      if (!soonest || r < *soonest) soonest = r;
    }
  if (!soonest) return -1;
  // Round up so we wake after the deadline, not spin just before it.
  auto ms = std::chrono::ceil<Millis>(*soonest).count();
  return static_cast<int>(std::min<int64_t>(ms, 1'000'000'000));
}

template <class F>
void TcpStoreServer::Impl::guarded(Conn& c, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    SINEW_WARN(kStore, "store server dropping the connection from {}: {}", c.peer, e.what());
    c.dead = true;
  }
}

void TcpStoreServer::Impl::accept_all() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        SINEW_WARN(kStore, "store server on port {}: accept failed: {}", port, errno_text(errno));
      return;
    }
    auto c = std::make_unique<Conn>();
    c->fd = UniqueFd(fd);
    c->peer = peer_name(addr, len);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SINEW_DEBUG(kStore, "store server accepted a connection from {}", c->peer);
    conns.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::on_readable(Conn& c) {
  size_t total = 0;
  while (total < kMaxReadPerWake) {
    size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    ssize_t r = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + (r > 0 ? static_cast<size_t>(r) : 0));
    if (r > 0) {
      total += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EOF or a reset: the client is gone, possibly mid-request; drop what it sent.
    c.dead = true;
    return;
  }
  process(c);
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.pending_out()) {
    ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_pos, c.pending_out(),
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out_pos += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;
    return;
  }
  c.out.clear();
  c.out_pos = 0;
}

void TcpStoreServer::Impl::process(Conn& c) {
  while (!c.dead && !c.closing && !c.parked && c.pending_out() < kMaxPendingOutput) {
    size_t avail = c.in.size() - c.in_pos;
    if (avail == 0 || avail < c.in_need) break;
    const uint8_t* p = c.in.data() + c.in_pos;
    if (!c.authed && p[0] != static_cast<uint8_t>(Command::kHello)) {
      refuse(c, fmt::format("first message was {} instead of HELLO", wire::command_name(p[0])));
      break;
    }
    Message m;
    auto r = wire::parse(p, avail, c.authed ? limits : kPreAuthLimits, &m);
    if (r.kind == wire::ParseResult::kNeedMore) {
      c.in_need = r.size;
      break;
    }
    if (r.kind == wire::ParseResult::kBad) {
      protocol_error(c, r.error);
      break;
    }
    c.in_pos += r.size;
    c.in_need = 1;
    handle(c, m);
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > c.in.size() / 2) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.in_pos));
    c.in_pos = 0;
  }
}

void TcpStoreServer::Impl::send(Conn& c, const Message& m) {
  wire::encode(m, &c.out);
  flush(c);
}

void TcpStoreServer::Impl::refuse(Conn& c, const std::string& why) {
  refused.fetch_add(1, std::memory_order_relaxed);
  SINEW_WARN(kStore, "store server on port {} refused the connection from {}: token rejected ({})",
             port, c.peer, why);
  c.closing = true;
  send(c, wire::reply(Reply::kRefused, {}, {to_bytes("token rejected")}));
}

void TcpStoreServer::Impl::protocol_error(Conn& c, const std::string& why) {
  SINEW_WARN(kStore, "store server on port {} closing the connection from {}: {}", port, c.peer, why);
  c.closing = true;
  send(c, wire::reply(Reply::kProtocolError, {}, {to_bytes(why)}));
}

void TcpStoreServer::Impl::hello(Conn& c, const Message& m) {
  if (m.values.size() != 1 || !same_token(token, m.values[0])) {
    refuse(c, m.values.size() == 1 ? "wrong token" : "no token");
    return;
  }
  if (m.arg != wire::kProtocolVersion) {
    protocol_error(c, fmt::format("client speaks store protocol version {}, this server {}", m.arg,
                                  wire::kProtocolVersion));
    return;
  }
  c.authed = true;
  send(c, wire::reply(Reply::kOk));
}

bool TcpStoreServer::Impl::try_answer(Conn& c, const Message& m) {
  std::vector<std::string> missing;
  for (const auto& k : m.keys)
    if (!data.count(k)) missing.push_back(k);
  if (!missing.empty()) {
    if (!c.parked_until.expired()) return false;
    send(c, wire::reply(Reply::kTimeout, std::move(missing), {}, m.arg));
    return true;
  }
  Message r = wire::reply(Reply::kOk);
  if (m.code != static_cast<uint8_t>(Command::kWait))
    for (const auto& k : m.keys) r.values.push_back(data.at(k));
  send(c, r);
  return true;
}

// Commands by family, each checking its own arity: a request with the wrong
// number of keys or values is a protocol error that closes the connection.
void TcpStoreServer::Impl::handle(Conn& c, Message& m) {
  if (!c.authed) {
    hello(c, m);
    return;
  }
  switch (static_cast<Command>(m.code)) {
    case Command::kSet:
    case Command::kMultiSet:
    case Command::kCompareSet:
      write_keys(c, m);
      return;
    case Command::kAdd:
      add(c, m);
      return;
    case Command::kGet:
    case Command::kWait:
    case Command::kMultiGet:
    case Command::kCheck:
      read_keys(c, m);
      return;
    case Command::kDelete:
    case Command::kDeletePrefix:
      delete_keys(c, m);
      return;
    case Command::kNumKeys:
    case Command::kTime:
      query(c, m);
      return;
    case Command::kHello:
      protocol_error(c, "a second HELLO");
      return;
  }
  protocol_error(c, fmt::format("unknown command {}", static_cast<int>(m.code)));
}

bool TcpStoreServer::Impl::arity(Conn& c, const Message& m, size_t keys, size_t values) {
  if (m.keys.size() == keys && m.values.size() == values) return true;
  protocol_error(c, fmt::format("{} with {} keys and {} values (expected {} and {})", wire::command_name(m.code),
                                m.keys.size(), m.values.size(), keys, values));
  return false;
}

void TcpStoreServer::Impl::write_keys(Conn& c, Message& m) {
  switch (static_cast<Command>(m.code)) {
    case Command::kSet:
      if (!arity(c, m, 1, 1)) return;
      data[m.keys[0]] = std::move(m.values[0]);
      changed = true;
      send(c, wire::reply(Reply::kOk));
      return;
    case Command::kMultiSet:
      if (!arity(c, m, m.keys.size(), m.keys.size())) return;
      for (size_t i = 0; i < m.keys.size(); ++i) data[m.keys[i]] = std::move(m.values[i]);
      changed = true;
      send(c, wire::reply(Reply::kOk));
      return;
    default: {  // kCompareSet
      if (!arity(c, m, 1, 2)) return;
      const Bytes& expected = m.values[0];
      auto it = data.find(m.keys[0]);
      if (it == data.end() ? expected.empty() : it->second == expected) {
        data[m.keys[0]] = m.values[1];
        changed = true;
        send(c, wire::reply(Reply::kOk, {}, {std::move(m.values[1])}));
      } else {
        send(c, wire::reply(Reply::kOk, {}, {it == data.end() ? expected : it->second}));
      }
      return;
    }
  }
}

void TcpStoreServer::Impl::add(Conn& c, const Message& m) {
  if (!arity(c, m, 1, 0)) return;
  int64_t v = 0;
  auto it = data.find(m.keys[0]);
  if (it != data.end()) {
    auto cur = parse_int(it->second);
    if (!cur) {
      send(c, wire::reply(Reply::kInvalid, {}, {to_bytes(InvalidArgument::make(
          "key", m.keys[0], "a key holding a decimal integer, to add to").what())}));
      return;
    }
    v = *cur;
  }
  if (__builtin_add_overflow(v, m.arg, &v)) {
    send(c, wire::reply(Reply::kInvalid, {}, {to_bytes(InvalidArgument::make(
        "delta", std::to_string(m.arg),
        fmt::format("a delta that keeps key '{}' within int64", m.keys[0])).what())}));
    return;
  }
  data[m.keys[0]] = to_bytes(std::to_string(v));
  changed = true;
  send(c, wire::reply(Reply::kOk, {}, {}, v));
}

void TcpStoreServer::Impl::read_keys(Conn& c, Message& m) {
  const auto cmd = static_cast<Command>(m.code);
  if (!arity(c, m, cmd == Command::kGet ? 1 : m.keys.size(), 0)) return;
  if (cmd == Command::kCheck) {
    bool all = true;
    for (const auto& k : m.keys) all = all && data.count(k);
    send(c, wire::reply(Reply::kOk, {}, {}, all ? 1 : 0));
    return;
  }
  c.parked_until = Deadline::after(Millis(wire::clamp_wait_ms(m.arg)));
  if (!try_answer(c, m)) c.parked = std::move(m);
}

void TcpStoreServer::Impl::delete_keys(Conn& c, const Message& m) {
  if (!arity(c, m, 1, 0)) return;
  if (static_cast<Command>(m.code) == Command::kDelete) {
    send(c, wire::reply(Reply::kOk, {}, {}, data.erase(m.keys[0]) ? 1 : 0));
    return;
  }
  if (m.keys[0].empty()) {
    send(c, wire::reply(Reply::kInvalid, {}, {to_bytes("DELETE_PREFIX needs a non-empty prefix")}));
    return;
  }
  send(c, wire::reply(Reply::kOk, {}, {}, erase_prefix(data, m.keys[0])));
}

void TcpStoreServer::Impl::query(Conn& c, const Message& m) {
  if (!arity(c, m, 0, 0)) return;
  if (static_cast<Command>(m.code) == Command::kNumKeys) {
    send(c, wire::reply(Reply::kOk, {}, {}, static_cast<int64_t>(data.size())));
    return;
  }
  send(c, wire::reply(Reply::kOk, {}, {},
                      std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()));
}

void TcpStoreServer::Impl::expire_parked() {
  for (auto& cp : conns) {
    Conn& c = *cp;
    if (c.dead || !c.parked || !c.parked_until.expired()) continue;
    guarded(c, [&] {
      Message m = std::move(*c.parked);
      c.parked.reset();
      try_answer(c, m);
      process(c);
    });
  }
}

void TcpStoreServer::Impl::retry_parked() {
  // Answering one waiter lets its connection run its next request, which may write keys again.
  while (changed) {
    changed = false;
    for (auto& cp : conns) {
      Conn& c = *cp;
      if (c.dead || !c.parked) continue;
      guarded(c, [&] {
        if (!try_answer(c, *c.parked)) return;
        c.parked.reset();
        process(c);
      });
    }
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string token)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535)
    throw InvalidArgument::make("port", std::to_string(port), "a TCP port in [0, 65535] (0 picks a free one)");
  impl_->host = host;
  impl_->port = port;
  impl_->token = std::move(token);
  impl_->bind_and_listen();
  impl_->wake_fd = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl_->wake_fd)
    throw IoError(fmt::format("store server: eventfd failed: {}", errno_text(errno)));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  SINEW_INFO(kStore, "store server listening on {}:{}{}", host, impl_->port,
             impl_->token.empty() ? " (no token)" : "");
}

TcpStoreServer::~TcpStoreServer() {
  uint64_t one = 1;
  ssize_t w;
  do {
    w = ::write(impl_->wake_fd.get(), &one, sizeof one);
  } while (w < 0 && errno == EINTR);
  impl_->thread.join();
}

int TcpStoreServer::port() const { return impl_->port; }
const std::string& TcpStoreServer::host() const { return impl_->host; }
int64_t TcpStoreServer::refused_connections() const {
  return impl_->refused.load(std::memory_order_relaxed);
}

}  // namespace sinew::dist
