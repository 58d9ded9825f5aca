// The selective scan (kernels/ref/selective_scan.cpp has the math and the derivation of
// the backward), AVX-512: the 16 lanes of a vector are 16 channels d, so one token's
// update of one state index n is a handful of vector instructions with B_t[n] and C_t[n]
// broadcast, and y_t = sum_n C_t[n] h[n] needs no horizontal sum. Threads split the
// (batch, segment) pairs, which share nothing in the forward.
//
// The output gate (z given): the forward multiplies each output vector by silu(z) before
// storing it; the backward turns gy into the gradient of the ungated output the same way
// and rebuilds that output (C . h + Dskip u, from the states it recomputes) for gz.
//
// Memory layout. A channel block reads one 64-byte line per token from each (B, L, D)
// tensor, and consecutive tokens are D floats apart: read in place, every such line is a
// fresh miss that the hardware prefetchers do not anticipate, and the scan waits on
// memory. So each pair first packs its segment's rows (read sequentially, one row after
// the other) into per-thread scratch laid out [block][token][16], runs every block from
// there, and unpacks its outputs the same way.
//
// The backward keeps no per-token state: each (batch, segment) recomputes its P states
// (and their decays exp(dt A), so the exponential is evaluated once) from h0 into a
// per-thread buffer of (2P + 1) x N x 16 floats per channel block. Sums that cross pairs
// (gA_log, gDskip, gdelta_bias: over batch and tokens) are not combined by threads: the
// pairs are cut into a fixed number of groups of consecutive pairs (a function of the
// shape only), each group sums its pairs in order into its own partial, and a second
// pass adds the partials in group order, so the result does not depend on the thread
// count. Sums over channels within a pair (gB, gC) stay in that pair's thread.
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

// The rows [t0, t1) of batch b of a (batch, L, D) tensor <-> the packed layout
// packed[(block * P + k) * 16 + lane] (k = t - t0; the lanes past D are zeros).
void pack_rows(const float* src, const ScanArgs<float>& a, const ChannelBlocks& cb, i64 b, i64 t0, i64 t1,
               float* packed) {
  for (i64 t = t0; t < t1; ++t) {
    const float* row = src + (b * a.L + t) * a.D;
    for (i64 block = 0; block < cb.count; ++block)
      _mm512_store_ps(packed + (block * a.P + t - t0) * kLanes,
                      _mm512_maskz_loadu_ps(cb.mask(block), row + block * kLanes));
  }
}
void unpack_rows(const float* packed, const ScanArgs<float>& a, const ChannelBlocks& cb, i64 b, i64 t0, i64 t1,
                 float* dst) {
  for (i64 t = t0; t < t1; ++t) {
    float* row = dst + (b * a.L + t) * a.D;
    for (i64 block = 0; block < cb.count; ++block)
      _mm512_mask_storeu_ps(row + block * kLanes, cb.mask(block),
                            _mm512_load_ps(packed + (block * a.P + t - t0) * kLanes));
  }
}

// One pair's packed segment: inputs u, delta and the gate z, and one output (y in the
// forward; the backward also packs gy and unpacks gu, gdelta and gz).
struct Packed {
  float *u, *delta, *z, *out;
  float *gy, *gu, *gdelta, *gz;
};
constexpr int kForwardBuffers = 4, kBackwardBuffers = 8;
Packed packed_buffers(ScratchBuffer& buffer, const ScanArgs<float>& a, const ChannelBlocks& cb, int count) {
  const i64 size = cb.count * a.P * kLanes;
  float* base = buffer.get(static_cast<std::size_t>(count * size));
  Packed p{};
  float** slots[] = {&p.u, &p.delta, &p.z, &p.out, &p.gy, &p.gu, &p.gdelta, &p.gz};
  for (int i = 0; i < count; ++i) *slots[i] = base + i * size;
  return p;
}

// The inputs of one token for one channel block.
struct Token {
  __m512 pre, dt, u;  // delta + delta_bias, softplus of it, u
};
Token load_token(const float* u, const float* delta, __m512 bias, i64 k) {
  Token tok;
  tok.pre = _mm512_add_ps(_mm512_load_ps(delta + k * kLanes), bias);
  tok.dt = softplus_ps(tok.pre);
  tok.u = _mm512_load_ps(u + k * kLanes);
  return tok;
}

// Runs `len` tokens of one channel block from the states h (lane layout), updating h.
// u, delta (and y, z) point at the block's packed rows; bias is the block's delta bias.
// When y is not null it writes y (times silu(z) when z is not null, the output gate); when
// states is not null it stores the state after every
// token, states[(k + 1) * N * 16 ...] for token k, and that token's decays exp(dt A) in
// decays[k * N * 16 ...], so the backward need not evaluate the exponential again.
void scan_block(const ScanArgs<float>& a, const float* A_block, __m512 bias, __m512 Dskip, i64 b, i64 t0, i64 len,
                const float* u, const float* delta, const float* z, float* h, float* y, float* states,
                float* decays) {
  const i64 N = a.N;
  for (i64 k = 0; k < len; ++k) {
    const Token tok = load_token(u, delta, bias, k);
    const __m512 dtu = _mm512_mul_ps(tok.dt, tok.u);
    const float* Bt = a.B + (b * a.L + t0 + k) * N;
    const float* Ct = a.C + (b * a.L + t0 + k) * N;
    __m512 out = _mm512_mul_ps(Dskip, tok.u);
    for (i64 n = 0; n < N; ++n) {
      const __m512 decay = exp_ps(_mm512_mul_ps(tok.dt, _mm512_load_ps(A_block + n * kLanes)));
      const __m512 hn = _mm512_fmadd_ps(decay, _mm512_load_ps(h + n * kLanes), _mm512_mul_ps(dtu, _mm512_set1_ps(Bt[n])));
      _mm512_store_ps(h + n * kLanes, hn);
      out = _mm512_fmadd_ps(_mm512_set1_ps(Ct[n]), hn, out);
      if (states != nullptr) {
        _mm512_store_ps(states + ((k + 1) * N + n) * kLanes, hn);
        _mm512_store_ps(decays + (k * N + n) * kLanes, decay);
      }
    }
    if (z != nullptr) out = _mm512_mul_ps(out, silu_ps(_mm512_load_ps(z + k * kLanes)));
    if (y != nullptr) _mm512_store_ps(y + k * kLanes, out);
  }
}

i64 pair_grain(const ScanArgs<float>& a) {
  const i64 work = std::max<i64>(1, a.P * a.D * a.N);
  return std::max<i64>(1, (1 << 15) / work);
}

// The backward's partial sums: at most this many groups of consecutive pairs.
constexpr i64 kMaxGroups = 32;

}  // namespace

void selective_scan_forward(const ScanArgs<float>& a, float* y, float* h_last) {
  const i64 S = a.segments(), N = a.N;
  thread_local ScratchBuffer a_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, a.D, N, a_buffer);
  parallel_for(0, a.batch * S, pair_grain(a), [&](i64 p0, i64 p1) {
    thread_local ScratchBuffer h_buffer, pack_buffer;
    float* h = h_buffer.get(static_cast<std::size_t>(N * kLanes));
    const Packed pk = packed_buffers(pack_buffer, a, cb, kForwardBuffers);
    for (i64 pair = p0; pair < p1; ++pair) {
      const i64 b = pair / S, s = pair % S, t0 = s * a.P, t1 = std::min(a.L, t0 + a.P);
      pack_rows(a.u, a, cb, b, t0, t1, pk.u);
      pack_rows(a.delta, a, cb, b, t0, t1, pk.delta);
      if (a.z != nullptr && y != nullptr) pack_rows(a.z, a, cb, b, t0, t1, pk.z);
      for (i64 block = 0; block < cb.count; ++block) {
        const i64 d0 = block * kLanes, at = block * a.P * kLanes;
        const __mmask16 mask = cb.mask(block);
        if (a.h0 != nullptr) gather_states(a.h0 + pair * a.D * N, a.D, N, d0, h);
        else std::fill(h, h + N * kLanes, 0.0f);
        scan_block(a, cb.At + block * N * kLanes, load_or_zero(a.delta_bias, d0, mask), load_or_zero(a.Dskip, d0, mask),
                   b, t0, t1 - t0, pk.u + at, pk.delta + at, a.z != nullptr && y != nullptr ? pk.z + at : nullptr, h,
                   y != nullptr ? pk.out + at : nullptr, nullptr, nullptr);
        if (h_last != nullptr) scatter_states(h, a.D, N, d0, h_last + pair * a.D * N);
      }
      if (y != nullptr) unpack_rows(pk.out, a, cb, b, t0, t1, y);
    }
  });
}

void selective_scan_backward(const ScanArgs<float>& a, const float* gy, const float* g_h_last,
                             const ScanGrads<float>& g) {
  const i64 S = a.segments(), N = a.N, D = a.D, P = a.P, pairs = a.batch * S;
  thread_local ScratchBuffer a_buffer, partial_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, D, N, a_buffer);
  // Per group, in lane layout: gA (count x N x 16), then gDskip and gdelta_bias (count x 16).
  const i64 group_size = (pairs + kMaxGroups - 1) / kMaxGroups, groups = (pairs + group_size - 1) / group_size;
  const i64 partial_size = cb.count * (N + 2) * kLanes;
  float* partials = partial_buffer.get(static_cast<std::size_t>((groups + 1) * partial_size));
  std::fill(partials, partials + groups * partial_size, 0.0f);

  parallel_for(0, groups, 1, [&](i64 g0, i64 g1) {
    thread_local ScratchBuffer buffer, pack_buffer;
    // states (P + 1) x N x 16 | decays P x N x 16 | gh N x 16 | gB, gC lane sums P x N x 16 each
    float* states = buffer.get(static_cast<std::size_t>(((P + 1) * N + P * N + N + 2 * P * N) * kLanes));
    float* decays = states + (P + 1) * N * kLanes;
    float* gh = decays + P * N * kLanes;
    float* gB_lanes = gh + N * kLanes;
    float* gC_lanes = gB_lanes + P * N * kLanes;
    const Packed pk = packed_buffers(pack_buffer, a, cb, kBackwardBuffers);
    const bool gated = a.z != nullptr;
    for (i64 group = g0; group < g1; ++group) {
      float* partial = partials + group * partial_size;
      for (i64 pair = group * group_size; pair < std::min(pairs, (group + 1) * group_size); ++pair) {
        const i64 b = pair / S, s = pair % S, t0 = s * P, t1 = std::min(a.L, t0 + P), len = t1 - t0;
        pack_rows(a.u, a, cb, b, t0, t1, pk.u);
        pack_rows(a.delta, a, cb, b, t0, t1, pk.delta);
        pack_rows(gy, a, cb, b, t0, t1, pk.gy);
        if (gated) pack_rows(a.z, a, cb, b, t0, t1, pk.z);
        std::fill(gB_lanes, gB_lanes + 2 * P * N * kLanes, 0.0f);
        for (i64 block = 0; block < cb.count; ++block) {
          const i64 d0 = block * kLanes, at = block * P * kLanes;
          const __mmask16 mask = cb.mask(block);
          const float* A_block = cb.At + block * N * kLanes;
          const __m512 bias = load_or_zero(a.delta_bias, d0, mask), Dskip = load_or_zero(a.Dskip, d0, mask);
          const float *u = pk.u + at, *delta = pk.delta + at, *gyb = pk.gy + at, *zb = pk.z + at;
          if (a.h0 != nullptr) gather_states(a.h0 + pair * D * N, D, N, d0, states);
          else std::fill(states, states + N * kLanes, 0.0f);
          float* h = gh;  // the forward's running state; gh is set only after it
          std::copy(states, states + N * kLanes, h);
          scan_block(a, A_block, bias, Dskip, b, t0, len, u, delta, nullptr, h, nullptr, states, decays);
          if (g_h_last != nullptr) gather_states(g_h_last + pair * D * N, D, N, d0, gh);
          else std::fill(gh, gh + N * kLanes, 0.0f);
          float* gA = partial + block * N * kLanes;
          __m512 gDskip = _mm512_setzero_ps(), gbias = _mm512_setzero_ps();
          for (i64 k = len - 1; k >= 0; --k) {
            const Token tok = load_token(u, delta, bias, k);
            // gyt: the gradient of the ungated output o = C . h + Dskip u (gy silu(z) when
            // gated); o itself is rebuilt below, for gz = gy o silu'(z).
            const __m512 gy_out = _mm512_load_ps(gyb + k * kLanes);
            const __m512 zk = gated ? _mm512_load_ps(zb + k * kLanes) : _mm512_setzero_ps();
            const __m512 gyt = gated ? _mm512_mul_ps(gy_out, silu_ps(zk)) : gy_out;
            __m512 ungated = _mm512_mul_ps(Dskip, tok.u);
            const __m512 dtu = _mm512_mul_ps(tok.dt, tok.u);
            gDskip = _mm512_fmadd_ps(gyt, tok.u, gDskip);
            // gu = gy Dskip + dt Σ_n gh_n B_n and gdt = u Σ_n gh_n B_n + Σ_n g_decay_n A_n:
            // two independent sums over n, so no chain of dependent FMAs runs through it.
            __m512 sum_gB = _mm512_setzero_ps(), sum_gA = _mm512_setzero_ps();
            const float* Bt = a.B + (b * a.L + t0 + k) * N;
            const float* Ct = a.C + (b * a.L + t0 + k) * N;
            const float* decay_k = decays + k * N * kLanes;
            const float* before_k = states + k * N * kLanes;
            const float* after_k = before_k + N * kLanes;
            float* gB_k = gB_lanes + k * N * kLanes;
            float* gC_k = gC_lanes + k * N * kLanes;
            for (i64 n = 0; n < N; ++n) {
              const i64 o = n * kLanes;
              const __m512 decay = _mm512_load_ps(decay_k + o), after = _mm512_load_ps(after_k + o);
              if (gated) ungated = _mm512_fmadd_ps(_mm512_set1_ps(Ct[n]), after, ungated);
              _mm512_store_ps(gC_k + o, _mm512_fmadd_ps(gyt, after, _mm512_load_ps(gC_k + o)));
              const __m512 ghn = _mm512_fmadd_ps(_mm512_set1_ps(Ct[n]), gyt, _mm512_load_ps(gh + o));
              const __m512 g_decay = _mm512_mul_ps(_mm512_mul_ps(ghn, _mm512_load_ps(before_k + o)), decay);
              sum_gA = _mm512_fmadd_ps(g_decay, _mm512_load_ps(A_block + o), sum_gA);
              sum_gB = _mm512_fmadd_ps(ghn, _mm512_set1_ps(Bt[n]), sum_gB);
              _mm512_store_ps(gA + o, _mm512_fmadd_ps(g_decay, tok.dt, _mm512_load_ps(gA + o)));
              _mm512_store_ps(gB_k + o, _mm512_fmadd_ps(ghn, dtu, _mm512_load_ps(gB_k + o)));
              _mm512_store_ps(gh + o, _mm512_mul_ps(ghn, decay));
            }
            const __m512 gdt = _mm512_fmadd_ps(tok.u, sum_gB, sum_gA);
            const __m512 gdelta = _mm512_mul_ps(gdt, sigmoid_ps(tok.pre));
            gbias = _mm512_add_ps(gbias, gdelta);
            _mm512_store_ps(pk.gdelta + at + k * kLanes, gdelta);
            if (gated)
              _mm512_store_ps(pk.gz + at + k * kLanes, _mm512_mul_ps(_mm512_mul_ps(gy_out, ungated), silu_derivative_ps(zk)));
            _mm512_store_ps(pk.gu + at + k * kLanes, _mm512_fmadd_ps(tok.dt, sum_gB, _mm512_mul_ps(gyt, Dskip)));
          }
          if (g.h0 != nullptr) scatter_states(gh, D, N, d0, g.h0 + pair * D * N);
          float* sums = partial + cb.count * N * kLanes;
          _mm512_store_ps(sums + d0, _mm512_add_ps(_mm512_load_ps(sums + d0), gDskip));
          _mm512_store_ps(sums + cb.count * kLanes + d0, _mm512_add_ps(_mm512_load_ps(sums + cb.count * kLanes + d0), gbias));
        }
        if (g.delta != nullptr) unpack_rows(pk.gdelta, a, cb, b, t0, t1, g.delta);
        if (g.u != nullptr) unpack_rows(pk.gu, a, cb, b, t0, t1, g.u);
        if (gated && g.z != nullptr) unpack_rows(pk.gz, a, cb, b, t0, t1, g.z);
        // gB_t[n], gC_t[n]: the sum over channels, from the lane sums of every block.
        for (i64 k = 0; k < len; ++k)
          for (i64 n = 0; n < N; ++n) {
            const i64 slot = (k * N + n) * kLanes, j = (b * a.L + t0 + k) * N + n;
            if (g.B != nullptr) g.B[j] = hsum(_mm512_load_ps(gB_lanes + slot));
            if (g.C != nullptr) g.C[j] = hsum(_mm512_load_ps(gC_lanes + slot));
          }
      }
    }
  });

  // The sums over groups, in group order, into the row after the partials.
  float* totals = partials + groups * partial_size;
  parallel_for(0, partial_size / kLanes, 16, [&](i64 c0, i64 c1) {
    for (i64 c = c0 * kLanes; c < c1 * kLanes; c += kLanes) {
      __m512 sum = _mm512_setzero_ps();
      for (i64 group = 0; group < groups; ++group)
        sum = _mm512_add_ps(sum, _mm512_load_ps(partials + group * partial_size + c));
      _mm512_store_ps(totals + c, sum);
    }
  });
  for (i64 block = 0; block < cb.count; ++block) {
    const i64 d0 = block * kLanes;
    if (g.A_log != nullptr) {  // gA_log = gA * A, lane by lane
      float* gA = totals + block * N * kLanes;
      for (i64 n = 0; n < N; ++n)
        _mm512_store_ps(gA + n * kLanes, _mm512_mul_ps(_mm512_load_ps(gA + n * kLanes),
                                                       _mm512_load_ps(cb.At + (block * N + n) * kLanes)));
      scatter_states(gA, D, N, d0, g.A_log);
    }
    const float* sums = totals + cb.count * N * kLanes;
    const __mmask16 mask = cb.mask(block);
    if (g.Dskip != nullptr) _mm512_mask_storeu_ps(g.Dskip + d0, mask, _mm512_load_ps(sums + d0));
    if (g.delta_bias != nullptr)
      _mm512_mask_storeu_ps(g.delta_bias + d0, mask, _mm512_load_ps(sums + cb.count * kLanes + d0));
  }
}

}  // namespace wedge::kernels::cpu::avx512
