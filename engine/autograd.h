// Reverse-mode autograd, define-by-run (the micrograd idea, at tensor granularity).
//
// Every differentiable op that sees an input requiring a gradient records one Node: the
// op's name, an Edge to each input (the Node that produced it, or the leaf tensor to
// accumulate into), and a closure with the op's local chain rule. backward() walks the
// Nodes in reverse topological order, calls each closure once with the summed gradient of
// its output, routes the results along the edges, and frees each Node's closure (and with
// it the saved activations) as soon as it has run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace wedge {

struct Edge {
  std::shared_ptr<Node> fn;          // the producer of a non-leaf input, or
  std::shared_ptr<TensorImpl> leaf;  // a leaf requiring grad; both null: no grad needed
};

// Given the gradient of the op's output, returns one gradient per input (same order as
// the inputs given to record_op; an undefined Tensor where an input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string op;
  std::vector<Edge> inputs;
  BackwardFn backward;
  bool released = false;  // the closure ran (or was dropped) and the graph is gone
};

// Is autograd recording right now (thread-local)?
bool grad_enabled();

// Turns recording off for its scope (evaluation, optimizer updates, weight init).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when recording is on and any input requires a gradient.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches a Node to `output` when needs_grad(inputs); returns output. Closures must
// capture saved tensors as detach()ed handles (never `output` itself with its grad_fn),
// so a graph that is never walked does not keep itself alive through a cycle.
Tensor record_op(Tensor output, const std::string& op, const std::vector<Tensor>& inputs,
                 BackwardFn backward);

// The gradient-accumulation rule used by backward: dst = dst + g (same shape).
Tensor accumulate_grad(const Tensor& dst, const Tensor& g);

}  // namespace wedge
