// nn::Module: the base of every layer and model, shaped like PyTorch's — parameters, buffers and
// submodules registered by name, dotted names (`0.weight`, `fc1.bias`), to(device) in place,
// train/eval, zero_grad, state_dict/load_state_dict, and a printable summary.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/io/serialize.h"
#include "core/tensor/tensor.h"

namespace ember::nn {

// What a module is, for code that treats some kinds specially (a training step that fuses Linear
// and ReLU layers): asked through Module::kind(), so that no such code tests C++ types. A module
// of a kind not named here, an extension's included, is `other`; a subclass that computes
// something else than its base (another forward()) says `other` too, or the fused paths would
// compute its base's function.
enum class ModuleKind { other, sequential, linear, relu, dropout, conv2d, max_pool2d };

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Calls forward() after checking that `input` is on the module's device; a mismatch throws
  // "... (argument 'input' of Linear '0')", naming the module.
  Tensor operator()(const Tensor& input);
  virtual Tensor forward(const Tensor& input) = 0;

  // The class name as PyTorch prints it ("Linear") and the arguments shown in the summary
  // ("in_features=784, out_features=32, bias=True").
  virtual std::string type_name() const = 0;
  virtual std::string extra_repr() const { return ""; }
  virtual ModuleKind kind() const { return ModuleKind::other; }
  // A layer that draws random numbers from a counter-based stream (Dropout, MultiheadAttention's
  // dropout) says how far into it it is: a training checkpoint keeps the position, so that a
  // resumed run draws what an uninterrupted one would, and each rank of a data-parallel run moves
  // its own far apart. Null for a layer that draws nothing.
  virtual std::uint64_t* random_offset() { return nullptr; }

  // The name this module has inside its parent ("0", "fc1"); empty for a top-level module.
  const std::string& name() const { return name_; }
  // The module as its errors name it: "Linear 'fc1'", or "Linear" at the top level.
  std::string describe() const;
  // Throws ShapeError "<describe()>: expected <what>, got an input of shape [...]" unless `ok`:
  // a layer checks its input's shape so that a mistake names the layer, not an op inside it.
  void check_input_shape(bool ok, const Tensor& input, const std::string& what) const;

  // Each tensor once, in registration order: a layer used in two places of a model (shared
  // weights) contributes its parameters once, under the first name. state_dict() keeps every name.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::int64_t parameter_count() const;

  // Moves parameters (and their gradients) and buffers to `device`, in place: tensors held
  // elsewhere (an optimizer's list of parameters) see the move. Returns *this.
  Module& to(Device device);
  // Every floating parameter and buffer converted to `dtype` in place (PyTorch's model.to(dtype)):
  // bf16 or f16 for inference in that dtype, or a checkpoint of it; training keeps f32 parameters
  // and uses autocast (core/ops/autocast.h). Integer buffers stay as they are.
  Module& to(DType dtype);
  Device device() const;  // where the parameters are (the CPU for a module without any)

  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // set_to_none (PyTorch's default) drops the gradients; otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Parameters then buffers, module by module in registration order (PyTorch's order).
  StateDict state_dict() const;
  // Copies values into the registered tensors (on their current device). strict: every key must
  // match, none may be missing or unexpected. Shape and dtype mismatches are always errors; the
  // message lists every problem found.
  void load_state_dict(const StateDict& state, bool strict = true);

  // The multi-line summary PyTorch prints for a model, e.g.
  //   Sequential(
  //     (0): Linear(in_features=784, out_features=32, bias=True)
  //     (1): ReLU()
  //   )
  std::string repr() const;

 protected:
  Module() = default;
  // Register under a name; returns the tensor (or module) for the subclass to keep.
  Tensor register_parameter(const std::string& name, Tensor tensor);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Throws the device-mismatch error naming this module if `input` is not on its device.
  void check_input_device(const Tensor& input) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool parameters, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;

  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

// Writes the module's state_dict as safetensors, with metadata "format" = "ember", "ember_version",
// "model" (the summary) and whatever `metadata` adds (e.g. "epoch"). Atomic and durable.
void save(const Module& module, const std::string& path, std::map<std::string, std::string> metadata = {});
// Loads a checkpoint into the module, on the module's current device; returns the metadata.
// Keys under "optimizer." (a training checkpoint's optimizer state) are ignored.
std::map<std::string, std::string> load(Module& module, const std::string& path, bool strict = true);

}  // namespace ember::nn
