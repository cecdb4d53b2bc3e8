// Stop signals: a handler that sets a flag (Note [stop signals]).
#include "apps/common/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "distributed/dist.h"
#include "distributed/watchdog.h"

namespace ember::apps {
namespace {

std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch a lock-free flag");

void on_stop_signal(int s) {
  if (s == SIGTERM) dist::signal_exit_notice(s);  // a data-parallel run's rank (Note [lost ranks])
  int none = 0;
  if (received.compare_exchange_strong(none, s)) return;
  // The second: the default action, raised again (delivered once this handler returns).
  ::signal(s, SIG_DFL);
  ::raise(s);
}

}  // namespace

void install_stop_signals() {
  ::signal(SIGXFSZ, SIG_IGN);
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // a thread the signal lands in goes on with its system call
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) ::sigaction(s, &action, nullptr);
}

int stop_signal() { return received.load(); }

// EMBER_SIGTERM_AT_CHECK=N: the process sends itself SIGTERM at the N-th check, so that a test
// can stop a run at a known step where a step takes too little time to aim a signal from outside
// (a GPU's). The signal then takes the path any SIGTERM takes.
namespace {
void raise_sigterm_at_planned_check() {
  static const long planned = [] {
    const char* text = std::getenv("EMBER_SIGTERM_AT_CHECK");
    return text ? std::strtol(text, nullptr, 10) : 0L;
  }();
  static long checks = 0;
  if (planned > 0 && ++checks == planned) ::raise(SIGTERM);
}
}  // namespace

bool stop_requested(bool distributed) {
  raise_sigterm_at_planned_check();
  if (!distributed) return stop_signal() != 0;
  static std::int64_t calls = 0;  // the training thread's; equal on every rank
  if (++calls % 16 != 0) return false;
  return !dist::all_agree(stop_signal() == 0);
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace ember::apps
