// The forward over rows: each row to the row solver, or, with few candidates for its support, to the lane solver.
#include <cstdint>

#include "constants.h"
#include "kernel.h"
#include "lane_solver.h"
#include "newton_common.h"
#include "parallel.h"
#include "row_solver.h"

namespace hf_entmax {

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

template void entmax_forward_rows<float>(const float*, MaskRows<float>, const float*, float*, int64_t, int64_t);
template void entmax_forward_rows<double>(const double*, MaskRows<double>, const double*, double*, int64_t, int64_t);

}  // namespace hf_entmax
