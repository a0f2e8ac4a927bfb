"""The candidates view's figure (issue 50): one round's block as a grid, draft positions across and
each position's top-K drafter candidates down (probability as a bar's length, the token's text on
it), the target's own token boxed, and on the same grid each selector's verified nodes in its
colour and marker (filled: accepted; open: rejected; faded: under a rejected prefix) with its edges.
Below the grid, per position, the headroom over the run so far: how often the target's token was
the drafter's top-1, and how often among its top-K. Built from a `taps.studio.candidates.CandidatesView`.

No marker and no line is drawn over a token's text: each cell is the token's text on the left and,
to its right, a lane per selector (`Lanes`: as many as the view has selectors, two to a lane column
where the row is tall enough); a selector's edge runs from its marker in the parent's lane, between
the columns of text, to the left end of the child's text, where that selector's marker sits in the
child's lane to the right of it. Every rank shown on a row of its own gets at least `MIN_ROW_PX`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from ...policies import DFLASH, DFLASH2, PALETTE, policy
from ..candidates import CandidatesView
from ..layout import CHAR_EM, Plot, cut_label
from .style import DEFAULT_PLOT, FONT, INK, LABEL_FAMILY, MODEBAR, display_token, escape, figure_title, halo

TEXT_LEFT = -0.46                  # a token's text starts here (cell units from its centre)
ENTRY = -0.48                      # where a selector's edge ends: just left of the child's text
BAR = "rgba(86,180,233,0.35)"      # the probability bars (sky, light: the text on them stays readable)
CHAINS = (DFLASH.name, DFLASH2.name)
# TAPS is drawn twice where the pair has a path selector; its tree over DFlash2's candidates (the selector
# estimator) in a colour and shape of its own (no registered policy has them)
OWN_STYLE = {"taps/selector": (PALETTE["vermillion"], "hexagon")}


def _style(item) -> tuple[str, str]:
    """(colour, marker symbol) of an overlay: its policy's, or its own run's (OWN_STYLE)."""
    chosen = policy(item.name)
    return OWN_STYLE.get(item.key, (chosen.colour, chosen.symbol))
MARKER_PX = 9                      # a selector's marker
LANE_PX = MARKER_PX + 3            # a lane column's width
ROUTE_PX = 10                      # room right of the lanes for the edges to turn towards the next column
GAP_PX = 5                         # between a token's text and the first lane
MIN_CHARS = 6                      # a token's text has room for this many characters at least
FONT_PX = 15                       # the tokens' text, 14 to 16 px as the columns allow
MIN_ROW_PX = 2 * LANE_PX           # a rank's row: 24 px, 14-16 px text with air, or two markers stacked
MIN_ROWS = 4                       # ranks with a row of their own, however short the figure


@dataclass(frozen=True)
class Lanes:
    """Where each of `count` selectors draws in a cell `column_px` x `row_px` pixels: its lane (x, cell
    units from the cell's centre, right of the text), two selectors to a lane column, one in each
    half of the row (y, row units: a row of `MIN_ROW_PX` has room for two markers); and where a
    token's text must end."""

    count: int
    column_px: float
    row_px: float

    @property
    def text_end(self) -> float:
        """Where a token's text must end (cell units): before the gap and the lanes."""
        return 0.5 - (ROUTE_PX + lane_columns(self.count) * LANE_PX + GAP_PX) / self.column_px

    def slot(self, i: int) -> tuple[float, float]:
        """Selector i's (x, y) offset in a cell: its lane column's centre, its half of the row."""
        column, level = divmod(i, 2)
        x = self.text_end + (GAP_PX + (column + 0.5) * LANE_PX) / self.column_px
        return x, (level - 0.5) * LANE_PX / self.row_px

    def entry(self, i: int) -> float:
        """Selector i's height (row units) where its edge reaches a child's text, so that several
        selectors reaching one token stay apart."""
        spread = min(0.5 * (self.row_px - 4), 3.0 * max(self.count - 1, 1)) / self.row_px
        return 0.0 if self.count == 1 else (i / (self.count - 1) - 0.5) * spread


def lane_columns(count: int) -> int:
    """Lane columns for `count` selectors, two to a column."""
    return max(1, math.ceil(count / 2))


def column_px_needed(count: int, font_px: int) -> float:
    """The narrowest column with room for `MIN_CHARS` characters of text and `count` selectors' lanes."""
    return (MIN_CHARS * CHAR_EM * font_px + GAP_PX + lane_columns(count) * LANE_PX + ROUTE_PX) / (0.5 - TEXT_LEFT)


def _slot(cell: tuple[int, int], dx: float, dy: float, rows: "_Rows") -> tuple[float, float]:
    """A selector's point in a (depth, 0-based rank) cell; the root's at the root column."""
    depth, rank = cell
    return (0.0, 1.0) if depth == 0 else (depth + dx, rows.of(rank) + dy)


def _percent(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _legend_name(item) -> str:
    label = item.label + (f"/{item.estimator}" if item.estimator else "")
    return f"{label} τ {item.tau} ({item.verified} verified)"


def _title_lines(view: CandidatesView, shown: int, rows: int, prompt: str | None) -> list[str]:
    lines = [f"<b>Round {view.number}: the drafter's top {view.k} per position, and what each selector verified</b>"]
    label, tau, verified = view.run
    notes = [f"Budget {view.budget}. Boxed: the target's own token (hindsight); bars: the drafter's probability",
             "each selector ran one round from this position on this draft",
             f"the run's own {label} round (its own draft): τ {tau}, {verified} verified" if label else ""]
    if shown < view.depth:
        notes.append(f"positions {shown + 1}-{view.depth} left out to fit")
    if rows < view.k:
        notes.append(f"ranks {rows + 1}-{view.k} share one row")
    notes.extend(view.missing)
    if prompt:
        notes.append(f"“{escape(display_token(prompt, 40))}”")
    lines.append(". ".join(n[0].upper() + n[1:] for n in notes if n) + ".")
    return lines


def _legend_rows(names: list[str], width: int) -> int:
    """The rows a horizontal legend of `names` takes in a figure `width` px wide (14 px text)."""
    rows, used = 1, 0.0
    for name in names:
        item = 44 + 7.4 * len(name)
        if used and used + item > width - 40:
            rows, used = rows + 1, 0.0
        used += item
    return rows


def _box(x: float, y: float, half_w: float, half_h: float) -> tuple[list, list]:
    """A closed rectangle round (x, y) as polygon points, ending in a break (None)."""
    return ([x - half_w, x + half_w, x + half_w, x - half_w, x - half_w, None],
            [y - half_h, y - half_h, y + half_h, y + half_h, y - half_h, None])


@dataclass(frozen=True)
class _Rows:
    """The grid's rows: ranks 1..shown one row each, then (when shown < k) one row for ranks shown+1..k,
    one for tokens outside the top k, and the two headroom rows."""

    shown: int
    k: int

    @property
    def lower(self) -> int | None:
        return self.shown + 1 if self.shown < self.k else None

    @property
    def outside(self) -> int:
        return self.shown + (2 if self.shown < self.k else 1)

    @property
    def total(self) -> int:
        return self.outside + 2

    def of(self, rank: int) -> int:
        """The row of a 0-based drafter rank."""
        if rank < self.shown:
            return rank + 1
        return self.lower if rank < self.k else self.outside

    def ticks(self, rounds: int) -> tuple[list[int], list[str]]:
        values = list(range(1, self.shown + 1))
        text = [f"rank {r}" if r in (1, self.shown) else str(r) for r in values]
        if self.lower:
            values.append(self.lower)
            text.append(f"ranks {self.shown + 1}-{self.k}")
        values += [self.outside, self.outside + 1, self.outside + 2]
        text += [f"not in top {self.k}", f"top-1: {rounds} rounds", f"top-{self.k}: {rounds} rounds"]
        return values, text


def _cells(fig: go.Figure, view: CandidatesView, shown: int, rows: _Rows, chars: int, font_px: int) -> None:
    """The probability bars, the target's boxes and the tokens' text (hover: rank, probability and who
    verified the cell); a target's token below the shown ranks in the row for them, with its rank."""
    bx, by, tx, ty = [], [], [], []
    xs, ys, texts, hovers = [], [], [], []
    verified: dict[tuple[int, int], list[str]] = {}
    for item in view.overlays:
        for d, r, verdict in item.nodes:
            verified.setdefault((d, r), []).append(f"{item.label}: {verdict}")
    for d in range(1, shown + 1):
        for r, p in enumerate(view.probs[d - 1][: rows.shown]):
            width = 0.48 * max(p, 0.0)
            box = _box(d - 0.48 + width, r + 1, width, 0.38)
            bx += box[0]
            by += box[1]
        for r in range(min(rows.shown, len(view.tokens[d - 1]))):
            token = view.texts[d - 1][r]
            xs.append(d + TEXT_LEFT)
            ys.append(r + 1)
            texts.append(escape(cut_label(display_token(token, 40), chars)))
            who = verified.get((d, r), [])
            target = " · <b>the target's token</b>" if view.target_rank(d) == r else ""
            hovers.append(f"<b>{escape(display_token(token, 40))}</b>{target}<br>position {d}, drafter rank {r + 1}, "
                          f"p {view.probs[d - 1][r]:.3g}" + ("<br>" + "<br>".join(who) if who else ""))
        rank = view.target_rank(d)
        if view.target[d - 1] is None:
            continue
        if rank is not None:
            box = _box(d, rows.of(rank), 0.49, 0.46)
            tx += box[0]
            ty += box[1]
        if rank is None or rank >= rows.shown:
            text = display_token(view.target_text[d - 1], 40)
            xs.append(d + TEXT_LEFT)
            ys.append(rows.of(rank if rank is not None else rows.k))
            texts.append(escape(cut_label(text if rank is None else f"{rank + 1}:{text}", chars)))
            hovers.append(f"<b>{escape(text)}</b>: the target's token at position {d}, " + (
                f"the drafter's rank {rank + 1}, p {view.probs[d - 1][rank]:.3g}" if rank is not None else
                f"not among the drafter's top {rows.k}: no selector here could have drafted it"))
    fig.add_trace(go.Scatter(x=bx, y=by, mode="lines", fill="toself", fillcolor=BAR, line=dict(width=0),
                             hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=tx, y=ty, mode="lines", line=dict(color=INK, width=3), hoverinfo="skip",
                             name="the target's token (hindsight)", legendrank=1))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="text", text=texts, textposition="middle right", hovertext=hovers,
                             hovertemplate="%{hovertext}<extra></extra>", showlegend=False,
                             textfont=dict(family=LABEL_FAMILY, size=font_px, color=INK, shadow=halo("#FFFFFF"))))
    for offset, key in ((1, "recall@1"), (2, f"recall@{rows.k}")):      # the headroom rows
        row = [next((item.get(key) for item in view.recall if item["depth"] == d), None) for d in range(1, shown + 1)]
        fig.add_trace(go.Scatter(x=list(range(1, shown + 1)), y=[rows.outside + offset] * shown, mode="text",
                                 text=[_percent(v) for v in row], showlegend=False, hoverinfo="skip",
                                 textfont=dict(size=font_px + 1, color=INK)))


def _overlays(fig: go.Figure, view: CandidatesView, shown: int, rows: _Rows, lanes: Lanes) -> None:
    """Each selector's edges and nodes: its markers in its lane of every cell it verified, its edges
    from a marker to the left end of the child's text (between the columns of text, over none)."""
    for i, item in enumerate(view.overlays):
        colour, symbol = _style(item)
        dx, dy = lanes.slot(i)
        ex, ey = [], []
        for parent, child in item.edges:
            if child[0] <= shown:
                x0, y0 = _slot(parent, dx, dy, rows)
                ex += [x0, child[0] + ENTRY, None]
                ey += [y0, rows.of(child[1]) + lanes.entry(i), None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False, opacity=0.75,
                                 line=dict(color=colour, width=2.5 if item.name in CHAINS else 1.3)))
        legend_at = "accepted" if item.accepted else next((v for _, _, v in item.nodes), "")
        for verdict, fill, opacity in (("accepted", True, 1.0), ("rejected", False, 1.0), ("waste", False, 0.4)):
            cells = [(d, r) for d, r, v in item.nodes if v == verdict and d <= shown]
            if not cells:
                continue
            points = [_slot(c, dx, dy, rows) for c in cells]
            fig.add_trace(go.Scatter(
                x=[p[0] for p in points], y=[p[1] for p in points], mode="markers", opacity=opacity,
                name=_legend_name(item), legendgroup=item.key, showlegend=verdict == legend_at,
                customdata=[[d, r + 1] for d, r in cells],
                marker=dict(symbol=symbol if fill else f"{symbol}-open", size=MARKER_PX,
                            color=colour, line=dict(width=1.2 if fill else 2.0, color=INK if fill else colour)),
                hovertemplate=f"{item.label}: {verdict} (position %{{customdata[0]}}, drafter rank "
                              f"%{{customdata[1]}})<extra></extra>"))


def candidates_figure(view: CandidatesView, plot: Plot | None = None, prompt: str | None = None) -> go.Figure:
    """The grid of `view` at `plot`'s size: its width decides how many positions fit and its height
    how many ranks get a row of their own (the rest share one); the subtitle says what was left out."""
    plot = plot or DEFAULT_PLOT
    left, right = 142, 16
    inner = max(200, plot.width - left - right)
    selectors = len(view.overlays)
    shown = max(1, min(view.depth, int(inner / column_px_needed(selectors, FONT_PX) - 0.6)))   # root column: 0.6
    column_px = inner / (shown + 0.6)                  # the root's column is 0.6 wide
    font_px = int(max(FONT_PX - 1, min(16, column_px / 8)))
    k = view.k
    legend_px = 24 * _legend_rows(["the target's token (hindsight)"] + [_legend_name(o) for o in view.overlays],
                                  plot.width) + 10
    top = 44 + 3 * 20 + legend_px + 26                 # a guess first: a title and three subtitle lines
    for _ in range(2):                                 # then the title's own lines
        room = int((plot.height - top - 20) / MIN_ROW_PX - 0.2)    # rows that fit, besides the y range's 0.2
        # every rank and three rows more (outside the top k, two headroom rows), or one more for the ranks left
        rows = _Rows(k if room >= k + 3 else max(MIN_ROWS, room - 4), k)
        title, title_px = figure_title(_title_lines(view, shown, rows.shown, prompt), plot)
        top = title_px + legend_px + 26                # the legend's rows, then the positions' axis above the grid
    need = top + MIN_ROW_PX * (rows.total + 0.2)
    bottom = max(4, min(20, plot.height - need))       # the bottom margin gives way before the figure outgrows its plot
    height = max(plot.height, need + bottom)
    row_px = (height - top - bottom) / (rows.total + 0.2)  # the y range is rows.total + 0.2 rows tall
    lanes = Lanes(selectors, column_px, row_px)
    chars = max(2, int((lanes.text_end - TEXT_LEFT) * column_px // (CHAR_EM * font_px)))

    fig = go.Figure()
    _cells(fig, view, shown, rows, chars, font_px)
    _overlays(fig, view, shown, rows, lanes)
    ticks, tick_text = rows.ticks(view.recall_rounds)
    root = f"root {escape(display_token(view.root_text, 5))}"
    fig.update_xaxes(range=[-0.35, shown + 0.55], tickvals=list(range(0, shown + 1)), side="top",
                     ticktext=[root] + [f"+{d}" for d in range(1, shown + 1)], showgrid=False, zeroline=False,
                     tickfont=dict(size=15), title=None, fixedrange=True)
    fig.update_yaxes(range=[rows.total + 0.6, 0.4], tickvals=ticks, ticktext=tick_text, showgrid=False,
                     zeroline=False, tickfont=dict(size=13), fixedrange=True)
    for y in (rows.outside - 0.5, rows.outside + 0.5):      # rules round the "not in top K" row
        fig.add_hline(y=y, line=dict(color="#8C8C8C", width=1, dash="dot"))
    fig.update_layout(template="plotly_white", font=FONT, height=int(height), title=title,
                      margin=dict(l=left, r=right, t=top, b=bottom, autoexpand=False), modebar=MODEBAR,
                      legend=dict(orientation="h", x=0, xanchor="left", y=1 - (title_px + 4) / height, yanchor="top",
                                  yref="container", font=dict(size=14), itemclick=False, itemdoubleclick=False),
                      meta={"round": view.number, "positions": shown, "rows": rows.shown,
                            "row_px": round(row_px, 1), "chars": chars, "font_px": font_px,
                            "lanes": [round(lanes.slot(i)[0], 3) for i in range(selectors)]})
    return fig


__all__ = ["candidates_figure"]
