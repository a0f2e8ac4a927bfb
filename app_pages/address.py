"""The address bar, the one place the app touches `st.query_params`: what the address holds (every
parameter with all its values, read by `taps.studio.link`'s parsers) and putting a page's link
there (made by the link module's writers). The app remembers the last link it read or wrote, so a
link that arrives later in a browser session (a challenge card followed, the browser's back
button) is read as a new one, and the app's own link (still in the address after a page switch
that keeps it) is not."""

from __future__ import annotations

import streamlit as st

OWN = "_address_own"             # the parameters the app last read or wrote


def query() -> dict[str, list[str]]:
    """Every parameter of the address, with all its values (a link's parsers take the last)."""
    return {name: st.query_params.get_all(name) for name in st.query_params}


def arrived() -> dict[str, list[str]] | None:
    """The address's parameters when they are a link the app has not read or written yet, else
    None; from now on they count as read."""
    params = query()
    if not params or params == st.session_state.get(OWN):
        return None
    st.session_state[OWN] = params
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
