// embedding (F.embedding): rows of a table by index, its gradient summed per row in a fixed order
// on both devices (Note [deterministic embedding gradient] in kernels/embedding.h).
#include "kernels/embedding.h"

#include <limits>

#include "core/cuda/kernel_errors.h"
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

constexpr const char* kOp = "embedding";
// The CUDA gradient packs a row and a position into one 64-bit key, 32 bits each.
constexpr auto kMaxKeyPart = static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());

// padding_idx as a row in [0, rows), or -1 for none; negative values count from the end, as PyTorch's.
long long padding_row(std::optional<std::int64_t> padding_idx, std::int64_t rows) {
  if (!padding_idx) return -1;
  EMBER_CHECK(*padding_idx >= -rows && *padding_idx < rows, ValueError, kOp, ": padding_idx ", *padding_idx,
              " must be within [-num_embeddings, num_embeddings) = [", -rows, ", ", rows, ")");
  return *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
}

void check_embedding(const Tensor& input, const Tensor& weight) {
  ext::check_defined(kOp, {"input", input});
  ext::check_defined(kOp, {"weight", weight});
  ext::check_same_device(kOp, {{"weight", weight}, {"input", input}});
  ext::check_dtype(kOp, {"input", input}, {DType::i64, DType::i32});
  ext::check_floating(kOp, {"weight", weight});
  ext::check_dim(kOp, {"weight", weight}, 2);
  EMBER_CHECK(input.numel() <= kMaxKeyPart && weight.shape()[0] <= kMaxKeyPart, ShapeError, kOp,
              ": at most 2^32 - 1 indices and rows, got ", input.numel(), " indices and ", weight.shape()[0], " rows");
}

}  // namespace

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<std::int64_t> padding_idx) {
  check_embedding(input, weight);
  const long long padding = padding_row(padding_idx, weight.shape()[0]);
  if (is_half(weight.dtype()))  // a copy moves no bits, but the gradient's sums run in f32 (Note [half precision])
    return embedding(input, ext::widened(weight), padding_idx).to(weight.dtype());
  const auto n = static_cast<std::size_t>(input.numel());
  const auto rows = static_cast<std::size_t>(weight.shape()[0]), width = static_cast<std::size_t>(weight.shape()[1]);
  Shape shape = input.shape();
  shape.push_back(weight.shape()[1]);
  Tensor out = ext::new_empty(weight, shape);
  kernels::DeviceErrorRecord error;
  ext::visit_index(input, [&](auto zero_index) {
    using I = decltype(zero_index);
    ext::dispatch(
        weight,
        [&](auto zero) {
          using T = decltype(zero);
          kernels::cpu::embedding_forward<T, I>(weight.raw<T>(), input.raw<I>(), out.raw<T>(), n, rows, width, &error);
        },
        [&](auto stream) {
          kernels::cuda::embedding_forward<I>(weight.raw<float>(), input.raw<I>(), out.raw<float>(), n, rows, width,
                                              cuda::device_error_record(weight.device()), stream);
        });
  });
  // On CUDA a bad index is reported at the next synchronization (Note [graph-safe kernels]).
  if (error.code != 0) throw_kernel_error(error, weight.device());
  if (autograd::needs_recording({&weight})) {
    autograd::record(
        out, kOp, {&weight},
        [index = input.detach(), rows, width, n, padding, like = weight.detach()](const Tensor& dy, NeedsGrad) {
          Tensor dweight = ext::new_empty(like, like.shape());
          ext::visit_index(index, [&](auto zero_index) {
            using I = decltype(zero_index);
            ext::dispatch(
                like,
                [&](auto zero) {
                  using T = decltype(zero);
                  kernels::cpu::embedding_backward<T, I>(dy.raw<T>(), index.raw<I>(), dweight.raw<T>(), n, rows, width,
                                                         padding);
                },
                [&](auto stream) {
                  Tensor keys =
                      ext::new_empty(like, {static_cast<std::int64_t>(kernels::embedding_sort_keys(n))}, DType::i64);
                  kernels::cuda::embedding_backward<I>(
                      dy.raw<float>(), index.raw<I>(), dweight.raw<float>(), n, rows, width, padding,
                      reinterpret_cast<unsigned long long*>(keys.raw<std::int64_t>()), stream);
                });
          });
          Gradients grads(1);
          grads[0] = dweight;
          return grads;
        });
  }
  return out;
}

}  // namespace ember
