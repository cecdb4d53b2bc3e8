// A model's replicas across ranks.
#include "train/data_parallel.h"

#include <vector>

#include "distributed/dist.h"
#include "train/checkpoint.h"

namespace ember::train {

void separate_dropout_streams(nn::Module& model) {
  for (std::uint64_t* offset : random_offsets(model)) *offset += static_cast<std::uint64_t>(dist::rank()) << 40;
}

void make_replica(nn::Module& model) {
  std::vector<Tensor> state;
  for (const auto& [name, t] : model.state_dict()) state.push_back(t);
  dist::broadcast_parameters(state);
  separate_dropout_streams(model);
}

void check_same_run(const Metadata& settings, nn::Module& model) {
  std::string text;
  for (const auto& [key, value] : settings) text += key + "=" + value + ";";
  dist::check_same_on_all_ranks("options", text);
  dist::check_identical("the parameters at the start", model.parameters());
}

LogFields replica_fields(nn::Module& model, int epoch, bool across_ranks) {
  if (across_ranks) dist::check_identical(detail::concat("the parameters after epoch ", epoch), model.parameters());
  return {{"ranks", std::int64_t{across_ranks ? dist::world_size() : 1}},
          {"params_hash", detail::concat(std::hex, dist::hash_tensors(model.parameters()))}};
}

}  // namespace ember::train
