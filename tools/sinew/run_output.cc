#include "tools/sinew/cli_parse.h"
#include "tools/sinew/run_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "sinew/core/error.h"

namespace sinew::cli {
namespace {

// A line longer than this is emitted in pieces so a worker printing without
// newlines cannot grow the launcher's memory without bound.
constexpr size_t kMaxLine = 64 * 1024;

int parse_small_int(const std::string& option, const std::string& text, int lo, int hi,
                    const std::string& expected) {
  return static_cast<int>(parse_int(option, text, lo, hi, expected));
}

}  // namespace

StreamMask StreamMask::parse(const std::string& option, const std::string& text) {
  static const std::string kExpected =
      "0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank as '0:1,1:3'";
  StreamMask m;
  if (text.empty()) return m;
  if (text.find(':') == std::string::npos) {
    m.all = parse_small_int(option, text, 0, 3, kExpected);
    return m;
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw InvalidArgument::make(option, fmt::format("'{}'", text), kExpected);
    int rank = parse_small_int(option, item.substr(0, colon), 0, 1 << 20, kExpected);
    m.per_rank[rank] = parse_small_int(option, item.substr(colon + 1), 0, 3, kExpected);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return m;
}

bool OutputPolicy::to_console(int local_rank, int stream) const {
  if (console_ranks && console_ranks->count(local_rank) == 0) return false;
  return (redirects.of(local_rank) & stream) == 0;
}

bool OutputPolicy::to_file(int local_rank, int stream) const {
  if (log_dir.empty()) return false;
  if (tee.empty() && redirects.empty()) return true;
  return ((tee.of(local_rank) | redirects.of(local_rank)) & stream) != 0;
}

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

OutputStream::OutputStream(UniqueFd pipe, int console_fd, std::string prefix, bool to_console,
                           UniqueFd log)
    : pipe_(std::move(pipe)),
      console_fd_(console_fd),
      prefix_(std::move(prefix)),
      to_console_(to_console),
      log_(std::move(log)) {}

void OutputStream::on_readable() {
  char buf[16384];
  while (pipe_.get() >= 0) {
    ssize_t n = ::read(pipe_.get(), buf, sizeof(buf));
    if (n > 0) {
      consume(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    finish();  // end of file or a broken pipe
  }
}

void OutputStream::finish() {
  char buf[16384];
  while (pipe_.get() >= 0) {
    ssize_t n = ::read(pipe_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    consume(buf, static_cast<size_t>(n));
  }
  pipe_.reset();
  if (!partial_.empty()) {
    emit(partial_);
    partial_.clear();
  }
}

void OutputStream::consume(const char* data, size_t n) {
  if (log_.get() >= 0) write_all(log_.get(), std::string_view(data, n));
  if (!to_console_) return;
  partial_.append(data, n);
  size_t start = 0;
  for (;;) {
    size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    emit(std::string_view(partial_).substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  while (partial_.size() >= kMaxLine) {
    emit(std::string_view(partial_).substr(0, kMaxLine));
    partial_.erase(0, kMaxLine);
  }
}

void OutputStream::emit(std::string_view line) {
  if (!to_console_) return;
  // One write per line so lines of different workers never interleave.
  std::string out;
  out.reserve(prefix_.size() + line.size() + 2);
  out.append(prefix_).append(" ").append(line).append("\n");
  write_all(console_fd_, out);
}

}  // namespace sinew::cli
