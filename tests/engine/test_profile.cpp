// The step profiler (engine/profile.h): what it counts, where it puts it, and that it
// changes no result and leaves the dispatch as it found it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/autograd.h"
#include "engine/profile.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "ops/ops.h"

using namespace wedge;

namespace {

Tensor param(std::int64_t rows, std::int64_t cols, float scale) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(int(i * 7 % 13) - 6);
  Tensor t = Tensor::from_vector(v, {rows, cols});
  t.set_requires_grad(true);
  return t;
}

const profile::Row* row_named(const std::vector<profile::Row>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

// A two-part graph: a product in part "product", a squared sum in part "loss".
struct Run {
  Tensor x, w, loss;
  void forward_backward() {
    x = param(4, 8, 0.25f);
    w = param(8, 5, 0.5f);
    Tensor y;
    {
      const profile::Part part("product");
      y = ops::matmul(x, w);
    }
    {
      const profile::Part part("loss");
      loss = ops::sum(y * y);
    }
    loss.backward();
  }
};

}  // namespace

TEST_CASE("profile: every kernel has a kind of work") {
  for (int i = 0; i < kernels::kernel_count; ++i) {
    const auto id = static_cast<kernels::KernelId>(i);
    CAPTURE(kernels::kernel_name(id));
    CHECK(profile::kind_of(id) != "other");
  }
}

TEST_CASE("profile: kernels are counted in the part and phase that ran them, GEMMs by shape") {
  const auto* compiled = kernels::compiled_kernel_table(0);
  const auto* compiled_memory = kernels::compiled_memory_table(0);
  Run plain;
  plain.forward_backward();
  std::vector<float> gx, gw;
  profile::Report report;
  {
    profile::Profiler profiler;
    CHECK(kernels::compiled_kernel_table(0) != compiled);  // the timed copy is installed
    CHECK_THROWS_AS(profile::Profiler(), std::logic_error);
    Run timed;
    timed.forward_backward();
    gx = timed.x.grad().to_vector<float>();
    gw = timed.w.grad().to_vector<float>();
    {
      const profile::Part part("no grad");
      NoGradGuard no_grad;
      (void)ops::exp(timed.x);
    }
    profiler.set_recording(false);
    {
      const profile::Part part("paused");
      (void)ops::exp(timed.x);
    }
    report = profiler.report();
  }
  // The compiled tables are back, and the timed ones computed the same bits.
  CHECK(kernels::compiled_kernel_table(0) == compiled);
  CHECK(kernels::compiled_memory_table(0) == compiled_memory);
  CHECK(gx == plain.x.grad().to_vector<float>());
  CHECK(gw == plain.w.grad().to_vector<float>());

  // The product: one GEMM forward (4 x 5 x 8), two backward (gx: 4 x 8 x 5, gw: 8 x 5 x 4),
  // all in part "product" -- the backward ones because autograd replays the node's part.
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes;
  double flops = 0;
  for (const auto& g : report.gemms) {
    CHECK(g.part == "product");
    CHECK(g.calls == 1);
    shapes.insert({g.m, g.n, g.k});
    flops += g.flops;
  }
  CHECK(shapes == std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{{4, 5, 8}, {4, 8, 5}, {8, 5, 4}});
  CHECK(flops == 3 * 2 * 4 * 5 * 8);

  const profile::Row* gemm = row_named(report.kernels, "gemm");
  REQUIRE(gemm != nullptr);
  CHECK(gemm->calls == 3);
  CHECK(gemm->forward_ms > 0);
  CHECK(gemm->backward_ms > 0);
  CHECK(gemm->other_ms == 0);
  const profile::Row* product = row_named(report.parts, "product");
  REQUIRE(product != nullptr);
  CHECK(product->forward_ms > 0);
  CHECK(product->backward_ms > 0);
  const profile::Row* loss = row_named(report.parts, "loss");
  REQUIRE(loss != nullptr);
  CHECK(loss->forward_ms > 0);
  CHECK(loss->backward_ms > 0);
  // Outside autograd the work is "other"; paused work is not counted at all.
  const profile::Row* no_grad = row_named(report.parts, "no grad");
  REQUIRE(no_grad != nullptr);
  CHECK(no_grad->calls == 1);
  CHECK(no_grad->other_ms > 0);
  CHECK(no_grad->forward_ms + no_grad->backward_ms == 0);
  CHECK(row_named(report.parts, "paused") == nullptr);
  // Kinds, kernels and parts are three views of the same calls.
  double by_kind = 0, by_kernel = 0, by_part = 0;
  for (const auto& r : report.kinds) by_kind += r.ms();
  for (const auto& r : report.kernels) by_kernel += r.ms();
  for (const auto& r : report.parts) by_part += r.ms();
  CHECK(by_kind == doctest::Approx(report.kernel_ms));
  CHECK(by_kernel == doctest::Approx(report.kernel_ms));
  CHECK(by_part == doctest::Approx(report.kernel_ms));
  CHECK(row_named(report.kinds, "GEMM")->calls == 3);
}

TEST_CASE("profile: the GEMM's packing is timed when the packed kernels run, and nothing is left recording") {
  Tensor a = Tensor::ones({96, 300}), b = Tensor::ones({300, 200});
  profile::Report report;
  {
    profile::Profiler profiler;
    (void)ops::matmul(a, b);
    report = profiler.report();
  }
  CHECK(report.kernel_ms > 0);
  const bool packed = kernels::gemm_backend() == kernels::GemmBackend::Wedge &&
                      kernels::cpu::best_sgemm_microkernel() != nullptr;
  if (packed) CHECK(report.packing_ms > 0);
  else CHECK(report.packing_ms == 0);
  // All of it happened in the one GEMM, and is its group's.
  REQUIRE(report.gemms.size() == 1);
  CHECK(report.gemms[0].packing_ms == doctest::Approx(report.packing_ms));
  CHECK_FALSE(profile::active());
}
