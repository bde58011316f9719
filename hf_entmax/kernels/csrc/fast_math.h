// float32 exp and log that the compiler can vectorise (Cephes polynomials, ~1 ulp on their ranges), their rough
// versions (~1e-4) for the Newton passes far from the root, and Math<T>, through which the solvers call them: float32
// takes these, float64 libm's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "compiler.h"

namespace hf_entmax {

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

// Both are branch-free: exp clamps its argument from below, and log takes its mantissa in [√½, √2) by integer
// arithmetic on the bits rather than by a comparison and two selects. The rough versions, accurate to ~1e-4, serve the Newton
// passes far from the root, where only the size of the step matters (see entmax_row).

// exp(x) = 2^n · exp(r), with n = round(x / ln 2) and |r| ≤ ln 2 / 2. The argument is clamped from below at −87, where
// 2^n is still a normal float: the result is then e^−87 ≈ 1.6e−38, within float32's noise around any probability.
// Above, the passes take the exp of log-probabilities (≤ 0, or barely above after a step that ends just below c = 0),
// and a clamp there would lengthen the chain their loops wait on; fast_exp caps 2^n instead, off that chain, which
// saturates as a clamp would for x up to ~3e6, far beyond any argument it gets.
constexpr float kExpArgumentFloor = -87.0f;

HF_ENTMAX_INLINE float exp_reduce(float x, float& r) {
  const float clamped = std::max(x, kExpArgumentFloor);
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

template <typename T>
struct Math;

template <>
struct Math<float> {
  // Below this, exp is under float's smallest normal number, where fast_exp stops (see exp_reduce): softmax writes 0
  // there, as flushing the denormal result would, so that a row of huge spread puts all its mass on its maximum.
  static constexpr float kExpFloor = kExpArgumentFloor;
  static HF_ENTMAX_INLINE float exp(float x) { return fast_exp(x); }
  static HF_ENTMAX_INLINE float log(float x) { return fast_log(x); }
  static HF_ENTMAX_INLINE float rough_exp(float x) { return hf_entmax::rough_exp(x); }
  static HF_ENTMAX_INLINE float rough_log(float x) { return hf_entmax::rough_log(x); }
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

// x^exponent for the scalar control code, where rough accuracy is enough (a step far from the root, a bound).
template <typename T>
inline double rough_power(double x, double exponent) {
  return Math<T>::rough_exp(static_cast<T>(exponent * Math<T>::rough_log(static_cast<T>(x))));
}

}  // namespace hf_entmax
