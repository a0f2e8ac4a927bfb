"""The TAPS learned scorer: path-conditioned acceptance estimates for the edges of a pool.

For an edge parent -> child at depth d, a small MLP (the published scale: 119 -> 64 -> 1) reads the
target's input embedding of the child and of the parent (each projected to 32 dims), a depth
embedding (16), the drafter's output hidden state at depth d (projected to 32) and seven scalars
(step draft log-prob, position entropy, top1-top2 margin, top-K mass, d/H, cumulative draft
log-prob and its per-depth mean). A second head, one per parent (86 -> 32 -> 1), scores "the
target's token is none of these children". A softmax over a parent's children and that "other"
bucket gives q(child | parent reached).

Inference never runs the network as written. Its first layer is linear in the concatenated
inputs, so it splits into a sum of parts: a [V, 64] table per token role (embedding -> projection
-> first layer, folded once when the scorer is loaded), a [H, 64] row per depth (hidden state and
depth embedding, once per round) and the scalars' [7, 64] product per edge. Scoring an edge is then
three gathers, one small product, SiLU and a dot (`ScorerTables`).

Loss (per batch of pools): per-parent KL(target || q) + 0.5 x BCE(predicted reach, target reach),
where the target of an edge is the target model's probability of the child at the parent (or, with
greedy labels, whether the child is the target's argmax).
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

from . import kernels
from .pool import Lattice
from .tree import DraftTree

EDGE_SCALARS = 7
OTHER_SCALARS = 6
FORMAT = 2


@dataclass
class ScorerConfig:
    model_dim: int           # target hidden size (embedding and drafter hidden dimension)
    max_depth: int = 16      # depths 1..max_depth (block_size - 1 is enough)
    proj_dim: int = 32
    depth_dim: int = 16
    hidden_dim: int = 64     # edge MLP width; the "other" head uses half
    format: int = FORMAT
    sibling: bool = False    # a lever under test: sibling-competition scalars (2 per edge, 1 per parent)

    @property
    def edge_scalars(self) -> int:
        return EDGE_SCALARS + 2 * self.sibling

    @property
    def other_scalars(self) -> int:
        return OTHER_SCALARS + self.sibling


# ------------------------------------------------------------------------------------ features
@dataclass
class PoolFeatures:
    """What the scorer reads for the edges of one pool (numpy, float64 scalars)."""

    child_tokens: np.ndarray    # [E] edge e is pool node e + 1
    parent_tokens: np.ndarray   # [E]
    depth_index: np.ndarray     # [E] depth - 1 of the child (row of the lattice)
    parent_ids: np.ndarray      # [E] pool index of the parent
    edge_scalars: np.ndarray    # [E, 7]
    parents: np.ndarray         # [P] pool indices that have children (ascending)
    parent_tokens_p: np.ndarray  # [P]
    parent_depth_index: np.ndarray  # [P] lattice row of those children (parent depth)
    other_scalars: np.ndarray   # [P, 6]
    edge_group: np.ndarray      # [E] index into `parents` of each edge's parent


def parent_groups(pool: DraftTree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pool's nodes that have children (ascending, as np.unique would give), each edge's index
    into them (its softmax group), and each such parent's number of children."""
    up = pool.parents[1:]
    is_parent = np.zeros(len(pool.tokens), dtype=bool)
    is_parent[up] = True
    parents = np.flatnonzero(is_parent)
    group = (np.cumsum(is_parent) - 1)[up]
    return parents, group, np.bincount(group, minlength=len(parents))


def pool_features(pool: DraftTree, lattice: Lattice, sibling: bool = False) -> PoolFeatures:
    parent = pool.parents[1:]
    depth = pool.depths[1:]
    pos = depth - 1
    horizon = lattice.depth
    cum = pool.path_logprob[1:]
    stats = np.stack([lattice.entropy, lattice.margin, lattice.topk_mass], axis=1)       # [H, 3] per depth
    scal = np.column_stack([pool.marginal_logprob[1:], stats[pos], depth / horizon, cum, cum / np.maximum(depth, 1)])
    parents, group, n_children = parent_groups(pool)
    ppos = pool.depths[parents]                  # children of a parent at depth p sit on lattice row p
    other = np.column_stack([stats[ppos], (ppos + 1) / horizon, pool.path_logprob[parents], np.log(n_children)])
    if sibling:     # sibling competition: the marginal mass the pool's children of a parent hold, each one's share
        mass = np.bincount(group, weights=np.exp(pool.marginal_logprob[1:]), minlength=len(parents))
        scal = np.column_stack([scal, np.log(mass[group]), np.exp(pool.marginal_logprob[1:]) / mass[group]])
        other = np.column_stack([other, np.log(mass)])
    return PoolFeatures(child_tokens=pool.tokens[1:], parent_tokens=pool.tokens[parent], depth_index=pos,
                        parent_ids=parent, edge_scalars=scal, parents=parents, parent_tokens_p=pool.tokens[parents],
                        parent_depth_index=ppos, other_scalars=other, edge_group=group)


# ------------------------------------------------------------------------------------ the network
class TapsScorer(nn.Module):
    def __init__(self, config: ScorerConfig):
        super().__init__()
        self.config = c = config
        self.child_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.parent_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.hidden_proj = nn.Linear(c.model_dim, c.proj_dim)
        self.depth_emb = nn.Embedding(c.max_depth + 1, c.depth_dim)
        self.edge_in = nn.Linear(3 * c.proj_dim + c.depth_dim + c.edge_scalars, c.hidden_dim)
        self.edge_out = nn.Linear(c.hidden_dim, 1)
        self.other_in = nn.Linear(2 * c.proj_dim + c.depth_dim + c.other_scalars, c.hidden_dim // 2)
        self.other_out = nn.Linear(c.hidden_dim // 2, 1)

    def _depth(self, index: torch.Tensor) -> torch.Tensor:
        return self.depth_emb((index + 1).clamp(max=self.config.max_depth))

    def forward(self, f: PoolFeatures, hidden: torch.Tensor, embed: nn.Embedding) -> tuple[torch.Tensor, torch.Tensor]:
        """Edge log-q [E] and "other" log-q [P], normalised per parent (the training path).
        `hidden` [H, d]: the drafter's hidden states of the lattice's depths."""
        def t(a, dtype=torch.long):
            return torch.as_tensor(np.asarray(a), dtype=dtype, device=hidden.device)

        real = self.edge_in.weight.dtype
        if hidden.is_inference():            # traces are collected under inference mode
            hidden = hidden.clone()
        with torch.no_grad():
            child_e = embed(t(f.child_tokens)).to(real)
            parent_e = embed(t(f.parent_tokens)).to(real)
            parent_pe = embed(t(f.parent_tokens_p)).to(real)
        depth_h = self.hidden_proj(hidden.to(real))                      # once per depth
        d_edge, d_other = t(f.depth_index), t(f.parent_depth_index)
        edge_x = torch.cat([self.child_proj(child_e), self.parent_proj(parent_e), depth_h[d_edge], self._depth(d_edge),
                            t(f.edge_scalars, real)], -1)
        other_x = torch.cat([self.parent_proj(parent_pe), depth_h[d_other], self._depth(d_other),
                             t(f.other_scalars, real)], -1)
        edge_logit = self.edge_out(F.silu(self.edge_in(edge_x))).squeeze(-1)
        other_logit = self.other_out(F.silu(self.other_in(other_x))).squeeze(-1)
        return group_log_softmax(edge_logit, other_logit, t(f.edge_group))

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
        if raw.get("format") != FORMAT:
            raise ValueError(f"the scorer in {path} has format {raw.get('format', 1)}; this version reads format "
                             f"{FORMAT}: retrain it with `python -m taps.train scorer`")
        model = cls(ScorerConfig(**raw))
        model.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
        return model.to(device).eval()


def group_log_softmax(edge_logit: torch.Tensor, other_logit: torch.Tensor, group: torch.Tensor):
    """log-softmax over each parent's children (edges with the same `group`) and its "other" logit."""
    group_max = other_logit.detach().clone().scatter_reduce(0, group, edge_logit.detach(), reduce="amax")
    edge_exp = (edge_logit - group_max[group]).exp()
    other_exp = (other_logit - group_max).exp()
    log_total = other_exp.index_add(0, group, edge_exp).log() + group_max
    return edge_logit - log_total[group], other_logit - log_total


# ------------------------------------------------------------------------------------ fast inference
def _fold(E: torch.Tensor, proj_w: torch.Tensor, proj_b: torch.Tensor, first: torch.Tensor, dtype) -> np.ndarray:
    """The [V, h] table ((E @ proj_w.T + proj_b) @ first.T) in float64, 16,384 embedding rows at a
    time: a float64 copy of a whole 151,936-token embedding would take 3-5 GB of host memory."""
    out = np.empty((E.shape[0], first.shape[0]), dtype=dtype)
    for start in range(0, E.shape[0], 16384):
        rows = E[start:start + 16384].double().cpu()
        out[start:start + rows.shape[0]] = ((rows @ proj_w.T + proj_b) @ first.T).numpy()
    return out


class ScorerTables:
    """The scorer folded for inference (numpy): per-token tables of the first layers, per-depth rows
    once per round, and per edge only what depends on the path. Equal to `TapsScorer.forward` up to
    float rounding (to rounding, in float64, whatever the batch).

    Both heads' first layers are linear in their inputs, so each splits into parts:
    - per token (folded once): embedding -> child/parent projection -> first layer, [V, h];
    - per lattice row d (once a round, one product for both heads): the drafter's hidden state at d
      (through `hidden_proj`), the row's entropy, margin and top-K mass, and d / H, as
      [hidden | entropy, margin, mass | d/H] @ row_weight, plus a depth bias (depth embedding,
      biases);
    - per edge: the step and cumulative draft log-probs and their per-depth mean ([3, h]); per
      parent: its path log-prob and log(number of children) ([2, h/2]).
    """

    def __init__(self, scorer: TapsScorer, embed: nn.Embedding, dtype=np.float32):
        c = scorer.config
        if c.sibling:
            raise ValueError("this scorer reads sibling-competition features, which the folded tables do not "
                             "compute yet (a lever under test: `taps.train.scorer` evaluates it with its forward)")
        p, dd = c.proj_dim, c.depth_dim
        with torch.no_grad():
            E = embed.weight.detach()      # folded a block of rows at a time: no float64 copy of all of it

            def lin(layer):
                return layer.weight.detach().double().cpu(), layer.bias.detach().double().cpu()

            cw, cb = lin(scorer.child_proj)
            pw, pb = lin(scorer.parent_proj)
            hw, hb = lin(scorer.hidden_proj)                         # [p, d], [p]
            w1, b1 = lin(scorer.edge_in)   # [child p | parent p | hidden p | depth dd | scalars 7]
            o1, ob = lin(scorer.other_in)  # [parent p | hidden p | depth dd | scalars 6]
            depth = scorer.depth_emb.weight.detach().double().cpu()  # [D+1, dd]
            # the [V, h] token tables: the only large ones, kept in `dtype`
            self.child = _fold(E, cw, cb, w1[:, :p], dtype)
            self.parent = _fold(E, pw, pb, w1[:, p:2 * p], dtype)
            self.other_parent = _fold(E, pw, pb, o1[:, :p], dtype)
            # per lattice row, both heads side by side: [hidden | entropy, margin, mass | d/H] -> [h + h/2]
            e_hidden, o_hidden = w1[:, 2 * p:3 * p], o1[:, p:2 * p]
            e_scal, o_scal = w1[:, 3 * p + dd:], o1[:, 2 * p + dd:]   # [h, 7], [h/2, 6]
            edge_row = torch.cat([(e_hidden @ hw).T, e_scal[:, 1:5].T])          # [d + 4, h]
            other_row = torch.cat([(o_hidden @ hw).T, o_scal[:, 0:4].T])         # [d + 4, h/2]
            self.row_weight = torch.cat([edge_row, other_row], 1).numpy()
            self.row_bias = torch.cat([depth @ w1[:, 3 * p:3 * p + dd].T + b1 + e_hidden @ hb,
                                       depth @ o1[:, 2 * p:2 * p + dd].T + ob + o_hidden @ hb], 1).numpy()
            self.edge_path = e_scal[:, [0, 5, 6]].T.numpy()          # [3, h]: step, cumulative, mean
            self.other_path = o_scal[:, 4:6].T.numpy()               # [2, h/2]: path log-prob, log children
            w2, b2 = lin(scorer.edge_out)
            self.edge_w2, self.edge_b2 = w2[0].numpy(), float(b2[0])
            v2, c2 = lin(scorer.other_out)
            self.other_w2, self.other_b2 = v2[0].numpy(), float(c2[0])
        self.width = c.hidden_dim
        self.max_depth = c.max_depth

    def warm_up(self) -> None:
        """Compile (or load) the scorer's kernel for these tables before a session's first round."""
        from .pool import heap_tree

        hidden = torch.zeros(2, self.row_weight.shape[0] - 4)
        lattice = Lattice.from_logits(torch.arange(8.0).repeat(2, 1), 4, hidden=hidden)
        self.edge_probs(heap_tree(0, lattice, 4, 4), lattice)

    def rows(self, lattice: Lattice) -> np.ndarray:
        """[H, h + h/2]: each lattice row's part of both heads' first layers."""
        hidden = hidden_array(lattice)
        horizon = lattice.depth
        bias = self.row_bias[np.minimum(np.arange(1, horizon + 1), self.max_depth)]
        z = np.column_stack([hidden, lattice.entropy, lattice.margin, lattice.topk_mass,
                             np.arange(1, horizon + 1) / horizon])
        return z @ self.row_weight + bias

    def edge_probs(self, pool: DraftTree, lattice: Lattice) -> np.ndarray:
        """q(child | parent reached) for every pool node (q[0] = 1 for the root): a softmax per
        parent over its children and "other", so a parent's children sum to less than 1."""
        if pool.size == 0:
            return np.ones(1)
        rows = self.rows(lattice)
        return kernels.scorer_edge_probs(pool.tokens, pool.parents, pool.depths, pool.marginal_logprob,
                                         pool.path_logprob, rows, self.child, self.parent, self.other_parent,
                                         self.edge_path, self.other_path, self.edge_w2, self.edge_b2,
                                         self.other_w2, self.other_b2, self.width)


def hidden_array(lattice: Lattice) -> np.ndarray:
    if lattice.hidden is None:
        raise ValueError("the learned scorer needs the drafter's hidden states in the lattice")
    hidden = lattice.hidden
    return hidden.detach().float().cpu().numpy() if isinstance(hidden, torch.Tensor) else np.asarray(hidden)


# ------------------------------------------------------------------------------------ loss
def scorer_loss(edge_logq: torch.Tensor, other_logq: torch.Tensor, f: PoolFeatures, edge_target: torch.Tensor,
                bce_weight: float = 0.5, bce_focus: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(target || q) per parent plus bce_weight x BCE between predicted and target reach.

    `edge_target` [E]: the target model's probability of each child token at its parent.
    `bce_focus` > 0 weights each node's BCE by min(1, max(predicted, target reach) / bce_focus)
    (normalised to mean 1): the nodes whose reach a size choice reads count fully, the mass of
    nodes no tree would hold less."""
    group = torch.as_tensor(f.edge_group, device=edge_logq.device)
    other_target = (1.0 - torch.zeros_like(other_logq).index_add(0, group, edge_target)).clamp(min=0.0)
    eps = 1e-8
    kl_edges = edge_target * ((edge_target + eps).log() - edge_logq)
    kl_other = other_target * ((other_target + eps).log() - other_logq)
    kl = (kl_other.sum() + kl_edges.sum()) / max(len(other_logq), 1)
    parent_ids = torch.as_tensor(f.parent_ids, device=edge_logq.device)
    depths = torch.as_tensor(f.depth_index + 1, device=edge_logq.device)
    pred_reach = _path_cumsum(edge_logq, parent_ids, depths).exp().clamp(1e-7, 1 - 1e-7)
    true_reach = _path_cumsum((edge_target + eps).log(), parent_ids, depths).exp().clamp(0.0, 1.0)
    if bce_focus > 0:
        weight = (torch.maximum(pred_reach.detach(), true_reach) / bce_focus).clamp(max=1.0)
        weight = weight / weight.mean().clamp(min=1e-8)
        bce = F.binary_cross_entropy(pred_reach, true_reach, weight=weight)
    else:
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
