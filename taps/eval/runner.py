"""Side-by-side runs: selectors x estimators x budgets on the same prompts, AR alongside.

The one run path of the command line (`python -m taps compare`), the benchmark and the app's race
and sweep: for each prompt AR runs first, in the same process; each other run's speed-up is its
tokens/s over that AR run's, and `lossless` says whether its tokens equal AR's (at T=0 they must;
at T>0 with the same seed too). Where they differ, `verdict` says where and why (`taps.verdict`):
a near-tie that low-precision rounding decided differently, or a bug; with `strict`, a near-tie is
rerun in float32. Every run gives one `RunRow`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..config import DecodeConfig, run_label
from ..cost_model import LatencyProfile
from ..pair import ModelPair
from ..policies import AR, DDTREE, policy
from ..record import Round
from ..session import DecodeSession
from ..verdict import Verdict, combine, lossless_verdict, strict_verdict, with_strict
from .metrics import RunSummary, speedup, summarize


def runnable_selectors(selectors: Iterable[str], temperature: float) -> list[str]:
    """The tree selectors that can run at this temperature (the oracle is greedy only), AR left out."""
    return [s for s in dict.fromkeys(selectors)
            if not policy(s).baseline and not (policy(s).greedy_only and temperature > 0)]


@dataclass(frozen=True)
class Job:
    selector: str
    estimator: str
    budget: int
    mode: str = ""      # size choice of a taps or ddtree run ("": the config's)

    @property
    def label(self) -> str:
        name = run_label(self.selector, self.estimator, self.budget)
        return f"{name} ({self.mode})" if self.mode else name

    def settings(self, config: DecodeConfig) -> DecodeConfig:
        return config.with_run(self.selector, self.estimator, self.budget, self.mode)

    @property
    def key(self) -> tuple:
        """The job's configuration in the shape of `group_key` (a row's)."""
        return self.selector, self.estimator, self.budget, self.mode


AR_JOB = Job(AR.name, "none", 1)


def plan_jobs(selectors: Iterable[str], budgets: Iterable[int], estimators: Iterable[str],
              modes: dict[str, list[str]] | None = None) -> list[Job]:
    """Every tree selector x budget (x estimator for TAPS, x size choice for TAPS and DDTree when
    `modes` lists them per selector); AR is not a job, it always runs first."""
    modes = modes or {}
    jobs = []
    for selector in selectors:
        if policy(selector).baseline:
            continue
        for budget in budgets:
            for estimator in (estimators if policy(selector).uses_estimator else ["marginal"]):
                for mode in modes.get(selector) or [""]:
                    jobs.append(Job(selector, estimator, budget, mode))
    return jobs


@dataclass
class RunRow:
    """One run of one prompt: what every table, CSV and plot of runs is built from."""

    prompt_id: str
    selector: str
    estimator: str
    budget: int
    mode: str                 # how the run sized its trees (taps_mode / ddtree_mode), "" for the others
    token_ids: list[int]
    text: str
    tau: float
    tokens_per_s: float
    speedup_vs_ar: float
    waste_share: float
    verified_nodes: int
    rounds: int
    new_tokens: int
    select_share: float
    expected_tau: float
    lossless: bool
    time_s: float
    stage_shares: dict[str, float] = field(default_factory=dict)
    round_records: list[dict] | None = None
    verdict: str = "yes"            # `taps.verdict`: "yes", "near-tie at token 38 (...)", "NO: bug at token 13 (...)"
    verdict_kind: str = "identical"  # identical | near-tie | bug
    verdict_detail: str = ""
    accepted_tau: float = 0.0        # 1 + accepted draft nodes per round (before a stop rule cuts the last)
    reliability: list | None = None  # `metrics.reliability_counts` of the run's verified nodes

    @property
    def label(self) -> str:
        return run_label(self.selector, self.estimator)

    @classmethod
    def of(cls, prompt_id: str, job: Job, session: DecodeSession, summary: RunSummary, ar_rate: float,
           ar_tokens: list[int], keep_rounds: bool = False, verdict: Verdict | None = None) -> "RunRow":
        verdict = verdict or Verdict(same=session.generated == ar_tokens,
                                     kind="identical" if session.generated == ar_tokens else "bug",
                                     text="yes" if session.generated == ar_tokens else "NO")
        return cls(prompt_id=prompt_id, selector=job.selector, estimator=job.estimator, budget=job.budget,
                   mode=session.config.size_mode, token_ids=session.generated, text=session.text, tau=summary.tau,
                   tokens_per_s=summary.tokens_per_s, speedup_vs_ar=speedup(summary.tokens_per_s, ar_rate),
                   waste_share=summary.waste_share, verified_nodes=summary.verified_nodes, rounds=summary.rounds,
                   new_tokens=summary.new_tokens, select_share=summary.select_share,
                   expected_tau=summary.expected_tau, lossless=session.generated == ar_tokens,
                   time_s=summary.time_s, stage_shares=summary.stage_shares,
                   round_records=[r.to_dict() for r in session.rounds] if keep_rounds else None,
                   verdict=verdict.text, verdict_kind=verdict.kind, verdict_detail=verdict.detail,
                   accepted_tau=summary.accepted_tau, reliability=summary.reliability)

    def as_dict(self) -> dict:
        """A flat dict (JSON, CSV): stage shares as `<stage>_time_share`, plus `label`."""
        row = asdict(self)
        row.update({f"{k}_time_share": v for k, v in row.pop("stage_shares").items()})
        if row["round_records"] is None:
            row.pop("round_records")
        row["label"] = self.label
        return row


def warm_up(pair: ModelPair, config: DecodeConfig, jobs: list[Job] | None = None,
            profile: LatencyProfile | None = None) -> None:
    """A few rounds of AR and of every job (or of DDTree) on a short prompt, so one-off costs (first
    calls, kernel choices, a GPU's clocks) stay out of the timed runs."""
    jobs = jobs if jobs is not None else ([Job(DDTREE.name, "marginal", 8)] if pair.drafter is not None else [])
    for job in [AR_JOB, *jobs]:
        settings = config.with_run(AR.name) if job is AR_JOB else job.settings(config)
        future = list(range(2, 2 + settings.max_new_tokens + 64)) if settings.policy.hindsight else None
        session = DecodeSession(pair, [1, 2, 3, 4, 5, 6, 7, 8], settings, profile=profile, oracle_tokens=future)
        for _ in range(4):
            if session.finished:
                break
            session.step()


def run_prompt(pair: ModelPair, prompt: dict, jobs: list[Job], config: DecodeConfig,
               profile: LatencyProfile | None = None, on_result: Callable[[RunRow], None] | None = None,
               on_round: Callable[[Job, DecodeSession, Round], None] | None = None,
               keep_rounds: bool = False, strict: bool = False) -> list[RunRow]:
    """AR, then every job, on one prompt; one RunRow per run. `on_round(job, session, round)` after
    every round (live counters), `on_result(row)` after every run (progress, journals). A run whose
    tokens differ from AR's gets its verdict (`taps.verdict`), and with `strict` a near-tie is
    rerun in float32 (a float32 copy of the pair while it runs)."""
    rows: list[RunRow] = []
    ar_rate, ar_tokens, ar_session = 0.0, None, None
    for job in [AR_JOB, *jobs]:
        settings = config.with_run(AR.name) if job is AR_JOB else job.settings(config)
        session = DecodeSession(pair, prompt["prompt"], settings, profile=profile,
                                oracle_tokens=ar_tokens if settings.policy.hindsight else None)
        while not session.finished:
            record = session.step()
            if on_round is not None:
                on_round(job, session, record)
        summary = summarize(session.rounds)
        if job is AR_JOB:
            ar_rate, ar_tokens, ar_session = summary.tokens_per_s, session.generated, session
        verdict = run_verdict(pair, session, ar_session, profile, strict)
        rows.append(RunRow.of(prompt["id"], job, session, summary, ar_rate, ar_tokens, keep_rounds, verdict))
        if on_result is not None:
            on_result(rows[-1])
    return rows


def run_verdict(pair: ModelPair, session: DecodeSession, ar: DecodeSession, profile: LatencyProfile | None = None,
                strict: bool = False) -> Verdict:
    """A finished session's verdict against AR's finished session on the same prompt (their tokens
    and rounds); with `strict`, a near-tie is rerun in float32 (`taps.verdict.strict_verdict`)."""
    cfg = session.config
    compiled = (getattr(session, "compile_verify", False), getattr(ar, "compile_verify", False))
    verdict = lossless_verdict(pair, session.prompt_ids, session.generated, ar.generated, cfg.temperature, cfg.seed,
                               run_rounds=session.rounds, ar_rounds=ar.rounds, compiled=compiled)
    if strict and verdict.kind == "near-tie":
        verdict = with_strict(verdict, strict_verdict(pair, session.prompt_ids, cfg, profile))
    return verdict


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per selector x estimator x budget x size choice: token-weighted tau, time-weighted
    tokens/s."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    ar_rate = _rate(groups.get(AR_JOB.key, []))
    out = []
    for (selector, estimator, budget, mode), items in groups.items():
        rate = _rate(items)
        verified = sum(r["verified_nodes"] for r in items)
        time_s = sum(r["time_s"] for r in items)
        out.append({
            "selector": selector, "estimator": estimator, "budget": budget, "mode": mode,
            "tau": sum(r["new_tokens"] for r in items) / max(sum(r["rounds"] for r in items), 1),
            "tokens_per_s": rate, "speedup_vs_ar": speedup(rate, ar_rate),
            "waste_share": sum(r["waste_share"] * r["verified_nodes"] for r in items) / verified if verified else 0.0,
            "select_share": sum(r["select_share"] * r["time_s"] for r in items) / max(time_s, 1e-12),
            "lossless": all(r["lossless"] for r in items), "verdict": combine(items), "prompts": len(items),
            **calibration_fields(items)})
    return out


def calibration_fields(items: list[dict]) -> dict:
    """Round-weighted expected tau (the selector's own prediction) and accepted tau (1 + accepted
    draft nodes per round) of a group of runs, and their summed reliability counts; empty for rows
    written before these were recorded."""
    if not items or any(r.get("accepted_tau") in (None, "") for r in items):
        return {}
    rounds = max(sum(int(r["rounds"]) for r in items), 1)
    counts = [r.get("reliability") for r in items]
    summed = np.sum([np.asarray(c, dtype=np.float64) for c in counts], axis=0).round(6).tolist() \
        if all(isinstance(c, list) and c for c in counts) else None
    return {"expected_tau": sum(float(r["expected_tau"]) * int(r["rounds"]) for r in items) / rounds,
            "accepted_tau": sum(float(r["accepted_tau"]) * int(r["rounds"]) for r in items) / rounds,
            "reliability": summed}


def group_key(row: dict) -> tuple:
    """A run configuration: (selector, estimator, budget, size choice); rows written before the
    size choice was recorded count as ""."""
    return row["selector"], row["estimator"], int(row["budget"]), row.get("mode") or ""


def _rate(items: list[dict]) -> float:
    time_s = sum(r["time_s"] for r in items)
    return sum(r["new_tokens"] for r in items) / time_s if time_s > 0 else 0.0


def format_table(summary: list[dict]) -> str:
    header = f"{'selector':<8} {'estimator':<9} {'budget':>6} {'size':<7} {'tau':>6} {'tok/s':>8} {'vs AR':>6} " \
             f"{'waste%':>7} {'select%':>8} lossless"
    lines = [header, "-" * len(header)]
    for r in summary:
        budget = "-" if policy(r["selector"]).baseline else str(r["budget"])
        estimator = r["estimator"] if policy(r["selector"]).uses_estimator else "-"
        mode = r.get("mode") or "-"
        lines.append(f"{r['selector']:<8} {estimator:<9} {budget:>6} {mode:<7} {r['tau']:>6.2f} "
                     f"{r['tokens_per_s']:>8.1f} {r['speedup_vs_ar']:>5.2f}x {100 * r['waste_share']:>6.1f}% "
                     f"{100 * r['select_share']:>7.1f}% "
                     f"{r.get('verdict') or ('yes' if r['lossless'] else 'NO')}")
    return "\n".join(lines)
