// Module/Parameter: named, nested containers of trainable tensors.
//
// The one idea: a Module owns Parameters (leaf tensors with requires_grad) and child
// Modules, each under a name, so the whole model can be walked as a flat list of
// dotted names ("blocks.3.ffn.w1.weight") — which is exactly what the optimizer updates
// and what a safetensors checkpoint stores (save / load).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace wedge {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its children, depth-first in registration order,
  // with dotted names.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Moves every parameter to `device` (in place: the Parameter handles stay valid).
  void to(Device device);

  // Writes every parameter under its dotted name (named_parameters) to a safetensors file,
  // atomically (save_safetensors: a temporary file renamed into place, never a half-written
  // file). Parameters on a GPU are copied through the host. std::invalid_argument when two
  // parameters have one name.
  void save(const std::string& path) const;
  // Reads such a file into the parameters, in place (the handles stay valid; a GPU
  // parameter is copied through the host). Each parameter's tensor must be in the file with
  // its shape and dtype and hold only finite values, else std::runtime_error naming the file
  // and the tensor; every one is checked before any is copied, so a refused file leaves the
  // module as it was. Tensors of the file that name no parameter are ignored: a training
  // checkpoint also holds the optimizer's state ("<name>.adam_m", ...).
  void load(const std::string& path);

 protected:
  // Registers a parameter (marked requires_grad) and returns it. The reference stays valid
  // for the module's lifetime, however many parameters are registered after it.
  Tensor& register_parameter(const std::string& name, Tensor value);
  // Registers a child module and returns a reference to it.
  template <typename M>
  M& register_module(const std::string& name, std::shared_ptr<M> child) {
    children_.emplace_back(name, child);
    return *child;
  }

 private:
  void collect(const std::string& prefix,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  // A deque: registering appends without moving the parameters before it, so the
  // references register_parameter returned stay valid.
  std::deque<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace wedge
