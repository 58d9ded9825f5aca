// The sentence-pair classifier: every head blind to padding, the Grassmann window mixing
// against a plain loop, central-difference gradients of every parameter tensor, the
// hypothesis-only control, and input checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "model_reference.h"
#include "parameter_gradients.h"
#include "models/nli.h"
#include "ops/ops.h"

using namespace wedge;
using models::NliConfig;

namespace {

NliConfig tiny(const std::string& head) {
  NliConfig c;
  c.head = head;
  c.vocab_size = 13;
  c.layers = 2;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.dropout = 0.0;
  c.max_length = 6;  // pairs of up to 11 tokens
  c.d_proj = 6;
  c.mixing_heads = 2;  // heads of rank 3
  c.window = 4;
  c.stride = 4;
  c.patch = 2;  // SheafState head: patches of 2, neighbours 1 and 2 patches away on each side
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 3;
  c.section_dim = 4;
  c.seed = 5;
  return c;
}

// A padded batch: row lengths (premise part, hypothesis part), width T; pads get `pad_id`.
struct Batch {
  Tensor ids, segments, mask;
};
Batch make_batch(const std::vector<std::pair<int, int>>& parts, std::int64_t T, std::uint64_t seed, std::int32_t pad_id = 0) {
  Generator gen(seed);
  const std::int64_t B = static_cast<std::int64_t>(parts.size());
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T), pad_id), seg(ids.size(), 0);
  std::vector<float> mask(ids.size(), 0.0f);
  Generator fixed(99);  // the real tokens do not depend on `seed`
  for (std::int64_t b = 0; b < B; ++b) {
    const auto [p, h] = parts[static_cast<std::size_t>(b)];
    for (std::int64_t t = 0; t < p + h; ++t) {
      const std::size_t i = static_cast<std::size_t>(b * T + t);
      ids[i] = static_cast<std::int32_t>(4 + fixed.integer(9));
      seg[i] = t >= p ? 1 : 0;
      mask[i] = 1.0f;
    }
    for (std::int64_t t = p + h; t < T; ++t)  // padding: any id, any segment
      seg[static_cast<std::size_t>(b * T + t)] = static_cast<std::int32_t>(gen.integer(2));
  }
  return {Tensor::from_vector(ids, {B, T}), Tensor::from_vector(seg, {B, T}), Tensor::from_vector(mask, {B, T})};
}

std::vector<float> logits(models::NliModel& model, const Batch& b) {
  NoGradGuard no_grad;
  return model.forward(b.ids, b.segments, b.mask).to_vector<float>();
}

}  // namespace

TEST_CASE("the classifier is blind to padding: its ids, its segments and its amount") {
  for (const char* head : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(head);
    auto model = models::make_nli_model(tiny(head));
    models::testing::randomize_parameters(*model, 31);
    model->eval();
    const std::vector<std::pair<int, int>> parts = {{3, 2}, {5, 4}, {2, 1}};
    const auto base = logits(*model, make_batch(parts, 9, 1));
    REQUIRE(base.size() == 9);
    CHECK(logits(*model, make_batch(parts, 9, 2, 7)) == base);  // other pad ids and segments
    const auto wider = logits(*model, make_batch(parts, 11, 3, 5));
    for (std::size_t i = 0; i < base.size(); ++i) CHECK(wider[i] == doctest::Approx(base[i]).epsilon(1e-5));
    // ... while a real token does change the result.
    Batch changed = make_batch(parts, 9, 1);
    std::vector<std::int32_t> ids = changed.ids.to_vector<std::int32_t>();
    ids[1] = ids[1] == 5 ? 6 : 5;
    changed.ids = Tensor::from_vector(ids, {3, 9});
    CHECK(logits(*model, changed) != base);
  }
}

TEST_CASE("the window Plücker mixing matches a plain loop over windows and partners") {
  const NliConfig c = tiny("grassmann");
  Generator init(4);
  models::WindowPluckerMixing mixing(c, init);
  for (auto& [name, p] : mixing.named_parameters()) {
    NoGradGuard no_grad;
    p.copy_(Tensor::randn(p.shape(), name.size() * 17 + 3, 0.0, 0.5));
  }
  // One row of 7 real tokens of 10 (windows [0,4) [4,8) [8,10)): token 8 has no real partner.
  const std::int64_t T = 10, real = 9, d = c.d_model, H = c.mixing_heads, r = c.d_proj / H, W = c.window;
  std::vector<float> mask(T, 0.0f);
  for (std::int64_t t = 0; t < real; ++t) mask[t] = 1.0f;
  const Tensor h = Tensor::randn({1, T, d}, 77, 0.0, 1.0);
  std::vector<float> got;
  {
    NoGradGuard no_grad;
    got = mixing.forward(h, Tensor::from_vector(mask, {1, T})).to_vector<float>();
  }
  const auto P = models::testing::host_parameters(mixing);
  const std::vector<float> hv = h.to_vector<float>();
  const auto& Wr = P.at("reduce.weight");
  const auto& br = P.at("reduce.bias");
  const auto& Wp = P.at("plucker.weight");
  const auto& bp = P.at("plucker.bias");
  const std::int64_t pairs = r * (r - 1) / 2, F = H * pairs;
  std::vector<std::vector<double>> z(T, std::vector<double>(c.d_proj));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t k = 0; k < c.d_proj; ++k) {
      double s = br[k];
      for (std::int64_t i = 0; i < d; ++i) s += Wr[k * d + i] * hv[t * d + i];
      z[t][k] = s;
    }
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> feature(F, 0.0);
    int partners = 0;
    for (std::int64_t s = t / W * W; s < std::min(T, t / W * W + W); ++s) {
      if (s == t || s >= real || t >= real) continue;
      ++partners;
      for (std::int64_t head = 0; head < H; ++head) {
        std::vector<double> p;
        double norm = 0;
        for (std::int64_t i = 0; i < r; ++i)
          for (std::int64_t j = i + 1; j < r; ++j) {
            const double a = z[t][head * r + i] * z[s][head * r + j] - z[t][head * r + j] * z[s][head * r + i];
            p.push_back(a);
            norm += a * a;
          }
        norm = std::max(std::sqrt(norm), 1e-8);
        for (std::int64_t k = 0; k < pairs; ++k) feature[head * pairs + k] += p[k] / norm;
      }
    }
    for (std::int64_t o = 0; o < d; ++o) {
      double g = 0;
      if (partners > 0) {
        g = bp[o];
        for (std::int64_t k = 0; k < F; ++k) g += Wp[o * F + k] * feature[k] / partners;
      }
      CAPTURE(t);
      CAPTURE(o);
      CHECK(got[t * d + o] == doctest::Approx(g).epsilon(1e-4).scale(1e-3));
    }
  }
}

TEST_CASE("classifier gradients of every parameter tensor match central differences") {
  for (const char* head : {"transformer", "grassmann", "sheaf"}) {
    for (bool hypothesis_only : {false, true}) {
      CAPTURE(head);
      CAPTURE(hypothesis_only);
      NliConfig c = tiny(head);
      c.hypothesis_only = hypothesis_only;
      auto model = models::make_nli_model(c);
      models::testing::randomize_parameters(*model, 41);
      const Batch b = hypothesis_only ? make_batch({{0, 4}, {0, 6}}, 7, 1) : make_batch({{3, 2}, {5, 4}}, 9, 1);
      const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{2, 0}, {2});
      auto loss = [&] { return ops::cross_entropy(model->forward(b.ids, b.segments, b.mask), labels); };
      models::testing::check_parameter_gradients(*model, loss, 3e-3f);  // the sheaf head curves too much for 1e-2
    }
  }
}

TEST_CASE("classifier: configuration and input are checked") {
  NliConfig c = tiny("grassmann");
  c.stride = 2;
  CHECK_THROWS_WITH_AS(models::make_nli_model(c), doctest::Contains("--stride"), std::invalid_argument);
  c = tiny("grassmann");
  c.mixing_heads = 4;  // d_proj 6 does not split into 4 heads
  CHECK_THROWS_WITH_AS(models::make_nli_model(c), doctest::Contains("--mixing-heads"), std::invalid_argument);
  c = tiny("sheaf");
  c.section_dim = 1;
  CHECK_THROWS_WITH_AS(models::make_nli_model(c), doctest::Contains("--section-dim"), std::invalid_argument);
  c = tiny("lstm");
  CHECK_THROWS_WITH_AS(models::make_nli_model(c), doctest::Contains("--head"), std::invalid_argument);
  auto model = models::make_nli_model(tiny("transformer"));
  const Batch b = make_batch({{3, 2}}, 5, 1);
  CHECK_THROWS_AS(model->forward(b.mask, b.segments, b.mask), std::invalid_argument);  // float ids
  CHECK_THROWS_AS(model->forward(b.ids, b.segments, b.ids), std::invalid_argument);    // int mask
  const Batch too_long = make_batch({{6, 6}}, 12, 1);                                   // 12 > 11 positions
  CHECK_THROWS_WITH_AS(model->forward(too_long.ids, too_long.segments, too_long.mask), doctest::Contains("position table"),
                       std::invalid_argument);
  CHECK(model->forward(b.ids, b.segments, b.mask).shape() == Shape{1, 3});
  // Parts: embeddings, the blocks' pieces, the classifier.
  std::int64_t total = 0;
  for (const auto& [part, count] : model->parameter_breakdown()) total += count;
  std::int64_t direct = 0;
  for (const auto& [name, p] : model->named_parameters()) direct += p.numel();
  CHECK(total == direct);
}

TEST_CASE("the SheafState head's mixing matches a plain loop: scans, summaries at the last real token, two-sided gluing") {
  NliConfig c = tiny("sheaf");
  Generator init(6);
  models::PairSheafMixing mixing(c, init);
  for (auto& [name, p] : mixing.named_parameters()) {
    NoGradGuard no_grad;
    if (name != "A_log" && name != "dt_bias") p.copy_(Tensor::randn(p.shape(), name.size() * 31 + 7, 0.0, 0.5));
  }
  // One row of 7 real tokens of 10: patches [0,2) [2,4) [4,6) [6,8) [8,10); the 4th patch
  // ends on a pad (its summary is read at token 6), the 5th is all padding.
  const std::int64_t T = 10, real = 7, d = c.d_model, P = c.patch, D = c.cover_depth, E = 2 * d, N = c.state_size;
  std::vector<float> mask(T, 0.0f);
  for (std::int64_t t = 0; t < real; ++t) mask[t] = 1.0f;
  const Tensor h = Tensor::randn({1, T, d}, 78, 0.0, 1.0);
  std::vector<float> got;
  {
    NoGradGuard no_grad;
    got = mixing.forward(h, Tensor::from_vector(mask, {1, T})).to_vector<float>();
  }
  using models::testing::Matrix;
  const models::testing::ReferenceOps ref(models::testing::host_parameters(mixing));
  const std::vector<float> hv = h.to_vector<float>();
  Matrix x(T, std::vector<double>(d));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < d; ++i) x[t][i] = hv[t * d + i];
  const Matrix xz = ref.linear(x, "in");
  Matrix u(T, std::vector<double>(E)), dt(T, std::vector<double>(E));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t e = 0; e < E; ++e) u[t][e] = ref.silu(xz[t][e]);
  const Matrix delta = ref.linear(ref.linear(u, "dt_down"), "dt_up");
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t e = 0; e < E; ++e) dt[t][e] = ref.softplus(delta[t][e] + ref.at("dt_bias")[e]);
  const Matrix B = ref.linear(u, "B"), C = ref.linear(u, "C");
  const std::int64_t patches = (T + P - 1) / P;
  auto has_real = [&](std::int64_t q) { return q >= 0 && q < patches && q * P < real; };
  Matrix summaries(patches);
  for (std::int64_t p = 0; p < patches; ++p) {
    if (!has_real(p)) continue;
    const Matrix y0 = ref.scan("", u, dt, B, C, p * P, std::min(T, (p + 1) * P), Matrix(E, std::vector<double>(N, 0.0)));
    const std::int64_t last = std::min((p + 1) * P, real) - 1 - p * P;
    summaries[p] = ref.layer_norm(Matrix{ref.linear(y0[static_cast<std::size_t>(last)], "summary")}, "")[0];
  }
  for (std::int64_t p = 0; p < patches && has_real(p); ++p) {
    Matrix cover;
    for (std::int64_t side = 0; side < 2; ++side)
      for (std::int64_t j = 0; j < D; ++j) {
        const std::int64_t q = side == 0 ? p - (std::int64_t{1} << j) : p + (std::int64_t{1} << j);
        if (has_real(q)) cover.push_back(ref.restrict_with("", summaries[q], side * D + j));
      }
    std::vector<double> c_p(static_cast<std::size_t>(c.section_dim), 0.0);
    if (!cover.empty()) {
      const std::vector<double> query = ref.linear(summaries[p], "query");
      std::vector<double> scores;
      for (const auto& r : cover) {
        double dot = 0;
        for (std::size_t i = 0; i < r.size(); ++i) dot += r[i] * query[i];
        scores.push_back(dot / std::sqrt(double(c.section_dim)));
      }
      const std::vector<double> a = ref.softmax(scores);
      for (std::size_t m = 0; m < cover.size(); ++m)
        for (std::size_t i = 0; i < c_p.size(); ++i) c_p[i] += a[m] * cover[m][i];
    }
    const std::vector<double> hx = ref.linear(c_p, "state_x"), hb = ref.linear(c_p, "state_b");
    Matrix h0(E, std::vector<double>(N));
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t n = 0; n < N; ++n) h0[e][n] = hx[e] * hb[n];
    const Matrix y = ref.scan("", u, dt, B, C, p * P, std::min(T, (p + 1) * P), h0);
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(y.size()); ++k) {
      const std::int64_t t = p * P + k;
      if (t >= real) continue;  // padding: nobody reads it
      std::vector<double> gated(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e) gated[e] = y[k][e] * ref.silu(xz[t][E + e]);
      const std::vector<double> out = ref.linear(gated, "out");
      for (std::int64_t o = 0; o < d; ++o) {
        CAPTURE(t);
        CAPTURE(o);
        CHECK(got[t * d + o] == doctest::Approx(out[o]).epsilon(1e-4).scale(1e-3));
      }
    }
  }
}

TEST_CASE("a classifier on a frozen backbone: it reads the language model's token states, trains only its own weights") {
  models::LMConfig lm;
  lm.model = "transformer";
  lm.vocab_size = 13;
  lm.d_model = 6;
  lm.layers = 1;
  lm.heads = 2;
  lm.d_ff = 8;
  lm.block = 11;  // the pair's positions exactly
  lm.dropout = 0.0;
  lm.seed = 3;
  for (const char* head : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(head);
    NliConfig c = tiny(head);
    c.backbone_d = 6;
    auto model = models::make_nli_model(c);
    std::shared_ptr<models::LanguageModel> backbone = models::make_model(lm);
    models::testing::randomize_parameters(*model, 43);
    models::testing::randomize_parameters(*backbone, 44);
    const Batch b = make_batch({{3, 2}, {5, 4}}, 9, 1);
    CHECK_THROWS_WITH_AS(model->forward(b.ids, b.segments, b.mask), doctest::Contains("none is attached"), std::invalid_argument);
    model->attach_backbone(backbone);
    // Its inputs are the backbone's states through a projection: no token table of its own.
    const auto names = model->named_parameters();
    CHECK(std::none_of(names.begin(), names.end(), [](const auto& n) { return n.first.rfind("token_embedding", 0) == 0; }));
    CHECK(std::any_of(names.begin(), names.end(), [](const auto& n) { return n.first == "backbone_projection.weight"; }));
    // The classifier's gradients match central differences; the backbone gets none.
    const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{1, 2}, {2});
    auto loss = [&] { return ops::cross_entropy(model->forward(b.ids, b.segments, b.mask), labels); };
    models::testing::check_parameter_gradients(*model, loss, 3e-3f);
    for (const auto& [name, p] : backbone->named_parameters()) {
      CAPTURE(name);
      CHECK_FALSE(p.grad().defined());
    }
    // Still blind to padding (the backbone is causal and the padding comes last) ...
    model->eval();
    const auto base = logits(*model, b);
    CHECK(logits(*model, make_batch({{3, 2}, {5, 4}}, 9, 2, 7)) == base);
    // ... and the backbone's weights are what it reads.
    {
      NoGradGuard no_grad;
      Tensor w = backbone->named_parameters().back().second;
      w.copy_(w * 1.5);
    }
    CHECK(logits(*model, b) != base);
  }
  // What does not fit is refused by name.
  NliConfig c = tiny("transformer");
  CHECK_THROWS_WITH_AS(models::make_nli_model(c)->attach_backbone(models::make_model(lm)), doctest::Contains("takes no backbone"),
                       std::invalid_argument);
  c.backbone_d = 8;
  CHECK_THROWS_WITH_AS(models::make_nli_model(c)->attach_backbone(models::make_model(lm)), doctest::Contains("6 wide"),
                       std::invalid_argument);
  c.backbone_d = 6;
  models::LMConfig short_lm = lm;
  short_lm.block = 10;
  CHECK_THROWS_WITH_AS(models::make_nli_model(c)->attach_backbone(models::make_model(short_lm)),
                       doctest::Contains("a pair of two sentences of --max-length 6 needs 11"), std::invalid_argument);
  models::LMConfig other_vocab = lm;
  other_vocab.vocab_size = 14;
  CHECK_THROWS_WITH_AS(models::make_nli_model(c)->attach_backbone(models::make_model(other_vocab)),
                       doctest::Contains("vocabulary has 14 entries"), std::invalid_argument);
}
