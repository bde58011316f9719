// The forward over rows: each row to the row solver, or, with few candidates for its support, to the lane solver
// (entmax_forward_row).
#include <cstdint>

#include "forward_row.h"
#include "kernel.h"
#include "lane_solver.h"
#include "parallel.h"
#include "row_solver.h"

namespace hf_entmax {

template <typename T>
void entmax_forward_rows(const T* scores, MaskRows<T> mask, const T* betas, T* out, int64_t rows, int64_t size) {
  const auto make_scratch = [size] { return Candidates<T>(size); };
  parallel_rows(rows, size, make_scratch, [&](int64_t begin, int64_t end, Candidates<T>& scratch) {
    LaneBatch<T> lanes;  // rows with few candidates wait here until kLanes of them can be solved together
    for (int64_t row = begin; row < end; ++row) {
      entmax_forward_row(scores + row * size, mask.row(row), out + row * size, size, betas[row], scratch, lanes);
    }
    if (lanes.waiting > 0) solve_lanes(lanes);
  });
}

template void entmax_forward_rows<float>(const float*, MaskRows<float>, const float*, float*, int64_t, int64_t);
template void entmax_forward_rows<double>(const double*, MaskRows<double>, const double*, double*, int64_t, int64_t);

}  // namespace hf_entmax
