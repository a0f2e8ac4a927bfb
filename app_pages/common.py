"""The app's frame and the furniture its pages share: type that reads on a projector, presenter
mode, settings kept across pages, the model pair and this machine's latency profile in the
sidebar, widgets built from `taps.config`, and the prompt picker. Pages import this; the engine
(`taps/`) never does.
"""

from __future__ import annotations

from dataclasses import fields

import streamlit as st

from app_pages import address
from app_pages import widgets as app_widgets
from app_pages.machine_box import about_this_machine, portable_paths
from taps import ModelPair, roofline
from taps.config import DecodeConfig, check_value, field_spec
from taps.eval.prompts import LOOK_FOR_WHERE
from taps.flags import range_text
from taps.studio import lecturer, speed
from taps.studio.app_state import default_pair_source, describe_source, load_pair_from_source
from taps.studio.layout import LABEL_SIZES, Plot, plot_for
from taps.studio.link import presenter_of
from taps.studio.page_profile import PageProfile
from taps.studio.page_profile import page_profile as find_page_profile

DEVICES = ("auto", "cpu", "cuda")
OWN_PROMPT = "(type your own)"
THIS_MACHINE = "this machine"
KEPT = "_kept_settings"          # the keys of every setting drawn so far in this browser session

BASE_CSS = """
<style>
html, body, [class*="css"] { font-size: 17px; }
.stMarkdown p, .stMarkdown li, .stCaption, label { font-size: 1.02rem; }
[data-testid="stMetricValue"] { font-size: clamp(1.6rem, 2.05vw, 1.9rem); }
[data-testid="stMetricDelta"] div, [data-testid="stMetricDelta"] p { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
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
PRESENTER_CHROME_PX = 324         # presenter mode: window height minus the tree figure's (buttons, counters, tabs)
COMPACT_CHROME_PX = 330           # a short window's compact Step page (presenter's, the header hidden too)
NORMAL_CHROME_PX = 110            # otherwise: the tree fits one screen once scrolled to
SHORT_WINDOW_PX = 800             # a window at most this tall (a 1280x720 projector) is short
COMPACT_CSS = """
<style>
header[data-testid="stHeader"] { display: none !important; }
[data-testid="stMainBlockContainer"] { padding: 0.6rem 1.2rem 1rem 1.2rem !important; }
[data-testid="stMetricValue"] { font-size: 1.6rem; }
</style>
"""


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


def queue_notice(slot):
    """`on_wait` for a move that waits for the decode service (`taps.studio.serve`): says in `slot`
    how many jobs are ahead of this page's while it waits."""
    def told(ahead: int) -> None:
        if ahead > 0:
            slot.info(f"Waiting for the decoder: {ahead} step{'s' if ahead != 1 else ''} ahead of yours "
                      "(other pages on this server are stepping too).", icon=":material/hourglass_top:")
        else:
            slot.info("Decoding your step…", icon=":material/hourglass_top:")
    return told


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


def short_window() -> bool:
    """Whether the browser has reported a window at most SHORT_WINDOW_PX tall."""
    size = st.session_state.get("viewport_size")
    return bool(size) and 0 < size.get("height", 0) <= SHORT_WINDOW_PX


def compact() -> bool:
    """Whether a page that shows a run lays it out to fit one screen: in presenter mode, and in the
    default mode on a short window (a 1280x720 projector), where the sidebar stays, the header goes,
    buttons, counters and tree share the window and the page's settings follow under them
    (`compact_page` sets it up)."""
    return presenter() or short_window()


def compact_page() -> bool:
    """Called by a page that lays out compactly (Step through): in the default mode on a short
    window, the header's room goes to the figure (COMPACT_CSS). Returns `compact()`."""
    if compact() and not presenter():
        st.html(COMPACT_CSS)
        st.session_state["_compact_page"] = True
    return compact()


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
    on_stage, fitted = presenter(), st.session_state.get("_compact_page", False)
    width = size.get("main") or (size["width"] - (40 if on_stage else SIDEBAR_PX + 80))
    chrome = PRESENTER_CHROME_PX if on_stage else COMPACT_CHROME_PX if fitted else NORMAL_CHROME_PX
    return plot_for(int(max(480, width * share)), int(max(300 if on_stage or fitted else 360,
                                                          size["height"] - chrome - reserve)),
                    on_stage, st.session_state.get("label_size") or "M")


def dark_theme() -> bool:
    """Whether the browser shows Streamlit's dark theme (the charts follow it)."""
    try:
        return getattr(st.context.theme, "type", None) == "dark"
    except AttributeError:
        return False


def round_chart(record, view: tuple, build, key: str, light: int = 0, **options) -> None:
    """A figure of a round, built once for every page that shows this round at this view (a class
    on one link: `taps.studio.drawn`) and in this page's theme; `view` holds everything the figure
    depends on besides the round, `build()` makes it. With `light` (the figure's width in px), the
    same figure drawn as static SVG (`taps.studio.figures.light`), also built once: no chart library
    in the browser, hover text as tooltips, no zoom."""
    from taps.studio.drawn import drawn_figures, figure_key
    from taps.studio.figures.style import apply_theme

    dark = dark_theme()
    drawn, fig_key = drawn_figures(), figure_key(*view, dark)
    fig = drawn.get(record, fig_key, lambda: apply_theme(build(), dark))
    if light:
        from taps.studio.figures.light import light_svg

        svg = drawn.get(record, (*fig_key, "light", light), lambda: light_svg(fig, light))
        app_widgets.picture(key, svg)
        return
    _plot(fig, key, options)


LIGHT_TREES = "step_light_trees"


def light_trees_default() -> bool:
    """Whether a page draws round trees light (static SVG) until its user chooses: when the app is
    served to a class, where every student's page would otherwise load and run the chart library
    (on one laptop, on the server's own cores)."""
    return class_settings().served


def chart(fig, key: str, **options) -> None:
    from taps.studio.figures.style import apply_theme

    _plot(apply_theme(fig, dark_theme()), key, options)


def _plot(fig, key: str, options: dict) -> None:
    """A themed figure on the page, with the app's plotly config unless `options` gives one."""
    from taps.studio.figures import PLOT_CONFIG

    st.plotly_chart(fig, key=key, theme=None, config=options.pop("config", PLOT_CONFIG), **options)


# ---------------------------------------------------------------------------- the lecturer
LECTURER = "_lecturer"                  # this browser session gave the lecturer's password
LECTURER_TRIES = "_lecturer_tries"      # wrong passwords given in this browser session
MAX_LECTURER_TRIES = 5


def class_settings() -> lecturer.ClassSettings:
    """Whether the app is served to a class (a lecturer password in the server's secrets) and the
    folders pairs may be read from (`taps.studio.lecturer`)."""
    return lecturer.class_settings(st.secrets)


def is_lecturer() -> bool:
    """Whether this browser session may change what every session sees (the pair, this machine's
    latency profile): always on a lone user's machine, else once it gave the lecturer's password."""
    return not class_settings().served or bool(st.session_state.get(LECTURER))


def _sign_in() -> None:
    state = st.session_state
    given, state["lecturer_password_input"] = state.get("lecturer_password_input", ""), ""
    tries = int(state.get(LECTURER_TRIES, 0))
    if tries >= MAX_LECTURER_TRIES:
        state["lecturer_notice"] = "Too many wrong passwords in this browser session: open the app again to retry."
    elif class_settings().check(given):
        state[LECTURER], state[LECTURER_TRIES] = True, 0
        state["lecturer_notice"] = "Signed in as the lecturer (in this browser session)."
    else:
        state[LECTURER_TRIES] = tries + 1
        state["lecturer_notice"] = "That is not the lecturer's password: nothing changed."


def _sign_out() -> None:
    st.session_state[LECTURER] = False


FOLLOW = "follow_lecturer"               # a student's page follows the lecturer's Step-through view
ROOM_SEEN = "_room_seen"                 # the lecturer's last view this page followed (its number)


def following() -> bool:
    """Whether this page follows the lecturer's screen (a student on a class server who asked to)."""
    return class_settings().served and not is_lecturer() and bool(st.session_state.get(FOLLOW))


def publish_view(params: dict[str, str]) -> None:
    """The signed-in lecturer's Step-through link, for the students who follow it (`taps.studio.room`)."""
    if class_settings().served and is_lecturer():
        from taps.studio.room import class_room

        class_room().publish(params)


def follow_lecturer() -> None:
    """On Step through, before the page reads its link: when this page follows the lecturer and the
    lecturer's view moved on since this page last took it, open the lecturer's link; and every 2 s
    a cheap look at the room (a full rerun only when it moved on)."""
    if not following():
        return
    from taps.studio.room import class_room

    state, shown = st.session_state, class_room().current()
    if shown is not None and shown.seq != state.get(ROOM_SEEN):
        state[ROOM_SEEN] = shown.seq
        address.follow(shown.params)             # read as a link by the page, on this very run
    _room_poll()


@st.fragment(run_every=2.0)
def _room_poll() -> None:
    from taps.studio.room import class_room

    shown = class_room().current() if following() else None
    if shown is not None and shown.seq != st.session_state.get(ROOM_SEEN):
        st.rerun()


def lecturer_sidebar() -> None:
    """On a class server, the lecturer's sign-in (or, signed in, what the lecturer may do); for a
    student, the toggle that makes Step through follow the lecturer's screen."""
    if not class_settings().served:
        return
    state = st.session_state
    if state.get(LECTURER):
        st.caption("**Lecturer**: you load pairs and measure this machine's latency profile for the whole class. "
                   "Students who follow you see your Step-through view.")
        st.button("Sign out", key="lecturer_sign_out", on_click=_sign_out)
    else:
        st.toggle("Follow the lecturer", key=FOLLOW,
                  help="Step through shows the lecturer's prompt, settings, round and view as the lecturer moves "
                       "on (within 2 s); your own Step still works, until the lecturer's next move.")
        with st.expander("Lecturer", icon=":material/key:"):
            st.text_input("Lecturer password", type="password", key="lecturer_password_input",
                          help="Set in the server's .streamlit/secrets.toml (docs/serving.md). Students need none.")
            st.button("Sign in", key="lecturer_sign_in", on_click=_sign_in)
    notice = state.pop("lecturer_notice", None)
    if notice:
        (st.success if notice.startswith("Signed in") else st.warning)(notice)


def lecturer_only(what: str) -> None:
    """The one line a student sees under a control only the lecturer has."""
    st.caption(f":material/lock: {lecturer.LECTURER_ONLY}: {what}.")


# ---------------------------------------------------------------------------- the model pair
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


# ---------------------------------------------------------------------------- latency profiles
OVERRIDE = "_profile_override"   # a profile id a link asked for (use_profile)
ROOFLINE = "roofline"            # the "Model the speed on" choice whose device and model are picked below it
SHAPES = "measured shape"        # the choice whose shape profile (assets/profiles, measured-shape) is picked below it
PROFILE_PAGES = ("Step through", "Race and sweep", "Failure cases")    # the pages whose runs a profile sizes
BANNER_DRAWN = "_profile_banner_drawn"


def profile_limit(pair: ModelPair) -> int:
    """The largest tree the app measures a profile for: the biggest budget, or what the pair's
    context can hold."""
    return speed.profile_limit(pair)


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
    pair = _try_load(st.session_state.get("pair_source", default_pair_source()),
                     st.session_state.get("pair_device", "auto"))[0]
    return short_label(page_profile(pair).model_id)


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
    left, right = st.columns([1.8, 1])      # the menu wide enough for the longest title at 1280x720
    with right:
        st.selectbox("Example prompt", [OWN_PROMPT] + [e["title"] for e in items], key=example_key,
                     on_change=use_example)
        chosen = next((e for e in items if e["title"] == state[example_key] and e["prompt"] == state[prompt_key]),
                      None)
        if chosen is not None and chosen.get("look_for"):
            where = f" (round {chosen['round']})" if chosen.get("round") else ""
            st.caption(f"**Look for{where}:** {chosen['look_for']} {LOOK_FOR_WHERE}")
        elif caption:
            st.caption(caption)
    with left:
        return st.text_area("Prompt", key=prompt_key, height=height)


# ---------------------------------------------------------------------------- the frame
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
        pair, _ = _try_load(state["pair_source"], state["pair_device"])
        profile_sidebar(pair)
        about_this_machine(pair)
        app_widgets.viewport()
    if page.title in PROFILE_PAGES:          # a link's profile set earlier in this session: said on top, in a
        with st.container():                 # place there on every run, so the page's own places never move
            profile_banner(pair)
    return page
