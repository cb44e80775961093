"""Where one forward call's time goes at short sequences (used on the H200, 2026-11-30, to tell
launch cost from kernel time): for fagen (the bundle's planned kernel) and SDPA cuDNN on the FA3 protocol's
BSHD inputs, do_bench of one call (L2 cleared before each), 20 back-to-back launches between two
events, a CUDA graph replay, and the CPU time per call. Run from the repository root on the GPU:

    FAGEN_RT_LIB=.../libfagen_rt.so python3 bench/diag/launch_cost.py BUNDLE.fab
"""
import sys, time
import torch
from triton.testing import do_bench
sys.path.insert(0, "python")
from fagen import runtime as fagen_rt
from torch.nn.attention import sdpa_kernel, SDPBackend
bundle = fagen_rt.Bundle(sys.argv[1])
rows = []
for hd, seqlen, causal in ((128, 2048, False), (128, 2048, True), (64, 2048, False), (256, 2048, False), (128, 16384, False)):
    b, h = 16384 // seqlen, 2048 // hd
    q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    plan = bundle.plan_forward(q, k, v, causal=causal)
    o = torch.empty_like(q); lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    fns = {"fagen": lambda: plan.run(q, k, v, o, lse)}
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    fns["cudnn"] = cud
    for name, fn in fns.items():
        fn(); torch.cuda.synchronize()
        single = do_bench(fn, warmup=25, rep=100, return_mode="median")
        # back-to-back: 20 launches between two events (CPU overhead hidden behind the GPU)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3): fn()
        s.record()
        for _ in range(20): fn()
        e.record(); torch.cuda.synchronize()
        b2b = s.elapsed_time(e) / 20
        # graph replay
        g = torch.cuda.CUDAGraph()
        st = torch.cuda.Stream(); st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            fn()
        torch.cuda.current_stream().wait_stream(st); torch.cuda.synchronize()
        try:
            with torch.cuda.graph(g):
                fn()
            graph = do_bench(lambda: g.replay(), warmup=25, rep=100, return_mode="median")
        except Exception as ex:
            graph = float("nan"); print(name, "graph failed", ex)
        # CPU time per call, GPU kept busy
        torch.cuda.synchronize()
        fn(); fn()
        t0 = time.perf_counter()
        for _ in range(10): fn()
        cpu = (time.perf_counter() - t0) / 10 * 1e6
        torch.cuda.synchronize()
        rows.append((hd, seqlen, causal, name, single * 1e3, b2b * 1e3, graph * 1e3, cpu))
print("| hd | seqlen | causal | who | do_bench us | back-to-back us | graph replay us | CPU us/call |")
for r in rows:
    print("| %d | %d | %s | %s | %.1f | %.1f | %.1f | %.1f |" % r)
