"""Verify: one target forward over a draft tree, the walk, and the KV-cache compaction.

The walk is the only place tokens are chosen, and every chosen token is the target's own pick, so
the output is exactly what the target alone would produce. At T=0 that is its argmax. At T>0 it is
a Gumbel-max draw: argmax(logits / T + g), an exact sample from softmax(logits / T), where the
Gumbel noise g is keyed by the seed and the token's absolute position in the sequence. Plain
decoding (`taps.reference`) draws with the same noise at the same position, so a tree and plain
decoding pick the same token unless two tokens' scores tie to within float rounding, exactly as
at T=0.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers.cache_utils import Cache

from .drafter import context_features
from .linear import PackedLinear
from .target_cache import TargetCache
from .tree import DraftTree


def _mix(seed: int, position: int) -> int:
    """A 63-bit generator seed from (seed, position) (splitmix64 finaliser)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + int(position) + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


def gumbel_noise(seed: int, position: int, vocab: int) -> torch.Tensor:
    """Gumbel noise [vocab] (float64, CPU) for the token at `position` of a sequence sampled with `seed`."""
    u = torch.rand(vocab, generator=torch.Generator().manual_seed(_mix(seed, position)), dtype=torch.float64)
    return u.clamp_min_(1e-300).log_().neg_().log_().neg_()      # -log(-log u), in place: no temporaries


def choose_token(logits: torch.Tensor, temperature: float, seed: int, position: int) -> int:
    """The target's token at `position` from its logits there: argmax at T=0, else the Gumbel-max
    draw keyed by (seed, position)."""
    if temperature <= 0.0:
        return int(torch.argmax(logits))
    noise = gumbel_noise(seed, position, logits.shape[-1]).to(logits.device, non_blocking=True)
    return int(torch.argmax(logits.double() / temperature + noise))


def target_forward(target, cache: Cache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                   attention_mask: torch.Tensor | None, feature_layers: list[int] | None):
    """Run the target with its cache; returns logits [n, V] of every row and context features
    [n, F] (or None): `target_body` and the lm_head over all of it."""
    hidden, features = target_body(target, cache, input_ids, position_ids, attention_mask, feature_layers)
    return target.get_output_embeddings()(hidden), features


def target_body(target, cache: Cache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None, feature_layers: list[int] | None, compiled: bool = False):
    """The target's layers without its lm_head: final hidden states [n, d] and context features
    [n, F] (or None). Logits come from `HeadRows` for the rows a round needs. Only the feature
    layers' outputs are kept: transformers records the hidden states `output_hidden_states` selects
    by index (the others come back as None) into a collector of this call's own (a ContextVar, so
    concurrent calls on the shared target never see each other's). Nothing is written on the
    target: the features are exactly `output_hidden_states=True`'s. `compiled`: the decoder's
    layers run their `torch.compile`d forwards (`compiled_decoder`)."""
    hidden, features = target_body_batch(target, cache, input_ids, position_ids, attention_mask, feature_layers,
                                         compiled)
    return hidden[0], None if features is None else features[0]


def target_body_batch(target, cache: Cache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None, feature_layers: list[int] | None, compiled: bool = False):
    """`target_body` for a batch of rows [B, n] (`taps.batch`): hidden states [B, n, d] and context
    features [B, n, F] (or None)."""
    decoder = compiled_decoder(target) if compiled else target.get_decoder()
    selection = None if feature_layers is None else sorted({i + 1 for i in feature_layers})
    out = decoder(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                  **{cache_argument(decoder): cache}, use_cache=True, output_hidden_states=selection)
    features = None if feature_layers is None else context_features(out.hidden_states, feature_layers)
    return out.last_hidden_state, features


_CACHE_ARGUMENT: dict[type, str] = {}


def cache_argument(decoder) -> str:
    """The name under which this transformers version's decoder takes its cache: `cache` (5.24 on;
    the old name still works there, with a warning) or `past_key_values` (earlier 5.x, e.g. the 5.17
    of the GPU check's image, which silently ignores an unknown `cache=`: the forward would then run
    without the cache and fail on the mask's shape). Read once per decoder class (a value that never
    changes, so two sessions filling it at once write the same)."""
    kind = type(decoder)
    if kind not in _CACHE_ARGUMENT:
        import inspect

        names = inspect.signature(kind.forward).parameters
        _CACHE_ARGUMENT[kind] = "cache" if "cache" in names or "past_key_values" not in names else "past_key_values"
    return _CACHE_ARGUMENT[kind]


_COMPILED: dict[int, tuple] = {}
_COMPILED_LOCK = threading.Lock()


def compiled_decoder(target):
    """The target's decoder with every layer's forward `torch.compile`d (dynamic shapes): a shallow
    copy of the decoder whose layers are shallow copies of the target's, each with its compiled
    forward, built once per target under a lock and then only read. The copies share every weight,
    buffer and hook dictionary with the target (transformers' output recording reaches them), and
    nothing on the target changes, so sessions with and without compiled verify share one pair. The
    layers, not the decoder, are compiled: transformers' mask building and output recording stay
    outside the compiled code. Off by default (`DecodeSession(compile_verify=True)`): on the CPU a
    float32 target's linears are oneDNN packed products that dynamo cannot trace, and whether
    compiling pays on a GPU is for a GPU check to show."""
    decoder = target.get_decoder()
    with _COMPILED_LOCK:
        built = _COMPILED.get(id(decoder))
        if built is None or built[0] is not decoder:
            if not compilable(decoder):
                raise ValueError(COMPILE_REFUSED)
            _record_outputs_here(decoder)      # the copies then share the target's recording hooks
            layers = []
            for layer in decoder.layers:
                twin = copy.copy(layer)
                twin.forward = torch.compile(layer.forward, dynamic=True)
                layers.append(twin)
            view = copy.copy(decoder)
            view._modules = dict(decoder._modules)
            view._modules["layers"] = nn.ModuleList(layers)
            built = _COMPILED[id(decoder)] = (decoder, view)
    return built[1]


def _record_outputs_here(decoder) -> None:
    """Have transformers install its output-recording hooks on the decoder now (it does so once per
    model, under its own lock, on the first forward that asks for hidden states), so that a copy
    made afterwards does not install a second set on the layers it shares."""
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:          # an older transformers records outputs another way
        return
    maybe_install_capturing_hooks(decoder)


COMPILE_REFUSED = ("compile_verify needs a target whose linears are plain torch modules: a float32 target on the CPU "
                   "runs oneDNN packed products that torch.compile cannot trace (load it in float64 or bfloat16, "
                   "or on a GPU, or leave compile_verify off)")


def compilable(model) -> bool:
    """Whether `torch.compile` can trace the model's layers (no oneDNN packed linears in it)."""
    return not any(isinstance(module, PackedLinear) for module in model.modules())


def prefill(target, cache: Cache, prompt_ids: list[int], feature_layers: list[int] | None):
    """Fill the cache with every prompt token but the last (the first round's root); returns the
    context features of those tokens (or None)."""
    if len(prompt_ids) < 2:
        return None
    device = target.get_input_embeddings().weight.device
    ids = torch.tensor([prompt_ids[:-1]], device=device)
    pos = torch.arange(ids.shape[1], device=device).view(1, -1)
    return target_body(target, cache, ids, pos, None, feature_layers)[1]


class HeadRows:
    """The target's logits of a verified tree, computed once per row as the round asks for them.
    At T=0 the walk asks for every row in one product: on oneDNN's GEMM (`taps.linear`) a few more
    rows cost less than a second pass over the lm_head for the walked leaf; at T>0 it asks for the
    inner nodes' rows and the walked path's. After a greedy walk, `greedy` holds every row's argmax
    on the host (the estimator's verdicts read it instead of copying again)."""

    def __init__(self, target, hidden: torch.Tensor):
        self.head = target.get_output_embeddings()
        self.hidden = hidden
        self.rows: dict[int, torch.Tensor] = {}
        self.block: torch.Tensor | None = None         # every row's logits [n, V], when asked for at once
        self.greedy: np.ndarray | None = None

    def get(self, rows: list[int]) -> torch.Tensor:
        """Logits [len(rows), V] (float32)."""
        missing = [r for r in rows if r not in self.rows]
        if missing:
            computed = self.head(self.hidden[missing]).float()
            self.rows.update(zip(missing, computed))
        return torch.stack([self.rows[r] for r in rows]) if rows else self.hidden.new_zeros((0, 0))

    def row(self, index: int) -> torch.Tensor:
        """Logits [V] of one row (computed alone when no earlier product covered it)."""
        if index not in self.rows:
            self.get([index])
        return self.rows[index]

    def every_row(self) -> torch.Tensor:
        """Logits [n, V] of every row, in one product (no copy when none was asked for before)."""
        if self.block is None:
            if self.rows:
                self.block = self.get(list(range(self.hidden.shape[0])))
            else:
                self.block = self.head(self.hidden).float()
                self.rows.update(enumerate(self.block))
        return self.block


@dataclass
class WalkResult:
    accepted: list[int]          # tree indices of accepted draft nodes, by depth
    bonus_token: int             # the target's token after the last accepted node
    target_tokens: np.ndarray    # [n+1] the target's greedy token at each inner node of the tree (-1 elsewhere)
    child_prob: np.ndarray       # [n+1] target probability of each node's token at its parent (1 at root)


def walk(tree: DraftTree, head: HeadRows, temperature: float, seed: int, start: int) -> WalkResult:
    """Follow the target's choices down the tree from the root (the root sits at position `start`,
    so the token chosen at a node of depth d is the sequence's token at start + d + 1). The logits
    of every inner node come in one batch (they give each node's target probability at its parent,
    and the online estimator's verdicts); at T=0 the leaves' rows come in that batch too, and the
    whole walk reads one copy from the device (`_verdicts`); at T>0 each walked node's Gumbel-max
    draw is read as the walk reaches it (a walked leaf's row comes on its own)."""
    greedy, child_prob = _verdicts(tree, head, temperature)
    inner = np.unique(tree.parents[1:])
    target_tokens = np.full(len(tree.tokens), -1)
    target_tokens[inner] = greedy[inner]
    children = tree.children()
    accepted: list[int] = []
    node = 0
    while True:
        if temperature > 0:
            token = choose_token(head.row(node), temperature, seed, start + int(tree.depths[node]) + 1)
        else:
            token = int(greedy[node])
        child = children[node].get(token)
        if child is None:
            return WalkResult(accepted, token, target_tokens, child_prob)
        accepted.append(child)
        node = child


def _verdicts(tree: DraftTree, head: HeadRows, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The target's greedy token at every node (T=0) or at every inner node (T>0, -1 elsewhere),
    and each node's target probability at its parent (1 at the root), in one device-to-host copy;
    the node rows and tokens it gathers go to the device in one copy too. The softmax is over the
    inner nodes' rows, stacked in order, as it always was (so its values are unchanged)."""
    n = len(tree.tokens)
    inner = sorted(set(tree.parents[1:].tolist())) if tree.size else []
    every = head.every_row() if temperature <= 0.0 else None
    parts = [every.argmax(-1)] if every is not None else []
    if inner:
        logits = head.get(inner)
        if every is None:
            parts.append(logits.argmax(-1))
        probs = torch.softmax(logits / temperature if temperature > 0 else logits, dim=-1)
        row_of = {node: i for i, node in enumerate(inner)}
        host = np.stack([[row_of[int(p)] for p in tree.parents[1:]], tree.tokens[1:]]).astype(np.int64)
        rows, tokens = torch.from_numpy(host).to(logits.device, non_blocking=True)   # no stream sync
        parts.append(probs[rows, tokens].double())
    copied = torch.cat([p.double() for p in parts]).cpu().numpy() if parts else np.zeros(0)
    greedy = np.full(n, -1)
    if every is not None:
        greedy[:] = copied[:n]
        head.greedy = greedy.copy()
    else:
        greedy[inner] = copied[:len(inner)]
    child_prob = np.ones(n)
    child_prob[1:] = copied[len(copied) - (n - 1):] if inner else 1.0
    return greedy, child_prob


def trim_cache(cache: Cache, length: int) -> None:
    """Drop every cached position from `length` on (a TargetCache sets its length; transformers'
    crop takes a count to remove)."""
    if isinstance(cache, TargetCache):
        cache.trim(length)
        return
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def compact_cache(cache: Cache, past_length: int, keep: list[int]) -> None:
    """Keep the cached context plus the tree entries at `keep` (relative to the tree), in order:
    the kept entries move down into place (only the tree's tail is touched), the rest is cropped.
    A TargetCache does it for every layer in one gather; a DynamicCache one layer at a time."""
    if isinstance(cache, TargetCache):
        cache.compact(past_length, keep)
        return
    if keep != list(range(len(keep))):
        source = None
        for layer in cache.layers:
            if source is None:
                source = torch.as_tensor([past_length + k for k in keep], device=layer.keys.device)
            end = past_length + len(keep)
            layer.keys[..., past_length:end, :] = layer.keys.index_select(-2, source)
            layer.values[..., past_length:end, :] = layer.values.index_select(-2, source)
    trim_cache(cache, past_length + len(keep))


def edge_feedback(pool: DraftTree, selected: np.ndarray, head: HeadRows, temperature: float) -> np.ndarray:
    """Per pool node, the target's verdict on it given its parent reached: 1/0 (is it the target's
    argmax) at T=0, the target's probability of it at T>0; NaN where the parent was not verified.
    This is what the online estimator learns from (it reads every verified row's logits)."""
    row_of = np.full(len(pool.tokens), -1)
    row_of[selected] = np.arange(len(selected))
    targets = np.full(len(pool.tokens), np.nan)
    nodes = np.flatnonzero(row_of[pool.parents[1:]] >= 0) + 1
    if nodes.size == 0:
        return targets
    parent_rows = row_of[pool.parents[nodes]]
    if temperature <= 0 and head.greedy is not None:      # the walk's copy of every row's argmax
        targets[nodes] = (head.greedy[parent_rows] == pool.tokens[nodes]).astype(np.float64)
        return targets
    order = sorted(set(parent_rows.tolist()))
    logits = head.get(order)
    index = torch.as_tensor(np.searchsorted(order, parent_rows), device=logits.device)
    toks = torch.as_tensor(pool.tokens[nodes], device=logits.device)
    if temperature > 0:
        probs = torch.softmax(logits / temperature, dim=-1)
        targets[nodes] = probs[index, toks].double().cpu().numpy()
    else:
        targets[nodes] = (logits.argmax(-1)[index] == toks).double().cpu().numpy()
    return targets
