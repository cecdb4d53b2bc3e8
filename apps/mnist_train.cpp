// mnist_train: trains the tutorials' MNIST classifier on the best device (or the one asked for),
// with their settings and their output, and saves checkpoints that load anywhere.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/common/plot.h"
#include "apps/common/program.h"
#include "apps/common/train_state.h"
#include "core/autograd.h"
#include "core/config.h"
#include "core/ops.h"
#include "core/profile.h"
#include "data/loader.h"
#include "data/preloaded.h"
#include "kernels/gemm.h"
#include "layers/models.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/mlp_step.h"

using namespace ember;
using apps::UsageError;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  std::string data_dir, device = "auto", model = "mlp", hidden, channels = "32,64", optimizer = "sgd";
  int epochs = 5;
  std::size_t batch_size = 128, eval_batch_size = 256, workers = 2;
  double lr = 0.5, momentum = 0, weight_decay = 0, lr_decay = 1.0;
  std::uint64_t seed = 0;
  bool no_shuffle = false, normalize = false, cuda_graph = true, preload = false;
  std::string step = "auto";
  int threads = 1;
  long long val_size = -1;  // -1: a sixth of the training images
  std::string json_log, save, resume, init, plot;
};

std::vector<std::int64_t> parse_hidden(const std::string& text) {
  std::vector<std::int64_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 20))
      throw UsageError("--hidden " + text + ": expected positive layer widths separated by commas, e.g. 32 or 512,256");
    sizes.push_back(v);
  }
  return sizes;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Mean loss and accuracy over a loader; sums stay on the device and are read once.
EvalResult evaluate(nn::Module& model, data::BatchSource& loader, std::int64_t epoch, std::size_t count) {
  NoGradGuard no_grad;
  model.eval();
  loader.start_epoch(epoch);
  const Device device = loader.device();
  Tensor loss_sum = zeros({}, {.device = device}), correct = zeros({}, {.device = device});
  while (auto batch = loader.next()) {
    const Tensor logits = model(batch->x);
    const double rows = static_cast<double>(batch->x.size(0));
    add_(loss_sum, cross_entropy(logits, batch->y) * rows);
    add_(correct, count_equal(argmax(logits), batch->y).to(DType::f32));
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

void write_json_lines(const std::string& path, const std::vector<nlohmann::json>& lines) {
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

// The Dropout layers' stream positions, as "o1,o2,...", for an exact resume.
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

int run_training(const Settings& s) {
  // ---- validate everything before touching any file ------------------------------------------
  if (s.model != "mlp" && s.model != "cnn") throw UsageError("--model " + s.model + ": expected mlp or cnn");
  const bool is_cnn = s.model == "cnn";
  if (s.optimizer != "sgd" && s.optimizer != "adam")
    throw UsageError("--optimizer " + s.optimizer + ": expected sgd or adam");
  if (!std::isfinite(s.lr) || s.lr <= 0) throw UsageError("--lr must be a positive number");
  if (!(s.momentum >= 0 && s.momentum < 1)) throw UsageError("--momentum must be in [0, 1)");
  if (!(s.weight_decay >= 0)) throw UsageError("--weight-decay must be non-negative");
  if (!(s.lr_decay > 0 && s.lr_decay <= 1)) throw UsageError("--lr-decay must be in (0, 1]");
  if (s.step != "auto" && s.step != "fused" && s.step != "autograd")
    throw UsageError("--step " + s.step + ": expected auto, fused or autograd");
  if (s.step == "fused" && is_cnn) throw UsageError("--step fused trains the MLP only; the CNN runs on autograd");
  if (!s.resume.empty() && !s.init.empty()) throw UsageError("--resume and --init cannot be used together");
  if (!s.plot.empty() && (s.plot.size() < 4 || s.plot.substr(s.plot.size() - 4) != ".svg"))
    throw UsageError("--plot " + s.plot + ": the picture is written as SVG; give a name ending in .svg");
  // Hidden widths default to the tutorials': 32 for the MLP, 128 for the CNN's dense layer.
  const std::string hidden_text = s.hidden.empty() ? (is_cnn ? "128" : "32") : s.hidden;
  const std::vector<std::int64_t> hidden = parse_hidden(hidden_text);
  const std::vector<std::int64_t> channels = parse_hidden(s.channels);
  if (is_cnn && (hidden.size() != 1 || channels.size() != 2))
    throw UsageError("--model cnn takes one --hidden width (e.g. 128) and two --channels (e.g. 32,64)");
  kernels::cpu::set_num_threads(s.threads);

  Device device;
  std::string device_reason;
  if (s.device == "auto") {
    device = Device::best();
    device_reason = Device::best_reason();
  } else {
    try {
      device = Device::parse(s.device);
      require_usable(device);
    } catch (const Error& e) {
      throw UsageError("--device " + s.device + ": " + e.what());
    }
    device_reason = device.str() + " (--device " + s.device + ")";
  }

  auto full_train = std::make_shared<data::MnistDataset>(s.data_dir, data::Split::train);
  auto test = std::make_shared<data::MnistDataset>(s.data_dir, data::Split::test);
  EMBER_CHECK(full_train->sample_shape() == test->sample_shape(), FormatError, s.data_dir,
              ": training and test images differ in size");
  const std::size_t n_all = full_train->size();
  const std::size_t val_size = s.val_size < 0 ? n_all / 6 : static_cast<std::size_t>(s.val_size);
  if (val_size >= n_all)
    throw UsageError("--val-size " + std::to_string(val_size) + ": must be smaller than the " + std::to_string(n_all) +
                     " training images");
  std::shared_ptr<const data::Dataset> train_set = full_train, val_set = test;
  if (val_size > 0) {
    const auto parts = data::random_split(full_train, {n_all - val_size, val_size}, s.seed);
    train_set = parts[0];
    val_set = parts[1];
  }

  Generator init_generator(s.seed);
  if (is_cnn && full_train->sample_shape() != Shape{28, 28})
    throw UsageError("--model cnn expects 28×28 images; " + s.data_dir + " has " + shape_str(full_train->sample_shape()));
  std::shared_ptr<nn::Sequential> model =
      is_cnn ? nn::cnn(channels[0], channels[1], hidden[0], &init_generator)
             : nn::mlp(static_cast<std::int64_t>(full_train->sample_numel()), hidden, 10, &init_generator);
  if (!s.init.empty()) {
    try {
      nn::load(*model, s.init);
    } catch (const Error& e) {
      throw UsageError(std::string("--init ") + e.what());
    }
  }
  model->to(device);
  const optim::GroupOptions options{.lr = s.lr, .momentum = s.momentum, .weight_decay = s.weight_decay};
  std::unique_ptr<optim::Optimizer> optimizer;
  if (s.optimizer == "sgd") optimizer = std::make_unique<optim::SGD>(model->parameters(), options);
  else optimizer = std::make_unique<optim::Adam>(model->parameters(), options);

  int start_epoch = 0;
  if (!s.resume.empty()) {
    std::map<std::string, std::string> meta;
    try {
      meta = apps::load_training_state(s.resume, *model, *optimizer);
    } catch (const Error& e) {
      throw UsageError(std::string("--resume ") + e.what());
    }
    if (meta.count("model_kind") && meta["model_kind"] != s.model)
      throw UsageError("--resume " + s.resume + ": the checkpoint holds a " + meta["model_kind"] + ", not a " + s.model);
    start_epoch = meta.count("epoch") ? std::atoi(meta["epoch"].c_str()) : 0;
    if (meta.count("dropout_offsets")) restore_dropout_offsets(*model, meta["dropout_offsets"]);
    // The resumed run continues with the rates given now (the checkpoint's are overwritten).
    for (auto& group : optimizer->param_groups()) group.options.lr = group.initial_lr = s.lr;
  }

  const data::Normalization norm = s.normalize ? data::Normalization{0.1307f, 0.3081f} : data::Normalization{};
  // On a GPU, batches travel as u8 from pinned staging and are normalized there; on the CPU the
  // loader's workers normalize them, so the training thread only trains.
  const bool pinned = device.is_cuda();
  const std::optional<data::Normalization> host_norm =
      device.is_cpu() ? std::optional<data::Normalization>(norm) : std::nullopt;
  // The MLP takes images as [B, 784], the CNN as [B, 1, 28, 28].
  const bool flat = !is_cnn;
  data::DataLoader train_loader(train_set, {.batch_size = s.batch_size, .shuffle = !s.no_shuffle, .seed = s.seed,
                                            .num_workers = s.workers, .pin_memory = pinned, .flatten = flat,
                                            .normalize = host_norm});
  data::DataLoader val_loader(val_set, {.batch_size = s.eval_batch_size, .shuffle = false, .num_workers = s.workers,
                                        .pin_memory = pinned, .flatten = flat, .normalize = host_norm});
  data::DataLoader test_loader(test, {.batch_size = s.eval_batch_size, .shuffle = false, .num_workers = s.workers,
                                      .pin_memory = pinned, .flatten = flat, .normalize = host_norm});
  data::DeviceLoader streamed_batches(train_loader, device, norm), val_batches(val_loader, device, norm),
      test_batches(test_loader, device, norm);
  // --preload: the training images live on the device and each batch is gathered there (the same
  // batches in the same order as streaming them), the baseline the streamed pipeline is held to.
  std::optional<data::PreloadedLoader> preloaded;
  if (s.preload) preloaded.emplace(train_loader, device, norm);
  data::BatchSource& train_batches = preloaded ? static_cast<data::BatchSource&>(*preloaded) : streamed_batches;

  std::printf("device: %s\n", device_reason.c_str());
  std::printf("data: %zu training images (%zu for training, %s), %zu test images, from %s\n", n_all, train_set->size(),
              val_size > 0 ? (std::to_string(val_size) + " for validation").c_str()
                           : "validation on the test set (--val-size 0)",
              test->size(), s.data_dir.c_str());
  std::printf("%s\nparameters: %lld\n", model->repr().c_str(), static_cast<long long>(model->parameter_count()));
  if (preloaded)
    std::printf("data: training images preloaded on %s (%.1f MB)\n", device.str().c_str(),
                static_cast<double>(preloaded->bytes_on_device()) / 1e6);
  std::printf("optimizer: %s, lr %g, momentum %g, weight decay %g; batch %zu; %s inputs; %d CPU thread%s\n",
              optimizer->type_name().c_str(), s.lr, s.momentum, s.weight_decay, s.batch_size,
              s.normalize ? "normalized (0.1307, 0.3081)" : "[0, 1]", s.threads, s.threads == 1 ? "" : "s");
  std::fflush(stdout);

  // The rate of epoch e is lr·decay^e (StepLR with step 1), a resumed run picking up where it was.
  int last_saved = start_epoch;
  // The MLP trains through the fused step (the whole step as fused kernels, replayed from a CUDA
  // graph on a GPU) unless --step autograd or EMBER_FUSION=0 asks for the op-by-op path.
  const bool fused_step = !is_cnn && (s.step == "fused" || (s.step == "auto" && nn::fusion_enabled()));
  std::unique_ptr<train::MlpStep> mlp_step;
  if (fused_step)
    mlp_step = std::make_unique<train::MlpStep>(
        *model, *optimizer, s.batch_size,
        train::MlpStepOptions{.gemm_epilogues = nn::fusion_enabled(), .cuda_graph = s.cuda_graph});
  auto non_finite = [&](int epoch, const std::string& at) {
    return std::runtime_error("non-finite training loss in epoch " + std::to_string(epoch) + at +
                              (s.save.empty() ? std::string()
                                              : "; the last good checkpoint is " + s.save + " (" +
                                                    std::to_string(last_saved) + " epochs)") +
                              ". Try a smaller --lr");
  };

  optim::StepLR schedule(*optimizer, 1, s.lr_decay);
  schedule.set_last_epoch(start_epoch);
  const bool tty = ::isatty(STDOUT_FILENO);
  std::vector<nlohmann::json> log_lines;
  std::vector<apps::EpochRecord> records;
  auto metadata_for = [&](int epochs_done) {
    return std::map<std::string, std::string>{{"epoch", std::to_string(epochs_done)},
                                              {"model_kind", s.model},
                                              {"hidden", join(hidden)},
                                              {"channels", is_cnn ? join(channels) : ""},
                                              {"seed", std::to_string(s.seed)},
                                              {"normalize", s.normalize ? "1" : "0"},
                                              {"val_size", std::to_string(val_size)},
                                              {"batch_size", std::to_string(s.batch_size)},
                                              {"shuffle", s.no_shuffle ? "0" : "1"},
                                              {"dropout_offsets", dropout_offsets(*model)}};
  };

  for (int epoch = start_epoch; epoch < s.epochs; ++epoch) {
    const auto t0 = Clock::now();
    model->train();
    train_batches.start_epoch(epoch);
    Tensor loss_sum = zeros({}, {.device = device});
    if (mlp_step) mlp_step->reset_loss_sum();
    std::size_t step = 0, total_steps = train_loader.batches_per_epoch();
    while (auto batch = train_batches.next()) {
      if (mlp_step) {
        try {
          ProfileRange range("fused step");
          mlp_step->step(batch->x, batch->y);
        } catch (const NonFiniteError&) {  // the CPU finds it at its step; CUDA at the epoch's end
          throw non_finite(epoch, ", step " + std::to_string(step));
        }
        ++step;
        if (tty) progress(step, total_steps);
        continue;
      }
      Tensor loss;
      {
        ProfileRange range("forward");
        loss = cross_entropy((*model)(batch->x), batch->y);
      }
      optimizer->zero_grad();
      {
        ProfileRange range("backward");
        loss.backward();
      }
      {
        ProfileRange range("optimizer");
        optimizer->step();
      }
      {
        NoGradGuard no_grad;
        add_(loss_sum, loss.detach() * static_cast<double>(batch->x.size(0)));
      }
      // On the CPU reading the loss costs nothing, so a non-finite one is caught at its step; on
      // CUDA the sum is checked once per epoch instead of synchronizing every step.
      if (device.is_cpu() && !std::isfinite(loss.item<double>())) throw non_finite(epoch, ", step " + std::to_string(step));
      ++step;
      if (tty) progress(step, total_steps);
    }
    double train_loss = 0;
    try {
      train_loss = (mlp_step ? mlp_step->loss_sum() : loss_sum).item<double>() / static_cast<double>(train_set->size());
    } catch (const NonFiniteError&) {  // raised on the device, read here once per epoch
      throw non_finite(epoch, " (on " + device.str() + " the loss is checked once per epoch, so the step is not known)");
    }
    if (mlp_step && epoch == start_epoch) {
      std::printf("training step: fused MLP step, %s\n", mlp_step->describe().c_str());
      std::fflush(stdout);
    }
    const auto t_train = Clock::now();
    if (tty) std::printf("\r%60s\r", "");
    if (!std::isfinite(train_loss))
      throw non_finite(epoch, " (on " + device.str() + " the loss is checked once per epoch, so the step is not known)");
    const data::LoaderStats stats = train_batches.epoch_stats();
    const EvalResult val = evaluate(*model, val_batches, 0, val_set->size());
    const double train_s = std::chrono::duration<double>(t_train - t0).count();
    const double epoch_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double images_per_s = static_cast<double>(train_set->size()) / train_s;
    const double wait_share = stats.wait_s / train_s;
    std::printf("Epoch [%d], val_loss: %.4f, val_acc: %.4f, train_loss: %.4f, epoch_s: %.2f, images/s: %.0f, "
                "data wait: %.1f%%\n",
                epoch, val.loss, val.accuracy, train_loss, epoch_s, images_per_s, 100 * wait_share);
    std::fflush(stdout);
    log_lines.push_back({{"epoch", epoch}, {"train_loss", train_loss}, {"val_loss", val.loss},
                         {"val_acc", val.accuracy}, {"epoch_s", epoch_s}, {"images_per_s", images_per_s},
                         {"input_wait_s", stats.wait_s},
                         {"step", mlp_step ? "fused" : "autograd"},
                         {"graph_kernels", mlp_step ? mlp_step->graph_kernel_nodes() : 0}});
    records.push_back({epoch, train_loss, val.loss, val.accuracy});
    if (!s.json_log.empty()) write_json_lines(s.json_log, log_lines);
    if (!s.save.empty()) {
      apps::save_training_state(s.save, *model, *optimizer, metadata_for(epoch + 1));
      last_saved = epoch + 1;
    }
    schedule.step();
    if (!s.plot.empty())
      apps::write_svg_plot(s.plot, records, "MNIST " + s.model + " " + hidden_text + " (" + device.str() + ")");
  }

  const EvalResult result = evaluate(*model, test_batches, 0, test->size());
  std::printf("test_loss: %.4f, test_acc: %.4f\n", result.loss, result.accuracy);
  log_lines.push_back({{"test_loss", result.loss}, {"test_acc", result.accuracy}, {"device", device.str()}});
  if (!s.json_log.empty()) write_json_lines(s.json_log, log_lines);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  const char* env_data = std::getenv("MNIST_DIR");
  s.data_dir = env_data && *env_data ? env_data : "data/mnist";
  CLI::App app{"mnist_train: train an MNIST classifier (the tutorials' 784-32-10 MLP by default) on the best device"};
  app.add_option("--data", s.data_dir, "folder with the four MNIST files (default: $MNIST_DIR, else data/mnist)");
  app.add_option("--device", s.device, "auto (CUDA when usable, else the CPU), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--model", s.model, "mlp (the tutorials' 784-32-10) or cnn (conv 32, conv 64, pool, dense 128)")
      ->capture_default_str();
  app.add_option("--hidden", s.hidden, "hidden layer widths: e.g. 32 or 512,256 for the MLP (default 32); the CNN's "
                                      "dense layer (default 128)");
  app.add_option("--channels", s.channels, "the CNN's two convolution widths")->capture_default_str();
  app.add_option("--epochs", s.epochs, "epochs to train")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", s.batch_size, "training batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--eval-batch-size", s.eval_batch_size, "evaluation batch size")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", s.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", s.optimizer, "sgd or adam")->capture_default_str();
  app.add_option("--momentum", s.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", s.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--lr-decay", s.lr_decay, "multiply the learning rate by this after every epoch (StepLR)")
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the initialization, the split and the data order")->capture_default_str();
  app.add_flag("--no-shuffle", s.no_shuffle, "keep the training data in file order");
  app.add_option("--workers", s.workers, "data loader threads (0: load on the training thread)")->capture_default_str();
  app.add_option("--threads", s.threads, "CPU compute threads (OpenBLAS)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--val-size", s.val_size,
                 "validation images split off the training set (default: a sixth; 0: validate on the test set)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--normalize", s.normalize, "normalize inputs with MNIST's mean and std (0.1307, 0.3081) "
                                           "instead of pixel/255");
  app.add_option("--step", s.step, "auto (the MLP through the fused step unless EMBER_FUSION=0), fused, or autograd "
                                   "(op by op, as written in PyTorch)")->capture_default_str();
  app.add_option("--cuda-graph", s.cuda_graph, "on CUDA, capture the fused step in a CUDA graph and replay it")
      ->capture_default_str();
  app.add_flag("--preload", s.preload, "keep the training images on the device and gather each batch there, "
                                       "instead of streaming batches from host memory");
  app.add_option("--json-log", s.json_log, "write one JSON object per epoch, then the test result, to this file");
  app.add_option("--save", s.save, "save a checkpoint (safetensors, model and optimizer) after every epoch");
  app.add_option("--resume", s.resume, "continue from a checkpoint written by --save (model, optimizer, epoch, order)");
  app.add_option("--init", s.init, "start from these weights (a safetensors state dict, e.g. exported from PyTorch)");
  app.add_option("--plot", s.plot, "write the loss and accuracy curves to this SVG file");
  return apps::run_cli(app, argc, argv, [&] { return run_training(s); });
}
