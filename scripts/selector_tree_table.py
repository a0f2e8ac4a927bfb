"""Tables of `scripts/bench_selector_tree.sh` (issue 60) from each suite's summary.csv: speed (cost-sized
TAPS, fixed-budget DDTree and the chains: tau, tokens/s, speed-up over AR with its spread), TAPS over
DFlash2's candidates (the selector estimator) against the others' best tokens/s, tau at equal budgets
(reach mode) over DDTree's, and expected against accepted tau per budget (calibration).

    python scripts/selector_tree_table.py OUT/humaneval OUT/examples
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

BUDGETS = (8, 16, 32, 64)
NAMES = {"dflash": "DFlash", "dflash2": "DFlash2", "ddtree": "DDTree", "taps/learned": "TAPS/learned",
         "taps/selector": "TAPS over DFlash2's candidates (selector)"}


def run_key(row) -> str:
    return f"{row.selector}/{row.estimator}" if row.selector == "taps" else row.selector


def speed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Each run's cost-sized (TAPS), fixed-budget (DDTree) or chain row per budget."""
    keep = df[(df.selector != "ar") & ((df.selector != "taps") | (df["mode"] == "cost"))]
    return keep.assign(key=[run_key(r) for r in keep.itertuples()])


def table(folder: Path) -> str:
    df = pd.read_csv(folder / "summary.csv")
    head = (folder / "summary.md").read_text().splitlines()
    machine = next((line[2:] for line in head if line.startswith("- Machine:")), "")
    command = next((line[2:] for line in head if line.startswith("- Command:")), "")
    ar = df[df.selector == "ar"].iloc[0]
    out = [f"### {folder.name}", "", f"{machine}  ", f"{command}", "",
           f"AR: {ar.tokens_per_s:.1f} tokens/s. Speed-up: tokens/s over AR's, measured side by side in this run "
           "(in brackets: the 25th-75th percentile of the per-prompt ratios). TAPS sized by cost, DDTree at its "
           "budget, the chains (DFlash, DFlash2) capped at it.", "",
           "| run | " + " | ".join(f"B={b}: τ, tokens/s, speed-up" for b in BUDGETS) + " | best tokens/s | "
           "pool+estimate+select share |", "|---|" + "---:|" * (len(BUDGETS) + 2)]
    speed = speed_rows(df)
    best = {}
    for key, name in NAMES.items():
        rows = speed[speed.key == key].set_index("budget")
        if rows.empty:
            continue
        cells = [f"{rows.tau[b]:.2f}, {rows.tokens_per_s[b]:.0f}, {rows.speedup_vs_ar[b]:.2f}x "
                 f"[{rows.speedup_p25[b]:.2f}-{rows.speedup_p75[b]:.2f}]" if b in rows.index else "-" for b in BUDGETS]
        top = rows.tokens_per_s.idxmax()
        best[key] = (rows.tokens_per_s[top], top)
        share = f"{100 * rows.select_share.min():.1f}-{100 * rows.select_share.max():.1f}%"
        out.append(f"| {name} | " + " | ".join(cells) + f" | {best[key][0]:.0f} (B={top}) | {share} |")
    if "taps/selector" in best:
        mine = best["taps/selector"][0]
        ratios = ", ".join(f"{mine / best[k][0]:.3f}x {NAMES[k]}'s" for k in ("ddtree", "dflash2", "taps/learned", "dflash")
                           if k in best)
        out += ["", f"Best tokens/s of TAPS over DFlash2's candidates over the best of: {ratios}."]
    reach = df[(df.selector == "taps") & (df["mode"] == "reach")]
    ddtree = df[df.selector == "ddtree"].set_index("budget")
    out += ["", "Equal budgets (TAPS in reach mode and DDTree both verify the budget's best nodes): τ over DDTree's.",
            "", "| run | " + " | ".join(f"B={b}" for b in BUDGETS) + " |", "|---|" + "---:|" * len(BUDGETS)]
    for estimator in ("learned", "selector"):
        rows = reach[reach.estimator == estimator].set_index("budget")
        if not rows.empty:
            out.append(f"| TAPS/{estimator} | " + " | ".join(
                f"{rows.tau[b] / ddtree.tau[b]:.3f}x ({rows.tau[b]:.2f} vs {ddtree.tau[b]:.2f})"
                if b in rows.index and b in ddtree.index else "-" for b in BUDGETS) + " |")
    out += ["", "Expected τ / accepted τ (ratio), round-weighted over every round of every prompt.", "",
            "| run | size | " + " | ".join(f"B={b}" for b in BUDGETS) + " | largest gap |",
            "|---|---|" + "---:|" * (len(BUDGETS) + 1)]
    for estimator in ("learned", "selector"):
        for mode in ("cost", "reach"):
            rows = df[(df.selector == "taps") & (df.estimator == estimator) & (df["mode"] == mode)].set_index("budget")
            if rows.empty:
                continue
            gaps = (rows.expected_tau / rows.accepted_tau - 1).abs()
            out.append(f"| TAPS/{estimator} | {mode} | " + " | ".join(
                f"{rows.expected_tau[b]:.2f} / {rows.accepted_tau[b]:.2f} ({rows.expected_tau[b] / rows.accepted_tau[b]:.3f})"
                if b in rows.index else "-" for b in BUDGETS) + f" | {100 * gaps.max():.1f}% |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    print("\n".join(table(Path(a)) for a in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
