"""Milliseconds per round, stage by stage, from benchmark folders (their rows.jsonl): the median
over prompts of each run's mean round, for chosen selector@budget labels, side by side.

    python scripts/stage_table.py before=results/round-cost/before-humaneval after=results/humaneval-cpu-cost \
        --runs ar,dflash@16,ddtree@16,taps/learned@16

A run's stage times are its time shares times its loop time over its rounds, so the stages add up
to the round. The draft stage is also given as a multiple of the same folder's AR step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taps.eval.bench_rows import finished_rows  # noqa: E402
from taps.eval.runner import Job, group_key  # noqa: E402
from taps.record import STAGES  # noqa: E402


def label(row: dict) -> str:
    """`ddtree@16 (cost)`: the run label and, where the row records one, its size choice."""
    return Job(*group_key(row)).label


def find(table: dict, run: str) -> str | None:
    """`run` itself, or the one size choice of it that the folder holds (`ddtree@16` finds
    `ddtree@16 (budget)` when that is the only DDTree@16 run there)."""
    if run in table:
        return run
    matches = [name for name in table if name.startswith(run + " (")]
    return matches[0] if len(matches) == 1 else None


def per_round(folder: Path) -> dict[str, dict[str, float]]:
    """label -> {stage: median ms per round, 'round': ..., 'tau': tokens per round over all}."""
    runs: dict[str, list[dict]] = {}
    for row in finished_rows(folder):
        runs.setdefault(label(row), []).append(row)
    table = {}
    for name, rows in runs.items():
        entry = {}
        for stage in STAGES:
            entry[stage] = 1000 * statistics.median(
                r["time_s"] * r.get(f"{stage}_time_share", 0.0) / r["rounds"] for r in rows)
        entry["round"] = 1000 * statistics.median(r["time_s"] / r["rounds"] for r in rows)
        entry["tau"] = sum(r["new_tokens"] for r in rows) / sum(r["rounds"] for r in rows)
        table[name] = entry
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="NAME=FOLDER (a benchmark output folder)")
    ap.add_argument("--runs", default="ar,dflash@16,ddtree@16,taps/learned@16")
    args = ap.parse_args()
    tables = {}
    for item in args.folders:
        name, _, folder = item.partition("=")
        tables[name] = per_round(Path(folder))
    print("| run | side | " + " | ".join(STAGES) + " | round | draft / AR step | tau |")
    print("|---|---|" + "---:|" * (len(STAGES) + 3))
    for run in args.runs.split(","):
        for side, table in tables.items():
            name = find(table, run)
            if name is None:
                continue
            e, ar = table[name], table.get("ar", {}).get("round")
            ratio = f"{e['draft'] / ar:.2f}" if ar and run != "ar" else "-"
            cells = " | ".join(f"{e[s]:.2f}" for s in STAGES)
            print(f"| {name} | {side} | {cells} | {e['round']:.2f} | {ratio} | {e['tau']:.2f} |")


if __name__ == "__main__":
    try:
        main()
    except FileNotFoundError as exc:
        sys.exit(f"error: {exc}")
