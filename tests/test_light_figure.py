"""A round's tree drawn light (static SVG, `taps.studio.figures.light`) shows the plotly figure's
parts at the figure's own pixels: every node at its place with its hover text as a tooltip, every
edge, the title (class `gtitle`, as plotly's), the legend, the depth axis and the colour bar; dark
figures stay dark; a part it cannot draw is refused, never dropped."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

import plotly.graph_objects as go
import pytest

from taps.config import DecodeConfig
from taps.session import DecodeSession
from taps.studio.figures import round_tree_figure
from taps.studio.figures.light import LightFigureError, light_svg
from taps.studio.figures.style import DARK_PAPER, apply_theme
from taps.studio.layout import plot_for

NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def rounds(tiny_pair):
    session = DecodeSession(tiny_pair, "def add(a, b):\n    return a", DecodeConfig(budget=12, max_new_tokens=24))
    return [session.step() for _ in range(3)]


def parsed(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def marker_points(fig) -> list[tuple[dict, int]]:
    """(trace, point) for every marker plotly draws visibly."""
    out = []
    for trace in fig.to_plotly_json()["data"]:
        if "markers" in (trace.get("mode") or "") and (trace.get("marker") or {}).get("opacity", 1) > 0:
            out += [(trace, i) for i, x in enumerate(trace["x"]) if x is not None]
    return out


def test_every_node_edge_and_label_is_drawn_where_the_figure_puts_it(rounds):
    plot = plot_for(900, 460, False, "M")
    for record in rounds:
        fig = round_tree_figure(record, plot=plot, prompt="def add(a, b):")
        root = parsed(light_svg(fig, plot.width))
        assert root.get("viewBox") == f"0 0 {plot.width} {fig.layout.height}"
        title = [t for t in root.iter(f"{NS}text") if t.get("class") == "gtitle"]
        assert len(title) == 1 and f"Round {record.number} ·" in "".join(title[0].itertext())
        tips = [t.text for t in root.iter(f"{NS}title")]
        points = marker_points(fig)
        hovered = [(t, i) for t, i in points if t.get("hoverinfo") != "skip"]
        assert len(tips) == len(hovered) > 0
        for (trace, i), tip in zip(hovered, tips):     # the hover box's text, point for point
            row = trace["customdata"][i]
            if len(row) == 9:                            # a node: token, id, depth, rank, scores, status
                assert tip.startswith(f"{html.unescape(row[1])}  ({row[8]})\nnode {row[0]} · depth {row[2]} · "
                                      f"drafter rank {row[3]}\nmarginal {row[4]}"), tip
                assert tip.endswith(f"target probability {row[7]}")
            else:                                        # a "+N more" entry
                assert tip.startswith(html.unescape(re.sub("<[^>]+>", "", row[0].split("<br>")[0])))
        texts = " ".join("".join(t.itertext()) for t in root.iter(f"{NS}text"))
        for trace in fig.data:
            if trace.name and trace.showlegend is not False and trace.x:
                assert trace.name in texts                                  # the legend
            if trace.mode == "text":                                        # every token label
                for label in trace.text:
                    assert html.unescape(label) in texts
        assert "depth (0 = root)" in texts
        edges = [t for t in fig.data if t.mode == "lines" and any(x is not None for x in t.x)]
        assert len(root.findall(f".//{NS}path")) >= len(edges)


def test_a_node_sits_at_the_figures_own_pixel(rounds):
    plot = plot_for(1000, 500, False, "M")
    fig = round_tree_figure(rounds[0], plot=plot)
    layout = fig.layout
    root_trace = next(t for t in fig.data if t.name and t.name.startswith("root"))
    x0, y0 = root_trace.x[0], root_trace.y[0]
    left, right = layout.margin.l, plot.width - layout.margin.r
    top, bottom = layout.margin.t, layout.height - layout.margin.b
    (xa, xb), (ya, yb) = layout.xaxis.range, layout.yaxis.range
    want = (left + (x0 - xa) / (xb - xa) * (right - left), bottom - (y0 - ya) / (yb - ya) * (bottom - top))
    svg = parsed(light_svg(fig, plot.width))
    squares = [r for r in svg.iter(f"{NS}rect") if r.get("width") == r.get("height") and r.get("x")
               and float(r.get("width")) < 40]
    centres = [(float(r.get("x")) + float(r.get("width")) / 2, float(r.get("y")) + float(r.get("height")) / 2)
               for r in squares]
    assert any(abs(cx - want[0]) < 0.2 and abs(cy - want[1]) < 0.2 for cx, cy in centres)


def test_coloured_nodes_get_the_colour_bar_and_a_dark_figure_stays_dark(rounds):
    plot = plot_for(900, 460, False, "M")
    fig = round_tree_figure(rounds[1], color_by="reach", plot=plot)
    svg = light_svg(fig, plot.width)
    assert "taps-colour-bar" in svg and "≤1e-4" in svg
    dark = light_svg(apply_theme(round_tree_figure(rounds[1], plot=plot), dark=True), plot.width)
    background = parsed(dark).find(f"{NS}rect")
    assert background.get("fill") == DARK_PAPER


def test_text_is_escaped_and_parts_it_cannot_draw_are_refused():
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="markers+text", text=["<b>a</b> &lt;tag&gt;", "x & y"],
                               hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(height=300, xaxis_range=[-1, 2], yaxis_range=[-1, 2], yaxis_visible=False,
                      title_text="t <b>&amp;</b>")
    root = parsed(light_svg(fig, 400))                      # well-formed XML: nothing unescaped
    assert "<tag>" in "".join(root.itertext()) and "x & y" in "".join(root.itertext())
    hidden = dict(xaxis_range=[0, 2], yaxis_range=[0, 2], yaxis_visible=False)
    with pytest.raises(LightFigureError):
        light_svg(go.Figure(go.Bar(x=[1], y=[1])).update_layout(**hidden), 400)
    with pytest.raises(LightFigureError):
        light_svg(go.Figure(go.Scatter(x=[1], y=[1])).update_layout(yaxis_visible=False), 400)  # ranges left to plotly
    with pytest.raises(LightFigureError):
        light_svg(go.Figure(go.Scatter(x=[1], y=[1], marker_symbol="hexagram")).update_layout(**hidden), 400)
    with pytest.raises(LightFigureError):                    # a y axis with ticks (the lattice's ranks)
        light_svg(go.Figure(go.Scatter(x=[1], y=[1])).update_layout(xaxis_range=[0, 2], yaxis_range=[0, 2]), 400)
