"""The app's frame and the furniture its pages share: type that reads on a projector, presenter
mode, settings kept across pages, the model pair and this machine's latency profile in the
sidebar, widgets built from `taps.config`, and the prompt picker. Pages import this; the engine
(`taps/`) never does.
"""

from __future__ import annotations

from dataclasses import fields

import streamlit as st

from app_pages import widgets as app_widgets
from taps import ModelPair
from taps.config import MAX_BUDGET, DecodeConfig, check_value, field_spec
from taps.flags import range_text
from taps.studio.app_state import default_pair_source, describe_source, load_pair_from_source
from taps.studio.layout import Plot
from taps.studio.speed import profile_name

DEVICES = ("auto", "cpu", "cuda")
OWN_PROMPT = "(type your own)"
THIS_MACHINE = "this machine"
KEPT = "_kept_settings"          # the keys of every setting drawn so far in this browser session

BASE_CSS = """
<style>
html, body, [class*="css"] { font-size: 17px; }
.stMarkdown p, .stMarkdown li, .stCaption, label { font-size: 1.02rem; }
[data-testid="stMetricValue"] { font-size: 1.9rem; }
[data-testid="stMetricLabel"] p, [data-testid="stMetricLabel"] div { font-size: 0.98rem; white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricLabel"] { min-height: 1.3rem; }
.stButton button p, .stDownloadButton button p { white-space: nowrap; }
[data-testid="stWidgetLabel"] p { white-space: normal; word-break: normal; overflow-wrap: normal; }
h1 { font-size: 2.1rem !important; }
[data-testid="stMainBlockContainer"] { padding-top: 2.2rem; }
</style>
"""
PRESENTER_CSS = """
<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"],
header[data-testid="stHeader"] { display: none !important; }
[data-testid="stMainBlockContainer"] { padding: 0.6rem 1.2rem 1rem 1.2rem !important; max-width: 100% !important; }
[data-testid="stMetricValue"] { font-size: 1.6rem; }
</style>
"""
SIDEBAR_PX = 300                  # what the sidebar and the page's padding take from the window's width
PRESENTER_CHROME_PX = 300         # presenter mode: window height minus the tree figure's (buttons, counters, tabs)
NORMAL_CHROME_PX = 110            # otherwise: the tree fits one screen once scrolled to


# ---------------------------------------------------------------------------- buttons that act once
class Clicks:
    """A button's clicks, counted by its callback, and how many of them its page has acted on."""

    def __init__(self) -> None:
        self.count = self.handled = 0

    def click(self) -> None:
        # Plain Python, no Streamlit call: any access to st.session_state in a callback is a point
        # where Streamlit stops the callback if another rerun request is pending (the viewport
        # widget's, say), and the click would be lost with it.
        self.count += 1

    def take(self) -> bool:
        """True once for each batch of clicks not acted on yet."""
        if self.handled >= self.count:
            return False
        self.handled = self.count
        return True


def action_button(where, label: str, key: str, **kwargs) -> bool:
    """A button whose action the caller runs exactly once per click. Streamlit calls a button's
    callback once per click, but whether the run's body then sees the button pressed depends on
    what else happens: a rerun request that arrives while the run that handled a click is still
    drawing (the viewport widget reporting a new size, say) makes Streamlit start over with the
    button still pressed (acting again would decode a second round), and a run stopped after its
    callbacks leaves the next one without the press (acting on the press alone would lose the
    click). So the callback counts clicks, in a plain object (a callback that touches
    st.session_state can be stopped there by a pending rerun request, and the click lost with
    it), and this returns True while a counted click is not acted on yet, whatever the button
    returns. (A whole-page rerun request that reaches Streamlit just after a click's can still
    drop the click before any callback runs: the viewport widget, the one thing that asked for
    such reruns unprompted, reruns a fragment instead; `app_widgets.viewport`.)
    (Overlapping runs are the other way to lose or double a click: `.streamlit/config.toml` turns
    fast reruns off, and the Step page holds its controller's lock while it steps or draws.)"""
    clicks = st.session_state.setdefault(f"{key}__clicks", Clicks())
    where.button(label, key=key, on_click=clicks.click, **kwargs)
    return clicks.take()


# ---------------------------------------------------------------------------- settings that persist
def keep(*keys: str) -> None:
    """Remember widget keys whose values must survive a visit to another page (Streamlit forgets
    the state of a widget that a run does not draw)."""
    st.session_state.setdefault(KEPT, set()).update(keys)


def restore_kept() -> None:
    state = st.session_state
    for key in state.get(KEPT, ()):
        if key in state:
            state[key] = state[key]


def _help(name: str, extra: str = "") -> str:
    spec = field_spec(name)
    lo, hi = spec["min"], spec["max"]
    limits = f" ({range_text(lo, hi)})" if lo is not None or hi is not None else ""
    text = f"{spec['help'][0].upper()}{spec['help'][1:]}{limits}; default {spec['default']}."
    return text + (f" {extra}" if extra else "")


def setting(name: str, key: str, label: str, where=None, default=None, extra_help: str = "", **options):
    """A widget for one decode setting, its default and help from `taps.config`. Numbers are typed
    into boxes with no limits of their own, so a value out of range reaches `DecodeConfig.validate`
    and gets the engine's message instead of being clamped or kept in silence."""
    where = where or st
    spec = field_spec(name)
    state = st.session_state
    state.setdefault(key, spec["default"] if default is None else default)
    keep(key)
    help_text = _help(name, extra_help)
    if spec["choices"] is not None:
        return where.selectbox(label, spec["choices"], key=key, help=help_text, **options)
    if isinstance(state[key], float) or isinstance(spec["default"], float):
        return where.number_input(label, key=key, step=options.pop("step", 0.1), format=options.pop("format", "%.2f"),
                                  help=help_text, **options)
    return where.number_input(label, key=key, step=1, help=help_text, **options)


MAIN_SETTINGS = ("selector", "estimator", "budget", "temperature", "block_size", "max_new_tokens")
LABELS = {"taps_mode": "TAPS mode", "ddtree_mode": "DDTree mode", "lambda_node": "λ node", "lambda_depth": "λ depth",
          "top_k": "Top-K per depth", "score_cap": "Score cap", "pool_factor": "Pool factor"}


def more_settings(prefix: str, shown: tuple[str, ...], per_row: int = 5) -> dict:
    """Widgets for every decode setting a page does not show itself, straight from DecodeConfig's
    fields (a new engine setting appears here by itself). Returns {name: value}."""
    names = [f.name for f in fields(DecodeConfig) if f.name not in shown and f.metadata["flag"]]
    values = {}
    for start in range(0, len(names), per_row):
        cols = st.columns(per_row)
        for col, name in zip(cols, names[start:start + per_row]):
            label = LABELS.get(name, name.replace("_", " ").capitalize())
            options = {"step": 0.001, "format": "%.3f"} if name == "lambda_depth" else {}
            values[name] = setting(name, f"{prefix}_{name}", label, col, **options)
    return values


def build_config(pair: ModelPair | None, **values) -> tuple[DecodeConfig | None, str]:
    """The DecodeConfig of these page values, or (None, the engine's message) when one is out of
    range or the pair cannot run them."""
    try:
        for name, value in values.items():
            check_value(name, value)
        config = DecodeConfig(**values)
        config.validate(pair)
    except ValueError as exc:
        return None, str(exc)
    return config, ""


# ---------------------------------------------------------------------------- presenter mode, sizes
def presenter() -> bool:
    return bool(st.session_state.get("presenter", False))


def settings_area(label: str = "Prompt and settings"):
    """Where a page draws its prompt and settings: the page itself, or in presenter mode a popover
    button in the top bar (the controls collapse and the figure gets the screen)."""
    if presenter() and "_presenter_bar" in st.session_state:
        return st.session_state["_presenter_bar"].popover(label, icon=":material/tune:")
    return st.container()


def tree_plot(share: float = 1.0, reserve: int = 0) -> Plot:
    """The pixels a tree figure has on this page: the main column's width (times `share` for a
    figure in a column) and the window's height less what presenter mode or the page keeps above
    (and `reserve` more for controls drawn above the figure). At least 360 px high on a page that
    scrolls; in presenter mode, where everything must fit the window, at least 300 px."""
    size = st.session_state.get("viewport_size", app_widgets.DEFAULT_VIEWPORT)
    on_stage = presenter()
    width = size.get("main") or (size["width"] - (40 if on_stage else SIDEBAR_PX + 80))
    height = size["height"] - (PRESENTER_CHROME_PX if on_stage else NORMAL_CHROME_PX) - reserve
    return Plot(width=int(max(480, width * share)), height=int(max(300 if on_stage else 360, height)))


def chart(fig, key: str, **options) -> None:
    from taps.studio.figures import PLOT_CONFIG

    st.plotly_chart(fig, key=key, theme=None, config=options.pop("config", PLOT_CONFIG), **options)


# ---------------------------------------------------------------------------- the model pair
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


def current_pair(stop: bool = True) -> ModelPair | None:
    """The pair the sidebar loaded; without one, a message (and, with `stop`, the page ends there)."""
    state = st.session_state
    pair, error = _try_load(state.get("pair_source", default_pair_source()), state.get("pair_device", "auto"))
    if pair is None:
        st.error(f"{error} Type another pair folder in the sidebar.")
        if stop:
            st.stop()
    return pair


# ---------------------------------------------------------------------------- latency profiles
def profile_limit(pair: ModelPair) -> int:
    """The largest tree the app measures a profile for: the biggest budget, or what the pair's
    context can hold."""
    return min(MAX_BUDGET, max(64, pair.max_context - 2))


def machine_profile(pair: ModelPair | None, budget: int = 0):
    """This machine's saved latency profile for `pair` (never measured here), covering trees of
    `budget` nodes as far as the pair can verify them: (profile, why not)."""
    from taps.profiles import saved_profile

    if pair is None:
        return None, "no model pair is loaded"
    return saved_profile(pair, max_nodes=min(budget, profile_limit(pair)))


@st.cache_data(show_spinner=False)
def _references(pair_name: str | None) -> dict:
    """Reference profiles measured for the pair `pair_name` (all of them when None)."""
    from taps.cost_model import reference_profiles

    return reference_profiles(pair_name)


def _pair_references(pair: ModelPair | None) -> dict:
    """The reference profiles that price this pair's rounds: none without a pair."""
    return _references(pair.name) if pair is not None else {}


def model_profile(pair: ModelPair | None):
    """The profile modelled speed-ups are computed with: this machine's, or a reference one."""
    choice = st.session_state.get("model_profile", THIS_MACHINE)
    references = _pair_references(pair)
    if choice != THIS_MACHINE and choice in references:
        return references[choice]
    return machine_profile(pair)[0]


def short_profile_name() -> str:
    """The chosen model profile in a few words, for metric labels ("this machine", "nvidia-h200")."""
    choice = st.session_state.get("model_profile", THIS_MACHINE)
    return choice if choice == THIS_MACHINE else "-".join(choice.split("-")[:2])


def _measure(pair: ModelPair) -> None:
    from taps.eval.measure import forget_profiles, measure_and_save

    bar = st.progress(0.0, text="Measuring this machine's latency profile…")
    try:
        measure_and_save(pair, max_nodes=profile_limit(pair), progress=lambda share, text: bar.progress(
            min(max(share, 0.0), 1.0), text=f"Measuring: {text}"))
    except (RuntimeError, ValueError) as exc:
        st.error(f"Could not measure a latency profile: {exc}")
        return
    finally:
        bar.empty()
    forget_profiles()
    st.session_state["profile_notice"] = "Measured and saved: every run from now on sizes its trees from it."


def profile_sidebar(pair: ModelPair | None) -> None:
    """This machine's latency profile (when measured, a re-measure button) and which profile the
    modelled speed-ups use."""
    st.subheader("Latency profile")
    profile, why = machine_profile(pair)
    if pair is not None:
        if profile is not None:
            st.caption(f"This machine: measured {profile.measured_at or 'at an unknown time'}, {profile.repeats} "
                       f"repeats, trees up to {max(profile.sizes)} nodes. Every run reads it, so a demo replays.")
        else:
            st.caption(f"Not measured yet ({why}). TAPS's cost mode sizes trees from it; measuring takes "
                       "about a minute and is saved for next time.")
        label = "Re-measure latency profile" if profile is not None else "Measure latency profile"
        if st.button(label, key="profile_measure_button", width="stretch"):
            _measure(pair)
            st.rerun()
        notice = st.session_state.pop("profile_notice", None)
        if notice:
            st.success(notice)
    references = _pair_references(pair)
    others = {name: p.pair for name, p in _references(None).items() if name not in references}
    options = [THIS_MACHINE, *references]
    st.session_state.setdefault("model_profile", THIS_MACHINE)
    if st.session_state["model_profile"] not in options:
        st.session_state["model_profile"] = THIS_MACHINE
    keep("model_profile")
    st.radio("Model the speed on", options, key="model_profile",
             format_func=lambda name: "this machine's profile" if name == THIS_MACHINE else
             f"{name} (reference)",
             help="Modelled speed-up = τ × AR step / round time, both read from this profile. A reference profile "
                  "was measured on other hardware (an NVIDIA H200 by our GPU check): the same rounds, priced "
                  "there.")
    chosen = model_profile(pair)
    st.caption("Modelled figures use: " + (profile_name(chosen) if chosen is not None else
                                            "nothing yet (measure this machine's profile)"))
    if pair is not None and others:
        st.caption("Not offered: " + "; ".join(f"{name} (measured for {owner or 'an unnamed pair'}, not {pair.name})"
                                              for name, owner in others.items())
                   + ". A profile prices the rounds of the pair it was timed with.")


# ---------------------------------------------------------------------------- prompts
@st.cache_data(show_spinner=False)
def examples() -> list[dict]:
    from taps.eval.prompts import example_prompts

    return example_prompts()


def prompt_picker(prefix: str, height: int, caption: str | None = None) -> str:
    """A prompt box with an example-prompt menu beside it, keyed `<prefix>_prompt` and
    `<prefix>_example`; picking an example fills the box. Returns the prompt text."""
    state = st.session_state
    items = examples()
    prompt_key, example_key = f"{prefix}_prompt", f"{prefix}_example"

    def use_example() -> None:
        chosen = next((e for e in items if e["title"] == state[example_key]), None)
        if chosen is not None:
            state[prompt_key] = chosen["prompt"]

    state.setdefault(prompt_key, items[0]["prompt"])
    state.setdefault(example_key, items[0]["title"])
    keep(prompt_key, example_key)
    left, right = st.columns([3, 1])
    with right:
        st.selectbox("Example prompt", [OWN_PROMPT] + [e["title"] for e in items], key=example_key,
                     on_change=use_example)
        if caption:
            st.caption(caption)
    with left:
        return st.text_area("Prompt", key=prompt_key, height=height)


# ---------------------------------------------------------------------------- the frame
def frame(pages: list) -> st.navigation:
    """Set up every run once: CSS, kept settings, navigation, presenter toggle, sidebar. Returns
    the page to run."""
    state = st.session_state
    restore_kept()
    state.setdefault("presenter", False)
    keep("presenter")
    on_stage = presenter()
    st.html(BASE_CSS + (PRESENTER_CSS if on_stage else ""))
    page = st.navigation(pages, position="hidden" if on_stage else "sidebar")
    if on_stage:
        top = st.container(horizontal=True, vertical_alignment="center", gap="small", key="presenter_bar")
        with top:
            for item in pages:
                st.page_link(item, label=item.title, icon=item.icon)
            st.toggle("Presenter mode", key="presenter", help="Controls collapse and the tree fits the screen.")
        state["_presenter_bar"] = top
    with st.sidebar:
        if not on_stage:
            st.toggle("Presenter mode", key="presenter",
                      help="For a projector: the sidebar and settings collapse and the tree fits the screen "
                           "(1280×720 and up) with its title, legend and axis.")
        pair_sidebar()
        pair, _ = _try_load(state["pair_source"], state["pair_device"])
        profile_sidebar(pair)
        app_widgets.viewport()
    return page
