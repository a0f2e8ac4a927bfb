"""Side-by-side runs: every selector x estimator x budget on the same prompts, AR alongside.

Used by `python -m taps compare` and by the benchmark suite. For each prompt, AR runs first in the
same process; each other run's speed-up is its tokens/s over that AR run's, and `lossless` says
whether its tokens equal AR's (at T=0 they must; at T>0 with the same seed too).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .costs import LatencyProfile
from .metrics import speedup, summarize
from .pair import ModelPair
from .session import DecodeConfig, DecodeSession


@dataclass
class Job:
    selector: str
    estimator: str
    budget: int

    @property
    def label(self) -> str:
        if self.selector == "taps":
            return f"taps/{self.estimator}@{self.budget}"
        return self.selector if self.selector == "ar" else f"{self.selector}@{self.budget}"


def read_prompts(path: str | Path) -> list[dict]:
    """JSONL lines {"id": ..., "prompt": ...}; clear errors for anything else."""
    prompts = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not a JSON line ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise ValueError(f"{path}:{n}: each line needs a string field 'prompt'")
        prompts.append({"id": str(item.get("id", n)), "prompt": item["prompt"]})
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


def plan_jobs(selectors: Iterable[str], budgets: Iterable[int], estimators: Iterable[str]) -> list[Job]:
    jobs = []
    for selector in selectors:
        if selector == "ar":
            continue
        for budget in budgets:
            for estimator in (estimators if selector == "taps" else ["marginal"]):
                jobs.append(Job(selector, estimator, budget))
    return jobs


def warm_up(pair: ModelPair, config: DecodeConfig) -> None:
    """Run a few rounds of AR and a tree selector so first-call costs stay out of the timings."""
    for selector in ("ar", "ddtree"):
        if selector != "ar" and pair.drafter is None:
            continue
        DecodeSession(pair, [1, 2, 3, 4], config, selector=selector, estimator="marginal",
                      max_new_tokens=8, budget=8).run()


def run_prompt(pair: ModelPair, prompt: dict, jobs: list[Job], config: DecodeConfig,
               profile: LatencyProfile | None = None, on_result: Callable[[dict], None] | None = None,
               keep_rounds: bool = False) -> list[dict]:
    """AR, then every job, on one prompt; one result row per run."""
    rows = []
    ar = DecodeSession(pair, prompt["prompt"], config, selector="ar")
    ar.run()
    ar_summary = summarize(ar.rounds)
    ar_tokens = ar.generated

    def row_for(job: Job, session: DecodeSession) -> dict:
        s = summarize(session.rounds)
        row = {"prompt_id": prompt["id"], "selector": job.selector, "estimator": job.estimator,
               "budget": job.budget, "token_ids": session.generated, "text": session.text,
               "tau": s.tau, "tokens_per_s": s.tokens_per_s,
               "speedup_vs_ar": speedup(s.tokens_per_s, ar_summary.tokens_per_s),
               "waste_share": s.waste_share, "verified_nodes": s.verified_nodes, "rounds": s.rounds,
               "new_tokens": s.new_tokens, "select_share": s.select_share, "expected_tau": s.expected_tau,
               "lossless": session.generated == ar_tokens, "time_s": s.time_s,
               **{f"{k}_time_share": v for k, v in s.stage_shares.items()}}
        if keep_rounds:
            row["round_records"] = [r.to_dict() for r in session.rounds]
        return row

    ar_job = Job("ar", "none", 1)
    rows.append(row_for(ar_job, ar))
    if on_result:
        on_result(rows[-1])
    for job in jobs:
        session = DecodeSession(pair, prompt["prompt"], config, profile=profile,
                                oracle_tokens=ar_tokens if job.selector == "oracle" else None,
                                selector=job.selector, estimator=job.estimator, budget=job.budget)
        session.run()
        rows.append(row_for(job, session))
        if on_result:
            on_result(rows[-1])
    return rows


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per selector x estimator x budget: token-weighted tau, time-weighted tokens/s."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["selector"], row["estimator"], row["budget"]), []).append(row)
    ar_rate = _rate(groups.get(("ar", "none", 1), []))
    out = []
    for (selector, estimator, budget), items in groups.items():
        rate = _rate(items)
        verified = sum(r["verified_nodes"] for r in items)
        out.append({
            "selector": selector, "estimator": estimator, "budget": budget,
            "tau": sum(r["new_tokens"] for r in items) / max(sum(r["rounds"] for r in items), 1),
            "tokens_per_s": rate, "speedup_vs_ar": speedup(rate, ar_rate),
            "waste_share": sum(r["waste_share"] * r["verified_nodes"] for r in items) / verified if verified else 0.0,
            "select_share": sum(r["select_share"] * r["time_s"] for r in items) / max(sum(r["time_s"] for r in items), 1e-12),
            "lossless": all(r["lossless"] for r in items), "prompts": len(items)})
    return out


def _rate(items: list[dict]) -> float:
    time_s = sum(r["time_s"] for r in items)
    return sum(r["new_tokens"] for r in items) / time_s if time_s > 0 else 0.0


def format_table(summary: list[dict]) -> str:
    header = f"{'selector':<8} {'estimator':<9} {'budget':>6} {'tau':>6} {'tok/s':>8} {'vs AR':>6} " \
             f"{'waste%':>7} {'select%':>8} lossless"
    lines = [header, "-" * len(header)]
    for r in summary:
        budget = "-" if r["selector"] == "ar" else str(r["budget"])
        estimator = r["estimator"] if r["selector"] == "taps" else "-"
        lines.append(f"{r['selector']:<8} {estimator:<9} {budget:>6} {r['tau']:>6.2f} {r['tokens_per_s']:>8.1f} "
                     f"{r['speedup_vs_ar']:>5.2f}x {100 * r['waste_share']:>6.1f}% {100 * r['select_share']:>7.1f}% "
                     f"{'yes' if r['lossless'] else 'NO'}")
    return "\n".join(lines)


class Progress:
    """A one-line progress report with an ETA, for long sweeps on a terminal."""

    def __init__(self, total: int, stream=None):
        import sys

        self.total, self.done, self.t0 = total, 0, time.perf_counter()
        self.stream = stream or sys.stderr

    def tick(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        self.stream.write(f"\r[{self.done}/{self.total}] {label:<28} elapsed {elapsed:6.0f}s  ETA {eta:6.0f}s")
        self.stream.flush()
        if self.done == self.total:
            self.stream.write("\n")
