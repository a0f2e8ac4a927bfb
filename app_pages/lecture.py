"""Streamlit glue for Step through's lecture features: the link in the address bar (read once per
browser session, written after every change), the session's latency profile and its id, and the
stage a new round opens at. The parsing and checking is `taps.studio.link`'s (no streamlit)."""

from __future__ import annotations

import streamlit as st

from app_pages import common as ui
from taps.record import STAGES
from taps.studio.link import TABS, StepLink, parse_step_link, settings_of, step_link_params

# the Step page's tabs, and the link's view names for them
TAB_LABELS = ("Draft tree", "Stage by stage", "Marginal vs path", "All rounds", "Export")
TAB_OF_VIEW = {"tree": "Draft tree", "compare": "Marginal vs path", "rounds": "All rounds", "export": "Export"}
VIEW_OF_TAB = {label: view for view, label in TAB_OF_VIEW.items()}
STAGE_TAB = "Stage by stage"
READ_KEY = "step_link_read"          # set once the address has been read in this browser session


def widget_key(name: str) -> str:
    """The Step page's widget key of a decode setting."""
    return {"max_new_tokens": "step_max_new"}.get(name, f"step_{name}")


def session_profile(pair, budget: int = 0):
    """(profile, profile id) the runs of this browser session size trees from (`ui.run_profile`)."""
    return ui.run_profile(pair, budget)


def read_link(pair, defaults: dict) -> StepLink | None:
    """On the first run of a browser session on this page: the link in the address bar, applied to
    the page's widgets (call before they are drawn); its messages are kept for `link_messages`.
    None when there was nothing to read (or it was read before)."""
    state = st.session_state
    if state.get(READ_KEY):
        return None
    state[READ_KEY] = True
    params = {name: st.query_params.get_all(name) for name in st.query_params}
    if not params:
        return None
    examples = ui.examples()
    link, messages = parse_step_link(params, examples, defaults, pair)
    state["step_link_messages"] = messages
    titles = {e["id"]: e["title"] for e in examples}
    if {"example", "prompt"} & link.given or "prompt" not in state:
        state["step_prompt"] = link.prompt
        state["step_example"] = titles.get(link.example, ui.OWN_PROMPT) if link.example else ui.OWN_PROMPT
    if {"example", "prompt", "chat"} & link.given or "step_chat" not in state:
        state["step_chat"] = link.chat
    for name, value in link.settings.items():
        if name in link.given or widget_key(name) not in state:
            state[widget_key(name)] = value
    open_view(link.view, link.round)
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


def link_messages() -> None:
    messages = st.session_state.get("step_link_messages") or []
    if messages:
        st.warning("This link had settings the page could not use:\n\n" + "\n".join(f"- {m}" for m in messages))


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
    prompt (as typed) runs formatted by the pair's chat template."""
    example = next((e["id"] for e in ui.examples() if e["prompt"] == prompt), None)
    link = StepLink(dict(defaults, **settings_of(config)), prompt, example, number, current_view(),
                    ui.presenter(), profile_id, chat=chat)
    params = step_link_params(link, defaults)
    now = {name: st.query_params.get(name) for name in st.query_params}
    if now != params:
        st.query_params.from_dict(params)


def profile_notice(pair, own_id: str | None) -> None:
    """When the link named another profile than this browser uses: say what may differ and offer
    the link's own."""
    link: StepLink | None = st.session_state.get("step_link")
    if link is None or not link.profile or link.profile == own_id:
        return
    label = getattr(ui, "profile_label", lambda pid: pid)
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.info(f"The link was made with the latency profile **{label(link.profile)}**; this browser uses "
             f"**{label(own_id) if own_id else 'none'}**. Modelled figures and cost-mode trees may differ from the "
             "link's.")
    from taps.studio.speed import resolve_profile

    _, why = resolve_profile(pair, link.profile)
    if why:
        row.caption(f"The link's profile cannot be used here: {why}.")
        return
    use = getattr(ui, "use_profile", None)
    if use is not None and row.button("Use the link's profile", key="step_use_link_profile"):
        use(link.profile)
        st.rerun()
