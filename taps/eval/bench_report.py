"""The bench's summary (`python -m taps.bench`, `taps.eval.bench`): the rows aggregated per run
configuration (summary.csv), and summary.md with the machine, the pair, the settings, the table, TAPS
against DFlash and DDTree (ratios within the run) and the calibration sections; the series the
bench's plots draw. Plain Python over row dicts: no model."""

from __future__ import annotations

import numpy as np

from ..config import ESTIMATORS
from ..policies import AR, DDTREE, DFLASH, TAPS, Policy, label_policy
from .metrics import reliability_table, speedup
from .runner import aggregate, group_key, run_label

SUMMARY_COLUMNS = ["selector", "estimator", "budget", "mode", "tau", "tokens_per_s", "speedup_vs_ar", "speedup_p25",
                   "speedup_p75", "waste_share", "select_share", "lossless", "verdict", "prompts", "expected_tau",
                   "accepted_tau"]


def is_baseline(selector: str) -> bool:
    """Whether rows of this selector are the baseline every speed-up divides by (AR)."""
    found = label_policy(selector)
    return found is not None and found.baseline


def summarise(rows: list[dict], selectors: list[str]) -> list[dict]:
    """runner.aggregate, ordered AR first, then the selectors as given, estimators, budgets.

    Each group's speed-up divides its tokens/s by that of the AR runs its rows were paired with
    (same prompt, same process): the same number as aggregate's when the sweep ran in one go, and
    still a within-process ratio when a resumed sweep reran AR."""
    selector_rank = {s: i for i, s in enumerate([AR.name, *selectors])}
    estimator_rank = {e: i for i, e in enumerate(["none", *ESTIMATORS])}
    summary = aggregate(rows)
    for entry in summary:
        key = (entry["selector"], entry["estimator"], entry["budget"], entry["mode"])
        items = [r for r in rows if group_key(r) == key]
        if not is_baseline(entry["selector"]) and all("ar_time_s" in r for r in items):
            ar_time = sum(r["ar_time_s"] for r in items)
            ar_rate = sum(r["ar_new_tokens"] for r in items) / ar_time if ar_time > 0 else 0.0
            entry["speedup_vs_ar"] = speedup(entry["tokens_per_s"], ar_rate)
            per_prompt = [r["speedup_vs_ar"] for r in items if r.get("speedup_vs_ar") == r.get("speedup_vs_ar")]
            if per_prompt:
                entry["speedup_p25"], entry["speedup_p75"] = (float(np.percentile(per_prompt, q)) for q in (25, 75))
    summary.sort(key=lambda r: (selector_rank.get(r["selector"], 99), estimator_rank.get(r["estimator"], 99),
                                r["mode"], r["budget"]))
    return summary


def taps_comparison(summary: list[dict]) -> list[dict]:
    """Per TAPS estimator: its best tokens/s (over its budgets and size choices) over DFlash's best
    and over DDTree's best (over DDTree's budgets and size choices), and TAPS's best at that same
    budget over DDTree there (all ratios within this run)."""
    def of(run: Policy) -> list[dict]:
        return [r for r in summary if label_policy(r["selector"]) is run]

    def best(run: Policy, estimator: str | None = None) -> dict | None:
        items = [r for r in of(run) if estimator in (None, r["estimator"])]
        return max(items, key=lambda r: r["tokens_per_s"], default=None)

    dflash, ddtree = best(DFLASH), best(DDTREE)
    out = []
    for estimator in dict.fromkeys(r["estimator"] for r in of(TAPS)):
        taps = best(TAPS, estimator)
        same = max((r for r in of(TAPS) if r["estimator"] == estimator
                    and ddtree is not None and r["budget"] == ddtree["budget"]),
                   key=lambda r: r["tokens_per_s"], default=None)
        out.append({
            "estimator": estimator, "taps_budget": taps["budget"], "taps_mode": taps["mode"],
            "taps_tokens_per_s": taps["tokens_per_s"], "taps_tau": taps["tau"],
            "taps_select_share": taps["select_share"],
            "dflash_budget": dflash["budget"] if dflash else None,
            "over_dflash": _ratio(taps, dflash),
            "ddtree_budget": ddtree["budget"] if ddtree else None,
            "ddtree_mode": ddtree["mode"] if ddtree else None,
            "over_ddtree": _ratio(taps, ddtree),
            "equal_budget_over_ddtree": _ratio(same, ddtree)})
    return out


def _ratio(run: dict | None, baseline: dict | None) -> float | None:
    if run is None or baseline is None or baseline["tokens_per_s"] <= 0:
        return None
    return run["tokens_per_s"] / baseline["tokens_per_s"]


def _modes(modes) -> str:
    return ", ".join(f"'{m}'" for m in ([modes] if isinstance(modes, str) else modes))


def _iqr(row: dict) -> str:
    if "speedup_p25" not in row:
        return "-"
    return f"{row['speedup_p25']:.2f}-{row['speedup_p75']:.2f}x"


def ratio_text(value: float | None) -> str:
    """A ratio as the summary writes it: "1.32x", "-" when there is none."""
    return "-" if value is None else f"{value:.2f}x"


def summary_markdown(summary: list[dict], meta: dict) -> str:
    machine, pair = meta["machine"], meta["pair"]
    device = machine["device"] + (f" ({machine['gpu']})" if "gpu" in machine else "")

    def millions(n: int) -> str:
        return f"{n / 1e6:.2f}M" if n else "none"

    lines = [f"# Benchmark: {meta['suite']} prompts, pair {pair['name']}", "",
             f"- Date: {meta['date']}",
             f"- Command: `{meta['command']}`",
             f"- Machine: {machine['cpu']}, {machine['cores']} cores ({machine.get('threads', '?')} torch threads), "
             f"{machine['os']}; Python {machine['python']}, "
             f"torch {machine['torch']}",
             f"- Device: {device}, {machine['dtype']}",
             f"- Pair: {pair['name']}: target {millions(pair['target_params'])} parameters, drafter "
             f"{millions(pair['drafter_params'])}, scorer {millions(pair['scorer_params'])}; block size "
             f"{pair['block_size']}, context {pair['max_context']}",
             f"- Prompts: {meta['prompts']} of {meta['suite_size']} in the suite"
             + (f" (--limit {meta['limit']})" if meta["limit"] else "")
             + (f"; {len(meta['skipped'])} skipped, too long to leave room for {meta['max_new_tokens']} new "
                f"tokens in the context: {', '.join(str(s['id']) for s in meta['skipped'][:8])}"
                + (" ..." if len(meta["skipped"]) > 8 else "") if meta["skipped"] else "")
             + ("; chat-formatted (the tokenizer's chat template, thinking disabled)" if meta.get("chat") else
                "; as plain text (no chat template)"),
             f"- Decoding: up to {meta['max_new_tokens']} new tokens, temperature {meta['temperature']}, "
             f"seed {meta['seed']}; TAPS reach calibration {meta.get('calibration', 'off')}; "
             f"TAPS size choice {_modes(meta['taps_mode'])}, DDTree size choice "
             f"{_modes(meta['ddtree_mode'])} (each size choice a run of its own, named in the size column)"
             + (f", latency profile: {meta['profile_source']}" if meta["profile_source"] else ""),
             f"- Processes: {meta['world_size']}"
             + (" (torch.distributed; prompts split round-robin by rank; every speed-up compares runs in the "
                "same process, but processes sharing cores slow each other, so absolute tokens/s are lower "
                "than a single process's)" if meta["world_size"] > 1 else ""),
             ]
    if len(meta["run_ids"]) > 1:
        lines.append(f"- Resumed: rows come from {len(meta['run_ids'])} runs ({', '.join(meta['run_ids'])}); "
                     f"each speed-up pairs a run with the AR run of its prompt in the same process")
    lines += ["", "## Results", "",
              "| selector | estimator | budget | size | tau | tokens/s | speed-up vs AR | per-prompt speed-up (IQR) "
              "| waste | select share | lossless (verdict against AR) | prompts |",
              "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in summary:
        lines.append(f"{_run_cells(r)} {r['tau']:.2f} | {r['tokens_per_s']:.1f} | "
                     f"{r['speedup_vs_ar']:.2f}x | {_iqr(r)} | {100 * r['waste_share']:.1f}% | "
                     f"{100 * r['select_share']:.1f}% | "
                     f"{r.get('verdict') or ('yes' if r['lossless'] else 'NO')} | {r['prompts']} |")
    comparison = taps_comparison(summary)
    if comparison:
        lines += ["", "## TAPS against DFlash and DDTree", "",
                  "TAPS at its best budget and size choice, against DFlash at its best budget and DDTree at its best "
                  "budget and size choice; the last column compares TAPS and DDTree at that same budget (equal "
                  "budget, TAPS's best size choice there).", "",
                  "| TAPS estimator | TAPS best | TAPS tokens/s | TAPS tau | TAPS select share | over DFlash "
                  "| over DDTree at its best | TAPS over DDTree at DDTree's best budget |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for c in comparison:
            dflash = f"{ratio_text(c['over_dflash'])} (DFlash@{c['dflash_budget']})" if c["dflash_budget"] else "-"
            ddtree = (f"{ratio_text(c['over_ddtree'])} (DDTree@{c['ddtree_budget']}, {c['ddtree_mode']})"
                      if c["ddtree_budget"] else "-")
            lines.append(f"| {c['estimator']} | @{c['taps_budget']}, {c['taps_mode']} | {c['taps_tokens_per_s']:.1f} "
                         f"| {c['taps_tau']:.2f} | {100 * c['taps_select_share']:.1f}% | {dflash} | {ddtree} "
                         f"| {ratio_text(c['equal_budget_over_ddtree'])} |")
    lines += calibration_markdown(summary)
    lines += ["", "All figures were measured in this run, each configuration once per prompt after a warm-up of "
              "every configuration. Tokens/s counts the whole decoding loop (every round's step() wall clock, the "
              "round record included; prefill excluded for every selector alike); speed-ups are ratios of tokens/s "
              "on the same prompts, device and process, and their spread is the interquartile range of the "
              "per-prompt ratios. tau = tokens committed per round; waste = share of verified "
              "nodes under a rejected prefix; select share = pool + estimate + select time over total. "
              "The oracle knows the target's continuation in hindsight: it bounds what any selector over the "
              "same drafter output can reach.", ""]
    return "\n".join(lines)


def _run_cells(r: dict) -> str:
    """A summary row's first four cells: selector, estimator (TAPS only), budget (not for AR) and size choice."""
    run = label_policy(r["selector"])
    budget = "-" if run is not None and run.baseline else str(r["budget"])
    estimator = r["estimator"] if run is not None and run.uses_estimator else "-"
    return f"| {r['selector']} | {estimator} | {budget} | {r.get('mode') or '-'} |"


def reliability_series(summary: list[dict]) -> dict[str, list[dict]]:
    """Per run label (budgets and size choices pooled), the reliability table of its verified nodes
    (`metrics.reliability_table`); runs without an estimate of their own (AR, the oracle) left out."""
    counts: dict[str, np.ndarray] = {}
    for r in summary:
        run = label_policy(r["selector"])
        if run is None or run.baseline or run.hindsight or not r.get("reliability"):
            continue
        label = run_label(r["selector"], r["estimator"])
        counts[label] = counts.get(label, 0) + np.asarray(r["reliability"], dtype=np.float64)
    return {label: reliability_table(c) for label, c in counts.items()}


def calibration_markdown(summary: list[dict]) -> list[str]:
    """The summary's calibration sections: expected tau (1 + the summed reach of the verified nodes,
    the selector's own prediction) against accepted tau (1 + the accepted draft nodes) per run, and
    the reliability table per run label."""
    runs = [r for r in summary if r.get("accepted_tau") and not is_baseline(r["selector"])
            and not getattr(label_policy(r["selector"]), "hindsight", False)]
    if not runs:
        return []
    lines = ["", "## Calibration: expected against accepted tau", "",
             "Expected tau is what the run predicted for each round before verifying it (1 + the summed reach "
             "of the verified nodes: TAPS's calibrated estimate, the marginal product for DFlash and DDTree); "
             "accepted tau is 1 + the draft nodes the target accepted (tau before a stop rule cuts the last "
             "round); both round-weighted. Within 5% is the aim.", "",
             "| selector | estimator | budget | size | expected tau | accepted tau | expected / accepted |",
             "|---|---|---:|---|---:|---:|---:|"]
    for r in runs:
        lines.append(f"{_run_cells(r)} {r['expected_tau']:.2f} | {r['accepted_tau']:.2f} | "
                     f"{r['expected_tau'] / r['accepted_tau']:.3f} |")
    series = reliability_series(summary)
    if series:
        lines += ["", "## Reliability: predicted reach against accepted share", "",
                  "Every verified draft node of the run label's runs (budgets and size choices pooled), binned by "
                  "its predicted reach: the bin's mean prediction and the share the target accepted "
                  "(`reliability.png` draws it).", "",
                  "| run | reach | nodes | mean predicted | accepted share |", "|---|---|---:|---:|---:|"]
        for label, table in series.items():
            lines += [f"| {label} | {row['bin']} | {row['nodes']} | {row['predicted']:.3f} | {row['observed']:.3f} |"
                      for row in table]
    return lines


def plot_series(summary: list[dict]) -> dict[str, list[dict]]:
    """One line per selector (and estimator), per size choice where a selector ran several."""
    several = {sel for sel in {r["selector"] for r in summary}
               if len({r["mode"] for r in summary if r["selector"] == sel}) > 1}
    series: dict[str, list[dict]] = {}
    for r in summary:
        if not is_baseline(r["selector"]):
            name = run_label(r["selector"], r["estimator"]) + (f" ({r['mode']})" if r["selector"] in several else "")
            series.setdefault(name, []).append(r)
    return series
