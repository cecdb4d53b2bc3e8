// What a training program checks before its first step, so that no epoch's compute is lost to a
// mistake found later: every output path writable (and not a folder), and the thread counts
// within the CPUs this process may run on.
#pragma once

#include <cstddef>
#include <string>

namespace ember::apps {

// UsageError naming `flag` when `path` cannot be written: a folder, a missing folder, a folder that
// refuses a new file (permissions, a read-only file system). Tries by creating and removing a
// file beside it, as the save will. An empty path is not checked.
void check_output_path(const std::string& flag, const std::string& path);

// The CPUs this process may use: those sched_getaffinity allows, fewer where the cgroup's
// cpu.max (or cgroup v1's CFS quota) gives less time than that (rounded up).
int usable_cores();

// The compute threads and loader workers of a run (Note [threads and workers]): `threads` capped
// to usable_cores() with a note on stdout; `workers`, unless the user gave it, the CPUs left (at
// most 2); a warning when the user's --workers and the threads ask for more than the cores.
void share_cpus(int& threads, std::size_t& workers, bool workers_given);

}  // namespace ember::apps
