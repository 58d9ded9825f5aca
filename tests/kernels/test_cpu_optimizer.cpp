// AVX-512 AdamW / Adam update and sum of squares (kernels/cpu/optimizer_avx512.cpp)
// against the reference, on lengths that are not multiples of the vector width.
#include <doctest/doctest.h>

#include "test_cpu_helpers.h"

namespace wedge::kernels {

using testing::avx512_available;
using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

TEST_CASE("cpu adam_update matches the reference (AdamW and Adam with L2)") {
  if (!avx512_available()) return;
  for (i64 n : {1, 7, 33, 1000, 100003}) {
    for (bool decoupled : {true, false}) {
      INFO("n " << n << (decoupled ? " AdamW" : " Adam+L2"));
      AdamParams hp{1e-3f,
                    0.9f,
                    0.999f,
                    1e-8f,
                    0.01f,
                    1.0f - 0.9f * 0.9f * 0.9f,
                    1.0f - 0.999f * 0.999f * 0.999f,
                    decoupled};
      const std::size_t size = static_cast<std::size_t>(n);
      std::vector<float> p = random_floats(size, 1), m = random_floats(size, 2, -0.1f, 0.1f);
      std::vector<float> v = random_floats(size, 3, 0.0f, 0.01f);
      const std::vector<float> g = random_floats(size, 4);
      std::vector<float> p_ref = p, m_ref = m, v_ref = v;
      // Two steps, so the second reads the moments the first wrote.
      for (int step = 0; step < 2; ++step) {
        cpu::avx512::adam_update(hp, p.data(), g.data(), m.data(), v.data(), n);
        ref_table_f32().adam_update(hp, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n);
      }
      expect_close(m, m_ref, 1e-8, 1e-6, "m");
      expect_close(v, v_ref, 1e-10, 1e-6, "v");
      expect_close(p, p_ref, 1e-7, 1e-6, "param");
    }
  }
}

TEST_CASE("cpu adam_update does not depend on the thread count") {
  if (!avx512_available()) return;
  const i64 n = 70001;
  const AdamParams hp{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.1f, 0.01f, true};
  const std::vector<float> g = random_floats(n, 9);
  auto run = [&](int threads) {
    std::vector<float> p = random_floats(n, 1), m(n, 0.0f), v(n, 0.0f);
    with_threads(threads, [&] {
      cpu_table_f32().adam_update(hp, p.data(), g.data(), m.data(), v.data(), n);
    });
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
