// The scalar definitions of the epilogue's activations and reductions: the
// reference pass uses them, and the f64 tile kernels apply them lane by lane.
// GELU is written in its tail-stable forms (0.5 (1 + tanh u) = sigmoid(2u),
// 1 + erf(x) = erfc(-x)), equal to the textbook ones. `static` so that every
// ISA's sources compile their own copy.
#pragma once

#include <cmath>
#include <limits>

#include "sinew/kernels/epilogue.h"

namespace sinew::kernels {

static inline double act_relu(double x) { return x > 0 ? x : (x == x ? 0.0 : x); }
static inline double act_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
static inline double act_silu(double x) { return x * act_sigmoid(x); }
static inline double act_tanh(double x) { return std::tanh(x); }
static inline double act_gelu_tanh(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return x * act_sigmoid(2.0 * u);
}
static inline double act_gelu_erf(double x) { return 0.5 * x * std::erfc(-x * 0.7071067811865476); }

static inline double activate_scalar(Activation a, double x) {
  switch (a) {
    case Activation::kRelu: return act_relu(x);
    case Activation::kGeluTanh: return act_gelu_tanh(x);
    case Activation::kGeluErf: return act_gelu_erf(x);
    case Activation::kSilu: return act_silu(x);
    case Activation::kSigmoid: return act_sigmoid(x);
    case Activation::kTanh: return act_tanh(x);
  }
  return x;
}

static inline double nan_max(double a, double b) {
  if (a != a || b != b) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

// log(e^a + e^b), exact at infinities.
static inline double log_add_exp(double a, double b) {
  if (a != a || b != b) return std::numeric_limits<double>::quiet_NaN();
  const double m = a > b ? a : b;
  if (std::isinf(m)) return m;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// Folds a partial result over part of a group into the running value. For
// kMean the partial is a sum already divided by the group size; for kAmax
// it is a max of magnitudes.
static inline double reduction_combine(Reduction op, double running, double partial) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kMean: return running + partial;
    case Reduction::kMax:
    case Reduction::kAmax: return nan_max(running, partial);
    case Reduction::kLogSumExp: return log_add_exp(running, partial);
  }
  return running;
}

}  // namespace sinew::kernels
