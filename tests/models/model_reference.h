// A plain double-precision re-implementation of TransformerLM and GrassmannLM, written
// straight from PAPERS.md with loops (no ops, no tensors), used as the oracle for the
// models' forward passes. It reads the model's parameters by name.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "models/lm.h"

namespace wedge::models::testing {

using Matrix = std::vector<std::vector<double>>;  // rows = positions

// Parameter values on the host, by dotted name.
inline std::map<std::string, std::vector<double>> host_parameters(const LanguageModel& model) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::vector<float> v = p.to_vector<float>();
    out[name] = std::vector<double>(v.begin(), v.end());
  }
  return out;
}

// Overwrites every parameter with Normal(mean, std) values (gammas around 1), so that every
// part of the model visibly shapes the output — at the default 0.02 init a wrong gate or
// a missing bias could hide below the float tolerance.
inline void randomize_parameters(LanguageModel& model, std::uint64_t seed, double std = 0.3) {
  NoGradGuard no_grad;
  std::uint64_t k = seed;
  for (auto& [name, p] : model.named_parameters()) {
    const bool is_gamma = name.size() >= 5 && name.substr(name.size() - 5) == "gamma";
    p.copy_(Tensor::randn(p.shape(), ++k * 7919, is_gamma ? 1.0 : 0.0, std));
  }
}

class ReferenceLM {
 public:
  ReferenceLM(const LMConfig& c, std::map<std::string, std::vector<double>> params)
      : c_(c), p_(std::move(params)) {}

  // logits (L, V) for one sequence of ids.
  Matrix logits(const std::vector<std::int32_t>& ids) const {
    const std::int64_t L = static_cast<std::int64_t>(ids.size()), d = c_.d_model;
    const auto& E = at("token_embedding.weight");
    const auto& P = at("position_embedding.weight");
    Matrix h(L, std::vector<double>(d));
    for (std::int64_t t = 0; t < L; ++t)
      for (std::int64_t i = 0; i < d; ++i) h[t][i] = E[ids[t] * d + i] + P[t * d + i];
    for (std::int64_t layer = 0; layer < c_.layers; ++layer) {
      const std::string pre = "blocks." + std::to_string(layer) + ".";
      h = c_.model == "transformer" ? attention_sublayer(pre, h)
                                    : grassmann_sublayer(pre, c_.offsets_for_layer(layer), h);
      Matrix f = linear(gelu(linear(h, pre + "ffn.w1")), pre + "ffn.w2");
      h = layer_norm(add(h, f), pre + "norm2");
    }
    Matrix out(L, std::vector<double>(c_.vocab_size));
    for (std::int64_t t = 0; t < L; ++t)
      for (std::int64_t v = 0; v < c_.vocab_size; ++v) {
        double s = 0;
        for (std::int64_t i = 0; i < d; ++i) s += E[v * d + i] * h[t][i];
        out[t][v] = s;
      }
    return out;
  }

 private:
  const std::vector<double>& at(const std::string& name) const { return p_.at(name); }

  Matrix linear(const Matrix& x, const std::string& module) const {
    const auto& W = at(module + ".weight");
    const auto& b = at(module + ".bias");
    const std::size_t out = b.size(), in = x[0].size();
    Matrix y(x.size(), std::vector<double>(out));
    for (std::size_t t = 0; t < x.size(); ++t)
      for (std::size_t o = 0; o < out; ++o) {
        double s = b[o];
        for (std::size_t i = 0; i < in; ++i) s += W[o * in + i] * x[t][i];
        y[t][o] = s;
      }
    return y;
  }
  static Matrix add(const Matrix& a, const Matrix& b) {
    Matrix y = a;
    for (std::size_t t = 0; t < a.size(); ++t)
      for (std::size_t i = 0; i < a[t].size(); ++i) y[t][i] += b[t][i];
    return y;
  }
  static Matrix gelu(Matrix x) {
    for (auto& row : x)
      for (double& v : row) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    return x;
  }
  Matrix layer_norm(Matrix x, const std::string& module) const {
    const auto& g = at(module + ".gamma");
    const auto& b = at(module + ".beta");
    for (auto& row : x) {
      double mean = 0, var = 0;
      for (double v : row) mean += v;
      mean /= double(row.size());
      for (double v : row) var += (v - mean) * (v - mean);
      var /= double(row.size());
      for (std::size_t i = 0; i < row.size(); ++i)
        row[i] = (row[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
    }
    return x;
  }

  // h = LN(h + W_O concat_heads(softmax(q k^T / sqrt(dh), causal) v) + b_O)
  Matrix attention_sublayer(const std::string& pre, const Matrix& h) const {
    const std::int64_t L = std::int64_t(h.size()), d = c_.d_model, H = c_.heads, dh = d / H;
    const Matrix qkv = linear(h, pre + "attention.qkv");
    Matrix merged(L, std::vector<double>(d, 0.0));
    for (std::int64_t head = 0; head < H; ++head)
      for (std::int64_t t = 0; t < L; ++t) {
        std::vector<double> score(t + 1);
        double top = -1e300;
        for (std::int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (std::int64_t i = 0; i < dh; ++i)
            dot += qkv[t][head * dh + i] * qkv[s][d + head * dh + i];
          score[s] = dot / std::sqrt(double(dh));
          top = std::max(top, score[s]);
        }
        double z = 0;
        for (double& sc : score) z += (sc = std::exp(sc - top));
        for (std::int64_t s = 0; s <= t; ++s)
          for (std::int64_t i = 0; i < dh; ++i)
            merged[t][head * dh + i] += score[s] / z * qkv[s][2 * d + head * dh + i];
      }
    return layer_norm(add(h, linear(merged, pre + "attention.out")), pre + "norm1");
  }

  // The paper's order of operations: project EACH offset's normalised Plücker vector
  // with W_plü (+ b_plü), then average over the valid offsets; g = 0 with no valid offset.
  Matrix grassmann_sublayer(const std::string& pre, const std::vector<std::int32_t>& offsets,
                            const Matrix& h) const {
    const std::int64_t L = std::int64_t(h.size()), d = c_.d_model, r = c_.rank;
    const Matrix z = linear(h, pre + "mixing.reduce");
    Matrix g(L, std::vector<double>(d, 0.0));
    for (std::int64_t t = 0; t < L; ++t) {
      Matrix projected;
      for (std::int32_t delta : offsets) {
        const std::int64_t partner = c_.leaky ? t + delta : t - delta;
        if (partner < 0 || partner >= L) continue;
        std::vector<double> p;
        double norm = 0;
        for (std::int64_t i = 0; i < r; ++i)
          for (std::int64_t j = i + 1; j < r; ++j) {
            p.push_back(z[t][i] * z[partner][j] - z[t][j] * z[partner][i]);
            norm += p.back() * p.back();
          }
        norm = std::max(std::sqrt(norm), 1e-8);
        for (double& v : p) v /= norm;
        projected.push_back(linear(Matrix{p}, pre + "mixing.plucker")[0]);
      }
      if (projected.empty()) continue;  // g_t = 0
      for (const auto& row : projected)
        for (std::int64_t i = 0; i < d; ++i) g[t][i] += row[i] / double(projected.size());
      if (c_.mix_out_proj) g[t] = linear(Matrix{g[t]}, pre + "mixing.out")[0];
    }
    Matrix hg(L);
    for (std::int64_t t = 0; t < L; ++t) {
      hg[t] = h[t];
      hg[t].insert(hg[t].end(), g[t].begin(), g[t].end());
    }
    const Matrix gate = linear(hg, pre + "gate");
    Matrix mixed(L, std::vector<double>(d));
    for (std::int64_t t = 0; t < L; ++t)
      for (std::int64_t i = 0; i < d; ++i) {
        const double alpha = 1.0 / (1.0 + std::exp(-gate[t][i]));
        mixed[t][i] = alpha * h[t][i] + (1.0 - alpha) * g[t][i];
      }
    return layer_norm(mixed, pre + "norm1");
  }

  LMConfig c_;
  std::map<std::string, std::vector<double>> p_;
};

}  // namespace wedge::models::testing
