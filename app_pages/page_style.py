"""How a page looks: type that reads on a projector (BASE_CSS), presenter mode and the compact
layout of a short window, the pixels a tree figure gets, and figures drawn in the browser's theme
(once per round and view for a whole class: `taps.studio.drawn`)."""

from __future__ import annotations

import streamlit as st

from app_pages.browser_window import DEFAULT_VIEWPORT
from app_pages.classroom import class_settings
from app_pages.svg_picture import picture
from taps.studio.layout import Plot, plot_for

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
    size = st.session_state.get("viewport_size", DEFAULT_VIEWPORT)
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
        picture(key, svg)
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

