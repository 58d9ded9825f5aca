// Module::save / Module::load: a round trip restores every parameter bit for bit, and a
// file that does not fit the model (a missing tensor, another shape or dtype, a NaN or an
// infinity) is refused with one error naming the file and the tensor, changing nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/module.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "ops/nn.h"
#include "ops/ops.h"
#include "scratch.h"

using namespace wedge;

namespace {

// Two linear layers (the second without bias) and a float64 vector of the module's own.
struct TwoLayer : Module {
  explicit TwoLayer(std::uint64_t seed) {
    Generator g(seed);
    l1 = &register_module("l1", std::make_shared<nn::Linear>(3, 4, g, true, 0.5));
    l2 = &register_module("l2", std::make_shared<nn::Linear>(4, 2, g, false, 0.5));
    scale = register_parameter("scale", Tensor::randn({2}, seed + 100, 1.0, 0.1, DType::F64));
  }
  Tensor forward(const Tensor& x) const { return l2->forward(ops::tanh(l1->forward(x))); }
  nn::Linear *l1, *l2;
  Tensor scale;
};

// Every parameter's bytes, by name.
std::map<std::string, std::string> bytes_of(const Module& m) {
  std::map<std::string, std::string> out;
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor c = p.contiguous();
    out[name] = std::string(static_cast<const char*>(c.raw_data()), c.numel() * dtype_size(c.dtype()));
  }
  return out;
}

}  // namespace

TEST_CASE("Module::save then load restores every parameter bit for bit, in place") {
  testing::ScratchDir dir("module-save");
  const std::string path = dir.str("model.safetensors");
  TwoLayer saved(1);
  saved.save(path);
  // Only the file: the temporary file was renamed into place.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) entries += e.path().filename() == "model.safetensors" ? 1 : 100;
  CHECK(entries == 1);
  // The file holds the dotted names, shapes and dtypes of named_parameters().
  const SafeTensors file = load_safetensors(path);
  CHECK(file.tensors.size() == 4);
  CHECK(file.tensors.at("l1.weight").shape() == Shape{4, 3});
  CHECK(file.tensors.at("l1.bias").shape() == Shape{4});
  CHECK(file.tensors.at("l2.weight").shape() == Shape{2, 4});
  CHECK(file.tensors.at("scale").dtype() == DType::F64);

  TwoLayer loaded(2);  // other initial values
  REQUIRE(bytes_of(loaded) != bytes_of(saved));
  Tensor& handle = loaded.l1->weight;
  const TensorImpl* before = &handle.impl();
  loaded.load(path);
  CHECK(bytes_of(loaded) == bytes_of(saved));
  CHECK(&loaded.l1->weight.impl() == before);  // the same parameter, its values replaced
  CHECK(loaded.l1->weight.requires_grad());
  // So the two compute the same function.
  const Tensor x = Tensor::randn({5, 3}, 7);
  const std::vector<float> a = saved.forward(x).to_vector<float>(), b = loaded.forward(x).to_vector<float>();
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("Module::load ignores tensors that name no parameter: a training checkpoint loads") {
  testing::ScratchDir dir("module-ckpt");
  TwoLayer model(3);
  Adam opt(model.named_parameters(), AdamConfig{});
  std::map<std::string, Tensor> checkpoint = opt.state_tensors();  // "<name>.adam_m", "<name>.adam_v"
  for (const auto& [name, p] : model.named_parameters()) checkpoint[name] = p;
  checkpoint["step"] = Tensor::scalar(12.0);
  save_safetensors(dir.str("ckpt.safetensors"), checkpoint);
  TwoLayer other(4);
  other.load(dir.str("ckpt.safetensors"));
  CHECK(bytes_of(other) == bytes_of(model));
}

TEST_CASE("Module::load refuses a missing tensor, another shape or dtype, NaN and Inf, and changes nothing") {
  testing::ScratchDir dir("module-bad");
  TwoLayer source(5);
  std::map<std::string, Tensor> good;
  for (const auto& [name, p] : source.named_parameters()) good[name] = p.detach().clone();
  TwoLayer target(6);
  const auto untouched = bytes_of(target);

  auto refuses = [&](const std::string& file, std::map<std::string, Tensor> tensors, const std::string& what) {
    const std::string path = dir.str(file);
    save_safetensors(path, tensors);
    CAPTURE(file);
    CHECK_THROWS_AS(target.load(path), std::runtime_error);
    CHECK_THROWS_WITH(target.load(path), ("checkpoint '" + path + "': " + what).c_str());
    // l1.weight comes first and is valid in every file here: it is not copied either.
    CHECK(bytes_of(target) == untouched);
  };
  std::map<std::string, Tensor> t = good;
  t.erase("l2.weight");
  refuses("missing.safetensors", t, "missing tensor 'l2.weight'");
  t = good;
  t["l1.bias"] = Tensor::zeros({5});
  refuses("shape.safetensors", t, "tensor 'l1.bias' is float32(5,) on cpu but the model expects float32(4,) on cpu");
  t = good;
  t["scale"] = Tensor::zeros({2}, DType::F32);
  refuses("dtype.safetensors", t, "tensor 'scale' is float32(2,) on cpu but the model expects float64(2,) on cpu");
  t = good;
  t["l2.weight"] = Tensor::from_vector<float>({0, 1, 2, 3, 4, std::nanf(""), 6, 7}, {2, 4});
  refuses("nan.safetensors", t, "tensor 'l2.weight' holds NaN at element 5 of 8");
  t = good;
  t["scale"] = Tensor::from_vector<double>({-std::numeric_limits<double>::infinity(), 1.0}, {2});
  refuses("inf.safetensors", t, "tensor 'scale' holds -Inf at element 0 of 2");
  t = good;
  t["l1.bias"] = Tensor::from_vector<float>({0, 0, 0, std::numeric_limits<float>::infinity()}, {4});
  refuses("pinf.safetensors", t, "tensor 'l1.bias' holds +Inf at element 3 of 4");

  // A file that is not there is load_safetensors' error, naming it.
  CHECK_THROWS_WITH_AS(target.load(dir.str("absent.safetensors")), doctest::Contains("absent.safetensors"),
                       std::runtime_error);
  // The good file still loads after all that.
  save_safetensors(dir.str("good.safetensors"), good);
  target.load(dir.str("good.safetensors"));
  CHECK(bytes_of(target) == bytes_of(source));
}

TEST_CASE("Module::save refuses two parameters of one name") {
  struct Twice : Module {
    Twice() {
      register_parameter("w", Tensor::zeros({2}));
      register_parameter("w", Tensor::ones({2}));
    }
  };
  testing::ScratchDir dir("module-twice");
  Twice m;
  CHECK_THROWS_WITH_AS(m.save(dir.str("twice.safetensors")), doctest::Contains("two parameters are named 'w'"),
                       std::invalid_argument);
  CHECK_FALSE(std::filesystem::exists(dir.str("twice.safetensors")));
}
