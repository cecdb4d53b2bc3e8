// mnist_train's model flags.
#include "apps/common/model_flags.h"

#include "apps/common/program.h"
#include "base/error.h"

namespace ember::apps {

std::string ModelFlags::sizes() const {
  if (is_vit())
    return detail::concat("patch ", vit.patch, ", width ", vit.hidden, ", depth ", vit.depth, ", heads ", vit.heads,
                          ", mlp ", vit.mlp);
  return join_sizes(hidden_sizes) + (is_cnn() ? " " + join_sizes(channel_sizes) : "");
}

void add_model_options(CLI::App& app, ModelFlags& f) {
  app.add_option("--model", f.model,
                 "mlp (the tutorials' 784-32-10), cnn (conv 32, conv 64, pool, dense 128) or vit (torchvision's ViT)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn", "vit"}));
  app.add_option("--hidden", f.hidden, "hidden widths: e.g. 32 or 512,256 (MLP, default 32); the CNN's dense (128)");
  app.add_option("--channels", f.channels, "the CNN's two convolution widths")->capture_default_str();
  app.add_option("--patch", f.vit.patch, "the ViT's patch size (it divides the image size)")->capture_default_str();
  app.add_option("--width", f.vit.hidden, "the ViT's token width (hidden_dim)")->capture_default_str();
  app.add_option("--depth", f.vit.depth, "the ViT's encoder blocks")->capture_default_str();
  app.add_option("--heads", f.vit.heads, "the ViT's attention heads (they divide --width)")->capture_default_str();
  app.add_option("--mlp-dim", f.vit.mlp, "the ViT's MLP width in each block")->capture_default_str();
  app.add_option("--dropout", f.vit.dropout, "the ViT's dropout (torchvision's dropout: tokens, MLP)")
      ->capture_default_str();
  app.add_option("--attention-dropout", f.vit.attention_dropout,
                 "the ViT's dropout on the attention probabilities (torchvision's attention_dropout)")
      ->capture_default_str();
}

void check_model_flags(ModelFlags& f) {
  f.hidden_sizes = parse_sizes("--hidden", f.hidden.empty() ? (f.is_cnn() ? "128" : "32") : f.hidden, "32 or 512,256");
  f.channel_sizes = parse_sizes("--channels", f.channels, "32,64");
  if (f.is_cnn() && (f.hidden_sizes.size() != 1 || f.channel_sizes.size() != 2))
    throw UsageError("--model cnn takes one --hidden width (e.g. 128) and two --channels (e.g. 32,64)");
  const nn::VitShape& v = f.vit;
  if (f.is_vit() && (v.patch < 1 || v.hidden < 1 || v.depth < 1 || v.heads < 1 || v.mlp < 1 || v.hidden % v.heads))
    throw UsageError(
        detail::concat("--model vit: --patch, --width, --depth, --heads and --mlp-dim must be positive "
                       "and --width a multiple of --heads; got width ",
                       v.hidden, " and ", v.heads, " heads"));
  for (const auto& [flag, p] : {std::pair{"--dropout", v.dropout}, {"--attention-dropout", v.attention_dropout}})
    if (!(p >= 0.0 && p < 1.0)) throw UsageError(detail::concat(flag, " must be in [0, 1), got ", p));
}

ModelCard card_for(const ModelFlags& f, const data::ClassificationData& data, bool normalized) {
  ModelCard card = card_for(data, f.model, normalized);
  if (f.is_vit()) {
    if (card.height % f.vit.patch || card.width % f.vit.patch)
      throw UsageError(
          detail::concat("--patch ", f.vit.patch, " must divide the images' ", card.height, "×", card.width));
    card.vit = f.vit;
  } else {
    card.hidden = f.hidden_sizes;
  }
  if (f.is_cnn()) card.channels = f.channel_sizes;
  return card;
}

}  // namespace ember::apps
