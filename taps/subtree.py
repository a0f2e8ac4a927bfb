"""Prefix-closed subtrees chosen by reach: the select stage's tree maths, pure numpy (no torch), so the
model-free Learn toy shares it with the engine.

The invariant: reach never grows along a path and parents precede children in a pool, so the
nodes of highest reach form a prefix-closed tree, and the best such tree of any size.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Tree(Protocol):
    parents: np.ndarray
    depths: np.ndarray


def path_to(parents, node: int) -> list[int]:
    """Node indices from depth 1 down to `node` (empty for the root), following `parents`."""
    out = []
    while node > 0:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


def reach_order(reach: np.ndarray) -> np.ndarray:
    """Draft node indices by reach, highest first (ties: lower index first)."""
    return np.argsort(-reach[1:], kind="stable") + 1


def top_by_reach(reach: np.ndarray, count: int, order: np.ndarray | None = None) -> np.ndarray:
    """The `count` draft nodes of highest reach (ties: lower index first), root included, sorted.

    Reach never grows along a path and parents precede children, so this set is prefix-closed
    and maximises the sum of reach among trees of at most `count` nodes."""
    order = reach_order(reach) if order is None else order
    chosen = np.zeros(min(count, len(order)) + 1, dtype=np.int64)
    chosen[1:] = np.sort(order[:count])
    return chosen


def utility_selection(pool: Tree, reach: np.ndarray, budget: int, lambda_node: float,
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
