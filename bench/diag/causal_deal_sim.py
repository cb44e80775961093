"""Host simulation of the sm90ws forward's causal tile deal (the tile counter: each next tile,
in WsTileScheduler's order, goes to whichever CTA frees first) on the FlashAttention-3
protocol's shapes: the makespan over the mean CTA's work for a group rule, so that group sizes
can be compared for their tail before a GPU run (docs/perf/sm90-fwd.md). A tile's cost
is its key tiles plus a fixed overhead in steps (--overhead); memory effects are not modelled.

    python3 bench/diag/causal_deal_sim.py                 # every FA3 cell, 32 MB / 16 MB rules
    python3 bench/diag/causal_deal_sim.py --ctas 132 --overhead 1.2
"""
import argparse
import heapq
import math

MB = 1 << 20


def tiles_of(head_dim, seqlen):
    """(block_m, block_n) of the planner's causal sm90ws kernel at these cells."""
    if head_dim == 64:
        return (128, 128) if seqlen <= 1024 else (192, 128)
    if head_dim == 128:
        return (128, 128) if seqlen <= 4096 else (192, 80)
    return (128, 64) if seqlen <= 4096 else (128, 80)


def groups(rule, pairs, num_m, kv_bytes, ctas):
    """Group sizes in order. rule 'g32': 32 MB groups (the rule before the 16 MB groups; the last
    one may be short); 'g16': 16 MB groups likewise; 'tail': causal_tail_groups (16 MB groups, the
    last at least two tiles a CTA, at most 32 MB)."""
    if rule in ("g32", "g16"):
        g = max(1, min(pairs, (32 if rule == "g32" else 16) * MB // kv_bytes))
        return [min(g, pairs - first) for first in range(0, pairs, g)]
    g = max(1, min(pairs, 16 * MB // kv_bytes))
    last_max = max(g, min(pairs, 32 * MB // kv_bytes))
    last_min = max(1, min((2 * ctas + num_m - 1) // num_m, last_max))
    first = (pairs - last_min) // g * g if pairs > last_min else 0
    if pairs - first > last_max:
        first = (pairs - last_max + g - 1) // g * g
    return [g] * (first // g) + [pairs - first]


def makespan(head_dim, seqlen, rule, ctas, overhead):
    block_m, block_n = tiles_of(head_dim, seqlen)
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    num_m = math.ceil(seqlen / block_m)
    cost = [math.ceil(min(seqlen, (m + 1) * block_m) / block_n) + overhead for m in range(num_m)]
    order = []
    for size in groups(rule, batch * heads, num_m, seqlen * 2 * head_dim * 2, ctas):
        for m in range(num_m - 1, -1, -1):  # the heaviest level first, every pair of the group
            order += [cost[m]] * size
    free = [(0.0, c) for c in range(ctas)]
    for c in order:
        t, cta = heapq.heappop(free)
        heapq.heappush(free, (t + c, cta))
    return max(t for t, _ in free) / (sum(order) / ctas)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctas", type=int, default=132, help="CTAs running at once (default 132)")
    ap.add_argument("--overhead", type=float, default=1.2,
                    help="a tile's fixed cost in key-tile steps (default 1.2: a clock64 trace, H200)")
    args = ap.parse_args()
    print("hd seqlen    g32    g16   tail  (makespan / mean work)")
    for d in (64, 128, 256):
        for s in (2048, 4096, 8192, 16384):
            r = [makespan(d, s, rule, args.ctas, args.overhead) for rule in ("g32", "g16", "tail")]
            print(f"{d:3d} {s:6d}  " + "  ".join(f"{x:.3f}" for x in r))


if __name__ == "__main__":
    main()
