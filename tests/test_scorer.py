"""The TAPS scorer: q is a distribution over each parent's children and "other"; save/load round trip."""

from __future__ import annotations

import torch

from taps.pool import Lattice, candidate_pool
from taps.scorer import ScorerConfig, TapsScorer, edge_features


def test_scorer_distribution_and_round_trip(tmp_path):
    gen = torch.Generator().manual_seed(0)
    embed = torch.nn.Embedding(50, 16)
    hidden = torch.randn(5, 16, generator=gen)
    lattice = Lattice.from_logits(torch.randn(5, 50, generator=gen) * 2, 6, hidden=hidden)
    pool = candidate_pool(3, lattice, top_k=6, beam_width=5, pool_cap=20)
    scorer = TapsScorer(ScorerConfig(model_dim=16, max_depth=6, proj_dim=8, depth_dim=4, hidden_dim=32)).eval()
    f = edge_features(pool, lattice)
    with torch.no_grad():
        edge_logq, other_logq = scorer(f, embed)
    total = other_logq.exp().index_add(0, f.edge_group, edge_logq.exp())
    torch.testing.assert_close(total, torch.ones_like(total))
    scorer.save_pretrained(tmp_path / "s")
    again = TapsScorer.from_pretrained(tmp_path / "s")
    torch.testing.assert_close(torch.as_tensor(again.edge_probs(pool, lattice, embed)),
                               torch.as_tensor(scorer.edge_probs(pool, lattice, embed)))
