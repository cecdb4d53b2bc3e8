// A training program's checkpoints: saves, the history they carry, and the resume.
#include "train/run_checkpoints.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "core/io/durable_file.h"
#include "distributed/dist.h"

namespace ember::train {
namespace {

namespace fs = std::filesystem;

// An f32 scalar as text that reads back to the same bits ("%a": hexadecimal floating point).
std::string exact_text(const Tensor& scalar) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", static_cast<double>(scalar.cpu().item<float>()));
  return text;
}

// "m.epoch-3.state.safetensors" → "m.epoch-3.safetensors", the name a user knows it by.
std::string model_file_of(const std::string& state_path) {
  const std::string name = fs::path(state_path).filename().string(), state = ".state.safetensors";
  return name.size() > state.size() ? name.substr(0, name.size() - state.size()) + ".safetensors" : name;
}

}  // namespace

RunCheckpoints::RunCheckpoints(std::string path, int keep) : path_(std::move(path)) {
  if (path_.empty()) return;
  set_ = std::make_unique<CheckpointSet>(path_, keep);
  if (!dist::is_main()) return;
  lock_ = std::make_unique<SaveLock>(path_);
  // Under the lock every temporary file of the set is a killed save's: stale.
  if (const int removed = set_->remove_stale_temporaries())
    std::printf("note: --save %s: removed %d temporary file%s left by an interrupted save\n", path_.c_str(), removed,
                removed == 1 ? "" : "s");
  try {
    if (set_->republish_newest())
      std::printf("note: --save %s: now names the newest complete checkpoint (a save had stopped before it)\n",
                  path_.c_str());
  } catch (const IncompleteSet&) {  // no complete checkpoint: this run's first save makes one
  }
}

void RunCheckpoints::save(const Position& at, nn::Module& model, const optim::Optimizer& optimizer,
                          const SaveContext& context) {
  if (path_.empty()) return;
  if (dist::is_main()) {
    Metadata model_meta = context.model_metadata;
    model_meta["epoch"] = std::to_string(at.epoch);
    Metadata state_meta = context.settings;
    for (const auto& [key, value] : training_position_metadata(model, at.epoch, at.step)) state_meta[key] = value;
    state_meta["history"] = context.history;
    if (at.step > 0 && context.loss_sum.defined()) state_meta["loss_sum"] = exact_text(context.loss_sum);
    try {
      set_->save(at, model, optimizer, model_meta, state_meta);
    } catch (const io::FileError& e) {
      const char* remedy = e.code == EFBIG ? ". A file-size limit stopped it: raise `ulimit -f`"
                           : e.disk_full() ? ". Free some space (or keep fewer checkpoints with --keep)"
                                           : "";
      throw Error(detail::concat("--save: saving ", at.str(), " failed: ", e.what(), "; ", resumable(), remedy));
    }
  }
  last_saved_ = at;
}

std::string RunCheckpoints::resumable() const {
  if (path_.empty()) return "nothing was saved (no --save)";
  try {
    if (const auto newest = set_->newest())
      return detail::concat("the newest complete checkpoint is ", model_file_of(newest->state_path), " (",
                            newest->at.str(), "): resume with --resume ", path_);
  } catch (const IncompleteSet&) {
    return detail::concat("no checkpoint of ", path_, " is complete yet (a save was interrupted before any finished)");
  }
  return detail::concat("no checkpoint of ", path_, " was saved yet");
}

std::string RunCheckpoints::earlier_run() const {
  if (!set_ || last_saved_) return {};
  std::string list;
  for (const Position& p : set_->positions()) list = p.str() + (list.empty() ? "" : ", ") + list;
  return list;
}

ResumedRun resume_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                      const std::function<void(const LoadedCheckpoint&)>& before_restoring) {
  ResumedRun out;
  const std::optional<FoundCheckpoint> found = find_checkpoint(path);
  const std::string file = found ? found->state_path : path;
  ResumedTraining resumed = resume_training_checkpoint(file, model, optimizer, before_restoring);
  out.checkpoint = std::move(resumed.checkpoint);
  out.at = {resumed.start_epoch, resumed.start_step};
  Metadata& meta = out.checkpoint.metadata;
  if (meta.count("history")) out.history = meta["history"];
  if (out.at.step > 0 && meta.count("loss_sum"))
    out.loss_sum = full({}, static_cast<float>(std::strtod(meta["loss_sum"].c_str(), nullptr)));
  out.report = detail::concat("resuming from ", found ? model_file_of(file) : path, " (", out.at.str(),
                              out.at.step > 0 ? ", stopped mid-epoch" : "", ")");
  if (found)
    for (const std::string& newer : found->passed_over) out.report += "; passed over the newer " + newer;
  return out;
}

std::string tensors_sha256(std::span<const Tensor> tensors) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("SHA-256 failed (OpenSSL)");
  for (const Tensor& t : tensors) {
    const Tensor host = t.cpu();
    if (host.nbytes() && EVP_DigestUpdate(ctx.get(), host.raw_bytes(), host.nbytes()) != 1)
      throw Error("SHA-256 failed (OpenSSL)");
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) throw Error("SHA-256 failed (OpenSSL)");
  static const char* hex = "0123456789abcdef";
  std::string text;
  for (unsigned i = 0; i < length; ++i) text += {hex[digest[i] >> 4], hex[digest[i] & 15]};
  return text;
}

}  // namespace ember::train
