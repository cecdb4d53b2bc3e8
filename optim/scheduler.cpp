// Learning-rate schedules.
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace ember::optim {

void LRScheduler::apply() {
  const auto& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) optimizer_.set_lr(g, lr_at(groups[g].initial_lr, epoch_));
}

void LRScheduler::step() {
  ++epoch_;
  apply();
}

void LRScheduler::set_last_epoch(std::int64_t epoch) {
  EMBER_CHECK(epoch >= 0, ValueError, "scheduler: last_epoch must be non-negative, got ", epoch);
  epoch_ = epoch;
  apply();
}

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, ValueError, "StepLR: step_size must be positive, got ", step_size);
  apply();
}

double StepLR::lr_at(double initial_lr, std::int64_t epoch) const {
  return initial_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  EMBER_CHECK(t_max > 0, ValueError, "CosineAnnealingLR: T_max must be positive, got ", t_max);
  apply();
}

double CosineAnnealingLR::lr_at(double initial_lr, std::int64_t epoch) const {
  const double pi = 3.14159265358979323846;
  return eta_min_ + (initial_lr - eta_min_) * (1 + std::cos(pi * static_cast<double>(epoch) / t_max_)) / 2;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, std::int64_t total_iters, double start_factor, double end_factor)
    : LRScheduler(optimizer), total_(total_iters), start_(start_factor), end_(end_factor) {
  EMBER_CHECK(total_iters > 0, ValueError, "LinearWarmup: total_iters must be positive, got ", total_iters);
  EMBER_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1, ValueError,
              "LinearWarmup: factors must be in (0, 1] and [0, 1]");
  apply();
}

double LinearWarmup::lr_at(double initial_lr, std::int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, total_)) / static_cast<double>(total_);
  return initial_lr * (start_ + (end_ - start_) * t);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedules,
                           std::vector<std::int64_t> milestones)
    : LRScheduler(optimizer), schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedules_.empty() && milestones_.size() + 1 == schedules_.size(), ValueError,
              "SequentialLR: expected one milestone fewer than schedules, got ", schedules_.size(), " schedules and ",
              milestones_.size(), " milestones");
  for (std::size_t i = 0; i < milestones_.size(); ++i)
    EMBER_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), ValueError,
                "SequentialLR: milestones must be positive and increasing");
  for (const auto& schedule : schedules_) EMBER_CHECK(schedule != nullptr, ValueError, "SequentialLR: a null schedule");
  apply();
}

double SequentialLR::lr_at(double initial_lr, std::int64_t epoch) const {
  const auto after = std::upper_bound(milestones_.begin(), milestones_.end(), epoch);
  const std::size_t i = static_cast<std::size_t>(after - milestones_.begin());
  return schedules_[i]->lr_at(initial_lr, epoch - (i == 0 ? 0 : milestones_[i - 1]));
}

}  // namespace ember::optim
