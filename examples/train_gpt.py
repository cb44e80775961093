"""A small GPT trained with fagen.attention and with PyTorch SDPA from the same initial weights
on the same batches: the two loss curves must agree, and both report tokens/s.

    PYTHONPATH=python python3 examples/train_gpt.py [--bundle attn.fab] [--steps 300] [--compile]

The data is synthetic (no download): sequences of a random second-order Markov chain over 16
tokens, each pair of previous tokens allowing 4 next ones, so the loss falls from ln 16 = 2.77
towards ln 4 = 1.39 as the model learns the table, attending to the token before the current one. The
model: 6 layers, 6 heads of dim 64 (d_model 384), context 256, causal, bf16 autocast; AdamW.
Kernels: bf16, head_dim 64, causal, forward and backward, from --bundle or built on demand.
Exits non-zero if the mean losses of the last 50 steps differ by more than --tolerance
(relative).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import fagen


class Attention(nn.Module):
    def __init__(self, d_model, heads, backend):
        super().__init__()
        self.heads, self.backend = heads, backend
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)  # BSHD
        if self.backend == "fagen":
            y = fagen.attention(q, k, v, causal=True)
        else:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True).transpose(1, 2)
        return self.proj(y.reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d_model, heads, backend):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, backend)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, d_model, layers, heads, backend):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, backend) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def markov_batches(steps, batch, context, vocab, seed, device):
    """`steps` batches of [batch, context + 1] tokens from one fixed second-order Markov chain."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, vocab, 4), generator=g)  # (a, b) -> 4 next tokens
    out = torch.empty(steps, batch, context + 1, dtype=torch.long)
    out[:, :, :2] = torch.randint(0, vocab, (steps, batch, 2), generator=g)
    choice = torch.randint(0, 4, (steps, batch, context + 1), generator=g)
    for t in range(2, context + 1):
        out[:, :, t] = table[out[:, :, t - 2], out[:, :, t - 1], choice[:, :, t]]
    return out.to(device)


def train(backend, data, args, state):
    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.context, args.d_model, args.layers, args.heads, backend).cuda()
    model.load_state_dict(state)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    step_fn = torch.compile(model, fullgraph=True) if args.compile else model
    losses, tokens, seconds = [], 0, 0.0
    for step in range(args.steps):
        batch = data[step]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_fn(batch[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= args.warmup:  # compile and first-call planning excluded from tokens/s
            seconds += time.perf_counter() - t0
            tokens += batch[:, :-1].numel()
        losses.append(loss.item())
        if step % 50 == 0 or step == args.steps - 1:
            print(f"  {backend:5s} step {step:4d} loss {losses[-1]:.4f}", flush=True)
    return losses, tokens / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", help="a bundle with bf16 hd64 causal fwd+bwd kernels")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True)")
    ap.add_argument("--tolerance", type=float, default=0.02)
    args = ap.parse_args()
    if args.bundle:
        fagen.Bundle(args.bundle)
    torch.backends.cuda.matmul.allow_tf32 = True
    data = markov_batches(args.steps, args.batch, args.context, args.vocab, args.seed, "cuda")
    torch.manual_seed(args.seed)
    state = GPT(args.vocab, args.context, args.d_model, args.layers, args.heads, "sdpa").state_dict()
    print(f"GPT {args.layers}x{args.d_model} ({args.heads} heads of {args.d_model // args.heads}),"
          f" context {args.context}, batch {args.batch}, {args.steps} steps on "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (", compiled" if args.compile else ""), flush=True)
    runs = {name: train(name, data, args, state) for name in ("fagen", "sdpa")}
    tail = {name: sum(losses[-50:]) / len(losses[-50:]) for name, (losses, _) in runs.items()}
    worst = max(abs(a - b) / b for a, b in zip(runs["fagen"][0], runs["sdpa"][0]))
    rel = abs(tail["fagen"] - tail["sdpa"]) / tail["sdpa"]
    for name, (losses, rate) in runs.items():
        print(f"{name:5s}: first loss {losses[0]:.4f}, mean of the last 50 {tail[name]:.4f}, "
              f"{rate / 1e3:.1f}k tokens/s")
    print(f"last-50 mean losses differ by {rel:.2%} (tolerance {args.tolerance:.0%}); largest "
          f"per-step difference {worst:.2%}; floor ln 4 = {math.log(4):.4f}")
    learned = tail["sdpa"] < 0.8 * runs["sdpa"][0][0]  # the model learned, so the curves say something
    if not learned:
        print(f"the model did not learn (last-50 mean {tail['sdpa']:.4f} not below 0.8 x the first "
              f"loss): more --steps")
    ok = rel <= args.tolerance and learned
    print(f"train_gpt: {int(ok)} passed, {int(not ok)} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
