// mnist_train: trains the tutorials' image classifiers — the 784-32-10 MLP and the CNN of
// PyTorch's MNIST example — on MNIST, Fashion-MNIST or any dataset in their IDX layout, on the
// best device (or the one asked for), with the tutorials' output, and saves checkpoints that
// PyTorch loads as they are.
//
// Reading order: Settings and the recipes (what a run is asked to do), validate (everything
// checked before any file is touched), build_run (data, model, optimizer, resume), train_epoch
// (one pass over the data), and run_training, which ties them together and reports.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "apps/common/model_card.h"
#include "apps/common/plot.h"
#include "apps/common/program.h"
#include "apps/common/train_state.h"
#include "core/cuda/profile.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "data/classification.h"
#include "data/loader.h"
#include "data/preloaded.h"
#include "distributed/dist.h"
#include "distributed/reducer.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/fused_mlp_step.h"

using namespace ember;
using apps::UsageError;
using Clock = std::chrono::steady_clock;

namespace {

// What each model trains with when no flag says otherwise: the MLP keeps the tutorials' settings;
// the CNN gets the recipe that takes it past 98% on the digits in 5 epochs (docs/results/cnn.md).
struct Recipe {
  std::string optimizer;
  double lr;
  double lr_decay;
  std::size_t batch_size;
  bool normalize;
};

Recipe recipe_for(const std::string& model) {
  if (model == "cnn") return {"adam", 0.002, 0.6, 64, true};
  return {"sgd", 0.5, 1.0, 128, false};
}

std::string describe(const Recipe& r) {
  std::ostringstream out;
  out << (r.optimizer == "adam" ? "Adam" : "SGD") << ", lr " << r.lr;
  if (r.lr_decay != 1.0) out << " ×" << r.lr_decay << " per epoch";
  out << ", batch " << r.batch_size << ", " << (r.normalize ? "normalized inputs" : "[0, 1] inputs");
  return out.str();
}

struct Settings {
  std::string dataset = "mnist", data_dir, device = "auto", model = "mlp", hidden, channels = "32,64";
  Recipe recipe = recipe_for("mlp");
  std::vector<std::string> overridden;  // the recipe's flags given on the command line
  int epochs = 5;
  std::size_t eval_batch_size = 256, workers = 2;
  double momentum = 0, weight_decay = 0;
  std::uint64_t seed = 0;
  bool no_shuffle = false, cuda_graph = true, preload = false;
  std::string step = "auto";
  int threads = 1;
  bool distributed = false;       // one rank of an mpirun job (docs/distributed.md)
  std::size_t micro_batches = 1;  // gradient accumulation: the batch split into this many
  bool log_step_losses = false;
  long long val_size = -1;  // -1: a sixth of the training images
  std::string json_log, save, resume, init, plot;
  bool is_cnn() const { return model == "cnn"; }
};

std::vector<std::int64_t> parse_sizes(const std::string& option, const std::string& text, const char* example) {
  std::vector<std::int64_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 20))
      throw UsageError(option + " " + text + ": expected positive sizes separated by commas, e.g. " + example);
    sizes.push_back(v);
  }
  return sizes;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// ---- validate: every option checked before any file is touched ---------------------------------
struct Shapes {
  std::vector<std::int64_t> hidden, channels;
};

Shapes validate(const Settings& s) {
  if (s.model != "mlp" && s.model != "cnn") throw UsageError("--model " + s.model + ": expected mlp or cnn");
  try {
    data::dataset_spec(s.dataset);
  } catch (const ValueError& e) {
    throw UsageError("--dataset " + s.dataset + ": " + e.what());
  }
  const Recipe& r = s.recipe;
  if (r.optimizer != "sgd" && r.optimizer != "adam")
    throw UsageError("--optimizer " + r.optimizer + ": expected sgd or adam");
  if (!std::isfinite(r.lr) || r.lr <= 0) throw UsageError("--lr must be a positive number");
  if (!(r.lr_decay > 0 && r.lr_decay <= 1)) throw UsageError("--lr-decay must be in (0, 1]");
  if (r.batch_size == 0) throw UsageError("--batch-size must be positive");
  if (!(s.momentum >= 0 && s.momentum < 1)) throw UsageError("--momentum must be in [0, 1)");
  if (!(s.weight_decay >= 0)) throw UsageError("--weight-decay must be non-negative");
  if (s.step != "auto" && s.step != "fused" && s.step != "autograd")
    throw UsageError("--step " + s.step + ": expected auto, fused or autograd");
  if (s.step == "fused" && s.is_cnn()) throw UsageError("--step fused trains the MLP only; the CNN runs on autograd");
  if (!s.resume.empty() && !s.init.empty()) throw UsageError("--resume and --init cannot be used together");
  if (s.micro_batches == 0 || r.batch_size % s.micro_batches != 0)
    throw UsageError("--micro-batches " + std::to_string(s.micro_batches) + ": must divide the batch size (" +
                     std::to_string(r.batch_size) + ")");
  if (s.data_dir.empty())
    throw UsageError("--dataset " + s.dataset + " has no default folder: give --data FOLDER with its four IDX files");
  if (!s.plot.empty() && (s.plot.size() < 4 || s.plot.substr(s.plot.size() - 4) != ".svg"))
    throw UsageError("--plot " + s.plot + ": the picture is written as SVG; give a name ending in .svg");
  // Hidden widths default to the tutorials': 32 for the MLP, 128 for the CNN's dense layer.
  Shapes shapes{parse_sizes("--hidden", s.hidden.empty() ? (s.is_cnn() ? "128" : "32") : s.hidden, "32 or 512,256"),
                parse_sizes("--channels", s.channels, "32,64")};
  if (s.is_cnn() && (shapes.hidden.size() != 1 || shapes.channels.size() != 2))
    throw UsageError("--model cnn takes one --hidden width (e.g. 128) and two --channels (e.g. 32,64)");
  return shapes;
}

Device choose_device(const Settings& s, std::string& reason) {
  if (s.distributed && (s.device == "auto" || s.device == "cuda")) {  // each rank its own GPU, or the CPU
    const Device device = s.device == "cuda" ? Device::cuda(dist::local_rank() % std::max(1, cuda::device_count()))
                                             : dist::default_device();
    if (device.is_cuda()) require_usable(device);
    reason = device.str() + " (rank " + std::to_string(dist::rank()) + " of " + std::to_string(dist::world_size()) +
             ", local rank " + std::to_string(dist::local_rank()) + ")";
    return device;
  }
  if (s.device == "auto") {
    reason = Device::best_reason();
    return Device::best();
  }
  try {
    const Device device = Device::parse(s.device);
    require_usable(device);
    reason = device.str() + " (--device " + s.device + ")";
    return device;
  } catch (const Error& e) {
    throw UsageError("--device " + s.device + ": " + e.what());
  }
}

// ---- build_run: data, model, optimizer, loaders, and what a resume restores --------------------
struct Run {
  Device device;
  std::string device_reason;
  data::ClassificationData data;
  std::shared_ptr<const data::Dataset> train_set, val_set;
  std::size_t val_size = 0;
  Shapes shapes;
  apps::ModelCard card;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  int start_epoch = 0;
  data::Normalization norm;
  std::unique_ptr<data::DataLoader> train_loader, val_loader, test_loader;
  std::unique_ptr<data::DeviceLoader> streamed, val_batches, test_batches;
  std::optional<data::PreloadedLoader> preloaded;
  data::BatchSource* train_batches = nullptr;
  std::unique_ptr<train::FusedMlpStep> mlp_step;
  std::unique_ptr<dist::GradientReducer> reducer;  // --distributed, on the autograd path
  int world = 1;                                   // ranks training together (1 without --distributed)
};

// The Dropout layers, in order, for their stream positions (an exact resume needs them).
std::vector<nn::Dropout*> dropouts(nn::Module& model) {
  std::vector<nn::Dropout*> out;
  for (const auto& [name, child] : model.named_children()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(child.get())) out.push_back(d);
    for (nn::Dropout* inner : dropouts(*child)) out.push_back(inner);
  }
  return out;
}

std::string dropout_offsets(nn::Module& model) {
  std::string text;
  for (nn::Dropout* d : dropouts(model)) text += (text.empty() ? "" : ",") + std::to_string(d->offset());
  return text;
}

void restore_dropout_offsets(nn::Module& model, const std::string& text) {
  std::stringstream in(text);
  std::string item;
  for (nn::Dropout* d : dropouts(model))
    if (std::getline(in, item, ',')) d->set_offset(std::stoull(item));
}

void load_data(const Settings& s, Run& run) {
  run.data = data::load_classification(s.data_dir, data::dataset_spec(s.dataset));
  const std::size_t n_all = run.data.train->size();
  run.val_size = s.val_size < 0 ? n_all / 6 : static_cast<std::size_t>(s.val_size);
  if (run.val_size >= n_all)
    throw UsageError("--val-size " + std::to_string(run.val_size) + ": must be smaller than the " +
                     std::to_string(n_all) + " training images");
  run.train_set = run.data.train;
  run.val_set = run.data.test;
  if (run.val_size > 0) {
    const auto parts = data::random_split(run.data.train, {n_all - run.val_size, run.val_size}, s.seed);
    run.train_set = parts[0];
    run.val_set = parts[1];
  }
  const Shape image = run.data.train->sample_shape();
  if (s.is_cnn() && (image[0] < 6 || image[1] < 6))
    throw UsageError("--model cnn needs images of at least 6×6 pixels; " + s.data_dir + " has " + shape_str(image));
  run.norm = s.recipe.normalize ? run.data.normalization : data::Normalization{};
  run.card = {.kind = s.model,
              .height = image[0],
              .width = image[1],
              .classes = run.data.class_names,
              .dataset = s.dataset,
              .preprocess = run.data.spec.preprocess,
              .normalization = run.norm};
}

void build_model(const Settings& s, Run& run) {
  Generator init_generator(s.seed);
  const apps::ModelCard& c = run.card;
  run.model = s.is_cnn() ? nn::cnn(nn::CnnShape{.c1 = run.shapes.channels[0],
                                                .c2 = run.shapes.channels[1],
                                                .hidden = run.shapes.hidden[0],
                                                .height = c.height,
                                                .width = c.width,
                                                .classes = run.data.num_classes},
                                   &init_generator, FusionOptions::all())
                         : nn::mlp(c.height * c.width, run.shapes.hidden, run.data.num_classes, &init_generator,
                                   FusionOptions::all());
  if (!s.init.empty()) {
    try {
      nn::load(*run.model, s.init);
    } catch (const Error& e) {
      throw UsageError(std::string("--init ") + e.what());
    }
  }
  run.model->to(run.device);
  if (s.distributed) {
    // One model everywhere: rank 0's initialization. Dropout draws from a stream of its own on
    // each rank (far apart: 2^40 positions), or every rank would drop the same units.
    std::vector<Tensor> state;
    for (const auto& [name, t] : run.model->state_dict()) state.push_back(t);
    dist::broadcast_parameters(state);
    for (nn::Dropout* d : dropouts(*run.model))
      d->set_offset(d->offset() + (static_cast<std::uint64_t>(dist::rank()) << 40));
  }
  const optim::GroupOptions options{.lr = s.recipe.lr, .momentum = s.momentum, .weight_decay = s.weight_decay};
  if (s.recipe.optimizer == "sgd")
    run.optimizer = std::make_unique<optim::SGD>(run.model->parameters(), options);
  else
    run.optimizer = std::make_unique<optim::Adam>(run.model->parameters(), options);
}

void resume(const Settings& s, Run& run) {
  apps::LoadedCheckpoint loaded;
  try {
    loaded = apps::load_checkpoint(s.resume, *run.model, *run.optimizer);
  } catch (const Error& e) {
    throw UsageError(std::string("--resume ") + e.what());
  }
  auto& meta = loaded.metadata;
  auto differs = [&](const char* key, const std::string& now) { return meta.count(key) && meta[key] != now; };
  if (differs("model_kind", s.model))
    throw UsageError("--resume " + s.resume + ": the checkpoint holds a " + meta["model_kind"] + ", not a " + s.model);
  if (differs("dataset", s.dataset))
    throw UsageError("--resume " + s.resume + ": the model was trained on " + meta["dataset"] + ", not " + s.dataset +
                     " (--dataset)");
  run.start_epoch = meta.count("epoch") ? std::atoi(meta["epoch"].c_str()) : 0;
  if (meta.count("dropout_offsets")) restore_dropout_offsets(*run.model, meta["dropout_offsets"]);
  if (s.distributed)  // rank 0 saved its own stream positions; each rank's are 2^40 further per rank
    for (nn::Dropout* d : dropouts(*run.model))
      d->set_offset(d->offset() + (static_cast<std::uint64_t>(dist::rank()) << 40));
  const std::string saved_world = meta.count("world_size") ? meta["world_size"] : "1";
  if (saved_world != std::to_string(run.world))
    std::printf("note: --resume: the checkpoint was trained on %s rank(s) with batch %s each; this run has %d\n",
                saved_world.c_str(), meta.count("batch_size") ? meta["batch_size"].c_str() : "?", run.world);
  if (differs("batch_size", std::to_string(s.recipe.batch_size)))
    std::printf("note: --resume: the checkpoint was trained with batch %s, this run uses %zu\n",
                meta["batch_size"].c_str(), s.recipe.batch_size);
  // The resumed run continues with the rates given now (the checkpoint's are overwritten).
  for (auto& group : run.optimizer->param_groups()) group.options.lr = group.initial_lr = s.recipe.lr;
}

void build_loaders(const Settings& s, Run& run) {
  // On a GPU, batches travel as u8 from pinned staging and are normalized there; on the CPU the
  // loader's workers normalize them, so the training thread only trains.
  const bool pinned = run.device.is_cuda();
  const std::optional<data::Normalization> host_norm =
      run.device.is_cpu() ? std::optional<data::Normalization>(run.norm) : std::nullopt;
  const bool flat = !s.is_cnn();  // the MLP takes images as [B, H·W], the CNN as [B, 1, H, W]
  // --distributed: each rank its share of every epoch (data::Shard): training padded to equal
  // shares, evaluation not (each image counted once, the sums reduced over ranks).
  const auto rank = static_cast<std::size_t>(dist::rank()), world = static_cast<std::size_t>(run.world);
  run.train_loader =
      std::make_unique<data::DataLoader>(run.train_set, data::LoaderOptions{.batch_size = s.recipe.batch_size,
                                                                            .shuffle = !s.no_shuffle,
                                                                            .seed = s.seed,
                                                                            .num_workers = s.workers,
                                                                            .pin_memory = pinned,
                                                                            .flatten = flat,
                                                                            .normalize = host_norm,
                                                                            .shard = {rank, world, true}});
  auto eval_loader = [&](std::shared_ptr<const data::Dataset> set) {
    return std::make_unique<data::DataLoader>(set, data::LoaderOptions{.batch_size = s.eval_batch_size,
                                                                       .shuffle = false,
                                                                       .num_workers = s.workers,
                                                                       .pin_memory = pinned,
                                                                       .flatten = flat,
                                                                       .normalize = host_norm,
                                                                       .shard = {rank, world, false}});
  };
  if (const std::size_t last = run.train_loader->samples_per_epoch() % s.recipe.batch_size;
      s.micro_batches > 1 && last % s.micro_batches != 0)
    throw UsageError(detail::concat("--micro-batches ", s.micro_batches, ": the epoch's last batch has ", last,
                                    " images, which do not split into equal micro-batches; change --val-size or "
                                    "--batch-size"));
  run.val_loader = eval_loader(run.val_set);
  run.test_loader = eval_loader(run.data.test);
  run.streamed = std::make_unique<data::DeviceLoader>(*run.train_loader, run.device, run.norm);
  run.val_batches = std::make_unique<data::DeviceLoader>(*run.val_loader, run.device, run.norm);
  run.test_batches = std::make_unique<data::DeviceLoader>(*run.test_loader, run.device, run.norm);
  // --preload: the training images live on the device and each batch is gathered there (the same
  // batches in the same order as streaming them), the baseline the streamed pipeline is held to.
  if (s.preload) run.preloaded.emplace(*run.train_loader, run.device, run.norm);
  run.train_batches = run.preloaded ? static_cast<data::BatchSource*>(&*run.preloaded) : run.streamed.get();
  // The MLP trains through the fused step (the whole step as fused kernels, replayed from a CUDA
  // graph on a GPU) unless --step autograd or EMBER_FUSION=0 asks for the op-by-op path. Nothing
  // here reads the weights' gradients, so plain SGD's update may run inside the GEMMs (CPU).
  const bool fused = !s.is_cnn() && (s.step == "fused" || (s.step == "auto" && fusion_enabled()));
  if (fused)
    run.mlp_step =
        std::make_unique<train::FusedMlpStep>(*run.model, *run.optimizer, s.recipe.batch_size,
                                              train::FusedMlpStepOptions{.gemm_epilogues = true,
                                                                         .cuda_graph = s.cuda_graph,
                                                                         .reduce_across_ranks = s.distributed,
                                                                         .micro_batches = s.micro_batches,
                                                                         .sgd_in_gemm = true});
  else if (s.distributed)
    run.reducer = std::make_unique<dist::GradientReducer>(run.model->parameters());
}

// What every rank must agree on before training: the options that shape the model, the data
// and the arithmetic (the paths of files may differ between machines; their contents are
// checked by the parameters' hash after loading).
std::string options_fingerprint(const Settings& s, const Run& run) {
  std::ostringstream out;
  out << "model=" << s.model << ";hidden=" << join(run.shapes.hidden) << ";channels=" << join(run.shapes.channels)
      << ";dataset=" << s.dataset << ";images=" << run.data.train->size() << "+" << run.data.test->size()
      << ";val_size=" << run.val_size << ";optimizer=" << s.recipe.optimizer << ";lr=" << s.recipe.lr
      << ";lr_decay=" << s.recipe.lr_decay << ";batch_size=" << s.recipe.batch_size
      << ";normalize=" << s.recipe.normalize << ";momentum=" << s.momentum << ";weight_decay=" << s.weight_decay
      << ";seed=" << s.seed << ";epochs=" << s.epochs << ";shuffle=" << !s.no_shuffle << ";step=" << s.step
      << ";fused=" << (run.mlp_step != nullptr) << ";micro_batches=" << s.micro_batches
      << ";cuda_graph=" << s.cuda_graph << ";preload=" << s.preload
      << ";device=" << (run.device.is_cuda() ? "cuda" : "cpu") << ";resume=" << !s.resume.empty()
      << ";init=" << !s.init.empty();
  return out.str();
}

Run build_run(const Settings& s, const Shapes& shapes) {
  Run run;
  run.world = s.distributed ? dist::world_size() : 1;
  run.shapes = shapes;
  run.device = choose_device(s, run.device_reason);
  load_data(s, run);
  build_model(s, run);
  if (!s.resume.empty()) resume(s, run);
  build_loaders(s, run);
  if (s.distributed) {
    try {
      dist::check_same_on_all_ranks("options", options_fingerprint(s, run));
    } catch (const dist::DistError& e) {
      throw UsageError(std::string("--distributed: ") + e.what());
    }
    dist::check_identical("the parameters at the start", run.model->parameters());
  }
  return run;
}

void print_header(const Settings& s, const Run& run) {
  const std::size_t n_all = run.data.train->size();
  std::printf("device: %s\n", run.device_reason.c_str());
  if (run.world > 1)
    std::printf("distributed: %d ranks, batch %zu each (%zu in all per step), gradients averaged %s\n", run.world,
                s.recipe.batch_size, s.recipe.batch_size * static_cast<std::size_t>(run.world),
                run.mlp_step ? "between backward and update" : "in buckets during backward");
  if (s.micro_batches > 1)
    std::printf("micro-batches: each batch of %zu in %zu micro-batches of %zu, gradients summed\n", s.recipe.batch_size,
                s.micro_batches, s.recipe.batch_size / s.micro_batches);
  std::printf("data: %s, %zu training images (%zu for training, %s), %zu test images, %lld classes, from %s\n",
              run.data.spec.title.c_str(), n_all, run.train_set->size(),
              run.val_size > 0 ? (std::to_string(run.val_size) + " for validation").c_str()
                               : "validation on the test set (--val-size 0)",
              run.data.test->size(), static_cast<long long>(run.data.num_classes), s.data_dir.c_str());
  std::printf("%s\nparameters: %lld\n", run.model->repr().c_str(),
              static_cast<long long>(run.model->parameter_count()));
  if (run.preloaded)
    std::printf("data: training images preloaded on %s (%.1f MB)\n", run.device.str().c_str(),
                static_cast<double>(run.preloaded->bytes_on_device()) / 1e6);
  std::string changed;
  for (const std::string& flag : s.overridden) changed += (changed.empty() ? "" : " ") + flag;
  std::printf("recipe: %s%s\n", describe(s.recipe).c_str(),
              changed.empty() ? (" (the " + s.model + " default)").c_str() : (" (set by " + changed + ")").c_str());
  std::printf(
      "optimizer: %s, lr %g, momentum %g, weight decay %g; batch %zu; %s inputs; %d CPU thread%s\n",
      run.optimizer->type_name().c_str(), s.recipe.lr, s.momentum, s.weight_decay, s.recipe.batch_size,
      s.recipe.normalize ? detail::concat("normalized (", run.norm.mean, ", ", run.norm.std, ")").c_str() : "[0, 1]",
      s.threads, s.threads == 1 ? "" : "s");
  std::fflush(stdout);
}

// ---- train_epoch: one pass over the training data ----------------------------------------------
struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Mean loss and accuracy over a loader; sums stay on the device and are read once (summed over
// the ranks first when distributed: each evaluated its share).
EvalResult evaluate(nn::Module& model, data::BatchSource& loader, std::size_t count, bool distributed) {
  NoGradGuard no_grad;
  model.eval();
  loader.start_epoch(0);
  const Device device = loader.device();
  Tensor loss_sum = zeros({}, {.device = device}), correct = zeros({}, {.device = device});
  while (auto batch = loader.next()) {
    const Tensor logits = model(batch->x);
    const double rows = static_cast<double>(batch->x.size(0));
    add_(loss_sum, cross_entropy(logits, batch->y) * rows);
    add_(correct, count_equal(argmax(logits), batch->y).to(DType::f32));
  }
  if (distributed) {
    dist::all_reduce(loss_sum);
    dist::all_reduce(correct);
  }
  return {loss_sum.item<double>() / static_cast<double>(count), correct.item<double>() / static_cast<double>(count)};
}

void progress(std::size_t done, std::size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::printf("\r  [%.*s%.*s] %zu/%zu", filled, "==============================", width - filled,
              "                              ", done, total);
  std::fflush(stdout);
}

// A non-finite loss: where it happened, and the last good checkpoint.
struct NonFiniteLoss : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Rows m, m + k, m + 2k, ... of a batch: micro-batch m of k, the rows rank m of k ranks takes.
Tensor strided_rows(const Tensor& t, std::size_t m, std::size_t k) {
  Shape split = t.shape(), out = t.shape();
  out[0] = split[0] / static_cast<std::int64_t>(k);
  split[0] = out[0];
  split.insert(split.begin() + 1, static_cast<std::int64_t>(k));
  return slice(t.reshape(split), 1, static_cast<std::int64_t>(m), 1).reshape(out);
}

// One step through autograd: forward, backward, the gradients averaged over the ranks (in
// buckets during backward), the update. With --micro-batches K each micro-batch's backward adds
// into .grad and the sum is divided by K. Returns the step's mean loss (a scalar on the device)
// and adds the batch's summed loss to `loss_sum`.
Tensor autograd_step(Run& run, const data::DeviceBatch& batch, std::size_t k, Tensor& loss_sum) {
  run.optimizer->zero_grad();
  Tensor step_loss = zeros({}, {.device = run.device});
  for (std::size_t m = 0; m < k; ++m) {
    const Tensor x = k > 1 ? strided_rows(batch.x, m, k) : batch.x;
    const Tensor y = k > 1 ? strided_rows(batch.y, m, k) : batch.y;
    if (run.reducer) run.reducer->set_enabled(m + 1 == k);  // one reduction, of the sum, at the last
    Tensor loss;
    {
      ProfileRange range("forward");
      loss = cross_entropy((*run.model)(x), y);
    }
    {
      ProfileRange range("backward");
      loss.backward();
    }
    NoGradGuard no_grad;
    add_(loss_sum, loss.detach() * static_cast<double>(x.size(0)));
    add_(step_loss, loss.detach());
  }
  if (run.reducer) {
    ProfileRange range("gradient reduction");
    run.reducer->finish();
  }
  if (k > 1) {
    NoGradGuard no_grad;
    for (const Tensor& p : run.model->parameters()) {
      Tensor g = p.grad();
      if (g.defined()) mul_(g, 1.0 / static_cast<double>(k));
    }
    mul_(step_loss, 1.0 / static_cast<double>(k));
  }
  {
    ProfileRange range("optimizer");
    run.optimizer->step();
  }
  return step_loss;
}

// What an epoch's training left to report: the summed loss (on the device; read once by the
// caller) and, with --log-step-losses, each step's mean loss on this rank.
struct EpochTraining {
  Tensor loss_sum;
  std::vector<double> step_losses;
};

// Trains one epoch. `non_finite` names the step of a non-finite loss where the device lets it be
// known at once.
EpochTraining train_epoch(const Settings& s, Run& run, int epoch, bool tty,
                          std::function<NonFiniteLoss(const std::string&)> non_finite) {
  run.model->train();
  run.train_batches->start_epoch(epoch);
  EpochTraining out{zeros({}, {.device = run.device}), {}};
  if (run.mlp_step) run.mlp_step->reset_loss_sum();
  const std::size_t total_steps = run.train_loader->batches_per_epoch();
  std::size_t step = 0;
  while (auto batch = run.train_batches->next()) {
    Tensor step_loss;
    if (run.mlp_step) {
      try {
        ProfileRange range("fused step");
        run.mlp_step->step(batch->x, batch->y);
      } catch (const NonFiniteError&) {  // the CPU finds it at its step; CUDA at the epoch's end
        throw non_finite(detail::concat(", step ", step));
      }
      step_loss = run.mlp_step->batch_loss();
    } else {
      step_loss = autograd_step(run, *batch, s.micro_batches, out.loss_sum);
      // On the CPU reading the loss costs nothing, so a non-finite one is caught at its step; on
      // CUDA the sum is checked once per epoch instead of synchronizing every step.
      if (run.device.is_cpu() && !std::isfinite(step_loss.item<double>()))
        throw non_finite(detail::concat(", step ", step));
    }
    if (s.log_step_losses) out.step_losses.push_back(step_loss.item<double>());
    ++step;
    if (tty) progress(step, total_steps);
  }
  if (run.mlp_step) out.loss_sum = run.mlp_step->loss_sum().clone();
  return out;
}

// ---- saving -------------------------------------------------------------------------------------
void write_json_lines(const std::string& path, const std::vector<nlohmann::json>& lines) {
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

void save(const Settings& s, Run& run, int epochs_done) {
  apps::Metadata model_meta = run.card.to_metadata();
  model_meta["hidden"] = join(run.shapes.hidden);
  if (s.is_cnn()) model_meta["channels"] = join(run.shapes.channels);
  model_meta["epoch"] = std::to_string(epochs_done);
  const apps::Metadata state_meta{{"epoch", std::to_string(epochs_done)},
                                  {"model_kind", s.model},
                                  {"dataset", s.dataset},
                                  {"seed", std::to_string(s.seed)},
                                  {"val_size", std::to_string(run.val_size)},
                                  {"batch_size", std::to_string(s.recipe.batch_size)},
                                  {"shuffle", s.no_shuffle ? "0" : "1"},
                                  {"lr", detail::concat(s.recipe.lr)},
                                  {"lr_decay", detail::concat(s.recipe.lr_decay)},
                                  {"dropout_offsets", dropout_offsets(*run.model)},
                                  {"world_size", std::to_string(run.world)},
                                  {"micro_batches", std::to_string(s.micro_batches)}};
  apps::save_checkpoint(s.save, *run.model, *run.optimizer, model_meta, state_meta);
}

// ---- run_training: validate, build, train epoch by epoch, report -------------------------------
int run_training(const Settings& s) {
  const Shapes shapes = validate(s);
  set_num_threads(s.threads);
  Run run = build_run(s, shapes);
  print_header(s, run);

  int last_saved = run.start_epoch;
  auto non_finite_at = [&](int epoch) {
    return [&s, &last_saved, epoch](const std::string& where) {
      return NonFiniteLoss("non-finite training loss in epoch " + std::to_string(epoch) + where +
                           (s.save.empty() ? std::string()
                                           : "; the last good checkpoint is " + s.save + " (" +
                                                 std::to_string(last_saved) + " epochs)") +
                           ". Try a smaller --lr");
    };
  };
  // The rate of epoch e is lr·decay^e (StepLR with step 1), a resumed run picking up where it was.
  optim::StepLR schedule(*run.optimizer, 1, s.recipe.lr_decay);
  schedule.set_last_epoch(run.start_epoch);
  // The progress bar is for a person at a terminal. Under an MPI launcher each rank's output is a
  // pseudo-terminal whatever the launcher's own output is (mpirun … > log), so a rank cannot tell
  // whether anyone is watching: no bar there, only the epoch lines.
  const bool under_launcher =
      s.distributed || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  const bool tty = ::isatty(STDOUT_FILENO) && !under_launcher;
  std::vector<nlohmann::json> log_lines;
  std::vector<apps::EpochRecord> records;
  for (int epoch = run.start_epoch; epoch < s.epochs; ++epoch) {
    const auto t0 = Clock::now();
    const double gemm_s0 = cpu_gemm_seconds();
    const auto non_finite = non_finite_at(epoch);
    const std::string unknown_step =
        " (on " + run.device.str() + " the loss is checked once per epoch, so the step is not known)";
    if (run.reducer) run.reducer->reset_wait_seconds();
    if (run.mlp_step) run.mlp_step->reset_communication_seconds();
    EpochTraining trained = train_epoch(s, run, epoch, tty, non_finite);
    // Images this epoch, over all ranks (with padded shares, a few seen twice: data::Shard).
    const double images =
        static_cast<double>(run.train_loader->samples_per_epoch() * static_cast<std::size_t>(run.world));
    double train_loss = 0;
    try {
      if (s.distributed) dist::all_reduce(trained.loss_sum);
      train_loss = trained.loss_sum.item<double>() / images;
    } catch (const NonFiniteError&) {  // raised on the device, read here once per epoch
      throw non_finite(unknown_step);
    }
    if (s.distributed && !trained.step_losses.empty()) {  // each step's loss over all ranks: their mean
      Tensor losses = from_vector(trained.step_losses, {static_cast<std::int64_t>(trained.step_losses.size())});
      dist::all_reduce(losses);
      trained.step_losses = mul_(losses, 1.0 / run.world).to_vector<double>();
    }
    const double comm_wait_s = run.reducer    ? run.reducer->wait_seconds()
                               : run.mlp_step ? run.mlp_step->communication_seconds()
                                              : 0.0;
    if (run.mlp_step && epoch == run.start_epoch) {
      std::printf("training step: fused MLP step, %s\n", run.mlp_step->describe().c_str());
      std::fflush(stdout);
    }
    const auto t_train = Clock::now();
    const double gemm_s = cpu_gemm_seconds() - gemm_s0;  // this thread's CPU GEMMs in the training
    if (tty) std::printf("\r%60s\r", "");
    if (!std::isfinite(train_loss)) throw non_finite(unknown_step);
    const data::LoaderStats stats = run.train_batches->epoch_stats();
    const EvalResult val = evaluate(*run.model, *run.val_batches, run.val_set->size(), s.distributed);
    const double train_s = std::chrono::duration<double>(t_train - t0).count();
    const double epoch_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double images_per_s = images / train_s;
    std::printf(
        "Epoch [%d], val_loss: %.4f, val_acc: %.4f, train_loss: %.4f, epoch_s: %.2f, images/s: %.0f, "
        "data wait: %.1f%%%s\n",
        epoch, val.loss, val.accuracy, train_loss, epoch_s, images_per_s, 100 * stats.wait_s / train_s,
        s.distributed ? detail::concat(", communication wait: ", std::fixed, std::setprecision(1),
                                       100 * comm_wait_s / train_s, "%")
                            .c_str()
                      : "");
    std::fflush(stdout);
    // Every rank must hold the same parameters after every epoch; a hash of them says so.
    const std::uint64_t params_hash = dist::hash_tensors(run.model->parameters());
    if (s.distributed)
      dist::check_identical(detail::concat("the parameters after epoch ", epoch), run.model->parameters());
    log_lines.push_back({{"epoch", epoch},
                         {"train_loss", train_loss},
                         {"val_loss", val.loss},
                         {"val_acc", val.accuracy},
                         {"epoch_s", epoch_s},
                         {"images_per_s", images_per_s},
                         {"input_wait_s", stats.wait_s},
                         {"train_s", train_s},
                         {"step", run.mlp_step ? "fused" : "autograd"},
                         {"graph_kernels", run.mlp_step ? run.mlp_step->graph_kernel_nodes() : 0},
                         {"step_launches", run.mlp_step ? run.mlp_step->step_launches() : 0},
                         {"graph_replays", run.mlp_step ? run.mlp_step->graph_replays() : 0},
                         {"ranks", run.world},
                         {"communication_wait_s", comm_wait_s},
                         {"params_hash", detail::concat(std::hex, params_hash)}});
    // On the CPU, the training's seconds in GEMMs (gemm_s / train_s is their share; on CUDA they run on the device).
    if (run.device.is_cpu()) log_lines.back()["gemm_s"] = gemm_s;
    if (s.log_step_losses) log_lines.back()["step_losses"] = trained.step_losses;
    records.push_back({epoch, train_loss, val.loss, val.accuracy});
    // Rank 0 alone writes files (the others hold the same parameters: checked above).
    if (!s.json_log.empty() && dist::is_main()) write_json_lines(s.json_log, log_lines);
    if (!s.save.empty()) {
      if (dist::is_main()) save(s, run, epoch + 1);
      last_saved = epoch + 1;
    }
    schedule.step();
    if (!s.plot.empty() && dist::is_main())
      apps::write_svg_plot(
          s.plot, records,
          run.data.spec.title + " " + s.model + " " + join(shapes.hidden) + " (" + run.device.str() + ")");
  }

  const EvalResult result = evaluate(*run.model, *run.test_batches, run.data.test->size(), s.distributed);
  std::printf("test_loss: %.4f, test_acc: %.4f\n", result.loss, result.accuracy);
  log_lines.push_back({{"test_loss", result.loss}, {"test_acc", result.accuracy}, {"device", run.device.str()}});
  if (!s.json_log.empty() && dist::is_main()) write_json_lines(s.json_log, log_lines);
  return 0;
}

// The recipe's flags override the model's recipe one by one; the rest comes from it.
void apply_recipe(Settings& s, const CLI::App& app, const Recipe& given) {
  const Recipe base = recipe_for(s.model);
  auto pick = [&](const char* flag, auto& field, const auto& from_flag, const auto& from_recipe) {
    if (app.count(flag)) {
      field = from_flag;
      s.overridden.push_back(flag);
    } else {
      field = from_recipe;
    }
  };
  pick("--optimizer", s.recipe.optimizer, given.optimizer, base.optimizer);
  pick("--lr", s.recipe.lr, given.lr, base.lr);
  pick("--lr-decay", s.recipe.lr_decay, given.lr_decay, base.lr_decay);
  pick("--batch-size", s.recipe.batch_size, given.batch_size, base.batch_size);
  const bool normalize_given = app.count("--normalize") + app.count("--no-normalize") > 0;
  s.recipe.normalize = normalize_given ? given.normalize : base.normalize;
  if (normalize_given) s.overridden.push_back(given.normalize ? "--normalize" : "--no-normalize");
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  Recipe given = s.recipe;
  const Recipe mlp = recipe_for("mlp"), cnn = recipe_for("cnn");
  CLI::App app{
      "mnist_train: train an image classifier (the tutorials' 784-32-10 MLP by default, or the CNN of "
      "PyTorch's MNIST example) on MNIST, Fashion-MNIST or other IDX files, on the best device"};
  app.footer("Recipes (what each flag left out defaults to):\n  --model mlp: " + describe(mlp) +
             "\n  --model cnn: " + describe(cnn) +
             "\nData: --dataset mnist reads --data, else $MNIST_DIR, else data/mnist; fashion-mnist reads --data, "
             "else /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist); idx needs --data.");
  app.add_option("--dataset", s.dataset,
                 "mnist, fashion-mnist, or idx (any four IDX files; class names from an "
                 "optional classes.txt beside them)")
      ->capture_default_str();
  app.add_option("--data", s.data_dir, "folder with the four IDX files (default: see below)");
  app.add_option("--device", s.device, "auto (CUDA when usable, else the CPU), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--model", s.model, "mlp (the tutorials' 784-32-10) or cnn (conv 32, conv 64, pool, dense 128)")
      ->capture_default_str();
  app.add_option("--hidden", s.hidden,
                 "hidden layer widths: e.g. 32 or 512,256 for the MLP (default 32); the CNN's "
                 "dense layer (default 128)");
  app.add_option("--channels", s.channels, "the CNN's two convolution widths")->capture_default_str();
  app.add_option("--epochs", s.epochs, "epochs to train")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", given.batch_size, "training batch size (recipe: mlp 128, cnn 64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-batch-size", s.eval_batch_size, "evaluation batch size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", given.lr, "learning rate (recipe: mlp 0.5, cnn 0.002)");
  app.add_option("--optimizer", given.optimizer, "sgd or adam (recipe: mlp sgd, cnn adam)");
  app.add_option("--momentum", s.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", s.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--lr-decay", given.lr_decay,
                 "multiply the learning rate by this after every epoch, StepLR "
                 "(recipe: mlp 1, cnn 0.6)");
  app.add_option("--seed", s.seed, "seed of the initialization, the split and the data order")->capture_default_str();
  app.add_flag("--no-shuffle", s.no_shuffle, "keep the training data in file order");
  app.add_option("--workers", s.workers, "data loader threads (0: load on the training thread)")->capture_default_str();
  app.add_option("--threads", s.threads, "CPU compute threads (OpenBLAS)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--val-size", s.val_size,
                 "validation images split off the training set (default: a sixth; 0: validate on the test set)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--normalize,!--no-normalize", given.normalize,
               "scale inputs by the dataset's mean and std (MNIST 0.1307, 0.3081) instead of pixel/255 "
               "(recipe: mlp off, cnn on)");
  app.add_option("--step", s.step,
                 "auto (the MLP through the fused step unless EMBER_FUSION=0), fused, or autograd "
                 "(op by op, as written in PyTorch)")
      ->capture_default_str();
  app.add_option("--cuda-graph", s.cuda_graph, "on CUDA, capture the fused step in a CUDA graph and replay it")
      ->capture_default_str();
  app.add_flag("--preload", s.preload,
               "keep the training images on the device and gather each batch there, "
               "instead of streaming batches from host memory");
  app.add_flag("--distributed", s.distributed,
               "one rank of a data-parallel run started by mpirun (e.g. mpirun -np 2 --bind-to none "
               "mnist_train --distributed): each rank trains on its share of every batch, gradients averaged; "
               "rank 0 prints and writes the files");
  app.add_option("--micro-batches", s.micro_batches,
                 "split each batch into this many micro-batches (rows m, m+K, ...) and sum their gradients: "
                 "one process doing what K ranks do")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--log-step-losses", s.log_step_losses, "add each step's loss to the epoch's --json-log line");
  app.add_option("--json-log", s.json_log, "write one JSON object per epoch, then the test result, to this file");
  app.add_option("--save", s.save,
                 "after every epoch save the model to this safetensors file (it loads in PyTorch "
                 "as it is) and the training state beside it (NAME.state.safetensors)");
  app.add_option("--resume", s.resume, "continue from a checkpoint written by --save (model, optimizer, epoch, order)");
  app.add_option("--init", s.init, "start from these weights (a safetensors state dict, e.g. exported from PyTorch)");
  app.add_option("--plot", s.plot, "write the loss and accuracy curves to this SVG file");
  return apps::run_cli(app, argc, argv, [&] {
    apply_recipe(s, app, given);
    if (!app.count("--data")) {
      const char* env = std::getenv("MNIST_DIR");
      const data::DatasetSpec* spec = nullptr;
      try {
        spec = &data::dataset_spec(s.dataset);
      } catch (const ValueError&) {
      }  // validate() reports an unknown dataset
      if (s.dataset == "mnist" && env && *env)
        s.data_dir = env;
      else if (spec)
        s.data_dir = spec->default_folder;
    }
    if (s.distributed) {
      try {
        dist::init();
      } catch (const dist::DistError& e) {
        throw UsageError(std::string("--distributed: ") + e.what());
      }
      // Rank 0 alone prints; the others keep stderr for their errors.
      if (!dist::is_main() && !std::freopen("/dev/null", "w", stdout))
        throw IoError("--distributed: cannot silence this rank's output");
    }
    const int code = run_training(s);
    dist::finalize();
    return code;
  });
}
