"""The sidebar's latency profile box: which profile the runs and the modelled figures use,
measuring this machine's own in the background (the lecturer's alone on a class server), and the
what-if profiles (shipped references, measured target shapes, roofline estimates)."""

from __future__ import annotations

import streamlit as st

from app_pages.classroom import class_settings, is_lecturer, lecturer_only
from app_pages.inputs import keep
from app_pages.profiles import (
    OVERRIDE,
    ROOFLINE,
    SHAPES,
    THIS_MACHINE,
    model_profile,
    page_profile,
    profile_label,
    use_profile,
)
from taps import ModelPair, roofline
from taps.studio import speed
from taps.studio.page_profile import PageProfile


def _references(pair_name: str | None) -> dict:
    """Shipped measured profiles of the pair `pair_name` (all of them when None), read once per
    process and profiles folder (`speed.shipped_profiles`)."""
    return speed.shipped_profiles(pair_name)


def _pair_references(pair: ModelPair | None) -> dict:
    """The shipped measured profiles that price this very pair's rounds: none without a pair."""
    if pair is None:
        return {}
    from taps.profiles import same_pair

    return {name: p for name, p in _references(pair.name).items() if same_pair(p, pair)}


def _finished(job) -> bool:
    """Whether `job` has ended; the first time a browser session sees it ended, the sidebar's notice
    says how (saved, or why not)."""
    if job is None or not job.done:
        return False
    if st.session_state.get("_measure_seen") != id(job) and job.owner == session_token():
        st.session_state["_measure_seen"] = id(job)         # said only to the browser session that measured
        st.session_state["profile_notice"] = (
            f"Could not measure a latency profile: {job.error}" if job.error else
            "Measured and saved: every run from now on sizes its trees from this machine's profile.")
    return True


@st.fragment(run_every=1.0)
def _measure_progress(pair: ModelPair) -> None:
    """The background measurement's progress bar, redrawn every second; when it ends, the whole
    page runs again so runs switch to the new profile."""
    job = speed.measure_job(pair)
    if _finished(job):
        st.rerun(scope="app")
    if job is not None:
        st.progress(job.share, text=f"Measuring this machine in the background: {job.text}")


def session_token() -> str:
    """A token of this browser session, to tell a notice meant for it from one meant for another."""
    state = st.session_state
    if "_session_token" not in state:
        import uuid

        state["_session_token"] = uuid.uuid4().hex
    return state["_session_token"]


def _measure_controls(pair: ModelPair, found: PageProfile) -> None:
    job = speed.measure_job(pair)
    if job is not None and not job.done:
        _measure_progress(pair)
        return
    _finished(job)
    profile = found.sizing
    if found.sizing_id == speed.MACHINE:
        by = " by the lecturer" if class_settings().served else ""
        st.caption(f"This machine: measured{by} {profile.measured_at or 'at an unknown time'}, "
                   f"{profile.repeats} repeats, trees up to {max(profile.sizes)} nodes. Every run reads it, so a "
                   "demo replays.")
    elif profile is not None and not found.link_id:        # the shipped reference, until this machine's is measured
        st.caption(speed.MEASURE_REASON[0].upper() + speed.MEASURE_REASON[1:] + ".")
    label = "Re-measure latency profile" if found.default_id == speed.MACHINE else "Measure latency profile"
    allowed = is_lecturer()
    if st.button(label, key="profile_measure_button", width="stretch", disabled=not allowed,
                 help="Measures this machine's own profile in the background (about a minute): the lecture goes on, "
                      "and runs switch to it when it is saved. Timings taken while the app decodes are slower: "
                      "measure while it is idle.") and allowed:
        speed.start_measuring(pair, owner=session_token())
        st.rerun()
    if not allowed:
        lecturer_only("this machine's latency profile (every page sizes its trees from it)")


def _profile_notices() -> None:
    notice = st.session_state.pop("profile_notice", None)
    if notice:
        (st.warning if notice.startswith("Could not") else st.success)(notice)


def _model_the_speed(pair: ModelPair | None, run_id: str) -> None:
    """The "Model the speed on" choice: the runs' profile, a shipped reference measured for this pair,
    or a roofline what-if (device × target shape), labelled as an estimate."""
    references = [name for name in _pair_references(pair) if name != run_id]
    shapes = speed.shape_profiles()
    options = [THIS_MACHINE, *references, *([SHAPES] if shapes else []), ROOFLINE]
    state = st.session_state
    state.setdefault("model_profile", THIS_MACHINE)
    if state["model_profile"] not in options:
        state["model_profile"] = THIS_MACHINE
    keep("model_profile", "roofline_device", "roofline_model", "shape_profile")
    st.radio("Model the speed on", options, key="model_profile",
             format_func=lambda name: _runs_option(run_id) if name == THIS_MACHINE else
             "roofline estimate (what-if hardware)" if name == ROOFLINE else
             "measured target shape (what-if hardware)" if name == SHAPES else f"{name} (reference)",
             help="Modelled speed-up = τ × AR step / round time, both read from this one profile: measured ones "
                  "were timed on real hardware; a measured target shape prices this pair's rounds at the costs "
                  "timed for a public target's shape (random weights) on another device; a roofline estimate "
                  "prices them on a device and target shape from published constants, " + roofline.FORMULA + ".")
    if state["model_profile"] == ROOFLINE:
        _roofline_pickers(pair)
    elif state["model_profile"] == SHAPES:
        _shape_picker(pair, shapes)
    chosen = model_profile(pair)
    st.caption("Modelled figures use: " + (speed.profile_name(chosen) if chosen is not None else "no latency profile"))


def _runs_option(run_id: str) -> str:
    """The first "Model the speed on" option: the profile the runs use, named."""
    if run_id == speed.MACHINE:
        return "this machine's profile"
    found = _references(None).get(run_id)
    return f"the runs' profile ({f'the {found.device_label()}' if found is not None else run_id or 'none yet'})"


def _roofline_pickers(pair: ModelPair | None) -> None:
    data = roofline.load_data()
    devices, models = list(data["devices"]), [*([pair.name] if pair is not None else []), *data["models"]]
    state = st.session_state
    state.setdefault("roofline_device", "h200")
    state.setdefault("roofline_model", "qwen3-8b")
    st.selectbox("Device", devices, key="roofline_device", format_func=lambda d: data["devices"][d]["name"],
                   help="Published peak FLOP/s and memory bandwidth (the reference CPU's fitted to its measured "
                        "profile); per-layer launch cost assumed. Sources: assets/profiles/roofline.json.")
    st.selectbox("Target shape", models, key="roofline_model",
                    format_func=lambda m: data["models"].get(m, {}).get("name", f"{m} (this pair)"),
                    help="The target's layers, widths and vocabulary; the drafter is DFlash's for Qwen3 (5 layers "
                         "at the target's width) or this pair's own.")
    _ratio_caption(pair, "**Roofline estimate**, not measured", " (1: a 64-node tree costs what one token costs)",
                   help=roofline.FORMULA)


def _ratio_caption(pair: ModelPair | None, lead: str, tail: str = "", help: str | None = None) -> None:
    """verify(64) / verify(1) of the what-if's profile, beside the runs' own where that is measured."""
    found = page_profile(pair)
    if found.model is not None:
        against = (f"; {roofline.ratio(found.sizing):.2f} on {profile_label(found.sizing_id)}"
                   if found.sizing is not None and found.sizing.kind == "measured" else "")
        st.caption(f"{lead}: verify(64) / verify(1) = {roofline.ratio(found.model):.2f} there{against}{tail}.",
                   help=help)


def _shape_picker(pair: ModelPair | None, shapes: dict) -> None:
    """The measured shape profile the what-if prices rounds with (device × target shape × context)."""
    state = st.session_state
    if state.get("shape_profile") not in shapes:
        state["shape_profile"] = next(iter(shapes))
    st.selectbox("Measured on", list(shapes), key="shape_profile",
                 format_func=lambda name: speed.shape_option(shapes[name]),
                 help="Costs timed by `python -m taps.eval.shape_profile` (scripts/gpu_check.sh) for a randomly "
                      "initialised target and DFlash drafter at a public checkpoint's shape: its verify curve, "
                      "drafter pass and AR step. Random weights accept nothing: the acceptance (τ, tree sizes) stays "
                      "this pair's own.")
    _ratio_caption(pair, "**Measured shape**, random weights")


def profile_sidebar(pair: ModelPair | None) -> None:
    """Which profile the runs' trees and the modelled figures use (named, always), measuring this
    machine's own in the background, and the what-if profiles."""
    st.subheader("Latency profile")
    found = page_profile(pair)
    if pair is not None:
        if found.sizing is None:
            st.info(f"No latency profile for {pair.name} on this device yet, and none is shipped for it: TAPS's "
                    "cost mode needs one (measuring takes about a minute), its reach mode does not.")
        else:
            st.caption(f"**In use:** {profile_label(found.sizing_id)}.", help=speed.profile_name(found.sizing))
        if st.session_state.get(OVERRIDE) and found.link_problem:
            st.caption(f"The link's profile {st.session_state[OVERRIDE]} does not apply here ({found.link_problem}).")
        if st.session_state.get(OVERRIDE) and st.button("Use this machine's default profile", key="profile_default"):
            use_profile(None)
            st.rerun()
        _measure_controls(pair, found)
        _profile_notices()
    _model_the_speed(pair, found.sizing_id)
    others = {name: p.pair for name, p in _references(None).items()
              if name not in _pair_references(pair) and p.kind != speed.SHAPE_KIND}
    if pair is not None and others:
        st.caption("Not offered: " + "; ".join(f"{name} (measured for {owner or 'an unnamed pair'}, not {pair.name})"
                                              for name, owner in others.items())
                   + ". A measured profile prices the rounds of the pair it was timed with; for other hardware "
                     "with this pair, pick a roofline estimate.")
