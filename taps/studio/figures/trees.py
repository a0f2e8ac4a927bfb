"""Drawing blocks shared by the tree figures (a round's tree, the Learn toy): edges, nodes and token
labels as plotly traces in the shared style, and the pixel layout of a tree figure."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from ...policies import PALETTE
from ..layout import LABEL_ROW, MARKER_GAP, Plot, TreeLayout, tidy_positions
from .style import (
    EDGE_NAMES,
    EDGE_STYLES,
    FONT,
    LABEL_FONT,
    LEGEND_ROW,
    MODEBAR,
    NODE_STYLES,
    colour_axis,
    escape,
    label_font,
)


def tree_positions(parents: Mapping[int, int] | Sequence[int], ranks: Mapping[int, int] | Sequence[int],
                   nodes: Sequence[int], row: float = 1.0) -> dict[int, tuple[float, float]]:
    """(depth, y) per node with every node one `row` tall: leaves on consecutive rows in (rank,
    index) order, each parent at the middle of its first and last child. `nodes` must be
    prefix-closed and hold the root 0."""
    order = {v: (ranks[v],) for v in nodes}
    return tidy_positions(parents, order, list(nodes), {v: row for v in nodes})


def edge_trace(pos, pairs, style: str, showlegend: bool | None = None, legendgroup: str | None = None,
               name: str | None = None, layout: TreeLayout | None = None) -> go.Scatter:
    """The edges (parent, child) in `pairs`, drawn in one of EDGE_STYLES: straight, or with a
    `layout`, routed round the labels (out of a node after its label, `TreeLayout.edge_points`)."""
    xs, ys = [], []
    for a, b in pairs:
        points = layout.edge_points(a, b) if layout is not None else [pos[a], pos[b]]
        xs += [x for x, _ in points] + [None]
        ys += [y for _, y in points] + [None]
    show = style in ("path", "waste") if showlegend is None else showlegend
    return go.Scatter(x=xs, y=ys, mode="lines", line=EDGE_STYLES[style], hoverinfo="skip",
                      name=name or EDGE_NAMES[style], showlegend=show and bool(pairs), legendgroup=legendgroup or style)


def node_trace(pos, nodes, style: str, color: list[float] | str | None, customdata, hovertemplate: str,
               text: list[str] | None = None, name: str | None = None, showlegend: bool = True,
               coloraxis: str = "coloraxis", size_scale: float = 1.0, ids: list[str] | None = None) -> go.Scatter:
    """The `nodes`, drawn in one of NODE_STYLES: coloured on the colour axis (a list of log values)
    or in one colour; `ids` (a node's token path) keep a node's identity between redraws."""
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
                      legendgroup=style, ids=ids, cliponaxis=False)


def label_trace(pos, labels: Mapping[int, str], layout: TreeLayout | None = None,
                ids: list[str] | None = None) -> go.Scatter:
    """Token labels to the right of their nodes, beyond the marker: placed by `layout` (its font,
    its gap) or, without one, offset by an invisible marker as wide as the default gap. A halo keeps
    them readable over anything drawn under them; they are the figure's last trace, on top."""
    nodes = list(labels)
    if layout is None:
        return go.Scatter(x=[pos[v][0] for v in nodes], y=[pos[v][1] for v in nodes], mode="markers+text",
                          text=[escape(labels[v]) for v in nodes], textposition="middle right",
                          textfont=LABEL_FONT, marker=dict(size=2 * MARKER_GAP - 6, opacity=0), hoverinfo="skip",
                          showlegend=False, name="token labels", cliponaxis=False, ids=ids)
    return go.Scatter(x=[layout.label_x(v) for v in nodes], y=[pos[v][1] for v in nodes], mode="text",
                      text=[escape(labels[v]) for v in nodes], textposition="middle right",
                      textfont=label_font(layout.font_px), hoverinfo="skip", showlegend=False, name="token labels",
                      cliponaxis=False, ids=ids)


def tree_layout(fig: go.Figure, plot: Plot, layout, title: dict, title_px: int, meta: dict,
                colorbar: str | None) -> None:
    """Axes in pixels (one y unit is one pixel), the title on top, the legend and colour bar in the
    right margin, the depth axis at the bottom: everything inside the figure's own height."""
    entries = sum(1 for t in fig.data if t.showlegend is not False and t.legendgroup and t.x)
    row = getattr(layout, "label_row", LABEL_ROW)
    legend_font, legend_row = 14, LEGEND_ROW
    if title_px + legend_row * entries + 12 + (70 if colorbar else 0) + plot.bottom > plot.height:
        legend_font, legend_row = 12, LEGEND_ROW - 4            # a short figure: a compact legend
    inner = max(layout.span + row, legend_row * entries + 12 + (70 if colorbar else 0))
    pad = (inner - layout.span - row) / 2
    height = int(title_px + inner + plot.bottom)
    deepest = max(layout.depths.values())
    # a column is as wide as its labels need (`TreeLayout.depth_x`)
    fig.update_xaxes(title_text="depth (0 = root)", tickvals=layout.depth_x[:deepest + 1],
                     ticktext=[str(d) for d in range(deepest + 1)],
                     range=[-0.5, layout.columns - 0.5], showgrid=False, zeroline=False, tickfont=dict(size=15),
                     title_font=dict(size=15))
    fig.update_yaxes(visible=False, range=[layout.span + row / 2 + pad, -row / 2 - pad])
    fig.update_layout(template="plotly_white", font=FONT, height=height, plot_bgcolor="white", autosize=True,
                      title=title,
                      margin=dict(l=plot.left, r=plot.right, t=title_px, b=plot.bottom, autoexpand=False),
                      hoverlabel=dict(font_size=16),
                      legend=dict(orientation="v", x=1 + 8 / plot.inner_width, xanchor="left", y=1, yanchor="top",
                                  font=dict(size=legend_font), tracegroupgap=0, itemsizing="constant"),
                      modebar=MODEBAR, meta=meta)
    if colorbar:
        fig.update_layout(coloraxis=colour_axis(colorbar, plot.right - 40, horizontal=True))
