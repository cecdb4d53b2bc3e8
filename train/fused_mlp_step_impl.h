// FusedMlpStep's state, shared by train/fused_mlp_step.cpp (construction, the CUDA graph around
// the step, the public API) and train/fused_mlp_step_math.cpp (the step's arithmetic: the loss, the
// order of the layers' GEMMs, micro-batches, the update). Internal to train/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"
#include "train/fused_mlp_layers.h"
#include "train/fused_mlp_step.h"

namespace ember::train {

using fused_mlp::MlpLayer;

struct FusedMlpStep::Impl {
  optim::Optimizer* optimizer = nullptr;
  StepOptions options;
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
  bool sgd_in_gemm_applies() const;

  // What a captured update keeps as kernel arguments or pointers: the optimizer's settings other
  // than the rate (which is read from device memory), and the version of its state (new buffers
  // or slot tables mean new pointers). A change means capturing again. Compared field by field
  // before every replay, so nothing is built on the host per step.
  struct BakedIn {
    std::uint64_t version = 0;
    std::vector<optim::GroupOptions> groups;
  };

  BakedIn baked_in() const;

  // Whether the optimizer is as `then` saw it: every option but the rate, compared by
  // GroupOptions' defaulted == (so an option added later takes part without a change here). The
  // rate is left out on purpose: it is read from memory at every replay, and comparing it would
  // capture the graph again at every scheduler step.
  bool unchanged_since(const BakedIn& then) const;

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
  void loss(const Tensor& y, std::size_t rows);

  float* weight_grad(const MlpLayer& l) const { return (into_scratch ? l.weight_scratch : l.weight_grad).raw<float>(); }
  float* bias_grad(const MlpLayer& l) const { return (into_scratch ? l.bias_scratch : l.bias_grad).raw<float>(); }

  // The whole step on one batch: gradients, their average over ranks, the update.
  void run(const Tensor& x, const Tensor& y, std::size_t rows);

  // Across ranks (distributed): the sum of every rank's gradients, one collective over the flat
  // buffer (on CUDA, NCCL on the stream being captured, so the graph holds it), then ÷ ranks.
  void reduce_and_update();

  // Gradient accumulation (micro_batches = K): micro-batch m takes rows m, m + K, m + 2K, ... of
  // the batch, the rows rank m of K would take (data::Shard), so that one process reproduces K
  // ranks' arithmetic: the gradients summed, then ÷ K. The step loss is the micro-batches' mean.
  void run_micro_batches(const Tensor& x, const Tensor& y, std::size_t rows);

  // Forward, loss and backward of one batch (or micro-batch) into the gradient buffers.
  void forward_backward(const Tensor& x, const Tensor& y, std::size_t rows);

  // Drops the graph for good, saying why, here and in describe().
  void fall_back_to_eager(const std::string& why);

  // The parameters' .grad must be this step's buffers (a zero_grad(set_to_none) may have dropped them).
  void attach_grads();
};

}  // namespace ember::train
