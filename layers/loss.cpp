// The loss criteria (see loss.h).
#include "layers/loss.h"

#include "base/error.h"
#include "core/ops/op_helpers.h"

namespace ember::nn {
namespace {

const char* criterion_name(Loss::Kind kind) {
  return kind == Loss::Kind::mse ? "MSELoss" : kind == Loss::Kind::nll ? "NLLLoss" : "CrossEntropyLoss";
}

}  // namespace

Tensor Loss::operator()(const Tensor& output, const Tensor& target) const {
  ext::check_same_device(criterion_name(kind), {{"input", output}, {"target", target}});
  CrossEntropyOptions on_device = options;
  if (on_device.weight.defined() && on_device.weight.device() != output.device())
    on_device.weight = on_device.weight.to(output.device());
  switch (kind) {
    case Kind::nll:
      return nll_loss(output, target, on_device.weight, on_device.ignore_index);
    case Kind::mse:
      return mse_loss(output, target);
    case Kind::cross_entropy:
      break;
  }
  return ember::cross_entropy(output, target, on_device);  // the fused kernel when plain
}

bool Loss::is_plain_cross_entropy() const {
  return kind == Kind::cross_entropy && !options.weight.defined() && !options.ignore_index &&
         options.label_smoothing == 0.0;
}

std::string Loss::describe() const {
  std::string args;
  const auto add = [&](const std::string& arg) { args += (args.empty() ? "" : ", ") + arg; };
  if (options.weight.defined()) add("weight=[" + std::to_string(options.weight.numel()) + "]");
  if (options.ignore_index) add("ignore_index=" + std::to_string(*options.ignore_index));
  if (options.label_smoothing != 0.0) add(detail::concat("label_smoothing=", options.label_smoothing));
  return std::string(criterion_name(kind)) + "(" + args + ")";
}

void Loss::check() const {
  EMBER_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, ValueError, describe(),
              ": label_smoothing must be in [0, 1]");
  EMBER_CHECK(kind == Kind::cross_entropy || options.label_smoothing == 0.0, ValueError, describe(),
              ": only CrossEntropyLoss takes label_smoothing");
  EMBER_CHECK(kind != Kind::mse || (!options.weight.defined() && !options.ignore_index), ValueError, describe(),
              ": MSELoss takes no weight and no ignore_index");
  EMBER_CHECK(!options.weight.defined() || options.weight.dim() == 1, ValueError, describe(),
              ": the weight must hold one value per class (1-D)");
}

Tensor Criterion::forward(const Tensor&) {
  throw ValueError(type_name() + " is called with an output and a target: loss(output, target)");
}

std::string Criterion::extra_repr() const {
  const std::string text = loss().describe();
  return text.substr(text.find('(') + 1, text.size() - text.find('(') - 2);
}

CrossEntropyLoss::CrossEntropyLoss(Tensor weight, std::optional<std::int64_t> ignore_index, double label_smoothing)
    : ignore_index_(ignore_index), label_smoothing_(label_smoothing) {
  if (weight.defined()) weight_ = register_buffer("weight", std::move(weight));
  loss().check();
}

Loss CrossEntropyLoss::loss() const {
  return Loss::cross_entropy({.weight = weight_, .ignore_index = ignore_index_, .label_smoothing = label_smoothing_});
}

NLLLoss::NLLLoss(Tensor weight, std::optional<std::int64_t> ignore_index) : ignore_index_(ignore_index) {
  if (weight.defined()) weight_ = register_buffer("weight", std::move(weight));
  loss().check();
}

Loss NLLLoss::loss() const { return Loss::nll(weight_, ignore_index_); }

}  // namespace ember::nn
