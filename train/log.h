// Ready-made reporting for the loop's on_epoch hook (train/loop.h): the tutorials' epoch line, and
// a JSON-lines log with one object per epoch that a plotting script or a test reads back.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "train/loop.h"

namespace ember::train {

// "Epoch [e], val_loss: …, val_acc: …, train_loss: …, epoch_s: …, images/s: …, data wait: …%",
// with ", communication wait: …%" when `distributed`.
std::string epoch_line(const EpochReport& report, bool distributed);

using LogValue = std::variant<std::int64_t, double, std::string, std::vector<double>>;
using LogFields = std::vector<std::pair<std::string, LogValue>>;

// The step's kind and counters (Step::kind, Step::counters) as fields: {"step": "fused", ...}.
LogFields step_fields(const Step& step);

// The log's lines, rewritten whole (atomically) at every write so that a reader never sees half a
// line. An empty path keeps the lines without writing. A resumed run restores the lines its
// checkpoint carried (text(), kept in the training state) and goes on from there.
class JsonLinesLog {
 public:
  explicit JsonLinesLog(std::string path) : path_(std::move(path)) {}
  // The lines so far, as the file holds them, and back.
  std::string text() const;
  void restore(const std::string& text);
  // An epoch's figures: epoch, train_loss, val_loss, val_acc, epoch_s, images_per_s, train_s,
  // input_wait_s, communication_wait_s, gemm_s (the CPU's GEMMs; absent where they ran on a GPU),
  // step_losses (when recorded) and `extra`.
  void add_epoch(const EpochReport& report, const LogFields& extra = {});
  void add(const LogFields& fields);
  void write() const;
  std::size_t size() const { return lines_.size(); }

 private:
  std::string path_;
  std::vector<std::string> lines_;  // each a JSON object, without its newline
};

}  // namespace ember::train
