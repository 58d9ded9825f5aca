// The selective scan (kernels/ref/selective_scan.cpp has the math and the derivation of
// the backward); one source for both widths (simd.h). The kLanes lanes of a vector are
// kLanes channels d, so one token's update of one state index n is a handful of vector
// instructions with B_t[n] and C_t[n] broadcast, and y_t = sum_n C_t[n] h[n] needs no
// horizontal sum. Threads split the (batch, segment) pairs, which share nothing in the
// forward.
//
// The output gate (z given): the forward multiplies each output vector by silu(z) before
// storing it; the backward turns gy into the gradient of the ungated output the same way
// and rebuilds that output (C . h + Dskip u, from the states it recomputes) for gz.
//
// Memory layout. A channel block reads kLanes floats per token from each (B, L, D)
// tensor, and consecutive tokens are D floats apart: read in place, every such read is a
// fresh cache miss that the hardware prefetchers do not anticipate, and the scan waits on
// memory. So each pair first packs its segment's rows (read sequentially, one row after
// the other) into per-thread scratch laid out [block][token][kLanes], runs every block
// from there, and unpacks its outputs the same way. The inputs' rows may lie any stride
// apart (a piece of a longer sequence, B and C sliced from a wider projection: ScanArgs);
// packing reads them in place.
//
// The backward keeps no per-token state: each (batch, segment) recomputes its P states
// (and their decays exp(dt A), so the exponential is evaluated once) from h0 into a
// per-thread buffer of (2P + 1) x N x kLanes floats per channel block. Sums that cross
// pairs (gA_log, gDskip, gdelta_bias: over batch and tokens) are not combined by threads:
// the pairs are cut into a fixed number of groups of consecutive pairs (a function of the
// shape only), each group sums its pairs in order into its own partial, and a second
// pass adds the partials in group order, so the result does not depend on the thread
// count. Sums over channels within a pair (gB, gC) stay in that pair's thread: per lane,
// then one horizontal sum of the kLanes lane sums, so gB and gC (and only they) depend on
// the width.
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

// The channel blocks of kLanes, with A = -exp(A_log) transposed so that the kLanes
// channels of one state index n are contiguous: At[(block * N + n) * kLanes + lane]. A is
// kept finite (at -FLT_MAX at worst), so a step size of 0 gives exp(0 * A) = 1, never 0 * inf.
struct ChannelBlocks {
  i64 D, N, count;
  const float* At;
  i64 valid(i64 block) const { return D - block * kLanes; }  // lanes of the block that are channels
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

// Moves the N states of kLanes channels between the (..., D, N) layout of h0 / h_last and
// the lane layout h[n * kLanes + lane].
void gather_states(const float* src, i64 D, i64 N, i64 d0, float* h) {
  for (i64 n = 0; n < N; ++n)
    for (i64 lane = 0; lane < kLanes; ++lane) h[n * kLanes + lane] = d0 + lane < D ? src[(d0 + lane) * N + n] : 0.0f;
}
void scatter_states(const float* h, i64 D, i64 N, i64 d0, float* dst) {
  for (i64 n = 0; n < N; ++n)
    for (i64 lane = 0; lane < kLanes && d0 + lane < D; ++lane) dst[(d0 + lane) * N + n] = h[n * kLanes + lane];
}

vf load_or_zero(const float* p, i64 offset, i64 valid) { return p != nullptr ? load_first(p + offset, valid) : zero(); }

// Where token t of batch b starts in u, delta and z, and in B and C (the args' strides
// resolved: ScanArgs::resolved), and in the contiguous (batch, L, D) gy and outputs.
i64 x_row(const ScanArgs<float>& a, i64 b, i64 t) { return b * a.x_batch_stride + t * a.x_token_stride; }
i64 bc_row(const ScanArgs<float>& a, i64 b, i64 t) { return b * a.bc_batch_stride + t * a.bc_token_stride; }
i64 contiguous_row(const ScanArgs<float>& a, i64 b, i64 t) { return (b * a.L + t) * a.D; }  // gy, outputs

// `count` rows of D channels, `stride` floats apart, <-> the packed layout
// packed[(block * P + k) * kLanes + lane] (row k; the lanes past D are zeros).
void pack_rows(const float* first, i64 stride, i64 count, const ScanArgs<float>& a, const ChannelBlocks& cb,
               float* packed) {
  for (i64 k = 0; k < count; ++k) {
    const float* row = first + k * stride;
    for (i64 block = 0; block < cb.count; ++block)
      store_aligned(packed + (block * a.P + k) * kLanes, load_first(row + block * kLanes, cb.valid(block)));
  }
}
void unpack_rows(const float* packed, i64 count, const ScanArgs<float>& a, const ChannelBlocks& cb, float* first) {
  for (i64 k = 0; k < count; ++k) {
    float* row = first + k * a.D;
    for (i64 block = 0; block < cb.count; ++block)
      store_first(row + block * kLanes, cb.valid(block), load_aligned(packed + (block * a.P + k) * kLanes));
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
  vf pre, dt, u;  // delta + delta_bias, softplus of it, u
};
Token load_token(const float* u, const float* delta, vf bias, i64 k) {
  Token tok;
  tok.pre = add(load_aligned(delta + k * kLanes), bias);
  tok.dt = softplus(tok.pre);
  tok.u = load_aligned(u + k * kLanes);
  return tok;
}

// Runs `len` tokens of one channel block from the states h (lane layout), updating h.
// u, delta (and y, z) point at the block's packed rows; bias is the block's delta bias.
// When y is not null it writes y (times silu(z) when z is not null, the output gate); when
// states is not null it stores the state after every token, states[(k + 1) * N * kLanes ...]
// for token k, and that token's decays exp(dt A) in decays[k * N * kLanes ...], so the
// backward need not evaluate the exponential again. Returns the block's step sizes summed
// over the tokens, in token order (the forward's step sums).
vf scan_block(const ScanArgs<float>& a, const float* A_block, vf bias, vf Dskip, i64 b, i64 t0,
                i64 len, const float* u, const float* delta, const float* z, float* h, float* y, float* states,
                float* decays) {
  const i64 N = a.N;
  vf dt_sum = zero();
  for (i64 k = 0; k < len; ++k) {
    const Token tok = load_token(u, delta, bias, k);
    dt_sum = add(dt_sum, tok.dt);
    const vf dtu = mul(tok.dt, tok.u);
    const float* Bt = a.B + bc_row(a, b, t0 + k);
    const float* Ct = a.C + bc_row(a, b, t0 + k);
    vf out = mul(Dskip, tok.u);
    for (i64 n = 0; n < N; ++n) {
      const vf decay = exp(mul(tok.dt, load_aligned(A_block + n * kLanes)));
      const vf hn = fmadd(decay, load_aligned(h + n * kLanes), mul(dtu, set1(Bt[n])));
      store_aligned(h + n * kLanes, hn);
      out = fmadd(set1(Ct[n]), hn, out);
      if (states != nullptr) {
        store_aligned(states + ((k + 1) * N + n) * kLanes, hn);
        store_aligned(decays + (k * N + n) * kLanes, decay);
      }
    }
    if (z != nullptr) out = mul(out, silu(load_aligned(z + k * kLanes)));
    if (y != nullptr) store_aligned(y + k * kLanes, out);
  }
  return dt_sum;
}

i64 pair_grain(const ScanArgs<float>& a) {
  const i64 work = std::max<i64>(1, a.P * a.D * a.N);
  return std::max<i64>(1, (1 << 15) / work);
}

// The backward's partial sums: at most this many groups of consecutive pairs.
constexpr i64 kMaxGroups = 32;

}  // namespace

void selective_scan_forward(const ScanArgs<float>& given, float* y, float* h_last, float* step_sums) {
  const ScanArgs<float> a = given.resolved();
  const i64 S = a.segments(), N = a.N;
  thread_local ScratchBuffer a_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, a.D, N, a_buffer);
  parallel_for(0, a.batch * S, pair_grain(a), [&](i64 p0, i64 p1) {
    thread_local ScratchBuffer h_buffer, pack_buffer;
    float* h = h_buffer.get(static_cast<std::size_t>(N * kLanes));
    const Packed pk = packed_buffers(pack_buffer, a, cb, kForwardBuffers);
    for (i64 pair = p0; pair < p1; ++pair) {
      const i64 b = pair / S, s = pair % S, t0 = s * a.P, len = std::min(a.L, t0 + a.P) - t0;
      pack_rows(a.u + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.u);
      pack_rows(a.delta + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.delta);
      if (a.z != nullptr && y != nullptr) pack_rows(a.z + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.z);
      for (i64 block = 0; block < cb.count; ++block) {
        const i64 d0 = block * kLanes, at = block * a.P * kLanes, valid = cb.valid(block);
        if (a.h0 != nullptr) gather_states(a.h0 + pair * a.D * N, a.D, N, d0, h);
        else std::fill(h, h + N * kLanes, 0.0f);
        const vf dt_sum = scan_block(a, cb.At + block * N * kLanes, load_or_zero(a.delta_bias, d0, valid),
                                     load_or_zero(a.Dskip, d0, valid), b, t0, len, pk.u + at, pk.delta + at,
                                     a.z != nullptr && y != nullptr ? pk.z + at : nullptr, h,
                                     y != nullptr ? pk.out + at : nullptr, nullptr, nullptr);
        if (h_last != nullptr) scatter_states(h, a.D, N, d0, h_last + pair * a.D * N);
        if (step_sums != nullptr) store_first(step_sums + pair * a.D + d0, valid, dt_sum);
      }
      if (y != nullptr) unpack_rows(pk.out, len, a, cb, y + contiguous_row(a, b, t0));
    }
  });
}

void selective_scan_backward(const ScanArgs<float>& given, const float* gy, const float* g_h_last,
                             const float* g_step_sums, const ScanGrads<float>& g) {
  const ScanArgs<float> a = given.resolved();
  const i64 S = a.segments(), N = a.N, D = a.D, P = a.P, pairs = a.batch * S;
  thread_local ScratchBuffer a_buffer, partial_buffer;
  const ChannelBlocks cb = transpose_A(a.A_log, D, N, a_buffer);
  // Per group, in lane layout: gA (count x N x kLanes), then gDskip and gdelta_bias
  // (count x kLanes).
  const i64 group_size = (pairs + kMaxGroups - 1) / kMaxGroups, groups = (pairs + group_size - 1) / group_size;
  const i64 partial_size = cb.count * (N + 2) * kLanes;
  float* partials = partial_buffer.get(static_cast<std::size_t>((groups + 1) * partial_size));
  std::fill(partials, partials + groups * partial_size, 0.0f);

  parallel_for(0, groups, 1, [&](i64 g0, i64 g1) {
    thread_local ScratchBuffer buffer, pack_buffer;
    // states (P + 1) x N x kLanes | decays P x N x kLanes | gh N x kLanes |
    // gB, gC lane sums P x N x kLanes each
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
        const i64 b = pair / S, s = pair % S, t0 = s * P, len = std::min(a.L, t0 + P) - t0;
        pack_rows(a.u + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.u);
        pack_rows(a.delta + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.delta);
        pack_rows(gy + contiguous_row(a, b, t0), D, len, a, cb, pk.gy);
        if (gated) pack_rows(a.z + x_row(a, b, t0), a.x_token_stride, len, a, cb, pk.z);
        std::fill(gB_lanes, gB_lanes + 2 * P * N * kLanes, 0.0f);
        for (i64 block = 0; block < cb.count; ++block) {
          const i64 d0 = block * kLanes, at = block * P * kLanes, valid = cb.valid(block);
          const float* A_block = cb.At + block * N * kLanes;
          const vf bias = load_or_zero(a.delta_bias, d0, valid), Dskip = load_or_zero(a.Dskip, d0, valid);
          const vf g_step_sum = load_or_zero(g_step_sums, pair * D + d0, valid);  // reaches every dt
          const float *u = pk.u + at, *delta = pk.delta + at, *gyb = pk.gy + at, *zb = pk.z + at;
          if (a.h0 != nullptr) gather_states(a.h0 + pair * D * N, D, N, d0, states);
          else std::fill(states, states + N * kLanes, 0.0f);
          float* h = gh;  // the forward's running state; gh is set only after it
          std::copy(states, states + N * kLanes, h);
          scan_block(a, A_block, bias, Dskip, b, t0, len, u, delta, nullptr, h, nullptr, states, decays);
          if (g_h_last != nullptr) gather_states(g_h_last + pair * D * N, D, N, d0, gh);
          else std::fill(gh, gh + N * kLanes, 0.0f);
          float* gA = partial + block * N * kLanes;
          vf gDskip = zero(), gbias = zero();
          for (i64 k = len - 1; k >= 0; --k) {
            const Token tok = load_token(u, delta, bias, k);
            // gyt: the gradient of the ungated output o = C . h + Dskip u (gy silu(z) when
            // gated); o itself is rebuilt below, for gz = gy o silu'(z).
            const vf gy_out = load_aligned(gyb + k * kLanes);
            const vf zk = gated ? load_aligned(zb + k * kLanes) : zero();
            const vf gyt = gated ? mul(gy_out, silu(zk)) : gy_out;
            vf ungated = mul(Dskip, tok.u);
            const vf dtu = mul(tok.dt, tok.u);
            gDskip = fmadd(gyt, tok.u, gDskip);
            // gu = gy Dskip + dt Σ_n gh_n B_n and gdt = u Σ_n gh_n B_n + Σ_n g_decay_n A_n:
            // two independent sums over n, so no chain of dependent FMAs runs through it.
            vf sum_gB = zero(), sum_gA = zero();
            const float* Bt = a.B + bc_row(a, b, t0 + k);
            const float* Ct = a.C + bc_row(a, b, t0 + k);
            const float* decay_k = decays + k * N * kLanes;
            const float* before_k = states + k * N * kLanes;
            const float* after_k = before_k + N * kLanes;
            float* gB_k = gB_lanes + k * N * kLanes;
            float* gC_k = gC_lanes + k * N * kLanes;
            for (i64 n = 0; n < N; ++n) {
              const i64 o = n * kLanes;
              const vf decay = load_aligned(decay_k + o), after = load_aligned(after_k + o);
              if (gated) ungated = fmadd(set1(Ct[n]), after, ungated);
              store_aligned(gC_k + o, fmadd(gyt, after, load_aligned(gC_k + o)));
              const vf ghn = fmadd(set1(Ct[n]), gyt, load_aligned(gh + o));
              const vf g_decay = mul(mul(ghn, load_aligned(before_k + o)), decay);
              sum_gA = fmadd(g_decay, load_aligned(A_block + o), sum_gA);
              sum_gB = fmadd(ghn, set1(Bt[n]), sum_gB);
              store_aligned(gA + o, fmadd(g_decay, tok.dt, load_aligned(gA + o)));
              store_aligned(gB_k + o, fmadd(ghn, dtu, load_aligned(gB_k + o)));
              store_aligned(gh + o, mul(ghn, decay));
            }
            const vf gdt = add(fmadd(tok.u, sum_gB, sum_gA), g_step_sum);
            const vf gdelta = mul(gdt, sigmoid(tok.pre));
            gbias = add(gbias, gdelta);
            store_aligned(pk.gdelta + at + k * kLanes, gdelta);
            if (gated) store_aligned(pk.gz + at + k * kLanes, mul(mul(gy_out, ungated), silu_derivative(zk)));
            store_aligned(pk.gu + at + k * kLanes, fmadd(tok.dt, sum_gB, mul(gyt, Dskip)));
          }
          if (g.h0 != nullptr) scatter_states(gh, D, N, d0, g.h0 + pair * D * N);
          float* sums = partial + cb.count * N * kLanes;
          store_aligned(sums + d0, add(load_aligned(sums + d0), gDskip));
          store_aligned(sums + cb.count * kLanes + d0, add(load_aligned(sums + cb.count * kLanes + d0), gbias));
        }
        if (g.delta != nullptr) unpack_rows(pk.gdelta, len, a, cb, g.delta + contiguous_row(a, b, t0));
        if (g.u != nullptr) unpack_rows(pk.gu, len, a, cb, g.u + contiguous_row(a, b, t0));
        if (gated && g.z != nullptr) unpack_rows(pk.gz, len, a, cb, g.z + contiguous_row(a, b, t0));
        // gB_t[n], gC_t[n]: the sum over channels, from the lane sums of every block.
        for (i64 k = 0; k < len; ++k)
          for (i64 n = 0; n < N; ++n) {
            const i64 slot = (k * N + n) * kLanes, j = (b * a.L + t0 + k) * N + n;
            if (g.B != nullptr) g.B[j] = hsum(load_aligned(gB_lanes + slot));
            if (g.C != nullptr) g.C[j] = hsum(load_aligned(gC_lanes + slot));
          }
      }
    }
  });

  // The sums over groups, in group order, into the row after the partials.
  float* totals = partials + groups * partial_size;
  parallel_for(0, partial_size / kLanes, 16, [&](i64 c0, i64 c1) {
    for (i64 c = c0 * kLanes; c < c1 * kLanes; c += kLanes) {
      vf sum = zero();
      for (i64 group = 0; group < groups; ++group) sum = add(sum, load_aligned(partials + group * partial_size + c));
      store_aligned(totals + c, sum);
    }
  });
  for (i64 block = 0; block < cb.count; ++block) {
    const i64 d0 = block * kLanes, valid = cb.valid(block);
    if (g.A_log != nullptr) {  // gA_log = gA * A, lane by lane
      float* gA = totals + block * N * kLanes;
      for (i64 n = 0; n < N; ++n)
        store_aligned(gA + n * kLanes,
                      mul(load_aligned(gA + n * kLanes), load_aligned(cb.At + (block * N + n) * kLanes)));
      scatter_states(gA, D, N, d0, g.A_log);
    }
    const float* sums = totals + cb.count * N * kLanes;
    if (g.Dskip != nullptr) store_first(g.Dskip + d0, valid, load_aligned(sums + d0));
    if (g.delta_bias != nullptr) store_first(g.delta_bias + d0, valid, load_aligned(sums + cb.count * kLanes + d0));
  }
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
