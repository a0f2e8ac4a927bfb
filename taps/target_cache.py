"""TargetCache: the target's key/value cache in one preallocated tensor, written in place.

transformers' DynamicCache grows every layer by `torch.cat` on every forward (a copy of the whole
cache per layer per round) and a round's compaction is one `index_select` per layer. Here every
layer's keys and values live in one tensor `[layers, 2, batch, kv_heads, capacity, head_dim]`:

- `update` writes a forward's new entries into place and returns views of the first length + n
  positions, exactly the tensors DynamicCache would return (same values, same shape);
- when a forward needs more room than the capacity, the storage grows geometrically (at least
  doubling, in whole chunks), so the cache is copied O(log length) times in a whole decode;
- `compact` moves a round's accepted tree entries down into place for every layer in one gather
  and one copy; `trim` (and transformers' `crop`) only sets the length.

Only full-attention layers are held this way (`make_target_cache` gives DynamicCache for models
with sliding-window or other layer kinds).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer

CHUNK = 256          # capacity grows in whole chunks of positions


def make_target_cache(config, capacity: int = 0) -> Cache:
    """A TargetCache for `config` when all its layers are full attention, else a DynamicCache.
    `capacity`: the positions to allocate at the first forward (more are added as needed)."""
    probe = DynamicCache(config=config)
    if probe.layers and all(type(layer) is DynamicLayer for layer in probe.layers):
        return TargetCache(len(probe.layers), capacity)
    return probe


class TargetCache(Cache):
    """A preallocated key/value cache for `num_layers` full-attention layers (see the module)."""

    def __init__(self, num_layers: int, capacity: int = 0, chunk: int = CHUNK):
        if num_layers < 1:
            raise ValueError("a target cache needs at least one layer")
        self.storage: torch.Tensor | None = None
        self.initial_capacity = max(int(capacity), 0)
        self.chunk = max(int(chunk), 1)
        super().__init__(layers=[_PreallocatedLayer(self, i) for i in range(num_layers)])

    @property
    def capacity(self) -> int:
        return 0 if self.storage is None else self.storage.shape[-2]

    def reserve(self, like: torch.Tensor, length: int) -> None:
        """Room for `length` positions of states shaped like `like` [batch, kv_heads, n, head_dim]."""
        batch, heads, _, dim = like.shape
        shape = (len(self.layers), 2, batch, heads)
        if self.storage is not None:
            if tuple(self.storage.shape[:4]) != shape or self.storage.shape[-1] != dim:
                raise ValueError(f"key/value states of shape {tuple(like.shape)} do not fit this cache's "
                                 f"{tuple(self.storage.shape)}: every layer must have the same heads and head size")
            if length <= self.capacity:
                return
        want = max(length, 2 * self.capacity, self.initial_capacity)
        grown = torch.empty(*shape, -(-want // self.chunk) * self.chunk, dim, dtype=like.dtype, device=like.device)
        if self.storage is not None:
            used = max(layer.length for layer in self.layers)
            grown[..., :used, :].copy_(self.storage[..., :used, :])
        self.storage = grown

    def compact(self, past_length: int, keep: list[int]) -> None:
        """Keep the first `past_length` positions plus the entries at `past_length + k` for k in
        `keep` (in order, increasing), moved down into place; every layer in one gather."""
        end = past_length + len(keep)
        if keep != list(range(len(keep))) and self.storage is not None:
            source = torch.tensor([past_length + k for k in keep]).to(self.storage.device, non_blocking=True)
            self.storage[..., past_length:end, :] = self.storage.index_select(-2, source)
        self.trim(end)

    def trim(self, length: int) -> None:
        """Drop every cached position from `length` on."""
        for layer in self.layers:
            layer.length = min(layer.length, max(int(length), 0))


class _PreallocatedLayer(CacheLayerMixin):
    """One layer's view of a TargetCache's storage."""

    is_sliding = False
    is_croppable = True

    def __init__(self, cache: TargetCache, index: int):
        self.cache, self.index, self.length = cache, index, 0
        self.is_initialized = False

    @property
    def keys(self) -> torch.Tensor | None:
        """This layer's cached keys [batch, kv_heads, length, head_dim]: a view of the storage."""
        return None if self.cache.storage is None else self.cache.storage[self.index, 0, ..., :self.length, :]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self.cache.storage is None else self.cache.storage[self.index, 1, ..., :self.length, :]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device, self.dtype = key_states.device, key_states.dtype
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        self.cache.reserve(key_states, end)
        store = self.cache.storage[self.index]
        store[0, ..., start:end, :] = key_states
        store[1, ..., start:end, :] = value_states
        self.length = end
        return store[0, ..., :end, :], store[1, ..., :end, :]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' crop: a negative count of positions to remove."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        self.length = max(self.length + tokens_to_remove, 0)

    def reset(self) -> None:
        self.length = 0
        self.is_initialized = False

    def offload(self):
        raise NotImplementedError("a TargetCache is not offloaded: its layers share one tensor")

    def prefetch(self):
        raise NotImplementedError("a TargetCache is not offloaded: its layers share one tensor")
