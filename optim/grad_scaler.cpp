// Dynamic loss scaling: unscaling, the inf/NaN check, skipped steps and the scale's schedule.
#include "optim/grad_scaler.h"

#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember::optim {
namespace {

const std::string kPrefix = "grad_scaler.";

double number(const std::map<std::string, std::string>& state, const std::string& key) {
  const auto it = state.find(kPrefix + key);
  EMBER_CHECK(it != state.end(), ValueError, "grad scaler state: no '", kPrefix, key, "'");
  char* end = nullptr;
  const double value = std::strtod(it->second.c_str(), &end);
  EMBER_CHECK(!it->second.empty() && *end == '\0' && std::isfinite(value), ValueError, "grad scaler state: '", kPrefix,
              key, "' is not a number: '", it->second.substr(0, 40), "'");
  return value;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  EMBER_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), ValueError,
              "GradScaler: init_scale must be a positive number, not ", options.init_scale);
  EMBER_CHECK(options.growth_factor > 1, ValueError, "GradScaler: growth_factor must be above 1, not ",
              options.growth_factor);
  EMBER_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, ValueError,
              "GradScaler: backoff_factor must be in (0, 1), not ", options.backoff_factor);
  EMBER_CHECK(options.growth_interval > 0, ValueError, "GradScaler: growth_interval must be positive, not ",
              options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? mul(loss, scale_) : loss; }

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  EMBER_CHECK(!unscaled_, ValueError,
              "GradScaler::unscale_ was already called since the last update(): unscale once per step");
  NoGradGuard no_grad;
  // Σ g·0 is 0 when every element is finite and NaN as soon as one is inf or NaN: one sum per
  // gradient, added up on the device, read once.
  Tensor poisoned;
  for (auto& group : optimizer.param_groups())
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      mul_(g, 1.0 / scale_);
      Tensor check = sum(mul(g, 0.0));
      if (!poisoned.defined())
        poisoned = check;
      else
        add_(poisoned, check);
    }
  found_inf_ = poisoned.defined() && !std::isfinite(poisoned.item<double>());
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = found_inf_ = false;
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  auto text = [](double v) { return detail::concat(std::hexfloat, v); };  // exact
  return {{kPrefix + "scale", text(scale_)},
          {kPrefix + "growth_tracker", std::to_string(growth_tracker_)},
          {kPrefix + "growth_factor", text(options_.growth_factor)},
          {kPrefix + "backoff_factor", text(options_.backoff_factor)},
          {kPrefix + "growth_interval", std::to_string(options_.growth_interval)}};
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  const double scale = number(state, "scale");
  EMBER_CHECK(scale > 0, ValueError, "grad scaler state: the scale must be positive, not ", scale);
  scale_ = scale;
  growth_tracker_ = static_cast<std::int64_t>(number(state, "growth_tracker"));
  options_.growth_factor = number(state, "growth_factor");
  options_.backoff_factor = number(state, "backoff_factor");
  options_.growth_interval = static_cast<int>(number(state, "growth_interval"));
  unscaled_ = found_inf_ = false;
}

}  // namespace ember::optim
