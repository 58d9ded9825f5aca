// Tensor: construction, views, contiguous(), conversion, errors.
#include <doctest/doctest.h>

#include "engine/allocator.h"
#include "engine/tensor.h"
#include "ops/ops.h"

using namespace wedge;

TEST_CASE("construction, shape queries and host access") {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dim() == 2);
  CHECK(t.numel() == 6);
  CHECK(t.size(-1) == 3);
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.is_contiguous());
  CHECK(t.str() == "float32(2, 3) on cpu");
  CHECK(Tensor::zeros({3}, DType::I32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 0});
  CHECK(Tensor::full({2}, 2.5, DType::F64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(Tensor::scalar(4.0).item() == 4.0);
  CHECK(Tensor::arange(4, DType::I32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK_THROWS_WITH_AS(t.data<double>(), doctest::Contains("float64"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(t.item(), doctest::Contains("one-element"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor::from_vector<float>({1, 2}, {3}), doctest::Contains("do not fill shape (3,)"), std::invalid_argument);
}

TEST_CASE("views share memory; contiguous() packs them") {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = ops::transpose(t, 0, 1);
  CHECK(tt.shape() == Shape{3, 2});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  Tensor n = ops::narrow(t, 1, 1, 2);  // columns 1..2
  CHECK(n.to_vector<float>() == std::vector<float>{2, 3, 5, 6});
  Tensor e = ops::expand(Tensor::from_vector<float>({7, 8}, {2, 1}), {2, 3});
  CHECK(e.strides()[1] == 0);
  CHECK(e.to_vector<float>() == std::vector<float>{7, 7, 7, 8, 8, 8});
  Tensor r = ops::reshape(t, {3, -1});
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.impl().storage == t.impl().storage);  // a view, no copy
  // writing through a view reaches the base
  n.copy_(Tensor::zeros({2, 2}));
  CHECK(t.to_vector<float>() == std::vector<float>{1, 0, 0, 4, 0, 0});
}

TEST_CASE("dtype conversion and clone") {
  Tensor t = Tensor::from_vector<float>({1.5f, -2.7f}, {2});
  CHECK(t.to(DType::F64).to_vector<double>()[0] == doctest::Approx(1.5));
  CHECK(t.to(DType::I32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -2});
  Tensor c = t.clone();
  c.fill_(0);
  CHECK(t.to_vector<float>()[0] == 1.5f);
}

TEST_CASE("a CUDA tensor on a build or machine without CUDA is a clear error") {
  if (has_allocator(DeviceKind::CUDA)) {
    MESSAGE("a CUDA device is present; this check is for CPU-only machines");
    return;
  }
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}, DType::F32, Device::cuda()), doctest::Contains("cuda"), std::runtime_error);
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK_THROWS_AS(Device::parse("tpu"), std::invalid_argument);
}

TEST_CASE("the CPU allocator reuses freed blocks") {
  Allocator& a = allocator_for(Device::cpu());
  void* p = a.allocate(1 << 20);
  a.deallocate(p, 1 << 20);
  const std::size_t cached = a.bytes_cached();
  CHECK(cached >= (1u << 20));
  void* q = a.allocate(1 << 20);
  CHECK(q == p);
  a.deallocate(q, 1 << 20);
}
