// What a training run leaves behind, kept together: the JSON-lines log, the SVG curves and the
// checkpoints, each epoch written in that order, a resumed run's history restored into all three,
// and the report of a stop (what was saved, the command that continues).
#pragma once

#include <string>
#include <vector>

#include "apps/common/plot.h"
#include "train/log.h"
#include "train/run_checkpoints.h"

namespace ember::apps {

struct RunOutputPaths {
  std::string json_log, plot, plot_title, save;
  int keep = 2;
  // The command line, for a data-parallel run's exit notice (Note [lost ranks]).
  std::vector<std::string> command;
};

class RunOutputs {
 public:
  // Rank 0 of dist:: alone writes the log and the plot; the checkpoints lock their set at once.
  RunOutputs(const RunOutputPaths& paths, train::Metadata model_metadata, train::Metadata settings);

  // Before the first epoch. A resumed run's log and curves start with the history its checkpoint
  // carried; a new run is told when it is about to replace an earlier run's checkpoints.
  void start(const train::ResumedRun* resumed);
  // After an epoch: its log line (with `extra`), then its checkpoint, then the curves.
  void add_epoch(const train::EpochReport& report, const train::LogFields& extra, nn::Module& model,
                 const optim::Optimizer& optimizer);
  // A checkpoint where a stop left the run (unless one was saved there); `step` for its loss sum.
  void save_stop(const train::Position& at, nn::Module& model, const optim::Optimizer& optimizer,
                 const train::Step& step);
  void add_line(const train::LogFields& fields);  // e.g. the test result

  const train::RunCheckpoints& checkpoints() const { return checkpoints_; }

 private:
  void update_exit_notice() const;  // after start() and every save, in a data-parallel run
  train::JsonLinesLog log_;
  TrainingCurves curves_;
  train::RunCheckpoints checkpoints_;
  std::vector<std::string> command_;
  train::SaveContext context_;
};

// What a resume of mnist_train from `saved` must keep (its model, data, split, order and seed; from
// a checkpoint taken mid-epoch also the batches and the ranks sharing them) and what it may change
// with a note, by the settings' keys, each named as its flag.
train::SettingsCheck resume_settings_check(const train::LoadedCheckpoint& saved);

// The command line that continues a run: `command` as typed, its --resume and --init left out,
// then --resume SAVE.
std::string resume_command(const std::vector<std::string>& command, const std::string& save);

// After a stop signal: off the progress bar's line, what was saved and the command that continues,
// on stderr. Returns the exit code, 128 + the signal.
int report_stop(const train::FitResult& where, const RunOutputs& outputs, const std::vector<std::string>& command,
                bool interactive);

}  // namespace ember::apps
