// The selective scan (S6) of SheafStateLM's local dynamics, segment by segment, and its
// backward. The recurrence and the layouts are in engine/kernel_table.h (ScanArgs):
//   dt = softplus(delta + delta_bias),  h = exp(dt A) h + dt B u,  y = C . h + Dskip u,
// with A = -exp(A_log) < 0 and dt > 0, so exp(dt A) lies in (0, 1]: the state decays, and
// the exponential cannot overflow. Each segment starts from its own h0; nothing crosses a
// segment boundary.
//
// The backward keeps no per-token state: for one (batch, segment, channel) it recomputes
// the segment's P states from h0 (P x N numbers), then walks the tokens backwards with the
// state gradient gh (the gradient of the loss with respect to h after token t):
//   gh += C_t gy_t                                   (y_t reads h_t)
//   gC_t += gy_t h_t,  gDskip += gy_t u_t,  gu_t = gy_t Dskip
//   h_t = a h_{t-1} + dt B_t u_t,  a = exp(dt A):
//     ga = gh h_{t-1};  gdt += ga a A + gh B_t u_t;  gA += ga a dt
//     gB_t += gh dt u_t;  gu_t += gh dt B_t;  gh = gh a   (now the gradient of h_{t-1})
//   gdelta_t = (gdt + g_step_sum) sigmoid(delta_t + delta_bias)  (softplus' = sigmoid;
//   g_step_sum: the gradient of the segment's summed step sizes), gdelta_bias += it
// and finally gh0 = gh, gA_log = gA A (dA/dA_log = A). With the output gate, the output is
// y_t = o_t silu(z_t) with o_t = C_t . h_t + Dskip u_t: the walk above runs on
// go_t = gy_t silu(z_t), and gz_t = gy_t o_t silu'(z_t), o_t rebuilt from the states.
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"
#include "kernels/ref/scalar_math.h"

namespace wedge::kernels::ref {

namespace {

// Index helpers for the layouts of ScanArgs: the inputs u, delta, z and B, C where their
// strides put them, everything else contiguous.
struct ScanIndex {
  i64 L, D, N, S, x_batch, x_token, bc_batch, bc_token;
  template <typename T>
  explicit ScanIndex(const ScanArgs<T>& given) {
    const ScanArgs<T> a = given.resolved();
    L = a.L, D = a.D, N = a.N, S = a.segments();
    x_batch = a.x_batch_stride, x_token = a.x_token_stride;
    bc_batch = a.bc_batch_stride, bc_token = a.bc_token_stride;
  }
  i64 input(i64 b, i64 t, i64 d) const { return b * x_batch + t * x_token + d; }         // u, delta, z
  i64 token(i64 b, i64 t, i64 d) const { return (b * L + t) * D + d; }                    // y, gy, gu, ...
  i64 state_input(i64 b, i64 t, i64 n) const { return b * bc_batch + t * bc_token + n; }  // B, C
  i64 state_grad(i64 b, i64 t, i64 n) const { return (b * L + t) * N + n; }               // gB, gC
  i64 state(i64 b, i64 s, i64 d, i64 n) const { return ((b * S + s) * D + d) * N + n; }
};

template <typename T>
acc_t step_size(const ScanArgs<T>& a, i64 index, i64 d) {
  return softplus(acc_t(a.delta[index]) + (a.delta_bias != nullptr ? acc_t(a.delta_bias[d]) : 0.0));
}

// exp(dt A) for dt >= 0, A <= 0: 1 when dt == 0 even if A is -inf (no 0 * inf).
inline acc_t decay(acc_t dt, acc_t A) { return dt == 0 ? 1.0 : std::exp(dt * A); }

}  // namespace

template <typename T>
void selective_scan_forward(const ScanArgs<T>& a, T* y, T* h_last, T* step_sums) {
  const ScanIndex ix(a);
  std::vector<acc_t> h(a.N), A(a.N);
  for (i64 b = 0; b < a.batch; ++b)
    for (i64 s = 0; s < ix.S; ++s)
      for (i64 d = 0; d < a.D; ++d) {
        for (i64 n = 0; n < a.N; ++n) {
          A[n] = -std::exp(acc_t(a.A_log[d * a.N + n]));
          h[n] = a.h0 != nullptr ? acc_t(a.h0[ix.state(b, s, d, n)]) : 0.0;
        }
        // course 18 begin: the selective scan (S6) forward, the reference kernel: decay the state, add the input, read it out, token by token
        for (i64 t = s * a.P; t < std::min(a.L, (s + 1) * a.P); ++t) {
          const i64 x = ix.input(b, t, d);
          const acc_t dt = step_size(a, x, d), u = acc_t(a.u[x]);
          acc_t out = a.Dskip != nullptr ? acc_t(a.Dskip[d]) * u : 0.0;
          for (i64 n = 0; n < a.N; ++n) {
            h[n] = decay(dt, A[n]) * h[n] + dt * acc_t(a.B[ix.state_input(b, t, n)]) * u;
            out += acc_t(a.C[ix.state_input(b, t, n)]) * h[n];
          }
          y[ix.token(b, t, d)] = T(a.z != nullptr ? out * silu(acc_t(a.z[x])) : out);
        }
        // course 18 end
        if (h_last != nullptr)
          for (i64 n = 0; n < a.N; ++n) h_last[ix.state(b, s, d, n)] = T(h[n]);
        if (step_sums != nullptr) {
          acc_t sum = 0.0;
          for (i64 t = s * a.P; t < std::min(a.L, (s + 1) * a.P); ++t) sum += step_size(a, ix.input(b, t, d), d);
          step_sums[(b * ix.S + s) * a.D + d] = T(sum);
        }
      }
}

template <typename T>
void selective_scan_backward(const ScanArgs<T>& a, const T* gy, const T* g_h_last, const T* g_step_sums,
                             const ScanGrads<T>& g) {
  const ScanIndex ix(a);
  // Sums over channels (gB, gC) and over batch and tokens (gA_log, gDskip, gdelta_bias)
  // are kept in double and rounded once at the end.
  std::vector<acc_t> gB(a.batch * a.L * a.N, 0.0), gC(gB.size(), 0.0), gA_log(a.D * a.N, 0.0),
      gDskip(a.D, 0.0), gbias(a.D, 0.0);
  std::vector<acc_t> A(a.N), gh(a.N), gA(a.N), states((a.P + 1) * a.N);
  for (i64 b = 0; b < a.batch; ++b)
    for (i64 s = 0; s < ix.S; ++s)
      for (i64 d = 0; d < a.D; ++d) {
        const i64 t0 = s * a.P, t1 = std::min(a.L, t0 + a.P);
        const acc_t g_step_sum = g_step_sums != nullptr ? acc_t(g_step_sums[(b * ix.S + s) * a.D + d]) : 0.0;
        // states[k] = h after k tokens of the segment (states[0] = h0).
        auto h = [&](i64 k, i64 n) -> acc_t& { return states[k * a.N + n]; };
        for (i64 n = 0; n < a.N; ++n) {
          A[n] = -std::exp(acc_t(a.A_log[d * a.N + n]));
          h(0, n) = a.h0 != nullptr ? acc_t(a.h0[ix.state(b, s, d, n)]) : 0.0;
          gh[n] = g_h_last != nullptr ? acc_t(g_h_last[ix.state(b, s, d, n)]) : 0.0;
          gA[n] = 0.0;
        }
        for (i64 t = t0; t < t1; ++t) {
          const i64 x = ix.input(b, t, d), k = t - t0;
          const acc_t dt = step_size(a, x, d), u = acc_t(a.u[x]);
          for (i64 n = 0; n < a.N; ++n)
            h(k + 1, n) = decay(dt, A[n]) * h(k, n) + dt * acc_t(a.B[ix.state_input(b, t, n)]) * u;
        }
        for (i64 t = t1 - 1; t >= t0; --t) {
          const i64 i = ix.token(b, t, d), x = ix.input(b, t, d), k = t - t0;
          const acc_t pre = acc_t(a.delta[x]) + (a.delta_bias != nullptr ? acc_t(a.delta_bias[d]) : 0.0);
          const acc_t dt = softplus(pre), u = acc_t(a.u[x]);
          const acc_t z = a.z != nullptr ? acc_t(a.z[x]) : 0.0;
          // gyt: the gradient of the ungated output o_t.
          const acc_t gyt = a.z != nullptr ? acc_t(gy[i]) * silu(z) : acc_t(gy[i]);
          if (a.z != nullptr && g.z != nullptr) {
            acc_t out = a.Dskip != nullptr ? acc_t(a.Dskip[d]) * u : 0.0;
            for (i64 n = 0; n < a.N; ++n) out += acc_t(a.C[ix.state_input(b, t, n)]) * h(k + 1, n);
            g.z[i] = T(acc_t(gy[i]) * out * silu_derivative(z));
          }
          gDskip[d] += gyt * u;
          acc_t gu = a.Dskip != nullptr ? gyt * acc_t(a.Dskip[d]) : 0.0, gdt = 0.0;
          for (i64 n = 0; n < a.N; ++n) {
            const i64 j = ix.state_grad(b, t, n), bc = ix.state_input(b, t, n);
            const acc_t Bn = acc_t(a.B[bc]), Cn = acc_t(a.C[bc]), decay_n = decay(dt, A[n]);
            gC[j] += gyt * h(k + 1, n);
            gh[n] += Cn * gyt;
            const acc_t g_decay = gh[n] * h(k, n);
            gdt += g_decay * decay_n * A[n] + gh[n] * Bn * u;
            gA[n] += g_decay * decay_n * dt;
            gB[j] += gh[n] * dt * u;
            gu += gh[n] * dt * Bn;
            gh[n] *= decay_n;
          }
          const acc_t gdelta = (gdt + g_step_sum) * sigmoid(pre);
          gbias[d] += gdelta;
          if (g.delta != nullptr) g.delta[i] = T(gdelta);
          if (g.u != nullptr) g.u[i] = T(gu);
        }
        for (i64 n = 0; n < a.N; ++n) {
          if (g.h0 != nullptr) g.h0[ix.state(b, s, d, n)] = T(gh[n]);
          gA_log[d * a.N + n] += gA[n] * A[n];
        }
      }
  auto store = [](T* out, const std::vector<acc_t>& sums) {
    if (out != nullptr)
      for (std::size_t i = 0; i < sums.size(); ++i) out[i] = T(sums[i]);
  };
  store(g.B, gB);
  store(g.C, gC);
  store(g.A_log, gA_log);
  store(g.Dskip, gDskip);
  store(g.delta_bias, gbias);
}

#define WEDGE_REF_INSTANTIATE(T)                                                             \
  template void selective_scan_forward<T>(const ScanArgs<T>&, T*, T*, T*);                   \
  template void selective_scan_backward<T>(const ScanArgs<T>&, const T*, const T*, const T*, \
                                           const ScanGrads<T>&);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
