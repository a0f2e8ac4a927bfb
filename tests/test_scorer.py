"""The TAPS scorer: q is a distribution over each parent's children and "other"; the folded
inference tables equal the network; save/load round trip; old formats are refused clearly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from taps.pool import Lattice, candidate_pool
from taps.scorer import ScorerConfig, ScorerTables, TapsScorer, pool_features


def _setup(seed=0, vocab=50, dim=16, depth=5):
    gen = torch.Generator().manual_seed(seed)
    embed = torch.nn.Embedding(vocab, dim)
    torch.nn.init.normal_(embed.weight, generator=gen)
    hidden = torch.randn(depth, dim, generator=gen)
    lattice = Lattice.from_logits(torch.randn(depth, vocab, generator=gen) * 2, 6, hidden=hidden)
    pool = candidate_pool(3, lattice, top_k=6, beam_width=5, pool_cap=20)
    torch.manual_seed(seed)
    scorer = TapsScorer(ScorerConfig(model_dim=dim, max_depth=6, proj_dim=8, depth_dim=4, hidden_dim=32)).eval()
    for p in scorer.parameters():          # away from the init so every part of the input matters
        torch.nn.init.normal_(p, std=0.5, generator=gen)
    return embed, lattice, pool, scorer


def test_scorer_distribution_and_round_trip(tmp_path):
    embed, lattice, pool, scorer = _setup()
    f = pool_features(pool, lattice)
    with torch.no_grad():
        edge_logq, other_logq = scorer(f, lattice.hidden, embed)
    total = other_logq.exp().index_add(0, torch.as_tensor(f.edge_group), edge_logq.exp())
    torch.testing.assert_close(total, torch.ones_like(total))
    scorer.save_pretrained(tmp_path / "s")
    again = TapsScorer.from_pretrained(tmp_path / "s")
    np.testing.assert_array_equal(ScorerTables(again, embed).edge_probs(pool, lattice),
                                  ScorerTables(scorer, embed).edge_probs(pool, lattice))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folded_tables_equal_the_network(seed):
    """In float64 the tables give the network's q exactly (to rounding), for the whole pool and for
    any part of it scored on its own."""
    embed, lattice, pool, scorer = _setup(seed)
    scorer = scorer.double()
    embed = embed.double()
    lattice.hidden = lattice.hidden.double()
    f = pool_features(pool, lattice)
    with torch.no_grad():
        edge_logq, _ = scorer(f, lattice.hidden, embed)
    tables = ScorerTables(scorer, embed, dtype=np.float64)
    q = tables.edge_probs(pool, lattice)
    np.testing.assert_allclose(q[1:], edge_logq.exp().numpy(), rtol=1e-12, atol=1e-14)
    keep = np.flatnonzero(pool.depths <= 2)               # a prefix-closed part, scored alone
    part = tables.edge_probs(pool.subtree(keep), lattice)
    np.testing.assert_allclose(part[1:], q[keep[1:]], rtol=1e-12, atol=1e-14)


def test_an_old_scorer_is_refused_with_a_clear_message(tmp_path):
    _, _, _, scorer = _setup()
    scorer.save_pretrained(tmp_path / "s")
    raw = json.loads((tmp_path / "s" / "config.json").read_text())
    raw.pop("format")
    (tmp_path / "s" / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="retrain it"):
        TapsScorer.from_pretrained(tmp_path / "s")


def test_the_sibling_lever_reads_each_parents_pool_mass_and_is_scored_through_the_forward(tmp_path):
    """The sibling-competition lever: two more scalars per edge (log of the marginal mass its
    parent's pool children hold, its share of that) and one per parent; such a scorer saves and
    loads, its q still sums to 1 with "other" per parent, the folded tables refuse it with a
    message, and the training stage scores it through the network's forward (equal to the tables
    for a scorer without the lever)."""
    from taps.train.scorer import ForwardTables

    embed, lattice, pool, plain = _setup()
    f = pool_features(pool, lattice, sibling=True)
    assert f.edge_scalars.shape[1] == 9 and f.other_scalars.shape[1] == 7
    share = f.edge_scalars[:, 8]
    assert np.allclose(np.bincount(f.edge_group, weights=share), 1.0)     # each parent's shares sum to 1
    config = ScorerConfig(model_dim=16, max_depth=6, proj_dim=8, depth_dim=4, hidden_dim=32, sibling=True)
    scorer = TapsScorer(config).eval()
    with torch.no_grad():
        edge_logq, other_logq = scorer(f, lattice.hidden, embed)
    total = other_logq.exp().index_add(0, torch.as_tensor(f.edge_group), edge_logq.exp())
    torch.testing.assert_close(total, torch.ones_like(total))
    scorer.save_pretrained(tmp_path / "s")
    assert TapsScorer.from_pretrained(tmp_path / "s").config.sibling
    with pytest.raises(ValueError, match="sibling-competition"):
        ScorerTables(scorer, embed)
    q = ForwardTables(scorer, embed).edge_probs(pool, lattice)
    np.testing.assert_allclose(q[1:], edge_logq.exp().numpy(), rtol=1e-6)
    np.testing.assert_allclose(ForwardTables(plain, embed).edge_probs(pool, lattice),
                               ScorerTables(plain, embed).edge_probs(pool, lattice), rtol=1e-5, atol=1e-7)
