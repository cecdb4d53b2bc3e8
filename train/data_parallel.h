// A model's replicas on the ranks of dist:: (docs/distributed.md): one model everywhere, dropout
// masks of their own on each rank.
#pragma once

#include "layers/module.h"

namespace ember::train {

// Moves each Dropout layer of `model` 2^40 positions further per rank along its random stream, so
// that ranks do not drop the same units. After construction and after a resume (a checkpoint
// holds rank 0's positions).
void separate_dropout_streams(nn::Module& model);

// Rank 0's state (parameters and buffers) on every rank, then separate_dropout_streams.
void make_replica(nn::Module& model);

}  // namespace ember::train
