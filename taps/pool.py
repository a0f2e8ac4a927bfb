"""The drafter's output as a top-K lattice, and the TAPS candidate pool built from it.

`Lattice` keeps, for each depth 1..H, the K most likely tokens under the drafter's marginal with
their log-probs, plus per-position statistics (entropy, top1-top2 margin, top-K mass) that the
learned scorer reads. `candidate_pool` runs a beam over cumulative draft log-prob, depth by
depth, keeping the best W children per depth, up to a pool cap: a prefix-closed DraftTree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .tree import DraftTree


@dataclass
class Lattice:
    tokens: np.ndarray      # [H, K] token ids, best first
    logprobs: np.ndarray    # [H, K] drafter log-probs of those tokens
    entropy: np.ndarray     # [H] entropy of each position's marginal (nats)
    margin: np.ndarray      # [H] top1 - top2 probability
    topk_mass: np.ndarray   # [H] probability mass of the top-K
    hidden: torch.Tensor | None = None  # [H, d] drafter hidden states (for the learned scorer)

    @property
    def depth(self) -> int:
        return self.tokens.shape[0]

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int, hidden: torch.Tensor | None = None,
                    temperature: float = 0.0) -> "Lattice":
        """logits [H, V] of the drafter's positions 1..H."""
        scaled = logits.float() / temperature if temperature > 0 else logits.float()
        logp = torch.log_softmax(scaled, dim=-1)
        k = min(k, logp.shape[-1])
        top_lp, top_ids = logp.topk(k, dim=-1)
        probs = logp.exp()
        entropy = -(probs * logp).sum(-1)
        top2 = top_lp[:, :2].exp()
        margin = top2[:, 0] - (top2[:, 1] if k > 1 else 0.0)
        return cls(tokens=top_ids.cpu().numpy(), logprobs=top_lp.double().cpu().numpy(),
                   entropy=entropy.double().cpu().numpy(), margin=margin.double().cpu().numpy(),
                   topk_mass=top_lp.exp().sum(-1).double().cpu().numpy(), hidden=hidden)


def tree_from_nodes(root_token: int, nodes: list[tuple[int, int, int]], lattice: Lattice) -> DraftTree:
    """Build a DraftTree from (parent index, depth, rank) triples listed in topological order."""
    n = len(nodes) + 1
    tokens = np.zeros(n, dtype=np.int64)
    parents = np.full(n, -1, dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    ranks = np.zeros(n, dtype=np.int64)
    step = np.zeros(n)
    path = np.zeros(n)
    tokens[0] = root_token
    for i, (parent, depth, rank) in enumerate(nodes, start=1):
        parents[i], depths[i], ranks[i] = parent, depth, rank
        tokens[i] = lattice.tokens[depth - 1, rank]
        step[i] = lattice.logprobs[depth - 1, rank]
        path[i] = path[parent] + step[i]
    return DraftTree(tokens=tokens, parents=parents, depths=depths, ranks=ranks, marginal_logprob=step,
                     path_logprob=path, reach=np.exp(path))


def candidate_pool(root_token: int, lattice: Lattice, top_k: int = 64, beam_width: int = 48,
                   pool_cap: int = 768) -> DraftTree:
    """Beam over cumulative draft log-prob: at each depth keep the W best children of the beam."""
    k = min(top_k, lattice.width)
    nodes: list[tuple[int, int, int]] = []
    beam_index = np.array([0])          # pool indices of the current beam
    beam_score = np.array([0.0])
    for depth in range(1, lattice.depth + 1):
        room = pool_cap - len(nodes)
        if room <= 0:
            break
        scores = beam_score[:, None] + lattice.logprobs[depth - 1, :k][None, :]   # [beam, k]
        flat = scores.ravel()
        keep = min(beam_width, flat.size, room)
        best = np.argpartition(-flat, keep - 1)[:keep]
        new_index, new_score = [], []
        for b in sorted(best, key=lambda f: (f // k, f % k)):   # parents in order, ranks in order
            parent_slot, rank = divmod(int(b), k)
            nodes.append((int(beam_index[parent_slot]), depth, rank))
            new_index.append(len(nodes))
            new_score.append(flat[b])
        beam_index, beam_score = np.array(new_index), np.array(new_score)
    return tree_from_nodes(root_token, nodes, lattice)
