"""Decode with an append on a GPU: the query tokens' own keys and values written into a paged KV
cache before the decode (fagen_run_forward_paged_append, fagen.decode_paged(k_new=, v_new=)),
for every paged decode kernel of the bundles (tests/gpu/check-paged.yaml's p*,
bench/bench-decode.yaml's paged*).

    FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONPATH=python \\
        python3 tests/gpu/append_check.py --bundle .carry/paged.fab [--quick]

Per kernel and token count (1, and the most the kernel takes of 2 and 4): a batch of 5
sequences (an empty cache, a page - 1 keys so that the new tokens cross into the next page, a
whole page, 3 pages + 5, 300 keys), GQA 4:1, pages in shuffled order with NaN in every row no
sequence owns and in the new tokens' rows before the append:
- the caches after the append equal, bit for bit, the caches built with the new tokens in
  place (every other row, NaN ones included, untouched);
- out and LSE equal bit for bit the plain paged decode (no append) over those caches with
  seqused_k + tokens, and are within 2x (+1e-4) of the input dtype's error of the float64
  reference over each sequence's keys;
- a length without room for the new tokens and a bad page id where they go: Plan.status names
  them, and no row outside the other sequences' new ones changed;
- once: torch.compile(fullgraph=True) of a function calling fagen.decode_paged with k_new /
  v_new equals eager, caches included.
Prints one line per check and exits non-zero if any failed.
"""
import argparse
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import fagen  # noqa: E402
from bench_prefill import paged_cache  # noqa: E402
from check_runner import Checks  # noqa: E402

DEV = "cuda"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


check = Checks(64)


def kernel_variant(name):
    """(dtype, head_dim_qk, head_dim_v, plan keywords, page size) of a paged decode kernel's
    name (fagen_fwd_fp16_hd128_window_softcap_paged128_sm80decode_...), or None."""
    m = re.match(r"fagen_fwd_(bf16|fp16)_hd(\d+)(?:x(\d+))?_(none|causal|causaltl|window)"
                 r"(_softcap)?_paged(\d+)_sm80decode_", name)
    if not m:
        return None
    dtype, dqk, dv, mask, softcap, page = m.groups()
    kw = dict(causal=mask.startswith("causal"),
              mask_align="top_left" if mask == "causaltl" else "bottom_right")
    if mask == "window":
        kw.update(mask="window", window=(200, 0))
    if softcap:
        kw["softcap"] = 30.0
    return DTYPES[dtype], int(dqk), int(dv or dqk), kw, int(page)


def reference(q, ks, vs, kw, upcast=True):
    """out [B, T, Hq, Dv], LSE [B, Hq, T] of each sequence's tokens over its keys (bottom-right
    or top-left causal, window (left, right), softcap), in float64 or the input dtype."""
    outs, lses = [], []
    for b, (k, v) in enumerate(zip(ks, vs)):
        qs = q[b]
        if upcast:
            qs, k, v = qs.double(), k.double(), v.double()
        t, n, group = qs.shape[0], k.shape[0], qs.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = torch.einsum("ihd,jhd->hij", qs, k) / math.sqrt(qs.shape[-1])
        if kw.get("softcap"):
            s = kw["softcap"] * torch.tanh(s / kw["softcap"])
        i = torch.arange(t, device=DEV)[:, None] + (0 if kw["mask_align"] == "top_left" else n - t)
        j = torch.arange(n, device=DEV)[None, :]
        hidden = torch.zeros(t, n, dtype=torch.bool, device=DEV)
        if kw["causal"]:
            hidden |= j > i
        if "window" in kw:
            left, right = kw["window"]
            hidden |= (j < i - left) | (j > i + right)
        s = s.masked_fill(hidden, float("-inf"))
        lses.append(torch.logsumexp(s.double(), dim=-1).float())
        outs.append(torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1).nan_to_num(), v))
    return torch.stack(outs).to(q.dtype), torch.stack(lses)


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def same(a, b):
    return torch.equal(bits(a), bits(b))


def setup(variant, tokens, seed):
    """Inputs of one case: q, k_new, v_new, the caches before and after the append (built with
    the new rows in place), the block table, the lengths before it, and the keys per sequence."""
    dtype, dqk, dv, kw, page = variant
    gen = torch.Generator().manual_seed(seed)
    hq, hkv = 8, 2
    used = [0, page - 1, page, 3 * page + 5, 300]
    ks = [torch.randn(n + tokens, hkv, dqk, generator=gen).to(DEV, dtype) for n in used]
    vs = [torch.randn(n + tokens, hkv, dv, generator=gen).to(DEV, dtype) for n in used]
    q = torch.randn(len(used), tokens, hq, dqk, generator=gen).to(DEV, dtype)
    k_after, v_after, table = paged_cache(ks, vs, page, gen)
    k_new = torch.stack([k[n:] for k, n in zip(ks, used)])
    v_new = torch.stack([v[n:] for v, n in zip(vs, used)])
    # Before the append: the new tokens' rows hold NaN, as rows no sequence owns do.
    new_rows = torch.zeros(k_after.shape[:2], dtype=torch.bool, device=DEV)
    for b, n in enumerate(used):
        for key in range(n, n + tokens):
            new_rows[table[b, key // page], key % page] = True
    k_before, v_before = k_after.clone(), v_after.clone()
    k_before[new_rows] = float("nan")
    v_before[new_rows] = float("nan")
    lengths = torch.tensor(used, dtype=torch.int32, device=DEV)
    return q, k_new, v_new, (k_before, v_before), (k_after, v_after), table, lengths, ks, vs, \
        new_rows


def case(bundle, index, variant, tokens, seed):
    dtype, dqk, dv, kw, page = variant
    q, k_new, v_new, before, after, table, used, ks, vs, new_rows = setup(variant, tokens, seed)
    seqlen_k = int(used.max()) + tokens
    plan = bundle.plan_forward_paged(q, before[0], before[1], table, seqlen_k,
                                     kernel_index=index, **kw)
    kc, vc = before[0].clone(), before[1].clone()
    out, lse = torch.empty(q.shape[:3] + (dv,), dtype=dtype, device=DEV), \
        torch.empty(q.shape[0], q.shape[2], tokens, device=DEV)
    plan.run_paged(q, kc, vc, out, lse, table, used, k_new=k_new, v_new=v_new)
    plan.status()
    if not (same(kc, after[0]) and same(vc, after[1])):
        raise AssertionError("the caches after the append differ from the caches built with the "
                             "new tokens in place")
    # The plain paged decode over the caches with the tokens in place, lengths + tokens.
    o_plain, lse_plain = torch.empty_like(out), torch.empty_like(lse)
    plan.run_paged(q, after[0], after[1], o_plain, lse_plain, table, used + tokens)
    plan.status()
    if not (same(out, o_plain) and same(lse, lse_plain)):
        raise AssertionError("out / LSE differ from the plain paged decode over the caches with "
                             "the new tokens in place")
    ref, ref_lse = reference(q, ks, vs, kw)
    low, _ = reference(q, ks, vs, kw, upcast=False)
    e, eb = (out.float() - ref.float()).abs().max().item(), \
        (low.float() - ref.float()).abs().max().item()
    if not e <= 2 * eb + 1e-4:
        raise AssertionError(f"out error {e:.3g} > 2 x {eb:.3g} + 1e-4 (the input dtype's math)")
    finite = ref_lse.isfinite()
    e_lse = (lse - ref_lse)[finite].abs().max().item()
    if not (e_lse <= 1e-3 and torch.equal(lse.isfinite(), finite)):
        raise AssertionError(f"LSE error {e_lse:.3g} > 1e-3, or -inf rows differ")

    # Bad entries: no room for the new tokens in the last sequence; a bad page id where the
    # fourth sequence's new tokens go. Nothing changes outside the other sequences' new rows.
    last_rows = torch.zeros_like(new_rows)
    n = int(used[-1])
    for key in range(n, n + tokens):
        last_rows[table[-1, key // page], key % page] = True
    no_room = used.clone()
    no_room[-1] = seqlen_k - tokens + 1
    bad_table = table.clone()
    slot = int(used[3]) // page
    bad_table[3, slot] = 10 ** 6
    fourth_rows = torch.zeros_like(new_rows)
    n = int(used[3])
    for key in range(n, n + tokens):
        if key // page == slot:
            fourth_rows[table[3, key // page], key % page] = True
    for what, lengths, tab, skipped, message in (
            ("no room", no_room, table, last_rows,
             f"seqused_k[4] = {int(no_room[-1])} leaves no room for the {tokens} new tokens"),
            ("bad page", used, bad_table, fourth_rows,
             f"block_table[3][{slot}] = 1000000 is not a page id")):
        kc, vc = before[0].clone(), before[1].clone()
        plan.run_paged(q, kc, vc, out, lse, tab, lengths, k_new=k_new, v_new=v_new)
        try:
            plan.status()
            raise AssertionError(f"{what}: the status reported nothing")
        except fagen.runtime.FagenError as err:
            if message not in str(err):
                raise AssertionError(f"{what}: the status says {err!s:.200}, not {message!r}")
        written = new_rows & ~skipped
        for got, want, old in ((kc, after[0], before[0]), (vc, after[1], before[1])):
            if not (same(got[written], want[written]) and same(got[~written], old[~written])):
                raise AssertionError(f"{what}: rows outside the other sequences' new ones "
                                     f"changed, or theirs were not written")
    return f"out {e:.2g}/{eb:.2g} lse {e_lse:.2g}, splits {plan.decode_splits}"


def refusal(bundle, index, variant, tokens):
    """Why the kernel does not plan a call of `tokens` query tokens (more than its q_tokens),
    or "" when it does."""
    dtype, dqk, dv, kw, page = variant
    q = torch.empty(1, tokens, 8, dqk, dtype=dtype, device=DEV)
    kc = torch.empty(4, page, 2, dqk, dtype=dtype, device=DEV)
    vc = torch.empty(4, page, 2, dv, dtype=dtype, device=DEV)
    table = torch.zeros(1, 4, dtype=torch.int32, device=DEV)
    try:
        bundle.plan_forward_paged(q, kc, vc, table, page, kernel_index=index, **kw)
        return ""
    except fagen.runtime.FagenError as e:
        if e.status_name != "FAGEN_ERROR_NOT_SUPPORTED":
            raise
        return str(e)


def compiled(variant):
    """torch.compile(fullgraph=True) of fagen.decode_paged with an append equals eager (the
    first loaded bundle serves the call: no bundle= inside the compiled function)."""
    dtype, dqk, dv, kw, page = variant
    q, k_new, v_new, before, after, table, used, _, _, _ = setup(variant, 1, 7)
    seqlen_k = int(used.max()) + 1

    op_kw = {key: value for key, value in kw.items() if key != "mask"}  # the op: window=

    def step(q, kc, vc, k_new, v_new):
        return fagen.decode_paged(q, kc, vc, table, used, max_seqlen_k=seqlen_k, k_new=k_new,
                                  v_new=v_new, return_lse=True, **op_kw)

    caches = [(before[0].clone(), before[1].clone()) for _ in range(2)]
    eager = step(q, *caches[0], k_new, v_new)
    graph = torch.compile(step, fullgraph=True)(q, *caches[1], k_new, v_new)
    if not all(same(a, b) for a, b in zip(eager, graph)):
        raise AssertionError("compiled out / LSE differ from eager")
    if not all(same(a, b) for a, b in zip(caches[0] + caches[1], after + after)):
        raise AssertionError("the caches after the compiled or the eager call differ from the "
                             "caches built with the new tokens in place")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", action="append", required=True)
    ap.add_argument("--quick", action="store_true",
                    help="one kernel, one token count, no torch.compile")
    args = ap.parse_args()
    first = None
    for path in args.bundle:
        bundle = fagen.Bundle(path)
        for index, name in enumerate(bundle.kernel_names):
            name = name.split(" ")[0]
            variant = kernel_variant(name)
            if variant is None:
                continue
            first = first or variant
            for tokens in (1, 2, 4):
                why = refusal(bundle, index, variant, tokens)
                if why:
                    print(f"skip  {name[10:60]} T={tokens}: {why[:120]}")
                    continue
                check(f"{name[10:60]} T={tokens}", case, bundle, index, variant, tokens,
                      100 + tokens)
                if args.quick:
                    break
            if args.quick:
                break
        if args.quick and first:
            break
    if first is None:
        print("no paged decode kernel in the bundles")
        sys.exit(1)
    if not args.quick:  # (--quick runs under compute-sanitizer: no compiler there)
        check("torch.compile of decode_paged with an append", compiled, first)
    failed = len(check.failed())
    print(f"{len(check.results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
