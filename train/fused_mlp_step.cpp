// The MLP training step (see fused_mlp_step.h): its buffers, the CUDA graph around it, and what it
// reports. The arithmetic of one step is in train/fused_mlp_step_math.cpp.
#include "train/fused_mlp_step_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/fusion.h"
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

FusedMlpStep::Impl::BakedIn FusedMlpStep::Impl::baked_in() const {
  BakedIn now{optimizer->version(), {}};
  for (const optim::ParamGroup& g : optimizer->param_groups()) now.groups.push_back(g.options);
  return now;
}

namespace {
// The number of fields of an aggregate: the most initializers T{...} accepts.
struct AnyField {
  template <class T>
  constexpr operator T() const {
    return T{};
  }
};
template <class T, class... Fields>
constexpr std::size_t aggregate_fields() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; })
    return aggregate_fields<T, Fields..., AnyField>();
  else
    return sizeof...(Fields);
}
}  // namespace

bool FusedMlpStep::Impl::unchanged_since(const BakedIn& then) const {
  // A new option is compared by GroupOptions' defaulted ==, as every option but the rate should be;
  // this assert makes whoever adds one decide whether it is, like the rate, read from memory at
  // each replay (and so to be left out here) instead.
  static_assert(aggregate_fields<optim::GroupOptions>() == 8, "a new GroupOptions field: see unchanged_since");
  const auto& groups = optimizer->param_groups();
  if (optimizer->version() != then.version || groups.size() != then.groups.size()) return false;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    optim::GroupOptions now = groups[i].options;
    now.lr = then.groups[i].lr;
    if (!(now == then.groups[i])) return false;
  }
  return true;
}

void FusedMlpStep::Impl::fall_back_to_eager(const std::string& why) {
  graph = std::make_unique<cuda::Graph>();
  graph_failed = true;
  graph_note = "eager (" + why + ")";
  std::fprintf(stderr, "ember: warning: FusedMlpStep: %s; every step runs eagerly from now on\n", graph_note.c_str());
}

FusedMlpStep::FusedMlpStep(nn::Sequential& model, optim::Optimizer& optimizer, std::size_t batch_size,
                           const StepOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const std::string why = fused_mlp_step_unsupported(model);
  EMBER_CHECK(why.empty(), ValueError, "FusedMlpStep: ", why,
              " (it trains Sequentials of Linear and ReLU, as nn::mlp makes)");
  EMBER_CHECK(batch_size > 0, ValueError, "FusedMlpStep: batch_size must be positive");
  EMBER_CHECK(options.loss.is_plain_cross_entropy(), ValueError, "FusedMlpStep: it computes the plain softmax ",
              "cross-entropy, not ", options.loss.describe(), "; the autograd step computes any loss");
  EMBER_CHECK(!options.reduce_across_ranks || dist::is_initialized(), ValueError,
              "FusedMlpStep: reduce_across_ranks needs a process group; call dist::init() first");
  EMBER_CHECK(options.micro_batches >= 1 && batch_size % options.micro_batches == 0, ValueError,
              "FusedMlpStep: micro_batches must divide the batch size (", batch_size, "), got ", options.micro_batches);
  EMBER_CHECK(options.fused.eager_steps >= 1, ValueError,
              "FusedMlpStep: eager_steps must be at least 1 (the buffers a captured "
              "step uses must exist before capture), got ",
              options.fused.eager_steps);
  Impl& s = *impl_;
  s.optimizer = &optimizer;
  s.options = options;
  if (!fusion_enabled()) {  // Note [fusion off-switch]: plain GEMMs and kernels, the update apart
    s.options.fused.gemm_epilogues = false;
    s.options.fused.sgd_in_gemm = false;
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
  s.gemms = fused_mlp::MlpLayerGemms(s.device, options.precision, s.options.fused.gemm_epilogues, batch_size, widest);
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
  if (!s.device.is_cuda() || !options.fused.cuda_graph)
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
  const bool graphable =
      s.cuda() && s.options.fused.cuda_graph && !s.graph_failed && !cuda::sync_debug() && rows == s.batch;
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
  if (!s.graph->ready() && s.full_steps >= s.options.fused.eager_steps && !s.unchanged_since(s.last_eager))
    s.full_steps = s.options.fused.eager_steps - 1;
  if (!s.graph->ready() && s.full_steps >= s.options.fused.eager_steps) {
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

const nn::Loss& FusedMlpStep::loss() const { return impl_->options.loss; }

std::string FusedMlpStep::describe() const {
  const Impl& s = *impl_;
  std::string text = "fused MLP step, " + (s.graph_note.empty() ? std::string("eager until captured") : s.graph_note);
  if (!s.cuda())
    return text + (s.sgd_in_gemm ? "; CPU kernels, SGD's weight update inside the GEMMs" : "; CPU kernels");
  if (s.mixed()) text += "; bf16 operands and activations, f32 master weights and gradients";
  if (!s.options.fused.gemm_epilogues) return text + "; plain GEMMs and ember's bias/ReLU kernels (epilogues off)";
  const Tensor& input = s.mixed() ? s.x_half : s.x_static;
  const bool fwd = s.gemms.lt(s.gemms.forward_gemm(s.layers.front(), input.raw_bytes(), s.batch));
  return text + (fwd ? "; cuBLASLt epilogues" : "; cuBLASLt epilogues unsupported here, plain GEMMs and own kernels");
}

}  // namespace ember::train
