#!/usr/bin/env python3
"""Every relative link of README.md and docs/**/*.md resolves to a file or folder of the
repository, and README.md links nothing outside it (no URLs)."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
link = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
bad = []
for f in files:
    text = re.sub(r"```.*?```", "", f.read_text(), flags=re.S)  # code blocks hold no links
    for target in link.findall(text):
        if re.match(r"[a-z]+://|mailto:", target):
            if f.name == "README.md" and f.parent == root:
                bad.append(f"{f.relative_to(root)}: links outside the repository: {target}")
            continue
        path = target.split("#", 1)[0]
        if path and not (f.parent / path).exists():
            bad.append(f"{f.relative_to(root)}: broken link: {target}")
print("\n".join(bad) if bad else f"{len(files)} files, every relative link resolves")
sys.exit(1 if bad else 0)
