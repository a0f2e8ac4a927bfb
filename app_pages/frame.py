"""The app's frame: what every run sets up once before its page (the CSS, kept settings, the
navigation, presenter mode's top bar, the sidebar's boxes) and the link's profile banner on top of
the pages whose runs a profile sizes."""

from __future__ import annotations

import streamlit as st

from app_pages import address
from app_pages.browser_window import viewport
from app_pages.classroom import lecturer_sidebar
from app_pages.inputs import keep, restore_kept
from app_pages.machine_box import about_this_machine
from app_pages.page_style import BASE_CSS, PRESENTER_CSS, presenter
from app_pages.pair_box import loaded_pair, pair_sidebar
from app_pages.profile_box import profile_sidebar
from app_pages.profiles import BANNER_DRAWN, profile_banner
from taps.studio.layout import LABEL_SIZES
from taps.studio.link import presenter_of

PROFILE_PAGES = ("Step through", "Race and sweep", "Failure cases")    # the pages whose runs a profile sizes


def frame(pages: list) -> st.navigation:
    """Set up every run once: CSS, kept settings, navigation, presenter toggle, sidebar. Returns
    the page to run."""
    state = st.session_state
    restore_kept()
    state["_compact_page"] = False           # a page that lays out compactly says so (compact_page)
    if "presenter" not in state:             # a link's presenter=1 opens the lecture in presenter mode
        state["presenter"] = bool(presenter_of(address.query()))
    state[BANNER_DRAWN] = False
    state.setdefault("label_size", "M")
    keep("presenter", "label_size")
    on_stage = presenter()
    st.html(BASE_CSS + (PRESENTER_CSS if on_stage else ""))
    page = st.navigation(pages, position="hidden" if on_stage else "sidebar")
    address.visit(page.title)
    if on_stage:
        top = st.container(horizontal=True, vertical_alignment="center", gap="small", key="presenter_bar")
        with top:
            for item in pages:
                st.page_link(item, label=item.title, icon=item.icon)
            st.segmented_control("Labels", list(LABEL_SIZES), key="label_size", width="content",
                                 help="Token label size on the tree figures, for the back row (S, M, L)")
            st.toggle("Presenter mode", key="presenter", help="Controls collapse and the tree fits the screen.")
        state["_presenter_bar"] = top
    with st.sidebar:
        if not on_stage:
            st.toggle("Presenter mode", key="presenter",
                      help="For a projector: the sidebar and settings collapse and the tree fits the screen "
                           "(1280×720 and up) with its title, legend and axis.")
        lecturer_sidebar()
        pair_sidebar()
        pair = loaded_pair()
        profile_sidebar(pair)
        about_this_machine(pair)
        viewport()
    if page.title in PROFILE_PAGES:          # a link's profile set earlier in this session: said on top, in a
        with st.container():                 # place there on every run, so the page's own places never move
            profile_banner(pair)
    return page
