// Learning-rate schedulers with PyTorch's formulas, stepped once per epoch (or per iteration):
// StepLR, CosineAnnealingLR, a linear warm-up (PyTorch's LinearLR) and SequentialLR, which chains
// them. Each sets every group's lr from the group's initial_lr and the number of step() calls so
// far, in closed form: a resumed run sets the count and gets the same rates.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();  // advances the count and sets the new rates
  std::int64_t last_epoch() const { return epoch_; }
  // For resuming: sets the count and the rates it implies.
  void set_last_epoch(std::int64_t epoch);
  virtual double lr_at(double initial_lr, std::int64_t epoch) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}
  void apply();

 private:
  Optimizer& optimizer_;
  std::int64_t epoch_ = 0;
};

// lr = initial · gamma^⌊epoch / step_size⌋
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  double lr_at(double initial_lr, std::int64_t epoch) const override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (initial − eta_min)·(1 + cos(π·epoch/T_max))/2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t t_max, double eta_min = 0.0);
  double lr_at(double initial_lr, std::int64_t epoch) const override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

// Linear warm-up: lr = initial·(start + (end − start)·min(epoch, total)/total), PyTorch's LinearLR.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, std::int64_t total_iters, double start_factor = 1.0 / 3, double end_factor = 1.0);
  double lr_at(double initial_lr, std::int64_t epoch) const override;

 private:
  std::int64_t total_;
  double start_, end_;
};

// Schedules one after another, PyTorch's SequentialLR: schedule i runs from milestone i−1 (0 for
// the first) with its own count starting at 0 there, so lr_at(t) = schedules[i].lr_at(t − m_{i−1})
// for m_{i−1} ≤ t < m_i. A warm-up then a cosine: SequentialLR(opt, {warmup, cosine}, {W}). The
// position is the count of step() calls (set_last_epoch on a resume), nothing else.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedules,
               std::vector<std::int64_t> milestones);
  double lr_at(double initial_lr, std::int64_t epoch) const override;

 private:
  std::vector<std::unique_ptr<LRScheduler>> schedules_;
  std::vector<std::int64_t> milestones_;
};

}  // namespace ember::optim
