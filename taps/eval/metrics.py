"""Metrics over rounds: tau, tokens/s, speed-ups, waste and stage-time shares; pandas frames.

Time is the sum of the measured stage times of the rounds (prefill excluded, for every selector
alike), so tokens/s compares decoding loops, and a speed-up is a ratio of two runs measured in
the same process on the same device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config import run_label
from ..policies import AR
from ..record import STAGES, Round


def distinct_share(items: list, n: int = 4) -> float | None:
    """Distinct n-grams / n-grams of a sequence (tokens, or a text's words): 1.0 when nothing
    repeats, near 0 in a loop; None when it is shorter than n."""
    grams = ngrams(items, n)
    return len(set(grams)) / len(grams) if grams else None


def word_share(text: str, n: int = 4) -> float:
    """A text's distinct-n-gram share of whitespace-separated words; 0 when it has fewer than n
    words: a continuation of many tokens with so few words is one run of repeated symbols
    ('####...'), the most repetitive text there is, and must not drop out of a mean (leaving it
    out flattered the looping `taps-stdlib-6m`: 0.46 instead of 0.36 on 32 HumanEval prompts)."""
    share = distinct_share(text.split(), n)
    return 0.0 if share is None else share


def ngrams(items: list, n: int = 4) -> list[tuple]:
    return [tuple(items[i:i + n]) for i in range(len(items) - n + 1)]


@dataclass
class RunSummary:
    rounds: int
    new_tokens: int
    tau: float                 # mean tokens committed per round
    time_s: float
    tokens_per_s: float
    verified_nodes: int
    waste_nodes: int
    rejected_siblings: int
    waste_share: float         # rejected-prefix waste / verified nodes
    select_share: float        # (pool + estimate + select) / total time
    stage_shares: dict[str, float]
    expected_tau: float        # mean of the selector's own prediction of tau
    accepted_tau: float = 0.0  # mean of 1 + accepted draft nodes per round (tau before a stop rule cuts the last)
    reliability: list = field(default_factory=list)   # `reliability_counts` of the verified nodes

    def as_row(self) -> dict:
        row = {k: v for k, v in self.__dict__.items() if k not in ("stage_shares", "reliability")}
        row.update({f"{stage}_time_share": share for stage, share in self.stage_shares.items()})
        return row


def summarize(rounds: list[Round]) -> RunSummary:
    n = len(rounds)
    tokens = sum(r.tau for r in rounds)
    stage_time = {s: sum(r.timings.get(s, 0.0) for r in rounds) for s in STAGES}
    total = sum(stage_time.values())
    verified = sum(r.verified_nodes for r in rounds)
    waste = sum(r.waste_nodes for r in rounds)
    return RunSummary(
        rounds=n, new_tokens=tokens, tau=tokens / n if n else 0.0, time_s=total,
        tokens_per_s=tokens / total if total > 0 else 0.0, verified_nodes=verified, waste_nodes=waste,
        rejected_siblings=sum(r.rejected_siblings for r in rounds),
        waste_share=waste / verified if verified else 0.0,
        select_share=(stage_time["pool"] + stage_time["estimate"] + stage_time["select"]) / total if total else 0.0,
        stage_shares={s: (t / total if total else 0.0) for s, t in stage_time.items()},
        expected_tau=sum(r.expected_tau for r in rounds) / n if n else 0.0,
        accepted_tau=sum(1 + len(r.accepted) for r in rounds) / n if n else 0.0,
        reliability=reliability_counts(rounds))


RELIABILITY_BINS = 10


def reliability_counts(rounds: list[Round], bins: int = RELIABILITY_BINS) -> list[list[float]]:
    """Per equal-width bin of predicted reach: [verified draft nodes, the sum of their predicted
    reach, how many were accepted]. Summed over runs, it gives the reliability diagram (mean
    predicted reach against the accepted share, per bin)."""
    counts = np.zeros((bins, 3))
    for r in rounds:
        nodes = np.asarray(r.selected[1:], dtype=np.int64)
        if nodes.size == 0:
            continue
        reach = np.asarray(r.pool_reach, dtype=np.float64)[nodes]
        accepted = np.isin(nodes, np.asarray(r.accepted, dtype=np.int64)).astype(np.float64)
        which = np.clip((reach * bins).astype(np.int64), 0, bins - 1)
        np.add.at(counts, which, np.column_stack([np.ones_like(reach), reach, accepted]))
    return counts.round(6).tolist()


def reliability_table(counts, bins: int = RELIABILITY_BINS) -> list[dict]:
    """`reliability_counts` (summed over any number of runs) as rows: the bin, its nodes, their mean
    predicted reach and their accepted share (empty bins left out)."""
    rows = []
    for b, (nodes, predicted, accepted) in enumerate(np.asarray(counts, dtype=np.float64).reshape(-1, 3)):
        if nodes > 0:
            rows.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "nodes": int(nodes),
                         "predicted": predicted / nodes, "observed": accepted / nodes})
    return rows


def speedup(run_tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    return run_tokens_per_s / baseline_tokens_per_s if baseline_tokens_per_s > 0 else float("nan")


def rounds_frame(rounds: list[Round]) -> pd.DataFrame:
    """One row per round (numbered from 1, as people count): tau, nodes, waste, and each stage's time in ms."""
    rows = []
    for r in rounds:
        row = {"round": r.number, "selector": r.selector, "estimator": r.estimator, "budget": r.budget,
               "tau": r.tau, "expected_tau": r.expected_tau, "verified_nodes": r.verified_nodes,
               "accepted": len(r.accepted), "waste_nodes": r.waste_nodes,
               "rejected_siblings": r.rejected_siblings, "pool_size": len(r.pool_tokens) - 1,
               "text": "".join(r.pool_texts[i] for i in r.accepted) + r.bonus_text,
               "time_ms": 1000 * r.time_s}
        row.update({f"{s}_ms": 1000 * r.timings.get(s, 0.0) for s in STAGES})
        rows.append(row)
    return pd.DataFrame(rows)


def nodes_frame(record: Round) -> pd.DataFrame:
    """One row per pool node of a round, with both scores and the target's verdict."""
    return pd.DataFrame({
        "node": range(len(record.pool_tokens)), "token": record.pool_tokens, "text": record.pool_texts,
        "parent": record.pool_parents, "depth": record.pool_depths, "rank": record.pool_ranks,
        "marginal": record.pool_marginal, "path_marginal": record.pool_path_marginal,
        "reach": record.pool_reach, "target_prob": record.target_prob, "status": record.status})


# ---------------------------------------------------------------------------------- modelled speed
def modelled_round_s(record: Round, profile) -> float:
    """What a latency profile says this round costs: the policy's per-round overhead plus verifying
    the round's tree (an AR round: the profile's AR step)."""
    policy = run_label(record.selector, record.estimator)
    return float(profile.round_time(policy, record.verified_nodes))


def modelled_speedup(rounds: list[Round], profile) -> dict:
    """The modelled (deterministic) speed-up of a run over AR under `profile`:
    tokens per round (tau) x AR step time / mean round time. Same rounds and profile, same figure,
    however busy the machine is."""
    if not rounds:
        return {"tau": 0.0, "round_s": 0.0, "ar_step_s": 0.0, "tokens_per_s": 0.0, "speedup": float("nan")}
    tau = sum(r.tau for r in rounds) / len(rounds)
    round_s = sum(modelled_round_s(r, profile) for r in rounds) / len(rounds)
    ar_step = float(profile.round_time(AR.run_label(), 0))
    return {"tau": tau, "round_s": round_s, "ar_step_s": ar_step, "tokens_per_s": tau / round_s if round_s else 0.0,
            "speedup": tau * ar_step / round_s if round_s else float("nan")}


def candidate_recall(rounds: list[Round], tokens: list[int], depths: int = 5,
                     ks: tuple[int, ...] = (1, 16)) -> list[dict]:
    """The selection headroom per draft depth (issue 50): over the rounds, how often the target's own
    token at depth d (`tokens`, the whole sequence the run decoded: prompt and output, so position
    start + d) was the drafter's top-1 there, and how often it was among its candidates of drafter
    rank < k at that depth: the round's `draft_top` (the drafter's own top-K) where it has one, else
    the pool's nodes at that depth. A chain that follows the drafter's argmax can only take the
    first; a path selector or a tree can take the gap up to the second. Rounds whose depth d lies
    past the decoded sequence are not counted at d."""
    out = []
    for depth in range(1, depths + 1):
        seen = 0
        hits = dict.fromkeys(ks, 0)
        for record in rounds:
            position = record.start + depth
            if position >= len(tokens):
                continue
            if record.draft_top:
                at = list(enumerate(record.draft_top[depth - 1])) if depth <= len(record.draft_top) else []
            else:
                at = [(rank, token) for token, d, rank in
                      zip(record.pool_tokens, record.pool_depths, record.pool_ranks) if d == depth]
            if not at:
                continue
            seen += 1
            truth = tokens[position]
            for k in ks:
                hits[k] += any(token == truth and rank < k for rank, token in at)
        out.append({"depth": depth, "rounds": seen,
                    **{f"recall@{k}": hits[k] / seen if seen else None for k in ks}})
    return out
