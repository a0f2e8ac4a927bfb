"""The target's linear layers on the CPU, with oneDNN's prepacked float32 GEMM for several rows.

A tree's verify pass multiplies a few rows (the tree's nodes) by every weight matrix of the target.
PyTorch's default CPU path for `F.linear` (MKL's sgemm) handles such skinny products poorly: on
the 2-core machine of `results/`, 9 rows through a 256 -> 768 projection take 53 us against 11 us
for one row, and 9 rows through the 256 -> 4096 lm_head 274 us. oneDNN's GEMM on weights reordered
once, at load, into its own blocked layout takes 22 us and 61 us for the same products
(`python scripts/gemm_kernels.py` measures both on the machine at hand).

`pack_linears(model)` swaps every `nn.Linear` of a float32 model on the CPU for a `PackedLinear`:
the same weight (the same Parameter; nothing is copied out of the model, tied weights stay tied),
plus its oneDNN-packed copy. What each call runs is fixed in code, never chosen by timing:

- several rows (a tree's verify, a prefill): oneDNN, for every matrix;
- one row (an autoregressive step, the root-only tree): `F.linear`, whose matrix-vector product is
  the quicker one for the 256-wide layers, except for matrices with at least `ONE_ROW_PACKED`
  outputs (the lm_head), where oneDNN's is quicker.

Both are float32 products of the same weights, so they agree to float rounding (about 1e-6 of a
logit); the target runs as trained. Like batching rows at all, a different kernel can move a
logit by that much, which could only change a token where two logits tie to within it: the
lossless tests compare every selector against plain decoding over many prompts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PACK_HINT = 16          # the row count oneDNN lays the weights out for (any count works)
ONE_ROW_PACKED = 2048   # one row through a matrix with at least this many outputs also goes to oneDNN
PACK_LIMIT_BYTES = 1 << 30  # the packed copy doubles the weights' memory: models with more stay as they are


def available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked linear operators (and TAPS_ONEDNN=0 does
    not turn them off: `taps.machine`)."""
    from .machine import onednn_linear

    return onednn_linear()[0]


def packed_product(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """x [rows, in] -> x @ weight.T (+ bias) on oneDNN-packed float32 weights (a copy, packed now)."""
    with torch.no_grad():
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_size=PACK_HINT)
    bias = None if bias is None else bias.detach()
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Module):
    """`nn.Linear` whose products of several rows run on oneDNN-packed weights (see the module)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight                   # the same Parameter: tied weights stay tied
        self.bias = linear.bias
        self._product = packed_product(self.weight, self.bias)
        self._one_row_packed = self.out_features >= ONE_ROW_PACKED

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        training = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if rows == 0 or training or x.dtype != torch.float32 or (rows == 1 and not self._one_row_packed):
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, self.in_features)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        return self._product(flat).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, oneDNN"


def pack_linears(model: nn.Module) -> int:
    """Swap every `nn.Linear` of a float32 CPU inference model for a `PackedLinear`; returns how
    many were swapped: 0 where oneDNN is missing, the model is elsewhere or not float32, or its
    linear weights exceed `PACK_LIMIT_BYTES` (a packed copy of a multi-GB model would double its
    memory; such a model keeps PyTorch's default kernels)."""
    if not available():
        return 0
    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
                swaps.append((parent, name, child))
    if sum(child.weight.numel() * child.weight.element_size() for _, _, child in swaps) > PACK_LIMIT_BYTES:
        return 0
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child))
    return len(swaps)


def kernel_name(model: nn.Module) -> str:
    """'onednn' when the model's linear layers run packed, else 'default' (a latency profile's key)."""
    return "onednn" if any(isinstance(m, PackedLinear) for m in model.modules()) else "default"
