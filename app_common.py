"""Page furniture shared by the app's pages: page set-up, the model-pair picker in the sidebar and
the pair loaded once per process. Pages import this; the engine (`taps/`) never does.
"""

from __future__ import annotations

import streamlit as st

from taps import ModelPair
from taps.app_state import default_pair_source, describe_source, load_pair_from_source

DEVICES = ("auto", "cpu", "cuda")
OWN_PROMPT = "(type your own)"
# every page's settings, kept while the user visits other pages (Streamlit forgets the state of a
# widget that a run does not draw); buttons and file uploaders cannot be set and are left out
KEPT_SETTINGS = (
    "step_prompt", "step_example", "step_selector", "step_estimator", "step_budget", "step_temperature",
    "step_block_size", "step_max_new", "step_taps_mode", "step_lambda_node", "step_lambda_depth", "step_endpoint_cap",
    "step_top_k", "step_beam_width", "step_pool_cap", "step_seed", "step_round_view", "step_color_by",
    "step_pool_shown", "step_compare_budget",
    "race_prompt", "race_example", "race_selectors", "race_estimator", "race_budget", "race_max_new",
    "race_temperature", "sweep_budgets",
    "fail_source", "fail_text", "fail_budget", "fail_estimator", "fail_taps_mode", "fail_max_new", "fail_limit",
    "fail_waste_threshold", "fail_color_by",
    "learn_preset", "learn_marginals", "learn_factor", "learn_budget", "learn_reject")
PROJECTOR_CSS = """
<style>
html, body, [class*="css"] { font-size: 18px; }
.stMarkdown p, .stMarkdown li, .stCaption, label, .stRadio label, .stSelectbox label { font-size: 1.05rem; }
[data-testid="stMetricValue"] { font-size: 2.1rem; }
[data-testid="stMetricLabel"] p { font-size: 1.0rem; }
h1 { font-size: 2.4rem !important; }
</style>
"""


def setup_page(title: str, icon: str, own_prefixes: tuple[str, ...] = ()) -> None:
    """Wide layout, a page title, larger type that reads on a projector, and the other pages'
    settings kept (this page's own widgets, named by `own_prefixes`, keep theirs by being drawn)."""
    st.set_page_config(page_title=f"{title} · TAPS Studio", page_icon=icon, layout="wide")
    st.html(PROJECTOR_CSS)
    for key in KEPT_SETTINGS:
        if key in st.session_state and not key.startswith(own_prefixes):
            st.session_state[key] = st.session_state[key]


@st.cache_resource(show_spinner="Loading the model pair (once per process)…", max_entries=3)
def cached_pair(source: str, device: str) -> ModelPair:
    """The model pair, loaded once per process for every browser session."""
    return load_pair_from_source(source, device)


def _try_load(source: str, device: str) -> tuple[ModelPair | None, str | None]:
    try:
        return cached_pair(source, device), None
    except Exception as exc:  # noqa: BLE001 - any load failure becomes a message, the page stays up
        return None, f"Could not load the model pair from {describe_source(source)}: {exc}"


def _load_requested() -> None:
    st.session_state["pair_requested"] = True


def pair_sidebar() -> ModelPair | None:
    """The sidebar's pair picker. Returns the loaded pair, or None after showing why not.

    The pair source and device live in `st.session_state` (shared by the pages of one browser
    session); a source that fails to load leaves the last good one in use."""
    state = st.session_state
    state.setdefault("pair_source", default_pair_source())
    state.setdefault("pair_device", "auto")
    state.setdefault("pair_source_input", state["pair_source"])
    with st.sidebar:
        st.subheader("Model pair")
        st.text_input("Pair folder or hub id", key="pair_source_input",
                      help="A folder with pair.json, a target hub id, or `TARGET + DRAFTER` (folders or hub "
                           "ids). Empty: the shipped pair. Starts as $TAPS_PAIR when that is set.",
                      on_change=_load_requested)
        st.selectbox("Device", DEVICES, key="pair_device_input", index=DEVICES.index(state["pair_device"]),
                     on_change=_load_requested)
        st.button("Load pair", key="pair_load_button", on_click=_load_requested)
        if state.pop("pair_requested", False):
            source, device = state["pair_source_input"].strip(), state["pair_device_input"]
            pair, error = _try_load(source, device)
            if pair is not None:
                state["pair_source"], state["pair_device"] = source, device
                state.pop("pair_error", None)
            else:
                state["pair_error"] = error
        pair, error = _try_load(state["pair_source"], state["pair_device"])
        if state.get("pair_error"):
            st.error(state["pair_error"] + (" — still using the previous pair." if pair is not None else ""))
        if pair is not None:
            st.caption(f"Loaded: **{pair.name}** on {pair.device}")
    if pair is None:
        st.error(f"{error} Type another pair folder in the sidebar.")
    return pair


def prompt_picker(prefix: str, height: int, caption: str | None = None) -> str:
    """A prompt box with an example-prompt menu beside it, keyed `<prefix>_prompt` and
    `<prefix>_example`; picking an example fills the box. Returns the prompt text."""
    from taps.prompts import example_prompts

    state = st.session_state
    examples = example_prompts()
    prompt_key, example_key = f"{prefix}_prompt", f"{prefix}_example"

    def use_example() -> None:
        chosen = next((e for e in examples if e["title"] == state[example_key]), None)
        if chosen is not None:
            state[prompt_key] = chosen["prompt"]

    state.setdefault(prompt_key, examples[0]["prompt"])
    state.setdefault(example_key, examples[0]["title"])
    left, right = st.columns([3, 1])
    with right:
        st.selectbox("Example prompt", [OWN_PROMPT] + [e["title"] for e in examples], key=example_key,
                     on_change=use_example)
        if caption:
            st.caption(caption)
    with left:
        return st.text_area("Prompt", key=prompt_key, height=height)
