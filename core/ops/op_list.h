// Every op of ember's functional API once, by a typed key, with its autocast policy per device type
// (Note [autocast policy] in core/ops/autocast.h). The activations come from their lists in
// kernels/elementwise_math.h (Note [op lists]); the other ops are listed here:
// X(key, spelling, cpu policy, cuda policy), the spelling as docs/ops.md and the op table write it.
// A key that is not on the list does not compile: ext::AutocastInputs takes an OpKey.
//
// The policies are PyTorch 2.15's for the ops ember has. The fused ops follow the op they start
// with (their ReLU and pooling are on no list and would run in the product's dtype anyway).
// cross_entropy is on the CPU's f32 list; on CUDA, PyTorch's cross_entropy is log_softmax and
// nll_loss, both on its f32 lists. On CUDA, softmax, log_softmax and sum are "f32 with the dtype
// argument set": the same result dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "kernels/elementwise_math.h"

// clang-format off
#define EMBER_OPS(X)                                                        \
  X(add, "add", none, none)                                                 \
  X(sub, "sub", none, none)                                                 \
  X(mul, "mul", none, none)                                                 \
  X(div, "div", none, none)                                                 \
  X(affine, "affine", none, none)                                           \
  X(neg, "neg", none, none)                                                 \
  X(exp, "exp", none, fp32)                                                 \
  X(log, "log", none, fp32)                                                 \
  X(sqrt, "sqrt", none, none)                                               \
  X(pow, "pow", none, fp32)                                                 \
  X(maximum, "maximum", none, none)                                         \
  X(minimum, "minimum", none, none)                                         \
  X(where, "where", none, none)                                             \
  X(gt, "gt", none, none)                                                   \
  X(lt, "lt", none, none)                                                   \
  X(ge, "ge", none, none)                                                   \
  X(le, "le", none, none)                                                   \
  X(eq, "eq", none, none)                                                   \
  X(ne, "ne", none, none)                                                   \
  X(add_, "add_", none, none)                                               \
  X(mul_, "mul_", none, none)                                               \
  X(sum, "sum", none, fp32)                                                 \
  X(mean, "mean", none, none)                                               \
  X(var, "var", none, none)                                                 \
  X(std, "std", none, none)                                                 \
  X(sum_to, "sum_to", none, none)                                           \
  X(softmax, "softmax", none, fp32)                                         \
  X(log_softmax, "log_softmax", none, fp32)                                 \
  X(cross_entropy, "cross_entropy", fp32, fp32)                             \
  X(nll_loss, "nll_loss", fp32, fp32)                                       \
  X(mse_loss, "mse_loss", fp32, fp32)                                       \
  X(argmax, "argmax", none, none)                                           \
  X(max, "max", none, none)                                                 \
  X(count_equal, "count_equal", none, none)                                 \
  X(accuracy, "accuracy", none, none)                                       \
  X(matmul, "matmul", lower_precision, lower_precision)                     \
  X(linear, "linear", lower_precision, lower_precision)                     \
  X(fused_linear_relu, "fused::linear_relu", lower_precision, lower_precision) \
  X(scaled_dot_product_attention, "scaled_dot_product_attention", lower_precision, lower_precision) \
  X(scaled_dot_product_attention_heads, "scaled_dot_product_attention_heads", lower_precision, lower_precision) \
  X(scaled_dot_product_attention_qkv, "scaled_dot_product_attention_qkv", lower_precision, lower_precision) \
  X(conv2d, "conv2d", lower_precision, lower_precision)                     \
  X(fused_conv2d_relu, "fused::conv2d_relu", lower_precision, lower_precision) \
  X(fused_conv2d_relu_max_pool2d, "fused::conv2d_relu_max_pool2d", lower_precision, lower_precision) \
  X(max_pool2d, "max_pool2d", none, none)                                   \
  X(batch_norm, "batch_norm", none, none)                                   \
  X(layer_norm, "layer_norm", none, fp32)                                   \
  X(embedding, "embedding", none, none)                                     \
  X(dropout, "dropout", none, none)                                         \
  X(normalize_u8, "normalize_u8", none, none)                               \
  X(gather_batch, "gather_batch", none, none)                               \
  X(transpose, "transpose", none, none)                                     \
  X(reshape, "reshape", none, none)                                         \
  X(view, "view", none, none)                                               \
  X(flatten, "flatten", none, none)                                         \
  X(unsqueeze, "unsqueeze", none, none)                                     \
  X(narrow, "narrow", none, none)                                           \
  X(permute, "permute", none, none)                                         \
  X(broadcast_to, "broadcast_to", none, none)                               \
  X(cat, "cat", promote, promote)                                           \
  X(slice, "slice", none, none)                                             \
  X(clone, "clone", none, none)                                             \
  X(to, "to", none, none)                                                   \
  X(fill_, "fill_", none, none)                                             \
  X(zero_, "zero_", none, none)                                             \
  X(copy_, "copy_", none, none)
// clang-format on

namespace ember {

enum class CastPolicy : std::uint8_t { none, lower_precision, fp32, promote };

#define EMBER_OP_KEY(key, ...) key,
enum class OpKey : std::uint8_t {
  EMBER_OPS(EMBER_OP_KEY) EMBER_ACTIVATIONS(EMBER_OP_KEY) EMBER_ACTIVATIONS_WITH_ARGS(EMBER_OP_KEY)
};
#undef EMBER_OP_KEY

// An op's policies, as PyTorch's autocast lists give them (on the CPU, then on CUDA).
struct OpPolicy {
  CastPolicy cpu, cuda;
};

struct OpEntry {
  OpKey key;
  std::string_view spelling;
  OpPolicy policy;
};

#define EMBER_OP_ENTRY(key, spelling, cpu, cuda) OpEntry{OpKey::key, spelling, {CastPolicy::cpu, CastPolicy::cuda}},
#define EMBER_ACTIVATION_ENTRY(key, saved, cuda) OpEntry{OpKey::key, #key, {CastPolicy::none, CastPolicy::cuda}},
#define EMBER_ACTIVATION_WITH_ARGS_ENTRY(key) OpEntry{OpKey::key, #key, {CastPolicy::none, CastPolicy::none}},
// Every op, in OpKey's order.
inline constexpr OpEntry kOps[] = {EMBER_OPS(EMBER_OP_ENTRY) EMBER_ACTIVATIONS(EMBER_ACTIVATION_ENTRY)
                                       EMBER_ACTIVATIONS_WITH_ARGS(EMBER_ACTIVATION_WITH_ARGS_ENTRY)};
#undef EMBER_OP_ENTRY
#undef EMBER_ACTIVATION_ENTRY
#undef EMBER_ACTIVATION_WITH_ARGS_ENTRY
inline constexpr std::size_t kOpCount = std::size(kOps);
static_assert([] {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (static_cast<std::size_t>(kOps[i].key) != i) return false;
  return true;
}());

constexpr const OpEntry& op_entry(OpKey key) { return kOps[static_cast<std::size_t>(key)]; }
constexpr std::string_view op_spelling(OpKey key) { return op_entry(key).spelling; }
// The key of an op spelled as docs/ops.md spells it, if it is one of ember's ops.
constexpr std::optional<OpKey> op_key(std::string_view spelling) {
  for (const OpEntry& entry : kOps)
    if (entry.spelling == spelling) return entry.key;
  return std::nullopt;
}

}  // namespace ember
