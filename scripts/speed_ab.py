"""Issue 44's A/B of the round's cost: the examples-v1 bench on a baseline commit (checked out into
a worktree) and on the working tree, alternately, RUNS times each, on one machine; then one row per
run: AR tokens/s, DFlash's and DDTree's best speed-up over AR (each measured within its own run),
DDTree@16's draft and verify milliseconds per round (and the draft as a share of the run's AR
step), and DDTree@32's tau.

    python scripts/speed_ab.py [--base f419de9] [--runs 2] [--out results/speed-ab]

Run it on an otherwise idle machine. The bench command is the one both commits understand:
`python -m taps.bench --prompts assets/examples/prompts-v1.jsonl --selectors ar,dflash,ddtree
--budgets 8,16,32 --max-new-tokens 64`.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from stage_table import find, per_round  # noqa: E402

BENCH = ["--prompts", str(ROOT / "assets/examples/prompts-v1.jsonl"), "--selectors", "ar,dflash,ddtree",
         "--budgets", "8,16,32", "--max-new-tokens", "64"]


def bench(code: Path, out: Path, cache: Path) -> None:
    """One bench run of the code in `code` (its own `taps`, first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(code), TAPS_CACHE=str(cache))
    subprocess.run([sys.executable, "-m", "taps.bench", *BENCH, "--out", str(out)], cwd=code, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def row(folder: Path) -> dict:
    summary = list(csv.DictReader((folder / "summary.csv").open()))
    best = {name: max(float(r["speedup_vs_ar"]) for r in summary if r["selector"] == name)
            for name in ("dflash", "ddtree")}
    ar_rate = next(float(r["tokens_per_s"]) for r in summary if r["selector"] == "ar")
    stages = per_round(folder)
    ddtree16, ddtree32, ar = stages[find(stages, "ddtree@16")], stages[find(stages, "ddtree@32")], stages["ar"]
    return {"ar_tokens_per_s": ar_rate, "dflash_best": best["dflash"], "ddtree_best": best["ddtree"],
            "draft_ms": ddtree16["draft"], "draft_over_ar_step": ddtree16["draft"] / ar["round"],
            "verify_ms": ddtree16["verify"], "tau_ddtree32": ddtree32["tau"]}


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| side | AR tok/s | DFlash best | DDTree best | draft / round (DDTree@16) | verify / round (DDTree@16) "
             "| tau (DDTree@32) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for side, r in rows:
        lines.append(f"| {side} | {r['ar_tokens_per_s']:.1f} | {r['dflash_best']:.2f}x | {r['ddtree_best']:.2f}x | "
                     f"{r['draft_ms']:.2f} ms ({r['draft_over_ar_step']:.2f} AR step) | {r['verify_ms']:.2f} ms | "
                     f"{r['tau_ddtree32']:.2f} |")
    sides = sorted({side.split(" run")[0] for side, _ in rows})
    for side in sides:
        mine = [r for s, r in rows if s.split(" run")[0] == side]
        lines.append(f"| {side}, mean | {statistics.mean(r['ar_tokens_per_s'] for r in mine):.1f} | "
                     f"{statistics.mean(r['dflash_best'] for r in mine):.2f}x | "
                     f"{statistics.mean(r['ddtree_best'] for r in mine):.2f}x | "
                     f"{statistics.mean(r['draft_ms'] for r in mine):.2f} ms "
                     f"({statistics.mean(r['draft_over_ar_step'] for r in mine):.2f} AR step) | "
                     f"{statistics.mean(r['verify_ms'] for r in mine):.2f} ms | "
                     f"{statistics.mean(r['tau_ddtree32'] for r in mine):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="f419de9", help="the baseline commit (default f419de9, before the move)")
    parser.add_argument("--runs", type=int, default=2, help="runs per side, alternated")
    parser.add_argument("--out", help="folder for table.md (default: print only)")
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            rows = []
            for run in range(1, args.runs + 1):
                for side, code in ((f"{args.base} run {run}", base), (f"working tree ({head.strip()}) run {run}", ROOT)):
                    out = Path(tmp) / side.replace(" ", "-").replace("(", "").replace(")", "")
                    bench(code, out, Path(tmp) / "cache")
                    rows.append((side, row(out)))
                    print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    text = f"`python scripts/speed_ab.py --base {args.base} --runs {args.runs}`\n\n{table(rows)}\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "table.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
