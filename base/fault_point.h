// Fault points: places where a test makes a process die (or stop) at a chosen instant of its
// work, rather than aiming a signal from outside and hoping for the timing.
//
// Note [fault points]
//   EMBER_FAULT_POINT=NAME:N        the N-th time this process passes the point NAME (1-based), it
//                                   kills itself with SIGKILL, as `kill -9` would at that instant;
//   EMBER_FAULT_POINT=NAME:N:stop   it stops itself with SIGSTOP instead, as a hung host would.
//   The points: "forward" (each training step, before its forward) and "allreduce" (each step's
//   gradient sum across ranks, while it is in flight; in the fused step's CUDA graph it is passed
//   at capture only). A checkpoint save has its own hook, every
//   file operation of it (Note [file fault hook], EMBER_FAULT_AT). A data-parallel test sets the
//   variable on one rank only (mpirun's `-x` per application context).
#pragma once

namespace ember {

void fault_point(const char* name);

}  // namespace ember
