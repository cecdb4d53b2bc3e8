// A model's replicas across ranks.
#include "train/data_parallel.h"

#include <vector>

#include "distributed/dist.h"
#include "train/checkpoint.h"

namespace ember::train {

void separate_dropout_streams(nn::Module& model) {
  for (nn::Dropout* d : dropout_layers(model))
    d->set_offset(d->offset() + (static_cast<std::uint64_t>(dist::rank()) << 40));
}

void make_replica(nn::Module& model) {
  std::vector<Tensor> state;
  for (const auto& [name, t] : model.state_dict()) state.push_back(t);
  dist::broadcast_parameters(state);
  separate_dropout_streams(model);
}

}  // namespace ember::train
