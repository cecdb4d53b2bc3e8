// Dynamic loss scaling, as torch.amp.GradScaler: f16's gradients underflow where f32's do not
// (its smallest normal is 6.1e-5), so the loss is multiplied by a large scale before backward and
// the gradients divided by it before the update. A step whose gradients hold inf or NaN (the scale
// was too large) is skipped and the scale backed off; after growth_interval good steps in a row
// it grows. bf16 has f32's range and needs none.
//
//   optim::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.step(optimizer);   // unscales, then steps unless a gradient is inf or NaN
//   scaler.update();
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor/tensor.h"
#include "optim/optimizer.h"

namespace ember::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch's
  double growth_factor = 2.0, backoff_factor = 0.5;
  int growth_interval = 2000;
  bool enabled = true;  // disabled: scale() returns the loss, step() steps, as without a scaler
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss · scale, differentiable (the gradients come out scaled).
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of the optimizer's parameters by the scale, and records whether any of
  // them holds inf or NaN (one read from the device for all of them). Once per step: a second call
  // before update() is an error, as in PyTorch.
  void unscale_(Optimizer& optimizer);
  // unscale_ unless done, then optimizer.step() unless a gradient was inf or NaN. Returns whether
  // the optimizer stepped.
  bool step(Optimizer& optimizer);
  // Backs the scale off after a skipped step; grows it after growth_interval steps in a row that
  // were not. Then the next step may unscale again.
  void update();

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  std::int64_t skipped_steps() const { return skipped_; }  // since construction (not saved)

  // For a training checkpoint's state (train/checkpoint.h): the scale, the good steps counted
  // toward the next growth, and the options, under "grad_scaler.".
  std::map<std::string, std::string> state_dict() const;
  // ValueError naming the key when the state is missing or malformed.
  void load_state_dict(const std::map<std::string, std::string>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0, skipped_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

}  // namespace ember::optim
