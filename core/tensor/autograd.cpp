// The autograd engine: recording, the backward walk and gradient accumulation.
#include "core/tensor/autograd.h"

#include <atomic>
#include <unordered_map>

#include "core/ops/ops.h"
#include "core/tensor/autocast_state.h"

namespace ember::autograd {
namespace {
thread_local bool t_grad_enabled = true;

Edge edge_for(const Tensor& input) {
  Edge edge;
  if (!input.defined() || !input.requires_grad()) return edge;
  if (input.grad_fn())
    edge.node = input.grad_fn();
  else
    edge.leaf = input.impl_ptr();
  return edge;
}

std::shared_ptr<Node> make_node(const char* name, DerivativeRule rule, std::size_t inputs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->rule = std::move(rule);
  node->edges.reserve(inputs);
  node->inputs.reserve(inputs);
  return node;
}

void add_input(Node& node, const Tensor& input) {
  node.edges.push_back(edge_for(input));
  if (input.defined())
    node.inputs.push_back({input.shape(), input.dtype(), input.device()});
  else
    node.inputs.push_back({{}, DType::f32, Device::cpu()});
}

void attach(Tensor& output, std::shared_ptr<Node> node) {
  TensorImpl* impl = output.impl();
  impl->grad_fn = std::move(node);
  impl->requires_grad = true;
}

// A gradient that nobody else references can become the leaf's .grad as it is; otherwise it is
// copied, so that a later in-place accumulation cannot change another tensor.
void add_into_grad(TensorImpl& leaf, Tensor grad) {
  if (!leaf.grad) {
    const bool sole_owner =
        grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 && grad.impl()->grad_fn == nullptr;
    leaf.grad = sole_owner ? grad.impl_ptr() : grad.clone().impl_ptr();
    leaf.grad->requires_grad = false;
    return;
  }
  Tensor existing(leaf.grad);
  add_(existing, grad);
}

void accumulate_into_leaf(TensorImpl& leaf, Tensor grad) {
  add_into_grad(leaf, std::move(grad));
  // A copy: a hook may remove itself (or another) while it runs.
  const auto hooks = leaf.grad_accumulated_hooks;
  for (const auto& [id, hook] : hooks) hook();
}

std::uint64_t next_hook_id() {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

void check_gradient(const Node& node, std::size_t i, const Tensor& grad) {
  const InputInfo& info = node.inputs[i];
  EMBER_CHECK(grad.shape() == info.shape && grad.dtype() == info.dtype && grad.device() == info.device, AutogradError,
              "the derivative rule of '", node.name, "' returned a gradient of shape ", shape_str(grad.shape()),
              ", dtype ", grad.dtype(), " on ", grad.device(), " for input ", i, ", which has shape ",
              shape_str(info.shape), ", dtype ", info.dtype, " on ", info.device);
}

}  // namespace

HookHandle on_grad_accumulated(const Tensor& leaf, std::function<void()> hook) {
  EMBER_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(), AutogradError,
              "on_grad_accumulated: the tensor must be a leaf that requires grad (a parameter)");
  const std::uint64_t id = next_hook_id();
  leaf.impl()->grad_accumulated_hooks.emplace_back(id, std::move(hook));
  return HookHandle(leaf.impl_ptr(), id);
}

void HookHandle::remove() {
  if (id_ == 0) return;
  if (const auto leaf = leaf_.lock())
    std::erase_if(leaf->grad_accumulated_hooks, [this](const auto& entry) { return entry.first == id_; });
  id_ = 0;
}

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    leaf_ = std::move(other.leaf_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

bool is_grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  auto take_edges = [&pending](Node& n) {
    for (Edge& e : n.edges)
      if (e.node) pending.push_back(std::move(e.node));
  };
  take_edges(*this);
  while (!pending.empty()) {
    std::shared_ptr<Node> next = std::move(pending.back());
    pending.pop_back();
    if (next.use_count() == 1) take_edges(*next);
    // `next` is destroyed here with no edges left, so its destructor does not recurse.
  }
}

bool needs_recording(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_recording(std::span<const Tensor> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& output, const char* name, std::initializer_list<const Tensor*> inputs, DerivativeRule rule) {
  auto node = make_node(name, std::move(rule), inputs.size());
  for (const Tensor* t : inputs) add_input(*node, *t);
  attach(output, std::move(node));
}

void record(Tensor& output, const char* name, std::span<const Tensor> inputs, DerivativeRule rule) {
  auto node = make_node(name, std::move(rule), inputs.size());
  for (const Tensor& t : inputs) add_input(*node, t);
  attach(output, std::move(node));
}

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  EMBER_CHECK(root.defined(), AutogradError, "backward() called on an undefined tensor");
  EMBER_CHECK(root.requires_grad(), AutogradError,
              "backward(): the tensor does not require grad and has no grad_fn (did you compute it under "
              "NoGradGuard, or from inputs without requires_grad?)");
  Tensor seed = gradient;
  if (!seed.defined()) {
    EMBER_CHECK(root.numel() == 1, AutogradError,
                "backward(): a gradient can be created implicitly only for a "
                "scalar output; this output has shape ",
                shape_str(root.shape()), ", so pass a gradient of that shape");
    seed = ones(root.shape(), {.dtype = root.dtype(), .device = root.device()});
  }
  EMBER_CHECK(seed.shape() == root.shape() && seed.dtype() == root.dtype() && seed.device() == root.device(),
              AutogradError, "backward(): the gradient has shape ", shape_str(seed.shape()), ", dtype ", seed.dtype(),
              " on ", seed.device(), " but the output has shape ", shape_str(root.shape()), ", dtype ", root.dtype(),
              " on ", root.device());

  NoGradGuard no_grad;
  const ext::AutocastOff autocast_off;  // gradients follow the forward's dtypes (Note [autocast policy])
  if (!root.grad_fn()) {                // backward on a leaf: its gradient is the seed itself
    accumulate_into_leaf(*root.impl(), seed);
    return;
  }

  // Count, for every node reachable from the root, how many edges lead into it; a node runs once
  // all of them have delivered their gradient. Iterative depth-first search: no recursion.
  std::unordered_map<Node*, int> dependencies;
  {
    std::vector<Node*> stack{root.grad_fn().get()};
    dependencies[root.grad_fn().get()] = 0;
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& e : node->edges) {
        if (!e.node) continue;
        auto [it, first_visit] = dependencies.try_emplace(e.node.get(), 0);
        ++it->second;
        if (first_visit) stack.push_back(e.node.get());
      }
    }
  }

  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = seed;
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor grad_output;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      grad_output = std::move(it->second);
      pending.erase(it);
    }
    if (!grad_output.defined()) {  // every consumer returned "no gradient": nothing flows further
      for (Edge& e : node->edges)
        if (e.node && --dependencies[e.node.get()] == 0) ready.push_back(e.node);
      continue;
    }
    EMBER_CHECK(node->rule != nullptr, AutogradError,
                "trying to run backward through the graph a second time "
                "(at '",
                node->name,
                "'): its saved tensors were freed by the first backward(). Pass "
                "retain_graph=true to the first backward() if you need to run it twice");
    Gradients grads = node->rule(grad_output, NeedsGrad(node->edges));
    EMBER_CHECK(grads.size() == node->edges.size(), AutogradError, "the derivative rule of '", node->name,
                "' returned ", grads.size(), " gradients for ", node->edges.size(), " inputs");
    if (!retain_graph) node->rule = nullptr;  // frees the saved tensors now, not when the graph dies

    for (std::size_t i = 0; i < grads.size(); ++i) {
      Edge& edge = node->edges[i];
      if (!edge.needs_grad() || !grads[i].defined()) {
        if (edge.node && --dependencies[edge.node.get()] == 0) ready.push_back(edge.node);
        continue;
      }
      check_gradient(*node, i, grads[i]);
      if (edge.leaf) {
        accumulate_into_leaf(*edge.leaf, std::move(grads[i]));
        continue;
      }
      Node* next = edge.node.get();
      auto [slot, fresh] = pending.try_emplace(next, std::move(grads[i]));
      if (!fresh) slot->second = add(slot->second, grads[i]);
      if (--dependencies[next] == 0) ready.push_back(edge.node);
    }
  }
}

}  // namespace ember::autograd
