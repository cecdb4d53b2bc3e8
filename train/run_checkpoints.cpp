// A training program's checkpoints: saves, the history they carry, and the resume.
#include "train/run_checkpoints.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <vector>

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

bool several_ranks() { return dist::is_initialized() && dist::world_size() > 1; }

std::string bytes_sha256(const std::string& bytes) {
  return sha256_of(1, [&](std::size_t) { return std::string_view(bytes); });
}

// A whole file's bytes; empty when it cannot be read.
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Metadata as one string and back, to send it from rank 0 (length-prefixed keys and values).
std::string encode(const Metadata& meta) {
  std::string out;
  for (const auto& [key, value] : meta) out += detail::concat(key.size(), ':', key, value.size(), ':', value);
  return out;
}
Metadata decode(const std::string& text) {
  Metadata meta;
  std::size_t at = 0;
  const auto next = [&] {
    const std::size_t colon = text.find(':', at);
    const std::size_t size = std::stoull(text.substr(at, colon - at));
    std::string item = text.substr(colon + 1, size);
    at = colon + 1 + size;
    return item;
  };
  while (at < text.size()) {
    std::string key = next();
    meta[std::move(key)] = next();
  }
  return meta;
}

// Whether this rank writes the set (Note [checkpoints without a shared disk]): rank 0, and on
// each other host that does not see rank 0's folder, the host's first rank. Rank 0 has locked the
// set already; the others compare its lock file's text (its host, process and start) with what
// they find under the same path.
bool writes_here(const std::string& path, const std::string& rank0_lock_text) {
  if (dist::is_main()) return true;
  return dist::local_rank() == 0 && file_bytes(path + ".lock") != rank0_lock_text;
}

}  // namespace

RunCheckpoints::RunCheckpoints(std::string path, int keep) : path_(std::move(path)) {
  if (path_.empty()) return;
  set_ = std::make_unique<CheckpointSet>(path_, keep);
  if (dist::is_main()) lock_ = std::make_unique<SaveLock>(path_);
  if (several_ranks()) {
    const std::string rank0_lock = dist::broadcast_string(dist::is_main() ? file_bytes(path_ + ".lock") : "");
    writes_ = writes_here(path_, rank0_lock);
    if (writes_ && !lock_) lock_ = std::make_unique<SaveLock>(path_);
    hosts_write_ = !dist::all_agree(!writes_ || dist::is_main());  // a host other than rank 0's writes too
  }
  if (!writes_) return;
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
  Metadata model_meta = context.model_metadata;
  model_meta["epoch"] = std::to_string(at.epoch);
  Metadata state_meta = context.settings;
  for (const auto& [key, value] : training_position_metadata(model, at.epoch, at.step)) state_meta[key] = value;
  state_meta["history"] = context.history;
  if (at.step > 0 && context.loss_sum.defined()) state_meta["loss_sum"] = exact_text(context.loss_sum);
  if (hosts_write_) {  // rank 0's metadata (its Dropout positions, its log) on every host's copy
    model_meta = decode(dist::broadcast_string(encode(model_meta)));
    state_meta = decode(dist::broadcast_string(encode(state_meta)));
  }
  if (writes_) {
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

namespace {

// A checkpoint's files copied into a private folder, removed with the object.
struct PrivateCopy {
  std::string folder;
  PrivateCopy() = default;
  PrivateCopy(const PrivateCopy&) = delete;
  PrivateCopy& operator=(const PrivateCopy&) = delete;
  ~PrivateCopy() {
    std::error_code ec;
    if (!folder.empty()) fs::remove_all(folder, ec);
  }
};

// Where several ranks resume (Note [checkpoints without a shared disk]): rank 0's checkpoint of
// the set, found on its disk; every rank that does not hold the same bytes under the same paths
// receives them and loads a private copy. Returns the state file this rank loads (`found` and
// `file` are rank 0's afterwards).
std::string rank0_checkpoint(std::optional<FoundCheckpoint>& found, std::string& file, PrivateCopy& copy) {
  // Which files: rank 0's state file and its model file, and a digest of both.
  std::string listing;
  if (dist::is_main() && found) {
    const std::string model = (fs::path(file).parent_path() / model_file_of(file)).string();
    listing = detail::concat(file, '\n', model, '\n', bytes_sha256(file_bytes(file) + file_bytes(model)));
  }
  listing = dist::broadcast_string(listing);
  if (listing.empty()) return file;  // not a set's checkpoint: every rank reads `path` itself
  std::istringstream lines(listing);
  std::string state, model, digest;
  std::getline(lines, state);
  std::getline(lines, model);
  std::getline(lines, digest);
  file = state;
  const bool holds = dist::is_main() || bytes_sha256(file_bytes(state) + file_bytes(model)) == digest;
  if (dist::all_agree(holds)) return state;
  const std::string state_bytes = dist::broadcast_string(dist::is_main() ? file_bytes(state) : "");
  const std::string model_bytes = dist::broadcast_string(dist::is_main() ? file_bytes(model) : "");
  if (holds) return state;
  std::string folder = (fs::temp_directory_path() / "ember-resume-XXXXXX").string();
  if (!::mkdtemp(folder.data()))
    throw IoError(detail::concat(folder, ": cannot make a folder: ", std::strerror(errno)));
  copy.folder = folder;
  const auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string at = (fs::path(folder) / fs::path(name).filename()).string();
    std::ofstream out(at, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw IoError(detail::concat(at, ": cannot write rank 0's checkpoint here"));
    return at;
  };
  write(model, model_bytes);
  return write(state, state_bytes);
}

}  // namespace

ResumedRun resume_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                      const std::function<void(const LoadedCheckpoint&)>& before_restoring) {
  ResumedRun out;
  std::optional<FoundCheckpoint> found;
  if (!several_ranks() || dist::is_main()) found = find_checkpoint(path);
  std::string file = found ? found->state_path : path;
  PrivateCopy copy;
  const std::string load = several_ranks() ? rank0_checkpoint(found, file, copy) : file;
  ResumedTraining resumed = resume_training_checkpoint(load, model, optimizer, before_restoring);
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
  std::vector<Tensor> host;
  for (const Tensor& t : tensors) host.push_back(t.cpu());
  return sha256_of(host.size(), [&](std::size_t i) {
    return std::string_view(static_cast<const char*>(host[i].raw_bytes()), host[i].nbytes());
  });
}

std::string sha256_of(std::size_t parts, const std::function<std::string_view(std::size_t)>& part) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("SHA-256 failed (OpenSSL)");
  for (std::size_t i = 0; i < parts; ++i) {
    const std::string_view bytes = part(i);
    if (!bytes.empty() && EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1)
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
