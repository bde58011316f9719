// α-entmax on the CPU, one fused loop per row (see hf_entmax/modeling/entmax.py for the mathematics).
//
// With β = α − 1 and each row's maximum moved to 0 (w = z − max z ≤ 0), the solution is
//     p_i = [1 + β (w_i − c)]_+ ^ (1/β)          (softmax at β = 0)
// with one normaliser c ≥ 0 per row such that Σ p = 1. The forward runs Newton on the convex, decreasing
// h(c) = log_β(Σ p(c)) from c = 0. Every exact Newton step lands at or below the root, so c only grows and an
// entry that has left the support (w_i ≤ c − 1/β) never returns: the iterations touch only the surviving
// candidates, gathered (with a bit mask, eight comparisons at a time) once enough of them have dropped out.
// Three things keep the number and the cost of the passes low:
//   - far from the root, passes use rough exp/log (~1e-4), which only steer c, and (for β < 1/2) take Halley's step;
//   - a row with β < 1/2 finishes with a Taylor update of p (of order up to 3) once the step is short enough, so that
//     a row with α ≤ 1.25 needs one rough and one exact pass;
//   - float32 passes stay in float32 (the row's shift is split into two floats and the base is formed by a fused
//     multiply-add), summing in blocks, so every loop runs at one vector width.
// The backward computes the gradients to the scores and to β in one pass over the support (gathered first when the
// row is sparse).
//
// Rows with few candidates for the support (up to kShortRow: short rows, as in decoding, and most rows of sparse heads)
// are solved eight at a time, one per SIMD lane, so that the control code between passes is vectorised too (see
// solve_lanes).
//
// For attention (NativeEntmaxAttentionFunction in cpu.py), the forward adds an additive mask as it reads each row and may
// write the probabilities over the scores, and the backward may write the gradient to the scores over the gradient to
// the probabilities: faulting in a fresh attention-sized tensor can cost as much as the kernel's work on it.
//
// Rows with β = 0, 1/2 and 1 (softmax, 1.5-entmax, sparsemax) take specialised loops: the last two need no
// transcendental function at all. float32 uses the vectorisable exp/log below; float64 uses libm everywhere (its
// rough functions are exact), so that float64 gradcheck tests this very code.
//
// Rows with a NaN (all NaN), +inf entries (which share the mass) or a spread so large that max − 1/β rounds to max (the
// maxima share it) are told apart at the start of each row and never reach the iteration (see "Rows the iteration does
// not solve"); the backward carries a row of NaN to NaN gradients.

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace {

// The loops below vectorise only if these small functions are inlined into them; GCC's heuristics
// sometimes decline to, which costs ~7× in the backward.
#define HF_ENTMAX_INLINE inline __attribute__((always_inline))

// ---- float32 exp and log that GCC can vectorise (Cephes polynomials, ~1 ulp on their ranges) ----

HF_ENTMAX_INLINE float bits_to_float(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

HF_ENTMAX_INLINE int32_t float_to_bits(float value) {
  int32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Both are branch-free: exp clamps its argument from below, and log takes its mantissa in [√½, √2) by integer arithmetic on
// the bits rather than by a comparison and two selects. The rough versions, accurate to ~1e-4, serve the Newton
// passes far from the root, where only the size of the step matters (see entmax_row).

// exp(x) = 2^n · exp(r), with n = round(x / ln 2) and |r| ≤ ln 2 / 2. The argument is clamped from below at −87, where
// 2^n is still a normal float: the result is then e^−87 ≈ 1.6e−38, within float32's noise around any probability.
// Above, the passes take the exp of log-probabilities (≤ 0, or barely above after a step that ends just below c = 0),
// and a clamp there would lengthen the chain their loops wait on (~5% of a pass); fast_exp caps 2^n instead, off
// that chain, which saturates as a clamp would for x up to ~3e6, far beyond any argument it gets.
HF_ENTMAX_INLINE float exp_reduce(float x, float& r) {
  const float clamped = std::max(x, -87.0f);
  // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer (no libm call, so it vectorises).
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;
  return n;
}

HF_ENTMAX_INLINE float times_power_of_two(float value, float n) {
  return value * bits_to_float((static_cast<int32_t>(n) + 127) << 23);
}

HF_ENTMAX_INLINE float fast_exp(float x) {
  float r;
  const float n = exp_reduce(x, r);
  // exp(r) = 1 + r + r² P(r), with P evaluated in pairs of terms (Estrin's scheme) rather than by Horner's rule:
  // the loops that call this are bound by the latency of their longest chain of dependent operations.
  const float r2 = r * r;
  const float low = 5.0000001201e-1f + r * 1.6666665459e-1f;
  const float middle = 4.1665795894e-2f + r * 8.3334519073e-3f;
  const float high = 1.3981999507e-3f + r * 1.9875691500e-4f;
  const float poly = low + r2 * (middle + r2 * high);
  return times_power_of_two(poly * r2 + r + 1.0f, std::min(n, 127.0f));
}

HF_ENTMAX_INLINE float rough_exp(float x) {
  float r;
  const float n = exp_reduce(std::min(x, 88.0f), r);  // rough_power raises any x to any power: saturate
  float poly = 0.16567842f;  // minimax on |r| ≤ ln 2 / 2, relative error 8e-5
  poly = poly * r + 0.50495630f;
  poly = poly * r + 1.00016267f;
  poly = poly * r + 0.99992831f;
  return times_power_of_two(poly, n);
}

// x = 2^e · m with m ∈ [√½, √2), for a positive normal float x (denormals are flushed to zero wherever these run, see
// FlushDenormals); returns e, and m − 1 in `fraction`. Subtracting the bits of √½ moves the exponent's boundary from 1
// to √½: the integer part of the difference is e, and its fraction, put back on top of √½, is m.
HF_ENTMAX_INLINE float log_reduce(float x, float& fraction) {
  constexpr int32_t kSqrtHalfBits = 0x3f3504f3;
  const int32_t offset_bits = float_to_bits(x) - kSqrtHalfBits;
  fraction = bits_to_float((offset_bits & 0x007fffff) + kSqrtHalfBits) - 1.0f;
  return static_cast<float>(offset_bits >> 23);
}

HF_ENTMAX_INLINE float fast_log(float x) {
  // log x = e ln 2 + log(1 + f), log(1 + f) = f − f²/2 + f³ P(f), with P by Estrin's scheme (see fast_exp).
  float f;
  const float e = log_reduce(x, f);
  const float z = f * f;
  const float z2 = z * z;
  const float terms01 = 3.3333331174e-1f - f * 2.4999993993e-1f;
  const float terms23 = 2.0000714765e-1f - f * 1.6668057665e-1f;
  const float terms45 = 1.4249322787e-1f - f * 1.2420140846e-1f;
  const float terms67 = 1.1676998740e-1f - f * 1.1514610310e-1f;
  const float poly = ((terms01 + z * terms23) + z2 * (terms45 + z * terms67)) + (z2 * z2) * 7.0376836292e-2f;
  float y = poly * f * z;
  y += e * -2.12194440e-4f;
  y -= 0.5f * z;
  return f + y + e * 0.693359375f;
}

HF_ENTMAX_INLINE float rough_log(float x) {
  float f;
  const float e = log_reduce(x, f);
  float poly = -0.22846314f;  // minimax for log(1 + f) on [√½ − 1, √2 − 1], absolute error 7e-5
  poly = poly * f + 0.35868351f;
  poly = poly * f - 0.50246409f;
  poly = poly * f + 0.99935379f;
  return poly * f + e * 0.693147181f;
}

// Treats denormal numbers as zero while alive. Probabilities below 1e-38 are noise, but arithmetic on them
// is ~100× slower on x86, and p = u^(1/β) with β near 0 produces them all the time.
class FlushDenormals {
 public:
  FlushDenormals() {
#if defined(__SSE__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040);  // flush-to-zero and denormals-are-zero
#endif
  }
  ~FlushDenormals() {
#if defined(__SSE__)
    _mm_setcsr(saved_);
#endif
  }

 private:
  unsigned int saved_ = 0;
};

template <typename T>
struct Math;

template <>
struct Math<float> {
  // Below this, exp is under float's smallest normal number, where fast_exp stops (see exp_reduce): softmax writes 0
  // there, as flushing the denormal result would, so that a row of huge spread puts all its mass on its maximum.
  static constexpr float kExpFloor = -87.0f;
  static HF_ENTMAX_INLINE float exp(float x) { return fast_exp(x); }
  static HF_ENTMAX_INLINE float log(float x) { return fast_log(x); }
  static HF_ENTMAX_INLINE float rough_exp(float x) { return ::rough_exp(x); }
  static HF_ENTMAX_INLINE float rough_log(float x) { return ::rough_log(x); }
};

// float64 serves gradcheck, so it is exact throughout: its rough functions are the exact ones.
template <>
struct Math<double> {
  static constexpr double kExpFloor = -std::numeric_limits<double>::infinity();  // std::exp underflows to 0 itself
  static HF_ENTMAX_INLINE double exp(double x) { return std::exp(x); }
  static HF_ENTMAX_INLINE double log(double x) { return std::log(x); }
  static HF_ENTMAX_INLINE double rough_exp(double x) { return std::exp(x); }
  static HF_ENTMAX_INLINE double rough_log(double x) { return std::log(x); }
};

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
      keep(j + __builtin_ctz(bits));  // the lowest set bit (std::countr_zero needs C++20)
    }
  }
  for (; j < count; ++j) {
    if (values[j] > threshold) keep(j);
  }
}

// Gathered candidates are padded with masked entries to a multiple of this, so that the vectorised loops over them
// never fall back to scalar code for a remainder.
constexpr int64_t kPadding = 8;

// Evaluations sum in blocks of this many entries (see evaluate).
constexpr int64_t kSumBlock = 64;

// Rows with at most kShortRow candidates for the support (and a general β) are solved kLanes at a time, one per SIMD
// lane (see solve_lanes).
constexpr int64_t kShortRow = 20;
constexpr int kLanes = 8;

// An additive mask over the rows of the scores, broadcast along any leading dimension: row r's mask starts at
// data + offsets[r]. No mask when data is null.
template <typename T>
struct MaskRows {
  const T* data = nullptr;
  const int64_t* offsets = nullptr;
  HF_ENTMAX_INLINE const T* row(int64_t r) const { return data != nullptr ? data + offsets[r] : nullptr; }
};

// Scratch space of one thread: the row's masked scores (when there is a mask, or the output overwrites the scores),
// the surviving candidates of a sparse row (score, column), and the probability and 1/base of each candidate.
template <typename T>
struct Candidates {
  std::vector<T> row, scores, probs, inverse_bases;
  std::vector<int64_t> column;
  explicit Candidates(int64_t size)
      : row(size), scores(size + kPadding), probs(size + kPadding), inverse_bases(size + kPadding), column(size) {}
};

// Passes far from the root take rough exp/log and store nothing; exact passes store p (and, in near-softmax rows,
// 1/base for the Taylor finish).
enum class Pass { kRough, kExact };

// The sums a pass returns: moments[k] = Σ p / base^k, so moments[0] = Σ p and moments[1] = Σ p^(1 − β) = −dΣp/dc.
// Near-softmax rows also need moments[2] for Halley's step and, in exact passes, moments[2..4] for the Taylor finish;
// other rows leave them 0.
struct Evaluation {
  std::array<double, 5> moments{};
  int64_t outside = 0;  // candidates already out of the support
};

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

// A threshold x for the candidates of the support (the entries above it), lowered by at least one spacing (x minus
// 2ε|x| is 2 to 4 spacings below x before it rounds; −inf stays): x has been rounded, and one that rounded up left
// entries of the support out (rows of scores near 1e7 summed to 0). An entry kept in vain has base ≤ 0 in the passes,
// which leave it out.
template <typename T>
HF_ENTMAX_INLINE T lowered_threshold(T x) {
  return x - std::abs(x) * (2 * std::numeric_limits<T>::epsilon());
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

// p = [1 + β (z − shift)]_+^(1/β) of `count` scores, into `probs` (and 1/base into `inverse_bases`), and their moments.
//
// shift = row max + c is split into two T (see split_shift), and 1 + β t is formed by one fused multiply-add:
// at the edge of the support the base is the small difference of two numbers near 1, and rounding t or 1 + β t
// there would cost p (and so g, which the backward recomputes from p) all its digits.
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
    // General kinds take the log of g in a loop of its own, then its exp below: split in two, each loop's chain of
    // dependent operations is half as long, and the processor overlaps more entries (~10% off a pass).
    alignas(64) T log_slopes[kSumBlock];
    if constexpr (is_general(Kind)) {
#pragma omp simd
      for (int64_t j = start; j < stop; ++j) {
        const T t = (scores[j] - shift_high) - shift_low;
        const T base = std::fma(beta, t, T(1));
        log_slopes[j - start] = log_support_slope<T, P>(t, base > T(0) ? base : T(1), beta, slope_exponent);
      }
    }
#pragma omp simd reduction(+ : mass, slope, moment2, moment3, moment4, outside)
    for (int64_t j = start; j < stop; ++j) {
      const T t = (scores[j] - shift_high) - shift_low;  // z − max − c
      const T base = std::fma(beta, t, T(1));
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

// x^exponent for the scalar control code, where rough accuracy is enough (a step far from the root, a bound).
template <typename T>
inline double rough_power(double x, double exponent) {
  return Math<T>::rough_exp(static_cast<T>(exponent * Math<T>::rough_log(static_cast<T>(x))));
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

  const double tolerance = 2 * std::numeric_limits<T>::epsilon();
  const double beta_d = beta;
  double normaliser = 0.0;  // c
  // Far from the root (Σ p off by more than 10%, and in near-softmax rows with α ≤ 1.25 only the first pass), only the
  // size of the step matters: general rows evaluate p there with rough exp/log, twice as cheap. A rough step can
  // overshoot the root; the exact Newton step after it comes back below (the tangent of the convex h stays below h),
  // so entries are pruned only after exact steps.
  bool rough = is_general(Kind);
  const bool one_rough_pass = Kind == RowKind::kNearSoftmax && beta_d <= 0.25;
  bool below_root = true;      // c ≤ c*: no entry outside the support at c can be in it at the root
  double largest_root = -1.0;  // computed on first use
  double mass = 0.0;
  for (int iteration = 0; iteration < 50; ++iteration) {
    T* inverse_bases = scratch.inverse_bases.data();
    const Evaluation evaluation =
        rough ? evaluate<T, Kind, Pass::kRough>(candidate_scores, probs, inverse_bases, padded_count, beta, row_max,
                                                normaliser)
              : evaluate<T, Kind, Pass::kExact>(candidate_scores, probs, inverse_bases, padded_count, beta, row_max,
                                                normaliser);
    mass = evaluation.moments[0];
    const double slope = evaluation.moments[1];
    if (!rough && std::abs(mass - 1.0) <= tolerance) break;
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
    if (!rough && below_root && !(step > 0)) break;  // converged to rounding: Newton cannot move c further
    if constexpr (Kind == RowKind::kNearSoftmax) {
      if (rough) {
        // Halley's step δ / (1 − x), with x = δ h'' / (2 |h'|) = δ (1 − β) (s m₂ − (Σ g)²) / (2 s Σ g) ≥ 0 (h is
        // convex; m₂ = Σ g / base), saves about one pass in three. It is capped at 2δ, and at the root when all n
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
    rough = rough && !one_rough_pass && std::abs(mass - 1.0) > 0.1;
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

// ---- Rows with few candidates, kLanes at a time ----
//
// A row with a few dozen candidates for the support costs little in its passes and much in the scalar code between
// them: the sums, Newton's step and its exp and log. That is every short row (decoding attends over the keys so far;
// Multi30k sentences have 10–30 tokens) and most rows of sparse heads, whose support is a handful of entries however
// long the row. Such rows' candidates are solved kLanes at a time, one per SIMD lane: they are transposed so that a
// pass is a vector loop over the lanes, entry by entry, and so is each Newton step. Only rows with 0 < β < 1,
// β ≠ 1/2 take lanes (the other kinds have loops without exp and log), and none is pruned: their passes are cheap.

// s (1 − s^(−β)) / β, the numerator of Newton's step (see newton_numerator), with no branch or libm call so that it
// vectorises over lanes: near the root a series in x = s − 1 (8 terms, relative error below |x|^8 < 1e-8); away from
// it s log(s) (1 − e^(−y)) / y with y = β log s, the last factor by its series where y is small (β near 0).
template <typename T>
HF_ENTMAX_INLINE double lane_newton_numerator(double mass, double beta) {
  const double x = mass - 1.0;
  // 1 − (1 + x)^(−β) = β Σ_k (−1)^(k+1) (β + 1) ⋯ (β + k − 1) / k! x^k, summed from the last term.
  double near = 0.0;
#pragma GCC unroll 8
  for (int k = 8; k >= 1; --k) near = x * (1.0 - near * (beta + k) / (k + 1));
  const double log_mass = Math<T>::log(static_cast<T>(mass));
  const double y = beta * log_mass;
  const double series = 1.0 - y / 2 * (1.0 - y / 3 * (1.0 - y / 4 * (1.0 - y / 5 * (1.0 - y / 6))));
  const double closed = (1.0 - Math<T>::exp(static_cast<T>(-y))) / y;
  const double far = log_mass * (std::abs(y) < 0.05 ? series : closed);
  return mass * (std::abs(x) < 0.1 ? near : far);
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
    rough[lane] = true;  // far from the root, passes take rough exp/log (see entmax_row)
  }
  const double tolerance = 2 * std::numeric_limits<T>::epsilon();
  // Every lane is done after an exact pass, which leaves its p and Σ p at its final c for the normalisation below.
  for (int iteration = 0; iteration < 100; ++iteration) {
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
      alignas(64) T log_slopes[kShortRow][kLanes];  // log g first, then g, in two loops (see evaluate)
      for (int64_t j = 0; j < size; ++j) {
#pragma omp simd
        for (int lane = 0; lane < kLanes; ++lane) {
          const T t = (lane_scores[j][lane] - shift_high[lane]) - shift_low[lane];
          const T base = std::fma(beta[lane], t, T(1));
          log_slopes[j][lane] =
              log_support_slope<T, kPass>(t, base > T(0) ? base : T(1), beta[lane], slope_exponent[lane]);
        }
      }
      for (int64_t j = 0; j < size; ++j) {
#pragma omp simd
        for (int lane = 0; lane < kLanes; ++lane) {
          const T t = (lane_scores[j][lane] - shift_high[lane]) - shift_low[lane];
          const T base = std::fma(beta[lane], t, T(1));
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
      // As in entmax_row: converged when Σ p = 1 to rounding, or when an exact step from below the root cannot move c.
      // (Bitwise operators: short-circuit ones are branches, which do not vectorise; nor does a comparison with
      // any_rough here, hence the `active` flags.)
      const double step = lane_newton_numerator<T>(mass[lane], beta[lane]) / slope[lane];
      const bool converged =
          !pass_is_rough & ((std::abs(mass[lane] - 1.0) <= tolerance) | (below_root[lane] & !(step > 0)));
      done[lane] = done[lane] | (active[lane] & converged);
      normaliser[lane] += active[lane] & !converged ? step : 0.0;
      below_root[lane] = active[lane] ? !pass_is_rough : below_root[lane];
      rough[lane] = active[lane] ? pass_is_rough & (std::abs(mass[lane] - 1.0) > 0.1) : rough[lane];
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

// The fewest rows worth handing to a thread: waking one costs a few µs, and a row ~0.1–0.5 µs plus a few ns per entry
// (short rows, as in decoding, are dominated by their fixed cost). A multiple of kLanes, for the short-row lanes.
inline int64_t rows_per_block(int64_t size) {
  const int64_t rows = std::max<int64_t>(1, 8192 / (size + 64));
  return (rows + kLanes - 1) / kLanes * kLanes;
}

// Runs body(begin, end, scratch) on blocks of rows taken in turn from a shared counter, with one scratch =
// make_scratch() and denormals flushed per thread. Taking blocks as they finish, rather than splitting the rows
// evenly up front, keeps a thread that is slowed down (by costlier rows, such as a dense head's, or by a busy core)
// from holding the others back. Which thread computes a row does not change its result.
template <typename MakeScratch, typename Body>
void parallel_rows(int64_t rows, int64_t size, MakeScratch&& make_scratch, Body&& body) {
  const int64_t block = rows_per_block(size), blocks = (rows + block - 1) / block;
  std::atomic<int64_t> next_block{0};
  at::parallel_for(0, std::min<int64_t>(blocks, at::get_num_threads()), 1, [&](int64_t, int64_t) {
    FlushDenormals flush_denormals;
    auto scratch = make_scratch();
    for (int64_t taken; (taken = next_block.fetch_add(1, std::memory_order_relaxed)) < blocks;) {
      body(taken * block, std::min(rows, (taken + 1) * block), scratch);
    }
  });
}

// p = entmax(scores + mask) of `rows` rows of `size` entries, into `out` (which may be `scores`).
template <typename T>
void entmax_forward_rows(const T* scores, MaskRows<T> mask, const T* betas, T* out, int64_t rows, int64_t size) {
  const auto make_scratch = [size] { return Candidates<T>(size); };
  parallel_rows(rows, size, make_scratch, [&](int64_t begin, int64_t end, Candidates<T>& scratch) {
    LaneBatch<T> lanes;  // rows with few candidates wait here until kLanes of them can be solved together
    for (int64_t row = begin; row < end; ++row) {
      const T beta = betas[row];
      T* row_out = out + row * size;
      if (size <= kShortRow && is_general(row_kind(beta))) {
        lanes.add_row(scores + row * size, mask.row(row), row_out, size, beta);
        if (lanes.waiting == kLanes) solve_lanes(lanes);
        continue;
      }
      const auto defer = [&](const T* candidates, const int64_t* columns, int64_t count) {
        lanes.add(candidates, columns, count, row_out, size, beta);
        if (lanes.waiting == kLanes) solve_lanes(lanes);
      };
      with_row_kind(beta, [&](auto kind) {
        entmax_row<T, decltype(kind)::value>(scores + row * size, mask.row(row), row_out, size, beta, scratch, defer);
      });
    }
    if (lanes.waiting > 0) solve_lanes(lanes);
  });
}

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

// ψ(v) = (e^v − 1 − v) / v² = Σ_{k≥0} v^k / (k + 2)! for 0 ≤ v < 1, to T's precision. Horner's rule runs on the even
// and the odd terms separately (in v²), which halves the chain of dependent operations (see fast_exp).
template <typename T>
HF_ENTMAX_INLINE T psi_series(T v) {
  constexpr int kTerms = std::is_same_v<T, float> ? 10 : 17;  // the first omitted term is below ε
  constexpr std::array<T, kTerms> kCoefficients = psi_coefficients<T, kTerms>();
  const T v2 = v * v;
  constexpr int kLastEven = (kTerms - 1) / 2 * 2, kLastOdd = kTerms / 2 * 2 - 1;
  T even = kCoefficients[kLastEven], odd = kCoefficients[kLastOdd];
#pragma GCC unroll 16
  for (int k = kLastEven - 2; k >= 0; k -= 2) even = even * v2 + kCoefficients[k];
#pragma GCC unroll 16
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
    // log p in a loop of its own, as in evaluate (~15% off the backward, ~25% off a dense row's).
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
          probs_sensitivity = v < T(1) ? -log_p * log_p * p * psi_series(v) : closed_form;
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

template <typename T>
void entmax_backward_rows(const T* probs, const T* grad, const T* betas, T* grad_scores, T* grad_betas,
                          int64_t rows, int64_t size) {
  const auto make_scratch = [size] { return Support<T>(size); };
  parallel_rows(rows, size, make_scratch, [&](int64_t begin, int64_t end, Support<T>& support) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t offset = row * size;
      const T grad_beta = with_row_kind(betas[row], [&](auto kind) {
        constexpr RowKind kKind = decltype(kind)::value;
        return grad_betas != nullptr
                   ? entmax_backward_row<T, kKind, true>(probs + offset, grad + offset, grad_scores + offset, size,
                                                         betas[row], support)
                   : entmax_backward_row<T, kKind, false>(probs + offset, grad + offset, grad_scores + offset, size,
                                                          betas[row], support);
      });
      if (grad_betas != nullptr) grad_betas[row] = grad_beta;
    }
  });
}

void check_scores(const at::Tensor& scores, const at::Tensor& alpha, const char* name) {
  TORCH_CHECK(scores.dim() >= 1 && scores.device().is_cpu() && alpha.device().is_cpu(), name,
              " and alpha must be CPU tensors, with ", name, " of at least one dimension");
  TORCH_CHECK(scores.scalar_type() == at::kFloat || scores.scalar_type() == at::kDouble, name,
              " must be float32 or float64");
  TORCH_CHECK(at::isFloatingType(alpha.scalar_type()), "alpha must be a floating-point tensor");
}

// β = α − 1 of each row of `scores` (..., size), as a contiguous (..., 1) tensor: α broadcasts to it, and is rounded
// to the scores' dtype before 1 is subtracted.
at::Tensor row_betas(const at::Tensor& scores, const at::Tensor& alpha) {
  std::vector<int64_t> row_shape = scores.sizes().vec();
  row_shape.back() = 1;
  TORCH_CHECK(at::is_expandable_to(alpha.sizes(), row_shape), "alpha of shape ", alpha.sizes(),
              " must broadcast to the rows of the scores, ", at::IntArrayRef(row_shape));
  return (alpha.to(scores.scalar_type()) - 1).expand(row_shape).contiguous();
}

// The mask's view for the kernel: `mask` broadcast to the shape of `scores` (..., size), with contiguous rows, and the
// offset of each row. Leading dimensions of size 1 (e.g. one mask for every head) stay broadcast, not copied.
struct ExpandedMask {
  at::Tensor values;
  std::vector<int64_t> offsets;
};

ExpandedMask expand_mask(const at::Tensor& mask, const at::Tensor& scores, int64_t rows) {
  TORCH_CHECK(mask.device().is_cpu() && mask.scalar_type() == scores.scalar_type(),
              "mask must be a CPU tensor of the scores' dtype, ", scores.scalar_type(), ", got ", mask.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), scores.sizes()), "mask of shape ", mask.sizes(),
              " must broadcast to the scores, ", scores.sizes());
  ExpandedMask expanded{mask.expand(scores.sizes()), std::vector<int64_t>(rows)};
  if (expanded.values.stride(-1) != 1) expanded.values = expanded.values.contiguous();
  // The offsets of the rows in order: an odometer over the leading dimensions.
  const at::Tensor& values = expanded.values;
  std::vector<int64_t> index(values.dim() - 1, 0);
  int64_t offset = 0;
  for (int64_t& row_offset : expanded.offsets) {
    row_offset = offset;
    for (int64_t d = values.dim() - 2; d >= 0; --d) {
      offset += values.stride(d);
      if (++index[d] < values.size(d)) break;
      offset -= values.stride(d) * values.size(d);
      index[d] = 0;
    }
  }
  return expanded;
}

// p = α-entmax(scores + mask) along the last dimension into `out` (contiguous, shaped like `scores`, possibly `scores`
// itself). −inf or the dtype's lowest value masks an entry; α ∈ [1, 2] broadcasts to (..., 1).
void entmax_forward_into(const at::Tensor& scores, const at::Tensor& alpha, const std::optional<at::Tensor>& mask,
                         at::Tensor& out) {
  const at::Tensor betas = row_betas(scores, alpha);
  const ExpandedMask expanded = mask.has_value() ? expand_mask(*mask, scores, betas.numel()) : ExpandedMask{};
  AT_DISPATCH_FLOATING_TYPES(scores.scalar_type(), "entmax_forward", [&] {
    const MaskRows<scalar_t> mask_rows{mask.has_value() ? expanded.values.data_ptr<scalar_t>() : nullptr,
                                       expanded.offsets.data()};
    entmax_forward_rows<scalar_t>(scores.data_ptr<scalar_t>(), mask_rows, betas.data_ptr<scalar_t>(),
                                  out.data_ptr<scalar_t>(), betas.numel(), scores.size(-1));
  });
}

at::Tensor entmax_forward(const at::Tensor& scores, const at::Tensor& alpha, const std::optional<at::Tensor>& mask) {
  check_scores(scores, alpha, "scores");
  const at::Tensor matrix = scores.contiguous();
  at::Tensor out = at::empty_like(matrix);
  entmax_forward_into(matrix, alpha, mask, out);
  return out;
}

// As entmax_forward, overwriting the scores with the probabilities (no attention-sized allocation).
at::Tensor& entmax_forward_(at::Tensor& scores, const at::Tensor& alpha, const std::optional<at::Tensor>& mask) {
  check_scores(scores, alpha, "scores");
  TORCH_CHECK(scores.is_contiguous(), "entmax_forward_ needs contiguous scores");
  entmax_forward_into(scores, alpha, mask, scores);
  return scores;
}

// The gradients to the scores into `grad_scores` (contiguous, shaped like `probs`, possibly `grad` itself) and, when
// alpha_grad is true, to α (returned shaped like `alpha`, in its dtype; an undefined tensor otherwise).
at::Tensor entmax_backward_into(const at::Tensor& probs, const at::Tensor& grad, const at::Tensor& alpha,
                                bool alpha_grad, at::Tensor& grad_scores) {
  check_scores(probs, alpha, "probs");
  TORCH_CHECK(grad.sizes() == probs.sizes() && grad.scalar_type() == probs.scalar_type(),
              "grad must have the shape and dtype of probs");
  const at::Tensor probs_matrix = probs.contiguous();
  const at::Tensor betas = row_betas(probs_matrix, alpha);
  at::Tensor grad_betas = alpha_grad ? at::empty_like(betas) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(probs.scalar_type(), "entmax_backward", [&] {
    entmax_backward_rows<scalar_t>(probs_matrix.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(),
                                   betas.data_ptr<scalar_t>(), grad_scores.data_ptr<scalar_t>(),
                                   alpha_grad ? grad_betas.data_ptr<scalar_t>() : nullptr, betas.numel(),
                                   probs.size(-1));
  });
  return alpha_grad ? at::sum_to(grad_betas, alpha.sizes()).to(alpha.scalar_type()) : at::Tensor();
}

std::tuple<at::Tensor, at::Tensor> entmax_backward(const at::Tensor& probs, const at::Tensor& grad,
                                                   const at::Tensor& alpha, bool alpha_grad) {
  const at::Tensor grad_matrix = grad.contiguous();
  at::Tensor grad_scores = at::empty_like(grad_matrix);
  at::Tensor grad_alpha = entmax_backward_into(probs, grad_matrix, alpha, alpha_grad, grad_scores);
  return {grad_scores, grad_alpha};
}

// As entmax_backward, overwriting `grad` with the gradient to the scores.
std::tuple<at::Tensor&, at::Tensor> entmax_backward_(const at::Tensor& probs, at::Tensor& grad,
                                                     const at::Tensor& alpha, bool alpha_grad) {
  TORCH_CHECK(grad.is_contiguous(), "entmax_backward_ needs a contiguous grad");
  at::Tensor grad_alpha = entmax_backward_into(probs, grad, alpha, alpha_grad, grad);
  return {grad, grad_alpha};
}

}  // namespace

TORCH_LIBRARY(hf_entmax, m) {
  m.def("entmax_forward(Tensor scores, Tensor alpha, Tensor? mask=None) -> Tensor");
  m.def("entmax_forward_(Tensor(a!) scores, Tensor alpha, Tensor? mask=None) -> Tensor(a!)");
  m.def("entmax_backward(Tensor probs, Tensor grad, Tensor alpha, bool alpha_grad) -> (Tensor, Tensor)");
  m.def("entmax_backward_(Tensor probs, Tensor(a!) grad, Tensor alpha, bool alpha_grad) -> (Tensor(a!), Tensor)");
}

TORCH_LIBRARY_IMPL(hf_entmax, CPU, m) {
  m.impl("entmax_forward", &entmax_forward);
  m.impl("entmax_forward_", &entmax_forward_);
  m.impl("entmax_backward", &entmax_backward);
  m.impl("entmax_backward_", &entmax_backward_);
}
