// The race checker (races.h): shadow words, the orders CUDA defines, and the reports.
//
// Nothing here is shared between OS threads: only the executor's thread runs kernels, and the
// load and store hooks of every other thread (host code compiled with the hooks) return at once.
#include "races.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

// The block's shared memory (sim/src/shared_memory.ld).
extern "C" {
extern char ember_sim_shared_begin[];
extern char ember_sim_shared_end[];
}

namespace ember_sim::races {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kWord = 4;  // the shadow's granularity

// One access as the checker remembers it.
struct Access {
  std::uint32_t block = 0;     // 1 + the block's position in the launch's order; 0: no access
  std::uint32_t thread = 0;    // linear index in the block
  std::uint32_t interval = 0;  // barriers its thread had passed
  std::uint32_t warp_ops = 0;  // __syncwarps completed in the launch before it
  std::uint32_t fences = 0;    // __threadfences its thread had made before it
  bool write = false;
  std::uint8_t bytes = 0;  // which of the word's four bytes it touched
};

// A word's history in the launch (device memory) or the block (shared memory): the last write and,
// since it, the first read and the latest read by another thread. Accesses to different bytes of
// a word do not conflict; of two such writes the word remembers the later only.
struct Cell {
  std::uint32_t stamp = 0;  // when it was last touched: older than the launch (or block) means empty
  Access write, first_read, last_read;
};

struct Shadow {
  std::size_t bytes = 0;
  std::vector<Cell> cells;
};

// An atomic of the launch, kept per address: the block, thread and barrier interval that made it,
// and its thread's fences before it (how many, and the interval of the last).
struct Atomic {
  std::uint32_t block, thread, interval, fence_interval, fences;
};
// A thread of the block running now saw the first `count` atomics on `address`; once acquired (a
// fence after it), the same fields describe the fence that acquired it.
struct Seen {
  std::uint32_t thread, interval, fences;
  std::uintptr_t address;
  std::size_t count;
};

struct Checker {
  const KernelRun* launch = nullptr;
  const std::vector<std::uint64_t>* order = nullptr;
  BlockView block;
  std::uint32_t stamp = 0, launch_stamp = 0, block_stamp = 0;
  std::uint32_t warp_ops = 0;
  std::uint32_t fences[kMaxThreads] = {};
  std::uint32_t fence_interval[kMaxThreads] = {};
  // met[t·32 + lane]: the last __syncwarp (1-based number in the launch) that thread t and that
  // lane of its warp both took part in.
  std::vector<std::uint32_t> met = std::vector<std::uint32_t>(kMaxThreads * kWarp);
  const char* stacks = nullptr;
  std::size_t stacks_bytes = 0;
  const char* dynamic_shared = nullptr;  // the launch's dynamic shared memory, and its end
  const char* dynamic_shared_end = nullptr;
  std::size_t dynamic_capacity = 0;                         // the arena's whole size
  std::vector<std::pair<const char*, std::size_t>> memory;  // sorted by base
  std::unordered_map<const char*, Shadow> shadows;
  std::vector<Cell> shared =
      std::vector<Cell>(static_cast<std::size_t>(ember_sim_shared_end - ember_sim_shared_begin) / kWord + 1);
  std::unordered_map<std::uintptr_t, std::vector<Atomic>> atomics;
  // Every fence of the launch: (block, thread, its number for that thread) → its barrier interval.
  std::unordered_map<std::uint64_t, std::uint32_t> fence_log;
  std::vector<Seen> seen, acquired;  // of the block running now
  // The last allocation an access fell in.
  const char* hit_base = nullptr;
  Shadow* hit = nullptr;
};

Checker& checker() {
  static Checker* c = new Checker;  // lives as long as the process, as the executor's state does
  return *c;
}

thread_local bool t_active = false;  // on the executor's thread while a launch runs

std::string dim_text(std::uint64_t linear, const dim3& d) {
  return "(" + std::to_string(linear % d.x) + ", " + std::to_string(linear / d.x % d.y) + ", " +
         std::to_string(linear / (std::uint64_t{d.x} * d.y)) + ")";
}
std::string block_text(const Checker& c, std::uint32_t block) {
  return "block " + dim_text((*c.order)[block - 1], c.launch->grid);
}
std::string thread_text(const Checker& c, const Access& a) {
  return "thread " + dim_text(a.thread, c.launch->block) + " of " + block_text(c, a.block);
}

std::uint64_t fence_key(std::uint32_t block, std::uint32_t thread, std::uint32_t number) {
  return std::uint64_t{block} << 42 | std::uint64_t{thread} << 31 | number;
}

// Whether atomic `r` publishes access `a` of its block: a fence came between them, made by a's
// thread before r (in r's thread, or in an earlier barrier interval than r), or made by r's
// thread in a later interval than a's.
bool released_by(const Checker& c, const Atomic& r, const Access& a) {
  if (r.block != a.block) return false;
  if (r.thread == a.thread) return a.fences < r.fences;
  if (r.fences > 0 && r.fence_interval > a.interval) return true;
  const auto next_fence = c.fence_log.find(fence_key(a.block, a.thread, a.fences + 1));
  return next_fence != c.fence_log.end() && next_fence->second < r.interval;
}

// Whether `a`'s block's atomics that this block observed and acquired order `a` before `me`.
enum class Between { ordered, never_observed, not_released, not_acquired };
Between order_between_blocks(const Checker& c, const Access& a, const Access& me) {
  const auto any_of_seen = [&](const std::vector<Seen>& list, auto&& admits, auto&& test) {
    for (const Seen& q : list) {
      if (!admits(q)) continue;
      const auto it = c.atomics.find(q.address);
      for (std::size_t i = 0; it != c.atomics.end() && i < q.count; ++i)
        if (test(it->second[i])) return true;
    }
    return false;
  };
  const auto all = [](const Seen&) { return true; };
  // An acquiring fence covers `me` if `me`'s thread made it before `me`, or it was made in an
  // earlier barrier interval.
  const auto covers_me = [&](const Seen& q) {
    return (q.thread == me.thread && me.fences >= q.fences) || me.interval > q.interval;
  };
  const auto releases_a = [&](const Atomic& r) { return released_by(c, r, a); };
  if (any_of_seen(c.acquired, covers_me, releases_a)) return Between::ordered;
  if (!any_of_seen(c.seen, all, [&](const Atomic& r) { return r.block == a.block; })) return Between::never_observed;
  if (!any_of_seen(c.seen, all, releases_a)) return Between::not_released;
  return Between::not_acquired;
}

bool ordered(const Checker& c, const Access& a, const Access& me) {
  if (!(a.bytes & me.bytes)) return true;  // different bytes of the word
  if (a.block != me.block) return order_between_blocks(c, a, me) == Between::ordered;
  if (a.thread == me.thread || a.interval < me.interval) return true;
  return a.thread / kWarp == me.thread / kWarp && c.met[me.thread * kWarp + a.thread % kWarp] > a.warp_ops;
}

[[noreturn]] void report(const Checker& c, const Access& a, const Access& me, const char* at, const char* base,
                         bool shared) {
  std::string where = std::to_string(at - base) + " bytes into ";
  where += shared ? std::string("the block's shared memory")
                  : "the allocation at " + hex(reinterpret_cast<std::uintptr_t>(base));
  std::string why;
  if (a.block == me.block) {
    why = "in the same barrier interval (after " + std::to_string(me.interval) +
          " __syncthreads), with no __syncthreads or __syncwarp of both between them";
  } else {
    switch (order_between_blocks(c, a, me)) {
      case Between::never_observed:
        why = "in another block, and this block observed no atomic of " + block_text(c, a.block) +
              " before it (between blocks only a __threadfence, an atomic the other block observes and a "
              "__threadfence after that observation order accesses)";
        break;
      case Between::not_released:
        why = "in another block, and " + block_text(c, a.block) +
              " made no __threadfence between that access and the atomic this block observed: the atomic "
              "publishes nothing before it";
        break;
      default:
        why = "in another block, and this block observed " + block_text(c, a.block) +
              "'s atomic but made no __threadfence between that observation and this access";
    }
  }
  fail(std::string("data race in kernel ") + c.launch->kernel + ": this thread " + (me.write ? "writes" : "reads") +
       " " + hex(reinterpret_cast<std::uintptr_t>(at)) + " (" + where + "), which " + thread_text(c, a) + " " +
       (a.write ? "wrote" : "read") + " " + why);
}

void check_word(Checker& c, Cell& cell, const Access& me, std::uint32_t valid_from, const char* at, const char* base,
                bool shared) {
  if (cell.stamp < valid_from) cell = Cell{};
  cell.stamp = c.block_stamp;
  if (cell.write.block && !ordered(c, cell.write, me)) report(c, cell.write, me, at, base, shared);
  if (me.write) {
    if (cell.first_read.block && !ordered(c, cell.first_read, me)) report(c, cell.first_read, me, at, base, shared);
    if (cell.last_read.block && !ordered(c, cell.last_read, me)) report(c, cell.last_read, me, at, base, shared);
    cell.write = me;
    cell.first_read = cell.last_read = Access{};
  } else if (!cell.first_read.block || ordered(c, cell.first_read, me)) {
    cell.first_read = me;
  } else if (cell.first_read.thread != me.thread || cell.first_read.block != me.block) {
    cell.last_read = me;
  }
}

Shadow* shadow_of(Checker& c, const char* at, const char** base) {
  if (c.hit && at >= c.hit_base && at < c.hit_base + c.hit->bytes) {
    *base = c.hit_base;
    return c.hit;
  }
  auto it =
      std::upper_bound(c.memory.begin(), c.memory.end(), at, [](const char* p, const auto& m) { return p < m.first; });
  if (it == c.memory.begin()) return nullptr;
  --it;
  if (at >= it->first + it->second) return nullptr;  // not device or pinned memory: a stack, the host's heap
  Shadow& s = c.shadows[it->first];
  if (s.bytes != it->second) s = Shadow{it->second, std::vector<Cell>((it->second + kWord - 1) / kWord)};
  c.hit_base = it->first;
  c.hit = &s;
  *base = it->first;
  return &s;
}

[[maybe_unused]] void access(const void* address, std::size_t bytes, bool write) {
  if (!t_active) return;
  Checker& c = checker();
  const char* at = static_cast<const char*>(address);
  if (static_cast<std::size_t>(at - c.stacks) < c.stacks_bytes) return;  // a thread's own stack
  const unsigned t = *c.block.current;
  const Access me{c.block.sequence + 1, t, c.block.barriers_passed[t], c.warp_ops, c.fences[t], write, 0};
  const char* base;
  Cell* cells;
  std::size_t count;
  std::uint32_t valid_from;
  const bool shared = at >= ember_sim_shared_begin && at < ember_sim_shared_end;
  if (shared) {
    if (at + bytes > c.dynamic_shared_end && at >= c.dynamic_shared && at < c.dynamic_shared + c.dynamic_capacity)
      fail(std::string("kernel ") + c.launch->kernel + ": this thread " + (write ? "writes" : "reads") + " " +
           std::to_string(bytes) + " bytes at byte " + std::to_string(at - c.dynamic_shared) +
           " of the dynamic shared memory, past the launch's " +
           std::to_string(c.dynamic_shared_end - c.dynamic_shared) + " bytes");
    base = ember_sim_shared_begin;
    cells = c.shared.data();
    count = c.shared.size();
    valid_from = c.block_stamp;
  } else {
    Shadow* s = shadow_of(c, at, &base);
    if (!s) return;
    cells = s->cells.data();
    count = s->cells.size();
    valid_from = c.launch_stamp;
  }
  const std::size_t begin = static_cast<std::size_t>(at - base), end = begin + bytes;
  const std::size_t last = std::min(count - 1, (end - 1) / kWord);
  for (std::size_t w = begin / kWord; w <= last; ++w) {
    Access mine = me;
    for (std::size_t b = std::max(begin, w * kWord); b < std::min(end, (w + 1) * kWord); ++b)
      mine.bytes |= static_cast<std::uint8_t>(1u << (b % kWord));
    check_word(c, cells[w], mine, valid_from, at, base, shared);
  }
}

}  // namespace

void launch_begin(const KernelRun& launch, const std::vector<std::uint64_t>& block_order, const char* stacks,
                  std::size_t stacks_bytes, const unsigned char* dynamic_arena, std::size_t arena_bytes) {
  Checker& c = checker();
  c.dynamic_shared = reinterpret_cast<const char*>(dynamic_arena);
  c.dynamic_capacity = arena_bytes;
  c.dynamic_shared_end = c.dynamic_shared + launch.shared_bytes;
  c.launch = &launch;
  c.order = &block_order;
  c.launch_stamp = ++c.stamp;
  c.warp_ops = 0;
  std::fill(c.met.begin(), c.met.end(), 0u);
  c.stacks = stacks;
  c.stacks_bytes = stacks_bytes;
  c.memory = launch.memory;
  std::sort(c.memory.begin(), c.memory.end());
  // Shadows of memory freed since (or reissued with another size) go.
  for (auto it = c.shadows.begin(); it != c.shadows.end();) {
    const auto m = std::lower_bound(c.memory.begin(), c.memory.end(), std::make_pair(it->first, std::size_t{0}));
    it = m != c.memory.end() && m->first == it->first && m->second == it->second.bytes ? std::next(it)
                                                                                       : c.shadows.erase(it);
  }
  c.hit = nullptr;
  c.atomics.clear();
  c.fence_log.clear();
  t_active = true;
}

void block_begin(const BlockView& block) {
  Checker& c = checker();
  c.block = block;
  c.block_stamp = ++c.stamp;
  std::fill(c.fences, c.fences + block.threads, 0u);
  std::fill(c.fence_interval, c.fence_interval + block.threads, 0u);
  c.seen.clear();
  c.acquired.clear();
}

void warp_synced(unsigned warp, unsigned mask) {
  Checker& c = checker();
  const std::uint32_t number = ++c.warp_ops;
  for (unsigned a = 0; a < kWarp; ++a)
    if (mask >> a & 1u)
      for (unsigned b = 0; b < kWarp; ++b)
        if (mask >> b & 1u) c.met[(warp * kWarp + a) * kWarp + b] = number;
}

void launch_end() {
  t_active = false;
  checker().launch = nullptr;
}

void fence() {
  if (!t_active) return;
  Checker& c = checker();
  const unsigned t = *c.block.current;
  const std::uint32_t interval = c.block.barriers_passed[t];
  ++c.fences[t];
  c.fence_interval[t] = interval;
  c.fence_log[fence_key(c.block.sequence + 1, t, c.fences[t])] = interval;
  // The fence acquires what this thread observed before it, and what its block observed before the
  // barrier that began this interval.
  for (const Seen& q : c.seen)
    if (q.thread == t || q.interval < interval) c.acquired.push_back({t, interval, c.fences[t], q.address, q.count});
}

void atomic(const void* address) {
  if (!t_active) return;
  Checker& c = checker();
  const char* at = static_cast<const char*>(address);
  if (at >= ember_sim_shared_begin && at < ember_sim_shared_end) return;  // shared memory is the block's alone
  const unsigned t = *c.block.current;
  const auto key = reinterpret_cast<std::uintptr_t>(address);
  std::vector<Atomic>& history = c.atomics[key];
  if (!history.empty()) c.seen.push_back({t, c.block.barriers_passed[t], c.fences[t], key, history.size()});
  history.push_back({c.block.sequence + 1, t, c.block.barriers_passed[t], c.fence_interval[t], c.fences[t]});
}

}  // namespace ember_sim::races

// The hooks clang's -fsanitize-coverage=trace-loads,trace-stores calls before every load and store
// of the code it compiles (here: the simulated CUDA sources only).
#if defined(EMBER_SIM_RACES)
extern "C" {
#define EMBER_SIM_ACCESS_HOOKS(bytes, type)                                                       \
  void __sanitizer_cov_load##bytes(type* p) { ember_sim::races::access(p, sizeof(type), false); } \
  void __sanitizer_cov_store##bytes(type* p) { ember_sim::races::access(p, sizeof(type), true); }
EMBER_SIM_ACCESS_HOOKS(1, std::uint8_t)
EMBER_SIM_ACCESS_HOOKS(2, std::uint16_t)
EMBER_SIM_ACCESS_HOOKS(4, std::uint32_t)
EMBER_SIM_ACCESS_HOOKS(8, std::uint64_t)
EMBER_SIM_ACCESS_HOOKS(16, __int128)
#undef EMBER_SIM_ACCESS_HOOKS
}
#endif
