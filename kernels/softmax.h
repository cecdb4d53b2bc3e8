// Row-wise softmax and log-softmax over the last dim, and the fused softmax cross-entropy.
//
// Shapes: x, y, dy, dx are [rows, cols]; targets and per-row outputs are [rows].
// Numerically stable, from each row's maximum and sum (Note [softmax from max and sum] in
// softmax_math.h, where the formulas are), so logits of 1e4 keep full precision.
// Cross-entropy: a target outside [0, cols) is not read from memory: the kernel writes 0 for
// that row's loss and fills in `error` (DeviceErrorCode::target_out_of_range, the target, its
// row, cols). On CUDA `error` is a device-visible pointer and nothing synchronizes; the caller
// checks it at its next synchronization.
#pragma once

#include "kernels/common.h"
#include "kernels/softmax_math.h"

namespace ember::kernels {
enum class SoftmaxKind : std::uint8_t { softmax, log_softmax };
}

namespace ember::kernels::cpu {

template <class T>
void softmax_forward(SoftmaxKind kind, const T* x, T* y, std::size_t rows, std::size_t cols);
// From the forward output y: softmax dx = y·(dy − Σ dy·y); log_softmax dx = dy − exp(y)·Σ dy.
template <class T>
void softmax_backward(SoftmaxKind kind, const T* dy, const T* y, T* dx, std::size_t rows, std::size_t cols,
                      WriteMode mode);

// loss[r] = logsumexp(x[r]) − x[r, target[r]]; row_max[r] and row_sum[r] = Σ exp(x[r] − row_max[r])
// are kept for the backward pass.
template <class T, class Target>
void cross_entropy_forward(const T* logits, const Target* targets, T* loss, T* row_max, T* row_sum, std::size_t rows,
                           std::size_t cols, DeviceErrorRecord* error);
// dlogits = (softmax(x) − onehot(target)) · (*grad_scale) · row_scale, in one pass; grad_scale
// points at the upstream gradient (a scalar in the backend's memory), row_scale is 1/rows for a
// mean-reduced loss.
template <class T, class Target>
void cross_entropy_backward(const T* logits, const Target* targets, const T* row_max, const T* row_sum,
                            const T* grad_scale, T row_scale, T* dlogits, std::size_t rows, std::size_t cols,
                            WriteMode mode);

// A training step's loss and its gradient in one pass: per row, row_loss[r] = logsumexp(x[r]) −
// x[r, target[r]] and dlogits[r] = (softmax(x[r]) − onehot(target[r]))·row_scale (overwritten);
// then batch_loss = row_scale·Σ row_loss (overwritten) and loss_sum += Σ row_loss, summed in a
// fixed order. row_scale is 1/rows for a mean-reduced loss. batch_loss and loss_sum may be null.
// A bad target gives that row zero loss and zero gradient and fills in `error`; a non-finite
// Σ row_loss raises DeviceErrorCode::non_finite (OpTag::loss_check).
template <class T, class Target>
void cross_entropy_fused(const T* logits, const Target* targets, T* dlogits, T* row_loss, T* batch_loss, T* loss_sum,
                         std::size_t rows, std::size_t cols, T row_scale, DeviceErrorRecord* error);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

void softmax_forward(SoftmaxKind kind, const float* x, float* y, std::size_t rows, std::size_t cols,
                     cudaStream_t stream);
void softmax_backward(SoftmaxKind kind, const float* dy, const float* y, float* dx, std::size_t rows, std::size_t cols,
                      WriteMode mode, cudaStream_t stream);
template <class Target>
void cross_entropy_forward(const float* logits, const Target* targets, float* loss, float* row_max, float* row_sum,
                           std::size_t rows, std::size_t cols, DeviceErrorRecord* error, cudaStream_t stream);
template <class Target>
void cross_entropy_backward(const float* logits, const Target* targets, const float* row_max, const float* row_sum,
                            const float* grad_scale, float row_scale, float* dlogits, std::size_t rows,
                            std::size_t cols, WriteMode mode, cudaStream_t stream);
// One launch: every block handles rows; the last block to finish (found through `blocks_done`, a
// device counter that must be 0 before the first call and that the kernel resets) sums row_loss
// in a fixed order, so the result is bit-identical run after run and the launch can be replayed
// (Note [graph-safe kernels] in core/cuda/graph.h).
template <class Target>
void cross_entropy_fused(const float* logits, const Target* targets, float* dlogits, float* row_loss, float* batch_loss,
                         float* loss_sum, std::size_t rows, std::size_t cols, float row_scale, DeviceErrorRecord* error,
                         unsigned* blocks_done, cudaStream_t stream);

}  // namespace ember::kernels::cuda
