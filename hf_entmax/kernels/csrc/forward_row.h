// One row of the forward, as every loop over rows calls it: to the SIMD lanes when it is short, else to the row
// solver (which defers it to the lanes too when its candidates are few). Shared by forward.cpp and restricted.cpp.
#pragma once

#include <cstdint>

#include "compiler.h"
#include "constants.h"
#include "lane_solver.h"
#include "newton_common.h"
#include "row_solver.h"

namespace hf_entmax {

// p = entmax(scores + mask) of one row of `size` entries into `out` (which may be `scores`); `mask` may be null. A row
// handed to `lanes` is written when they are solved: once kLanes rows wait (here), and by the caller, which solves the
// rows still waiting (`if (lanes.waiting > 0) solve_lanes(lanes)`) before it reads any output.
template <typename T>
HF_ENTMAX_INLINE void entmax_forward_row(const T* scores, const T* mask, T* out, int64_t size, T beta,
                                         Candidates<T>& scratch, LaneBatch<T>& lanes) {
  if (size <= kShortRow && is_general(row_kind(beta))) {
    lanes.add_row(scores, mask, out, size, beta);
    if (lanes.waiting == kLanes) solve_lanes(lanes);
    return;
  }
  const auto defer = [&](const T* candidates, const int64_t* columns, int64_t count) {
    lanes.add(candidates, columns, count, out, size, beta);
    if (lanes.waiting == kLanes) solve_lanes(lanes);
  };
  with_row_kind(beta, [&](auto kind) {
    entmax_row<T, decltype(kind)::value>(scores, mask, out, size, beta, scratch, defer);
  });
}

}  // namespace hf_entmax
