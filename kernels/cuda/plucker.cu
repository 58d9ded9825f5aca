// The causal Plücker pairing of the Grassmann mixing layer (PAPERS.md §2), fused.
//
// For position t and offset Δ (t - Δ >= 0), u = z[b,t], v = z[b,t-Δ]:
//   p_ab = u_a v_b - u_b v_a  (a < b, P = r(r-1)/2 pairs),  phat = p / max(||p||, eps).
//
// One block per (b, t). The block first copies the few rows of z it needs into shared
// memory (its own row, and the partner row of every offset), so z is read once per
// block, and every Plücker coordinate is then formed in registers from shared memory. Per
// offset the block computes ||p|| (a fixed-order block reduction) and writes p / norm.
// plucker_mean_forward goes one step further: it averages phat over the valid offsets in
// registers and writes only (B, L, P) — the (B, L, m, P) tensor never reaches memory.
//
// Backward, without atomics: the gradient of z[b,s] collects contributions from the pairs
// where s is the newer position u (t = s) and from those where it is the older position v
// (t = s + Δ). Rather than scattering from each pair into two rows (which would need
// atomics where rows are shared), one block per (b, s) GATHERS both kinds, owning its
// row of gz outright. With dp the gradient reaching p (see below) and A the antisymmetric
// r x r matrix with A_ab = dp_ab for a < b:
//   as u:  gu = A v        as v:  gv = -A u
// (from p_ab = u_a v_b - u_b v_a). dp itself is the backward of the normalisation:
//   ||p|| > eps:  dp = (g - phat (phat . g)) / ||p||      otherwise: dp = g / eps
// with g the gradient reaching phat. The phat . g dot is recomputed by each of the two
// blocks that need a pair instead of being stored: P multiply-adds, cheaper than a pass
// through memory.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace plucker_impl {

// Offsets are host values (kernels.h): they travel to the GPU inside the kernel arguments.
struct Offsets {
  int count;
  int value[launch::kMaxPluckerOffsets];
};

Offsets make_offsets(const int32_t* offsets, i64 m, const char* entry) {
  if (m > launch::kMaxPluckerOffsets) {
    throw std::runtime_error(std::string("cuda ") + entry + ": " + std::to_string(m) + " offsets (at most " +
                             std::to_string(launch::kMaxPluckerOffsets) + ")");
  }
  Offsets o{};
  o.count = static_cast<int>(m);
  for (i64 j = 0; j < m; ++j) o.value[j] = offsets[j];
  return o;
}

// Number of offsets valid at position t (t - Δ >= 0): the divisor of the mean.
__device__ __forceinline__ int valid_offsets(const Offsets& offsets, i64 t) {
  int count = 0;
  for (int j = 0; j < offsets.count; ++j) count += t - offsets.value[j] >= 0 ? 1 : 0;
  return count;
}

// Copies z[b, t] of every listed time into consecutive shared rows (zeros for times
// outside [0, L): an invalid partner is never used, but stays well defined).
__device__ __forceinline__ void stage_z_row(const float* z, i64 b, i64 L, int r, i64 time, float* dst) {
  for (int c = threadIdx.x; c < r; c += blockDim.x) {
    dst[c] = time >= 0 && time < L ? z[(b * L + time) * r + c] : 0.0f;
  }
}

// Formed in double: each product of two floats is exact there, so the difference is
// rounded once (as in kernels/ref) — no cancellation error for nearly parallel rows, and
// exactly 0 for parallel ones whatever multiply-adds the compiler fuses. (In float,
// fma(u_a, v_c, -u_c v_a) would leave the rounding error of one product behind, and a
// pair that should clamp to p = 0 would come out as noise / eps.)
__device__ __forceinline__ float plucker_coordinate(const float* u, const float* v, int a, int c) {
  return static_cast<float>(static_cast<double>(u[a]) * v[c] - static_cast<double>(u[c]) * v[a]);
}

// Block-wide ||p||^2 of the pair (u, v), both in shared memory.
__device__ __forceinline__ float plucker_norm_squared(const float* u, const float* v, int r, i64 P) {
  float local = 0.0f;
  for (i64 q = threadIdx.x; q < P; q += blockDim.x) {
    int a, c;
    launch::pair_of_index(q, r, &a, &c);
    const float p = plucker_coordinate(u, v, a, c);
    local += p * p;
  }
  return block_sum(local);
}

// Shared layout: rows[0] = z[b,t], rows[1 + j] = z[b, t - Δ_j]; then m norms (mean only).
// mean == false: out (B, L, m, P), zeros and norm 0 for invalid offsets.
// mean == true:  out (B, L, P) = average of phat over valid offsets (0 if none).
template <bool kMean>
__global__ void plucker_forward_kernel(const float* z, i64 L, int r, Offsets offsets, float eps, float* out,
                                       float* norms) {
  WEDGE_DYNAMIC_SHARED(float, shared);
  const int m = offsets.count;
  float* rows = shared;
  float* norm_of = shared + (m + 1) * r;
  const i64 bt = blockIdx.x, b = bt / L, t = bt % L;
  const i64 P = static_cast<i64>(r) * (r - 1) / 2;
  stage_z_row(z, b, L, r, t, rows);
  for (int j = 0; j < m; ++j) stage_z_row(z, b, L, r, t - offsets.value[j], rows + (1 + j) * r);
  __syncthreads();

  const float* u = rows;
  for (int j = 0; j < m; ++j) {
    const bool valid = t - offsets.value[j] >= 0;  // the same for the whole block
    const float* v = rows + (1 + j) * r;
    float norm = 0.0f;
    if (valid) norm = fmaxf(sqrtf(plucker_norm_squared(u, v, r, P)), eps);
    if (threadIdx.x == 0) {
      norms[bt * m + j] = norm;
      if (kMean) norm_of[j] = norm;
    }
    if (!kMean) {
      float* dst = out + (bt * m + j) * P;
      for (i64 q = threadIdx.x; q < P; q += blockDim.x) {
        int a, c;
        launch::pair_of_index(q, r, &a, &c);
        dst[q] = valid ? plucker_coordinate(u, v, a, c) / norm : 0.0f;
      }
    }
  }
  if (kMean) {
    __syncthreads();  // norm_of[] was written by thread 0
    const int count = valid_offsets(offsets, t);
    float* dst = out + bt * P;
    for (i64 q = threadIdx.x; q < P; q += blockDim.x) {
      int a, c;
      launch::pair_of_index(q, r, &a, &c);
      float sum = 0.0f;
      for (int j = 0; j < m; ++j) {
        if (t - offsets.value[j] < 0) continue;
        sum += plucker_coordinate(u, rows + (1 + j) * r, a, c) / norm_of[j];
      }
      dst[q] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
    }
  }
}

// The gradient reaching p_q from the gradient g_q reaching phat_q (see the file comment).
__device__ __forceinline__ float normalised_backward(float g, float phat, float phat_dot_g, float norm, float eps) {
  return norm > eps ? (g - phat * phat_dot_g) / norm : g / eps;
}

// Where one pair's gradient comes from, for the gather below.
//   plain (kMean false): phat and g are rows of `out` and `gout` (B, L, m, P).
//   mean  (kMean true):  phat = p / norm is rebuilt from the staged z rows, and
//                        g = gout[b, t] / (number of valid offsets at t).
struct PairSource {
  const float* u;     // shared: z[b, t]
  const float* v;     // shared: z[b, t - Δ]
  const float* phat;  // plain: out row (global); mean: unused
  const float* g;     // plain: gout row (B, L, m, P); mean: gout row (B, L, P)
  float g_scale;      // 1 (plain) or 1 / valid count (mean)
  float norm;
};

template <bool kMean>
__device__ __forceinline__ void pair_values(const PairSource& s, i64 q, int a, int c, float* phat, float* g) {
  if (kMean) {
    *phat = plucker_coordinate(s.u, s.v, a, c) / s.norm;
  } else {
    *phat = s.phat[q];
  }
  *g = s.g[q] * s.g_scale;
}

// Adds this pair's gradient for the row `own` (u when as_u, v otherwise) to acc[0..r):
//   as u:  acc_x += sum_{c != x} A_xc v_c       as v:  acc_x -= sum_{c != x} A_xc u_c
// with A_xc = dp_{min,max} * (x < c ? 1 : -1). Thread x (strided) owns acc[x].
template <bool kMean>
__device__ __forceinline__ void add_pair_gradient(const PairSource& s, bool as_u, int r, i64 P, float eps,
                                                  float* acc) {
  float local = 0.0f;
  for (i64 q = threadIdx.x; q < P; q += blockDim.x) {
    int a, c;
    launch::pair_of_index(q, r, &a, &c);
    float phat, g;
    pair_values<kMean>(s, q, a, c, &phat, &g);
    local += phat * g;
  }
  const float phat_dot_g = block_sum(local);
  const float* other = as_u ? s.v : s.u;
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float sum = 0.0f;
    for (int c = 0; c < r; ++c) {
      if (c == x) continue;
      const int lo = x < c ? x : c, hi = x < c ? c : x;
      const i64 q = launch::pair_index(lo, hi, r);
      float phat, g;
      pair_values<kMean>(s, q, lo, hi, &phat, &g);
      const float dp = normalised_backward(g, phat, phat_dot_g, s.norm, eps);
      sum += (x < c ? dp : -dp) * other[c];
    }
    acc[x] += as_u ? sum : -sum;
  }
}

// One block per (b, s); shared: own row, m past rows z[s - Δ_j], m future rows
// z[s + Δ_j], then the r accumulators of gz[b, s].
template <bool kMean>
__global__ void plucker_backward_kernel(const float* z, i64 L, int r, Offsets offsets, float eps,
                                        const float* out, const float* norms, const float* gout, float* gz) {
  WEDGE_DYNAMIC_SHARED(float, shared);
  const int m = offsets.count;
  float* own = shared;
  float* past = shared + r;
  float* future = shared + (1 + m) * r;
  float* acc = shared + (1 + 2 * m) * r;
  const i64 bs = blockIdx.x, b = bs / L, s = bs % L;
  const i64 P = static_cast<i64>(r) * (r - 1) / 2;
  stage_z_row(z, b, L, r, s, own);
  for (int j = 0; j < m; ++j) {
    stage_z_row(z, b, L, r, s - offsets.value[j], past + j * r);
    stage_z_row(z, b, L, r, s + offsets.value[j], future + j * r);
  }
  for (int x = threadIdx.x; x < r; x += blockDim.x) acc[x] = 0.0f;  // owned by thread x % blockDim
  __syncthreads();

  // s as the newer position: pairs (t = s, t - Δ_j)
  const float own_scale = kMean ? 1.0f / static_cast<float>(valid_offsets(offsets, s)) : 1.0f;
  for (int j = 0; j < m; ++j) {
    if (s - offsets.value[j] < 0) continue;  // uniform across the block
    const i64 pair = bs * m + j;
    PairSource src{own, past + j * r, kMean ? nullptr : out + pair * P, kMean ? gout + bs * P : gout + pair * P,
                   own_scale, norms[pair]};
    add_pair_gradient<kMean>(src, true, r, P, eps, acc);
  }
  // s as the older position: pairs (t = s + Δ_j, s)
  for (int j = 0; j < m; ++j) {
    const i64 t = s + offsets.value[j];
    if (t >= L) continue;  // uniform across the block
    const i64 bt = b * L + t, pair = bt * m + j;
    const float scale = kMean ? 1.0f / static_cast<float>(valid_offsets(offsets, t)) : 1.0f;
    PairSource src{future + j * r, own, kMean ? nullptr : out + pair * P, kMean ? gout + bt * P : gout + pair * P,
                   scale, norms[pair]};
    add_pair_gradient<kMean>(src, false, r, P, eps, acc);
  }
  // Each acc[x] was only ever touched by its owning thread: no barrier needed.
  for (int x = threadIdx.x; x < r; x += blockDim.x) gz[bs * r + x] = acc[x];
}

void check_shared(std::size_t bytes, const char* entry) {
  if (bytes > launch::kMaxDefaultShared) {
    throw std::runtime_error(std::string("cuda ") + entry + ": r x offsets too large for shared memory (" +
                             std::to_string(bytes) + " bytes)");
  }
}

template <bool kMean>
void launch_forward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps, float* out,
                    float* norms, const char* entry) {
  if (B <= 0 || L <= 0 || r <= 0) return;
  const std::size_t shared = launch::plucker_forward_shared(r, m);
  check_shared(shared, entry);
  const i64 P = r * (r - 1) / 2;
  WEDGE_LAUNCH(grid_1d(B * L), launch::plucker_threads(P), shared, plucker_forward_kernel<kMean>)(
      z, L, static_cast<int>(r), make_offsets(offsets, m, entry), eps, out, norms);
  check_launch(entry);
}

template <bool kMean>
void launch_backward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                     const float* out, const float* norms, const float* gout, float* gz, const char* entry) {
  if (B <= 0 || L <= 0 || r <= 0) return;
  const std::size_t shared = launch::plucker_backward_shared(r, m);
  check_shared(shared, entry);
  const i64 P = r * (r - 1) / 2;
  WEDGE_LAUNCH(grid_1d(B * L), launch::plucker_threads(P), shared, plucker_backward_kernel<kMean>)(
      z, L, static_cast<int>(r), make_offsets(offsets, m, entry), eps, out, norms, gout, gz);
  check_launch(entry);
}

}  // namespace plucker_impl

using namespace plucker_impl;

void plucker_forward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps, float* out,
                     float* norms) {
  launch_forward<false>(z, B, L, r, offsets, m, eps, out, norms, "plucker_forward");
}

void plucker_backward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                      const float* out, const float* norms, const float* gout, float* gz) {
  launch_backward<false>(z, B, L, r, offsets, m, eps, out, norms, gout, gz, "plucker_backward");
}

void plucker_mean_forward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                          float* out, float* norms) {
  launch_forward<true>(z, B, L, r, offsets, m, eps, out, norms, "plucker_mean_forward");
}

void plucker_mean_backward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                           const float* norms, const float* gout, float* gz) {
  launch_backward<true>(z, B, L, r, offsets, m, eps, nullptr, norms, gout, gz, "plucker_mean_backward");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
