// The lane solver: rows with few candidates for the support, kLanes at a time, one per SIMD lane, by the Newton
// iteration of the row solver (row_solver.h) without its pruning, Halley steps or Taylor finish.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "compiler.h"
#include "constants.h"
#include "fast_math.h"
#include "newton_common.h"

namespace hf_entmax {

// A row with a few dozen candidates for the support costs little in its passes and much in the scalar code between
// them: the sums, Newton's step and its exp and log. That is every short row (decoding attends over the keys so far;
// Multi30k sentences have 10–30 tokens) and most rows of sparse heads, whose support is a handful of entries however
// long the row. Such rows' candidates are solved kLanes at a time, one per SIMD lane: they are transposed so that a
// pass is a vector loop over the lanes, entry by entry, and so is each Newton step. Only rows with 0 < β < 1,
// β ≠ 1/2 take lanes (the other kinds have loops without exp and log), and none is pruned: their passes are cheap.

// s (1 − s^(−β)) / β, the numerator of Newton's step (see newton_numerator), with no branch or libm call so that it
// vectorises over lanes: near the root (|x| < kNearRoot) a series in x = s − 1 (8 terms, relative error below
// |x|^8 < 1e-8); away from it s log(s) (1 − e^(−y)) / y with y = β log s, the last factor by its series where y is
// small (|y| < kSmallExponent, β near 0), where the closed form cancels.
template <typename T>
HF_ENTMAX_INLINE double lane_newton_numerator(double mass, double beta) {
  constexpr double kNearRoot = 0.1, kSmallExponent = 0.05;
  const double x = mass - 1.0;
  // 1 − (1 + x)^(−β) = β Σ_k (−1)^(k+1) (β + 1) ⋯ (β + k − 1) / k! x^k, summed from the last term.
  double near = 0.0;
  HF_ENTMAX_UNROLL(8)
  for (int k = 8; k >= 1; --k) near = x * (1.0 - near * (beta + k) / (k + 1));
  const double log_mass = Math<T>::log(static_cast<T>(mass));
  const double y = beta * log_mass;
  const double series = 1.0 - y / 2 * (1.0 - y / 3 * (1.0 - y / 4 * (1.0 - y / 5 * (1.0 - y / 6))));
  const double closed = (1.0 - Math<T>::exp(static_cast<T>(-y))) / y;
  const double far = log_mass * (std::abs(y) < kSmallExponent ? series : closed);
  return mass * (std::abs(x) < kNearRoot ? near : far);
}

// Rows waiting for a lane: each one's candidates (scores with the mask added; masked entries pad them to `width`),
// their columns, and the row of the output they are solved for.
template <typename T>
struct LaneBatch {
  T scores[kLanes][kShortRow];  // transposed by solve_lanes (doing it here would store lane by lane, one float apart)
  int64_t columns[kLanes][kShortRow];
  int64_t count[kLanes];
  bool whole_row[kLanes];  // the candidates are the row itself (columns unused)
  T* out[kLanes];
  int64_t out_size[kLanes];
  T beta[kLanes];
  int waiting = 0;
  int64_t width = 0;  // the most candidates of any waiting row

  // A row's candidates, gathered from it.
  void add(const T* candidates, const int64_t* candidate_columns, int64_t candidate_count, T* row_out,
           int64_t row_size, T row_beta) {
    std::copy(candidate_columns, candidate_columns + candidate_count, columns[waiting]);
    add_lane(candidates, nullptr, candidate_count, false, row_out, row_size, row_beta);
  }

  // A whole row of at most kShortRow entries, mask (possibly null) added: for rows that short, the thresholding
  // and gathering of entmax_row cost more than they save.
  void add_row(const T* row_scores, const T* row_mask, T* row_out, int64_t row_size, T row_beta) {
    add_lane(row_scores, row_mask, row_size, true, row_out, row_size, row_beta);
  }

 private:
  void add_lane(const T* values, const T* mask, int64_t value_count, bool whole, T* row_out, int64_t row_size,
                T row_beta) {
    const int lane = waiting++;
    if (mask != nullptr) {
      for (int64_t j = 0; j < value_count; ++j) scores[lane][j] = values[j] + mask[j];
    } else {
      std::copy(values, values + value_count, scores[lane]);
    }
    count[lane] = value_count;
    whole_row[lane] = whole;
    out[lane] = row_out;
    out_size[lane] = row_size;
    beta[lane] = row_beta;
    width = std::max(width, value_count);
  }
};

// Solves the waiting rows of `batch` (each with 0 < β < 1, β ≠ 1/2), writes their output rows and empties it: the
// Newton iteration of entmax_row without its pruning, Halley steps or Taylor finish. Each lane follows the path it
// would follow alone (a pass of the other kind leaves it as it is), so a row's result does not depend on its
// neighbours.
template <typename T>
void solve_lanes(LaneBatch<T>& batch) {
  const int64_t size = batch.width;
  alignas(64) T lane_scores[kShortRow][kLanes], lane_probs[kShortRow][kLanes];
  T beta[kLanes], slope_exponent[kLanes], shift_high[kLanes], shift_low[kLanes], slope[kLanes];
  double normaliser[kLanes], mass[kLanes];
  bool empty[kLanes], has_nan[kLanes], unsolved[kLanes];
  T row_maxima[kLanes], lane_max[kLanes];  // each row's maximum; that of the row a lane solves
  // Flags, as int32 because GCC does not vectorise over bool arrays.
  int32_t done[kLanes], below_root[kLanes], rough[kLanes], active[kLanes];
  const T lowest = std::numeric_limits<T>::lowest();
  for (int lane = 0; lane < kLanes; ++lane) {
    // Lanes past the last row, rows with every entry masked and rows the iteration does not solve (see entmax_row; only
    // whole rows can be such, since entmax_row has dealt with the rows it gathers) solve a dummy row (and are not
    // written from it). Candidates past a row's own count are masked.
    const bool real = lane < batch.waiting;
    T row_max = -std::numeric_limits<T>::infinity(), checksum = 0;  // NaN if a score is (see entmax_row)
    for (int64_t j = 0; j < size; ++j) {
      const T score = !real ? T(0) : j < batch.count[lane] ? batch.scores[lane][j] : lowest;
      lane_scores[j][lane] = score;
      row_max = std::max(row_max, score);
      checksum += score;
    }
    beta[lane] = real ? batch.beta[lane] : T(0.25);
    const T inverse_beta = T(1) / beta[lane];
    row_maxima[lane] = row_max;
    has_nan[lane] = checksum != checksum && std::any_of(batch.scores[lane], batch.scores[lane] + batch.count[lane],
                                                        [](T score) { return score != score; });
    empty[lane] = !has_nan[lane] && row_max <= lowest;
    unsolved[lane] = has_nan[lane] || (!empty[lane] && row_max - inverse_beta == row_max);  // +inf included
    if (empty[lane] || unsolved[lane]) {
      for (int64_t j = 0; j < size; ++j) lane_scores[j][lane] = T(0);
      row_max = 0;
    }
    slope_exponent[lane] = inverse_beta - T(1);
    lane_max[lane] = row_max;
    normaliser[lane] = 0.0;
    done[lane] = !real || empty[lane] || unsolved[lane];
    below_root[lane] = true;
    rough[lane] = true;  // far from the root, passes take rough exp/log (see needs_rough_pass)
  }
  // Every lane is done after an exact pass, which leaves its p and Σ p at its final c for the normalisation below.
  for (int iteration = 0; iteration < kMaxLanePasses; ++iteration) {
    // A rough pass while any lane needs one; the lanes that need an exact one wait for it.
    bool any_rough = false, all_done = true;
    for (int lane = 0; lane < kLanes; ++lane) {
      any_rough = any_rough || (!done[lane] && rough[lane]);
      all_done = all_done && done[lane];
    }
    if (all_done) break;
    for (int lane = 0; lane < kLanes; ++lane) active[lane] = !done[lane] && rough[lane] == any_rough;
    for (int lane = 0; lane < kLanes; ++lane) {
      split_shift(lane_max[lane], normaliser[lane], shift_high[lane], shift_low[lane]);
      mass[lane] = 0.0;
      slope[lane] = T(0);
    }
    const auto pass = [&](auto pass_kind) {
      constexpr Pass kPass = decltype(pass_kind)::value;
      alignas(64) T log_slopes[kShortRow][kLanes];  // log g first, then g, in two loops (see entry_log_slope)
      for (int64_t j = 0; j < size; ++j) {
#pragma omp simd
        for (int lane = 0; lane < kLanes; ++lane) {
          log_slopes[j][lane] = entry_log_slope<T, kPass>(lane_scores[j][lane], shift_high[lane], shift_low[lane],
                                                          beta[lane], slope_exponent[lane]);
        }
      }
      for (int64_t j = 0; j < size; ++j) {
#pragma omp simd
        for (int lane = 0; lane < kLanes; ++lane) {
          const T base = shift_entry(lane_scores[j][lane], shift_high[lane], shift_low[lane], beta[lane]).base;
          const bool inside = base > T(0);
          const T safe_base = inside ? base : T(1);
          const T g = inside ? pass_exp<T, kPass>(log_slopes[j][lane]) : T(0);
          lane_probs[j][lane] = g * safe_base;
          mass[lane] += g * safe_base;
          slope[lane] += g;
        }
      }
    };
    if (any_rough) {
      pass(std::integral_constant<Pass, Pass::kRough>{});
    } else {
      pass(std::integral_constant<Pass, Pass::kExact>{});
    }
    const int32_t pass_is_rough = any_rough;
#pragma omp simd
    for (int lane = 0; lane < kLanes; ++lane) {
      // The rules of entmax_row (see "When the iteration ends"), with bitwise operators: short-circuit ones are
      // branches, which do not vectorise; nor does a comparison with any_rough here, hence the `active` flags.
      const double step = lane_newton_numerator<T>(mass[lane], beta[lane]) / slope[lane];
      const bool converged =
          !pass_is_rough & (mass_converged<T>(mass[lane]) | step_stalled(below_root[lane], step));
      done[lane] = done[lane] | (active[lane] & converged);
      normaliser[lane] += active[lane] & !converged ? step : 0.0;
      below_root[lane] = active[lane] ? !pass_is_rough : below_root[lane];
      rough[lane] = active[lane] ? pass_is_rough & needs_rough_pass(mass[lane]) : rough[lane];
    }
  }
  for (int lane = 0; lane < batch.waiting; ++lane) {
    T* row_out = batch.out[lane];
    if (unsolved[lane]) {  // a whole row (see above)
      if (has_nan[lane]) {
        fill_nan(row_out, batch.out_size[lane]);
      } else {
        share_among_maxima(batch.scores[lane], row_out, batch.count[lane], row_maxima[lane]);
      }
      continue;
    }
    // An empty lane may have run no pass at all (if every lane is empty): nothing in lane_probs to scale.
    const T inverse_mass = empty[lane] ? T(0) : static_cast<T>(1.0 / mass[lane]);
    if (batch.whole_row[lane] && !empty[lane]) {
      for (int64_t j = 0; j < batch.count[lane]; ++j) row_out[j] = lane_probs[j][lane] * inverse_mass;
      continue;
    }
    std::fill(row_out, row_out + batch.out_size[lane], T(0));
    if (empty[lane]) continue;
    for (int64_t j = 0; j < batch.count[lane]; ++j) row_out[batch.columns[lane][j]] = lane_probs[j][lane] * inverse_mass;
  }
  batch.waiting = 0;
  batch.width = 0;
}

}  // namespace hf_entmax
