// Checked, counted file operations and the fault hook (Note [file fault hook]).
#include "core/io/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "base/env.h"

namespace ember::io {
namespace {

struct Fault {
  std::int64_t at = 0;  // 0: none
  bool enospc = false;  // else a kill
};

const Fault& fault() {
  static const Fault parsed = [] {
    Fault f;
    const std::optional<std::string> spec = env_value("EMBER_FAULT_AT");
    if (!spec) return f;
    const std::size_t colon = spec->find(':');
    f.at = std::atoll(spec->substr(0, colon).c_str());
    f.enospc = colon != std::string::npos && spec->substr(colon + 1) == "enospc";
    return f;
  }();
  return parsed;
}

std::atomic<std::int64_t> operations{0};

// Counts one operation and traces it; true when the fault hook fails it with ENOSPC (a kill does
// not return). `torn_write` runs before a kill at a write, so that half its bytes land first.
template <class TornWrite>
bool begin(const char* op, const std::string& path, TornWrite&& torn_write) {
  const std::int64_t n = ++operations;
  static const std::optional<std::string> trace = env_value("EMBER_FILE_TRACE");
  if (trace) {
    const std::string line = std::to_string(n) + " " + op + " " + path + "\n";
    const int fd = ::open(trace->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t ignored = ::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (n != fault().at) return false;
  torn_write();
  if (!fault().enospc) ::kill(::getpid(), SIGKILL);
  errno = ENOSPC;
  return true;
}
bool begin(const char* op, const std::string& path) {
  return begin(op, path, [] {});
}

[[noreturn]] void fail(const std::string& path, const char* what) { throw FileError(path, what, errno); }

}  // namespace

FileError::FileError(const std::string& path, std::string operation_, int code_)
    : IoError(detail::concat(path, ": cannot write (", operation_, ": ", std::strerror(code_), ")")),
      operation(std::move(operation_)),
      code(code_) {}

bool FileError::disk_full() const { return code == ENOSPC || code == EDQUOT || code == EFBIG; }

int create_file(const std::string& path) {
  if (begin("create", path)) fail(path, "create");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "create");
  return fd;
}

void write_all(int fd, std::span<const std::uint8_t> bytes, const std::string& path) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const std::size_t half = (bytes.size() - written) / 2;
    auto torn = [&] { [[maybe_unused]] const ssize_t ignored = ::write(fd, bytes.data() + written, half); };
    if (begin("write", path, torn)) fail(path, "write");
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "write");
    written += static_cast<std::size_t>(n);
  }
}

void sync_file(int fd, const std::string& path) {
  if (begin("fsync", path) || ::fsync(fd) != 0) fail(path, "fsync");
}

void close_file(int fd, const std::string& path) {
  if (::close(fd) != 0) fail(path, "close");
}

void rename_file(const std::string& from, const std::string& to) {
  if (begin("rename", to) || ::rename(from.c_str(), to.c_str()) != 0) fail(to, "rename");
}

bool link_file(const std::string& existing, const std::string& new_name) {
  if (begin("link", new_name)) fail(new_name, "link");
  if (::link(existing.c_str(), new_name.c_str()) == 0) return true;
  if (errno == EPERM || errno == EOPNOTSUPP || errno == EXDEV) return false;
  fail(new_name, "link");
}

void remove_file(const std::string& path) {
  if (begin("unlink", path) || (::unlink(path.c_str()) != 0 && errno != ENOENT)) fail(path, "unlink");
}

void sync_folder(const std::string& folder) {
  if (begin("fsync-folder", folder)) fail(folder, "fsync of the folder");
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(folder, "opening the folder to fsync it");
  const int result = ::fsync(fd);
  const int code = errno;
  ::close(fd);
  errno = code;
  if (result != 0 && code != EINVAL) fail(folder, "fsync of the folder");
}

std::string temporary_prefix(const std::string& path) {
  // Built by appending: GCC 12 warns falsely (-Wrestrict) about chained string concatenation.
  std::string prefix(".");
  prefix.append(std::filesystem::path(path).filename().string()).append(".tmp.");
  return prefix;
}

void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = (folder / (temporary_prefix(path) + std::to_string(::getpid()))).string();
  const int fd = create_file(tmp);
  try {
    try {
      write_all(fd, bytes, tmp);
      sync_file(fd, tmp);
    } catch (...) {
      ::close(fd);
      throw;
    }
    close_file(fd, tmp);
    rename_file(tmp, path);
  } catch (const FileError& e) {
    ::unlink(tmp.c_str());  // not counted: cleaning up after a failure is no new fault point
    throw FileError(path, e.operation, e.code);
  }
  sync_folder(folder.string());  // the rename is durable only once the folder's entry is on disk
}

std::int64_t file_operations() { return operations.load(); }

}  // namespace ember::io
