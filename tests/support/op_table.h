// The op table: every op of ember's public functional API (core/ops/ops.h, core/ops/fused.h, and
// the Tensor methods docs/ops.md lists among the ops), each with sample inputs, the function that
// applies it, whether it is differentiable and in which inputs, whether it has a CUDA path, and the
// tolerance between its CPU and CUDA results — PyTorch's OpInfo
// (torch/testing/_internal/common_methods_invocations.py). One table feeds every op-wide test:
//   - the gradcheck of every differentiable op (tests/core/test_gradcheck.cpp, f64, CPU);
//   - the per-device runs (tests/core/test_op_devices.cpp, CTest ops_cpu and ops_cuda): on the CPU
//     f32 against f64, on CUDA against the CPU, results and gradients;
//   - the comparison with PyTorch (tests/interop/ops_tool.cpp, ops_torch.py), over the PyTorch
//     spelling each sample carries;
//   - the check that docs/ops.md lists exactly these ops (op_table_docs, scripts/check_op_docs.py).
// A new op gets an entry here and a row in docs/ops.md, and every one of those tests covers it.
//
// No Catch2 here: ops_tool, which is not a test binary, links the table too.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace ember::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// |result − expected| ≤ atol + rtol·|expected| per element, for two f32 computations of one op
// (CPU and CUDA), and for the CPU's f32 result against its f64 result on the same (f32) values.
struct Tolerance {
  double atol = 0, rtol = 0;
};

// One call of an op. Floating inputs are f64 here; each test casts them to the dtype it runs in
// (f32 on CUDA). Inputs of other dtypes (targets, masks, pixels, indices) stay as they are.
struct Sample {
  std::string label;           // what the sample exercises: "[37, 45] + [45] (broadcast)"
  std::vector<Tensor> inputs;  // on the CPU; seeded, so every run and every device sees the same
  OpFn apply;                  // the op with this sample's other arguments; must not modify inputs
  // The inputs the op is differentiated in; left empty: every f64 input (of a differentiable op).
  std::vector<std::size_t> grad_inputs = {};
  // A call that records no gradient although the op has a rule (to with a dtype).
  bool no_grad = false;
  // The same call in PyTorch, over x0, x1, ... (torch tensors of the inputs), torch and
  // F = torch.nn.functional; empty where PyTorch has no such op. ops_torch.py evaluates it.
  std::string torch = {};
  // False where central differences straddle a kink or a tie (relu at 0, equal maxima), whose
  // one-sided derivatives differ: the rule's choice there is compared across devices and with
  // PyTorch instead. False also for the large shapes (tests/support/op_samples.h, kLarge).
  bool gradcheck = true;
  // Expected values computed another way, for ops whose inputs are not floating (the f32 and f64
  // runs the CPU compares would be one computation): called with the inputs as they are.
  OpFn reference = {};
  // The number of ops `apply` chains (the operators' sample: four). A 16-bit run rounds after each,
  // the f32 run it is compared with only at the end: kHalfChain per op beyond the first.
  int ops_chained = 1;
};

struct OpInfo {
  std::string name;                              // as docs/ops.md spells it (`fused::` for the fused ops)
  bool differentiable;                           // records a gradient rule (for the inputs its samples name)
  bool cuda;                                     // runs on a CUDA device (compared there with the CPU)
  bool needs_cudnn;                              // its CUDA path is cuDNN's (the convolutions)
  Tolerance tolerance;                           // CPU↔CUDA and f32↔f64, of the results; why: at each entry
  std::function<std::vector<Sample>()> samples;  // built on demand: the table holds no tensors
  // Of the gradients, where they round more than the results (a broadcast input's gradient is a
  // sum over the broadcast dims).
  Tolerance grad_tolerance = tolerance;
  // Of a bf16 or f16 run (results and gradients) against the f32 op on the same values, rounded
  // once: the same bits for the ops that compute on widened copies (Note [half precision]).
  Tolerance half_tolerance = {};
};

// Every op, in docs/ops.md's order of families.
std::vector<OpInfo> op_table();

// The inputs a sample differentiates in (grad_inputs, or every f64 input); none for an op that is
// not differentiable or a sample marked no_grad.
std::vector<std::size_t> differentiated_inputs(const OpInfo& op, const Sample& sample);

// A floating input converted to `dtype` and moved to `device`; other inputs only moved.
Tensor input_as(const Tensor& input, DType dtype, Device device);

// One sample run on a device in a dtype: its result, whether autograd recorded it, and the
// gradients of ⟨result, upstream⟩ in the differentiated inputs (undefined where the op gave
// none), all on the CPU. upstream is seeded (f64, the result's shape): the same on every device.
struct SampleRun {
  Tensor result;
  bool recorded = false;
  Tensor upstream;
  std::vector<Tensor> grads;
};
// The upstream gradient's values are rounded through `upstream_through` (bf16 or f16 for a run in
// it and the f32 run it is compared with).
SampleRun run_sample(const OpInfo& op, const Sample& sample, DType dtype, Device device,
                     DType upstream_through = DType::f32);

// The families, one file each (tests/support/op_table_*.cpp).
std::vector<OpInfo> elementwise_ops();
std::vector<OpInfo> reduction_ops();
std::vector<OpInfo> network_ops();
std::vector<OpInfo> attention_ops();
std::vector<OpInfo> shape_ops();

// Sample inputs, f64 on the CPU: uniform in [low, high) from `seed`, or the values given.
Tensor random_input(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0);
Tensor values_input(const std::vector<double>& values, const Shape& shape);

// The tolerances the entries choose from, each with its reason.
//
// The same bits: copies, views, selections (relu, abs, clamp, maximum, where, max_pool2d),
// comparisons and casts compute nothing that rounds, or one formula exactly
// (Note [one formula per op], kernels/elementwise_math.h).
inline constexpr Tolerance kExact{0, 0};
// One rounded arithmetic operation per element: nvcc contracts a·b + c into a fused multiply-add
// and GCC does not, so the last bit may differ (rtol 1e-6 ≈ 8 ulp of float; atol for values
// near 0). Also f32 against f64: one rounding of the exact result.
inline constexpr Tolerance kArithmetic{1e-7, 1e-6};
// Transcendentals (exp, log, tanh, sigmoid, erf, pow, sqrt): CUDA's expf/logf/tanhf/powf are
// accurate to 1–4 ulp (CUDA C++ Programming Guide, "Mathematical Functions"), glibc's to about 1,
// so two results may differ by ~5 ulp: rtol 2e-6 (about 16 ulp).
inline constexpr Tolerance kTranscendental{1e-7, 2e-6};
// Reductions over the samples' at most a few hundred terms of |x| ≤ 3: the GPU sums in float trees,
// the CPU in double, so results differ by up to n·ε·Σ|x| ≈ 300·6e-8·3 relative to the largest
// term: 1e-5 absolute covers it, and the gradients (an expand of the upstream) are exact.
inline constexpr Tolerance kReduction{1e-5, 1e-5};
// Products (matmul, linear, convolutions by im2col) and the softmax family and normalizations,
// whose every result is a dot product or a row sum of up to K ≈ 150 products: K·ε·Σ|a·b| ≈ 1e-5
// for these magnitudes; 1e-4 leaves a margin for cuBLAS's and cuDNN's blocking orders.
inline constexpr Tolerance kProduct{1e-4, 1e-4};
// A chain of ops in bf16 or f16 against the f32 chain rounded once: each op after the first may
// add a rounding of half an ulp, amplified by the later ops' conditioning (here at most 2, for the
// operators' sample): one ulp of the result per op, 2^-7 relative for bf16 (f16's is 2^-10; the
// bf16 bound covers both).
inline constexpr Tolerance kHalfChain{0, 1.0 / 128};

// The CPU's bf16 GEMM (products, and convolutions by im2col) against the f32 path on the same bf16
// values, each rounded once to bf16: the two f32 sums differ in order (within kProduct, or the f32
// Winograd's rounding), so where one lies near a rounding boundary the
// two round to neighbouring bf16 values, one ulp apart: 2^-7 of the value at most (8 significant
// bits).
inline constexpr Tolerance kBf16Product{1e-4, 1.0 / 128};
// The CPU's bf16 attention (Note [bf16 attention]) rounds each probability and each dS to bf16
// (2^-9 relative) before its product: an element may be off by 2^-9 of Σ|terms| on top of
// kBf16Product's ulp, however small the element itself. For the samples' inputs in [−1, 1], Σ|terms|
// is at most about 2 (a row of probabilities sums to 1, to 2 after dropout at p = 0.5): 4e-3
// (measured: 2e-3 at most).
inline constexpr Tolerance kBf16Attention{4e-3, kBf16Product.rtol};

}  // namespace ember::testing
