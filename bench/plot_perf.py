#!/usr/bin/env python3
"""README's forward performance table <-> bench/bench_fwd.py's JSON <-> docs/pictures/perf-fwd.svg.

The README's table (between the `perf-fwd:begin` and `perf-fwd:end` comments) is the one place
the numbers live; the plot is drawn from it, so the two cannot disagree.

    python3 bench/plot_perf.py table out.json            # bench_fwd.py --out JSON -> table rows
    python3 bench/plot_perf.py svg README.md -o docs/pictures/perf-fwd.svg
    python3 bench/plot_perf.py svg README.md --check docs/pictures/perf-fwd.svg   # exit 1 if stale

Each cell is `fagen / cuDNN / SDPA flash` in TFLOP/s. Python 3 standard library only.
"""
import argparse
import json
import re
import sys

BEGIN, END = "<!-- perf-fwd:begin -->", "<!-- perf-fwd:end -->"
SERIES = (("fagen", "#1f6fb4"), ("cuDNN", "#e07b00"), ("SDPA flash (FA2)", "#7a7a7a"))


def seqlen_label(s):
    return f"{s // 1024}k" if s % 1024 == 0 else str(s)


def table_from_json(path):
    """bench_fwd.py's rows as the README's markdown table."""
    with open(path) as f:
        data = json.load(f)
    rows = data["rows"]
    seqlens = sorted({r["seqlen"] for r in rows})
    keys = sorted({(r["head_dim"], r["causal"]) for r in rows})
    cell = {(r["head_dim"], r["causal"], r["seqlen"]): r for r in rows}
    out = ["| head dim | causal | " + " | ".join(seqlen_label(s) for s in seqlens) + " |",
           "| --- | --- |" + " --- |" * len(seqlens)]
    for hd, causal in keys:
        cells = []
        for s in seqlens:
            r = cell.get((hd, causal, s))
            cells.append("" if r is None else "%.0f / %.0f / %.0f" % (
                r["fagen_tflops"], r["cudnn_tflops"], r["flash_tflops"]))
        out.append(f"| {hd} | {'yes' if causal else 'no'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def parse_table(text):
    """[(head_dim, causal, [(seqlen_label, (fagen, cudnn, flash)), ...]), ...] from the block."""
    if BEGIN not in text or END not in text:
        sys.exit(f"plot_perf.py: no '{BEGIN}' ... '{END}' block")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    lines = [l.strip() for l in block.splitlines() if l.strip().startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    labels = header[2:]
    panels = []
    for line in lines[2:]:
        cols = [c.strip() for c in line.strip("|").split("|")]
        values = []
        for label, c in zip(labels, cols[2:]):
            nums = [float(x) for x in re.findall(r"[0-9.]+", c)]
            if len(nums) != 3:
                sys.exit(f"plot_perf.py: cell '{c}' is not 'fagen / cuDNN / flash'")
            values.append((label, tuple(nums)))
        panels.append((int(cols[0]), cols[1] == "yes", values))
    return panels


def svg(panels, title):
    pw, ph, ml, mt, gap = 300, 210, 50, 70, 30
    ncols = 3
    nrows = (len(panels) + ncols - 1) // ncols
    width = ml + ncols * (pw + gap)
    height = mt + nrows * (ph + 60) - 20
    ymax = max(v for _, _, vals in panels for _, t in vals for v in t)
    ymax = 100 * int(ymax / 100 + 1)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{ml}" y="22" font-size="15" font-weight="bold">{title}</text>']
    x = ml
    for name, color in SERIES:
        o.append(f'<rect x="{x}" y="34" width="12" height="12" fill="{color}"/>')
        o.append(f'<text x="{x + 16}" y="45">{name}</text>')
        x += 30 + 8 * len(name)
    # panels sorted: columns by head dim, rows by mask
    hds = sorted({p[0] for p in panels})
    for hd, causal, vals in panels:
        col, row = hds.index(hd), 1 if causal else 0
        x0, y0 = ml + col * (pw + gap), mt + row * (ph + 60)
        o.append(f'<text x="{x0 + pw / 2}" y="{y0 + 14}" text-anchor="middle" font-weight="bold">'
                 f'head dim {hd}, {"causal" if causal else "non-causal"}</text>')
        top, bottom = y0 + 24, y0 + ph
        for t in range(0, ymax + 1, 200):
            y = bottom - (bottom - top) * t / ymax
            o.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#ddd"/>')
            if col == 0:
                o.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{t}</text>')
        group = pw / len(vals)
        bw = group * 0.8 / len(SERIES)
        for i, (label, triple) in enumerate(vals):
            gx = x0 + i * group + group * 0.1
            for j, v in enumerate(triple):
                h = (bottom - top) * v / ymax
                o.append(f'<rect x="{gx + j * bw:.1f}" y="{bottom - h:.1f}" width="{bw - 1:.1f}" '
                         f'height="{h:.1f}" fill="{SERIES[j][1]}"><title>{SERIES[j][0]} '
                         f'{v:.0f} TFLOP/s</title></rect>')
            o.append(f'<text x="{gx + 0.5 * bw:.1f}" y="{bottom - (bottom - top) * triple[0] / ymax - 4:.1f}" '
                     f'text-anchor="middle" font-size="10">{triple[0]:.0f}</text>')
            o.append(f'<text x="{x0 + (i + 0.5) * group:.1f}" y="{bottom + 15}" '
                     f'text-anchor="middle">{label}</text>')
        o.append(f'<line x1="{x0}" y1="{bottom}" x2="{x0 + pw}" y2="{bottom}" stroke="#333"/>')
    o.append(f'<text x="14" y="{mt + ph / 2}" transform="rotate(-90 14 {mt + ph / 2})" '
             f'text-anchor="middle">TFLOP/s</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="print bench_fwd.py JSON as the README's table")
    t.add_argument("json")
    s = sub.add_parser("svg", help="draw the README's table")
    s.add_argument("readme")
    s.add_argument("-o", "--output")
    s.add_argument("--check", metavar="SVG", help="exit 1 unless SVG equals the drawing")
    s.add_argument("--title", default="Forward, bf16, H200: TFLOP/s (batch x seqlen = 16k tokens, "
                   "hidden 2048)")
    a = ap.parse_args()
    if a.cmd == "table":
        print(table_from_json(a.json))
        return 0
    with open(a.readme) as f:
        drawing = svg(parse_table(f.read()), a.title)
    if a.check:
        with open(a.check) as f:
            if f.read() != drawing:
                print(f"{a.check} is stale: python3 bench/plot_perf.py svg {a.readme} "
                      f"-o {a.check}", file=sys.stderr)
                return 1
        return 0
    if a.output:
        with open(a.output, "w") as f:
            f.write(drawing)
    else:
        sys.stdout.write(drawing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
