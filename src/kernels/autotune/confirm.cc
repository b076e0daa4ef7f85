#include "kernels/autotune/confirm.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace sinew::kernels::tune {

int sample_reps(double once_seconds, const TuneOptions& o) {
  return static_cast<int>(std::clamp(std::ceil(o.min_sample_seconds / std::max(once_seconds, 1e-9)), 1.0, 1e5));
}

std::vector<size_t> confirmation_list(const std::vector<TuneVariant>& vs, const TuneOptions& o) {
  if (o.confirm_rounds <= 0) return {};
  // By first-pass time, then position: what every rank sees alike.
  std::vector<size_t> timed;
  for (size_t i = 0; i < vs.size(); ++i)
    if (std::isfinite(vs[i].measured_us)) timed.push_back(i);
  const auto faster = [&](size_t x, size_t y) {
    return vs[x].measured_us != vs[y].measured_us ? vs[x].measured_us < vs[y].measured_us : x < y;
  };
  std::sort(timed.begin(), timed.end(), faster);
  if (timed.size() < 2) return {};
  const TuneVariant& best = vs[timed[0]];
  std::vector<size_t> list{timed[0]};
  auto add = [&](size_t i) {
    if (std::find(list.begin(), list.end(), i) == list.end()) list.push_back(i);
  };
  // Whether to fuse is decided between the two modes of one kernel: they
  // are always confirmed together.
  for (size_t i : timed)
    if (vs[i].candidate == best.candidate && vs[i].mode != best.mode) add(i);
  // Families differ in how they load the machine (OpenBLAS runs its own
  // threads), so one load spike can hit a whole family: a wider band.
  std::map<std::string, size_t> family_best;
  for (size_t i : timed) family_best.emplace(vs[i].family, i);  // the first seen is its fastest
  for (const auto& [family, i] : family_best)
    if (vs[i].measured_us <= best.measured_us * (1 + o.confirm_family_band)) add(i);
  for (size_t i : timed) {
    if (list.size() >= static_cast<size_t>(std::max(0, o.max_confirmed))) break;
    if (vs[i].measured_us <= best.measured_us * (1 + o.confirm_band)) add(i);
  }
  if (list.size() < 2) return {};
  std::sort(list.begin(), list.end(), faster);
  return list;
}

int confirmation_rounds(const std::vector<TuneVariant>& vs, const std::vector<size_t>& list, const TuneOptions& o,
                        double first_pass_seconds) {
  double round = 0, longest = 0;
  for (size_t i : list) {
    const double once = vs[i].measured_us * 1e-6;
    const double sample = once * sample_reps(once, o);
    round += sample;
    longest = std::max(longest, sample);
  }
  const double by_total = std::floor(0.5 * first_pass_seconds / std::max(round, 1e-9));
  const double by_variant = std::floor(o.max_variant_seconds / std::max(longest, 1e-9));
  return static_cast<int>(std::clamp(std::min(by_total, by_variant), 1.0, std::max(1.0, 1.0 * o.confirm_rounds)));
}

size_t pick_fastest(const std::vector<TuneVariant>& vs) {
  size_t best = vs.size();
  for (size_t i = 0; i < vs.size(); ++i) {
    const double us = vs[i].best_us();
    if (std::isfinite(us) && (best == vs.size() || us < vs[best].best_us())) best = i;
  }
  return best;
}

}  // namespace sinew::kernels::tune
