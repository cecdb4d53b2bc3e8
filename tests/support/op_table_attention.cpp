// The op table's attention ops: scaled_dot_product_attention with PyTorch's arguments (no mask, a
// causal one with more keys than queries, boolean and additive masks, a row masked everywhere, an
// explicit scale, dropout) and across the kernels' 64-row tiles; and the same op over heads side by
// side in each row.
#include "core/ops/ops.h"
#include "support/op_samples.h"

namespace ember::testing {
namespace {

// q [..., L, E], k [..., S, E], v [..., S, Ev], seeded from `seed`.
std::vector<Tensor> qkv(const Shape& batch, std::int64_t l, std::int64_t s, std::int64_t e, std::int64_t ev,
                        std::uint64_t seed) {
  const auto with = [&](std::int64_t rows, std::int64_t cols) {
    Shape shape = batch;
    shape.push_back(rows);
    shape.push_back(cols);
    return shape;
  };
  return {random_input(with(l, e), seed), random_input(with(s, e), seed + 1), random_input(with(s, ev), seed + 2)};
}

std::vector<Tensor> with_mask(std::vector<Tensor> inputs, Tensor mask) {
  inputs.push_back(std::move(mask));
  return inputs;
}

// A u8 key-padding mask [N, 1, 1, S]: batch element n attends to its first S − n keys.
Tensor key_padding(std::int64_t n, std::int64_t s) {
  std::vector<std::uint8_t> keep;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t j = 0; j < s; ++j) keep.push_back(j < s - b ? 1 : 0);
  return from_vector(keep, {n, 1, 1, s}, {.dtype = DType::u8});
}

// A u8 mask [L, S] with query row 1 masked everywhere (output 0 and gradient 0 there) and the
// rest a seeded pattern with the diagonal kept.
Tensor one_row_masked(std::int64_t l, std::int64_t s) {
  Tensor mask = mask_input({l, s}, 130);
  std::vector<std::uint8_t> keep = mask.to_vector<std::uint8_t>();
  for (std::int64_t j = 0; j < s; ++j) keep[static_cast<std::size_t>(s + j)] = 0;
  for (std::int64_t i = 0; i < l && i < s; ++i)
    if (i != 1) keep[static_cast<std::size_t>(i * s + i)] = 1;
  return from_vector(keep, {l, s}, {.dtype = DType::u8});
}

Sample differentiated_in_qkv(Sample sample) {
  sample.grad_inputs = {0, 1, 2};
  return sample;
}

AttentionOptions causal() { return {.is_causal = true}; }

std::vector<Sample> attention_samples() {
  const std::string f = "F.scaled_dot_product_attention(x0, x1, x2";
  return {
      call("[2, 3, 5, 4]·[2, 3, 7, 4] → [2, 3, 7, 6]", qkv({2, 3}, 5, 7, 4, 6, 120),
           EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2])), f + ")"),
      call("causal, 5 queries, 7 keys (top-left)", qkv({2, 5}, 5, 7, 4, 4, 123),
           EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], causal())), f + ", is_causal=True)"),
      differentiated_in_qkv(call("a u8 key-padding mask [3, 1, 1, 6]",
                                 with_mask(qkv({3, 2}, 4, 6, 8, 5, 126), key_padding(3, 6)),
                                 EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]})),
                                 f + ", attn_mask=x3.bool())")),
      differentiated_in_qkv(call(
          "an additive mask [4, 6]", with_mask(qkv({2}, 4, 6, 3, 3, 129), random_input({4, 6}, 132)),
          EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]})), f + ", attn_mask=x3)")),
      differentiated_in_qkv(call("row 1 masked everywhere: output 0, gradient 0",
                                 with_mask(qkv({2}, 4, 5, 3, 2, 133), one_row_masked(4, 5)),
                                 EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]})),
                                 f + ", attn_mask=x3.bool())")),
      call("scale 0.3, one query, one key", qkv({1}, 1, 1, 5, 2, 136),
           EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], {.scale = 0.3})), f + ", scale=0.3)"),
      // PyTorch draws its dropout from a stream of its own: no PyTorch spelling. CUDA's reference
      // path and the CPU's fused kernels draw the same mask from the same seed and offset.
      call("dropout 0.3", qkv({2, 2}, 6, 9, 4, 3, 139),
           EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2],
                                                    {.dropout_p = 0.3, .dropout_seed = 7, .dropout_offset = 100})),
           ""),
      call("70 queries, 130 keys, causal: across the 64-row tiles", qkv({1, 2}, 70, 130, 16, 8, 142),
           EMBER_APPLY(scaled_dot_product_attention(x[0], x[1], x[2], causal())), f + ", is_causal=True)"),
  };
}

// scaled_dot_product_attention_heads: q, k and v with 3 heads side by side in each row. PyTorch's
// spelling splits the heads out with views, attends and merges them back.
std::vector<Sample> heads_samples() {
  const std::string split = ".unflatten(-1, (3, -1)).transpose(1, 2)";
  const std::string f = "F.scaled_dot_product_attention(x0" + split + ", x1" + split + ", x2" + split;
  const std::string merge = ").transpose(1, 2).flatten(-2)";
  return {
      call("3 heads: [2, 5, 12]·[2, 7, 12] → [2, 5, 6]", qkv({2}, 5, 7, 12, 6, 150),
           EMBER_APPLY(scaled_dot_product_attention_heads(x[0], x[1], x[2], 3)), f + merge),
      call("3 heads, causal", qkv({2}, 6, 6, 6, 9, 153),
           EMBER_APPLY(scaled_dot_product_attention_heads(x[0], x[1], x[2], 3, causal())),
           f + ", is_causal=True" + merge),
      differentiated_in_qkv(
          call("3 heads, a u8 key-padding mask [2, 1, 1, 7]", with_mask(qkv({2}, 5, 7, 12, 6, 156), key_padding(2, 7)),
               EMBER_APPLY(scaled_dot_product_attention_heads(x[0], x[1], x[2], 3, {.attn_mask = x[3]})),
               f + ", attn_mask=x3.bool()" + merge)),
      call("3 heads, dropout 0.3", qkv({2}, 5, 7, 12, 6, 159),
           EMBER_APPLY(scaled_dot_product_attention_heads(
               x[0], x[1], x[2], 3, {.dropout_p = 0.3, .dropout_seed = 7, .dropout_offset = 100})),
           ""),
      call("3 heads, 70 queries, 130 keys: across the tiles", qkv({1}, 70, 130, 48, 24, 162),
           EMBER_APPLY(scaled_dot_product_attention_heads(x[0], x[1], x[2], 3)), f + merge),
  };
}

// scaled_dot_product_attention_qkv: one [N, L, 3·H·E] tensor, 3 heads. PyTorch's spelling cuts
// it into q, k and v with views.
std::vector<Sample> qkv_samples() {
  const auto part = [](int i) {
    return "x0.chunk(3, -1)[" + std::to_string(i) + "].unflatten(-1, (3, -1)).transpose(1, 2)";
  };
  const std::string f = "F.scaled_dot_product_attention(" + part(0) + ", " + part(1) + ", " + part(2);
  const std::string merge = ").transpose(1, 2).flatten(-2)";
  return {
      call("[2, 5, 3·12] → [2, 5, 12]", {random_input({2, 5, 36}, 170)},
           EMBER_APPLY(scaled_dot_product_attention_qkv(x[0], 3)), f + merge),
      call("causal", {random_input({2, 6, 18}, 171)}, EMBER_APPLY(scaled_dot_product_attention_qkv(x[0], 3, causal())),
           f + ", is_causal=True" + merge),
      call("a u8 key-padding mask [2, 1, 1, 5]", {random_input({2, 5, 36}, 172), key_padding(2, 5)},
           EMBER_APPLY(scaled_dot_product_attention_qkv(x[0], 3, {.attn_mask = x[1]})),
           f + ", attn_mask=x1.bool()" + merge),
      call("140 rows: across the tiles", {random_input({1, 140, 72}, 173)},
           EMBER_APPLY(scaled_dot_product_attention_qkv(x[0], 3)), f + merge),
  };
}

}  // namespace

std::vector<OpInfo> attention_ops() {
  // The CPU's fused kernels and the CUDA reference path (or f32 against f64) differ in the order of
  // the softmax's sums and the products' tiles: products' rounding (kProduct).
  return {{"scaled_dot_product_attention", true, true, false, kProduct, attention_samples, kProduct, kBf16Attention},
          {"scaled_dot_product_attention_heads", true, true, false, kProduct, heads_samples, kProduct, kBf16Attention},
          {"scaled_dot_product_attention_qkv", true, true, false, kProduct, qkv_samples, kProduct, kBf16Attention}};
}

}  // namespace ember::testing
