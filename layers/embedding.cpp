// Embedding.
#include "layers/embedding.h"

#include "base/error.h"
#include "core/ops/ops.h"

namespace ember::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::optional<std::int64_t> padding_idx,
                     Generator* generator)
    : num_(num_embeddings), dim_(embedding_dim) {
  EMBER_CHECK(num_embeddings > 0 && embedding_dim > 0, ValueError,
              "Embedding: num_embeddings and embedding_dim must be positive, got ", num_embeddings, " and ",
              embedding_dim);
  if (padding_idx) {
    EMBER_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings, ValueError, "Embedding: padding_idx ",
                *padding_idx, " must be within [-num_embeddings, num_embeddings) = [", -num_embeddings, ", ",
                num_embeddings, ")");
    padding_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  Tensor weight = randn({num_embeddings, embedding_dim}, {}, generator);
  if (padding_) weight.narrow(0, *padding_, 1).zero_();
  weight_ = register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& input) { return embedding(input, weight_, padding_); }

std::string Embedding::extra_repr() const {
  return detail::concat(num_, ", ", dim_, padding_ ? detail::concat(", padding_idx=", *padding_) : std::string());
}

}  // namespace ember::nn
