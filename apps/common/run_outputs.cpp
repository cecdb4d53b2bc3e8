// The log, the curves and the checkpoints of a training run, and the report of a stop.
#include "apps/common/run_outputs.h"

#include <cstdio>

#include "apps/common/stop_signals.h"
#include "distributed/dist.h"
#include "distributed/watchdog.h"

namespace ember::apps {

RunOutputs::RunOutputs(const RunOutputPaths& paths, train::Metadata model_metadata, train::Metadata settings)
    : log_(dist::is_main() ? paths.json_log : std::string()),
      curves_(dist::is_main() ? paths.plot : std::string(), paths.plot_title),
      checkpoints_(paths.save, paths.keep),
      command_(paths.command),
      context_{
          .model_metadata = std::move(model_metadata), .settings = std::move(settings), .history = {}, .loss_sum = {}} {
}

void RunOutputs::start(const train::ResumedRun* resumed) {
  if (resumed) {
    log_.restore(resumed->history);
    log_.write();
    curves_.restore(resumed->history);
  } else if (const std::string earlier = checkpoints_.earlier_run(); !earlier.empty() && dist::is_main()) {
    std::printf("note: --save %s holds an earlier run's checkpoints (%s): this run's first save replaces them\n",
                checkpoints_.path().c_str(), earlier.c_str());
  }
  update_exit_notice();
}

// The newest complete checkpoint and the command that continues on as many ranks, or that
// nothing was saved.
void RunOutputs::update_exit_notice() const {
  if (command_.empty() || !dist::is_initialized() || dist::world_size() < 2) return;
  dist::set_exit_notice(checkpoints_.enabled()
                            ? detail::concat(checkpoints_.resumable(), "; to continue: mpirun -np ", dist::world_size(),
                                             " --bind-to none ", resume_command(command_, checkpoints_.path()))
                            : "Nothing was saved (no --save).");
}

void RunOutputs::add_epoch(const train::EpochReport& report, const train::LogFields& extra, nn::Module& model,
                           const optim::Optimizer& optimizer) {
  // The log first: a kill during the save leaves this epoch in the log, and the resume rewrites
  // the log from the checkpoint's history, which lacks it.
  log_.add_epoch(report, extra);
  log_.write();
  context_.history = log_.text();
  context_.loss_sum = Tensor();
  checkpoints_.save({report.epoch + 1, 0}, model, optimizer, context_);
  update_exit_notice();
  curves_.add(report);
}

void RunOutputs::save_stop(const train::Position& at, nn::Module& model, const optim::Optimizer& optimizer,
                           const train::Step& step) {
  if (checkpoints_.last_saved() == at) return;  // stopped at an epoch's end: saved already
  context_.history = log_.text();
  context_.loss_sum = at.step > 0 ? step.loss_sum() : Tensor();
  checkpoints_.save(at, model, optimizer, context_);
}

void RunOutputs::add_line(const train::LogFields& fields) {
  log_.add(fields);
  log_.write();
}

train::SettingsCheck resume_settings_check(const train::LoadedCheckpoint& saved) {
  const auto step = saved.metadata.find("step");
  const bool mid_epoch = step != saved.metadata.end() && step->second != "0";
  train::SettingsCheck check{
      .must_match = {"model_kind", "hidden", "channels", "dataset", "data_sha256", "seed", "val_size", "shuffle"},
      .noted = {"world_size", "batch_size", "lr", "lr_decay", "momentum", "weight_decay", "threads", "precision"},
      .names = {{"model_kind", "--model"},
                {"hidden", "--hidden"},
                {"channels", "--channels"},
                {"seed", "--seed"},
                {"dataset", "--dataset"},
                {"data_sha256", "training data (--data) of SHA-256"},
                {"lr", "--lr"},
                {"val_size", "--val-size"},
                {"shuffle", "shuffle (--no-shuffle)"},
                {"batch_size", "--batch-size"},
                {"world_size", "ranks"},
                {"threads", "--threads"},
                {"precision", "--precision"}}};
  if (mid_epoch) check.must_match.insert(check.must_match.end(), {"batch_size", "world_size"});
  return check;
}

std::string resume_command(const std::vector<std::string>& command, const std::string& save) {
  std::string line;
  auto add = [&](const std::string& word) {
    const bool plain = word.find_first_of(" \t'\"$\\`*?;&|<>()") == std::string::npos && !word.empty();
    line += (line.empty() ? "" : " ") + (plain ? word : "'" + word + "'");
  };
  for (std::size_t i = 0; i < command.size(); ++i) {
    const std::string& word = command[i];
    if (word == "--resume" || word == "--init") {
      ++i;  // and its value
      continue;
    }
    if (word.rfind("--resume=", 0) == 0 || word.rfind("--init=", 0) == 0) continue;
    add(word);
  }
  add("--resume");
  add(save);
  return line;
}

int report_stop(const train::FitResult& where, const RunOutputs& outputs, const std::vector<std::string>& command,
                bool interactive) {
  if (interactive) std::printf("\n");  // off the progress bar's line
  std::fflush(stdout);
  const int signal = stop_signal();
  const train::RunCheckpoints& saved = outputs.checkpoints();
  std::fprintf(stderr, "stopped by %s at %s: %s\n", signal_name(signal),
               train::Position{where.epoch, where.step}.str().c_str(),
               saved.enabled() ? saved.resumable().c_str() : "nothing saved (no --save)");
  if (saved.enabled()) std::fprintf(stderr, "to continue: %s\n", resume_command(command, saved.path()).c_str());
  return 128 + signal;
}

}  // namespace ember::apps
