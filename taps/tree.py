"""DraftTree: a rooted tree of draft tokens, and the inputs of the target's tree forward.

Node 0 is the root (the last token the target produced); every other node is a draft token at
depth 1..H whose parent has a smaller index (topological order). The verify inputs are the
node tokens, position ids `start + depth`, and an additive float 4-D mask in which each node sees
the whole cached context, its ancestors and itself.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import torch

from . import kernels
from .subtree import path_to

_PYTHON_OPS = {np.add: operator.add, np.multiply: operator.mul, np.logical_and: operator.and_}


def accumulate_down(parents: np.ndarray, depths: np.ndarray, values: np.ndarray, combine=np.add) -> np.ndarray:
    """out[v] = combine(out[parent(v)], values[v]) from the root down (out[root] = values[root]);
    e.g. path sums with np.add, path products with np.multiply. Nodes are in topological order
    (a parent's index is below its children's), so a small tree is one pass over Python numbers
    (a round's pool: a few dozen nodes, where per-call numpy overhead would dominate); a large
    one goes a depth level at a time. Both give the same float64 results."""
    if len(values) <= 512 and combine in _PYTHON_OPS:
        op, out, up = _PYTHON_OPS[combine], values.tolist(), parents.tolist()
        for v in range(1, len(out)):
            out[v] = op(out[up[v]], out[v])
        return np.array(out, dtype=values.dtype)
    out = values.copy()
    for depth in range(1, int(depths.max(initial=0)) + 1):
        level = np.flatnonzero(depths == depth)
        out[level] = combine(out[parents[level]], values[level])
    return out


@dataclass
class DraftTree:
    tokens: np.ndarray            # [n+1] token ids; index 0 is the root
    parents: np.ndarray           # [n+1] parent index, -1 for the root
    depths: np.ndarray            # [n+1] 0 for the root
    ranks: np.ndarray             # [n+1] rank of the token among the drafter's top-K at its depth
    marginal_logprob: np.ndarray  # [n+1] drafter log-prob of the token at its depth (0 at the root)
    path_logprob: np.ndarray      # [n+1] sum of marginal_logprob along the path (DDTree's score)
    reach: np.ndarray             # [n+1] estimated probability that the node is accepted (1 at the root)

    @property
    def size(self) -> int:
        """Number of draft nodes (the root is not counted)."""
        return len(self.tokens) - 1

    @classmethod
    def root_only(cls, token: int) -> "DraftTree":
        return cls(tokens=np.array([token], dtype=np.int64), parents=np.array([-1]), depths=np.array([0]),
                   ranks=np.array([0]), marginal_logprob=np.zeros(1), path_logprob=np.zeros(1),
                   reach=np.ones(1))

    def subtree(self, keep: np.ndarray) -> "DraftTree":
        """The tree restricted to node indices `keep` (must contain 0 and be prefix-closed)."""
        keep = np.asarray(keep, dtype=np.int64)
        if keep.size == 0 or keep.min() != 0:
            raise ValueError("a subtree must keep the root")
        closed, *arrays = kernels.subtree(keep, self.tokens, self.parents, self.depths, self.ranks,
                                          self.marginal_logprob, self.path_logprob, self.reach)
        if not closed:
            raise ValueError("subtree is not prefix-closed")
        return DraftTree(*arrays)

    def children(self) -> list[dict[int, int]]:
        """For each node, a map child token -> child index."""
        table: list[dict[int, int]] = [dict() for _ in range(len(self.tokens))]
        for i in range(1, len(self.tokens)):
            table[int(self.parents[i])][int(self.tokens[i])] = i
        return table

    def path(self, node: int) -> list[int]:
        """Node indices from the root's first child down to `node` (empty for the root)."""
        return path_to(self.parents, node)

    def ancestor_matrix(self) -> np.ndarray:
        """visible[i, j] = True when node j is node i or one of its ancestors (a depth level at a
        time: a node's row is its parent's row plus itself)."""
        n = len(self.tokens)
        visible = np.eye(n, dtype=bool)
        for depth in range(1, int(self.depths.max(initial=0)) + 1):
            level = np.flatnonzero(self.depths == depth)
            visible[level] |= visible[self.parents[level]]
        return visible

    def is_prefix_closed(self) -> bool:
        return bool(kernels.prefix_closed(self.parents, self.depths))

    def verify_inputs(self, start: int, past_length: int, dtype: torch.dtype, device: torch.device):
        """input_ids [1, n+1], position_ids [1, n+1] and the additive mask [1, 1, n+1, past + n+1]."""
        input_ids = torch.as_tensor(self.tokens, dtype=torch.long, device=device).view(1, -1)
        position_ids = torch.as_tensor(start + self.depths, dtype=torch.long, device=device).view(1, -1)
        n = len(self.tokens)
        visible = torch.ones(n, past_length + n, dtype=torch.bool, device=device)
        visible[:, past_length:] = torch.as_tensor(self.ancestor_matrix(), device=device)
        mask = torch.zeros(n, past_length + n, dtype=dtype, device=device)
        mask.masked_fill_(~visible, torch.finfo(dtype).min)
        return input_ids, position_ids, mask.view(1, 1, n, past_length + n)


class TreeMaskBuffer:
    """The verify inputs of a session's rounds, built into buffers that live on the device.

    The additive mask of a round is [n, past + n]: zeros over the cached context, the ancestor
    block (0 where visible, the dtype's minimum elsewhere) over the tree. One zeroed buffer
    [rows, columns] serves every round: the context part is never written, each round writes only
    its [n, n] ancestor block (and zeroes the previous round's block first), and the mask is a view
    of the first n rows and past + n columns. Values are exactly `DraftTree.verify_inputs`'s. The
    buffer grows (in chunks, at least doubling) when a round needs more rows or columns. Token and
    position ids go to the device in one copy, the ancestor block in another, neither waiting for the
    device's queue to drain (`non_blocking`: pageable memory is staged before the call returns)."""

    def __init__(self, dtype: torch.dtype, device: torch.device | str, rows: int = 0, columns: int = 0,
                 chunk: int = 256):
        self.dtype, self.device = dtype, torch.device(device)
        self.chunk = max(int(chunk), 1)
        self.want = (max(int(rows), 0), max(int(columns), 0))
        self.buffer: torch.Tensor | None = None
        self._written: tuple[int, int] | None = None     # (n, past) of the block written last

    def _fit(self, rows: int, columns: int) -> None:
        have = self.buffer.shape if self.buffer is not None else (0, 0)
        if rows <= have[0] and columns <= have[1]:
            return
        size = [max(need, 2 * old if need > old else old, want)
                for need, old, want in zip((rows, columns), have, self.want)]
        self.buffer = torch.zeros(*(-(-x // self.chunk) * self.chunk for x in size), dtype=self.dtype,
                                  device=self.device)
        self._written = None

    def verify_inputs(self, tree: DraftTree, start: int, past_length: int):
        """input_ids [1, n+1], position_ids [1, n+1] and the additive mask [1, 1, n+1, past + n+1]
        (a view of the buffer), or None for the mask of a root-only tree (nothing to hide)."""
        n = len(tree.tokens)
        ids_and_positions = torch.from_numpy(np.stack([tree.tokens, start + tree.depths]).astype(np.int64))
        ids_and_positions = ids_and_positions.to(self.device, non_blocking=True)   # no wait for the queue
        input_ids, position_ids = ids_and_positions[:1], ids_and_positions[1:]
        if n == 1:
            return input_ids, position_ids, None
        self._fit(n, past_length + n)
        if self._written is not None:
            rows, at = self._written
            self.buffer[:rows, at:at + rows].zero_()
        block = self.buffer[:n, past_length:past_length + n]
        hidden = torch.from_numpy(~tree.ancestor_matrix()).to(self.device, non_blocking=True)
        block.masked_fill_(hidden, torch.finfo(self.dtype).min)
        self._written = (n, past_length)
        return input_ids, position_ids, self.buffer[:n, :past_length + n].view(1, 1, n, past_length + n)
