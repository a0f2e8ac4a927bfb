"""TAPS's edge in tokens/s from bench folders (scripts/bench_edge.sh): per run, TAPS/learned's best
tokens/s over its budgets and size choices against DDTree's best over its own, the ratio measured in
that run (same process, same prompts); per suite the mean over runs, the lowest run, and whether it
clears a bar (default 1.08x mean with no run below 1.00x, the issue's).

    python scripts/edge_table.py results/edge-cpu/humaneval-run1 results/edge-cpu/humaneval-run2 ...
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def best(rows: list[dict], selector: str, estimator: str | None = None) -> dict | None:
    chosen = [r for r in rows if r["selector"] == selector and (estimator is None or r["estimator"] == estimator)]
    return max(chosen, key=lambda r: float(r["tokens_per_s"]), default=None)


def run_ratio(folder: Path) -> dict:
    with open(folder / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    settings = json.loads((folder / "bench.json").read_text()) if (folder / "bench.json").exists() else {}
    md = (folder / "summary.md").read_text().splitlines()[0] if (folder / "summary.md").exists() else ""
    suite = md.split("Benchmark: ")[-1].split(" prompts")[0] if "Benchmark: " in md else folder.name
    taps, ddtree = best(rows, "taps", "learned"), best(rows, "ddtree")
    ar = best(rows, "ar")
    return {"suite": suite, "folder": folder.name, "temperature": settings.get("temperature", 0.0),
            "taps": taps, "ddtree": ddtree, "ar": ar,
            "ratio": float(taps["tokens_per_s"]) / float(ddtree["tokens_per_s"]) if taps and ddtree else None}


def label(row: dict) -> str:
    return f"@{row['budget']}, {row['mode']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--bar", type=float, default=1.08, help="the mean ratio to clear")
    ap.add_argument("--floor", type=float, default=1.00, help="no run below this ratio")
    args = ap.parse_args()
    results = [run_ratio(f) for f in args.folders]
    lines = ["| suite | run | T | TAPS/learned best | tokens/s | tau | DDTree best | tokens/s | tau | TAPS over DDTree |",
             "|---|---|---|---|---:|---:|---|---:|---:|---:|"]
    for r in results:
        t, d = r["taps"], r["ddtree"]
        lines.append(f"| {r['suite']} | {r['folder']} | {r['temperature']:g} | {label(t)} | "
                     f"{float(t['tokens_per_s']):.1f} | {float(t['tau']):.2f} | {label(d)} | "
                     f"{float(d['tokens_per_s']):.1f} | {float(d['tau']):.2f} | {r['ratio']:.3f}x |")
    lines += ["", "| suite | T | runs | mean ratio | lowest run | mean >= bar, none below floor |",
              "|---|---|---:|---:|---:|---|"]
    for suite, temperature in dict.fromkeys((r["suite"], r["temperature"]) for r in results):
        ratios = [r["ratio"] for r in results if r["suite"] == suite and r["temperature"] == temperature]
        mean = sum(ratios) / len(ratios)
        ok = mean >= args.bar and min(ratios) >= args.floor
        lines.append(f"| {suite} | {temperature:g} | {len(ratios)} | {mean:.3f}x | {min(ratios):.3f}x | "
                     f"{'yes' if ok else 'no'} (bar {args.bar:.2f}x, floor {args.floor:.2f}x) |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
