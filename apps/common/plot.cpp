// A small SVG writer for the training curves.
#include "apps/common/plot.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <sstream>

#include "core/serialize.h"

namespace ember::apps {
namespace {

struct Series {
  const char* name;
  const char* color;
  std::function<double(const EpochRecord&)> value;
};

// One panel at (x0, y0) of size w×h: axes, ticks, and the series.
void panel(std::ostringstream& svg, double x0, double y0, double w, double h, const std::string& label,
           const std::vector<EpochRecord>& epochs, const std::vector<Series>& series) {
  double lo = 1e300, hi = -1e300;
  for (const auto& s : series)
    for (const auto& e : epochs) {
      lo = std::min(lo, s.value(e));
      hi = std::max(hi, s.value(e));
    }
  if (!(hi > lo)) {
    hi = lo + 1;
    lo -= 1;
  }
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
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

void write_svg_plot(const std::string& path, const std::vector<EpochRecord>& epochs, const std::string& title) {
  if (epochs.empty()) return;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='380' font-family='sans-serif'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n<text x='450' y='20' text-anchor='middle' "
         "font-size='15'>" << title << "</text>\n";
  panel(svg, 0, 20, 450, 360, "loss", epochs,
        {{"train", "#d62728", [](const EpochRecord& e) { return e.train_loss; }},
         {"validation", "#1f77b4", [](const EpochRecord& e) { return e.val_loss; }}});
  panel(svg, 450, 20, 450, 360, "validation accuracy", epochs,
        {{"accuracy", "#2ca02c", [](const EpochRecord& e) { return e.val_acc; }}});
  svg << "</svg>\n";
  const std::string text = svg.str();
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

}  // namespace ember::apps
