// The ember side of the op-by-op comparison with PyTorch (ops_torch.py):
//   ops_tool OUT
//   ops_tool --op-names   the op table, one op a line: `name gradcheck=0|1 cuda=0|1 torch=0|1`
//                         (scripts/check_op_docs.py compares it with docs/ops.md)
//   ops_tool --autocast-policy   each op's autocast policy, `name cpu cuda` (Note [autocast policy])
// runs every sample of the op table (tests/support/op_table.h) that has a PyTorch spelling, and
// the modules written from ops, in f64 on the CPU, and writes to OUT (safetensors) for each case
// `<op>[<k>]` its inputs `.in.<i>`, its result `.out`, the upstream gradient `.upstream` and the
// gradients `.grad.<i>` of ⟨result, upstream⟩, with the PyTorch spelling (`.torch`), the
// sample's label (`.label`) and the differentiated inputs (`.grads`, "0,2") in the metadata, and
// the result's dtype under autocast to bf16 on the CPU with the floating inputs in f32 and in bf16
// (`.autocast`, "bf16,bf16"), which autocast_torch.py compares with PyTorch's.
// ops_torch.py evaluates each spelling on the same inputs and compares: the case list is the
// table's, so the names cannot drift apart.
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ember.h"
#include "support/op_table.h"

using namespace ember;
using namespace ember::testing;

namespace {

class Cases {
 public:
  // One case: the sample's inputs, its run, and what ops_torch.py needs to recompute it.
  void add(const std::string& name, const Sample& sample, const SampleRun& run,
           const std::vector<std::size_t>& differentiated) {
    for (std::size_t i = 0; i < sample.inputs.size(); ++i)
      tensors_.emplace_back(name + ".in." + std::to_string(i), sample.inputs[i]);
    const bool floating = run.result.dtype() == DType::f32 || run.result.dtype() == DType::f64;
    tensors_.emplace_back(name + ".out", floating ? run.result : run.result.to(DType::f64));
    std::string grads;
    for (std::size_t k = 0; k < run.grads.size(); ++k) {
      if (!run.grads[k].defined()) continue;
      tensors_.emplace_back(name + ".grad." + std::to_string(differentiated[k]), run.grads[k]);
      grads += (grads.empty() ? "" : ",") + std::to_string(differentiated[k]);
    }
    if (run.upstream.defined()) tensors_.emplace_back(name + ".upstream", run.upstream.to(run.result.dtype()));
    metadata_[name + ".torch"] = sample.torch;
    metadata_[name + ".label"] = sample.label;
    metadata_[name + ".grads"] = grads;
  }

  void note(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void save(const std::string& path) const { save_safetensors(path, tensors_, metadata_); }

 private:
  StateDict tensors_;
  std::map<std::string, std::string> metadata_;
};

// The dtype of the sample's result under autocast to bf16 on the CPU, its floating inputs in `dtype`.
std::string autocast_result(const Sample& sample, DType dtype) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : sample.inputs) inputs.push_back(input_as(t, dtype, Device::cpu()));
  const auto scope = autocast(Device::cpu(), DType::bf16);
  return std::string(dtype_name(sample.apply(inputs).dtype()));
}

void add_table(Cases& cases) {
  for (const OpInfo& op : op_table()) {
    const std::vector<Sample> samples = op.samples();
    for (std::size_t k = 0; k < samples.size(); ++k) {
      if (samples[k].torch.empty()) continue;
      const SampleRun run = run_sample(op, samples[k], DType::f64, Device::cpu());
      const std::string name = op.name + "[" + std::to_string(k) + "]";
      cases.add(name, samples[k], run, differentiated_inputs(op, samples[k]));
      cases.note(name + ".autocast",
                 autocast_result(samples[k], DType::f32) + "," + autocast_result(samples[k], DType::bf16));
    }
  }
}

// A module on input 0, the inputs after it loaded as its parameters in order; the gradients of
// the parameters are reported as those of the inputs they came from.
void add_module(Cases& cases, const std::string& name, std::shared_ptr<nn::Module> module, std::vector<Tensor> inputs,
                const std::string& torch) {
  const std::vector<std::string> names = [&] {
    std::vector<std::string> n;
    for (const auto& [parameter, tensor] : module->named_parameters()) n.push_back(parameter);
    return n;
  }();
  StateDict state;
  for (std::size_t i = 1; i < inputs.size(); ++i) state.emplace_back(names.at(i - 1), inputs[i]);
  if (!state.empty()) module->load_state_dict(state);
  const OpInfo op{name, true, false, false, kExact, {}};
  const Sample sample{.label = name,
                      .inputs = inputs,
                      .apply = [module](const std::vector<Tensor>& x) { return (*module)(x[0]); },
                      .grad_inputs = {0},
                      .torch = torch};
  SampleRun run = run_sample(op, sample, inputs[0].dtype(), Device::cpu());
  std::vector<std::size_t> differentiated{0};
  for (std::size_t i = 0; i < names.size(); ++i) {
    run.grads.push_back(module->named_parameters()[i].second.grad());
    differentiated.push_back(i + 1);
  }
  cases.add(name + "[0]", sample, run, differentiated);
}

void add_modules(Cases& cases) {
  const Tensor a = random_input({3, 4, 5}, 200);
  add_module(cases, "nn.Tanh", std::make_shared<nn::Tanh>(), {a}, "torch.nn.Tanh()(x0)");
  add_module(cases, "nn.Sigmoid", std::make_shared<nn::Sigmoid>(), {a}, "torch.nn.Sigmoid()(x0)");
  add_module(cases, "nn.GELU", std::make_shared<nn::GELU>(), {a}, "torch.nn.GELU()(x0)");
  add_module(cases, "nn.GELU_tanh", std::make_shared<nn::GELU>("tanh"), {a}, "torch.nn.GELU(approximate='tanh')(x0)");
  add_module(cases, "nn.Softmax", std::make_shared<nn::Softmax>(1), {a}, "torch.nn.Softmax(dim=1)(x0)");
  add_module(cases, "nn.LogSoftmax", std::make_shared<nn::LogSoftmax>(0), {a}, "torch.nn.LogSoftmax(dim=0)(x0)");
  // f32, as its parameters are.
  add_module(cases, "nn.LayerNorm", std::make_shared<nn::LayerNorm>(std::vector<std::int64_t>{5}),
             {random_input({6, 5}, 201).to(DType::f32), random_input({5}, 202, 0.5, 1.5).to(DType::f32),
              random_input({5}, 203).to(DType::f32)},
             "F.layer_norm(x0, (5,), x1, x2)");
}

int print_autocast_policy() {
  for (const OpInfo& op : op_table()) {
    const std::optional<OpKey> key = op_key(op.name);
    if (!key) {
      std::cerr << "ops_tool: " << op.name << " is in the op table but not in core/ops/op_list.h\n";
      return 1;
    }
    std::cout << op.name << " " << cast_policy_name(autocast_policy(*key, Device::cpu())) << " "
              << cast_policy_name(autocast_policy(*key, Device::cuda())) << "\n";
  }
  return 0;
}

int print_op_names() {
  for (const OpInfo& op : op_table()) {
    bool gradcheck = false, torch = false;
    for (const Sample& s : op.samples()) {
      gradcheck |= s.gradcheck && !differentiated_inputs(op, s).empty();
      torch |= !s.torch.empty();
    }
    std::cout << op.name << " gradcheck=" << gradcheck << " cuda=" << op.cuda << " torch=" << torch << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ops_tool OUT | --op-names | --autocast-policy\n";
    return 2;
  }
  if (std::string(argv[1]) == "--op-names") return print_op_names();
  if (std::string(argv[1]) == "--autocast-policy") return print_autocast_policy();
  try {
    Cases cases;
    add_table(cases);
    add_modules(cases);
    cases.save(argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
