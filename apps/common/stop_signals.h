// Stops that save: SIGINT (Ctrl-C), SIGTERM (a scheduler's warning before it kills a job) and
// SIGUSR1 (what a cluster scheduler sends before a requeue, and what mpirun forwards to every rank
// as it is) ask a training program to finish its step, save and exit.
//
// Note [stop signals]
//   install_stop_signals() runs first in main. The first of the three signals sets a lock-free flag
//   and nothing else (all a handler may safely do); the training loop reads it after every step.
//   The disposition is the process's, so the flag is set whichever thread the kernel picks, threads
//   that libraries start before main included (OpenBLAS starts its own when it is loaded, before
//   any mask main could set would be inherited: blocking the signals and taking them with sigwait
//   left those threads to die of them). SA_RESTART lets the thread it lands in go on with its
//   system call. A second signal restores the default action and raises the signal again, so an
//   impatient user (or the shell) sees death by that signal. SIGXFSZ (a `ulimit -f` exceeded) is
//   ignored, so that the write fails with EFBIG and is reported like a full disk instead of killing
//   the process without a word. A program that stopped exits with 128 + the signal: 130, 143 or 138.
#pragma once

namespace ember::apps {

void install_stop_signals();

// The first stop signal received (SIGINT, SIGTERM or SIGUSR1), or 0.
int stop_signal();

// Whether to stop now, for train::EpochOptions::stop_requested (called after every step and at
// every epoch's end, the same number of times on every rank). In a data-parallel run the ranks
// must agree, which takes a collective (dist::all_agree): it is asked only at every 16th call, so
// that a step does not pay a round trip between the ranks for a flag that is almost never set;
// a stop then comes at most 15 steps later (milliseconds).
bool stop_requested(bool distributed);

// "SIGTERM" and the like.
const char* signal_name(int signal);

}  // namespace ember::apps
