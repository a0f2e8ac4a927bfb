"""Plain numpy and Python reference versions of the compiled selection kernels (taps.kernels).

The engine always runs the kernels; these are written to be read, not to be fast, and
tests/test_kernels.py checks every kernel against them over random cases: bit for bit where the
kernel promises it, to float rounding for the learned scorer's q.
"""

from __future__ import annotations

import heapq

import numpy as np


def best_first(logprobs: np.ndarray, tokens: np.ndarray, root_token: int, count: int, width: int,
               frontier: bool) -> tuple[np.ndarray, ...]:
    """DDTree's best-first heap over path log-prob (`kernels.best_first`): pop the `count` best
    nodes among the first `width` ranks of the lattice (logprobs and token ids [H, K]), parents
    before children; with `frontier`, the heap's remaining nodes follow, best first. Returns
    (tokens, parents, depths, ranks, step log-probs, path log-probs), root first."""
    horizon = logprobs.shape[0]
    k = min(width, logprobs.shape[1])
    parents, depths, ranks, path = [-1], [0], [0], [0.0]
    heap = []
    if count > 0 and k > 0 and horizon > 0:
        lp = logprobs[:, :k].tolist()           # Python floats
        heap = [(-lp[0][0], 0, 0, 1, 0)]        # (-score, push order, parent, depth, rank)
        tie = 1
        while heap and len(path) <= count:
            neg, _, parent, depth, rank = heapq.heappop(heap)
            index = len(path)
            parents.append(parent)
            depths.append(depth)
            ranks.append(rank)
            path.append(-neg)
            if rank + 1 < k:        # the next sibling
                heapq.heappush(heap, (-(path[parent] + lp[depth - 1][rank + 1]), tie, parent, depth, rank + 1))
                tie += 1
            if depth < horizon:     # the first child
                heapq.heappush(heap, (neg - lp[depth][0], tie, index, depth + 1, 0))
                tie += 1
    if frontier:
        for neg, _, parent, depth, rank in sorted(heap):
            parents.append(parent)
            depths.append(depth)
            ranks.append(rank)
            path.append(-neg)
    parents, depths, ranks = np.array(parents), np.array(depths), np.array(ranks)
    rows = depths - 1                           # the root's -1 is overwritten below
    out_tokens = tokens[rows, ranks].astype(np.int64)
    out_tokens[0] = root_token
    step = logprobs[rows, ranks]
    step[0] = 0.0
    return out_tokens, parents, depths, ranks, step, np.array(path)


def scorer_edge_probs(tables, pool, lattice) -> np.ndarray:
    """`ScorerTables.edge_probs` in numpy: each edge's logit and each parent's "other" logit from
    the folded tables (two small MLPs), then a softmax per parent over its children and "other"."""
    from taps.scorer import parent_groups

    if pool.size == 0:
        return np.ones(1)
    rows = tables.rows(lattice)
    h = tables.width
    tokens, up = pool.tokens, pool.parents[1:]
    depth = pool.depths[1:]
    cum = pool.path_logprob[1:]
    path = np.column_stack([pool.marginal_logprob[1:], cum, cum / depth])
    x = tables.child[tokens[1:]] + tables.parent[tokens[up]] + rows[depth - 1, :h] + path @ tables.edge_path
    edge = silu(x) @ tables.edge_w2 + tables.edge_b2
    parents, group, n_children = parent_groups(pool)   # children of a parent at depth p sit on row p
    y = (tables.other_parent[tokens[parents]] + rows[pool.depths[parents], h:]
         + np.column_stack([pool.path_logprob[parents], np.log(n_children)]) @ tables.other_path)
    other = silu(y) @ tables.other_w2 + tables.other_b2
    edge_exp = np.exp(np.clip(edge, -700.0, 700.0))
    total = np.exp(np.clip(other, -700.0, 700.0))
    total += np.bincount(group, weights=edge_exp, minlength=len(total))
    q = np.empty(len(tokens))
    q[0] = 1.0
    q[1:] = edge_exp / total[group]
    return q


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def reach_from_edges(parents: np.ndarray, q: np.ndarray) -> np.ndarray:
    """r(root) = 1, r(v) = r(parent) * q(v), parents before children."""
    reach = np.ones(len(parents))
    for v in range(1, len(parents)):
        reach[v] = reach[parents[v]] * q[v]
    return reach


def best_size(reach_desc: np.ndarray, times: np.ndarray) -> int:
    """The cost objective (`kernels.best_size`): the m in 0..len(times)-1 maximising
    (1 + sum of the first m of reach_desc) / times[m], the first such m."""
    n = len(times) - 1
    expected = np.empty(n + 1)
    expected[0] = 0.0
    np.cumsum(reach_desc[:n], out=expected[1:])
    expected += 1.0
    return int(np.argmax(expected / times))


def top_by_reach(reach: np.ndarray, count: int, times: np.ndarray) -> np.ndarray:
    """TAPS's selection (`kernels.top_by_reach`): the root and the `count` draft nodes of highest
    reach (ties to the lower index), sorted; with round `times`, as many as `best_size` gives."""
    order = np.argsort(-reach[1:], kind="stable") + 1
    size = min(count, len(order))
    if len(times):
        size = best_size(reach[order], times[:size + 1])
    return np.concatenate([[0], np.sort(order[:size])]).astype(np.int64)


def subtree(tree, keep: np.ndarray) -> tuple[bool, tuple[np.ndarray, ...]]:
    """`kernels.subtree`: whether every kept node's parent is kept too, and the kept nodes' arrays
    (keep sorted, parents renumbered, -1 for a parent not kept)."""
    keep = np.sort(np.asarray(keep, dtype=np.int64))
    remap = np.full(len(tree.tokens), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    parents = np.where(tree.parents[keep] >= 0, remap[np.maximum(tree.parents[keep], 0)], -1)
    closed = not np.any(parents[1:] < 0)
    return closed, (tree.tokens[keep], parents, tree.depths[keep], tree.ranks[keep], tree.marginal_logprob[keep],
                    tree.path_logprob[keep], tree.reach[keep])


def prefix_closed(parents: np.ndarray, depths: np.ndarray) -> bool:
    """`kernels.prefix_closed`: the root first, every parent before its child and one level up."""
    p = parents
    return bool(p[0] == -1 and np.all((p[1:] >= 0) & (p[1:] < np.arange(1, len(p))))
                and np.all(depths[1:] == depths[p[1:]] + 1))


def calibrated_reach(calibrator, pool, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`kernels.calibrated_reach` as `Calibrator.both` calls it: the map and its caps
    (`ReachMap.capped`), then each edge's q = r(v) / r(parent) times rho_d / rho_(d-1), at most 1,
    multiplied down the path (the static reach itself while the session has seen nothing)."""
    from taps.calibrate import conditional

    static = reach if calibrator.reach_map is None else calibrator.reach_map.capped(pool.parents, pool.depths, reach)
    if calibrator.correction.observations == 0:
        return static, static
    depths = np.asarray(pool.depths)
    rho = calibrator.correction.ratios(int(depths.max()))
    q = conditional(pool.parents, static)
    q[1:] = np.minimum(q[1:] * rho[depths[1:]] / rho[depths[1:] - 1], 1.0)
    q[0] = 1.0
    return static, reach_from_edges(pool.parents, q)

