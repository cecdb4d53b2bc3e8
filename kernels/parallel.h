// ember's CPU thread pool: the one place CPU kernels get more than one core (Note [CPU threads]).
//
// Note [CPU threads]
// ~~~~~~~~~~~~~~~~~~
// - One pool, sized by ember::set_num_threads (or EMBER_NUM_THREADS; 1 by default): the calling
//   thread and threads − 1 workers named "ember-cpu-N". OpenBLAS is held at one thread of its own
//   (its pool would compete with this one for the same cores, and spins after each call): large
//   GEMMs are split by ember into blocks of C, each an OpenBLAS call on a worker (Note [parallel
//   GEMM] in kernels/cpu/gemm.cpp). Nothing else in ember starts compute threads; the data loader's
//   workers prepare batches and sleep while a step computes.
// - Static and deterministic: thread t runs the t-th contiguous run of parts. A kernel whose parts
//   write disjoint outputs gives the same bits at any thread count. A reduction sums each part
//   into a partial of its own and adds the partials in part order afterwards, its parts depending
//   on its size only, never on the thread count: the same bits at any thread count too
//   (tests/kernels/test_parallel.cpp runs every parallel kernel at 1, 2 and 3). parallel_for,
//   for loops whose results do not depend on the cut, rounds its pieces up to a multiple of the
//   threads: 3 pieces on 2 threads left one thread idle a third of the loop, and the ViT's
//   layers, at 3 to 9 pieces, kept the second core idle a quarter of the step.
// - Small work stays on the calling thread: a loop runs in parallel only when it has at least
//   two parts of `grain` elements each (kElementsPerPiece below; GEMM blocks: Note [parallel
//   GEMM]). Softmax cross-entropy over a batch's 10 classes is far below it and stays serial.
// - Nested loops (a kernel called from inside a part) run on the thread that calls them.
// - A waiting thread (a worker between loops, the caller for the workers' parts) polls for 1 ms,
//   then sleeps on a futex (std::atomic wait): a step's kernels follow each other within
//   microseconds, and a sleeping thread takes 30–250 µs to wake in a VM (kernels/cpu/parallel.cpp).
#pragma once

#include <cstddef>
#include <utility>

namespace ember::kernels::cpu {

// The fewest elements an elementwise loop hands to a thread, and the fewest multiply-adds a piece of
// a CPU GEMM holds (ember's f32 and bf16 kernels' tiles and OpenBLAS's blocks alike: Note [parallel
// GEMM]). Loops repeated back to back on the same buffers (`bench_kernels --filter parallel_split`,
// docs/results/cpu-threads.md) gain from 8K elements, but there each core keeps its half in its own
// cache. Inside a training step the calling thread wrote the inputs and reads the outputs next, so
// a second core first pulls its half across: at 2 threads the 784-32-10 MLP, whose only split
// loops were a 3.2M-product weight gradient (f32), its 100K-element input cast and 25K-parameter
// SGD update (bf16), trained 10–25% slower than at 1 thread (Zen 4; docs/results/cpu-threads.md,
// "Small work stays whole"). At these sizes its steps keep every loop on one thread, and the
// wide MLP and the CNN, whose loops are 10–100 times larger, still split.
constexpr std::size_t kElementsPerPiece = 64 * 1024;
constexpr double kGemmProductsPerPiece = 4.0 * 1024 * 1024;
// Items (rows, planes, channels) of `elements` values each that make at least such a piece.
constexpr std::size_t items_per_piece(std::size_t elements) {
  return elements >= kElementsPerPiece ? 1 : kElementsPerPiece / (elements > 0 ? elements : 1);
}

// Threads ember's CPU kernels use, the caller included; values below 1 are ignored.
void set_compute_threads(int threads);
int compute_threads();
// True on a pool thread inside a part, and on the caller while it runs its own parts.
bool in_parallel_region();

// The calling thread's scratch buffer number `slot` (< kScratchSlots), at least `bytes`, 64-byte
// aligned, kept for the next call: per-thread buffers of a parallel kernel, taken from the system
// once per thread and size. Valid until this thread asks for the same slot again; a kernel that
// calls another takes a slot the other does not use: convolutions 0, GEMM packing 1 and 3 (each
// thread's own), a GEMM's sums between blocks of k 2 (the caller's, shared by its parts), the
// fused attention's tiles and sums from kAttentionFirstSlot on (kernels/cpu/attention.cpp).
constexpr std::size_t kScratchSlots = 11;
constexpr std::size_t kGemmPackingSlot = 1, kGemmSumsSlot = 2, kGemmPackingASlot = 3, kAttentionFirstSlot = 4;
void* thread_scratch(std::size_t slot, std::size_t bytes);
template <class T>
T* thread_scratch(std::size_t slot, std::size_t elements) {
  return static_cast<T*>(thread_scratch(slot, elements * sizeof(T)));
}

// body(first, last) for consecutive runs [first, last) of the parts [0, parts): one run per thread,
// the caller's first, contiguous and in order. Returns when every part is done; rethrows the first
// exception a part threw. Serial when parts < 2, one thread is configured, or already inside a part.
using PartsFunction = void (*)(void* context, std::size_t first, std::size_t last);
void run_parts(std::size_t parts, PartsFunction body, void* context);

template <class Body>
void parallel_parts(std::size_t parts, Body&& body) {
  run_parts(
      parts, [](void* context, std::size_t first, std::size_t last) { (*static_cast<Body*>(context))(first, last); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// body(begin, end) over [0, n) in pieces of about `grain` elements or more (whole multiples of
// `align`), as many as a multiple of the threads where there are two such pieces or more. For
// loops whose results do not depend on where they are cut: elementwise, row by row, tiles of C.
template <class Body>
void parallel_for(std::size_t n, std::size_t grain, Body&& body, std::size_t align = 16) {
  const std::size_t by_grain = n / (grain > 0 ? grain : 1);
  if (by_grain < 2) {
    if (n > 0) body(std::size_t{0}, n);
    return;
  }
  const auto threads = static_cast<std::size_t>(compute_threads());
  const std::size_t pieces = (by_grain + threads - 1) / threads * threads;
  const std::size_t per_piece = ((n + pieces - 1) / pieces + align - 1) / align * align;
  const std::size_t count = (n + per_piece - 1) / per_piece;
  parallel_parts(count, [&](std::size_t first, std::size_t last) {
    const std::size_t begin = first * per_piece, end = last * per_piece < n ? last * per_piece : n;
    if (begin < end) body(begin, end);
  });
}

}  // namespace ember::kernels::cpu
