"""The speed guard's table and verdict: benchmark folders of a baseline and a candidate (runs
alternated: B1, C1, B2, C2), compared with ratios measured within each run only.

    python scripts/speed_guard.py --baseline B1 B2 --candidate C1 C2 [--selectors dflash,ddtree,taps]

`scripts/speed_guard.sh` runs the benchmarks and calls this. Every figure of a run comes from
`stage_table.per_round`: per run configuration, the median over prompts of the run's mean round
(and of each stage's share of it), so one slow prompt does not move it. Prompts whose AR run made
fewer than --min-tokens tokens are left out (examples-v1's `sort` stops at once: its one "round"
is the prefill). A side's value is the median of its runs (the mean of two). The checks:

    speed-up     per selector, its best over the budgets of tau x AR step / round (the tokens/s
                 ratio to AR of the same run, from per-round medians): fails when the candidate's
                 is more than 10% below the baseline's
    draft, verify   per selector at the baseline's best budget (the same budget on both sides):
                 the stage's ms per round as a multiple of the same run's AR step (ms per token);
                 fails when the candidate's is more than 15% above the baseline's
    AR step      the only comparison across runs, so with a loose limit: AR's ms per token,
                 candidate over baseline, in each alternated pair (B1, C1), (B2, C2); fails when
                 every pair is more than 25% slower (a burst of load hits one pair, not all)

A failure is firm when it holds for every pairing of a candidate run with a baseline run (the
candidate's best run against the baseline's worst; AR's rule is firm already). With --confirm, a
failure none of whose checks is firm exits 3: the shell script then runs a third alternated pair and
asks again without --confirm, and the median of three runs leaves one disturbed run out.

Exit status: 0 every check passes, 1 a failure (the last line names it), 2 bad input, 3 (only with
--confirm) not conclusive, run another pair.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stage_table import label, per_round  # noqa: E402

from taps.eval.bench_rows import finished_rows  # noqa: E402
from taps.policies import policy  # noqa: E402

SPEEDUP_FLOOR = 0.90     # candidate / baseline best speed-up over AR, at least
STAGE_CEILING = 1.15     # candidate / baseline stage per round / AR step, at most
AR_CEILING = 1.25        # candidate / baseline AR ms per token: fails when every alternated pair is above
MIN_TOKENS = 8
DISTURBED = 1.5          # a run whose slowest prompt's AR step is this many times its fastest's
NOT_CONCLUSIVE = 3


@dataclass
class Run:
    """One benchmark folder: AR's ms per token and, per (selector, budget), per_round's entry."""

    folder: Path
    ar_step: float
    entries: dict[tuple[str, int], dict[str, float]]
    ar_range: tuple[float, float] = (0.0, 0.0)    # AR's fastest and slowest prompt, ms per token

    @property
    def disturbed(self) -> bool:
        """AR's step is nearly the same on every prompt of an idle machine; far apart, another
        process took the CPU during the run (with two threads a busy core slows rounds 5-10x)."""
        return self.ar_range[1] > DISTURBED * self.ar_range[0]

    def speedup(self, selector: str, budget: int) -> float:
        e = self.entries[(selector, budget)]
        return e["tau"] * self.ar_step / e["round"]

    def best(self, selector: str) -> tuple[float, int]:
        """The selector's best speed-up over AR here and its budget."""
        return max((self.speedup(s, b), b) for s, b in self.entries if s == selector)

    def per_ar_step(self, selector: str, budget: int, stage: str) -> float:
        return self.entries[(selector, budget)][stage] / self.ar_step


def read_run(folder: Path, min_tokens: int = MIN_TOKENS) -> Run:
    """A bench folder's per-round medians over the prompts whose AR run made min_tokens or more."""
    rows = finished_rows(folder)
    kept_prompts = {r["prompt_id"] for r in rows if policy(r["selector"]).baseline and r["new_tokens"] >= min_tokens}
    rows = [r for r in rows if r["prompt_id"] in kept_prompts]
    if not rows:
        raise ValueError(f"{folder}: no prompt whose AR run made {min_tokens} tokens or more")
    with tempfile.TemporaryDirectory() as tmp:      # per_round reads a folder: give it the kept rows
        (Path(tmp) / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        table = per_round(Path(tmp))
    names = {(r["selector"], int(r["budget"])): label(r) for r in rows}
    ar = [name for (selector, _), name in names.items() if policy(selector).baseline]
    if not ar:
        raise ValueError(f"{folder}: no AR rows")
    entries = {key: table[name] for key, name in names.items() if not policy(key[0]).baseline}
    ar_ms = [1000 * r["time_s"] / r["rounds"] for r in rows if policy(r["selector"]).baseline]
    return Run(Path(folder), table[ar[0]]["round"], entries, (min(ar_ms), max(ar_ms)))


@dataclass
class Check:
    metric: str
    baseline: float
    candidate: float
    ratio: float
    limit: str
    ok: bool
    firm: bool          # a failure that holds for every pairing of runs (meaningless when ok)
    reason: str


def run_name(selector: str, estimator: str, budget: int | None = None) -> str:
    """`DDTree@8`, `TAPS/learned@8`, `DFlash` (the policy's label, as in tables and figures)."""
    p = policy(selector)
    name = f"{p.label}/{estimator}" if p.uses_estimator else p.label
    return name if budget is None else f"{name}@{budget}"


def _ratio(c: float, b: float) -> float:
    return c / b if b > 0 else (float("inf") if c > 0 else 1.0)


def ratio_check(name: str, base: list[Run], cand: list[Run], value: Callable[[Run], float],
                higher_is_better: bool, limit: float, reason: Callable[[float, float, float], str]) -> Check:
    """A within-run figure compared between the sides' medians; firm when even the candidate's
    best run against the baseline's worst fails."""
    b_vals, c_vals = [value(r) for r in base], [value(r) for r in cand]
    b_val, c_val = statistics.median(b_vals), statistics.median(c_vals)
    ratio = _ratio(c_val, b_val)
    if higher_is_better:
        ok, firm = ratio >= limit, _ratio(max(c_vals), min(b_vals)) < limit
        shown = f">= {limit:.2f}"
    else:
        ok, firm = ratio <= limit, _ratio(min(c_vals), max(b_vals)) > limit
        shown = f"<= {limit:.2f}"
    return Check(name, b_val, c_val, ratio, shown, ok, firm, reason(b_val, c_val, ratio))


def compare(base: list[Run], cand: list[Run], selectors: list[str], estimator: str = "learned") -> list[Check]:
    """The checks (module docstring), in table order."""
    checks: list[Check] = []
    trees = [s for s in selectors if not policy(s).baseline]
    best_budget = {}
    for s in trees:
        missing = [str(r.folder) for r in base + cand if not any(k[0] == s for k in r.entries)]
        if missing:
            raise ValueError(f"no {s} rows in {', '.join(missing)}")
        budgets = sorted({b for r in base for (sel, b) in r.entries if sel == s})
        best_budget[s] = max(budgets, key=lambda b, s=s: statistics.median(r.speedup(s, b) for r in base))
        name = f"{run_name(s, estimator)} best speed-up over AR (x)"
        checks.append(ratio_check(
            name, base, cand, lambda r, s=s: r.best(s)[0], True, SPEEDUP_FLOOR,
            lambda b, c, q, name=name: f"{name}: the candidate's {c:.2f}x is {100 * (1 - q):.0f}% below the "
                                       f"baseline's {b:.2f}x (limit 10%)"))
    for s in trees:
        b = best_budget[s]
        if any((s, b) not in r.entries for r in cand):
            raise ValueError(f"the candidate has no {s}@{b} rows (the baseline's best budget)")
        for stage in ("draft", "verify"):
            name = f"{run_name(s, estimator, b)} {stage} stage per round / AR step"
            checks.append(ratio_check(
                name, base, cand, lambda r, s=s, b=b, stage=stage: r.per_ar_step(s, b, stage), False, STAGE_CEILING,
                lambda bv, cv, q, name=name: f"{name}: {cv:.3f} against the baseline's {bv:.3f}, "
                                             f"{100 * (q - 1):.0f}% more (limit 15%)"))
    pairs = [c.ar_step / b.ar_step for b, c in zip(base, cand)]
    b_val, c_val = statistics.median(r.ar_step for r in base), statistics.median(r.ar_step for r in cand)
    ok = min(pairs) <= AR_CEILING
    name = "AR ms per token (pairs " + " / ".join(f"{p:.2f}" for p in pairs) + "; fails when all exceed)"
    checks.append(Check(name, b_val, c_val, min(pairs), f"<= {AR_CEILING:.2f}", ok, True,
                        f"AR's step is {100 * (min(pairs) - 1):.0f}% or more slower in every alternated pair "
                        f"({c_val:.1f} against {b_val:.1f} ms per token; limit 25%)"))
    return checks


def format_checks(checks: list[Check]) -> str:
    width = max(len(c.metric) for c in checks)
    header = f"{'metric':<{width}}  {'baseline':>8}  {'candidate':>9}  {'ratio':>6}  {'limit':>7}  verdict"
    lines = [header, "-" * len(header)]
    for c in checks:
        lines.append(f"{c.metric:<{width}}  {c.baseline:>8.3f}  {c.candidate:>9.3f}  {c.ratio:>6.3f}  "
                     f"{c.limit:>7}  {'ok' if c.ok else 'FAIL'}")
    return "\n".join(lines)


def describe_runs(side: str, runs: list[Run], selectors: list[str]) -> str:
    """One line per run: AR's ms per token and each selector's best speed-up (for the log)."""
    lines = []
    for n, r in enumerate(runs, start=1):
        bests = ", ".join(f"{s} {r.best(s)[0]:.2f}x@{r.best(s)[1]}" for s in selectors if not policy(s).baseline)
        lines.append(f"# {side} run {n} ({r.folder.name}): AR {r.ar_step:.1f} ms per token; best speed-ups {bests}"
                     + (f"; DISTURBED: AR {r.ar_range[0]:.1f}-{r.ar_range[1]:.1f} ms per token across prompts, "
                        "another process used the CPU" if r.disturbed else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--baseline", nargs="+", required=True, type=Path, help="the baseline's bench folders")
    ap.add_argument("--candidate", nargs="+", required=True, type=Path, help="the candidate's bench folders, "
                    "in the same order (the n-th ran right after the baseline's n-th)")
    ap.add_argument("--selectors", default="dflash,ddtree,taps")
    ap.add_argument("--estimator", default="learned", help="TAPS's estimator in the runs")
    ap.add_argument("--min-tokens", type=int, default=MIN_TOKENS,
                    help="leave out prompts whose AR run made fewer tokens (their round is the prefill)")
    ap.add_argument("--confirm", action="store_true",
                    help=f"exit {NOT_CONCLUSIVE} instead of 1 when no failing check is firm (run another pair)")
    args = ap.parse_args(argv)
    selectors = [s for s in args.selectors.split(",") if s and not policy(s).baseline]
    if len(args.baseline) != len(args.candidate):
        print("error: give as many baseline folders as candidate folders (alternated pairs)", file=sys.stderr)
        return 2
    try:
        base = [read_run(f, args.min_tokens) for f in args.baseline]
        cand = [read_run(f, args.min_tokens) for f in args.candidate]
        checks = compare(base, cand, selectors, args.estimator)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe_runs("baseline", base, selectors))
    print(describe_runs("candidate", cand, selectors))
    if any(r.disturbed for r in base + cand):
        print("# warning: disturbed runs: the guard is meant for an otherwise idle machine (medians and the "
              "alternation absorb some load, not all)")
    print(format_checks(checks))
    failed = [c for c in checks if not c.ok]
    if not failed:
        print(f"speed guard: ok ({len(checks)} checks, {len(base)} runs a side)")
        return 0
    if args.confirm and not any(c.firm for c in failed):
        print(f"speed guard: not conclusive: {len(failed)} check(s) failed, none in every pairing of runs "
              f"({failed[0].metric}); another alternated pair decides")
        return NOT_CONCLUSIVE
    first = next((c for c in failed if c.firm), failed[0])
    also = "; also " + ", ".join(c.metric for c in failed if c is not first) if len(failed) > 1 else ""
    print(f"speed guard: FAIL ({len(failed)} of {len(checks)} checks): {first.reason}{also}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
