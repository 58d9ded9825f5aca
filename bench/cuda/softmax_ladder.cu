// The CUDA softmax cross-entropy teaching ladder: four versions of a language model head's
// loss and gradient over the vocabulary (naive thread per row -> shared-memory tree ->
// warp shuffles -> the fused online softmax; the kernels and what each rung changes are in
// softmax_ladder.cuh), each checked against a float64 reference and timed on the shapes
// of the paper models.
//
//   build/bench/cuda_softmax_ladder
//
// Bandwidth-bound: prints GB/s counting the least any version must move (one read of the
// logits and one write of the gradient, 8 bytes per element) and % of the device's
// measured copy bandwidth; exits non-zero if a rung is wrong. Without a GPU the same
// kernels run on the host emulation in tests/kernels/test_cuda_ladders_emulated.cpp.
#include <cstdio>
#include <random>
#include <vector>

#include "softmax_ladder.cuh"

using namespace wedge::ladders;
using namespace wedge::ladders::softmax_ce;

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("softmax_ladder: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double peak_gbs = measured_copy_gbs();
  std::printf("softmax cross-entropy ladder on %s (sm_%d%d), FP32: loss and gradient per row\n", prop.name, prop.major,
              prop.minor);
  std::printf("measured copy bandwidth (read + write): %.0f GB/s\n", peak_gbs);

  struct Shape {
    int rows, V;
    const char* what;
  };
  const Shape shapes[] = {{4096, 30522, "LM head (tokens x vocabulary)"}, {65536, 512, "short rows"}};
  bool all_ok = true;
  for (const Shape& s : shapes) {
    const std::size_t n = std::size_t(s.rows) * s.V;
    std::vector<float> x(n);
    std::vector<int> targets(static_cast<std::size_t>(s.rows));
    std::mt19937 gen(1234);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (float& v : x) v = dist(gen);
    for (int& t : targets) t = int(gen() % unsigned(s.V));
    std::vector<double> loss_ref, grad_ref;
    reference(x, targets, s.rows, s.V, loss_ref, grad_ref);

    DeviceBuffer d_x(n * sizeof(float)), d_t(targets.size() * sizeof(int)), d_loss(loss_ref.size() * sizeof(float)),
        d_grad(n * sizeof(float));
    d_x.upload(x);
    d_t.upload(targets);

    const double bytes = 8.0 * double(n);
    std::printf("\n%d x %d  %s\n", s.rows, s.V, s.what);
    std::printf("  %-24s %9s %9s %8s %11s %11s\n", "kernel", "ms", "GB/s", "% copy", "loss err", "grad err");
    for (const Rung rung : kRungs) {
      auto launch = [&] {
        run(rung, d_x.as<float>(), d_t.as<int>(), s.rows, s.V, d_loss.as<float>(), d_grad.as<float>());
      };
      d_loss.poison();
      d_grad.poison();
      launch();
      check(cudaGetLastError(), rung_name(rung));
      check(cudaDeviceSynchronize(), rung_name(rung));
      const double loss_err = relative_error(d_loss.download<float>(loss_ref.size()), loss_ref);
      const double grad_err = relative_error(d_grad.download<float>(n), grad_ref);
      const bool ok = loss_err <= kTolerance && grad_err <= kTolerance;
      all_ok = all_ok && ok;
      const float ms = time_ms(launch);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("  %-24s %9.3f %9.0f %7.1f%% %11.2e %11.2e %s\n", rung_name(rung), ms, gbs, 100.0 * gbs / peak_gbs,
                  loss_err, grad_err, ok ? "" : "WRONG");
    }
  }
  std::printf("\n%s\n", all_ok ? "all rungs agree with the float64 reference" : "SOME RUNGS ARE WRONG");
  return all_ok ? 0 : 1;
}
