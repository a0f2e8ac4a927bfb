"""The sidebar's what-if profiles: "Model the speed on" the runs' own profile, a shipped reference
measured for this pair, a measured target shape or a roofline estimate (device × target shape), and
the shipped profiles that price this pair's rounds."""

from __future__ import annotations

import streamlit as st

from app_pages.inputs import keep
from app_pages.profiles import ROOFLINE, SHAPES, THIS_MACHINE, model_profile, page_profile, profile_label
from taps import ModelPair, roofline
from taps.studio import speed


def references(pair_name: str | None) -> dict:
    """Shipped measured profiles of the pair `pair_name` (all of them when None), read once per
    process and profiles folder (`speed.shipped_profiles`)."""
    return speed.shipped_profiles(pair_name)


def pair_references(pair: ModelPair | None) -> dict:
    """The shipped measured profiles that price this very pair's rounds: none without a pair."""
    if pair is None:
        return {}
    from taps.profiles import same_pair

    return {name: p for name, p in references(pair.name).items() if same_pair(p, pair)}



def model_the_speed(pair: ModelPair | None, run_id: str) -> None:
    """The "Model the speed on" choice: the runs' profile, a shipped reference measured for this pair,
    or a roofline what-if (device × target shape), labelled as an estimate."""
    references = [name for name in pair_references(pair) if name != run_id]
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
    found = references(None).get(run_id)
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


