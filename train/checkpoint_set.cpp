// The checkpoint set (Note [checkpoint set]).
#include "train/checkpoint_set.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>

#include "core/io/durable_file.h"

namespace ember::train {
namespace {

namespace fs = std::filesystem;

const std::string kSuffix = ".safetensors", kStateSuffix = ".state.safetensors";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string folder_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// "m.safetensors" → "m"; a name without the suffix is its own stem.
std::string stem_of(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  return ends_with(name, kSuffix) ? name.substr(0, name.size() - kSuffix.size()) : name;
}

std::string regex_escape(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

// The numbered file names of the stem: "STEM.epoch-E[.step-S][.state].safetensors".
struct Numbered {
  Position at;
  bool state = false;
};
std::optional<Numbered> parse_numbered(const std::string& stem, const std::string& name) {
  const std::regex pattern("^" + regex_escape(stem) + R"(\.epoch-(\d+)(\.step-(\d+))?(\.state)?\.safetensors$)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  Numbered n;
  n.at.epoch = std::stoi(m[1].str());
  n.at.step = m[3].matched ? std::stoll(m[3].str()) : 0;
  n.state = m[4].matched;
  return n;
}

std::string numbered_name(const std::string& stem, const Position& at) {
  std::string name = stem + ".epoch-" + std::to_string(at.epoch);
  if (at.step > 0) name += ".step-" + std::to_string(at.step);
  return name + kSuffix;
}

// Every numbered file of the stem in `folder`, by position, newest first.
std::vector<std::pair<Position, std::vector<Numbered>>> scan(const std::string& folder, const std::string& stem) {
  std::map<Position, std::vector<Numbered>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (auto n = parse_numbered(stem, entry.path().filename().string())) found[n->at].push_back(*n);
  return {found.rbegin(), found.rend()};
}

std::string holder_description() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return detail::concat("process ", ::getpid(), " on host ", host, ", since ", when);
}

}  // namespace

std::string Position::str() const {
  return step > 0 ? detail::concat("epoch ", epoch, ", step ", step) : detail::concat("epoch ", epoch);
}

SaveLock::SaveLock(const std::string& path) {
  const std::string lock_path = path + ".lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw IoError(detail::concat(lock_path, ": cannot create the lock file of ", path, ": ", std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    char text[512] = {};
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (code == EWOULDBLOCK)
      throw ValueError(detail::concat(path, " is being written by another run (", lock_path, " is locked by ",
                                      n > 0 ? std::string(text, static_cast<std::size_t>(n)) : "a process", "); ",
                                      "wait for it to end, or save elsewhere"));
    throw IoError(detail::concat(lock_path, ": cannot lock: ", std::strerror(code)));
  }
  // Who holds it, for the message a second run prints: best effort, the flock is the lock.
  const std::string holder = holder_description();
  const bool described = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, holder.data(), holder.size(), 0) > 0;
  static_cast<void>(described);
}

SaveLock::~SaveLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock; the file stays (removing it would race)
}

int remove_stale_temporaries(const std::string& path) {
  const std::string prefix = io::temporary_prefix(path);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_of(path), ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      io::remove_file(entry.path().string());
      ++removed;
    }
  return removed;
}

CheckpointSet::CheckpointSet(std::string path, int keep)
    : path_(std::move(path)), folder_(folder_of(path_)), stem_(stem_of(path_)), keep_(std::max(keep, 1)) {}

std::string CheckpointSet::model_path(const Position& at) const {
  return (fs::path(folder_) / numbered_name(stem_, at)).string();
}

void CheckpointSet::save(const Position& at, const nn::Module& model, const optim::Optimizer& optimizer,
                         const Metadata& model_metadata, const Metadata& state_metadata) {
  const std::string model_file = model_path(at);
  const EncodedCheckpoint encoded = encode_checkpoint(model_file, model, optimizer, model_metadata, state_metadata);
  io::write_file_atomically(model_file, encoded.model);
  io::write_file_atomically(state_path_for(model_file), encoded.state);  // the commit record

  publish(model_file);

  // Pruning: keep the newest `keep` complete checkpoints at or before `at`; the rest go, newer
  // ones (an abandoned line) included, each state before its model.
  int kept = 0;
  bool removed = false;
  for (const auto& [position, files] : scan(folder_, stem_)) {
    const bool complete = position <= at && pair_problem(state_path_for(model_path(position))).empty();
    if (complete && kept < keep_) {
      ++kept;
      continue;
    }
    for (bool state : {true, false})
      for (const Numbered& n : files)
        if (n.state == state) {
          const std::string file = model_path(position);
          io::remove_file(state ? state_path_for(file) : file);
          removed = true;
        }
  }
  if (removed) io::sync_folder(folder_);
}

// The stable name: a link to the model under a temporary name, renamed over the old one.
void CheckpointSet::publish(const std::string& model_file) const {
  const std::string tmp = (fs::path(folder_) / (io::temporary_prefix(path_) + std::to_string(::getpid()))).string();
  if (io::link_file(model_file, tmp)) {
    io::rename_file(tmp, path_);
    io::sync_folder(folder_);
  } else {  // no hard links on this file system: a copy
    std::ifstream in(model_file, std::ios::binary);
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    io::write_file_atomically(path_, bytes);
  }
}

bool CheckpointSet::republish_newest() const {
  const std::optional<FoundCheckpoint> found = newest();
  if (!found) return false;
  const std::string model_file = model_path(found->at);
  std::error_code ec;
  if (fs::equivalent(model_file, path_, ec) || (fs::exists(path_, ec) && file_sha256(path_) == file_sha256(model_file)))
    return false;
  publish(model_file);
  return true;
}

std::vector<Position> CheckpointSet::positions() const {
  std::vector<Position> out;
  for (const auto& [position, files] : scan(folder_, stem_)) out.push_back(position);
  return out;
}

std::optional<FoundCheckpoint> CheckpointSet::newest() const {
  FoundCheckpoint found;
  for (const auto& [position, files] : scan(folder_, stem_)) {
    const std::string state = state_path_for(model_path(position));
    const std::string problem = pair_problem(state);
    if (problem.empty()) {
      found.state_path = state;
      found.at = position;
      return found;
    }
    found.passed_over.push_back(detail::concat(fs::path(model_path(position)).filename().string(), " (", problem, ")"));
  }
  if (found.passed_over.empty()) return std::nullopt;
  std::string list;
  for (const std::string& item : found.passed_over) list += (list.empty() ? "" : "; ") + item;
  throw IncompleteSet(detail::concat(path_, ": no checkpoint of this set is complete: ", list,
                                     "; a save was interrupted before any finished, so there is nothing to resume: "
                                     "start the run anew, without --resume (its first save removes these)"));
}

int CheckpointSet::remove_stale_temporaries() const {
  int removed = train::remove_stale_temporaries(path_);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::string name = entry.path().filename().string();
    // ".STEM.epoch-….tmp.…": the numbered files' temporaries (the stable name's are counted above).
    if (name.rfind("." + stem_ + ".epoch-", 0) == 0 && name.find(".tmp.") != std::string::npos) {
      io::remove_file(entry.path().string());
      ++removed;
    }
  }
  return removed;
}

std::optional<FoundCheckpoint> find_checkpoint(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  // A numbered file names one checkpoint exactly: "m.epoch-3.safetensors" or its state.
  static const std::regex numbered(R"(^(.*)\.epoch-\d+(\.step-\d+)?(\.state)?\.safetensors$)");
  std::smatch m;
  if (std::regex_match(name, m, numbered)) {
    const auto n = parse_numbered(m[1].str(), name);
    const std::string model = (fs::path(folder_of(path)) / numbered_name(m[1].str(), n->at)).string();
    const std::string problem = pair_problem(state_path_for(model));
    if (!problem.empty()) throw ValueError(detail::concat(path, ": not a complete checkpoint: ", problem));
    return FoundCheckpoint{state_path_for(model), n->at, {}};
  }
  const std::string stable =
      ends_with(name, kStateSuffix) ? path.substr(0, path.size() - kStateSuffix.size()) + kSuffix : path;
  return CheckpointSet(stable, 1).newest();
}

}  // namespace ember::train
