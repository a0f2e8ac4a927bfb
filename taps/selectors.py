"""Selectors: which draft nodes the target verifies this round. One small class each.

Every selector works in three steps, which the session times as the stages of the same names:
    pool      the candidate DraftTree it considers (shown in the app, root first, topological)
    estimate  a reach per pool node (default: the marginal product, DDTree's score)
    select    the pool indices to verify: root first, sorted, prefix-closed, at most `budget`

- AR:     no drafter; the root alone (plain autoregressive decoding).
- DFlash: the drafter's argmax path.
- DDTree: best-first heap over the product of marginals (the B best paths).
- TAPS:   candidate pool (the best pool_factor x budget nodes by marginal path score, or the
            authors' beam pool) -> path-conditioned reach -> prefix-closed subtree, by the
            authors' utility-and-closure rule (`utility`), by reach alone (`reach`, the exact
            optimum of the sum of reach), or by our measured-cost size choice (`cost`).

Each class names its registry entry (`policy`, from `taps.policies`); `make_selector` finds the
class of a registered policy among the subclasses of `Selector`, so a new policy is one class
here (or anywhere) and one registry line.
- oracle: in hindsight (T=0), the longest prefix of the target's own continuation that lies in
            the drafter's top-K lattice.
- DFlash2: DFlash2's path selector (`taps.path_selector`): per depth the drafter's top-K candidates,
            one walked from the root by the pairwise transition score (argmax at T=0, a draw from
            q = softmax(S / T) at T>0); the pool is that chain, its reach the walk's own probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from .config import DecodeConfig
from .cost_model import LatencyProfile
from .estimate import Estimator
from .path_selector import PathSelector, PathWalk, walk
from .policies import AR, DDTREE, DFLASH, DFLASH2, ORACLE, TAPS, Policy, policy
from .pool import Lattice, candidate_pool, ddtree_nodes, heap_tree, top_paths, tree_from_nodes
from .subtree import top_by_reach, utility_selection
from .tree import DraftTree
from .verify import gumbel_noise

__all__ = ["RoundContext", "Selector", "make_selector", "top_by_reach", "ddtree_nodes", "utility_selection"]


@dataclass
class RoundContext:
    """What a selector may read besides the lattice and the settings: this session's estimator
    and latency profile, (oracle only) the target's continuation after the root, and (DFlash2) the
    pair's path selector and the root's position in the sequence (its draws at T > 0 are keyed
    by the positions of the tokens they draft, as the target's are)."""

    estimator: Estimator | None = None
    profile: LatencyProfile | None = None
    future_tokens: list[int] | None = None
    path_selector: PathSelector | None = None
    position: int = 0


class Selector:
    policy: Policy      # its registry entry (taps.policies): name, label, needs, size modes

    def pool(self, root_token: int, lattice: Lattice | None, cfg: DecodeConfig, ctx: RoundContext) -> DraftTree:
        raise NotImplementedError

    def estimate(self, pool: DraftTree, lattice: Lattice | None, cfg: DecodeConfig, ctx: RoundContext) -> np.ndarray:
        return pool.reach                      # the marginal product, set when the pool was built

    def select(self, pool: DraftTree, cfg: DecodeConfig, ctx: RoundContext) -> np.ndarray:
        """By default the pool's first min(budget, size) draft nodes (pools built in verify order)."""
        return np.arange(min(cfg.budget, pool.size) + 1)


class AutoregressiveSelector(Selector):
    policy = AR

    def pool(self, root_token, lattice, cfg, ctx):
        return DraftTree.root_only(root_token)


class DFlashSelector(Selector):
    policy = DFLASH

    def pool(self, root_token, lattice, cfg, ctx):
        length = min(cfg.budget, lattice.depth)
        return tree_from_nodes(root_token, [(d - 1, d, 0) for d in range(1, length + 1)], lattice)


class DDTreeSelector(Selector):
    """The heap's popped nodes come first in the pool and its frontier after them, so `select`
    takes the first min(budget, pool size) nodes: exactly the nodes the heap popped."""

    policy = DDTREE

    def pool(self, root_token, lattice, cfg, ctx):
        return heap_tree(root_token, lattice, cfg.budget, cfg.budget, frontier=True)

    def select(self, pool, cfg, ctx):
        size = min(cfg.budget, pool.size)
        if cfg.ddtree_mode == "cost" and ctx.profile is not None:
            # the popped nodes come in best-first order, so their scores are already descending
            size = ctx.profile.best_size(pool.reach[1: size + 1], size, DDTREE.run_label())
        return np.arange(size + 1)


_NO_TIMES = np.empty(0)        # select without cost sizing


class TapsSelector(Selector):
    policy = TAPS

    def pool(self, root_token, lattice, cfg, ctx):
        caps = [c for c in (cfg.pool_factor * cfg.budget, cfg.score_cap) if c > 0]
        if caps:   # the exact best nodes by marginal path score: prefix-closed, small, cheap to score
            return top_paths(root_token, lattice, min(caps), cfg.top_k)
        return candidate_pool(root_token, lattice, cfg.top_k, cfg.beam_width, cfg.pool_cap)

    def estimate(self, pool, lattice, cfg, ctx):
        if ctx.estimator is None:
            raise ValueError("the TAPS selector needs an estimator")
        return ctx.estimator.reach(pool, lattice)

    def select(self, pool, cfg, ctx):
        if cfg.taps_mode == "utility":
            return utility_selection(pool, pool.reach, cfg.budget, cfg.lambda_node, cfg.lambda_depth,
                                     cfg.endpoint_cap)
        size = min(cfg.budget, pool.size)
        cost = cfg.taps_mode == "cost" and ctx.profile is not None
        # sized (with the profile's round times) by the same kernel as LatencyProfile.best_size
        times = ctx.profile.round_times(TAPS.run_label(cfg.estimator), size) if cost else _NO_TIMES
        return kernels.top_by_reach(pool.reach, size, times)


class OracleSelector(Selector):
    policy = ORACLE

    def pool(self, root_token, lattice, cfg, ctx):
        if ctx.future_tokens is None:
            raise ValueError("the oracle needs the target's continuation (run autoregressive decoding first)")
        k = lattice.width          # the whole lattice (at least the budget wide): a bound for every selector
        nodes = []
        for depth in range(1, min(cfg.budget, lattice.depth, len(ctx.future_tokens)) + 1):
            hits = np.flatnonzero(lattice.tokens[depth - 1, :k] == ctx.future_tokens[depth - 1])
            if hits.size == 0:
                break
            nodes.append((depth - 1, depth, int(hits[0])))
        return tree_from_nodes(root_token, nodes, lattice)


class DFlash2Selector(Selector):
    """DFlash2's chain: the walk through the drafter's top-K candidates per depth (`taps.path_selector`),
    at most the budget deep. Its nodes' ranks are their drafter ranks, their marginals the drafter's
    (tempered) log-probs; its reach (the estimate stage) is the product of the walk's q along the
    chain: the selector's own path-conditioned probability of each prefix. At T > 0 each depth's
    draw uses the Gumbel noise of the target's own draw at that position (`taps.verify.gumbel_noise`)."""

    policy = DFLASH2

    def __init__(self):
        self.last_walk: PathWalk | None = None     # the last round's walk (candidates and q), for inspection

    def pool(self, root_token, lattice, cfg, ctx):
        selector = ctx.path_selector
        if selector is None:
            raise ValueError("the DFlash2 selector needs the pair's path selector (RoundContext.path_selector)")
        depth = min(cfg.budget, lattice.depth)
        candidates, unary, pairs = selector.lattice_transitions(root_token, lattice, depth, "the DFlash2 selector")
        noise = None
        if cfg.temperature > 0:
            vocab = int(lattice.full_logprobs.shape[-1])
            noise = np.stack([gumbel_noise(cfg.seed, ctx.position + d + 1, vocab).numpy()[candidates[d]]
                              for d in range(depth)]) if depth else np.zeros((0, candidates.shape[1]))
        self.last_walk = chain = walk(unary, pairs, candidates, cfg.temperature, noise)
        n = depth + 1
        step = np.concatenate([[0.0], unary[np.arange(depth), chain.choice]])
        return DraftTree(tokens=np.concatenate([[root_token], chain.tokens]).astype(np.int64),
                         parents=np.arange(-1, depth), depths=np.arange(n), ranks=np.concatenate([[0], chain.choice]),
                         marginal_logprob=step, path_logprob=np.cumsum(step), reach=np.exp(np.cumsum(step)))

    def estimate(self, pool, lattice, cfg, ctx):
        return np.cumprod(np.concatenate([[1.0], self.last_walk.chosen_prob]))


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def make_selector(name: str) -> Selector:
    """The selector of the registered policy `name` (the newest class that names it)."""
    chosen = policy(name)
    classes = [cls for cls in _subclasses(Selector) if getattr(cls, "policy", None) == chosen]
    if not classes:
        raise ValueError(f"the policy '{name}' is registered but no Selector class names it")
    return classes[-1]()
