// Training curves as an SVG picture: loss (train and validation) and accuracy per epoch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "train/loop.h"

namespace ember::apps {

struct EpochRecord {
  int epoch = 0;
  double train_loss = 0, val_loss = 0, val_acc = 0;
};

// Two panels side by side, axes with ticks, one polyline per series. Written atomically.
void write_svg_plot(const std::string& path, const std::vector<EpochRecord>& epochs, const std::string& title);

// The curves of a training run as it goes: each epoch added rewrites the picture (an empty path
// keeps the records without writing).
class TrainingCurves {
 public:
  TrainingCurves(std::string path, std::string title) : path_(std::move(path)), title_(std::move(title)) {}
  void add(const train::EpochReport& report);

 private:
  std::string path_, title_;
  std::vector<EpochRecord> epochs_;
};

// A log-log chart of named series of (x, y) points, for measurements across sizes.
struct XYSeries {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
};
void write_svg_loglog(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<XYSeries>& series);

}  // namespace ember::apps
