// AVX-512 softmax / log-softmax / cross-entropy (kernels/cpu/softmax_avx512.cpp) against
// the reference kernels: widths that are not multiples of 16, a 30k vocabulary, large
// logits, masked (-inf) entries, ignored rows, in-place use, and thread-count independence.
#include <doctest/doctest.h>

#include <limits>

#include "test_cpu_helpers.h"

namespace wedge::kernels {

using testing::avx512_available;
using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

namespace {

struct Shape {
  i64 rows, n;
};
const Shape kShapes[] = {{1, 1},    {3, 7},    {5, 33},   {4, 16},
                         {2, 1000}, {3, 1037}, {65, 129}, {2, 30522}};

// Inputs with some structure: a large common offset on odd rows (exercises the max
// shift), and a -inf ("masked") entry on every third row when allowed.
std::vector<float> logits_for(const Shape& s, std::uint64_t seed, bool with_masked) {
  std::vector<float> x = random_floats(static_cast<std::size_t>(s.rows * s.n), seed, -6.0f, 6.0f);
  for (i64 r = 0; r < s.rows; ++r) {
    if (r % 2 == 1)
      for (i64 j = 0; j < s.n; ++j) x[r * s.n + j] += 300.0f;
    if (with_masked && r % 3 == 2 && s.n > 1)
      x[r * s.n + (r % s.n)] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

}  // namespace

TEST_CASE("cpu softmax / log_softmax forward and backward match the reference") {
  if (!avx512_available()) return;
  for (const Shape& s : kShapes) {
    for (bool log : {false, true}) {
      INFO("rows " << s.rows << " n " << s.n << (log ? " log_softmax" : " softmax"));
      const std::size_t size = static_cast<std::size_t>(s.rows * s.n);
      const std::vector<float> x = logits_for(s, 3, true);
      std::vector<float> y(size), y_ref(size);
      cpu::avx512::softmax_forward(x.data(), y.data(), s.rows, s.n, log);
      ref_table_f32().softmax_forward(x.data(), y_ref.data(), s.rows, s.n, log);
      expect_close(y, y_ref, log ? 2e-6 : 1e-8, 2e-6, "y");

      // In place gives the same.
      std::vector<float> inplace = x;
      cpu::avx512::softmax_forward(inplace.data(), inplace.data(), s.rows, s.n, log);
      CHECK(bitwise_equal(inplace, y));

      // Backward from the reference forward output, so only backward is judged. Masked
      // entries of log_softmax are -inf and have no finite gradient: replace them.
      std::vector<float> y_in = y_ref;
      for (float& v : y_in)
        if (std::isinf(v)) v = -50.0f;
      const std::vector<float> gy = random_floats(size, 4);
      std::vector<float> gx(size), gx_ref(size);
      cpu::avx512::softmax_backward(y_in.data(), gy.data(), gx.data(), s.rows, s.n, log);
      ref_table_f32().softmax_backward(y_in.data(), gy.data(), gx_ref.data(), s.rows, s.n, log);
      expect_close(gx, gx_ref, 1e-6, 1e-5, "gx");
    }
  }
}

TEST_CASE("cpu cross-entropy forward and backward match the reference") {
  if (!avx512_available()) return;
  for (const Shape& s : kShapes) {
    INFO("rows " << s.rows << " V " << s.n);
    const std::vector<float> logits = logits_for(s, 5, false);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(s.rows));
    for (i64 r = 0; r < s.rows; ++r) targets[r] = static_cast<std::int32_t>((r * 7919) % s.n);
    const std::int32_t ignore = -100;
    if (s.rows > 2) targets[1] = ignore;

    std::vector<float> lse(s.rows), lse_ref(s.rows);
    float loss = 0, count = 0, loss_ref = 0, count_ref = 0;
    cpu::avx512::cross_entropy_forward(logits.data(), targets.data(), s.rows, s.n, ignore,
                                       lse.data(), &loss, &count);
    ref_table_f32().cross_entropy_forward(logits.data(), targets.data(), s.rows, s.n, ignore,
                                          lse_ref.data(), &loss_ref, &count_ref);
    expect_close(lse, lse_ref, 1e-6, 2e-7, "lse");
    CHECK(count == count_ref);
    CHECK(loss == doctest::Approx(loss_ref).epsilon(1e-5));

    const float gloss = 0.75f;
    const std::size_t size = static_cast<std::size_t>(s.rows * s.n);
    std::vector<float> g(size, std::nanf("")), g_ref(size);
    cpu::avx512::cross_entropy_backward(logits.data(), targets.data(), lse_ref.data(), &count_ref,
                                        &gloss, s.rows, s.n, ignore, g.data());
    ref_table_f32().cross_entropy_backward(logits.data(), targets.data(), lse_ref.data(),
                                           &count_ref, &gloss, s.rows, s.n, ignore, g_ref.data());
    expect_close(g, g_ref, 1e-9, 1e-5, "glogits");

    // Writing the gradient over the logits themselves gives the same values.
    std::vector<float> inplace = logits;
    cpu::avx512::cross_entropy_backward(inplace.data(), targets.data(), lse_ref.data(), &count_ref,
                                        &gloss, s.rows, s.n, ignore, inplace.data());
    CHECK(bitwise_equal(inplace, g));
  }
}

TEST_CASE("cpu cross-entropy backward on a gradient larger than the caches") {
  // Above 32 MB the kernel writes with streaming stores (aligned middle, ordinary head
  // and tail per row): check every element, the target entries and an ignored row.
  if (!avx512_available()) return;
  const i64 rows = 300, V = 30522;
  const std::vector<float> logits =
      random_floats(static_cast<std::size_t>(rows * V), 21, -5.0f, 5.0f);
  std::vector<std::int32_t> targets(rows);
  for (i64 r = 0; r < rows; ++r) targets[r] = static_cast<std::int32_t>((r * 104729) % V);
  targets[7] = -100;
  std::vector<float> lse(rows);
  float loss = 0, count = 0;
  ref_table_f32().cross_entropy_forward(logits.data(), targets.data(), rows, V, -100, lse.data(),
                                        &loss, &count);
  const float gloss = 1.0f;
  std::vector<float> g(logits.size(), std::nanf("")), g_ref(logits.size());
  cpu::avx512::cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count, &gloss,
                                      rows, V, -100, g.data());
  ref_table_f32().cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count, &gloss,
                                         rows, V, -100, g_ref.data());
  expect_close(g, g_ref, 1e-12, 1e-5, "glogits");
}

TEST_CASE("cpu cross-entropy: all rows ignored gives loss 0 and zero gradient") {
  if (!avx512_available()) return;
  const i64 rows = 3, V = 40;
  const std::vector<float> logits = random_floats(rows * V, 9);
  const std::vector<std::int32_t> targets(rows, -1);
  std::vector<float> lse(rows);
  float loss = 1, count = 1, gloss = 1;
  cpu::avx512::cross_entropy_forward(logits.data(), targets.data(), rows, V, -1, lse.data(), &loss,
                                     &count);
  CHECK(loss == 0.0f);
  CHECK(count == 0.0f);
  std::vector<float> g(rows * V, 5.0f);
  cpu::avx512::cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count, &gloss,
                                      rows, V, -1, g.data());
  for (float v : g) REQUIRE(v == 0.0f);
}

TEST_CASE("cpu softmax and cross-entropy do not depend on the thread count") {
  if (!avx512_available()) return;
  const Shape s{37, 3001};
  const std::vector<float> x = logits_for(s, 8, false);
  std::vector<std::int32_t> targets(s.rows);
  for (i64 r = 0; r < s.rows; ++r) targets[r] = static_cast<std::int32_t>(r * 31);
  auto run = [&](int threads) {
    std::vector<float> out(static_cast<std::size_t>(s.rows * s.n) + s.rows + 1);
    with_threads(threads, [&] {
      cpu_table_f32().softmax_forward(x.data(), out.data(), s.rows, s.n, false);
      float count = 0;
      cpu_table_f32().cross_entropy_forward(x.data(), targets.data(), s.rows, s.n, -1,
                                            out.data() + s.rows * s.n, &out.back(), &count);
    });
    return out;
  };
  CHECK(bitwise_equal(run(1), run(2)));
  CHECK(bitwise_equal(run(2), run(3)));
}

TEST_CASE("cpu table uses the AVX-512 softmax kernels when the CPU has AVX-512") {
  if (!avx512_available()) return;
  // (bool: doctest cannot print function pointers)
  CHECK(bool(cpu_table_f32().softmax_forward == &cpu::avx512::softmax_forward));
  CHECK(bool(cpu_table_f32().cross_entropy_forward == &cpu::avx512::cross_entropy_forward));
  CHECK(bool(cpu_table_f32().cross_entropy_backward == &cpu::avx512::cross_entropy_backward));
}

}  // namespace wedge::kernels
