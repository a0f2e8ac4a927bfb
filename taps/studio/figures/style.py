"""The one style every figure of the app and every bench plot uses: fonts, the Okabe-Ito palette,
each policy's colour, marker symbol and bar pattern (read from `taps.policies`, never kept here),
stage colours, node and edge styles with their legend names, the log colour scale, and the small
text helpers that keep labels readable and safe.

Readable on a projector and with colour-blindness: large fonts, the Okabe-Ito palette and the
Cividis colour scale; a policy carries its symbol and pattern besides its colour, a node's verdict
its marker shape and outline, never hue alone. Token labels carry a halo (the background's colour
round every glyph). Figures are drawn light; `apply_theme(fig, dark=True)` turns any of them dark
(the plotly_dark template, light text, light outlines), and puts the mode bar upright at the right
edge, where it covers no title.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

from ...policies import DDTREE, PALETTE, TAPS, Policy, label_policy
from ...record import STAGES
from ..failures import visible_text
from ..layout import FONT_PX, Plot

INK, DARK_INK = "#111111", "#F2F2F2"           # text
PAPER, DARK_PAPER = "#FFFFFF", "#0E1117"       # background (Streamlit's dark theme's)
LABEL_FAMILY = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT = dict(family="Source Sans Pro, Arial, sans-serif", size=18, color=INK)


def halo(background: str) -> str:
    """A CSS text-shadow that rings every glyph with `background`: text stays readable over an edge."""
    return ", ".join([f"{dx}px {dy}px 1px {background}" for dx in (-1, 1) for dy in (-1, 1)]
                     + [f"0 0 3px {background}", f"0 0 4px {background}"])


def label_font(size: int = FONT_PX, dark: bool = False) -> dict:
    """Token labels' font: monospace (a label's width is known in advance), with a halo."""
    return dict(family=LABEL_FAMILY, size=size, color=DARK_INK if dark else INK,
                shadow=halo(DARK_PAPER if dark else PAPER))


LABEL_FONT = label_font()
COLOR_SCALE = "Cividis"
LOG_FLOOR = 1e-4
DEFAULT_PLOT = Plot(width=1180, height=640)
LEGEND_ROW = 22                   # pixels per legend entry (font 14, no group gap)
# the mode bar shows on hover, upright at the figure's right edge (never over a title), with only
# the buttons a lecture uses: zoom, pan and reset
PLOT_CONFIG = {"displaylogo": False, "displayModeBar": "hover",
               "modeBarButtonsToRemove": ["select2d", "lasso2d", "toImage", "zoomIn2d", "zoomOut2d", "autoScale2d"]}
MODEBAR = dict(orientation="v", bgcolor="rgba(0,0,0,0)")
MODEBAR_PX = 40                   # what the upright mode bar takes from the figure's right edge

STAGE_COLORS = dict(zip(STAGES, [PALETTE["sky"], PALETTE["yellow"], PALETTE["purple"], PALETTE["orange"],
                                 PALETTE["blue"], PALETTE["grey"]]))
STAGE_PATTERNS = dict(zip(STAGES, ["/", "", ".", "x", "", "+"]))

NODE_STYLES = {
    "unselected": dict(name="pool, not verified", symbol="circle", size=7, opacity=0.45, line=dict(width=0)),
    "candidate": dict(name="candidate", symbol="circle", size=9, opacity=0.9,
                      line=dict(width=0.5, color="#444444")),
    "picked": dict(name="picked for verifying", symbol="circle", size=15, opacity=1.0,
                   line=dict(width=2, color="#000000")),
    "waste": dict(name="rejected-prefix waste", symbol="x", size=13, opacity=1.0,
                  line=dict(width=1.5, color=PALETTE["purple"])),
    "rejected": dict(name="rejected sibling", symbol="diamond", size=14, opacity=1.0,
                     line=dict(width=2.5, color=PALETTE["vermillion"])),
    "accepted": dict(name="accepted", symbol="circle", size=17, opacity=1.0, line=dict(width=3, color="#000000")),
    "root": dict(name="root: last token", symbol="square", size=16, opacity=1.0, line=dict(width=2, color="#000000")),
    "bonus": dict(name="bonus: target's token", symbol="star", size=21, opacity=1.0,
                  line=dict(width=1.5, color="#000000")),
    "more": dict(name="+N more: grouped to fit", symbol="circle-open-dot", size=16, opacity=1.0,
                 line=dict(width=2.5, color=PALETTE["grey"])),
    "unknown": dict(name="verdict unknown", symbol="circle-open", size=12, opacity=1.0,
                    line=dict(width=2, color=PALETTE["grey"])),
    "both": dict(name="picked by both", symbol="circle", size=15, opacity=1.0, line=dict(width=1.5, color="#000000")),
    "only_marginal": dict(name=f"only {DDTREE.label}'s pick", symbol="diamond", size=16, opacity=1.0,
                          line=dict(width=3, color="#000000")),
    "only_reach": dict(name=f"only {TAPS.label}'s pick", symbol="square", size=14, opacity=1.0,
                       line=dict(width=3, color="#000000")),
}
EDGE_STYLES = {
    "pool": dict(color="rgba(110,110,110,0.25)", width=1),
    "verified": dict(color="rgba(50,50,50,0.75)", width=2),
    "waste": dict(color=PALETTE["purple"], width=2.5, dash="dot"),
    "path": dict(color=PALETTE["blue"], width=7),
    "bonus": dict(color=PALETTE["orange"], width=4, dash="dash"),
}
EDGE_NAMES = {"pool": "pool edge", "verified": "verified edge", "waste": "under a rejected prefix",
              "path": "accepted path", "bonus": "to the bonus token"}


# ---------------------------------------------------------------------------- policies
def run_policy(label: str) -> Policy | None:
    """The registered policy a run label (`taps/online@16`, `ddtree`, `ar`) names, or None."""
    return label_policy(str(label))


def policy_colour(label: str) -> str:
    """A run's colour: its policy's, grey for a run of no registered policy."""
    found = run_policy(label)
    return found.colour if found else PALETTE["grey"]


def policy_symbol(label: str) -> str:
    found = run_policy(label)
    return found.symbol if found else "circle"


def policy_pattern(label: str) -> str:
    found = run_policy(label)
    return found.pattern if found else ""


def is_baseline(label: str) -> bool:
    """Whether a run is the baseline every speed-up is measured against (AR)."""
    found = run_policy(label)
    return found is not None and found.baseline


# ---------------------------------------------------------------------------- scales and text
def log_scale(values: Sequence[float | None]) -> list[float]:
    """log10 of probabilities, floored at LOG_FLOOR (None and NaN at the floor)."""
    return [math.log10(min(max(float(v), LOG_FLOOR), 1.0)) if v is not None and not math.isnan(float(v))
            else math.log10(LOG_FLOOR) for v in values]


def colour_axis(title: str, length_px: int, horizontal: bool = False) -> dict:
    """A log colour scale; its bar upright in the figure's right margin, or `horizontal` under the
    legend there (tree figures, where height is what a projector lacks)."""
    ticks = list(range(int(math.log10(LOG_FLOOR)), 1))
    labels = [f"≤{LOG_FLOOR:g}" if t == ticks[0] else f"{10.0 ** t:g}" for t in ticks]
    bar = dict(title=dict(text=title, side="top", font=dict(size=14)), tickvals=ticks, ticktext=labels,
               lenmode="pixels", len=length_px, thickness=12 if horizontal else 16, x=1.01, xanchor="left", y=0,
               yanchor="bottom", tickfont=dict(size=12 if horizontal else 13))
    if horizontal:
        bar.update(orientation="h", ticktext=[text.replace("≤0.0001", "≤1e-4") for text in labels])
    return dict(colorscale=COLOR_SCALE, cmin=ticks[0], cmax=0, colorbar=bar)


def display_token(text: str, limit: int = 12) -> str:
    """Token text made visible: spaces, newlines and tabs get symbols; long tokens are cut."""
    shown = visible_text(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def fmt(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def escape(text: str) -> str:
    """Text safe for a plotly label (plotly reads <, > and & as markup; quotes are fine)."""
    return html.escape(text, quote=False)


def wrap(text: str, chars: int) -> list[str]:
    """Words of `text` in lines of at most `chars` characters."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])


CHART_PX = 900          # a chart's width on a page at 1280x720 (the main column, sidebar open) and in the CLI's PNGs
TEXT_EM = 0.55          # Source Sans Pro's (and Arial's) widest average glyph advance, in em, with slack
SUP = 0.7               # plotly draws <sup> text at 70% of its font size


def fit_lines(text: str, width_px: float, font_px: float) -> list[str]:
    """`text` in lines that fit `width_px` at `font_px` (words kept whole; a word longer than a line
    is a line of its own)."""
    return wrap(text, max(12, int(width_px / (TEXT_EM * font_px))))


def chart_title(title: str, subtitle: str, width_px: float, font_px: float) -> tuple[str, int]:
    """A chart's title and its subtitle (smaller, as <sup>) as plotly markup, each wrapped to
    `width_px`, so that no line runs past the figure's edge; and the lines' height in px."""
    big = fit_lines(title, width_px, font_px)
    small = fit_lines(subtitle, width_px, SUP * font_px) if subtitle else []
    markup = "<br>".join([escape(line) for line in big] + [f"<sup>{escape(line)}</sup>" for line in small])
    return markup, int(math.ceil(1.3 * font_px * (len(big) + len(small))))     # plotly's lines: 1.3 em apart


def figure_title(lines: list[str], plot: Plot) -> tuple[dict, int]:
    """A title (the first line) with a subtitle of the other lines, wrapped to the figure's width;
    and the top margin they need."""
    chars = max(40, int((plot.width - 30 - MODEBAR_PX) / 8.2))
    small = [piece for line in lines[1:] if line for piece in wrap(line, chars)]
    title = dict(text=lines[0], x=0.01, xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=10),
                 font=dict(size=20), subtitle=dict(text="<br>".join(escape(s) for s in small), font=dict(size=15)))
    return title, 44 + 20 * len(small)


# ---------------------------------------------------------------------------- light and dark
_DARK_COLOURS = {"#000000": DARK_INK, INK: DARK_INK, "#444444": "#BBBBBB", "white": DARK_PAPER, PAPER: DARK_PAPER,
                 "rgba(50,50,50,0.75)": "rgba(225,225,225,0.75)", "rgba(110,110,110,0.25)": "rgba(200,200,200,0.3)",
                 "#666666": "#AAAAAA"}


def _dark(colour):
    if isinstance(colour, str):
        return _DARK_COLOURS.get(colour.upper() if colour.startswith("#") else colour, colour)
    if isinstance(colour, (list, tuple)):
        return [_dark(c) for c in colour]
    return colour


def apply_theme(fig, dark: bool = False):
    """Any figure of the app in the page's theme: light as drawn, or with `dark` the plotly_dark
    template on Streamlit's dark background, light text and outlines (ink, node outlines, edges,
    label halos); the mode bar upright at the right edge either way. Returns `fig`."""
    fig.update_layout(modebar=dict(MODEBAR, color="#BBBBBB" if dark else None, activecolor=DARK_INK if dark else None))
    if not dark:
        return fig
    fig.update_layout(template="plotly_dark", paper_bgcolor=DARK_PAPER, plot_bgcolor=DARK_PAPER,
                      font_color=DARK_INK, legend_font_color=DARK_INK, title_font_color=DARK_INK,
                      hoverlabel=dict(bgcolor="#262730", font_color=DARK_INK))
    for trace in fig.data:
        for part in ("textfont", "marker", "line"):
            obj = getattr(trace, part, None)
            if obj is None:
                continue
            if part == "textfont":
                if obj.color is not None:
                    obj.color = _dark(obj.color)
                if obj.shadow:
                    obj.shadow = halo(DARK_PAPER)
                continue
            if getattr(obj, "color", None) is not None:
                obj.color = _dark(obj.color)
            outline = getattr(obj, "line", None)
            if outline is not None and outline.color is not None:
                outline.color = _dark(outline.color)
    for note in fig.layout.annotations or ():
        if note.font and note.font.color:
            note.font.color = _dark(note.font.color)
    return fig
