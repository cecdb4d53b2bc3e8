// Training checkpoints: the model file, the training state beside it, and the hash that ties them.
#include "train/checkpoint.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include "base/config.h"
#include "base/error.h"
#include "distributed/dist.h"
#include "train/data_parallel.h"

namespace ember::train {
namespace {

namespace fs = std::filesystem;

const std::string kOptimizerPrefix = "optimizer.";
const std::string kStateFormat = "ember-training-state";
const std::string kSuffix = ".safetensors";

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw Error("SHA-256 failed (OpenSSL's EVP_Digest)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < length; ++i) out += {hex[digest[i] >> 4], hex[digest[i] & 15]};
  return out;
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(detail::concat(path, ": cannot open for reading: ", std::strerror(errno)));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool is_state_file(const Checkpoint& file) {
  const auto it = file.metadata.find("format");
  return it != file.metadata.end() && it->second == kStateFormat;
}

// The optimizer's part of a single-file checkpoint (tensors and metadata under "optimizer.").
Checkpoint optimizer_part(const Checkpoint& file) {
  Checkpoint opt;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind(kOptimizerPrefix, 0) == 0) opt.tensors.emplace_back(name.substr(kOptimizerPrefix.size()), t);
  for (const auto& [key, value] : file.metadata)
    if (key.rfind(kOptimizerPrefix, 0) == 0) opt.metadata[key.substr(kOptimizerPrefix.size())] = value;
  return opt;
}

StateDict model_part(const Checkpoint& file) {
  StateDict model;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind(kOptimizerPrefix, 0) != 0) model.emplace_back(name, t);
  return model;
}

void restore(const std::string& files, nn::Module& model, const StateDict& weights, optim::Optimizer& optimizer,
             const Checkpoint& opt) {
  try {
    model.load_state_dict(weights);
    optimizer.load_state_dict(opt);
  } catch (const ValueError& e) {
    throw ValueError(detail::concat(files, ": ", e.what()));
  }
}

}  // namespace

std::string state_path_for(const std::string& model_path) {
  const bool has_suffix = model_path.size() > kSuffix.size() &&
                          model_path.compare(model_path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  return (has_suffix ? model_path.substr(0, model_path.size() - kSuffix.size()) : model_path) + ".state" + kSuffix;
}

std::string file_sha256(const std::string& path) { return sha256_hex(read_bytes(path)); }

EncodedCheckpoint encode_checkpoint(const std::string& model_path, const nn::Module& model,
                                    const optim::Optimizer& optimizer, const Metadata& model_metadata,
                                    const Metadata& state_metadata) {
  Metadata model_meta = model_metadata;
  model_meta["format"] = "pt";  // the safetensors convention for PyTorch-layout tensors
  model_meta["ember_version"] = EMBER_VERSION;
  model_meta["model"] = model.repr();
  EncodedCheckpoint out{encode_safetensors(model.state_dict(), model_meta), {}};

  const Checkpoint opt = optimizer.state_dict();
  Metadata state_meta = state_metadata;
  for (const auto& [key, value] : opt.metadata) state_meta[kOptimizerPrefix + key] = value;
  state_meta["format"] = kStateFormat;
  state_meta["ember_version"] = EMBER_VERSION;
  state_meta["model_file"] = fs::path(model_path).filename().string();
  state_meta["model_sha256"] = sha256_hex(out.model);
  StateDict state_tensors;
  for (const auto& [name, t] : opt.tensors) state_tensors.emplace_back(kOptimizerPrefix + name, t);
  out.state = encode_safetensors(state_tensors, state_meta);
  return out;
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const Metadata& model_metadata, const Metadata& state_metadata) {
  const EncodedCheckpoint encoded = encode_checkpoint(path, model, optimizer, model_metadata, state_metadata);
  write_file_atomically(path, encoded.model);
  write_file_atomically(state_path_for(path), encoded.state);  // last: it records the model's hash
}

std::string pair_problem(const std::string& state_path) {
  std::error_code ec;
  if (!fs::exists(state_path, ec)) return "its training state " + state_path + " is missing";
  Checkpoint state;
  try {
    state = load_safetensors(state_path, Device::cpu());
  } catch (const Error& e) {
    return detail::concat("its training state is damaged: ", e.what());
  }
  const auto name = state.metadata.find("model_file");
  if (!is_state_file(state) || name == state.metadata.end()) return state_path + " is not a training state of ember";
  const std::string model_path = (fs::path(state_path).parent_path() / name->second).string();
  if (!fs::exists(model_path, ec)) return "its model file " + model_path + " is missing";
  std::string actual;
  try {
    actual = file_sha256(model_path);
  } catch (const Error& e) {
    return e.what();
  }
  if (actual != state.metadata["model_sha256"])
    return "its model file " + model_path + " is not the one its state was saved with (SHA-256 differs)";
  return {};
}

LoadedCheckpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                 const std::function<void(const LoadedCheckpoint&)>& before_restoring) {
  Checkpoint first = load_safetensors(path, Device::cpu());
  LoadedCheckpoint loaded;
  Checkpoint model_file, state_file;
  if (is_state_file(first)) {
    const auto name = first.metadata.find("model_file");
    if (name == first.metadata.end())
      throw ValueError(detail::concat(path, ": a training state that does not name its model file"));
    loaded.state_path = path;
    loaded.model_path = (fs::path(path).parent_path() / name->second).string();
    state_file = std::move(first);
    model_file = load_safetensors(loaded.model_path, Device::cpu());
  } else {
    loaded.model_path = path;
    model_file = std::move(first);
    const Checkpoint single = optimizer_part(model_file);
    if (!single.metadata.empty()) {  // ember 0.1's single file: everything in one
      loaded.metadata = model_file.metadata;
      if (before_restoring) before_restoring(loaded);
      restore(path, model, model_part(model_file), optimizer, single);
      return loaded;
    }
    loaded.state_path = state_path_for(path);
    std::error_code ec;
    if (!fs::exists(loaded.state_path, ec))
      throw ValueError(detail::concat(path, ": no training state beside it (looked for ", loaded.state_path,
                                      "); to start a new run from these weights, use --init instead of --resume"));
    state_file = load_safetensors(loaded.state_path, Device::cpu());
    if (!is_state_file(state_file))
      throw ValueError(detail::concat(loaded.state_path, ": not a training state (its metadata has no format \"",
                                      kStateFormat, "\")"));
  }
  const std::string recorded = state_file.metadata.count("model_sha256") ? state_file.metadata["model_sha256"] : "";
  const std::string actual = file_sha256(loaded.model_path);
  if (recorded != actual)
    throw ValueError(detail::concat(
        loaded.model_path, " and ", loaded.state_path, " do not belong together: the training state was saved with a ",
        "model file of SHA-256 ", recorded.substr(0, 16), "…, but ", loaded.model_path, " has ", actual.substr(0, 16),
        "… (a state from another run, or a save interrupted between the two files). Resume from a matching pair, or "
        "start from the weights alone with --init ",
        loaded.model_path));
  loaded.metadata = model_file.metadata;
  for (const auto& [key, value] : state_file.metadata) loaded.metadata[key] = value;
  if (before_restoring) before_restoring(loaded);
  restore(loaded.model_path + " and " + loaded.state_path, model, model_part(model_file), optimizer,
          optimizer_part(state_file));
  return loaded;
}

std::vector<std::uint64_t*> random_offsets(nn::Module& model) {
  std::vector<std::uint64_t*> out;
  for (const auto& [name, child] : model.named_children()) {
    if (std::uint64_t* offset = child->random_offset()) out.push_back(offset);
    for (std::uint64_t* inner : random_offsets(*child)) out.push_back(inner);
  }
  return out;
}

Metadata training_position_metadata(nn::Module& model, int epochs_done, std::int64_t steps_done) {
  std::string offsets;
  for (const std::uint64_t* offset : random_offsets(model))
    offsets += (offsets.empty() ? "" : ",") + std::to_string(*offset);
  return {{"epoch", std::to_string(epochs_done)}, {"step", std::to_string(steps_done)}, {"dropout_offsets", offsets}};
}

void save_training_checkpoint(const std::string& path, nn::Module& model, const optim::Optimizer& optimizer,
                              int epochs_done, Metadata model_metadata, Metadata state_metadata) {
  for (const auto& [key, value] : training_position_metadata(model, epochs_done, 0)) state_metadata[key] = value;
  model_metadata["epoch"] = std::to_string(epochs_done);
  save_checkpoint(path, model, optimizer, model_metadata, state_metadata);
}

ResumedTraining resume_training_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                           const std::function<void(const LoadedCheckpoint&)>& before_restoring) {
  ResumedTraining resumed{load_checkpoint(path, model, optimizer, before_restoring)};
  Metadata& meta = resumed.checkpoint.metadata;
  resumed.start_epoch = meta.count("epoch") ? std::atoi(meta["epoch"].c_str()) : 0;
  resumed.start_step = meta.count("step") ? std::atoll(meta["step"].c_str()) : 0;
  if (meta.count("dropout_offsets")) {
    std::stringstream in(meta["dropout_offsets"]);
    std::string item;
    for (std::uint64_t* offset : random_offsets(model))
      if (std::getline(in, item, ',')) *offset = std::stoull(item);
  }
  // A data-parallel run's checkpoint holds rank 0's positions: each rank moves on to its own.
  if (dist::is_initialized() && dist::world_size() > 1) separate_dropout_streams(model);
  return resumed;
}

std::vector<std::string> compare_settings(const LoadedCheckpoint& saved, const Metadata& now,
                                          const SettingsCheck& check) {
  auto differs = [&](const std::string& key) {
    const auto then = saved.metadata.find(key);
    const auto here = now.find(key);
    return then != saved.metadata.end() && here != now.end() && then->second != here->second;
  };
  auto says = [&](const std::string& key) {
    auto cut = [](const std::string& v) { return v.size() > 24 ? v.substr(0, 16) + "…" : v; };
    const auto name = check.names.find(key);
    return detail::concat("the checkpoint was saved with ", name != check.names.end() ? name->second : key, " ",
                          cut(saved.metadata.at(key)), ", this run has ", cut(now.at(key)));
  };
  for (const std::string& key : check.must_match)
    if (differs(key))
      throw ValueError(detail::concat(saved.model_path, ": ", says(key),
                                      "; a resumed run must keep it (or start anew without --resume)"));
  std::vector<std::string> notes;
  for (const std::string& key : check.noted)
    if (differs(key)) notes.push_back(says(key));
  return notes;
}

}  // namespace ember::train
