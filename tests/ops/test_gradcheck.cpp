// Float64 central-difference gradient checks for EVERY differentiable op of the registry,
// over several shapes each, including broadcasting, size-1 axes and non-contiguous inputs.
// The coverage test at the bottom fails when an op of ops/registry.def has no case here.
#include <set>

#include "op_harness.h"

using namespace wedge;
using wedge::testing::gradcheck;
using wedge::testing::input;

namespace {

struct OpCase {
  std::string op;  // registry name
  std::string label;
  std::function<void()> run;
};

Tensor ids_tensor(const std::vector<std::int32_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }

std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  auto add = [&](std::string op, std::string label, std::function<void()> run) {
    c.push_back({std::move(op), std::move(label), std::move(run)});
  };
  using V = std::vector<Tensor>;

  // ---- matmul / linear
  add("matmul", "2-D", [] { gradcheck("matmul 2-D", [](const V& x) { return ops::matmul(x[0], x[1]); }, {input({3, 4}, 1), input({4, 5}, 2)}); });
  add("matmul", "batched", [] { gradcheck("matmul batched", [](const V& x) { return ops::matmul(x[0], x[1]); }, {input({2, 3, 4}, 3), input({2, 4, 2}, 4)}); });
  add("matmul", "batched @ shared 2-D", [] { gradcheck("matmul shared b", [](const V& x) { return ops::matmul(x[0], x[1]); }, {input({2, 3, 4}, 5), input({4, 3}, 6)}); });
  add("matmul", "transposed views", [] { gradcheck("matmul transposed", [](const V& x) { return ops::matmul(x[0], x[1]); }, {input({3, 5}, 7, true), input({5, 2}, 8, true)}); });
  add("matmul", "size 1", [] { gradcheck("matmul 1x1", [](const V& x) { return ops::matmul(x[0], x[1]); }, {input({1, 1}, 9), input({1, 1}, 10)}); });
  add("matmul", "4-D heads", [] { gradcheck("matmul 4-D", [](const V& x) { return ops::matmul(x[0], ops::transpose(x[1], -1, -2)); }, {input({2, 2, 3, 4}, 11), input({2, 2, 3, 4}, 12)}); });
  add("linear", "bias", [] { gradcheck("linear", [](const V& x) { return ops::linear(x[0], x[1], x[2]); }, {input({4, 3}, 13), input({5, 3}, 14), input({5}, 15)}); });
  add("linear", "3-D input, no bias", [] { gradcheck("linear 3-D", [](const V& x) { return ops::linear(x[0], x[1]); }, {input({2, 3, 4}, 16), input({2, 4}, 17)}); });
  add("linear", "non-contiguous input", [] { gradcheck("linear strided", [](const V& x) { return ops::linear(x[0], x[1], x[2]); }, {input({3, 4}, 18, true), input({1, 4}, 19), input({1}, 20)}); });
  add("gate_mix", "gate, two inputs", [] { gradcheck("gate_mix", [](const V& x) { return ops::gate_mix(x[0], x[1], x[2]); }, {input({3, 5}, 41, false, 0.0, 3.0), input({3, 5}, 42), input({3, 5}, 43)}); });
  add("gate_mix", "non-contiguous gate", [] { gradcheck("gate_mix strided", [](const V& x) { return ops::gate_mix(x[0], x[1], x[2]); }, {input({4, 3}, 44, true), input({4, 3}, 45), input({4, 3}, 46)}); });
  add("linear_gelu", "bias", [] { gradcheck("linear_gelu", [](const V& x) { return ops::linear_gelu(x[0], x[1], x[2]); }, {input({4, 3}, 21), input({5, 3}, 22), input({5}, 23)}); });
  add("linear_gelu", "3-D input, no bias", [] { gradcheck("linear_gelu 3-D", [](const V& x) { return ops::linear_gelu(x[0], x[1]); }, {input({2, 3, 4}, 24), input({2, 4}, 25)}); });
  add("linear_gelu", "non-contiguous input, wide output", [] { gradcheck("linear_gelu strided", [](const V& x) { return ops::linear_gelu(x[0], x[1], x[2]); }, {input({3, 4}, 26, true), input({37, 4}, 27), input({37}, 28)}); });

  // ---- broadcasting binary
  for (const char* op : {"add", "sub", "mul", "div"}) {
    const std::string name = op;
    auto f = [name](const V& x) {
      const Tensor b = name == "div" ? ops::add_scalar(ops::mul(x[1], x[1]), 0.5) : x[1];  // keep b away from 0
      if (name == "add") return ops::add(x[0], b);
      if (name == "sub") return ops::sub(x[0], b);
      if (name == "mul") return ops::mul(x[0], b);
      return ops::div(x[0], b);
    };
    add(op, "same shape", [=] { gradcheck(name + " same", f, {input({2, 3}, 21), input({2, 3}, 22)}); });
    add(op, "row broadcast", [=] { gradcheck(name + " (2,3)x(3)", f, {input({2, 3}, 23), input({3}, 24)}); });
    add(op, "both broadcast", [=] { gradcheck(name + " (2,1,4)x(3,1)", f, {input({2, 1, 4}, 25), input({3, 1}, 26)}); });
    add(op, "scalar", [=] { gradcheck(name + " scalar", f, {input({3, 2}, 27), input({}, 28)}); });
    add(op, "non-contiguous", [=] { gradcheck(name + " strided", f, {input({3, 4}, 29, true), input({3, 4}, 30)}); });
  }

  // ---- unary
  struct U { const char* op; std::function<Tensor(const Tensor&)> f; double lo; };
  const std::vector<U> unary = {
      {"add_scalar", [](const Tensor& x) { return ops::add_scalar(x, 1.5); }, 0},
      {"mul_scalar", [](const Tensor& x) { return ops::mul_scalar(x, -2.5); }, 0},
      {"pow_scalar", [](const Tensor& x) { return ops::pow_scalar(x, 2.7); }, 3},  // positive inputs
      {"neg", [](const Tensor& x) { return ops::neg(x); }, 0},
      {"abs", [](const Tensor& x) { return ops::abs(x); }, 3},  // away from the kink
      {"exp", [](const Tensor& x) { return ops::exp(x); }, 0},
      {"log", [](const Tensor& x) { return ops::log(x); }, 3},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, 3},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, 0},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, 0},
      {"relu", [](const Tensor& x) { return ops::relu(x); }, 3},
      {"gelu", [](const Tensor& x) { return ops::gelu(x); }, 0},
      {"silu", [](const Tensor& x) { return ops::silu(x); }, 0},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); }, 0},
  };
  for (const U& u : unary) {
    add(u.op, "(7)", [=] { gradcheck(std::string(u.op) + " (7)", [=](const V& x) { return u.f(x[0]); }, {input({7}, 31, false, u.lo)}); });
    add(u.op, "strided (3,5)", [=] { gradcheck(std::string(u.op) + " strided", [=](const V& x) { return u.f(x[0]); }, {input({3, 5}, 32, true, u.lo)}); });
  }
  // relu on both sides of 0 (values kept away from the kink)
  add("relu", "signed", [] {
    Tensor x = Tensor::from_vector<double>({-2.0, -0.5, 0.7, 1.9, -1.1, 0.3}, {2, 3});
    x.set_requires_grad(true);
    gradcheck("relu signed", [](const V& v) { return ops::relu(v[0]); }, {x});
  });

  // ---- reductions
  add("sum", "all", [] { gradcheck("sum all", [](const V& x) { return ops::sum(x[0]); }, {input({3, 4}, 40)}); });
  add("sum", "dims keepdim", [] { gradcheck("sum dims", [](const V& x) { return ops::sum(x[0], {0, 2}, true); }, {input({2, 3, 4}, 41)}); });
  add("sum", "strided", [] { gradcheck("sum strided", [](const V& x) { return ops::sum(x[0], {-1}); }, {input({3, 5}, 42, true)}); });
  add("mean", "dims", [] { gradcheck("mean dims", [](const V& x) { return ops::mean(x[0], {1}); }, {input({2, 3, 4}, 43)}); });
  add("mean", "all", [] { gradcheck("mean all", [](const V& x) { return ops::mean(x[0]); }, {input({1, 5}, 44)}); });
  add("max", "dim", [] { gradcheck("max dim 1", [](const V& x) { return ops::max(x[0], 1); }, {input({3, 4}, 45)}); });
  add("max", "keepdim strided", [] { gradcheck("max strided", [](const V& x) { return ops::max(x[0], 0, true); }, {input({4, 3}, 46, true)}); });

  // ---- layout
  add("reshape", "", [] { gradcheck("reshape", [](const V& x) { return ops::mul(ops::reshape(x[0], {4, -1}), ops::reshape(x[0], {4, 3})); }, {input({2, 6}, 50)}); });
  add("reshape", "of a strided view", [] { gradcheck("reshape strided", [](const V& x) { return ops::reshape(x[0], {-1}); }, {input({3, 4}, 51, true)}); });
  add("permute", "", [] { gradcheck("permute", [](const V& x) { return ops::mul(ops::permute(x[0], {2, 0, 1}), ops::permute(x[0], {2, 0, 1})); }, {input({2, 3, 4}, 52)}); });
  add("narrow", "", [] { gradcheck("narrow", [](const V& x) { return ops::exp(ops::narrow(x[0], 1, 1, 2)); }, {input({3, 4}, 53)}); });
  add("unbind", "every slice used", [] { gradcheck("unbind", [](const V& x) { const auto s = ops::unbind(x[0], 1); return ops::stack({ops::exp(s[2]), s[0] * s[1], s[0]}, 0); }, {input({2, 3, 4}, 61)}); });
  add("unbind", "some slices unused, strided input", [] { gradcheck("unbind partial", [](const V& x) { return ops::tanh(ops::unbind(x[0], 0)[1]); }, {input({4, 3}, 62, true)}); });
  add("expand", "", [] { gradcheck("expand", [](const V& x) { return ops::mul(ops::expand(x[0], {2, 3, 4}), x[1]); }, {input({3, 1}, 54), input({2, 3, 4}, 55)}); });
  add("contiguous", "", [] { gradcheck("contiguous", [](const V& x) { return ops::exp(ops::contiguous(x[0])); }, {input({3, 4}, 56, true)}); });
  add("cat", "", [] { gradcheck("cat", [](const V& x) { return ops::exp(ops::cat({x[0], x[1], x[0]}, 1)); }, {input({2, 3}, 57), input({2, 1}, 58)}); });
  add("stack", "", [] { gradcheck("stack", [](const V& x) { return ops::tanh(ops::stack({x[0], x[1]}, 0)); }, {input({2, 3}, 59), input({2, 3}, 60, true)}); });

  // ---- nn ops
  add("embedding", "repeated ids", [] {
    const Tensor ids = ids_tensor({0, 2, 2, 1, 0, 3}, {2, 3});
    gradcheck("embedding", [ids](const V& x) { return ops::embedding(x[0], ids); }, {input({4, 5}, 61)});
  });
  add("softmax", "last", [] { gradcheck("softmax -1", [](const V& x) { return ops::softmax(x[0], -1); }, {input({3, 5}, 62)}); });
  add("softmax", "dim 0 strided", [] { gradcheck("softmax 0", [](const V& x) { return ops::softmax(x[0], 0); }, {input({4, 3}, 63, true)}); });
  add("softmax", "size 1", [] { gradcheck("softmax n=1", [](const V& x) { return ops::softmax(x[0], 1); }, {input({3, 1}, 64)}); });
  add("log_softmax", "last", [] { gradcheck("log_softmax", [](const V& x) { return ops::log_softmax(x[0], -1); }, {input({3, 7}, 65)}); });
  add("log_softmax", "middle", [] { gradcheck("log_softmax mid", [](const V& x) { return ops::log_softmax(x[0], 1); }, {input({2, 4, 3}, 66)}); });
  add("cross_entropy", "with ignore", [] {
    const Tensor t = ids_tensor({2, -100, 0, 4}, {4});
    gradcheck("cross_entropy", [t](const V& x) { return ops::cross_entropy(x[0], t); }, {input({4, 5}, 67)});
  });
  add("cross_entropy", "3-D logits", [] {
    const Tensor t = ids_tensor({1, 0, 2, 2, 1, 0}, {2, 3});
    gradcheck("cross_entropy 3-D", [t](const V& x) { return ops::cross_entropy(x[0], t); }, {input({2, 3, 3}, 68)});
  });
  add("linear_cross_entropy", "blocks of 2 rows over 5, with ignore", [] {
    const Tensor t = ids_tensor({2, -100, 0, 6, 3}, {5});
    gradcheck("linear_cross_entropy blocks", [t](const V& x) { return ops::linear_cross_entropy(x[0], x[1], t, -100, 2); },
              {input({5, 4}, 80), input({7, 4}, 81)});
  });
  add("linear_cross_entropy", "3-D strided input, one block", [] {
    const Tensor t = ids_tensor({1, 0, 4, 2, 2, 3}, {2, 3});
    gradcheck("linear_cross_entropy 3-D", [t](const V& x) { return ops::linear_cross_entropy(ops::transpose(x[0], 0, 1), x[1], t); },
              {input({3, 2, 3}, 82), input({5, 3}, 83, true)});
  });
  add("linear_cross_entropy", "every row ignored", [] {
    const Tensor t = ids_tensor({-100, -100, -100}, {3});
    gradcheck("linear_cross_entropy ignored", [t](const V& x) { return ops::linear_cross_entropy(x[0], x[1], t, -100, 2); },
              {input({3, 2}, 84), input({4, 2}, 85)});
  });
  add("mse_loss", "both inputs", [] { gradcheck("mse_loss", [](const V& x) { return ops::mse_loss(x[0], x[1]); }, {input({3, 4}, 78), input({3, 4}, 79)}); });
  add("mse_loss", "strided pred, constant target", [] {
    const Tensor t = Tensor::randn({4, 3}, 77, 0, 1, DType::F64);
    gradcheck("mse_loss strided", [t](const V& x) { return ops::mse_loss(x[0], t); }, {input({4, 3}, 76, true)});
  });
  add("layer_norm", "affine", [] { gradcheck("layer_norm", [](const V& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-5); }, {input({3, 6}, 69), input({6}, 70, false, 1.0), input({6}, 71)}); });
  add("layer_norm", "no affine, strided", [] { gradcheck("layer_norm plain", [](const V& x) { return ops::layer_norm(x[0], Tensor(), Tensor(), 1e-5); }, {input({4, 3}, 72, true)}); });
  add("layer_norm", "D = 1", [] { gradcheck("layer_norm D=1", [](const V& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-5); }, {input({3, 1}, 73), input({1}, 74), input({1}, 75)}); });
  add("dropout", "p = 0.3 fixed mask", [] { gradcheck("dropout", [](const V& x) { return ops::dropout(x[0], 0.3, true, 77, 5); }, {input({4, 6}, 76)}); });
  add("residual_layer_norm", "affine, p = 0.3, both outputs", [] { gradcheck("residual_layer_norm", [](const V& x) { const auto r = ops::residual_layer_norm(x[0], x[1], x[2], x[3], 0.3, 77, 5); return ops::add(r.out, ops::tanh(r.sum)); }, {input({3, 7}, 78), input({3, 7}, 79), input({7}, 80, false, 1.0), input({7}, 81)}); });
  add("residual_layer_norm", "no affine, strided, only out", [] { gradcheck("residual_layer_norm out", [](const V& x) { return ops::residual_layer_norm(x[0], x[1], Tensor(), Tensor(), 0.0, 1, 0).out; }, {input({2, 3, 4}, 82), input({2, 3, 4}, 83, true)}); });
  add("residual_layer_norm", "only the sum reached, D = 1", [] { gradcheck("residual_layer_norm sum", [](const V& x) { return ops::residual_layer_norm(x[0], x[1], x[2], x[3], 0.5, 9, 3).sum; }, {input({5, 1}, 84), input({5, 1}, 85), input({1}, 86), input({1}, 87)}); });
  add("attention", "causal", [] {
    gradcheck("attention causal", [](const V& x) { return ops::attention(x[0], x[1], x[2], true); },
              {input({1, 2, 5, 3}, 80), input({1, 2, 5, 3}, 81), input({1, 2, 5, 3}, 82)});
  });
  add("attention", "full, L = 1", [] {
    gradcheck("attention L=1", [](const V& x) { return ops::attention(x[0], x[1], x[2], false); },
              {input({2, 1, 1, 4}, 83), input({2, 1, 1, 4}, 84), input({2, 1, 1, 4}, 85)});
  });
  add("attention", "full, non-contiguous", [] {
    gradcheck("attention strided", [](const V& x) { return ops::attention(x[0], x[1], x[2], false); },
              {input({1, 1, 4, 4}, 86, true), input({1, 1, 4, 4}, 87), input({1, 1, 4, 4}, 88, true)});
  });
  add("plucker_pairs", "r=4, offsets beyond L", [] {
    gradcheck("plucker_pairs", [](const V& x) { return ops::plucker_pairs(x[0], {1, 2, 4}); }, {input({2, 3, 4}, 90)});
  });
  add("plucker_pairs", "r=5", [] {
    gradcheck("plucker_pairs r5", [](const V& x) { return ops::plucker_pairs(x[0], {1, 3}); }, {input({1, 5, 5}, 91)});
  });
  add("plucker_mean", "r=4", [] {
    gradcheck("plucker_mean", [](const V& x) { return ops::plucker_mean(x[0], {1, 2, 4}); }, {input({2, 6, 4}, 92)});
  });
  add("plucker_mean", "r=3, L=1", [] {
    gradcheck("plucker_mean L1", [](const V& x) { return ops::plucker_mean(x[0], {1}); }, {input({2, 1, 3}, 93)});
  });
  // selective_scan: every input, h0 and the gate z included, on segments that do not divide
  // L, segments of one token, N = 1, a segment longer than L, and without the optional inputs;
  // the step sums read beside y, and alone; the states after each segment beside y (and
  // with the step sums), and alone.
  enum class Sums { none, with_y, alone };
  struct Scan {
    std::int64_t batch, L, D, N, P;
    bool optional;  // Dskip, delta_bias and h0 given
    const char* label;
    bool gated = false;  // the output gate z given
    Sums sums = Sums::none;
    Sums last = Sums::none;  // h_last: none, beside y (and the step sums), alone
  };
  for (const Scan& s : {Scan{2, 7, 3, 2, 3, true, "L 7, P 3"}, Scan{1, 4, 2, 3, 1, true, "P = 1"},
                       Scan{2, 5, 2, 1, 2, true, "N = 1"}, Scan{1, 3, 2, 2, 8, true, "P > L"},
                       Scan{1, 5, 3, 2, 2, false, "no Dskip, delta_bias, h0"},
                       Scan{2, 7, 3, 2, 3, true, "gated, L 7, P 3", true}, Scan{1, 4, 2, 3, 1, true, "gated, P = 1", true},
                       Scan{2, 7, 3, 2, 3, true, "step sums and y, L 7, P 3", false, Sums::with_y},
                       Scan{2, 5, 2, 2, 8, false, "step sums alone, P > L", false, Sums::alone},
                       Scan{1, 4, 2, 3, 1, true, "step sums and y, gated, P = 1", true, Sums::with_y},
                       Scan{2, 7, 3, 2, 3, true, "h_last and y, gated, L 7, P 3", true, Sums::none, Sums::with_y},
                       Scan{1, 5, 2, 3, 2, true, "h_last, step sums and y, L 5, P 2", false, Sums::with_y, Sums::with_y},
                       Scan{2, 5, 2, 2, 8, false, "h_last alone, P > L", false, Sums::none, Sums::alone}}) {
    add("selective_scan", s.label, [s] {
      const std::int64_t S = (s.L + s.P - 1) / s.P;
      std::vector<Tensor> in = {input({s.batch, s.L, s.D}, 100), input({s.batch, s.L, s.D}, 101),
                                input({s.D, s.N}, 102, false, 0.0, 0.5), input({s.batch, s.L, s.N}, 103),
                                input({s.batch, s.L, s.N}, 104)};
      if (s.optional) {
        in.push_back(input({s.D}, 105));
        in.push_back(input({s.D}, 106));
        in.push_back(input({s.batch, S, s.D, s.N}, 107));
        if (s.gated) in.push_back(input({s.batch, s.L, s.D}, 108));
      }
      gradcheck(std::string("selective_scan ") + s.label,
                [s](const V& x) {
                  const bool o = x.size() > 5;
                  Tensor sums, last;
                  const Tensor y = ops::selective_scan(x[0], x[1], x[2], x[3], x[4], o ? x[5] : Tensor(),
                                                       o ? x[6] : Tensor(), o ? x[7] : Tensor(), s.P,
                                                       x.size() > 8 ? x[8] : Tensor(), s.last == Sums::none ? nullptr : &last,
                                                       s.sums == Sums::none ? nullptr : &sums);
                  if (s.sums == Sums::alone) return sums;
                  if (s.last == Sums::alone) return last;
                  std::vector<Tensor> parts = {ops::reshape(y, {-1})};
                  if (s.sums == Sums::with_y) parts.push_back(ops::reshape(sums, {-1}));
                  if (s.last == Sums::with_y) parts.push_back(ops::reshape(last, {-1}));
                  return parts.size() == 1 ? y : ops::cat(parts, 0);
                },
                in);
    });
  }
  return c;
}

}  // namespace

TEST_CASE("gradcheck: every differentiable op in float64 against central differences") {
  for (const OpCase& oc : cases()) {
    SUBCASE((oc.op + " " + oc.label).c_str()) { oc.run(); }
  }
}

TEST_CASE("gradcheck covers every differentiable op of the registry") {
  std::set<std::string> covered;
  for (const OpCase& oc : cases()) covered.insert(oc.op);
  for (const auto& op : ops::registry()) {
    if (!op.differentiable) continue;
    INFO("op " << op.name);
    CHECK_MESSAGE(covered.count(op.name) == 1, "op '" << op.name << "' has no gradient check");
  }
}
