// The ember side of the ViT and MultiheadAttention comparison with PyTorch (vit_torch.py):
//   vit_tool save PATH SEED          a seeded small ViT (28×28, patch 7, width 32, 2 blocks, 4 heads,
//                                    MLP 64, 10 classes) as safetensors
//   vit_tool run PATH INPUTS OUT     that ViT loaded from PATH, on INPUTS' images "x" and labels "y":
//                                    "logits", "loss" (cross-entropy) and "grad.<parameter>"
//   vit_tool mha SEED INPUTS OUT     a seeded MultiheadAttention(16, 4) on INPUTS' "q", "k", "v"
//                                    ([L, N, E], [S, N, E]) and masks "kpm" [N, S], "mask" [L, S]
//                                    (u8, 1: do not attend) and "fmask" [L, S] (added): its
//                                    parameters "p.<name>" and the outputs and weights of four calls
//   vit_tool recipe INPUTS OUT       the recipe's parts on INPUTS' "logits" [B, C], "target" [B] and
//                                    gradients "a", "b": "smoothed" (cross-entropy, ε 0.1) and its
//                                    "smoothed_grad"; "norm", "clipped_a", "clipped_b" (max norm
//                                    0.5); "lrs", 12 steps of a 4-step warm-up from 0.01 then a
//                                    6-step cosine (SequentialLR, lr 0.1)
//   vit_tool encoder_layer pre|post SEED INPUTS OUT
//                                    a seeded TransformerEncoderLayer(16, 4, dim_feedforward 32,
//                                    dropout 0; pre: norm_first and GELU, post: ReLU) on INPUTS'
//                                    "x" [L, N, E], "kpm" [N, L] and "up": its parameters
//                                    "p.<name>", "out", "masked_out" (with the key padding) and
//                                    "grad.<name>" of sum(out·up)
//   vit_tool attention INPUTS OUT    scaled_dot_product_attention (the fused CPU path) on INPUTS'
//                                    "q", "k", "v", "up" and optional "mask" (u8: attend, or f32:
//                                    added) and "causal" (a scalar, nonzero: is_causal): "out",
//                                    and "dq", "dk", "dv" of sum(out·up)
#include <cstdlib>
#include <iostream>
#include <string>

#include "ember.h"
#include "optim/clip_grad.h"

using namespace ember;

namespace {

nn::VitShape small_vit() {
  nn::VitShape s;
  s.patch = 7, s.hidden = 32, s.depth = 2, s.heads = 4, s.mlp = 64;
  return s;
}

const Tensor& input(const Checkpoint& file, const std::string& path, const std::string& name) {
  const Tensor* t = find_tensor(file.tensors, name);
  if (!t) throw ValueError(path + ": no tensor '" + name + "'");
  return *t;
}

void run(const std::string& path, const std::string& inputs_path, const std::string& out) {
  auto model = nn::vit(small_vit());
  nn::load(*model, path);
  const Checkpoint inputs = load_safetensors(inputs_path);
  const Tensor& x = input(inputs, inputs_path, "x");
  const Tensor& y = input(inputs, inputs_path, "y");
  const Tensor logits = (*model)(x);
  const Tensor loss = cross_entropy(logits, y);
  loss.backward();
  StateDict result{{"logits", logits.detach()}, {"loss", loss.detach()}};
  for (const auto& [name, p] : model->named_parameters()) result.emplace_back("grad." + name, p.grad());
  save_safetensors(out, result);
}

void mha(std::uint64_t seed, const std::string& inputs_path, const std::string& out) {
  Generator g(seed);
  nn::MultiheadAttention attention(16, 4, 0.0, true, /*batch_first=*/false, &g);
  const Checkpoint inputs = load_safetensors(inputs_path);
  const Tensor &q = input(inputs, inputs_path, "q"), &k = input(inputs, inputs_path, "k"),
               &v = input(inputs, inputs_path, "v"), &kpm = input(inputs, inputs_path, "kpm"),
               &mask = input(inputs, inputs_path, "mask"), &fmask = input(inputs, inputs_path, "fmask");
  StateDict result;
  for (const auto& [name, p] : attention.named_parameters()) result.emplace_back("p." + name, p);
  const NoGradGuard no_grad;
  result.emplace_back("self_out", attention(q));
  auto [cross, weights] = attention.attend(q, k, v, {.key_padding_mask = kpm, .attn_mask = mask});
  result.emplace_back("cross_out", cross);
  result.emplace_back("cross_w", weights);
  auto [per_head, head_weights] =
      attention.attend(q, k, v, {.key_padding_mask = kpm, .attn_mask = mask, .average_attn_weights = false});
  result.emplace_back("cross_w_heads", head_weights);
  result.emplace_back(
      "fused_out",
      attention.attend(q, k, v, {.key_padding_mask = kpm, .attn_mask = mask, .need_weights = false}).first);
  result.emplace_back("float_out", attention.attend(q, k, v, {.attn_mask = fmask, .need_weights = false}).first);
  save_safetensors(out, result);
}

void recipe(const std::string& inputs_path, const std::string& out) {
  const Checkpoint inputs = load_safetensors(inputs_path);
  const Tensor logits = input(inputs, inputs_path, "logits").clone().set_requires_grad();
  const Tensor smoothed = cross_entropy(logits, input(inputs, inputs_path, "target"), 0.1);
  smoothed.backward();
  Tensor a = zeros(input(inputs, inputs_path, "a").shape()).set_requires_grad();
  Tensor b = zeros(input(inputs, inputs_path, "b").shape()).set_requires_grad();
  (sum(mul(a, input(inputs, inputs_path, "a"))) + sum(mul(b, input(inputs, inputs_path, "b")))).backward();
  const double norm = optim::clip_grad_norm({a, b}, 0.5);
  optim::SGD sgd({a}, {.lr = 0.1});
  std::vector<std::unique_ptr<optim::LRScheduler>> parts;
  parts.push_back(std::make_unique<optim::LinearWarmup>(sgd, 4, 0.01));
  parts.push_back(std::make_unique<optim::CosineAnnealingLR>(sgd, 6));
  optim::SequentialLR schedule(sgd, std::move(parts), {4});
  std::vector<double> lrs;
  for (int t = 0; t < 12; ++t, schedule.step()) lrs.push_back(sgd.param_groups()[0].options.lr);
  save_safetensors(out, {{"smoothed", smoothed.detach()},
                         {"smoothed_grad", logits.grad()},
                         {"norm", scalar_tensor(norm, {.dtype = DType::f64})},
                         {"clipped_a", a.grad()},
                         {"clipped_b", b.grad()},
                         {"lrs", from_vector(lrs, {12})}});
}

void encoder_layer(bool pre, std::uint64_t seed, const std::string& inputs_path, const std::string& out) {
  Generator g(seed);
  nn::TransformerEncoderLayer layer(
      16, 4, {.dim_feedforward = 32, .dropout = 0.0, .activation = pre ? "gelu" : "relu", .norm_first = pre}, &g);
  const Checkpoint inputs = load_safetensors(inputs_path);
  const Tensor& x = input(inputs, inputs_path, "x");
  StateDict result;
  for (const auto& [name, p] : layer.named_parameters()) result.emplace_back("p." + name, p.detach().clone());
  const Tensor y = layer(x);
  sum(mul(y, input(inputs, inputs_path, "up"))).backward();
  result.emplace_back("out", y.detach());
  {
    const NoGradGuard no_grad;
    result.emplace_back("masked_out", layer.forward(x, {.key_padding_mask = input(inputs, inputs_path, "kpm")}));
  }
  for (const auto& [name, p] : layer.named_parameters()) result.emplace_back("grad." + name, p.grad());
  save_safetensors(out, result);
}

void attention(const std::string& inputs_path, const std::string& out) {
  const Checkpoint inputs = load_safetensors(inputs_path);
  auto leaf = [&](const char* name) { return input(inputs, inputs_path, name).clone().set_requires_grad(); };
  const Tensor q = leaf("q"), k = leaf("k"), v = leaf("v");
  AttentionOptions options;
  if (const Tensor* mask = find_tensor(inputs.tensors, "mask")) options.attn_mask = *mask;
  if (const Tensor* causal = find_tensor(inputs.tensors, "causal")) options.is_causal = causal->item<double>() != 0;
  const Tensor result = scaled_dot_product_attention(q, k, v, options);
  sum(mul(result, input(inputs, inputs_path, "up"))).backward();
  save_safetensors(out, {{"out", result.detach()}, {"dq", q.grad()}, {"dk", k.grad()}, {"dv", v.grad()}});
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "save" && argc == 4) {
      Generator g(std::strtoull(argv[3], nullptr, 10));
      nn::save(*nn::vit(small_vit(), &g), argv[2]);
      return 0;
    }
    if (command == "run" && argc == 5) {
      run(argv[2], argv[3], argv[4]);
      return 0;
    }
    if (command == "mha" && argc == 5) {
      mha(std::strtoull(argv[2], nullptr, 10), argv[3], argv[4]);
      return 0;
    }
    if (command == "recipe" && argc == 4) {
      recipe(argv[2], argv[3]);
      return 0;
    }
    if (command == "encoder_layer" && argc == 6) {
      encoder_layer(std::string(argv[2]) == "pre", std::strtoull(argv[3], nullptr, 10), argv[4], argv[5]);
      return 0;
    }
    if (command == "attention" && argc == 4) {
      attention(argv[2], argv[3]);
      return 0;
    }
    std::cerr << "usage: vit_tool save PATH SEED | run PATH INPUTS OUT | mha SEED INPUTS OUT | recipe INPUTS OUT | "
                 "encoder_layer pre|post SEED INPUTS OUT | attention INPUTS OUT\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vit_tool: " << e.what() << "\n";
    return 1;
  }
}
