// The CUDA teaching ladders (bench/cuda/*_ladder.cuh) compiled for the host and run on the
// fiber emulation of kernels/cuda/host_emulation.h. The GPU programs
// (build/bench/cuda_*_ladder) validate and time the same kernels on a GPU; this is how
// machines without one (CI) check them: every rung of every ladder, on awkward shapes
// (rows not a multiple of a block, row lengths of 1, 31, 33 and 1000, sequence lengths
// that end inside a tile), against the ladder's own float64 reference, with the threads of
// a block scheduled first-to-last and then last-to-first (a shared-memory read not ordered
// after its write by a barrier fails one of them). Outputs start as NaN, so an element a
// rung forgets to write fails too.
//
// The emulation runs every thread as a fiber: the shapes are kept small so the whole file
// takes a few seconds.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#define WEDGE_CUDA_EMULATE 1
#include "bench/cuda/softmax_ladder.cuh"

namespace {

namespace ladders = wedge::ladders_emulated;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Runs `check` with the block's threads scheduled first-to-last, then last-to-first.
template <typename Check>
void in_both_orders(Check check) {
  for (bool reverse : {false, true}) {
    wedge::emu::g_reverse_order = reverse;
    check(reverse ? "last-to-first" : "first-to-last");
  }
  wedge::emu::g_reverse_order = false;
}

std::string label(const char* ladder, const char* rung, const std::string& shape, const char* order) {
  return std::string(ladder) + " / " + rung + " / " + shape + " / threads " + order;
}

}  // namespace

TEST_CASE("CUDA ladders (emulated): softmax cross-entropy, every rung on awkward shapes") {
  namespace sm = ladders::softmax_ce;
  for (const int rows : {1, 37}) {
    for (const int V : {1, 31, 33, 300, 1000}) {
      const std::vector<float> x = uniform(std::size_t(rows) * V, -4.0f, 4.0f, unsigned(rows * 7919 + V));
      std::vector<int> targets(static_cast<std::size_t>(rows));
      for (int r = 0; r < rows; ++r) targets[std::size_t(r)] = (r * 7 + 3) % V;
      std::vector<double> loss_ref, grad_ref;
      sm::reference(x, targets, rows, V, loss_ref, grad_ref);
      for (const sm::Rung rung : sm::kRungs) {
        in_both_orders([&](const char* order) {
          std::vector<float> loss(std::size_t(rows), kNaN), grad(x.size(), kNaN);
          sm::run(rung, x.data(), targets.data(), rows, V, loss.data(), grad.data());
          const double loss_err = ladders::relative_error(loss, loss_ref);
          const double grad_err = ladders::relative_error(grad, grad_ref);
          INFO(label("softmax", sm::rung_name(rung), std::to_string(rows) + " x " + std::to_string(V), order));
          INFO("loss error " << loss_err << ", gradient error " << grad_err);
          CHECK(loss_err <= sm::kTolerance);
          CHECK(grad_err <= sm::kTolerance);
        });
      }
    }
  }
}
