// Streams (models/lm.h): the logits a stream returns for each new position equal the full
// forward's at that position, for every model, every way of cutting the tokens into
// chunks, prompts of one token, patch boundaries at any offset — and a leaky model, whose
// forward looks ahead, is caught by the same comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/rng.h"
#include "ops/ops.h"

#include "models/lm.h"

using namespace wedge;
using models::LMConfig;

namespace {

LMConfig small(const std::string& model) {
  LMConfig c;
  c.model = model;
  c.vocab_size = 29;
  c.layers = 2;
  c.d_model = 16;
  c.d_ff = 24;
  c.heads = 2;
  c.block = 40;
  c.dropout = 0.1;  // eval() must switch it off
  c.rank = 5;
  c.windows = {1, 2, 5};
  c.patch = 4;
  c.cover_depth = 3;
  c.types = 3;
  c.state_size = 4;
  c.section_dim = 8;
  c.expert_d_ff = 12;
  c.seed = 7;
  return c;
}

// Random token ids (B, L).
std::vector<std::int32_t> random_ids(std::int64_t B, std::int64_t L, std::int64_t V, std::uint64_t seed) {
  Generator g(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * L));
  for (auto& id : ids) id = static_cast<std::int32_t>(g.uniform() * double(V)) % static_cast<std::int32_t>(V);
  return ids;
}

// Columns [from, from + n) of ids (B, L).
Tensor columns(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t L, std::int64_t from, std::int64_t n) {
  std::vector<std::int32_t> out;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = from; t < from + n; ++t) out.push_back(ids[static_cast<std::size_t>(b * L + t)]);
  return Tensor::from_vector(out, {B, n});
}

// The stream's logits for ids (B, L) fed in chunks of the given sizes (summing to L),
// (B, L, V), and the largest difference from the full forward relative to its largest logit.
double stream_vs_forward(models::LanguageModel& model, const std::vector<std::int32_t>& ids, std::int64_t B,
                         std::int64_t L, const std::vector<std::int64_t>& chunks) {
  NoGradGuard no_grad;
  model.eval();
  const Device device = model.parameters().front().device();
  const Tensor full = model.forward(Tensor::from_vector(ids, {B, L}).to(device));
  auto stream = model.open_stream(B);
  std::vector<Tensor> parts;
  std::int64_t at = 0;
  for (const std::int64_t n : chunks) {
    parts.push_back(stream->feed(columns(ids, B, L, at, n)));
    at += n;
  }
  REQUIRE(at == L);
  CHECK(stream->position() == L);
  const Tensor streamed = ops::cat(parts, 1);
  REQUIRE(streamed.shape() == full.shape());
  const std::vector<double> a = full.to(DType::F64).to_vector<double>();
  const std::vector<double> b = streamed.to(DType::F64).to_vector<double>();
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::abs(a[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  REQUIRE(largest > 0);
  return diff / largest;
}

// Chunkings of L tokens: all at once, one at a time, a one-token prompt then the rest at
// once, and uneven pieces that start and end at every offset within a patch of 4.
std::vector<std::vector<std::int64_t>> chunkings(std::int64_t L) {
  std::vector<std::vector<std::int64_t>> out = {{L}, std::vector<std::int64_t>(static_cast<std::size_t>(L), 1)};
  if (L > 1) out.push_back({1, L - 1});
  std::vector<std::int64_t> uneven;
  for (std::int64_t at = 0, n = 3; at < L; at += n, n = n % 7 + 2) uneven.push_back(std::min(n, L - at));
  out.push_back(uneven);
  return out;
}

constexpr double kTolerance = 1e-5;

void check_exact(const LMConfig& c, std::int64_t B, std::int64_t L, Device device = Device::cpu()) {
  auto model = models::make_model(c);
  model->to(device);
  const std::vector<std::int32_t> ids = random_ids(B, L, c.vocab_size, 99);
  for (const auto& chunks : chunkings(L)) {
    CAPTURE(chunks.size());
    const double rel = stream_vs_forward(*model, ids, B, L, chunks);
    CHECK(rel <= kTolerance);
  }
}

}  // namespace

TEST_CASE("TransformerLM streams equal the full forward: every chunking, 1, 2 and 4 heads, batch 1 and 3") {
  for (std::int64_t heads : {1, 2, 4})
    for (std::int64_t B : {1, 3}) {
      LMConfig c = small("transformer");
      c.heads = heads;
      CAPTURE(heads);
      CAPTURE(B);
      check_exact(c, B, 23);
    }
  check_exact(small("transformer"), 2, 40);  // up to the block
  check_exact(small("transformer"), 1, 1);   // a one-token sequence
}

TEST_CASE("GrassmannLM streams equal the full forward: offset sets, one offset per layer, no output projection") {
  LMConfig windows = small("grassmann");
  LMConfig schedule = small("grassmann");
  schedule.window_schedule = {3, 1};
  LMConfig bare = small("grassmann");
  bare.mix_out_proj = false;
  LMConfig far = small("grassmann");
  far.windows = {2, 16};  // the sequence is shorter than the farthest offset at first
  for (const LMConfig& c : {windows, schedule, bare, far}) {
    CAPTURE(c.window_schedule.size());
    CAPTURE(c.mix_out_proj);
    check_exact(c, 2, 37);
  }
  check_exact(windows, 1, 1);
}

TEST_CASE("SheafStateLM streams equal the full forward across patch boundaries, L not a multiple of P") {
  for (std::int64_t depth : {1, 3}) {
    LMConfig c = small("sheaf");
    c.cover_depth = depth;
    CAPTURE(depth);
    check_exact(c, 2, 38);  // 9 whole patches of 4 and 2 tokens of a tenth
    check_exact(c, 1, 40);
  }
  LMConfig wide = small("sheaf");
  wide.patch = 7;
  check_exact(wide, 2, 30);
  check_exact(small("sheaf"), 1, 1);
}

TEST_CASE("a leaky model's stream differs from its forward: the comparison catches the leak") {
  // A stream cannot see tokens that have not arrived: fed one token at a time, a model
  // whose forward looks ahead gives other logits.
  for (const char* name : {"grassmann", "sheaf"}) {
    LMConfig c = small(name);
    c.leaky = true;
    CAPTURE(name);
    auto model = models::make_model(c);
    const std::int64_t L = 21;
    const std::vector<std::int32_t> ids = random_ids(2, L, c.vocab_size, 5);
    CHECK(stream_vs_forward(*model, ids, 2, L, std::vector<std::int64_t>(L, 1)) > 100 * kTolerance);
  }
}

TEST_CASE("a stream keeps constant state for GrassmannLM and SheafStateLM, and refuses what it cannot do") {
  for (const char* name : {"grassmann", "sheaf"}) {
    CAPTURE(name);
    LMConfig c = small(name);
    c.block = 64;
    auto model = models::make_model(c);
    model->eval();
    auto stream = model->open_stream(2);
    const std::vector<std::int32_t> ids = random_ids(2, 64, c.vocab_size, 3);
    stream->feed(columns(ids, 2, 64, 0, 20));
    const std::int64_t early = stream->state_bytes();
    CHECK(early > 0);
    stream->feed(columns(ids, 2, 64, 20, 40));
    CHECK(stream->state_bytes() == early);  // 20 and 60 tokens in: the same memory
    const Tensor last = stream->feed(columns(ids, 2, 64, 60, 3), true);
    CHECK(last.shape() == Shape{2, 1, c.vocab_size});
    CHECK(stream->position() == 63);
    CHECK(stream->capacity() == 64);
    CHECK_THROWS_WITH_AS(stream->feed(columns(ids, 2, 64, 0, 2)), doctest::Contains("--block 64"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(stream->feed(Tensor::from_vector(std::vector<std::int32_t>{1, 2}, {1, 2})),
                         doctest::Contains("batch 2"), std::invalid_argument);
  }
  LMConfig c = small("transformer");
  auto model = models::make_model(c);
  auto stream = model->open_stream(1);
  model->train();
  CHECK_THROWS_WITH_AS(stream->feed(Tensor::from_vector(std::vector<std::int32_t>{1}, {1, 1})),
                       doctest::Contains("eval"), std::invalid_argument);
  CHECK_THROWS_AS(model->open_stream(0), std::invalid_argument);
  // The Transformer's cache is allocated for the whole block: layers x 2 x (B, H, block, dh).
  CHECK(stream->state_bytes() == c.layers * 2 * c.block * c.d_model * 4);
}

TEST_CASE("--positions none: a stream runs past --block and equals the forward of a model with a longer block") {
  // Without a position table the parameters do not depend on --block: a model with block
  // 12 and one with block 90 from the same seed are the same function, so the first's
  // stream over 90 tokens must give the second's forward, however it is cut.
  for (const char* name : {"grassmann", "sheaf"}) {
    CAPTURE(name);
    LMConfig c = small(name);
    c.positions = "none";
    c.block = 12;
    LMConfig longer = c;
    longer.block = 90;
    auto model = models::make_model(c);
    auto reference = models::make_model(longer);
    REQUIRE(model->parameters().size() == reference->parameters().size());
    const std::int64_t B = 2, L = 90;
    const std::vector<std::int32_t> ids = random_ids(B, L, c.vocab_size, 11);
    NoGradGuard no_grad;
    model->eval();
    reference->eval();
    const std::vector<double> full = reference->forward(Tensor::from_vector(ids, {B, L})).to(DType::F64).to_vector<double>();
    for (const auto& chunks : {std::vector<std::int64_t>{L}, std::vector<std::int64_t>{5, 30, 1, 54},
                               std::vector<std::int64_t>(static_cast<std::size_t>(L), 1)}) {
      auto stream = model->open_stream(B);
      CHECK(stream->capacity() == models::Stream::kUnbounded);
      std::vector<Tensor> parts;
      std::int64_t at = 0;
      std::int64_t state = -1;
      for (const std::int64_t n : chunks) {
        parts.push_back(stream->feed(columns(ids, B, L, at, n)));
        at += n;
        if (at >= 32) {  // past the farthest offset and two covers of patches: constant from here
          if (state < 0) state = stream->state_bytes();
          CHECK(stream->state_bytes() == state);
        }
      }
      const std::vector<double> streamed = ops::cat(parts, 1).to(DType::F64).to_vector<double>();
      REQUIRE(streamed.size() == full.size());
      double largest = 0, diff = 0;
      for (std::size_t i = 0; i < full.size(); ++i) {
        largest = std::max(largest, std::abs(full[i]));
        diff = std::max(diff, std::abs(full[i] - streamed[i]));
      }
      CHECK(diff <= kTolerance * largest);
    }
    // The forward itself still takes at most --block tokens.
    CHECK_THROWS_WITH_AS(model->forward(Tensor::from_vector(ids, {B, L})), doctest::Contains("--block 12"),
                         std::invalid_argument);
  }
  LMConfig t = small("transformer");
  t.positions = "none";
  CHECK_THROWS_WITH_AS(models::make_model(t), doctest::Contains("--positions none"), std::invalid_argument);
  t.positions = "rotary";
  CHECK_THROWS_WITH_AS(models::make_model(t), doctest::Contains("--positions 'rotary'"), std::invalid_argument);
}

TEST_CASE("CUDA: streams equal the full forward on the GPU for every model") {
  if (!has_allocator(DeviceKind::CUDA)) {
    MESSAGE("no CUDA device: the GPU stream checks skipped");
    return;
  }
  for (const char* name : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(name);
    check_exact(small(name), 2, 38, Device::cuda());
    check_exact(small(name), 1, 1, Device::cuda());
  }
}
