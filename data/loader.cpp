// The DataLoader's worker threads and staging ring, and the DeviceLoader's prefetching copies.
#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <pthread.h>

#include "base/config.h"
#include "base/error.h"
#include "core/ops/ops.h"

namespace ember::data {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The seed of an epoch's permutation: the run's seed and the epoch number, mixed (splitmix64),
// so that any epoch's order can be recomputed without replaying the ones before it.
std::uint64_t epoch_seed(std::uint64_t seed, std::int64_t epoch) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(epoch + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

// ---- DataLoader --------------------------------------------------------------------------------

// The staging slots and everything about them that the workers, the consumer and the batches'
// release hooks share. Held by shared_ptr: a batch tensor may outlive the loader.
struct DataLoader::Ring {
  // Waking a sleeping worker costs the thread that does it a system call and, in a VM, an
  // interrupt to the other core: ~100 µs measured on the 2-core VM of docs/performance.md, 2–5%
  // of a wide MLP's step when it came once per batch. So a freed slot wakes a worker only when it
  // makes `refill_at` slots free; the woken worker fills every free slot before it sleeps, and the
  // ring has refill_at − 1 slots more than it otherwise would, so batches stay ready meanwhile. A
  // consumer that finds its batch not ready wakes every worker itself (next()).
  static constexpr std::size_t refill_at = 4;
  enum class State { free, filling, ready, on_loan };
  struct Slot {
    Tensor images, labels;  // full-size staging buffers, owned here
    State state = State::free;
    std::size_t batch = 0;
    int views = 0;  // borrowed storages of this slot still alive
  };
  std::vector<Slot> slots;
  std::size_t total_batches = 0, next_to_fill = 0, next_to_yield = 0;
  bool stopping = false;
  std::mutex mutex;
  std::condition_variable work_ready, batch_ready;
  LoaderStats stats;
  Clock::time_point last_yield;
  bool yielded = false;

  std::size_t find(State state) const {
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].state == state) return i;
    return slots.size();
  }
  std::size_t count(State state) const {
    return static_cast<std::size_t>(
        std::count_if(slots.begin(), slots.end(), [state](const Slot& s) { return s.state == state; }));
  }
  // A view of the slot was released; the slot is free once no view remains (a batch has two).
  // The workers are woken only once `refill_at` slots are free — see the note at refill_at.
  static void view_released(const std::shared_ptr<Ring>& ring, std::size_t slot) {
    bool wake = false;
    {
      std::lock_guard lock(ring->mutex);
      if (--ring->slots[slot].views > 0) return;
      ring->slots[slot].state = State::free;
      wake = ring->next_to_fill < ring->total_batches && ring->count(State::free) >= refill_at;
    }
    if (wake) ring->work_ready.notify_one();
    ring->batch_ready.notify_all();  // a consumer waiting on a ring all on loan (no system call without one)
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options), ring_(std::make_shared<Ring>()) {
  EMBER_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  EMBER_CHECK(options_.batch_size > 0, ValueError, "DataLoader: batch_size must be positive");
  EMBER_CHECK(!options_.normalize || options_.normalize->std > 0, ValueError,
              "DataLoader: the normalization's std must be positive");
  EMBER_CHECK(options_.shard.count >= 1 && options_.shard.rank < options_.shard.count, ValueError,
              "DataLoader: shard rank ", options_.shard.rank, " of ", options_.shard.count,
              " (the rank must be below the count)");
  EMBER_CHECK(!options_.shard.pad || options_.shard.count == 1 || dataset_->size() > 0, ValueError,
              "DataLoader: an empty dataset cannot be padded into shards");
  // Enough slots for every worker to fill one while the consumer uses one, the previous step may
  // still hold one (a graph that saved its inputs), and one waits ready; with workers, as many
  // more as wait freed until the workers are woken (Ring::refill_at).
  const std::size_t slot_count = options_.num_workers + 3 + (options_.num_workers > 0 ? Ring::refill_at - 1 : 0);
  const auto rows = static_cast<std::int64_t>(options_.batch_size);
  const auto numel = static_cast<std::int64_t>(dataset_->sample_numel());
  ring_->slots.resize(slot_count);
  for (Ring::Slot& s : ring_->slots) {
    s.images =
        empty({rows, numel}, {.dtype = options_.normalize ? DType::f32 : DType::u8, .pinned = options_.pin_memory});
    s.labels = empty({rows}, {.dtype = DType::i32, .pinned = options_.pin_memory});
  }
  for (std::size_t i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(ring_->mutex);
    ring_->stopping = true;
  }
  ring_->work_ready.notify_all();
  ring_->batch_ready.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::size_t DataLoader::samples_per_epoch() const {
  const std::size_t n = dataset_->size(), count = options_.shard.count, rank = options_.shard.rank;
  if (options_.shard.pad) return (n + count - 1) / count;
  return rank < n ? (n - rank + count - 1) / count : 0;
}

std::size_t DataLoader::batches_per_epoch() const {
  const std::size_t n = samples_per_epoch(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::size_t DataLoader::batch_rows(std::size_t batch) const {
  return std::min(options_.batch_size, samples_per_epoch() - batch * options_.batch_size);
}

std::vector<std::size_t> DataLoader::epoch_order(std::int64_t epoch) const {
  std::vector<std::size_t> order(dataset_->size());
  if (options_.shuffle)
    order = random_permutation(dataset_->size(), epoch_seed(options_.seed, epoch));
  else
    std::iota(order.begin(), order.end(), std::size_t{0});
  const Shard& shard = options_.shard;
  if (shard.count == 1) return order;
  const std::size_t n = order.size(), padded = shard.pad ? (n + shard.count - 1) / shard.count * shard.count : n;
  std::vector<std::size_t> share;
  share.reserve(samples_per_epoch());
  for (std::size_t i = shard.rank; i < padded; i += shard.count) share.push_back(order[i % n]);
  return share;
}

void DataLoader::start_epoch(std::int64_t epoch) {
  std::vector<std::size_t> order = epoch_order(epoch);  // outside the lock: it takes a moment
  Ring& r = *ring_;
  std::unique_lock lock(r.mutex);
  r.next_to_fill = r.total_batches;  // no new work for the old epoch; wait for what is in hand
  r.batch_ready.wait(lock, [&] { return r.find(Ring::State::filling) == r.slots.size(); });
  for (Ring::Slot& s : r.slots)
    if (s.state == Ring::State::ready) s.state = Ring::State::free;  // unconsumed batches of the old epoch
  order_ = std::move(order);
  epoch_ = epoch;
  r.total_batches = batches_per_epoch();
  r.next_to_fill = r.next_to_yield = 0;
  r.stats = {};
  r.yielded = false;
  lock.unlock();
  r.work_ready.notify_all();
}

void DataLoader::fill(std::size_t slot, std::size_t batch) {
  const Ring::Slot& s = ring_->slots[slot];
  const std::size_t rows = batch_rows(batch), numel = dataset_->sample_numel();
  std::int32_t* labels = static_cast<std::int32_t*>(s.labels.raw_bytes());
  Tensor pixels = options_.normalize ? empty({static_cast<std::int64_t>(numel)}, {.dtype = DType::u8}) : Tensor();
  const Shape image = dataset_->sample_shape();
  const std::int64_t height = image.size() == 2 ? image[0] : 1, width = image.back();
  auto augmented = [&](std::uint8_t* pixels_of, std::size_t index) {
    augment(options_.augment, pixels_of, height, width, options_.seed, epoch_, index);
  };
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t index = order_[batch * options_.batch_size + r];
    if (options_.normalize) {  // gather and convert in one pass, on this worker thread
      dataset_->copy_image(index, pixels.data<std::uint8_t>());
      augmented(pixels.data<std::uint8_t>(), index);
      normalize_u8(pixels, s.images.narrow(0, static_cast<std::int64_t>(r), 1), options_.normalize->mean,
                   options_.normalize->std);
    } else {
      std::uint8_t* staged = static_cast<std::uint8_t*>(s.images.raw_bytes()) + r * numel;
      dataset_->copy_image(index, staged);
      augmented(staged, index);
    }
    labels[r] = dataset_->label(index);
  }
}

void DataLoader::worker_loop() {
  // Named so that a profiler (perf --sort comm, nsys, top -H) tells loading from training.
  pthread_setname_np(pthread_self(), "ember-loader");
  Ring& r = *ring_;
  std::unique_lock lock(r.mutex);
  while (true) {
    r.work_ready.wait(lock, [&] {
      return r.stopping || (r.next_to_fill < r.total_batches && r.find(Ring::State::free) < r.slots.size());
    });
    if (r.stopping) return;
    const std::size_t slot = r.find(Ring::State::free);
    const std::size_t batch = r.next_to_fill++;
    r.slots[slot].state = Ring::State::filling;
    r.slots[slot].batch = batch;
    lock.unlock();
    fill(slot, batch);  // order_ cannot change meanwhile: start_epoch waits for filling slots
    lock.lock();
    r.slots[slot].state = Ring::State::ready;
    r.batch_ready.notify_all();
  }
}

std::optional<BatchLease> DataLoader::next() {
  const Clock::time_point entered = Clock::now();
  Ring& r = *ring_;
  std::unique_lock lock(r.mutex);
  if (r.yielded) r.stats.compute_s += seconds_between(r.last_yield, entered);
  if (r.next_to_yield >= r.total_batches) {
    r.yielded = false;
    return std::nullopt;
  }
  const std::size_t batch = r.next_to_yield++;
  auto ready_slot = [&] {
    for (std::size_t i = 0; i < r.slots.size(); ++i)
      if (r.slots[i].state == Ring::State::ready && r.slots[i].batch == batch) return i;
    return r.slots.size();
  };
  auto all_on_loan = [&] {
    return std::all_of(r.slots.begin(), r.slots.end(),
                       [](const Ring::Slot& s) { return s.state == Ring::State::on_loan; });
  };
  auto stuck = [&] {
    return detail::concat("DataLoader: all ", r.slots.size(),
                          " staging buffers hold batches still in use; let go of old batches (or clone() what you "
                          "keep) before asking for more");
  };
  std::size_t slot = r.slots.size();
  if (workers_.empty()) {
    EMBER_CHECK(!all_on_loan(), Error, stuck());
    slot = r.find(Ring::State::free);
    r.slots[slot].state = Ring::State::filling;
    lock.unlock();
    fill(slot, batch);
    lock.lock();
  } else {
    if (ready_slot() == r.slots.size()) r.work_ready.notify_all();  // free slots below refill_at: fill them now
    r.batch_ready.wait(lock, [&] {
      if (ready_slot() < r.slots.size() || r.stopping) return true;
      EMBER_CHECK(!all_on_loan(), Error, stuck());
      return false;
    });
    slot = ready_slot();
    EMBER_CHECK(slot < r.slots.size(), Error, "DataLoader: stopped while waiting for a batch");
  }
  Ring::Slot& s = r.slots[slot];
  s.state = Ring::State::on_loan;
  s.batch = batch;
  s.views = 2;
  // The batch's tensors are views of the slot through borrowed storages; the slot is free again
  // when both are gone.
  auto view = [&](const Tensor& buffer) {
    return Storage::borrow(buffer.raw_bytes(), buffer.nbytes(), Device::cpu(), buffer.storage()->kind(),
                           buffer.storage(), [ring = ring_, slot] { Ring::view_released(ring, slot); });
  };
  const auto rows = static_cast<std::int64_t>(batch_rows(batch));
  const std::int64_t numel = s.images.size(1);
  BatchLease lease;
  lease.index = batch;
  Shape image_shape{rows, numel};
  if (!options_.flatten) {
    const Shape sample = dataset_->sample_shape();
    image_shape = {rows, 1};
    image_shape.insert(image_shape.end(), sample.begin(), sample.end());
  }
  lease.images = tensor_on(view(s.images), image_shape, s.images.dtype());
  lease.labels = tensor_on(view(s.labels), {rows}, DType::i32);
  const Clock::time_point now = Clock::now();
  r.stats.wait_s += seconds_between(entered, now);
  r.stats.batches++;
  r.last_yield = now;
  r.yielded = true;
  return lease;
}

LoaderStats DataLoader::epoch_stats() const {
  std::lock_guard lock(ring_->mutex);
  return ring_->stats;
}

// ---- DeviceLoader ------------------------------------------------------------------------------

// A batch on its way to the device: the host lease (kept until the copy out of it is done), the
// device tensors it is copied into, and the event that marks the copy's end.
struct DeviceLoader::InFlight {
  std::optional<BatchLease> lease;
  Tensor images, labels;  // u8 and i32, on the device
  std::unique_ptr<cuda::Event> allocated, copied;
};

DeviceLoader::DeviceLoader(DataLoader& loader, Device device, Normalization normalization)
    : loader_(loader), device_(device), norm_(normalization) {
  require_usable(device);
  EMBER_CHECK(normalization.std > 0, ValueError, "DeviceLoader: the normalization's std must be positive");
  if (device.is_cuda()) {
    copy_stream_ = std::make_unique<cuda::Stream>(device);
    for (int i = 0; i < 2; ++i) {
      auto f = std::make_unique<InFlight>();
      f->allocated = std::make_unique<cuda::Event>(device);
      f->copied = std::make_unique<cuda::Event>(device);
      ring_.push_back(std::move(f));
    }
  }
}

DeviceLoader::~DeviceLoader() {
  try {
    start_epoch(-1);  // settles an in-flight copy before its buffers go away
  } catch (...) {
  }
}

void DeviceLoader::start_epoch(std::int64_t epoch) {
  if (pending_) {
    InFlight& f = *ring_[*pending_];
    f.copied->wait(cuda::current_stream(device_));  // frees on the compute stream come after the copy
    f.copied->synchronize();
    f.lease.reset();
    f.images = f.labels = Tensor();
    pending_.reset();
  }
  if (epoch >= 0) loader_.start_epoch(epoch);
  stats_ = {};
  yielded_ = false;
}

// Takes the next host batch and issues its copy on the copy stream. The device tensors come from
// the compute stream's pool (so their eventual free is ordered after the compute that reads
// them); the copy stream first waits until that allocation is ordered.
void DeviceLoader::prefetch() {
  std::optional<BatchLease> lease = loader_.next();
  if (!lease) return;
  const std::size_t slot = ring_next_;
  ring_next_ = (ring_next_ + 1) % ring_.size();
  InFlight& f = *ring_[slot];
  // The images travel as the loader made them: u8 pixels (normalized on the device in next()), or
  // f32 already normalized by its workers.
  f.images = empty(lease->images.shape(), {.dtype = lease->images.dtype(), .device = device_});
  f.labels = empty(lease->labels.shape(), {.dtype = DType::i32, .device = device_});
  f.allocated->record(cuda::current_stream(device_));
  f.allocated->wait(copy_stream_->handle());
  {
    // From pinned staging the copies are asynchronous on the copy stream; from pageable staging
    // they finish before copy_ returns. Correct either way.
    cuda::StreamGuard on_copy_stream(*copy_stream_);
    f.images.copy_(lease->images, true);
    f.labels.copy_(lease->labels, true);
  }
  f.copied->record(copy_stream_->handle());
  f.lease = std::move(lease);
  pending_ = slot;
}

std::optional<DeviceBatch> DeviceLoader::next() {
  const Clock::time_point entered = Clock::now();
  if (yielded_) stats_.compute_s += seconds_between(last_yield_, entered);
  DeviceBatch batch;
  if (device_.is_cpu()) {
    std::optional<BatchLease> lease = loader_.next();
    if (!lease) {
      yielded_ = false;
      return std::nullopt;
    }
    // Batches the workers normalized already pass through without a copy; the slot returns to the
    // loader once the step no longer holds them.
    batch.x = lease->images.dtype() == DType::f32 ? lease->images : normalize_u8(lease->images, norm_.mean, norm_.std);
    batch.y = lease->labels;
  } else {
    if (!pending_) prefetch();
    if (!pending_) {
      yielded_ = false;
      return std::nullopt;
    }
    const std::size_t current = *pending_;
    pending_.reset();
    prefetch();  // the next batch's copy overlaps this batch's compute
    InFlight& f = *ring_[current];
    f.copied->wait(cuda::current_stream(device_));  // compute reads the batch only after its copy
    f.copied->synchronize();                        // usually long done: the copy was issued a step ago
    f.lease.reset();                                // the staging buffer may be refilled now
    batch.x = f.images.dtype() == DType::f32 ? f.images : normalize_u8(f.images, norm_.mean, norm_.std);
    batch.y = f.labels;
    f.images = f.labels = Tensor();
  }
  const Clock::time_point now = Clock::now();
  stats_.wait_s += seconds_between(entered, now);
  stats_.batches++;
  last_yield_ = now;
  yielded_ = true;
  return batch;
}

LoaderStats DeviceLoader::epoch_stats() const { return stats_; }

}  // namespace ember::data
