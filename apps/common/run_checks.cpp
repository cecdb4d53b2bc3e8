// Output paths and thread counts checked before training.
#include "apps/common/run_checks.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "apps/common/program.h"

namespace ember::apps {
namespace {

namespace fs = std::filesystem;

std::string detail_message(const std::string& flag, const std::string& path, const std::string& problem) {
  return flag + " " + path + ": " + problem;
}

// CPUs' worth of time the cgroup grants per period (quota / period), or 0 when unlimited.
double cgroup_cpu_limit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (v2 >> quota >> period && quota != "max" && period > 0) return std::stod(quota) / period;
  std::ifstream v1_quota("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), v1_period("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double q = -1;
  if (v1_quota >> q && v1_period >> period && q > 0 && period > 0) return q / period;
  return 0;
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw UsageError(detail_message(flag, path, "is a folder; give a file name inside it"));
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (fs::exists(folder, ec) && !fs::is_directory(folder, ec))
    throw UsageError(detail_message(flag, path, folder.string() + " is not a folder"));
  if (!fs::is_directory(folder, ec))
    throw UsageError(detail_message(flag, path, "its folder " + folder.string() + " does not exist; create it first"));
  const std::string probe =
      (folder / ("." + target.filename().string() + ".check." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UsageError(detail_message(
        flag, path,
        "cannot create a file in " + folder.string() + " (" + std::strerror(errno) + "); choose a writable folder"));
  ::close(fd);
  ::unlink(probe.c_str());
}

int usable_cores() {
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (const double limit = cgroup_cpu_limit(); limit > 0)
    cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(limit - 1e-9))));
  return std::max(cores, 1);
}

// Note [threads and workers]
// A run's CPUs go to two kinds of thread: ember's compute pool (--threads) and the data loader's
// workers (--workers). A flag the user gave is taken as given (--threads capped to the usable CPUs,
// with a note); what the user left out is chosen from the CPUs this process may use, so that the
// defaults never ask for more than there are:
// - threads: 1. A small model gains little from a second compute thread, and a spinning pool on
//   a shared machine loses much (docs/performance.md, "Threads"); --threads N asks for more.
// - workers: the CPUs the compute threads leave, at most 2 (a batch of 128 digits takes a worker
//   a few microseconds; two keep up with any device measured), so 0 on one CPU and 1 on two.
// Only the user's own flags can oversubscribe the CPUs, and only then is there a warning.
void share_cpus(int& threads, std::size_t& workers, bool workers_given) {
  const int cores = usable_cores();
  if (threads > cores) {
    std::printf("note: --threads %d: this process may use %d CPU%s (affinity and cgroup limits); using %d\n", threads,
                cores, cores == 1 ? "" : "s", cores);
    threads = cores;
  }
  if (!workers_given) {
    workers = static_cast<std::size_t>(std::min(2, cores - threads));
  } else if (workers > 0 && threads + static_cast<int>(workers) > cores) {
    std::printf(
        "warning: --threads %d and --workers %zu together ask for more than the %d CPU%s this process may "
        "use; the loader's threads will take time from the compute threads\n",
        threads, workers, cores, cores == 1 ? "" : "s");
  }
}

}  // namespace ember::apps
