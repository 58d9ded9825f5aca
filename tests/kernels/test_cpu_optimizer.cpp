// AVX-512 AdamW / Adam update (kernels/cpu/adam_avx512.cpp) and sum of squares
// (kernels/cpu/reduce_avx512.cpp) against the reference, on lengths that are not
// multiples of the vector width.
#include <doctest/doctest.h>

#include "test_cpu_helpers.h"

namespace wedge::kernels {

using testing::avx512_available;
using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

namespace {

// Tensors of awkward lengths laid end to end in p/g/m/v, as one update's segments.
std::vector<AdamSegment<float>> segments_over(std::vector<float>& p, const std::vector<float>& g,
                                              std::vector<float>& m, std::vector<float>& v,
                                              const std::vector<i64>& lengths) {
  std::vector<AdamSegment<float>> out;
  i64 at = 0;
  for (i64 n : lengths) {
    out.push_back({p.data() + at, g.data() + at, m.data() + at, v.data() + at, n});
    at += n;
  }
  return out;
}

const std::vector<i64> kLengths = {1, 7, 0, 33, 1000, 100003, 16, 5};
const std::size_t kTotal = 101065;

}  // namespace

TEST_CASE("cpu adam_update matches the reference (AdamW and Adam with L2, scaled gradients)") {
  if (!avx512_available()) return;
  for (bool decoupled : {true, false}) {
    for (float scale : {1.0f, 0.37f}) {
      INFO((decoupled ? "AdamW" : "Adam+L2") << ", grad_scale " << scale);
      AdamParams hp{1e-3f,
                    0.9f,
                    0.999f,
                    1e-8f,
                    0.01f,
                    1.0f - 0.9f * 0.9f * 0.9f,
                    1.0f - 0.999f * 0.999f * 0.999f,
                    decoupled};
      hp.grad_scale = scale;
      std::vector<float> p = random_floats(kTotal, 1), m = random_floats(kTotal, 2, -0.1f, 0.1f);
      std::vector<float> v = random_floats(kTotal, 3, 0.0f, 0.01f);
      const std::vector<float> g = random_floats(kTotal, 4);
      std::vector<float> p_ref = p, m_ref = m, v_ref = v;
      const auto segs = segments_over(p, g, m, v, kLengths);
      const auto segs_ref = segments_over(p_ref, g, m_ref, v_ref, kLengths);
      // Two steps, so the second reads the moments the first wrote.
      for (int step = 0; step < 2; ++step) {
        cpu::avx512::adam_update(hp, segs.data(), static_cast<i64>(segs.size()));
        ref_table_f32().adam_update(hp, segs_ref.data(), static_cast<i64>(segs_ref.size()));
      }
      expect_close(m, m_ref, 1e-8, 1e-6, "m");
      expect_close(v, v_ref, 1e-10, 1e-6, "v");
      expect_close(p, p_ref, 1e-7, 1e-6, "param");
    }
  }
}

TEST_CASE("cpu adam_update does not depend on the thread count") {
  if (!avx512_available()) return;
  const AdamParams hp{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.1f, 0.01f, true};
  const std::vector<float> g = random_floats(kTotal, 9);
  auto run = [&](int threads) {
    std::vector<float> p = random_floats(kTotal, 1), m(kTotal, 0.0f), v(kTotal, 0.0f);
    const auto segs = segments_over(p, g, m, v, kLengths);
    with_threads(threads, [&] { cpu_table_f32().adam_update(hp, segs.data(), static_cast<i64>(segs.size())); });
    return p;
  };
  CHECK(bitwise_equal(run(1), run(2)));
}

TEST_CASE("cpu sum_squares matches the reference") {
  if (!avx512_available()) return;
  for (i64 n : {0, 1, 7, 33, 1000, 1000003}) {
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n), 11);
    float got = 0, want = 0;
    cpu::avx512::sum_squares(x.data(), n, &got, false);
    ref_table_f32().sum_squares(x.data(), n, &want, false);
    CHECK(got == doctest::Approx(want).epsilon(1e-6));
    float acc = 2.5f, acc_ref = 2.5f;
    cpu::avx512::sum_squares(x.data(), n, &acc, true);
    ref_table_f32().sum_squares(x.data(), n, &acc_ref, true);
    CHECK(acc == doctest::Approx(acc_ref).epsilon(1e-6));
  }
}

}  // namespace wedge::kernels
