// Argument helpers of the torch ops, shared by the files that define them (ops.cpp, restricted.cpp).
#pragma once

#include <ATen/ATen.h>

namespace hf_entmax {

// `scores` (at least one dimension) and `alpha` on the CPU, the scores float32 or float64, alpha floating; `name`
// names the scores in the error.
void check_scores(const at::Tensor& scores, const at::Tensor& alpha, const char* name);

// β = α − 1 of each row of `scores` (..., size), as a contiguous (..., 1) tensor: α broadcasts to it, and is rounded
// to the scores' dtype before 1 is subtracted.
at::Tensor row_betas(const at::Tensor& scores, const at::Tensor& alpha);

}  // namespace hf_entmax
