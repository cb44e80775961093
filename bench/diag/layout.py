"""BSHD against BHSD memory for fagen bundles and SDPA cuDNN: three interleaved rounds in one process (the labels, then cuDNN), medians
with the rounds' range. Run from the repository root on the GPU:

    FAGEN_RT_LIB=.../libfagen_rt.so python3 bench/diag/layout.py OLD=old.fab NEW=new.fab
"""
import sys, statistics
import torch
from triton.testing import do_bench
sys.path.insert(0, "python")
from fagen import runtime as fagen_rt
from torch.nn.attention import sdpa_kernel, SDPBackend
bundles = {a.split("=")[0]: fagen_rt.Bundle(a.split("=")[1]) for a in sys.argv[1:]}
print("| hd | seqlen | causal | layout | " + " | ".join(list(bundles) + ["cudnn"]) + " | " + " | ".join(f"{l}/cudnn" for l in bundles) + " |")
for hd, seqlen, causal in ((128, 2048, False), (128, 2048, True), (64, 2048, False), (256, 2048, False), (128, 4096, False), (128, 16384, False)):
    b, h = 16384 // seqlen, 2048 // hd
    for layout in ("bshd", "bhsd"):
        shape = (b, seqlen, h, hd) if layout == "bshd" else (b, h, seqlen, hd)
        q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        if layout == "bshd":
            qs, ks, vs = q, k, v                                  # fagen's [B,S,H,D] index
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))   # SDPA's [B,H,S,D] index
        else:
            qs, ks, vs = (x.transpose(1, 2) for x in (q, k, v))
            qt, kt, vt = q, k, v
        fns = {}
        for label, bundle in bundles.items():
            plan = bundle.plan_forward(qs, ks, vs, causal=causal)
            o = torch.empty(b, seqlen, h, hd, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
            fns[label] = (lambda plan=plan, o=o, lse=lse: plan.run(qs, ks, vs, o, lse))
        def cud():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        fns["cudnn"] = cud
        times = {n: [] for n in fns}
        for rep in range(3):
            for n, fn in fns.items():
                times[n].append(do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3)
        med = {n: statistics.median(t) for n, t in times.items()}
        print(f"| {hd} | {seqlen} | {causal} | {layout} | " + " | ".join("%.1f (%.0f-%.0f)" % (med[n], min(times[n]), max(times[n])) for n in fns)
              + " | " + " | ".join("%.3f" % (med["cudnn"] / med[l]) for l in bundles) + " |", flush=True)
        del q, k, v
