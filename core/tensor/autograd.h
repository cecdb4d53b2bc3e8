// Reverse-mode automatic differentiation: the graph that differentiable ops record, the engine
// that walks it backwards, and the switch that turns recording off.
//
// An op that wants a gradient calls record() with its output, its inputs and its derivative
// rule: a function from the upstream gradient to one gradient per input (an undefined Tensor
// where an input needs none). The rule captures the tensors it needs — detached, so that the
// graph never owns its own outputs. See docs/writing-a-layer.md.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace ember::autograd {

bool is_grad_enabled();

// Turns graph recording off on this thread for its lifetime (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

struct Node;

// Where an input's gradient goes: into the node that produced it, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool needs_grad() const { return node != nullptr || leaf != nullptr; }
};

// What a rule is told about its inputs: needs[i] is false where input i takes no gradient, so
// the rule can skip that work (the input gradient of a first layer, say).
class NeedsGrad {
 public:
  explicit NeedsGrad(const std::vector<Edge>& edges) : edges_(&edges) {}
  bool operator[](std::size_t i) const { return (*edges_)[i].needs_grad(); }

 private:
  const std::vector<Edge>* edges_;
};

using Gradients = std::vector<Tensor>;
using DerivativeRule = std::function<Gradients(const Tensor& grad_output, NeedsGrad needs)>;

struct InputInfo {
  Shape shape;
  DType dtype;
  Device device;
};

struct Node {
  const char* name = "";          // the op, for error messages
  std::vector<Edge> edges;        // one per input
  std::vector<InputInfo> inputs;  // to check the shapes the rule returns
  DerivativeRule rule;            // released (null) after a backward pass without retain_graph

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Tears down the chain of nodes behind this one iteratively: a graph of 100,000 ops must not
  // overflow the stack when it is freed.
  ~Node();
};

// True when grad mode is on and any input requires grad: then the op must record.
bool needs_recording(std::initializer_list<const Tensor*> inputs);
bool needs_recording(std::span<const Tensor> inputs);

// Makes `output` the result of a differentiable op `name` of `inputs` (only needs_grad inputs
// get edges). Call only when needs_recording() said so.
void record(Tensor& output, const char* name, std::initializer_list<const Tensor*> inputs, DerivativeRule rule);
void record(Tensor& output, const char* name, std::span<const Tensor> inputs, DerivativeRule rule);

// Runs `hook` each time backward() has added a gradient into the leaf's .grad — the moment a
// data-parallel reducer may start sending it (dist::GradientReducer), as PyTorch's
// register_post_accumulate_grad_hook. A leaf used twice in one graph gets two calls. The hook runs
// on the thread that called backward(), with recording off; it stays until the handle is gone.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<TensorImpl> leaf, std::uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  HookHandle(HookHandle&& other) noexcept : leaf_(std::move(other.leaf_)), id_(std::exchange(other.id_, 0)) {}
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { remove(); }
  void remove();

 private:
  std::weak_ptr<TensorImpl> leaf_;
  std::uint64_t id_ = 0;
};
[[nodiscard]] HookHandle on_grad_accumulated(const Tensor& leaf, std::function<void()> hook);

// The engine behind Tensor::backward: walks the graph from `root` in reverse topological order
// (iteratively), adding into each leaf's .grad. `gradient` defaults to 1 for a scalar root.
void backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

}  // namespace ember::autograd

namespace ember {
using autograd::NoGradGuard;
}
