"""The drafter at inference: the same computation as `DFlashDrafter`, arranged for few, large ops.

What changes against the training module (`taps.drafter.DFlashDrafter`):
- q, k, v projections fused into one matrix (k, v into one for the context), gate and up too;
- RMSNorm as one fused op; rotary tables computed once for every position;
- the context keys/values live in buffers allocated once per session and written in place
  (no concatenation of the whole cache each round); the block's own keys/values are written just
  after the context and attended in place;
- grouped-query attention without repeating keys/values (`enable_gqa`);
- optionally, `precision="int8"`: the drafter's linear layers and its copy of the lm_head run with
  int8 dynamic quantization (weights int8 per channel, activations quantized on the fly).

The drafter only proposes tokens; the target decides what is kept, so none of this can change the
decoded text: it changes which tokens are proposed by float rounding (or quantization) at most.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PRECISIONS = ("same", "int8", "bfloat16")


def _linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device,
                      dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer.eval().requires_grad_(False)


def _quantize(module: nn.Module) -> nn.Module:
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the quantized-tensor API warns of its future
        return quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)


class _Layer(nn.Module):
    def __init__(self, layer, eps: float):
        super().__init__()
        attn = layer.self_attn
        self.heads, self.kv_heads, self.head_dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
        self.qkv = _linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        self.kv = _linear(torch.cat([attn.k_proj.weight, attn.v_proj.weight]))
        self.o = _linear(attn.o_proj.weight)
        self.gate_up = _linear(torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]))
        self.down = _linear(layer.mlp.down_proj.weight)
        self.intermediate = layer.mlp.gate_proj.weight.shape[0]
        self.q_norm, self.k_norm = attn.q_norm.weight.detach(), attn.k_norm.weight.detach()
        self.in_norm = layer.input_layernorm.weight.detach()
        self.post_norm = layer.post_attention_layernorm.weight.detach()
        self.eps = eps


class FastDrafter(nn.Module):
    """Fused, inference-only weights of a `DFlashDrafter` (built once per pair and precision)."""

    def __init__(self, drafter, lm_head: nn.Module, precision: str = "same"):
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"unknown drafter precision '{precision}': choose one of {', '.join(PRECISIONS)}")
        cfg = drafter.config
        self.precision = precision
        self.block_size = drafter.block_size
        self.eps = cfg.rms_norm_eps
        self.capacity = int(cfg.max_position_embeddings) + drafter.block_size
        weight = next(drafter.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        self.layers = nn.ModuleList([_Layer(layer, self.eps) for layer in drafter.layers])
        self.fc = _linear(drafter.fc.weight)
        self.hidden_norm = drafter.hidden_norm.weight.detach()
        self.norm = drafter.norm.weight.detach()
        head = lm_head.weight.detach()
        self.lm_head = _linear(head, getattr(lm_head, "bias", None))
        with torch.no_grad():
            positions = torch.arange(self.capacity, device=self.device).view(1, -1)
            cos, sin = drafter.rotary_emb(torch.zeros(1, device=self.device, dtype=self.dtype), positions)
        self.cos, self.sin = cos[0], sin[0]                                   # [P, head_dim]
        if precision == "int8":
            if self.device.type != "cpu" or self.dtype != torch.float32:
                raise ValueError("int8 drafter precision needs a float32 pair on the CPU; use 'same' or 'bfloat16'")
            for layer in self.layers:
                for name in ("qkv", "kv", "o", "gate_up", "down"):
                    setattr(layer, name, _quantize(nn.Sequential(getattr(layer, name))))
            self.fc = _quantize(nn.Sequential(self.fc))
            self.lm_head = _quantize(nn.Sequential(self.lm_head))
        elif precision == "bfloat16":
            self.compute = torch.bfloat16
            self.to(torch.bfloat16)
            self.cos, self.sin = self.cos.to(torch.bfloat16), self.sin.to(torch.bfloat16)
            self.hidden_norm, self.norm = self.hidden_norm.to(torch.bfloat16), self.norm.to(torch.bfloat16)
            for layer in self.layers:
                for name in ("q_norm", "k_norm", "in_norm", "post_norm"):
                    setattr(layer, name, getattr(layer, name).to(torch.bfloat16))
        self.compute = torch.bfloat16 if precision == "bfloat16" else self.dtype

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x [heads, n, head_dim] at positions start..start+n-1."""
        n, half = x.shape[1], x.shape[-1] // 2
        cos, sin = self.cos[start:start + n], self.sin[start:start + n]
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def new_buffers(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        shape = lambda layer: (layer.kv_heads, self.capacity, layer.head_dim)  # noqa: E731
        keys = [torch.zeros(shape(layer), device=self.device, dtype=self.compute) for layer in self.layers]
        values = [torch.zeros(shape(layer), device=self.device, dtype=self.compute) for layer in self.layers]
        return keys, values

    def extend(self, keys, values, length: int, features: torch.Tensor) -> None:
        """Project the context features [n, F] of positions length..length+n-1 into the buffers."""
        n = features.shape[0]
        ctx = F.rms_norm(self.fc(features.to(self.compute)), (self.hidden_norm.shape[0],), self.hidden_norm, self.eps)
        for layer, k_buf, v_buf in zip(self.layers, keys, values):
            kv = layer.kv(ctx).view(n, 2 * layer.kv_heads, layer.head_dim).transpose(0, 1)
            k, v = kv[: layer.kv_heads], kv[layer.kv_heads:]
            k = F.rms_norm(k, (layer.head_dim,), layer.k_norm, self.eps)
            k_buf[:, length:length + n] = self._rope(k, length)
            v_buf[:, length:length + n] = v

    def block(self, keys, values, length: int, embeds: torch.Tensor) -> torch.Tensor:
        """Hidden states [n, d] (after the final norm) of a block [n, d] that starts at `length`."""
        hidden = embeds.to(self.compute)
        n, d = hidden.shape
        end = length + n
        for layer, k_buf, v_buf in zip(self.layers, keys, values):
            x = F.rms_norm(hidden, (d,), layer.in_norm, self.eps)
            h, kvh, hd = layer.heads, layer.kv_heads, layer.head_dim
            qkv = layer.qkv(x).view(n, h + 2 * kvh, hd).transpose(0, 1)
            q = self._rope(F.rms_norm(qkv[:h], (hd,), layer.q_norm, self.eps), length)
            k = self._rope(F.rms_norm(qkv[h:h + kvh], (hd,), layer.k_norm, self.eps), length)
            k_buf[:, length:end] = k               # the block's keys/values just after the context,
            v_buf[:, length:end] = qkv[h + kvh:]   # overwritten when real context arrives there
            out = F.scaled_dot_product_attention(q.unsqueeze(0), k_buf[:, :end].unsqueeze(0),
                                                 v_buf[:, :end].unsqueeze(0), enable_gqa=h != kvh)
            hidden = hidden + layer.o(out[0].transpose(0, 1).reshape(n, h * hd))
            x = F.rms_norm(hidden, (d,), layer.post_norm, self.eps)
            gate, up = layer.gate_up(x).split(layer.intermediate, dim=-1)
            hidden = hidden + layer.down(F.silu(gate) * up)
        return F.rms_norm(hidden, (d,), self.norm, self.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


_BUILT: dict[tuple, FastDrafter] = {}


def fast_drafter(pair) -> FastDrafter:
    """The pair's drafter fused for inference at the pair's drafter precision, built once."""
    key = (id(pair.drafter), id(pair.target), pair.drafter_precision)
    if key not in _BUILT:
        if len(_BUILT) > 4:
            _BUILT.clear()
        _BUILT[key] = FastDrafter(pair.drafter, pair.target.get_output_embeddings(), pair.drafter_precision)
    return _BUILT[key]


class DraftContext:
    """What the drafter knows of one committed sequence: the context keys/values in buffers of
    their own, and the target features committed since the last draft (projected at the next)."""

    def __init__(self, fast: FastDrafter, mask_token_id: int):
        self.fast = fast
        self.mask_token_id = int(mask_token_id)
        self.keys, self.values = fast.new_buffers()
        self.length = 0
        self.pending: torch.Tensor | None = None     # [n, F] target features not yet projected

    def add(self, features: torch.Tensor) -> None:
        """Queue the target's context features [n, F] of newly committed positions."""
        self.pending = features if self.pending is None else torch.cat([self.pending, features], dim=0)

    def draft(self, root: int, depth: int, embed) -> torch.Tensor:
        """Hidden states [depth, d] of the block [root, MASK x depth] after the committed context."""
        if self.pending is not None:
            self.fast.extend(self.keys, self.values, self.length, self.pending)
            self.length += self.pending.shape[0]
            self.pending = None
        if self.length + depth + 1 > self.fast.capacity:
            raise RuntimeError("the draft block runs past the drafter's context")
        block = torch.full((depth + 1,), self.mask_token_id, device=self.fast.device)
        block[0] = root
        return self.fast.block(self.keys, self.values, self.length, embed(block))[1:]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fast.logits(hidden)
