// The optimizer base (state, slot tables, checkpoints) and SGD, Adam, AdamW.
#include "optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/fusion.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/tensor/autograd.h"
#include "kernels/optim.h"

namespace ember::optim {

// What update() works on: the slot table (a host array; on CUDA also its device copy), and on
// CUDA the counter that lets the update kernel advance the step counts itself (kernels/optim.h);
// on the CPU the counts are already advanced and `advance` is null.
struct Optimizer::UpdateBatch {
  const kernels::ParamSlot* slots;
  std::size_t count, max_n;
  Device device;
  const float* lr;
  unsigned* advance;
  const kernels::ParamSlot* device_slots;  // CUDA only

  kernels::cuda::DeviceSlots on_device() const { return {device_slots, slots, count}; }
};

// The learning rate and the slot table of one group, kept in the parameters' memory and
// refreshed only when they change (a new lr, gradients reallocated after zero_grad(true)).
struct Optimizer::GroupCache {
  Device device;
  Tensor lr;  // f32 scalar
  double lr_value = std::nan("");
  std::vector<kernels::ParamSlot> uploaded;
  Tensor device_slots;  // u8 bytes of the slot table, CUDA only
  Tensor advance;       // i32 counter the CUDA update uses to advance the step counts (kept at 0)
};

namespace {
using json = nlohmann::json;

bool same_slots(const std::vector<kernels::ParamSlot>& a, const std::vector<kernels::ParamSlot>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}
}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  EMBER_CHECK(!groups_.empty(), ValueError, "optimizer got an empty list of parameter groups");
  std::map<const TensorImpl*, std::pair<std::size_t, std::size_t>> positions;  // (group, index) of each tensor
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    EMBER_CHECK(!group.params.empty(), ValueError, "optimizer got an empty parameter list (group ", g, ")");
    EMBER_CHECK(group.options.lr >= 0, ValueError, "invalid learning rate ", group.options.lr, " (group ", g, ")");
    EMBER_CHECK(group.options.momentum >= 0, ValueError, "invalid momentum ", group.options.momentum);
    EMBER_CHECK(group.options.weight_decay >= 0, ValueError, "invalid weight_decay ", group.options.weight_decay);
    EMBER_CHECK(!group.options.nesterov || (group.options.momentum > 0 && group.options.dampening == 0), ValueError,
                "Nesterov momentum requires a momentum and zero dampening");
    EMBER_CHECK(
        group.options.beta1 >= 0 && group.options.beta1 < 1 && group.options.beta2 >= 0 && group.options.beta2 < 1,
        ValueError, "invalid betas (", group.options.beta1, ", ", group.options.beta2, "): each must be in [0, 1)");
    EMBER_CHECK(group.options.eps >= 0, ValueError, "invalid eps ", group.options.eps);
    for (std::size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), ValueError,
                  "optimizer parameters must be leaf tensors that require grad");
      EMBER_CHECK(p.dtype() == DType::f32, DTypeError, "optimizer parameters must be f32, got ", p.dtype());
      // A tensor given twice would be updated twice per step (and, on CUDA, by two blocks of one
      // launch at once). PyTorch only warns; ember refuses.
      const auto [where, fresh] = positions.emplace(p.impl(), std::make_pair(g, i));
      EMBER_CHECK(fresh, ValueError, "optimizer got the same tensor twice: parameter ", i, " of group ", g,
                  " is parameter ", where->second.second, " of group ", where->second.first,
                  ". Pass each tensor once (Module::parameters() lists a shared layer's tensors once)");
    }
    group.initial_lr = group.options.lr;
    caches_.push_back(std::make_unique<GroupCache>());
  }
}

Optimizer::~Optimizer() = default;

Optimizer::ParamState& Optimizer::state_for(std::size_t index, const Tensor& param, const GroupOptions& options) {
  auto it = state_.find(index);
  if (it == state_.end()) {
    ParamState fresh;
    for (std::size_t b = 0; b < buffer_names(options).size(); ++b)
      fresh.buffers.push_back(zeros(param.shape(), {.device = param.device()}));
    fresh.step = zeros({}, {.device = param.device()});
    it = state_.emplace(index, std::move(fresh)).first;
    ++version_;
  }
  ParamState& st = it->second;
  // A setting changed since the state was made may need a buffer it lacks (SGD's momentum turned
  // on after some steps). As in PyTorch, the new buffer starts at this step: its count restarts,
  // which only SGD reads, to know the buffer's first step.
  if (st.buffers.size() < buffer_names(options).size()) {
    ++version_;
    while (st.buffers.size() < buffer_names(options).size())
      st.buffers.push_back(zeros(param.shape(), {.device = param.device()}));
    st.step.fill_(0.0);
  }
  // The model may have moved (model.to(device)) since the state was made.
  if (st.step.device() != param.device()) {
    ++version_;
    for (Tensor& b : st.buffers) b.move_to_(param.device());
    st.step.move_to_(param.device());
  }
  return st;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  std::size_t index = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    std::vector<kernels::ParamSlot> slots;
    std::size_t max_n = 0;
    Device device;
    for (const Tensor& p : group.params) {
      const std::size_t i = index++;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(grad.device() == p.device() && grad.shape() == p.shape() && grad.dtype() == p.dtype(), ValueError,
                  type_name(), ": the gradient of parameter ", i, " (shape ", shape_str(grad.shape()), ", ",
                  grad.dtype(), ", on ", grad.device(), ") does not match the parameter (shape ", shape_str(p.shape()),
                  ", ", p.dtype(), ", on ", p.device(), ")");
      if (slots.empty()) device = p.device();
      if (p.device() != device)
        throw DeviceError(ext::device_mismatch_message(type_name() + ".step", "params[" + std::to_string(i) + "]",
                                                       device, p.device()));
      ParamState& st = state_for(i, p, group.options);
      kernels::ParamSlot slot;
      slot.param = p.raw<float>();
      slot.grad = grad.raw<float>();
      slot.state0 = st.buffers.size() > 0 ? st.buffers[0].raw<float>() : nullptr;
      slot.state1 = st.buffers.size() > 1 ? st.buffers[1].raw<float>() : nullptr;
      slot.step = st.step.raw<float>();
      slot.n = static_cast<std::size_t>(p.numel());
      max_n = std::max(max_n, slot.n);
      slots.push_back(slot);
    }
    if (slots.empty()) continue;

    GroupCache& cache = *caches_[g];
    if (!cache.lr.defined() || cache.device != device) {
      ++version_;
      cache.lr = zeros({}, {.device = device});
      cache.advance = Tensor();
      cache.lr_value = std::nan("");
      cache.uploaded.clear();
      cache.device = device;
    }
    refresh_lr(g);
    if (device.is_cuda()) {
      if (!same_slots(cache.uploaded, slots)) {
        ++version_;
        std::vector<std::uint8_t> bytes(slots.size() * sizeof(kernels::ParamSlot));
        std::memcpy(bytes.data(), slots.data(), bytes.size());
        cache.device_slots = from_vector(bytes, {static_cast<std::int64_t>(bytes.size())}).to(device);
        cache.uploaded = slots;
      }
      if (!cache.advance.defined()) cache.advance = zeros({1}, {.dtype = DType::i32, .device = device});
    }
    ext::dispatch_device(
        device,
        [&] {
          kernels::cpu::advance_steps(slots.data(), slots.size());
          update(group, {slots.data(), slots.size(), max_n, device, cache.lr.raw<float>(), nullptr, nullptr});
        },
        [&](auto stream) {
          const auto* device_slots = static_cast<const kernels::ParamSlot*>(cache.device_slots.raw_bytes());
          // One launch: the update advances the step counts itself (with fusion off, a launch of
          // its own advances them first).
          unsigned* advance = reinterpret_cast<unsigned*>(cache.advance.raw<std::int32_t>());
          UpdateBatch batch{slots.data(), slots.size(), max_n, device, cache.lr.raw<float>(), advance, device_slots};
          if (!fusion_enabled()) {
            kernels::cuda::advance_steps(batch.on_device(), stream);
            batch.advance = nullptr;
          }
          update(group, batch);
        });
  }
}

void Optimizer::refresh_lr(std::size_t group) {
  GroupCache& cache = *caches_[group];
  if (cache.lr_value == groups_[group].options.lr) return;
  cache.lr.fill_(kernel_lr(group));
  cache.lr_value = groups_[group].options.lr;
}

void Optimizer::set_lr(std::size_t group, double lr) {
  EMBER_CHECK(group < groups_.size(), ValueError, "set_lr: group ", group, " of ", groups_.size());
  EMBER_CHECK(lr >= 0, ValueError, "invalid learning rate ", lr, " (group ", group, ")");
  groups_[group].options.lr = lr;
}

void Optimizer::set_lr(double lr, bool restart) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    set_lr(g, lr);
    if (restart) groups_[g].initial_lr = lr;
  }
}

void Optimizer::sync_learning_rates() {
  NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (caches_[g]->lr.defined()) refresh_lr(g);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_)
    for (Tensor& p : group.params) {
      if (set_to_none)
        p.set_grad(Tensor());
      else if (p.grad().defined())
        p.grad().zero_();
    }
}

Checkpoint Optimizer::state_dict() const {
  Checkpoint out;
  json groups = json::array();
  std::size_t index = 0;
  for (const ParamGroup& group : groups_) {
    json indices = json::array();
    for (std::size_t k = 0; k < group.params.size(); ++k) indices.push_back(index++);
    const GroupOptions& o = group.options;
    groups.push_back({{"lr", o.lr},
                      {"momentum", o.momentum},
                      {"dampening", o.dampening},
                      {"weight_decay", o.weight_decay},
                      {"nesterov", o.nesterov},
                      {"betas", {o.beta1, o.beta2}},
                      {"eps", o.eps},
                      {"initial_lr", group.initial_lr},
                      {"params", indices}});
    const std::vector<std::string> names = buffer_names(o);
    for (std::size_t k = 0; k < group.params.size(); ++k) {
      const std::size_t i = index - group.params.size() + k;
      auto it = state_.find(i);
      if (it == state_.end()) continue;
      out.tensors.emplace_back(detail::concat("state.", i, ".step"), it->second.step);
      for (std::size_t b = 0; b < names.size() && b < it->second.buffers.size(); ++b)
        out.tensors.emplace_back(detail::concat("state.", i, ".", names[b]), it->second.buffers[b]);
    }
  }
  out.metadata["optimizer"] = type_name();
  out.metadata["param_groups"] = groups.dump();
  return out;
}

void Optimizer::load_state_dict(const Checkpoint& state) {
  auto fail = [&](const std::string& why) { throw ValueError(detail::concat(type_name(), ".load_state_dict: ", why)); };
  const auto kind = state.metadata.find("optimizer");
  if (kind == state.metadata.end()) fail("the state has no 'optimizer' entry (not an optimizer state?)");
  if (kind->second != type_name()) fail("the state is of a " + kind->second + " optimizer");
  const auto groups_text = state.metadata.find("param_groups");
  if (groups_text == state.metadata.end()) fail("the state has no 'param_groups'");
  json groups;
  try {
    groups = json::parse(groups_text->second);
  } catch (const json::exception& e) {
    fail(std::string("'param_groups' is not valid JSON: ") + e.what());
  }
  if (!groups.is_array() || groups.size() != groups_.size())
    fail(detail::concat("the state has ", groups.is_array() ? groups.size() : 0, " parameter groups, this optimizer ",
                        groups_.size()));
  std::vector<GroupOptions> options(groups_.size());
  std::vector<double> initial(groups_.size());
  std::size_t total = 0;
  try {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const json& j = groups[g];
      if (j.at("params").size() != groups_[g].params.size())
        fail(detail::concat("group ", g, " has ", j.at("params").size(), " parameters in the state, ",
                            groups_[g].params.size(), " here"));
      GroupOptions& o = options[g];
      o.lr = j.at("lr").get<double>();
      o.momentum = j.at("momentum").get<double>();
      o.dampening = j.at("dampening").get<double>();
      o.weight_decay = j.at("weight_decay").get<double>();
      o.nesterov = j.at("nesterov").get<bool>();
      o.beta1 = j.at("betas").at(0).get<double>();
      o.beta2 = j.at("betas").at(1).get<double>();
      o.eps = j.at("eps").get<double>();
      initial[g] = j.at("initial_lr").get<double>();
      total += groups_[g].params.size();
    }
  } catch (const json::exception& e) {
    fail(std::string("malformed 'param_groups': ") + e.what());
  }
  // Map each parameter index to its group and tensor, then check every state tensor.
  std::vector<std::pair<std::size_t, const Tensor*>> params;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g].params) params.emplace_back(g, &p);
  std::map<std::size_t, ParamState> restored;
  for (const auto& [name, tensor] : state.tensors) {
    std::size_t i = 0;
    char rest[64] = {};
    if (std::sscanf(name.c_str(), "state.%zu.%63s", &i, rest) != 2 || i >= total)
      fail("unexpected state tensor '" + name + "'");
    const auto [g, param] = params[i];
    const std::vector<std::string> names = buffer_names(options[g]);
    ParamState& st = restored[i];
    st.buffers.resize(names.size());
    Tensor copy = tensor.detach().to(param->device()).clone();
    if (std::string(rest) == "step") {
      if (copy.numel() != 1) fail("'" + name + "' must be a scalar");
      st.step = copy.reshape({}).to(DType::f32);
      continue;
    }
    std::size_t b = 0;
    while (b < names.size() && names[b] != rest) ++b;
    if (b == names.size()) fail("unexpected state tensor '" + name + "'");
    if (copy.shape() != param->shape() || copy.dtype() != DType::f32)
      fail(detail::concat("'", name, "' has shape ", shape_str(copy.shape()), " and dtype ", copy.dtype(),
                          "; parameter ", i, " has shape ", shape_str(param->shape()), " and f32"));
    st.buffers[b] = copy;
  }
  for (auto& [i, st] : restored) {
    if (!st.step.defined()) fail(detail::concat("parameter ", i, " has state but no step"));
    for (std::size_t b = 0; b < st.buffers.size(); ++b)
      if (!st.buffers[b].defined()) fail(detail::concat("parameter ", i, " lacks a state buffer"));
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options = options[g];
    groups_[g].initial_lr = initial[g];
    caches_[g] = std::make_unique<GroupCache>();
  }
  state_ = std::move(restored);
  ++version_;
}

// ---- SGD ---------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, GroupOptions options)
    : SGD(std::vector<ParamGroup>{{std::move(params), options}}) {}
SGD::SGD(std::vector<ParamGroup> groups) : Optimizer(std::move(groups)) {}

std::vector<std::string> SGD::buffer_names(const GroupOptions& options) const {
  if (options.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const ParamGroup& group, const UpdateBatch& b) {
  kernels::SgdConfig config;
  config.momentum = static_cast<float>(group.options.momentum);
  config.dampening = static_cast<float>(group.options.dampening);
  config.weight_decay = static_cast<float>(group.options.weight_decay);
  config.nesterov = group.options.nesterov;
  ext::dispatch_device(
      b.device, [&] { kernels::cpu::sgd_step(b.slots, b.count, config, b.lr); },
      [&](auto stream) { kernels::cuda::sgd_step(b.on_device(), b.max_n, config, b.lr, b.advance, stream); });
}

// ---- Adam and AdamW ----------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, GroupOptions options)
    : Adam(std::vector<ParamGroup>{{std::move(params), options}}, false) {}
Adam::Adam(std::vector<ParamGroup> groups) : Adam(std::move(groups), false) {}
Adam::Adam(std::vector<ParamGroup> groups, bool decoupled) : Optimizer(std::move(groups)), decoupled_(decoupled) {}

std::vector<std::string> Adam::buffer_names(const GroupOptions&) const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::update(const ParamGroup& group, const UpdateBatch& b) {
  kernels::AdamConfig config;
  config.beta1 = static_cast<float>(group.options.beta1);
  config.beta2 = static_cast<float>(group.options.beta2);
  config.eps = static_cast<float>(group.options.eps);
  config.weight_decay = static_cast<float>(group.options.weight_decay);
  config.decoupled_weight_decay = decoupled_;
  ext::dispatch_device(
      b.device, [&] { kernels::cpu::adam_step(b.slots, b.count, config, b.lr); },
      [&](auto stream) { kernels::cuda::adam_step(b.on_device(), b.max_n, config, b.lr, b.advance, stream); });
}

AdamW::AdamW(std::vector<Tensor> params, GroupOptions options)
    : Adam(std::vector<ParamGroup>{{std::move(params), options}}, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups) : Adam(std::move(groups), true) {}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params,
                                          const GroupOptions& options) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(params), options);
  if (name == "adam") return std::make_unique<Adam>(std::move(params), options);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), options);
  throw ValueError(detail::concat("unknown optimizer '", name, "': expected sgd, adam or adamw"));
}

}  // namespace ember::optim
