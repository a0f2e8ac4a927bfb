"""Plain autoregressive decoding with a KV cache: the reference every selector must reproduce,
token for token (greedy at T=0; the same draws at T>0)."""

from __future__ import annotations

import torch

from .target_cache import make_target_cache
from .verify import HeadRows, choose_token, target_body


@torch.inference_mode()
def sample_continuation(pair, prompt_ids: list[int], count: int, temperature: float, seed: int,
                        stop_at_eos: bool = False) -> list[int]:
    """One target forward and one choice per token (a Gumbel-max draw keyed by seed and position at T>0)."""
    limit = min(count, pair.max_context - len(prompt_ids))
    cache = make_target_cache(pair.target.config, capacity=len(prompt_ids) + max(limit, 0))
    ids = torch.tensor([prompt_ids], device=pair.device)
    pos = torch.arange(len(prompt_ids), device=pair.device).view(1, -1)
    out: list[int] = []
    while len(out) < limit:
        hidden, _ = target_body(pair.target, cache, ids, pos, None, None)
        last = HeadRows(pair.target, hidden).get([hidden.shape[0] - 1])[0]
        token = choose_token(last, temperature, seed, len(prompt_ids) + len(out))
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
