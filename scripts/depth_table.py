"""The table of docs/lab/bench_depth.sh: for each pair, AR's speed and every method's speed-up over
AR on HumanEval and the examples, each from that pair's own bench runs.

    python scripts/depth_table.py results/target-depth old d6 d8 d10 d12
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def rows(folder: Path) -> list[dict]:
    path = folder / "summary.csv"
    if not path.is_file():
        raise SystemExit(f"{folder}: no summary.csv (run docs/lab/bench_depth.sh first)")
    return list(csv.DictReader(path.open()))


def of(table: list[dict], selector: str, budget: int | None = None) -> list[dict]:
    return [r for r in table if r["selector"] == selector and (budget is None or int(r["budget"]) == budget)]


def best(table: list[dict], selector: str) -> str:
    r = max(of(table, selector), key=lambda r: float(r["speedup_vs_ar"]))
    return f"{float(r['speedup_vs_ar']):.2f}x @{r['budget']} (tau {float(r['tau']):.2f})"


def at(table: list[dict], selector: str, budget: int) -> str:
    found = of(table, selector, budget)
    if not found:
        return "-"
    return f"{float(found[0]['tau']):.2f} / {float(found[0]['speedup_vs_ar']):.2f}x"


def layers(folder: Path) -> str:
    pair = json.loads((folder / "bench.json").read_text())["pair"]
    for line in (folder / "summary.md").read_text().splitlines():
        if line.startswith("- Pair:"):
            return f"{pair} ({line.split('target ')[1].split(',')[0]})"
    return pair


def table(out: Path, labels: list[str]) -> str:
    lines = ["| label | pair (target size) | AR tok/s, 2 threads | AR tok/s, 1 thread | DFlash best | "
             "DDTree@16 tau / speed-up | DDTree@32 | TAPS/learned@16 | TAPS/learned@32 | "
             "examples: DDTree best | examples: TAPS/learned best | lossless |",
             "|---|---|---:|---:|---|---|---|---|---|---|---|---|"]
    for label in labels:
        he, ex, ar1 = (rows(out / f"{suite}-{label}") for suite in ("humaneval", "examples", "ar1"))
        lossless = all(r["lossless"] == "True" for r in he + ex + ar1)
        lines.append(f"| {label} | {layers(out / f'humaneval-{label}')} | {float(of(he, 'ar')[0]['tokens_per_s']):.1f} | "
                     f"{float(of(ar1, 'ar')[0]['tokens_per_s']):.1f} | {best(he, 'dflash')} | {at(he, 'ddtree', 16)} | "
                     f"{at(he, 'ddtree', 32)} | {at(he, 'taps', 16)} | {at(he, 'taps', 32)} | {best(ex, 'ddtree')} | "
                     f"{best(ex, 'taps')} | {'yes' if lossless else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("labels", nargs="+")
    args = ap.parse_args()
    print(table(args.out, args.labels))


if __name__ == "__main__":
    main()
