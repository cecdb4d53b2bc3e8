// mnist_train: trains the tutorials' image classifiers — the 784-32-10 MLP and the CNN of
// PyTorch's MNIST example — on MNIST, Fashion-MNIST or any dataset in their IDX layout, on the
// best device (or the one asked for), with the tutorials' output, and saves checkpoints that
// PyTorch loads as they are.
//
// Reading order: the recipes (what each model trains with), validate (every option checked before
// any file is touched), build_run (data, model, optimizer, the training step), then run_training:
// the library's loop (train/loop.h) with this program's report after every epoch. The stack below
// it: data/ (the loaders), layers/ (the model), optim/, train/ (steps, loop, checkpoints).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "apps/common/model_card.h"
#include "apps/common/plot.h"
#include "apps/common/program.h"
#include "core/base/fusion.h"
#include "data/classification_loaders.h"
#include "distributed/dist.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/fused_mlp_step.h"
#include "train/log.h"
#include "train/loop.h"

using namespace ember;
using apps::UsageError;

namespace {

// What each model trains with when no flag says otherwise: the MLP keeps the tutorials' settings;
// the CNN gets the recipe that takes it past 98% on the digits in 5 epochs (docs/results/cnn.md).
// Both opt into every fused path (core/base/fusion.h) unless EMBER_FUSION=0 turns them off.
struct Recipe {
  std::string optimizer;
  double lr, lr_decay;
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
  int epochs = 5, threads = 1;
  std::size_t eval_batch_size = 256, workers = 2, micro_batches = 1;
  double momentum = 0, weight_decay = 0;
  std::uint64_t seed = 0;
  bool no_shuffle = false, cuda_graph = true, preload = false, distributed = false, log_step_losses = false;
  std::string step = "auto";
  long long val_size = -1;  // -1: a sixth of the training images
  std::string json_log, save, resume, init, plot;
  bool is_cnn() const { return model == "cnn"; }
};

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
  Shapes shapes{
      apps::parse_sizes("--hidden", s.hidden.empty() ? (s.is_cnn() ? "128" : "32") : s.hidden, "32 or 512,256"),
      apps::parse_sizes("--channels", s.channels, "32,64")};
  if (s.is_cnn() && (shapes.hidden.size() != 1 || shapes.channels.size() != 2))
    throw UsageError("--model cnn takes one --hidden width (e.g. 128) and two --channels (e.g. 32,64)");
  return shapes;
}

Device choose_device(const Settings& s, std::string& reason) {
  if (s.distributed && (s.device == "auto" || s.device == "cuda")) {  // each rank its own GPU, or the CPU
    const Device device = s.device == "cuda" ? Device::cuda(dist::local_rank() % std::max(1, cuda::device_count()))
                                             : dist::default_device();
    if (device.is_cuda()) require_usable(device);
    reason = detail::concat(device.str(), " (rank ", dist::rank(), " of ", dist::world_size(), ", local rank ",
                            dist::local_rank(), ")");
    return device;
  }
  return apps::choose_device("--device", s.device, reason);
}

// ---- build_run: data, model, optimizer, the training step, and what a resume restores ----------
struct Run {
  Device device;
  std::string device_reason;
  data::ClassificationData data;
  std::size_t val_size = 0;
  apps::ModelCard card;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<data::ClassificationLoaders> loaders;
  std::unique_ptr<train::Step> step;
  bool fused = false;  // the fused MLP step (train::FusedMlpStep), else autograd
  int start_epoch = 0, world = 1;
};

void build_model(const Settings& s, const Shapes& shapes, Run& run) {
  const Shape image = run.data.train->sample_shape();
  if (s.is_cnn() && (image[0] < 6 || image[1] < 6))
    throw UsageError("--model cnn needs images of at least 6×6 pixels; " + s.data_dir + " has " + shape_str(image));
  const data::Normalization norm = s.recipe.normalize ? run.data.normalization : data::Normalization{};
  run.card = {.kind = s.model,
              .height = image[0],
              .width = image[1],
              .classes = run.data.class_names,
              .dataset = s.dataset,
              .preprocess = run.data.spec.preprocess,
              .normalization = norm};
  Generator init(s.seed);
  const std::int64_t classes = run.data.num_classes;
  run.model = s.is_cnn() ? nn::cnn({.c1 = shapes.channels[0],
                                    .c2 = shapes.channels[1],
                                    .hidden = shapes.hidden[0],
                                    .height = image[0],
                                    .width = image[1],
                                    .classes = classes},
                                   &init, FusionOptions::all())
                         : nn::mlp(image[0] * image[1], shapes.hidden, classes, &init, FusionOptions::all());
  if (!s.init.empty()) try {
      nn::load(*run.model, s.init);
    } catch (const Error& e) {
      throw UsageError(std::string("--init ") + e.what());
    }
  run.model->to(run.device);
  if (s.distributed) train::make_replica(*run.model);  // rank 0's initialization everywhere
  const optim::GroupOptions options{.lr = s.recipe.lr, .momentum = s.momentum, .weight_decay = s.weight_decay};
  if (s.recipe.optimizer == "sgd")
    run.optimizer = std::make_unique<optim::SGD>(run.model->parameters(), options);
  else
    run.optimizer = std::make_unique<optim::Adam>(run.model->parameters(), options);
}

void resume(const Settings& s, Run& run) {
  train::ResumedTraining resumed;
  try {
    resumed = train::resume_training_checkpoint(s.resume, *run.model, *run.optimizer);
  } catch (const Error& e) {
    throw UsageError(std::string("--resume ") + e.what());
  }
  auto& meta = resumed.checkpoint.metadata;
  auto differs = [&](const char* key, const std::string& now) { return meta.count(key) && meta[key] != now; };
  if (differs("model_kind", s.model))
    throw UsageError("--resume " + s.resume + ": the checkpoint holds a " + meta["model_kind"] + ", not a " + s.model);
  if (differs("dataset", s.dataset))
    throw UsageError("--resume " + s.resume + ": the model was trained on " + meta["dataset"] + ", not " + s.dataset +
                     " (--dataset)");
  run.start_epoch = resumed.start_epoch;
  if (s.distributed) train::separate_dropout_streams(*run.model);  // the checkpoint holds rank 0's
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

// The MLP trains through the fused step (the whole step as fused kernels, replayed from a CUDA
// graph on a GPU) unless --step autograd or EMBER_FUSION=0 asks for the op-by-op path. Nothing here
// reads the weights' gradients, so the recipe lets plain SGD's update run inside the GEMMs (CPU).
void build_step(const Settings& s, Run& run) {
  run.fused = !s.is_cnn() && (s.step == "fused" || (s.step == "auto" && fusion_enabled()));
  if (run.fused)
    run.step = std::make_unique<train::FusedMlpStep>(*run.model, *run.optimizer, s.recipe.batch_size,
                                                     train::FusedMlpStepOptions{.gemm_epilogues = true,
                                                                                .cuda_graph = s.cuda_graph,
                                                                                .reduce_across_ranks = s.distributed,
                                                                                .micro_batches = s.micro_batches,
                                                                                .sgd_in_gemm = true});
  else
    run.step = std::make_unique<train::AutogradStep>(
        *run.model, *run.optimizer, nullptr,
        train::AutogradStepOptions{.micro_batches = s.micro_batches, .reduce_across_ranks = s.distributed});
}

// What every rank must agree on before training: the settings that shape the model, the data and
// the arithmetic, from the environment too (EMBER_FUSION picks the step). The paths of files may
// differ between machines; their contents are checked by the parameters' hash after loading.
std::string options_fingerprint(const Settings& s, const Run& run, const Shapes& shapes) {
  std::ostringstream out;
  out << "model=" << s.model << ";hidden=" << apps::join_sizes(shapes.hidden)
      << ";channels=" << apps::join_sizes(shapes.channels) << ";dataset=" << s.dataset
      << ";images=" << run.data.train->size() << "+" << run.data.test->size() << ";val_size=" << run.val_size
      << ";optimizer=" << s.recipe.optimizer << ";lr=" << s.recipe.lr << ";lr_decay=" << s.recipe.lr_decay
      << ";batch_size=" << s.recipe.batch_size << ";normalize=" << s.recipe.normalize << ";momentum=" << s.momentum
      << ";weight_decay=" << s.weight_decay << ";seed=" << s.seed << ";epochs=" << s.epochs
      << ";shuffle=" << !s.no_shuffle << ";step=" << s.step << ";fused=" << run.fused
      << ";micro_batches=" << s.micro_batches << ";cuda_graph=" << s.cuda_graph << ";preload=" << s.preload
      << ";device=" << (run.device.is_cuda() ? "cuda" : "cpu") << ";resume=" << !s.resume.empty()
      << ";init=" << !s.init.empty();
  return out.str();
}

Run build_run(const Settings& s, const Shapes& shapes) {
  Run run;
  run.world = s.distributed ? dist::world_size() : 1;
  run.device = choose_device(s, run.device_reason);
  run.data = data::load_classification(s.data_dir, data::dataset_spec(s.dataset));
  const std::size_t n_all = run.data.train->size();
  run.val_size = s.val_size < 0 ? n_all / 6 : static_cast<std::size_t>(s.val_size);
  if (run.val_size >= n_all)
    throw UsageError(
        detail::concat("--val-size ", run.val_size, ": must be smaller than the ", n_all, " training images"));
  build_model(s, shapes, run);
  if (!s.resume.empty()) resume(s, run);
  run.loaders = std::make_unique<data::ClassificationLoaders>(
      run.data, run.device,
      data::ClassificationLoaderOptions{.batch_size = s.recipe.batch_size,
                                        .eval_batch_size = s.eval_batch_size,
                                        .workers = s.workers,
                                        .val_size = run.val_size,
                                        .shuffle = !s.no_shuffle,
                                        .seed = s.seed,
                                        .flatten = !s.is_cnn(),
                                        .normalization = run.card.normalization,
                                        .preload = s.preload,
                                        .rank = static_cast<std::size_t>(dist::rank()),
                                        .ranks = static_cast<std::size_t>(run.world)});
  if (const std::size_t last = run.loaders->train_order().samples_per_epoch() % s.recipe.batch_size;
      s.micro_batches > 1 && last % s.micro_batches != 0)
    throw UsageError(detail::concat("--micro-batches ", s.micro_batches, ": the epoch's last batch has ", last,
                                    " images, which do not split into equal micro-batches; change --val-size or "
                                    "--batch-size"));
  build_step(s, run);
  if (s.distributed) {
    const std::string options = options_fingerprint(s, run, shapes);
    try {
      dist::check_same_on_all_ranks("options", options);
    } catch (const dist::DistError& e) {
      throw UsageError(std::string("--distributed: ") + e.what());
    }
    dist::check_identical("the parameters at the start", run.model->parameters());
  }
  return run;
}

void print_header(const Settings& s, const Run& run) {
  const auto& loaders = *run.loaders;
  std::printf("device: %s\n", run.device_reason.c_str());
  if (run.world > 1)
    std::printf("distributed: %d ranks, batch %zu each (%zu in all per step), gradients averaged %s\n", run.world,
                s.recipe.batch_size, s.recipe.batch_size * static_cast<std::size_t>(run.world),
                run.fused ? "between backward and update" : "in buckets during backward");
  if (s.micro_batches > 1)
    std::printf("micro-batches: each batch of %zu in %zu micro-batches of %zu, gradients summed\n", s.recipe.batch_size,
                s.micro_batches, s.recipe.batch_size / s.micro_batches);
  std::printf("data: %s, %zu training images (%zu for training, %s), %zu test images, %lld classes, from %s\n",
              run.data.spec.title.c_str(), run.data.train->size(), loaders.train_set()->size(),
              run.val_size > 0 ? (std::to_string(run.val_size) + " for validation").c_str()
                               : "validation on the test set (--val-size 0)",
              run.data.test->size(), static_cast<long long>(run.data.num_classes), s.data_dir.c_str());
  std::printf("%s\nparameters: %lld\n", run.model->repr().c_str(),
              static_cast<long long>(run.model->parameter_count()));
  if (loaders.preloaded())
    std::printf("data: training images preloaded on %s (%.1f MB)\n", run.device.str().c_str(),
                static_cast<double>(loaders.preloaded()->bytes_on_device()) / 1e6);
  std::string changed;
  for (const std::string& flag : s.overridden) changed += (changed.empty() ? "" : " ") + flag;
  std::printf("recipe: %s%s\n", describe(s.recipe).c_str(),
              changed.empty() ? (" (the " + s.model + " default)").c_str() : (" (set by " + changed + ")").c_str());
  const data::Normalization& norm = run.card.normalization;
  std::printf("optimizer: %s, lr %g, momentum %g, weight decay %g; batch %zu; %s inputs; %d CPU thread%s\n",
              run.optimizer->type_name().c_str(), s.recipe.lr, s.momentum, s.weight_decay, s.recipe.batch_size,
              s.recipe.normalize ? detail::concat("normalized (", norm.mean, ", ", norm.std, ")").c_str() : "[0, 1]",
              s.threads, s.threads == 1 ? "" : "s");
  std::fflush(stdout);
}

// ---- run_training: the library's loop, this program's report after every epoch ------------------
int run_training(const Settings& s) {
  const Shapes shapes = validate(s);
  set_num_threads(s.threads);
  Run run = build_run(s, shapes);
  print_header(s, run);
  // The rate of epoch e is lr·decay^e (StepLR with step 1), a resumed run picking up where it was.
  optim::StepLR schedule(*run.optimizer, 1, s.recipe.lr_decay);
  schedule.set_last_epoch(run.start_epoch);
  const bool tty = apps::interactive_output(s.distributed);  // the progress bar is for a person watching
  train::JsonLinesLog log(dist::is_main() ? s.json_log : std::string());
  std::vector<apps::EpochRecord> records;
  int last_saved = run.start_epoch;
  auto report = [&](const train::EpochReport& r) {
    if (tty) std::printf("\r%60s\r", "");
    if (run.fused && r.epoch == run.start_epoch)
      std::printf("training step: fused MLP step, %s\n", run.step->describe().c_str());
    std::printf("%s\n", train::epoch_line(r, s.distributed).c_str());
    std::fflush(stdout);
    // Every rank must hold the same parameters after every epoch; a hash of them says so.
    const std::uint64_t params_hash = dist::hash_tensors(run.model->parameters());
    if (s.distributed)
      dist::check_identical(detail::concat("the parameters after epoch ", r.epoch), run.model->parameters());
    auto* fused = dynamic_cast<const train::FusedMlpStep*>(run.step.get());
    auto count = [](std::size_t n) { return static_cast<std::int64_t>(n); };
    train::LogFields extra{{"step", std::string(fused ? "fused" : "autograd")},
                           {"graph_kernels", count(fused ? fused->graph_kernel_nodes() : 0)},
                           {"step_launches", count(fused ? fused->step_launches() : 0)},
                           {"graph_replays", count(fused ? fused->graph_replays() : 0)},
                           {"ranks", std::int64_t{run.world}},
                           {"params_hash", detail::concat(std::hex, params_hash)}};
    // On the CPU, the training's seconds in GEMMs (on CUDA they run on the device).
    if (run.device.is_cpu()) extra.emplace_back("gemm_s", r.train.gemm_seconds);
    log.add_epoch(r, extra);
    log.write();
    records.push_back({r.epoch, r.train.loss, r.validation.loss, r.validation.accuracy});
    if (!s.save.empty()) last_saved = r.epoch + 1;  // on every rank: each names it if its loss turns non-finite
    if (!dist::is_main()) return;                   // rank 0 alone writes files (the others hold the same parameters)
    if (!s.save.empty()) {
      train::Metadata model_meta = run.card.to_metadata();
      model_meta["hidden"] = apps::join_sizes(shapes.hidden);
      if (s.is_cnn()) model_meta["channels"] = apps::join_sizes(shapes.channels);
      train::save_training_checkpoint(s.save, *run.model, *run.optimizer, r.epoch + 1, model_meta,
                                      {{"model_kind", s.model},
                                       {"dataset", s.dataset},
                                       {"seed", std::to_string(s.seed)},
                                       {"val_size", std::to_string(run.val_size)},
                                       {"batch_size", std::to_string(s.recipe.batch_size)},
                                       {"shuffle", s.no_shuffle ? "0" : "1"},
                                       {"lr", detail::concat(s.recipe.lr)},
                                       {"lr_decay", detail::concat(s.recipe.lr_decay)},
                                       {"world_size", std::to_string(run.world)},
                                       {"micro_batches", std::to_string(s.micro_batches)}});
    }
    if (!s.plot.empty())
      apps::write_svg_plot(
          s.plot, records,
          run.data.spec.title + " " + s.model + " " + apps::join_sizes(shapes.hidden) + " (" + run.device.str() + ")");
  };
  const train::FitOptions fit{.epochs = s.epochs,
                              .start_epoch = run.start_epoch,
                              .schedule = &schedule,
                              .epoch = {.across_ranks = s.distributed,
                                        .record_step_losses = s.log_step_losses,
                                        .steps = run.loaders->train_order().batches_per_epoch(),
                                        .on_step =
                                            [tty](std::size_t done, std::size_t total) {
                                              if (tty) apps::progress_bar(done, total);
                                            }},
                              .on_epoch = report};
  try {
    train::fit(*run.model, *run.step, run.loaders->train(), run.loaders->validation(),
               run.loaders->validation_set()->size(), fit);
  } catch (const train::NonFiniteLoss& e) {
    throw std::runtime_error(
        e.what() +
        (s.save.empty() ? std::string()
                        : detail::concat("; the last good checkpoint is ", s.save, " (", last_saved, " epochs)")) +
        ". Try a smaller --lr");
  }
  const train::Evaluation result =
      train::evaluate(*run.model, run.loaders->test(), run.data.test->size(), s.distributed);
  std::printf("test_loss: %.4f, test_acc: %.4f\n", result.loss, result.accuracy);
  log.add({{"test_loss", result.loss}, {"test_acc", result.accuracy}, {"device", run.device.str()}});
  log.write();
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
