"""Stop rules: how much of a round's committed tokens a session keeps, and why it stops."""

from __future__ import annotations

from .config import DecodeConfig


def apply_stop_rules(committed: list[int], config: DecodeConfig, *, generated: int, total: int,
                     eos_ids: set[int], max_context: int) -> tuple[list[int], str | None]:
    """Cut `committed` at end-of-text (if the settings stop there), at `max_new_tokens` (given
    `generated` tokens so far) and at the context length (given `total` tokens in the sequence).
    Returns the tokens kept and the first reason that stops the session, or None."""
    reason = None
    if config.stop_at_eos:
        for i, token in enumerate(committed):
            if token in eos_ids:
                committed, reason = committed[: i + 1], "end of text"
                break
    left = config.max_new_tokens - generated
    if len(committed) >= left:
        committed, reason = committed[:left], reason or "max new tokens"
    if total + len(committed) >= max_context:
        committed, reason = committed[: max(max_context - total, 0)], reason or "context length"
    return committed, reason
