#include "engine/autograd.h"

#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/kernel_table.h"
#include "engine/profile.h"

namespace wedge {

namespace {
thread_local bool g_grad_enabled = true;
thread_local const LeafGradientHook* g_leaf_hook = nullptr;
}

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  return needs_grad(std::vector<Tensor>(inputs));
}

namespace {

std::shared_ptr<Node> make_node(const std::string& op, const std::vector<Tensor>& inputs) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->part = profile::current_part();
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) {
        e.fn = t.grad_fn();
        e.output = t.impl().output_nr;
      } else {
        e.leaf = t.impl_ptr();
      }
    }
    node->inputs.push_back(std::move(e));
  }
  return node;
}

// A fresh handle on the output's memory carries the graph; views that share the same
// TensorImpl elsewhere are unaffected.
Tensor attach(const Tensor& output, const std::shared_ptr<Node>& node, int output_nr) {
  Tensor out = output.detach();
  out.impl().requires_grad = true;
  out.impl().grad_fn = node;
  out.impl().output_nr = output_nr;
  return out;
}

}  // namespace

Tensor record_op(Tensor output, const std::string& op, const std::vector<Tensor>& inputs,
                 BackwardFn backward) {
  if (!needs_grad(inputs)) return output;
  auto node = make_node(op, inputs);
  node->backward = std::move(backward);
  return attach(output, node, 0);
}

std::vector<Tensor> record_multi_op(std::vector<Tensor> outputs, const std::string& op,
                                    const std::vector<Tensor>& inputs, MultiBackwardFn backward) {
  if (!needs_grad(inputs)) return outputs;
  auto node = make_node(op, inputs);
  node->backward_multi = std::move(backward);
  node->num_outputs = static_cast<int>(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) outputs[i] = attach(outputs[i], node, static_cast<int>(i));
  return outputs;
}

namespace {
// out = a + b by the device's binary kernel over `l` (out may be a: the kernel allows it).
void add_on_device(const kernels::BroadcastLayout& l, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int kind = static_cast<int>(a.device().kind);
  if (a.dtype() == DType::F32) {
    kernels::kernel_table<float>(kind)->binary(kernels::BinaryOp::Add, l, a.data<float>(), b.data<float>(),
                                               out.data<float>());
  } else if (a.dtype() == DType::F64) {
    kernels::kernel_table<double>(kind)->binary(kernels::BinaryOp::Add, l, a.data<double>(), b.data<double>(),
                                                out.data<double>());
  } else {
    throw std::logic_error("autograd: gradients must be floating, got " + b.str());
  }
}
}  // namespace

Tensor accumulate_grad(const Tensor& dst, const Tensor& g) {
  if (!dst.defined()) return g;
  if (dst.shape() != g.shape() || dst.dtype() != g.dtype() || dst.device() != g.device())
    throw std::logic_error("autograd: gradient " + g.str() + " cannot accumulate into " + dst.str());
  Tensor out = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  kernels::BroadcastLayout l;
  const Shape& s = dst.shape();
  l.ndim = s.empty() ? 1 : static_cast<int>(s.size());
  if (l.ndim > kernels::kMaxDims) throw std::logic_error("autograd: too many dims");
  for (int i = 0; i < l.ndim; ++i) {
    l.shape[i] = s.empty() ? 1 : s[i];
    l.stride_a[i] = s.empty() ? 1 : dst.strides()[i];
    l.stride_b[i] = s.empty() ? 1 : g.strides()[i];
  }
  add_on_device(kernels::coalesce(l), dst, g, out);
  return out;
}

// dst += g in dst's own memory, when nothing else can see it: dst is the only handle on
// its tensor and on its storage (a gradient summed for an op's output that no view, saved
// tensor or other slot shares; the same gradient handed to two inputs is shared), and both
// are contiguous. The elements are the same sums accumulate_grad would form, without a new
// tensor. Returns false, leaving dst alone, where that does not hold.
bool accumulate_in_place(const Tensor& dst, const Tensor& g) {
  if (!dst.defined() || dst.impl_ptr().use_count() != 1 || dst.impl_ptr()->storage.use_count() != 1) return false;
  if (dst.shape() != g.shape() || dst.dtype() != g.dtype() || dst.device() != g.device()) return false;
  if (!dst.is_contiguous() || !g.is_contiguous()) return false;
  if (dst.dtype() != DType::F32 && dst.dtype() != DType::F64) return false;
  kernels::BroadcastLayout l;
  l.ndim = 1;
  l.shape[0] = dst.numel();
  l.stride_a[0] = l.stride_b[0] = 1;
  add_on_device(l, dst, g, dst);
  return true;
}

// ---- backward -------------------------------------------------------------------------------

void Tensor::backward() const {
  if (numel() != 1)
    fail("backward", "without a gradient argument the tensor must have one element (a loss), got " + str());
  backward(Tensor::ones(shape(), dtype(), device()));
}

void Tensor::backward(const Tensor& grad) const {
  if (!requires_grad())
    fail("backward", "this tensor does not require grad (no input of its graph had requires_grad set, or it was computed under NoGradGuard)");
  if (grad.shape() != shape() || grad.dtype() != dtype())
    fail("backward", "seed gradient " + grad.str() + " does not match " + str());
  NoGradGuard no_grad;  // gradients are computed without building a graph of their own
  if (is_leaf()) {
    impl().grad = accumulate_grad(this->grad(), grad.to(device())).impl_ptr();
    return;
  }

  // Reverse topological order by an iterative depth-first search.
  std::vector<Node*> order;
  {
    // course 04 begin: the autograd tape's topological order (every node after all it depends on)
    std::unordered_set<Node*> seen;
    std::vector<std::pair<Node*, std::size_t>> stack{{grad_fn().get(), 0}};
    seen.insert(grad_fn().get());
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node* child = node->inputs[next++].fn.get();
        if (child != nullptr && seen.insert(child).second) stack.push_back({child, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
    // course 04 end
  }

  // The summed gradient of each output of each Node that some gradient has reached.
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  auto slot = [&](Node* node, int output) -> Tensor& {
    std::vector<Tensor>& outputs = pending[node];
    if (outputs.empty()) outputs.resize(static_cast<std::size_t>(node->num_outputs));
    return outputs[static_cast<std::size_t>(output)];
  };
  slot(grad_fn().get(), impl().output_nr) = grad.to(device());
  // With a LeafGradientHook: per leaf, the nodes with an edge to it that have yet to run.
  const LeafGradientHook* hook = g_leaf_hook;
  std::unordered_map<const TensorImpl*, std::size_t> waiting;
  if (hook != nullptr)
    for (Node* node : order)
      for (const Edge& e : node->inputs)
        if (e.leaf) ++waiting[e.leaf.get()];
  auto done_with = [&](const Node* node) {
    if (hook == nullptr) return;
    for (const Edge& e : node->inputs)
      if (e.leaf && --waiting[e.leaf.get()] == 0) hook->ready()(*e.leaf);
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    if (node->released)
      throw std::runtime_error("backward: the graph through op '" + node->op +
                               "' was already freed by an earlier backward(); run the forward pass again");
    auto found = pending.find(node);
    if (found == pending.end()) {  // nothing flowed into this branch
      done_with(node);
      continue;
    }
    std::vector<Tensor> g = std::move(found->second);
    pending.erase(found);
    const profile::BackwardScope part_of_node(node->part);
    std::vector<Tensor> grads = node->backward_multi ? node->backward_multi(g) : node->backward(g[0]);
    if (grads.size() != node->inputs.size())
      throw std::logic_error("autograd: op '" + node->op + "' returned " + std::to_string(grads.size()) +
                             " gradients for " + std::to_string(node->inputs.size()) + " inputs");
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->inputs[i];
      if (!grads[i].defined()) continue;
      if (e.fn) {
        Tensor& sum = slot(e.fn.get(), e.output);
        if (!accumulate_in_place(sum, grads[i])) sum = accumulate_grad(sum, grads[i]);
      } else if (e.leaf) {
        Tensor leaf_grad = e.leaf->grad ? Tensor(e.leaf->grad) : Tensor();
        e.leaf->grad = accumulate_grad(leaf_grad, grads[i]).impl_ptr();
      }
    }
    // Free the closure (and the activations it saved) right away.
    node->backward = nullptr;
    node->backward_multi = nullptr;
    node->released = true;
    done_with(node);
  }
  // Free the edges too, so memory returns as soon as the caller drops the loss.
  for (Node* node : order) node->inputs.clear();
}

LeafGradientHook::LeafGradientHook(std::function<void(const TensorImpl& leaf)> ready) : ready_(std::move(ready)) {
  if (g_leaf_hook != nullptr) throw std::logic_error("LeafGradientHook: one is active on this thread already");
  g_leaf_hook = this;
}

LeafGradientHook::~LeafGradientHook() { g_leaf_hook = nullptr; }

}  // namespace wedge
