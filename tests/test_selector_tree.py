"""TAPS over DFlash2's candidates (issue 60): the `selector` estimator reads the path selector's
transition distribution as q(b | a reached), picks its own pool from the top-K lattice by a best-first
heap, and TAPS selects from it as from any pool. Checked here against definitions written out in
plain numpy; lossless runs over drawn prompts are tests/test_lossless.py's (it is one of its runs)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from taps import DecodeSession, greedy_continuation, sample_continuation
from taps.config import DecodeConfig
from taps.estimate import SelectorEstimator, estimators_for, make_estimator, selector_heap
from taps.selectors import make_selector

PROMPT = [5, 17, 33, 2, 60, 8]


def _lattice(pair, temperature=0.0, prompt=PROMPT):
    s = DecodeSession(pair, prompt, selector="taps", estimator="selector", budget=16, temperature=temperature,
                      seed=3, max_new_tokens=8, stop_at_eos=False)
    with torch.inference_mode():
        return s, s._draft(s.tokens[-1], 7)


@torch.inference_mode()
def _brute_force_q(pair, lattice, root, parent_token, depth, temperature):
    """q(. | parent) over the top-K candidates at `depth`, from the selector's definition."""
    sel = pair.path_selector
    k = sel.top_k
    h = lattice.hidden[depth - 1].double()
    gate = sel.hidden_projection.weight.double() @ h
    a = sel.predecessor_codebook[parent_token].double() * gate
    cands = lattice.tokens[depth - 1, :k]
    scale = 1 / temperature if temperature > 0 else 1.0
    scores = np.array([lattice.logprobs[depth - 1, j] + scale * float(a @ sel.successor_codebook[c].double())
                       for j, c in enumerate(cands)])
    e = np.exp(scores - scores.max())
    return e / e.sum()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_each_edge_q_is_the_selectors_transition_softmax_given_its_parent(tiny_pair, temperature):
    s, lattice = _lattice(tiny_pair, temperature)
    root = s.tokens[-1]
    est = SelectorEstimator(tiny_pair.path_selector, temperature)
    pool = est.own_pool(root, lattice, 40)
    q = est.edge_probs(pool, lattice)
    assert q[0] == 1.0 and np.all((q > 0) & (q <= 1))
    for v in range(1, pool.size + 1):
        parent = pool.parents[v]
        want = _brute_force_q(tiny_pair, lattice, root, int(pool.tokens[parent]), int(pool.depths[v]), temperature)
        assert q[v] == pytest.approx(want[pool.ranks[v]], rel=1e-6), v
    # siblings never sum past 1: the children of one parent are part of one distribution
    sums = np.bincount(pool.parents[1:], weights=q[1:], minlength=len(q))
    assert sums.max() <= 1 + 1e-9


def test_the_pool_is_the_lattices_best_nodes_by_selector_reach(tiny_pair):
    """The heap's `count` nodes are exactly the best `count` of the whole top-K lattice by the
    product of q (enumerated here to depth 3 on a lattice cut to 3 depths and 4 candidates)."""
    s, lattice = _lattice(tiny_pair)
    est = SelectorEstimator(tiny_pair.path_selector)
    logq, cands, unary = est.table(s.tokens[-1], lattice)
    logq, cands, unary = logq[:3, :4, :4], cands[:3, :4], unary[:3, :4]
    paths = {}
    for depth in (1, 2, 3):
        for ranks in itertools.product(range(4), repeat=depth):
            score, prev = 0.0, 0
            for t, r in enumerate(ranks):
                score += logq[t, prev, r]
                prev = r
            paths[ranks] = score
    best = sorted(paths.values(), reverse=True)
    for count in (1, 5, 17, 40, len(paths)):
        tree = selector_heap(logq, cands, unary, int(s.tokens[-1]), count)
        assert tree.size == count
        # the tree's own path scores from logq, node by node
        path = np.zeros(tree.size + 1)
        for v in range(1, tree.size + 1):
            p = tree.parents[v]
            prank = tree.ranks[p] if tree.depths[v] > 1 else 0
            path[v] = path[p] + logq[tree.depths[v] - 1, prank, tree.ranks[v]]
        assert np.allclose(np.sort(path[1:])[::-1], best[:count])
        assert np.all(np.diff(path[1:]) <= 1e-12)                    # popped best first
        assert np.all(tree.parents[1:] < np.arange(1, tree.size + 1))  # prefix-closed, topological
        assert np.array_equal(tree.tokens[1:], cands[tree.depths[1:] - 1, tree.ranks[1:]])
        assert np.allclose(tree.marginal_logprob[1:], unary[tree.depths[1:] - 1, tree.ranks[1:]])


def test_taps_with_the_selector_estimator_takes_the_selectors_pool(tiny_pair):
    s, lattice = _lattice(tiny_pair)
    cfg = DecodeConfig(selector="taps", estimator="selector", budget=8, taps_mode="reach", pool_factor=4)
    est = make_estimator("selector", tiny_pair, "off")
    from taps.selectors import RoundContext

    pool = make_selector("taps").pool(s.tokens[-1], lattice, cfg, RoundContext(estimator=est))
    heap = est.own_pool(s.tokens[-1], lattice, 32)
    assert np.array_equal(pool.tokens, heap.tokens) and np.array_equal(pool.parents, heap.parents)
    # it differs from TAPS's usual pool (the marginal's best nodes) somewhere: the selector reorders
    usual = make_selector("taps").pool(s.tokens[-1], lattice, cfg, RoundContext(estimator=make_estimator(
        "marginal", tiny_pair, "off")))
    assert {tuple(x) for x in zip(pool.depths, pool.ranks)} != {tuple(x) for x in zip(usual.depths, usual.ranks)}


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_selector_trees_are_lossless_in_every_size_mode(tiny_pair, temperature):
    for prompt in ([5, 17, 33, 2, 60, 8], [40, 41, 42], [88]):
        n = 20
        want = (greedy_continuation(tiny_pair, prompt, n) if temperature == 0 else
                sample_continuation(tiny_pair, prompt, n, temperature, 7))
        for budget, mode in ((1, "reach"), (4, "cost"), (16, "utility"), (64, "reach")):
            s = DecodeSession(tiny_pair, prompt, selector="taps", estimator="selector", budget=budget,
                              taps_mode=mode, temperature=temperature, seed=7, max_new_tokens=n, stop_at_eos=False)
            s.run()
            assert s.generated == want, (prompt, budget, mode)
            assert all(r.verified_nodes <= budget for r in s.rounds)


def test_a_pair_without_a_path_selector_has_no_selector_estimator(tiny_pair_dir):
    from taps import load_pair

    bare = load_pair(tiny_pair_dir, drafter=str(tiny_pair_dir / "drafter"), device="cpu", dtype="float64")
    assert bare.path_selector is None
    assert "selector" not in estimators_for(bare) and "selector" in estimators_for(load_pair(tiny_pair_dir))
    with pytest.raises(ValueError, match="path selector"):
        DecodeConfig(selector="taps", estimator="selector").validate(bare)
    with pytest.raises(ValueError, match="path selector"):
        make_estimator("selector", bare)
