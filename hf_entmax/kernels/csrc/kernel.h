// The kernel's interface between its op bindings (ops.cpp) and its loops over rows (forward.cpp, backward.cpp).
//
// Where to find what:
//   fast_math.h      vectorisable float32 exp/log (exact and rough) and Math<T>, the solvers' access to them
//   constants.h      iteration caps, tolerances, block and lane sizes (docs/kernel.md compares them with the reference)
//   newton_common.h  what both forward solvers share: row kinds, the shift, each entry's base and slope, when the
//                    iteration ends, the rows it does not solve (NaN, +inf, huge spreads)
//   row_solver.h     one row at a time: candidates, pruning, rough passes, Halley's step, the Taylor finish
//   lane_solver.h    rows with few candidates, kLanes at a time, one per SIMD lane
//   parallel.h       rows over threads, denormals flushed
//   forward.cpp      the forward over rows; backward.cpp the backward over rows; ops.cpp the torch ops
//   compiler.h       compiler-specific attributes behind portable macros
#pragma once

#include <cstdint>
#include <string>

#include "compiler.h"

namespace hf_entmax {

// An additive mask over the rows of the scores, broadcast along any leading dimension: row r's mask starts at
// data + offsets[r]. No mask when data is null.
template <typename T>
struct MaskRows {
  const T* data = nullptr;
  const int64_t* offsets = nullptr;
  HF_ENTMAX_INLINE const T* row(int64_t r) const { return data != nullptr ? data + offsets[r] : nullptr; }
};

// p = entmax(scores + mask) of `rows` rows of `size` entries, with β = betas[row], into `out` (which may be `scores`).
// Instantiated for float and double.
template <typename T>
void entmax_forward_rows(const T* scores, MaskRows<T> mask, const T* betas, T* out, int64_t rows, int64_t size);

// The gradients of `rows` rows of `size` entries at their probabilities `probs`, given the gradient `grad` to them:
// to the scores into `grad_scores` (which may be `grad`) and, unless grad_betas is null, to each row's β. Instantiated
// for float and double.
template <typename T>
void entmax_backward_rows(const T* probs, const T* grad, const T* betas, T* grad_scores, T* grad_betas, int64_t rows,
                          int64_t size);

// What this build targets, for hf_entmax.kernels.describe(): "openmp=<0|1> simd=<instruction sets>".
std::string build_info();

}  // namespace hf_entmax
