"""What a race on Race and sweep runs: its link (read when a new one arrives, written after every
change), its settings (`Setup`), and the notice when a batch's profile has no verify cost at a batch."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from app_pages import address, inputs, profiles
from app_pages import page_style as style
from taps.config import DecodeConfig
from taps.studio.link import RaceLink, example_of, fits, parse_race_link, race_link_params, too_long
from taps.studio.page_profile import PageProfile
from taps.studio.speed import profile_name

WIDGETS = {"budget": "race_budget", "estimator": "race_estimator", "temperature": "race_temperature",
           "clock": "race_clock", "batch": "race_batch"}


# ---------------------------------------------------------------- the race link
def read_link(pair) -> None:
    """A new link's settings, applied to the page's widgets (call before they are drawn), its
    profile to the session's runs; a message per bad parameter (`link_messages`)."""
    params = address.arrived()
    if params is None:
        return
    state = st.session_state
    link, messages = parse_race_link(params, inputs.examples(), pair)
    if {"example", "prompt"} & link.given:
        state["race_prompt"] = link.prompt
        chosen = next((e for e in inputs.examples() if e["id"] == link.example), None)
        state["race_example"] = chosen["title"] if chosen else inputs.OWN_PROMPT
    for name, key in WIDGETS.items():
        if name in link.given:
            state[key] = getattr(link, name)
    if link.profile:
        profiles.use_profile(link.profile if link.profile != profiles.page_profile(pair).default_id else None)
    state["race_link_messages"] = messages


def link_messages() -> None:
    messages = st.session_state.get("race_link_messages") or []
    if messages:
        st.warning("This link had settings the page could not use:\n\n" + "\n".join(f"- {m}" for m in messages))


def write_link(prompt: str, budget, estimator: str, temperature, clock: str, profile_id: str, batch: int = 1) -> None:
    """The address bar: a link that reopens these settings (without a prompt longer than a link carries)."""
    if not fits(prompt):
        st.caption(f"No link holds this prompt: {too_long(prompt)}; the address bar keeps the settings only.")
    link = RaceLink(prompt, example_of(prompt, inputs.examples()), budget, estimator, temperature or 0.0, clock,
                    profile_id or None, style.presenter(), batch=int(batch))
    address.show(race_link_params(link))


# ---------------------------------------------------------------- what a race runs
@dataclass
class Setup:
    """What a race on this page runs: the prompt and settings, the page's profiles, the lanes asked for."""

    prompt: str
    config: DecodeConfig | None
    max_new: int
    oracle: bool
    clock: str
    found: PageProfile
    problem: str = ""                # why the settings cannot run ("" when they can)
    dflash2: bool = False            # DFlash2's lane besides (a pair with a path selector)
    batch: int = 1                   # requests decoded together (the others: the example prompts after it)

    @property
    def key(self) -> tuple:
        """What the decoded lanes depend on (not the clock, nor the profile that prices them)."""
        return self.prompt, self.config, self.max_new, self.oracle, self.dflash2, self.found.sizing_id, self.batch


def batch_profile_notice(pair, setup: Setup) -> None:
    """At a batch, when the profile the trees are sized from has no verify cost at a batch (one
    measured from the sidebar, a request at a time): say so, and offer one that has it, the pair's
    shipped reference profile, else the H200 x Qwen3-8B roofline estimate."""
    from taps.batch_cost import of_profile
    from taps.studio.page_profile import batch_offer

    sizing = setup.found.sizing
    if setup.batch <= 1 or sizing is None or of_profile(sizing) is not None:
        return
    offer, label = batch_offer(pair)
    st.warning(f"A race at a batch sizes batch-aware TAPS and prices its steps with the verify cost at a batch, and "
               f"the {profile_name(sizing)} has none (the sidebar measures one request at a time; "
               "`python -m taps.bench --batch 1 --measure` measures this machine's at a batch).")
    st.button(f"Race on {label}", key="race_batch_profile", on_click=profiles.use_profile, args=(offer,))


