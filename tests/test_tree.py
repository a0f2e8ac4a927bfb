"""Tree maths against brute force, and the tree forward against running each path alone."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from taps.estimate import OnlineEstimator, normalise_siblings, reach_from_edges
from taps.pool import Lattice, candidate_pool, tree_from_nodes
from taps.selectors import ddtree_nodes, top_by_reach, utility_selection
from taps.tree import DraftTree
from taps.verify import compact_cache, target_forward


def random_lattice(seed: int, depth: int, vocab: int, k: int) -> Lattice:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(depth, vocab, generator=gen, dtype=torch.float64) * 2
    return Lattice.from_logits(logits, k)


def all_paths(lattice: Lattice, k: int):
    """Every lattice path (tuple of ranks) of length 1..H with its log-prob."""
    for depth in range(1, lattice.depth + 1):
        for ranks in itertools.product(range(k), repeat=depth):
            yield ranks, sum(lattice.logprobs[d, r] for d, r in enumerate(ranks))


def rank_paths(tree: DraftTree) -> set[tuple[int, ...]]:
    return {tuple(int(tree.ranks[j]) for j in tree.path(i)) for i in range(1, len(tree.tokens))}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 4), k=st.integers(1, 4), budget=st.integers(1, 30))
def test_ddtree_equals_brute_force_top_b(seed, depth, k, budget):
    lattice = random_lattice(seed, depth, vocab=12, k=k)
    chosen, _ = ddtree_nodes(lattice, budget)
    tree = tree_from_nodes(7, chosen, lattice)
    assert tree.is_prefix_closed() and tree.size <= budget
    width = min(k, budget)
    ranked = sorted(all_paths(lattice, width), key=lambda item: -item[1])
    expected = {ranks for ranks, _ in ranked[:budget]}
    assert rank_paths(tree) == expected


def random_pool(seed: int) -> DraftTree:
    lattice = random_lattice(seed, depth=4, vocab=10, k=5)
    return candidate_pool(3, lattice, top_k=5, beam_width=4, pool_cap=12), lattice


def brute_best_sum(pool: DraftTree, reach: np.ndarray, budget: int) -> float:
    best = 0.0
    nodes = range(1, len(pool.tokens))
    for size in range(0, min(budget, pool.size) + 1):
        for subset in itertools.combinations(nodes, size):
            chosen = set(subset) | {0}
            if all(int(pool.parents[v]) in chosen for v in subset):
                best = max(best, sum(reach[v] for v in subset))
    return best


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(1, 8))
def test_reach_ranked_selection_is_brute_force_optimum(seed, budget):
    pool, _ = random_pool(seed)
    gen = np.random.default_rng(seed)
    q = normalise_siblings(pool.parents, gen.uniform(0.0, 1.0, len(pool.tokens)))
    reach = reach_from_edges(pool.parents, q)
    chosen = top_by_reach(reach, budget)
    sub = pool.subtree(chosen)
    assert sub.is_prefix_closed() and sub.size == min(budget, pool.size)
    assert reach[chosen[1:]].sum() == pytest.approx(brute_best_sum(pool, reach, budget), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(1, 12), cap=st.integers(1, 4))
def test_utility_selection_prefix_closed_within_caps(seed, budget, cap):
    pool, _ = random_pool(seed)
    reach = np.exp(pool.path_logprob)
    chosen = utility_selection(pool, reach, budget, 1.0, 0.002, cap)
    sub = pool.subtree(chosen)
    assert sub.is_prefix_closed() and sub.size <= budget
    has_child = np.zeros(len(sub.tokens), dtype=bool)
    has_child[sub.parents[1:]] = True
    assert (~has_child[1:]).sum() <= cap


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(2, 40), st.integers(1, 12),
       st.sampled_from([0.0, 0.7]))
@settings(max_examples=30, deadline=None)
def test_lattice_statistics_are_what_they_say(seed, depth, vocab, k, temperature):
    """Top-K tokens and log-probs, margin, top-K mass and the entropy (computed on first use, and
    kept when the full log-probs are dropped) against their definitions in float64."""
    logits = torch.randn(depth, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    lattice = Lattice.from_logits(logits, k, temperature=temperature)
    k = min(k, vocab)
    logp = torch.log_softmax(logits.float().double() / (temperature or 1.0), dim=-1)
    top, ids = logp.topk(k, dim=-1)
    p = top.exp()
    assert lattice.width == k and lattice.depth == depth
    np.testing.assert_allclose(lattice.logprobs, top.numpy(), atol=1e-5)
    assert (np.take_along_axis(logp.numpy(), lattice.tokens, 1) >= top[:, -1:].numpy() - 1e-5).all()
    np.testing.assert_allclose(lattice.margin, (p[:, 0] - (p[:, 1] if k > 1 else 0)).numpy(), atol=1e-5)
    np.testing.assert_allclose(lattice.topk_mass, p.sum(-1).numpy(), atol=1e-5)
    entropy = -(logp.exp() * logp).sum(-1).numpy()
    assert lattice.drop_full().full_logprobs is None
    np.testing.assert_allclose(lattice.entropy, entropy, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), width=st.integers(1, 6), cap=st.integers(1, 40))
def test_candidate_pool_is_a_beam(seed, width, cap):
    lattice = random_lattice(seed, depth=5, vocab=20, k=6)
    pool = candidate_pool(1, lattice, top_k=6, beam_width=width, pool_cap=cap)
    assert pool.is_prefix_closed() and pool.size <= cap
    for depth in range(1, 6):
        assert (pool.depths == depth).sum() <= width
    # at depth 1 the beam holds the best `width` tokens of the lattice
    first = sorted(pool.ranks[pool.depths == 1].tolist())
    assert first == list(range(min(width, 6, cap)))


def test_reach_never_grows_along_a_path():
    pool, lattice = random_pool(3)
    est = OnlineEstimator()
    rng = np.random.default_rng(0)
    est.observe(pool, rng.integers(0, 2, len(pool.tokens)).astype(float))
    reach = est.reach(pool, lattice)
    assert np.all(reach[1:] <= reach[pool.parents[1:]] + 1e-12)
    q = est.edge_probs(pool, lattice)
    assert q[0] == 1.0 and np.all((q >= 0) & (q <= 1))


def test_tree_forward_matches_each_path_alone(tiny_pair):
    """Each node's logits in the tree forward equal its logits when its path is run alone."""
    target = tiny_pair.target
    context = [5, 9, 23, 44, 12, 7]
    lattice = random_lattice(4, depth=4, vocab=target.config.vocab_size, k=3)
    pool = candidate_pool(30, lattice, top_k=3, beam_width=3, pool_cap=12)
    start = len(context)
    cache = DynamicCache(config=target.config)
    dev = tiny_pair.device
    ctx = torch.tensor([context], device=dev)
    with torch.no_grad():
        target_forward(target, cache, ctx, torch.arange(start, device=dev).view(1, -1), None, None)
        ids, pos, mask = pool.verify_inputs(start, start, tiny_pair.dtype, tiny_pair.device)
        logits, _ = target_forward(target, cache, ids, pos, mask, None)
        for node in range(len(pool.tokens)):
            path = [int(pool.tokens[0])] + [int(pool.tokens[i]) for i in pool.path(node)]
            alone = target(input_ids=torch.tensor([context + path], device=dev)).logits[0, -1]
            torch.testing.assert_close(logits[node], alone, rtol=1e-9, atol=1e-9)


def test_verify_mask_is_additive_float_and_ancestor_only():
    lattice = random_lattice(0, depth=3, vocab=8, k=2)
    tree = tree_from_nodes(1, [(0, 1, 0), (0, 1, 1), (1, 2, 0), (3, 3, 0)], lattice)
    ids, pos, mask = tree.verify_inputs(start=10, past_length=10, dtype=torch.float32, device=torch.device("cpu"))
    assert mask.dtype == torch.float32 and mask.shape == (1, 1, 5, 15)
    assert pos.tolist() == [[10, 11, 11, 12, 13]]
    visible = (mask[0, 0] == 0)
    assert visible[:, :10].all()
    assert visible[4, 10:].tolist() == [True, True, False, True, True]   # node 4: root, 1, 3, itself
    assert visible[2, 10:].tolist() == [True, False, True, False, False]


def test_compact_cache_keeps_accepted_entries(tiny_pair):
    target = tiny_pair.target
    cache = DynamicCache(config=target.config)
    with torch.no_grad():
        dev = tiny_pair.device
        target_forward(target, cache, torch.tensor([[3, 4, 5, 6, 7, 8]], device=dev),
                       torch.arange(6, device=dev).view(1, -1), None, None)
    before = cache.layers[0].keys.clone()
    compact_cache(cache, 2, [0, 2, 3])
    after = cache.layers[0].keys
    assert after.shape[-2] == 5
    torch.testing.assert_close(after[..., :2, :], before[..., :2, :])
    torch.testing.assert_close(after[..., 2:, :], before[..., [2, 4, 5], :])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_level_by_level_reach_equals_sequential(seed):
    pool, _ = random_pool(seed)
    q = np.random.default_rng(seed).uniform(0, 1, len(pool.tokens))
    np.testing.assert_allclose(reach_from_edges(pool.parents, q, pool.depths), reach_from_edges(pool.parents, q))


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 4), width=st.integers(1, 4), count=st.integers(1, 40), seed=st.integers(0, 10_000))
def test_top_paths_are_the_best_nodes_by_marginal_path(depth, width, count, seed):
    """top_paths gives a prefix-closed tree whose nodes are the `count` best by path score (brute force)."""
    from taps.pool import top_paths

    gen = torch.Generator().manual_seed(seed)
    lattice = Lattice.from_logits(torch.randn(depth, 12, generator=gen, dtype=torch.float64) * 2, width)
    tree = top_paths(3, lattice, count, top_k=width)
    assert tree.is_prefix_closed()
    every = [sum(lattice.logprobs[d, r] for d, r in enumerate(ranks))
             for length in range(1, depth + 1) for ranks in itertools.product(range(width), repeat=length)]
    best = sorted(every, reverse=True)[:count]
    np.testing.assert_allclose(sorted(tree.path_logprob[1:], reverse=True), best, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 5), width=st.integers(1, 6), count=st.integers(0, 50), seed=st.integers(0, 10_000),
       frontier=st.booleans())
def test_heap_tree_equals_the_tree_built_from_its_nodes(depth, width, count, seed, frontier):
    """heap_tree (DDTree's and TAPS's pool, built straight from the heap's lists) is exactly the
    tree that tree_from_nodes builds from the same popped (and frontier) nodes: same tokens, ranks,
    parents, and bit-for-bit the same path scores and reach."""
    from taps.pool import heap_tree

    lattice = random_lattice(seed, depth, 12, width)
    chosen, rest = ddtree_nodes(lattice, count, width=width, frontier=frontier)
    expected = tree_from_nodes(5, chosen + rest, lattice)
    tree = heap_tree(5, lattice, count, width, frontier=frontier)
    for name in ("tokens", "parents", "depths", "ranks", "marginal_logprob", "path_logprob", "reach"):
        np.testing.assert_array_equal(getattr(tree, name), getattr(expected, name), err_msg=name)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), count=st.integers(0, 70), seed=st.integers(0, 10_000), ties=st.booleans())
def test_top_by_reach_keeps_the_highest_reach_lowest_index_first(n, count, seed, ties):
    """The stable sort picks the `count` highest reaches, ties going to the lower index (as the
    lexicographic rule it replaced), root first, sorted."""
    gen = np.random.default_rng(seed)
    reach = gen.integers(0, 4, n + 1) / 4.0 if ties else gen.uniform(0, 1, n + 1)
    reach[0] = 1.0
    chosen = top_by_reach(reach, count)
    keyed = sorted(range(1, n + 1), key=lambda i: (-reach[i], i))[:count]
    assert chosen.tolist() == [0, *sorted(keyed)]
