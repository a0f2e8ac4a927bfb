"""Words for a round: the text it committed, one sentence per stage for the lesson view, and why a
tree came out smaller than its budget. Plain Python over `Round` records (no torch, no streamlit).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..config import run_label
from ..policies import DFLASH, DFLASH2, ORACLE, TAPS, policy
from ..record import STAGES, Round
from .failures import display_name, visible_text

STAGE_TITLES = {"draft": "Draft", "pool": "Pool", "estimate": "Estimate", "select": "Select", "verify": "Verify",
                "commit": "Commit"}


def round_text(record: Round) -> str:
    """The text a round committed (accepted tokens and bonus, after stop/length truncation)."""
    pieces = [record.pool_texts[i] for i in record.accepted] + [record.bonus_text]
    return "".join(pieces[: len(record.committed_tokens)])


def prompt_excerpt(prompt: str, limit: int = 28) -> str:
    """The start of a prompt on one line, whitespace visible, for figure titles and file names."""
    flat = visible_text(prompt.strip("\n")) if prompt else "∅"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def expected_rate_curve(record: Round, profile) -> tuple[np.ndarray, np.ndarray]:
    """Tree sizes m = 0..min(budget, pool) and the expected tokens per second of the m pool nodes of
    highest reach under `profile`: (1 + sum of their reach) / round time at m. The cost mode of TAPS
    (and DDTree) verifies the m where this peaks."""
    reach = np.sort(np.asarray(record.pool_reach[1:], dtype=float))[::-1]
    top = min(record.budget, len(reach))
    sizes = np.arange(0, top + 1)
    expected = 1.0 + np.concatenate([[0.0], np.cumsum(reach[:top])])
    policy = run_label(record.selector, record.estimator)
    return sizes, expected / np.asarray(profile.round_time(policy, sizes), dtype=float)


def run_uses_profile(selector: str, config: Mapping) -> bool:
    """Whether a run of `selector` with these settings (a config dict) sized its trees from a profile."""
    entry = policy(selector)
    return bool(entry.size_field) and entry.uses_profile(config.get(entry.size_field, ""))


def size_explanation(record: Round, config: Mapping | None) -> str:
    """One line on why the verified tree is smaller than the budget, or "" when it is not."""
    if policy(record.selector).baseline or record.verified_nodes >= record.budget:
        return ""
    config = config or {}
    pool = len(record.pool_tokens) - 1
    name = display_name(record.selector)
    if pool <= record.verified_nodes:
        return f"The candidate pool held only {_nodes(pool)}, so {name} verified all of them."
    if run_uses_profile(record.selector, config):
        return (f"The cost model chose {_nodes(record.verified_nodes)} of a budget of {record.budget}: "
                "expected tokens per second peaks there.")
    if record.selector == TAPS.name and config.get("taps_mode") == "utility":
        return (f"The utility rule stopped at {_nodes(record.verified_nodes)}: no further node's reach paid for "
                "its cost.")
    if record.selector == DFLASH.name:
        return f"DFlash verifies one path: {_nodes(record.verified_nodes)}, as deep as the drafter drafted."
    if record.selector == DFLASH2.name:
        return (f"DFlash2 verifies one path, {_nodes(record.verified_nodes)}: at each depth the candidate its path "
                "selector scores best after the one before, not always the drafter's own favourite.")
    if record.selector == ORACLE.name:
        return f"The oracle verifies only the target's own path inside the lattice: {_nodes(record.verified_nodes)}."
    return f"{name} verified {_nodes(record.verified_nodes)} of a budget of {record.budget}."


def stage_sentence(record: Round, stage: str, config: Mapping | None = None) -> str:
    """One sentence of narration for `stage` of this round, with the round's own numbers."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}': the stages are {', '.join(STAGES)}")
    took = _ms(record.timings.get(stage, 0.0))
    pool = len(record.pool_tokens) - 1
    depth = max(record.pool_depths)
    name = display_name(record.selector, capital=True)
    accepted = len(record.accepted)
    if policy(record.selector).baseline:
        return {
            "draft": "Plain autoregressive decoding drafts nothing.",
            "pool": "No candidates: the target alone decides the next token.",
            "estimate": "Nothing to estimate.",
            "select": "Nothing to select: the tree is the root alone.",
            "verify": f"One target forward over the last token gives its next token ({took}).",
            "commit": f"The target's token '{visible_text(record.bonus_text)}' is appended: one token per round.",
        }[stage]
    if stage == "draft":
        return (f"One drafter pass proposes all {depth} next positions at once: a marginal distribution per "
                f"depth, its best tokens shown ({took}).")
    if stage == "pool":
        return (f"Paths through those tokens make a candidate tree of {_nodes(pool)}, {depth} deep "
                f"({_ms(record.timings.get('pool', 0.0))}).")
    if stage == "estimate":
        if record.selector == DFLASH2.name:
            return ("DFlash2's path selector scores each depth's top candidates given the one chosen before it "
                    "(the drafter's own score plus a learned pair term), and walks the best path: its score is "
                    f"the walk's probability ({took}).")
        if policy(record.selector).uses_estimator and record.estimator != "marginal":
            return (f"The {record.estimator} estimator scores every candidate by its reach: the chance the target "
                    f"accepts its whole path ({took}).")
        return ("Every candidate is scored by its marginal product: the drafter's probabilities multiplied "
                f"along its path ({took}).")
    if stage == "select":
        why = size_explanation(record, config)
        return (f"{name} keeps {_nodes(record.verified_nodes)} (budget {record.budget}), a prefix-closed tree: "
                f"every kept node's parent is kept. " + why).strip()
    if stage == "verify":
        return (f"One target forward checks all {_nodes(record.verified_nodes)}: it agrees along "
                f"{_nodes(accepted)} (thick path), rejects {record.rejected_siblings} sibling"
                f"{'' if record.rejected_siblings == 1 else 's'} (diamonds); {record.waste_nodes} sat under a rejected "
                f"prefix (crosses) ({took}).")
    return (f"The {_tokens(accepted)} accepted plus the target's own next token '{visible_text(record.bonus_text)}' "
            f"(the bonus, a star) join the text: τ = {record.tau}. The caches keep only the accepted path ({took}).")
