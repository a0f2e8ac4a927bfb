"""The block-diffusion drafter (DFlash): one forward pass drafts a whole block of future tokens.

The drafter reads the target's hidden states from a few evenly spaced target layers (the
*context features*), concatenates them, projects them with `fc` and normalises them with
`hidden_norm`. Every draft layer takes its queries from the block `[root, MASK x H]` and its
keys/values from `[context ; block]`, with bidirectional attention inside the block. The block is
embedded with the target's input embedding and the logits come from the target's lm_head, both
frozen and not part of this module.

Module and config names follow the public DFlash checkpoints (`layers.N.self_attn.q_proj`, `fc`,
`hidden_norm`, `block_size`, `dflash_config.target_layer_ids`, ...), so their safetensors load into
`DFlashDrafter` with strict key matching and without `trust_remote_code`. `target_layer_ids` and
`mask_token_id` are read from `dflash_config` or from the config's top level (both layouts are
published); a config naming the layers nowhere gets the evenly spaced default with a warning.
Drafters with sliding-window layers are refused: this engine's drafter attends to the whole context.
A DFlash2 checkpoint (architecture "DFlash2DraftModel") loads through `taps.dflash2.load_drafter`
(which picks the class from the config) into `taps.dflash2.DFlash2Drafter`: DFlash plus its
convolutions and path selector.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Evenly spaced target layers: round(1 + i(L-4)/(n-1)), or the middle layer when n = 1."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [int(round(1 + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]


def context_features(hidden_states: tuple[torch.Tensor, ...], layer_ids: list[int]) -> torch.Tensor:
    """Concatenate the outputs of the given target layers (hidden_states[0] is the embedding), from
    a target that `reads_layer_outputs`."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


def reads_layer_outputs(model) -> None:
    """Make the target's `output_hidden_states` give each decoder layer's own output, the last
    layer's included. transformers by default puts the final-normed `last_hidden_state` in place of
    the last layer's output (hidden_states[-1]); the DFlash convention is the layer's output, the
    residual stream before the final norm, which is what serving engines capture (vLLM's and
    SGLang's auxiliary hidden states: docs/vllm.md). Drafters that read the last layer (ours reads
    layer 11 of 12) see the same features here as there. Set on the model's config, once, at load."""
    model.config.tie_last_hidden_states = False


def drafter_config(target_config, num_layers: int = 2, block_size: int = 16, mask_token_id: int = 1,
                   target_layer_ids: list[int] | None = None, intermediate_size: int | None = None) -> Qwen3Config:
    """A drafter config that fits `target_config` (same hidden size, vocabulary and head layout)."""
    n_target = target_config.num_hidden_layers
    ids = target_layer_ids if target_layer_ids is not None else default_target_layer_ids(n_target, num_layers)
    return Qwen3Config(
        vocab_size=target_config.vocab_size,
        hidden_size=target_config.hidden_size,
        intermediate_size=intermediate_size or target_config.intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=target_config.num_attention_heads,
        num_key_value_heads=target_config.num_key_value_heads,
        head_dim=getattr(target_config, "head_dim", target_config.hidden_size // target_config.num_attention_heads),
        max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters=getattr(target_config, "rope_parameters", None),
        rms_norm_eps=target_config.rms_norm_eps,
        block_size=block_size,
        num_target_layers=n_target,
        dflash_config={"target_layer_ids": ids, "mask_token_id": mask_token_id},
        architectures=["DFlashDraftModel"],
    )


def dflash_setting(config, key: str):
    """A DFlash setting read from `dflash_config` or, in the other published layout, from the
    config's top level; None when neither has it, a ValueError when the two disagree."""
    nested = getattr(config, "dflash_config", None)
    if nested is not None and not isinstance(nested, dict):
        raise ValueError(f"the drafter config's dflash_config is {type(nested).__name__}, not an object of settings")
    inner, outer = (nested or {}).get(key), getattr(config, key, None)
    if inner is not None and outer is not None and inner != outer:
        raise ValueError(f"the drafter config gives two {key}: dflash_config.{key} = {inner} and {key} = {outer} "
                         f"at the top level; keep the one the drafter was trained with")
    return inner if inner is not None else outer


def read_target_layer_ids(config) -> tuple[list[int], str]:
    """The target layers the drafter reads and where they came from: "dflash_config", "top level",
    or "default" -- a config that names them nowhere gets the evenly spaced layers of the published
    rule (`default_target_layer_ids`), with a warning, since a drafter trained on other layers
    would load (its `fc` still fits) and draft garbage."""
    ids = dflash_setting(config, "target_layer_ids")
    if ids is not None:
        source = "dflash_config" if (getattr(config, "dflash_config", None) or {}).get("target_layer_ids") is not None \
            else "top level"
        if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(i, int) for i in ids):
            raise ValueError(f"the drafter config's target_layer_ids must be a list of layer numbers, not {ids!r}")
        return [int(i) for i in ids], source
    n_target = getattr(config, "num_target_layers", None)
    if n_target is None:
        raise ValueError("the drafter config names neither target_layer_ids (in dflash_config or at the top level) "
                         "nor num_target_layers: it is not a DFlash drafter config")
    ids = default_target_layer_ids(int(n_target), config.num_hidden_layers)
    warnings.warn(f"the drafter config names no target_layer_ids (neither in dflash_config nor at the top level): "
                  f"reading the evenly spaced target layers {ids} of a {n_target}-layer target; if the drafter was "
                  f"trained on other layers its drafts will be poor -- add dflash_config.target_layer_ids",
                  stacklevel=3)
    return ids, "default"


def check_full_attention(config) -> None:
    """A ValueError for a drafter whose layers use sliding-window attention (`layer_types`, which
    transformers derives from use_sliding_window / sliding_window / max_window_layers when a config
    does not list them): this engine's drafter (`DFlashDrafter` and its fused copy) attends to the
    whole context, so such a drafter would run with attention it was not trained with."""
    types = list(getattr(config, "layer_types", None) or [])[:config.num_hidden_layers]
    other = [i for i, kind in enumerate(types) if kind != "full_attention"]
    if other:
        raise ValueError(f"the drafter's layers {other} use {types[other[0]]} (window "
                         f"{getattr(config, 'sliding_window', None)}), but this engine's drafter runs full "
                         f"attention only: use a drafter trained with full attention in every layer "
                         f"(layer_types all \"full_attention\")")


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


class DraftAttention(nn.Module):
    """Queries from the block; keys/values from [context ; block] with shared projections."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        bias = getattr(config, "attention_bias", False)
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def key_values(self, states: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """Keys (normed, rotated) and values of `states`, shaped [batch, kv_heads, seq, head_dim]."""
        b, n, _ = states.shape
        k = self.k_norm(self.k_proj(states).view(b, n, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(states).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return _apply_rope(k, *rope), v

    def forward(self, block: torch.Tensor, block_rope, ctx_k: torch.Tensor, ctx_v: torch.Tensor,
                attention_mask: torch.Tensor | None) -> torch.Tensor:
        b, n, _ = block.shape
        q = self.q_norm(self.q_proj(block).view(b, n, self.num_heads, self.head_dim)).transpose(1, 2)
        q = _apply_rope(q, *block_rope)
        k_blk, v_blk = self.key_values(block, block_rope)
        k = torch.cat([ctx_k, k_blk], dim=2)
        v = torch.cat([ctx_v, v_blk], dim=2)
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class DraftLayer(nn.Module):
    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.self_attn = DraftAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


@dataclass
class DraftCache:
    """Per-layer keys/values of the context features seen so far (positions 0..length-1)."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0


class DFlashDrafter(nn.Module):
    """The draft layers, `fc`, `hidden_norm` and `norm`; embedding and lm_head come from the target."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.config = config
        check_full_attention(config)
        self.target_layer_ids, self.layer_ids_source = read_target_layer_ids(config)
        mask = dflash_setting(config, "mask_token_id")
        self.mask_token_id: int | None = None if mask is None else int(mask)
        self.block_size: int = int(config.block_size)
        self.layers = nn.ModuleList([DraftLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.fc = nn.Linear(len(self.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    # ------------------------------------------------------------------ forward
    def _rope(self, like: torch.Tensor, positions: torch.Tensor):
        return self.rotary_emb(like, positions.view(1, -1))

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor):
        """Project raw context features and return per-layer (keys, values)."""
        ctx = self.hidden_norm(self.fc(features))
        rope = self._rope(ctx, positions)
        return [layer.self_attn.key_values(ctx, rope) for layer in self.layers]

    def forward(self, block_embeds: torch.Tensor, block_positions: torch.Tensor,
                context: list[tuple[torch.Tensor, torch.Tensor]],
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states of the block (after `norm`), given per-layer context keys/values.

        `attention_mask` (additive float, [b, 1, block, ctx + block]) is only needed in training,
        where many blocks with different context lengths share one call.
        """
        hidden = block_embeds
        rope = self._rope(hidden, block_positions)
        for layer, (ctx_k, ctx_v) in zip(self.layers, context):
            residual = hidden
            hidden = residual + layer.self_attn(layer.input_layernorm(hidden), rope, ctx_k, ctx_v, attention_mask)
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.norm(hidden)

    # ------------------------------------------------------------ incremental use
    def new_cache(self) -> DraftCache:
        return DraftCache()

    def extend_cache(self, cache: DraftCache, features: torch.Tensor) -> None:
        """Append context features for positions cache.length .. cache.length + n - 1."""
        n = features.shape[1]
        if n == 0:
            return
        positions = torch.arange(cache.length, cache.length + n, device=features.device)
        kv = self.context_kv(features, positions)
        if not cache.keys:
            cache.keys = [k for k, _ in kv]
            cache.values = [v for _, v in kv]
        else:
            cache.keys = [torch.cat([old, k], dim=2) for old, (k, _) in zip(cache.keys, kv)]
            cache.values = [torch.cat([old, v], dim=2) for old, (_, v) in zip(cache.values, kv)]
        cache.length += n

    def draft_block(self, cache: DraftCache, block_embeds: torch.Tensor) -> torch.Tensor:
        """Hidden states for the block that starts right after the cached context."""
        n = block_embeds.shape[1]
        positions = torch.arange(cache.length, cache.length + n, device=block_embeds.device)
        if cache.keys:
            context = list(zip(cache.keys, cache.values))
        else:
            empty = block_embeds.new_zeros(block_embeds.shape[0], self.config.num_key_value_heads, 0,
                                           self.layers[0].self_attn.head_dim)
            context = [(empty, empty)] * len(self.layers)
        return self(block_embeds, positions, context)

    # --------------------------------------------------------------- save / load
    def save_pretrained(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(path)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items() if "rotary_emb" not in k}
        save_file(state, str(path / WEIGHTS_NAME), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, path_or_id: str | os.PathLike, dtype: torch.dtype = torch.float32,
                        device: str | torch.device = "cpu") -> "DFlashDrafter":
        """Load from a local folder or a hub id; every weight must match a module name and shape
        exactly. Anything wrong with the files is a ValueError or OSError that says what."""
        folder = resolve_folder(path_or_id, allow_patterns=["*.json", "*.safetensors"])
        if not (folder / CONFIG_NAME).is_file():
            raise FileNotFoundError(f"no {CONFIG_NAME} in {folder}: a drafter folder holds its config.json and weights")
        config = Qwen3Config.from_pretrained(folder)
        for name in ("block_size", "num_target_layers"):
            if getattr(config, name, None) is None:
                raise ValueError(f"{folder}/{CONFIG_NAME} is not a DFlash drafter config: '{name}' is missing; "
                                 f"pass a DFlash drafter's folder or hub id (e.g. z-lab/Qwen3-4B-DFlash-b16)")
        with torch.device("meta"):
            model = cls(config)       # no memory and no random init for weights that the file replaces
        state = {k: v.to(device=device, dtype=dtype) for k, v in _load_safetensors(folder).items()}
        _check_shapes(model, state, folder)
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
        missing = [k for k in missing if "rotary_emb" not in k]
        if missing or unexpected:
            raise ValueError(f"drafter weights in {folder} do not match {cls.__name__}: "
                             f"missing {missing[:5]}, unexpected {unexpected[:5]}")
        model.rotary_emb = float32_rotary(config, device)
        return model.eval()


def float32_rotary(config, device: str | torch.device = "cpu") -> Qwen3RotaryEmbedding:
    """The rotary embedding with its inverse frequencies in float32, as the target keeps its own
    whatever its dtype: cast to bfloat16 they are off by up to 2^-9 relative, which turns the angle
    at position p by p x that, radians a few thousand tokens in (drafts then lose acceptance)."""
    return Qwen3RotaryEmbedding(config).to(device)


def _check_shapes(model: nn.Module, state: dict[str, torch.Tensor], folder: Path) -> None:
    """A ValueError naming the weights whose shapes differ from what the config builds."""
    own = model.state_dict()
    wrong = [(k, list(v.shape), list(own[k].shape)) for k, v in state.items() if k in own and own[k].shape != v.shape]
    if wrong:
        shown = "; ".join(f"{k} is {a} in the file but {b} by the config" for k, a, b in wrong[:3])
        raise ValueError(f"the drafter weights in {folder} do not fit its {CONFIG_NAME} ({len(wrong)} of "
                         f"{len(state)} tensors differ: {shown}): hidden_size, intermediate_size, the heads or "
                         f"target_layer_ids there do not describe these weights; use the config saved with them")


def resolve_folder(path_or_id: str | os.PathLike, allow_patterns: list[str] | None = None) -> Path:
    """A local folder as is; otherwise a hub id downloaded (or taken from the local hub cache)."""
    path = Path(path_or_id)
    if path.is_dir():
        return path
    if path.exists() or str(path_or_id).startswith((".", "/")) or str(path_or_id).count("/") != 1:
        raise FileNotFoundError(f"model folder not found: {path_or_id} (give a folder, or a hub id such as "
                                f"Qwen/Qwen3-4B)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path_or_id), allow_patterns=allow_patterns))
    except Exception as exc:  # network errors, missing repos: one clear message
        raise FileNotFoundError(f"could not find '{path_or_id}' locally or download it from the hub ({exc}): check "
                                f"the id and the network, or download it where there is one (`hf download "
                                f"{path_or_id}`) and pass the folder") from exc


def _read_weights(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise FileNotFoundError(f"the weights file {file} is missing: download or save the checkpoint again")
    try:
        return load_file(str(file))
    except Exception as exc:  # safetensors' own error type: a damaged or truncated file
        raise ValueError(f"{file} cannot be read as safetensors ({exc}): it is damaged or incomplete; "
                         f"download or save it again") from exc


def _load_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    single = folder / WEIGHTS_NAME
    if single.exists():
        return _read_weights(single)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{index} is not a safetensors index (no readable weight_map: {exc})") from exc
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(_read_weights(folder / name))
        return state
    raise FileNotFoundError(f"no {WEIGHTS_NAME} (or sharded index) in {folder}")
