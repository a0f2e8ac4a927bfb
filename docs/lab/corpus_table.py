"""Markdown table of a corpus from OUT/tokenizer/corpus_stats.json (written by
``python -m taps.train tokenizer --stats``): files, characters, tokens per source and split, and
the files dropped per source and reason.

    python docs/lab/corpus_table.py runs/pair2/tokenizer/corpus_stats.json
"""

from __future__ import annotations

import json
import sys

REASONS = ("exact", "near", "exact-val", "near-val", "data-like", "humaneval")


def table(stats: dict) -> str:
    rows = ["| split | source | files | characters | tokens | dropped: exact dup | near dup | dup of a val file | "
            "data-like | HumanEval |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    dropped = stats.get("dropped", {})
    for split in ("train", "val"):
        for source, s in stats[split]["sources"].items():
            d = dropped.get(source, {}) if split == "train" else {}
            cells = [d.get("exact", 0), d.get("near", 0), d.get("exact-val", 0) + d.get("near-val", 0),
                     d.get("data-like", 0), d.get("humaneval", 0)]
            shown = " | ".join(f"{c:,}" if c else "–" for c in cells) if split == "train" else "– | – | – | – | –"
            rows.append(f"| {split} | {source} | {s['files']:,} | {s['chars']:,} | {s.get('tokens', 0):,} | {shown} |")
        t = stats[split]
        rows.append(f"| **{split}** | **all** | **{t['files']:,}** | **{t['chars']:,}** | "
                    f"**{t['tokens'] - t['files']:,}** | | | | | |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(json.loads(open(sys.argv[1]).read())))
