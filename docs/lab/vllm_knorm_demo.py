"""vLLM 0.32's CPU `rms_norm` with a stacked weight [layers, head_dim] norms every layer with the
first layer's weight (docs/vllm.md). Run it with vLLM's Python, from a folder outside taps/eval:

    .venv-vllm/bin/python docs/lab/vllm_knorm_demo.py

`DFlashQwen3Model._normalize_context_k` (vllm/model_executor/models/qwen3_dflash.py) normalises the
drafter's context keys of all layers in one `ops.rms_norm(out, all_k, self._k_norm_weights, eps)`
call, `all_k` [L, num_ctx, kv_heads, head_dim] and `_k_norm_weights` [L, head_dim], expecting the
weight row to follow the outermost (layer) index; on the CPU the kernel reads row 0 for every layer.
"""

import torch
from vllm import _custom_ops as ops

torch.manual_seed(0)
layers, tokens, heads, head_dim = 3, 5, 2, 8
x = torch.randn(layers, tokens, heads, head_dim)
weight = torch.stack([torch.full((head_dim,), float(i + 1)) for i in range(layers)])   # layer i's weight: i + 1
out = torch.empty_like(x)
ops.rms_norm(out, x, weight, 1e-6)
for i in range(layers):
    ref = x[i] * torch.rsqrt(x[i].pow(2).mean(-1, keepdim=True) + 1e-6) * weight[i]
    print(f"layer {i}: weight {i + 1}, vLLM's output / per-layer RMSNorm = {float((out[i] / ref).mean()):.3f}")
