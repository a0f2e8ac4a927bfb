"""The compiled selection kernels (taps.kernels) against their plain numpy and Python versions in
tests/oracles.py: the same pools, selections, sizes and subtrees bit for bit, and the learned
scorer's q to float rounding, over random cases."""

from __future__ import annotations

import numpy as np
import oracles
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from taps import kernels
from taps.cost_model import LatencyProfile
from taps.estimate import reach_from_edges
from taps.pool import Lattice, heap_tree
from taps.scorer import ScorerConfig, ScorerTables, TapsScorer
from taps.tree import DraftTree

TREE_FIELDS = ("tokens", "parents", "depths", "ranks", "marginal_logprob", "path_logprob", "reach")


def _lattice(seed: int, depth: int, vocab: int, k: int, scale: float, ties: bool) -> Lattice:
    gen = torch.Generator().manual_seed(seed)
    lattice = Lattice.from_logits(torch.randn(depth, vocab, generator=gen) * scale, k,
                                  hidden=torch.randn(depth, 16, generator=gen))
    if ties:   # many equal scores: the heap's push order decides
        lattice.logprobs = np.round(lattice.logprobs, 1)
    return lattice


def _same_arrays(got, expected, names) -> None:
    for name, x, y in zip(names, got, expected, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 15), k=st.integers(1, 40), count=st.integers(0, 80),
       width=st.integers(1, 50), frontier=st.booleans(), ties=st.booleans())
def test_best_first_heap_equals_the_python_heap(seed, depth, k, count, width, frontier, ties):
    lattice = _lattice(seed, depth, 60, k, 1 + seed % 4, ties)
    got = kernels.best_first(lattice.logprobs, lattice.tokens, 7, count, width, frontier)
    expected = oracles.best_first(lattice.logprobs, lattice.tokens, 7, count, width, frontier)
    _same_arrays(got, expected, TREE_FIELDS[:6])
    tree = heap_tree(7, lattice, count, width, frontier)
    _same_arrays([getattr(tree, name) for name in TREE_FIELDS], [*expected, np.exp(expected[5])], TREE_FIELDS)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 80), count=st.integers(0, 90), ties=st.booleans(),
       sized=st.booleans())
def test_selection_and_sizing_equal_the_numpy_code(seed, n, count, ties, sized):
    rng = np.random.default_rng(seed)
    reach = np.concatenate([[1.0], rng.random(n) ** 3])
    if ties:
        reach = np.round(reach, 1)
    profile = LatencyProfile(sizes=[0, 8, 32, 128], verify_s=[0.003, 0.004, 0.006, 0.02], draft_s=0.001,
                             overhead_s={"taps/learned": 0.0015})
    size = min(count, n)
    times = profile.round_times("taps/learned", size) if sized else np.empty(0)
    got = kernels.top_by_reach(reach, size, times)
    assert got.dtype == np.int64 and np.array_equal(got, oracles.top_by_reach(reach, size, times))
    order = np.argsort(-reach[1:], kind="stable") + 1
    expected = oracles.best_size(reach[order], profile.round_times("taps/learned", size))
    assert profile.best_size(reach[order], count, "taps/learned") == expected
    assert kernels.best_size(reach[order], profile.round_times("taps/learned", size)) == expected
    if sized:
        assert len(got) == expected + 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 60), ties=st.booleans(), flat=st.booleans())
def test_best_size_equals_the_numpy_code(seed, n, ties, flat):
    """The cost objective on its own: descending reach, and round times with equal values (ties
    in the objective go to the smaller tree)."""
    rng = np.random.default_rng(seed)
    reach = np.sort(rng.random(n) ** 2)[::-1]
    if ties:
        reach = np.round(reach * 4) / 4
    times = 0.004 + np.cumsum(rng.random(n + 1) * (0.0 if flat else 0.0004))
    assert kernels.best_size(reach, times) == oracles.best_size(reach, times)


def _subtree_or_error(pool, keep):
    try:
        return pool.subtree(keep)
    except ValueError as exc:
        return str(exc)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 60), take=st.integers(0, 60), closed=st.booleans())
def test_subtree_equals_the_numpy_code(seed, count, take, closed):
    """Kept sets in any order, prefix-closed or not: the same subtree, or the refusal."""
    pool = heap_tree(3, _lattice(seed, 8, 40, 12, 2, False), count, 12)
    rng = np.random.default_rng(seed)
    keep = {0, *rng.permutation(np.arange(1, pool.size + 1))[:take].tolist()}
    if closed:
        for v in list(keep):
            while v > 0:
                v = int(pool.parents[v])
                keep.add(v)
    keep = rng.permutation(np.array(sorted(keep), dtype=np.int64))
    got_closed, *got = kernels.subtree(keep, *(getattr(pool, name) for name in TREE_FIELDS))
    expected_closed, expected = oracles.subtree(pool, keep)
    assert got_closed == expected_closed
    _same_arrays(got, expected, TREE_FIELDS)
    tree = _subtree_or_error(pool, keep)
    if expected_closed:
        _same_arrays([getattr(tree, name) for name in TREE_FIELDS], expected, TREE_FIELDS)
        assert tree.is_prefix_closed()
    else:
        assert tree == "subtree is not prefix-closed"
    if closed:
        assert got_closed


def test_subtree_must_keep_the_root():
    pool = heap_tree(3, _lattice(0, 4, 40, 6, 2, False), 10, 6)
    for keep in ([], [1, 2], np.arange(1, 4)):
        assert _subtree_or_error(pool, keep) == "a subtree must keep the root"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 40), node=st.integers(0, 40), parent=st.integers(-2, 41),
       depth=st.integers(-1, 16))
def test_prefix_closure_check_equals_the_numpy_code(seed, count, node, parent, depth):
    """A pool with one node's parent or depth changed (or none): both checks give the same verdict."""
    pool = heap_tree(3, _lattice(seed, 8, 40, 12, 2, False), count, 12)
    v = node % len(pool.parents)
    pool.parents[v] = parent
    if depth >= 0:
        pool.depths[v] = depth
    expected = oracles.prefix_closed(pool.parents, pool.depths)
    assert kernels.prefix_closed(pool.parents, pool.depths) == expected
    assert pool.is_prefix_closed() == expected


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(0, 600))
def test_reach_from_edges_equals_the_numpy_code(seed, count):
    """Small pools and large ones (over 512 nodes), bit for bit, with or without the depths."""
    pool = heap_tree(3, _lattice(seed, 15, 80, 40, 1, False), count, 40)
    q = np.random.default_rng(seed).random(len(pool.parents))
    expected = oracles.reach_from_edges(pool.parents, q)
    assert np.array_equal(kernels.reach_from_edges(pool.parents, q), expected)
    assert np.array_equal(reach_from_edges(pool.parents, q, pool.depths), expected)
    assert np.array_equal(reach_from_edges(pool.parents, q), expected)


@pytest.mark.parametrize("seed", range(6))
def test_learned_scorer_kernel_agrees_with_numpy(seed):
    """float32 tables (as shipped) and float64 tables: q from the kernel equals numpy's to rounding."""
    torch.manual_seed(seed)
    vocab, d = 50, 16
    scorer = TapsScorer(ScorerConfig(model_dim=d, max_depth=8, proj_dim=12, depth_dim=4, hidden_dim=16)).eval()
    for p in scorer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    embed = torch.nn.Embedding(vocab, d)
    lattice = _lattice(seed, 8, vocab, 10, 2, False)
    pool = heap_tree(3, lattice, 40, 10)
    for dtype in (np.float32, np.float64):
        tables = ScorerTables(scorer, embed, dtype=dtype)
        got = tables.edge_probs(pool, lattice)
        np.testing.assert_allclose(got, oracles.scorer_edge_probs(tables, pool, lattice), rtol=1e-12, atol=1e-300)
        assert got[0] == 1.0 and np.all(got[1:] > 0)
    root_only = DraftTree.root_only(3)
    assert np.array_equal(tables.edge_probs(root_only, lattice), oracles.scorer_edge_probs(tables, root_only, lattice))
