// The checks between streams: each access of an operation against the history of the memory it
// touches, by the operations' vector clocks (runtime.cpp describes the model).
#include <sstream>
#include <string>

#include "executor.h"
#include "state.h"

namespace ember_sim::rt {

std::string describe(const Memory& m) {
  std::ostringstream out;
  out << m.origin << " at " << static_cast<const void*>(m.base);
  return out.str();
}

namespace {
bool ordered_before(const Memory::Use& use, const Op& op) {
  if (use.stream_id == op.stream_id) return true;
  const auto it = op.clock.find(use.stream_id);
  return it != op.clock.end() && it->second >= use.tick;
}

[[noreturn]] void race(const Op& op, const Memory& m, bool write, const Memory::Use& other, bool other_write) {
  fail(op.what + " on stream " + std::to_string(op.stream_id) + (write ? " writes " : " reads ") + describe(m) +
       ", which " + other.what + " on stream " + std::to_string(other.stream_id) +
       (other_write ? " writes" : " reads") +
       ", and nothing orders one after the other: a missing synchronization between streams (record an event "
       "after the first and make the second's stream wait for it)");
}
}  // namespace

// Checks one access of `op` against the memory's history and records it.
void check_access(Runtime& rt, const Op& op, const Access& a) {
  Memory* m = find_memory(rt, a.address, a.bytes == 0);
  if (!m) {
    fail(op.what + ": " + a.what + " (" + std::to_string(a.bytes) + " bytes at " +
         hex(reinterpret_cast<std::uintptr_t>(a.address)) +
         ") is not in any device allocation or pinned host buffer: the GPU cannot reach it");
  }
  if (m->graph && m->graph != op.replay_of)
    fail(op.what + ": " + a.what + " uses " + describe(*m) +
         ", which was allocated inside a CUDA graph capture and belongs to that graph: only its replays may use it");
  if (m->freed)
    fail(op.what + ": " + a.what + " uses " + describe(*m) + " after its free (" +
         (m->freed_on ? "cudaFreeAsync on stream " + std::to_string(m->freed_on->id) : std::string("cudaFree")) +
         "): use after a stream-ordered free");
  const char* begin = static_cast<const char*>(a.address);
  if (begin + a.bytes > m->base + m->size)
    fail(op.what + ": " + a.what + " reaches " + std::to_string(begin + a.bytes - (m->base + m->size)) +
         " bytes past the end of " + describe(*m) + " (" + std::to_string(m->size) + " bytes)");
  if (m->device < 0) return;  // pinned host memory: the host's own side is checked at the copy
  if (m->last_write && !ordered_before(*m->last_write, op)) race(op, *m, a.write, *m->last_write, true);
  if (a.write)
    for (const auto& [id, use] : m->reads)
      if (!ordered_before(use, op)) race(op, *m, true, use, false);
  const Memory::Use mine{op.stream_id, op.tick, op.what};
  if (a.write) {
    m->last_write = mine;
    m->reads.clear();
  } else {
    m->reads[op.stream_id] = mine;
  }
}

}  // namespace ember_sim::rt
