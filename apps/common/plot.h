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
// The loss axis starts at 0 or above, the accuracy axis stays within [0, 1].
void write_svg_plot(const std::string& path, const std::vector<EpochRecord>& epochs, const std::string& title);

// The range [lo, hi] an axis shows for `values`: theirs padded by 5%, within [floor, ceiling]. A
// single value (one epoch, or the first after a resume) or equal ones get a window of ±10% of the
// value (at least ±0.05) around them, so that the axis still reads as numbers near the value.
std::pair<double, double> axis_range(const std::vector<double>& values, double floor, double ceiling);

// The curves of a training run as it goes: each epoch added rewrites the picture (an empty path
// keeps the records without writing).
class TrainingCurves {
 public:
  TrainingCurves(std::string path, std::string title) : path_(std::move(path)), title_(std::move(title)) {}
  void add(const train::EpochReport& report);
  // A resumed run's earlier epochs, from the JSON-lines log its checkpoint carried
  // (train::JsonLinesLog::text): the picture is rewritten with them at once.
  void restore(const std::string& log_lines);

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
