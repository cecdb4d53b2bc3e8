// What every backend shares: the device of a rank, and the agreement checks built on the
// collectives of distributed/mpi.cpp.
#include "distributed/dist.h"

#include <unistd.h>

#include <cstring>

#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/tensor/autograd.h"

namespace ember::dist {

bool built_with_nccl() { return EMBER_WITH_NCCL; }
bool is_main() { return rank() == 0; }

Device default_device() {
  const int gpus = cuda::is_available() ? cuda::device_count() : 0;
  return gpus > 0 ? Device::cuda(local_rank() % gpus) : Device::cpu();
}

void broadcast_parameters(std::span<const Tensor> parameters) {
  NoGradGuard no_grad;
  for (Tensor t : parameters) broadcast(t, 0);
}

std::uint64_t hash_tensors(std::span<const Tensor> tensors) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const Tensor& t : tensors) {
    const Tensor host = t.cpu();
    const auto dtype = static_cast<int>(host.dtype());
    mix(&dtype, sizeof dtype);
    for (std::int64_t d : host.shape()) mix(&d, sizeof d);
    mix(host.raw_bytes(), host.nbytes());
  }
  return h;
}

std::string host_name() {
  char name[256] = "?";
  ::gethostname(name, sizeof name - 1);
  return name;
}

void check_same_on_all_ranks(const std::string& what, const std::string& text) {
  // Every rank sees every rank's text (one broadcast each, at start-up), so all of them find the
  // same first difference and stop with the same message, their collectives still matched.
  const std::string reference = broadcast_string(text, 0);
  for (int r = 1; r < world_size(); ++r) {
    const std::string theirs = broadcast_string(text, r);
    if (theirs == reference) continue;
    std::size_t at = 0;
    while (at < theirs.size() && at < reference.size() && theirs[at] == reference[at]) ++at;
    const std::size_t from = at == 0 ? std::string::npos : theirs.rfind(';', at - 1);
    const std::size_t start = from == std::string::npos ? 0 : from + 1;
    auto item = [start](const std::string& s) { return s.substr(start, s.find(';', start) - start); };
    // Which hosts, too: a difference between machines is often their files (the data's content).
    const std::string host0 = broadcast_string(host_name(), 0), host = broadcast_string(host_name(), r);
    throw DistError(ember::detail::concat(
        "dist: rank ", r, " (host ", host, ")'s ", what, " differ from rank 0's (host ", host0, "): '", item(theirs),
        "' there, '", item(reference), "' on rank 0; start every rank with the same model, options and data"));
  }
}

void check_identical(const std::string& what, std::span<const Tensor> tensors) {
  const std::vector<std::uint64_t> hashes = all_gather(hash_tensors(tensors));
  for (std::size_t r = 1; r < hashes.size(); ++r)
    EMBER_CHECK(hashes[r] == hashes[0], DistError, "dist: ", what, " differ between rank 0 and rank ", r, " (hashes ",
                std::hex, hashes[0], " and ", hashes[r], ")");
}

bool all_agree(bool ok) {
  const std::vector<std::uint64_t> votes = all_gather(ok ? 1 : 0);
  for (std::uint64_t v : votes)
    if (!v) return false;
  return true;
}

}  // namespace ember::dist
