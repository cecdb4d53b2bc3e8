// The residual connection of the transformer's blocks: stream + branch in the wider dtype of the
// two. Under autocast a block's products return bf16 or f16 while its residual stream stays f32
// (the class token and position embedding are f32 parameters); PyTorch's type promotion adds them
// in f32, and ember's add takes one dtype (docs/ops.md, "Mixed operands"), so the narrower side is
// cast first (differentiably: its gradient comes back in its own dtype).
#pragma once

#include "core/ops/ops.h"

namespace ember::nn {

inline Tensor residual_add(const Tensor& stream, const Tensor& branch) {
  if (stream.dtype() == branch.dtype()) return add(stream, branch);
  const auto width = [](DType d) { return d == DType::f64 ? 8 : d == DType::f32 ? 4 : 2; };
  // bf16 with f16: neither holds the other, so both go to f32, as PyTorch promotes them.
  const DType wider = width(stream.dtype()) == width(branch.dtype())  ? DType::f32
                      : width(stream.dtype()) > width(branch.dtype()) ? stream.dtype()
                                                                      : branch.dtype();
  return add(stream.to(wider), branch.to(wider));
}

}  // namespace ember::nn
