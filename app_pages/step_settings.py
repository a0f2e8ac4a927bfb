"""The Step-through page's prompt and settings: the Chat prompt box, the decode settings, and the
prompt the runs decode (as typed, or as the pair's chat template formats it)."""

from __future__ import annotations

import streamlit as st

from app_pages import inputs
from taps import ModelPair
from taps.chat import chat_prompt_text, has_chat_template


def chat_box(pair: ModelPair) -> bool:
    """The Chat prompt checkbox under the prompt box; disabled, with a caption saying why, when the
    pair's tokenizer has no chat template. Returns whether the prompt runs chat-formatted."""
    state = st.session_state
    usable = has_chat_template(pair.tokenizer)
    if not usable:
        state["step_chat"] = False
    inputs.keep("step_chat")
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    on = row.checkbox("Chat prompt", key="step_chat", disabled=not usable,
                      help="Run the prompt as the pair's chat template formats it: one user message, the "
                           "assistant's turn opened, thinking disabled. Public DFlash drafters were trained on such "
                           "prompts, and their published acceptance is measured on them.")
    if not usable:
        row.caption(f"Off: {pair.name}'s tokenizer has no chat template; prompts run as typed.")
    return bool(on) and usable


def session_prompt(pair: ModelPair, typed: str, chat: bool) -> tuple[str, str]:
    """The prompt the runs decode, and a problem ("" when none): as typed, or with Chat prompt on as the
    pair's chat template formats it (remembered with the typed text, for the link of a run on view)."""
    if not chat or not typed.strip():
        return typed, ""
    try:
        text = chat_prompt_text(pair.tokenizer, typed, name=pair.name)
    except ValueError as exc:
        return typed, f"the prompt cannot be chat-formatted: {exc}"
    shown = pair.tokenizer.decode(pair.tokenizer.encode(text, add_special_tokens=False))   # ctrl.prompt_text's
    st.session_state.setdefault("step_chat_typed", {})[shown] = typed
    return text, ""


def decode_settings(pair: ModelPair, own_block: int) -> dict:
    """The page's decode settings: six in a row, the rest in an expander (`inputs.more_settings`).
    Returns {name: value} for `inputs.build_config`."""
    cols = st.columns(6)
    selector = inputs.setting("selector", "step_selector", "Selector", cols[0])
    estimator = inputs.setting("estimator", "step_estimator", "Estimator (TAPS)", cols[1],
                               extra_help="marginal: DDTree's surrogate · online: calibrated on this run's verdicts · "
                                          "learned: the pair's TAPS scorer.")
    budget = inputs.setting("budget", "step_budget", "Budget (nodes)", cols[2])
    temperature = inputs.setting("temperature", "step_temperature", "Temperature", cols[3])
    block_size = inputs.setting("block_size", "step_block_size", "Block size", cols[4], default=own_block,
                                disabled=pair.drafter is None, extra_help=f"This drafter's own: {own_block}.")
    max_new = inputs.setting("max_new_tokens", "step_max_new", "Max new tokens", cols[5], default=64)
    with st.expander("TAPS cost, DDTree and pool settings"):
        more = inputs.more_settings("step", inputs.MAIN_SETTINGS)
    return dict(selector=selector, estimator=estimator, budget=budget, temperature=temperature,
                max_new_tokens=max_new, block_size=block_size if pair.drafter is not None else None, **more)
