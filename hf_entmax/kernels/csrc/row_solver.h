// The row solver: one row's normaliser by Newton's method over the shrinking set of candidates for its support, with
// rough passes far from the root, Halley's steps and a Taylor finish for near-softmax rows, and specialised loops for
// softmax, 1.5-entmax and sparsemax. Rows with few candidates are handed to the lane solver (lane_solver.h).
// docs/kernel.md explains the method and its accuracy.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "compiler.h"
#include "constants.h"
#include "fast_math.h"
#include "newton_common.h"

namespace hf_entmax {

// Scratch space of one thread: the row's masked scores (when there is a mask, or the output overwrites the scores),
// the surviving candidates of a sparse row (score, column), and the probability and 1/base of each candidate.
template <typename T>
struct Candidates {
  std::vector<T> row, scores, probs, inverse_bases;
  std::vector<int64_t> column;
  explicit Candidates(int64_t size)
      : row(size), scores(size + kPadding), probs(size + kPadding), inverse_bases(size + kPadding), column(size) {}
};

// The sums a pass returns: moments[k] = Σ p / base^k, so moments[0] = Σ p and moments[1] = Σ p^(1 − β) = −dΣp/dc.
// Near-softmax rows also need moments[2] for Halley's step and, in exact passes, moments[2..4] for the Taylor finish;
// other rows leave them 0.
struct Evaluation {
  std::array<double, 5> moments{};
  int64_t outside = 0;  // candidates already out of the support
};

// A threshold x for the candidates of the support (the entries above it), lowered by at least one spacing (x minus
// A threshold x for the candidates of the support (the entries above it), lowered by at least one spacing (x minus
// 2ε|x| is 2 to 4 spacings below x before it rounds; −inf stays): x has been rounded, and one that rounded up left
// entries of the support out (rows of scores near 1e7 summed to 0). An entry kept in vain has base ≤ 0 in the passes,
// which leave it out.
template <typename T>
HF_ENTMAX_INLINE T lowered_threshold(T x) {
  return x - std::abs(x) * (2 * std::numeric_limits<T>::epsilon());
}

// p = [1 + β (z − shift)]_+^(1/β) of `count` scores, into `probs` (and 1/base into `inverse_bases`), and their moments,
// each entry's base formed as shift_entry forms it.
template <typename T, RowKind Kind, Pass P>
HF_ENTMAX_INLINE Evaluation evaluate(const T* scores, T* probs, T* inverse_bases, int64_t count, T beta, T row_max,
                                     double normaliser) {
  constexpr int kMoments = Kind != RowKind::kNearSoftmax ? 2 : P == Pass::kRough ? 3 : 5;
  T shift_high, shift_low;
  split_shift(row_max, normaliser, shift_high, shift_low);
  const T slope_exponent = T(1) / beta - T(1);
  Evaluation evaluation;
  // Sums over blocks of kSumBlock entries stay in T, which keeps the loop in one vector width (double sums would
  // convert every lane); adding the blocks' sums in double keeps Σ p accurate to ε for the convergence test.
  for (int64_t start = 0; start < count; start += kSumBlock) {
    const int64_t stop = std::min(count, start + kSumBlock);
    T mass = 0, slope = 0, moment2 = 0, moment3 = 0, moment4 = 0;
    int32_t outside = 0;
    // General kinds take log g in a loop of its own, then its exp below (see entry_log_slope).
    alignas(64) T log_slopes[kSumBlock];
    if constexpr (is_general(Kind)) {
#pragma omp simd
      for (int64_t j = start; j < stop; ++j) {
        log_slopes[j - start] = entry_log_slope<T, P>(scores[j], shift_high, shift_low, beta, slope_exponent);
      }
    }
#pragma omp simd reduction(+ : mass, slope, moment2, moment3, moment4, outside)
    for (int64_t j = start; j < stop; ++j) {
      const T base = shift_entry(scores[j], shift_high, shift_low, beta).base;
      const bool inside = base > T(0);
      const T safe_base = inside ? base : T(1);
      T g;
      if constexpr (is_general(Kind)) {
        g = inside ? pass_exp<T, P>(log_slopes[j - start]) : T(0);
      } else if constexpr (Kind == RowKind::kEntmax15) {
        g = inside ? base : T(0);
      } else {
        g = inside ? T(1) : T(0);
      }
      const T p = g * safe_base;
      if constexpr (P == Pass::kExact) probs[j] = p;
      if constexpr (kMoments > 2) {
        const T inverse_base = T(1) / safe_base;
        const T g2 = g * inverse_base;
        moment2 += g2;
        if constexpr (kMoments > 3) {
          inverse_bases[j] = inverse_base;
          const T g3 = g2 * inverse_base;
          moment3 += g3;
          moment4 += g3 * inverse_base;
        }
      }
      mass += p;
      slope += g;
      outside += inside ? 0 : 1;
    }
    const T block_sums[] = {mass, slope, moment2, moment3, moment4};
    for (int k = 0; k < 5; ++k) evaluation.moments[k] += block_sums[k];
    evaluation.outside += outside;
  }
  return evaluation;
}

// s (1 − s^(−β)) / β, the numerator of the Newton step, from the mass s of a pass. It costs little next to a pass
// over a long row, but two libm calls per pass are a third of the time of a short row (decoding attends over a few
// keys): a rough pass (s far from 1, no cancellation) takes rough exp/log, and near the root a series in s − 1.
template <typename T>
inline double newton_numerator(double mass, double beta, bool rough) {
  const double x = mass - 1.0;
  if (rough) {
    return mass * (1.0 - rough_power<T>(mass, -beta)) / beta;
  }
  if (std::abs(x) < 1e-3) {
    // (1 + x)(x − (β + 1)/2 x² + (β + 1)(β + 2)/6 x³ − (β + 1)(β + 2)(β + 3)/24 x⁴), with an error below x⁵ < 1e-15.
    const double b1 = beta + 1, b2 = b1 * (beta + 2) / 6, b3 = b2 * (beta + 3) / 4;
    return (1.0 + x) * x * (1.0 - x * (b1 / 2 - x * (b2 - x * b3)));
  }
  return -mass * std::expm1(-beta * std::log(mass)) / beta;
}

// The Taylor finish of a near-softmax row (β < 1/2), from an exact pass at c. Moving c by δ scales
// each p by (1 − β δ/base)^(1/β) = Σ_j a_j (−u)^j, with u = δ/base, a_0 = 1 and a_j = a_(j−1) (1 − (j − 1) β) / j.
// Truncated after order k ≤ 1/β − 1 (so that p/base^(k+1) ≤ 1), it errs by less than a_(k+1) δ^(k+1) p/base^(k+1)
// per entry, so by less than a_(k+1) δ^(k+1) moments[k+1] in all. The finish takes δ from the truncated
// Σ p(c + δ) = 1 and, where that error is below ε, updates p in place of another pass, returning the new Σ p; it
// returns 0 (and changes nothing) where the step is too long for it. A pass costs a log and an exp per entry, this
// a few multiply-adds: a row with α ≤ 1.25 then needs one rough and one exact pass.
template <typename T>
double taylor_finish(T* probs, const T* inverse_bases, int64_t count, double beta, const Evaluation& evaluation) {
  const int order = std::min(3, static_cast<int>(1.0 / beta) - 1);
  const std::array<double, 5> coefficients = {1.0, 1.0, (1 - beta) / 2, (1 - beta) * (1 - 2 * beta) / 6,
                                              (1 - beta) * (1 - 2 * beta) * (1 - 3 * beta) / 24};
  const auto& moments = evaluation.moments;
  // Newton on the polynomial Σ_j a_j (−δ)^j moments[j] − 1, from its first-order root.
  double step = (moments[0] - 1) / moments[1];
  for (int iteration = 0; iteration < 3; ++iteration) {
    double value = -1.0, derivative = 0.0, power = 1.0;
    for (int j = 0; j <= order; ++j) {
      value += coefficients[j] * power * moments[j];
      if (j < order) derivative -= (j + 1) * coefficients[j + 1] * power * moments[j + 1];
      power *= -step;
    }
    step -= value / derivative;
  }
  double error = coefficients[order + 1] * moments[order + 1];
  for (int j = 0; j <= order; ++j) error *= std::abs(step);
  if (step < 0) {
    // Above the root (after an overshooting rough step), every term of the series is positive and the remainder
    // exceeds the next term by up to (1 + β|δ|/base)^(1/β − k − 1) ≤ 2^(1/β − k − 1) where base ≥ β|δ|; an entry
    // with a smaller base, or outside the support at c but inside at c + δ, has p ≤ (2β|δ|)^(1/β) at the root.
    error = error * rough_power<T>(2.0, 1.0 / beta - order - 1) + count * rough_power<T>(2 * beta * -step, 1.0 / beta);
  }
  if (!(error <= std::numeric_limits<T>::epsilon())) return 0.0;
  // Σ_j a_j (−u)^j by Horner's rule, with a_j = 0 above the order.
  const T a1 = static_cast<T>(coefficients[1]), a2 = order >= 2 ? static_cast<T>(coefficients[2]) : T(0),
          a3 = order >= 3 ? static_cast<T>(coefficients[3]) : T(0), step_size = static_cast<T>(step);
  double mass = 0.0;
#pragma omp simd reduction(+ : mass)
  for (int64_t j = 0; j < count; ++j) {
    const T minus_u = -step_size * inverse_bases[j];
    const T p = std::max(probs[j] * (T(1) + minus_u * (a1 + minus_u * (a2 + minus_u * a3))), T(0));
    probs[j] = p;
    mass += p;
  }
  return mass;
}

// One row: p = entmax(scores + mask) into `out`, which may be `scores` itself. `mask` (additive) may be null. A row of
// a general kind with at most kShortRow candidates is handed to defer(candidates, columns, count) instead, to be
// solved in SIMD lanes with others like it (see solve_lanes), which then writes `out`.
template <typename T, RowKind Kind, typename Defer>
void entmax_row(const T* scores, const T* mask, T* out, int64_t size, T beta, Candidates<T>& scratch, Defer&& defer) {
  const T lowest = std::numeric_limits<T>::lowest();
  T row_max = -std::numeric_limits<T>::infinity();
  if (mask != nullptr || scores == out) {
    // The passes below read the scores after dense rows have started writing p, so they read a copy (in L1).
    T* row = scratch.row.data();
    if (mask != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < size; ++i) row[i] = scores[i] + mask[i];
    } else {
      std::copy(scores, scores + size, row);
    }
    scores = row;
  }
  // The sum of the scores is NaN if one is (or if +inf and −inf meet): a cheaper test than looking for NaN in this loop,
  // which costs short rows a few percent. Softmax needs neither where the maximum is finite, since its exp carries a
  // NaN to every entry.
  T checksum = 0;
#pragma omp simd reduction(max : row_max) reduction(+ : checksum)
  for (int64_t i = 0; i < size; ++i) {
    row_max = scores[i] > row_max ? scores[i] : row_max;
    if constexpr (Kind != RowKind::kSoftmax) checksum += scores[i];
  }
  if (!(checksum == checksum && lowest < row_max && row_max < std::numeric_limits<T>::infinity())) {
    // Rare rows (see "Rows the iteration does not solve"), and rows whose sum overflowed, which go on below.
    if (std::any_of(scores, scores + size, [](T score) { return score != score; })) {
      fill_nan(out, size);
      return;
    }
    if (row_max <= lowest) {  // every entry masked: all zeros
      std::fill(out, out + size, T(0));
      return;
    }
    if (row_max == std::numeric_limits<T>::infinity()) {
      share_among_maxima(scores, out, size, row_max);
      return;
    }
  }

  if constexpr (Kind == RowKind::kSoftmax) {
    double mass = 0.0;
#pragma omp simd reduction(+ : mass)
    for (int64_t i = 0; i < size; ++i) {
      const T shifted = scores[i] - row_max;
      // Masked entries are below the floor; NaN is not, and its exp, NaN, makes the row's mass NaN, and so every p.
      const T p = shifted < Math<T>::kExpFloor ? T(0) : Math<T>::exp(shifted);
      out[i] = p;
      mass += p;
    }
    const T inverse_mass = static_cast<T>(1.0 / mass);
    for (int64_t i = 0; i < size; ++i) out[i] *= inverse_mass;
    return;
  }

  // At c = 0 the support is {z > max z − 1/β}; masked entries are never candidates. A dense row is iterated on
  // in place, writing p straight into `out`; a sparse row's candidates are gathered (and later pruned) into
  // `scratch`, padded with masked entries.
  const T support_bound = row_max - T(1) / beta;
  if (support_bound == row_max) {  // the support is the maxima (see "Rows the iteration does not solve")
    share_among_maxima(scores, out, size, row_max);
    return;
  }
  const T first_threshold = std::max(lowered_threshold(support_bound), lowest);
  int64_t count = 0;
#pragma omp simd reduction(+ : count)
  for (int64_t i = 0; i < size; ++i) count += scores[i] > first_threshold ? 1 : 0;
  const T* candidate_scores = scores;
  const int64_t* columns = nullptr;  // in place: candidate j is column j
  T* probs = out;
  int64_t padded_count = size;
  const auto gather = [&](int64_t from_count, T threshold) {
    int64_t kept = 0;
    for_each_above(candidate_scores, from_count, threshold, [&](int64_t j) {
      scratch.scores[kept] = candidate_scores[j];
      scratch.column[kept] = columns != nullptr ? columns[j] : j;
      ++kept;
    });
    count = kept;
    padded_count = (kept + kPadding - 1) / kPadding * kPadding;
    std::fill(scratch.scores.begin() + kept, scratch.scores.begin() + padded_count, lowest);
    candidate_scores = scratch.scores.data();
    columns = scratch.column.data();
    probs = scratch.probs.data();
  };
  if constexpr (is_general(Kind)) {
    if (count <= kShortRow) {
      gather(size, first_threshold);
      defer(candidate_scores, columns, count);
      return;
    }
  }
  if (2 * count <= size) {
    gather(size, first_threshold);
  } else {
    count = size;
  }

  const double beta_d = beta;
  double normaliser = 0.0;  // c
  // Far from the root (see needs_rough_pass) general rows evaluate p with rough exp/log; entries are pruned only after
  // exact steps, which land below the root. Near-softmax rows with β ≤ 1/4 take one rough pass only: from there the
  // Taylor finish (order 3 at β ≤ 1/4) usually ends the row after one exact pass.
  bool rough = is_general(Kind);
  const bool one_rough_pass = Kind == RowKind::kNearSoftmax && beta_d <= 0.25;
  bool below_root = true;      // c ≤ c*: no entry outside the support at c can be in it at the root
  double largest_root = -1.0;  // computed on first use
  double mass = 0.0;
  for (int iteration = 0; iteration < kMaxNewtonPasses; ++iteration) {
    T* inverse_bases = scratch.inverse_bases.data();
    const Evaluation evaluation =
        rough ? evaluate<T, Kind, Pass::kRough>(candidate_scores, probs, inverse_bases, padded_count, beta, row_max,
                                                normaliser)
              : evaluate<T, Kind, Pass::kExact>(candidate_scores, probs, inverse_bases, padded_count, beta, row_max,
                                                normaliser);
    mass = evaluation.moments[0];
    const double slope = evaluation.moments[1];
    if (!rough && mass_converged<T>(mass)) break;
    if constexpr (Kind == RowKind::kNearSoftmax) {
      if (!rough) {
        if (const double finished_mass = taylor_finish(probs, inverse_bases, padded_count, beta_d, evaluation);
            finished_mass > 0) {
          mass = finished_mass;
          break;
        }
      }
    }
    // Newton on h(c) = log_β(s): c += h / |h'| with h' = −s^(β − 1) Σ g, i.e. c += s (1 − s^(−β)) / (β Σ g).
    double step = newton_numerator<T>(mass, beta_d, rough) / slope;
    if (!rough && step_stalled(below_root, step)) break;
    if constexpr (Kind == RowKind::kNearSoftmax) {
      if (rough) {
        // Halley's step δ / (1 − x), with x = δ h'' / (2 |h'|) = δ (1 − β) (s m₂ − (Σ g)²) / (2 s Σ g) ≥ 0 (h is
        // convex; m₂ = Σ g / base), takes fewer passes than Newton's. It is capped at 2δ, and at the root when all n
        // candidates tie, c = (1 − n^(−β)) / β, which bounds every root and keeps the row's maximum at p ≥ 1/n.
        const double halley_correction =
            std::min(step * (1 - beta_d) * (mass * evaluation.moments[2] - slope * slope) / (2 * mass * slope), 0.5);
        if (largest_root < 0) largest_root = (1.0 - rough_power<T>(static_cast<double>(count), -beta_d)) / beta_d;
        step = std::min(step / (1 - halley_correction), largest_root - normaliser);
      }
    }
    normaliser += step;
    below_root = !rough;
    // After an exact step c ≤ c*, so an entry outside the support at c is outside it at the root. Dropping the few
    // that are is not worth a pass over the candidates; dropping a quarter is.
    if (below_root && 4 * (evaluation.outside - (padded_count - count)) > count) {
      gather(count, lowered_threshold(static_cast<T>(row_max + (normaliser - 1.0 / beta_d))));
    }
    rough = rough && !one_rough_pass && needs_rough_pass(mass);
  }
  // The remaining error in the mass is below rounding; dividing it out makes Σ p = 1 exact.
  const T inverse_mass = static_cast<T>(1.0 / mass);
  if (columns == nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < size; ++i) out[i] *= inverse_mass;
  } else {
    std::fill(out, out + size, T(0));
    for (int64_t j = 0; j < count; ++j) out[columns[j]] = probs[j] * inverse_mass;
  }
}

}  // namespace hf_entmax
