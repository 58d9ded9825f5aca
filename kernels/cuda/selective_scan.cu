// The selective scan (Mamba's S6) of SheafStateLM's local dynamics, segment by segment,
// forward and backward. The recurrence and the layouts are in engine/kernel_table.h
// (ScanArgs); kernels/ref/selective_scan.cpp derives the backward. In float:
//   dt = softplus(delta + delta_bias),  h = exp(dt A) h + dt B u,  y = C . h + Dskip u,
// times silu(z) when the output gate z is given (and, when asked, each segment's step sizes
// summed in token order by the first chunk of states; their gradient joins every dt's),
// A = -exp(A_log) <= 0 and dt >= 0, so the decay exp(dt A) lies in [0, 1] (1 when dt == 0,
// even for A = -inf: no 0 * inf).
//
// Layouts: the inputs u, delta, z, B and C are read through ScanArgs' token and batch
// strides (a token's channels, or states, contiguous), resolved once on the host
// (ScanArgs::resolved), so the kernels never see the 0 defaults; y, gy and every gradient are
// contiguous (batch, L, D) or (batch, L, N). A kernel therefore keeps two indices per token:
// ix for the strided inputs u, delta and z, and i for y, gy and the outputs.
//
// Mapping (both kernels): one thread per channel d, one warp per tile of 32 channels, up to
// four warps per block, one group of blocks per (batch, segment). A thread keeps the states
// of its channel in registers, kStateChunk (at most 16) of them at a time: a larger N is
// walked in chunks of states, each chunk a full pass over the segment. The recurrence is
// sequential in t and independent across (d, n), so nothing is shared between threads in
// the forward; every output element is written by the one thread that computes it.
//
// Backward by recomputation, keeping no per-token state in global memory: a thread rebuilds
// its segment's states from h0 in registers and local memory, kTokenChunk (16) tokens of
// them at a time, and walks them backwards with the state gradient gh (the reference's
// formulas, in float). A segment longer than kTokenChunk tokens is walked in sub-chunks
// from the last one back, each rebuilt from h0, so P = kTokenChunk costs one recomputation
// and a longer P costs about P / (2 kTokenChunk) recomputations per token (correct for any
// P, slower for long segments). Limits: none on P, N, D or L; the grid (batch x segments x
// ceil(D / 128) blocks) must fit in 2^31 - 1, else std::invalid_argument.
//
// Determinism: no atomics; every sum has an order fixed by the shape alone.
//   - gB, gC (sums over channels): per token and state, the 32 lanes of a warp are summed
//     by a butterfly reduce-scatter (a fixed tree of shuffles); with more than 32 channels
//     the per-warp partials (batch, L, tiles, N) go to scratch and reduce.cu's
//     sum_middle_axis adds them over tiles.
//   - gA_log, gDskip, gdelta_bias (sums over batch and tokens): each thread sums its
//     segment's tokens in order (last to first, as the reference), writes one partial per
//     (batch, segment) to scratch, and sum_middle_axis adds the partials over segments.
//   - gdelta, gu, gz, gh0: one element per thread. With N > kStateChunk the sums over states
//     behind gdelta and gu (and the ungated output behind gz) carry from one chunk of states
//     to the next through scratch (batch, L, D), in increasing n, exactly as one sequential
//     sum.
#include <climits>

#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace selective_scan_impl {

constexpr int kMaxStateChunk = 16;  // states a thread holds in registers at once
constexpr int kTokenChunk = 16;     // tokens whose states the backward keeps at once
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxThreads = kWarpsPerBlock * 32;

// ---- launch arithmetic (host) -----------------------------------------------------------

struct ScanPlan {
  i64 segments = 0;  // ceil(L / P)
  i64 tiles = 0;     // warps of 32 channels: ceil(D / 32)
  int warps = 0;     // warps per block: min(4, tiles)
  i64 groups = 0;    // blocks per (batch, segment)
  i64 blocks = 0;    // batch * segments * groups
  i64 chunks = 0;    // chunks of states: ceil(N / state_chunk), at least 1 (N = 0: y = Dskip u)
  int state_chunk = 0;
};

// The smallest power of two >= N, at most kMaxStateChunk (so 2 * chunk <= 32 lanes).
inline int state_chunk_for(i64 N) {
  int c = 1;
  while (c < kMaxStateChunk && c < N) c *= 2;
  return c;
}

void check_args(const ScanArgs<float>& a, const char* who) {
  const std::string name(who);
  if (a.batch < 0 || a.L < 0 || a.D < 0 || a.N < 0 || a.P < 0) {
    throw std::invalid_argument(name + ": negative size");
  }
  if (a.L > 0 && a.P < 1) throw std::invalid_argument(name + ": segment length P must be >= 1");
}

ScanPlan plan_scan(const ScanArgs<float>& a, const char* who) {
  ScanPlan p;
  p.segments = a.segments();
  p.tiles = launch::ceil_div(a.D, 32);
  p.warps = static_cast<int>(std::min<i64>(kWarpsPerBlock, std::max<i64>(p.tiles, 1)));
  p.groups = launch::ceil_div(p.tiles, p.warps);
  p.state_chunk = state_chunk_for(a.N);
  p.chunks = std::max<i64>(1, launch::ceil_div(a.N, p.state_chunk));
  // Each factor is checked before it multiplies, so no product overflows.
  const bool too_many = p.segments > 0 && p.groups > 0 &&
                        (a.batch > INT_MAX / p.segments || a.batch * p.segments > INT_MAX / p.groups);
  if (too_many) {
    throw std::invalid_argument(std::string(who) + ": batch x segments x ceil(D / " + std::to_string(kMaxThreads) +
                                ") exceeds the 2^31 - 1 blocks of a CUDA grid");
  }
  p.blocks = a.batch * p.segments * p.groups;
  return p;
}

// ---- device helpers ------------------------------------------------------------------------

// softplus(x) = max(x, 0) + log1p(e^-|x|): e^-|x| <= 1 never overflows.
__device__ __forceinline__ float scan_softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
// sigmoid without overflow: e^-x is only formed for x >= 0.
__device__ __forceinline__ float scan_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}
__device__ __forceinline__ float scan_silu(float x) { return x * scan_sigmoid(x); }
__device__ __forceinline__ float scan_silu_derivative(float x) {
  const float s = scan_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
// exp(dt A) for dt >= 0, A <= 0: 1 when dt == 0 even if A is -inf (no 0 * inf).
__device__ __forceinline__ float scan_decay(float dt, float A) { return dt == 0.0f ? 1.0f : expf(dt * A); }

// One token of the recurrence for the first `count` states of a chunk. The forward and the
// backward's recomputation call the same code.
template <int NC>
__device__ __forceinline__ void scan_step(float (&h)[NC], const float (&A)[NC], float dt, float u, const float* Bt,
                                          int count) {
  WEDGE_UNROLL
  for (int j = 0; j < NC; ++j) {
    if (j < count) h[j] = scan_decay(dt, A[j]) * h[j] + dt * Bt[j] * u;
  }
}

// Where token t of batch b starts in u, delta and z (add the channel), and in B and C (add
// the state); the args' strides are resolved (ScanArgs::resolved).
__device__ __forceinline__ i64 scan_x_token(const ScanArgs<float>& a, i64 b, i64 t) {
  return b * a.x_batch_stride + t * a.x_token_stride;
}
__device__ __forceinline__ i64 scan_bc_token(const ScanArgs<float>& a, i64 b, i64 t) {
  return b * a.bc_batch_stride + t * a.bc_token_stride;
}

// Which (batch, segment) and which channel this thread works on.
struct ScanThread {
  i64 b, s, tile, d;
};
__device__ __forceinline__ ScanThread scan_thread(i64 segments, i64 groups) {
  const i64 group = blockIdx.x % groups, row = blockIdx.x / groups;
  const i64 tile = group * (blockDim.x / 32) + threadIdx.x / 32;
  return {row / segments, row % segments, tile, tile * 32 + threadIdx.x % 32};
}

// Sums x[0..V) (V a power of two, at most 32) over the 32 lanes of a warp, scattering the
// V totals over the lanes: lane l ends with the total of value l / (32 / V) in x[0] (lanes
// sharing a value hold the same bits). Each step gives half of the values still held to
// the partner lane and adds the partner's half of its own: 31 shuffles for 32 values,
// against 160 for 32 butterfly sums. The tree is fixed by V, so the result is
// deterministic.
template <int Count, int Offset, int V>
__device__ __forceinline__ void reduce_scatter_step(float (&x)[V], unsigned lane) {
  if constexpr (Offset > 0) {
    if constexpr (Count > 1) {
      constexpr int kHalf = Count / 2;
      const bool upper = (lane & unsigned(Offset)) != 0;  // keeps the upper half
      WEDGE_UNROLL
      for (int i = 0; i < kHalf; ++i) {
        const float give = upper ? x[i] : x[kHalf + i];
        const float keep = upper ? x[kHalf + i] : x[i];
        x[i] = keep + __shfl_xor_sync(kFullMask, give, Offset);
      }
      reduce_scatter_step<kHalf, Offset / 2>(x, lane);
    } else {
      x[0] += __shfl_xor_sync(kFullMask, x[0], Offset);  // same bits on both lanes
      reduce_scatter_step<1, Offset / 2>(x, lane);
    }
  }
}

// ---- forward -------------------------------------------------------------------------------

template <int NC>
__global__ void __launch_bounds__(kMaxThreads)
    scan_forward_kernel(ScanArgs<float> a, i64 segments, i64 groups, i64 chunks, float* y, float* h_last,
                        float* step_sums) {
  const ScanThread th = scan_thread(segments, groups);
  if (th.d >= a.D) return;  // no shuffles or barriers below
  const i64 b = th.b, s = th.s, d = th.d, L = a.L, D = a.D, N = a.N;
  const i64 t0 = s * a.P, t1 = min_i64(L, t0 + a.P);
  const float bias = a.delta_bias != nullptr ? a.delta_bias[d] : 0.0f;
  const i64 state0 = ((b * segments + s) * D + d) * N;  // h0 / h_last of (b, s, d)
  float dt_sum = 0.0f;  // the segment's step sizes, summed in token order by the first chunk
  for (i64 c = 0; c < chunks; ++c) {
    const i64 n0 = c * NC;
    const int count = static_cast<int>(min_i64(NC, N - n0));  // 0 when N == 0
    float A[NC], h[NC];
    WEDGE_UNROLL
    for (int j = 0; j < NC; ++j) {
      A[j] = j < count ? -expf(a.A_log[d * N + n0 + j]) : 0.0f;
      h[j] = j < count && a.h0 != nullptr ? a.h0[state0 + n0 + j] : 0.0f;
    }
    for (i64 t = t0; t < t1; ++t) {
      const i64 ix = scan_x_token(a, b, t) + d;  // u, delta, z (strided)
      const i64 i = (b * L + t) * D + d;         // y (contiguous)
      const i64 bc = scan_bc_token(a, b, t) + n0;
      const float dt = scan_softplus(a.delta[ix] + bias), u = a.u[ix];
      if (c == 0) dt_sum += dt;
      scan_step(h, A, dt, u, a.B + bc, count);
      // y = Dskip u + C_0 h_0 + C_1 h_1 + ...: one sequential sum over n, continued from
      // the previous chunk's partial value in y.
      float out = c > 0 ? y[i] : (a.Dskip != nullptr ? a.Dskip[d] * u : 0.0f);
      const float* Ct = a.C + bc;
      WEDGE_UNROLL
      for (int j = 0; j < NC; ++j) {
        if (j < count) out += Ct[j] * h[j];
      }
      if (a.z != nullptr && c + 1 == chunks) out *= scan_silu(a.z[ix]);  // the output gate, once
      y[i] = out;
    }
    if (h_last != nullptr) {
      WEDGE_UNROLL  // constant indices keep h in registers
      for (int j = 0; j < NC; ++j) {
        if (j < count) h_last[state0 + n0 + j] = h[j];
      }
    }
  }
  if (step_sums != nullptr) step_sums[(b * segments + s) * D + d] = dt_sum;
}

// ---- backward ------------------------------------------------------------------------------

// Where the backward kernel writes. The sums go to partial buffers that are the gradients
// themselves when nothing is left to add (one tile of channels; one (batch, segment)).
struct ScanBackwardOut {
  i64 segments, groups, tiles, chunks;
  float* gC;      // (batch, L, tiles, N): per-warp sums over channels
  float* gB;      // likewise
  float* gA_log;  // (batch * segments, D, N): per-segment sums over tokens
  float* gDskip;  // (batch * segments, D)
  float* gbias;   // (batch * segments, D)
  float* gdelta;  // (batch, L, D)
  float* gu;      // (batch, L, D)
  float* gh0;     // (batch, segments, D, N)
  float* gz;      // (batch, L, D)
  float* carry_gdt;  // (batch, L, D): the sums over states so far, when chunks > 1
  float* carry_gu;
  float* carry_out;  // (batch, L, D): the ungated output so far, when chunks > 1 and gz is wanted
  const float* g_step_sums;  // (batch, segments, D) or null: added to every dt's gradient
};

template <int NC>
__global__ void __launch_bounds__(kMaxThreads)
    scan_backward_kernel(ScanArgs<float> a, const float* gy, const float* g_h_last, ScanBackwardOut o) {
  constexpr int V = 2 * NC;  // values reduced over the warp per token: gC then gB
  const ScanThread th = scan_thread(o.segments, o.groups);
  if (th.tile >= o.tiles) return;  // a whole warp: its lanes shuffle only with each other
  const unsigned lane = threadIdx.x % 32;
  const i64 b = th.b, s = th.s, d = th.d, L = a.L, D = a.D, N = a.N;
  // Lanes past the last channel run every step (the shuffles need all 32) with zeros and
  // read nothing that depends on d.
  const bool valid = d < D;
  const i64 t0 = s * a.P, len = min_i64(L, t0 + a.P) - t0;
  const float bias = valid && a.delta_bias != nullptr ? a.delta_bias[d] : 0.0f;
  const float skip = valid && a.Dskip != nullptr ? a.Dskip[d] : 0.0f;
  const i64 state0 = ((b * o.segments + s) * D + d) * N;
  const i64 segment_row = b * o.segments + s;
  const float g_step_sum = valid && o.g_step_sums != nullptr ? o.g_step_sums[segment_row * D + d] : 0.0f;
  const bool reduce_bc = o.gB != nullptr || o.gC != nullptr;  // the same for every lane
  const i64 sub_chunks = launch::ceil_div(len, kTokenChunk);
  float gskip_sum = 0.0f, gbias_sum = 0.0f;

  for (i64 c = 0; c < o.chunks; ++c) {
    const i64 n0 = c * NC;
    const int count = static_cast<int>(min_i64(NC, N - n0));
    const bool first_chunk = c == 0, last_chunk = c + 1 == o.chunks;
    float A[NC], h_start[NC], gh[NC], gA[NC];
    WEDGE_UNROLL
    for (int j = 0; j < NC; ++j) {
      const bool live = valid && j < count;
      A[j] = live ? -expf(a.A_log[d * N + n0 + j]) : 0.0f;
      h_start[j] = live && a.h0 != nullptr ? a.h0[state0 + n0 + j] : 0.0f;
      gh[j] = live && g_h_last != nullptr ? g_h_last[state0 + n0 + j] : 0.0f;
      gA[j] = 0.0f;
    }
    for (i64 q = sub_chunks - 1; q >= 0; --q) {
      const i64 k_begin = q * kTokenChunk, k_end = min_i64(len, k_begin + kTokenChunk);
      // states[k - k_begin] = h after k tokens of the segment, for k in [k_begin, k_end].
      float states[kTokenChunk + 1][NC];
      float h[NC];
      WEDGE_UNROLL
      for (int j = 0; j < NC; ++j) h[j] = h_start[j];
      for (i64 k = 0; k < k_end; ++k) {
        if (k == k_begin) {
          WEDGE_UNROLL
          for (int j = 0; j < NC; ++j) states[0][j] = h[j];
        }
        const i64 t = t0 + k, ix = scan_x_token(a, b, t) + d;
        const float dt = valid ? scan_softplus(a.delta[ix] + bias) : 0.0f, u = valid ? a.u[ix] : 0.0f;
        scan_step(h, A, dt, u, a.B + scan_bc_token(a, b, t) + n0, valid ? count : 0);
        if (k >= k_begin) {
          WEDGE_UNROLL
          for (int j = 0; j < NC; ++j) states[k - k_begin + 1][j] = h[j];
        }
      }
      for (i64 k = k_end - 1; k >= k_begin; --k) {
        const i64 t = t0 + k;
        const i64 ix = scan_x_token(a, b, t) + d;  // u, delta, z (strided)
        const i64 i = (b * L + t) * D + d;         // gy, the gradients, the carries (contiguous)
        const float pre = valid ? a.delta[ix] + bias : 0.0f;
        const float dt = valid ? scan_softplus(pre) : 0.0f, u = valid ? a.u[ix] : 0.0f;
        // gyt: the gradient of the ungated output o = C . h + Dskip u (gy silu(z) when gated).
        const float gy_out = valid ? gy[i] : 0.0f, z = valid && a.z != nullptr ? a.z[ix] : 0.0f;
        const float gyt = a.z != nullptr ? gy_out * scan_silu(z) : gy_out;
        const bool want_gz = valid && a.z != nullptr && o.gz != nullptr;
        float ungated = 0.0f;
        if (want_gz) ungated = first_chunk ? skip * u : o.carry_out[i];
        // The sums over n of gdt and gu, continued from the previous chunk of states.
        float gdt = 0.0f, gu = a.Dskip != nullptr ? gyt * skip : 0.0f;
        if (!first_chunk && valid) {
          gdt = o.carry_gdt[i];
          gu = o.carry_gu[i];
        }
        if (first_chunk) gskip_sum += gyt * u;
        const i64 bc = scan_bc_token(a, b, t) + n0;
        const float* Bt = a.B + bc;
        const float* Ct = a.C + bc;
        const float* h_before = states[k - k_begin];
        const float* h_after = states[k - k_begin + 1];
        float x[V];
        WEDGE_UNROLL
        for (int j = 0; j < NC; ++j) {
          x[j] = 0.0f;
          x[NC + j] = 0.0f;
          if (valid && j < count) {
            const float Bn = Bt[j], Cn = Ct[j], decay = scan_decay(dt, A[j]);
            x[j] = gyt * h_after[j];  // gC
            ungated += Cn * h_after[j];
            gh[j] += Cn * gyt;
            const float g_decay = gh[j] * h_before[j];
            gdt += g_decay * decay * A[j] + gh[j] * Bn * u;
            gA[j] += g_decay * decay * dt;
            x[NC + j] = gh[j] * dt * u;  // gB
            gu += gh[j] * dt * Bn;
            gh[j] *= decay;
          }
        }
        if (reduce_bc) {
          reduce_scatter_step<V, 16>(x, lane);
          constexpr unsigned kShare = 32 / V;  // lanes holding the same total
          const int v = static_cast<int>(lane / kShare);
          const int j = v < NC ? v : v - NC;
          float* out = v < NC ? o.gC : o.gB;
          if (lane % kShare == 0 && j < count && out != nullptr) {
            out[((b * L + t) * o.tiles + th.tile) * N + n0 + j] = x[0];
          }
        }
        if (valid) {
          if (!last_chunk) {
            o.carry_gdt[i] = gdt;
            o.carry_gu[i] = gu;
            if (want_gz) o.carry_out[i] = ungated;
          } else {
            if (want_gz) o.gz[i] = gy_out * ungated * scan_silu_derivative(z);
            const float gdelta = (gdt + g_step_sum) * scan_sigmoid(pre);  // softplus' = sigmoid
            gbias_sum += gdelta;
            if (o.gdelta != nullptr) o.gdelta[i] = gdelta;
            if (o.gu != nullptr) o.gu[i] = gu;
          }
        }
      }
    }
    if (valid) {
      WEDGE_UNROLL  // constant indices keep gh, gA and A in registers
      for (int j = 0; j < NC; ++j) {
        if (j >= count) continue;
        if (o.gh0 != nullptr) o.gh0[state0 + n0 + j] = gh[j];
        if (o.gA_log != nullptr) o.gA_log[(segment_row * D + d) * N + n0 + j] = gA[j] * A[j];  // dA/dA_log = A
      }
    }
  }
  if (valid) {
    if (o.gDskip != nullptr) o.gDskip[segment_row * D + d] = gskip_sum;
    if (o.gbias != nullptr) o.gbias[segment_row * D + d] = gbias_sum;
  }
}

template <int NC>
void launch_forward(const ScanArgs<float>& a, const ScanPlan& p, float* y, float* h_last, float* step_sums) {
  WEDGE_LAUNCH(grid_1d(p.blocks), p.warps * 32, 0, scan_forward_kernel<NC>)(a, p.segments, p.groups, p.chunks, y,
                                                                            h_last, step_sums);
  check_launch("scan_forward_kernel");
}

template <int NC>
void launch_backward(const ScanArgs<float>& a, const ScanPlan& p, const float* gy, const float* g_h_last,
                     const ScanBackwardOut& o) {
  WEDGE_LAUNCH(grid_1d(p.blocks), p.warps * 32, 0, scan_backward_kernel<NC>)(a, gy, g_h_last, o);
  check_launch("scan_backward_kernel");
}

}  // namespace selective_scan_impl

using namespace selective_scan_impl;

void selective_scan_forward(const ScanArgs<float>& given, float* y, float* h_last, float* step_sums) {
  check_args(given, "selective_scan_forward");
  const ScanArgs<float> args = given.resolved();
  const ScanPlan p = plan_scan(args, "selective_scan_forward");
  if (p.blocks == 0) return;  // no batch, no tokens or no channels: nothing to write
  switch (p.state_chunk) {
    case 1: return launch_forward<1>(args, p, y, h_last, step_sums);
    case 2: return launch_forward<2>(args, p, y, h_last, step_sums);
    case 4: return launch_forward<4>(args, p, y, h_last, step_sums);
    case 8: return launch_forward<8>(args, p, y, h_last, step_sums);
    default: return launch_forward<16>(args, p, y, h_last, step_sums);
  }
}

void selective_scan_backward(const ScanArgs<float>& given, const float* gy, const float* g_h_last,
                             const float* g_step_sums, const ScanGrads<float>& grads) {
  check_args(given, "selective_scan_backward");
  const ScanArgs<float> args = given.resolved();
  const ScanPlan p = plan_scan(args, "selective_scan_backward");
  const i64 batch = args.batch, L = args.L, D = args.D, N = args.N;
  const i64 rows = batch * p.segments;  // (batch, segment) pairs
  if (D == 0) {  // gB, gC are sums over no channels; everything else is empty
    if (grads.B != nullptr) fill(grads.B, 0.0f, batch * L * N);
    if (grads.C != nullptr) fill(grads.C, 0.0f, batch * L * N);
    return;
  }
  if (rows == 0) {  // no tokens: the parameter gradients are empty sums
    if (grads.A_log != nullptr) fill(grads.A_log, 0.0f, D * N);
    if (grads.Dskip != nullptr) fill(grads.Dskip, 0.0f, D);
    if (grads.delta_bias != nullptr) fill(grads.delta_bias, 0.0f, D);
    return;
  }
  // Partial sums go to scratch only where a second stage has something to add.
  const bool split_channels = p.tiles > 1, split_rows = rows > 1;
  auto size_if = [](bool needed, i64 n) { return needed ? n : i64(1); };
  Scratch<float> part_C(size_if(split_channels && grads.C != nullptr, batch * L * p.tiles * N));
  Scratch<float> part_B(size_if(split_channels && grads.B != nullptr, batch * L * p.tiles * N));
  Scratch<float> part_A(size_if(split_rows && grads.A_log != nullptr, rows * D * N));
  Scratch<float> part_skip(size_if(split_rows && grads.Dskip != nullptr, rows * D));
  Scratch<float> part_bias(size_if(split_rows && grads.delta_bias != nullptr, rows * D));
  Scratch<float> carry_gdt(size_if(p.chunks > 1, batch * L * D));
  Scratch<float> carry_gu(size_if(p.chunks > 1, batch * L * D));
  Scratch<float> carry_out(size_if(p.chunks > 1 && args.z != nullptr && grads.z != nullptr, batch * L * D));
  auto target = [](float* grad, bool split, const Scratch<float>& part) {
    return grad == nullptr ? nullptr : split ? part.get() : grad;
  };
  ScanBackwardOut o{};
  o.segments = p.segments;
  o.groups = p.groups;
  o.tiles = p.tiles;
  o.chunks = p.chunks;
  o.gC = target(grads.C, split_channels, part_C);
  o.gB = target(grads.B, split_channels, part_B);
  o.gA_log = target(grads.A_log, split_rows, part_A);
  o.gDskip = target(grads.Dskip, split_rows, part_skip);
  o.gbias = target(grads.delta_bias, split_rows, part_bias);
  o.gdelta = grads.delta;
  o.gu = grads.u;
  o.gh0 = grads.h0;
  o.gz = args.z != nullptr ? grads.z : nullptr;
  o.carry_gdt = p.chunks > 1 ? carry_gdt.get() : nullptr;
  o.carry_gu = p.chunks > 1 ? carry_gu.get() : nullptr;
  o.carry_out = p.chunks > 1 ? carry_out.get() : nullptr;
  o.g_step_sums = g_step_sums;
  switch (p.state_chunk) {
    case 1: launch_backward<1>(args, p, gy, g_h_last, o); break;
    case 2: launch_backward<2>(args, p, gy, g_h_last, o); break;
    case 4: launch_backward<4>(args, p, gy, g_h_last, o); break;
    case 8: launch_backward<8>(args, p, gy, g_h_last, o); break;
    default: launch_backward<16>(args, p, gy, g_h_last, o); break;
  }
  // Second stages, each in a fixed order: over the tiles of channels, over the segments.
  if (split_channels) {
    if (grads.C != nullptr) sum_middle_axis(part_C.get(), grads.C, batch * L, p.tiles, N);
    if (grads.B != nullptr) sum_middle_axis(part_B.get(), grads.B, batch * L, p.tiles, N);
  }
  if (split_rows) {
    if (grads.A_log != nullptr) sum_middle_axis(part_A.get(), grads.A_log, 1, rows, D * N);
    if (grads.Dskip != nullptr) sum_middle_axis(part_skip.get(), grads.Dskip, 1, rows, D);
    if (grads.delta_bias != nullptr) sum_middle_axis(part_bias.get(), grads.delta_bias, 1, rows, D);
  }
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
