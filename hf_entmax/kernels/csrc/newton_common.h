// What the row solver (row_solver.h) and the SIMD-lane solver (lane_solver.h) share: the kinds of rows, the shift
// and each entry's base and slope, the rules that end the Newton iteration, and the rows it does not solve. The two
// solvers run the same iteration on different layouts; what must stay in step between them lives here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "compiler.h"
#include "constants.h"
#include "fast_math.h"

namespace hf_entmax {

// β = 0, 1/2 and 1 have loops of their own. The other rows split at β = 1/2: below it (α < 1.5) rows are mostly
// dense and every pass costs a log and an exp per entry, so their forward spends a little more per pass to take
// fewer of them (Halley's steps and a Taylor finish, see entmax_row).
enum class RowKind { kSoftmax, kEntmax15, kSparsemax, kNearSoftmax, kNearSparsemax };

constexpr bool is_general(RowKind kind) { return kind == RowKind::kNearSoftmax || kind == RowKind::kNearSparsemax; }

inline RowKind row_kind(double beta) {
  if (beta == 0.0) return RowKind::kSoftmax;
  if (beta == 0.5) return RowKind::kEntmax15;
  if (beta == 1.0) return RowKind::kSparsemax;
  return beta < 0.5 ? RowKind::kNearSoftmax : RowKind::kNearSparsemax;
}

// Calls `body` with the row's kind as a compile-time constant, so that each kind runs its own specialised loops.
template <typename Body>
HF_ENTMAX_INLINE decltype(auto) with_row_kind(double beta, Body&& body) {
  switch (row_kind(beta)) {
    case RowKind::kSoftmax:
      return body(std::integral_constant<RowKind, RowKind::kSoftmax>{});
    case RowKind::kEntmax15:
      return body(std::integral_constant<RowKind, RowKind::kEntmax15>{});
    case RowKind::kSparsemax:
      return body(std::integral_constant<RowKind, RowKind::kSparsemax>{});
    case RowKind::kNearSoftmax:
      return body(std::integral_constant<RowKind, RowKind::kNearSoftmax>{});
    default:
      return body(std::integral_constant<RowKind, RowKind::kNearSparsemax>{});
  }
}

// Bit k of the result is values[k] > threshold, for k < 8.
template <typename T>
HF_ENTMAX_INLINE unsigned above_mask8(const T* values, T threshold) {
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(values), _mm256_set1_ps(threshold), _CMP_GT_OQ));
  } else {
    const __m256d broadcast = _mm256_set1_pd(threshold);
    return _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(values), broadcast, _CMP_GT_OQ)) |
           _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(values + 4), broadcast, _CMP_GT_OQ)) << 4;
  }
#else
  unsigned bits = 0;
  for (int k = 0; k < 8; ++k) bits |= static_cast<unsigned>(values[k] > threshold) << k;
  return bits;
#endif
}

// Calls keep(j), in order, for each j < count with values[j] > threshold. The comparisons run eight at a time into
// a bit mask and only the set bits are visited, so a sparse row costs little more than one vectorised pass.
template <typename T, typename Keep>
HF_ENTMAX_INLINE void for_each_above(const T* values, int64_t count, T threshold, Keep&& keep) {
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    for (unsigned bits = above_mask8(values + j, threshold); bits != 0; bits &= bits - 1) {
      keep(j + lowest_set_bit(bits));
    }
  }
  for (; j < count; ++j) {
    if (values[j] > threshold) keep(j);
  }
}

// Passes far from the root take rough exp/log and store nothing; exact passes store p (and, in near-softmax rows,
// 1/base for the Taylor finish).
enum class Pass { kRough, kExact };

// The shift row max + c (c: the normaliser) as high + low, each a T, to within ~ε² |shift|: the passes subtract both
// from a score, so that t = z − shift keeps its digits however large the scores are. For float, `high` is the shift,
// summed in double, with the mantissa bits that a float lacks cleared (exact in float), not the shift rounded to float:
// where it vectorises (solve_lanes splits eight shifts at once) with -fno-trapping-math, GCC 12 folds the round trip
// double → float → double to the identity, which made low = 0 and cost t an error of up to ε |z| (AVX-512 builds, rows
// of large scores). For double, high is the row max and low is c: their sum would round c (rows of scores near 1e15
// lost all its digits), while z − row max is exact for every candidate (within a factor of 2 of it, or small).
template <typename T>
HF_ENTMAX_INLINE void split_shift(T row_max, double normaliser, T& high, T& low) {
  if constexpr (std::is_same_v<T, float>) {
    const double shift = static_cast<double>(row_max) + normaliser;
    uint64_t bits;
    std::memcpy(&bits, &shift, sizeof(bits));
    bits &= ~((uint64_t{1} << 29) - 1);  // a double has 52 mantissa bits, a float 23
    double truncated;
    std::memcpy(&truncated, &bits, sizeof(truncated));
    high = static_cast<float>(truncated);
    low = static_cast<float>(shift - truncated);
  } else {
    high = row_max;
    low = static_cast<T>(normaliser);
  }
}

// t = z − shift of one entry (shift = high + low, see split_shift) and its base 1 + β t, formed by one fused
// multiply-add: at the edge of the support the base is the small difference of two numbers near 1, and rounding t or
// 1 + β t there would cost p (and so g, which the backward recomputes from p) all its digits.
template <typename T>
struct ShiftedEntry {
  T t, base;
};

template <typename T>
HF_ENTMAX_INLINE ShiftedEntry<T> shift_entry(T score, T shift_high, T shift_low, T beta) {
  const T t = (score - shift_high) - shift_low;  // z − max − c
  return {t, std::fma(beta, t, T(1))};
}

// g = p / base = base^(1/β − 1), the slope of an entry in the support (minus the derivative of p w.r.t. c), from
// t = z − row max − c and its base = 1 + β t > 0: for general kinds pass_exp(log_support_slope(...)), in two halves so
// that a pass can run them in separate loops (see evaluate); 1 for sparsemax and base for 1.5-entmax.
template <typename T, Pass P>
HF_ENTMAX_INLINE T log_support_slope(T t, T base, T beta, T slope_exponent) {
  if constexpr (P == Pass::kRough) {
    return Math<T>::rough_log(base) * slope_exponent;
  } else {
    // log(1 + β t) = log(base) − ((base − 1) − β t) to first order: the second term, exact by the fused
    // multiply-add, undoes the rounding of the base, which matters near base = 1, where p = base^(1/β) raises
    // it to a large power (and only there, so dividing the term by base ≈ 1 can be skipped).
    const T rounding = std::fma(-beta, t, base - T(1));
    return (Math<T>::log(base) - rounding) * slope_exponent;
  }
}

template <typename T, Pass P>
HF_ENTMAX_INLINE T pass_exp(T x) {
  return P == Pass::kRough ? Math<T>::rough_exp(x) : Math<T>::exp(x);
}

// log g of an entry of a general row (a base of 1 stands in outside the support, where the pass sets g = 0). Passes
// take it in a loop of its own and its exp in the next: each loop's chain of dependent operations is then half as
// long, and the processor overlaps more entries.
template <typename T, Pass P>
HF_ENTMAX_INLINE T entry_log_slope(T score, T shift_high, T shift_low, T beta, T slope_exponent) {
  const ShiftedEntry<T> entry = shift_entry(score, shift_high, shift_low, beta);
  return log_support_slope<T, P>(entry.t, entry.base > T(0) ? entry.base : T(1), beta, slope_exponent);
}

// ---- When the iteration ends ----
//
// Far from the root, passes are rough and only steer c; a rough step can overshoot the root, and the exact step after
// it comes back below (the tangent of the convex h stays below h). The iteration ends after an exact pass whose Σ p is
// 1 to within kMassTolerance, or whose Newton step from below the root cannot move c (converged to rounding). The
// functions below use bitwise operators, so that the lanes' loop over them vectorises (short-circuit operators are
// branches).

template <typename T>
HF_ENTMAX_INLINE bool mass_converged(double mass) {
  return std::abs(mass - 1.0) <= kMassTolerance<T>;
}

HF_ENTMAX_INLINE bool step_stalled(bool below_root, double step) { return below_root & !(step > 0); }

// Whether the next pass may still be rough: while Σ p is off by more than kRoughMassError.
HF_ENTMAX_INLINE bool needs_rough_pass(double mass) { return std::abs(mass - 1.0) > kRoughMassError; }

// ---- Rows the iteration does not solve ----
//
// Decided once per row, from its maximum and a checksum taken in the same pass: a row with a NaN is all NaN (as softmax
// gives), a row with every entry masked is all zeros, and where the maximum is +inf, or so large that max − 1/β rounds
// to it, the support is the set of entries equal to the maximum, which share the mass equally. That is the limit of
// equal, large finite scores, and every other entry is out of the support, at least 1/β below them: a float below the
// maximum is at least one spacing below it, and once max − 1/β rounds to max, a spacing is at least 2/β. (There, the
// normaliser c is below the spacing of the scores: the iteration could not move max + c, and once found no candidate
// above max − 1/β, which made such rows all zeros.) Softmax rows go by the maximum alone.

template <typename T>
void fill_nan(T* out, int64_t size) {
  std::fill(out, out + size, std::numeric_limits<T>::quiet_NaN());
}

// p_i = 1/k for the k entries equal to row_max, 0 elsewhere. `scores` may be `out`.
template <typename T>
void share_among_maxima(const T* scores, T* out, int64_t size, T row_max) {
  int64_t ties = 0;
  for (int64_t i = 0; i < size; ++i) ties += scores[i] == row_max ? 1 : 0;
  const T share = T(1) / static_cast<T>(ties);
  for (int64_t i = 0; i < size; ++i) out[i] = scores[i] == row_max ? share : T(0);
}

}  // namespace hf_entmax
