// The causal Plücker pairing of GrassmannLM (PAPERS.md §2): for each position t and
// offset Δ, the plane spanned by (z_t, z_{t-Δ}) as its normalised Plücker coordinates
// p_ij = u_i v_j - u_j v_i (i < j). Pairing is with the PAST token only; rows whose
// partner would be before the sequence start are zero.
#include <algorithm>

#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

namespace {

void check_plucker_args(const std::string& op, const Tensor& z, const std::vector<std::int32_t>& offsets) {
  check_floating(op, z, "z");
  if (z.dim() != 3) fail(op, "z must be (B, L, r), got " + shape_str(z.shape()));
  if (z.size(2) < 2) fail(op, "rank r must be at least 2 to span a plane, got z " + shape_str(z.shape()));
  if (offsets.empty()) fail(op, "needs at least one offset");
  for (std::int32_t o : offsets)
    if (o < 1) fail(op, "offsets must be >= 1 (pairing with a PAST token), got " + std::to_string(o));
}

}  // namespace

Tensor plucker_pairs(const Tensor& z_in, const std::vector<std::int32_t>& offsets, double eps) {
  check_plucker_args("plucker_pairs", z_in, offsets);
  Tensor z = z_in.contiguous();
  const std::int64_t B = z.size(0), L = z.size(1), r = z.size(2), m = static_cast<std::int64_t>(offsets.size());
  const std::int64_t P = r * (r - 1) / 2;
  Tensor out = Tensor::empty({B, L, m, P}, z.dtype(), z.device());
  Tensor norms = Tensor::empty({B, L, m}, z.dtype(), z.device());
  dispatch_float("plucker_pairs", z, [&](auto tag) {
    using T = decltype(tag);
    if (B * L > 0)
      need("plucker_pairs", table<T>("plucker_pairs", z).plucker_forward, z)(z.data<T>(), B, L, r, offsets.data(), m,
                                                                              static_cast<T>(eps), out.data<T>(), norms.data<T>());
  });
  return record_op(out, "plucker_pairs", {z_in},
                   [sz = saved(z), so = saved(out), norms, offsets, eps](const Tensor& g_in) -> std::vector<Tensor> {
                     Tensor g = g_in.contiguous();
                     Tensor gz = Tensor::empty(sz.shape(), sz.dtype(), sz.device());
                     const std::int64_t B = sz.size(0), L = sz.size(1), r = sz.size(2);
                     dispatch_float("plucker_pairs", sz, [&](auto tag) {
                       using T = decltype(tag);
                       if (B * L > 0)
                         need("plucker_pairs", table<T>("plucker_pairs", sz).plucker_backward, sz)(
                             sz.data<T>(), B, L, r, offsets.data(), static_cast<std::int64_t>(offsets.size()), static_cast<T>(eps),
                             so.data<T>(), norms.data<T>(), g.data<T>(), gz.data<T>());
                     });
                     return {gz};
                   });
}

Tensor plucker_mean(const Tensor& z_in, const std::vector<std::int32_t>& offsets, double eps) {
  check_plucker_args("plucker_mean", z_in, offsets);
  Tensor z = z_in.contiguous();
  const std::int64_t B = z.size(0), L = z.size(1), r = z.size(2), m = static_cast<std::int64_t>(offsets.size());
  const std::int64_t P = r * (r - 1) / 2;
  Tensor out = Tensor::empty({B, L, P}, z.dtype(), z.device());
  Tensor norms = Tensor::empty({B, L, m}, z.dtype(), z.device());
  dispatch_float("plucker_mean", z, [&](auto tag) {
    using T = decltype(tag);
    if (B * L > 0)
      need("plucker_mean", table<T>("plucker_mean", z).plucker_mean_forward, z)(z.data<T>(), B, L, r, offsets.data(), m,
                                                                                static_cast<T>(eps), out.data<T>(), norms.data<T>());
  });
  return record_op(out, "plucker_mean", {z_in},
                   [sz = saved(z), norms, offsets, eps](const Tensor& g_in) -> std::vector<Tensor> {
                     Tensor g = g_in.contiguous();
                     Tensor gz = Tensor::empty(sz.shape(), sz.dtype(), sz.device());
                     const std::int64_t B = sz.size(0), L = sz.size(1), r = sz.size(2);
                     dispatch_float("plucker_mean", sz, [&](auto tag) {
                       using T = decltype(tag);
                       if (B * L > 0)
                         need("plucker_mean", table<T>("plucker_mean", sz).plucker_mean_backward, sz)(
                             sz.data<T>(), B, L, r, offsets.data(), static_cast<std::int64_t>(offsets.size()), static_cast<T>(eps),
                             norms.data<T>(), g.data<T>(), gz.data<T>());
                     });
                     return {gz};
                   });
}

}  // namespace wedge::ops
