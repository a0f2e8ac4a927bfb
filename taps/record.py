"""The Round record: one decoding round as plain data (no torch), the one thing that crosses from
the engine to metrics, figures, pages and exports.

`build_round` classifies every node of the round's candidate pool (root, accepted, rejected
sibling, rejected-prefix waste, unselected) from the verified selection and the walk's verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Sequence

import numpy as np

# A round's stages, in order, with the same names everywhere (code, app, benchmarks).
STAGES = ("draft", "pool", "estimate", "select", "verify", "commit")
SELECTION_STAGES = ("pool", "estimate", "select")
STATUSES = ("root", "accepted", "rejected", "waste", "unselected")
DRAFT_TOP_K = 16        # the drafter's candidates per depth a round keeps (DFlash2's published top-K)


@dataclass
class Round:
    """One round as plain data: everything a page shows and a benchmark counts.

    `index` counts from 0 in code; every page, table, file and title shows `index + 1`."""

    index: int
    selector: str
    estimator: str
    budget: int
    temperature: float
    start: int                       # position of the root in the sequence
    root_token: int
    root_text: str
    pool_tokens: list[int]           # candidate pool (index 0 = root); the verified tree is a subset
    pool_texts: list[str]
    pool_parents: list[int]
    pool_depths: list[int]
    pool_ranks: list[int]
    pool_marginal: list[float]       # drafter marginal of the node's token at its depth
    pool_path_marginal: list[float]  # product of marginals along the path (DDTree's score)
    pool_reach: list[float]          # path-conditioned acceptance estimate (TAPS's score)
    selected: list[int]              # pool indices verified, root first
    target_prob: list[float | None]  # target's probability of the node's token at its parent
    status: list[str]                # root | accepted | rejected | waste | unselected
    accepted: list[int]              # pool indices of accepted draft nodes, by depth
    bonus_token: int
    bonus_text: str
    committed_tokens: list[int]      # accepted tokens + bonus (after stop/length truncation)
    tau: int                         # tokens committed this round
    verified_nodes: int              # draft nodes the target scored (root not counted)
    waste_nodes: int                 # verified nodes under a rejected prefix
    rejected_siblings: int           # verified nodes whose parent was reached but were not the target's token
    expected_tau: float              # 1 + sum of reach over the verified nodes
    timings: dict[str, float] = field(default_factory=dict)
    finished: bool = False
    stop_reason: str | None = None
    # the drafter's DRAFT_TOP_K best tokens per depth (depth 1 first, best first) and their drafter
    # probabilities (at the run's temperature): the candidates a path selector or a tree chooses from
    draft_top: list[list[int]] = field(default_factory=list)
    draft_top_prob: list[list[float]] = field(default_factory=list)

    @property
    def number(self) -> int:
        """The round's number as people count it (from 1)."""
        return self.index + 1

    @property
    def time_s(self) -> float:
        return float(sum(self.timings.values()))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "Round":
        names = {f.name for f in fields(cls)}
        missing = names - raw.keys() - {"timings", "finished", "stop_reason", "draft_top", "draft_top_prob"}
        if missing:
            raise ValueError(f"not a Round record: missing {sorted(missing)[:5]}")
        return cls(**{k: v for k, v in raw.items() if k in names})


def classify(parents: Sequence[int], selected: Sequence[int], accepted: Sequence[int]) -> tuple[list[str], int, int]:
    """Per pool node: root | accepted | rejected | waste | unselected, with the counts of verified
    rejected siblings and verified waste. A verified node is rejected when its parent was reached
    (root or accepted) but it is not the target's token, and waste when its parent was not reached."""
    status = ["unselected"] * len(parents)
    status[0] = "root"
    reached = {0, *accepted}
    waste = rejected = 0
    for node in selected:
        node = int(node)
        if node == 0:
            continue
        if node in reached:
            status[node] = "accepted"
        elif int(parents[node]) in reached:
            status[node], rejected = "rejected", rejected + 1
        else:
            status[node], waste = "waste", waste + 1
    return status, waste, rejected


def build_round(*, index: int, config, pool, selected: np.ndarray, accepted_rows: list[int], child_prob: np.ndarray,
                bonus_token: int, committed: list[int], start: int, timings: dict[str, float], finished: bool,
                stop_reason: str | None, texts: Callable[[Sequence[int]], list[str]], lattice=None) -> Round:
    """The record of a verified round. `pool` is the round's candidate DraftTree, `selected` the pool
    indices verified (root first), `accepted_rows` the accepted nodes as rows of the verified tree,
    `child_prob` the target's probability of each verified node's token at its parent, `lattice` the
    drafter's (None without a drafter): its first DRAFT_TOP_K columns are kept as `draft_top`."""
    n = len(pool.tokens)
    chosen = np.asarray(selected, dtype=np.int64).tolist()     # Python ints: one conversion each
    parents = pool.parents.tolist()
    accepted = [chosen[i] for i in accepted_rows]
    status, waste, rejected = classify(parents, chosen, accepted)
    target_prob: list[float | None] = [None] * n
    for node, prob in zip(chosen, np.asarray(child_prob, dtype=np.float64).tolist()):
        target_prob[node] = prob
    pool_texts = texts(pool.tokens)
    return Round(
        index=index, selector=config.selector,
        estimator=config.estimator if config.policy.uses_estimator else "marginal",
        budget=config.budget, temperature=float(config.temperature), start=start,
        root_token=int(pool.tokens[0]), root_text=pool_texts[0],
        pool_tokens=pool.tokens.tolist(), pool_texts=pool_texts,
        pool_parents=parents, pool_depths=pool.depths.tolist(),
        pool_ranks=pool.ranks.tolist(),
        pool_marginal=np.exp(pool.marginal_logprob).tolist(),
        pool_path_marginal=np.exp(pool.path_logprob).tolist(),
        pool_reach=np.asarray(pool.reach, dtype=np.float64).tolist(), selected=chosen,
        target_prob=target_prob, status=status, accepted=accepted,
        bonus_token=int(bonus_token), bonus_text=texts([bonus_token])[0],
        committed_tokens=list(committed), tau=len(committed), verified_nodes=len(chosen) - 1,
        waste_nodes=waste, rejected_siblings=rejected,
        expected_tau=float(1.0 + np.asarray(pool.reach)[np.asarray(chosen[1:], dtype=np.int64)].sum()),
        timings=dict(timings), finished=finished, stop_reason=stop_reason,
        draft_top=[] if lattice is None else lattice.tokens[:, :DRAFT_TOP_K].tolist(),
        draft_top_prob=[] if lattice is None else np.exp(lattice.logprobs[:, :DRAFT_TOP_K]).tolist())


def validate_round(record: Round) -> None:
    """Raise ValueError unless the record's pool, selection and verdicts hang together."""
    n = len(record.pool_tokens)
    per_node = ("pool_texts", "pool_parents", "pool_depths", "pool_ranks", "pool_marginal", "pool_path_marginal",
                "pool_reach", "target_prob", "status")
    for name in per_node:
        value = getattr(record, name)
        if not isinstance(value, list) or len(value) != n:
            raise ValueError(f"{name} must be a list of {n} entries, one per pool node")
    if n == 0 or record.pool_parents[0] != -1:
        raise ValueError("the pool must start with the root (parent -1)")
    for i in range(1, n):
        parent = record.pool_parents[i]
        if not isinstance(parent, int) or not 0 <= parent < i:
            raise ValueError(f"pool node {i} has parent {parent!r}; parents must come before their children")
        if record.pool_depths[i] != record.pool_depths[parent] + 1:
            raise ValueError(f"pool node {i} is at depth {record.pool_depths[i]} under a parent at depth "
                             f"{record.pool_depths[parent]}")
    if any(s not in STATUSES for s in record.status):
        raise ValueError(f"status entries must be among {', '.join(STATUSES)}")
    selected = set(record.selected)
    if not selected or 0 not in selected or any(not isinstance(i, int) or not 0 <= i < n for i in selected):
        raise ValueError("selected must list pool indices, root (0) included")
    if any(record.pool_parents[i] not in selected for i in selected if i):
        raise ValueError("the selected nodes are not prefix-closed")
    if any(i not in selected for i in record.accepted):
        raise ValueError("accepted nodes must be selected")
    if not isinstance(record.timings, dict) or any(k not in STAGES for k in record.timings):
        raise ValueError(f"timings must map stage names ({', '.join(STAGES)}) to seconds")
