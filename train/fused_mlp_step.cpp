// The MLP training step (see fused_mlp_step.h): the layers' buffers, the loss, the order of the
// layers' GEMMs (train/fused_mlp_layers.h, which gives the notation), the update, and the CUDA
// graph around them.
//
// Note [fused step in bf16]
// FusedMlpStepOptions::precision = bf16 (CUDA) computes what the autograd step computes under
// autocast (core/ops/autocast.h), but for one difference, on the side of accuracy:
//   - as autocast: every step starts from bf16 copies of the f32 parameters and of the input
//     (kernels::CastList: one launch for all of them); each Linear multiplies bf16 operands with f32 sums and rounds
//     its output — bias and ReLU included — once to bf16 (cuBLASLt's 16-bit epilogues); the logits are widened to f32
//     for the loss, and the loss gradient is rounded to bf16 as it enters the last layer; dz·W and its ReLU mask give
//     the layer below its bf16 gradient;
//   - unlike autocast, the GEMMs write dW and db of the f32 master parameters in f32 (C in f32,
//     BGRADB's bias gradient in C's type), where autocast rounds them to bf16 and widens them
//     back. So every bias gradient comes from its layer's weight-gradient GEMM: DRELU_BGRAD's
//     would be in bf16, and is discarded.
// The optimizer updates the f32 parameters, and the next step's copies see the update. Where
// cuBLASLt has no algorithm for a 16-bit epilogue (or epilogues are off), cuBLAS's 16-bit GEMM and
// ember's kernels give the same roundings: the forward sums in f32, adds the rounded bias and
// rounds once; the masked gradient is the rounded dz·W times the mask, as autograd's.
#include "train/fused_mlp_step.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/base/config.h"
#include "core/base/error.h"
#include "core/base/fusion.h"
#include "core/cuda/graph.h"
#include "core/cuda/kernel_errors.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "distributed/dist.h"
#include "kernels/gemm.h"
#include "kernels/gemm_epilogue.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "train/fused_mlp_layers.h"

namespace ember::train {

using fused_mlp::MlpLayer;
using kernels::Transpose;

struct FusedMlpStep::Impl {
  optim::Optimizer* optimizer = nullptr;
  FusedMlpStepOptions options;
  Device device;
  std::size_t batch = 0, classes = 0;
  fused_mlp::MlpLayerGemms gemms;              // the layers' GEMMs, in f32 or bf16 (Note [fused step in bf16])
  Tensor x_half;                               // bf16: [batch, in], the input rounded
  std::vector<kernels::CastList> half_copies;  // bf16: fused_mlp::half_copy_lists

  Tensor logits, dlogits;  // bf16: f32 [batch, classes], the last layer's output widened, and its gradient
  std::vector<MlpLayer> layers;
  Tensor row_loss, batch_loss, loss_sum, blocks_done;  // blocks_done: the fused loss kernel's counter
  Tensor grads, scratch;       // every layer's gradients in one buffer (one reduction across ranks), and a second
  bool into_scratch = false;   // backward writes into `scratch` (the micro-batches after the first)
  double communication_s = 0;  // host time in the reduction across ranks (blocking on the CPU)
  Tensor x_static, y_static;   // a replayed graph reads its batch from here
  kernels::DeviceErrorRecord cpu_error;
  std::unique_ptr<cuda::Graph> graph = std::make_unique<cuda::Graph>();
  bool graph_failed = false;
  long long full_steps = 0;  // eager steps on a full batch since the graph was (re)set
  std::size_t step_launches = 0, replays = 0;
  std::string graph_note;
  long long steps = 0;
  bool sgd_in_gemm = false;  // this step updates the weights inside their GEMMs (FusedMlpStepOptions)

  bool cuda() const { return device.is_cuda(); }
  bool mixed() const { return gemms.mixed(); }

  // Whether FusedMlpStepOptions::sgd_in_gemm is the optimizer's own update for this step (see there).
  bool sgd_in_gemm_applies() const {
    if (!options.sgd_in_gemm || cuda() || options.reduce_across_ranks || options.micro_batches != 1) return false;
    const auto& groups = optimizer->param_groups();
    for (const MlpLayer& l : layers)
      if (l.weight_group >= groups.size() || !optimizer->update_is_plain_descent(groups[l.weight_group].options))
        return false;
    return true;
  }

  // What a captured update keeps as kernel arguments or pointers: the optimizer's settings other
  // than the rate (which is read from device memory), and the version of its state (new buffers
  // or slot tables mean new pointers). A change means capturing again. Compared field by field
  // before every replay, so nothing is built on the host per step.
  struct BakedIn {
    std::uint64_t version = 0;
    std::vector<optim::GroupOptions> groups;
  };
  BakedIn baked_in() const {
    BakedIn now{optimizer->version(), {}};
    for (const optim::ParamGroup& g : optimizer->param_groups()) now.groups.push_back(g.options);
    return now;
  }
  // Whether the optimizer is as `then` saw it: every option but the rate, compared by
  // GroupOptions' defaulted == (so an option added later takes part without a change here). The
  // rate is left out on purpose: it is read from memory at every replay, and comparing it would
  // capture the graph again at every scheduler step.
  bool unchanged_since(const BakedIn& then) const {
    const auto& groups = optimizer->param_groups();
    if (optimizer->version() != then.version || groups.size() != then.groups.size()) return false;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      optim::GroupOptions now = groups[i].options;
      now.lr = then.groups[i].lr;
      if (!(now == then.groups[i])) return false;
    }
    return true;
  }
  BakedIn captured;    // as the graph was captured
  BakedIn last_eager;  // as the last full-batch eager step left it

  cudaStream_t stream() const { return cuda::current_stream(device); }  // CUDA only

  // Runs cpu() or cuda(stream) for the step's device (Note [device dispatch] in core/ops/dispatch.h).
  template <class Cpu, class Cuda>
  decltype(auto) on_device(Cpu&& cpu, Cuda&& cuda) const {
    return ext::dispatch_device(device, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
  }

  // Kernels and library calls this thread has issued (CUDA; 0 on the CPU).
  std::uint64_t launches_issued() const {
    return on_device([] { return std::uint64_t{0}; }, [](auto) { return kernels::cuda::launches_issued(); });
  }

  // Softmax cross-entropy on the f32 logits: the loss sums and the logits' gradient.
  void loss(const Tensor& y, std::size_t rows) {
    const MlpLayer& last = layers.back();
    const float* logits_in = (mixed() ? logits : last.h).raw<float>();
    float* logits_grad = (mixed() ? dlogits : last.g).raw<float>();
    const float scale = 1.0f / static_cast<float>(rows);
    auto run = [&](auto target_type) {
      using Target = decltype(target_type);
      const Target* targets = y.raw<Target>();
      on_device(
          [&] {
            kernels::cpu::cross_entropy_fused(logits_in, targets, logits_grad, row_loss.raw<float>(),
                                              batch_loss.raw<float>(), loss_sum.raw<float>(), rows, classes, scale,
                                              &cpu_error);
          },
          [&](auto stream) {
            kernels::cuda::cross_entropy_fused(logits_in, targets, logits_grad, row_loss.raw<float>(),
                                               batch_loss.raw<float>(), loss_sum.raw<float>(), rows, classes, scale,
                                               cuda::device_error_record(device),
                                               reinterpret_cast<unsigned*>(blocks_done.raw<std::int32_t>()), stream);
          });
      if (cpu_error.code != 0) {  // the CPU's record, at once; CUDA's is read at the epoch's end
        const kernels::DeviceErrorRecord found = cpu_error;
        cpu_error = {};
        throw_kernel_error(found, device);
      }
    };
    if (y.dtype() == DType::i64)
      run(std::int64_t{});
    else
      run(std::int32_t{});
  }

  float* weight_grad(const MlpLayer& l) const { return (into_scratch ? l.weight_scratch : l.weight_grad).raw<float>(); }
  float* bias_grad(const MlpLayer& l) const { return (into_scratch ? l.bias_scratch : l.bias_grad).raw<float>(); }

  // The whole step on one batch: gradients, their average over ranks, the update.
  void run(const Tensor& x, const Tensor& y, std::size_t rows) {
    forward_backward(x, y, rows);
    reduce_and_update();
  }

  // Across ranks (distributed): the sum of every rank's gradients, one collective over the flat
  // buffer (on CUDA, NCCL on the stream being captured, so the graph holds it), then ÷ ranks.
  void reduce_and_update() {
    if (options.reduce_across_ranks && dist::is_initialized()) {  // (a world of one too: the same calls)
      const auto t0 = std::chrono::steady_clock::now();
      dist::all_reduce(grads);
      communication_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      mul_(grads, 1.0 / static_cast<double>(dist::world_size()));
    }
    // Weights already updated inside their GEMMs have no gradient: step() skips them.
    if (sgd_in_gemm)
      for (MlpLayer& l : layers) l.weight.set_grad(Tensor());
    optimizer->step();
  }

  // Gradient accumulation (micro_batches = K): micro-batch m takes rows m, m + K, m + 2K, ... of
  // the batch, the rows rank m of K would take (data::Shard), so that one process reproduces K
  // ranks' arithmetic: the gradients summed, then ÷ K. The step loss is the micro-batches' mean.
  void run_micro_batches(const Tensor& x, const Tensor& y, std::size_t rows) {
    const auto k = static_cast<std::int64_t>(options.micro_batches);
    const std::int64_t per = static_cast<std::int64_t>(rows) / k, in = x.size(1);
    Tensor loss_total = zeros({}, {.device = device});
    for (std::int64_t m = 0; m < k; ++m) {
      const Tensor xm = slice(x.reshape({per, k, in}), 1, m, 1).reshape({per, in});
      const Tensor ym = slice(y.reshape({per, k}), 1, m, 1).reshape({per});
      into_scratch = m > 0;
      forward_backward(xm, ym, static_cast<std::size_t>(per));
      into_scratch = false;
      if (m > 0) add_(grads, scratch);
      add_(loss_total, batch_loss);
    }
    mul_(grads, 1.0 / static_cast<double>(k));
    batch_loss.copy_(mul_(loss_total, 1.0 / static_cast<double>(k)));
    reduce_and_update();
  }

  void forward_backward(const Tensor& x, const Tensor& y, std::size_t rows) {
    const MlpLayer& last = layers.back();
    Tensor input = x;
    if (mixed()) {  // Note [fused step in bf16]: this step's bf16 copies
      kernels::CastList& with_input = half_copies.back();
      with_input.from[with_input.count - 1] = x.raw<float>();
      with_input.n[with_input.count - 1] = rows * layers.front().in;
      for (const kernels::CastList& list : half_copies) gemms.cast(list);
      input = x_half;
    }
    std::vector<bool> masked(layers.size(), false);
    const void* a = input.raw_bytes();
    for (std::size_t i = 0; i < layers.size(); ++i) {
      masked[i] = gemms.forward(layers[i], a, rows);
      a = layers[i].h.raw_bytes();
    }
    if (mixed()) gemms.cast(last.h, logits, rows * classes);
    loss(y, rows);
    if (mixed()) gemms.cast(dlogits, last.g, rows * classes);
    // Backward, top layer first. A layer's bias gradient comes from the GEMM below it when that
    // GEMM ran with DRELU_BGRAD (f32 only); otherwise from its own weight-gradient GEMM (BGRADB) or a sum.
    bool bias_grad_done = false;
    for (std::size_t i = layers.size(); i-- > 0;) {
      MlpLayer& l = layers[i];
      const void* below = i == 0 ? input.raw_bytes() : layers[i - 1].h.raw_bytes();
      const void* dz = l.g.raw_bytes();
      if (!sgd_in_gemm)
        gemms.weight_gradient(l, below, dz, rows, bias_grad_done, weight_grad(l), bias_grad(l));
      else if (!bias_grad_done)
        gemms.bias_grad_sum(l, rows, bias_grad(l));
      bias_grad_done =
          i > 0 && gemms.input_gradient(l, layers[i - 1], dz, rows, masked[i - 1], bias_grad(layers[i - 1]));
      // W ← W − lr·dzᵀ·a, after the input gradient's GEMM has read W (CPU, f32).
      if (sgd_in_gemm) {
        const float lr = optimizer->kernel_lr(l.weight_group);
        kernels::cpu::gemm(Transpose::yes, Transpose::no, l.out, l.in, rows, -lr, static_cast<const float*>(dz), l.out,
                           static_cast<const float*>(below), l.in, 1.0f, l.weight.raw<float>(), l.in);
      }
    }
  }

  void fall_back_to_eager(const std::string& why) {
    graph = std::make_unique<cuda::Graph>();
    graph_failed = true;
    graph_note = "eager (" + why + ")";
    std::fprintf(stderr, "ember: warning: FusedMlpStep: %s; every step runs eagerly from now on\n", graph_note.c_str());
  }

  // The parameters' .grad must be this step's buffers (a zero_grad(set_to_none) may have dropped them).
  void attach_grads() {
    auto attach = [](Tensor& param, const Tensor& grad) {
      const Tensor current = param.grad();
      if (!current.defined() || current.raw_bytes() != grad.raw_bytes()) param.set_grad(grad);
    };
    for (MlpLayer& l : layers) {
      attach(l.weight, l.weight_grad);
      attach(l.bias, l.bias_grad);
    }
  }
};

FusedMlpStep::FusedMlpStep(nn::Sequential& model, optim::Optimizer& optimizer, std::size_t batch_size,
                           FusedMlpStepOptions options)
    : impl_(std::make_unique<Impl>()) {
  const std::string why = fused_mlp_step_unsupported(model);
  EMBER_CHECK(why.empty(), ValueError, "FusedMlpStep: ", why,
              " (it trains Sequentials of Linear and ReLU, as nn::mlp makes)");
  EMBER_CHECK(batch_size > 0, ValueError, "FusedMlpStep: batch_size must be positive");
  EMBER_CHECK(!options.reduce_across_ranks || dist::is_initialized(), ValueError,
              "FusedMlpStep: reduce_across_ranks needs a process group; call dist::init() first");
  EMBER_CHECK(options.micro_batches >= 1 && batch_size % options.micro_batches == 0, ValueError,
              "FusedMlpStep: micro_batches must divide the batch size (", batch_size, "), got ", options.micro_batches);
  EMBER_CHECK(options.eager_steps >= 1, ValueError,
              "FusedMlpStep: eager_steps must be at least 1 (the buffers a captured "
              "step uses must exist before capture), got ",
              options.eager_steps);
  Impl& s = *impl_;
  s.optimizer = &optimizer;
  s.options = options;
  if (!fusion_enabled()) {  // Note [fusion off-switch]: plain GEMMs and kernels, the update apart
    s.options.gemm_epilogues = false;
    s.options.sgd_in_gemm = false;
  }
  s.batch = batch_size;
  const auto& children = model.named_children();
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (children[i].second->kind() != nn::ModuleKind::linear) continue;
    auto* linear = static_cast<nn::Linear*>(children[i].second.get());
    MlpLayer l;
    l.weight = linear->weight();
    l.bias = linear->bias();
    l.out = static_cast<std::size_t>(l.weight.size(0));
    l.in = static_cast<std::size_t>(l.weight.size(1));
    l.relu = i + 1 < children.size();
    const auto& groups = optimizer.param_groups();
    l.weight_group = groups.size();
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (const Tensor& p : groups[g].params)
        if (p.impl() == l.weight.impl()) l.weight_group = g;
    s.layers.push_back(l);
  }
  s.device = s.layers.front().weight.device();
  for (const MlpLayer& l : s.layers)
    EMBER_CHECK(l.weight.device() == s.device && l.bias.device() == s.device, DeviceError,
                "FusedMlpStep: the model's parameters are on more than one device; call model.to(device) first");
  const std::string refused = fused_mlp_step_unsupported(options.precision, s.device);
  EMBER_CHECK(refused.empty(), ValueError, "FusedMlpStep: ", refused);
  std::size_t widest = 0;
  for (const MlpLayer& l : s.layers) widest = std::max(widest, l.out);
  s.gemms = fused_mlp::MlpLayerGemms(s.device, options.precision, s.options.gemm_epilogues, batch_size, widest);
  const TensorOptions on_device{.device = s.device}, operands{.dtype = options.precision, .device = s.device};
  const auto B = static_cast<std::int64_t>(batch_size);
  std::int64_t total = 0;
  for (const MlpLayer& l : s.layers) total += l.weight.numel() + l.bias.numel();
  s.grads = zeros({total}, on_device);
  if (options.micro_batches > 1) s.scratch = zeros({total}, on_device);
  std::int64_t offset = 0;
  auto view = [&](const Tensor& flat, const Tensor& like, std::int64_t at) {
    return flat.narrow(0, at, like.numel()).reshape(like.shape());
  };
  for (MlpLayer& l : s.layers) {
    l.weight_grad = view(s.grads, l.weight, offset);
    l.bias_grad = view(s.grads, l.bias, offset + l.weight.numel());
    if (s.scratch.defined()) {
      l.weight_scratch = view(s.scratch, l.weight, offset);
      l.bias_scratch = view(s.scratch, l.bias, offset + l.weight.numel());
    }
    offset += l.weight.numel() + l.bias.numel();
    l.h = zeros({B, static_cast<std::int64_t>(l.out)}, operands);
    l.g = zeros({B, static_cast<std::int64_t>(l.out)}, operands);
    if (const std::size_t ws = kernels::sum_workspace_size(1, batch_size, l.out); ws > 0)
      l.sum_workspace = zeros({static_cast<std::int64_t>(ws)}, on_device);
    if (l.relu && s.device.is_cuda())
      l.mask = zeros({static_cast<std::int64_t>(kernels::relu_mask_bytes(batch_size, l.out))},
                     {.dtype = DType::u8, .device = s.device});
    if (s.mixed()) {
      l.weight_half = zeros(l.weight.shape(), operands);
      l.bias_half = zeros(l.bias.shape(), operands);
    }
  }
  s.classes = s.layers.back().out;
  if (s.mixed()) {
    const auto C = static_cast<std::int64_t>(s.classes);
    s.x_half = zeros({B, static_cast<std::int64_t>(s.layers.front().in)}, operands);
    s.half_copies = fused_mlp::half_copy_lists(s.layers, s.x_half);
    s.logits = zeros({B, C}, on_device);
    s.dlogits = zeros({B, C}, on_device);
  }
  s.row_loss = zeros({B}, on_device);
  s.batch_loss = zeros({}, on_device);
  s.loss_sum = zeros({}, on_device);
  s.blocks_done = zeros({1}, {.dtype = DType::i32, .device = s.device});
  s.x_static = zeros({B, static_cast<std::int64_t>(s.layers.front().in)}, on_device);
  if (!s.device.is_cuda() || !options.cuda_graph)
    s.graph_note = "eager";
  else if (cuda::sync_debug())
    s.graph_note = "eager (EMBER_SYNC_DEBUG=1 forbids graph capture)";
}

FusedMlpStep::~FusedMlpStep() = default;

void FusedMlpStep::step(const Tensor& x, const Tensor& y) {
  Impl& s = *impl_;
  EMBER_CHECK(x.defined() && y.defined(), ValueError, "FusedMlpStep::step: x and y must be defined tensors");
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"x", x}, {"y", y}})
    if (t.device() != s.device)
      throw DeviceError(detail::concat("FusedMlpStep::step: '", name, "' is on ", t.device(), " but the model is on ",
                                       s.device, ": move every batch, inputs and labels, with .to(", s.device, ")"));
  EMBER_CHECK(x.dtype() == DType::f32 && x.dim() == 2 && x.size(1) == static_cast<std::int64_t>(s.layers.front().in),
              ShapeError, "FusedMlpStep::step: expected x f32 [B, ", s.layers.front().in, "], got ", x.dtype(), " ",
              shape_str(x.shape()));
  const auto rows = static_cast<std::size_t>(x.size(0));
  EMBER_CHECK(rows >= 1 && rows <= s.batch, ShapeError, "FusedMlpStep::step: the batch has ", rows,
              " rows; this step was built for 1 to ", s.batch);
  EMBER_CHECK((y.dtype() == DType::i32 || y.dtype() == DType::i64) && y.dim() == 1 &&
                  y.size(0) == static_cast<std::int64_t>(rows),
              ShapeError, "FusedMlpStep::step: expected y i32 or i64 [", rows, "], got ", y.dtype(), " ",
              shape_str(y.shape()));
  for (const MlpLayer& l : s.layers)
    EMBER_CHECK(l.weight.device() == s.device, DeviceError, "FusedMlpStep::step: the model moved to ",
                l.weight.device(), " after this step was built for ", s.device,
                "; build a new FusedMlpStep after model.to()");
  NoGradGuard no_grad;
  std::optional<cuda::DeviceGuard> guard;
  if (s.cuda()) guard.emplace(s.device);
  s.attach_grads();
  s.sgd_in_gemm = s.sgd_in_gemm_applies();  // (the optimizer's settings may have changed since the last step)
  if (s.options.micro_batches > 1) {
    EMBER_CHECK(rows % s.options.micro_batches == 0, ShapeError, "FusedMlpStep::step: a batch of ", rows,
                " rows cannot be split into ", s.options.micro_batches, " equal micro-batches");
    s.run_micro_batches(x, y, rows);
    ++s.steps;
    return;
  }
  const bool graphable = s.cuda() && s.options.cuda_graph && !s.graph_failed && !cuda::sync_debug() && rows == s.batch;
  if (!graphable) {
    s.run(x, y, rows);
    ++s.steps;
    return;
  }
  if (!s.y_static.defined() || s.y_static.dtype() != y.dtype()) {
    s.graph = std::make_unique<cuda::Graph>();  // the labels' buffer changes: capture again
    s.full_steps = 0;
    s.y_static = zeros({static_cast<std::int64_t>(s.batch)}, {.dtype = y.dtype(), .device = s.device});
  }
  s.x_static.copy_(x, true);
  s.y_static.copy_(y, true);
  s.optimizer->sync_learning_rates();
  if (s.graph->ready() && !s.unchanged_since(s.captured)) {
    s.graph = std::make_unique<cuda::Graph>();  // settings baked into the graph changed
    s.full_steps = 0;
  }
  // Capture only after full-batch eager steps have made every buffer the step touches (the
  // optimizer's state, its slot table, cuBLAS's workspaces), and only if nothing about the
  // optimizer changed since the last of them (a loaded state, momentum switched on): such a step
  // would make buffers inside the capture, which exist only in the graph. It runs eagerly first.
  if (!s.graph->ready() && s.full_steps >= s.options.eager_steps && !s.unchanged_since(s.last_eager))
    s.full_steps = s.options.eager_steps - 1;
  if (!s.graph->ready() && s.full_steps >= s.options.eager_steps) {
    try {
      s.graph->begin_capture(s.stream());
      s.run(s.x_static, s.y_static, rows);
      s.graph->end_capture();
      // Note [graph-safe kernels]: a replayed step allocates nothing. A library that allocated
      // inside the capture (cuBLAS without its workspace) would make every replay allocate.
      EMBER_CHECK(s.graph->allocation_nodes() == 0, CudaError, "the captured step has ", s.graph->allocation_nodes(),
                  " memory-allocation node(s): something in it allocates device memory");
      s.captured = s.baked_in();
      s.graph_note = detail::concat("CUDA graph, ", s.graph->kernel_nodes(), " kernels per step (the step issues ",
                                    s.step_launches, " kernels and library calls)");
    } catch (const Error& e) {
      // Something in the step cannot be captured: run eagerly from now on, and say why — here,
      // when it happens, and in describe().
      s.graph->abandon_capture();
      s.fall_back_to_eager(std::string("graph capture failed: ") + e.what());
    } catch (...) {
      s.graph->abandon_capture();  // leave the stream usable, then let the error go on
      throw;
    }
    // A replayed graph holds a collective, so it is collective too: every rank replays, or none
    // does (the step then runs eagerly everywhere, this one included).
    if (s.options.reduce_across_ranks && !dist::all_agree(s.graph->ready()) && s.graph->ready())
      s.fall_back_to_eager("the capture failed on another rank");
  }
  if (s.graph->ready()) {
    s.graph->replay(s.stream());
    ++s.replays;
  } else {
    const std::uint64_t before = s.launches_issued();
    s.run(s.x_static, s.y_static, rows);
    s.step_launches = static_cast<std::size_t>(s.launches_issued() - before);
    ++s.full_steps;
    s.last_eager = s.baked_in();
  }
  ++s.steps;
}

const Tensor& FusedMlpStep::loss_sum() const { return impl_->loss_sum; }
const Tensor& FusedMlpStep::batch_loss() const { return impl_->batch_loss; }
void FusedMlpStep::reset_loss_sum() { impl_->loss_sum.zero_(); }
bool FusedMlpStep::graph_captured() const { return impl_->graph->ready(); }
std::size_t FusedMlpStep::graph_kernel_nodes() const { return impl_->graph->kernel_nodes(); }
std::size_t FusedMlpStep::step_launches() const { return impl_->step_launches; }
std::size_t FusedMlpStep::graph_replays() const { return impl_->replays; }

std::vector<std::pair<std::string, std::int64_t>> FusedMlpStep::counters() const {
  auto count = [](std::size_t n) { return static_cast<std::int64_t>(n); };
  return {{"graph_kernels", count(graph_kernel_nodes())},
          {"step_launches", count(step_launches())},
          {"graph_replays", count(graph_replays())}};
}
bool FusedMlpStep::sgd_in_gemm_applied() const { return impl_->sgd_in_gemm; }
double FusedMlpStep::communication_seconds() const { return impl_->communication_s; }
void FusedMlpStep::reset_communication_seconds() { impl_->communication_s = 0; }

std::string FusedMlpStep::describe() const {
  const Impl& s = *impl_;
  std::string text = "fused MLP step, " + (s.graph_note.empty() ? std::string("eager until captured") : s.graph_note);
  if (!s.cuda())
    return text + (s.sgd_in_gemm ? "; CPU kernels, SGD's weight update inside the GEMMs" : "; CPU kernels");
  if (s.mixed()) text += "; bf16 operands and activations, f32 master weights and gradients";
  if (!s.options.gemm_epilogues) return text + "; plain GEMMs and ember's bias/ReLU kernels (epilogues off)";
  const Tensor& input = s.mixed() ? s.x_half : s.x_static;
  const bool fwd = s.gemms.lt(s.gemms.forward_gemm(s.layers.front(), input.raw_bytes(), s.batch));
  return text + (fwd ? "; cuBLASLt epilogues" : "; cuBLASLt epilogues unsupported here, plain GEMMs and own kernels");
}

}  // namespace ember::train
