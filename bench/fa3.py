"""FlashAttention-3's benchmark shapes, shared by bench/'s benchmarks, probes and ncu_once.py:
batch x seqlen = 16k tokens, hidden 2048 (heads = 2048 / head dim), forward FLOPs 4 B H S^2 D
(half of that causal). No torch here, so that tests/bench/test_fa3.py runs on any machine."""

TOKENS = 16384
HIDDEN = 2048


def shape(head_dim, seqlen):
    """(batch, heads) of the cell: 16k tokens (at least one sequence), hidden 2048."""
    return max(1, TOKENS // seqlen), HIDDEN // head_dim


def fwd_flops(head_dim, seqlen, causal=False):
    """The forward's FLOPs by the usual formula, 4 B H S^2 D, halved for causal."""
    b, h = shape(head_dim, seqlen)
    flops = 4.0 * b * h * seqlen * seqlen * head_dim
    return flops / 2 if causal else flops


def parse_cells(text):
    """'256x2048,128x16384' -> [(256, 2048), (128, 16384)] (HDxSEQLEN); ValueError naming the
    cell that is not two positive integers."""
    cells = []
    for cell in text.split(","):
        parts = cell.strip().split("x")
        try:
            d, s = (int(x) for x in parts)
        except ValueError:
            raise ValueError(f"'{cell}' is not HDxSEQLEN, e.g. 256x2048") from None
        if d <= 0 or s <= 0:
            raise ValueError(f"'{cell}': head dim and seqlen must be positive, e.g. 256x2048")
        cells.append((d, s))
    return cells
