#!/usr/bin/python3
"""Training-step throughput of wedge and PyTorch side by side, in one run.

A benchmark only: the engine never uses Python. It builds the same models as wedge
(TransformerLM and GrassmannLM, same sizes, tied head, post-LN, exact GELU; GrassmannLM
with the same exact shortcuts wedge takes: offsets averaged before one projection, W_o
folded into W_plü; SheafStateLM scanning each patch once, from the state glued for it, as
wedge does) in PyTorch, times forward + cross-entropy + backward + AdamW on random tokens, runs
`wedge bench-step` with the same configuration right before, and prints both figures
and the ratio.

PyTorch is given its best conditions on this machine: Debian's OpenBLAS forced to its
SkylakeX kernels (it does not recognise this CPU otherwise), 2 threads, and glibc told to
keep freed memory so the big logits buffers are not page-faulted in again every step.
These variables must be set before the libraries load, so the script re-executes itself
with them.

    /usr/bin/python3 bench/compare_pytorch.py                 # small config, both models
    /usr/bin/python3 bench/compare_pytorch.py --paper         # 6-layer paper config (slow)
    /usr/bin/python3 bench/compare_pytorch.py --seq-scaling   # 2 layers, d 128, batch 1, L 256..8192
    /usr/bin/python3 bench/compare_pytorch.py --paper --models sheaf   # SheafStateLM (PyTorch peaks 11-22 GB)
    /usr/bin/python3 bench/compare_pytorch.py --nli --models transformer,grassmann,sheaf   # the SNLI classifier
    /usr/bin/python3 bench/compare_pytorch.py --paper --bf16  # also mixed precision, both engines
    /usr/bin/python3 bench/compare_pytorch.py --generate --models transformer,grassmann,sheaf   # decoding

With --bf16 each model runs four ways in one pass: wedge fp32, wedge --precision bf16, PyTorch
fp32, and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) - its own CPU mixed
precision (oneDNN bf16 GEMMs; fp32 weights and optimizer), PyTorch's best bf16 setting.

With --generate (paper sizes, batch 1 or --batch N, prompts --prompts, --new-tokens steps) the
script decodes token by token: first it checks that PyTorch's incremental loops (torch_decoder:
a key/value cache, a ring of the last max(Δ) z, SheafStateLM's recurrent stream) give the full
forward's logits at every position, then it runs `wedge bench-generate --json` and the PyTorch
loops model by model (PyTorch once with its OpenMP workers spinning and once sleeping, the
faster kept: see generate()) and prints ms per decode step (one new token per sequence), the
ratio PyTorch / wedge, and both prefill rates. --generate --profile prints torch.profiler's
table of PyTorch's decode steps instead.
"""
import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time

ENV = {
    "OPENBLAS_CORETYPE": "SkylakeX",
    "OMP_NUM_THREADS": "2",
    "OPENBLAS_NUM_THREADS": "2",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": "100000000000",
}


# Debian's OpenMP build of OpenBLAS (libopenblas0-openmp): PyTorch's GEMMs then share its
# OpenMP thread pool instead of fighting it with OpenBLAS's own threads.
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def has_avx512():
    """Whether this CPU runs PyTorch's AVX-512 kernels (it needs F, BW, DQ and VL). Debian's
    PyTorch 1.13 has them built in but, on the Xeon this was measured on, picks its AVX2 ones
    unless ATEN_CPU_CAPABILITY says avx512 (which it would obey even on a CPU without them,
    so it is set only when /proc/cpuinfo lists them). With it the paper-size fp32 step ran
    5-8 % faster for TransformerLM, and -3 % / +12 % for GrassmannLM, in two pairs each."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(flags)


def reexec_with_env():
    if os.environ.get("WEDGE_BENCH_CHILD") == "1":
        return
    env = dict(os.environ)
    env.update(ENV)
    env["WEDGE_BENCH_LD_LIBRARY_PATH"] = os.environ.get("LD_LIBRARY_PATH", "")  # wedge's, restored by run_wedge
    if os.path.isdir(OPENMP_BLAS):  # for every PyTorch this script starts, --check-formulations' included
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (OPENMP_BLAS, os.environ.get("LD_LIBRARY_PATH")) if p)
    if has_avx512():
        env.setdefault("ATEN_CPU_CAPABILITY", "avx512")
    env["WEDGE_BENCH_CHILD"] = "1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def patch_scan(torch, u, dt, A, B, C, D, h0, P, final=False):
    """The selective scan of every patch of P tokens at once, from the states h0 (batch,
    patches, E, N), or from zeros: h_k = exp(dt_k A) h_{k-1} + dt_k u_k B_k,
    y_k = C_k . h_k + D u_k. The decays exp(dt A) and inputs dt u B of all positions are
    formed in two ops, and then each position is one addcmul and one batched mat-vec (over
    batch, patches, channels and states) — 2 ops a position where writing the recurrence
    out takes 8, in time and in backward. In fp32 under autocast too, as wedge's scan.
    final: also every patch's state after its last token, (batch, patches, E, N) (the pad
    of a partial last patch has dt = 0, so it leaves the state as its last real token did).
    A sequence of whole patches is not padded (F.pad with nothing to add still copies)."""
    F = torch.nn.functional
    with torch.autocast(u.device.type, enabled=False):
        u, B, C = u.to(A.dtype), B.to(A.dtype), C.to(A.dtype)
        Bt, L, E = u.shape
        nP = -(-L // P)
        pad = nP * P - L

        def patches(x):  # (Bt, L, ...) -> (Bt, nP, P, ...); a view where nothing is padded
            return (F.pad(x, (0, 0, 0, pad)) if pad else x).reshape(Bt, nP, P, x.shape[-1])
        u4, dt4, B4, C4 = patches(u), patches(dt), patches(B), patches(C)
        decay = torch.exp(dt4[..., None] * A)                        # (Bt, nP, P, E, N)
        inject = (dt4 * u4)[..., None] * B4[:, :, :, None, :]
        # unbind, not indexing: its backward assembles the P slices' gradients in one pass
        # (an indexed slice's backward writes a zero tensor of the whole size, P times).
        h, ys = h0, []
        for a_k, b_k, c_k in zip(decay.unbind(2), inject.unbind(2), C4.unbind(2)):
            h = b_k if h is None else torch.addcmul(b_k, a_k, h)
            ys.append(h @ c_k[..., None])                            # (Bt, nP, E, 1)
        y = torch.cat(ys, -1).transpose(-1, -2) + D * u4              # (Bt, nP, P, E)
        y = y.reshape(Bt, nP * P, E)[:, :L]
        return (y, h) if final else y


def patch_scan_reference(torch, u, dt, A, B, C, D, h0, P):
    """The same scan one token at a time, the recurrence as written, for the check."""
    Bt, L, E = u.shape
    h = h0 if h0 is not None else u.new_zeros(Bt, -(-L // P), E, A.shape[1])
    ys = []
    for t in range(L):
        p, k = divmod(t, P)
        if k == 0:
            state = h[:, p]
        state = torch.exp(dt[:, t, :, None] * A) * state + (dt[:, t] * u[:, t])[..., None] * B[:, t, None, :]
        ys.append((state * C[:, t, None, :]).sum(-1) + D * u[:, t])
    return torch.stack(ys, 1)


def add_scan_parameters(torch, module, d, states):
    """Mamba's S6 projections and parameters on `module`, as SheafStateLM and the SheafState
    head have them: W_in (d -> 4d), W_down, W_up, W_B, W_C, A_log, D, dt_bias, W_out."""
    nn = torch.nn
    E, R = 2 * d, (d + 15) // 16
    module.E, module.N, module.R_ = E, states, R
    module.inp = nn.Linear(d, 2 * E, bias=False)
    module.dt_down, module.dt_up = nn.Linear(E, R, bias=False), nn.Linear(R, E, bias=False)
    module.Bp, module.Cp = nn.Linear(E, states, bias=False), nn.Linear(E, states, bias=False)
    module.A_log = nn.Parameter(torch.log(torch.arange(1, states + 1, dtype=torch.float)).repeat(E, 1))
    module.D = nn.Parameter(torch.ones(E))
    module.dt_bias = nn.Parameter(torch.full((E,), -3.0))
    module.out = nn.Linear(E, d, bias=False)


PLUCKER_EPS = 1e-8  # ops::plucker_mean's eps: p̂ = p / max(|p|, eps)


def init_like_wedge(torch, model):
    """wedge's initialisation (models/README.md): every weight Normal(0, 0.02), biases 0,
    LayerNorm γ = 1, β = 0. The step's cost does not depend on it much, but the logits'
    range does (PyTorch's default Normal(0, 1) token table makes them ~50x wider), and so
    how much of the softmax underflows."""
    nn = torch.nn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()


def dropout_module(torch, p):
    """Inverted dropout with its keep mask drawn by uniform_ (24-bit uniforms, so the keep
    probability is 1 - p to within 2^-24), in fp32 also under autocast. PyTorch 1.13's own
    CPU dropout draws its mask with bernoulli_, a serial loop ~2x slower than uniform_ on
    this build, then divides it in a second pass: nn.Dropout costs ~3x this one, and a
    paper-size step has 13 of them. Same distribution, same scaling by 1 / (1 - p)."""

    class Dropout(torch.nn.Module):
        def forward(self, x):
            if not self.training or p == 0:
                return x
            keep = 1.0 - p
            mask = torch.empty(x.shape, device=x.device, dtype=torch.float32).uniform_().lt_(keep)
            return x * mask.mul_(1.0 / keep)
    return Dropout()


def causal_bias(torch, L, device, cache={}):
    """(L, L) additive mask, 0 on and below the diagonal, -inf above: built once per length
    and device, added to the scores inside the same baddbmm that scales them."""
    key = (L, str(device))
    if key not in cache:
        cache[key] = torch.full((L, L), float("-inf"), device=device).triu_(1)
    return cache[key]


def attention(torch, q, k, v, causal):
    """softmax(q k^T / sqrt(dh) [+ causal mask]) v for q, k, v (batch*heads, L, dh): the
    scale and the mask are the baddbmm's alpha and input (one pass over the scores instead
    of a division, a mask build and a masked_fill each call). Under autocast these products
    run in bf16 like every other PyTorch matmul, and the softmax in bf16."""
    L, dh = q.shape[1], q.shape[2]
    if causal:
        s = torch.baddbmm(causal_bias(torch, L, q.device), q, k.transpose(1, 2), alpha=dh ** -0.5)
    else:
        s = torch.bmm(q, k.transpose(1, 2)).mul_(dh ** -0.5)
    return torch.bmm(torch.softmax(s, -1), v)


def pair_index(torch, r, device=None):
    """The pair order of wedge's kernels, (0,1),(0,2),...,(0,r-1),(1,2),...: [i of every
    pair, then j of every pair], for one index_select."""
    iu = torch.triu_indices(r, r, 1, device=device)
    return iu.reshape(-1)


def wedge_pairs(torch, z, w, index):
    """p_ij = z_i w_j - z_j w_i (i < j), the Plücker coordinates of z ∧ w, for z, w
    (..., r). The coordinates are gathered from the transposed (2r, rows) matrix [z w]^T by
    one index_select of whole rows, whose backward adds whole rows (index_add_ along dim 0,
    vectorised); gathering columns of (rows, 2r) instead made its backward add one strided
    column at a time, ~8x slower (11 % of a paper-size GrassmannLM step), and four
    fancy-indexing gathers are slower still. The result is a transposed view of the
    (pairs, rows) product, which the projection's GEMM reads as it is."""
    r = z.shape[-1]
    P = index.numel() // 2
    zw = torch.cat([z, w], -1).reshape(-1, 2 * r).t().contiguous()              # (2r, rows)
    ii, jj = index[:P], index[P:]
    x = zw.index_select(0, torch.cat([ii, jj + r, jj, ii + r])).view(4, P, -1)
    return (x[0] * x[1] - x[2] * x[3]).t().view(*z.shape[:-1], P)


def offset_counts(torch, L, offsets, device, cache={}):
    """(L,) the number of valid offsets of each position (t - Δ >= 0), in float."""
    key = (L, tuple(offsets), str(device))
    if key not in cache:
        t = torch.arange(L, device=device)
        cache[key] = sum((t >= o).float() for o in offsets) if offsets else torch.zeros(L, device=device)
    return cache[key]


def plucker_mean(torch, z, offsets, eps=PLUCKER_EPS, pairs=wedge_pairs):
    """The mean over the valid offsets of the normalised Plücker vectors p̂(z_t, z_{t-Δ}),
    (B, L, r(r-1)/2), 0 where no offset is valid — by the two exact shortcuts wedge's
    kernel takes (kernels/cpu/plucker_simd.cpp):
      * z_t is the first vector of every pair at t, so the mean is z_t ∧ w_t with
        w_t = Σ_Δ z_{t-Δ} / (n_Δ |valid_t|): one Plücker vector per position, not one per
        offset, and the (B, L, offsets, pairs) tensor is never formed;
      * n_Δ = max(|z_t ∧ z_{t-Δ}|, eps) from Lagrange's identity
        |u ∧ v|^2 = |u|^2 |v|^2 - (u.v)^2, in float64 (r-long dot products, not pairs-long
        sums; float64 so that the subtraction does not cancel for nearly parallel pairs).
    sqrt(max(x, eps^2)) is max(sqrt(x), eps) with the same gradient (0 where clamped, as
    wedge's backward treats n <= eps), and never the infinite slope of sqrt at 0."""
    F = torch.nn.functional
    B, L, r = z.shape
    offsets = [o for o in offsets if o < L]
    if not offsets:
        return z.new_zeros(B, L, r * (r - 1) // 2)
    m, first = len(offsets), max(offsets)
    # Every offset's partner rows z_{t-Δ} at once, (B, m, L, r), zero rows where t - Δ < 0
    # (a zero partner adds exactly 0 below): one index_select of z padded in front.
    zd = z.double()
    partner = F.pad(zd, (0, 0, first, 0)).index_select(1, shifted_rows(torch, L, offsets, z.device)).view(B, m, L, r)
    inv_count = 1.0 / offset_counts(torch, L, offsets, z.device).clamp_min(1).double()
    w = partner_mean(zd, partner, inv_count, eps).to(z.dtype)              # (B, L, r)
    return pairs(torch, z, w, pair_index(torch, r, z.device))


def partner_mean(zd, partner, inv_count, eps=PLUCKER_EPS):
    """plucker_mean's w_t = Σ_Δ z_{t-Δ} / (n_Δ |valid_t|) in float64, from zd (B, L, r), its
    partners (B, m, L, r) (zero rows where t - Δ < 0) and inv_count 1 / |valid_t|, (L,)."""
    uu, vv = (zd * zd).sum(-1)[:, None], (partner * partner).sum(-1)       # (B, 1, L), (B, m, L)
    uv = (zd[:, None] * partner).sum(-1)
    n = (uu * vv - uv * uv).clamp_min(eps * eps).sqrt()
    return ((inv_count / n)[..., None] * partner).sum(1)


def shifted_rows(torch, L, offsets, device, cache={}):
    """Row t - Δ + max Δ of the front-padded sequence for every (Δ, t), flattened."""
    key = (L, tuple(offsets), str(device))
    if key not in cache:
        t = torch.arange(L, device=device)
        cache[key] = torch.cat([t - o + max(offsets) for o in offsets])
    return cache[key]


def gate_mix(torch, gate, h, g):
    """α h + (1 - α) g with α = σ(W_gate [h; g] + b_gate): the gate as two GEMMs on the
    halves of W_gate (W_h h + W_g g + b, no concatenated (B, L, 2d) copy; ~1.3x faster in
    fp32 here, the same under autocast), and the convex combination as one lerp."""
    F = torch.nn.functional
    d, g = h.shape[-1], g.to(h.dtype)
    a = torch.sigmoid(F.linear(h, gate.weight[:, :d]) + F.linear(g, gate.weight[:, d:], gate.bias))
    return torch.lerp(g, h, a.to(h.dtype))


def torch_models(torch):
    nn = torch.nn
    F = torch.nn.functional

    class FFN(nn.Module):
        def __init__(self, d, dff):
            super().__init__()
            self.w1, self.w2 = nn.Linear(d, dff), nn.Linear(dff, d)

        def forward(self, h):
            return self.w2(F.gelu(self.w1(h)))

    class Attn(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h = heads
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x, keep=None):
            B, L, d = x.shape
            H, dh = self.h, d // self.h
            q, k, v = self.qkv(x).view(B, L, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, B * H, L, dh).unbind(0)
            if keep is not None:  # a decoder's cache: the keys and values, (B, H, L, dh)
                keep.append((k.view(B, H, L, dh), v.view(B, H, L, dh)))
            o = attention(torch, q, k, v, causal=True)
            return self.out(o.view(B, H, L, dh).transpose(1, 2).reshape(B, L, d))

    class Mix(nn.Module):
        """Causal Grassmann mixing as wedge computes it (models/grassmann.h): z = W_red h,
        p̄ = plucker_mean(z) by wedge's exact shortcuts, g = W_o (W_plü p̄ + b_plü) + b_o
        with W_o folded into W_plü (both maps are linear) and g = 0 where no offset is valid;
        g is dropped before the gate sees it (models/grassmann.cpp: the gate reads the dropped
        g), α = σ(W_gate [h; Dropout(g)]), output α h + (1 - α) Dropout(g) (gate_mix). Under
        autocast the Plücker part runs in fp32 (as wedge's does), the products in bf16.

        literal=True is the paper code's form, shown only as an extra, labelled row: the
        normalised Plücker vector of every offset, projected by W_plü, the projections
        averaged over the valid offsets, then W_o — every offset's pairs from the pair
        coordinates gathered once and shifted, in one (batch, offsets, L, pairs) tensor."""

        def __init__(self, d, r, windows, literal=False):
            super().__init__()
            self.windows, self.literal = list(windows), literal
            self.red = nn.Linear(d, r)
            self.register_buffer("pairs", pair_index(torch, r), persistent=False)
            self.plu = nn.Linear(r * (r - 1) // 2, d)
            self.out = nn.Linear(d, d)
            self.gate = nn.Linear(2 * d, d)

        def literal_mean_projection(self, z, offsets):
            B, L, r = z.shape
            P = self.pairs.numel() // 2
            zi, zj = z.index_select(-1, self.pairs[:P]), z.index_select(-1, self.pairs[P:])
            si = torch.stack([F.pad(zi[:, :L - o], (0, 0, o, 0)) for o in offsets], 1)  # (B, m, L, P)
            sj = torch.stack([F.pad(zj[:, :L - o], (0, 0, o, 0)) for o in offsets], 1)
            p = zi[:, None] * sj - zj[:, None] * si
            p = p / p.norm(dim=-1, keepdim=True).clamp_min(PLUCKER_EPS)
            t = torch.arange(L, device=z.device)
            valid = torch.stack([(t >= o) for o in offsets]).to(z.dtype)[:, :, None]   # (m, L, 1)
            y = (self.plu(p) * valid).sum(1)  # every offset projected (with b_plü), the invalid ones dropped
            return y / offset_counts(torch, L, offsets, z.device).clamp_min(1)[:, None]

        def folded(self):
            """W_o W_plü and W_o b_plü + b_o: the two linear maps as one."""
            return self.out.weight @ self.plu.weight, self.out.weight @ self.plu.bias + self.out.bias

        def forward(self, h, drop, keep=None):
            B, L, d = h.shape
            offsets = [o for o in self.windows if o < L]
            z = self.red(h).to(h.dtype)  # fp32 under autocast (the Plücker part as wedge's), else h's
            if keep is not None:  # a decoder's ring of partners
                keep.append(z)
            valid = (offset_counts(torch, L, offsets, h.device) > 0).to(h.dtype)[:, None]   # (L, 1)
            if self.literal:
                g = self.out(self.literal_mean_projection(z, offsets)) * valid
            else:
                g = F.linear(plucker_mean(torch, z, offsets), *self.folded()) * valid
            return gate_mix(torch, self.gate, h, drop(g))

    class Sheaf(nn.Module):
        """SheafStateLM's block as wedge computes it (models/sheaf.cpp), pre-LN: the patches in
        order, each scanned once (patch_scan on that patch's tokens: a loop over its positions,
        vectorised over batch, channels and states) from its glued state h0_p = (W_hx c_p) ⊗
        (W_hb c_p), c_p glued from the restricted summaries of its cover; the patch's summary
        from its ungated output at its last token, C · h + D u, from the state its scan ends
        in; top-1 patch-type experts routed by the section.

        two_scans=True is the form wedge had before, kept for --check-formulations: one
        zero-state scan of every patch at once, the chain over patches adding each glued
        state's term at the patch's last token by linearity (exp(A Σ dt) h0_p), then a second
        scan of every patch from its glued state. Its scan ops each cover every patch (8 at
        128 tokens: 1/8 as many ops), but it scans every token twice; --check-formulations
        times both, and the per-patch form, the default, is the faster in PyTorch as well."""

        def __init__(self, d, patch=16, depth=4, types=4, states=16, ds=64, dff=160, two_scans=False):
            super().__init__()
            add_scan_parameters(torch, self, d, states)
            E = self.E
            self.P, self.depth, self.K, self.ds, self.two_scans = patch, depth, types, ds, two_scans
            self.summary, self.patch_type = nn.Linear(E, ds), nn.Linear(ds, types)
            self.R = nn.Parameter(torch.eye(ds).repeat(depth, types, 1, 1) + 0.02 * torch.randn(depth, types, ds, ds))
            self.query = nn.Linear(ds, ds, bias=False)
            self.sx, self.sb = nn.Linear(ds, E, bias=False), nn.Linear(ds, states, bias=False)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.router = nn.Linear(ds, types)
            self.experts = nn.ModuleList([FFN(d, dff) for _ in range(types)])

        def scan(self, u, dt, A, B, C, h0, final=False):
            return patch_scan(torch, u, dt, A, B, C, self.D, h0, self.P, final)

        def restrict(self, s):
            """Σ_k π_k R[j, k] s for every cover distance j, (Bt, depth, ds), π = softmax(W_type s)."""
            pi = torch.softmax(self.patch_type(s), -1)
            bank = self.R.reshape(self.depth * self.K * self.ds, self.ds)
            return (F.linear(s, bank).view(s.shape[0], self.depth, self.K, self.ds) * pi[:, None, :, None]).sum(2)

        def summarise(self, y_last):
            """s_p = LayerNorm(W_s y_last + b_s), no affine."""
            return F.layer_norm(self.summary(y_last), (self.ds,))

        def glue(self, cover, anchor):
            """The cover's restricted summaries r (Bt, m, ds), their weights a (Bt, m) and the
            section c = Σ a r, a = softmax(r . W_query anchor / sqrt(ds))."""
            r = torch.stack(cover, 1)
            a = torch.softmax((r * self.query(anchor)[:, None]).sum(-1) / self.ds ** 0.5, 1)
            return r, a, (r * a[..., None]).sum(1)

        def section(self, p, restricted, summaries, energies, zeros):
            """Patch p's section c_p, glued from the patches p - 2^j of its cover (zeros where
            it has none); appends its normalised gluing energy to energies."""
            cover = [restricted[p - (1 << j)][:, j] for j in range(self.depth) if p - (1 << j) >= 0]
            if not cover:
                return zeros
            r, a, c = self.glue(cover, summaries[p - 1])
            spread = (a * ((r - c[:, None]) ** 2).sum(-1)).sum(1)
            energies.append(spread / ((a * (r * r).sum(-1)).sum(1) + 1e-6))
            return c

        def chain_per_patch(self, u, dt, A, B, C, summarise_all):
            """wedge's form: patch by patch, glue c_p, scan the patch's tokens once from h0_p,
            summarise it from the state its scan ends in. The per-token tensors are cut into
            patches once (split: its backward joins the pieces' gradients in one cat).
            summarise_all: also the last patch's summary, if it is complete (a decoder's)."""
            Bt, L, E = u.shape
            P, nP = self.P, -(-L // self.P)
            zeros = A.new_zeros(Bt, self.ds)  # the parameters' dtype: fp32 under autocast, as glued sections
            restricted, summaries, sections, energies, ys = [], [], [], [], []
            for p, (u_p, dt_p, B_p, C_p) in enumerate(zip(*(x.split(P, 1) for x in (u, dt, B, C)))):
                c = self.section(p, restricted, summaries, energies, zeros)
                h0 = (self.sx(c)[:, :, None] * self.sb(c)[:, None, :])[:, None]             # (Bt, 1, E, N)
                y_p, state = patch_scan(torch, u_p, dt_p, A, B_p, C_p, self.D, h0, u_p.shape[1], final=True)
                state = state[:, 0]                                                         # (Bt, E, N)
                ys.append(y_p)
                sections.append(c)
                if p + 1 < nP or (summarise_all and u_p.shape[1] == P):
                    y_last = (state @ C_p[:, -1, :, None])[..., 0] + self.D * u_p[:, -1]   # ungated, (Bt, E)
                    summaries.append(self.summarise(y_last))
                    restricted.append(self.restrict(summaries[-1]))
            return torch.cat(ys, 1) if nP > 1 else ys[0], state, sections, summaries, restricted, energies

        def chain_two_scans(self, u, dt, A, B, C):
            """The two-scan form: a zero-state scan of every patch at once, the chain adding
            each h0_p's term at the patch's last token by linearity (C there folded into the
            chain's (Bt, N) factor, as wedge did), a second scan from the glued states."""
            Bt, L, E = u.shape
            P, nP = self.P, -(-L // self.P)
            y0 = self.scan(u, dt, A, B, C, None)
            last = torch.clamp(torch.arange(1, nP + 1, device=u.device) * P, max=L) - 1
            S = F.pad(dt, (0, 0, 0, nP * P - L)).view(Bt, nP, P, E).sum(2)
            reach, C_last = torch.exp(S[..., None] * A), C[:, last]  # (Bt, nP, E, N), (Bt, nP, N)
            zeros = A.new_zeros(Bt, self.ds)  # the parameters' dtype: fp32 under autocast, as glued sections
            restricted, summaries, hx, hb, sections, energies = [], [], [], [], [], []
            for p in range(nP):
                c = self.section(p, restricted, summaries, energies, zeros)
                hx.append(self.sx(c))
                hb.append(self.sb(c))
                y_last = y0[:, last[p]] + hx[-1] * (reach[:, p] * (C_last[:, p] * hb[-1])[:, None]).sum(-1)
                summaries.append(self.summarise(y_last))
                restricted.append(self.restrict(summaries[-1]))
                sections.append(c)
            h0 = torch.stack(hx, 1)[..., None] * torch.stack(hb, 1)[:, :, None, :]
            y, states = self.scan(u, dt, A, B, C, h0, final=True)
            return y, states[:, -1], sections, summaries, restricted, energies

        def run_experts(self, xn, groups, run=lambda expert, x: expert(x)):
            """Expert k on rows `rows` of xn (rows None: all of them) for each (k, rows) of groups."""
            if len(groups) == 1 and groups[0][1] is None:
                return run(self.experts[groups[0][0]], xn)
            out = torch.zeros_like(xn)
            for k, rows in groups:
                out = out.index_add(0, rows, run(self.experts[k], xn.index_select(0, rows)).to(out.dtype))
            return out

        def forward(self, h_in, drop, keep=None):
            Bt, L, d = h_in.shape
            E, P, K = self.E, self.P, self.K
            x, z = self.inp(self.n1(h_in)).split(E, -1)
            u = F.silu(x)
            dt = F.softplus(self.dt_up(self.dt_down(u)) + self.dt_bias)
            A = -torch.exp(self.A_log)
            B, C = self.Bp(u), self.Cp(u)
            if self.two_scans:
                y, state, sections, summaries, restricted, energies = self.chain_two_scans(u, dt, A, B, C)
            else:
                y, state, sections, summaries, restricted, energies = self.chain_per_patch(
                    u, dt, A, B, C, keep is not None)
            if keep is not None:  # a decoder's stream: what models/sheaf.cpp's forward_stream keeps
                done = L // P     # completed patches; a partial last one's summary is not one yet
                keep.append({"state": state, "section": sections[-1],
                             "summary": summaries[done - 1] if done else None,
                             "restricted": restricted[:done][-(1 << (self.depth - 1)):]})
            h = h_in + drop(self.out(y * F.silu(z)))
            probs = torch.softmax(self.router(torch.stack(sections, 1)), -1)  # (Bt, nP, K)
            gate, expert = probs.max(-1)
            token_patch = torch.arange(L, device=h_in.device) // P
            tok_expert = expert[:, token_patch].reshape(-1)
            tok_gate = gate[:, token_patch].reshape(-1, 1)
            xn = self.n2(h).reshape(-1, d)
            groups = [(k, rows) for k, rows in ((k, (tok_expert == k).nonzero().squeeze(1)) for k in range(K))
                      if rows.numel()]
            out = self.run_experts(xn, groups)
            balance = K * (probs.reshape(-1, K).mean(0) *
                           torch.bincount(expert.reshape(-1), minlength=K).float() / expert.numel()).sum()
            energy = torch.stack(energies, 1).mean() if energies else torch.zeros(())
            return h + drop((out * tok_gate).view(Bt, L, d)), balance, energy

    class LM(nn.Module):
        def __init__(self, kind, V, layers, d, dff, heads, block, r, windows):
            super().__init__()
            self.kind = kind
            self.tok, self.pos = nn.Embedding(V, d), nn.Embedding(block, d)
            if kind == "sheaf":
                self.mix = nn.ModuleList([Sheaf(d) for _ in range(layers)])
                self.final = nn.LayerNorm(d)
            else:
                self.mix = nn.ModuleList([Attn(d, heads) if kind == "transformer" else
                                          Mix(d, r, windows, literal=kind == "grassmann-literal") for _ in range(layers)])
            if kind != "sheaf":
                self.ffn = nn.ModuleList([FFN(d, dff) for _ in range(layers)])
                self.n1 = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
                self.n2 = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
            self.drop = dropout_module(torch, 0.1)

        def hidden(self, x, keep=None):
            """The last block's output and SheafStateLM's auxiliary loss (0 for the others);
            with `keep`, every layer appends to it the state a decoder goes on from."""
            L = x.shape[1]
            h = self.drop(self.tok(x) + self.pos.weight[:L])  # P[0:L]: a slice, not a lookup
            aux = 0.0
            if self.kind == "sheaf":
                for block in self.mix:  # balance and normalised gluing energy, weights 0.01
                    h, balance, energy = block(h, self.drop, keep)
                    aux = aux + 0.01 * (balance + energy) / len(self.mix)
                return h, aux
            for mix, ffn, n1, n2 in zip(self.mix, self.ffn, self.n1, self.n2):
                if self.kind == "transformer":
                    h = n1(h + self.drop(mix(h, keep)))
                else:
                    h = n1(mix(h, self.drop, keep))
                h = n2(h + self.drop(ffn(h)))
            return h, aux

        def head(self, h):
            """The tied head (after SheafStateLM's final LayerNorm). One row, a decoder's with
            batch 1, is a matrix-vector product: torch.mv is OpenBLAS's sgemv, ~1 ms faster
            a token here than F.linear's one-row GEMM (the layers' one-row products gain
            nothing from it)."""
            x = self.final(h) if self.kind == "sheaf" else h
            if x.dim() == 2 and x.shape[0] == 1:
                return torch.mv(self.tok.weight, x[0])[None]
            return F.linear(x, self.tok.weight)

        def forward(self, x):
            h, aux = self.hidden(x)
            return (self.head(h), aux) if self.kind == "sheaf" else self.head(h)

    LM.Sheaf = Sheaf  # the block alone, at other sizes, for --check-formulations
    return LM


NLI_PREMISE, NLI_HYPOTHESIS = 24, 16  # the pair sizes of `wedge bench-step --task nli`


def torch_nli(torch):
    """The sentence-pair classifier of models/nli.h: token + position + segment embeddings, two
    blocks of the head, per-part mean pooling, [u; v; |u - v|; u * v] -> 3 classes. The
    Transformer head's attention is softmax(q k^T / sqrt(dh)) v as batched matmuls (this
    PyTorch has no fused attention; at 40 tokens the scores are tiny); the Grassmann head
    pairs every token with every other token of its window, both directions (the pairs
    wedge takes), by the same shortcuts as plucker_mean: p̄_t = z_t ∧ w_t with
    w_t = Σ_s z_s / (n_ts (W - 1)), the norms n_ts from the window's Gram matrix (Lagrange's
    identity, in float64), the diagonal s = t (z_t ∧ z_t = 0) left out exactly."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, head, d, heads, dff, d_proj, mixing_heads, window, drop):
            super().__init__()
            self.head, self.heads, self.mixing_heads, self.window = head, heads, mixing_heads, window
            if head == "transformer":
                self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            else:
                r = d_proj // mixing_heads
                self.reduce = nn.Linear(d, d_proj)
                self.plucker = nn.Linear(mixing_heads * r * (r - 1) // 2, d)
                self.gate = nn.Linear(2 * d, d)
                self.register_buffer("pairs", pair_index(torch, r), persistent=False)
                self.register_buffer("off_diagonal", 1 - torch.eye(window, dtype=torch.float64), persistent=False)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.w1, self.w2 = nn.Linear(d, dff), nn.Linear(dff, d)
            self.drop = dropout_module(torch, drop)

        def mix(self, h):
            B, T, d = h.shape
            if self.head == "transformer":
                H, dh = self.heads, d // self.heads
                q, k, v = self.qkv(h).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, B * H, T, dh).unbind(0)
                a = attention(torch, q, k, v, causal=False).view(B, H, T, dh)
                return self.n1(h + self.drop(self.out(a.transpose(1, 2).reshape(B, T, d))))
            W, H = self.window, self.mixing_heads
            n, r = T // W, self.reduce.out_features // H
            z = self.reduce(h).to(h.dtype).view(B, n, W, H, r).transpose(2, 3).reshape(-1, W, r)  # windows of W tokens
            zd = z.double()
            G = zd @ zd.transpose(1, 2)                                             # (B n H, W, W)
            sq = G.diagonal(dim1=1, dim2=2)
            norms = (sq[:, :, None] * sq[:, None, :] - G * G).clamp_min(PLUCKER_EPS ** 2).sqrt()
            c = (self.off_diagonal / ((W - 1) * norms)).to(z.dtype)                 # 0 at s = t
            with torch.autocast(h.device.type, enabled=False):                      # the pairs in fp32, as wedge
                p = wedge_pairs(torch, z, c @ z, self.pairs)                        # (B n H, W, pairs)
            g = self.plucker(p.view(B, n, H, W, -1).transpose(2, 3).reshape(B, T, -1))
            return self.n1(gate_mix(torch, self.gate, h, self.drop(g)))

        def forward(self, h):
            h = self.mix(h)
            return self.n2(h + self.drop(self.w2(F.gelu(self.w1(h)))))

    class PairSheaf(nn.Module):
        """The SheafState head's block (models/nli.h), pre-LN: zero-state scans of patches of
        8, summaries at each patch's last token (every token is real here), the two-sided
        cover p ± 1, ± 2, ± 4 glued in one round, the second scan from h0; W_down, W_B, W_C
        in one GEMM, as wedge does."""

        def __init__(self, d, dff, drop, patch=8, depth=3, types=4, states=16, ds=64):
            super().__init__()
            add_scan_parameters(torch, self, d, states)
            E = self.E
            self.P, self.depth, self.K, self.ds = patch, depth, types, ds
            self.summary, self.patch_type = nn.Linear(E, ds), nn.Linear(ds, types)
            self.bank = nn.Parameter(torch.eye(ds).repeat(2 * depth, types, 1, 1) + 0.02 * torch.randn(2 * depth, types, ds, ds))
            self.query = nn.Linear(ds, ds, bias=False)
            self.sx, self.sb = nn.Linear(ds, E, bias=False), nn.Linear(ds, states, bias=False)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.w1, self.w2 = nn.Linear(d, dff), nn.Linear(dff, d)
            self.drop = dropout_module(torch, drop)

        def mix(self, h):
            Bt, L, d = h.shape
            E, P, ds, K, N, R = self.E, self.P, self.ds, self.K, self.N, self.R_
            nP = -(-L // P)
            x, z = self.inp(h).split(E, -1)
            u = F.silu(x)
            proj = F.linear(u, torch.cat([self.dt_down.weight, self.Bp.weight, self.Cp.weight]))
            dt = F.softplus(self.dt_up(proj[..., :R]) + self.dt_bias)
            B, C, A = proj[..., R:R + N], proj[..., R + N:], -torch.exp(self.A_log)
            y0 = patch_scan(torch, u, dt, A, B, C, self.D, None, P)
            last = torch.clamp(torch.arange(1, nP + 1) * P, max=L) - 1
            s = F.layer_norm(self.summary(y0[:, last]), (ds,))                         # (Bt, nP, ds)
            pi = torch.softmax(self.patch_type(s), -1)
            slots = 2 * self.depth
            r_all = (F.linear(s, self.bank.reshape(slots * K * ds, ds)).view(Bt, nP, slots, K, ds) *
                     pi[:, :, None, :, None]).sum(3)                                      # (Bt, nP, 2D, ds)
            offsets = torch.tensor([-(1 << j) for j in range(self.depth)] + [1 << j for j in range(self.depth)])
            q = torch.arange(nP)[:, None] + offsets[None, :]                              # (nP, 2D)
            valid = (q >= 0) & (q < nP)
            cover = r_all[:, q.clamp(0, nP - 1), torch.arange(slots)[None, :].expand(nP, slots)]  # (Bt, nP, 2D, ds)
            scores = (cover * self.query(s)[:, :, None]).sum(-1) / ds ** 0.5
            a = torch.softmax(scores.masked_fill(~valid, -1e9), -1)
            c = (cover * a[..., None]).sum(2) * valid.any(1)[None, :, None]
            h0 = self.sx(c)[..., None] * self.sb(c)[:, :, None, :]
            y = patch_scan(torch, u, dt, A, B, C, self.D, h0, P)
            return self.out(y * F.silu(z))

        def forward(self, h):
            h = h + self.drop(self.mix(self.n1(h)))
            return h + self.drop(self.w2(F.gelu(self.w1(self.n2(h)))))

    class Nli(nn.Module):
        def __init__(self, head, vocab, d=256, layers=2, heads=4, dff=512, d_proj=64, mixing_heads=4, window=8, drop=0.1):
            super().__init__()
            self.tok, self.pos, self.seg = nn.Embedding(vocab, d), nn.Embedding(95, d), nn.Embedding(2, d)
            if head == "sheaf":
                self.blocks = nn.ModuleList(PairSheaf(d, dff, drop) for _ in range(layers))
            else:
                self.blocks = nn.ModuleList(Block(head, d, heads, dff, d_proj, mixing_heads, window, drop)
                                            for _ in range(layers))
            self.final = nn.LayerNorm(d) if head == "sheaf" else nn.Identity()
            self.hidden, self.output, self.drop = nn.Linear(4 * d, d), nn.Linear(d, 3), dropout_module(torch, drop)

        def forward(self, ids, segments):
            T = ids.shape[1]
            h = self.drop(self.tok(ids) + self.pos(torch.arange(T, device=ids.device)) + self.seg(segments))
            for b in self.blocks:
                h = b(h)
            h = self.final(h)
            u, v = h[:, :NLI_PREMISE].mean(1), h[:, NLI_PREMISE:].mean(1)
            return self.output(self.drop(F.gelu(self.hidden(torch.cat([u, v, (u - v).abs(), u * v], -1)))))

    return Nli


def train_step(torch, model, opt, forward, autocast_device, bf16):
    """One step: forward and loss under autocast when bf16 (PyTorch's documented mixed
    precision: its bf16 ops in bf16, the rest, cross-entropy included, in fp32), backward
    outside it, clipping to 1.0, AdamW."""
    with torch.autocast(autocast_device, dtype=torch.bfloat16, enabled=bf16):
        loss = forward()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def setup_torch(torch):
    torch.set_num_threads(2)
    # Without this, a few AdamW steps in, denormal floats make a paper-size step ~5x slower.
    # (OpenMP's workers are started later, by the first parallel op, and inherit it.)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)


def timed_steps(step, steps, warmup, sync):
    """The median time of `steps` steps, after untimed ones: at least `warmup`, and more (up
    to 8 more) until a step no longer faults in new memory (under 1,000 minor page faults):
    glibc's heap grows over PyTorch's first 2-3 steps before its freed buffers are reused
    in place, and on this VM a first touch costs ~20 us a page (a fresh 0.5 GB logits
    buffer ~2.5 s), so with one warm-up step the median step still paid for growing the
    heap. Returns (median seconds, untimed steps)."""
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    done = 0
    while True:
        f0 = faults()
        step()
        sync()
        done += 1
        if done >= warmup and (faults() - f0 < 1000 or done >= warmup + 8):
            break
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return (times[len(times) // 2] if times else None), done


def torch_nli_step(cfg, batch, device):
    import torch
    setup_torch(torch)
    torch.set_default_tensor_type(torch.cuda.FloatTensor if device == "cuda" else torch.FloatTensor)
    model = torch_nli(torch)(cfg["head"], cfg["vocab"]).to(device)
    init_like_wedge(torch, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    T = NLI_PREMISE + NLI_HYPOTHESIS
    segments = (torch.arange(T, device=device) >= NLI_PREMISE).long().expand(batch, T)

    def step():
        ids = torch.randint(0, cfg["vocab"], (batch, T), device=device)
        labels = torch.randint(0, 3, (batch,), device=device)
        train_step(torch, model, opt, lambda: torch.nn.functional.cross_entropy(model(ids, segments).float(), labels),
                   device, cfg.get("precision") == "bf16")
    return step, T


def torch_lm_step(cfg, batch, device):
    import torch
    setup_torch(torch)
    LM = torch_models(torch)
    torch.set_default_tensor_type(torch.cuda.FloatTensor if device == "cuda" else torch.FloatTensor)
    model = LM(cfg["model"], cfg["vocab"], cfg["layers"], cfg["d"], cfg["dff"], cfg["heads"], cfg["block"], cfg["rank"],
               cfg["windows"]).to(device)
    init_like_wedge(torch, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    V = cfg["vocab"]

    def step():
        x = torch.randint(0, V, (batch, cfg["block"] + 1), device=device)

        def forward():
            logits = model(x[:, :-1])
            aux = 0.0
            if isinstance(logits, tuple):  # SheafStateLM: its balance loss joins the gradient
                logits, aux = logits
            # Cross-entropy in fp32, as wedge's: under autocast the bf16 logits are widened once
            # (autocast would do the same, cross_entropy is on its fp32 list); free in fp32.
            return torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), x[:, 1:].reshape(-1)) + aux
        train_step(torch, model, opt, forward, device, cfg.get("precision") == "bf16")
    return step, cfg["block"]


def device_sync(torch, device):
    """Waits for the device's queued work, so that a step's time is its whole time."""
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def torch_step(cfg, batch, device):
    """One PyTorch training step of the configuration, as a function, and the tokens of one
    sequence (pairs of the NLI task count premise + hypothesis)."""
    return (torch_nli_step if cfg.get("task") == "nli" else torch_lm_step)(cfg, batch, device)


def bench_torch(cfg, batch, steps, warmup, device="cpu"):
    import torch
    step, T = torch_step(cfg, batch, device)
    sync = device_sync(torch, device)
    med, untimed = timed_steps(step, steps, warmup, sync)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"step_ms": med * 1000, "tokens_per_s": batch * T / med, "untimed_steps": untimed, "peak_rss_mb": peak}
    if cfg.get("task") == "nli":
        result["pairs_per_s"] = batch / med
    return result


def profile_torch(cfg, batch, steps, warmup, device="cpu", rows=30):
    """torch.profiler's table of one configuration's PyTorch step, operators by their own
    (self) CPU time, so that the ops where PyTorch spends its step, and any that a better
    formulation would remove, are visible. After the timing's warm-up, `steps` steps are
    recorded one at a time, each after an unrecorded step under the profiler (the profiler's
    own allocations move glibc's heap, so the first step under it page-faults the big
    buffers in again: 1-2 s of fill_ and log-softmax backward that plain steps never pay),
    and the table is the median recorded step's: on this shared machine a single step now
    and then takes 2-3x as long."""
    import torch
    step, _ = torch_step(cfg, batch, device)
    sync = device_sync(torch, device)
    timed_steps(step, 0, warmup, sync)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    recorded, elapsed = [], []

    def ready(prof):
        recorded.append((elapsed[-1], prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows,
                                                                max_name_column_width=44)))
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=steps)
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=ready) as prof:
        for _ in range(2 * steps):
            t0 = time.perf_counter()
            step()
            sync()
            elapsed.append(time.perf_counter() - t0)
            prof.step()
    recorded.sort(key=lambda r: r[0])
    ms, table = recorded[len(recorded) // 2]
    return {"table": f"median recorded step of {len(recorded)}: {ms * 1000:.0f} ms (all: "
                     f"{', '.join(f'{r[0] * 1000:.0f}' for r in recorded)} ms)\n{table}"}


# ---- --generate: token-by-token decoding beside `wedge bench-generate` --------------------


def decode_attention(torch, q, k, v):
    """One query row per sequence and head, q (B, H, 1, dh), against the cached rows k, v
    (B, H, n, dh): softmax(q k^T / sqrt(dh)) v. Two matmuls and a softmax; no mask (every
    cached row is in the past)."""
    s = torch.matmul(q, k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
    return torch.matmul(torch.softmax(s, -1), v)


def row_gelu(torch, x):
    """Exact GELU, x Φ(x) = x erfc(-x / √2) / 2, for a decoder's few rows: ~13 µs a row of
    1,024 where F.gelu takes ~25 µs here (the same values to an ulp); 6-8 % of a decode step."""
    return torch.erfc(x * -0.5 ** 0.5).mul_(x).mul_(0.5)


def expert_groups(torch, expert):
    """Sheaf's run_experts groups for the top-1 experts of a batch's rows, (B,): one group
    of every row (None) when they all chose the same expert."""
    chosen = expert.tolist()
    if len(set(chosen)) == 1:
        return [(chosen[0], None)]
    return [(k, torch.tensor([b for b, e in enumerate(chosen) if e == k], device=expert.device))
            for k in sorted(set(chosen))]


def torch_decoder(torch, model, batch):
    """PyTorch's incremental decoding of a torch_models LM (eval mode, no autograd) for
    `batch` sequences, as wedge's streams (models/README.md, "Streams"): prefill(ids) reads
    a prompt in one parallel call, the model's own forward, whose layers hand over their
    state (`keep`); step(ids (B, 1)) reads one more token per sequence at one position's
    cost. Both return the last position's logits only, (B, vocab): the tied head on one row.
    What each layer keeps:
      * TransformerLM: keys and values in a cache of the whole block, (B, H, block, dh),
        allocated once; the new row is written in place and its query attends to 0..t;
      * GrassmannLM: a ring of the last max(Δ) reduced vectors z; the new z_t is paired with
        the ring's z_{t-Δ} by the full model's partner_mean and wedge_pairs (float64 norms,
        the same eps), then W_o W_plü folded once for the whole run, not once per token;
      * SheafStateLM (models/sheaf.cpp's forward_stream): the current patch's scan state, its
        section and expert route (fixed at the patch's first token, glued from the summaries
        its cover reaches), the latest summary and the last 2^(D-1) patches' restricted
        summaries; at a patch's last token its summary is formed from the ungated
        y = C·h + D u. W_down, W_B and W_C run as one product, as wedge's scan_inputs.
    The tied head on one row is torch.mv (LM.head), GELU row_gelu."""
    F = torch.nn.functional
    blocks = list(model.mix)
    device = model.tok.weight.device

    def ffn_rows(ffn, x):  # an FFN (or expert) module's map, with row_gelu
        return ffn.w2(row_gelu(torch, ffn.w1(x)))

    class Decoder:
        def __init__(self):
            self.t = 0
            self.setup()

        def prefill(self, ids):
            keep = []
            h, _ = model.hidden(ids, keep)
            self.t = ids.shape[1]
            for i, kept in enumerate(keep):
                self.start(i, kept)
            return model.head(h[:, -1])

        def step(self, ids):
            h = model.tok(ids[:, 0]) + model.pos.weight[self.t]  # (B, d): one row per sequence
            for i, block in enumerate(blocks):
                h = self.layer(i, block, h)
            self.t += 1
            return model.head(h)

        def feed_forward(self, i, h):
            return model.n2[i](h + ffn_rows(model.ffn[i], h))

    class Transformer(Decoder):
        def setup(self):
            H, (block, d) = blocks[0].h, model.pos.weight.shape
            self.k = [torch.zeros(batch, H, block, d // H, device=device) for _ in blocks]
            self.v = [torch.zeros(batch, H, block, d // H, device=device) for _ in blocks]

        def start(self, i, kept):
            self.k[i][:, :, :self.t] = kept[0]
            self.v[i][:, :, :self.t] = kept[1]

        def layer(self, i, attn, h):
            B, d = h.shape
            t, H = self.t, attn.h
            q, k, v = attn.qkv(h).view(B, 3, H, 1, d // H).unbind(1)
            self.k[i][:, :, t:t + 1] = k
            self.v[i][:, :, t:t + 1] = v
            o = decode_attention(torch, q, self.k[i][:, :, :t + 1], self.v[i][:, :, :t + 1])
            return self.feed_forward(i, model.n1[i](h + attn.out(o.reshape(B, d))))

    class Grassmann(Decoder):
        def setup(self):
            self.ring = [torch.zeros(batch, max(mix.windows), mix.red.out_features, device=device) for mix in blocks]
            self.folded = [mix.folded() for mix in blocks]
            self.partners = {}

        def start(self, i, z):
            M = self.ring[i].shape[1]
            rows = torch.arange(max(0, self.t - M), self.t, device=device)
            self.ring[i][:, rows % M] = z[:, rows]

        def ring_slots(self, windows, M):
            """The ring slots of z_{t-Δ} for the valid Δ (t - Δ >= 0), and 1 / their number."""
            key = (self.t % M, min(self.t, M))
            if key not in self.partners:
                valid = [o for o in windows if o <= self.t]
                self.partners[key] = (torch.tensor([(self.t - o) % M for o in valid], device=device),
                                      1.0 / max(1, len(valid)))
            return self.partners[key]

        def layer(self, i, mix, h):
            ring = self.ring[i]
            z = mix.red(h)[:, None]                                                  # (B, 1, r)
            slots, inv_count = self.ring_slots(mix.windows, ring.shape[1])
            if slots.numel():
                partner = ring.index_select(1, slots).double()[:, :, None]          # (B, m, 1, r)
                w = partner_mean(z.double(), partner, inv_count).to(z.dtype)
                g = F.linear(wedge_pairs(torch, z, w, mix.pairs)[:, 0], *self.folded[i])
            else:  # no partner yet: g is 0, as the full model's validity mask makes it
                g = torch.zeros_like(h)
            ring[:, self.t % ring.shape[1]] = z[:, 0]  # after reading: this slot held z_{t - M}
            return self.feed_forward(i, model.n1[i](gate_mix(torch, mix.gate, h, g)))

    class Sheaf(Decoder):
        def setup(self):
            self.proj = [torch.cat([b.dt_down.weight, b.Bp.weight, b.Cp.weight]) for b in blocks]
            self.A = [-torch.exp(b.A_log) for b in blocks]
            self.stream = [None] * len(blocks)

        def start(self, i, kept):
            self.stream[i] = dict(kept)
            self.route(blocks[i], self.stream[i])

        def route(self, blk, st):
            """The patch's top-1 expert and its probability, from the section."""
            gate, expert = torch.softmax(blk.router(st["section"]), -1).max(-1)
            st["gate"], st["groups"] = gate[:, None], expert_groups(torch, expert)

        def begin_patch(self, blk, st, B):
            restricted = st["restricted"]
            cover = [restricted[-(1 << j)][:, j] for j in range(blk.depth) if (1 << j) <= len(restricted)]
            c = blk.glue(cover, st["summary"])[2] if cover else torch.zeros(B, blk.ds, device=device)
            st["section"], st["state"] = c, blk.sx(c)[:, :, None] * blk.sb(c)[:, None, :]
            self.route(blk, st)

        def layer(self, i, blk, h):
            st, R, N, offset = self.stream[i], blk.R_, blk.N, self.t % blk.P
            x, z = blk.inp(blk.n1(h)).split(blk.E, -1)
            u = F.silu(x)
            proj = F.linear(u, self.proj[i])
            dt = F.softplus(blk.dt_up(proj[:, :R]) + blk.dt_bias)
            Bv, Cv = proj[:, R:R + N], proj[:, R + N:]
            if offset == 0:
                self.begin_patch(blk, st, h.shape[0])
            st["state"] = torch.addcmul((dt * u)[:, :, None] * Bv[:, None, :], torch.exp(dt[:, :, None] * self.A[i]),
                                        st["state"])
            y = (st["state"] @ Cv[:, :, None])[..., 0] + blk.D * u                  # ungated, (B, E)
            if offset == blk.P - 1:  # the patch is complete: its summary joins the later covers
                st["summary"] = F.layer_norm(blk.summary(y), (blk.ds,))
                st["restricted"] = (st["restricted"] + [blk.restrict(st["summary"])])[-(1 << (blk.depth - 1)):]
            h = h + blk.out(y * F.silu(z))
            return h + blk.run_experts(blk.n2(h), st["groups"], ffn_rows) * st["gate"]

    return {"transformer": Transformer, "grassmann": Grassmann, "sheaf": Sheaf}[model.kind]()


def randomise_for_check(torch, model):
    """Weights of the usual scale 1 / sqrt(fan in), random biases and LayerNorm affines, unit
    token and position rows: every path of the blocks then moves the logits, so a decoder that
    got one wrong cannot pass the check by its being ~0.02 of the rest, as at wedge's init."""
    nn = torch.nn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, m.in_features ** -0.5)
                if m.bias is not None:
                    m.bias.normal_(0.0, 0.1)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 1.0)
            elif isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)


def check_decoders(cfg, batch, steps, warmup, device="cpu"):
    """The decoders' exactness (always run by --generate): for each model of cfg["models"], a
    small random one (fp32, 2 layers, d 32; 160 tokens: SheafStateLM's cover rolls over its
    2^(D-1) patches, GrassmannLM's ring over max Δ) decodes 1 sequence after a prompt of 1
    token and 2 after prompts of 37, and its logits at every position from the prompt's last
    on must equal the full forward's: max |difference| / max |full| <= 1e-4. Returns the lines
    and the verdict."""
    import torch
    setup_torch(torch)
    LM = torch_models(torch)
    lines, ok, L, V = [], True, 160, 64
    for kind in cfg["models"]:
        model = LM(kind, V, 2, 32, 64, 4, L, 8, [1, 2, 4, 8, 12, 16]).to(device).eval()
        randomise_for_check(torch, model)
        ids = torch.randint(0, V, (2, L), device=device)
        with torch.inference_mode():
            full, _ = model.hidden(ids)
            full = model.head(full)
            worst = 0.0
            for prompt, B in ((1, 1), (37, 2)):
                decoder = torch_decoder(torch, model, B)
                rows = [decoder.prefill(ids[:B, :prompt])] + [decoder.step(ids[:B, t:t + 1]) for t in range(prompt, L)]
                diff = (torch.stack(rows, 1) - full[:B, prompt - 1:]).abs().max() / full.abs().max()
                worst = max(worst, diff.item())
        good = worst <= 1e-4
        ok = ok and good
        lines.append(f"exactness {kind:<12} decoder vs full forward, {L} positions, prompts 1 (batch 1), 37 (batch 2): max "
                     f"|difference| / max |logit| {worst:.1e}  {'ok' if good else 'FAIL (limit 1e-4)'}")
    return {"lines": lines, "ok": ok}


def torch_generation(cfg, batch, device):
    """A paper-size model of cfg (wedge's init, eval mode) and its decoder."""
    import torch
    setup_torch(torch)
    LM = torch_models(torch)
    model = LM(cfg["model"], cfg["vocab"], cfg["layers"], cfg["d"], cfg["dff"], cfg["heads"], cfg["block"], cfg["rank"],
               cfg["windows"]).to(device).eval()
    init_like_wedge(torch, model)
    return torch, torch_decoder(torch, model, batch)


def bench_torch_generate(cfg, batch, repeats, warmup, device="cpu"):
    """As `wedge bench-generate`: for each prompt length, `repeats` runs of a random prompt's
    prefill and then cfg["new_tokens"] decode steps of random tokens (greedy picks would cost
    an argmax more, the same for both); the median prefill and the median step. Every step
    returns its logits, (B, vocab)."""
    torch, decoder = torch_generation(cfg, batch, device)
    sync = device_sync(torch, device)
    rows = []
    with torch.inference_mode():
        for prompt in cfg["prompts"]:
            prefill_s, step_ms = [], []
            for _ in range(repeats):
                ids = torch.randint(0, cfg["vocab"], (batch, prompt), device=device)
                nxt = torch.randint(0, cfg["vocab"], (cfg["new_tokens"], batch, 1), device=device)
                t0 = time.perf_counter()
                decoder.prefill(ids)
                sync()
                prefill_s.append(time.perf_counter() - t0)
                for ids in nxt:
                    t0 = time.perf_counter()
                    decoder.step(ids)
                    sync()
                    step_ms.append(1e3 * (time.perf_counter() - t0))
            rows.append({"prompt": prompt, "decode_ms_per_step": sorted(step_ms)[len(step_ms) // 2],
                         "prefill_tokens_per_s": batch * prompt / sorted(prefill_s)[len(prefill_s) // 2]})
    return {"rows": rows}


def profile_torch_generate(cfg, batch, repeats, warmup, device="cpu", rows=25):
    """torch.profiler's table (operators by self CPU time) of cfg["new_tokens"] decode steps
    after the longest prompt, recorded after one unrecorded prefill and decode of it."""
    torch, decoder = torch_generation(cfg, batch, device)
    sync = device_sync(torch, device)
    prompt, n = max(cfg["prompts"]), cfg["new_tokens"]
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    prof = torch.profiler.profile(activities=activities)
    with torch.inference_mode():
        for recording in (contextlib.nullcontext(), prof):
            ids = torch.randint(0, cfg["vocab"], (batch, prompt), device=device)
            nxt = torch.randint(0, cfg["vocab"], (n, batch, 1), device=device)
            decoder.prefill(ids)
            with recording:
                t0 = time.perf_counter()
                for ids in nxt:
                    decoder.step(ids)
                sync()
                ms = 1e3 * (time.perf_counter() - t0) / n
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=44)
    return {"table": f"{n} decode steps after a prompt of {prompt}, batch {batch}: {ms:.2f} ms a step under the "
                     f"profiler\n{table}"}


def bench_wedge_generate(wedge, cfg, batch, device="cpu"):
    """`wedge bench-generate --json` of one model, the same sizes, prompts and batch, 2 threads."""
    return run_wedge([wedge, "bench-generate", "--models", cfg["model"], "--vocab-size", str(cfg["vocab"]), "--layers",
                      str(cfg["layers"]), "--d-model", str(cfg["d"]), "--d-ff", str(cfg["dff"]), "--heads",
                      str(cfg["heads"]), "--block", str(cfg["block"]), "--rank", str(cfg["rank"]), "--windows",
                      ",".join(map(str, cfg["windows"])), "--prompts", ",".join(map(str, cfg["prompts"])),
                      "--new-tokens", str(cfg["new_tokens"]), "--batch", str(batch), "--threads", "2", "--device",
                      device, "--json"])["rows"]


def generate(args, runs):
    """--generate: the exactness check, then wedge's and PyTorch's decoding side by side (or,
    with --profile, PyTorch's decode step profiled). Returns the exit status.

    How PyTorch's OpenMP workers wait between parallel regions decides a good part of its
    step (a decode step is ~100 small ops): spinning (OMP_WAIT_POLICY=ACTIVE) answers the
    next op at once on an idle machine, and takes the main thread's core while anything else
    runs (a paper-size step then took 30-80 ms instead of 7-12); sleeping (PASSIVE) is the
    other way round. So unless OMP_WAIT_POLICY is set, PyTorch runs with each and every row
    takes its faster (its `policy` column: A or P). The check and --profile run PASSIVE."""
    policies = [os.environ["OMP_WAIT_POLICY"]] if "OMP_WAIT_POLICY" in os.environ else ["PASSIVE", "ACTIVE"]
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    check = run_in_child(args, {"models": [cfg["model"] for cfg, _ in runs]}, 2, 0, 0, "generate-check")
    print("\n".join(check["lines"]), flush=True)
    if not check["ok"]:
        print("FAILED: a decoder's logits differ from the full forward's")
        return 1
    if args.profile:
        for cfg, batch in runs:
            print(f"PyTorch {cfg['model']} decode, fp32:", flush=True)
            print(run_in_child(args, cfg, batch, 1, 0, "generate-profile")["table"], flush=True)
        return 0
    print(f"{'model':<12} {'prompt':>6} {'batch':>5} {'wedge ms/step':>13} {'torch ms/step':>13} {'policy':>6} "
          f"{'torch/wedge':>11} {'wedge prefill tok/s':>19} {'torch prefill tok/s':>19}")
    for cfg, batch in runs:
        w = bench_wedge_generate(args.wedge, cfg, batch, args.device)
        by_policy = {p: run_in_child(args, cfg, batch, 3, 0, "generate", {"OMP_WAIT_POLICY": p})["rows"] for p in policies}
        for i, a in enumerate(w):
            policy, b = min(((p, rows[i]) for p, rows in by_policy.items()), key=lambda pr: pr[1]["decode_ms_per_step"])
            prefill = max(rows[i]["prefill_tokens_per_s"] for rows in by_policy.values())
            print(f"{cfg['model']:<12} {a['prompt']:>6} {batch:>5} {a['decode_ms_per_step']:>13.2f} "
                  f"{b['decode_ms_per_step']:>13.2f} {policy[0]:>6} {b['decode_ms_per_step'] / a['decode_ms_per_step']:>11.2f} "
                  f"{a['prefill_tokens_per_s']:>19.0f} {prefill:>19.0f}", flush=True)
    return 0


# ---- --check-formulations: the fast forms against plainly literal ones ------------------
#
# Each reference below is the definition written out one position (and one pair) at a time,
# with no shortcut at all. The check runs the script's blocks against them in float64
# (values and every gradient), then times the script's blocks beside the references and
# beside the usual vectorised ways of writing them, so that a change that makes the
# script's PyTorch slower, or different, fails here.


def plucker_mean_reference(torch, z, offsets, eps=PLUCKER_EPS):
    """For every t: the Plücker vector p_ij = u_i v_j - u_j v_i (i < j) of u = z_t and
    v = z_{t-Δ} for every offset with t - Δ >= 0, each divided by max(|p|, eps), averaged;
    0 where no offset is valid."""
    B, L, r = z.shape
    rows = []
    for t in range(L):
        ps = []
        for o in offsets:
            if t - o >= 0:
                u, v = z[:, t], z[:, t - o]
                p = torch.stack([u[:, i] * v[:, j] - u[:, j] * v[:, i] for i in range(r) for j in range(i + 1, r)], -1)
                ps.append(p / p.norm(dim=-1, keepdim=True).clamp_min(eps))
        rows.append(sum(ps) / len(ps) if ps else z.new_zeros(B, r * (r - 1) // 2))
    return torch.stack(rows, 1)


def wedge_pairs_by_columns(torch, z, w, index):
    """wedge_pairs by one index_select of columns of (rows, 2r) (this script's before)."""
    r, P = z.shape[-1], index.numel() // 2
    zw = torch.cat([z, w], -1).reshape(-1, 2 * r)
    ii, jj = index[:P], index[P:]
    x = zw.index_select(1, torch.cat([ii, jj + r, jj, ii + r])).view(-1, 4, P)
    return (x[:, 0] * x[:, 1] - x[:, 2] * x[:, 3]).view(*z.shape[:-1], P)


def plucker_mean_per_offset(torch, z, offsets, eps=PLUCKER_EPS):
    """The textbook vectorised form (this script's before): per offset, the pair coordinates
    indexed afresh, the pairs' norms, an accumulator padded per offset."""
    F = torch.nn.functional
    B, L, r = z.shape
    ii, jj = torch.triu_indices(r, r, 1, device=z.device)
    acc, count = z.new_zeros(B, L, ii.numel()), z.new_zeros(1, L, 1)
    for o in offsets:
        u, v = z[:, o:], z[:, :-o]
        p = u[..., ii] * v[..., jj] - u[..., jj] * v[..., ii]
        acc = acc + F.pad(p / p.norm(dim=-1, keepdim=True).clamp_min(eps), (0, 0, o, 0))
        count = count + F.pad(z.new_ones(1, L - o, 1), (0, 0, o, 0))
    return acc / count.clamp_min(1)


def plucker_mean_gathered(torch, z, offsets, eps=PLUCKER_EPS):
    """The pair coordinates z_i, z_j gathered once, every offset's pairs from time-shifted
    rows of them in one (batch, offsets, L, pairs) tensor (zero rows before Δ), normalised,
    averaged over the valid offsets."""
    F = torch.nn.functional
    B, L, r = z.shape
    ii, jj = torch.triu_indices(r, r, 1, device=z.device)
    zi, zj = z[..., ii], z[..., jj]
    si = torch.stack([F.pad(zi[:, :L - o], (0, 0, o, 0)) for o in offsets], 1)
    sj = torch.stack([F.pad(zj[:, :L - o], (0, 0, o, 0)) for o in offsets], 1)
    p = zi[:, None] * sj - zj[:, None] * si
    p = p / p.norm(dim=-1, keepdim=True).clamp_min(eps)
    return p.sum(1) / offset_counts(torch, L, offsets, z.device).clamp_min(1)[:, None].to(z.dtype)


def mix_block_reference(torch, mix, h, drop, mean=plucker_mean_reference):
    """GrassmannMixing + the gate of models/grassmann.cpp, written as its header states it:
    g = W_o (W_plü p̄ + b_plü) + b_o where some offset is valid, else 0; g dropped;
    α = σ(W_gate [h; g] + b_gate); α h + (1 - α) g."""
    offsets = [o for o in mix.windows if o < h.shape[1]]
    z = mix.red(h)
    g = mix.out(mix.plu(mean(torch, z, offsets)))
    g = drop(g * torch.tensor([float(any(t - o >= 0 for o in offsets)) for t in range(h.shape[1])],
                              dtype=h.dtype)[:, None])
    a = torch.sigmoid(mix.gate(torch.cat([h, g], -1)))
    return a * h + (1 - a) * g


def attention_reference(torch, q, k, v, causal):
    """One query at a time: softmax over s <= t (every s if not causal) of q_t.k_s / sqrt(dh),
    then the weighted sum of v_s."""
    L, dh = q.shape[1], q.shape[2]
    rows = []
    for t in range(L):
        n = t + 1 if causal else L
        s = (q[:, t:t + 1] * k[:, :n]).sum(-1) / dh ** 0.5
        rows.append((torch.softmax(s, -1)[..., None] * v[:, :n]).sum(1))
    return torch.stack(rows, 1)


def own_attention(torch):
    """PyTorch's own causal scaled-dot-product attention, as (its name, q, k, v -> output):
    private in 1.13 (returning the output and the weights), public from 2.0."""
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        return "F.scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return "F._scaled_dot_product_attention", \
        lambda q, k, v: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]


def attention_plain(torch, q, k, v):
    """The usual causal attention: scores divided, a triu mask built and masked_fill'ed."""
    L, dh = q.shape[1], q.shape[2]
    s = q @ k.transpose(-1, -2) / dh ** 0.5
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool, device=q.device), 1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v


def nli_window_mix_reference(torch, blk, h):
    """The Grassmann head's mixing of models/nli.h one token at a time: per head, the mean of
    p̂(z_t, z_s) over the other tokens s of t's window; g = W_plü [p̄ of every head] + b_plü,
    dropped; h <- LN(α h + (1 - α) g), α = σ(W_gate [h; g] + b_gate)."""
    B, T, d = h.shape
    W, H = blk.window, blk.mixing_heads
    z = blk.reduce(h).view(B, T, H, -1)
    r = z.shape[-1]
    heads = []
    for k in range(H):
        rows = []
        for t in range(T):
            w0 = t // W * W
            ps = []
            for s in range(w0, w0 + W):
                if s != t:
                    u, v = z[:, t, k], z[:, s, k]
                    p = torch.stack([u[:, i] * v[:, j] - u[:, j] * v[:, i] for i in range(r) for j in range(i + 1, r)], -1)
                    ps.append(p / p.norm(dim=-1, keepdim=True).clamp_min(PLUCKER_EPS))
            rows.append(sum(ps) / len(ps))
        heads.append(torch.stack(rows, 1))
    g = blk.drop(blk.plucker(torch.cat(heads, -1)))
    a = torch.sigmoid(blk.gate(torch.cat([h, g], -1)))
    return blk.n1(a * h + (1 - a) * g)


def sheaf_block_reference(torch, blk, h_in, drop):
    """SheafStateLM's block (models/sheaf.h) written out: patch by patch, the cover's
    restricted summaries r_q = Σ_k π_k(s_q) R[j, k] s_q (q = p - 2^j), their weights
    a = softmax(r_q . W_query s_{p-1} / sqrt(ds)), the section c_p = Σ a r_q and its gluing
    energy Σ a |r_q - c_p|^2 / (Σ a |r_q|^2 + 1e-6); h0_p = (W_hx c_p)(W_hb c_p)^T; the scan
    of the patch one token at a time from h0_p; s_p = LayerNorm(W_s y + b_s) of its ungated
    output at its last token; then every token through its patch's top-1 expert, one token at
    a time. Returns the block's output, the balance loss and the mean gluing energy."""
    F = torch.nn.functional
    Bt, L, d = h_in.shape
    P, ds, K = blk.P, blk.ds, blk.K
    x, z = blk.inp(blk.n1(h_in)).split(blk.E, -1)
    u = F.silu(x)
    dt = F.softplus(blk.dt_up(blk.dt_down(u)) + blk.dt_bias)
    A = -torch.exp(blk.A_log)
    Bm, Cm = blk.Bp(u), blk.Cp(u)
    restricted, summaries, sections, energies, ys = [], [], [], [], []
    for p in range(-(-L // P)):
        a0, a1 = p * P, min(L, (p + 1) * P)
        cover = [restricted[p - (1 << j)][j] for j in range(blk.depth) if p - (1 << j) >= 0]
        if cover:
            q = blk.query(summaries[p - 1])
            a = torch.softmax(torch.stack([(r * q).sum(-1) for r in cover], 1) / ds ** 0.5, 1)
            c = sum(a[:, i, None] * r for i, r in enumerate(cover))
            spread = sum(a[:, i] * ((r - c) ** 2).sum(-1) for i, r in enumerate(cover))
            energies.append(spread / (sum(a[:, i] * (r * r).sum(-1) for i, r in enumerate(cover)) + 1e-6))
        else:
            c = h_in.new_zeros(Bt, ds)
        h0 = blk.sx(c)[:, :, None] * blk.sb(c)[:, None, :]
        y = patch_scan_reference(torch, u[:, a0:a1], dt[:, a0:a1], A, Bm[:, a0:a1], Cm[:, a0:a1], blk.D, h0[:, None],
                                 a1 - a0)
        s = F.layer_norm(blk.summary(y[:, -1]), (ds,))
        pi = torch.softmax(blk.patch_type(s), -1)
        restricted.append([sum(pi[:, k, None] * (s @ blk.R[j, k].t()) for k in range(K)) for j in range(blk.depth)])
        summaries.append(s)
        sections.append(c)
        ys.append(y)
    h = h_in + drop(blk.out(torch.cat(ys, 1) * F.silu(z)))
    xn = blk.n2(h)
    probs = [torch.softmax(blk.router(c), -1) for c in sections]  # (Bt, K) per patch
    chosen = [pr.argmax(-1) for pr in probs]
    rows = []
    for b in range(Bt):
        for t in range(L):
            k = chosen[t // P][b].item()
            rows.append(probs[t // P][b, k] * blk.experts[k](xn[b, t]))
    counts = [sum((e == k).sum() for e in chosen).double() for k in range(K)]
    n = Bt * len(sections)
    balance = K * sum(sum(pr[:, k].sum() for pr in probs) / n * counts[k] / n for k in range(K))
    energy = torch.stack(energies).mean() if energies else h.new_zeros(())
    return h + drop(torch.stack(rows).view(Bt, L, d)), balance, energy


def check_formulations():
    """Asserts (float64, small random inputs) that every fast form equals its literal
    reference, values and gradients to 1e-10; then times the script's blocks beside the
    other forms (fp32, 2 threads). Exit status 1 if a check fails or the script's block is
    more than 1.25x slower than another form of it."""
    import torch
    setup_torch(torch)
    nn = torch.nn
    failures = []

    def compare(name, fast, ref, inputs):
        out_f, out_r = fast(), ref()
        cot = torch.randn_like(out_r)
        g_f = torch.autograd.grad(out_f, inputs, cot, allow_unused=True)
        g_r = torch.autograd.grad(out_r, inputs, cot, allow_unused=True)
        def rel(a, b):  # max |a - b|, relative to the reference's largest entry when that exceeds 1
            if a is None or b is None:
                return 0.0 if a is None and b is None else float("inf")
            return (a - b).abs().max().item() / max(1.0, b.abs().max().item())
        err = rel(out_f, out_r)
        gerr = max(rel(a, b) for a, b in zip(g_f, g_r))
        ok = err < 1e-10 and gerr < 1e-10
        print(f"  {name:<52} value {err:.1e}  gradients {gerr:.1e}  {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(name)

    print("float64, against the literal references (max |difference| / max(1, max |reference|), of the values and\n"
          "of the gradients of the input and every parameter):")
    torch.manual_seed(1)
    B, L, d, r, windows = 2, 20, 8, 5, [1, 2, 4, 8, 12, 16, 24]  # 24 >= L: skipped, as wedge skips it
    keep = (torch.rand(B, L, d, dtype=torch.float64) > 0.1).double() / 0.9
    drop = lambda x: x * keep  # one fixed dropout mask for both forms: the gate must see the dropped g
    LM = torch_models(torch)
    for literal in (False, True):
        mix = LM("grassmann-literal" if literal else "grassmann", 16, 1, d, 16, 2, L, r, windows).mix[0].double()
        for prm in mix.parameters():
            prm.data.normal_(0, 0.5)
        h = torch.randn(B, L, d, dtype=torch.float64, requires_grad=True)
        inputs = [h] + list(mix.parameters())
        compare(f"GrassmannLM mixing block{' (literal form)' if literal else ''}", lambda: mix(h, drop),
                lambda: mix_block_reference(torch, mix, h, drop), inputs)
    z = torch.randn(B, L, r, dtype=torch.float64, requires_grad=True)
    z.data[:, 7] = z.data[:, 6] * 3.0 + 1e-2 * torch.randn(B, r, dtype=torch.float64)  # nearly parallel (t 7, Δ 1),
    z.data[:, 10] = 0.0                                                              # a zero vector: |p| < eps
    compare("plucker_mean, nearly parallel and zero pairs", lambda: plucker_mean(torch, z, windows[:-1]),
            lambda: plucker_mean_reference(torch, z, windows[:-1]), [z])
    for causal in (True, False):
        q, k, v = (torch.randn(6, 12, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
        compare(f"attention ({'causal' if causal else 'bidirectional'})", lambda: attention(torch, q, k, v, causal),
                lambda: attention_reference(torch, q, k, v, causal), [q, k, v])
    Nli = torch_nli(torch)
    blk = Nli("grassmann", 16, d=16, layers=1, heads=2, dff=16, d_proj=8, mixing_heads=2, window=8).blocks[0].double()
    for prm in blk.parameters():
        prm.data.normal_(0, 0.5)
    nli_keep = (torch.rand(2, 16, 16, dtype=torch.float64) > 0.1).double() / 0.9
    blk.drop = type("FixedDrop", (nn.Module,), {"forward": lambda self, x: x * nli_keep})()
    h = torch.randn(2, 16, 16, dtype=torch.float64, requires_grad=True)
    compare("NLI Grassmann head's window mixing", lambda: blk.mix(h), lambda: nli_window_mix_reference(torch, blk, h),
            [h] + list(blk.parameters()))
    Bt, L, E, N, P = 2, 21, 6, 4, 8  # 21 tokens: a last, partial patch
    u, dt, Bm, Cm = (torch.randn(Bt, L, n, dtype=torch.float64, requires_grad=True) for n in (E, E, N, N))
    A, D = -torch.rand(E, N, dtype=torch.float64) - 0.5, torch.randn(E, dtype=torch.float64)
    h0 = torch.randn(Bt, 3, E, N, dtype=torch.float64, requires_grad=True)
    for start in (None, h0):
        compare(f"patch_scan ({'from h0' if start is not None else 'from zero states'})",
                lambda: patch_scan(torch, u, dt.abs(), A, Bm, Cm, D, start, P),
                lambda: patch_scan_reference(torch, u, dt.abs(), A, Bm, Cm, D, start, P), [u, dt, Bm, Cm, h0])
    # SheafStateLM's block: 37 tokens in patches of 8 (the last partial), a cover of depth 3
    # that reaches back 4 patches, 2 types; both forms against the written-out block.
    Bt, L, d = 2, 37, 8
    sheaf = LM.Sheaf(d, patch=8, depth=3, types=2, states=4, ds=8, dff=16).double()
    for prm in sheaf.parameters():
        prm.data.normal_(0, 0.5)
    sheaf_keep = (torch.rand(Bt, L, d, dtype=torch.float64) > 0.1).double() / 0.9
    sheaf_drop = lambda x: x * sheaf_keep
    h = torch.randn(Bt, L, d, dtype=torch.float64, requires_grad=True)
    flat = lambda outs: torch.cat([o.reshape(-1) for o in outs])  # the output, the balance loss, the energy

    def sheaf_form(two_scans):
        def run():
            sheaf.two_scans = two_scans
            return flat(sheaf(h, sheaf_drop))
        return run
    inputs = [h] + list(sheaf.parameters())
    reference = lambda: flat(sheaf_block_reference(torch, sheaf, h, sheaf_drop))
    compare("SheafStateLM block (each patch scanned once)", sheaf_form(False), reference, inputs)
    compare("SheafStateLM block (two scans, chain by linearity)", sheaf_form(True), reference, inputs)
    compare("SheafStateLM block, one form against the other", sheaf_form(False), sheaf_form(True), inputs)
    x = torch.ones(1 << 20)
    kept = (dropout_module(torch, 0.1).train()(x) > 0).double().mean().item()
    ok = abs(kept - 0.9) < 0.003
    print(f"  {'dropout keeps 90 % (1M draws)':<52} kept {100 * kept:.2f} %  {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append("dropout")

    def median_ms(fns, reps=5):
        for f in fns.values():
            f()
        times = {k: [] for k in fns}
        for _ in range(reps):  # interleaved, so that the machine's noise hits every form alike
            for k, f in fns.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        return {k: sorted(v)[len(v) // 2] * 1000 for k, v in times.items()}

    def report(title, ms, mine):
        print(title)
        for k, t in ms.items():
            print(f"  {k:<60} {t:8.1f} ms  {t / ms[mine]:5.2f}x")
        slower = [k for k in ms if k != mine and ms[mine] > 1.25 * ms[k]]
        if slower:
            failures.append(f"{mine} slower than {', '.join(slower)}")

    torch.set_default_dtype(torch.float32)
    torch.manual_seed(2)

    def fwd_bwd(f, *inputs):
        def run():
            for x in inputs:
                x.grad = None
            f().sum().backward()
        return run

    paper_windows = [1, 2, 4, 8, 12, 16]
    B, L, d, r = 16, 128, 256, 32
    mix = LM("grassmann", 16, 1, d, 16, 2, L, r, paper_windows).mix[0]
    literal = LM("grassmann-literal", 16, 1, d, 16, 2, L, r, paper_windows).mix[0]
    literal.load_state_dict(mix.state_dict())
    h = torch.randn(B, L, d, requires_grad=True)
    ident = lambda x: x
    ms = median_ms({
        "this script's block (wedge's shortcuts)": fwd_bwd(lambda: mix(h, ident), h),
        "the same mean, pair coordinates gathered by columns": fwd_bwd(
            lambda: mix_block_reference(torch, mix, h, ident, lambda torch, z, o: plucker_mean(
                torch, z, o, pairs=wedge_pairs_by_columns)), h),
        "pairs gathered once, offsets batched (B, m, L, pairs)": fwd_bwd(
            lambda: mix_block_reference(torch, mix, h, ident, plucker_mean_gathered), h),
        "pairs indexed per offset, accumulator padded per offset": fwd_bwd(
            lambda: mix_block_reference(torch, mix, h, ident, plucker_mean_per_offset), h),
        "this script's literal row (every offset projected)": fwd_bwd(lambda: literal(h, ident), h),
    }, reps=3)
    report(f"fp32 forward + backward of one GrassmannLM mixing block, batch {B} x {L}, d {d}, rank {r}:", ms,
           "this script's block (wedge's shortcuts)")
    B, L, d, r = 2, 32, 32, 8
    mix = LM("grassmann", 16, 1, d, 16, 2, L, r, paper_windows).mix[0]
    h = torch.randn(B, L, d, requires_grad=True)
    ms = median_ms({
        "this script's block": fwd_bwd(lambda: mix(h, ident), h),
        "the literal reference (one position, one pair at a time)": fwd_bwd(
            lambda: mix_block_reference(torch, mix, h, ident), h),
    }, reps=3)
    report(f"the same at batch {B} x {L}, d {d}, rank {r}:", ms, "this script's block")
    q, k, v = (torch.randn(128, 128, 64, requires_grad=True) for _ in range(3))
    sdpa_name, sdpa = own_attention(torch)
    ms = median_ms({
        "this script's attention (baddbmm with a cached mask)": fwd_bwd(lambda: attention(torch, q, k, v, True), q, k, v),
        "divide, triu mask, masked_fill, softmax, matmul": fwd_bwd(lambda: attention_plain(torch, q, k, v), q, k, v),
        f"PyTorch's own {sdpa_name} (is_causal)": fwd_bwd(lambda: sdpa(q, k, v), q, k, v),
    })
    report("fp32 forward + backward of causal attention, 128 (batch x heads) x 128 x 64:", ms,
           "this script's attention (baddbmm with a cached mask)")
    # Last, after the smaller blocks: its forms allocate hundreds of MB.
    B, L, d = 16, 128, 256
    sheaf = LM.Sheaf(d, patch=16, depth=4, types=4, states=16, ds=64)  # the paper's block, the LM's form
    other = LM.Sheaf(d, patch=16, depth=4, types=4, states=16, ds=64, two_scans=not sheaf.two_scans)
    other.load_state_dict(sheaf.state_dict())
    h = torch.randn(B, L, d, requires_grad=True)

    def sheaf_loss(blk):
        out, balance, energy = blk(h, ident)
        return out.sum() + 0.01 * (balance + energy)
    forms = {False: "each patch scanned once, from h0_p",
             True: "two scans: zero-state + linear chain, then from h0"}
    mine = "this script's block: " + forms[sheaf.two_scans]
    ms = median_ms({
        mine: fwd_bwd(lambda: sheaf_loss(sheaf), h),
        forms[other.two_scans]: fwd_bwd(lambda: sheaf_loss(other), h),
    })
    report(f"fp32 forward + backward of one SheafStateLM block, batch {B} x {L}, d {d}, P 16, depth 4, 4 types, "
           f"N 16, ds 64:", ms, mine)
    print("all checks passed" if not failures else "FAILED: " + "; ".join(failures))
    return 0 if not failures else 1


def run_wedge(cmd):
    """wedge's result line (its --json), run with the library path the script was started
    with: its own OpenBLAS build, not the one PyTorch was given."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.environ.get("WEDGE_BENCH_LD_LIBRARY_PATH", "")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_wedge(wedge, cfg, batch, steps, warmup, device="cpu"):
    if cfg.get("task") == "nli":
        cmd = [wedge, "bench-step", "--task", "nli", "--head", cfg["head"], "--vocab-size", str(cfg["vocab"]), "--batch",
               str(batch), "--steps", str(steps), "--warmup-steps", str(warmup), "--threads", "2", "--device", device,
               "--json"]
        return run_wedge(cmd)
    cmd = [wedge, "bench-step", "--model", cfg["model"], "--vocab-size", str(cfg["vocab"]), "--layers", str(cfg["layers"]),
           "--d-model", str(cfg["d"]), "--d-ff", str(cfg["dff"]), "--heads", str(cfg["heads"]), "--block", str(cfg["block"]),
           "--rank", str(cfg["rank"]), "--windows", ",".join(map(str, cfg["windows"])), "--batch", str(batch),
           "--steps", str(steps), "--warmup-steps", str(warmup), "--threads", "2", "--device", device,
           "--precision", cfg.get("precision", "fp32"), "--json"]
    return run_wedge(cmd)


def run_in_child(args, cfg, batch, steps, warmup, mode="time", env=None):
    """PyTorch in a fresh process (with the environment reexec_with_env set, and `env` over
    it) so that its peak RSS is its own. mode "profile" returns the profiler's table instead
    of the timing."""
    job = json.dumps([mode, cfg, batch, steps, warmup, args.device])
    out = subprocess.run([sys.executable, __file__, "--torch-child", job], env={**os.environ, **(env or {})},
                         check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_ints(text):
    return [positive_int(t) for t in text.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wedge", default=os.path.join(os.path.dirname(__file__), "..", "build", "wedge"))
    ap.add_argument("--paper", action="store_true", help="the 6-layer paper configuration at batch 32 x 128")
    ap.add_argument("--seq-scaling", action="store_true", help="2 layers, d 128, batch 1, block 256..8192")
    ap.add_argument("--models", default="transformer,grassmann")
    ap.add_argument("--nli", action="store_true",
                    help="the sentence-pair classifier (SNLI) with each head of --models, batch 32 of 24 + 16 tokens")
    ap.add_argument("--steps", type=positive_int, default=3, help="timed (or profiled) steps per run")
    ap.add_argument("--literal", action="store_true",
                    help="also time PyTorch's GrassmannLM in the paper code's literal form (an extra, labelled row)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both engines on the same device)")
    ap.add_argument("--bf16", action="store_true",
                    help="also mixed precision: wedge --precision bf16 and PyTorch autocast-bf16, side by side with fp32")
    ap.add_argument("--check-formulations", action="store_true",
                    help="check PyTorch's fast forms against literal references (float64) and time them beside the "
                         "usual forms, in seconds; exit status 1 on a failure")
    ap.add_argument("--profile", action="store_true",
                    help="instead of timing, torch.profiler's table of each PyTorch model's steps (with --bf16 also "
                         "under autocast): where PyTorch spends its step")
    ap.add_argument("--generate", action="store_true",
                    help="token-by-token decoding of paper-size models, wedge bench-generate beside PyTorch's incremental "
                         "loops (after their exactness check): ms per decode step and prefill tokens/s")
    ap.add_argument("--prompts", type=positive_ints, default="16,128,512,1024", help="--generate: prompt lengths")
    ap.add_argument("--new-tokens", type=positive_int, default=32, help="--generate: decode steps timed after each prompt")
    ap.add_argument("--batch", type=positive_int,
                    help="sequences per step, for both engines (default: 1 with --generate, else the configuration's)")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        sys.exit("compare_pytorch.py: PyTorch is not installed: tools/setup.sh --with-pytorch installs Debian's "
                 "python3-torch and libopenblas0-openmp")
    if not (args.check_formulations or args.torch_child or args.profile or os.access(args.wedge, os.X_OK)):
        sys.exit(f"compare_pytorch.py: no wedge binary at {args.wedge}: build it (tools/setup.sh) or pass --wedge PATH")
    if args.check_formulations:
        sys.exit(check_formulations())
    if args.torch_child:
        mode, cfg, batch, steps, warmup, device = json.loads(args.torch_child)
        print(json.dumps(CHILD_MODES[mode](cfg, batch, steps, warmup, device)))
        return

    runs = []
    for model in args.models.split(","):
        if args.generate:
            runs.append(({"model": model, "vocab": 30522, "layers": 6, "d": 256, "dff": 1024, "heads": 4, "rank": 32,
                          "windows": [1, 2, 4, 8, 12, 16], "prompts": args.prompts, "new_tokens": args.new_tokens,
                          "block": max(args.prompts) + args.new_tokens}, 1))
        elif args.nli:
            runs.append(({"task": "nli", "model": "nli-" + model, "head": model, "vocab": 30522,
                          "block": NLI_PREMISE + NLI_HYPOTHESIS}, 32))
        elif args.seq_scaling:
            for L in (256, 1024, 4096, 8192):
                runs.append(({"model": model, "vocab": 8192, "layers": 2, "d": 128, "dff": 512, "heads": 4, "block": L,
                              "rank": 16, "windows": [1, 2, 4, 8, 12, 16]}, 1))
        elif args.paper:
            runs.append(({"model": model, "vocab": 30522, "layers": 6, "d": 256, "dff": 1024, "heads": 4, "block": 128,
                          "rank": 32, "windows": [1, 2, 4, 8, 12, 16]}, 32))
        else:
            runs.append(({"model": model, "vocab": 8192, "layers": 4, "d": 128, "dff": 512, "heads": 4, "block": 128,
                          "rank": 16, "windows": [1, 2, 4, 8, 12, 16]}, 16))
    runs = [(cfg, args.batch or batch) for cfg, batch in runs]
    if args.generate:
        sys.exit(generate(args, runs))
    if args.profile:
        for cfg, batch in runs:
            for precision in ("fp32", "bf16") if args.bf16 else ("fp32",):
                print(f"PyTorch {cfg['model']}, {precision}, batch {batch} x {cfg['block']}, {args.steps} steps:", flush=True)
                print(run_in_child(args, dict(cfg, precision=precision), batch, args.steps, 1, "profile")["table"],
                      flush=True)
        return
    if args.bf16:
        # Four rows per model in one pass, alternating the engines.
        print(f"{'model':<12} {'batch':>5} {'wedge fp32':>11} {'wedge bf16':>11} {'torch fp32':>11} {'torch bf16':>11} "
              f"{'bf16/t fp32':>12} {'bf16/t bf16':>12} {'fp32/t fp32':>12}   (tokens/s)")
        for cfg, batch in runs:
            w32 = bench_wedge(args.wedge, cfg, batch, args.steps, 1, args.device)
            t32 = run_in_child(args, cfg, batch, args.steps, 1)
            w16 = bench_wedge(args.wedge, dict(cfg, precision="bf16"), batch, args.steps, 1, args.device)
            t16 = run_in_child(args, dict(cfg, precision="bf16"), batch, args.steps, 1)
            a, b, c, d = (r["tokens_per_s"] for r in (w32, w16, t32, t16))
            print(f"{cfg['model']:<12} {batch:>5} {a:>11.0f} {b:>11.0f} {c:>11.0f} {d:>11.0f} {b / c:>12.2f} {b / d:>12.2f} "
                  f"{a / c:>12.2f}   wedge bf16 GEMMs: {w16.get('kernels', '?')}, {100 * w16.get('mfu', 0):.0f} % of peak",
                  flush=True)
        return
    print(f"{'model':<12} {'block':>6} {'batch':>5} {'wedge tok/s':>12} {'torch tok/s':>12} {'ratio':>6} "
          f"{'wedge RSS MB':>13} {'torch RSS MB':>13}")
    for cfg, batch in runs:
        w = bench_wedge(args.wedge, cfg, batch, args.steps, 1, args.device)
        t = run_in_child(args, cfg, batch, args.steps, 1)
        print(f"{cfg['model']:<12} {cfg['block']:>6} {batch:>5} {w['tokens_per_s']:>12.0f} {t['tokens_per_s']:>12.0f} "
              f"{w['tokens_per_s'] / t['tokens_per_s']:>6.2f} {w['peak_rss_mb']:>13.0f} {t['peak_rss_mb']:>13.0f}",
              flush=True)
        if cfg["model"] == "grassmann" and args.literal:
            # An extra, labelled row: PyTorch in the paper code's literal form (every offset
            # projected, then averaged) against the same wedge figure.
            t = run_in_child(args, dict(cfg, model="grassmann-literal"), batch, args.steps, 1)
            print(f"{'  (literal)':<12} {cfg['block']:>6} {batch:>5} {w['tokens_per_s']:>12.0f} "
                  f"{t['tokens_per_s']:>12.0f} {w['tokens_per_s'] / t['tokens_per_s']:>6.2f} {w['peak_rss_mb']:>13.0f} "
                  f"{t['peak_rss_mb']:>13.0f}", flush=True)


CHILD_MODES = {"time": bench_torch, "profile": profile_torch, "generate": bench_torch_generate,
               "generate-profile": profile_torch_generate, "generate-check": check_decoders}


if __name__ == "__main__":
    reexec_with_env()
    main()
