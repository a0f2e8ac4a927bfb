"""Public DFlash2 drafter checkpoints (config architecture "DFlash2DraftModel").

DFlash2 keeps DFlash's one-pass block draft (`taps.drafter`) and adds two small modules: a two-tap
dynamic depthwise convolution around each drafter sublayer, and the path selector
(`taps.path_selector`), which this engine runs as the `dflash2` policy. What follows is written from
the public description (facts and shapes, no code).

Per draft layer, for the attention and the MLP sublayer alike:

    x = norm(h)                                   input_layernorm / post_attention_layernorm
    dyn = kernel_projection(x)                    [n, 2 sides, k taps, groups], one projection per sublayer
    y = sublayer(conv(x, side 0))                 the attention reads the convolved block states
    h = h + conv(y, side 1)                       the sublayer's output convolved before the residual

    conv(x, s)_t[c] = sum_j (base_kernel[s, j, c] + dyn[t, s, j, c // conv_group_size]) * x_{t-j}[c]

With the published kernel size 2: Conv(x)_t = k_{t,0} * x_t + k_{t,1} * x_{t-1}, each tap a learned
per-channel base plus a correction computed from the (normed) sublayer input at t and shared by the
`conv_group_size` consecutive channels of a group. Tap j reads j positions back inside the block
and zeros before its first position (the anchor's row): the taps never cross the block boundary,
so they never read the context or another block (in training, each batch row is one block). The
context (the target's features through `fc` and `hidden_norm`) feeds keys and values exactly as in
DFlash, without a convolution.

Tensor names, as the public checkpoints spell them (kernel size k, hidden d, group size g):

    layers.N.attention_conv.base_kernel               [2, k, d]          side, tap, channel
    layers.N.attention_conv.kernel_projection.weight  [2 * k * d / g, d] output row (side * k + tap) * d/g + group
    layers.N.mlp_conv.base_kernel                     [2, k, d]
    layers.N.mlp_conv.kernel_projection.weight        [2 * k * d / g, d]
    candidate_selector.hidden_projection.weight       [selector_rank, d]
    candidate_selector.predecessor_codebook           [vocab, selector_rank]
    candidate_selector.successor_codebook             [vocab, selector_rank]

besides DFlash's own (`layers.N.self_attn.*`, `layers.N.mlp.*`, norms, `fc`, `hidden_norm`, `norm`).
Config fields: DFlash's, plus `selector_top_k`, `selector_rank`, `conv_kernel_size` and
`conv_group_size`, read from the top level or from `dflash_config` (as `taps.drafter.dflash_setting`
reads DFlash's). A fresh module's convolutions are the identity (base tap 0 = 1, the rest 0, no
dynamic part).
"""

from __future__ import annotations

import torch
from torch import nn

from .drafter import DFlashDrafter, dflash_setting
from .path_selector import PathSelector, PathSelectorConfig

ARCHITECTURE = "DFlash2DraftModel"
FIELDS = ("selector_top_k", "selector_rank", "conv_kernel_size", "conv_group_size")


def load_drafter(path_or_id, dtype: torch.dtype = torch.float32, device="cpu") -> DFlashDrafter:
    """A DFlash or a DFlash2 drafter from a folder or hub id, whichever its config names (a
    DFlash2DraftModel checkpoint: the convolutions and the path selector besides)."""
    from transformers import Qwen3Config

    from .drafter import CONFIG_NAME, resolve_folder

    folder = resolve_folder(path_or_id, allow_patterns=["*.json", "*.safetensors"])
    dflash2 = (folder / CONFIG_NAME).is_file() and is_dflash2(Qwen3Config.from_pretrained(folder))
    return (DFlash2Drafter if dflash2 else DFlashDrafter).from_pretrained(folder, dtype=dtype, device=device)


def is_dflash2(config) -> bool:
    """Whether a drafter config describes a DFlash2 drafter (its architectures name DFlash2DraftModel)."""
    return ARCHITECTURE in (getattr(config, "architectures", None) or [])


def dflash2_settings(config) -> dict[str, int]:
    """The four DFlash2 fields of a config, as ints; a ValueError naming any that is missing or bad."""
    out = {}
    for name in FIELDS:
        value = dflash_setting(config, name)
        if value is None:
            raise ValueError(f"the drafter config names architecture {ARCHITECTURE} but has no {name} (at the top "
                             f"level or in dflash_config): it is not a complete DFlash2 config")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"the drafter config's {name} must be a whole number of at least 1, not {value!r}")
        out[name] = int(value)
    if config.hidden_size % out["conv_group_size"]:
        raise ValueError(f"the drafter's hidden size {config.hidden_size} is not a multiple of its conv_group_size "
                         f"{out['conv_group_size']}")
    return out


class DynamicConv(nn.Module):
    """One sublayer's two-tap (k-tap) dynamic depthwise convolution: the side-0 convolution of its
    input and the side-1 convolution of its output, whose dynamic taps both come from the input."""

    def __init__(self, hidden: int, kernel_size: int, group_size: int):
        super().__init__()
        self.kernel_size, self.group_size, self.groups = kernel_size, group_size, hidden // group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel_size * self.groups, bias=False)
        with torch.no_grad():
            if not self.base_kernel.is_meta:
                self.base_kernel[:, 0] = 1.0          # the identity until trained or loaded
                self.kernel_projection.weight.zero_()

    def dynamic(self, x: torch.Tensor) -> torch.Tensor:
        """The dynamic taps [..., n, 2, k, groups] of a sublayer input [..., n, d]."""
        return self.kernel_projection(x).unflatten(-1, (2, self.kernel_size, self.groups))

    def convolve(self, x: torch.Tensor, dynamic: torch.Tensor, side: int) -> torch.Tensor:
        """conv(x, side) of block states x [..., n, d] (dim -2 runs along one block) with the taps
        `dynamic` [..., n, 2, k, groups]."""
        taps = self.base_kernel[side].to(x.dtype) + dynamic[..., side, :, :].repeat_interleave(self.group_size, -1)
        out = taps[..., 0, :] * x
        n = x.shape[-2]
        for j in range(1, min(self.kernel_size, n)):
            out[..., j:, :] += taps[..., j:, j, :] * x[..., :n - j, :]
        return out


def add_convolutions(drafter: DFlashDrafter, kernel_size: int, group_size: int) -> None:
    """Give every layer of `drafter` its `attention_conv` and `mlp_conv`."""
    hidden = drafter.config.hidden_size
    for layer in drafter.layers:
        layer.attention_conv = DynamicConv(hidden, kernel_size, group_size)
        layer.mlp_conv = DynamicConv(hidden, kernel_size, group_size)


class DFlash2Drafter(DFlashDrafter):
    """A DFlash drafter with DFlash2's convolutions around every sublayer and its path selector
    (`candidate_selector`). It drafts like DFlash (one pass over the block); the selector is run by
    the `dflash2` policy (the pair holds it as `path_selector`)."""

    def __init__(self, config):
        super().__init__(config)
        settings = dflash2_settings(config)
        add_convolutions(self, settings["conv_kernel_size"], settings["conv_group_size"])
        self.candidate_selector = PathSelector(PathSelectorConfig(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size, selector_rank=settings["selector_rank"],
            selector_top_k=settings["selector_top_k"]))

    def forward(self, block_embeds: torch.Tensor, block_positions: torch.Tensor,
                context: list[tuple[torch.Tensor, torch.Tensor]],
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [b, n, d] of blocks [b, n, d] (each batch row one block, after `norm`)."""
        hidden = block_embeds
        rope = self._rope(hidden, block_positions)
        for layer, (ctx_k, ctx_v) in zip(self.layers, context):
            x = layer.input_layernorm(hidden)
            dyn = layer.attention_conv.dynamic(x)
            out = layer.self_attn(layer.attention_conv.convolve(x, dyn, 0), rope, ctx_k, ctx_v, attention_mask)
            hidden = hidden + layer.attention_conv.convolve(out, dyn, 1)
            x = layer.post_attention_layernorm(hidden)
            dyn = layer.mlp_conv.dynamic(x)
            hidden = hidden + layer.mlp_conv.convolve(layer.mlp(layer.mlp_conv.convolve(x, dyn, 0)), dyn, 1)
        return self.norm(hidden)


def export_dflash2(drafter: DFlashDrafter, selector: PathSelector, out, kernel_size: int = 2,
                   group_size: int = 64) -> None:
    """Write a DFlash drafter and its path selector as one public-layout DFlash2 checkpoint
    (config architecture DFlash2DraftModel, the DFlash2 fields in `dflash_config` and at the top
    level, `candidate_selector.*` tensors): the convolutions it lacks are written as the identity
    (base tap 0 = 1, the rest 0, no dynamic part), so the checkpoint drafts exactly as the drafter
    does and `load_drafter` reads it back to the same decodes."""
    import copy
    from pathlib import Path

    from safetensors.torch import save_file

    from .drafter import WEIGHTS_NAME

    if isinstance(drafter, DFlash2Drafter):
        raise ValueError("the drafter is a DFlash2 drafter already: save it with save_pretrained")
    if drafter.config.hidden_size % group_size:
        raise ValueError(f"conv_group_size {group_size} does not divide the hidden size {drafter.config.hidden_size}")
    config = copy.deepcopy(drafter.config)
    fields = {"selector_top_k": selector.top_k, "selector_rank": selector.config.selector_rank,
              "conv_kernel_size": kernel_size, "conv_group_size": group_size}
    config.architectures = [ARCHITECTURE]
    config.dflash_config = {**(getattr(config, "dflash_config", None) or {}), **fields}
    for name, value in fields.items():
        setattr(config, name, value)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    state = {k: v.detach().contiguous() for k, v in drafter.state_dict().items() if "rotary_emb" not in k}
    identity = DynamicConv(drafter.config.hidden_size, kernel_size, group_size)
    for n in range(len(drafter.layers)):
        for conv in ("attention_conv", "mlp_conv"):
            for name, tensor in identity.state_dict().items():
                state[f"layers.{n}.{conv}.{name}"] = tensor.to(next(drafter.parameters()).dtype).clone()
    for name, tensor in selector.state_dict().items():
        state[f"candidate_selector.{name}"] = tensor.detach().contiguous()
    save_file(state, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
