"""Verify: one target forward over a draft tree, the walk, and the KV-cache compaction.

The walk is the only place tokens are chosen, and every chosen token is the target's own pick
(argmax at T=0, one sample from the target's distribution at T>0, one random draw per committed
token), so the output is exactly what the target alone would produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from .drafter import context_features
from .tree import DraftTree


def pick_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """The target's choice from one row of logits: argmax at T=0, else one inverse-CDF draw."""
    if temperature <= 0.0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.double().cpu() / temperature, dim=-1)
    u = torch.rand((), generator=generator, dtype=torch.float64)
    cdf = torch.cumsum(probs, dim=-1)
    return int(min(torch.searchsorted(cdf, u * cdf[-1]).item(), probs.numel() - 1))


def target_forward(target, cache: DynamicCache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                   attention_mask: torch.Tensor | None, feature_layers: list[int] | None):
    """Run the target with its cache; returns logits [n, V] and context features [n, F] (or None)."""
    out = target(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                 cache=cache, use_cache=True, output_hidden_states=feature_layers is not None)
    features = None
    if feature_layers is not None:
        features = context_features(out.hidden_states, feature_layers)[0]
    return out.logits[0], features


@dataclass
class WalkResult:
    accepted: list[int]          # tree indices of accepted draft nodes, by depth
    bonus_token: int             # the target's token after the last accepted node
    target_tokens: np.ndarray    # [n+1] the target's greedy token at each verified node
    child_prob: np.ndarray       # [n+1] target probability of each node's token at its parent (1 at root)


def walk(tree: DraftTree, logits: torch.Tensor, temperature: float,
         generator: torch.Generator | None) -> WalkResult:
    """Follow the target's choices down the tree from the root."""
    logits = logits.float()
    scaled = logits / temperature if temperature > 0 else logits
    probs = torch.softmax(scaled, dim=-1)
    parents = torch.as_tensor(tree.parents[1:], device=logits.device)
    tokens = torch.as_tensor(tree.tokens[1:], device=logits.device)
    child_prob = np.ones(len(tree.tokens))
    if tree.size:
        child_prob[1:] = probs[parents, tokens].double().cpu().numpy()
    target_tokens = logits.argmax(-1).cpu().numpy()
    children = tree.children()
    accepted: list[int] = []
    node = 0
    while True:
        token = pick_token(logits[node], temperature, generator)
        child = children[node].get(token)
        if child is None:
            return WalkResult(accepted, token, target_tokens, child_prob)
        accepted.append(child)
        node = child


def trim_cache(cache: DynamicCache, length: int) -> None:
    """Drop every cached position from `length` on (transformers' crop takes a count to remove)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def compact_cache(cache: DynamicCache, past_length: int, keep: list[int]) -> None:
    """Keep the cached context plus the tree entries at `keep` (relative to the tree), in order."""
    if keep == list(range(len(keep))):   # a chain accepted from the start: drop the tail only
        trim_cache(cache, past_length + len(keep))
        return
    index = None
    for layer in cache.layers:
        if index is None:
            index = torch.as_tensor(list(range(past_length)) + [past_length + k for k in keep],
                                    device=layer.keys.device)
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def edge_feedback(pool: DraftTree, selected: np.ndarray, logits: torch.Tensor, temperature: float) -> np.ndarray:
    """Per pool node, the target's verdict on it given its parent reached: 1/0 (is it the target's
    argmax) at T=0, the target's probability of it at T>0; NaN where the parent was not verified.
    This is what the online estimator learns from."""
    row_of = np.full(len(pool.tokens), -1)
    row_of[selected] = np.arange(len(selected))
    targets = np.full(len(pool.tokens), np.nan)
    nodes = np.flatnonzero(row_of[pool.parents[1:]] >= 0) + 1
    if nodes.size == 0:
        return targets
    rows = torch.as_tensor(row_of[pool.parents[nodes]], device=logits.device)
    toks = torch.as_tensor(pool.tokens[nodes], device=logits.device)
    if temperature > 0:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        targets[nodes] = probs[rows, toks].double().cpu().numpy()
    else:
        targets[nodes] = (logits.argmax(-1)[rows] == toks).double().cpu().numpy()
    return targets
