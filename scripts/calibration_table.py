"""The calibration tables from bench folders (scripts/bench_calibration.sh): per suite, each TAPS
estimator's expected tau against its accepted tau per budget and size choice (and DDTree's, whose
expectation is the marginal product), the largest gap per estimator, and the equal-budget tau of
each TAPS estimator over DDTree's (reach mode: both verify the budget's best nodes).

    python scripts/calibration_table.py results/calibration-cpu/humaneval results/calibration-cpu/examples
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

AIM = 0.05          # the bar: expected tau within 5% of the measured one


def read_summary(folder: Path) -> tuple[list[dict], dict]:
    with open(folder / "summary.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("accepted_tau")]
    settings = json.loads((folder / "bench.json").read_text()) if (folder / "bench.json").exists() else {}
    return rows, settings


def suite_name(folder: Path) -> str:
    md = folder / "summary.md"
    first = md.read_text().splitlines()[0] if md.exists() else ""
    return first.split("Benchmark: ")[-1].split(" prompts")[0] if "Benchmark: " in first else folder.name


def runs(rows: list[dict]) -> dict[tuple[str, str], dict[int, dict]]:
    """(run label, size choice) -> budget -> row, tree runs only."""
    out: dict[tuple[str, str], dict[int, dict]] = {}
    for r in rows:
        if r["selector"] not in ("taps", "ddtree", "dflash"):
            continue
        label = f"taps/{r['estimator']}" if r["selector"] == "taps" else r["selector"]
        out.setdefault((label, r["mode"] or "-"), {})[int(r["budget"])] = r
    return out


def ratio(r: dict) -> float:
    return float(r["expected_tau"]) / float(r["accepted_tau"])


def table(folder: Path) -> list[str]:
    rows, settings = read_summary(folder)
    by_run = runs(rows)
    budgets = sorted({b for per in by_run.values() for b in per})
    temperature = settings.get("temperature", 0.0)
    lines = [f"### {suite_name(folder)}, T={temperature:g}, calibration {settings.get('calibration', 'off')}", "",
             "Expected tau / accepted tau (their ratio), round-weighted over every round of every prompt.", "",
             "| run | size | " + " | ".join(f"B={b}" for b in budgets) + " | largest gap |",
             "|---|---|" + "---:|" * (len(budgets) + 1)]
    for (label, mode), per in sorted(by_run.items(), key=lambda kv: (not kv[0][0].startswith("taps"), kv[0])):
        cells = [f"{float(per[b]['expected_tau']):.2f} / {float(per[b]['accepted_tau']):.2f} ({ratio(per[b]):.3f})"
                 if b in per else "-" for b in budgets]
        gap = max((abs(ratio(per[b]) - 1) for b in per), default=0.0)
        mark = "" if label in ("ddtree", "dflash") else (" within 5%" if gap <= AIM else " **over 5%**")
        lines.append(f"| {label} | {mode} | " + " | ".join(cells) + f" | {100 * gap:.1f}%{mark} |")
    ddtree = by_run.get(("ddtree", "budget"), {})
    equal = [(label, per) for (label, mode), per in by_run.items() if label.startswith("taps") and mode == "reach"]
    if ddtree and equal:
        lines += ["", "Equal budgets (TAPS in reach mode and DDTree both verify the budget's best nodes): "
                  "TAPS's tau over DDTree's.", "",
                  "| run | " + " | ".join(f"B={b}" for b in budgets) + " |", "|---|" + "---:|" * len(budgets)]
        for label, per in sorted(equal):
            lines.append(f"| {label} | " + " | ".join(
                f"{float(per[b]['tau']) / float(ddtree[b]['tau']):.3f}x ({float(per[b]['tau']):.2f} vs "
                f"{float(ddtree[b]['tau']):.2f})" if b in per and b in ddtree else "-" for b in budgets) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args()
    out = []
    for folder in args.folders:
        out += table(folder) + [""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
