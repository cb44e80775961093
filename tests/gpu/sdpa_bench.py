"""Times torch SDPA (flash = FlashAttention-2, cuDNN) on the harness's benchmark shapes and prints
them beside fagen's numbers from the harness's CSVs (one per template version).
Usage: sdpa_bench.py OUT_CSV LABEL=FAGEN_CSV [LABEL=FAGEN_CSV ...]"""
import csv
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(64, 2048), (64, 4096), (64, 16384), (128, 2048), (128, 4096), (128, 16384), (256, 8192)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    fagen = {}
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (int(row["head_dim"]), int(row["causal"]), int(row["seqlen"]))
                fagen.setdefault(key, []).append((float(row["tflops"]), f"{label}:{row['kernel']}"))
    rows = []
    for hd, seqlen in SHAPES:
        batch, heads = 16384 // seqlen, 2048 // hd
        q, k, v = (torch.randn(batch, heads, seqlen, hd, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        for causal in (0, 1):
            flops = 4.0 * batch * heads * seqlen * seqlen * hd * (0.5 if causal else 1.0)
            ref = {}
            for name, backend in BACKENDS.items():
                try:
                    with sdpa_kernel(backend):
                        ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=bool(causal)))
                    ref[name] = flops / (ms * 1e-3) / 1e12
                except RuntimeError as e:
                    print(f"{name} hd={hd} seqlen={seqlen}: {str(e).splitlines()[0]}")
                    ref[name] = float("nan")
            for tflops, kernel in sorted(fagen.get((hd, causal, seqlen), []), reverse=True):
                rows.append((hd, causal, seqlen, kernel, tflops, ref["flash"], ref["cudnn"]))
            if not fagen.get((hd, causal, seqlen)):
                rows.append((hd, causal, seqlen, "-", float("nan"), ref["flash"], ref["cudnn"]))
    # Every kernel to a file; to the terminal only each version's best kernel per shape.
    header = (f"{'hd':>3} {'causal':>6} {'seqlen':>6}  {'fagen kernel':<48} {'fagen':>6} "
              f"{'flash':>6} {'cudnn':>6} {'x flash':>7} {'x cudnn':>7}")
    def line(r):
        hd, causal, seqlen, kernel, t, fl, cu = r
        return (f"{hd:>3} {causal:>6} {seqlen:>6}  {kernel:<48} {t:6.1f} {fl:6.1f} {cu:6.1f} "
                f"{t / fl:7.3f} {t / cu:7.3f}")
    with open(sys.argv[1] + ".txt" if sys.argv[1] != "-" else "/dev/null", "w") as f:
        f.write(header + "\n" + "\n".join(line(r) for r in rows) + "\n")
    print("\n" + header)
    best = {}
    for r in rows:
        key = (r[0], r[1], r[2], r[3].split(":")[0])
        if key not in best or r[4] > best[key][4]:
            best[key] = r
    for key in sorted(best):
        print(line(best[key]).replace("fagen_fwd_sm80_", ""))
    if sys.argv[1] != "-":
        with open(sys.argv[1], "w") as f:
            w = csv.writer(f)
            w.writerow(["head_dim", "causal", "seqlen", "kernel", "fagen", "flash", "cudnn"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
