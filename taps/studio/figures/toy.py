"""The Learn page's toy figures: a small made-up draft tree ranked two ways (DDTree's marginal
product beside TAPS's reach), with a rejected prefix's waste crossed out, and the expected tokens
per round each ranking buys against budget."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...policies import DDTREE, PALETTE, TAPS
from ..toy import ToyTree, choose, descendants
from .style import FONT, colour_axis, escape, fmt, log_scale
from .trees import edge_trace, node_trace, tree_positions

DEPTH_TITLE = "depth (0 = root), both panels"


def toy_tree_figure(tree: ToyTree, budget: int, rejected: int | None = None, height: int | None = None) -> go.Figure:
    """The toy's full tree twice: the `budget` nodes DDTree picks (marginal product, left) and TAPS
    picks (reach, right). With `rejected`, that node is marked and everything under it crossed
    out: those nodes can never be accepted, so verifying them is waste. `height` fits it to a
    window (presenter mode: tighter margins); otherwise it grows with the tree's leaves."""
    nodes = list(range(len(tree.labels)))
    pos = tree_positions(tree.parents, tree.ranks, nodes)
    unreachable = set(descendants(tree, rejected)) if rejected else set()
    by_marginal, by_reach = choose(tree.path_marginal, budget), choose(tree.reach, budget)
    titles = (f"{DDTREE.label}: top {budget}<br>by marginal product", f"{TAPS.label}: top {budget}<br>by reach")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=titles)
    hover = ("<b>%{customdata[1]}</b><br>depth %{customdata[2]} · drafter rank %{customdata[3]}<br>"
             "marginal product %{customdata[4]} · reach %{customdata[5]}<extra></extra>")

    def rows(vs):
        return [[v, escape(tree.path_text(v)), int(tree.depths[v]), int(tree.ranks[v]) + 1,
                 fmt(tree.path_marginal[v]), fmt(tree.reach[v])] for v in vs]

    small = len(nodes) <= 45
    for col, chosen, score in ((1, by_marginal, tree.path_marginal), (2, by_reach, tree.reach)):
        chosen_set = set(int(v) for v in chosen)
        first = col == 1
        fig.add_trace(edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:] if v not in chosen_set],
                                  "pool", showlegend=False), row=1, col=col)
        fig.add_trace(edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:]
                                        if v in chosen_set and v not in unreachable], "verified", showlegend=False),
                      row=1, col=col)
        fig.add_trace(edge_trace(pos, [(int(tree.parents[v]), v) for v in nodes[1:]
                                        if v in chosen_set and v in unreachable], "waste", showlegend=first),
                      row=1, col=col)
        groups = {"unselected": [v for v in nodes[1:] if v not in chosen_set],
                  "accepted": [v for v in nodes[1:] if v in chosen_set and v not in unreachable and v != rejected],
                  "waste": [v for v in nodes[1:] if v in chosen_set and v in unreachable],
                  "rejected": [rejected] if rejected else []}
        names = {"unselected": "not picked", "accepted": "picked", "waste": "picked but unreachable (waste)",
                 "rejected": "the rejected prefix"}
        for kind, members in groups.items():
            color = PALETTE["grey"] if kind == "unselected" else log_scale([score[v] for v in members])
            labelled = kind != "unselected" and (small or len(chosen_set) <= 30)
            labels = [escape(tree.labels[v]) for v in members] if labelled else None
            fig.add_trace(node_trace(pos, members, kind, color, rows(members), hover, text=labels,
                                      name=names[kind], showlegend=first,
                                      size_scale=0.8 if len(nodes) > 45 else 1.0), row=1, col=col)
        fig.add_trace(node_trace(pos, [0], "root", "#000000", rows([0]), hover, showlegend=False), row=1, col=col)
    leaves = sum(1 for v in nodes if tree.depths[v] == tree.depths.max())
    fitted = height is not None
    height = int(max(380, height)) if fitted else int(min(1000, max(560, 220 + 10 * leaves)))
    top, bottom = (90, 150) if fitted else (120, 205)
    # One depth title under both panels: two axis titles side by side run into each other in a narrow column.
    fig.update_xaxes(dtick=1, range=[-0.5, int(tree.depths.max()) + 0.7], showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(template="plotly_white", font=FONT, height=height, plot_bgcolor="white",
                      title=dict(text="The toy tree, ranked two ways", x=0.01, xanchor="left", y=1 - 12 / height,
                                 yref="container", yanchor="top", font=dict(size=22)),
                      margin=dict(l=20, r=20, t=top, b=bottom), hoverlabel=dict(font_size=17),
                      legend=dict(orientation="h", x=0.01, xanchor="left", y=0.01, yref="container",
                                  yanchor="bottom", font=dict(size=16)),
                      coloraxis=colour_axis("score (each panel's own)", min(300, height - top - bottom)))
    fig.update_layout(coloraxis_colorbar=dict(lenmode="fraction", len=0.8, x=1.02, y=0.5, yanchor="middle",
                                              title=dict(side="right")))
    fig.update_annotations(font=dict(size=18))
    fig.add_annotation(text=DEPTH_TITLE, x=0.5, xref="paper", xanchor="center", y=0, yref="paper", yanchor="top",
                       yshift=-30, showarrow=False, font=dict(size=18))
    return fig


def toy_curve_figure(curve, budget: int | None = None) -> go.Figure:
    """Expected tokens per round against budget for the trees each ranking picks (`budget` marked)."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=curve["budget"], y=curve["by_marginal"], name=f"{DDTREE.label} (marginal product)",
                             mode="lines+markers", line=dict(color=DDTREE.colour, width=4, dash="dash"),
                             marker=dict(symbol=DDTREE.symbol, size=11)))
    fig.add_trace(go.Scatter(x=curve["budget"], y=curve["by_reach"], name=f"{TAPS.label} (reach)", mode="lines+markers",
                             line=dict(color=TAPS.colour, width=4), marker=dict(symbol=TAPS.symbol, size=10)))
    if budget is not None:
        fig.add_vline(x=budget, line=dict(color=PALETTE["grey"], dash="dot", width=2), annotation_text="budget",
                      annotation_position="bottom right")
    fig.update_layout(template="plotly_white", font=FONT, height=500, margin=dict(l=20, r=20, t=60, b=120),
                      title=dict(text="Expected tokens per round", x=0),
                      xaxis_title="budget (draft nodes verified)", yaxis_title="1 + Σ reach of the picked nodes",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    return fig
