// Where `sinew run` sends a worker's stdout and stderr: complete lines to the
// launcher's console with a "[host:rank] " prefix, raw bytes to per-rank log
// files (<log-dir>/<run-id>/attempt_<n>/<local_rank>/{stdout,stderr}.log, as
// torchrun lays them out).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "sinew/core/unique_fd.h"

namespace sinew::cli {

// torchrun's --tee / --redirects value: "3" for every local rank, or
// "0:1,2:3" per local rank. Bit 1 is stdout, bit 2 stderr.
struct StreamMask {
  int all = 0;
  std::map<int, int> per_rank;

  static StreamMask parse(const std::string& option, const std::string& text);
  int of(int local_rank) const {
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? all : it->second;
  }
  bool empty() const { return all == 0 && per_rank.empty(); }
};

inline constexpr int kStdout = 1;
inline constexpr int kStderr = 2;

struct OutputPolicy {
  std::optional<std::set<int>> console_ranks;  // --local-ranks-filter (unset: all)
  StreamMask tee;
  StreamMask redirects;
  std::string log_dir;  // empty: no log files

  // Whether a stream (kStdout or kStderr) of a local rank is shown / logged.
  // With a log dir and neither --tee nor --redirects every stream is logged.
  bool to_console(int local_rank, int stream) const;
  bool to_file(int local_rank, int stream) const;
};

// One worker stream, read from a non-blocking pipe.
class OutputStream {
 public:
  OutputStream(UniqueFd pipe, int console_fd, std::string prefix, bool to_console, UniqueFd log);
  int fd() const { return pipe_.get(); }
  // Reads what is available; closes the pipe at end of file.
  void on_readable();
  // Reads what is left without blocking, flushes a partial last line and
  // closes the pipe (a grandchild may hold its write end open forever).
  void finish();

 private:
  void consume(const char* data, size_t n);
  void emit(std::string_view line);

  UniqueFd pipe_;
  int console_fd_;
  std::string prefix_;
  bool to_console_;
  UniqueFd log_;
  std::string partial_;
};

// Writes all of `data`, retrying on EINTR; gives up silently on other errors
// (a closed console must not stop the job).
void write_all(int fd, std::string_view data);

}  // namespace sinew::cli
