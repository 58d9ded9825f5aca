// The selective scan (kernels/ref/selective_scan.cpp has the math and the derivation of
// the backward), AVX-512: the 16 lanes of a vector are 16 channels d, so one token's
// update of one state index n is a handful of vector instructions with B_t[n] and C_t[n]
// broadcast, and y_t = sum_n C_t[n] h[n] needs no horizontal sum. Threads split the
// (batch, segment) pairs, which share nothing in the forward.
//
// The backward keeps no per-token state: each (batch, segment) recomputes its P states
// from h0 into a per-thread buffer of (P + 1) x N x 16 floats per channel block. Sums that
// cross pairs (gA_log, gDskip, gdelta_bias: over batch and tokens) are not combined by
// threads: each pair writes its partial sums (the size of h0) and a second pass adds them
// up in pair order, column by column, so the result does not depend on the thread count.
// Sums over channels within a pair (gB, gC) stay in that pair's thread.
#include <cfloat>
#include <cmath>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

constexpr i64 kLanes = 16;

// The channel blocks of 16, with A = -exp(A_log) transposed so that the 16 channels of
// one state index n are contiguous: At[(block * N + n) * 16 + lane]. A is kept finite
// (at -FLT_MAX at worst), so a step size of 0 gives exp(0 * A) = 1, never 0 * inf.
struct ChannelBlocks {
  i64 D, N, count;
  const float* At;
  __mmask16 mask(i64 block) const { return first_lanes(D - block * kLanes); }
  __m512 A(i64 block, i64 n) const { return _mm512_load_ps(At + (block * N + n) * kLanes); }
};

ChannelBlocks transpose_A(const float* A_log, i64 D, i64 N, ScratchBuffer& buffer) {
  const i64 count = (D + kLanes - 1) / kLanes;
  float* At = buffer.get(static_cast<std::size_t>(count * N * kLanes));
  for (i64 block = 0; block < count; ++block)
    for (i64 n = 0; n < N; ++n)
      for (i64 lane = 0; lane < kLanes; ++lane) {
        const i64 d = block * kLanes + lane;
        At[(block * N + n) * kLanes + lane] = d < D ? std::max(-std::exp(A_log[d * N + n]), -FLT_MAX) : 0.0f;
      }
  return {D, N, count, At};
}

// Moves the N states of 16 channels between the (..., D, N) layout of h0 / h_last and the
// lane layout h[n * 16 + lane].
void gather_states(const float* src, i64 D, i64 N, i64 d0, float* h) {
  for (i64 n = 0; n < N; ++n)
    for (i64 lane = 0; lane < kLanes; ++lane) h[n * kLanes + lane] = d0 + lane < D ? src[(d0 + lane) * N + n] : 0.0f;
}
void scatter_states(const float* h, i64 D, i64 N, i64 d0, float* dst) {
  for (i64 n = 0; n < N; ++n)
    for (i64 lane = 0; lane < kLanes && d0 + lane < D; ++lane) dst[(d0 + lane) * N + n] = h[n * kLanes + lane];
}

__m512 load_or_zero(const float* p, i64 offset, __mmask16 mask) {
  return p != nullptr ? _mm512_maskz_loadu_ps(mask, p + offset) : _mm512_setzero_ps();
}

// The inputs of one token for one channel block.
struct Token {
  __m512 pre, dt, u;  // delta + delta_bias, softplus of it, u
};
Token load_token(const ScanArgs<float>& a, i64 i, i64 d0, __mmask16 mask) {
  Token k;
  k.pre = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, a.delta + i), load_or_zero(a.delta_bias, d0, mask));
  k.dt = softplus_ps(k.pre);
  k.u = _mm512_maskz_loadu_ps(mask, a.u + i);
  return k;
}

// Runs the segment [t0, t1) of batch b for one channel block from the states h (lane
// layout), updating h. When y is not null it writes y; when states is not null it stores
// the state after every token: states[(k + 1) * N * 16 ...] for token t0 + k.
void scan_block(const ScanArgs<float>& a, const ChannelBlocks& cb, i64 block, i64 b, i64 t0, i64 t1, float* h,
                float* y, float* states) {
  const i64 N = a.N, d0 = block * kLanes;
  const __mmask16 mask = cb.mask(block);
  const __m512 Dskip = load_or_zero(a.Dskip, d0, mask);
  for (i64 t = t0; t < t1; ++t) {
    const i64 i = (b * a.L + t) * a.D + d0;
    const Token k = load_token(a, i, d0, mask);
    const __m512 dtu = _mm512_mul_ps(k.dt, k.u);
    const float* Bt = a.B + (b * a.L + t) * N;
    const float* Ct = a.C + (b * a.L + t) * N;
    __m512 out = _mm512_mul_ps(Dskip, k.u);
    for (i64 n = 0; n < N; ++n) {
      const __m512 decay = exp_ps(_mm512_mul_ps(k.dt, cb.A(block, n)));
      const __m512 hn = _mm512_fmadd_ps(decay, _mm512_load_ps(h + n * kLanes), _mm512_mul_ps(dtu, _mm512_set1_ps(Bt[n])));
      _mm512_store_ps(h + n * kLanes, hn);
      out = _mm512_fmadd_ps(_mm512_set1_ps(Ct[n]), hn, out);
    }
    if (y != nullptr) _mm512_mask_storeu_ps(y + i, mask, out);
    if (states != nullptr)
      for (i64 n = 0; n < N; ++n)
        _mm512_store_ps(states + ((t - t0 + 1) * N + n) * kLanes, _mm512_load_ps(h + n * kLanes));
  }
}

i64 pair_grain(const ScanArgs<float>& a) {
  const i64 work = std::max<i64>(1, a.P * a.D * a.N);
  return std::max<i64>(1, (1 << 15) / work);
}

}  // namespace

void selective_scan_forward(const ScanArgs<float>& a, float* y, float* h_last) {
  const i64 S = a.segments(), N = a.N;
  thread_local ScratchBuffer a_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, a.D, N, a_buffer);
  parallel_for(0, a.batch * S, pair_grain(a), [&](i64 p0, i64 p1) {
    thread_local ScratchBuffer h_buffer;
    float* h = h_buffer.get(static_cast<std::size_t>(N * kLanes));
    for (i64 pair = p0; pair < p1; ++pair) {
      const i64 b = pair / S, s = pair % S, t0 = s * a.P, t1 = std::min(a.L, t0 + a.P);
      for (i64 block = 0; block < cb.count; ++block) {
        const i64 d0 = block * kLanes;
        if (a.h0 != nullptr) gather_states(a.h0 + pair * a.D * N, a.D, N, d0, h);
        else std::fill(h, h + N * kLanes, 0.0f);
        scan_block(a, cb, block, b, t0, t1, h, y, nullptr);
        if (h_last != nullptr) scatter_states(h, a.D, N, d0, h_last + pair * a.D * N);
      }
    }
  });
}

void selective_scan_backward(const ScanArgs<float>& a, const float* gy, const float* g_h_last,
                             const ScanGrads<float>& g) {
  const i64 S = a.segments(), N = a.N, D = a.D, pairs = a.batch * S;
  thread_local ScratchBuffer a_buffer, partial_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, D, N, a_buffer);
  // Per pair: gA_log (D x N), then gDskip (D), then gdelta_bias (D).
  const i64 partial_size = D * N + 2 * D;
  float* partials = partial_buffer.get(static_cast<std::size_t>((pairs + 1) * partial_size));

  parallel_for(0, pairs, pair_grain(a), [&](i64 p0, i64 p1) {
    thread_local ScratchBuffer buffer;
    const i64 P = a.P;
    // states (P + 1) x N x 16 | gh N x 16 | gA N x 16 | gB, gC lane sums P x N x 16 each
    float* states = buffer.get(static_cast<std::size_t>(((P + 1) * N + 2 * N + 2 * P * N) * kLanes));
    float* gh = states + (P + 1) * N * kLanes;
    float* gA = gh + N * kLanes;
    float* gB_lanes = gA + N * kLanes;
    float* gC_lanes = gB_lanes + P * N * kLanes;
    for (i64 pair = p0; pair < p1; ++pair) {
      const i64 b = pair / S, s = pair % S, t0 = s * P, t1 = std::min(a.L, t0 + P);
      float* partial = partials + pair * partial_size;
      std::fill(gB_lanes, gB_lanes + 2 * P * N * kLanes, 0.0f);
      for (i64 block = 0; block < cb.count; ++block) {
        const i64 d0 = block * kLanes;
        const __mmask16 mask = cb.mask(block);
        if (a.h0 != nullptr) gather_states(a.h0 + pair * D * N, D, N, d0, states);
        else std::fill(states, states + N * kLanes, 0.0f);
        float* h = gh;  // the forward's running state; gh is set only after it
        std::copy(states, states + N * kLanes, h);
        scan_block(a, cb, block, b, t0, t1, h, nullptr, states);
        if (g_h_last != nullptr) gather_states(g_h_last + pair * D * N, D, N, d0, gh);
        else std::fill(gh, gh + N * kLanes, 0.0f);
        std::fill(gA, gA + N * kLanes, 0.0f);
        const __m512 Dskip = load_or_zero(a.Dskip, d0, mask);
        __m512 gDskip = _mm512_setzero_ps(), gbias = _mm512_setzero_ps();
        for (i64 t = t1 - 1; t >= t0; --t) {
          const i64 i = (b * a.L + t) * D + d0, k = t - t0;
          const Token tok = load_token(a, i, d0, mask);
          const __m512 gyt = _mm512_maskz_loadu_ps(mask, gy + i);
          const __m512 dtu = _mm512_mul_ps(tok.dt, tok.u);
          gDskip = _mm512_fmadd_ps(gyt, tok.u, gDskip);
          __m512 gu = _mm512_mul_ps(gyt, Dskip), gdt = _mm512_setzero_ps();
          const float* Bt = a.B + (b * a.L + t) * N;
          const float* Ct = a.C + (b * a.L + t) * N;
          for (i64 n = 0; n < N; ++n) {
            const __m512 Bn = _mm512_set1_ps(Bt[n]), An = cb.A(block, n);
            const __m512 decay = exp_ps(_mm512_mul_ps(tok.dt, An));
            const __m512 h_after = _mm512_load_ps(states + ((k + 1) * N + n) * kLanes);
            const __m512 h_before = _mm512_load_ps(states + (k * N + n) * kLanes);
            float* gC_slot = gC_lanes + (k * N + n) * kLanes;
            _mm512_store_ps(gC_slot, _mm512_fmadd_ps(gyt, h_after, _mm512_load_ps(gC_slot)));
            __m512 ghn = _mm512_fmadd_ps(_mm512_set1_ps(Ct[n]), gyt, _mm512_load_ps(gh + n * kLanes));
            const __m512 g_decay = _mm512_mul_ps(_mm512_mul_ps(ghn, h_before), decay);
            gdt = _mm512_fmadd_ps(g_decay, An, _mm512_fmadd_ps(_mm512_mul_ps(ghn, Bn), tok.u, gdt));
            float* gA_slot = gA + n * kLanes;
            _mm512_store_ps(gA_slot, _mm512_fmadd_ps(g_decay, tok.dt, _mm512_load_ps(gA_slot)));
            float* gB_slot = gB_lanes + (k * N + n) * kLanes;
            _mm512_store_ps(gB_slot, _mm512_fmadd_ps(ghn, dtu, _mm512_load_ps(gB_slot)));
            gu = _mm512_fmadd_ps(_mm512_mul_ps(ghn, tok.dt), Bn, gu);
            _mm512_store_ps(gh + n * kLanes, _mm512_mul_ps(ghn, decay));
          }
          const __m512 gdelta = _mm512_mul_ps(gdt, sigmoid_ps(tok.pre));
          gbias = _mm512_add_ps(gbias, gdelta);
          if (g.delta != nullptr) _mm512_mask_storeu_ps(g.delta + i, mask, gdelta);
          if (g.u != nullptr) _mm512_mask_storeu_ps(g.u + i, mask, gu);
        }
        if (g.h0 != nullptr) scatter_states(gh, D, N, d0, g.h0 + pair * D * N);
        for (i64 n = 0; n < N; ++n)  // gA_log = gA * A, lane by lane
          _mm512_store_ps(gA + n * kLanes, _mm512_mul_ps(_mm512_load_ps(gA + n * kLanes), cb.A(block, n)));
        scatter_states(gA, D, N, d0, partial);
        _mm512_mask_storeu_ps(partial + D * N + d0, mask, gDskip);
        _mm512_mask_storeu_ps(partial + D * N + D + d0, mask, gbias);
      }
      // gB_t[n], gC_t[n]: the sum over channels, from the lane sums of every block.
      for (i64 t = t0; t < t1; ++t)
        for (i64 n = 0; n < N; ++n) {
          const i64 slot = ((t - t0) * N + n) * kLanes, j = (b * a.L + t) * N + n;
          if (g.B != nullptr) g.B[j] = hsum(_mm512_load_ps(gB_lanes + slot));
          if (g.C != nullptr) g.C[j] = hsum(_mm512_load_ps(gC_lanes + slot));
        }
    }
  });

  // The sums over pairs, column by column in pair order, into the row after the partials.
  float* totals = partials + pairs * partial_size;
  parallel_for(0, partial_size, 256, [&](i64 c0, i64 c1) {
    for (i64 c = c0; c < c1; c += kLanes) {
      const __mmask16 mask = first_lanes(c1 - c);
      __m512 sum = _mm512_setzero_ps();
      for (i64 pair = 0; pair < pairs; ++pair)
        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, partials + pair * partial_size + c));
      _mm512_mask_storeu_ps(totals + c, mask, sum);
    }
  });
  auto copy_out = [&](float* dst, i64 offset, i64 count) {
    if (dst != nullptr) std::copy(totals + offset, totals + offset + count, dst);
  };
  copy_out(g.A_log, 0, D * N);
  copy_out(g.Dskip, D * N, D);
  copy_out(g.delta_bias, D * N + D, D);
}

}  // namespace wedge::kernels::cpu::avx512
