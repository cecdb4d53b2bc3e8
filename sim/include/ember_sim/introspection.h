// What the software GPU can tell a test about the calls a program made: facts a real GPU keeps to
// itself. Only for tests built against the software GPU (EMBER_TEST_ON_SIM).
#pragma once

#include <cstdint>

namespace ember_sim {

// Calls the calling host thread made that need `device`'s context: cudaSetDevice(device), and
// allocations, streams, copies and launches while it was current. A thread that works on one GPU
// only should count none on any other.
std::uint64_t context_uses_on_this_thread(int device);

}  // namespace ember_sim
