// Deadlines: every blocking call in sinew takes one.
#pragma once

#include <chrono>

namespace sinew {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  // A deadline `d` from now. Negative or huge durations are clamped.
  static Deadline after(Clock::duration d) {
    if (d > std::chrono::hours(24 * 365)) return never();
    return Deadline(Clock::now() + d);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline at(Clock::time_point t) { return Deadline(t); }

  bool is_never() const { return t_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= t_; }
  Clock::time_point time_point() const { return t_; }
  Clock::duration remaining() const {
    if (is_never()) return Clock::duration::max();
    auto r = t_ - Clock::now();
    return r < Clock::duration::zero() ? Clock::duration::zero() : r;
  }
  // Milliseconds left, for poll(2)-style APIs: -1 means forever.
  int remaining_ms_for_poll() const {
    if (is_never()) return -1;
    auto ms = std::chrono::duration_cast<Millis>(remaining()).count();
    return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
  }
  Deadline min(const Deadline& o) const { return t_ < o.t_ ? *this : o; }

 private:
  explicit Deadline(Clock::time_point t) : t_(t) {}
  Clock::time_point t_;
};

}  // namespace sinew
