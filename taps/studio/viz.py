"""Plotly figures for TAPS Studio, and their exports (PNG and SVG through kaleido in a child process
with a time limit, standalone HTML).

Figures are built from plain records only: a `Round`, a toy tree, race and sweep result rows.
Round trees are laid out in pixels by `taps.studio.layout` (depth left to right, the favourite on top,
each parent centred on its children) for the plot size the page will draw, so every verified
node's token label fits beside it without touching another.

Readable on a projector and with colour-blindness: large fonts, the Okabe-Ito palette and the
Cividis colour scale, and a node's verdict carried by its marker shape and outline, never by hue
alone: accepted = circle with a heavy outline on a thick path, rejected sibling = diamond,
rejected-prefix waste = cross on a dotted edge, pool nodes never verified = small faint dots,
root = square, bonus token = star. Token labels are monospace with whitespace made visible.
"""

from __future__ import annotations

import html
import math
from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..config import run_label
from ..policies import AR, DDTREE, DFLASH, ORACLE, TAPS
from ..record import STAGES, Round
from .failures import compare_rankings, hindsight_status, target_path, visible_text
from .layout import FONT_PX, LABEL_ROW, MARKER_GAP, Plot, fit_tree, tidy_positions
from .lesson import STAGE_TITLES, expected_rate_curve, prompt_excerpt, round_text, size_explanation, stage_sentence
from .toy import ToyTree, choose, descendants

PALETTE = {"black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
           "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#8C8C8C"}
SELECTOR_COLORS = {AR.name: PALETTE["grey"], DFLASH.name: PALETTE["sky"], DDTREE.name: PALETTE["orange"],
                   TAPS.name: PALETTE["blue"], ORACLE.name: PALETTE["green"]}
SELECTOR_SYMBOLS = {AR.name: "square", DFLASH.name: "triangle-up", DDTREE.name: "diamond", TAPS.name: "circle",
                    ORACLE.name: "star"}
SELECTOR_PATTERNS = {AR.name: "", DFLASH.name: "/", DDTREE.name: "x", TAPS.name: ".", ORACLE.name: "+"}
STAGE_COLORS = dict(zip(STAGES, [PALETTE["sky"], PALETTE["yellow"], PALETTE["purple"], PALETTE["orange"],
                                 PALETTE["blue"], PALETTE["grey"]]))
STAGE_PATTERNS = dict(zip(STAGES, ["/", "", ".", "x", "", "+"]))
FONT = dict(family="Source Sans Pro, Arial, sans-serif", size=18, color="#111111")
LABEL_FONT = dict(family="DejaVu Sans Mono, Menlo, Consolas, monospace", size=FONT_PX, color="#111111",
                  shadow="auto")
COLOR_SCALE = "Cividis"
LOG_FLOOR = 1e-4
DEFAULT_PLOT = Plot(width=1180, height=640)
LEGEND_ROW = 22                   # pixels per legend entry (font 14, no group gap)

COLOR_MODES = {"marginal": "marginal product (what DDTree ranks by)",
               "reach": "path-conditioned reach (what TAPS ranks by)",
               "target": "target's probability (known after verification)"}
_COLOR_FIELDS = {"marginal": "pool_path_marginal", "reach": "pool_reach", "target": "target_prob"}

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
    "only_marginal": dict(name="only DDTree's pick", symbol="diamond", size=16, opacity=1.0,
                          line=dict(width=3, color="#000000")),
    "only_reach": dict(name="only TAPS's pick", symbol="square", size=14, opacity=1.0,
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
PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d", "toImage"]}


# ---------------------------------------------------------------------------- small helpers
def display_token(text: str, limit: int = 12) -> str:
    """Token text made visible: spaces, newlines and tabs get symbols; long tokens are cut."""
    shown = visible_text(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _log_scale(values: Sequence[float | None]) -> list[float]:
    return [math.log10(min(max(float(v), LOG_FLOOR), 1.0)) if v is not None and not math.isnan(float(v))
            else math.log10(LOG_FLOOR) for v in values]


def _coloraxis(title: str, length_px: int, horizontal: bool = False) -> dict:
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


def _fmt(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def _wrap(text: str, chars: int) -> list[str]:
    """Words of `text` in lines of at most `chars` characters."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])


def tree_positions(parents: Mapping[int, int] | Sequence[int], ranks: Mapping[int, int] | Sequence[int],
                   nodes: Sequence[int], row: float = 1.0) -> dict[int, tuple[float, float]]:
    """(depth, y) per node with every node one `row` tall: leaves on consecutive rows in (rank,
    index) order, each parent at the middle of its first and last child. `nodes` must be
    prefix-closed and hold the root 0."""
    order = {v: (ranks[v],) for v in nodes}
    return tidy_positions(parents, order, list(nodes), {v: row for v in nodes})


def _edge_trace(pos, pairs, style: str, showlegend: bool | None = None, legendgroup: str | None = None,
                name: str | None = None) -> go.Scatter:
    xs, ys = [], []
    for a, b in pairs:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    show = style in ("path", "waste") if showlegend is None else showlegend
    return go.Scatter(x=xs, y=ys, mode="lines", line=EDGE_STYLES[style], hoverinfo="skip",
                      name=name or EDGE_NAMES[style], showlegend=show and bool(pairs), legendgroup=legendgroup or style)


def _node_trace(pos, nodes, style: str, color: list[float] | str | None, customdata, hovertemplate: str,
                text: list[str] | None = None, name: str | None = None, showlegend: bool = True,
                coloraxis: str = "coloraxis", size_scale: float = 1.0) -> go.Scatter:
    spec = NODE_STYLES[style]
    marker = dict(symbol=spec["symbol"], size=spec["size"] * size_scale, opacity=spec["opacity"], line=spec["line"])
    if isinstance(color, list):
        marker.update(color=color, coloraxis=coloraxis)
    else:
        marker.update(color=color or PALETTE["grey"])
    return go.Scatter(x=[pos[v][0] for v in nodes], y=[pos[v][1] for v in nodes],
                      mode="markers+text" if text else "markers", marker=marker, text=text,
                      textposition="top center", textfont=dict(size=16, color="#111111"), customdata=customdata,
                      hovertemplate=hovertemplate, name=name or spec["name"], showlegend=showlegend and bool(nodes),
                      legendgroup=style)


def _label_trace(pos, labels: Mapping[int, str]) -> go.Scatter:
    """Token labels to the right of their nodes (an invisible marker as wide as the gap offsets them)."""
    nodes = list(labels)
    return go.Scatter(x=[pos[v][0] for v in nodes], y=[pos[v][1] for v in nodes], mode="markers+text",
                      text=[_escape(labels[v]) for v in nodes], textposition="middle right",
                      textfont=LABEL_FONT, marker=dict(size=2 * MARKER_GAP - 6, opacity=0), hoverinfo="skip",
                      showlegend=False, name="token labels", cliponaxis=False)


def _title(lines: list[str], plot: Plot) -> tuple[dict, int]:
    """A title (the first line) with a subtitle of the other lines, wrapped to the figure's width;
    and the top margin they need."""
    chars = max(40, int((plot.width - 30) / 8.2))
    small = [piece for line in lines[1:] if line for piece in _wrap(line, chars)]
    title = dict(text=lines[0], x=0.01, xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=10),
                 font=dict(size=20), subtitle=dict(text="<br>".join(_escape(s) for s in small), font=dict(size=15)))
    return title, 44 + 20 * len(small)


def _escape(text: str) -> str:
    """Text safe for a plotly label (plotly reads <, > and & as markup; quotes are fine)."""
    return html.escape(text, quote=False)


def _tree_layout(fig: go.Figure, plot: Plot, layout, title: dict, title_px: int, meta: dict,
                 colorbar: str | None) -> None:
    """Axes in pixels (one y unit is one pixel), the title on top, the legend and colour bar in the
    right margin, the depth axis at the bottom: everything inside the figure's own height."""
    legend_px = LEGEND_ROW * sum(1 for t in fig.data if t.showlegend is not False and t.legendgroup and t.x) + 12
    inner = max(layout.span + LABEL_ROW, legend_px + (70 if colorbar else 0))
    pad = (inner - layout.span - LABEL_ROW) / 2
    height = int(title_px + inner + plot.bottom)
    fig.update_xaxes(title_text="depth (0 = root)", tickvals=list(range(layout.columns - 1)),
                     range=[-0.5, layout.columns - 0.5], showgrid=False, zeroline=False, tickfont=dict(size=15),
                     title_font=dict(size=15))
    fig.update_yaxes(visible=False, range=[layout.span + LABEL_ROW / 2 + pad, -LABEL_ROW / 2 - pad])
    fig.update_layout(template="plotly_white", font=FONT, height=height, plot_bgcolor="white", autosize=True,
                      title=title,
                      margin=dict(l=plot.left, r=plot.right, t=title_px, b=plot.bottom, autoexpand=False),
                      hoverlabel=dict(font_size=16),
                      legend=dict(orientation="v", x=1.01, xanchor="left", y=1, yanchor="top",
                                  font=dict(size=14), tracegroupgap=0, itemsizing="constant"),
                      meta=meta)
    if colorbar:
        fig.update_layout(coloraxis=_coloraxis(colorbar, plot.right - 40, horizontal=True))


# ---------------------------------------------------------------------------- the round's tree
_ROUND_HOVER = ("<b>%{customdata[1]}</b>  (%{customdata[8]})<br>node %{customdata[0]} · depth %{customdata[2]}"
                " · drafter rank %{customdata[3]}<br>marginal %{customdata[4]} · marginal product %{customdata[5]}"
                "<br>reach %{customdata[6]} · target probability %{customdata[7]}<extra></extra>")


def _score(record: Round, rank_by: str) -> np.ndarray:
    return np.asarray(record.pool_path_marginal if rank_by == "marginal" else record.pool_reach, dtype=float)


def _best_first(record: Round, score: np.ndarray, exclude: set[int], max_depth: int) -> list[int]:
    order = np.lexsort((np.arange(len(score)), -score))
    return [int(v) for v in order if int(v) not in exclude and record.pool_depths[int(v)] <= max_depth]


def bonus_node(record: Round) -> int | None:
    """The pool node holding the bonus token under the last accepted node, or None when the pool
    does not hold it (the figure then draws the bonus as a node of its own)."""
    status = hindsight_status(record)
    depth = len(record.accepted) + 1
    last = record.accepted[-1] if record.accepted else 0
    for v in range(1, len(record.pool_tokens)):
        if record.pool_parents[v] == last and record.pool_depths[v] == depth and status[v] == "accepted" \
                and record.status[v] == "unselected":
            return v
    return None


def shown_pool_nodes(record: Round, max_pool_nodes: int = 60, rank_by: str = "reach") -> list[int]:
    """The pool nodes a whole-round figure may draw: every verified node, the bonus token's node,
    and the best unverified nodes by `rank_by` no deeper than one past the verified tree, up to
    `max_pool_nodes` (with ancestors, so the drawing stays a tree)."""
    required = sorted(set(record.selected) | ({bonus_node(record)} - {None}))
    deepest = max(record.pool_depths[v] for v in required) + 1
    extra = _best_first(record, _score(record, rank_by), set(required), deepest)
    nodes = set(required)
    for v in extra[: max(0, max_pool_nodes - len(required))]:
        while v > 0 and v not in nodes:
            nodes.add(v)
            v = record.pool_parents[v]
    return sorted(nodes)


def round_tree_figure(record: Round, color_by: str = "reach", max_pool_nodes: int = 60, plot: Plot | None = None,
                      prompt: str | None = None, config: Mapping | None = None, stage: str | None = None) -> go.Figure:
    """The round's candidate pool (faint), the verified prefix-closed subtree (solid), the accepted
    path (thick), the bonus token (a star, drawn once), rejected siblings (diamonds) and
    rejected-prefix waste (crosses on dotted edges); nodes coloured by `color_by` (COLOR_MODES).

    `plot` is the pixel size the page has for it (height is a maximum). `stage` (a lesson step,
    one of STAGES but "draft") draws only what the round knows by the end of that stage, with a
    sentence of narration; "draft" itself is `lattice_figure`. `config` (the run's settings)
    explains a tree smaller than its budget; `prompt` goes into the title."""
    if color_by not in COLOR_MODES:
        raise ValueError(f"colour by one of {', '.join(COLOR_MODES)}, not {color_by!r}")
    if stage is not None and stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}': the stages are {', '.join(STAGES)}")
    plot = plot or DEFAULT_PLOT
    status = list(record.status)
    verdicts = stage in (None, "verify", "commit")
    picked_only = stage == "select"
    candidates_only = stage in ("draft", "pool", "estimate")
    if candidates_only:
        status = ["root"] + ["unselected"] * (len(status) - 1)
    elif picked_only:
        status = ["root"] + ["picked" if s != "unselected" else s for s in status[1:]]
    score = _score(record, "marginal" if color_by == "marginal" else "reach")

    show_bonus = stage in (None, "commit")
    held = bonus_node(record) if show_bonus else None
    bonus = held if held is not None else len(record.pool_tokens)
    last = record.accepted[-1] if record.accepted else 0
    parents = dict(enumerate(record.pool_parents))
    order = {v: (record.pool_ranks[v],) for v in range(len(record.pool_tokens))}
    texts = {v: display_token(t, 40) for v, t in enumerate(record.pool_texts)}
    if show_bonus and held is None:
        parents[bonus], order[bonus], texts[bonus] = last, (-1,), display_token(record.bonus_text, 40)

    required = [0] if candidates_only else sorted(record.selected)
    if show_bonus:
        required = sorted(set(required) | {bonus})
    deepest = max(record.pool_depths) if candidates_only else \
        max(record.pool_depths[v] for v in required if v < len(record.pool_tokens)) + 1
    optional = _best_first(record, score, set(required), deepest)[: max(0, max_pool_nodes - len(required))]

    def by_depth_then_score(vs):
        return sorted(vs, key=lambda v: (record.pool_depths[v], -score[v], v))

    if candidates_only:
        labelled = [0] + (optional[:12] if stage == "estimate" else [])
    elif picked_only:
        labelled = [0] + by_depth_then_score(v for v in record.selected if v)
    else:
        labelled = [0] + list(record.accepted) + ([bonus] if show_bonus else []) + \
            by_depth_then_score(v for v in record.selected if status[v] == "rejected") + \
            by_depth_then_score(v for v in record.selected if status[v] == "waste")
    layout = fit_tree(parents, order, required, optional, labelled, texts, plot)
    pos, nodes = layout.pos, [v for v in layout.nodes if v != bonus or held is not None]
    values = getattr(record, _COLOR_FIELDS[color_by])

    fig = go.Figure()
    groups: dict[str, list] = {"pool": [], "verified": [], "waste": []}
    for v in nodes[1:]:
        if v == bonus and show_bonus:
            continue
        kind = "pool" if status[v] in ("unselected",) else "waste" if status[v] == "waste" and verdicts else "verified"
        groups[kind].append((record.pool_parents[v], v))
    for kind, pairs in groups.items():
        fig.add_trace(_edge_trace(pos, pairs, kind))
    if verdicts:
        chain = [0] + list(record.accepted)
        fig.add_trace(_edge_trace(pos, list(zip(chain[:-1], chain[1:])), "path"))
    if show_bonus:
        fig.add_trace(_edge_trace(pos, [(last, bonus)], "bonus", showlegend=False))

    def rows(vs):
        return [[v, _escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
                 record.pool_ranks[v] + 1, _fmt(record.pool_marginal[v]), _fmt(record.pool_path_marginal[v]),
                 _fmt(record.pool_reach[v]), _fmt(record.target_prob[v]), status[v]] for v in vs]

    colorbar = None
    kinds = ("unselected", "picked", "waste", "rejected", "accepted", "root")
    for kind in kinds:
        members = [v for v in nodes if status[v] == kind and not (show_bonus and v == bonus)]
        style = "candidate" if kind == "unselected" and stage == "estimate" else kind
        if kind == "root":
            color: list[float] | str | None = "#000000"
        elif any(values[v] is None for v in members) or (kind == "unselected" and stage == "pool"):
            color = PALETTE["grey"]
        else:
            color = _log_scale([values[v] for v in members])
            colorbar = colorbar or (COLOR_MODES[color_by].split(" (")[0] if members else None)
        fig.add_trace(_node_trace(pos, members, style, color, rows(members), _ROUND_HOVER))
    if show_bonus:
        bonus_row = [[bonus, _escape(display_token(record.bonus_text, 24)), record.pool_depths[last] + 1, "—",
                      "—", "—", "—", "—", "bonus: the target's own token"]]
        fig.add_trace(_node_trace(pos, [bonus], "bonus", PALETTE["orange"], bonus_row, _ROUND_HOVER))
    fig.add_trace(_label_trace(pos, layout.labels))

    heading = (f"<b>Round {record.number}</b> · {run_label(record.selector, record.estimator)} · "
               f"budget {record.budget}" + (f" · “{_escape(prompt_excerpt(prompt))}”" if prompt else ""))
    if stage is not None:
        heading = f"<b>Round {record.number} · {STAGES.index(stage) + 1} of 6: {STAGE_TITLES[stage]}</b> · " + \
            heading.split("</b> · ", 1)[1]
        lines = [heading, stage_sentence(record, stage, config)]
    else:
        lines = [heading, f"verified {record.verified_nodes}, accepted {len(record.accepted)} + bonus, rejected "
                          f"siblings {record.rejected_siblings}, waste {record.waste_nodes}",
                 size_explanation(record, config)]
    if layout.left_out:
        lines.append(f"{layout.left_out} of {len(labelled)} labels left out to fit (hover a node for its token); "
                     "the accepted path and the verified nodes nearest the root come first.")
    title, title_px = _title(lines, plot)
    _tree_layout(fig, plot, layout, title, title_px,
                 {"round": record.index, "number": record.number, "shown_nodes": len(nodes),
                  "pool_nodes": len(record.pool_tokens), "labels": len(layout.labels), "left_out": layout.left_out,
                  "stage": stage or ""}, colorbar)
    return fig


def lattice_figure(record: Round, plot: Plot | None = None, prompt: str | None = None, per_depth: int = 4) -> go.Figure:
    """The draft stage: for each depth, the drafter's best tokens (its marginals) as a column, best
    on top, coloured and labelled by probability."""
    plot = plot or DEFAULT_PLOT
    best: dict[tuple[int, int], int] = {}
    for v in range(1, len(record.pool_tokens)):
        key = (record.pool_depths[v], record.pool_ranks[v])
        if record.pool_ranks[v] < per_depth and key not in best:
            best[key] = v
    depth = max(record.pool_depths)
    xs = [0] + [d for d, _ in best]
    ys = [0] + [r for _, r in best]
    nodes = [0] + list(best.values())
    chars = max(3, int((plot.inner_width / (depth + 1) - 16) // 8.7))
    labels = [display_token(record.root_text, chars)] + [
        f"{display_token(record.pool_texts[v], chars - 5)} {record.pool_marginal[v]:.2f}" for v in nodes[1:]]
    fig = go.Figure(go.Scatter(
        x=xs, y=ys, mode="markers+text", text=[_escape(t) for t in labels], textposition="bottom center",
        textfont=LABEL_FONT, cliponaxis=False, name="the drafter's best tokens",
        marker=dict(symbol=["square"] + ["circle"] * (len(nodes) - 1), size=[16] + [10 + 16 * record.pool_marginal[v]
                                                                                  for v in nodes[1:]],
                    color=["#000000"] + _log_scale([record.pool_marginal[v] for v in nodes[1:]]),
                    coloraxis="coloraxis", line=dict(width=1, color="#000000")),
        hovertemplate="%{text}<extra></extra>"))
    heading = (f"<b>Round {record.number} · 1 of 6: Draft</b> · {run_label(record.selector, record.estimator)} · "
               f"budget {record.budget}" + (f" · “{_escape(prompt_excerpt(prompt))}”" if prompt else ""))
    title, title_px = _title([heading, stage_sentence(record, "draft")], plot)
    inner = min(plot.inner_height, 70 * per_depth)
    fig.update_xaxes(title_text="depth (0 = root)", dtick=1, range=[-0.6, depth + 0.6], showgrid=False,
                     zeroline=False, tickfont=dict(size=15), title_font=dict(size=15))
    fig.update_yaxes(title_text="drafter rank", range=[per_depth - 0.4, -0.6], dtick=1, tickvals=list(range(per_depth)),
                     ticktext=[str(r + 1) for r in range(per_depth)], showgrid=False, zeroline=False)
    fig.update_layout(template="plotly_white", font=FONT, height=int(title_px + inner + plot.bottom + 20),
                      title=title,
                      margin=dict(l=70, r=plot.right, t=title_px, b=plot.bottom + 20, autoexpand=False),
                      coloraxis=_coloraxis("marginal", max(90, int(inner - 20))), showlegend=False,
                      meta={"round": record.index, "number": record.number, "stage": "draft"})
    return fig


def lesson_figure(record: Round, stage: str, color_by: str = "reach", max_pool_nodes: int = 60,
                  plot: Plot | None = None, prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """One stage of one round, narrated on the figure (draft: the lattice; then the tree)."""
    if stage == "draft":
        return lattice_figure(record, plot, prompt)
    if stage in ("pool", "estimate") and color_by == "target":
        color_by = "reach"
    return round_tree_figure(record, color_by, max_pool_nodes, plot, prompt, config, stage=stage)


def size_curve_figure(record: Round, profile, height: int = 300) -> go.Figure:
    """Expected tokens per second against tree size under `profile` (the cost model's view of this
    round), the verified size marked."""
    sizes, rate = expected_rate_curve(record, profile)
    fig = go.Figure(go.Scatter(x=sizes, y=rate, mode="lines", line=dict(color=PALETTE["blue"], width=3),
                               name="expected tokens/s", hovertemplate="%{x} nodes: %{y:.0f} tokens/s<extra></extra>"))
    fig.add_vline(x=record.verified_nodes, line=dict(color=PALETTE["orange"], width=3, dash="dash"),
                  annotation_text=f"verified {record.verified_nodes}", annotation_position="top")
    fig.update_layout(template="plotly_white", font=dict(FONT, size=15), height=height,
                      margin=dict(l=60, r=20, t=50, b=50), showlegend=False,
                      title=dict(text=f"Round {record.number}: the cost model's expected tokens/s", font=dict(size=16)),
                      xaxis_title="nodes verified", yaxis_title="tokens/s (modelled)")
    fig.update_yaxes(rangemode="tozero")
    return fig


def ranking_comparison_figure(record: Round, budget: int | None = None, max_pool_nodes: int = 40,
                              plot: Plot | None = None, prompt: str | None = None) -> go.Figure:
    """The same pool ranked two ways on one tree: the `budget` nodes of highest marginal product
    (DDTree's pick) and of highest reach (TAPS's pick). Nodes both pick are circles; where the
    rankings differ, diamonds are DDTree's alone and squares TAPS's alone; the target's path (known
    in hindsight) is thick, edges under a prefix the target rejects are dotted."""
    plot = plot or DEFAULT_PLOT
    budget = int(budget if budget is not None else record.budget)
    comparison = compare_rankings(record, budget)
    hindsight = hindsight_status(record)
    path = target_path(record)
    by_marginal, by_reach = set(comparison.by_marginal) - {0}, set(comparison.by_reach) - {0}
    kind = {v: "both" for v in by_marginal & by_reach}
    kind.update({v: "only_marginal" for v in by_marginal - by_reach})
    kind.update({v: "only_reach" for v in by_reach - by_marginal})
    required = sorted({0} | by_marginal | by_reach | set(path))
    deepest = max(record.pool_depths[v] for v in required) + 1
    optional = _best_first(record, _score(record, "reach"), set(required), deepest)
    optional = optional[: max(0, max_pool_nodes - len(required))]
    parents = dict(enumerate(record.pool_parents))
    order = {v: (record.pool_ranks[v],) for v in range(len(record.pool_tokens))}
    texts = {v: display_token(t, 40) for v, t in enumerate(record.pool_texts)}
    differ = sorted(by_marginal ^ by_reach, key=lambda v: (record.pool_depths[v], v))
    same = sorted(by_marginal & by_reach, key=lambda v: (record.pool_depths[v], v))
    on_path = [v for v in path if v not in kind]
    labelled = [0] + differ + same + on_path
    layout = fit_tree(parents, order, required, optional, labelled, texts, plot)
    pos, nodes = layout.pos, layout.nodes

    fig = go.Figure()
    path_edges = [(record.pool_parents[v], v) for v in path]
    waste_edges = [(record.pool_parents[v], v) for v in nodes[1:] if v in kind and hindsight[v] == "waste"]
    picked_edges = [(record.pool_parents[v], v) for v in nodes[1:] if v in kind and hindsight[v] != "waste"]
    fig.add_trace(_edge_trace(pos, [(record.pool_parents[v], v) for v in nodes[1:] if v not in kind], "pool"))
    fig.add_trace(_edge_trace(pos, picked_edges, "verified"))
    fig.add_trace(_edge_trace(pos, waste_edges, "waste"))
    fig.add_trace(_edge_trace(pos, path_edges, "path", name="the target's path (hindsight)"))
    hover = ("<b>%{customdata[1]}</b><br>node %{customdata[0]} · depth %{customdata[2]}<br>marginal product "
             "%{customdata[3]} · reach %{customdata[4]}<br>%{customdata[6]}; in hindsight: %{customdata[5]}"
             "<extra></extra>")
    picks = {"both": "picked by both", "only_marginal": "picked by DDTree only", "only_reach": "picked by TAPS only"}

    def rows(vs):
        return [[v, _escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
                 _fmt(record.pool_path_marginal[v]), _fmt(record.pool_reach[v]), hindsight[v],
                 picks.get(kind.get(v, ""), "picked by neither")] for v in vs]

    colors = {"both": PALETTE["grey"], "only_marginal": PALETTE["orange"], "only_reach": PALETTE["sky"]}
    fig.add_trace(_node_trace(pos, [v for v in nodes[1:] if v not in kind], "unselected", PALETTE["grey"],
                              rows([v for v in nodes[1:] if v not in kind]), hover, name="picked by neither"))
    for name in ("both", "only_marginal", "only_reach"):
        members = [v for v in nodes if kind.get(v) == name]
        fig.add_trace(_node_trace(pos, members, name, colors[name], rows(members), hover))
    fig.add_trace(_node_trace(pos, [0], "root", "#000000", rows([0]), hover))
    fig.add_trace(_label_trace(pos, layout.labels))

    heading = (f"<b>Round {record.number}: the same pool ranked two ways</b> · top {budget}"
               + (f" · “{_escape(prompt_excerpt(prompt))}”" if prompt else ""))
    scores = (f"marginal product (DDTree) {comparison.describe('marginal')} · reach (TAPS) "
              f"{comparison.describe('reach')}")
    if differ:
        verdict = (f"They differ on {len(differ)} nodes: {len(by_marginal - by_reach)} only DDTree picks (diamonds), "
                   f"{len(by_reach - by_marginal)} only TAPS picks (squares).")
    else:
        verdict = f"Both rankings pick the same {len(by_marginal)} nodes: they agree this round."
    lines = [heading, scores, verdict]
    if layout.left_out:
        lines.append(f"{layout.left_out} of {len(labelled)} labels left out to fit (hover a node for its token).")
    title, title_px = _title(lines, plot)
    _tree_layout(fig, plot, layout, title, title_px,
                 {"round": record.index, "number": record.number, "budget": budget, "differ": len(differ),
                  "labels": len(layout.labels), "left_out": layout.left_out}, None)
    return fig


# ---------------------------------------------------------------------------- the Learn page's toy
def toy_tree_figure(tree: ToyTree, budget: int, rejected: int | None = None) -> go.Figure:
    """The toy's full tree twice: the `budget` nodes DDTree picks (marginal product, left) and TAPS
    picks (reach, right). With `rejected`, that node is marked and everything under it crossed
    out: those nodes can never be accepted, so verifying them is waste."""
    nodes = list(range(len(tree.labels)))
    pos = tree_positions(tree.parents, tree.ranks, nodes)
    unreachable = set(descendants(tree, rejected)) if rejected else set()
    by_marginal, by_reach = choose(tree.path_marginal, budget), choose(tree.reach, budget)
    titles = (f"DDTree: top {budget}<br>by marginal product", f"TAPS: top {budget}<br>by reach")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=titles)
    hover = ("<b>%{customdata[1]}</b><br>depth %{customdata[2]} · drafter rank %{customdata[3]}<br>"
             "marginal product %{customdata[4]} · reach %{customdata[5]}<extra></extra>")

    def rows(vs):
        return [[v, _escape(tree.path_text(v)), int(tree.depths[v]), int(tree.ranks[v]) + 1,
                 _fmt(tree.path_marginal[v]), _fmt(tree.reach[v])] for v in vs]

    small = len(nodes) <= 45
    for col, chosen, score in ((1, by_marginal, tree.path_marginal), (2, by_reach, tree.reach)):
        chosen_set = set(int(v) for v in chosen)
        first = col == 1
        fig.add_trace(_edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:] if v not in chosen_set],
                                  "pool", showlegend=False), row=1, col=col)
        fig.add_trace(_edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:]
                                        if v in chosen_set and v not in unreachable], "verified", showlegend=False),
                      row=1, col=col)
        fig.add_trace(_edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:]
                                        if v in chosen_set and v in unreachable], "waste", showlegend=first),
                      row=1, col=col)
        groups = {"unselected": [v for v in nodes[1:] if v not in chosen_set],
                  "accepted": [v for v in nodes[1:] if v in chosen_set and v not in unreachable and v != rejected],
                  "waste": [v for v in nodes[1:] if v in chosen_set and v in unreachable],
                  "rejected": [rejected] if rejected else []}
        names = {"unselected": "not picked", "accepted": "picked", "waste": "picked but unreachable (waste)",
                 "rejected": "the rejected prefix"}
        for kind, members in groups.items():
            color = PALETTE["grey"] if kind == "unselected" else _log_scale([score[v] for v in members])
            labelled = kind != "unselected" and (small or len(chosen_set) <= 30)
            labels = [_escape(tree.labels[v]) for v in members] if labelled else None
            fig.add_trace(_node_trace(pos, members, kind, color, rows(members), hover, text=labels,
                                      name=names[kind], showlegend=first,
                                      size_scale=0.8 if len(nodes) > 45 else 1.0), row=1, col=col)
        fig.add_trace(_node_trace(pos, [0], "root", "#000000", rows([0]), hover, showlegend=False), row=1, col=col)
    leaves = sum(1 for v in nodes if tree.depths[v] == tree.depths.max())
    height = int(min(1000, max(560, 220 + 10 * leaves)))
    fig.update_xaxes(title_text="depth (0 = root)", dtick=1, range=[-0.5, int(tree.depths.max()) + 0.7],
                     showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(template="plotly_white", font=FONT, height=height, plot_bgcolor="white",
                      title=dict(text="The toy tree, ranked two ways", x=0.01, xanchor="left", y=1 - 12 / height,
                                 yref="container", yanchor="top", font=dict(size=22)),
                      margin=dict(l=20, r=20, t=120, b=170), hoverlabel=dict(font_size=17),
                      legend=dict(orientation="h", x=0.01, xanchor="left", y=0.01, yref="container",
                                  yanchor="bottom", font=dict(size=16)),
                      coloraxis=_coloraxis("score (each panel's own)", 300))
    fig.update_layout(coloraxis_colorbar=dict(lenmode="fraction", len=0.8, x=1.02, y=0.5, yanchor="middle",
                                              title=dict(side="right")))
    fig.update_annotations(font=dict(size=18))
    return fig


def toy_curve_figure(curve, budget: int | None = None) -> go.Figure:
    """Expected tokens per round against budget for the trees each ranking picks (`budget` marked)."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=curve["budget"], y=curve["by_marginal"], name="DDTree (marginal product)",
                             mode="lines+markers", line=dict(color=PALETTE["orange"], width=4, dash="dash"),
                             marker=dict(symbol="diamond", size=11)))
    fig.add_trace(go.Scatter(x=curve["budget"], y=curve["by_reach"], name="TAPS (reach)", mode="lines+markers",
                             line=dict(color=PALETTE["blue"], width=4), marker=dict(symbol="circle", size=10)))
    if budget is not None:
        fig.add_vline(x=budget, line=dict(color=PALETTE["grey"], dash="dot", width=2), annotation_text="budget",
                      annotation_position="bottom right")
    fig.update_layout(template="plotly_white", font=FONT, height=500, margin=dict(l=20, r=20, t=60, b=120),
                      title=dict(text="Expected tokens per round", x=0),
                      xaxis_title="budget (draft nodes verified)", yaxis_title="1 + Σ reach of the picked nodes",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    return fig


# ---------------------------------------------------------------------------- race, sweep, stages
def _selector_of(label: str) -> str:
    return label.split("/")[0]


def _spread_error(spreads) -> dict:
    return dict(type="data", symmetric=False, array=[max(sp.high - sp.median, 0.0) for sp in spreads],
                arrayminus=[max(sp.median - sp.low, 0.0) for sp in spreads], thickness=2.5, width=8,
                color="#333333")


def race_figure(summary: list[dict], profile_label: str = "") -> go.Figure:
    """Modelled speed-up over AR (left: deterministic, under the named profile) beside the measured
    one (right: the median over repeats, the whiskers the range), one bar per selector; AR at 1.
    Each measured median is written above its whisker's top, where no whisker crosses it."""
    repeats = max((row["repeats"] for row in summary), default=0)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "modelled speed-up over AR" + (f"<br><sup>on {_escape(profile_label)}'s latency profile</sup>"
                                       if profile_label else ""),
        f"measured speed-up over AR<br><sup>median of {repeats} repeats, range as whiskers</sup>"))
    labels = [row["label"] for row in summary]
    colors = [SELECTOR_COLORS.get(_selector_of(x), PALETTE["grey"]) for x in labels]
    patterns = [SELECTOR_PATTERNS.get(_selector_of(x), "") for x in labels]
    marker = dict(color=colors, pattern=dict(shape=patterns), line=dict(color="#000", width=1))
    modelled = [row["modelled_speedup"] for row in summary]
    fig.add_trace(go.Bar(x=labels, y=modelled, text=[f"{v:.2f}×" if v == v else "—" for v in modelled],
                         textposition="outside", marker=marker, showlegend=False, name="modelled"), row=1, col=1)
    spreads = [row["speedup"] for row in summary]
    tops = [max(sp.high, sp.median) for sp in spreads]       # each whisker's top (the bar's, without one)
    fig.add_trace(go.Bar(x=labels, y=[sp.median for sp in spreads], error_y=_spread_error(spreads),
                         marker=marker, showlegend=False, name="measured"), row=1, col=2)
    fig.add_trace(go.Scatter(x=labels, y=tops, mode="text",
                             text=[f"{sp.median:.2f}×" for sp in spreads], textposition="top center",
                             textfont=dict(size=16), showlegend=False, hoverinfo="skip", name="measured median"),
                  row=1, col=2)
    for col in (1, 2):
        fig.add_hline(y=1.0, line=dict(color=PALETTE["grey"], dash="dash", width=2), row=1, col=col)
    fig.update_yaxes(rangemode="tozero", title_text="× AR")
    measured_tops = [top for top in tops if top == top]     # NaN-free
    if measured_tops:                            # headroom for the labels above the whiskers
        fig.update_yaxes(range=[0, 1.15 * max(max(measured_tops), 1.0)], row=1, col=2)
    fig.update_traces(cliponaxis=False)
    fig.update_layout(template="plotly_white", font=FONT, height=470, margin=dict(l=20, r=20, t=110, b=50),
                      meta={"kind": "race"})
    fig.update_annotations(font=dict(size=18))
    return fig


def sweep_figure(summary: list[dict], profile_label: str = "", best: list[dict] | None = None) -> go.Figure:
    """Against budget, per selector: tau (left), the modelled speed-up under the named profile
    (middle) and the measured tokens/s, median over repeats with the range (right). A best budget
    is starred only where it beat the runner-up by more than the noise (`best`)."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, subplot_titles=(
        "τ: tokens per round", "modelled speed-up" + (f"<br><sup>on {_escape(profile_label)}'s profile</sup>"
                                                       if profile_label else ""),
        "measured tokens/s<br><sup>median, range as whiskers</sup>"))
    ar = [row for row in summary if row["selector"] == AR.name]
    clear = {row["selector"]: row for row in best or [] if row["clear"]}
    for name in sorted({row["label"] for row in summary if row["selector"] != AR.name}):
        mine = sorted((row for row in summary if row["label"] == name), key=lambda row: row["budget"])
        sel = _selector_of(name)
        style = dict(color=SELECTOR_COLORS.get(sel, PALETTE["grey"]))
        marker = dict(symbol=SELECTOR_SYMBOLS.get(sel, "circle"), size=12, line=dict(color="#000", width=1), **style)
        budgets = [row["budget"] for row in mine]
        common = dict(mode="lines+markers", line=dict(width=3, **style), marker=marker, legendgroup=name)
        fig.add_trace(go.Scatter(x=budgets, y=[row["tau"] for row in mine], name=name, **common), row=1, col=1)
        fig.add_trace(go.Scatter(x=budgets, y=[row["modelled_speedup"] for row in mine], name=name, showlegend=False,
                                 **common), row=1, col=2)
        spreads = [row["tokens_per_s"] for row in mine]
        fig.add_trace(go.Scatter(x=budgets, y=[sp.median for sp in spreads], error_y=_spread_error(spreads),
                                 name=name, showlegend=False, **common), row=1, col=3)
        winner = clear.get(name)
        if winner is not None:
            row = next(r for r in mine if str(r["budget"]) == winner["best budget (measured)"])
            fig.add_trace(go.Scatter(x=[row["budget"]], y=[row["tokens_per_s"].median], mode="markers+text",
                                     text=[f"best: {row['budget']}"], textposition="top center", legendgroup=name,
                                     showlegend=False, name=f"{name} best",
                                     hovertemplate=f"{name}: best budget {row['budget']}<extra></extra>",
                                     marker=dict(symbol="star", size=24, color=style["color"],
                                                 line=dict(color="#000", width=2))), row=1, col=3)
    if ar:
        fig.add_hline(y=1.0, line=dict(color=PALETTE["grey"], dash="dash", width=2), annotation_text="AR",
                      annotation_position="bottom right", row=1, col=2)
        fig.add_hline(y=ar[0]["tokens_per_s"].median, line=dict(color=PALETTE["grey"], dash="dash", width=3),
                      annotation_text="AR", annotation_position="bottom right", row=1, col=3)
    fig.update_xaxes(type="log", title_text="budget", dtick=math.log10(2))
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(template="plotly_white", font=FONT, height=520, margin=dict(l=20, r=20, t=130, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.2, x=0), meta={"kind": "sweep"})
    fig.update_annotations(font=dict(size=17))
    return fig


def tradeoff_figure(rows: list[dict]) -> go.Figure:
    """Accepted draft tokens per round against verified nodes per round: what each node buys."""
    fig = go.Figure()
    for name in sorted({r["label"] for r in rows if r["selector"] != AR.name}):
        mine = sorted((r for r in rows if r["label"] == name), key=lambda r: r["budget"])
        sel = _selector_of(name)
        rounds = [max(r["rounds"], 1) for r in mine]
        fig.add_trace(go.Scatter(
            x=[r["verified_nodes"] / n for r, n in zip(mine, rounds)],
            y=[max(r["new_tokens"] - r["rounds"], 0) / n for r, n in zip(mine, rounds)],
            text=[str(r["budget"]) for r in mine], textposition="top center", mode="lines+markers+text", name=name,
            line=dict(color=SELECTOR_COLORS.get(sel, PALETTE["grey"]), width=3),
            marker=dict(symbol=SELECTOR_SYMBOLS.get(sel, "circle"), size=12, line=dict(color="#000", width=1)),
            hovertemplate=f"{name}<br>budget %{{text}}<br>verified %{{x:.1f}} nodes/round<br>"
                          "accepted %{y:.2f} tokens/round<extra></extra>"))
    fig.update_layout(template="plotly_white", font=FONT, height=520, margin=dict(l=20, r=20, t=60, b=130),
                      title=dict(text="Acceptance against cost (labels: budget)", x=0),
                      xaxis_title="verified draft nodes per round", yaxis_title="accepted draft tokens per round",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


def stage_share_figure(shares: Mapping[str, float]) -> go.Figure:
    """One stacked bar: the share of round time spent in each stage."""
    fig = go.Figure()
    for stage in STAGES:
        share = float(shares.get(stage, 0.0))
        fig.add_trace(go.Bar(x=[100 * share], y=["time"], orientation="h", name=f"{stage} {100 * share:.0f}%",
                             marker=dict(color=STAGE_COLORS[stage], pattern=dict(shape=STAGE_PATTERNS[stage]),
                                         line=dict(color="#000", width=1)),
                             hovertemplate=f"{stage}: {100 * share:.1f}% of round time<extra></extra>"))
    fig.update_layout(barmode="stack", template="plotly_white", font=FONT, height=170, showlegend=True,
                      margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=-0.25, x=0, traceorder="normal"),
                      xaxis=dict(range=[0, 100], ticksuffix="%", showgrid=False), yaxis=dict(visible=False))
    return fig


# ---------------------------------------------------------------------------- generated text
_TINTS = ["#DCEBF7", "#FBE8C8", "#D6F0E6", "#F3DDEA"]
_BORDERS = ["solid", "dotted"]


def run_text_html(prompt: str, rounds: Sequence[Round], current: int | None = None) -> str:
    """The prompt (grey) and the generated text, each round's tokens on their own tint with an
    alternating underline; hover a piece to see its round. `current` (a round index) is boxed."""
    parts = [f'<span style="color:#666666">{html.escape(prompt)}</span>']
    for n, record in enumerate(rounds):
        tint, border = _TINTS[n % len(_TINTS)], _BORDERS[n % len(_BORDERS)]
        outline = "outline:3px solid #0072B2;" if current == record.index else ""
        parts.append(f'<span title="round {record.index + 1}: {record.tau} tokens" style="background:{tint};'
                     f'border-bottom:3px {border} #444;{outline}">{html.escape(round_text(record))}</span>')
    return ('<div class="taps-text" style="white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;'
            'font-size:1.15rem;line-height:1.7;padding:0.6rem;border:1px solid #ccc;border-radius:6px">'
            + "".join(parts) + "</div>")


# ---------------------------------------------------------------------------- exports
def export_title(fig: go.Figure, prompt: str, record: Round | None = None, what: str = "") -> go.Figure:
    """A copy of `fig` whose title names what a file needs to stand alone: the prompt, and the
    round's selector, estimator, budget and number (or `what` for figures of many runs)."""
    copy = go.Figure(fig)
    if record is not None:
        what = (f"Round {record.number} · selector {record.selector} · estimator {record.estimator} · "
                f"budget {record.budget}")
    copy.update_layout(title_text=f"<b>{_escape(what)}</b> · prompt “{_escape(prompt_excerpt(prompt, 60))}”")
    return copy


def figure_png(fig: go.Figure, width: int = 1600, scale: float = 1.0, timeout_s: float = 60.0) -> bytes:
    """A PNG of the figure, rendered by kaleido's headless Chromium in a child process that is
    stopped (with its browser) after `timeout_s`: raises ExportError with the reason."""
    from .export import render_image

    return render_image(fig, "png", width=width, height=int(fig.layout.height or 700), scale=scale,
                        timeout_s=timeout_s)


def figure_svg(fig: go.Figure, width: int = 1600, timeout_s: float = 60.0) -> bytes:
    from .export import render_image

    return render_image(fig, "svg", width=width, height=int(fig.layout.height or 700), timeout_s=timeout_s)


def figure_html(fig: go.Figure) -> str:
    """A standalone HTML page holding the interactive figure (plotly.js inlined: works offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)
