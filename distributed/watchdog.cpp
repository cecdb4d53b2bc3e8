// The exit notice and the collective watchdog (Note [lost ranks]).
#include "distributed/watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/dist.h"

namespace ember::dist {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mutex;
  std::string notice;              // guarded by mutex
  std::vector<std::string> hosts;  // every rank's, by rank; written once before the threads read
  std::atomic<double> timeout{0.0};
  std::atomic<const char*> waiting_in{nullptr};  // the collective being waited in, or none
  std::atomic<std::int64_t> since{0};            // when it began (Clock ticks)
  int notice_pipe[2] = {-1, -1};
};
State& state() {
  static State s;
  return s;
}

std::string notice() {
  std::lock_guard lock(state().mutex);
  return state().notice;
}

// "ranks 0, 2 (hosts a, c)": everyone but this rank.
std::string peers() {
  std::string ranks, hosts;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank()) continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (static_cast<std::size_t>(r) < state().hosts.size())
      hosts += (hosts.empty() ? "" : ", ") + state().hosts[static_cast<std::size_t>(r)];
  }
  return "ranks " + ranks + (hosts.empty() ? "" : " (hosts " + hosts + ")");
}

void print(const std::string& text) {
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void watch_loop() {
  State& s = state();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const char* what = s.waiting_in.load();
    const std::int64_t since = s.since.load();
    const double limit = s.timeout.load();
    if (!what || limit <= 0) continue;
    const double waited =
        std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(since)).count();
    if (waited <= limit) continue;
    char line[512];
    std::snprintf(line, sizeof line,
                  "rank %d (host %s): %s has waited %.1f s (--collective-timeout %g) for %s: a rank stopped or a "
                  "host is unreachable. Ending this rank.",
                  rank(), host_name().c_str(), what, waited, limit, peers().c_str());
    print(std::string(line) + " " + notice());
    ::kill(::getpid(), SIGKILL);
  }
}

void notice_loop() {
  State& s = state();
  for (;;) {
    int signal = 0;
    const ssize_t n = ::read(s.notice_pipe[0], &signal, sizeof signal);
    if (n != static_cast<ssize_t>(sizeof signal)) continue;
    print("rank " + std::to_string(rank()) + " (host " + host_name() + "): " +
          (signal == SIGTERM ? std::string("SIGTERM: the job is ending (mpirun ends every rank when one is lost; "
                                           "its message names the rank). ")
                             : std::string("stopped. ")) +
          notice());
  }
}

}  // namespace

void set_collective_timeout(double seconds) {
  State& s = state();
  const double before = s.timeout.exchange(seconds);
  if (seconds > 0 && before <= 0) {
    static std::once_flag started;
    std::call_once(started, [] { std::thread(watch_loop).detach(); });
  }
}

double collective_timeout() { return state().timeout.load(); }

void start_exit_notices() {
  State& s = state();
  std::vector<std::string> hosts;
  for (int r = 0; r < world_size(); ++r) hosts.push_back(broadcast_string(host_name(), r));
  static std::once_flag started;
  std::call_once(started, [&] {
    s.hosts = std::move(hosts);
    if (::pipe(s.notice_pipe) != 0) return;
    std::thread(notice_loop).detach();
  });
}

void set_exit_notice(std::string text) {
  std::lock_guard lock(state().mutex);
  state().notice = std::move(text);
}

void signal_exit_notice(int signal) {
  const int fd = state().notice_pipe[1];
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t ignored = ::write(fd, &signal, sizeof signal);
}

CollectiveWatch::CollectiveWatch(const char* what) {
  State& s = state();
  s.since.store(Clock::now().time_since_epoch().count());
  s.waiting_in.store(what);
}

CollectiveWatch::~CollectiveWatch() { state().waiting_in.store(nullptr); }

}  // namespace ember::dist
