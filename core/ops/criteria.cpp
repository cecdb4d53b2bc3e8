// The loss criteria composed of other ops (their gradients and kernels, on every device): F.nll_loss
// and F.cross_entropy with class weights and an ignored target, and F.mse_loss. The plain softmax
// cross-entropy is one fused kernel (core/ops/loss.cpp).
#include "core/ops/autocast.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember {
namespace {

// Each row's target, weighted: row i of `picked` is w[tᵢ] at column tᵢ and 0 elsewhere, and 0
// throughout for a row whose target is `ignore_index`; `kept` [B, 1] is 1 for the rows that count
// and 0 for the ignored ones. One embedding lookup of diag(w) (or of the identity), which checks
// every target against [0, C) as embedding does: IndexError, on CUDA at the next synchronization.
struct Targets {
  Tensor picked, kept;
};
Targets weighted_targets(const char* name, const Tensor& input, const Tensor& target, const Tensor& weight,
                         std::optional<std::int64_t> ignore_index) {
  ext::check_defined(name, {"input", input});
  ext::check_defined(name, {"target", target});
  EMBER_CHECK(input.dim() == 2, ShapeError, name, ": 'input' must have shape [B, C], but it has shape ",
              shape_str(input.shape()));
  const std::int64_t batch = input.shape()[0], classes = input.shape()[1];
  EMBER_CHECK(target.dim() == 1 && target.shape()[0] == batch, ShapeError, name, ": 'target' must have shape [", batch,
              "] (one class index per row of 'input', which has shape ", shape_str(input.shape()),
              "), but it has shape ", shape_str(target.shape()));
  EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, DTypeError, name,
              ": 'target' must hold class indices (i64 or i32), but it is ", target.dtype());
  ext::check_same_device(name, {{"input", input}, {"target", target}});
  const TensorOptions like{.dtype = input.dtype(), .device = input.device()};
  Tensor table;
  {
    NoGradGuard no_grad;  // the weights are constants of the loss, as in PyTorch's (no gradient)
    std::vector<double> identity(static_cast<std::size_t>(classes * classes), 0.0);
    for (std::int64_t c = 0; c < classes; ++c) identity[static_cast<std::size_t>(c * classes + c)] = 1.0;
    table = from_vector(identity, {classes, classes}, {.dtype = DType::f64}).to(like.dtype).to(like.device);
    if (weight.defined()) {
      EMBER_CHECK(weight.dim() == 1 && weight.shape()[0] == classes, ShapeError, name,
                  ": 'weight' must have one value per class, shape [", classes, "], but it has shape ",
                  shape_str(weight.shape()));
      ext::check_same_device(name, {{"input", input}, {"weight", weight}});
      table = mul(table, reshape(weight.detach().to(like.dtype), {1, classes}));
    }
  }
  if (!ignore_index) return {embedding(target, table), ones({batch, 1}, like)};
  // The comparison and the replacement in f32 (the one floating type of every device's kernels),
  // exact for indices below 2^24; an ignored row looks up row 0, then is zeroed.
  constexpr std::int64_t kExact = std::int64_t{1} << 24;
  EMBER_CHECK(classes <= kExact && *ignore_index > -kExact && *ignore_index < kExact, ValueError, name,
              ": with ignore_index, the classes and ignore_index must stay within ±2^24, got ", classes, " and ",
              *ignore_index);
  const Tensor index = target.to(DType::f32);
  const Tensor ignored = full({}, static_cast<double>(*ignore_index), {.dtype = DType::f32, .device = input.device()});
  const Tensor keep = ne(index, ignored).to(DType::f32);
  const Tensor safe = mul(index, keep).to(target.dtype());
  const Tensor kept = reshape(keep.to(like.dtype), {batch, 1});
  return {mul(embedding(safe, table), kept), kept};
}

// Σᵢ w[tᵢ]·(−log_probs[i, tᵢ]) / Σᵢ w[tᵢ], and the denominator.
Tensor weighted_nll(const Tensor& log_probs, const Tensor& picked, Tensor& weight_sum) {
  weight_sum = sum(picked);
  return neg(div(sum(mul(log_probs, picked)), weight_sum));
}

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                std::optional<std::int64_t> ignore_index) {
  if (const ext::AutocastInputs cast{OpKey::nll_loss, {&input, &target, &weight}})
    return nll_loss(cast[0], cast[1], cast[2], ignore_index);
  if (is_half(input.dtype()))
    return nll_loss(ext::widened(input), target, ext::widened(weight), ignore_index).to(input.dtype());
  const Targets t = weighted_targets("nll_loss", input, target, weight, ignore_index);
  Tensor weight_sum;
  return weighted_nll(input, t.picked, weight_sum);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  const double eps = options.label_smoothing;
  EMBER_CHECK(eps >= 0.0 && eps <= 1.0, ValueError, "cross_entropy: label_smoothing must be in [0, 1], got ", eps);
  if (!options.weight.defined() && !options.ignore_index) return cross_entropy(input, target, eps);
  if (const ext::AutocastInputs cast{OpKey::cross_entropy, {&input, &target, &options.weight}})
    return cross_entropy(cast[0], cast[1], {cast[2], options.ignore_index, eps});
  if (is_half(input.dtype()))
    return cross_entropy(ext::widened(input), target, {ext::widened(options.weight), options.ignore_index, eps})
        .to(input.dtype());
  const Targets t = weighted_targets("cross_entropy", input, target, options.weight, options.ignore_index);
  const Tensor log_probs = log_softmax(input, -1);
  Tensor weight_sum;
  const Tensor hard = weighted_nll(log_probs, t.picked, weight_sum);
  if (eps == 0.0) return hard;
  // The smoothing term, as PyTorch's: each kept row's Σ_c w[c]·(−log p_c), over the same Σ w[tᵢ].
  const std::int64_t classes = input.shape()[1];
  Tensor class_weight = options.weight.defined()
                            ? reshape(options.weight.detach().to(input.dtype()), {1, classes})
                            : ones({1, classes}, {.dtype = input.dtype(), .device = input.device()});
  const Tensor smooth = neg(div(sum(mul(mul(log_probs, class_weight), t.kept)), weight_sum));
  return add(mul(hard, 1.0 - eps), mul(smooth, eps / static_cast<double>(classes)));
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  ext::check_defined("mse_loss", {"input", input});
  ext::check_defined("mse_loss", {"target", target});
  EMBER_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: 'input' has shape ", shape_str(input.shape()),
              " and 'target' ", shape_str(target.shape()), "; they must be equal (PyTorch broadcasts with a warning)");
  if (const ext::AutocastInputs cast{OpKey::mse_loss, {&input, &target}}) return mse_loss(cast[0], cast[1]);
  if (is_half(input.dtype())) return mse_loss(ext::widened(input), ext::widened(target)).to(input.dtype());
  const Tensor diff = sub(input, target);
  return mean(mul(diff, diff));
}

}  // namespace ember
