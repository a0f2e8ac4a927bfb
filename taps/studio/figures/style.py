"""The one style every figure of the app and every bench plot uses: fonts, the Okabe-Ito palette,
each policy's colour, marker symbol and bar pattern (read from `taps.policies`, never kept here),
stage colours, node and edge styles with their legend names, the log colour scale, and the small
text helpers that keep labels readable and safe.

Readable on a projector and with colour-blindness: large fonts, the Okabe-Ito palette and the
Cividis colour scale; a policy carries its symbol and pattern besides its colour, a node's verdict
its marker shape and outline, never hue alone.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

from ...policies import DDTREE, PALETTE, TAPS, Policy, label_policy
from ...record import STAGES
from ..failures import visible_text
from ..layout import FONT_PX, Plot

FONT = dict(family="Source Sans Pro, Arial, sans-serif", size=18, color="#111111")
LABEL_FONT = dict(family="DejaVu Sans Mono, Menlo, Consolas, monospace", size=FONT_PX, color="#111111",
                  shadow="auto")
COLOR_SCALE = "Cividis"
LOG_FLOOR = 1e-4
DEFAULT_PLOT = Plot(width=1180, height=640)
LEGEND_ROW = 22                   # pixels per legend entry (font 14, no group gap)
PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d", "toImage"]}

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


def figure_title(lines: list[str], plot: Plot) -> tuple[dict, int]:
    """A title (the first line) with a subtitle of the other lines, wrapped to the figure's width;
    and the top margin they need."""
    chars = max(40, int((plot.width - 30) / 8.2))
    small = [piece for line in lines[1:] if line for piece in wrap(line, chars)]
    title = dict(text=lines[0], x=0.01, xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=10),
                 font=dict(size=20), subtitle=dict(text="<br>".join(escape(s) for s in small), font=dict(size=15)))
    return title, 44 + 20 * len(small)
