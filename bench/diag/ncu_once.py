"""Launches for ncu (the sm90ws tile order's L2 and DRAM reads on the H200, docs/perf/sm90-fwd.md): for
each bundle given, one fagen forward call per shape, then one SDPA cuDNN call, on the FA3
protocol's shapes (batch x seqlen = 16k tokens, hidden 2048, bf16, non-causal unless --causal,
BSHD views of BHSD tensors). Run from the repository root on the GPU under ncu, e.g.:

    FAGEN_RT_LIB=.../libfagen_rt.so ncu --clock-control none \\
        --metrics lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,gpu__time_duration.sum \\
        -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --shapes 256x2048,128x2048 A.fab B.fab
    ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:fagen \\
        --launch-count 1 -o rep python3 bench/diag/ncu_once.py --shapes 256x2048 B.fab
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "python")
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("bundles", nargs="+")
ap.add_argument("--shapes", default="256x2048,128x2048", help="HDxSEQLEN list (default %(default)s)")
ap.add_argument("--causal", action="store_true", help="causal calls (bottom-right = top-left here: square)")
args = ap.parse_args()
try:
    cells = fa3.parse_cells(args.shapes)
except ValueError as e:
    ap.error(f"--shapes: {e}")
bundles = [fagen_rt.Bundle(p) for p in args.bundles]
for d, s in cells:
    b, h = fa3.shape(d, s)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    o = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    for bundle in bundles:
        bundle.plan_forward(qt, kt, vt, causal=args.causal).run(qt, kt, vt, o, lse)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    torch.cuda.synchronize()
