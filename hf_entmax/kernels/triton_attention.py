"""α-entmax attention on GPUs, flash-style, in Triton (the design: docs/gpu-design.md).

``output = entmax_α(query keyᵀ + mask) value`` with one α per head, gradients to the query, key, value and α, without
ever forming the (Lq, Lk) scores. Each program of the forward takes ``BLOCK_M`` queries of one (batch, head) and
streams the keys in blocks of ``BLOCK_N``, recomputing the scores of a tile from q and k at every pass:

1. one pass finds each row's largest score m;
2. Newton passes find each row's normaliser c of ``p = [1 + β (s − m − c)]_+^(1/β)`` (β = α − 1; ``exp(s − m − c)``
   at β = 0), as `hf_entmax.modeling.entmax._entmax_newton` does, each pass accumulating Σ p and the slope Σ p/base.
   The first records each tile's largest ``s − m``; later passes skip a tile where that entry, and so every entry,
   is below the threshold of every row of the block (``1 + β (max − min c) ≤ 0``: p is exactly 0 there);
3. a last pass accumulates ``Σ p v`` (and, for the backward, ``Σ g v``, ``Σ g``, ``Σ p D v`` and ``Σ p D``).

Per row it keeps m, c and log M (M: the mass Σ p at the final c, divided out so that Σ p = 1 exactly, as the PyTorch
implementation divides by it), and per tile the largest ``s − m``; that is all the backward needs to recompute p.

The backward follows FlashAttention-2: with dp = dO vᵀ, the gradient to the scores is ``g ⊙ (dp − δ)``, where
g = p^(2 − α) (the diagonal of entmax's Jacobian) and δ = Σ g dp / Σ g per row. Since Σ_j g_j dp_j = dO · Σ_j g_j v_j,
δ comes from the forward's ``Σ g v`` and ``Σ g`` without another pass over the keys; so does α's gradient,
``Σ dp p D − δ Σ p D`` per row, with D = ∂ log p / ∂β at a fixed normaliser (`entmax.entmax_backward`). One kernel
then accumulates dK and dV per key block over the query blocks, another dQ per query block over the key blocks.

Scores and every per-row quantity are float32 (float64 for float64 inputs); float16/bfloat16 inputs enter the
products as they are, and p, g and the gradient to the scores are rounded to the inputs' dtype for the products with
v, dO, q and k, as FlashAttention does.

Importing this module imports triton. The model reaches it only through `hf_entmax.kernels.dispatch`, for CUDA tensors
and with ``HF_ENTMAX_TRITON=1``; with ``TRITON_INTERPRET=1`` set before triton is imported, Triton's interpreter runs
the same kernels on CPU tensors (``tests/test_triton_attention_interpreted.py``).
"""

import torch
import triton
import triton.language as tl

from ..modeling.entmax import MAX_NEWTON_STEPS, NEWTON_TOLERANCE_EPS, SERIES_TERMS, SERIES_THRESHOLD, mask_floor


# The largest head dimension the kernels take: a block of queries, keys and values stays in registers.
MAX_HEAD_DIM = 256
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _log1p(x):
    """log(1 + x), accurate for small x: ``log(u) · x / (u − 1)`` with u = 1 + x corrects the rounding of u (Kahan)."""
    u = 1.0 + x
    rounded = u - 1.0
    return tl.where(rounded == 0.0, x, tl.log(u) * x / tl.where(rounded == 0.0, 1.0, rounded))


@triton.jit
def _expm1(x):
    """exp(x) − 1, accurate for small x: ``(u − 1) · x / log(u)`` with u = exp(x) (Kahan)."""
    u = tl.exp(x)
    rounded = u - 1.0
    log_u = tl.log(u)
    return tl.where(rounded == 0.0, x, tl.where(u == 0.0, -1.0, rounded * x / tl.where(log_u == 0.0, 1.0, log_u)))


@triton.jit
def _expm1_ratio(y, SERIES_THRESHOLD: tl.constexpr, SERIES_TERMS: tl.constexpr):
    """``(e^y − 1) / y``, by its series ``1 + y/2 (1 + y/3 (1 + …))`` for |y| < SERIES_THRESHOLD (exact through
    y = 0), as `entmax._expm1_ratio`."""
    series = tl.full(y.shape, 1.0, y.dtype)
    for k in tl.static_range(SERIES_TERMS + 1, 1, -1):  # Horner, from the last term
        series = 1.0 + series * y / k
    small = tl.abs(y) < SERIES_THRESHOLD
    return tl.where(small, series, (tl.exp(y) - 1.0) / tl.where(small, 1.0, y))


@triton.jit
def _alpha_sensitivity(log_probs, beta, SERIES_THRESHOLD: tl.constexpr, SERIES_TERMS: tl.constexpr):
    """D = ∂ log p / ∂β at a fixed normaliser, from log p on the support, as `entmax._alpha_sensitivity`:
    ``(w / p^β − log p) / β`` with w = (p^β − 1)/β, and near p^β = 1, where that difference cancels, the series
    ``w² Σ_{k≥1} (−1)^k k/(k + 1) u^(k−1)`` in u = p^β − 1 (−w²/2 at α = 1)."""
    y = beta * log_probs
    ratio = _expm1_ratio(y, SERIES_THRESHOLD, SERIES_TERMS)
    base_minus_one = y * ratio  # u = p^β − 1
    shifted = log_probs * ratio  # w = (p^β − 1)/β = s − m − c, smooth through β = 0
    safe_beta = tl.where(beta == 0.0, 1.0, beta)
    closed_form = (shifted / tl.exp(y) - log_probs) / safe_beta
    series = tl.full(y.shape, 0.0, y.dtype)
    for k in tl.static_range(SERIES_TERMS, 0, -1):  # Horner
        coefficient = k / (k + 1.0)
        if k % 2 == 1:
            coefficient = -coefficient
        series = series * base_minus_one + coefficient
    series = shifted * shifted * series
    return tl.where(tl.abs(base_minus_one) < SERIES_THRESHOLD, series, closed_form)


@triton.jit
def _raw_log_probs(shifted, beta):
    """``log [1 + β w]_+^(1/β)`` (w at β = 0) of the shifted scores w = s − m − c ≤ 0: −inf outside the support."""
    safe_beta = tl.where(beta == 0.0, 1.0, beta)
    return tl.where(beta == 0.0, shifted, _log1p(tl.maximum(beta * shifted, -1.0)) / safe_beta)


@triton.jit
def _tile_probs(scores, row_max, normaliser, log_mass, beta):
    """p and log p of a tile, from its rows' largest score m, normaliser c and log M (the mass at c, divided out)."""
    log_probs = _raw_log_probs(scores - row_max[:, None] - normaliser[:, None], beta) - log_mass[:, None]
    return tl.exp(log_probs), log_probs


@triton.jit
def _support_weights(probs, log_probs, beta):
    """g = p^(2 − α), the diagonal of entmax's Jacobian, and log p, both on the support (0 elsewhere)."""
    on_support = probs > 0.0
    support_log_probs = tl.where(on_support, log_probs, 0.0)
    return tl.where(on_support, tl.exp((1.0 - beta) * support_log_probs), 0.0), support_log_probs


@triton.jit
def _dot(a, b, acc, UPCAST: tl.constexpr):
    """``acc + a b`` in full precision (no TF32 for float32 operands); UPCAST: the interpreter's bfloat16."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision="ieee")


@triton.jit
def _load_block(matrix, index, dims, head_dim):
    """The rows ``index`` (BLOCK,) of one (batch, head)'s (length, head_dim) matrix, given as ``(pointer, length, row
    stride, column stride)``: a (BLOCK, BLOCK_D) tile, zeros past its ends."""
    pointer, length, stride_row, stride_column = matrix
    return tl.load(
        pointer + index[:, None] * stride_row + dims[None, :] * stride_column,
        mask=(index[:, None] < length) & (dims[None, :] < head_dim),
        other=0.0,
    )


@triton.jit
def _store_block(matrix, index, dims, head_dim, block):
    """Store ``block`` (BLOCK, BLOCK_D) at the rows ``index`` of a matrix given as for `_load_block`."""
    pointer, length, stride_row, stride_column = matrix
    tl.store(
        pointer + index[:, None] * stride_row + dims[None, :] * stride_column,
        block.to(pointer.dtype.element_ty),
        mask=(index[:, None] < length) & (dims[None, :] < head_dim),
    )


@triton.jit
def _scores(q, k, rows, columns, mask, shape, SWITCHES: tl.constexpr, COMPUTE: tl.constexpr):
    """The scores of a tile, ``q kᵀ + mask`` (BLOCK_M, BLOCK_N) in the compute dtype, −inf where a key is masked:
    by the additive mask (entries at or below MASK_FLOOR, the mask dtype's `entmax.mask_floor`, as on every path), by
    causality (key j is visible to query i when j ≤ i + Lk − Lq), or outside the matrix.

    ``mask`` is ``(pointer, row stride, column stride)`` of this (batch, head)'s mask, ``shape`` ``(query_len,
    key_len, causal_offset)``, ``SWITCHES`` ``(HAS_MASK, MASK_FLOOR, IS_CAUSAL, UPCAST)`` (a constexpr tuple cannot
    hold the dtype ``COMPUTE``)."""
    HAS_MASK, MASK_FLOOR, IS_CAUSAL, UPCAST = SWITCHES
    query_len, key_len, causal_offset = shape
    scores = _dot(q, tl.trans(k), tl.full((q.shape[0], k.shape[0]), 0.0, COMPUTE), UPCAST)
    visible = (rows[:, None] < query_len) & (columns[None, :] < key_len)
    if HAS_MASK:
        mask_pointer, stride_mask_q, stride_mask_k = mask
        additive = tl.load(
            mask_pointer + rows[:, None] * stride_mask_q + columns[None, :] * stride_mask_k, mask=visible, other=0.0
        ).to(COMPUTE)
        visible = visible & (additive > MASK_FLOOR)
        scores = scores + additive
    if IS_CAUSAL:
        visible = visible & (columns[None, :] <= rows[:, None] + causal_offset)
    return tl.where(visible, scores, float("-inf"))


@triton.jit
def _tile_is_live(tile_max, normaliser_floor, beta):
    """Whether a tile may hold a nonzero p: its largest ``s − m`` is above the threshold of the block's smallest
    normaliser (p = 0 where ``1 + β (s − m − c) ≤ 0``; every entry of a softmax row counts, except −inf)."""
    return (tile_max > float("-inf")) & ((beta == 0.0) | (1.0 + beta * (tile_max - normaliser_floor) > 0.0))


@triton.jit
def _load_rows(base, rows, query_len, other):
    return tl.load(base + rows, mask=rows < query_len, other=other)


@triton.jit
def _entmax_attention_forward(
    Q,
    K,
    V,
    Alpha,
    Mask,
    Out,
    RowMax,
    Normaliser,
    LogMass,
    TileMax,
    GradWeightedValues,
    GradWeightSums,
    AlphaWeightedValues,
    AlphaWeightSums,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_mask_b,
    stride_mask_h,
    stride_mask_q,
    stride_mask_k,
    heads,
    query_len,
    key_len,
    head_dim,
    causal_offset,
    query_blocks,
    key_blocks,
    HAS_MASK: tl.constexpr,
    MASK_FLOOR: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    NEED_GRAD: tl.constexpr,
    ALPHA_GRAD: tl.constexpr,
    COMPUTE: tl.constexpr,
    UPCAST: tl.constexpr,
    TOLERANCE: tl.constexpr,
    MAX_PASSES: tl.constexpr,
    SERIES_THRESHOLD: tl.constexpr,
    SERIES_TERMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head), all their keys. Grid (⌈Lq / BLOCK_M⌉, B·H)."""
    block_m = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = batch_head // heads
    head = batch_head % heads
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offsets_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    keys = (K + batch * stride_kb + head * stride_kh, key_len, stride_kn, stride_kd)
    values = (V + batch * stride_vb + head * stride_vh, key_len, stride_vn, stride_vd)
    mask = (Mask + batch * stride_mask_b + head * stride_mask_h, stride_mask_q, stride_mask_k)
    shape = (query_len, key_len, causal_offset)
    switches: tl.constexpr = (HAS_MASK, MASK_FLOOR, IS_CAUSAL, UPCAST)
    q = _load_block((Q + batch * stride_qb + head * stride_qh, query_len, stride_qm, stride_qd), rows, dims, head_dim)
    beta = tl.load(Alpha + head).to(COMPUTE) - 1.0
    # Causal: the block's last query sees keys up to its index + Lk − Lq; later key blocks are never visited.
    key_end = key_len
    if IS_CAUSAL:
        key_end = tl.minimum(key_len, block_m * BLOCK_M + BLOCK_M + causal_offset)
    tile_max_base = TileMax + (batch_head * query_blocks + block_m) * key_blocks

    # 1. Each row's largest score.
    row_max = tl.full((BLOCK_M,), float("-inf"), COMPUTE)
    for start_n in range(0, key_end, BLOCK_N):
        columns = start_n + offsets_n
        k = _load_block(keys, columns, dims, head_dim)
        scores = _scores(q, k, rows, columns, mask, shape, switches, COMPUTE)
        row_max = tl.maximum(row_max, tl.max(scores, axis=1))
    # A row whose keys are all masked (or past Lq) has no support: its normaliser +inf makes every p of it 0, here and
    # in the backward, and keeps it out of the blocks' smallest normaliser.
    done = row_max == float("-inf")
    row_max = tl.where(done, 0.0, row_max)
    normaliser = tl.where(done, float("inf"), 0.0).to(COMPUTE)
    log_mass = tl.full((BLOCK_M,), 0.0, COMPUTE)

    # 2. Newton on each row's normaliser, from c = 0 (the largest entry alone has mass 1): h(c) = log_β Σ p(c) is
    # convex and decreasing, so the iteration never overshoots and Σ p decreases to 1.
    passes = 0
    while (passes < MAX_PASSES) & (tl.sum((done == 0).to(tl.int32), axis=0) > 0):
        normaliser_floor = tl.min(tl.where(done, float("inf"), normaliser), axis=0)
        mass = tl.full((BLOCK_M,), 0.0, COMPUTE)
        slope = tl.full((BLOCK_M,), 0.0, COMPUTE)
        for start_n in range(0, key_end, BLOCK_N):
            tile_max = tl.load(tile_max_base + start_n // BLOCK_N)  # +inf until the first pass records it
            if _tile_is_live(tile_max, normaliser_floor, beta):
                columns = start_n + offsets_n
                k = _load_block(keys, columns, dims, head_dim)
                scores = _scores(q, k, rows, columns, mask, shape, switches, COMPUTE)
                above_max = scores - row_max[:, None]  # s − m ≤ 0
                if passes == 0:
                    tl.store(tile_max_base + start_n // BLOCK_N, tl.max(tl.max(above_max, axis=1), axis=0))
                shifted = above_max - normaliser[:, None]
                probs = tl.exp(_raw_log_probs(shifted, beta))
                base = 1.0 + beta * shifted  # p^β; p / base = p^(1 − β) = g, the slope of p in c
                mass += tl.sum(probs, axis=1)
                slope += tl.sum(tl.where(probs > 0.0, probs / tl.where(probs > 0.0, base, 1.0), 0.0), axis=1)
        # Every thread of the program reads the tile maxima stored by the first pass in the passes after it.
        tl.debug_barrier()
        log_of_mass = tl.log(mass)
        # Newton's step on h: h / |h'| with h' = −s^(β − 1) Σ g (as entmax._entmax_newton).
        step = _expm1(beta * log_of_mass) / tl.where(beta == 0.0, 1.0, beta)
        step = tl.where(beta == 0.0, log_of_mass, step) * tl.exp((1.0 - beta) * log_of_mass) / slope
        converged = tl.abs(mass - 1.0) <= TOLERANCE
        # A step that no longer moves c (the rounding of Σ p keeps it from TOLERANCE) ends the row too.
        moving = (done == 0) & (converged == 0) & (normaliser + step != normaliser) & (passes < MAX_PASSES - 1)
        log_mass = tl.where((done == 0) & (moving == 0), log_of_mass, log_mass)
        normaliser = tl.where(moving, normaliser + step, normaliser)
        # At β = 0 the step is exact (c = log Σ e^(s − m)): the row is done, its mass 1 to rounding (log M = 0). (β is
        # compared as a vector: Triton 3.9's interpreter cannot broadcast a scalar bool.)
        done = (done != 0) | (moving == 0) | (beta + tl.full((BLOCK_M,), 0.0, COMPUTE) == 0.0)
        passes += 1

    # 3. The output, and what the backward needs, over the tiles where some p is nonzero.
    normaliser_floor = tl.min(normaliser, axis=0)
    output = tl.full((BLOCK_M, BLOCK_D), 0.0, COMPUTE)
    grad_weighted_values = tl.full((BLOCK_M, BLOCK_D), 0.0, COMPUTE)
    grad_weight_sums = tl.full((BLOCK_M,), 0.0, COMPUTE)
    alpha_weighted_values = tl.full((BLOCK_M, BLOCK_D), 0.0, COMPUTE)
    alpha_weight_sums = tl.full((BLOCK_M,), 0.0, COMPUTE)
    for start_n in range(0, key_end, BLOCK_N):
        tile_max = tl.load(tile_max_base + start_n // BLOCK_N)
        if _tile_is_live(tile_max, normaliser_floor, beta):
            columns = start_n + offsets_n
            k = _load_block(keys, columns, dims, head_dim)
            v = _load_block(values, columns, dims, head_dim)
            scores = _scores(q, k, rows, columns, mask, shape, switches, COMPUTE)
            probs, log_probs = _tile_probs(scores, row_max, normaliser, log_mass, beta)
            output = _dot(probs.to(v.dtype), v, output, UPCAST)
            if NEED_GRAD:
                weights, support_log_probs = _support_weights(probs, log_probs, beta)
                grad_weighted_values = _dot(weights.to(v.dtype), v, grad_weighted_values, UPCAST)
                grad_weight_sums += tl.sum(weights, axis=1)
                if ALPHA_GRAD:
                    sensitivity = _alpha_sensitivity(support_log_probs, beta, SERIES_THRESHOLD, SERIES_TERMS)
                    probs_sensitivity = tl.where(probs > 0.0, probs * sensitivity, 0.0)  # p D
                    alpha_weighted_values = _dot(probs_sensitivity.to(v.dtype), v, alpha_weighted_values, UPCAST)
                    alpha_weight_sums += tl.sum(probs_sensitivity, axis=1)

    in_rows = rows < query_len
    _store_block(
        (Out + batch * stride_ob + head * stride_oh, query_len, stride_om, stride_od), rows, dims, head_dim, output
    )
    row_offset = batch_head * query_len
    tl.store(RowMax + row_offset + rows, row_max, mask=in_rows)
    tl.store(Normaliser + row_offset + rows, normaliser, mask=in_rows)
    tl.store(LogMass + row_offset + rows, log_mass, mask=in_rows)
    if NEED_GRAD:
        # Contiguous (B, H, Lq, D), addressed once for both: addressed twice (`_store_block`), they spill registers.
        value_offsets = (row_offset + rows[:, None]) * head_dim + dims[None, :]
        in_values = in_rows[:, None] & (dims[None, :] < head_dim)
        tl.store(GradWeightedValues + value_offsets, grad_weighted_values, mask=in_values)
        tl.store(GradWeightSums + row_offset + rows, grad_weight_sums, mask=in_rows)
        if ALPHA_GRAD:
            tl.store(AlphaWeightedValues + value_offsets, alpha_weighted_values, mask=in_values)
            tl.store(AlphaWeightSums + row_offset + rows, alpha_weight_sums, mask=in_rows)


@triton.jit
def _entmax_attention_backward_key_value(
    Q,
    K,
    V,
    Alpha,
    Mask,
    GradOut,
    RowMax,
    Normaliser,
    LogMass,
    Delta,
    TileMax,
    GradK,
    GradV,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_gb,
    stride_gh,
    stride_gm,
    stride_gd,
    stride_mask_b,
    stride_mask_h,
    stride_mask_q,
    stride_mask_k,
    heads,
    query_len,
    key_len,
    head_dim,
    causal_offset,
    query_blocks,
    key_blocks,
    HAS_MASK: tl.constexpr,
    MASK_FLOOR: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    COMPUTE: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """dK and dV of BLOCK_N keys of one (batch, head), over the query blocks that see them. Grid (⌈Lk / BLOCK_N⌉,
    B·H). dK and dV are contiguous (B, H, Lk, D)."""
    block_n = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = batch_head // heads
    head = batch_head % heads
    columns = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets_m = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    queries = (Q + batch * stride_qb + head * stride_qh, query_len, stride_qm, stride_qd)
    grad_outputs = (GradOut + batch * stride_gb + head * stride_gh, query_len, stride_gm, stride_gd)
    mask = (Mask + batch * stride_mask_b + head * stride_mask_h, stride_mask_q, stride_mask_k)
    shape = (query_len, key_len, causal_offset)
    switches: tl.constexpr = (HAS_MASK, MASK_FLOOR, IS_CAUSAL, UPCAST)
    k = _load_block((K + batch * stride_kb + head * stride_kh, key_len, stride_kn, stride_kd), columns, dims, head_dim)
    v = _load_block((V + batch * stride_vb + head * stride_vh, key_len, stride_vn, stride_vd), columns, dims, head_dim)
    row_offset = batch_head * query_len
    beta = tl.load(Alpha + head).to(COMPUTE) - 1.0
    # Causal: query i sees key j when i ≥ j − (Lk − Lq); earlier query blocks see none of these keys.
    start = 0
    if IS_CAUSAL:
        start = tl.maximum(block_n * BLOCK_N - causal_offset, 0) // BLOCK_M * BLOCK_M
    grad_key = tl.full((BLOCK_N, BLOCK_D), 0.0, COMPUTE)
    grad_value = tl.full((BLOCK_N, BLOCK_D), 0.0, COMPUTE)
    for start_m in range(start, query_len, BLOCK_M):
        rows = start_m + offsets_m
        normaliser = _load_rows(Normaliser + row_offset, rows, query_len, float("inf"))
        tile_max = tl.load(TileMax + (batch_head * query_blocks + start_m // BLOCK_M) * key_blocks + block_n)
        if _tile_is_live(tile_max, tl.min(normaliser, axis=0), beta):
            q = _load_block(queries, rows, dims, head_dim)
            grad_out = _load_block(grad_outputs, rows, dims, head_dim)
            probs, log_probs = _tile_probs(
                _scores(q, k, rows, columns, mask, shape, switches, COMPUTE),
                _load_rows(RowMax + row_offset, rows, query_len, 0.0),
                normaliser,
                _load_rows(LogMass + row_offset, rows, query_len, 0.0),
                beta,
            )
            weights, _ = _support_weights(probs, log_probs, beta)
            grad_value = _dot(tl.trans(probs.to(grad_out.dtype)), grad_out, grad_value, UPCAST)
            grad_probs = _dot(grad_out, tl.trans(v), tl.full((BLOCK_M, BLOCK_N), 0.0, COMPUTE), UPCAST)  # dp = dO vᵀ
            delta = _load_rows(Delta + row_offset, rows, query_len, 0.0)
            grad_scores = weights * (grad_probs - delta[:, None])
            grad_key = _dot(tl.trans(grad_scores.to(q.dtype)), q, grad_key, UPCAST)
    key_offset = batch_head * key_len * head_dim
    _store_block((GradK + key_offset, key_len, head_dim, 1), columns, dims, head_dim, grad_key)
    _store_block((GradV + key_offset, key_len, head_dim, 1), columns, dims, head_dim, grad_value)


@triton.jit
def _entmax_attention_backward_query(
    Q,
    K,
    V,
    Alpha,
    Mask,
    GradOut,
    RowMax,
    Normaliser,
    LogMass,
    Delta,
    TileMax,
    GradQ,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_gb,
    stride_gh,
    stride_gm,
    stride_gd,
    stride_mask_b,
    stride_mask_h,
    stride_mask_q,
    stride_mask_k,
    heads,
    query_len,
    key_len,
    head_dim,
    causal_offset,
    query_blocks,
    key_blocks,
    HAS_MASK: tl.constexpr,
    MASK_FLOOR: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    COMPUTE: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """dQ of BLOCK_M queries of one (batch, head), over their key blocks. Grid (⌈Lq / BLOCK_M⌉, B·H). dQ is
    contiguous (B, H, Lq, D)."""
    block_m = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = batch_head // heads
    head = batch_head % heads
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offsets_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    keys = (K + batch * stride_kb + head * stride_kh, key_len, stride_kn, stride_kd)
    values = (V + batch * stride_vb + head * stride_vh, key_len, stride_vn, stride_vd)
    mask = (Mask + batch * stride_mask_b + head * stride_mask_h, stride_mask_q, stride_mask_k)
    shape = (query_len, key_len, causal_offset)
    switches: tl.constexpr = (HAS_MASK, MASK_FLOOR, IS_CAUSAL, UPCAST)
    q = _load_block((Q + batch * stride_qb + head * stride_qh, query_len, stride_qm, stride_qd), rows, dims, head_dim)
    grad_out = _load_block(
        (GradOut + batch * stride_gb + head * stride_gh, query_len, stride_gm, stride_gd), rows, dims, head_dim
    )
    row_offset = batch_head * query_len
    row_max = _load_rows(RowMax + row_offset, rows, query_len, 0.0)
    normaliser = _load_rows(Normaliser + row_offset, rows, query_len, float("inf"))
    log_mass = _load_rows(LogMass + row_offset, rows, query_len, 0.0)
    delta = _load_rows(Delta + row_offset, rows, query_len, 0.0)
    normaliser_floor = tl.min(normaliser, axis=0)
    beta = tl.load(Alpha + head).to(COMPUTE) - 1.0
    key_end = key_len
    if IS_CAUSAL:
        key_end = tl.minimum(key_len, block_m * BLOCK_M + BLOCK_M + causal_offset)
    tile_max_base = TileMax + (batch_head * query_blocks + block_m) * key_blocks
    grad_query = tl.full((BLOCK_M, BLOCK_D), 0.0, COMPUTE)
    for start_n in range(0, key_end, BLOCK_N):
        tile_max = tl.load(tile_max_base + start_n // BLOCK_N)
        if _tile_is_live(tile_max, normaliser_floor, beta):
            columns = start_n + offsets_n
            k = _load_block(keys, columns, dims, head_dim)
            v = _load_block(values, columns, dims, head_dim)
            scores = _scores(q, k, rows, columns, mask, shape, switches, COMPUTE)
            probs, log_probs = _tile_probs(scores, row_max, normaliser, log_mass, beta)
            weights, _ = _support_weights(probs, log_probs, beta)
            grad_probs = _dot(grad_out, tl.trans(v), tl.full((BLOCK_M, BLOCK_N), 0.0, COMPUTE), UPCAST)
            grad_scores = weights * (grad_probs - delta[:, None])
            grad_query = _dot(grad_scores.to(k.dtype), k, grad_query, UPCAST)
    _store_block((GradQ + row_offset * head_dim, query_len, head_dim, 1), rows, dims, head_dim, grad_query)


# Whether triton.jit decorated the kernels for Triton's interpreter (TRITON_INTERPRET=1 when this module was imported),
# which runs them on CPU tensors. Its tl.dot (3.9) multiplies bfloat16 operands as the integers that store them; there,
# the kernels cast them to float32 first, which is exact (a bfloat16 is a float32 with a shorter mantissa).
_INTERPRETED = not isinstance(_entmax_attention_forward, triton.runtime.jit.JITFunction)


def _block_size(length: int, largest: int) -> int:
    # tl.dot takes blocks of at least 16 rows and columns; short sequences (decoding: Lq = 1) take the smallest.
    return min(largest, max(16, triton.next_power_of_2(length)))


# (largest head dimension, BLOCK_M, BLOCK_N, warps): the largest tiles whose kernels, forward with α's gradient
# included, compile for sm_90 without spilling registers (ptxas -v; tests/test_triton_attention.py compiles them).
# Not autotuned: measured once, on an H200 (docs/gpu-design.md).
_LAUNCH_CONFIGS = ((64, 64, 32, 4), (128, 64, 32, 8), (MAX_HEAD_DIM, 32, 32, 8))


class _Problem:
    """What every kernel of one call takes besides its tensors: the sizes, the mask's strides that broadcast it to
    (B, H, Lq, Lk), the compile-time switches and the block sizes (the same for the forward and the backward, which
    reads the forward's tile maxima)."""

    def __init__(self, query, key, mask, causal: bool, block_m: int | None = None, block_n: int | None = None):
        self.batch, self.heads, self.query_len, self.head_dim = query.shape
        self.key_len = key.shape[2]
        _, largest_m, largest_n, self.num_warps = next(c for c in _LAUNCH_CONFIGS if self.head_dim <= c[0])
        self.block_m = block_m or _block_size(self.query_len, largest_m)
        self.block_n = block_n or _block_size(self.key_len, largest_n)
        block_m, block_n = self.block_m, self.block_n
        self.compute = torch.float64 if query.dtype == torch.float64 else torch.float32
        self.query_blocks = triton.cdiv(self.query_len, block_m)
        self.key_blocks = triton.cdiv(self.key_len, block_n)
        if mask is None:
            self.mask_strides, mask_floor_value = (0, 0, 0, 0), 0.0
        else:
            self.mask_strides = mask.expand(self.batch, self.heads, self.query_len, self.key_len).stride()
            mask_floor_value = mask_floor(mask.dtype)
        self.constants = dict(
            HAS_MASK=mask is not None,
            MASK_FLOOR=mask_floor_value,
            IS_CAUSAL=causal,
            COMPUTE=tl.float64 if self.compute == torch.float64 else tl.float32,
            UPCAST=_INTERPRETED and query.dtype == torch.bfloat16,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_D=max(16, triton.next_power_of_2(self.head_dim)),
        )

    @property
    def launch_options(self) -> dict:
        # Fused multiply-adds on, as Triton 3.9's default (named, since Triton warns that the default will change).
        return dict(num_warps=self.num_warps, enable_fp_fusion=True)

    def shape_arguments(self) -> tuple:
        """The mask's strides and the sizes, in the kernels' order."""
        return (
            *self.mask_strides,
            self.heads,
            self.query_len,
            self.key_len,
            self.head_dim,
            self.key_len - self.query_len,  # causal offset: query i sees key j ≤ i + Lk − Lq
            self.query_blocks,
            self.key_blocks,
        )


def _forward(query, key, value, alpha, mask, problem: _Problem, need_grad: bool, alpha_grad: bool):
    """Launch the forward. Returns the output (B, H, Lq, D), a view of a (B, Lq, H, D) tensor (the layout the model
    returns, so that making it contiguous there copies nothing), and the tensors the backward needs."""
    p = problem
    device = query.device
    output = torch.empty(p.batch, p.query_len, p.heads, p.head_dim, dtype=query.dtype, device=device).transpose(1, 2)
    row_stats = torch.empty(3, p.batch, p.heads, p.query_len, dtype=p.compute, device=device)
    row_max, normaliser, log_mass = row_stats.unbind(0)
    tile_max = torch.full(
        (p.batch * p.heads, p.query_blocks, p.key_blocks), float("inf"), dtype=p.compute, device=device
    )
    row_shape = (p.batch, p.heads, p.query_len)
    value_shape = (*row_shape, p.head_dim)
    unused = row_max  # a pointer for the buffers a switched-off branch never touches
    grad_values, grad_sums, alpha_values, alpha_sums = unused, unused, unused, unused
    if need_grad:
        grad_values = torch.empty(value_shape, dtype=p.compute, device=device)
        grad_sums = torch.empty(row_shape, dtype=p.compute, device=device)
    if alpha_grad:
        alpha_values = torch.empty(value_shape, dtype=p.compute, device=device)
        alpha_sums = torch.empty(row_shape, dtype=p.compute, device=device)
    _entmax_attention_forward[(p.query_blocks, p.batch * p.heads)](
        query,
        key,
        value,
        alpha,
        query if mask is None else mask,  # without a mask, a pointer the kernel never reads
        output,
        row_max,
        normaliser,
        log_mass,
        tile_max,
        grad_values,
        grad_sums,
        alpha_values,
        alpha_sums,
        *query.stride(),
        *key.stride(),
        *value.stride(),
        *output.stride(),
        *p.shape_arguments(),
        NEED_GRAD=need_grad,
        ALPHA_GRAD=alpha_grad,
        TOLERANCE=NEWTON_TOLERANCE_EPS * torch.finfo(p.compute).eps,
        MAX_PASSES=MAX_NEWTON_STEPS,
        SERIES_THRESHOLD=SERIES_THRESHOLD,
        SERIES_TERMS=SERIES_TERMS,
        **p.constants,
        **p.launch_options,
    )
    return output, (row_stats, tile_max, grad_values, grad_sums, alpha_values, alpha_sums)


class TritonEntmaxAttentionFunction(torch.autograd.Function):
    """``entmax_α(query keyᵀ + mask) value``, forward and backward by the Triton kernels, with gradients to the query,
    key, value and α (one per head). Inputs as in `entmax_attention` after its checks: α a (H,) tensor, the mask
    broadcasting to (B, H, Lq, Lk) or None, ``problem`` their `_Problem`."""

    @staticmethod
    def forward(ctx, query, key, value, alpha, mask, problem):
        alpha_grad = ctx.needs_input_grad[3]
        output, saved = _forward(query, key, value, alpha, mask, problem, need_grad=True, alpha_grad=alpha_grad)
        ctx.save_for_backward(query, key, value, alpha, mask, *saved)
        ctx.problem = problem
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        query, key, value, alpha, mask, row_stats, tile_max, grad_values, grad_sums, alpha_values, alpha_sums = (
            ctx.saved_tensors
        )
        p = ctx.problem
        grad_output = grad_output.to(query.dtype)
        # Per row, δ = Σ g dp / Σ g with Σ_j g_j dp_j = dO · Σ_j g_j v_j (dp = dO vᵀ); a row without support has
        # Σ g = 0 and δ = 0.
        upstream = grad_output.to(p.compute)
        delta = (upstream * grad_values).sum(-1) / grad_sums.clamp_min(torch.finfo(p.compute).tiny)
        grad_alpha = None
        if ctx.needs_input_grad[3]:
            # dβ = Σ dp ⊙ p D − δ Σ p D per row (entmax.entmax_backward), summed over the rows of each head.
            grad_beta = (upstream * alpha_values).sum(-1) - delta * alpha_sums
            grad_alpha = grad_beta.sum((0, 2)).to(alpha.dtype)
        row_max, normaliser, log_mass = row_stats.unbind(0)
        common = (alpha, query if mask is None else mask, grad_output, row_max, normaliser, log_mass, delta, tile_max)
        strides = (*query.stride(), *key.stride(), *value.stride(), *grad_output.stride())
        grad_query = grad_key = grad_value = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            grad_key, grad_value = (
                torch.empty_like(key, memory_format=torch.contiguous_format),
                torch.empty_like(value, memory_format=torch.contiguous_format),
            )
            _entmax_attention_backward_key_value[(p.key_blocks, p.batch * p.heads)](
                query,
                key,
                value,
                *common,
                grad_key,
                grad_value,
                *strides,
                *p.shape_arguments(),
                **p.constants,
                **p.launch_options,
            )
        if ctx.needs_input_grad[0]:
            grad_query = torch.empty_like(query, memory_format=torch.contiguous_format)
            _entmax_attention_backward_query[(p.query_blocks, p.batch * p.heads)](
                query,
                key,
                value,
                *common,
                grad_query,
                *strides,
                *p.shape_arguments(),
                **p.constants,
                **p.launch_options,
            )
        return grad_query, grad_key, grad_value, grad_alpha, None, None


def _heads_alpha(alpha: torch.Tensor | float, heads: int, query: torch.Tensor) -> torch.Tensor:
    """α as the kernels read it: a contiguous (H,) tensor (float: the same for every head)."""
    if not isinstance(alpha, torch.Tensor):
        dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
        return torch.full((heads,), float(alpha), dtype=dtype, device=query.device)
    if alpha.numel() == 1:
        return alpha.reshape(1).expand(heads).contiguous()
    if alpha.numel() == heads and (alpha.dim() <= 1 or alpha.shape[-3] == heads):
        return alpha.reshape(heads).contiguous()
    raise ValueError(
        f"`alpha` of shape {tuple(alpha.shape)} must be one α or one per head ({heads}: (H,) or (1, H, 1, 1))"
    )


def entmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """α-entmax attention by the Triton kernels: ``entmax_α(query keyᵀ + mask) value``, α per head.

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled (by ``head_dim ** -0.5``, say); float16,
            bfloat16, float32 or float64, any strides.
        key, value: ``(batch, heads, key_len, head_dim)``, in the query's dtype, on its device; ``key_len`` may differ
            from ``query_len`` (cross-attention, decoding with a cache).
        alpha: α ∈ [1, 2] (not checked: reading it would synchronise the GPU): a float, or a tensor of one α or one per
            head, ``(H,)`` or ``(1, H, 1, 1)``. Gradients flow to a tensor α, summed to its shape.
        mask: Additive float mask broadcasting to ``(batch, heads, query_len, key_len)``: 0 keeps a key, −inf or the
            mask dtype's lowest value masks it (key padding: ``(batch, 1, 1, key_len)``). ``None`` masks nothing.
        causal: Also mask the keys after each query's position: query i sees key j ≤ i + key_len − query_len (the
            last queries of a sequence whose first keys are cached).
        block_m, block_n: The kernels' query and key block sizes (powers of two ≥ 16); by default from the shapes.

    Returns:
        ``(batch, heads, query_len, head_dim)`` in the query's dtype: a view with ``transpose(1, 2)`` contiguous.
        Rows whose keys are all masked give zeros. Gradients (first order only) to the query, key, value and a
        tensor α; none to the mask.

    Raises:
        ValueError: Shapes, dtypes or devices that do not fit together, or tensors that are not on a CUDA device
            (unless ``TRITON_INTERPRET=1`` was set before this module was imported).
    """
    if query.dim() != 4 or key.dim() != 4 or value.shape != key.shape:
        raise ValueError(
            f"query, key and value must be (batch, heads, length, head_dim) with key and value alike, got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    batch, heads, _, head_dim = query.shape
    if key.shape[:2] != (batch, heads) or key.shape[3] != head_dim:
        raise ValueError(f"key {tuple(key.shape)} does not fit query {tuple(query.shape)} (batch, heads, head_dim)")
    if query.dtype not in DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        raise ValueError(
            f"query, key and value must share one of {DTYPES}, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"the head dimension must be at most {MAX_HEAD_DIM}, got {head_dim}")
    if mask is not None and not mask.is_floating_point():
        raise ValueError(f"`mask` must be an additive float mask (0 keeps, −inf masks), got {mask.dtype}")
    devices = {tensor.device for tensor in (query, key, value, mask) if tensor is not None}
    if len(devices) != 1 or (query.device.type != "cuda" and not _INTERPRETED):
        raise ValueError(
            f"the Triton kernels take tensors on one CUDA device (CPU ones with TRITON_INTERPRET=1), got {devices}"
        )
    problem = _Problem(query, key, mask, causal, block_m, block_n)
    alpha_heads = _heads_alpha(alpha, heads, query)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value, alpha_heads)):
        if mask is not None and mask.requires_grad:
            raise ValueError("the Triton kernels give no gradient to the mask; pass mask.detach()")
        return TritonEntmaxAttentionFunction.apply(query, key, value, alpha_heads, mask, problem)
    return _forward(query, key, value, alpha_heads, mask, problem, need_grad=False, alpha_grad=False)[0]


__all__ = ["MAX_HEAD_DIM", "TritonEntmaxAttentionFunction", "entmax_attention"]
