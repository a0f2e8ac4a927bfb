"""Streamlit glue for Step through's lecture features: the link in the address bar (read when a new
one arrives, written after every change), the session's latency profile and its id, and the stage
a new round opens at. The parsing and writing is `taps.studio.link`'s (no streamlit); the address
bar is `app_pages.address`'s."""

from __future__ import annotations

import streamlit as st

from app_pages import address, classroom, inputs, profiles
from app_pages import page_style as style
from taps.record import STAGES
from taps.studio.link import TABS, StepLink, fits, parse_step_link, settings_of, step_link_params, too_long
from taps.studio.step_page import STAGE_TAB, widget_key

# the Step page's tabs, and the link's view names for them
TAB_LABELS = ("Draft tree", "Stage by stage", "Marginal vs path", "Candidates", "All rounds", "Export")
TAB_OF_VIEW = {"tree": "Draft tree", "compare": "Marginal vs path", "candidates": "Candidates", "rounds": "All rounds",
               "export": "Export"}
VIEW_OF_TAB = {label: view for view, label in TAB_OF_VIEW.items()}


def session_profile(pair, budget: int = 0):
    """(profile, profile id) the runs of this browser session size trees from (`profiles.run_profile`)."""
    return profiles.run_profile(pair, budget)


def read_link(pair, defaults: dict) -> StepLink | None:
    """When the address holds a link this page has not read or written (a link opened in a new
    browser session, a challenge card followed): that link, applied to the page's widgets (call
    before they are drawn), its profile to the session's runs; its messages are kept for
    `link_messages`. None when there was nothing new to read."""
    params = address.arrived()
    if params is None:
        return None
    state = st.session_state
    examples = inputs.examples()
    link, messages = parse_step_link(params, examples, defaults, pair)
    state["step_link_messages"] = messages
    titles = {e["id"]: e["title"] for e in examples}
    state["step_prompt"] = link.prompt
    state["step_example"] = titles.get(link.example, inputs.OWN_PROMPT) if link.example else inputs.OWN_PROMPT
    state["step_chat"] = link.chat
    for name, value in link.settings.items():
        if name in link.given or widget_key(name) not in state:
            state[widget_key(name)] = value
    if link.compare:
        state["step_compare_budget"] = link.compare
    else:
        state.pop("step_compare_budget", None)       # the first round opened sets it (the nodes it verified)
    open_view(link.view, link.round)
    if link.profile:                 # a profile other than the default is said on the page, with a way back
        profiles.use_profile(link.profile if link.profile != profiles.page_profile(pair).default_id else None)
    state["step_link"] = link
    return link


def open_view(view: str, number: int) -> None:
    """Open a link's view: a tab, or Stage by stage at a stage (of round `number`)."""
    state = st.session_state
    if view in STAGES:
        state["step_tab"] = STAGE_TAB
        state["step_stage"] = STAGES.index(view)
        state["step_stage_view"] = number
    else:
        state["step_tab"] = TAB_OF_VIEW.get(view, TAB_LABELS[0])


def link_messages(prompt: str = "") -> None:
    """The link's messages, and when `prompt` (the one on view) is longer than a link carries, that
    the address bar leaves it out and where to get a file that holds it."""
    messages = st.session_state.get("step_link_messages") or []
    if messages:
        st.warning("This link had settings the page could not use:\n\n" + "\n".join(f"- {m}" for m in messages))
    if not fits(prompt):
        st.info(f"No link replays this run: {too_long(prompt)}, so the address bar keeps the settings and the view "
                "but not the prompt. To share the run, download it with **Export → Run as JSON**; it opens with "
                "**Load a saved run** below.", icon=":material/link_off:")


def replay_notice(asked: int, shown: int) -> None:
    """When a link asked for a round past the run's last: say so, naming the round shown."""
    if asked > shown:
        st.warning(f"The link asks for round {asked}, but this run ends after round {shown}: showing round {shown}, "
                   "its last.")


def current_view() -> str:
    """The link's name for what is on view: a tab, or the stage in Stage by stage."""
    state = st.session_state
    tab = state.get("step_tab") or TAB_LABELS[0]
    if tab == STAGE_TAB:
        return STAGES[min(max(int(state.get("step_stage", 0)), 0), len(STAGES) - 1)]
    return VIEW_OF_TAB.get(tab, TABS[0])


def write_link(prompt: str, config: dict, number: int, defaults: dict, profile_id: str | None,
               chat: bool = False) -> None:
    """Put the link that replays this view in the address bar (only when it changed); `chat`: the
    prompt (as typed) runs formatted by the pair's chat template. A prompt longer than a link
    carries is left out (`link_messages` says so)."""
    example = next((e["id"] for e in inputs.examples() if e["prompt"] == prompt), None)
    view = current_view()
    compare = int(st.session_state.get("step_compare_budget") or 0) if view == "compare" else 0
    link = StepLink(dict(defaults, **settings_of(config)), prompt, example, number, view, style.presenter(), profile_id,
                    chat=chat, compare=compare)
    params = step_link_params(link, defaults)
    address.show(params)
    classroom.publish_view(params)                          # a class's lecturer: for the students who follow


def profile_notice(pair, own_id: str | None) -> None:
    """A link's profile that sizes this session's trees, or that does not apply here, said on the
    page with a way back (`profiles.profile_banner`)."""
    profiles.profile_banner(pair)
