// TCP store: a server (hosted by the launcher, or by rank 0 under
// mpirun/srun) and clients. Every client presents the job's token in its
// hello; a client with a wrong or missing token is refused.
//
// Wire format (little-endian): each request is
//   u8 command, u32 nkeys, [u32 len, bytes]*nkeys, u32 nvalues, [u32 len, bytes]*, i64 arg
// Lengths are bounded by SINEW_STORE_MAX_VALUE_BYTES so a bad peer cannot make
// us allocate without bound.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "sinew/dist/store.h"

namespace sinew::dist {

class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free one) and serves in a background
  // thread until destroyed. `token` may be empty (no authentication).
  TcpStoreServer(const std::string& host, int port, std::string token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  const std::string& host() const;
  // Number of connections refused for a bad token (for tests and logs).
  int64_t refused_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string token;
  Millis timeout = Store::kDefaultTimeout;
  // How long to keep retrying the initial connection.
  Millis connect_timeout{60'000};
};

// Connects to a TcpStoreServer; throws IoError / TimeoutError if it cannot,
// and InvalidArgument("token rejected ...") if the server refuses the token.
StorePtr make_tcp_store(const TcpStoreOptions& options);

// A random token for a new job (hex, 32 chars).
std::string make_job_token();

}  // namespace sinew::dist
