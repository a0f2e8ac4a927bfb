"""Two pairs side by side from their bench folders: each method's best speed-up over AR, tau at
equal verification budgets, and the issue's bars (DFlash tau >= 3; TAPS/learned tau above DDTree at
every equal budget; the new pair's best DDTree and TAPS speed-ups at least the old pair's).

    python scripts/compare_pairs.py OLD_FOLDER NEW_FOLDER [--names old,new]
    python scripts/compare_pairs.py --rule OLD1 NEW1 OLD2 NEW2 [...] [--names old,new]

`--rule` applies the shipping rule of issue 10 (docs/pair-selection.md) to several timed runs per
pair, given as OLD NEW folder pairs: for DDTree and each TAPS estimator, the new / old ratio of
best speed-ups over AR in each run, and their mean (of the unrounded ratios), which must be at
least 1.00. DFlash is shown but not judged.

Each folder is the output of one `python -m taps.bench` run (`summary.csv`), e.g. the
`humaneval-cpu-cost` folder of `bash scripts/bench_shipped.sh timed` for each pair. Speed-ups are
each run's own ratios against AR measured in the same process, so the two pairs compare through
their ratios, never through tokens/s taken from different runs. Prints Markdown; exits 0 whatever
the bars say (it reports, it does not judge a run).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

METHODS = [("DFlash", "dflash", None), ("DDTree", "ddtree", None), ("TAPS/marginal", "taps", "marginal"),
           ("TAPS/online", "taps", "online"), ("TAPS/learned", "taps", "learned")]


def read_summary(folder: Path) -> list[dict]:
    path = folder / "summary.csv"
    if not path.exists():
        raise SystemExit(f"{path} is missing: give the output folder of a `python -m taps.bench` run")
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        r["budget"] = int(r["budget"])
        for k in ("tau", "speedup_vs_ar", "speedup_p25", "speedup_p75"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
    return rows


def pick(rows: list[dict], selector: str, estimator: str | None) -> list[dict]:
    return [r for r in rows if r["selector"] == selector and (estimator is None or r["estimator"] == estimator)]


def best(rows: list[dict], selector: str, estimator: str | None) -> dict | None:
    chosen = [r for r in pick(rows, selector, estimator) if r["speedup_vs_ar"] is not None]
    return max(chosen, key=lambda r: r["speedup_vs_ar"]) if chosen else None


def label(r: dict | None) -> str:
    if r is None:
        return "-"
    where = f"@{r['budget']}" + (f", {r['mode']}" if r["mode"] else "")
    iqr = f" (IQR {r['speedup_p25']:.2f}-{r['speedup_p75']:.2f}x)" if r["speedup_p25"] is not None else ""
    return f"{r['speedup_vs_ar']:.2f}x {where}{iqr}, tau {r['tau']:.2f}"


def equal_budget_taus(rows: list[dict]) -> dict[int, tuple[float | None, float | None]]:
    """Budget -> (DDTree tau verifying exactly the budget, TAPS/learned tau verifying exactly it)."""
    out: dict[int, tuple[float | None, float | None]] = {}
    for b in sorted({r["budget"] for r in pick(rows, "ddtree", None)}):
        dd = [r["tau"] for r in pick(rows, "ddtree", None) if r["budget"] == b and r["mode"] == "budget"]
        tl = [r["tau"] for r in pick(rows, "taps", "learned") if r["budget"] == b and r["mode"] == "reach"]
        out[b] = (dd[0] if dd else None, tl[0] if tl else None)
    return out


def compare(old: list[dict], new: list[dict], names: tuple[str, str]) -> str:
    lines = [f"| method | {names[0]}: best speed-up over AR | {names[1]}: best speed-up over AR | new / old |",
             "|---|---|---|---:|"]
    for name, selector, estimator in METHODS:
        a, b = best(old, selector, estimator), best(new, selector, estimator)
        ratio = f"{b['speedup_vs_ar'] / a['speedup_vs_ar']:.2f}" if a and b else "-"
        lines.append(f"| {name} | {label(a)} | {label(b)} | {ratio} |")
    lines += ["", f"| budget | {names[0]}: DDTree tau / TAPS/learned tau | {names[1]}: DDTree tau / TAPS/learned tau |",
              "|---:|---|---|"]
    eq_old, eq_new = equal_budget_taus(old), equal_budget_taus(new)

    def pair_str(t):
        return " / ".join("-" if x is None else f"{x:.2f}" for x in t)

    for b in sorted(set(eq_old) | set(eq_new)):
        lines.append(f"| {b} | {pair_str(eq_old.get(b, (None, None)))} | {pair_str(eq_new.get(b, (None, None)))} |")
    dflash = [r["tau"] for r in pick(new, "dflash", None)]
    above = [tl > dd for dd, tl in eq_new.values() if dd is not None and tl is not None]
    checks = [
        ("DFlash tau at least 3", bool(dflash) and max(dflash) >= 3, f"best {max(dflash):.2f}" if dflash else "no rows"),
        ("TAPS/learned tau above DDTree at every equal budget", bool(above) and all(above),
         f"{sum(above)} of {len(above)} budgets"),
    ]
    for name, selector, estimator in METHODS[1:]:
        a, b = best(old, selector, estimator), best(new, selector, estimator)
        if a and b:
            checks.append((f"{name} best speed-up at least {names[0]}'s", b["speedup_vs_ar"] >= a["speedup_vs_ar"],
                           f"{b['speedup_vs_ar']:.2f}x against {a['speedup_vs_ar']:.2f}x"))
    lines += ["", f"Bars, on {names[1]}:", ""]
    lines += [f"- {'met' if ok else 'NOT met'}: {what} ({detail})" for what, ok, detail in checks]
    return "\n".join(lines)


RULE_METHODS = METHODS[1:]


def rule(runs: list[tuple[list[dict], list[dict]]], names: tuple[str, str]) -> tuple[str, bool]:
    """The shipping rule over runs [(old rows, new rows), ...]: a Markdown table and the verdict."""
    head = " / ".join(f"run {i + 1}" for i in range(len(runs)))
    lines = [f"| method | {names[0]}, {head} | {names[1]}, {head} | new / old, {head} | mean |",
             "|---|---:|---:|---:|---:|"]
    passed = True
    for name, selector, estimator in METHODS:
        olds = [best(old, selector, estimator) for old, _ in runs]
        news = [best(new, selector, estimator) for _, new in runs]
        if not all(olds) or not all(news):
            raise SystemExit(f"{name}: a run has no rows for it")
        ratios = [b["speedup_vs_ar"] / a["speedup_vs_ar"] for a, b in zip(olds, news)]
        mean = sum(ratios) / len(ratios)
        judged = (name, selector, estimator) in RULE_METHODS
        passed &= (mean >= 1.0) if judged else True
        cell = f"**{mean:.3f}**" if judged else f"{mean:.3f} (not judged)"
        old_s = " / ".join(f"{a['speedup_vs_ar']:.2f}x" for a in olds)
        new_s = " / ".join(f"{b['speedup_vs_ar']:.2f}x" for b in news)
        ratio_s = " / ".join(f"{r:.3f}" for r in ratios)
        lines.append(f"| {name} best | {old_s} | {new_s} | {ratio_s} | {cell} |")
    verdict = "met" if passed else "NOT met"
    lines += ["", f"The rule (mean new / old at least 1.00 for DDTree and every TAPS estimator): {verdict}"]
    return "\n".join(lines), passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="OLD NEW (with --rule: OLD1 NEW1 OLD2 NEW2 ...)")
    parser.add_argument("--rule", action="store_true", help="apply the shipping rule over several runs per pair")
    parser.add_argument("--names", default="old pair,new pair", help="two labels, comma-separated")
    args = parser.parse_args(argv)
    names = tuple(args.names.split(","))
    if len(names) != 2:
        raise SystemExit("--names takes two labels separated by a comma")
    if len(args.folders) % 2 or (not args.rule and len(args.folders) != 2):
        raise SystemExit("give the folders as OLD NEW pairs (more than one pair only with --rule)")
    pairs = [(read_summary(a), read_summary(b)) for a, b in zip(args.folders[::2], args.folders[1::2])]
    if args.rule:
        print(rule(pairs, names)[0])
    else:
        print(compare(*pairs[0], names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
