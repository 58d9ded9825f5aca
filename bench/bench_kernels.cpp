// The optimized CPU kernels (kernels/cpu) against the reference kernels (kernels/ref) on
// the shapes of one training step of the 6-layer paper models (batch 32 x block 128 =
// 4096 tokens, d 256, d_ff 1024, vocabulary 30,522, 4 heads of 64, Grassmann rank 32
// with offsets {1, 2, 4, 8, 12, 16}). Reports time per call and bytes or elements per
// second; the reference rows show how much each kernel gained.
//
//   build/bench/bench_kernels                          (all)
//   build/bench/bench_kernels --benchmark_filter=cpu/  (optimized only: quick)
//
// Threads: WEDGE_NUM_THREADS (default: all cores). The reference kernels are single
// threaded scalar loops; some take seconds per call at these sizes.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/tables.h"

using namespace wedge;
using namespace wedge::kernels;

namespace {

constexpr i64 kTokens = 4096, kVocab = 30522, kModel = 256, kHidden = 1024;
constexpr i64 kHeads = 4, kHeadDim = 64, kBatch = 32, kBlock = 128, kRank = 32;

std::vector<float> random_vector(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

const KernelTable<float>& table(bool optimized) {
  return optimized ? cpu_table_f32() : ref_table_f32();
}

// Registers `name` for both tables; `body(table, state)` runs one call per iteration and
// returns the bytes it moves (for a GB/s counter).
void register_pair(const std::string& name,
                   std::function<double(const KernelTable<float>&, benchmark::State&)> body) {
  for (bool optimized : {true, false}) {
    auto* b = benchmark::RegisterBenchmark(
        ((optimized ? "cpu/" : "ref/") + name).c_str(), [optimized, body](benchmark::State& state) {
          double bytes = 0;
          for (auto _ : state) bytes = body(table(optimized), state);
          state.counters["GB/s"] =
              benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
        });
    b->Unit(benchmark::kMillisecond)->UseRealTime();
    if (!optimized) b->Iterations(1);  // the scalar loops are slow; one call says enough
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("%s, %d threads\n", cpu_backend_name(), num_threads());

  // Data shared by the benchmarks (allocated once; buffers reused by every call).
  static std::vector<float> logits = random_vector(kTokens * kVocab, -4, 4, 1);
  static std::vector<float> glogits(logits.size());
  static std::vector<std::int32_t> targets(kTokens);
  for (i64 i = 0; i < kTokens; ++i) targets[i] = static_cast<std::int32_t>((i * 7919) % kVocab);
  static std::vector<float> lse(kTokens);
  static float loss = 0, count = 0, gloss = 1;

  register_pair("cross_entropy_forward 4096x30522",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.cross_entropy_forward(logits.data(), targets.data(), kTokens, kVocab, -100,
                                          lse.data(), &loss, &count);
                  return 4.0 * kTokens * kVocab;
                });
  register_pair("cross_entropy_backward 4096x30522",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count,
                                           &gloss, kTokens, kVocab, -100, glogits.data());
                  return 8.0 * kTokens * kVocab;
                });

  static std::vector<float> scores = random_vector(kBatch * kHeads * kBlock * kBlock, -3, 3, 2);
  static std::vector<float> probs(scores.size()), gprobs(scores.size());
  register_pair("softmax_forward (4096x4)x128", [](const KernelTable<float>& t, benchmark::State&) {
    t.softmax_forward(scores.data(), probs.data(), kBatch * kHeads * kBlock, kBlock, false);
    return 8.0 * scores.size();
  });
  register_pair("softmax_backward (4096x4)x128",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.softmax_backward(probs.data(), scores.data(), gprobs.data(),
                                     kBatch * kHeads * kBlock, kBlock, false);
                  return 12.0 * scores.size();
                });

  static std::vector<float> x = random_vector(kTokens * kModel, -2, 2, 3), y(x.size()),
                            gx(x.size());
  static std::vector<float> gamma = random_vector(kModel, 0.5f, 1.5f, 4),
                            beta = random_vector(kModel, -1, 1, 5);
  static std::vector<float> ggamma(kModel), gbeta(kModel), mean(kTokens), rstd(kTokens);
  register_pair("layer_norm_forward 4096x256", [](const KernelTable<float>& t, benchmark::State&) {
    t.layer_norm_forward(x.data(), gamma.data(), beta.data(), kTokens, kModel, 1e-5f, y.data(),
                         mean.data(), rstd.data());
    return 8.0 * x.size();
  });
  register_pair("layer_norm_backward 4096x256", [](const KernelTable<float>& t, benchmark::State&) {
    t.layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), y.data(), kTokens,
                          kModel, gx.data(), ggamma.data(), gbeta.data());
    return 12.0 * x.size();
  });

  static std::vector<float> hidden = random_vector(kTokens * kHidden, -4, 4, 6),
                            hidden_out(hidden.size()), ghidden(hidden.size());
  register_pair("gelu_forward 4096x1024", [](const KernelTable<float>& t, benchmark::State&) {
    t.unary(UnaryOp::Gelu, 0.0f, hidden.data(), hidden_out.data(), kTokens * kHidden);
    return 8.0 * hidden.size();
  });
  register_pair("gelu_backward 4096x1024", [](const KernelTable<float>& t, benchmark::State&) {
    t.unary_backward(UnaryOp::Gelu, 0.0f, hidden.data(), hidden_out.data(), hidden_out.data(),
                     ghidden.data(), kTokens * kHidden, false);
    return 12.0 * hidden.size();
  });
  static std::vector<float> hidden_bias(kHidden);
  register_pair("bias_act_backward gelu 4096x1024", [](const KernelTable<float>& t, benchmark::State&) {
    t.bias_act_backward(Activation::Gelu, hidden.data(), hidden_out.data(), kTokens, kHidden, ghidden.data(),
                        hidden_bias.data());
    return 12.0 * hidden.size();
  });

  constexpr i64 kParams = 12'600'000;
  static std::vector<float> params = random_vector(kParams, -0.1f, 0.1f, 7),
                            grads = random_vector(kParams, -1, 1, 8);
  static std::vector<float> m1(kParams, 0.0f), m2(kParams, 0.0f);
  // The 6-layer TransformerLM's parameter tensors (embedding, then per layer: qkv, out,
  // two layer norms, two feed-forward linears; then the final norm), as one update.
  static std::vector<AdamSegment<float>> segments = [] {
    std::vector<i64> sizes{30522 * 256 + 128 * 256};
    for (int layer = 0; layer < 6; ++layer)
      for (i64 n : {768 * 256, 768, 256 * 256, 256, 256, 256, 256, 256, 1024 * 256, 1024, 256 * 1024, 256})
        sizes.push_back(n);
    sizes.push_back(256);
    sizes.push_back(256);
    std::vector<AdamSegment<float>> out;
    i64 at = 0;
    for (i64 n : sizes) {
      n = std::min(n, kParams - at);
      out.push_back({params.data() + at, grads.data() + at, m1.data() + at, m2.data() + at, n});
      at += n;
    }
    return out;
  }();
  register_pair("adam_update 12.6M (77 tensors)", [](const KernelTable<float>& t, benchmark::State&) {
    AdamParams hp{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, true};
    hp.grad_scale = 0.5f;
    t.adam_update(hp, segments.data(), static_cast<i64>(segments.size()));
    return 28.0 * kParams;
  });

  const i64 bh = kBatch * kHeads, qkv = bh * kBlock * kHeadDim;
  static std::vector<float> q = random_vector(qkv, -1, 1, 9), k = random_vector(qkv, -1, 1, 10),
                            v = random_vector(qkv, -1, 1, 11), out(qkv),
                            gout = random_vector(qkv, -1, 1, 12), gq(qkv), gk(qkv), gv(qkv),
                            att_lse(bh * kBlock);
  register_pair("attention_forward causal 128x(128x64)",
                [bh](const KernelTable<float>& t, benchmark::State&) {
                  t.attention_forward(q.data(), k.data(), v.data(), bh, kBlock, kHeadDim, 0.125f,
                                      true, out.data(), att_lse.data());
                  return 16.0 * q.size();
                });
  register_pair("attention_backward causal 128x(128x64)", [bh](const KernelTable<float>& t,
                                                               benchmark::State&) {
    t.attention_backward(q.data(), k.data(), v.data(), out.data(), att_lse.data(), gout.data(), bh,
                         kBlock, kHeadDim, 0.125f, true, gq.data(), gk.data(), gv.data());
    return 36.0 * q.size();
  });

  static const std::vector<std::int32_t> offsets{1, 2, 4, 8, 12, 16};
  constexpr i64 kPairs = kRank * (kRank - 1) / 2;
  static std::vector<float> z = random_vector(kTokens * kRank, -1, 1, 13),
                            plucker(kTokens * kPairs),
                            gplucker = random_vector(kTokens * kPairs, -1, 1, 14),
                            norms(kTokens * 6), gz(kTokens * kRank);
  register_pair("plucker_mean_forward 32x128 r32 m6",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.plucker_mean_forward(z.data(), kBatch, kBlock, kRank, offsets.data(), 6, 1e-6f,
                                         plucker.data(), norms.data());
                  return 4.0 * plucker.size();
                });
  register_pair("plucker_mean_backward 32x128 r32 m6",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.plucker_mean_backward(z.data(), kBatch, kBlock, kRank, offsets.data(), 6, 1e-6f,
                                          norms.data(), gplucker.data(), gz.data());
                  return 4.0 * gplucker.size();
                });

  // SheafStateLM's scan: inner width 512, state 16, patches of 16, a state h0 per patch.
  constexpr i64 kInner = 512, kState = 16, kPatch = 16, kSegments = kBlock / kPatch;
  static std::vector<float> su = random_vector(kTokens * kInner, -1, 1, 15),
                            sdelta = random_vector(kTokens * kInner, -3, 0, 16),
                            sbias = random_vector(kInner, -1, 0, 17),
                            sA_log = random_vector(kInner * kState, 0, 2.8f, 18),
                            sB = random_vector(kTokens * kState, -1, 1, 19),
                            sC = random_vector(kTokens * kState, -1, 1, 20),
                            sD = random_vector(kInner, 0.5f, 1.5f, 21),
                            sh0 = random_vector(kBatch * kSegments * kInner * kState, -1, 1, 22),
                            sy(kTokens * kInner), sgy = random_vector(kTokens * kInner, -1, 1, 23),
                            sgu(su.size()), sgdelta(su.size()), sgbias(kInner), sgA(sA_log.size()),
                            sgB(sB.size()), sgC(sC.size()), sgD(kInner), sgh0(sh0.size());
  static ScanArgs<float> scan_args;
  scan_args.batch = kBatch, scan_args.L = kBlock, scan_args.D = kInner, scan_args.N = kState;
  scan_args.P = kPatch;
  scan_args.u = su.data(), scan_args.delta = sdelta.data(), scan_args.delta_bias = sbias.data();
  scan_args.A_log = sA_log.data(), scan_args.B = sB.data(), scan_args.C = sC.data();
  scan_args.Dskip = sD.data(), scan_args.h0 = sh0.data();
  register_pair("selective_scan_forward 32x128 E512 N16 P16",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.selective_scan_forward(scan_args, sy.data(), nullptr, nullptr);
                  return 4.0 * (3 * su.size() + sh0.size());
                });
  register_pair("selective_scan_backward 32x128 E512 N16 P16",
                [](const KernelTable<float>& t, benchmark::State&) {
                  ScanGrads<float> g{sgu.data(), sgdelta.data(), sgbias.data(), sgA.data(),
                                     sgB.data(),  sgC.data(),     sgD.data(),    sgh0.data()};
                  t.selective_scan_backward(scan_args, sgy.data(), nullptr, nullptr, g);
                  return 4.0 * (6 * su.size() + 2 * sh0.size());
                });
  // The same with Mamba's output gate silu(z) taken inside the scan (the model's second scan).
  static std::vector<float> sz = random_vector(kTokens * kInner, -3, 3, 24), sgz(sz.size());
  static ScanArgs<float> gated_args = scan_args;
  gated_args.z = sz.data();
  register_pair("selective_scan_forward gated 32x128 E512 N16 P16",
                [](const KernelTable<float>& t, benchmark::State&) {
                  t.selective_scan_forward(gated_args, sy.data(), nullptr, nullptr);
                  return 4.0 * (4 * su.size() + sh0.size());
                });
  register_pair("selective_scan_backward gated 32x128 E512 N16 P16",
                [](const KernelTable<float>& t, benchmark::State&) {
                  ScanGrads<float> g{sgu.data(), sgdelta.data(), sgbias.data(), sgA.data(), sgB.data(),
                                     sgC.data(), sgD.data(),     sgh0.data(),  sgz.data()};
                  t.selective_scan_backward(gated_args, sgy.data(), nullptr, nullptr, g);
                  return 4.0 * (8 * su.size() + 2 * sh0.size());
                });

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
