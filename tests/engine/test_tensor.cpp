// Tensor: construction, views, contiguous(), conversion, errors.
#include <doctest/doctest.h>

#include <algorithm>

#include "engine/allocator.h"
#include "engine/kernel_table.h"
#include "engine/tensor.h"
#include "ops/ops.h"

using namespace wedge;
using kernels::i64;

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

namespace {
kernels::CopyLayout copy_of(std::vector<i64> shape, std::vector<i64> src, std::vector<i64> dst) {
  kernels::CopyLayout l;
  l.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < l.ndim; ++d) {
    l.shape[d] = shape[std::size_t(d)];
    l.stride_src[d] = src[std::size_t(d)];
    l.stride_dst[d] = dst[std::size_t(d)];
  }
  return l;
}
std::vector<i64> first(const i64* v, int n) { return std::vector<i64>(v, v + n); }
}  // namespace

TEST_CASE("coalesce merges the axes every operand walks as one, drops size-1 axes, keeps the rest") {
  // One patch's (2, 3, 4) slice of a (2, P = 2, 3, 4) tensor into a packed tensor: the two
  // inner axes are one run of 12 elements on both sides.
  kernels::CopyLayout c = kernels::coalesce(copy_of({2, 3, 4}, {24, 4, 1}, {12, 4, 1}));
  CHECK(c.ndim == 2);
  CHECK(first(c.shape, 2) == std::vector<i64>{2, 12});
  CHECK(first(c.stride_src, 2) == std::vector<i64>{24, 1});
  CHECK(first(c.stride_dst, 2) == std::vector<i64>{12, 1});
  // A transposed source has nothing to merge.
  c = kernels::coalesce(copy_of({3, 4}, {1, 3}, {4, 1}));
  CHECK(c.ndim == 2);
  CHECK(first(c.stride_src, 2) == std::vector<i64>{1, 3});
  // Size-1 axes go, whatever their strides; a single element stays one axis of size 1.
  c = kernels::coalesce(copy_of({1, 5, 1}, {7, 2, 9}, {5, 1, 1}));
  CHECK(c.ndim == 1);
  CHECK(c.shape[0] == 5);
  CHECK(c.stride_src[0] == 2);
  c = kernels::coalesce(copy_of({1, 1}, {3, 3}, {1, 1}));
  CHECK(c.ndim == 1);
  CHECK(c.shape[0] == 1);
  // An empty space is left as it is.
  c = kernels::coalesce(copy_of({2, 0, 3}, {0, 3, 1}, {0, 3, 1}));
  CHECK(c.ndim == 3);

  // (2, 3, 1, 4) * (2, 3, 5, 4): the two outer axes merge for both operands; the axis
  // along which a is broadcast (stride 0) cannot merge with its neighbours.
  kernels::BroadcastLayout b;
  b.ndim = 4;
  const i64 shape[] = {2, 3, 5, 4}, sa[] = {12, 4, 0, 1}, sb[] = {60, 20, 4, 1};
  std::copy(shape, shape + 4, b.shape);
  std::copy(sa, sa + 4, b.stride_a);
  std::copy(sb, sb + 4, b.stride_b);
  b = kernels::coalesce(b);
  CHECK(b.ndim == 3);
  CHECK(first(b.shape, 3) == std::vector<i64>{6, 5, 4});
  CHECK(first(b.stride_a, 3) == std::vector<i64>{4, 0, 1});
  CHECK(first(b.stride_b, 3) == std::vector<i64>{20, 4, 1});
  // Broadcast along two neighbouring axes (stride 0 on both) is one broadcast axis.
  b.ndim = 3;
  const i64 shape2[] = {4, 3, 5}, sa2[] = {0, 0, 1}, sb2[] = {15, 5, 1};
  std::copy(shape2, shape2 + 3, b.shape);
  std::copy(sa2, sa2 + 3, b.stride_a);
  std::copy(sb2, sb2 + 3, b.stride_b);
  b = kernels::coalesce(b);
  CHECK(b.ndim == 2);
  CHECK(first(b.shape, 2) == std::vector<i64>{12, 5});
  CHECK(first(b.stride_a, 2) == std::vector<i64>{0, 1});
}

TEST_CASE("a strided slice copies and broadcasts to the same values after coalescing") {
  // Values through the ops, which coalesce, against element-by-element expectations.
  std::vector<float> v(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const Tensor t = Tensor::from_vector(v, {2, 3, 4, 5});
  const std::vector<Tensor> slices = ops::unbind(t, 1);  // (2, 4, 5) each, strided
  const std::vector<float> got = slices[2].contiguous().to_vector<float>();
  for (i64 b = 0; b < 2; ++b)
    for (i64 e = 0; e < 4; ++e)
      for (i64 n = 0; n < 5; ++n) CHECK(got[std::size_t((b * 4 + e) * 5 + n)] == v[std::size_t(((b * 3 + 2) * 4 + e) * 5 + n)]);
  const Tensor s = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 1, 5});
  const std::vector<float> prod = ops::mul(slices[1], s).to_vector<float>();
  for (i64 b = 0; b < 2; ++b)
    for (i64 e = 0; e < 4; ++e)
      for (i64 n = 0; n < 5; ++n)
        CHECK(prod[std::size_t((b * 4 + e) * 5 + n)] == v[std::size_t(((b * 3 + 1) * 4 + e) * 5 + n)] * float(b * 5 + n + 1));
}
