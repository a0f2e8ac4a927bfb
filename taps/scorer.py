"""The TAPS learned scorer: path-conditioned acceptance estimates for every edge of a pool.

For an edge parent -> child at depth d, an MLP reads the target's input embedding of the child
and of the parent (each projected to 32 dims), a depth embedding, the drafter's output hidden
state at depth d (projected to 32 dims) and seven scalars (step draft log-prob, position entropy,
top1-top2 margin, top-K mass, d/H, cumulative draft log-prob and its per-depth mean). A second
head, one per parent, scores "the target's token is none of these children". Softmax over a
parent's children and that "other" bucket gives q(child | parent reached).

Loss (per batch of pools): per-parent KL(target || q) + 0.5 x BCE(predicted reach, target reach),
where the target of an edge is the target model's softmax probability of the child at the parent.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from .pool import Lattice
from .tree import DraftTree

EDGE_SCALARS = 7
OTHER_SCALARS = 6


@dataclass
class ScorerConfig:
    model_dim: int           # target hidden size (embedding and drafter hidden dimension)
    max_depth: int = 16      # depths 1..max_depth (block_size - 1 is enough)
    proj_dim: int = 32
    depth_dim: int = 16
    hidden_dim: int = 256


@dataclass
class EdgeFeatures:
    """Everything the scorer reads for the edges of one pool (index e = pool node e + 1)."""

    child_tokens: torch.Tensor   # [E]
    parent_tokens: torch.Tensor  # [E]
    depths: torch.Tensor         # [E] depth of the child, 1..H
    parent_ids: torch.Tensor     # [E] pool index of the parent
    drafter_hidden: torch.Tensor # [E, d] drafter hidden state at the child's depth
    edge_scalars: torch.Tensor   # [E, 7]
    parents: torch.Tensor        # [P] pool indices that have children
    parent_tokens_p: torch.Tensor  # [P]
    parent_depths_p: torch.Tensor  # [P] depth of the children of that parent
    parent_hidden_p: torch.Tensor  # [P, d]
    other_scalars: torch.Tensor    # [P, 6]
    edge_group: torch.Tensor       # [E] index into `parents` of each edge's parent


def edge_features(pool: DraftTree, lattice: Lattice) -> EdgeFeatures:
    """Gather the scorer inputs of every edge of `pool` (a DraftTree over `lattice`)."""
    if lattice.hidden is None:
        raise ValueError("the learned scorer needs the drafter's hidden states in the lattice")
    device = lattice.hidden.device
    horizon = lattice.depth
    child = np.arange(1, len(pool.tokens))
    parent = pool.parents[child]
    depth = pool.depths[child]
    pos = depth - 1
    cum = pool.path_logprob[child]
    scal = np.stack([pool.marginal_logprob[child], lattice.entropy[pos], lattice.margin[pos],
                     lattice.topk_mass[pos], depth / horizon, cum, cum / depth], axis=1)
    parents_with_children, group = np.unique(parent, return_inverse=True)
    child_depth_p = pool.depths[parents_with_children] + 1
    ppos = child_depth_p - 1
    n_children = np.bincount(group, minlength=len(parents_with_children))
    other = np.stack([lattice.entropy[ppos], lattice.margin[ppos], lattice.topk_mass[ppos],
                      child_depth_p / horizon, pool.path_logprob[parents_with_children],
                      np.log(n_children)], axis=1)

    def t(a, dtype=torch.long):
        return torch.as_tensor(np.asarray(a), dtype=dtype, device=device)

    hidden = lattice.hidden.float()
    return EdgeFeatures(
        child_tokens=t(pool.tokens[child]), parent_tokens=t(pool.tokens[parent]), depths=t(depth),
        parent_ids=t(parent), drafter_hidden=hidden[t(pos)], edge_scalars=t(scal, torch.float32),
        parents=t(parents_with_children), parent_tokens_p=t(pool.tokens[parents_with_children]),
        parent_depths_p=t(child_depth_p), parent_hidden_p=hidden[t(ppos)],
        other_scalars=t(other, torch.float32), edge_group=t(group))


class TapsScorer(nn.Module):
    def __init__(self, config: ScorerConfig):
        super().__init__()
        self.config = config
        c = config
        self.child_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.parent_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.hidden_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.depth_emb = nn.Embedding(c.max_depth + 1, c.depth_dim)
        self.edge_mlp = nn.Sequential(
            nn.Linear(3 * c.proj_dim + c.depth_dim + EDGE_SCALARS, c.hidden_dim), nn.SiLU(),
            nn.Linear(c.hidden_dim, c.hidden_dim // 2), nn.SiLU(), nn.Linear(c.hidden_dim // 2, 1))
        self.other_mlp = nn.Sequential(
            nn.Linear(2 * c.proj_dim + c.depth_dim + OTHER_SCALARS, c.hidden_dim // 2), nn.SiLU(),
            nn.Linear(c.hidden_dim // 2, c.hidden_dim // 4), nn.SiLU(), nn.Linear(c.hidden_dim // 4, 1))

    def forward(self, f: EdgeFeatures, embed: nn.Embedding) -> tuple[torch.Tensor, torch.Tensor]:
        """Edge log-q [E] and "other" log-q [P], normalised per parent."""
        with torch.no_grad():
            child_e = embed(f.child_tokens).float()
            parent_e = embed(f.parent_tokens).float()
            parent_pe = embed(f.parent_tokens_p).float()
        depth = f.depths.clamp(max=self.config.max_depth)
        edge_in = torch.cat([self.child_proj(child_e), self.parent_proj(parent_e),
                             self.hidden_proj(f.drafter_hidden), self.depth_emb(depth), f.edge_scalars], -1)
        other_in = torch.cat([self.parent_proj(parent_pe), self.hidden_proj(f.parent_hidden_p),
                              self.depth_emb(f.parent_depths_p.clamp(max=self.config.max_depth)),
                              f.other_scalars], -1)
        edge_logit = self.edge_mlp(edge_in).squeeze(-1)
        other_logit = self.other_mlp(other_in).squeeze(-1)
        # softmax over each parent's children and its "other" bucket
        group_max = other_logit.detach().clone()
        group_max = group_max.scatter_reduce(0, f.edge_group, edge_logit.detach(), reduce="amax")
        edge_exp = (edge_logit - group_max[f.edge_group]).exp()
        other_exp = (other_logit - group_max).exp()
        total = other_exp.index_add(0, f.edge_group, edge_exp)
        log_total = total.log() + group_max
        return edge_logit - log_total[f.edge_group], other_logit - log_total

    def edge_probs(self, pool: DraftTree, lattice: Lattice, embed: nn.Embedding) -> np.ndarray:
        """q(child | parent reached) for every pool node (q[0] = 1 for the root)."""
        with torch.no_grad():
            edge_logq, _ = self(edge_features(pool, lattice), embed)
        return np.concatenate([[1.0], edge_logq.exp().double().cpu().numpy()])

    # --------------------------------------------------------------- save / load
    def save_pretrained(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"model_type": "taps_scorer", **asdict(self.config)}, indent=2))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> "TapsScorer":
        path = Path(path)
        if not (path / "config.json").exists() or not (path / "model.safetensors").exists():
            raise FileNotFoundError(f"no scorer (config.json + model.safetensors) in {path}")
        raw = json.loads((path / "config.json").read_text())
        if raw.pop("model_type", None) != "taps_scorer":
            raise ValueError(f"{path}/config.json is not a TAPS scorer config")
        model = cls(ScorerConfig(**raw))
        model.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
        return model.to(device).eval()


def scorer_loss(edge_logq: torch.Tensor, other_logq: torch.Tensor, f: EdgeFeatures,
                edge_target: torch.Tensor, bce_weight: float = 0.5) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(target || q) per parent plus bce_weight x BCE between predicted and target reach.

    `edge_target` [E]: the target model's probability of each child token at its parent.
    """
    other_target = (1.0 - torch.zeros_like(other_logq).index_add(0, f.edge_group, edge_target)).clamp(min=0.0)
    eps = 1e-8
    kl_edges = edge_target * ((edge_target + eps).log() - edge_logq)
    kl_other = other_target * ((other_target + eps).log() - other_logq)
    kl = (kl_other.sum() + kl_edges.sum()) / max(len(other_logq), 1)
    # reach along paths: pool parents precede children, so accumulate in order
    pred_reach = _path_cumsum(edge_logq, f.parent_ids, f.depths).exp().clamp(1e-7, 1 - 1e-7)
    true_reach = _path_cumsum((edge_target + eps).log(), f.parent_ids, f.depths).exp().clamp(0.0, 1.0)
    bce = F.binary_cross_entropy(pred_reach, true_reach)
    loss = kl + bce_weight * bce
    return loss, {"kl": float(kl.detach()), "bce": float(bce.detach())}


def _path_cumsum(edge_values: torch.Tensor, parent_ids: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
    """Sum of edge values along each node's path (edge e belongs to pool node e + 1)."""
    total = edge_values.new_zeros(edge_values.shape[0] + 1)
    for depth in range(1, int(depths.max()) + 1 if len(depths) else 1):
        edges = (depths == depth).nonzero().squeeze(-1)
        total = total.index_put((edges + 1,), total[parent_ids[edges]] + edge_values[edges])
    return total[1:]
