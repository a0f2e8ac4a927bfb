"""Plain autoregressive decoding with a KV cache: the reference every selector must reproduce,
token for token (greedy at T=0; the same draws at T>0)."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .verify import pick_token, target_forward


@torch.inference_mode()
def sample_continuation(pair, prompt_ids: list[int], count: int, temperature: float, seed: int,
                        stop_at_eos: bool = False) -> list[int]:
    """One target forward and one draw per token."""
    generator = torch.Generator().manual_seed(int(seed))
    cache = DynamicCache(config=pair.target.config)
    ids = torch.tensor([prompt_ids], device=pair.device)
    pos = torch.arange(len(prompt_ids), device=pair.device).view(1, -1)
    out: list[int] = []
    limit = min(count, pair.max_context - len(prompt_ids))
    while len(out) < limit:
        logits, _ = target_forward(pair.target, cache, ids, pos, None, None)
        token = pick_token(logits[-1], temperature, generator)
        out.append(token)
        if stop_at_eos and token in pair.eos_token_ids:
            break
        next_pos = int(pos[0, -1]) + 1
        ids = torch.tensor([[token]], device=pair.device)
        pos = torch.tensor([[next_pos]], device=pair.device)
    return out


def greedy_continuation(pair, prompt_ids: list[int], count: int) -> list[int]:
    """Plain greedy decoding."""
    return sample_continuation(pair, prompt_ids, count, temperature=0.0, seed=0)
