// What the kernel asks of the compiler, behind macros with portable fallbacks.
//
// The kernel is written for GCC and Clang (the flags in hf_entmax/kernels/build.py are theirs); these macros keep its
// source valid C++17 for other compilers, where the fallbacks are correct but slower.
#pragma once

#include <cstdint>

// The vectorised loops vectorise only if the small functions they call are inlined into them, and GCC's heuristics
// sometimes decline to inline them.
#if defined(__GNUC__) || defined(__clang__)
#define HF_ENTMAX_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define HF_ENTMAX_INLINE __forceinline
#else
#define HF_ENTMAX_INLINE inline
#endif

// HF_ENTMAX_UNROLL(n) before a loop asks for it to be unrolled n times (a loop over compile-time coefficients, whose
// iterations then become one chain of multiply-adds).
#define HF_ENTMAX_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define HF_ENTMAX_UNROLL(n) HF_ENTMAX_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define HF_ENTMAX_UNROLL(n) HF_ENTMAX_PRAGMA(GCC unroll n)
#else
#define HF_ENTMAX_UNROLL(n)
#endif

// `#pragma omp simd` marks the loops that must vectorise, reductions included. It needs OpenMP (-fopenmp) or only its
// SIMD part (-fopenmp-simd, which the build falls back to where OpenMP is missing); other compilers ignore it.

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

namespace hf_entmax {

// The index of the lowest set bit of a nonzero `bits` (std::countr_zero needs C++20).
HF_ENTMAX_INLINE int lowest_set_bit(unsigned bits) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_ctz(bits);
#elif defined(_MSC_VER)
  unsigned long index;
  _BitScanForward(&index, bits);
  return static_cast<int>(index);
#else
  int index = 0;
  for (; (bits & 1u) == 0; bits >>= 1) ++index;
  return index;
#endif
}

}  // namespace hf_entmax
