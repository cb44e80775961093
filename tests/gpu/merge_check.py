#!/usr/bin/env python3
"""fagen_run_merge_states on a GPU against a float64 reference (tests/gpu/decode_check.sh).

    PYTHONPATH=python python3 tests/gpu/merge_check.py .carry/decode.fab

For each (dtype, head dim) that the bundle's decode kernels merge, and 1, 2, 5 and 33 states:
random O states (batch 2, 3 rows, 8 heads) with random LSEs, and rows that test the rules of
fagen.h's fagen_merge_problem: a row whose states are all -inf (O = 0, LSE = -inf), a state
of LSE -inf whose O is NaN (ignored: the row stays finite), a NaN LSE (the row is NaN); the
states in a permuted (non-contiguous) layout once. The merged O must be within FlashAttention's
rule of the float64 merge (at most twice the error of the same merge in fp32 rounded to the
dtype, plus 1e-5; LSE plus 1e-4). Prints one line per case; exits 1 on a failure.
"""
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/python")
from fagen import runtime as fagen_rt  # noqa: E402


def reference(o_states, lse_states, dtype64):
    """The merge in `dtype64` (float64 or float32): O [B, T, H, D], LSE [B, H, T]."""
    o = o_states.to(dtype64)                                 # [S, B, T, H, D]
    lse = lse_states.to(dtype64)                             # [S, B, H, T]
    m = torch.where(lse.isnan(), -math.inf, lse).amax(dim=0)  # [B, H, T]
    nan = lse.isnan().any(dim=0)
    empty = (m == -math.inf) & ~nan
    w = torch.exp(lse - torch.where(empty, torch.zeros_like(m), m))  # -inf states: 0
    w = torch.where(lse == -math.inf, torch.zeros_like(w), w)
    wo = w.permute(0, 1, 3, 2).unsqueeze(-1)                 # [S, B, T, H, 1]
    o = torch.where(wo == 0, torch.zeros_like(o), o)         # a -inf state's O is ignored
    total = w.sum(dim=0)
    out = (wo * o).sum(dim=0) / total.permute(0, 2, 1).unsqueeze(-1)
    out_lse = m + torch.log(total)
    out = torch.where(empty.permute(0, 2, 1).unsqueeze(-1), torch.zeros_like(out), out)
    out_lse = torch.where(empty, torch.full_like(out_lse, -math.inf), out_lse)
    out = torch.where(nan.permute(0, 2, 1).unsqueeze(-1), torch.full_like(out, math.nan), out)
    out_lse = torch.where(nan, torch.full_like(out_lse, math.nan), out_lse)
    return out, out_lse


def max_err(got, want):
    """Largest |got - want|, NaN against NaN and equal infinities counting 0, else inf."""
    got, want = got.double(), want.double()
    both_nan = got.isnan() & want.isnan()
    same_inf = got.isinf() & want.isinf() & (got == want)
    diff = (got - want).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, math.inf), diff)
    return diff.max().item()


def case(bundle, dtype, head_dim, states, permuted, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, t, h = 2, 3, 8
    o_states = torch.randn(states, b, t, h, head_dim, device="cuda", generator=g).to(dtype)
    lse_states = 4 * torch.randn(states, b, h, t, device="cuda", generator=g)
    lse_states[:, 0, 0, 0] = -math.inf            # a row that sees no key in any state
    if states > 1:
        lse_states[1, 1, 2, 1] = -math.inf        # a state without keys: its O is ignored
        o_states[1, 1, 1, 2, :] = math.nan
        lse_states[0, 1, 3, 2] = math.nan         # a NaN LSE: the row is NaN
    if permuted:  # states as a [B, S, H, T, D] allocation viewed [S, B, T, H, D]
        o_states = o_states.permute(1, 0, 3, 2, 4).contiguous().permute(1, 0, 3, 2, 4)
    o, lse = bundle.merge_states(o_states, lse_states)
    torch.cuda.synchronize()
    exact_o, exact_lse = reference(o_states, lse_states, torch.float64)
    same_o, same_lse = reference(o_states, lse_states, torch.float32)
    bound_o = 2 * max_err(same_o.to(dtype), exact_o) + 1e-5
    bound_lse = 2 * max_err(same_lse, exact_lse) + 1e-4
    err_o, err_lse = max_err(o, exact_o), max_err(lse, exact_lse)
    ok = err_o <= bound_o and err_lse <= bound_lse
    print("%-9s hd %3d states %2d %-10s O %.2e (limit %.2e)  LSE %.2e (limit %.2e)  %s" % (
        str(dtype).split(".")[-1], head_dim, states, "permuted" if permuted else "contiguous",
        err_o, bound_o, err_lse, bound_lse, "ok" if ok else "MISMATCH"), flush=True)
    return ok


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bundle = fagen_rt.Bundle(sys.argv[1])
    merges = set()
    for name in bundle.kernel_names:
        if "_sm80decode_" in name:
            dtype = torch.bfloat16 if name.startswith("fagen_fwd_bf16") else torch.float16
            hd = name.split("_hd", 1)[1].split("_", 1)[0].split("x")[-1]
            merges.add((dtype, int(hd)))
    if not merges:
        sys.exit(f"{sys.argv[1]} has no decode kernel, hence no merge kernel")
    failed = 0
    seed = 1
    for dtype, hd in sorted(merges, key=lambda x: (str(x[0]), x[1])):
        for states in (1, 2, 5, 33):
            for permuted in ((False, True) if states == 5 else (False,)):
                failed += not case(bundle, dtype, hd, states, permuted, seed)
                seed += 1
    print(f"merge_states: {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
