"""Drawing blocks shared by the tree figures (a round's tree, the Learn toy): edges, nodes and token
labels as plotly traces in the shared style, and the pixel layout of a tree figure."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from ...policies import PALETTE
from ..layout import LABEL_ROW, MARKER_GAP, Plot, tidy_positions
from .style import EDGE_NAMES, EDGE_STYLES, FONT, LABEL_FONT, LEGEND_ROW, NODE_STYLES, colour_axis, escape


def tree_positions(parents: Mapping[int, int] | Sequence[int], ranks: Mapping[int, int] | Sequence[int],
                   nodes: Sequence[int], row: float = 1.0) -> dict[int, tuple[float, float]]:
    """(depth, y) per node with every node one `row` tall: leaves on consecutive rows in (rank,
    index) order, each parent at the middle of its first and last child. `nodes` must be
    prefix-closed and hold the root 0."""
    order = {v: (ranks[v],) for v in nodes}
    return tidy_positions(parents, order, list(nodes), {v: row for v in nodes})


def edge_trace(pos, pairs, style: str, showlegend: bool | None = None, legendgroup: str | None = None,
               name: str | None = None) -> go.Scatter:
    """The edges (parent, child) in `pairs`, drawn in one of EDGE_STYLES."""
    xs, ys = [], []
    for a, b in pairs:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    show = style in ("path", "waste") if showlegend is None else showlegend
    return go.Scatter(x=xs, y=ys, mode="lines", line=EDGE_STYLES[style], hoverinfo="skip",
                      name=name or EDGE_NAMES[style], showlegend=show and bool(pairs), legendgroup=legendgroup or style)


def node_trace(pos, nodes, style: str, color: list[float] | str | None, customdata, hovertemplate: str,
               text: list[str] | None = None, name: str | None = None, showlegend: bool = True,
               coloraxis: str = "coloraxis", size_scale: float = 1.0) -> go.Scatter:
    """The `nodes`, drawn in one of NODE_STYLES: coloured on the colour axis (a list of log values)
    or in one colour."""
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


def label_trace(pos, labels: Mapping[int, str]) -> go.Scatter:
    """Token labels to the right of their nodes (an invisible marker as wide as the gap offsets them)."""
    nodes = list(labels)
    return go.Scatter(x=[pos[v][0] for v in nodes], y=[pos[v][1] for v in nodes], mode="markers+text",
                      text=[escape(labels[v]) for v in nodes], textposition="middle right",
                      textfont=LABEL_FONT, marker=dict(size=2 * MARKER_GAP - 6, opacity=0), hoverinfo="skip",
                      showlegend=False, name="token labels", cliponaxis=False)


def tree_layout(fig: go.Figure, plot: Plot, layout, title: dict, title_px: int, meta: dict,
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
        fig.update_layout(coloraxis=colour_axis(colorbar, plot.right - 40, horizontal=True))
