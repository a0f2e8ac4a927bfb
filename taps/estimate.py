"""Path-conditioned acceptance estimators: q(child | parent reached) for every pool edge.

Reach is the product of q along a path: r(root) = 1, r(v) = r(parent) q(v | parent). Three
estimators share one interface:

- `marginal`: q = the drafter's marginal of the child at its depth (DDTree's surrogate).
- `online`:   training-free. The target's verdicts on earlier rounds of the same session
              calibrate the marginal per bucket (depth, rank, whether the parent's path is the
              drafter's favourite), shrunk toward the raw marginal while data are few.
- `learned`:  the TAPS scorer network (`taps.scorer`).

Every estimator returns q <= 1, so reach never grows along a path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from torch import nn

from .pool import Lattice
from .scorer import TapsScorer
from .tree import DraftTree


def reach_from_edges(parents: np.ndarray, edge_q: np.ndarray) -> np.ndarray:
    """r(root) = 1, r(v) = r(parent) * q(v) for nodes in topological order."""
    reach = np.ones(len(parents))
    for i in range(1, len(parents)):
        reach[i] = reach[parents[i]] * edge_q[i]
    return reach


def normalise_siblings(parents: np.ndarray, edge_q: np.ndarray) -> np.ndarray:
    """Scale each parent's children down so that their q sum to at most 1."""
    q = np.clip(edge_q, 0.0, 1.0)
    q[0] = 1.0
    sums = np.zeros(len(parents))
    np.add.at(sums, parents[1:], q[1:])
    scale = np.where(sums > 1.0, 1.0 / np.maximum(sums, 1e-12), 1.0)
    q[1:] *= scale[parents[1:]]
    return q


class Estimator:
    """Interface: `edge_probs` before verification, `observe` after it (online learning)."""

    name = "base"

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        raise NotImplementedError

    def observe(self, pool: DraftTree, edge_target: np.ndarray) -> None:
        """Learn from a verified round; `edge_target[i]` is the target's acceptance of pool node i
        given its parent reached (1/0 at T=0, the target's probability at T>0), NaN where the
        parent was not verified. Only the online estimator uses it."""

    def reach(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        return reach_from_edges(pool.parents, self.edge_probs(pool, lattice))


class MarginalEstimator(Estimator):
    name = "marginal"

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        q = np.exp(pool.marginal_logprob)
        q[0] = 1.0
        return q


def _on_mode(pool: DraftTree) -> np.ndarray:
    """True for nodes whose whole path is the drafter's argmax (rank 0 at every depth)."""
    on = np.zeros(len(pool.tokens), dtype=bool)
    on[0] = True
    for i in range(1, len(pool.tokens)):
        on[i] = on[pool.parents[i]] and pool.ranks[i] == 0
    return on


@dataclass
class OnlineEstimator(Estimator):
    """Calibrates marginals against the target's verdicts seen so far in this session."""

    prior_strength: float = 2.0
    depth_edges: tuple[int, ...] = (1, 2, 3, 5, 8)
    rank_edges: tuple[int, ...] = (0, 1, 2, 4)
    hits: dict = field(default_factory=dict)
    mass: dict = field(default_factory=dict)
    name: str = "online"

    def _buckets(self, pool: DraftTree) -> list[tuple[int, int, bool]]:
        on_mode = _on_mode(pool)
        d = np.searchsorted(self.depth_edges, pool.depths, side="right")
        r = np.searchsorted(self.rank_edges, pool.ranks, side="right")
        return [(int(d[i]), int(r[i]), bool(on_mode[pool.parents[i]])) if i else (0, 0, True)
                for i in range(len(pool.tokens))]

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        marginal = np.exp(pool.marginal_logprob)
        q = marginal.copy()
        for i, key in enumerate(self._buckets(pool)):
            if i == 0:
                continue
            k = self.prior_strength
            q[i] = marginal[i] * (self.hits.get(key, 0.0) + k) / (self.mass.get(key, 0.0) + k)
        return normalise_siblings(pool.parents, q)

    def observe(self, pool: DraftTree, edge_target: np.ndarray) -> None:
        marginal = np.exp(pool.marginal_logprob)
        for i, key in enumerate(self._buckets(pool)):
            if i == 0 or np.isnan(edge_target[i]):
                continue
            self.hits[key] = self.hits.get(key, 0.0) + float(edge_target[i])
            self.mass[key] = self.mass.get(key, 0.0) + float(marginal[i])

    @property
    def observations(self) -> float:
        return float(sum(self.mass.values()))


class LearnedEstimator(Estimator):
    name = "learned"

    def __init__(self, scorer: TapsScorer, embed: nn.Embedding):
        self.scorer = scorer
        self.embed = embed

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        if pool.size == 0:
            return np.ones(1)
        return normalise_siblings(pool.parents, self.scorer.edge_probs(pool, lattice, self.embed))


ESTIMATORS = ("marginal", "online", "learned")
