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

TEST_CASE("shapes whose element count does not fit in int64 are refused, naming the shape") {
  constexpr std::int64_t k2_31 = std::int64_t(1) << 31, k2_32 = std::int64_t(1) << 32;
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({k2_31, k2_31}) == std::int64_t(1) << 62);
  CHECK(shape_numel({k2_31, k2_32 - 1}) == k2_31 * (k2_32 - 1));
  // 2^63 is one past the largest int64
  CHECK_THROWS_WITH_AS(shape_numel({k2_32, k2_31}),
                       "shape (4294967296, 2147483648): the number of elements does not fit in 64 bits",
                       std::invalid_argument);
  CHECK_THROWS_AS(shape_numel({3, k2_31, k2_31}), std::invalid_argument);
  CHECK_THROWS_AS(shape_numel({-k2_32, k2_32}), std::invalid_argument);
  // A zero dimension makes the tensor empty whatever the others are, wherever it stands.
  CHECK(shape_numel({0, k2_32, k2_32}) == 0);
  CHECK(shape_numel({k2_32, k2_32, 0}) == 0);
  CHECK(contiguous_strides({k2_31, k2_31}) == Shape{k2_31, 1});
  CHECK_THROWS_WITH_AS(contiguous_strides({0, k2_32, k2_32}), doctest::Contains("a stride does not fit"),
                       std::invalid_argument);
  // Tensor construction refuses before any allocation: too many elements, or too many bytes.
  CHECK_THROWS_WITH_AS(Tensor::empty({k2_32, k2_32}), doctest::Contains("shape (4294967296, 4294967296)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor::zeros({std::int64_t(1) << 61}, DType::F32),
                       "empty: shape (2305843009213693952,) of float32 needs more bytes than an address space holds",
                       std::invalid_argument);
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
