// Convolution, pooling and batch normalization over NCHW tensors.
//
// CPU: convolution as im2col + GEMM (im2col/col2im here, the GEMM in gemm.h) or, for 3×3 stride-1
// kernels with 8+ channels, Winograd F(4×4, 3×3) (kernels/cpu/winograd.cpp); max pooling and
// batch normalization directly; float and double. CUDA: convolution through cuDNN 9 (forward,
// backward data, backward filter), pooling, batch normalization and the per-channel bias as
// ember's own kernels (f32), each the twin of the CPU code here.
//
// Geometry: input [N, C, H, W], kernel KH×KW, stride S, zero padding P, output
// OH = (H + 2P − KH)/S + 1 (and likewise OW). All outputs are overwritten unless stated.
#pragma once

#include "base/half.h"
#include "kernels/common.h"

namespace ember::kernels {

struct ConvGeometry {
  std::size_t n = 0, c = 0, h = 0, w = 0;  // input
  std::size_t k = 0;                       // output channels
  std::size_t kh = 0, kw = 0, stride = 1, pad = 0;
  constexpr std::size_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  constexpr std::size_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
};

struct PoolGeometry {
  std::size_t n = 0, c = 0, h = 0, w = 0;
  std::size_t kernel = 2, stride = 2;
  constexpr std::size_t oh() const { return (h - kernel) / stride + 1; }
  constexpr std::size_t ow() const { return (w - kernel) / stride + 1; }
};

// Whether a pooling window's candidate replaces the best so far: a larger value, or a NaN over a
// number (the first NaN stays, as does the first of equal values). Max pooling's one rule, on
// both devices.
template <class T>
EMBER_HOST_DEVICE bool pool_beats(T candidate, T best) {
  return best == best && !(candidate <= best);
}

}  // namespace ember::kernels

namespace ember::kernels::cpu {

// One image [C, H, W] → columns [C·KH·KW, OH·OW] (zeros where the window hangs over the padding).
template <class T>
void im2col(const T* image, T* columns, const ConvGeometry& g);
// The adjoint: adds columns back into an image [C, H, W] (which the caller zeroes first).
template <class T>
void col2im(const T* columns, T* image, const ConvGeometry& g);

// The convolution (cross-correlation, as the cuDNN twins below) as im2col + GEMM image by image,
// or by Winograd where winograd_applies: x [N,C,H,W], w [K,C,KH,KW], y [N,K,OH,OW]. `workspace`
// holds conv2d_workspace_elements(g) values (one image's columns, or a chunk's transformed tiles);
// the caller keeps it, so a training step takes no memory from the system. forward adds `bias` [K] when it is not null
// and with `relu` applies ReLU (each image while it is in cache); backward_filter overwrites dw (images summed in
// order: deterministic); backward_data overwrites dx.
std::size_t conv2d_workspace_elements(const ConvGeometry& g);
template <class T>
void conv2d_forward(const T* x, const T* w, const T* bias, T* y, const ConvGeometry& g, T* workspace,
                    bool relu = false);
template <class T>
void conv2d_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, T* workspace);
template <class T>
void conv2d_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, T* workspace);

// Note [bf16 convolution]
// The same convolution with bf16 inputs and f32 results (kernels/cpu/conv_bf16.cpp): im2col in
// bf16 and the bf16 GEMM (kernels/gemm_bf16.h), whose products are exact in f32 and whose sums
// are f32, so each output is an f32 sum of exact products — what the f32 path computes on the same
// values, up to the order of the sums; col2im and the filter's sum over images run in f32. The
// caller rounds each result to bf16 once. im2col + GEMM for every geometry: Winograd's transforms
// would round to bf16 values that are no longer the inputs, and its error grows with them.
// `workspace` holds conv2d_bf16_workspace_bytes(g) bytes.
std::size_t conv2d_bf16_workspace_bytes(const ConvGeometry& g);
void conv2d_forward_bf16(const bfloat16* x, const bfloat16* w, const float* bias, float* y, const ConvGeometry& g,
                         void* workspace);
void conv2d_backward_data_bf16(const bfloat16* dy, const bfloat16* w, float* dx, const ConvGeometry& g,
                               void* workspace);
void conv2d_backward_filter_bf16(const bfloat16* x, const bfloat16* dy, float* dw, const ConvGeometry& g,
                                 void* workspace);

// The same three calls for 3×3 stride-1 kernels with at least 8 channels in and out (where
// winograd_applies), by Winograd's F(2×2, 3×3) in kernels/cpu/winograd.cpp: 2.25× fewer
// multiplications than im2col + GEMM. conv2d_* take this path by themselves; it is declared here
// so that tests can compare it with the direct sum at any shape.
bool winograd_applies(const ConvGeometry& g);
std::size_t winograd_workspace_elements(const ConvGeometry& g);
template <class T>
void winograd_forward(const T* x, const T* w, const T* bias, T* y, const ConvGeometry& g, T* workspace, bool relu);
template <class T>
void winograd_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, T* workspace);
template <class T>
void winograd_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, T* workspace);

// ReLU(conv2d) then max pooling, as max_pool2d_forward gives them on conv2d_forward(relu = true):
// pooled [N, K, OH', OW'] and argmax. Where winograd_pools_tiles (the pooling 2×2 with stride 2,
// even OH and OW: its windows are the Winograd tiles), each tile's outputs are pooled as they
// are computed and the convolution's output is never stored; otherwise it is, in the workspace
// (conv2d_relu_max_pool2d_workspace_elements values), and pooled from there.
bool winograd_pools_tiles(const ConvGeometry& g, const PoolGeometry& p);
template <class T>
void winograd_forward_relu_max_pool2d(const T* x, const T* w, const T* bias, T* pooled, std::int32_t* argmax,
                                      const ConvGeometry& g, T* workspace);
std::size_t conv2d_relu_max_pool2d_workspace_elements(const ConvGeometry& g, const PoolGeometry& p);
template <class T>
void conv2d_relu_max_pool2d_forward(const T* x, const T* w, const T* bias, T* pooled, std::int32_t* argmax,
                                    const ConvGeometry& g, const PoolGeometry& p, T* workspace);

// y[n, c, oh, ow] = max over the window; argmax gets the flat index (within the image plane) of
// the winning element, first one on ties (a NaN wins, the first of them), for the backward pass.
template <class T>
void max_pool2d_forward(const T* x, T* y, std::int32_t* argmax, const PoolGeometry& g);
// dx (overwritten, [N, C, H, W]) gets each dy at its window's argmax, summed where windows overlap.
template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const PoolGeometry& g);

// y[n, c, :, :] += bias[c] (in place) and dbias[c] = Σ_{n,h,w} dy[n, c, h, w].
template <class T>
void channel_bias_add(T* y, const T* bias, std::size_t n, std::size_t c, std::size_t hw);
// bf16 dy: Out = float, summed in f32 as its widened copy would be.
template <class T, class Out = T>
void channel_bias_grad(const T* dy, Out* dbias, std::size_t n, std::size_t c, std::size_t hw);

// Batch normalization over (N, H, W) per channel. Training: mean and biased variance of the
// batch normalize x; save_mean/save_invstd keep them for backward; the running statistics move
// by `momentum` toward the batch's (the variance unbiased, as PyTorch does). Evaluation: the
// running statistics normalize x. y = (x − mean)·invstd·gamma + beta. An empty batch (N·H·W = 0)
// gives NaN statistics and leaves the running ones as they were (as PyTorch does); its backward
// gives dgamma = dbeta = 0.
template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                              T* running_mean, T* running_var, std::size_t n, std::size_t c, std::size_t hw, T momentum,
                              T eps);
template <class T>
void batch_norm_forward_eval(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                             T* y, std::size_t n, std::size_t c, std::size_t hw, T eps);
// dx = gamma·invstd/M · (M·dy − Σdy − x̂·Σ(dy·x̂)), dgamma = Σ(dy·x̂), dbeta = Σdy, with M = N·H·W
// and x̂ = (x − mean)·invstd from the saved statistics.
template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* gamma, const T* save_mean, const T* save_invstd, T* dx,
                         T* dgamma, T* dbeta, std::size_t n, std::size_t c, std::size_t hw);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

// cuDNN convolutions (cross-correlation, as PyTorch's Conv2d). x [N,C,H,W], w [K,C,KH,KW],
// y [N,K,OH,OW]. The algorithm comes from cuDNN's heuristics, once per shape, type and math mode
// (cached); only deterministic algorithms in deterministic mode. Workspace from ember's device
// pool. Throw NotImplementedError in a build without cuDNN.
//
// Note [cuDNN math]
// T = float: exact f32 (CUDNN_FMA_MATH, tensor-op algorithms refused) unless allow_tf32() (then
// CUDNN_DEFAULT_MATH, which lets cuDNN round the inputs to TF32 on tensor cores, as PyTorch's
// torch.backends.cudnn.allow_tf32 does). T = bfloat16 or float16: f32 sums of the 16-bit values
// (their products are exact in f32), each result rounded once — through cuDNN's f32 algorithms on
// widened copies (Note [16-bit convolutions on CUDA] in cudnn_conv.cpp says why not its 16-bit
// ones). With `accumulate` the forward adds into y (β = 1): the caller writes the channel bias
// there first, so that sum and bias round once together, as on the CPU. The math type is what the
// algorithms are asked for; each direction then runs under the math type its chosen algorithm
// reported, on a descriptor of its own (cudnn_conv.cpp's Plan).
template <class T>
void conv2d_forward(const T* x, const T* w, T* y, const ConvGeometry& g, cudaStream_t stream, bool accumulate = false);
template <class T>
void conv2d_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, cudaStream_t stream);
template <class T>
void conv2d_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, cudaStream_t stream);
bool cudnn_available();  // built with cuDNN
int cudnn_version();     // the cuDNN library's version at run time (0 without cuDNN)

// Deterministic mode: one seed gives one result run after run (cuDNN restricted to deterministic
// algorithms). Off until core sets it (ember::cuda::set_deterministic, or EMBER_DETERMINISTIC=1).
void set_deterministic(bool on);
bool deterministic();

// Max pooling for T = float, bfloat16 or float16: the forward selects (exact in any type); the
// backward sums each input's window gradients in f32 and rounds once — for 16-bit data the bits of
// the f32 kernels on widened copies.
template <class T>
void max_pool2d_forward(const T* x, T* y, std::int32_t* argmax, const PoolGeometry& g, cudaStream_t stream);
template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const PoolGeometry& g, cudaStream_t stream);
// The channel bias for T = float, bfloat16 or float16, in f32: y rounded once, dbias in f32 (the
// twin of cpu::channel_bias_grad<T, float>).
template <class T>
void channel_bias_add(T* y, const T* bias, std::size_t n, std::size_t c, std::size_t hw, cudaStream_t stream);
template <class T>
void channel_bias_grad(const T* dy, float* dbias, std::size_t n, std::size_t c, std::size_t hw, cudaStream_t stream);
void batch_norm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* save_mean,
                              float* save_invstd, float* running_mean, float* running_var, std::size_t n, std::size_t c,
                              std::size_t hw, float momentum, float eps, cudaStream_t stream);
void batch_norm_forward_eval(const float* x, const float* gamma, const float* beta, const float* running_mean,
                             const float* running_var, float* y, std::size_t n, std::size_t c, std::size_t hw,
                             float eps, cudaStream_t stream);
void batch_norm_backward(const float* dy, const float* x, const float* gamma, const float* save_mean,
                         const float* save_invstd, float* dx, float* dgamma, float* dbeta, std::size_t n, std::size_t c,
                         std::size_t hw, cudaStream_t stream);

}  // namespace ember::kernels::cuda
