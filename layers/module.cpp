// nn::Module: registration, traversal, device moves, state dicts and the printed summary.
#include "layers/module.h"

#include <set>
#include <sstream>

#include "base/config.h"
#include "core/ops/op_helpers.h"
#include "core/tensor/autograd.h"

namespace ember::nn {

Tensor Module::operator()(const Tensor& input) {
  check_input_device(input);
  return forward(input);
}

std::string Module::describe() const { return name_.empty() ? type_name() : type_name() + " '" + name_ + "'"; }

void Module::check_input_shape(bool ok, const Tensor& input, const std::string& what) const {
  EMBER_CHECK(ok, ShapeError, describe(), ": expected ", what, ", got an input of shape ", shape_str(input.shape()));
}

void Module::check_input_device(const Tensor& input) const {
  if (parameters_.empty() || !input.defined()) return;
  const Device expected = parameters_.front().second.device();
  if (input.device() != expected)
    throw DeviceError(ext::device_mismatch_message(describe(), "input", expected, input.device()));
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, type_name(),
              ": invalid parameter name '", name, "' (non-empty, without dots)");
  if (tensor.defined() && !tensor.requires_grad()) tensor.set_requires_grad(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, type_name(), ": invalid buffer name '",
              name, "' (non-empty, without dots)");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, ValueError, type_name(), ": submodule '", name, "' is null");
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, type_name(),
              ": invalid submodule name '", name, "' (non-empty, without dots)");
  for (const auto& [existing, child] : children_)
    EMBER_CHECK(existing != name, ValueError, type_name(), ": a submodule named '", name, "' exists already");
  module->name_ = name;
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool parameters, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (parameters)
    for (const auto& [n, t] : parameters_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", parameters, buffers, out);
}

namespace {
// A tensor reached under two names (a layer shared between two places of a model) is listed
// once, under the first name, as PyTorch's named_parameters() does: an optimizer must update it
// once per step.
std::vector<std::pair<std::string, Tensor>> without_repeats(std::vector<std::pair<std::string, Tensor>> named) {
  std::set<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, tensor] : named)
    if (seen.insert(tensor.impl()).second) out.emplace_back(std::move(name), std::move(tensor));
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, false, out);
  return without_repeats(std::move(out));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, true, out);
  return without_repeats(std::move(out));
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

Module& Module::to(Device device) {
  require_usable(device);
  NoGradGuard no_grad;
  for (auto& [n, t] : parameters_)
    if (t.defined()) t.move_to_(device);
  for (auto& [n, t] : buffers_)
    if (t.defined()) t.move_to_(device);
  for (auto& [n, child] : children_) child->to(device);
  return *this;
}

Module& Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), DTypeError, "Module::to: a model's parameters are floating; got ", dtype);
  NoGradGuard no_grad;
  for (auto* tensors : {&parameters_, &buffers_})
    for (auto& [n, t] : *tensors)
      if (t.defined() && is_floating(t.dtype())) t.convert_to_(dtype);
  for (auto& [n, child] : children_) child->to(dtype);
  return *this;
}

Device Module::device() const {
  const auto params = named_parameters();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (set_to_none)
      p.set_grad(Tensor());
    else if (p.grad().defined())
      p.grad().zero_();
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  collect("", true, true, out);
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, tensor] : own) {
    own_names.insert(name);
    const Tensor* given = find_tensor(state, name);
    if (!given) {
      missing.push_back(name);
      continue;
    }
    if (given->shape() != tensor.shape())
      mismatched.push_back(detail::concat("size mismatch for ", name, ": copying a param with shape ",
                                          shape_str(given->shape()), " from checkpoint, the shape in current model is ",
                                          shape_str(tensor.shape())));
    else if (given->dtype() != tensor.dtype())
      mismatched.push_back(detail::concat("dtype mismatch for ", name, ": the checkpoint has ", given->dtype(),
                                          ", the current model has ", tensor.dtype()));
  }
  for (const auto& [name, tensor] : state)
    if (!own_names.count(name)) unexpected.push_back(name);
  const bool failed = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (failed) {
    std::ostringstream message;
    message << "Error(s) in loading state_dict for " << type_name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      message << "\n\t" << what << " key(s) in state_dict: ";
      for (std::size_t i = 0; i < keys.size(); ++i) message << (i ? ", " : "") << '"' << keys[i] << '"';
      message << ".";
    };
    if (strict) {
      list("Missing", missing);
      list("Unexpected", unexpected);
    }
    for (const std::string& m : mismatched) message << "\n\t" << m << ".";
    throw ValueError(message.str());
  }
  NoGradGuard no_grad;
  for (const auto& [name, tensor] : own) {
    if (const Tensor* given = find_tensor(state, name)) {
      Tensor target = tensor;
      target.copy_(*given);
    }
  }
}

std::string Module::repr() const {
  std::ostringstream out;
  out << type_name() << "(" << extra_repr();
  if (!children_.empty()) {
    out << "\n";
    for (const auto& [n, child] : children_) {
      std::string inner = child->repr();
      std::string indented;
      for (char c : inner) {
        indented += c;
        if (c == '\n') indented += "  ";
      }
      out << "  (" << n << "): " << indented << "\n";
    }
  }
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.repr(); }

void save(const Module& module, const std::string& path, std::map<std::string, std::string> metadata) {
  metadata["format"] = "ember";
  metadata["ember_version"] = EMBER_VERSION;
  metadata["model"] = module.repr();
  save_safetensors(path, module.state_dict(), metadata);
}

std::map<std::string, std::string> load(Module& module, const std::string& path, bool strict) {
  Checkpoint checkpoint = load_safetensors(path, Device::cpu());
  StateDict model;
  for (auto& [name, tensor] : checkpoint.tensors)
    if (name.rfind("optimizer.", 0) != 0) model.emplace_back(name, tensor);
  try {
    module.load_state_dict(model, strict);
  } catch (const ValueError& e) {
    throw ValueError(detail::concat(path, ": ", e.what()));
  }
  return checkpoint.metadata;
}

}  // namespace ember::nn
