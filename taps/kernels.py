"""Compiled inner loops of a round's selection work (numba, a requirement of the engine).

A round's pool, estimate and select stages handle a few dozen nodes, where each numpy call costs
more in fixed overhead than in arithmetic, and the DDTree heap is a loop. These kernels do the
work in one compiled call each, and the engine always calls them:

- `best_first`: DDTree's best-first heap over path log-prob (the pools of DDTree and TAPS). Its
  pops are fixed by the keys (score, push order), so it returns exactly what a Python heap
  returns, bit for bit.
- `scorer_edge_probs`: the learned scorer's two small MLPs over a pool's edges and parents and
  its softmax per parent, from the tables `ScorerTables` folds once per pair. The same sums as a
  numpy version's, in a fixed loop order instead of BLAS's, so they agree to float rounding, not
  bit for bit.
- `reach_from_edges`: an estimator's reach from its edge probabilities, the same products.
- `best_size`: the one implementation of the cost objective, the tree size m maximising
  (1 + sum of the m largest reaches) / round_time(m) (`LatencyProfile.best_size`, TAPS's select).
- `top_by_reach`, `subtree`, `prefix_closed`: the select stage (TAPS's reach order with its cost
  sizing, and the verified subtree with its prefix-closure check).

Plain numpy and Python versions of each, written to be read, live in tests/oracles.py, and
tests/test_kernels.py checks every kernel against them over random cases.
Functions compile on first use (a second or two) and are cached next to this file.
"""

from __future__ import annotations

import numba
import numpy as np


def _jit(fn):
    return numba.njit(cache=True, nogil=True)(fn)


@_jit
def _heap_in_order(h_neg, h_tie, size):
    """The heap's slots best first: by negated score, ties by push order."""
    by_tie = np.argsort(h_tie[:size])
    return by_tie[np.argsort(h_neg[:size][by_tie], kind="mergesort")]


def _best_first(logprobs, tokens, root_token, count, width, frontier):
    """DDTree's heap over logprobs [H, K] (float64) and the token ids [H, K]: returns (tokens,
    parents, depths, ranks, step log-probs, path log-probs) of the root, the `count` popped nodes
    and, with `frontier`, the heap's remaining nodes best first. The heap holds keys (negated path
    score, push order); a pushed node's (parent, depth, rank) is kept by its push order."""
    horizon = logprobs.shape[0]
    k = min(width, logprobs.shape[1])
    n_pop = 0 if (count <= 0 or k <= 0 or horizon == 0) else count
    cap = 2 * n_pop + 2
    h_neg = np.empty(cap)
    h_tie = np.empty(cap, np.int64)
    pushed = np.empty((cap, 3), np.int64)            # by push order: parent, depth, rank
    out_tie = np.empty(n_pop + 1 + cap, np.int64)    # by output index: push order (the root: -1)
    out_path = np.empty(n_pop + 1 + cap)
    out_tie[0], out_path[0] = -1, 0.0
    n, size, tie = 1, 0, 0
    if n_pop > 0:
        h_neg[0], h_tie[0], pushed[0, 0], pushed[0, 1], pushed[0, 2] = -logprobs[0, 0], 0, 0, 1, 0
        size, tie = 1, 1
    # the heap's sift-down and sift-up are written out here: as helper functions (even inlined)
    # they make this loop much slower
    while size > 0 and n <= n_pop:
        neg, at = h_neg[0], h_tie[0]             # pop the smallest key
        size -= 1
        h_neg[0], h_tie[0] = h_neg[size], h_tie[size]
        i = 0
        while 2 * i + 1 < size:
            best = 2 * i + 1
            if best + 1 < size and (h_neg[best + 1] < h_neg[best]
                                    or (h_neg[best + 1] == h_neg[best] and h_tie[best + 1] < h_tie[best])):
                best += 1
            if not (h_neg[best] < h_neg[i] or (h_neg[best] == h_neg[i] and h_tie[best] < h_tie[i])):
                break
            h_neg[i], h_neg[best] = h_neg[best], h_neg[i]
            h_tie[i], h_tie[best] = h_tie[best], h_tie[i]
            i = best
        parent, depth, rank = pushed[at, 0], pushed[at, 1], pushed[at, 2]
        index = n
        out_tie[n], out_path[n] = at, -neg
        n += 1
        for child in range(2):
            if child == 0:      # the next sibling
                if rank + 1 >= k:
                    continue
                key = -(out_path[parent] + logprobs[depth - 1, rank + 1])
                pushed[tie, 0], pushed[tie, 1], pushed[tie, 2] = parent, depth, rank + 1
            else:               # the first child
                if depth >= horizon:
                    continue
                key = neg - logprobs[depth, 0]
                pushed[tie, 0], pushed[tie, 1], pushed[tie, 2] = index, depth + 1, 0
            i = size            # push, then sift up
            h_neg[i], h_tie[i] = key, tie
            size += 1
            tie += 1
            while i > 0:
                up = (i - 1) // 2
                if not (h_neg[i] < h_neg[up] or (h_neg[i] == h_neg[up] and h_tie[i] < h_tie[up])):
                    break
                h_neg[i], h_neg[up] = h_neg[up], h_neg[i]
                h_tie[i], h_tie[up] = h_tie[up], h_tie[i]
                i = up
    if frontier and size > 0:
        for j in _heap_in_order(h_neg, h_tie, size):
            out_tie[n], out_path[n] = h_tie[j], -h_neg[j]
            n += 1
    return _heap_tree_arrays(logprobs, tokens, root_token, pushed, out_tie[:n], out_path[:n].copy())


@_jit
def _heap_tree_arrays(logprobs, tokens, root_token, pushed, out_tie, path):
    """The tree's arrays from each output node's push order and path log-prob."""
    n = out_tie.shape[0]
    out_tok = np.empty(n, np.int64)
    out_par = np.empty(n, np.int64)
    out_dep = np.empty(n, np.int64)
    out_rank = np.empty(n, np.int64)
    out_step = np.empty(n)
    out_tok[0], out_par[0], out_dep[0], out_rank[0], out_step[0] = root_token, -1, 0, 0, 0.0
    for j in range(1, n):
        t = out_tie[j]
        out_par[j], out_dep[j], out_rank[j] = pushed[t, 0], pushed[t, 1], pushed[t, 2]
        out_tok[j] = tokens[out_dep[j] - 1, out_rank[j]]
        out_step[j] = logprobs[out_dep[j] - 1, out_rank[j]]
    return out_tok, out_par, out_dep, out_rank, out_step, path


def _scorer_edge_probs(tokens, parents, depths, step, path, rows, child, parent_t, other_parent,
                       edge_path, other_path, edge_w2, edge_b2, other_w2, other_b2, width):
    """The learned scorer's q(child | parent reached) of every pool node (q[0] = 1), exactly as
    `ScorerTables.edge_probs` computes it: each edge's and each parent's "other" logit from the
    folded tables, then a softmax per parent over its children and "other"."""
    n = tokens.shape[0] - 1
    h, half = width, other_w2.shape[0]
    n_children = np.zeros(n + 1, np.int64)
    for v in range(1, n + 1):
        n_children[parents[v]] += 1
    group_of = np.full(n + 1, -1, np.int64)
    groups = 0
    for v in range(n + 1):
        if n_children[v] > 0:
            group_of[v] = groups
            groups += 1
    edge = np.empty(n)
    group = np.empty(n, np.int64)
    for v in range(1, n + 1):
        up = parents[v]
        d = depths[v]
        tok, ptok = tokens[v], tokens[up]
        s0, s1 = step[v], path[v]
        s2 = s1 / d
        acc = 0.0
        for j in range(h):
            x = ((child[tok, j] + parent_t[ptok, j]) + rows[d - 1, j]
                 + (s0 * edge_path[0, j] + s1 * edge_path[1, j] + s2 * edge_path[2, j]))
            acc += x / (1.0 + np.exp(-x)) * edge_w2[j]
        edge[v - 1] = acc + edge_b2
        group[v - 1] = group_of[up]
    other = np.empty(groups)
    for v in range(n + 1):
        g = group_of[v]
        if g < 0:
            continue
        d, tok = depths[v], tokens[v]
        p0, p1 = path[v], np.log(np.float64(n_children[v]))
        acc = 0.0
        for j in range(half):
            y = (other_parent[tok, j] + rows[d, h + j]) + (p0 * other_path[0, j] + p1 * other_path[1, j])
            acc += y / (1.0 + np.exp(-y)) * other_w2[j]
        other[g] = acc + other_b2
    sums = np.zeros(groups)                  # summed as numpy's bincount sums, then "other" added
    edge_exp = np.empty(n)
    for e in range(n):
        edge_exp[e] = np.exp(min(max(edge[e], -700.0), 700.0))
        sums[group[e]] += edge_exp[e]
    total = np.empty(groups)
    for g in range(groups):
        total[g] = np.exp(min(max(other[g], -700.0), 700.0)) + sums[g]
    q = np.empty(n + 1)
    q[0] = 1.0
    for e in range(n):
        q[e + 1] = edge_exp[e] / total[group[e]]
    return q


def _reach_from_edges(parents, q):
    """`taps.estimate.reach_from_edges`: r(root) = 1, r(v) = r(parent) * q(v), parents first."""
    reach = np.empty(q.shape[0])
    reach[0] = 1.0
    for v in range(1, q.shape[0]):
        reach[v] = reach[parents[v]] * q[v]
    return reach


def _calibrated_reach(parents, depths, raw, knots_x, knots_y, knots_n, band_of_depth, rho, use_map):
    """`taps.calibrate.Calibrator`'s static then online reach in two passes over the nodes
    (parents first): with `use_map`, each node's reach through its depth band's knots (linear
    between them), clipped to [0, 1], then a parent's children scaled to share at most its reach
    and each kept at most it (`cap_down`); then each edge's q = r(v) / r(parent) times
    rho[d] / rho[d - 1], at most 1, multiplied down the path (`rho` all ones: the static reach)."""
    n = raw.shape[0]
    mapped = np.empty(n)
    mapped[0] = 1.0
    for v in range(1, n):
        x = raw[v]
        if use_map:
            b = band_of_depth[min(depths[v], band_of_depth.shape[0] - 1)]
            k = knots_n[b]
            x = np.interp(x, knots_x[b, :k], knots_y[b, :k])
        mapped[v] = min(max(x, 0.0), 1.0)
    static = np.empty(n)
    static[0] = 1.0
    if use_map:
        sums = np.zeros(n)
        for v in range(1, n):
            sums[parents[v]] += mapped[v]
        for v in range(1, n):
            up = parents[v]
            value = mapped[v] * (static[up] / sums[up]) if sums[up] > static[up] else mapped[v]
            static[v] = min(value, static[up])
    else:
        for v in range(1, n):
            static[v] = mapped[v]
    online = np.empty(n)
    online[0] = 1.0
    for v in range(1, n):
        up = parents[v]
        q = static[v] / static[up] if static[up] > 0 else 0.0
        q = min(q * rho[depths[v]] / rho[depths[v] - 1], 1.0)
        online[v] = online[up] * min(max(q, 0.0), 1.0)
    return static, online


def _best_size(reach_desc, times):
    """`LatencyProfile.best_size`: the m maximising (1 + sum of the first m reach) / times[m] over
    m = 0..len(times)-1 (the first such m)."""
    best, best_value, total = 0, 1.0 / times[0], 0.0
    for m in range(1, times.shape[0]):
        total += reach_desc[m - 1]
        value = (total + 1.0) / times[m]
        if value > best_value:
            best, best_value = m, value
    return best


best_size = _jit(_best_size)


def _top_by_reach(reach, count, times):
    """TAPS's selection (`taps.selectors.top_by_reach`, with the cost sizing of
    `LatencyProfile.best_size` when `times` is not empty): the root and the `count` (or the
    sized number of) draft nodes of highest reach, ties to the lower index, sorted."""
    order = np.argsort(-reach[1:], kind="mergesort") + 1
    size = min(count, order.shape[0])
    if times.shape[0] > 0:
        size = best_size(reach[order], times[:size + 1])
    chosen = np.empty(size + 1, np.int64)
    chosen[0] = 0
    chosen[1:] = np.sort(order[:size])
    return chosen


def _subtree(keep, tokens, parents, depths, ranks, marginal, path, reach):
    """`DraftTree.subtree`: the nodes at `keep` (sorted here), parents renumbered. Returns whether
    every kept node's parent is kept too, then the kept nodes' arrays."""
    keep = np.sort(keep)
    n = keep.shape[0]
    remap = np.full(tokens.shape[0], -1, np.int64)
    for i in range(n):
        remap[keep[i]] = i
    closed = True
    new_parents = np.empty(n, np.int64)
    for i in range(n):
        up = parents[keep[i]]
        new_parents[i] = remap[up] if up >= 0 else -1
        if i > 0 and new_parents[i] < 0:
            closed = False
    return (closed, tokens[keep], new_parents, depths[keep], ranks[keep], marginal[keep], path[keep], reach[keep])


def _prefix_closed(parents, depths):
    """`DraftTree.is_prefix_closed`: the root first, every parent before its child, one level up."""
    if parents[0] != -1:
        return False
    for v in range(1, parents.shape[0]):
        up = parents[v]
        if up < 0 or up >= v or depths[v] != depths[up] + 1:
            return False
    return True


best_first = _jit(_best_first)
top_by_reach = _jit(_top_by_reach)
subtree = _jit(_subtree)
prefix_closed = _jit(_prefix_closed)
scorer_edge_probs = _jit(_scorer_edge_probs)
reach_from_edges = _jit(_reach_from_edges)
calibrated_reach = _jit(_calibrated_reach)


_warm = False


def warm_up() -> None:
    """Compile (or load from the cache) the pool and select kernels for the argument types a round
    passes, so that the first round of a session is not charged for it."""
    global _warm
    if _warm:
        return
    logprobs = np.log(np.array([[0.6, 0.3], [0.5, 0.4]]))
    tokens = np.array([[5, 6], [7, 8]], dtype=np.int64)
    tree = best_first(logprobs, tokens, 1, 3, 2, True)
    best_first(logprobs, tokens, 1, 3, 2, False)
    reach = np.exp(tree[5])
    for times in (np.empty(0), np.array([1.0, 1.1, 1.2, 1.3])):
        keep = top_by_reach(reach, 3, times)
    subtree(keep, *tree[:5], tree[5], reach)
    subtree(np.arange(3), *tree[:5], tree[5], reach)
    prefix_closed(tree[1], tree[2])
    best_size(reach[1:], np.array([1.0, 1.1, 1.2]))
    reach_from_edges(tree[1], reach)
    knots = np.array([[0.0, 1.0]])
    for use_map in (True, False):
        calibrated_reach(tree[1], tree[2], reach, knots, knots, np.array([2]), np.zeros(4, np.int64),
                         np.ones(3), use_map)
    _warm = True

