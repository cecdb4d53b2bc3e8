// The ember side of the op-by-op comparison with PyTorch (ops_torch.py):
//   ops_tool INPUTS OUT
// reads the random tensors ops_torch.py wrote to INPUTS (a, b, c of shapes [3,4,5], [4,5],
// [3,4,5] in f64; x, weight, bias of a LayerNorm in f32), applies each op, and writes to OUT every
// result `<case>` and the gradients `<case>.grad.<input>` of ½·Σ result² — the same loss the
// script takes in PyTorch, so forward and derivative rule are both compared.
#include <functional>
#include <iostream>
#include <string>

#include "ember.h"

using namespace ember;

namespace {

class Cases {
 public:
  explicit Cases(const std::string& inputs_path) : inputs_(load_safetensors(inputs_path)) {}

  // A fresh leaf copy of the input `name`, requiring grad.
  Tensor input(const std::string& name) const {
    const Tensor* t = find_tensor(inputs_.tensors, name);
    if (!t) throw ValueError("ops_tool: the inputs have no tensor '" + name + "'");
    return t->detach().clone().set_requires_grad();
  }

  // Runs `op` on fresh copies of the inputs named, records its result and their gradients.
  void add(const std::string& name, const std::vector<std::string>& inputs,
           const std::function<Tensor(const std::vector<Tensor>&)>& op) {
    std::vector<Tensor> leaves;
    for (const std::string& input_name : inputs) leaves.push_back(input(input_name));
    const Tensor out = op(leaves);
    const bool floating = out.dtype() == DType::f32 || out.dtype() == DType::f64;
    results_.emplace_back(name, floating ? out.detach() : out.to(DType::f64));
    if (!floating) return;  // comparisons: masks, no gradient
    (0.5 * sum(out * out)).backward();
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].grad().defined()) results_.emplace_back(name + ".grad." + inputs[i], leaves[i].grad());
  }

  void add_module(const std::string& name, nn::Module& module, const std::string& input_name) {
    add(name, {input_name}, [&](const std::vector<Tensor>& in) { return module(in[0]); });
    for (auto& [parameter, tensor] : module.named_parameters())
      if (tensor.grad().defined()) results_.emplace_back(name + ".grad." + parameter, tensor.grad());
  }

  void save(const std::string& path) const { save_safetensors(path, results_); }

 private:
  Checkpoint inputs_;
  StateDict results_;
};

void run_cases(Cases& c) {
  using V = const std::vector<Tensor>&;
  c.add("erf", {"a"}, [](V t) { return erf(t[0]); });
  c.add("rsqrt", {"a"}, [](V t) { return rsqrt(abs(t[0]) + 0.5); });
  c.add("abs", {"a"}, [](V t) { return abs(t[0]); });
  c.add("clamp", {"a"}, [](V t) { return clamp(t[0], -0.5, 0.7); });
  c.add("clamp_min", {"a"}, [](V t) { return clamp(t[0], 0.0, INFINITY); });
  c.add("maximum", {"a", "b"}, [](V t) { return maximum(t[0], t[1]); });
  c.add("minimum", {"a", "b"}, [](V t) { return minimum(t[0], t[1]); });
  c.add("where", {"a", "b"}, [](V t) { return where(gt(t[0], t[1]), t[0], t[1] * 2.0); });
  c.add("where_scalar_cond", {"a", "c"}, [](V t) { return where(lt(t[1], 0.0), t[0], t[1]); });
  c.add("gt", {"a", "b"}, [](V t) { return gt(t[0], t[1]); });
  c.add("lt", {"a", "b"}, [](V t) { return lt(t[0], t[1]); });
  c.add("ge", {"a", "c"}, [](V t) { return ge(t[0], t[1]); });
  c.add("le", {"a", "c"}, [](V t) { return le(t[0], t[1]); });
  c.add("eq", {"a", "c"}, [](V t) { return eq(t[0], t[1]); });
  c.add("ne", {"a", "c"}, [](V t) { return ne(t[0], t[1]); });
  c.add("var_all", {"a"}, [](V t) { return var(t[0]); });
  c.add("std_all", {"a"}, [](V t) { return ember::std(t[0]); });
  c.add("var_dims", {"a"}, [](V t) { return var(t[0], {0, 2}, 1, true); });
  c.add("var_biased", {"a"}, [](V t) { return var(t[0], -1, 0); });
  c.add("std_dim", {"a"}, [](V t) { return ember::std(t[0], 1); });
  c.add("std_dims_keepdim", {"a"}, [](V t) { return ember::std(t[0], {1, 2}, 0, true); });
  c.add("sum_dim", {"a"}, [](V t) { return sum(t[0], -1, true); });
  c.add("mean_dim", {"a"}, [](V t) { return mean(t[0], 1); });
  c.add("unsqueeze", {"a"}, [](V t) { return unsqueeze(t[0], 1) * 3.0; });
  c.add("unsqueeze_end", {"b"}, [](V t) { return unsqueeze(t[0], -1) * 3.0; });
  c.add("permute", {"a"}, [](V t) { return permute(t[0], {2, 0, 1}); });
  c.add("broadcast_to", {"b"}, [](V t) { return broadcast_to(t[0], {2, 4, 5}); });
  c.add("softmax_dim0", {"a"}, [](V t) { return softmax(t[0], 0); });
  c.add("log_softmax_dim1", {"a"}, [](V t) { return log_softmax(t[0], 1); });
  c.add("softmax_last", {"a"}, [](V t) { return softmax(t[0], -1); });

  nn::Tanh tanh_module;
  nn::Sigmoid sigmoid_module;
  nn::GELU gelu_exact, gelu_tanh("tanh");
  nn::Softmax softmax_module(1);
  nn::LogSoftmax log_softmax_module(0);
  c.add_module("Tanh", tanh_module, "a");
  c.add_module("Sigmoid", sigmoid_module, "a");
  c.add_module("GELU", gelu_exact, "a");
  c.add_module("GELU_tanh", gelu_tanh, "a");
  c.add_module("Softmax", softmax_module, "a");
  c.add_module("LogSoftmax", log_softmax_module, "a");
  nn::LayerNorm norm({5});
  norm.load_state_dict({{"weight", c.input("weight")}, {"bias", c.input("bias")}});
  c.add_module("LayerNorm", norm, "x");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: ops_tool INPUTS OUT\n";
    return 2;
  }
  try {
    Cases cases(argv[1]);
    run_cases(cases);
    cases.save(argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
