// One row of the backward: the gradients to the scores and to β in one pass over the row's support (gathered first
// when the row is sparse), at the probabilities the forward gave. Shared by backward.cpp and restricted.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "compiler.h"
#include "constants.h"
#include "fast_math.h"
#include "newton_common.h"

namespace hf_entmax {

// 1/(k + 2)! for k < Terms: the coefficients of ψ's series below.
template <typename T, int Terms>
constexpr std::array<T, Terms> psi_coefficients() {
  std::array<T, Terms> coefficients{};
  double value = 0.5;
  for (int k = 0; k < Terms; ++k) {
    coefficients[k] = static_cast<T>(value);
    value /= k + 3;
  }
  return coefficients;
}

// Below this v, the α-gradient takes ψ's series rather than its closed form, which cancels for small v (the reference,
// entmax.py, switches at |u| < 0.1 in another variable, u = p^β − 1, with another series: see docs/kernel.md).
constexpr double kPsiSeriesBound = 1.0;

// ψ(v) = (e^v − 1 − v) / v² = Σ_{k≥0} v^k / (k + 2)! for 0 ≤ v < kPsiSeriesBound, to T's precision. Horner's rule
// runs on the even and the odd terms separately (in v²), which halves the chain of dependent operations (see
// fast_exp).
template <typename T>
HF_ENTMAX_INLINE T psi_series(T v) {
  constexpr int kTerms = std::is_same_v<T, float> ? 10 : 17;  // the first omitted term is below ε
  constexpr std::array<T, kTerms> kCoefficients = psi_coefficients<T, kTerms>();
  const T v2 = v * v;
  constexpr int kLastEven = (kTerms - 1) / 2 * 2, kLastOdd = kTerms / 2 * 2 - 1;
  T even = kCoefficients[kLastEven], odd = kCoefficients[kLastOdd];
  HF_ENTMAX_UNROLL(16)
  for (int k = kLastEven - 2; k >= 0; k -= 2) even = even * v2 + kCoefficients[k];
  HF_ENTMAX_UNROLL(16)
  for (int k = kLastOdd - 2; k >= 1; k -= 2) odd = odd * v2 + kCoefficients[k];
  return even + v * odd;
}

struct BackwardSums {
  double slope = 0.0;                 // Σ g
  double weighted_grad = 0.0;         // Σ g dp
  double sensitivity = 0.0;           // Σ p D
  double weighted_sensitivity = 0.0;  // Σ p D dp
};

// g = p^(1 − β) of `count` entries into `weights`, and the sums the gradients need. D = ∂ log p / ∂β at a fixed
// normaliser (for AlphaGrad). Entries with p = 0 contribute nothing; outside the support g is p itself, 0 there, and NaN
// in a row of NaN, whose gradients then stay NaN.
template <typename T, RowKind Kind, bool AlphaGrad>
HF_ENTMAX_INLINE BackwardSums backward_sums(const T* probs, const T* grad, T* weights, int64_t count, T beta) {
  BackwardSums sums;
  const T inverse_beta_squared = beta == T(0) ? T(1) : T(1) / (beta * beta);
  for (int64_t start = 0; start < count; start += kSumBlock) {  // block sums in T, as in evaluate
    const int64_t stop = std::min(count, start + kSumBlock);
    T slope_sum = 0, weighted_grad = 0, sensitivity_sum = 0, weighted_sensitivity = 0;
    // log p in a loop of its own, for the reason entry_log_slope gives.
    alignas(64) T log_probs[kSumBlock];
    if constexpr (AlphaGrad || is_general(Kind)) {
#pragma omp simd
      for (int64_t i = start; i < stop; ++i) log_probs[i - start] = Math<T>::log(probs[i] > T(0) ? probs[i] : T(1));
    }
#pragma omp simd reduction(+ : slope_sum, weighted_grad, sensitivity_sum, weighted_sensitivity)
    for (int64_t i = start; i < stop; ++i) {
      const T p = probs[i];
      const bool inside = p > T(0);
      T g, probs_sensitivity = T(0);
      if constexpr (Kind == RowKind::kSparsemax && !AlphaGrad) {
        g = inside ? T(1) : p;
      } else if constexpr (Kind == RowKind::kEntmax15 && !AlphaGrad) {
        g = std::sqrt(p);
      } else if constexpr (Kind == RowKind::kSoftmax) {
        g = p;
        if constexpr (AlphaGrad) {
          const T log_p = log_probs[i - start];
          probs_sensitivity = -T(0.5) * p * log_p * log_p;
        }
      } else {
        // g = p^(1 − β) straight from log p: rounding the argument costs a relative (1 − β)|log p| ε, so g is accurate
        // to ε/e absolutely for every p (p / p^β would not be for a tiny p, whose p^β is then inexact).
        const T log_p = log_probs[i - start];
        g = inside ? Math<T>::exp((T(1) - beta) * log_p) : p;
        if constexpr (AlphaGrad) {
          // With L = log p and v = −βL ≥ 0, D = −L² ψ(v); and as p e^v = p^(1 − β) = g, p D = (p (1 + v) − g) / β²,
          // which cancels only for small v, where ψ's series takes over. p = 0 gives 0 either way (L = v = 0).
          const T v = -beta * log_p;
          const T closed_form = (p * (T(1) + v) - g) * inverse_beta_squared;
          probs_sensitivity = v < T(kPsiSeriesBound) ? -log_p * log_p * p * psi_series(v) : closed_form;
        }
      }
      weights[i] = g;
      slope_sum += g;
      weighted_grad += g * grad[i];
      sensitivity_sum += probs_sensitivity;
      weighted_sensitivity += probs_sensitivity * grad[i];
    }
    sums.slope += slope_sum;
    sums.weighted_grad += weighted_grad;
    sums.sensitivity += sensitivity_sum;
    sums.weighted_sensitivity += weighted_sensitivity;
  }
  return sums;
}

// Scratch space of one thread for the backward: the support's columns, probabilities, gradients and weights.
template <typename T>
struct Support {
  std::vector<int64_t> column;
  std::vector<T> probs, grad, weights;
  explicit Support(int64_t size)
      : column(size), probs(size + kPadding), grad(size + kPadding), weights(size + kPadding) {}
};

// One row of the backward: grad_scores = g ⊙ dp − g (Σ g dp) / Σ g, with g = p^(1 − β) on the support,
// and, for AlphaGrad, dL/dβ = Σ dp p D − (Σ g dp)(Σ p D) / Σ g. grad_scores may be `grad` (dp) itself.
template <typename T, RowKind Kind, bool AlphaGrad>
T entmax_backward_row(const T* probs, const T* grad, T* grad_scores, int64_t size, T beta, Support<T>& support) {
  // Count the support (one vectorised pass) and gather it if the row is sparse, which then costs little more than
  // the count. Where each entry is cheap anyway (no transcendental function), the count is not worth it. NaN entries
  // (a row of NaN) count, so that such a row is dense and its NaN reach the gradients.
  constexpr bool kAlwaysDense = Kind == RowKind::kSoftmax || (!is_general(Kind) && !AlphaGrad);
  int64_t count = size;
  if constexpr (!kAlwaysDense) {
    count = 0;
#pragma omp simd reduction(+ : count)
    for (int64_t i = 0; i < size; ++i) count += probs[i] != T(0) ? 1 : 0;
  }
  const bool dense = 2 * count > size;  // then the whole row, in place, is cheaper than gather and scatter
  BackwardSums sums;
  if (dense) {
    // The weights go to scratch, not to grad_scores, which may be `grad` itself (the in-place backward).
    sums = backward_sums<T, Kind, AlphaGrad>(probs, grad, support.weights.data(), size, beta);
  } else {
    count = 0;
    for_each_above(probs, size, T(0), [&](int64_t i) { support.column[count++] = i; });
    for (int64_t j = 0; j < count; ++j) {
      support.probs[j] = probs[support.column[j]];
      support.grad[j] = grad[support.column[j]];
    }
    const int64_t padded_count = (count + kPadding - 1) / kPadding * kPadding;  // padded with p = 0
    std::fill(support.probs.begin() + count, support.probs.begin() + padded_count, T(0));
    std::fill(support.grad.begin() + count, support.grad.begin() + padded_count, T(0));
    sums = backward_sums<T, Kind, AlphaGrad>(support.probs.data(), support.grad.data(), support.weights.data(),
                                             padded_count, beta);
  }
  const double slope_sum = sums.slope > 0 ? sums.slope : 1.0;
  const T mean_grad = static_cast<T>(sums.weighted_grad / slope_sum);
  if (dense) {
    const T* weights = support.weights.data();
#pragma omp simd
    for (int64_t i = 0; i < size; ++i) grad_scores[i] = weights[i] * (grad[i] - mean_grad);
  } else {
    std::fill(grad_scores, grad_scores + size, T(0));
    for (int64_t j = 0; j < count; ++j) {
      grad_scores[support.column[j]] = support.weights[j] * (support.grad[j] - mean_grad);
    }
  }
  return static_cast<T>(sums.weighted_sensitivity - sums.weighted_grad * sums.sensitivity / slope_sum);
}

// One row of any kind (see entmax_backward_row): returns the gradient to β, 0 unless `alpha_grad`.
template <typename T>
HF_ENTMAX_INLINE T entmax_backward_any_row(const T* probs, const T* grad, T* grad_scores, int64_t size, T beta,
                                           bool alpha_grad, Support<T>& support) {
  return with_row_kind(beta, [&](auto kind) {
    constexpr RowKind kKind = decltype(kind)::value;
    return alpha_grad ? entmax_backward_row<T, kKind, true>(probs, grad, grad_scores, size, beta, support)
                      : entmax_backward_row<T, kKind, false>(probs, grad, grad_scores, size, beta, support);
  });
}

}  // namespace hf_entmax
