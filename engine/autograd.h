// Reverse-mode autograd, define-by-run (the micrograd idea, at tensor granularity).
//
// Every differentiable op that sees an input requiring a gradient records one Node: the
// op's name, an Edge to each input (the Node that produced it, or the leaf tensor to
// accumulate into), and a closure with the op's local chain rule. backward() walks the
// Nodes in reverse topological order, calls each closure once with the summed gradient of
// its output, routes the results along the edges, and frees each Node's closure (and with
// it the saved activations) as soon as it has run.
//
// Most ops have one output. An op with several (unbind: the slices of a tensor) records
// one Node for all of them, and its closure runs once with every output's gradient, so
// the gradient of the input is assembled once — n slices taken with narrow would each
// return a gradient the size of the whole input.
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
  int output = 0;                    // which of fn's outputs the input is
};

// Given the gradient of the op's output, returns one gradient per input (same order as
// the inputs given to record_op; an undefined Tensor where an input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// The same for an op with several outputs: one gradient per output, undefined for an
// output that no gradient reached (read it as zeros).
using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  std::string op;
  std::vector<Edge> inputs;
  BackwardFn backward;             // the closure of a single-output op, or
  MultiBackwardFn backward_multi;  // that of record_multi_op (any number of outputs, 1 included)
  int num_outputs = 1;
  const char* part = "";  // the model part it was recorded in (engine/profile.h)
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

// The same for an op with several outputs: one Node for all of them (output i is its
// output i). Returns the outputs, carrying the graph when recording.
std::vector<Tensor> record_multi_op(std::vector<Tensor> outputs, const std::string& op,
                                    const std::vector<Tensor>& inputs, MultiBackwardFn backward);

// While one of these is alive on a thread, every backward() on that thread calls `ready`
// once for each leaf of its graph, as soon as the leaf's gradient is final for that
// backward: every node with an edge to the leaf has run, or was found unreached. Data
// parallelism (tools/data_parallel.h) starts sending a bucket of gradients then, while the
// rest of the backward pass runs. Hooks do not nest: a second one on the thread is an error.
class LeafGradientHook {
 public:
  explicit LeafGradientHook(std::function<void(const TensorImpl& leaf)> ready);
  ~LeafGradientHook();
  LeafGradientHook(const LeafGradientHook&) = delete;
  LeafGradientHook& operator=(const LeafGradientHook&) = delete;

  const std::function<void(const TensorImpl&)>& ready() const { return ready_; }

 private:
  std::function<void(const TensorImpl&)> ready_;
};

// The gradient-accumulation rule used by backward: dst = dst + g (same shape).
Tensor accumulate_grad(const Tensor& dst, const Tensor& g);

}  // namespace wedge
