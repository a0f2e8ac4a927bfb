"""Selectors: which draft nodes the target verifies this round. One small class each.

Every selector returns a `Selection`: the candidate pool it considered (a DraftTree, for display)
and the pool indices it chose (root first, prefix-closed, at most `budget` draft nodes).

- `ar`:     no drafter; the root alone (plain autoregressive decoding).
- `dflash`: the drafter's argmax path.
- `ddtree`: best-first heap over the product of marginals (the B best paths).
- `taps`:   candidate pool -> path-conditioned reach -> prefix-closed subtree, by the authors'
            utility-and-closure rule (`utility`), by reach alone (`reach`, the exact optimum of
            the sum of reach), or by our measured-cost size choice (`cost`).
- `oracle`: in hindsight (T=0), the longest prefix of the target's own continuation that lies in
            the drafter's top-K lattice.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np

from .costs import LatencyProfile
from .estimate import Estimator
from .pool import Lattice, candidate_pool, tree_from_nodes
from .tree import DraftTree

SELECTORS = ("ar", "dflash", "ddtree", "taps", "oracle")
TAPS_MODES = ("cost", "reach", "utility")


@dataclass
class SelectContext:
    """What a selector may read besides the lattice."""

    estimator: Estimator | None = None
    profile: LatencyProfile | None = None
    future_tokens: list[int] | None = None   # oracle: the target's continuation after the root
    top_k: int = 64
    beam_width: int = 48
    pool_cap: int = 768
    score_cap: int = 0          # 0: the estimator scores the whole pool
    taps_mode: str = "cost"
    lambda_node: float = 1.0
    lambda_depth: float = 0.002
    endpoint_cap: int = 64


@dataclass
class Selection:
    pool: DraftTree
    selected: np.ndarray                      # pool indices, root (0) first, sorted
    timings: dict[str, float] = field(default_factory=dict)   # pool / estimate / select seconds


class Selector:
    name = "base"
    needs_drafter = True

    def select(self, root_token: int, lattice: Lattice | None, budget: int, ctx: SelectContext) -> Selection:
        raise NotImplementedError


class AutoregressiveSelector(Selector):
    name = "ar"
    needs_drafter = False

    def select(self, root_token, lattice, budget, ctx):
        return Selection(DraftTree.root_only(root_token), np.array([0]))


class DFlashSelector(Selector):
    name = "dflash"

    def select(self, root_token, lattice, budget, ctx):
        t0 = time.perf_counter()
        length = min(budget, lattice.depth)
        pool = tree_from_nodes(root_token, [(d - 1, d, 0) for d in range(1, length + 1)], lattice)
        return Selection(pool, np.arange(length + 1), {"select": time.perf_counter() - t0})


def ddtree_nodes(lattice: Lattice, budget: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """Best-first over path log-prob. Returns (chosen nodes, frontier) as (parent, depth, rank)."""
    k = min(budget, lattice.width)
    chosen: list[tuple[int, int, int]] = []
    path_lp = [0.0]
    heap = [(-lattice.logprobs[0, 0], 0, 0, 1, 0)]   # (-score, tie, parent, depth, rank)
    tie = 1
    while heap and len(chosen) < budget:
        neg, _, parent, depth, rank = heapq.heappop(heap)
        chosen.append((parent, depth, rank))
        index = len(chosen)
        path_lp.append(-neg)
        if rank + 1 < k:   # next sibling
            score = path_lp[parent] + lattice.logprobs[depth - 1, rank + 1]
            heapq.heappush(heap, (-score, tie, parent, depth, rank + 1))
            tie += 1
        if depth < lattice.depth:   # first child
            score = -neg + lattice.logprobs[depth, 0]
            heapq.heappush(heap, (-score, tie, index, depth + 1, 0))
            tie += 1
    frontier = [(parent, depth, rank) for _, _, parent, depth, rank in sorted(heap)]
    return chosen, frontier


class DDTreeSelector(Selector):
    name = "ddtree"

    def select(self, root_token, lattice, budget, ctx):
        t0 = time.perf_counter()
        chosen, frontier = ddtree_nodes(lattice, budget)
        pool = tree_from_nodes(root_token, chosen + frontier, lattice)
        return Selection(pool, np.arange(len(chosen) + 1), {"select": time.perf_counter() - t0})


def top_by_reach(reach: np.ndarray, count: int) -> np.ndarray:
    """The `count` draft nodes of highest reach (ties: lower index first), root included.

    Reach never grows along a path and parents precede children, so this set is prefix-closed
    and maximises the sum of reach among trees of at most `count` nodes."""
    order = np.lexsort((np.arange(1, len(reach)), -reach[1:])) + 1
    return np.sort(np.concatenate([[0], order[:count]]))


def utility_selection(pool: DraftTree, reach: np.ndarray, budget: int, lambda_node: float,
                      lambda_depth: float, endpoint_cap: int) -> np.ndarray:
    """The authors' rule: take nodes by r / (lambda_node + lambda_depth * depth), each with its
    ancestor closure, while the tree keeps within the node cap and the endpoint (leaf) cap."""
    utility = reach / (lambda_node + lambda_depth * pool.depths)
    order = np.lexsort((np.arange(1, len(reach)), -utility[1:])) + 1
    chosen = np.zeros(len(reach), dtype=bool)
    chosen[0] = True
    n_children = np.zeros(len(reach), dtype=np.int64)
    size, leaves = 0, 0
    for node in order:
        if chosen[node]:
            continue
        closure = []
        v = int(node)
        while not chosen[v]:
            closure.append(v)
            v = int(pool.parents[v])
        # adding the chain under v: v gains a child; the new bottom node becomes a leaf
        new_leaves = leaves + (0 if (n_children[v] == 0 and v != 0) else 1)
        if size + len(closure) > budget or new_leaves > endpoint_cap:
            continue
        for u in closure:
            chosen[u] = True
            n_children[int(pool.parents[u])] += 1
        size += len(closure)
        leaves = new_leaves
        if size >= budget:
            break
    return np.flatnonzero(chosen)


class TapsSelector(Selector):
    name = "taps"

    def select(self, root_token, lattice, budget, ctx):
        if ctx.estimator is None:
            raise ValueError("the taps selector needs an estimator")
        t0 = time.perf_counter()
        pool = candidate_pool(root_token, lattice, ctx.top_k, ctx.beam_width, ctx.pool_cap)
        if 0 < ctx.score_cap < pool.size:
            # keep the best nodes by marginal path score: prefix-closed, and cheaper to score
            pool = pool.subtree(top_by_reach(np.exp(pool.path_logprob), ctx.score_cap))
        t1 = time.perf_counter()
        pool.reach = ctx.estimator.reach(pool, lattice)
        t2 = time.perf_counter()
        if ctx.taps_mode == "utility":
            selected = utility_selection(pool, pool.reach, budget, ctx.lambda_node, ctx.lambda_depth,
                                         ctx.endpoint_cap)
        else:
            size = min(budget, pool.size)
            if ctx.taps_mode == "cost" and ctx.profile is not None:
                size = ctx.profile.best_size(np.sort(pool.reach[1:])[::-1], size)
            selected = top_by_reach(pool.reach, size)
        t3 = time.perf_counter()
        return Selection(pool, selected, {"pool": t1 - t0, "estimate": t2 - t1, "select": t3 - t2})


class OracleSelector(Selector):
    name = "oracle"

    def select(self, root_token, lattice, budget, ctx):
        if ctx.future_tokens is None:
            raise ValueError("the oracle needs the target's continuation (run autoregressive decoding first)")
        t0 = time.perf_counter()
        k = min(ctx.top_k, lattice.width)
        nodes = []
        for depth in range(1, min(budget, lattice.depth, len(ctx.future_tokens)) + 1):
            hits = np.flatnonzero(lattice.tokens[depth - 1, :k] == ctx.future_tokens[depth - 1])
            if hits.size == 0:
                break
            nodes.append((depth - 1, depth, int(hits[0])))
        pool = tree_from_nodes(root_token, nodes, lattice)
        return Selection(pool, np.arange(len(nodes) + 1), {"select": time.perf_counter() - t0})


def make_selector(name: str) -> Selector:
    table = {cls.name: cls for cls in (AutoregressiveSelector, DFlashSelector, DDTreeSelector,
                                       TapsSelector, OracleSelector)}
    if name not in table:
        raise ValueError(f"unknown selector '{name}': choose one of {', '.join(SELECTORS)}")
    return table[name]()
