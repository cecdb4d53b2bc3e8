// Embedding, as torch.nn.Embedding: a table of rows looked up by index.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor/random.h"
#include "layers/module.h"

namespace ember::nn {

// weight [num_embeddings, embedding_dim] ~ N(0, 1), drawn from `generator` (the default generator
// when null), with the padding_idx row (negative: from the end) zeroed; that row gets no gradient.
// The input holds i64 or i32 indices of any shape; the output is its shape + [embedding_dim].
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  const Tensor& weight() const { return weight_; }

 private:
  std::int64_t num_, dim_;
  std::optional<std::int64_t> padding_;  // in [0, num_embeddings)
  Tensor weight_;
};

}  // namespace ember::nn
