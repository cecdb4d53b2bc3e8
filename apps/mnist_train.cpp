// mnist_train: trains the tutorials' image classifiers — the 784-32-10 MLP and the CNN of PyTorch's MNIST example —
// and a small Vision Transformer (torchvision's, by name) on MNIST, Fashion-MNIST or any IDX dataset, on the best
// device (or the one asked for), with the tutorials' output, and saves checkpoints that PyTorch loads as they are.
//
// Reading order: the recipes (what each model trains with), validate (every option checked before
// any file is touched), build_run (data, model, optimizer, the training step), then run_training:
// the library's loop (train/loop.h) with this program's report after every epoch. The stack below
// it: data/ (the loaders), layers/ (the model), optim/, train/ (steps, loop, checkpoints).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>

#include "apps/common/model_card.h"
#include "apps/common/model_flags.h"
#include "apps/common/program.h"
#include "apps/common/recipes.h"
#include "apps/common/run_checks.h"
#include "apps/common/run_outputs.h"
#include "apps/common/stop_signals.h"
#include "base/fusion.h"
#include "data/classification_loaders.h"
#include "distributed/dist.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/loop.h"
#include "train/make_step.h"
#include "train/run_checkpoints.h"

using namespace ember;
using apps::UsageError;

namespace {

// The command line. The library's options structs hold what they name; the rest is this program's.
struct Settings {
  std::string dataset = "mnist", data_dir, device = "auto", step = "auto";
  apps::ModelFlags model;  // --model, its widths and the ViT's sizes
  apps::Recipe recipe = apps::recipe_for("mlp");
  std::string overridden;  // the recipe's flags given on the command line
  int threads = 1, keep = 2;
  std::uint64_t seed = 0;
  long long val_size = -1;                   // -1: a sixth of the training images
  optim::GroupOptions optimizer;             // --momentum, --weight-decay (the rate is the recipe's)
  data::ClassificationLoaderOptions loader;  // --eval-batch-size, --workers, --no-shuffle, --preload
  // --precision, --micro-batches, --cuda-graph, the recipe's loss and clipping; every fusion on (SGD in the GEMMs).
  train::StepOptions steps{.fused = {.gemm_epilogues = true, .sgd_in_gemm = true}};
  bool distributed = false, log_step_losses = false;
  double timeout = 300;  // --collective-timeout: seconds a rank waits in a collective (Note [lost ranks])
  std::string json_log, save, resume, init, plot, precision = "f32";
  std::vector<std::string> command;  // as typed, for the line that resumes it
};

// ---- validate: every option checked before any file is touched ---------------------------------
void validate(Settings& s) {
  const apps::Recipe& r = s.recipe;
  if (!std::isfinite(r.lr) || r.lr <= 0) throw UsageError("--lr must be a positive number");
  if (!(r.lr_decay > 0 && r.lr_decay <= 1)) throw UsageError("--lr-decay must be in (0, 1]");
  if (!(s.optimizer.momentum >= 0 && s.optimizer.momentum < 1)) throw UsageError("--momentum must be in [0, 1)");
  if (s.step == "fused" && s.model.model != "mlp")
    throw UsageError("--step fused trains the MLP only; the " + s.model.model + " runs on autograd");
  apps::check_recipe(r, s.loader.preload);
  s.steps.loss = nn::Loss::cross_entropy({.label_smoothing = r.label_smoothing});
  s.steps.autograd.clip_grad_norm = r.clip_grad_norm;
  s.steps.precision = parse_dtype(s.precision);
  if (!s.resume.empty() && !s.init.empty()) throw UsageError("--resume and --init cannot be used together");
  if (r.batch_size % s.steps.micro_batches != 0)
    throw UsageError(detail::concat("--micro-batches must divide the batch, ", r.batch_size));
  if (s.data_dir.empty())
    throw UsageError("--dataset " + s.dataset + " has no default folder: give --data FOLDER with its four IDX files");
  if (!s.plot.empty() && (s.plot.size() < 4 || s.plot.substr(s.plot.size() - 4) != ".svg"))
    throw UsageError("--plot " + s.plot + ": the picture is written as SVG; give a name ending in .svg");
  for (const auto& [flag, path] : {std::pair{"--save", s.save}, {"--json-log", s.json_log}, {"--plot", s.plot}})
    apps::check_output_path(flag, path);  // before any epoch is trained
  apps::check_model_flags(s.model);
}

// ---- build_run: data, model, optimizer, the training step, and what a resume restores ----------
struct Run {
  Device device;
  std::string device_reason;
  data::ClassificationData data;
  std::size_t val_size = 0;
  apps::ModelCard card;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<data::ClassificationLoaders> loaders;
  std::unique_ptr<train::Step> step;
  std::string not_taken;  // "; not the fused MLP step: why", for each faster step make_step did not take
  int world = 1;
  std::string data_sha256;    // the images' and labels' content: a resume must see the same
  train::ResumedRun resumed;  // where a resumed run continues, and its history
};

void build_model(const Settings& s, Run& run) {
  run.card = apps::card_for(s.model, run.data, s.recipe.normalize);
  Generator init(s.seed);
  run.model = apps::new_model(run.card, &init, FusionOptions::all());
  if (!s.init.empty()) try {
      apps::load_weights(*run.model, run.card, s.init);
    } catch (const Error& e) {
      throw UsageError(std::string("--init ") + e.what());
    }
  run.model->to(run.device);
  if (s.distributed) train::make_replica(*run.model);  // rank 0's initialization everywhere
  optim::GroupOptions options = s.optimizer;
  options.lr = s.recipe.lr;
  options.weight_decay = s.recipe.weight_decay;
  run.optimizer = optim::make_optimizer(s.recipe.optimizer, run.model->parameters(), options);
}

// The run's settings, once, as a table: every rank must agree on them before training (they shape
// the model, the data and the arithmetic; EMBER_FUSION picks the step), and the checkpoints keep
// them for a resume to compare. File paths may differ between machines; their contents are checked
// by the parameters' hash after loading.
train::Metadata run_settings(const Settings& s, const Run& run) {
  auto text = [](const auto&... parts) { return detail::concat(parts...); };
  // clang-format off
  return {{"model_kind", s.model.model}, {"hidden", apps::join_sizes(s.model.hidden_sizes)}, {"dataset", s.dataset},
          {"channels", apps::join_sizes(s.model.channel_sizes)}, {"val_size", text(run.val_size)}, {"seed", text(s.seed)},
          {"images", text(run.data.train->size(), "+", run.data.test->size())}, {"epochs", text(s.recipe.epochs)},
          {"optimizer", s.recipe.optimizer}, {"lr", text(s.recipe.lr)}, {"lr_decay", text(s.recipe.lr_decay)},
          {"batch_size", text(s.recipe.batch_size)}, {"normalize", text(s.recipe.normalize)},
          {"momentum", text(s.optimizer.momentum)}, {"weight_decay", text(s.recipe.weight_decay)},
          {"vit", s.model.is_vit() ? s.model.sizes() : ""},
          {"schedule", text(s.recipe.schedule, " ", s.recipe.warmup_epochs)},
          {"label_smoothing", text(s.recipe.label_smoothing)}, {"clip_grad_norm", text(s.recipe.clip_grad_norm)},
          {"augment", text(s.recipe.crop_padding, s.recipe.flip ? " flip" : "")},
          {"shuffle", text(s.loader.shuffle)}, {"step", s.step}, {"fused", text(run.step->kind() == "fused")}, {"precision", s.precision},
          {"micro_batches", text(s.steps.micro_batches)}, {"cuda_graph", text(s.steps.fused.cuda_graph)},
          {"preload", text(s.loader.preload)}, {"device", run.device.is_cuda() ? "cuda" : "cpu"},
          {"world_size", text(run.world)}, {"resume", text(!s.resume.empty())}, {"init", text(!s.init.empty())},
          {"data_sha256", run.data_sha256}, {"threads", text(s.threads)}};
  // clang-format on
}

// A resume continues the run bit for bit only with the same model, data, split, order and seed; a
// stop mid-epoch also fixes the batches (and the ranks that share them). Other settings may change.
void resume(const Settings& s, Run& run) {
  try {
    std::vector<std::string> notes;
    auto compare = [&](const train::LoadedCheckpoint& saved) {  // before the shapes are compared
      notes = train::compare_settings(saved, run_settings(s, run), apps::resume_settings_check(saved));
    };
    run.resumed = train::resume_run(s.resume, *run.model, *run.optimizer, compare);
    std::printf("%s\n", run.resumed.report.c_str());
    for (const std::string& note : notes) std::printf("note: --resume: %s\n", note.c_str());
  } catch (const Error& e) {
    throw UsageError(std::string("--resume ") + e.what());
  }
  // The resumed run continues with the rates given now (the checkpoint's are overwritten).
  run.optimizer->set_lr(s.recipe.lr, /*restart=*/true);
}

// The MLP trains through the fused step (the whole step as fused kernels, replayed from a CUDA
// graph on a GPU) unless --step autograd or EMBER_FUSION=0 asks for the op-by-op path; the
// library chooses (train::make_step), once, and says why it did not take the faster step.
void choose_step(const Settings& s, Run& run) {
  train::StepOptions options = s.steps;
  options.choice = s.step == "fused"      ? train::StepChoice::fused
                   : s.step == "autograd" ? train::StepChoice::autograd
                                          : train::StepChoice::automatic;
  options.batch_size = s.recipe.batch_size;
  if (const std::string why = train::fused_step_refusal(*run.model, *run.optimizer, options);
      s.step == "fused" && !why.empty())
    throw UsageError("--step fused: " + why + " (--step auto)");
  train::ChosenStep chosen = train::make_step(*run.model, *run.optimizer, options);
  run.step = std::move(chosen.step);
  for (const auto& [step, why] : chosen.not_taken) run.not_taken += "; not the " + step + ": " + why;
}

Run build_run(Settings& s) {
  Run run;
  run.world = s.distributed ? dist::world_size() : 1;
  run.device = s.distributed ? apps::choose_rank_device("--device", s.device, run.device_reason)
                             : apps::choose_device("--device", s.device, run.device_reason);
  run.data = data::load_classification(s.data_dir, data::dataset_spec(s.dataset));
  const std::size_t n_all = run.data.train->size();
  run.val_size = s.val_size < 0 ? n_all / 6 : static_cast<std::size_t>(s.val_size);
  if (run.val_size >= n_all)
    throw UsageError(detail::concat("--val-size ", run.val_size, ": must be below the ", n_all, " training images"));
  if (s.recipe.batch_size > n_all - run.val_size) {  // one batch of them all, as PyTorch's loader gives
    std::printf("note: --batch-size %zu: more than the %zu images trained on; using %zu\n", s.recipe.batch_size,
                n_all - run.val_size, n_all - run.val_size);
    s.recipe.batch_size = n_all - run.val_size;
  }
  const std::vector<Tensor> content{run.data.train->images(), run.data.train->labels(), run.data.test->images(),
                                    run.data.test->labels()};
  run.data_sha256 = train::tensors_sha256(content);
  build_model(s, run);
  choose_step(s, run);
  if (!s.resume.empty()) resume(s, run);
  data::ClassificationLoaderOptions loader = s.loader;
  loader.batch_size = s.recipe.batch_size;
  loader.val_size = run.val_size;
  loader.seed = s.seed;
  loader.flatten = s.model.model == "mlp";
  loader.augment = {.crop_padding = s.recipe.crop_padding, .horizontal_flip = s.recipe.flip};
  loader.normalization = run.card.normalization;
  loader.rank = static_cast<std::size_t>(dist::rank());
  loader.ranks = static_cast<std::size_t>(run.world);
  run.loaders = std::make_unique<data::ClassificationLoaders>(run.data, run.device, loader);
  if (const std::size_t last = run.loaders->train_order().samples_per_epoch() % s.recipe.batch_size;
      s.steps.micro_batches > 1 && last % s.steps.micro_batches != 0)
    throw UsageError(detail::concat("--micro-batches: the last batch (", last, ") does not split; see --val-size"));
  if (s.distributed) try {
      train::check_same_run(run_settings(s, run), *run.model);
    } catch (const dist::DistError& e) {
      throw UsageError(std::string("--distributed: ") + e.what());
    }
  return run;
}

void print_header(const Settings& s, const Run& run) {
  std::printf("device: %s\n%s\n%s\nparameters: %lld\n", run.device_reason.c_str(),
              run.loaders->describe(run.data).c_str(), run.model->repr().c_str(),
              static_cast<long long>(run.model->parameter_count()));
  std::printf("recipe: %s (%s)\n", apps::describe(s.recipe).c_str(),
              s.overridden.empty() ? ("the " + s.model.model + " default").c_str() : ("set by" + s.overridden).c_str());
  const data::Normalization& norm = run.card.normalization;
  std::printf("optimizer: %s, momentum %g, weight decay %g; inputs %s; %d CPU thread%s, GEMM kernels %s\n",
              run.optimizer->type_name().c_str(), s.optimizer.momentum, s.recipe.weight_decay,
              s.recipe.normalize ? detail::concat("(pixel/255 - ", norm.mean, ") / ", norm.std).c_str() : "pixel/255",
              s.threads, s.threads == 1 ? "" : "s", cpu_gemm_kernels().c_str());
  std::fflush(stdout);
}

// ---- run_training: the library's loop, this program's report after every epoch ------------------
int run_training(Settings& s) {
  validate(s);
  set_num_threads(s.threads);
  Run run = build_run(s);
  const std::string title = run.data.spec.title + " " + s.model.model + " " + s.model.sizes();
  apps::RunOutputs outputs({s.json_log, s.plot, title, s.save, s.keep, s.command}, run.card.to_metadata(),
                           run_settings(s, run));
  print_header(s, run);
  outputs.start(s.resume.empty() ? nullptr : &run.resumed);
  const train::Position start = run.resumed.at;
  // The rate of epoch e is lr·decay^e (StepLR with step 1), or per step a warm-up then a cosine; a
  // resumed run picks up where it was (the schedules are closed forms of the count).
  const auto steps_per_epoch = static_cast<std::int64_t>(run.loaders->train_order().batches_per_epoch());
  const std::unique_ptr<optim::LRScheduler> schedule = apps::make_schedule(s.recipe, *run.optimizer, steps_per_epoch);
  const bool per_step = s.recipe.schedule == "cosine";
  schedule->set_last_epoch(per_step ? start.epoch * steps_per_epoch + start.step : start.epoch);
  auto report = [&](const train::EpochReport& r) {
    if (r.epoch == start.epoch)  // after a step: what the fused step captured is known then
      std::printf("training step: %s%s\n", run.step->describe().c_str(), run.not_taken.c_str());
    std::printf("%s\n", train::epoch_line(r, s.distributed).c_str());
    std::fflush(stdout);
    train::LogFields extra = train::step_fields(*run.step);
    for (auto& field : train::replica_fields(*run.model, r.epoch, s.distributed)) extra.push_back(field);
    outputs.add_epoch(r, extra, *run.model, *run.optimizer);
  };
  const std::function<bool()> stop_requested = [&] { return apps::stop_requested(s.distributed); };
  const bool interactive = apps::interactive_output(s.distributed);
  train::FitOptions fit;
  fit.epochs = s.recipe.epochs;
  fit.start_epoch = start.epoch;
  fit.start_step = start.step;
  fit.loss_sum_so_far = run.resumed.loss_sum;
  (per_step ? fit.epoch.step_schedule : fit.schedule) = schedule.get();
  fit.epoch.across_ranks = s.distributed;
  fit.epoch.record_step_losses = s.log_step_losses;
  fit.epoch.steps = run.loaders->train_order().batches_per_epoch();
  fit.epoch.on_step = interactive ? apps::progress_bar : nullptr;
  fit.epoch.stop_requested = stop_requested;
  fit.on_epoch = report;
  train::FitResult where;
  try {
    where = train::fit(*run.model, *run.step, run.loaders->train(), run.loaders->validation(),
                       run.loaders->validation_set()->size(), fit);
  } catch (const train::NonFiniteLoss& e) {
    throw std::runtime_error(detail::concat(e.what(), "; ", outputs.checkpoints().resumable(), ". Try a smaller --lr"));
  }
  if (where.stopped) {
    outputs.save_stop({where.epoch, where.step}, *run.model, *run.optimizer, *run.step);
    return apps::report_stop(where, outputs, s.command, interactive);
  }
  const train::Evaluation result =
      train::evaluate(*run.model, run.loaders->test(), run.data.test->size(), s.distributed, run.step->loss());
  std::printf("test_loss: %.4f, test_acc: %.4f\n", result.loss, result.accuracy);
  outputs.add_line({{"test_loss", result.loss}, {"test_acc", result.accuracy}, {"device", run.device.str()}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  apps::install_stop_signals();  // first: before any thread starts (Note [stop signals])
  Settings s;
  CLI::App app{
      "mnist_train: train an image classifier (the tutorials' 784-32-10 MLP, the CNN of PyTorch's MNIST "
      "example, or a small Vision Transformer) on MNIST, Fashion-MNIST or other IDX files, on the best device"};
  app.footer("Recipes (what each flag left out defaults to):\n  --model mlp: " +
             apps::describe(apps::recipe_for("mlp")) + "\n  --model cnn: " + apps::describe(apps::recipe_for("cnn")) +
             "\n  --model vit: " + apps::describe(apps::recipe_for("vit")) + " (the digits; other datasets add flips)" +
             "\nData: --dataset mnist reads --data, else $MNIST_DIR, else data/mnist; fashion-mnist reads --data, "
             "else /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist); idx needs --data.");
  // Options that show their default; the recipe's flags show the recipes' instead.
  auto option = [&](const char* name, auto& field, const std::string& help) {
    return app.add_option(name, field, help)->capture_default_str();
  };
  option("--dataset", s.dataset, "mnist, fashion-mnist, or idx (any four IDX files, classes.txt naming classes)")
      ->check(CLI::IsMember(data::dataset_names()));
  app.add_option("--data", s.data_dir, "folder with the four IDX files (default: see below)");
  option("--device", s.device, "auto (CUDA when usable, else the CPU), cpu, cuda or cuda:N");
  apps::add_model_options(app, s.model);
  apps::add_recipe_options(app, s.recipe);
  option("--eval-batch-size", s.loader.eval_batch_size, "evaluation batch size")->check(apps::positive);
  option("--momentum", s.optimizer.momentum, "SGD momentum");
  option("--seed", s.seed, "seed of the initialization, the split and the data order");
  app.add_flag("--no-shuffle{false}", s.loader.shuffle, "keep the training data in file order");
  app.add_option("--workers", s.loader.workers, "loader threads (0: the training thread; default: the CPUs left, ≤ 2)");
  option("--threads", s.threads, "CPU compute threads (ember's pool: kernels and GEMM blocks)")->check(apps::positive);
  app.add_option("--val-size", s.val_size, "validation images (default: a sixth; 0: the test set)")
      ->check(apps::non_negative);
  option("--step", s.step, "auto (fused MLPs), fused or autograd")->check(CLI::IsMember({"auto", "fused", "autograd"}));
  option("--cuda-graph", s.steps.fused.cuda_graph, "on CUDA, capture the fused step in a CUDA graph and replay it");
  app.add_flag("--preload", s.loader.preload, "keep the training images on the device and gather each batch there");
  app.add_flag("--distributed", s.distributed, "one rank of a data-parallel run by mpirun (docs/distributed.md)");
  option("--collective-timeout", s.timeout, "a collective's limit in seconds (0: none)")->check(apps::non_negative);
  option("--precision", s.precision, "f32, or bf16/f16 autocast (f16 scales the loss)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  option("--micro-batches", s.steps.micro_batches, "split batches, summing gradients")->check(apps::positive);
  app.add_flag("--log-step-losses", s.log_step_losses, "add each step's loss to the epoch's --json-log line");
  app.add_option("--json-log", s.json_log, "write one JSON object per epoch, then the test result, to this file");
  app.add_option("--save", s.save,
                 "checkpoint after every epoch and at a stop (SIGINT, SIGTERM, SIGUSR1): PATH is the newest model "
                 "(PyTorch loads it), PATH's folder holds numbered checkpoints (README: checkpoints)");
  option("--keep", s.keep, "complete checkpoints --save keeps")->check(apps::positive);
  app.add_option("--resume", s.resume,
                 "continue from the newest complete checkpoint of a --save PATH (or one numbered file of it)");
  app.add_option("--init", s.init, "start from these weights (a safetensors state dict, e.g. exported from PyTorch)");
  app.add_option("--plot", s.plot, "write the loss and accuracy curves to this SVG file");
  s.command.assign(argv, argv + argc);
  return apps::run_cli(app, argc, argv, [&] {
    apps::apply_recipe(s.recipe, s.overridden, s.model.model, s.dataset, app);
    apps::share_cpus(s.threads, s.loader.workers, app.count("--workers") > 0);
    s.steps.reduce_across_ranks = s.distributed;
    s.data_dir = data::data_folder(s.dataset, s.data_dir);
    if (s.distributed) apps::start_distributed("--distributed", s.timeout);
    const int code = run_training(s);
    dist::finalize();
    return code;
  });
}
