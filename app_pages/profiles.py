"""Which latency profile a page uses: the profile its runs size their trees from (a link's, else
this machine's, else the shipped reference: `taps.studio.page_profile`), the one its modelled
figures are priced by (the sidebar's what-if), their names, and the banner that says a link's
profile is in force."""

from __future__ import annotations

import streamlit as st

from app_pages.pair_box import loaded_pair
from taps import ModelPair, roofline
from taps.studio import speed
from taps.studio.page_profile import PageProfile
from taps.studio.page_profile import page_profile as find_page_profile

THIS_MACHINE = "this machine"
OVERRIDE = "_profile_override"   # a profile id a link asked for (use_profile)
ROOFLINE = "roofline"            # the "Model the speed on" choice whose device and model are picked below it
SHAPES = "measured shape"        # the choice whose shape profile (assets/profiles, measured-shape) is picked below it
BANNER_DRAWN = "_profile_banner_drawn"


def use_profile(profile_id: str | None) -> None:
    """Size this browser session's trees from the profile `profile_id` names (a link's `profile=`),
    or, with None or "", go back to the default (this machine's, else the shipped reference)."""
    st.session_state[OVERRIDE] = profile_id or None


def _what_if_id(pair: ModelPair | None) -> str | None:
    """The sidebar's "Model the speed on" choice as a profile id; None for the runs' own."""
    choice = st.session_state.get("model_profile", THIS_MACHINE)
    if choice == ROOFLINE:
        return roofline.profile_id(st.session_state.get("roofline_device", "h200"),
                                   st.session_state.get("roofline_model", "qwen3-8b"))
    if choice == SHAPES:
        shapes = speed.shape_profiles()
        chosen = st.session_state.get("shape_profile")
        return chosen if chosen in shapes else next(iter(shapes), None)
    return None if choice == THIS_MACHINE else choice


def page_profile(pair: ModelPair | None, budget: int = 0) -> PageProfile:
    """This page's profiles, one per role (`taps.studio.page_profile`): trees sized from a link's
    profile when one is in force and applies, else this machine's, else the shipped reference;
    every modelled figure priced by the sidebar's what-if, else by that same profile."""
    return find_page_profile(pair, budget, st.session_state.get(OVERRIDE), _what_if_id(pair))


def run_profile(pair: ModelPair | None, budget: int = 0):
    """(profile, id) runs size their trees from (`page_profile`'s sizing role); (None, "") only when
    none exists."""
    found = page_profile(pair, budget)
    return found.sizing, found.sizing_id


def model_profile(pair: ModelPair | None):
    """The profile every modelled figure of the page is priced by (`page_profile`'s modelled role):
    the runs' own, or the sidebar's what-if (never mixed: one profile prices a whole page)."""
    return page_profile(pair).model


def profile_label(profile_id: str) -> str:
    """A profile id in a few words, to name on a page what its figures and trees used."""
    return speed.profile_label(profile_id)


def short_label(profile_id: str) -> str:
    """A profile id in a few words for a metric's label ("this machine", "reference CPU", "roofline
    H200 × Qwen3-8B")."""
    if profile_id == speed.MACHINE:
        return THIS_MACHINE
    if profile_id.startswith(roofline.PREFIX):
        return profile_label(profile_id).replace("roofline estimate: ", "") + " (roofline estimate)"
    shapes = speed.shape_profiles()
    if profile_id in shapes:
        return speed.shape_option(shapes[profile_id]) + " (measured shape)"
    return "reference CPU" if "cpu" in profile_id else "-".join(profile_id.split("-")[:2])


def short_profile_name() -> str:
    """The profile the page's modelled figures use, in a few words (`short_label`)."""
    return short_label(page_profile(loaded_pair()).model_id)


def _back_to_default() -> None:
    use_profile(None)


def profile_banner(pair: ModelPair | None) -> None:
    """On a page whose runs a profile sizes: when a link's (or a challenge card's) profile sizes this
    browser session's trees, say so, with what a 64-node tree costs on it and on the default, and
    offer to go back; when a link's profile does not apply here, say why. Drawn once per run."""
    state = st.session_state
    if state.get(BANNER_DRAWN) or not state.get(OVERRIDE) or pair is None:
        return
    state[BANNER_DRAWN] = True
    found = page_profile(pair)
    default = ("this machine's profile" if found.default_id == speed.MACHINE else
               f"the {short_label(found.default_id)}" if found.default_id else "no profile")
    row = st.container(horizontal=True, vertical_alignment="center", gap="small", key="profile_banner")
    if found.link_id:
        ratios = f"verify(64) / verify(1) = {roofline.ratio(found.sizing):.2f} there"
        if found.default is not None:
            ratios += f", {roofline.ratio(found.default):.2f} on {default}"
        row.info(f"A link set this session's latency profile: trees are sized from "
                 f"**{profile_label(found.link_id)}** ({ratios}), not from {default}.", icon=":material/link:")
    else:
        row.warning(f"The link's latency profile {state[OVERRIDE]} does not apply here ({found.link_problem}): "
                    f"trees are sized from {default}.")
    row.button(f"Back to {default}", key="profile_back", on_click=_back_to_default,
               help="Size trees from this browser's default profile again (on every page)")

