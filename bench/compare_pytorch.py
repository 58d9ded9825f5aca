#!/usr/bin/python3
"""Training-step throughput of wedge and PyTorch side by side, in one run.

A benchmark only: the engine never uses Python. It builds the same models as wedge
(TransformerLM and GrassmannLM, same sizes, tied head, post-LN, exact GELU; GrassmannLM
with the same exact shortcuts wedge takes: offsets averaged before one projection, W_o
folded into W_plü; SheafStateLM with the same chain over patches on a zero-state scan) in PyTorch, times forward + cross-entropy + backward + AdamW on random tokens, runs
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
    /usr/bin/python3 bench/compare_pytorch.py --paper --models sheaf   # SheafStateLM (PyTorch peaks ~22 GB)
    /usr/bin/python3 bench/compare_pytorch.py --nli --models transformer,grassmann,sheaf   # the SNLI classifier
    /usr/bin/python3 bench/compare_pytorch.py --paper --bf16  # also mixed precision, both engines

With --bf16 each model runs four ways in one pass: wedge fp32, wedge --precision bf16, PyTorch
fp32, and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) - its own CPU mixed
precision (oneDNN bf16 GEMMs; fp32 weights and optimizer), PyTorch's best bf16 setting.
"""
import argparse
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


def reexec_with_env():
    if os.environ.get("WEDGE_BENCH_CHILD") == "1":
        return
    env = dict(os.environ)
    env.update(ENV)
    env["WEDGE_BENCH_CHILD"] = "1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def patch_scan(torch, u, dt, A, B, C, D, h0, P):
    """The selective scan of every patch of P tokens at once (a loop over the P positions of
    a patch, vectorised over batch, patches, channels and states), from the states h0
    (batch, patches, E, N), or from zeros."""
    F = torch.nn.functional
    Bt, L, E = u.shape
    nP, N = -(-L // P), A.shape[1]
    pad = nP * P - L

    def patches(x):  # (Bt, L, ...) -> (Bt, nP, P, ...)
        return F.pad(x, (0, 0, 0, pad)).view(Bt, nP, P, x.shape[-1])
    u4, dt4, B4, C4 = patches(u), patches(dt), patches(B), patches(C)
    h = h0 if h0 is not None else torch.zeros(Bt, nP, E, N)
    ys = []
    for k in range(P):
        dtk = dt4[:, :, k, :, None]
        h = torch.exp(dtk * A) * h + dtk * u4[:, :, k, :, None] * B4[:, :, k, None, :]
        ys.append((h * C4[:, :, k, None, :]).sum(-1) + D * u4[:, :, k])
    return torch.stack(ys, 2).reshape(Bt, nP * P, E)[:, :L]


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

        def forward(self, x):
            B, L, d = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            s = q @ k.transpose(-1, -2) / (d // self.h) ** 0.5
            mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
            p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
            return self.out((p @ v).transpose(1, 2).reshape(B, L, d))

    class Mix(nn.Module):
        """Causal Grassmann mixing, by default in the exact shortcuts wedge takes: the
        normalised Plücker vectors are averaged over the valid offsets and projected once,
        with W_o folded into W_plü (both maps are linear). literal=True is the paper code's
        form — every offset projected, then averaged — shown only as an extra, labelled row."""

        def __init__(self, d, r, windows, literal=False):
            super().__init__()
            self.windows, self.literal = windows, literal
            self.red = nn.Linear(d, r)
            iu = torch.triu_indices(r, r, 1)
            self.register_buffer("ii", iu[0])
            self.register_buffer("jj", iu[1])
            self.plu = nn.Linear(r * (r - 1) // 2, d)
            self.out = nn.Linear(d, d)
            self.gate = nn.Linear(2 * d, d)

        def forward(self, h, drop):
            B, L, d = h.shape
            z = self.red(h)
            acc = torch.zeros(B, L, d if self.literal else self.plu.in_features)
            count = torch.zeros(1, L, 1)
            for delta in self.windows:
                if delta >= L:
                    continue
                u, v = z[:, delta:], z[:, :-delta]
                p = u[..., self.ii] * v[..., self.jj] - u[..., self.jj] * v[..., self.ii]
                p = p / p.norm(dim=-1, keepdim=True).clamp_min(1e-8)
                acc = acc + F.pad(self.plu(p) if self.literal else p, (0, 0, delta, 0))
                count = count + F.pad(torch.ones(1, L - delta, 1), (0, 0, delta, 0))
            mean = acc / count.clamp_min(1)
            if self.literal:
                g = self.out(mean)
            else:
                g = F.linear(mean, self.out.weight @ self.plu.weight, self.out.weight @ self.plu.bias + self.out.bias)
            g = g * (count > 0)
            a = torch.sigmoid(self.gate(torch.cat([h, g], -1)))
            return a * h + (1 - a) * drop(g)

    class Sheaf(nn.Module):
        """SheafStateLM's block as wedge computes it (models/sheaf.h), pre-LN: the scan runs
        over all patches at once (a loop over the P positions of a patch, vectorised over
        batch, patches, channels and states), from zero states; the chain over patches adds
        each patch's h0 term at its last token by linearity; a second scan starts every
        patch from its glued state; top-1 patch-type experts routed by the section."""

        def __init__(self, d, patch=16, depth=4, types=4, states=16, ds=64, dff=160):
            super().__init__()
            add_scan_parameters(torch, self, d, states)
            E = self.E
            self.P, self.depth, self.K, self.ds = patch, depth, types, ds
            self.summary, self.patch_type = nn.Linear(E, ds), nn.Linear(ds, types)
            self.R = nn.Parameter(torch.eye(ds).repeat(depth, types, 1, 1) + 0.02 * torch.randn(depth, types, ds, ds))
            self.query = nn.Linear(ds, ds, bias=False)
            self.sx, self.sb = nn.Linear(ds, E, bias=False), nn.Linear(ds, states, bias=False)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.router = nn.Linear(ds, types)
            self.experts = nn.ModuleList([FFN(d, dff) for _ in range(types)])

        def scan(self, u, dt, A, B, C, h0):
            return patch_scan(torch, u, dt, A, B, C, self.D, h0, self.P)

        def forward(self, h_in, drop):
            Bt, L, d = h_in.shape
            E, P, ds, K = self.E, self.P, self.ds, self.K
            nP = -(-L // P)
            x, z = self.inp(self.n1(h_in)).split(E, -1)
            u = F.silu(x)
            dt = F.softplus(self.dt_up(self.dt_down(u)) + self.dt_bias)
            A = -torch.exp(self.A_log)
            B, C = self.Bp(u), self.Cp(u)
            y0 = self.scan(u, dt, A, B, C, None)
            last = torch.clamp(torch.arange(1, nP + 1) * P, max=L) - 1
            S = F.pad(dt, (0, 0, 0, nP * P - L)).view(Bt, nP, P, E).sum(2)
            # C at the patch's last token is folded into the chain's (Bt, N) factor, as wedge does.
            reach, C_last = torch.exp(S[..., None] * A), C[:, last]  # (Bt, nP, E, N), (Bt, nP, N)
            bank = self.R.reshape(self.depth * K * ds, ds)
            restricted, summaries, hx, hb, sections, energies = [], [], [], [], [], []
            for p in range(nP):
                cover = [restricted[p - (1 << j)][:, j] for j in range(self.depth) if p - (1 << j) >= 0]
                if cover:
                    r = torch.stack(cover, 1)
                    a = torch.softmax((r * self.query(summaries[p - 1])[:, None]).sum(-1) / ds ** 0.5, 1)
                    c = (r * a[..., None]).sum(1)
                    spread = (a * ((r - c[:, None]) ** 2).sum(-1)).sum(1)
                    energies.append(spread / ((a * (r * r).sum(-1)).sum(1) + 1e-6))
                else:
                    c = torch.zeros(Bt, ds)
                hx.append(self.sx(c))
                hb.append(self.sb(c))
                y_last = y0[:, last[p]] + hx[-1] * (reach[:, p] * (C_last[:, p] * hb[-1])[:, None]).sum(-1)
                s = F.layer_norm(self.summary(y_last), (ds,))
                pi = torch.softmax(self.patch_type(s), -1)
                restricted.append((F.linear(s, bank).view(Bt, self.depth, K, ds) * pi[:, None, :, None]).sum(2))
                summaries.append(s)
                sections.append(c)
            h0 = torch.stack(hx, 1)[..., None] * torch.stack(hb, 1)[:, :, None, :]
            y = self.scan(u, dt, A, B, C, h0)
            h = h_in + drop(self.out(y * F.silu(z)))
            probs = torch.softmax(self.router(torch.stack(sections, 1)), -1)  # (Bt, nP, K)
            gate, expert = probs.max(-1)
            token_patch = torch.arange(L) // P
            tok_expert = expert[:, token_patch].reshape(-1)
            tok_gate = gate[:, token_patch].reshape(-1, 1)
            xn = self.n2(h).reshape(-1, d)
            out = torch.zeros_like(xn)
            for k in range(K):
                rows = (tok_expert == k).nonzero().squeeze(1)
                if rows.numel():
                    out = out.index_add(0, rows, self.experts[k](xn.index_select(0, rows)))
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
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            L = x.shape[1]
            h = self.drop(self.tok(x) + self.pos(torch.arange(L)))
            if self.kind == "sheaf":
                aux = 0.0
                for block in self.mix:  # balance and normalised gluing energy, weights 0.01
                    h, balance, energy = block(h, self.drop)
                    aux = aux + 0.01 * (balance + energy) / len(self.mix)
                return self.final(h) @ self.tok.weight.t(), aux
            for mix, ffn, n1, n2 in zip(self.mix, self.ffn, self.n1, self.n2):
                if self.kind == "transformer":
                    h = n1(h + self.drop(mix(h)))
                else:
                    h = n1(mix(h, self.drop))
                h = n2(h + self.drop(ffn(h)))
            return h @ self.tok.weight.t()

    return LM


NLI_PREMISE, NLI_HYPOTHESIS = 24, 16  # the pair sizes of `wedge bench-step --task nli`


def torch_nli(torch):
    """The sentence-pair classifier of models/nli.h: token + position + segment embeddings, two
    blocks of the head, per-part mean pooling, [u; v; |u - v|; u * v] -> 3 classes. The
    Transformer head's attention is softmax(q k^T / sqrt(dh)) v as batched matmuls (this
    PyTorch has no fused attention; at 40 tokens the scores are tiny); the Grassmann head
    computes every window's Plücker pairs in one batched outer product (the same pairs
    wedge takes: every other token of the window, both directions)."""
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
                self.iu = torch.triu_indices(r, r, 1)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.w1, self.w2 = nn.Linear(d, dff), nn.Linear(dff, d)
            self.drop = nn.Dropout(drop)

        def mix(self, h):
            B, T, d = h.shape
            if self.head == "transformer":
                q, k, v = self.qkv(h).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
                a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ v
                return self.n1(h + self.drop(self.out(a.transpose(1, 2).reshape(B, T, d))))
            W, H = self.window, self.mixing_heads
            z = self.reduce(h).view(B, T // W, W, H, -1)                  # windows of W tokens
            outer = z.unsqueeze(3).unsqueeze(-1) * z.unsqueeze(2).unsqueeze(-2)  # z_t z_s^T: (B, n, W, W, H, r, r)
            p = (outer - outer.transpose(-1, -2))[..., self.iu[0], self.iu[1]]  # (B, n, W, W, H, pairs)
            p = p / p.norm(dim=-1, keepdim=True).clamp_min(1e-8)
            g = self.plucker((p.sum(3) / (W - 1)).reshape(B, T, -1))           # the diagonal adds 0
            g = self.drop(g)
            alpha = torch.sigmoid(self.gate(torch.cat([h, g], -1)))
            return self.n1(alpha * h + (1 - alpha) * g)

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
            self.drop = nn.Dropout(drop)

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
            self.hidden, self.output, self.drop = nn.Linear(4 * d, d), nn.Linear(d, 3), nn.Dropout(drop)

        def forward(self, ids, segments):
            T = ids.shape[1]
            h = self.drop(self.tok(ids) + self.pos(torch.arange(T, device=ids.device)) + self.seg(segments))
            for b in self.blocks:
                h = b(h)
            h = self.final(h)
            u, v = h[:, :NLI_PREMISE].mean(1), h[:, NLI_PREMISE:].mean(1)
            return self.output(self.drop(F.gelu(self.hidden(torch.cat([u, v, (u - v).abs(), u * v], -1)))))

    return Nli


def bench_torch_nli(cfg, batch, steps, warmup):
    import torch
    torch.set_num_threads(2)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    model = torch_nli(torch)(cfg["head"], cfg["vocab"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    T = NLI_PREMISE + NLI_HYPOTHESIS
    segments = (torch.arange(T) >= NLI_PREMISE).long().expand(batch, T)
    times = []
    for s in range(warmup + steps):
        ids, labels = torch.randint(0, cfg["vocab"], (batch, T)), torch.randint(0, 3, (batch,))
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(ids, segments), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    return {"step_ms": med * 1000, "tokens_per_s": batch * T / med, "pairs_per_s": batch / med,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_torch(cfg, batch, steps, warmup, device="cpu"):
    if cfg.get("task") == "nli":
        return bench_torch_nli(cfg, batch, steps, warmup)
    import torch
    torch.set_num_threads(2)
    # Without this, a few AdamW steps in, denormal floats make a paper-size step ~5x slower.
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    LM = torch_models(torch)
    torch.set_default_tensor_type(torch.cuda.FloatTensor if device == "cuda" else torch.FloatTensor)
    model = LM(cfg["model"], cfg["vocab"], cfg["layers"], cfg["d"], cfg["dff"], cfg["heads"], cfg["block"], cfg["rank"],
               cfg["windows"]).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    times = []
    for s in range(warmup + steps):
        x = torch.randint(0, cfg["vocab"], (batch, cfg["block"] + 1), device=device)
        sync()
        t0 = time.perf_counter()
        # Mixed precision the way PyTorch documents it: the forward and the loss under
        # autocast (its bf16 ops run in bf16, the rest in fp32), the backward outside it.
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cfg.get("precision") == "bf16"):
            logits = model(x[:, :-1])
            aux = 0.0
            if isinstance(logits, tuple):  # SheafStateLM: its balance loss joins the gradient
                logits, aux = logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]).float(),
                                                     x[:, 1:].reshape(-1)) + aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"step_ms": med * 1000, "tokens_per_s": batch * cfg["block"] / med, "peak_rss_mb": peak}


def bench_wedge(wedge, cfg, batch, steps, warmup, device="cpu"):
    if cfg.get("task") == "nli":
        cmd = [wedge, "bench-step", "--task", "nli", "--head", cfg["head"], "--vocab-size", str(cfg["vocab"]), "--batch",
               str(batch), "--steps", str(steps), "--warmup-steps", str(warmup), "--threads", "2", "--json"]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    cmd = [wedge, "bench-step", "--model", cfg["model"], "--vocab-size", str(cfg["vocab"]), "--layers", str(cfg["layers"]),
           "--d-model", str(cfg["d"]), "--d-ff", str(cfg["dff"]), "--heads", str(cfg["heads"]), "--block", str(cfg["block"]),
           "--rank", str(cfg["rank"]), "--windows", ",".join(map(str, cfg["windows"])), "--batch", str(batch),
           "--steps", str(steps), "--warmup-steps", str(warmup), "--threads", "2", "--device", device,
           "--precision", cfg.get("precision", "fp32"), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def run_in_child(args, cfg, batch, steps, warmup):
    """PyTorch in a fresh process so its peak RSS is its own. When Debian's OpenMP build of
    OpenBLAS is installed (libopenblas0-openmp), PyTorch gets it: its GEMMs then share
    PyTorch's OpenMP thread pool instead of fighting it."""
    env = dict(os.environ)
    if os.path.isdir(OPENMP_BLAS):
        env["LD_LIBRARY_PATH"] = OPENMP_BLAS
    out = subprocess.run([sys.executable, __file__, "--torch-child", json.dumps([cfg, batch, steps, warmup, args.device])],
                         check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wedge", default=os.path.join(os.path.dirname(__file__), "..", "build", "wedge"))
    ap.add_argument("--paper", action="store_true", help="the 6-layer paper configuration at batch 32 x 128")
    ap.add_argument("--seq-scaling", action="store_true", help="2 layers, d 128, batch 1, block 256..8192")
    ap.add_argument("--models", default="transformer,grassmann")
    ap.add_argument("--nli", action="store_true",
                    help="the sentence-pair classifier (SNLI) with each head of --models, batch 32 of 24 + 16 tokens")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--literal", action="store_true",
                    help="also time PyTorch's GrassmannLM in the paper code's literal form (an extra, labelled row)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both engines on the same device)")
    ap.add_argument("--bf16", action="store_true",
                    help="also mixed precision: wedge --precision bf16 and PyTorch autocast-bf16, side by side with fp32")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        cfg, batch, steps, warmup, device = json.loads(args.torch_child)
        print(json.dumps(bench_torch(cfg, batch, steps, warmup, device)))
        return

    runs = []
    for model in args.models.split(","):
        if args.nli:
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


if __name__ == "__main__":
    reexec_with_env()
    main()
