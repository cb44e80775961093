"""Times torch SDPA's flash (FlashAttention-2) and cuDNN backends' backward on the bwd harness's benchmark
shapes and prints it beside fagen's backward from the harness's CSV.
Usage: bwd_bench.py FAGEN_CSV [OUT_TABLE_CSV]
       bwd_bench.py --profile HD SEQLEN CAUSAL [flash|cudnn]
                                  (an SDPA forward, then 3 backward calls of that backend, flash
                                  by default: a target for ncu, e.g. -k regex:dq_dk_dv for flash,
                                  -k regex:bprop for cuDNN)
Backward FLOPs = 2.5 x forward = 10 * batch * heads * seqlen^2 * head_dim (halved for causal);
both sides are timed whole (fagen: _pre + main + _post; SDPA: autograd.grad of the output,
which runs FA2's own dot(dO, O) preprocess, main kernel and dQ conversion)."""
import csv
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_bench import time_ms  # the same event timing as the forward's SDPA numbers


def profile(hd, seqlen, causal, backend="flash"):
    batch, heads = 16384 // seqlen, 2048 // hd
    q, k, v = (torch.randn(batch, heads, seqlen, hd, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(batch, heads, seqlen, hd, device="cuda", dtype=torch.bfloat16)
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    with sdpa_kernel(chosen):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        for _ in range(3):
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    torch.cuda.synchronize()


def main():
    if sys.argv[1] == "--profile":
        return profile(*(int(a) for a in sys.argv[2:5]), *sys.argv[5:6])
    fagen = {}
    with open(sys.argv[1]) as f:
        for row in csv.DictReader(f):
            key = (int(row["head_dim"]), int(row["causal"]), int(row["seqlen"]))
            fagen.setdefault(key, {}).setdefault(row["kernel"], []).append(float(row["tflops"]))
    rows = []
    for hd, causal, seqlen in sorted(fagen):
        batch, heads = 16384 // seqlen, 2048 // hd
        q, k, v = (torch.randn(batch, heads, seqlen, hd, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(batch, heads, seqlen, hd, device="cuda", dtype=torch.bfloat16)
        flops = 10.0 * batch * heads * seqlen * seqlen * hd * (0.5 if causal else 1.0)
        base = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    out = torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=bool(causal))
                    ms = time_ms(
                        lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                        warmup=3, reps=20)
                base[name] = flops / (ms * 1e-3) / 1e12
            except RuntimeError as e:
                print(f"{name} hd={hd} seqlen={seqlen}: {str(e).splitlines()[0]}")
                base[name] = float("nan")
        del q, k, v, dout
        # A kernel timed in several rounds (run_bwd.sh ab with ROUNDS): its median.
        runs = [(statistics.median(t), kernel) for kernel, t in fagen[(hd, causal, seqlen)].items()]
        for tflops, kernel in sorted(runs, reverse=True):
            rows.append((hd, causal, seqlen, kernel, tflops, base["flash"], base["cudnn"]))
    header = (f"{'hd':>3} {'causal':>6} {'seqlen':>6}  {'fagen kernel':<48} {'fagen':>6} "
              f"{'flash':>6} {'cudnn':>6} {'x flash':>7} {'x cudnn':>7}")
    print("\n" + header)
    for hd, causal, seqlen, kernel, t, fl, cu in rows:
        print(f"{hd:>3} {causal:>6} {seqlen:>6}  {kernel.replace('fagen_bwd_', ''):<48} {t:6.1f} "
              f"{fl:6.1f} {cu:6.1f} {t / fl:7.3f} {t / cu:7.3f}")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            w = csv.writer(f)
            w.writerow(["head_dim", "causal", "seqlen", "kernel", "fagen_tflops", "flash_tflops",
                        "cudnn_tflops"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
