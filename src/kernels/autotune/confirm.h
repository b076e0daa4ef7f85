// The autotuner's confirmation round: which variants of a first timing pass
// are timed again, for how many rounds, and the pick from both passes.
//
// The first pass times the variants one after another, so a moment of load
// on a shared machine can land on the true winner's samples alone and make
// it lose. The leading contenders are therefore timed again interleaved (a
// sample of each per round), where such a moment hits them alike, and each
// keeps its fastest sample of either pass (load only ever adds time).
//
// Everything here is a function of the first pass's (allgathered) timings,
// the variants' order and the options, which all ranks share: every rank
// derives the same list and, from the same timings, the same pick.
#pragma once

#include <cstddef>
#include <vector>

#include "sinew/kernels/autotune.h"

namespace sinew::kernels::tune {

// Calls per sample: enough to last o.min_sample_seconds (a call that takes
// `once_seconds`).
int sample_reps(double once_seconds, const TuneOptions& o);

// Indices into `vs` (measured_us: the first pass; NaN where not timed) of
// the variants to time again, fastest first (ties by index): the fastest
// variant, the same candidate in its other epilogue mode, each other
// family's fastest within o.confirm_family_band of it, then the next
// fastest within o.confirm_band while the list is shorter than
// o.max_confirmed. Empty when there is nothing to decide between (fewer
// than two) or o.confirm_rounds <= 0.
std::vector<size_t> confirmation_list(const std::vector<TuneVariant>& vs, const TuneOptions& o);

// Rounds to time `list` for: o.confirm_rounds, fewer where a round (each
// variant's sample_reps calls at its first-pass time) would take the
// confirmation past half of `first_pass_seconds` or a variant past
// o.max_variant_seconds; at least one.
int confirmation_rounds(const std::vector<TuneVariant>& vs, const std::vector<size_t>& list, const TuneOptions& o,
                        double first_pass_seconds);

// The index of the variant with the lowest best_us(), the first of equals
// (the variants' order is the same on every rank); vs.size() when none was
// timed.
size_t pick_fastest(const std::vector<TuneVariant>& vs);

}  // namespace sinew::kernels::tune
