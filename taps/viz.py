"""Plotly figures for TAPS Studio, and their exports (PNG and SVG through kaleido, standalone HTML).

Figures are built from plain records only: a `Round`, a toy tree, race and sweep result rows.
Trees are laid out with networkx: depth runs left to right, leaves one row apart in drafter-rank
order (the favourite on top), each parent centred on its children.

Readable on a projector and with colour-blindness: large fonts, the Okabe-Ito palette and the
Cividis colour scale, and a node's verdict carried by its marker shape and outline, never by hue
alone: accepted = circle with a heavy outline on a thick path, rejected sibling = diamond,
rejected-prefix waste = cross on a dotted edge, pool nodes never verified = small faint dots,
root = square, bonus token = star.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Mapping, Sequence

import networkx as nx
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .app_state import round_texts
from .failures import compare_rankings, hindsight_status, target_path, visible_text
from .record import STAGES, Round
from .toy import ToyTree, choose, descendants

PALETTE = {"black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
           "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#8C8C8C"}
SELECTOR_COLORS = {"ar": PALETTE["grey"], "dflash": PALETTE["sky"], "ddtree": PALETTE["orange"],
                   "taps": PALETTE["blue"], "oracle": PALETTE["green"]}
SELECTOR_SYMBOLS = {"ar": "square", "dflash": "triangle-up", "ddtree": "diamond", "taps": "circle",
                    "oracle": "star"}
SELECTOR_PATTERNS = {"ar": "", "dflash": "/", "ddtree": "x", "taps": ".", "oracle": "+"}
STAGE_COLORS = dict(zip(STAGES, [PALETTE["sky"], PALETTE["yellow"], PALETTE["purple"], PALETTE["orange"],
                                 PALETTE["blue"], PALETTE["grey"]]))
STAGE_PATTERNS = dict(zip(STAGES, ["/", "", ".", "x", "", "+"]))
FONT = dict(family="Source Sans Pro, Arial, sans-serif", size=18, color="#111111")
COLOR_SCALE = "Cividis"
LOG_FLOOR = 1e-4

COLOR_MODES = {"marginal": "marginal product (what DDTree ranks by)",
               "reach": "path-conditioned reach (what TAPS ranks by)",
               "target": "target's probability (known after verification)"}
_COLOR_FIELDS = {"marginal": "pool_path_marginal", "reach": "pool_reach", "target": "target_prob"}

NODE_STYLES = {
    "unselected": dict(name="pool, not verified", symbol="circle", size=9, opacity=0.35, line=dict(width=0)),
    "waste": dict(name="rejected-prefix waste", symbol="x", size=18, opacity=1.0,
                  line=dict(width=1.5, color=PALETTE["purple"])),
    "rejected": dict(name="rejected sibling", symbol="diamond", size=18, opacity=1.0,
                     line=dict(width=3, color=PALETTE["vermillion"])),
    "accepted": dict(name="accepted", symbol="circle", size=26, opacity=1.0, line=dict(width=4, color="#000000")),
    "root": dict(name="root (last committed token)", symbol="square", size=26, opacity=1.0,
                 line=dict(width=2, color="#000000")),
    "bonus": dict(name="bonus token (the target's own)", symbol="star", size=32, opacity=1.0,
                  line=dict(width=2, color="#000000")),
    "unknown": dict(name="verdict unknown", symbol="circle-open", size=16, opacity=1.0,
                    line=dict(width=2, color=PALETTE["grey"])),
    "target": dict(name="the target's token, not verified", symbol="circle-open", size=26, opacity=1.0,
                   line=dict(width=4, color=PALETTE["blue"])),
}
EDGE_STYLES = {
    "pool": dict(color="rgba(110,110,110,0.25)", width=1),
    "verified": dict(color="rgba(50,50,50,0.75)", width=2),
    "waste": dict(color=PALETTE["purple"], width=2.5, dash="dot"),
    "path": dict(color=PALETTE["blue"], width=8),
    "bonus": dict(color=PALETTE["orange"], width=5, dash="dash"),
}
EDGE_NAMES = {"pool": "pool edge", "verified": "verified edge", "waste": "edge under a rejected prefix",
              "path": "accepted path", "bonus": "to the bonus token"}


# ---------------------------------------------------------------------------- small helpers
def display_token(text: str, limit: int = 12) -> str:
    """Token text made visible: spaces, newlines and tabs get symbols; long tokens are cut."""
    shown = visible_text(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _log_scale(values: Sequence[float | None]) -> list[float]:
    return [math.log10(min(max(float(v), LOG_FLOOR), 1.0)) if v is not None and not math.isnan(float(v))
            else math.log10(LOG_FLOOR) for v in values]


def _coloraxis(title: str) -> dict:
    ticks = list(range(int(math.log10(LOG_FLOOR)), 1))
    labels = [f"≤{LOG_FLOOR:g}" if t == ticks[0] else f"{10.0 ** t:g}" for t in ticks]
    return dict(colorscale=COLOR_SCALE, cmin=ticks[0], cmax=0,
                colorbar=dict(title=dict(text=title, side="right"), tickvals=ticks, ticktext=labels, len=0.8,
                              thickness=22))


def _fmt(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def _closure(parents: Sequence[int], nodes) -> list[int]:
    """`nodes` with all their ancestors, root included, sorted."""
    keep = {0}
    for v in nodes:
        v = int(v)
        while v > 0 and v not in keep:
            keep.add(v)
            v = int(parents[v])
    return sorted(keep)


def tree_positions(parents: Mapping[int, int] | Sequence[int], ranks: Mapping[int, int] | Sequence[int],
                   nodes: Sequence[int]) -> dict[int, tuple[float, float]]:
    """(x, y) per node: x = depth, leaves on consecutive rows in (rank, index) order, each parent
    at the middle of its children. `nodes` must be prefix-closed and hold the root 0."""
    graph = nx.DiGraph()
    graph.add_node(0)
    for v in nodes:
        if v != 0:
            graph.add_edge(int(parents[v]), int(v))
    depth = nx.single_source_shortest_path_length(graph, 0)
    row, y = 0, {}
    order = nx.dfs_postorder_nodes(graph, 0, sort_neighbors=lambda vs: sorted(vs, key=lambda v: (ranks[v], v)))
    for v in order:
        kids = list(graph.successors(v))
        if kids:
            y[v] = (min(y[k] for k in kids) + max(y[k] for k in kids)) / 2
        else:
            y[v], row = row, row + 1
    return {v: (float(depth[v]), float(y[v])) for v in graph.nodes}


def _rows(pos: Mapping[int, tuple[float, float]]) -> int:
    return int(max(y for _, y in pos.values())) + 1


def _edge_trace(pos, pairs, style: str, showlegend: bool | None = None, legendgroup: str | None = None,
                name: str | None = None) -> go.Scatter:
    xs, ys = [], []
    for a, b in pairs:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    show = style in ("path", "waste", "bonus") if showlegend is None else showlegend
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


def _tree_axes(fig: go.Figure, rows: int, max_depth: int, title: str, panels: int = 1,
               height: int | None = None) -> None:
    """Axes, title and legend of a tree figure: the title on top, the legend at the bottom (where it
    can wrap onto more rows in a narrow column without covering anything)."""
    height = height or int(min(1500, max(560, 240 + 26 * rows)))
    top = 120 if panels > 1 else 70
    fig.update_xaxes(title_text="depth (0 = root)", dtick=1, range=[-0.5, max_depth + 0.7], showgrid=False,
                     zeroline=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(template="plotly_white", font=FONT, height=height, plot_bgcolor="white",
                      title=dict(text=title, x=0.01, xanchor="left", y=1 - 12 / height, yref="container",
                                 yanchor="top", font=dict(size=22)),
                      margin=dict(l=20, r=20, t=top, b=170), hoverlabel=dict(font_size=17),
                      legend=dict(orientation="h", x=0.01, xanchor="left", y=0.01, yref="container",
                                  yanchor="bottom", font=dict(size=16)))


# ---------------------------------------------------------------------------- the round's tree
_ROUND_HOVER = ("<b>%{customdata[1]}</b>  (%{customdata[8]})<br>node %{customdata[0]} · depth %{customdata[2]}"
                " · drafter rank %{customdata[3]}<br>marginal %{customdata[4]} · marginal product %{customdata[5]}"
                "<br>reach %{customdata[6]} · target probability %{customdata[7]}<extra></extra>")


def shown_pool_nodes(record: Round, max_pool_nodes: int = 100, rank_by: str = "reach") -> list[int]:
    """The pool nodes a tree figure draws: every verified node, the target's path as far as the
    pool holds it, and the best unverified nodes by `rank_by` up to `max_pool_nodes`; with
    ancestors, so the drawing stays a tree."""
    selected = set(record.selected)
    score = np.asarray(record.pool_path_marginal if rank_by == "marginal" else record.pool_reach, dtype=float)
    unselected = [i for i in np.lexsort((np.arange(len(score)), -score)) if int(i) not in selected]
    room = max(0, max_pool_nodes - len(selected))
    return _closure(record.pool_parents, list(selected) + target_path(record) + [int(i) for i in unselected[:room]])


def round_tree_figure(record: Round, color_by: str = "reach", max_pool_nodes: int = 100) -> go.Figure:
    """The round's candidate pool (faint), the verified prefix-closed subtree (solid), the accepted
    path (thick), the bonus token (star), rejected siblings (diamonds) and rejected-prefix waste
    (crosses on dotted edges); nodes coloured by `color_by` (see COLOR_MODES)."""
    if color_by not in COLOR_MODES:
        raise ValueError(f"colour by one of {', '.join(COLOR_MODES)}, not {color_by!r}")
    nodes = shown_pool_nodes(record, max_pool_nodes, "marginal" if color_by == "marginal" else "reach")
    bonus = len(record.pool_tokens)                       # a virtual node after the pool
    last = record.accepted[-1] if record.accepted else 0
    parents = dict(enumerate(record.pool_parents)) | {bonus: last}
    ranks = dict(enumerate(record.pool_ranks)) | {bonus: -1}
    pos = tree_positions(parents, ranks, nodes + [bonus])
    values = getattr(record, _COLOR_FIELDS[color_by])
    status = record.status

    fig = go.Figure()
    groups = {"pool": [], "verified": [], "waste": []}
    for v in nodes[1:]:
        kind = "pool" if status[v] == "unselected" else "waste" if status[v] == "waste" else "verified"
        groups[kind].append((record.pool_parents[v], v))
    for kind, pairs in groups.items():
        fig.add_trace(_edge_trace(pos, pairs, kind))
    chain = [0] + list(record.accepted)
    fig.add_trace(_edge_trace(pos, list(zip(chain[:-1], chain[1:])), "path"))
    fig.add_trace(_edge_trace(pos, [(last, bonus)], "bonus", showlegend=False))

    def rows(vs):
        return [[v, html.escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
                 record.pool_ranks[v] + 1, _fmt(record.pool_marginal[v]), _fmt(record.pool_path_marginal[v]),
                 _fmt(record.pool_reach[v]), _fmt(record.target_prob[v]), status[v]] for v in vs]

    roomy = _rows(pos) <= 48
    for kind in ("unselected", "waste", "rejected", "accepted", "root"):
        members = [v for v in nodes if status[v] == kind]
        if kind == "root":
            color: list[float] | str | None = "#000000"
        elif any(values[v] is None for v in members):
            color = PALETTE["grey"]
        else:
            color = _log_scale([values[v] for v in members])
        labelled = kind in ("accepted", "root") or (roomy and kind != "unselected")
        labels = [html.escape(display_token(record.pool_texts[v])) for v in members] if labelled else None
        fig.add_trace(_node_trace(pos, members, kind, color, rows(members), _ROUND_HOVER, text=labels))
    missed = [v for v in target_path(record) if status[v] == "unselected" and v in pos]
    fig.add_trace(_node_trace(pos, missed, "target", PALETTE["blue"], rows(missed), _ROUND_HOVER,
                              text=[html.escape(display_token(record.pool_texts[v])) for v in missed] or None))
    bonus_row = [[bonus, html.escape(display_token(record.bonus_text, 24)), record.pool_depths[last] + 1, "—", "—",
                  "—", "—", "—", "bonus: the target's own token"]]
    fig.add_trace(_node_trace(pos, [bonus], "bonus", PALETTE["orange"], bonus_row, _ROUND_HOVER,
                              text=[html.escape(display_token(record.bonus_text))]))
    heading = (f"Round {record.index + 1} · {record.selector} · budget {record.budget}: verified "
               f"{record.verified_nodes}, accepted {len(record.accepted)} + bonus, rejected siblings "
               f"{record.rejected_siblings}, waste {record.waste_nodes}")
    _tree_axes(fig, _rows(pos), max(pos[v][0] for v in pos), heading)
    fig.update_layout(coloraxis=_coloraxis(COLOR_MODES[color_by].split(" (")[0]),
                      meta={"round": record.index, "shown_nodes": len(nodes), "pool_nodes": len(record.pool_tokens)})
    return fig


def ranking_comparison_figure(record: Round, budget: int | None = None, max_pool_nodes: int = 100) -> go.Figure:
    """The same pool ranked two ways: the `budget` nodes of highest marginal product (left, what
    DDTree would verify) and of highest reach (right, what TAPS would verify), each drawn with the
    verdict hindsight gives it (shape) and coloured by that panel's score."""
    budget = int(budget if budget is not None else record.budget)
    comparison = compare_rankings(record, budget)
    hindsight = hindsight_status(record)
    path = target_path(record)
    extra = shown_pool_nodes(record, max_pool_nodes)
    nodes = _closure(record.pool_parents, comparison.by_marginal + comparison.by_reach + path + extra)
    pos = tree_positions(record.pool_parents, record.pool_ranks, nodes)
    titles = (f"By marginal product (DDTree): top {budget}<br>{comparison.describe('marginal')}",
              f"By path-conditioned reach (TAPS): top {budget}<br>{comparison.describe('reach')}")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=titles)
    hover = ("<b>%{customdata[1]}</b><br>node %{customdata[0]} · depth %{customdata[2]}<br>"
             "marginal product %{customdata[3]} · reach %{customdata[4]}<br>in hindsight: %{customdata[5]}"
             "<extra></extra>")
    panels = ((1, "marginal", comparison.by_marginal, record.pool_path_marginal),
              (2, "reach", comparison.by_reach, record.pool_reach))
    for col, _kind, chosen, score in panels:
        chosen_set = set(chosen)
        first = col == 1
        fig.add_trace(_edge_trace(pos, [(record.pool_parents[v], v) for v in nodes[1:] if v not in chosen_set],
                                  "pool", showlegend=False), row=1, col=col)
        fig.add_trace(_edge_trace(pos, [(record.pool_parents[v], v) for v in nodes[1:] if v in chosen_set],
                                  "verified", showlegend=False), row=1, col=col)
        fig.add_trace(_edge_trace(pos, [(record.pool_parents[v], v) for v in path], "path", showlegend=first,
                                  legendgroup="path", name="the target's path (hindsight)"), row=1, col=col)
        fig.add_trace(_node_trace(pos, [v for v in nodes if v not in chosen_set], "unselected", PALETTE["grey"],
                                  _cmp_rows(record, [v for v in nodes if v not in chosen_set], hindsight), hover,
                                  name="not picked", showlegend=first), row=1, col=col)
        for verdict in ("waste", "rejected", "unknown", "accepted"):
            members = [v for v in chosen if v and hindsight[v] == verdict]
            name = {"accepted": "picked, on the target's path", "rejected": "picked, rejected sibling",
                    "waste": "picked, under a rejected prefix", "unknown": "picked, verdict unknown"}[verdict]
            fig.add_trace(_node_trace(pos, members, verdict, _log_scale([score[v] for v in members]),
                                      _cmp_rows(record, members, hindsight), hover, name=name, showlegend=first),
                          row=1, col=col)
        missed = [v for v in path if v not in chosen_set]
        fig.add_trace(_node_trace(pos, missed, "target", PALETTE["blue"], _cmp_rows(record, missed, hindsight), hover,
                                  name="the target's token, not picked", showlegend=first), row=1, col=col)
        fig.add_trace(_node_trace(pos, [0], "root", "#000000", _cmp_rows(record, [0], hindsight), hover,
                                  showlegend=False), row=1, col=col)
    _tree_axes(fig, _rows(pos), max(p[0] for p in pos.values()),
               f"Round {record.index + 1}: the same pool, ranked two ways", panels=2)
    fig.update_layout(coloraxis=_coloraxis("score (each panel's own)"), meta={"budget": budget})
    fig.update_annotations(font=dict(size=18))
    return fig


def _cmp_rows(record: Round, nodes, hindsight) -> list[list]:
    return [[v, html.escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
             _fmt(record.pool_path_marginal[v]), _fmt(record.pool_reach[v]), hindsight[v]] for v in nodes]


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
        return [[v, html.escape(tree.path_text(v)), int(tree.depths[v]), int(tree.ranks[v]) + 1,
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
            labels = [html.escape(tree.labels[v]) for v in members] if labelled else None
            fig.add_trace(_node_trace(pos, members, kind, color, rows(members), hover, text=labels,
                                      name=names[kind], showlegend=first,
                                      size_scale=0.8 if len(nodes) > 45 else 1.0), row=1, col=col)
        fig.add_trace(_node_trace(pos, [0], "root", "#000000", rows([0]), hover, showlegend=False), row=1, col=col)
    leaves = sum(1 for v in nodes if tree.depths[v] == tree.depths.max())
    _tree_axes(fig, leaves, int(tree.depths.max()), "The toy tree, ranked two ways", panels=2,
               height=int(min(1000, max(560, 220 + 10 * leaves))))
    fig.update_layout(coloraxis=_coloraxis("score (each panel's own)"))
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


def race_figure(rows: list[dict]) -> go.Figure:
    """Tokens per second (with the speed-up over AR) and tau, one bar per selector."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per second (speed-up vs AR)",
                                                        "τ: tokens per round"))
    labels = [r["label"] for r in rows]
    colors = [SELECTOR_COLORS.get(_selector_of(x), PALETTE["grey"]) for x in labels]
    patterns = [SELECTOR_PATTERNS.get(_selector_of(x), "") for x in labels]
    speed = [f"{r['speedup_vs_ar']:.2f}×" if r["speedup_vs_ar"] == r["speedup_vs_ar"] else "" for r in rows]
    fig.add_trace(go.Bar(x=labels, y=[r["tokens_per_s"] for r in rows], text=speed, textposition="outside",
                         marker=dict(color=colors, pattern=dict(shape=patterns), line=dict(color="#000", width=1)),
                         showlegend=False, name="tokens/s"), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=[r["tau"] for r in rows], text=[f"{r['tau']:.2f}" for r in rows],
                         textposition="outside", showlegend=False, name="tau",
                         marker=dict(color=colors, pattern=dict(shape=patterns), line=dict(color="#000", width=1))),
                  row=1, col=2)
    fig.update_yaxes(rangemode="tozero")
    fig.update_traces(cliponaxis=False)
    fig.update_layout(template="plotly_white", font=FONT, height=460, margin=dict(l=20, r=20, t=80, b=50))
    fig.update_annotations(font=dict(size=20))
    return fig


def sweep_figure(rows: list[dict]) -> go.Figure:
    """tau and tokens/s against budget for each selector; AR as a dashed line; best budgets starred."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("τ: tokens per round", "tokens per second"))
    ar = [r for r in rows if r["selector"] == "ar"]
    labels = sorted({r["label"] for r in rows if r["selector"] != "ar"})
    for name in labels:
        mine = sorted((r for r in rows if r["label"] == name), key=lambda r: r["budget"])
        sel = _selector_of(name)
        style = dict(color=SELECTOR_COLORS.get(sel, PALETTE["grey"]))
        marker = dict(symbol=SELECTOR_SYMBOLS.get(sel, "circle"), size=12, line=dict(color="#000", width=1))
        budgets = [r["budget"] for r in mine]
        fig.add_trace(go.Scatter(x=budgets, y=[r["tau"] for r in mine], name=name, legendgroup=name,
                                 mode="lines+markers", line=dict(width=3, **style), marker=dict(**marker, **style)),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=budgets, y=[r["tokens_per_s"] for r in mine], name=name, legendgroup=name,
                                 showlegend=False, mode="lines+markers", line=dict(width=3, **style),
                                 marker=dict(**marker, **style)), row=1, col=2)
        best = max(mine, key=lambda r: r["tokens_per_s"])
        fig.add_trace(go.Scatter(x=[best["budget"]], y=[best["tokens_per_s"]], mode="markers+text",
                                 text=[f"best: {best['budget']}"], textposition="top center", legendgroup=name,
                                 showlegend=False, hovertemplate=f"{name}: best budget {best['budget']}<extra></extra>",
                                 marker=dict(symbol="star", size=24, color=style["color"],
                                             line=dict(color="#000", width=2))), row=1, col=2)
    if ar:
        fig.add_hline(y=ar[0]["tokens_per_s"], line=dict(color=PALETTE["grey"], dash="dash", width=3),
                      annotation_text="AR", annotation_position="bottom right", row=1, col=2)
    fig.update_xaxes(type="log", title_text="budget (draft nodes verified per round)", dtick=math.log10(2))
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(template="plotly_white", font=FONT, height=500, margin=dict(l=20, r=20, t=90, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.06, x=0))
    fig.update_annotations(font=dict(size=20))
    return fig


def tradeoff_figure(rows: list[dict]) -> go.Figure:
    """Accepted draft tokens per round against verified nodes per round: what each node buys."""
    fig = go.Figure()
    for name in sorted({r["label"] for r in rows if r["selector"] != "ar"}):
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
                     f'border-bottom:3px {border} #444;{outline}">{html.escape(round_texts(record))}</span>')
    return ('<div class="taps-text" style="white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;'
            'font-size:1.15rem;line-height:1.7;padding:0.6rem;border:1px solid #ccc;border-radius:6px">'
            + "".join(parts) + "</div>")


# ---------------------------------------------------------------------------- exports
def _ensure_browser() -> None:
    """Point kaleido at Debian's Chromium when nothing else is configured."""
    if not os.environ.get("BROWSER_PATH") and Path("/usr/bin/chromium").exists():
        os.environ["BROWSER_PATH"] = "/usr/bin/chromium"


def figure_png(fig: go.Figure, width: int = 1600, scale: float = 1.0) -> bytes:
    """A PNG of the figure (kaleido drives a headless Chromium)."""
    _ensure_browser()
    return fig.to_image(format="png", width=width, height=fig.layout.height or 700, scale=scale)


def figure_svg(fig: go.Figure, width: int = 1600) -> bytes:
    _ensure_browser()
    return fig.to_image(format="svg", width=width, height=fig.layout.height or 700)


def figure_html(fig: go.Figure) -> str:
    """A standalone HTML page holding the interactive figure (plotly.js inlined: works offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)
