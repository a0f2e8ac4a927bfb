"""The drafter's output as a top-K lattice, and the TAPS candidate pool built from it.

`Lattice` keeps, for each depth 1..H, the K most likely tokens under the drafter's marginal with
their log-probs, plus per-position statistics (entropy, top1-top2 margin, top-K mass) that the
learned scorer reads. `candidate_pool` runs a beam over cumulative draft log-prob, depth by
depth, keeping the best W children per depth, up to a pool cap: a prefix-closed DraftTree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from . import kernels
from .tree import DraftTree, accumulate_down


@dataclass
class Lattice:
    tokens: np.ndarray      # [H, K] token ids, best first
    logprobs: np.ndarray    # [H, K] drafter log-probs of those tokens
    margin: np.ndarray      # [H] top1 - top2 probability
    topk_mass: np.ndarray   # [H] probability mass of the top-K
    hidden: torch.Tensor | None = None  # [H, d] drafter hidden states (for the learned scorer)
    full_logprobs: torch.Tensor | None = field(default=None, repr=False)  # [H, V], for the entropy
    _entropy: np.ndarray | None = field(default=None, repr=False)

    @property
    def entropy(self) -> np.ndarray:
        """[H] entropy of each position's marginal (nats). Only the learned scorer reads it, so it is
        computed from the full log-probs on first use (in the estimate stage), not in every draft."""
        if self._entropy is None:
            logp = self.full_logprobs
            self._entropy = -torch.linalg.vecdot(logp.exp(), logp).cpu().numpy().astype(np.float64)
        return self._entropy

    def drop_full(self) -> "Lattice":
        """Compute the entropy now and let the [H, V] log-probs go (for lattices kept in bulk)."""
        _ = self.entropy
        self.full_logprobs = None
        return self

    def candidates(self, k: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The drafter's top-k tokens at depths 1..depth, best first, and their (tempered) log-probs
        [depth, k] (DFlash2's candidates): the lattice's own columns when it is that wide, else from
        its full log-probs."""
        if self.width >= k or self.full_logprobs is None:
            return self.tokens[:depth, :k], self.logprobs[:depth, :k]
        values, ids = self.full_logprobs[:depth].topk(min(k, self.full_logprobs.shape[-1]), dim=-1)
        return ids.cpu().numpy(), values.double().cpu().numpy()

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
        # The rest is [H, K] numbers: numpy, in float64, rather than more tensor calls.
        top = top_lp.cpu().numpy().astype(np.float64)
        top_p = np.exp(top)
        margin = top_p[:, 0] - (top_p[:, 1] if k > 1 else 0.0)
        return cls(tokens=top_ids.cpu().numpy(), logprobs=top, margin=margin, topk_mass=top_p.sum(-1),
                   hidden=hidden, full_logprobs=logp)


def tree_from_nodes(root_token: int, nodes, lattice: Lattice) -> DraftTree:
    """Build a DraftTree from (parent index, depth, rank) triples listed in topological order."""
    table = np.asarray(nodes, dtype=np.int64).reshape(-1, 3)
    parents = np.concatenate([[-1], table[:, 0]])
    depths = np.concatenate([[0], table[:, 1]])
    ranks = np.concatenate([[0], table[:, 2]])
    tokens = np.concatenate([[root_token], lattice.tokens[table[:, 1] - 1, table[:, 2]]]).astype(np.int64)
    step = np.concatenate([[0.0], lattice.logprobs[table[:, 1] - 1, table[:, 2]]])
    path = accumulate_down(parents, depths, step)
    return DraftTree(tokens=tokens, parents=parents, depths=depths, ranks=ranks, marginal_logprob=step,
                     path_logprob=path, reach=np.exp(path))


def candidate_pool(root_token: int, lattice: Lattice, top_k: int = 64, beam_width: int = 48,
                   pool_cap: int = 768) -> DraftTree:
    """Beam over cumulative draft log-prob: at each depth keep the W best children of the beam."""
    k = min(top_k, lattice.width)
    levels = []                          # per depth: (parent pool indices, ranks)
    size = 0
    beam_index = np.array([0])          # pool indices of the current beam
    beam_score = np.array([0.0])
    for depth in range(1, lattice.depth + 1):
        room = pool_cap - size
        if room <= 0:
            break
        flat = (beam_score[:, None] + lattice.logprobs[depth - 1, :k][None, :]).ravel()   # [beam * k]
        keep = min(beam_width, flat.size, room)
        best = np.sort(np.argpartition(-flat, keep - 1)[:keep])   # parents in order, ranks in order
        parent_slot, rank = np.divmod(best, k)
        levels.append((beam_index[parent_slot], rank, depth))
        beam_index = size + 1 + np.arange(keep)
        beam_score = flat[best]
        size += keep
    if not levels:
        return tree_from_nodes(root_token, [], lattice)
    nodes = np.concatenate([np.stack([parent, np.full(len(rank), depth), rank], axis=1)
                            for parent, rank, depth in levels])
    return tree_from_nodes(root_token, nodes, lattice)


def ddtree_nodes(lattice: Lattice, budget: int, width: int | None = None, frontier: bool = True
                 ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """DDTree's best-first heap over path log-prob: the `budget` best nodes among the lattice's
    first `width` (default `budget`) ranks, in the order popped (parents before children).
    Returns (chosen nodes, frontier best first, or [] if not asked) as (parent, depth, rank)."""
    count = max(budget, 0)
    width = budget if width is None else width
    _, parents, depths, ranks, _, _ = kernels.best_first(lattice.logprobs, lattice.tokens, 0, int(count), int(width),
                                                         bool(frontier))
    nodes = list(zip(parents[1:].tolist(), depths[1:].tolist(), ranks[1:].tolist()))
    return nodes[:count], nodes[count:]


def heap_tree(root_token: int, lattice: Lattice, count: int, width: int, frontier: bool = False) -> DraftTree:
    """The `count` draft nodes of highest marginal path score among the lattice's first `width`
    ranks, popped by DDTree's heap, as a DraftTree in the order popped (a path's score never rises
    as it grows, so they are prefix-closed); with `frontier`, the heap's remaining nodes follow,
    best first. Built straight from the heap's lists: the path scores are the heap's own sums."""
    tokens, parents, depths, ranks, step, path = kernels.best_first(
        lattice.logprobs, lattice.tokens, int(root_token), int(count), int(width), bool(frontier))
    return DraftTree(tokens=tokens, parents=parents, depths=depths, ranks=ranks, marginal_logprob=step,
                     path_logprob=path, reach=np.exp(path))


def top_paths(root_token: int, lattice: Lattice, count: int, top_k: int = 64) -> DraftTree:
    """The `count` draft nodes of highest marginal path score (DDTree's score) among the lattice's
    top `top_k` ranks, as a prefix-closed DraftTree (a path's score never rises as it grows, so the
    best `count` nodes are prefix-closed): DDTree's heap run to `count` nodes."""
    return heap_tree(root_token, lattice, count, min(top_k, max(count, 1)))
