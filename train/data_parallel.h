// A model's replicas on the ranks of dist:: (docs/distributed.md): one model everywhere, dropout
// masks of their own on each rank.
#pragma once

#include "layers/module.h"
#include "train/checkpoint.h"
#include "train/log.h"

namespace ember::train {

// Moves each Dropout layer of `model` 2^40 positions further per rank along its random stream, so
// that ranks do not drop the same units. After construction and after a resume (a checkpoint
// holds rank 0's positions).
void separate_dropout_streams(nn::Module& model);

// Rank 0's state (parameters and buffers) on every rank, then separate_dropout_streams.
void make_replica(nn::Module& model);

// Before training: the same settings on every rank (key → value, e.g. what checkpoints keep;
// a dist::DistError naming the ranks and what differs) and the same parameters.
void check_same_run(const Metadata& settings, nn::Module& model);

// After an epoch: with `across_ranks`, that every rank holds the same parameters (dist::
// check_identical, naming the epoch); then, for a log, "ranks" and "params_hash" (the hash of
// the parameters, which equal runs share bit for bit).
LogFields replica_fields(nn::Module& model, int epoch, bool across_ranks);

}  // namespace ember::train
