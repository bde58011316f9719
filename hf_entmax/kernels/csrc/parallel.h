// Rows spread over torch's threads (at::parallel_for), each thread with its own scratch space and with denormal
// numbers flushed to zero.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "constants.h"

namespace hf_entmax {

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

// The fewest rows worth handing to a thread: waking one costs a few µs, and a row ~0.1–0.5 µs plus a few ns per entry
// (short rows, as in decoding, are dominated by their fixed cost). A multiple of kLanes, for the short-row lanes.
inline int64_t rows_per_block(int64_t size) {
  const int64_t rows = std::max<int64_t>(1, 8192 / (size + 64));
  return (rows + kLanes - 1) / kLanes * kLanes;
}

// Runs body(begin, end, scratch) on blocks of rows taken in turn from a shared counter, with one scratch =
// make_scratch() and denormals flushed per thread. Taking blocks as they finish, rather than splitting the rows
// evenly up front, keeps a thread that is slowed down (by costlier rows, such as a dense head's, or by a busy core)
// from holding the others back. Which thread computes a row does not change its result. Built without OpenMP, against
// a torch whose threads are OpenMP's (as its Linux wheels), at::parallel_for runs its body once on the calling thread,
// which then takes every block itself.
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

}  // namespace hf_entmax
