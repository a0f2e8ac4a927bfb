"""The sidebar's model pair: the pair loaded once per process for every browser session, the box
that picks it (the lecturer's alone on a class server), and the pair a page runs on."""

from __future__ import annotations

import streamlit as st

from app_pages.classroom import class_settings, is_lecturer, lecturer_only
from app_pages.inputs import keep
from app_pages.machine_box import portable_paths
from taps import ModelPair
from taps.studio.app_state import default_pair_source, describe_source, load_pair_from_source

DEVICES = ("auto", "cpu", "cuda")


@st.cache_resource(show_spinner="Loading the model pair (once per process)…", max_entries=3)
def cached_pair(source: str, device: str, roots: tuple[str, ...] | None = None, portable: tuple[str, ...] = ()
                ) -> ModelPair:
    """The model pair, loaded once per process for every browser session (on a class server only
    from its allowed folders, `roots`), for the portable paths in force (`portable`: `taps.machine`)."""
    from pathlib import Path

    return load_pair_from_source(source, device, None if roots is None else tuple(Path(r) for r in roots))


def _try_load(source: str, device: str) -> tuple[ModelPair | None, str | None]:
    settings = class_settings()
    roots = tuple(str(r) for r in settings.roots) if settings.served else None
    try:
        return cached_pair(source, device, roots, portable_paths()), None
    except Exception as exc:  # noqa: BLE001 - any load failure becomes a message, the page stays up
        where = (f"'{source.strip()}'" if source.strip() else "the shipped pair") if settings.served else \
            describe_source(source)
        return None, f"Could not load the model pair from {where}: {exc}"


def _load_requested() -> None:
    st.session_state["pair_requested"] = True


def pair_sidebar() -> None:
    """The sidebar's pair picker. The pair source and device live in `st.session_state` (shared by
    the pages of one browser session); a source that fails to load leaves the last good one in use."""
    state = st.session_state
    state.setdefault("pair_source", default_pair_source())
    state.setdefault("pair_device", "auto")
    state.setdefault("pair_source_input", state["pair_source"])
    state.setdefault("pair_device_input", state["pair_device"])
    keep("pair_source_input", "pair_device_input")
    st.subheader("Model pair")
    if not is_lecturer():
        pair, _ = _try_load(state["pair_source"], state["pair_device"])
        st.text_input("Pair folder or hub id", value=pair.name if pair is not None else "", disabled=True,
                      key="pair_source_locked")
        if pair is not None:
            st.caption(f"Loaded: **{pair.name}** on {pair.device}")
        lecturer_only("the model pair (loading one fills this server's memory for everyone)")
        return
    st.text_input("Pair folder or hub id", key="pair_source_input",
                  help="A folder with pair.json, a target hub id, or `TARGET + DRAFTER` (folders or hub ids). "
                       "Empty: the shipped pair. Starts as $TAPS_PAIR when that is set.", on_change=_load_requested)
    st.selectbox("Device", DEVICES, key="pair_device_input", on_change=_load_requested)
    st.button("Load pair", key="pair_load_button", on_click=_load_requested)
    if state.pop("pair_requested", False):
        source, device = state["pair_source_input"].strip(), state["pair_device_input"]
        pair, error = _try_load(source, device)
        if pair is not None:
            state["pair_source"], state["pair_device"] = source, device
            state.pop("pair_error", None)
        else:
            state["pair_error"] = error
    pair, _ = _try_load(state["pair_source"], state["pair_device"])
    if state.get("pair_error"):
        st.error(state["pair_error"] + (" — still using the previous pair." if pair is not None else ""))
    if pair is not None:
        st.caption(f"Loaded: **{pair.name}** on {pair.device}")


def loaded_pair() -> ModelPair | None:
    """The pair the sidebar loaded, or None (no message: the sidebar says why)."""
    state = st.session_state
    return _try_load(state.get("pair_source", default_pair_source()), state.get("pair_device", "auto"))[0]


def current_pair(stop: bool = True) -> ModelPair | None:
    """The pair the sidebar loaded; without one, a message (and, with `stop`, the page ends there)."""
    state = st.session_state
    pair, error = _try_load(state.get("pair_source", default_pair_source()), state.get("pair_device", "auto"))
    if pair is None:
        st.error(f"{error} Type another pair folder in the sidebar.")
        if stop:
            st.stop()
    return pair

