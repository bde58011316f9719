// The backward over rows: the gradients to the scores and to β of each row (entmax_backward_any_row, backward_row.h),
// at the probabilities the forward gave.
#include <cstdint>

#include "backward_row.h"
#include "kernel.h"
#include "parallel.h"

namespace hf_entmax {

template <typename T>
void entmax_backward_rows(const T* probs, const T* grad, const T* betas, T* grad_scores, T* grad_betas,
                          int64_t rows, int64_t size) {
  const auto make_scratch = [size] { return Support<T>(size); };
  parallel_rows(rows, size, make_scratch, [&](int64_t begin, int64_t end, Support<T>& support) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t offset = row * size;
      const T grad_beta = entmax_backward_any_row(probs + offset, grad + offset, grad_scores + offset, size,
                                                  betas[row], grad_betas != nullptr, support);
      if (grad_betas != nullptr) grad_betas[row] = grad_beta;
    }
  });
}

template void entmax_backward_rows<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t);
template void entmax_backward_rows<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                           int64_t);

}  // namespace hf_entmax
