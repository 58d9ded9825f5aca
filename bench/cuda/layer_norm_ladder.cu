// The CUDA layer norm teaching ladder, forward and backward: naive thread per row ->
// shared-memory trees -> warp shuffles -> the row in registers with the column sums fused
// into the backward's row sweep (the kernels and what each rung changes are in
// layer_norm_ladder.cuh), each checked against a float64 reference and timed. The GPU
// counterpart of bench/layer_norm_ladder.cpp.
//
//   build/bench/cuda_layer_norm_ladder
//
// Bandwidth-bound: prints GB/s counting the least each direction must move (forward reads
// x and writes y, 8 bytes per element; backward reads x and gy and writes gx, 12 bytes)
// and % of the device's measured copy bandwidth; exits non-zero if a rung is wrong.
// Without a GPU the same kernels run on the host emulation in
// tests/kernels/test_cuda_ladders_emulated.cpp.
#include <cstdio>
#include <random>
#include <vector>

#include "layer_norm_ladder.cuh"

using namespace wedge::ladders;
using namespace wedge::ladders::layer_norm;

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("layer_norm_ladder: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double peak_gbs = measured_copy_gbs();
  std::printf("layer norm ladder on %s (sm_%d%d), FP32\n", prop.name, prop.major, prop.minor);
  std::printf("measured copy bandwidth (read + write): %.0f GB/s\n", peak_gbs);

  // 128 MB per tensor: well past the L2, so every rung streams from device memory.
  struct Shape {
    int rows, D;
    const char* what;
  };
  const Shape shapes[] = {{131072, 256, "width 256 (the paper models)"}, {32768, 1024, "width 1024"}};
  const float eps = 1e-5f;
  bool all_ok = true;
  for (const Shape& s : shapes) {
    const std::size_t n = std::size_t(s.rows) * s.D;
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> x(n), gy(n), gamma(static_cast<std::size_t>(s.D)), beta(static_cast<std::size_t>(s.D));
    for (float& v : x) v = dist(gen) + 3.0f;  // an offset mean, as activations have
    for (float& v : gy) v = dist(gen);
    for (float& v : gamma) v = 1.0f + 0.1f * dist(gen);
    for (float& v : beta) v = 0.1f * dist(gen);
    std::vector<double> y_ref, mean_ref, rstd_ref, gx_ref, gg_ref, gb_ref;
    reference_forward(x, gamma, beta, s.rows, s.D, eps, y_ref, mean_ref, rstd_ref);
    reference_backward(x, gamma, mean_ref, rstd_ref, gy, s.rows, s.D, gx_ref, gg_ref, gb_ref);
    // The backward reads the reference statistics, so its error is its own.
    const std::vector<float> mean_f(mean_ref.begin(), mean_ref.end()), rstd_f(rstd_ref.begin(), rstd_ref.end());

    const std::size_t row_bytes = std::size_t(s.rows) * sizeof(float), col_bytes = std::size_t(s.D) * sizeof(float);
    DeviceBuffer d_x(n * sizeof(float)), d_gy(n * sizeof(float)), d_y(n * sizeof(float)), d_gx(n * sizeof(float)),
        d_gamma(col_bytes), d_beta(col_bytes), d_mean(row_bytes), d_rstd(row_bytes), d_mean_ref(row_bytes),
        d_rstd_ref(row_bytes), d_gg(col_bytes), d_gb(col_bytes),
        d_scratch(backward_scratch_floats(Rung::fused, s.rows, s.D) * sizeof(float));
    d_x.upload(x);
    d_gy.upload(gy);
    d_gamma.upload(gamma);
    d_beta.upload(beta);
    d_mean_ref.upload(mean_f);
    d_rstd_ref.upload(rstd_f);

    std::printf("\n%d x %d  %s\n", s.rows, s.D, s.what);
    std::printf("  %-24s | %8s %7s %7s %9s | %8s %7s %7s %9s\n", "kernel", "fwd ms", "GB/s", "% copy", "rel err",
                "bwd ms", "GB/s", "% copy", "rel err");
    for (const Rung rung : kRungs) {
      if (!supported(rung, s.D)) {
        std::printf("  %-24s   needs D <= %d\n", rung_name(rung), kMaxFusedD);
        continue;
      }
      auto forward_run = [&] {
        forward(rung, d_x.as<float>(), d_gamma.as<float>(), d_beta.as<float>(), s.rows, s.D, eps, d_y.as<float>(),
                d_mean.as<float>(), d_rstd.as<float>());
      };
      auto backward_run = [&] {
        backward(rung, d_x.as<float>(), d_gamma.as<float>(), d_mean_ref.as<float>(), d_rstd_ref.as<float>(),
                 d_gy.as<float>(), s.rows, s.D, d_gx.as<float>(), d_gg.as<float>(), d_gb.as<float>(),
                 d_scratch.as<float>());
      };
      for (DeviceBuffer* b : {&d_y, &d_mean, &d_rstd, &d_gx, &d_gg, &d_gb, &d_scratch}) b->poison();
      forward_run();
      backward_run();
      check(cudaGetLastError(), rung_name(rung));
      check(cudaDeviceSynchronize(), rung_name(rung));
      const double fwd_err = std::max({relative_error(d_y.download<float>(n), y_ref),
                                       relative_error(d_mean.download<float>(mean_ref.size()), mean_ref),
                                       relative_error(d_rstd.download<float>(rstd_ref.size()), rstd_ref)});
      const double bwd_err = std::max({relative_error(d_gx.download<float>(n), gx_ref),
                                       relative_error(d_gg.download<float>(gg_ref.size()), gg_ref),
                                       relative_error(d_gb.download<float>(gb_ref.size()), gb_ref)});
      const bool ok = fwd_err <= kTolerance && bwd_err <= kTolerance;
      all_ok = all_ok && ok;
      const float fwd_ms = time_ms(forward_run), bwd_ms = time_ms(backward_run);
      const double fwd_gbs = 8.0 * double(n) / (fwd_ms * 1e-3) / 1e9,
                   bwd_gbs = 12.0 * double(n) / (bwd_ms * 1e-3) / 1e9;
      std::printf("  %-24s | %8.3f %7.0f %6.1f%% %9.2e | %8.3f %7.0f %6.1f%% %9.2e %s\n", rung_name(rung), fwd_ms,
                  fwd_gbs, 100.0 * fwd_gbs / peak_gbs, fwd_err, bwd_ms, bwd_gbs, 100.0 * bwd_gbs / peak_gbs, bwd_err,
                  ok ? "" : "WRONG");
    }
  }
  std::printf("\n%s\n", all_ok ? "all rungs agree with the float64 reference" : "SOME RUNGS ARE WRONG");
  return all_ok ? 0 : 1;
}
