// The differentiable operators: the public op API, declared once.
//
// Every op here checks its arguments at the boundary (messages name the op and the
// shapes), calls its kernel through the one dispatch point kernels::kernel_table<T>()
// for the device its inputs live on, and records its backward (engine/autograd.h) when an
// input requires a gradient. Each op's forward and backward sit side by side in one file
// of ops/; the list of ops is ops/registry.def.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/kernel_table.h"
#include "engine/tensor.h"

namespace wedge::ops {

// ---- linear algebra ----------------------------------------------------------------
// a (m, k) or (..., m, k); b (k, n) or (..., k, n) with the same leading dims as a
// (or b 2-D, shared across a's batch). Result (..., m, n).
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, W, b)) as one fused op: the GEMM's epilogue adds the bias and applies
// GELU (the exact erf form) while the output tile is in cache; backward forms gelu' and the
// bias gradient in one pass.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Floating-point operations of every GEMM that matmul and linear (and their backward) have
// run in this process, on any thread and device: 2 m n k per product (a multiply and an
// add). A training loop reads it before and after a step to report achieved GFLOP/s.
std::uint64_t matmul_flops();

// ---- element-wise (broadcasting, numpy rules) ---------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double c);
Tensor mul_scalar(const Tensor& x, double c);
Tensor pow_scalar(const Tensor& x, double c);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact erf form: x * Phi(x)
Tensor silu(const Tensor& x);  // x * sigmoid(x), the gate of the selective SSM
// log(1 + e^x), computed without overflow for any x (the SSM's step size is softplus(.)).
Tensor softplus(const Tensor& x);

// ---- reductions ------------------------------------------------------------------------
Tensor sum(const Tensor& x);  // all elements -> shape ()
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor max(const Tensor& x, int dim, bool keepdim = false);
// The int32 index of the maximum along dim (negative dims count from the end), that axis
// removed from the shape. Ties go to the first index; a NaN counts as larger than every
// number, so a slice holding one gives the index of its first NaN (as torch.argmax). Not
// differentiable: the result never requires a gradient. An empty axis is an error.
Tensor argmax(const Tensor& x, int dim);
// Sums a broadcast gradient back down to `shape` (the adjoint of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- layout ----------------------------------------------------------------------------
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor narrow(const Tensor& x, int dim, std::int64_t start, std::int64_t length);
// The slices of x along dim (each a view without that axis). Their backward runs once for
// all of them, so taking every slice costs one gradient of x's size, not one per slice.
std::vector<Tensor> unbind(const Tensor& x, int dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);
Tensor contiguous(const Tensor& x);
Tensor cat(const std::vector<Tensor>& xs, int dim);
Tensor stack(const std::vector<Tensor>& xs, int dim);

// ---- neural-network ops -------------------------------------------------------------
// table (V, D) float, ids int32 of any shape -> ids.shape + (D).
Tensor embedding(const Tensor& table, const Tensor& ids);
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);
// logits (N, V) (or (..., V), flattened), targets int32 (N) (or (...)). Mean NLL over
// targets != ignore_index; a scalar.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int ignore_index = -100);
// cross_entropy(linear(x, weight), targets, ignore_index) without its logits: the product
// and the loss run in blocks of `block_rows` rows (0: as many as fit 64 MiB of logits), so
// a (rows, V) tensor never exists whole -- the tied head of a language model over a 30,522-
// token vocabulary. When a gradient is wanted, each block's gradients with respect to x
// and weight are formed in the forward (the loss must then be the graph's last node, as a
// training objective is; a sum with other terms is fine) and the backward only scales them.
// The result equals the unfused pair up to the order of the sums.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int ignore_index = -100,
                            std::int64_t block_rows = 0);
// The block size linear_cross_entropy chooses for a vocabulary of `vocab` classes.
std::int64_t linear_cross_entropy_block_rows(std::int64_t vocab, std::int64_t element_bytes);
// Mean of (pred - target)^2 over all elements; a scalar. pred and target of one shape (no
// broadcasting), dtype and device; differentiable in both.
Tensor mse_loss(const Tensor& pred, const Tensor& target);
// Normalises the last axis; gamma/beta (D) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
// Inverted dropout. The mask of element i is philox(seed, offset + i); callers draw
// (seed, offset) from their Generator (engine/rng.h). Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, std::uint64_t seed, std::uint64_t offset);
// A residual connection and the layer norm after it, in one pass: sum = x + dropout(y)
// (the dropout of ops::dropout with p, seed, offset; p == 0 keeps everything) and
// out = layer_norm(sum, gamma, beta, eps), x and y of one shape. Both are differentiable:
// a pre-norm block reads sum as its residual stream, a post-norm block only out. The values
// are those of the three ops apart, bit for bit on the CPU.
struct ResidualNorm {
  Tensor sum, out;
};
ResidualNorm residual_layer_norm(const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& beta, double p,
                                 std::uint64_t seed, std::uint64_t offset, double eps = 1e-5);
// Gated fusion, one pass: sigmoid(a) * x + (1 - sigmoid(a)) * y (a, x, y of one shape).
Tensor gate_mix(const Tensor& a, const Tensor& x, const Tensor& y);
// q, k, v (B, H, L, dh) -> (B, H, L, dh). softmax(q k^T / sqrt(dh) [+ causal mask]) v.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);
// Incremental decoding with a key/value cache: the n newest of a stream's L positions
// against all its keys so far. q (B, H, n, dh); k, v (B, H, L, dh), 1 <= n <= L ->
// (B, H, n, dh). Query i sits at position L - n + i and sees keys 0 .. L - n + i, so the
// result is the last n rows of attention(q_all, k, v, true). k and v may be views of a
// larger cache (narrowed along L) and are read in place. Forward only: throws when autograd
// would record it (grad mode on and an input requiring grad).
Tensor attention_decode(const Tensor& q, const Tensor& k, const Tensor& v);
// z (B, L, r) -> (B, L, m, r(r-1)/2): normalised Plücker coordinates of (z_t, z_{t-Δ_j}),
// zero where t - Δ_j < 0 (PAPERS.md §2, causal pairing with the PAST token).
Tensor plucker_pairs(const Tensor& z, const std::vector<std::int32_t>& offsets, double eps = 1e-8);
// Fused: the mean over the valid offsets of plucker_pairs, (B, L, r(r-1)/2), without ever
// writing the (B, L, m, P) tensor; rows with no valid offset are zero.
Tensor plucker_mean(const Tensor& z, const std::vector<std::int32_t>& offsets, double eps = 1e-8);

// ---- selective scan (SheafStateLM's local dynamics) ----------------------------------
// Mamba's S6 over segments of `segment` tokens, each starting from its own state:
//   dt = softplus(delta + delta_bias),  h = exp(dt A) h + dt B u,  y = C . h + Dskip u,
// A = -exp(A_log). u, delta (batch, L, D); A_log (D, N); B, C (batch, L, N); Dskip and
// delta_bias (D) or undefined; h0 (batch, ceil(L / segment), D, N), the state each
// segment starts from, or undefined for zero states; z (batch, L, D), Mamba's output gate,
// or undefined: y = (C . h + Dskip u) silu(z), the ungated output never written. Returns y
// (batch, L, D). Differentiable in every input, h0 and z included; backward recomputes
// states per segment. With h_last, also the state after each segment's last token,
// (batch, segments, D, N), differentiable: a stream continues from it, and SheafStateLM
// reads each patch's output at its last token from it.
// With step_sums, also each segment's step sizes summed over its tokens, sum_t dt[b, t, d]
// (batch, segments, D), differentiable: the decay exp(A sum dt) a state left at the
// segment's start has at its end.
Tensor selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A_log, const Tensor& B, const Tensor& C,
                      const Tensor& Dskip, const Tensor& delta_bias, const Tensor& h0, std::int64_t segment,
                      const Tensor& z = Tensor(), Tensor* h_last = nullptr, Tensor* step_sums = nullptr);

// ---- the registry --------------------------------------------------------------------
struct OpInfo {
  const char* name;
  bool differentiable;
  const char* summary;
  std::vector<kernels::KernelId> kernels;  // what its forward and backward call
};
const std::vector<OpInfo>& registry();
// Are all of the op's kernels compiled into `device`'s float32 tables? (Whether the device
// is present is kernels::device_usable.)
bool op_has_kernels(const OpInfo& op, DeviceKind device);

}  // namespace wedge::ops

namespace wedge {
// Arithmetic operators, so model code reads like the paper's equations.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& a) { return ops::neg(a); }
inline Tensor operator+(const Tensor& a, double c) { return ops::add_scalar(a, c); }
inline Tensor operator+(double c, const Tensor& a) { return ops::add_scalar(a, c); }
inline Tensor operator-(const Tensor& a, double c) { return ops::add_scalar(a, -c); }
inline Tensor operator-(double c, const Tensor& a) { return ops::add_scalar(ops::neg(a), c); }
inline Tensor operator*(const Tensor& a, double c) { return ops::mul_scalar(a, c); }
inline Tensor operator*(double c, const Tensor& a) { return ops::mul_scalar(a, c); }
inline Tensor operator/(const Tensor& a, double c) { return ops::mul_scalar(a, 1.0 / c); }
}  // namespace wedge
