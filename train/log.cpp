// The epoch line and the JSON-lines log.
#include "train/log.h"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/serialize.h"

namespace ember::train {

std::string epoch_line(const EpochReport& r, bool distributed) {
  const EpochResult& t = r.train;
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << "Epoch [" << r.epoch << "], val_loss: " << r.validation.loss
      << ", val_acc: " << r.validation.accuracy << ", train_loss: " << t.loss << std::setprecision(2)
      << ", epoch_s: " << r.seconds << std::setprecision(0) << ", images/s: " << t.samples / t.seconds
      << std::setprecision(1) << ", data wait: " << 100 * t.loader.wait_s / t.seconds << "%";
  if (distributed) out << ", communication wait: " << 100 * t.communication_seconds / t.seconds << "%";
  return out.str();
}

LogFields step_fields(const Step& step) {
  LogFields fields{{"step", step.kind()}};
  for (const auto& [name, count] : step.counters()) fields.emplace_back(name, count);
  return fields;
}

void JsonLinesLog::add_epoch(const EpochReport& r, const LogFields& extra) {
  const EpochResult& t = r.train;
  LogFields fields{{"epoch", std::int64_t{r.epoch}},
                   {"train_loss", t.loss},
                   {"val_loss", r.validation.loss},
                   {"val_acc", r.validation.accuracy},
                   {"epoch_s", r.seconds},
                   {"images_per_s", t.samples / t.seconds},
                   {"train_s", t.seconds},
                   {"input_wait_s", t.loader.wait_s},
                   {"communication_wait_s", t.communication_seconds}};
  if (t.gemm_seconds > 0) fields.emplace_back("gemm_s", t.gemm_seconds);
  if (!t.step_losses.empty()) fields.emplace_back("step_losses", t.step_losses);
  fields.insert(fields.end(), extra.begin(), extra.end());
  add(fields);
}

void JsonLinesLog::add(const LogFields& fields) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [key, value] : fields) std::visit([&, &k = key](const auto& v) { object[k] = v; }, value);
  lines_.push_back(object.dump());
}

std::string JsonLinesLog::text() const {
  std::string text;
  for (const std::string& line : lines_) text += line + "\n";
  return text;
}

void JsonLinesLog::restore(const std::string& text) {
  lines_.clear();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines_.push_back(line);
}

void JsonLinesLog::write() const {
  if (path_.empty()) return;
  const std::string all = text();
  write_file_atomically(path_, {reinterpret_cast<const std::uint8_t*>(all.data()), all.size()});
}

}  // namespace ember::train
