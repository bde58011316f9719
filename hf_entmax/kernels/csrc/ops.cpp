// The torch ops of the kernel (namespace hf_entmax): argument checks, α broadcast to the rows, the mask's rows, and
// the calls into the loops over rows (kernel.h). Loaded by hf_entmax/kernels/build.py; docs/kernel.md describes the
// method.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.h"
#include "ops.h"

namespace hf_entmax {

void check_scores(const at::Tensor& scores, const at::Tensor& alpha, const char* name) {
  TORCH_CHECK(scores.dim() >= 1 && scores.device().is_cpu() && alpha.device().is_cpu(), name,
              " and alpha must be CPU tensors, with ", name, " of at least one dimension");
  TORCH_CHECK(scores.scalar_type() == at::kFloat || scores.scalar_type() == at::kDouble, name,
              " must be float32 or float64");
  TORCH_CHECK(at::isFloatingType(alpha.scalar_type()), "alpha must be a floating-point tensor");
}

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


std::string build_info() {
  std::string simd;
  const auto add = [&simd](const char* name) { simd += simd.empty() ? name : std::string(",") + name; };
#if defined(__AVX512F__)
  add("avx512f");
#endif
#if defined(__AVX2__)
  add("avx2");
#endif
#if defined(__FMA__)
  add("fma");
#endif
#if defined(__AVX__)
  add("avx");
#endif
#if defined(__SSE2__)
  add("sse2");
#endif
#if defined(__ARM_FEATURE_SVE)
  add("sve");
#endif
#if defined(__ARM_NEON)
  add("neon");
#endif
#if defined(_OPENMP)
  const char* openmp = "1";
#else
  const char* openmp = "0";
#endif
  return std::string("openmp=") + openmp + " simd=" + (simd.empty() ? "none" : simd);
}

}  // namespace hf_entmax

TORCH_LIBRARY(hf_entmax, m) {
  m.def("entmax_forward(Tensor scores, Tensor alpha, Tensor? mask=None) -> Tensor");
  m.def("entmax_forward_(Tensor(a!) scores, Tensor alpha, Tensor? mask=None) -> Tensor(a!)");
  m.def("entmax_backward(Tensor probs, Tensor grad, Tensor alpha, bool alpha_grad) -> (Tensor, Tensor)");
  m.def("entmax_backward_(Tensor probs, Tensor(a!) grad, Tensor alpha, bool alpha_grad) -> (Tensor(a!), Tensor)");
  m.def("build_info() -> str", &hf_entmax::build_info);
}

TORCH_LIBRARY_IMPL(hf_entmax, CPU, m) {
  m.impl("entmax_forward", &hf_entmax::entmax_forward);
  m.impl("entmax_forward_", &hf_entmax::entmax_forward_);
  m.impl("entmax_backward", &hf_entmax::entmax_backward);
  m.impl("entmax_backward_", &hf_entmax::entmax_backward_);
}
