// A small SVG writer for the training curves.
#include "apps/common/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/io/serialize.h"

namespace ember::apps {
namespace {

struct Series {
  const char* name;
  const char* color;
  std::function<double(const EpochRecord&)> value;
};

// What a panel's axis may show: a loss is never negative, an accuracy lies in [0, 1].
struct Bounds {
  double floor, ceiling;
};

// One panel at (x0, y0) of size w×h: axes, ticks, and the series.
void panel(std::ostringstream& svg, double x0, double y0, double w, double h, const std::string& label,
           const std::vector<EpochRecord>& epochs, const std::vector<Series>& series, Bounds bounds) {
  std::vector<double> values;
  for (const auto& s : series)
    for (const auto& e : epochs) values.push_back(s.value(e));
  const std::pair<double, double> range = axis_range(values, bounds.floor, bounds.ceiling);
  const double lo = range.first, hi = range.second;
  const int first = epochs.front().epoch, last = std::max(epochs.back().epoch, first + 1);
  auto px = [&](double epoch) { return x0 + 50 + (epoch - first) / (last - first) * (w - 70); };
  auto py = [&](double v) { return y0 + h - 40 - (v - lo) / (hi - lo) * (h - 70); };
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 + 18 << "' text-anchor='middle' font-size='14'>" << label
      << "</text>\n";
  svg << "<line x1='" << px(first) << "' y1='" << py(lo) << "' x2='" << px(last) << "' y2='" << py(lo)
      << "' stroke='black'/>\n<line x1='" << px(first) << "' y1='" << py(lo) << "' x2='" << px(first) << "' y2='"
      << py(hi) << "' stroke='black'/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = lo + (hi - lo) * t / 4;
    svg << "<text x='" << px(first) - 6 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='10'>"
        << std::setprecision(3) << v << "</text>\n";
  }
  const int step = std::max(1, (last - first) / 10);
  for (int e = first; e <= last; e += step)
    svg << "<text x='" << px(e) << "' y='" << py(lo) + 16 << "' text-anchor='middle' font-size='10'>" << e
        << "</text>\n";
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 + h - 6 << "' text-anchor='middle' font-size='11'>epoch</text>\n";
  double legend_y = y0 + 34;
  for (const auto& s : series) {
    svg << "<polyline fill='none' stroke='" << s.color << "' stroke-width='2' points='";
    for (const auto& e : epochs) svg << px(e.epoch) << ',' << py(s.value(e)) << ' ';
    svg << "'/>\n";
    for (const auto& e : epochs)
      svg << "<circle cx='" << px(e.epoch) << "' cy='" << py(s.value(e)) << "' r='2.5' fill='" << s.color << "'/>\n";
    svg << "<text x='" << x0 + w - 20 << "' y='" << legend_y << "' text-anchor='end' font-size='11' fill='" << s.color
        << "'>" << s.name << "</text>\n";
    legend_y += 14;
  }
}

}  // namespace

std::pair<double, double> axis_range(const std::vector<double>& values, double floor, double ceiling) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (double v : values)
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (lo > hi) return {floor, std::isfinite(ceiling) ? ceiling : floor + 1};  // nothing to show
  // The widening and padding stop at the bounds; values beyond them (none, for a loss or an
  // accuracy) stay in view.
  const double bottom = std::min(lo, floor), top = std::max(hi, ceiling);
  if (!(hi > lo)) {
    const double half = std::max(0.1 * std::abs(lo), 0.05);
    lo -= half;
    hi += half;
  }
  const double pad = (hi - lo) * 0.05;
  return {std::max(lo - pad, bottom), std::min(hi + pad, top)};
}

void TrainingCurves::add(const train::EpochReport& r) {
  epochs_.push_back({r.epoch, r.train.loss, r.validation.loss, r.validation.accuracy});
  if (!path_.empty()) write_svg_plot(path_, epochs_, title_);
}

void TrainingCurves::restore(const std::string& log_lines) {
  epochs_.clear();
  std::istringstream in(log_lines);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("epoch") && j.contains("val_acc"))
      epochs_.push_back({j["epoch"].get<int>(), j["train_loss"].get<double>(), j["val_loss"].get<double>(),
                         j["val_acc"].get<double>()});
  }
  if (!path_.empty()) write_svg_plot(path_, epochs_, title_);
}

void write_svg_plot(const std::string& path, const std::vector<EpochRecord>& epochs, const std::string& title) {
  if (epochs.empty()) return;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='380' font-family='sans-serif'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n<text x='450' y='20' text-anchor='middle' "
         "font-size='15'>"
      << title << "</text>\n";
  panel(svg, 0, 20, 450, 360, "loss", epochs,
        {{"train", "#d62728", [](const EpochRecord& e) { return e.train_loss; }},
         {"validation", "#1f77b4", [](const EpochRecord& e) { return e.val_loss; }}},
        {0.0, HUGE_VAL});
  panel(svg, 450, 20, 450, 360, "validation accuracy", epochs,
        {{"accuracy", "#2ca02c", [](const EpochRecord& e) { return e.val_acc; }}}, {0.0, 1.0});
  svg << "</svg>\n";
  const std::string text = svg.str();
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

void write_svg_loglog(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<XYSeries>& series) {
  double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (x <= 0 || y <= 0) continue;
      x_lo = std::min(x_lo, std::log10(x));
      x_hi = std::max(x_hi, std::log10(x));
      y_lo = std::min(y_lo, std::log10(y));
      y_hi = std::max(y_hi, std::log10(y));
    }
  if (x_lo > x_hi) return;
  x_lo = std::floor(x_lo);
  x_hi = std::max(std::ceil(x_hi), x_lo + 1);
  y_lo = std::floor(y_lo);
  y_hi = std::max(std::ceil(y_hi), y_lo + 1);
  const double w = 760, h = 460, left = 80, bottom = 60, top = 40, right = 30;
  auto px = [&](double x) { return left + (std::log10(x) - x_lo) / (x_hi - x_lo) * (w - left - right); };
  auto py = [&](double y) { return h - bottom - (std::log10(y) - y_lo) / (y_hi - y_lo) * (h - bottom - top); };
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << w / 2 << "' y='22' text-anchor='middle' font-size='15'>" << title << "</text>\n";
  for (double e = x_lo; e <= x_hi; ++e) {
    const double x = px(std::pow(10.0, e));
    svg << "<line x1='" << x << "' y1='" << top << "' x2='" << x << "' y2='" << h - bottom
        << "' stroke='#ddd'/>\n<text x='" << x << "' y='" << h - bottom + 16 << "' text-anchor='middle' "
        << "font-size='11'>1e" << e << "</text>\n";
  }
  for (double e = y_lo; e <= y_hi; ++e) {
    const double y = py(std::pow(10.0, e));
    svg << "<line x1='" << left << "' y1='" << y << "' x2='" << w - right << "' y2='" << y
        << "' stroke='#ddd'/>\n<text x='" << left - 6 << "' y='" << y + 4 << "' text-anchor='end' "
        << "font-size='11'>1e" << e << "</text>\n";
  }
  svg << "<text x='" << w / 2 << "' y='" << h - 15 << "' text-anchor='middle' font-size='12'>" << x_label
      << "</text>\n<text x='16' y='" << h / 2 << "' transform='rotate(-90 16 " << h / 2
      << ")' text-anchor='middle' font-size='12'>" << y_label << "</text>\n";
  double legend = top + 14;
  for (const auto& s : series) {
    svg << "<polyline fill='none' stroke='" << s.color << "' stroke-width='2' points='";
    for (const auto& [x, y] : s.points)
      if (x > 0 && y > 0) svg << px(x) << ',' << py(y) << ' ';
    svg << "'/>\n";
    for (const auto& [x, y] : s.points)
      if (x > 0 && y > 0) svg << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << s.color << "'/>\n";
    svg << "<text x='" << left + 12 << "' y='" << legend << "' font-size='12' fill='" << s.color << "'>" << s.name
        << "</text>\n";
    legend += 16;
  }
  svg << "</svg>\n";
  const std::string text = svg.str();
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

}  // namespace ember::apps
