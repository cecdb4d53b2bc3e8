// The file operations that a save makes, each one checked, counted and traceable: creating and
// writing a temporary file, fsync, rename, hard link, unlink, and the fsync of a folder. Every
// file ember writes durably (checkpoints, logs, plots) goes through here, so that one fault hook
// can stop a run at any of them.
//
// Note [file fault hook]
//   EMBER_FAULT_AT=N         the N-th file operation of the process (1-based, in the order below)
//                            kills the process with SIGKILL before it happens, as `kill -9` would;
//                            a write is torn first: half its bytes land, then the process dies.
//   EMBER_FAULT_AT=N:enospc  that operation fails with ENOSPC instead (a write after half its
//                            bytes, as a full disk does), and the run goes on to handle it.
//   EMBER_FILE_TRACE=PATH    each operation appends "N OP PATH" to PATH, so that a test can count
//                            a run's operations and check their order (tests/apps/checkpoint_faults.sh).
//   The operations counted: create, write, fsync, rename, link, unlink, fsync-folder. Reads are not
//   faults worth injecting (a save never reads), and the trace's own writes are not counted.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/error.h"

namespace ember::io {

// A file operation that failed: the message names the path and the operation, `code` is errno.
// Disk full (ENOSPC, EDQUOT, EFBIG: a file-size limit) is told apart because the remedy differs.
class FileError : public IoError {
 public:
  // "PATH: cannot write (OPERATION: strerror(code))"
  FileError(const std::string& path, std::string operation, int code);
  std::string operation;
  int code;
  bool disk_full() const;
};

// A new file for writing (truncated if it exists); returns its descriptor.
int create_file(const std::string& path);
// Writes all of `bytes` (EINTR retried), then closes: each write call is one counted operation.
void write_all(int fd, std::span<const std::uint8_t> bytes, const std::string& path);
void sync_file(int fd, const std::string& path);
void close_file(int fd, const std::string& path);
void rename_file(const std::string& from, const std::string& to);
// A second name for `existing`. Returns false, doing nothing, where the file system has no hard
// links (EPERM, EOPNOTSUPP, EXDEV); any other failure throws.
bool link_file(const std::string& existing, const std::string& new_name);
// Removes a name; a name already gone is not an error.
void remove_file(const std::string& path);
// Makes the folder's entries (renames, links, removals) durable. File systems that cannot sync a
// folder (EINVAL) have nothing to sync; any other failure throws: the rename may not survive a
// power loss.
void sync_folder(const std::string& folder);

// Writes `bytes` to `path` atomically and durably: a temporary file ".NAME.tmp.PID" beside it,
// fsync, rename over `path`, fsync of the folder. On failure the temporary file is removed (when
// the process survives) and `path` is left as it was.
void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes);

// The prefix of the temporary files write_file_atomically makes for `path` (".NAME.tmp."), so that
// the owner of a path can recognise its stale ones (train/checkpoint_set.h).
std::string temporary_prefix(const std::string& path);

// The operations counted so far by this process (Note [file fault hook]).
std::int64_t file_operations();

}  // namespace ember::io
