// A plain double-precision re-implementation of the three models, written straight from
// their equations (models/README.md) with loops (no ops, no tensors), used as the oracle
// for the models' forward passes. It reads the model's parameters by name.
//
// SheafStateLM is written in its literal form: every patch is scanned token by token from
// its glued state h0_p = (W_hx c_p) ⊗ (W_hb c_p), and the summary s_p is read off that
// scan's output at the patch's last token — none of the model's fused kernels (the gated
// scan, the scan's state returned to read that output) is used here.
#pragma once

#include <algorithm>
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
inline std::map<std::string, std::vector<double>> host_parameters(const Module& model) {
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
inline void randomize_parameters(Module& model, std::uint64_t seed, double std = 0.3) {
  NoGradGuard no_grad;
  std::uint64_t k = seed;
  for (auto& [name, p] : model.named_parameters()) {
    const bool is_gamma = name.size() >= 5 && name.substr(name.size() - 5) == "gamma";
    p.copy_(Tensor::randn(p.shape(), ++k * 7919, is_gamma ? 1.0 : 0.0, std));
  }
}

// The building blocks, in double precision over parameters read by name.
class ReferenceOps {
 public:
  explicit ReferenceOps(std::map<std::string, std::vector<double>> params) : p_(std::move(params)) {}

  const std::vector<double>& at(const std::string& name) const { return p_.at(name); }

  // x W^T (+ b when the module has a bias).
  Matrix linear(const Matrix& x, const std::string& module) const {
    const auto& W = at(module + ".weight");
    const auto bias = p_.find(module + ".bias");
    const std::size_t in = x[0].size(), out = W.size() / in;
    Matrix y(x.size(), std::vector<double>(out));
    for (std::size_t t = 0; t < x.size(); ++t)
      for (std::size_t o = 0; o < out; ++o) {
        double s = bias != p_.end() ? bias->second[o] : 0.0;
        for (std::size_t i = 0; i < in; ++i) s += W[o * in + i] * x[t][i];
        y[t][o] = s;
      }
    return y;
  }
  std::vector<double> linear(const std::vector<double>& x, const std::string& module) const {
    return linear(Matrix{x}, module)[0];
  }
  static std::vector<double> softmax(std::vector<double> x) {
    double top = -1e300, z = 0;
    for (double v : x) top = std::max(top, v);
    for (double& v : x) z += (v = std::exp(v - top));
    for (double& v : x) v /= z;
    return x;
  }
  static double silu(double v) { return v / (1.0 + std::exp(-v)); }
  static double softplus(double v) { return v > 30 ? v : std::log1p(std::exp(v)); }
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
  // LayerNorm over each row; module "" normalises without the affine part.
  Matrix layer_norm(Matrix x, const std::string& module) const {
    for (auto& row : x) {
      double mean = 0, var = 0;
      for (double v : row) mean += v;
      mean /= double(row.size());
      for (double v : row) var += (v - mean) * (v - mean);
      var /= double(row.size());
      for (std::size_t i = 0; i < row.size(); ++i) {
        row[i] = (row[i] - mean) / std::sqrt(var + 1e-5);
        if (!module.empty()) row[i] = row[i] * at(module + ".gamma")[i] + at(module + ".beta")[i];
      }
    }
    return x;
  }


  // Σ_k π_k R[map, k] s with π = softmax(W_type s + b), R the bank pre + "restriction"
  // viewed as (maps, K, d_s, d_s): the restriction of s by map `map`.
  std::vector<double> restrict_with(const std::string& pre, const std::vector<double>& s, std::int64_t map) const {
    const std::vector<double> pi = softmax(linear(s, pre + "type"));
    const std::int64_t K = static_cast<std::int64_t>(pi.size()), ds = static_cast<std::int64_t>(s.size());
    const auto& R = at(pre + "restriction");
    std::vector<double> r(static_cast<std::size_t>(ds), 0.0);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t i = 0; i < ds; ++i) {
        double v = 0;
        for (std::int64_t m = 0; m < ds; ++m) v += R[static_cast<std::size_t>(((map * K + k) * ds + i) * ds + m)] * s[m];
        r[i] += pi[k] * v;
      }
    return r;
  }

  // The scan of tokens [t0, t1) from the state h (E x N), token by token, with A_log, D of
  // module `pre`; returns y.
  Matrix scan(const std::string& pre, const Matrix& u, const Matrix& dt, const Matrix& B, const Matrix& C,
              std::int64_t t0, std::int64_t t1, Matrix h) const {
    const std::int64_t E = std::int64_t(u[0].size()), N = std::int64_t(at(pre + "A_log").size()) / E;
    const auto& A_log = at(pre + "A_log");
    const auto& Dskip = at(pre + "D");
    Matrix y;
    for (std::int64_t t = t0; t < t1; ++t) {
      std::vector<double> out(static_cast<std::size_t>(E));
      for (std::int64_t e = 0; e < E; ++e) {
        out[e] = Dskip[e] * u[t][e];
        for (std::int64_t n = 0; n < N; ++n) {
          const double A = -std::exp(A_log[e * N + n]);
          h[e][n] = std::exp(dt[t][e] * A) * h[e][n] + dt[t][e] * u[t][e] * B[t][n];
          out[e] += C[t][n] * h[e][n];
        }
      }
      y.push_back(out);
    }
    return y;
  }
 protected:
  std::map<std::string, std::vector<double>> p_;
};

class ReferenceLM : public ReferenceOps {
 public:
  ReferenceLM(const LMConfig& c, std::map<std::string, std::vector<double>> params)
      : ReferenceOps(std::move(params)), c_(c) {}

  // logits (L, V) for one sequence of ids.
  Matrix logits(const std::vector<std::int32_t>& ids) const {
    const std::int64_t L = static_cast<std::int64_t>(ids.size()), d = c_.d_model;
    const auto& E = at("token_embedding.weight");
    const auto& P = at("position_embedding.weight");
    Matrix h(L, std::vector<double>(d));
    for (std::int64_t t = 0; t < L; ++t)
      for (std::int64_t i = 0; i < d; ++i) h[t][i] = E[ids[t] * d + i] + P[t * d + i];
    if (c_.model == "sheaf") return head(sheaf_blocks(h));
    for (std::int64_t layer = 0; layer < c_.layers; ++layer) {
      const std::string pre = "blocks." + std::to_string(layer) + ".";
      h = c_.model == "transformer" ? attention_sublayer(pre, h)
                                    : grassmann_sublayer(pre, c_.offsets_for_layer(layer), h);
      Matrix f = linear(gelu(linear(h, pre + "ffn.w1")), pre + "ffn.w2");
      h = layer_norm(add(h, f), pre + "norm2");
    }
    return head(h);
  }

 private:
  // The tied head: logits = E h.
  Matrix head(const Matrix& h) const {
    const auto& E = at("token_embedding.weight");
    const std::int64_t d = c_.d_model;
    Matrix out(h.size(), std::vector<double>(c_.vocab_size));
    for (std::size_t t = 0; t < h.size(); ++t)
      for (std::int64_t v = 0; v < c_.vocab_size; ++v) {
        double s = 0;
        for (std::int64_t i = 0; i < d; ++i) s += E[v * d + i] * h[t][i];
        out[t][v] = s;
      }
    return out;
  }

  // ---- SheafStateLM ----------------------------------------------------------------

  // Σ_k π_k R[j, k] s: the restriction of s to distance j.
  std::vector<double> restrict_to(const std::string& pre, const std::vector<double>& s, std::int64_t j) const {
    return restrict_with(pre, s, j);
  }

  Matrix sheaf_blocks(Matrix h) const {
    const std::int64_t L = std::int64_t(h.size()), d = c_.d_model, E = 2 * d, N = c_.state_size, P = c_.patch;
    const std::int64_t patches = (L + P - 1) / P, ds = c_.section_dim;
    for (std::int64_t layer = 0; layer < c_.layers; ++layer) {
      const std::string block = "blocks." + std::to_string(layer) + ".", pre = block + "mixer.";
      const Matrix x = layer_norm(h, block + "norm1");
      const Matrix xz = linear(x, pre + "in");
      Matrix u(L, std::vector<double>(E)), dt(L, std::vector<double>(E));
      for (std::int64_t t = 0; t < L; ++t)
        for (std::int64_t e = 0; e < E; ++e) u[t][e] = silu(xz[t][e]);
      const Matrix delta = linear(linear(u, pre + "dt_down"), pre + "dt_up");
      for (std::int64_t t = 0; t < L; ++t)
        for (std::int64_t e = 0; e < E; ++e) dt[t][e] = softplus(delta[t][e] + at(pre + "dt_bias")[e]);
      const Matrix B = linear(u, pre + "B"), C = linear(u, pre + "C");

      // The chain: patch by patch, the section from the covering patches' summaries, the
      // patch scanned from the state it sets, the patch's summary from that scan.
      Matrix y, sections, summaries;
      for (std::int64_t p = 0; p < patches; ++p) {
        const std::int64_t t0 = p * P, t1 = std::min(L, t0 + P);
        Matrix cover;
        for (std::int64_t j = 0; j < c_.cover_depth; ++j) {
          const std::int64_t q = p - (std::int64_t{1} << j);
          if (q < 0) break;
          cover.push_back(restrict_to(pre, summaries[q], j));
        }
        if (c_.leaky) {  // the test-only leak: the patch's own zero-state summary joins its cover
          const Matrix own = scan(pre, u, dt, B, C, t0, t1, Matrix(E, std::vector<double>(N, 0.0)));
          cover.push_back(restrict_to(pre, layer_norm(Matrix{linear(own.back(), pre + "summary")}, "")[0], 0));
        }
        std::vector<double> c(static_cast<std::size_t>(ds), 0.0);
        if (!cover.empty()) {
          const std::vector<double> query = linear(p > 0 ? summaries[p - 1] : cover.back(), pre + "query");
          std::vector<double> scores;
          for (const auto& r : cover) {
            double dot = 0;
            for (std::int64_t i = 0; i < ds; ++i) dot += r[i] * query[i];
            scores.push_back(dot / std::sqrt(double(ds)));
          }
          const std::vector<double> a = softmax(scores);
          for (std::size_t m = 0; m < cover.size(); ++m)
            for (std::int64_t i = 0; i < ds; ++i) c[i] += a[m] * cover[m][i];
        }
        const std::vector<double> hx = linear(c, pre + "state_x"), hb = linear(c, pre + "state_b");
        Matrix h0(E, std::vector<double>(N));
        for (std::int64_t e = 0; e < E; ++e)
          for (std::int64_t n = 0; n < N; ++n) h0[e][n] = hx[e] * hb[n];
        const Matrix y_patch = scan(pre, u, dt, B, C, t0, t1, h0);
        y.insert(y.end(), y_patch.begin(), y_patch.end());
        summaries.push_back(layer_norm(Matrix{linear(y_patch.back(), pre + "summary")}, "")[0]);
        sections.push_back(c);
      }
      Matrix gated(L, std::vector<double>(E));
      for (std::int64_t t = 0; t < L; ++t)
        for (std::int64_t e = 0; e < E; ++e) gated[t][e] = y[t][e] * silu(xz[t][E + e]);
      h = add(h, linear(gated, pre + "out"));

      // Each patch's tokens through the expert its section chose, scaled by its probability.
      const Matrix x2 = layer_norm(h, block + "norm2");
      for (std::int64_t p = 0; p < patches; ++p) {
        const std::vector<double> probs = softmax(linear(sections[p], block + "router"));
        const std::size_t k = std::size_t(std::max_element(probs.begin(), probs.end()) - probs.begin());
        const std::string expert = block + "experts." + std::to_string(k) + ".";
        for (std::int64_t t = p * P; t < std::min(L, (p + 1) * P); ++t) {
          const std::vector<double> f = linear(gelu(Matrix{linear(x2[t], expert + "w1")})[0], expert + "w2");
          for (std::int64_t i = 0; i < d; ++i) h[t][i] += probs[k] * f[i];
        }
      }
    }
    return layer_norm(h, "final_norm");
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
};

}  // namespace wedge::models::testing
