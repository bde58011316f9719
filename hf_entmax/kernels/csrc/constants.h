// The kernel's tuning and stopping constants, in one place. C++ cannot import the PyTorch reference's
// (hf_entmax/modeling/entmax.py, which the Triton kernel shares): each counterpart below says how it relates to them,
// and tests/test_kernel_build.py checks it. docs/kernel.md ("Constants") compares them all.
#pragma once

#include <cstdint>
#include <limits>

namespace hf_entmax {

// An exact pass whose Σ p is within this of 1 ends the iteration. Tighter on purpose than the reference's
// NEWTON_TOLERANCE_EPS (16 ε): the kernel can ask for 2 ε because it also stops when an exact Newton step from below
// the root no longer moves c (step_stalled), which catches rows whose rounded Σ p never gets that close.
// tests/test_kernels.py derives its rounding bounds from 2 ε.
template <typename T>
constexpr double kMassTolerance = 2 * std::numeric_limits<T>::epsilon();

// The most Newton passes of one row: the reference's MAX_NEWTON_STEPS, the same. Newton from below the root converges
// monotonically, in a handful of passes: the cap is a safety net, not a budget.
constexpr int kMaxNewtonPasses = 50;

// The most passes of a batch of lanes (solve_lanes): a batch runs rough passes while any lane needs one, then exact
// passes, so it takes at most the most rough passes of any lane plus the most exact passes of any lane.
constexpr int kMaxLanePasses = 2 * kMaxNewtonPasses;

// Passes stay rough (rough exp/log, no pruning) while Σ p is off by more than this: that far from the root only the
// size of the step matters.
constexpr double kRoughMassError = 0.1;

// Gathered candidates are padded with masked entries to a multiple of this, so that the vectorised loops over them
// never fall back to scalar code for a remainder.
constexpr int64_t kPadding = 8;

// Passes and the backward sum in blocks of this many entries in T, then add the blocks' sums in double (see evaluate).
constexpr int64_t kSumBlock = 64;

// Rows with at most kShortRow candidates for the support (and a general β) are solved kLanes at a time, one per SIMD
// lane (see solve_lanes).
constexpr int64_t kShortRow = 20;
constexpr int kLanes = 8;

}  // namespace hf_entmax
