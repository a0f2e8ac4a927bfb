"""Path-conditioned acceptance estimators: q(child | parent reached) for every pool edge.

Reach is the product of q along a path: r(root) = 1, r(v) = r(parent) q(v | parent). Three
estimators share one interface:

- `marginal`: q = the drafter's marginal of the child at its depth (DDTree's surrogate).
- `online`:   training-free. The target's verdicts on earlier rounds of the same session
              calibrate the marginal per bucket (depth, rank, whether the parent's path is the
              drafter's favourite), shrunk toward its starting point while data are few: the
              marginal product through the shipped marginal map (the raw marginal without one).
- `learned`:  the TAPS scorer network (`taps.scorer`).
- `selector`: DFlash2's path selector read as an estimator (`SelectorEstimator`): the softmax of
              its transition score S_t(a, .) over the drafter's top-K candidates at t, tempered as
              the target's logits are, with the learned scorer's q (their geometric mean) where the
              pair has a scorer.

Every estimator returns q <= 1, so reach never grows along a path. Its reach is then calibrated
(`taps.calibrate`): the map shipped with the scorer, then this session's own verdicts.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from . import kernels
from .calibrate import CALIBRATIONS, Calibrator, conditional
from .config import ESTIMATORS, NO_SELECTOR_ESTIMATOR
from .pool import Lattice
from .scorer import ScorerTables
from .tree import DraftTree, accumulate_down


def reach_from_edges(parents: np.ndarray, edge_q: np.ndarray, depths: np.ndarray | None = None) -> np.ndarray:
    """r(root) = 1, r(v) = r(parent) * q(v) for nodes in topological order (q[0] is not read).
    `depths` is not needed (the nodes' order is enough); it is accepted so that callers may pass it."""
    return kernels.reach_from_edges(np.asarray(parents, dtype=np.int64), np.asarray(edge_q, dtype=np.float64))


def normalise_siblings(parents: np.ndarray, edge_q: np.ndarray) -> np.ndarray:
    """Scale each parent's children down so that their q sum to at most 1."""
    q = np.clip(edge_q, 0.0, 1.0)
    q[0] = 1.0
    sums = np.bincount(parents[1:], weights=q[1:], minlength=len(parents))
    scale = np.where(sums > 1.0, 1.0 / np.maximum(sums, 1e-12), 1.0)
    q[1:] *= scale[parents[1:]]
    return q


class Estimator:
    """Interface: `edge_probs` before verification, `observe` after it (online learning). A session's
    estimator carries a `Calibrator` for its reach (None: the raw reach)."""

    name = "base"
    learns = False            # whether `observe` uses the target's verdicts (then the session computes them)
    calibrator: Calibrator | None = None

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        raise NotImplementedError

    def observe(self, pool: DraftTree, edge_target: np.ndarray) -> None:
        """Learn from a verified round; `edge_target[i]` is the target's acceptance of pool node i
        given its parent reached (1/0 at T=0, the target's probability at T>0), NaN where the
        parent was not verified. Only the online estimator uses it."""

    @property
    def wants_feedback(self) -> bool:
        """Whether the session should compute the target's verdicts for `observe_round`."""
        return self.learns or (self.calibrator is not None and self.calibrator.learns)

    def raw_reach(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        """The product of this estimator's q along each path, uncalibrated."""
        return reach_from_edges(pool.parents, self.edge_probs(pool, lattice), pool.depths)

    def reach(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        raw = self.raw_reach(pool, lattice)
        if self.calibrator is None:
            return raw
        static, reach = self.calibrator.both(pool, raw)
        self._static = (pool, static)          # what the online correction learns against
        return reach

    def observe_round(self, pool: DraftTree, selected: np.ndarray, edge_target: np.ndarray) -> None:
        """After verification: the estimator's own learning and the calibrator's online correction."""
        if self.learns:
            self.observe(pool, edge_target)
        if self.calibrator is not None and self.calibrator.learns:
            last = getattr(self, "_static", None)
            static = last[1] if last is not None and last[0] is pool else pool.reach
            self.calibrator.observe(pool, static, selected, edge_target)


class MarginalEstimator(Estimator):
    name = "marginal"

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        q = np.exp(pool.marginal_logprob)
        q[0] = 1.0
        return q


def _on_mode(pool: DraftTree) -> np.ndarray:
    """True for nodes whose whole path is the drafter's argmax (rank 0 at every depth)."""
    return accumulate_down(pool.parents, pool.depths, pool.ranks == 0, np.logical_and)


@dataclass
class OnlineEstimator(Estimator):
    """Calibrates marginals against the target's verdicts seen so far in this session.

    Bucket of an edge: (depth band, rank band, whether the parent's path is the drafter's
    favourite). Each edge starts from a base q: the marginal's, or, with `base` (a static
    `Calibrator` holding the shipped marginal map), the conditional q of the mapped marginal
    product. In a bucket with observed hits H and observed base mass M, q = base * (H + k) / (M + k),
    at most 1: the base while data are few, calibrated as they come. Its own reach then takes no
    further map and no depth correction (`make_estimator`): starting from the raw marginal and
    mapping on top counted the same correction twice (at T>0 the map halves reach, and so do the
    verdicts) and left it 10-22% under-confident. Siblings are not scaled back to sum to 1 (the base
    already does; rescaling after a rise took back the accepted child's rise and left it 4-5%
    under-confident on validation prompts), and k = 8 base-mass units (k = 2: 3-6% under;
    `docs/calibration.md`).
    """

    prior_strength: float = 8.0
    learns: bool = True
    depth_edges: tuple[int, ...] = (1, 2, 3, 5, 8)
    rank_edges: tuple[int, ...] = (0, 1, 2, 4)
    hits: np.ndarray = field(default=None)
    mass: np.ndarray = field(default=None)
    base: Calibrator | None = None
    name: str = "online"

    def __post_init__(self):
        buckets = (len(self.depth_edges) + 1) * (len(self.rank_edges) + 1) * 2
        self.hits = np.zeros(buckets) if self.hits is None else self.hits
        self.mass = np.zeros(buckets) if self.mass is None else self.mass

    def _buckets(self, pool: DraftTree) -> np.ndarray:
        """A bucket id per pool node (the root's is unused)."""
        on_mode = _on_mode(pool)[np.maximum(pool.parents, 0)]
        d = np.searchsorted(self.depth_edges, pool.depths, side="right")
        r = np.searchsorted(self.rank_edges, pool.ranks, side="right")
        return (d * (len(self.rank_edges) + 1) + r) * 2 + on_mode.astype(np.int64)

    def base_q(self, pool: DraftTree) -> np.ndarray:
        """Each edge's starting q (q[0] = 1), kept for the round's `observe`."""
        last = getattr(self, "_base_q", None)
        if last is not None and last[0] is pool:
            return last[1]
        q = np.exp(pool.marginal_logprob)
        q[0] = 1.0
        if self.base is not None and pool.size > 0:
            parents = np.asarray(pool.parents, dtype=np.int64)
            mapped, _ = self.base.both(pool, reach_from_edges(parents, q))
            q = conditional(parents, mapped)
        self._base_q = (pool, q)
        return q

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        b = self._buckets(pool)
        k = self.prior_strength
        q = np.minimum(self.base_q(pool) * (self.hits[b] + k) / (self.mass[b] + k), 1.0)
        q[0] = 1.0
        return q

    def observe(self, pool: DraftTree, edge_target: np.ndarray) -> None:
        """q means "given the parent reached", so each verdict counts with the probability that its
        parent was reached (the product of the verdicts along the parent's path): at T = 0 the
        children of the accepted path only. (Counting every verified parent's children, as this
        estimator first did, mixed in contexts the target had already left, where the drafter's
        tokens are accepted less often, and left it 7-14% under-confident.)"""
        seen = np.flatnonzero(~np.isnan(edge_target))
        seen = seen[seen > 0]
        reached = reach_from_edges(pool.parents, np.nan_to_num(edge_target, nan=0.0))[pool.parents[seen]]
        seen, weight = seen[reached > 0], reached[reached > 0]
        b = self._buckets(pool)[seen]
        np.add.at(self.hits, b, weight * edge_target[seen])
        np.add.at(self.mass, b, weight * self.base_q(pool)[seen])

    @property
    def observations(self) -> float:
        return float(self.mass.sum())


class LearnedEstimator(Estimator):
    """The TAPS scorer, folded into lookup tables once per pair (`ScorerTables`). Its q is a softmax
    over each parent's children and "other", so siblings already sum to less than 1."""

    name = "learned"

    def __init__(self, tables: ScorerTables):
        self.tables = tables

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        if pool.size == 0:
            return np.ones(1)
        return self.tables.edge_probs(pool, lattice)


class SelectorEstimator(Estimator):
    """DFlash2's path selector as TAPS's estimator, times the TAPS scorer where the pair has one.

    Per depth t the drafter's top-K candidates c_t (K = the selector's `selector_top_k`) and, for a
    parent a at t-1, the selector's transition distribution over them: q_sel(b | a) = softmax_b(U_t(b)
    + <A(a) * H(h_t), B(b)> / T) (T = 0: no scaling), U_t the lattice's tempered log-probs: the
    distribution DFlash2's walk draws from, read as the chance the target accepts b once a is. It shares
    out the drafter's mass on the K candidates at t (their marginals' sum), so that with the nodes
    outside the top-K lattice (its own or its parent's rank K or more), which keep their marginal, a
    parent's children never sum past 1.

    With `partner` (the learned scorer's estimator) a node's q is the geometric mean of the two (a
    product of experts, at the level of either: the calibration map then has little to lift): the
    selector knows which token follows which (its codebooks, the drafter's state at t),
    the scorer how the drafter's confidence, rank and depth turn into the target's verdicts. On
    held-out HumanEval prompts the product ranked better than either alone at equal budgets, and better
    than the selector's q over a pool of its own (`docs/lab/selector_estimator.py`). Its level is the
    calibration map's business, fitted for this estimator like the others'. TAPS's usual pool, so the
    transition table [D, K, K] is computed once per lattice (one small batched product)."""

    name = "selector"

    def __init__(self, selector, temperature: float = 0.0, partner: Estimator | None = None):
        self.selector, self.temperature, self.partner = selector, float(temperature), partner
        self._table: tuple | None = None

    def table(self, root_token: int, lattice: Lattice) -> np.ndarray:
        """log q_sel [D, K, K]: entry [t, i, j] the log-prob of candidate j at depth t+1 given
        candidate i at depth t (every row of depth 1: given the root), the K candidates' marginal mass
        at t shared out among them."""
        last = self._table
        if last is not None and last[0] is lattice and last[1] == root_token:
            return last[2]
        _, unary, pairs = self.selector.lattice_transitions(root_token, lattice, lattice.depth,
                                                            "the selector estimator")
        scale = 1.0 / self.temperature if self.temperature > 0 else 1.0
        scores = unary[:, None, :] + scale * pairs
        logq = scores - scores.max(-1, keepdims=True)
        logq -= np.log(np.exp(logq).sum(-1, keepdims=True))
        logq += np.log(np.exp(unary).sum(-1))[:, None, None]          # the candidates' share of the marginal
        self._table = (lattice, root_token, logq)
        return logq

    def selector_q(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        """q_sel of each pool node given its parent (the marginal outside the top-K lattice)."""
        q = np.exp(pool.marginal_logprob)
        q[0] = 1.0
        if pool.size == 0:
            return q
        logq = self.table(int(pool.tokens[0]), lattice)
        k = logq.shape[-1]
        d, r = pool.depths[1:], pool.ranks[1:]
        parent_rank = np.where(d == 1, 0, pool.ranks[pool.parents[1:]])
        inside = np.flatnonzero((r < k) & (parent_rank < k) & (d <= logq.shape[0]))
        q[inside + 1] = np.exp(logq[d[inside] - 1, parent_rank[inside], r[inside]])
        return q

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        q = self.selector_q(pool, lattice)
        if self.partner is not None and pool.size > 0:
            q = np.sqrt(q * self.partner.edge_probs(pool, lattice))
            q[0] = 1.0
        return q


_TABLES: dict[int, tuple] = {}
_TABLES_LOCK = threading.Lock()


def scorer_tables(pair) -> ScorerTables:
    """The pair's scorer folded for inference, built once per loaded scorer (under a lock: sessions
    starting together build it once) and from then on only read. The entry holds the scorer, so its
    id cannot be reused while the entry exists; a few pairs' tables are kept (they hold the
    vocabulary), the oldest dropped first."""
    key = id(pair.scorer)
    with _TABLES_LOCK:
        entry = _TABLES.get(key)
        if entry is None:
            while len(_TABLES) >= 2:
                del _TABLES[next(iter(_TABLES))]
            tables = ScorerTables(pair.scorer, pair.target.get_input_embeddings())
            tables.warm_up()
            entry = _TABLES[key] = (tables, pair.scorer)
    return entry[0]


def estimators_for(pair) -> list[str]:
    """The estimators this pair can run, in `ESTIMATORS` order: the learned one needs its TAPS scorer,
    the selector one its DFlash2 path selector."""
    needs = {"learned": getattr(pair, "scorer", None), "selector": getattr(pair, "path_selector", None)}
    return [e for e in ESTIMATORS if e not in needs or needs[e] is not None]


def make_estimator(name: str, pair=None, calibration: str = "online", temperature: float = 0.0) -> Estimator:
    """A fresh estimator for one session (the online one learns from that session's rounds), its
    reach calibrated as `calibration` says (online, static or off) with the map the pair's scorer
    ships for this estimator at the nearest fitted temperature."""
    if name == "marginal":
        estimator = MarginalEstimator()
    elif name == "online":
        estimator = OnlineEstimator()
    elif name == "selector":
        if getattr(pair, "path_selector", None) is None:
            raise ValueError(NO_SELECTOR_ESTIMATOR.format(name=getattr(pair, "name", "?")))
        partner = LearnedEstimator(scorer_tables(pair)) if getattr(pair, "scorer", None) is not None else None
        estimator = SelectorEstimator(pair.path_selector, temperature, partner)
    elif name == "learned":
        if pair is None or pair.scorer is None:
            raise ValueError("the 'learned' estimator needs a trained TAPS scorer, and this pair has none")
        estimator = LearnedEstimator(scorer_tables(pair))
    else:
        raise ValueError(f"unknown estimator '{name}': choose one of {', '.join(ESTIMATORS)}")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration '{calibration}': choose one of {', '.join(CALIBRATIONS)}")
    shipped = getattr(pair, "calibration", None)
    if name == "online":
        # it starts as the marginal product through the marginal's map, and its bucket learning is
        # its online correction: its reach takes neither again
        marginal_map = shipped.reach_map("marginal", temperature) if shipped is not None else None
        if marginal_map is not None and calibration != "off":
            estimator.base = Calibrator(marginal_map, "static")
        estimator.calibrator = None
        return estimator
    reach_map = shipped.reach_map(name, temperature) if shipped is not None else None
    estimator.calibrator = Calibrator(reach_map, calibration)
    return estimator
