"""The address bar, the one place the app touches `st.query_params`: what the address holds (every
parameter with all its values, read by `taps.studio.link`'s parsers) and putting a page's link
there (made by the link module's writers).

A page reads the address as a link only when one arrives: on the first run of a browser session or
of a visit to the page (a link opened, a challenge card followed to another page), or after
`follow` (a card for the page one is on). Within a visit the address only echoes the links the page
writes, and a rerun the browser asks for before it has taken the latest one (a resize while a click
is handled) brings an older one back: that is never read as a link. Nor is the app's own last link,
still in the address when a page switch keeps it."""

from __future__ import annotations

import streamlit as st

OWN = "_address_own"             # the parameters the app last read or wrote
PAGE = "_address_page"           # the page of the last full run
ARRIVING = "_address_arriving"   # this run is the first of a session or of a visit to its page
FOLLOWED = "_address_followed"   # a link was opened on the page one is on


def query() -> dict[str, list[str]]:
    """Every parameter of the address, with all its values (a link's parsers take the last)."""
    return {name: st.query_params.get_all(name) for name in st.query_params}


def visit(page: str) -> None:
    """The frame's record of the page each full run shows: whether this run arrives at it."""
    state = st.session_state
    state[ARRIVING] = state.get(PAGE) != page
    state[PAGE] = page


def arrived() -> dict[str, list[str]] | None:
    """The address's parameters when a link arrives with this run (see above), else None; from now
    on they count as read."""
    state = st.session_state
    if not (state.get(ARRIVING) or state.pop(FOLLOWED, False)):
        return None
    params = query()
    if not params or params == state.get(OWN):
        return None
    state[OWN] = params
    return params


def show(params: dict[str, str]) -> None:
    """Put a page's link in the address bar (only when it changed), remembered as the app's own."""
    own = {name: [value] for name, value in params.items()}
    if query() != own:
        st.query_params.from_dict(params)
    st.session_state[OWN] = own


def follow(params: dict[str, str]) -> None:
    """Open a link on the page one is on (a challenge card for this page): the next run reads it."""
    st.query_params.from_dict(params)
    st.session_state[FOLLOWED] = True
