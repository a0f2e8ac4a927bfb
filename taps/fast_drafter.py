"""The drafter at inference: the same computation as `DFlashDrafter`, arranged for few, large ops.

What changes against the training module (`taps.drafter.DFlashDrafter`):
- q, k, v projections fused into one matrix, gate and up too; queries and keys with each rotary
  pair side by side, so that rotary embedding is one complex product;
- RMSNorm as one fused op; one rotary table for every position a context may reach;
- the context keys/values live in buffers written in place (no concatenation of the whole cache
  each round), sized to the context so far plus a few rounds and grown geometrically (a copy into
  a larger buffer, a multiple of BUFFER_STEP positions) when a draft would run past them, never
  past max_position_embeddings + block; the target features committed since the last
  draft go through each layer's qkv projection together with the block's rows (one call, not a
  separate pass to extend the cache), and their keys/values and the block's are written just
  after the context and attended in place;
- grouped-query attention without repeating keys/values (`enable_gqa`);
- optionally, `precision="int8"`: the drafter's linear layers and its copy of the lm_head run with
  int8 dynamic quantization (weights int8 per channel, activations quantized on the fly);
- a DFlash2 drafter's convolutions (`taps.dflash2`) around each sublayer, over the block's rows only.

The drafter only proposes tokens; the target decides what is kept, so none of this can change the
decoded text: it changes which tokens are proposed by float rounding (or quantization) at most.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import nn

from .linear import available as onednn_available
from .linear import packed_product

PRECISIONS = ("same", "int8", "bfloat16")
BUFFER_STEP = 256          # key/value buffers grow in multiples of this many positions
AHEAD_BLOCKS = 4           # a new or grown buffer holds what is needed now plus this many blocks


def grown_size(needed: int, current: int, block: int, capacity: int) -> int:
    """The size a buffer of `current` positions grows to when `needed` do not fit: at least twice
    as large and a few blocks beyond what is needed, rounded up to BUFFER_STEP, at most `capacity`."""
    size = max(needed + AHEAD_BLOCKS * block, 2 * current)
    return min(capacity, -(-size // BUFFER_STEP) * BUFFER_STEP)


def _projection(weight: torch.Tensor, bias: torch.Tensor | None, precision: str):
    """x -> x @ weight.T (+ bias) at the drafter's inference precision, as one operator call with
    no module machinery around it (a draft makes ten of these calls)."""
    weight = weight.detach()
    bias = None if bias is None else bias.detach()
    if precision == "int8":
        import warnings

        from torch.ao.quantization import quantize_dynamic

        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # the quantized-tensor API warns of its future
            packed = quantize_dynamic(nn.Sequential(linear.eval()), {nn.Linear}, dtype=torch.qint8)[0]._packed_params
        packed = packed._packed_params               # int8 weights per output channel, prepacked
        reduce_range = torch.backends.quantized.engine != "qnnpack"     # qnnpack (ARM) has no reduced range
        return lambda x: torch.ops.quantized.linear_dynamic(x, packed, reduce_range)
    if precision == "bfloat16":
        weight = weight.to(torch.bfloat16)
        bias = None if bias is None else bias.to(torch.bfloat16)
    if weight.device.type == "cpu" and weight.dtype == torch.float32 and onednn_available():
        return packed_product(weight, bias)   # a block's rows through oneDNN's GEMM (taps.linear)
    weight = weight.contiguous()
    return lambda x: F.linear(x, weight, bias)


def _interleave(head_dim: int) -> torch.Tensor:
    """The order that puts each rotary pair (i, i + head_dim/2) side by side: 0, h/2, 1, h/2+1, ..."""
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half, head_dim)], dim=1).flatten()


class _Layer:
    def __init__(self, layer, precision: str, compute: torch.dtype):
        attn = layer.self_attn
        self.heads, self.kv_heads, self.head_dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
        # Queries and keys with each head's rotary pairs side by side, so that rotary embedding is
        # one complex product; q.k is unchanged since both are permuted alike (values are not).
        order = _interleave(self.head_dim).to(attn.q_proj.weight.device)
        q = attn.q_proj.weight.view(self.heads, self.head_dim, -1)[:, order].flatten(0, 1)
        k = attn.k_proj.weight.view(self.kv_heads, self.head_dim, -1)[:, order].flatten(0, 1)
        self.qkv = _projection(torch.cat([q, k, attn.v_proj.weight]), None, precision)
        self.o = _projection(attn.o_proj.weight, None, precision)
        self.gate_up = _projection(torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]), None, precision)
        self.down = _projection(layer.mlp.down_proj.weight, None, precision)
        self.intermediate = layer.mlp.gate_proj.weight.shape[0]
        q_norm, k_norm = attn.q_norm.weight.detach()[order], attn.k_norm.weight.detach()[order]
        qk_norm = torch.cat([q_norm.expand(self.heads, -1), k_norm.expand(self.kv_heads, -1)]).unsqueeze(1)
        self.qk_norm = qk_norm.to(compute)
        self.in_norm = layer.input_layernorm.weight.detach().to(compute)
        self.post_norm = layer.post_attention_layernorm.weight.detach().to(compute)
        # DFlash2's convolutions around the sublayers (taps.dflash2), or None (DFlash)
        self.attn_conv = _Conv(layer.attention_conv, precision, compute) if hasattr(layer, "attention_conv") else None
        self.mlp_conv = _Conv(layer.mlp_conv, precision, compute) if hasattr(layer, "mlp_conv") else None


class _Conv:
    """A DFlash2 sublayer convolution (`taps.dflash2.DynamicConv`) for inference: its taps'
    projection at the drafter's precision, its base kernel in the compute dtype."""

    def __init__(self, conv, precision: str, compute: torch.dtype):
        self.kernel_size, self.group_size, self.groups = conv.kernel_size, conv.group_size, conv.groups
        self.projection = _projection(conv.kernel_projection.weight, None, precision)
        self.base = conv.base_kernel.detach().to(compute)

    def dynamic(self, x: torch.Tensor) -> torch.Tensor:
        """The taps' dynamic part [n, 2, k, groups] of a block's sublayer input [n, d]."""
        return self.projection(x).view(x.shape[0], 2, self.kernel_size, self.groups)

    def __call__(self, x: torch.Tensor, dynamic: torch.Tensor, side: int) -> torch.Tensor:
        """The side's convolution of block rows x [n, d]: tap j reads row t - j, zeros before row 0."""
        taps = self.base[side] + dynamic[:, side].repeat_interleave(self.group_size, -1)   # [n, k, d]
        out = taps[:, 0] * x
        for j in range(1, min(self.kernel_size, x.shape[0])):
            out[j:] += taps[j:, j] * x[:-j]
        return out


class FastDrafter:
    """Fused, inference-only weights of a `DFlashDrafter` (built once per pair and precision)."""

    def __init__(self, drafter, lm_head: nn.Module, precision: str = "same"):
        if precision not in PRECISIONS:
            raise ValueError(f"unknown drafter precision '{precision}': choose one of {', '.join(PRECISIONS)}")
        cfg = drafter.config
        weight = next(drafter.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        if precision == "int8" and (self.device.type != "cpu" or self.dtype != torch.float32):
            raise ValueError("int8 drafter precision needs a float32 pair on the CPU; use 'same' or 'bfloat16'")
        self.precision = precision
        self.compute = torch.bfloat16 if precision == "bfloat16" else self.dtype
        self.block_size = drafter.block_size
        self.eps = cfg.rms_norm_eps
        self.capacity = int(cfg.max_position_embeddings) + drafter.block_size   # positions a context may reach
        self.layers = [_Layer(layer, precision, self.compute) for layer in drafter.layers]
        self.fc = _projection(drafter.fc.weight, None, precision)
        self.hidden_norm = drafter.hidden_norm.weight.detach().to(self.compute)
        self.norm = drafter.norm.weight.detach().to(self.compute)
        self.lm_head = _projection(lm_head.weight, getattr(lm_head, "bias", None), precision)
        self.rotary_emb = drafter.rotary_emb
        self.rotary_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
        # e^{i theta} per position and rotary pair, [capacity, head_dim / 2] complex: every position a
        # context may reach, built once here, so sessions drafting at once only read it
        self.rotary = self._rotary_rows(0, self.capacity)

    def _rotary_rows(self, start: int, stop: int) -> torch.Tensor:
        """The rotary factors of positions start..stop-1 (each position's on its own)."""
        with torch.no_grad():
            positions = torch.arange(start, stop, device=self.device).view(1, -1)
            cos, sin = self.rotary_emb(torch.zeros(1, device=self.device, dtype=self.dtype), positions)
        half = cos.shape[-1] // 2
        return torch.complex(cos[0, :, :half].to(self.rotary_dtype), sin[0, :, :half].to(self.rotary_dtype))

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x [heads, n, head_dim] (rotary pairs side by side) at positions start..start+n-1."""
        heads, n, dim = x.shape
        wide = x if x.dtype == self.rotary_dtype else x.to(self.rotary_dtype)
        rotary = self.rotary[start:start + n]
        turned = torch.view_as_complex(wide.reshape(heads, n, dim // 2, 2)) * rotary
        out = torch.view_as_real(turned).view(heads, n, dim)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def new_buffers(self, size: int | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Zeroed key and value buffers, one per layer, for `size` positions (default: `capacity`)."""
        size = self.capacity if size is None else min(int(size), self.capacity)
        shape = lambda layer: (layer.kv_heads, size, layer.head_dim)  # noqa: E731
        keys = [torch.zeros(shape(layer), device=self.device, dtype=self.compute) for layer in self.layers]
        values = [torch.zeros(shape(layer), device=self.device, dtype=self.compute) for layer in self.layers]
        return keys, values

    def block(self, keys, values, length: int, embeds: torch.Tensor,
              features: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [n, d] (after the final norm) of a block [n, d].

        `features` [m, F] are target features of positions length..length+m-1 that the buffers do not
        hold yet: their keys/values come out of the same projections as the block's (the rows go
        through each layer's qkv together) and are written to the buffers; the block starts at
        length+m. Without features the block starts at `length`.
        """
        hidden = embeds.to(self.compute)
        n, d = hidden.shape
        m = 0 if features is None else features.shape[0]
        if m:
            ctx = F.rms_norm(self.fc(features.to(self.compute)), (d,), self.hidden_norm, self.eps)
        for layer, k_buf, v_buf in zip(self.layers, keys, values):
            x = F.rms_norm(hidden, (d,), layer.in_norm, self.eps)
            if layer.attn_conv is not None:
                dyn = layer.attn_conv.dynamic(x)
                x = layer.attn_conv(x, dyn, 0)
            rows = torch.cat([ctx, x]) if m else x
            out = layer.o(self._attend(layer, layer.qkv(rows), k_buf, v_buf, length, m))
            hidden = hidden + (out if layer.attn_conv is None else layer.attn_conv(out, dyn, 1))
            x = F.rms_norm(hidden, (d,), layer.post_norm, self.eps)
            if layer.mlp_conv is not None:
                dyn = layer.mlp_conv.dynamic(x)
                x = layer.mlp_conv(x, dyn, 0)
            gate, up = layer.gate_up(x).split(layer.intermediate, dim=-1)
            out = layer.down(F.silu(gate) * up)
            hidden = hidden + (out if layer.mlp_conv is None else layer.mlp_conv(out, dyn, 1))
        return F.rms_norm(hidden, (d,), self.norm, self.eps)

    def _attend(self, layer, qkv_rows: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, length: int,
                m: int) -> torch.Tensor:
        """One sequence's attention in `layer`: its rows' fused q, k, v [m + n, ...] (m context rows,
        then n block rows, at positions length..), their keys and values written to its buffers just
        after the context, the block rows attending to everything up to them. [n, heads x head_dim],
        before the output projection."""
        h, kvh, hd = layer.heads, layer.kv_heads, layer.head_dim
        rows = qkv_rows.shape[0]
        end = length + rows
        qkv = qkv_rows.view(rows, h + 2 * kvh, hd).transpose(0, 1)
        qk = self._rope(F.rms_norm(qkv[:h + kvh], (hd,), None, self.eps) * layer.qk_norm, length)
        k_buf[:, length:end] = qk[h:]           # the block's keys/values just after the context,
        v_buf[:, length:end] = qkv[h + kvh:]    # overwritten when real context arrives there
        out = F.scaled_dot_product_attention(qk[:h, m:].unsqueeze(0), k_buf[:, :end].unsqueeze(0),
                                             v_buf[:, :end].unsqueeze(0), enable_gqa=h != kvh)
        return out[0].transpose(0, 1).reshape(rows - m, h * hd)

    def blocks(self, items: list[tuple]) -> list[torch.Tensor]:
        """Several sequences' blocks in one pass: `items` are (keys, values, length, embeds [n, d],
        features [m, F] or None), each as `block` takes them. Every linear layer runs once over all
        the sequences' rows (context features and block rows, one sequence after another); rotary
        embedding, the buffers and attention per sequence, over its own buffers. Returns each
        sequence's hidden states [n, d]. (A DFlash2 drafter's convolutions mix a block's rows: it
        drafts block by block.) With int8 precision, activations are quantized with one scale per
        call, so a sequence's draft can differ from its own pass by that rounding."""
        if len(items) == 1 or any(layer.attn_conv is not None or layer.mlp_conv is not None for layer in self.layers):
            return [self.block(*item) for item in items]
        hidden = torch.cat([embeds.to(self.compute) for _, _, _, embeds, _ in items])
        d = hidden.shape[1]
        sizes = [(0 if features is None else features.shape[0], embeds.shape[0]) for *_, embeds, features in items]
        given = [features for *_, features in items if features is not None]
        ctx = (F.rms_norm(self.fc(torch.cat(given).to(self.compute)), (d,), self.hidden_norm, self.eps)
               if given else None)
        for i, layer in enumerate(self.layers):
            x = F.rms_norm(hidden, (d,), layer.in_norm, self.eps)
            parts, row, feature_row = [], 0, 0
            for m, n in sizes:                       # each sequence's context rows, then its block rows
                if m:
                    parts.append(ctx[feature_row:feature_row + m])
                parts.append(x[row:row + n])
                row, feature_row = row + n, feature_row + m
            qkv_all = layer.qkv(torch.cat(parts))
            outs, start = [], 0
            for (keys, values, length, _, _), (m, n) in zip(items, sizes):
                outs.append(self._attend(layer, qkv_all[start:start + m + n], keys[i], values[i], length, m))
                start += m + n
            hidden = hidden + layer.o(torch.cat(outs))
            x = F.rms_norm(hidden, (d,), layer.post_norm, self.eps)
            gate, up = layer.gate_up(x).split(layer.intermediate, dim=-1)
            hidden = hidden + layer.down(F.silu(gate) * up)
        return list(F.rms_norm(hidden, (d,), self.norm, self.eps).split([n for _, n in sizes]))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


_BUILT: dict[tuple, tuple] = {}
_BUILT_LOCK = threading.Lock()


def fast_drafter(pair) -> FastDrafter:
    """The pair's drafter fused for inference at the pair's drafter precision, built once (under a
    lock: two sessions starting together build it once) and from then on only read: every session
    drafting with it keeps what it writes in its own `DraftContext`. The entry holds the drafter and
    target it was built from, so their ids cannot be reused while it exists."""
    key = (id(pair.drafter), id(pair.target), pair.drafter_precision)
    with _BUILT_LOCK:
        entry = _BUILT.get(key)
        if entry is None:
            if len(_BUILT) > 4:
                _BUILT.clear()
            fast = FastDrafter(pair.drafter, pair.target.get_output_embeddings(), pair.drafter_precision)
            entry = _BUILT[key] = (fast, pair.drafter, pair.target)
    return entry[0]


class DraftContext:
    """What the drafter knows of one committed sequence: the context keys/values in buffers of
    their own, and the target features committed since the last draft (projected at the next).
    The buffers are made at the first draft, for the context then plus a few blocks, and grow
    (`grown_size`) when a draft would run past them; `size` makes them that large at once."""

    def __init__(self, fast: FastDrafter, mask_token_id: int, size: int | None = None):
        self.fast = fast
        self.mask_token_id = int(mask_token_id)
        self.keys, self.values = fast.new_buffers(size) if size else ([], [])
        self.length = 0
        self._queued: list[torch.Tensor] = []        # target features [n, F] each, not yet projected

    @property
    def size(self) -> int:
        """Positions the buffers hold now."""
        return self.keys[0].shape[1] if self.keys else 0

    def _make_room(self, needed: int) -> None:
        if needed > self.fast.capacity:
            raise RuntimeError(f"the draft block runs past the drafter's context ({self.fast.capacity} positions)")
        if needed <= self.size:
            return
        keys, values = self.fast.new_buffers(grown_size(needed, self.size, self.fast.block_size, self.fast.capacity))
        for new, old in zip(keys + values, self.keys + self.values):
            new[:, :self.length] = old[:, :self.length]    # the context; the rest is rewritten before it is read
        self.keys, self.values = keys, values

    def add(self, features: torch.Tensor) -> None:
        """Queue the target's context features [n, F] of newly committed positions: kept as they
        come (no copy), joined and projected at the next draft, however many rounds away (a batch
        plan's autoregressive steps queue theirs until it drafts again)."""
        self._queued.append(features)

    @property
    def pending(self) -> torch.Tensor | None:
        """[n, F]: every queued feature row, in order (None when nothing is queued)."""
        if len(self._queued) > 1:
            self._queued = [torch.cat(self._queued, dim=0)]
        return self._queued[0] if self._queued else None

    @property
    def queued(self) -> int:
        """Positions committed since the last draft (their features queued, not yet projected)."""
        return sum(f.shape[0] for f in self._queued)

    def draft(self, root: int, depth: int, embed) -> torch.Tensor:
        """Hidden states [depth, d] of the block [root, MASK x depth] after the committed context
        (the queued features are projected in the same pass)."""
        hidden = self.fast.block(*self._block_inputs(root, depth, embed))
        return self._drafted(hidden)

    @staticmethod
    def draft_many(contexts: list["DraftContext"], roots: list[int], depths: list[int], embed) -> list[torch.Tensor]:
        """`draft` for several sequences in one drafter pass (`FastDrafter.blocks`): each context's
        hidden states [depth, d]."""
        items = [ctx._block_inputs(root, depth, embed) for ctx, root, depth in zip(contexts, roots, depths)]
        hiddens = contexts[0].fast.blocks(items)
        return [ctx._drafted(hidden) for ctx, hidden in zip(contexts, hiddens)]

    def _block_inputs(self, root: int, depth: int, embed) -> tuple:
        self._make_room(self.length + self.queued + depth + 1)
        block = torch.full((depth + 1,), self.mask_token_id, device=self.fast.device)
        block[0] = root
        return self.keys, self.values, self.length, embed(block), self.pending

    def _drafted(self, hidden: torch.Tensor) -> torch.Tensor:
        """After a pass: the queued features are in the buffers now; the block's drafted rows."""
        self.length += self.queued
        self._queued = []
        return hidden[1:]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fast.logits(hidden)
