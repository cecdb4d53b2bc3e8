// What a rank does when another is lost (Note [lost ranks]): the exit notice and the collective
// watchdog.
//
// Note [lost ranks]
// Debian's Open MPI 4.1 has no fault tolerance (ULFM): when one rank's process dies, mpirun ends
// the whole job within seconds — the ranks blocked in a collective get SIGTERM, then SIGKILL — and
// they cannot learn which rank died (mpirun's own message names it). Two things make that end
// useful, and cover what the runtime misses:
//   - the exit notice: on SIGTERM every rank prints, within a second and without any collective,
//     its host, the last complete checkpoint and the command that resumes (set_exit_notice, kept
//     current by the program after each save). A thread of its own prints it, woken from the
//     signal handler through a pipe (a handler may do little more than write(2));
//   - the collective watchdog: a rank that stops without dying (SIGSTOP, a hung host) or a
//     partition leaves the others waiting in a collective for ever, so each collective of dist::
//     waits under a deadline (set_collective_timeout; mnist_train --collective-timeout). A thread
//     looks every 100 ms; past the deadline it prints which collective, how long, the ranks and
//     hosts it waits with, and the exit notice, and raises SIGKILL on its own process: under
//     MPI_THREAD_FUNNELED no other thread may call MPI, and the training thread is the one
//     blocked. mpirun then ends the job as for any dead rank, and the others print their notices.
#pragma once

#include <string>

namespace ember::dist {

// The deadline of every collective, in seconds (0, the default: none). Starts the watchdog's
// thread the first time it is positive.
void set_collective_timeout(double seconds);
double collective_timeout();

// The exit notices: learns every rank's host (a collective: call it on every rank at once, after
// init) and starts the thread that prints the notice when signal_exit_notice() is called.
void start_exit_notices();
// What this rank prints when it ends abnormally: the last complete checkpoint and how to resume.
void set_exit_notice(std::string text);
// From a signal handler (async-signal-safe): has the notice thread print the notice, with the
// signal's name. Does nothing before start_exit_notices().
void signal_exit_notice(int signal);

// Marks the calling thread as waiting in the collective `what` (an MPI call's name, a literal)
// for the object's life: the watchdog's unit.
class CollectiveWatch {
 public:
  explicit CollectiveWatch(const char* what);
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;
};

}  // namespace ember::dist
