// Restricted attention: α-entmax attention over a given graph of query–key pairs only (Sparsefinder's predicted
// graph), each query's keys gathered, so that its cost follows the graph's pairs rather than all Lq × Lk of them.
//
// The graph comes as compressed rows (graph_rows): row r = (b, h, i) of the queries attends to the keys
// columns[offsets[r]], …, columns[offsets[r + 1] − 1] of its head (graph_rows lists them in order). Its scores are gathered into a
// row of their own, each plus its pair's bias where one is given (the additive mask's value there: ALiBi's distance
// bias), and solved by the kernel's forward (entmax_forward_row); the values are summed over the support alone. The
// backward visits each row's support only: the entmax backward (entmax_backward_any_row) on the gathered support,
// then the gradients to the query, keys and values of those pairs. A pair outside the graph is a masked pair
// of the full attention: it gets probability 0 and no gradient, and a row without pairs (a fully masked query) gives
// zeros.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backward_row.h"
#include "compiler.h"
#include "forward_row.h"
#include "lane_solver.h"
#include "ops.h"
#include "parallel.h"
#include "row_solver.h"

namespace hf_entmax {
namespace {

// a · b of `size` entries.
template <typename T>
HF_ENTMAX_INLINE T dot(const T* a, const T* b, int64_t size) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t d = 0; d < size; ++d) sum += a[d] * b[d];
  return sum;
}

// out += scale · x, `size` entries.
template <typename T>
HF_ENTMAX_INLINE void add_scaled(T* out, const T* x, T scale, int64_t size) {
#pragma omp simd
  for (int64_t d = 0; d < size; ++d) out[d] += scale * x[d];
}

// scores[j] = query · keys[columns[j]] (rows of `size`) for j < count. Four keys at a time share the query's loads and
// run four independent chains of multiply-adds (one dot product is a single chain, bound by its latency).
template <typename T>
void gathered_scores(const T* query, const T* keys, const int32_t* columns, int64_t count, int64_t size, T* scores) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const T *key0 = keys + columns[j] * size, *key1 = keys + columns[j + 1] * size;
    const T *key2 = keys + columns[j + 2] * size, *key3 = keys + columns[j + 3] * size;
    T sum0 = 0, sum1 = 0, sum2 = 0, sum3 = 0;
#pragma omp simd reduction(+ : sum0, sum1, sum2, sum3)
    for (int64_t d = 0; d < size; ++d) {
      const T q = query[d];
      sum0 += q * key0[d];
      sum1 += q * key1[d];
      sum2 += q * key2[d];
      sum3 += q * key3[d];
    }
    scores[j] = sum0;
    scores[j + 1] = sum1;
    scores[j + 2] = sum2;
    scores[j + 3] = sum3;
  }
  for (; j < count; ++j) scores[j] = dot(query, keys + columns[j] * size, size);
}

// The shapes of one call: B·H heads of Lq queries and Lk keys, head dimensions D (query, key) and Dv (value).
struct Shapes {
  int64_t heads, query_len, key_len, dim, value_dim;
};

Shapes check_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const at::Tensor& offsets, const at::Tensor& columns) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "query, key and value must be (batch, heads, length, head_dim)");
  TORCH_CHECK(key.scalar_type() == query.scalar_type() && value.scalar_type() == query.scalar_type() &&
                  key.device().is_cpu() && value.device().is_cpu(),
              "key and value must be CPU tensors of the query's dtype");
  const bool shapes_fit = query.size(0) == key.size(0) && query.size(1) == key.size(1) &&
                          query.size(3) == key.size(3) && key.sizes().slice(0, 3) == value.sizes().slice(0, 3);
  TORCH_CHECK(shapes_fit, "query ", query.sizes(), ", key ", key.sizes(), " and value ", value.sizes(),
              " must share batch and heads, key and value their length, query and key their head_dim");
  TORCH_CHECK(query.is_contiguous() && key.is_contiguous() && value.is_contiguous(),
              "query, key and value must be contiguous");
  const Shapes shapes{query.size(0) * query.size(1), query.size(2), key.size(2), query.size(3), value.size(3)};
  const int64_t rows = shapes.heads * shapes.query_len;
  TORCH_CHECK(offsets.device().is_cpu() && offsets.scalar_type() == at::kLong && offsets.dim() == 1 &&
                  offsets.numel() == rows + 1 && offsets.is_contiguous(),
              "offsets must be a contiguous int64 CPU tensor of batch × heads × query_len + 1 = ", rows + 1,
              " entries, got ", offsets.sizes());
  TORCH_CHECK(columns.device().is_cpu() && columns.scalar_type() == at::kInt && columns.dim() == 1 &&
                  columns.is_contiguous(),
              "columns must be a contiguous int32 CPU tensor");
  const int64_t* offset = offsets.data_ptr<int64_t>();
  bool ordered = offset[0] == 0 && offset[rows] == columns.numel();
  for (int64_t row = 0; ordered && row < rows; ++row) ordered = offset[row] <= offset[row + 1];
  TORCH_CHECK(ordered, "offsets must rise from 0 to the number of columns, ", columns.numel());
  if (columns.numel() > 0) {
    const auto [lowest, highest] = at::aminmax(columns);
    TORCH_CHECK(lowest.item<int32_t>() >= 0 && highest.item<int32_t>() < shapes.key_len,
                "columns must be key positions in [0, ", shapes.key_len, ")");
  }
  return shapes;
}

int64_t longest_row(const int64_t* offset, int64_t rows) {
  int64_t longest = 0;
  for (int64_t row = 0; row < rows; ++row) longest = std::max(longest, offset[row + 1] - offset[row]);
  return longest;
}

template <typename T>
void restricted_forward(const T* query, const T* key, const T* value, const T* betas, const int64_t* offsets,
                        const int32_t* columns, const T* pair_bias, const Shapes& shapes, T* probs, T* output) {
  const int64_t rows = shapes.heads * shapes.query_len, longest = longest_row(offsets, rows);
  const int64_t mean_row = rows > 0 ? offsets[rows] / rows : 0;
  const auto make_scratch = [longest] { return Candidates<T>(longest); };
  parallel_rows(rows, mean_row, make_scratch, [&](int64_t begin, int64_t end, Candidates<T>& scratch) {
    LaneBatch<T> lanes;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / shapes.query_len, start = offsets[row], count = offsets[row + 1] - start;
      if (count == 0) continue;
      const T* keys = key + head * shapes.key_len * shapes.dim;
      T* row_probs = probs + start;  // the scores, then (in place) the probabilities
      gathered_scores(query + row * shapes.dim, keys, columns + start, count, shapes.dim, row_probs);
      if (pair_bias != nullptr) {
        for (int64_t j = 0; j < count; ++j) row_probs[j] += pair_bias[start + j];
      }
      entmax_forward_row<T>(row_probs, nullptr, row_probs, count, betas[row], scratch, lanes);
    }
    if (lanes.waiting > 0) solve_lanes(lanes);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / shapes.query_len, start = offsets[row], stop = offsets[row + 1];
      const T* values = value + head * shapes.key_len * shapes.value_dim;
      T* row_output = output + row * shapes.value_dim;
      for (int64_t j = start; j < stop; ++j) {
        // Only the support adds anything; a NaN probability (a row of NaN) is not 0 and reaches the output.
        if (probs[j] != T(0)) add_scaled(row_output, values + columns[j] * shapes.value_dim, probs[j], shapes.value_dim);
      }
    }
  });
}

// Scratch space of one thread for the backward: a row's support (its columns, probabilities and the gradient to
// them), the gradient to its scores, and the entmax backward's own.
template <typename T>
struct RestrictedSupport {
  std::vector<int32_t> column;
  std::vector<T> probs, grad, grad_scores;
  Support<T> entmax;
  explicit RestrictedSupport(int64_t size)
      : column(size), probs(size), grad(size), grad_scores(size), entmax(size) {}
};

template <typename T>
void restricted_backward(const T* grad_output, const T* query, const T* key, const T* value, const T* betas,
                         const int64_t* offsets, const int32_t* columns, const T* probs, const Shapes& shapes,
                         T* grad_query, T* grad_key, T* grad_value, T* grad_betas) {
  const int64_t longest = longest_row(offsets, shapes.heads * shapes.query_len);
  // By heads: the gradients to a head's keys and values sum over its rows, which one thread then owns.
  at::parallel_for(0, shapes.heads, 1, [&](int64_t begin, int64_t end) {
    FlushDenormals flush_denormals;
    RestrictedSupport<T> support(longest);
    for (int64_t head = begin; head < end; ++head) {
      const T* keys = key + head * shapes.key_len * shapes.dim;
      const T* values = value + head * shapes.key_len * shapes.value_dim;
      T* head_grad_key = grad_key + head * shapes.key_len * shapes.dim;
      T* head_grad_value = grad_value + head * shapes.key_len * shapes.value_dim;
      for (int64_t row = head * shapes.query_len; row < (head + 1) * shapes.query_len; ++row) {
        const T* row_grad_output = grad_output + row * shapes.value_dim;
        int64_t count = 0;  // the row's support, gathered: outside it, p = 0 and so are the gradients
        for (int64_t j = offsets[row]; j < offsets[row + 1]; ++j) {
          if (probs[j] == T(0)) continue;
          support.column[count] = columns[j];
          support.probs[count] = probs[j];
          support.grad[count] = dot(row_grad_output, values + columns[j] * shapes.value_dim, shapes.value_dim);
          ++count;
        }
        const T grad_beta = count == 0 ? T(0)
                                       : entmax_backward_any_row(support.probs.data(), support.grad.data(),
                                                                 support.grad_scores.data(), count, betas[row],
                                                                 grad_betas != nullptr, support.entmax);
        if (grad_betas != nullptr) grad_betas[row] = grad_beta;
        const T* row_query = query + row * shapes.dim;
        T* row_grad_query = grad_query + row * shapes.dim;
        for (int64_t s = 0; s < count; ++s) {
          const int64_t column = support.column[s];
          const T grad_score = support.grad_scores[s];
          add_scaled(row_grad_query, keys + column * shapes.dim, grad_score, shapes.dim);
          add_scaled(head_grad_key + column * shapes.dim, row_query, grad_score, shapes.dim);
          add_scaled(head_grad_value + column * shapes.value_dim, row_grad_output, support.probs[s], shapes.value_dim);
        }
      }
    }
  });
}

// The positions j < size of the true entries (bytes of 0 or 1) in order, into `columns` (room for size + 1 of them),
// and their number. Each 32 bytes (AVX2) or 8 (a word) become a bit mask: none set costs nothing more, a few are
// visited bit by bit, and many are written without a branch (every position at the next free slot, which only a
// true entry keeps), so that neither sparse nor dense rows pay a mispredicted branch per entry.
HF_ENTMAX_INLINE int64_t gather_true(const uint8_t* entries, int64_t size, int32_t* columns) {
  int64_t count = 0, j = 0;
  const auto chunk = [&](unsigned bits, int64_t width) {
    if (std::bitset<32>(bits).count() * 4 < static_cast<size_t>(width)) {
      for (; bits != 0; bits &= bits - 1) columns[count++] = static_cast<int32_t>(j + lowest_set_bit(bits));
    } else {
      for (int64_t k = 0; k < width; ++k) {
        columns[count] = static_cast<int32_t>(j + k);
        count += entries[j + k];
      }
    }
  };
#if defined(__AVX2__)
  for (; j + 32 <= size; j += 32) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(entries + j));
    const auto bits = static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpgt_epi8(bytes, _mm256_setzero_si256())));
    if (bits != 0) chunk(bits, 32);
  }
#endif
  for (; j + 8 <= size; j += 8) {
    uint64_t word;
    std::memcpy(&word, entries + j, sizeof(word));
    // Byte k (0 or 1) to bit k: the multiplication adds each byte's bit into the top byte, at its own place.
    const auto bits = static_cast<unsigned>((word * 0x0102040810204080ULL) >> 56);
    if (bits != 0) chunk(bits, 8);
  }
  for (; j < size; ++j) {
    columns[count] = static_cast<int32_t>(j);
    count += entries[j];
  }
  return count;
}

// nearest_rows for one dtype: offset (rows + 1) filled, and the columns returned.
template <typename T>
at::Tensor nearest_columns(const T* values, int64_t rows, int64_t size, int64_t keys, int64_t* offset) {
  const T infinity = std::numeric_limits<T>::infinity();
  const int64_t grain = std::max<int64_t>(1, 65536 / (size + 1));
  // Two passes, as in graph_rows: each row's count (its entries below +inf, at most `keys`), then its columns.
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* row_values = values + row * size;
      int64_t allowed = 0;
#pragma omp simd reduction(+ : allowed)
      for (int64_t j = 0; j < size; ++j) allowed += row_values[j] != infinity;
      offset[row + 1] = std::min(allowed, keys);
    }
  });
  offset[0] = 0;
  std::partial_sum(offset, offset + rows + 1, offset);
  at::Tensor columns = at::empty({offset[rows]}, at::kInt);
  int32_t* column = columns.data_ptr<int32_t>();
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> held_values(keys);
    std::vector<int32_t> held_columns(keys);
    for (int64_t row = begin; row < end; ++row) {
      const T* row_values = values + row * size;
      const int64_t kept = offset[row + 1] - offset[row];
      if (kept == 0) continue;  // every pair +inf
      // The nearest so far, in increasing order (ties by column: a later column goes after an equal value). Once
      // `kept` are held, a value must be below the last to enter, and most are not: one comparison each, where a
      // selection over the whole row (std::nth_element, torch.topk) moves every entry several times.
      int64_t held = 0, nan_count = 0;
      T worst = infinity;  // +inf never enters: it marks a pair that may not be chosen
      for (int64_t j = 0; j < size; ++j) {
        const T value = row_values[j];
        if (!(value < worst)) {
          nan_count += value != value;
          continue;
        }
        int64_t slot = held < kept ? held++ : kept - 1;
        for (; slot > 0 && held_values[slot - 1] > value; --slot) {
          held_values[slot] = held_values[slot - 1];
          held_columns[slot] = held_columns[slot - 1];
        }
        held_values[slot] = value;
        held_columns[slot] = static_cast<int32_t>(j);
        if (held == kept) worst = held_values[kept - 1];
      }
      // NaN ranks after every number (torch.topk's order): NaN pairs fill what numbers leave, lowest column first.
      for (int64_t j = 0; held < kept && nan_count > 0 && j < size; ++j) {
        if (row_values[j] != row_values[j]) held_columns[held++] = static_cast<int32_t>(j);
      }
      std::sort(held_columns.begin(), held_columns.begin() + kept);
      std::copy(held_columns.begin(), held_columns.begin() + kept, column + offset[row]);
    }
  });
  return columns;
}

}  // namespace

// The compressed rows of a bool graph (..., size): offsets (rows + 1,) int64, where row r's entries start, and
// columns (number of true entries,) int32, the positions of each row's true entries in increasing order. With
// max_pairs ≥ 0, a graph of more true entries than that returns after counting them, its columns undefined (None).
std::tuple<at::Tensor, at::Tensor> graph_rows(const at::Tensor& graph, int64_t max_pairs) {
  TORCH_CHECK(graph.device().is_cpu() && graph.scalar_type() == at::kBool && graph.dim() >= 1,
              "graph must be a bool CPU tensor of at least one dimension");
  const int64_t size = graph.size(-1);
  TORCH_CHECK(size < std::numeric_limits<int32_t>::max(), "graph rows must be shorter than 2^31 − 1");
  const at::Tensor matrix = graph.contiguous();
  const int64_t rows = size > 0 ? matrix.numel() / size : 0;
  const auto* entries = reinterpret_cast<const uint8_t*>(matrix.data_ptr<bool>());
  at::Tensor offsets = at::empty({rows + 1}, at::kLong);
  int64_t* offset = offsets.data_ptr<int64_t>();
  // Two passes: the rows' counts (one vectorised sum each), which give the offsets, then their columns, each row
  // gathered into scratch (gather_true may write one slot past its last column) and copied into place.
  const int64_t grain = std::max<int64_t>(1, 65536 / (size + 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const uint8_t* row_entries = entries + row * size;
      int32_t count = 0;  // 32 bits: the sum of bytes vectorises wider than with a 64-bit sum
#pragma omp simd reduction(+ : count)
      for (int64_t j = 0; j < size; ++j) count += row_entries[j];
      offset[row + 1] = count;
    }
  });
  offset[0] = 0;
  std::partial_sum(offset, offset + rows + 1, offset);
  if (max_pairs >= 0 && offset[rows] > max_pairs) return {offsets, at::Tensor()};
  at::Tensor columns = at::empty({offset[rows]}, at::kInt);
  int32_t* column = columns.data_ptr<int32_t>();
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> row_columns(size + 1);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t count = gather_true(entries + row * size, size, row_columns.data());
      std::copy(row_columns.begin(), row_columns.begin() + count, column + offset[row]);
    }
  });
  return {offsets, columns};
}

// The compressed rows (as graph_rows gives them) of the graph that keeps each row's `keys` smallest entries of
// `distances` (..., size), float32 or float64, among those below +inf (every one of them where a row has no more):
// Sparsefinder's nearest method, +inf marking the pairs a query may not attend to. Formed here, row by row, rather
// than as torch.topk's indices scattered into a bool graph that graph_rows then reads: in decoding those passes over
// every pair cost about what attending over the graph saves. Ties go to the lower column; NaN counts as larger than
// any number (torch.topk's order), so a row of NaN distances keeps `keys` of them rather than none.
std::tuple<at::Tensor, at::Tensor> nearest_rows(const at::Tensor& distances, int64_t keys) {
  TORCH_CHECK(distances.device().is_cpu() &&
                  (distances.scalar_type() == at::kFloat || distances.scalar_type() == at::kDouble) &&
                  distances.dim() >= 1,
              "distances must be a float32 or float64 CPU tensor of at least one dimension");
  TORCH_CHECK(keys >= 1, "keys must be at least 1, got ", keys);
  const int64_t size = distances.size(-1);
  TORCH_CHECK(size < std::numeric_limits<int32_t>::max(), "distance rows must be shorter than 2^31 − 1");
  const at::Tensor matrix = distances.contiguous();
  const int64_t rows = size > 0 ? matrix.numel() / size : 0;
  at::Tensor offsets = at::empty({rows + 1}, at::kLong);
  at::Tensor columns;
  AT_DISPATCH_FLOATING_TYPES(matrix.scalar_type(), "nearest_rows", [&] {
    columns = nearest_columns<scalar_t>(matrix.data_ptr<scalar_t>(), rows, size, keys, offsets.data_ptr<int64_t>());
  });
  return {offsets, columns};
}

// output (B, H, Lq, Dv) of α-entmax attention over the pairs of the graph (offsets, columns; see graph_rows) only,
// and the probabilities of those pairs (number of columns,), in the columns' order. query (B, H, Lq, D), already
// scaled; key (B, H, Lk, D); value (B, H, Lk, Dv); α broadcasts to (B, H, Lq, 1); pair_bias (number of columns,), if
// given, is added to the pairs' scores. The bias gets no gradient: it is the mask's (ALiBi's slopes are fixed).
std::tuple<at::Tensor, at::Tensor> restricted_attention_forward(const at::Tensor& query, const at::Tensor& key,
                                                                const at::Tensor& value, const at::Tensor& alpha,
                                                                const at::Tensor& offsets, const at::Tensor& columns,
                                                                const std::optional<at::Tensor>& pair_bias) {
  check_scores(query, alpha, "query");
  const Shapes shapes = check_attention(query, key, value, offsets, columns);
  const bool biased = pair_bias.has_value() && pair_bias->defined();
  if (biased) {
    TORCH_CHECK(pair_bias->device().is_cpu() && pair_bias->scalar_type() == query.scalar_type() &&
                    pair_bias->dim() == 1 && pair_bias->numel() == columns.numel() && pair_bias->is_contiguous(),
                "pair_bias must be a contiguous CPU tensor of the query's dtype, one entry per column (",
                columns.numel(), "), got ", pair_bias->sizes());
  }
  const at::Tensor betas = row_betas(query, alpha);
  at::Tensor probs = at::empty({columns.numel()}, query.options());
  at::Tensor output = at::zeros({query.size(0), query.size(1), shapes.query_len, shapes.value_dim}, query.options());
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "restricted_attention_forward", [&] {
    restricted_forward<scalar_t>(query.data_ptr<scalar_t>(), key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(),
                                 betas.data_ptr<scalar_t>(), offsets.data_ptr<int64_t>(), columns.data_ptr<int32_t>(),
                                 biased ? pair_bias->data_ptr<scalar_t>() : nullptr, shapes, probs.data_ptr<scalar_t>(),
                                 output.data_ptr<scalar_t>());
  });
  return {output, probs};
}

// The gradients of restricted_attention_forward to the query, key, value and (when alpha_grad is true; an undefined
// tensor otherwise) α, in α's shape and dtype, given the gradient to its output and the probabilities it returned.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> restricted_attention_backward(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& alpha, const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& probs,
    bool alpha_grad) {
  check_scores(query, alpha, "query");
  const Shapes shapes = check_attention(query, key, value, offsets, columns);
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef({query.size(0), query.size(1), shapes.query_len,
                                                      shapes.value_dim}) &&
                  grad_output.scalar_type() == query.scalar_type() && grad_output.is_contiguous(),
              "grad_output must be a contiguous tensor shaped and typed like the output");
  TORCH_CHECK(probs.sizes() == columns.sizes() && probs.scalar_type() == query.scalar_type() && probs.is_contiguous(),
              "probs must be the forward's probabilities, one per column");
  const at::Tensor betas = row_betas(query, alpha);
  at::Tensor grad_query = at::zeros_like(query), grad_key = at::zeros_like(key), grad_value = at::zeros_like(value);
  at::Tensor grad_betas = alpha_grad ? at::empty_like(betas) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "restricted_attention_backward", [&] {
    restricted_backward<scalar_t>(grad_output.data_ptr<scalar_t>(), query.data_ptr<scalar_t>(),
                                  key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(), betas.data_ptr<scalar_t>(),
                                  offsets.data_ptr<int64_t>(), columns.data_ptr<int32_t>(), probs.data_ptr<scalar_t>(),
                                  shapes, grad_query.data_ptr<scalar_t>(), grad_key.data_ptr<scalar_t>(),
                                  grad_value.data_ptr<scalar_t>(),
                                  alpha_grad ? grad_betas.data_ptr<scalar_t>() : nullptr);
  });
  at::Tensor grad_alpha = alpha_grad ? at::sum_to(grad_betas, alpha.sizes()).to(alpha.scalar_type()) : at::Tensor();
  return {grad_query, grad_key, grad_value, grad_alpha};
}

}  // namespace hf_entmax

TORCH_LIBRARY_FRAGMENT(hf_entmax, m) {
  m.def("graph_rows(Tensor graph, int max_pairs=-1) -> (Tensor, Tensor)");
  m.def("nearest_rows(Tensor distances, int keys) -> (Tensor, Tensor)");
  m.def(
      "restricted_attention_forward(Tensor query, Tensor key, Tensor value, Tensor alpha, Tensor offsets, "
      "Tensor columns, Tensor? pair_bias=None) -> (Tensor, Tensor)");
  m.def(
      "restricted_attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value, Tensor alpha, "
      "Tensor offsets, Tensor columns, Tensor probs, bool alpha_grad) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(hf_entmax, CPU, m) {
  m.impl("graph_rows", &hf_entmax::graph_rows);
  m.impl("nearest_rows", &hf_entmax::nearest_rows);
  m.impl("restricted_attention_forward", &hf_entmax::restricted_attention_forward);
  m.impl("restricted_attention_backward", &hf_entmax::restricted_attention_backward);
}
