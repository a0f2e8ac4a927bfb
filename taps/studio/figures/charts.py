"""Charts of many runs: the race (speed-up per policy), the sweep (tau, modelled and measured speed
against budget), acceptance against cost, the round's time by stage; and the bench's and the
latency profile's plots (`python -m taps.bench`, `python -m taps.profile`), drawn in the same style
so that a policy has the same colour, symbol and pattern in a bench PNG as in the app."""

from __future__ import annotations

import math
from typing import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...policies import AR, PALETTE
from ...record import STAGES, Round
from .style import (
    CHART_PX,
    EDGE_STYLES,
    FONT,
    NODE_STYLES,
    STAGE_COLORS,
    STAGE_PATTERNS,
    chart_title,
    display_token,
    escape,
    fit_lines,
    is_baseline,
    policy_colour,
    policy_pattern,
    policy_symbol,
    run_policy,
)
from .trees import tree_positions


def _spread_error(spreads) -> dict:
    return dict(type="data", symmetric=False, array=[max(sp.high - sp.median, 0.0) for sp in spreads],
                arrayminus=[max(sp.median - sp.low, 0.0) for sp in spreads], thickness=2.5, width=8,
                color="#333333")


def race_figure(summary: list[dict], profile_label: str = "") -> go.Figure:
    """Modelled speed-up over AR (left: deterministic, under the named profile) beside the measured
    one (right: the median over repeats, the whiskers the range), one bar per selector; AR at 1.
    Each measured median is written above its whisker's top, where no whisker crosses it."""
    repeats = max((row["repeats"] for row in summary), default=0)
    room = 0.45 * (CHART_PX - 40)                   # a subplot's width: its title wraps to it
    titles = [chart_title(f"modelled speed-up over {AR.label}",
                          f"on {profile_label}'s latency profile" if profile_label else "", room, 18),
              chart_title(f"measured speed-up over {AR.label}", f"median of {repeats} repeats, range as whiskers",
                          room, 18)]
    fig = make_subplots(rows=1, cols=2, subplot_titles=[markup for markup, _ in titles])
    labels = [row["label"] for row in summary]
    colors = [policy_colour(x) for x in labels]
    patterns = [policy_pattern(x) for x in labels]
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
    fig.update_yaxes(rangemode="tozero", title_text=f"× {AR.label}")
    measured_tops = [top for top in tops if top == top]     # NaN-free
    if measured_tops:                            # headroom for the labels above the whiskers
        fig.update_yaxes(range=[0, 1.15 * max(max(measured_tops), 1.0)], row=1, col=2)
    fig.update_traces(cliponaxis=False)
    top = max(110, 50 + max(px for _, px in titles))
    fig.update_layout(template="plotly_white", font=FONT, height=360 + top, margin=dict(l=20, r=20, t=top, b=50),
                      meta={"kind": "race"})
    fig.update_annotations(font=dict(size=18))
    return fig


def sweep_figure(summary: list[dict], profile_label: str = "", best: list[dict] | None = None) -> go.Figure:
    """Against budget, per selector: tau (left), the modelled speed-up under the named profile
    (middle) and the measured tokens/s, median over repeats with the range (right). A best budget
    is starred only where it beat the runner-up by more than the noise (`best`)."""
    room = (1 - 2 * 0.07) / 3 * (CHART_PX - 40)     # a subplot's width: its title wraps to it
    titles = [chart_title("τ: tokens per round", "", room, 17),
              chart_title("modelled speed-up", f"on {profile_label}'s profile" if profile_label else "", room, 17),
              chart_title("measured tokens/s", "median, range as whiskers", room, 17)]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, subplot_titles=[markup for markup, _ in titles])
    ar = [row for row in summary if is_baseline(row["selector"])]
    clear = {row["selector"]: row for row in best or [] if row["clear"]}
    for name in sorted({row["label"] for row in summary if not is_baseline(row["selector"])}):
        mine = sorted((row for row in summary if row["label"] == name), key=lambda row: row["budget"])
        style = dict(color=policy_colour(name))
        marker = dict(symbol=policy_symbol(name), size=12, line=dict(color="#000", width=1), **style)
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
        fig.add_hline(y=1.0, line=dict(color=PALETTE["grey"], dash="dash", width=2), annotation_text=AR.label,
                      annotation_position="bottom right", row=1, col=2)
        fig.add_hline(y=ar[0]["tokens_per_s"].median, line=dict(color=PALETTE["grey"], dash="dash", width=3),
                      annotation_text=AR.label, annotation_position="bottom right", row=1, col=3)
    fig.update_xaxes(type="log", title_text="budget", dtick=math.log10(2))
    fig.update_yaxes(rangemode="tozero")
    titles_px = max(px for _, px in titles) + 12            # the legend's row above the subplots' titles
    top, inner = titles_px + 60, 330
    fig.update_layout(template="plotly_white", font=FONT, height=top + inner + 60, margin=dict(l=20, r=20, t=top, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1 + titles_px / inner, x=0),
                      meta={"kind": "sweep"})
    fig.update_annotations(font=dict(size=17))
    return fig


TRADEOFF_TEXT = ("top center", "bottom center", "middle right", "middle left")   # one side per selector


def tradeoff_points(mine: list[dict]) -> tuple[list[float], list[float], list[str]]:
    """One selector's sweep rows (by budget) as points, the budgets that land on the same point
    merged into one label ("4–64": a chain verifies the same whatever the budget), so no two labels
    of a curve sit on one spot."""
    xs, ys, labels = [], [], []
    for row in mine:
        rounds = max(row["rounds"], 1)
        x, y = row["verified_nodes"] / rounds, max(row["new_tokens"] - row["rounds"], 0) / rounds
        if xs and abs(x - xs[-1]) < 1e-9 and abs(y - ys[-1]) < 1e-9:
            labels[-1] = f"{labels[-1].split('–')[0]}–{row['budget']}"
            continue
        xs.append(x)
        ys.append(y)
        labels.append(str(row["budget"]))
    return xs, ys, labels


def tradeoff_figure(rows: list[dict]) -> go.Figure:
    """Accepted draft tokens per round against verified nodes per round: what each node buys. Each
    selector's budget labels sit on their own side of its points, and budgets that land on one point
    share one label, so labels of different curves (and of one chain's budgets) do not overlap."""
    fig = go.Figure()
    for n, name in enumerate(sorted({r["label"] for r in rows if not is_baseline(r["selector"])})):
        mine = sorted((r for r in rows if r["label"] == name), key=lambda r: r["budget"])
        xs, ys, labels = tradeoff_points(mine)
        fig.add_trace(go.Scatter(
            x=xs, y=ys, text=labels, textposition=TRADEOFF_TEXT[n % len(TRADEOFF_TEXT)],
            mode="lines+markers+text", name=name,
            line=dict(color=policy_colour(name), width=3),
            marker=dict(symbol=policy_symbol(name), size=12, line=dict(color="#000", width=1)),
            hovertemplate=f"{name}<br>budget %{{text}}<br>verified %{{x:.1f}} nodes/round<br>"
                          "accepted %{y:.2f} tokens/round<extra></extra>"))
    fig.update_layout(template="plotly_white", font=FONT, height=520, margin=dict(l=20, r=20, t=60, b=130),
                      title=dict(text="Acceptance against cost (labels: budget)", x=0),
                      xaxis_title="verified draft nodes per round", yaxis_title="accepted draft tokens per round",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


_LANE_KINDS = ("root", "accepted", "rejected", "waste", "bonus")


def lane_tree_figure(record: Round | None, height: int = 170, title: str = "") -> go.Figure:
    """A race lane's small tree: the round's verified nodes (root square, accepted circles on the
    thick path, rejected siblings diamonds, waste crosses on dotted edges) and the bonus token (a
    star), depth left to right; no labels (the lane's text shows the tokens; hover a node for its
    token). An empty frame before the lane's first round ends."""
    fig = go.Figure()
    if record is not None:
        nodes = sorted(record.selected)
        pos = tree_positions(record.pool_parents, record.pool_ranks, nodes)
        last = record.accepted[-1] if record.accepted else 0
        bonus = (len(record.accepted) + 1, pos[last][1])
        if any(x == bonus[0] and abs(y - bonus[1]) < 0.5 for x, y in pos.values()):
            bonus = (bonus[0], bonus[1] + 0.5)           # beside a verified sibling, not on it
        path = set(record.accepted) | {0}
        for style, pairs in (("verified", [(record.pool_parents[v], v) for v in nodes if v and v not in path
                                           and record.status[v] != "waste"]),
                             ("waste", [(record.pool_parents[v], v) for v in nodes if record.status[v] == "waste"]),
                             ("path", [(record.pool_parents[v], v) for v in record.accepted])):
            xs, ys = [], []
            for a, b in pairs:
                xs += [pos[a][0], pos[b][0], None]
                ys += [pos[a][1], pos[b][1], None]
            line = dict(EDGE_STYLES[style], width=min(EDGE_STYLES[style]["width"], 4))
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False,
                                     name=f"{style} edges"))
        fig.add_trace(go.Scatter(x=[pos[last][0], bonus[0]], y=[pos[last][1], bonus[1]], mode="lines",
                                 line=dict(EDGE_STYLES["bonus"], width=2), hoverinfo="skip", showlegend=False,
                                 name="bonus edge"))
        for kind in _LANE_KINDS:
            if kind == "bonus":
                xs, ys, texts = [bonus[0]], [bonus[1]], [record.bonus_text]
            else:
                members = [v for v in nodes if record.status[v] == kind]
                xs, ys = [pos[v][0] for v in members], [pos[v][1] for v in members]
                texts = [record.pool_texts[v] for v in members]
            spec = NODE_STYLES[kind]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="markers", name=spec["name"], showlegend=False,
                marker=dict(symbol=spec["symbol"], size=0.6 * spec["size"], line=spec["line"],
                            color=PALETTE["orange"] if kind == "bonus" else "#FFFFFF" if kind == "root"
                            else PALETTE["blue"] if kind == "accepted" else "#DDDDDD"),
                text=[display_token(t) for t in texts], hovertemplate=f"%{{text}} ({spec['name']})<extra></extra>"))
        rows = max([y for _, y in pos.values()] + [bonus[1]])
        fig.update_yaxes(range=[rows + 0.7, -0.7])
        fig.update_xaxes(range=[-0.4, max(bonus[0], max(x for x, _ in pos.values())) + 0.4])
    fig.update_xaxes(visible=False, fixedrange=True)
    fig.update_yaxes(visible=False, fixedrange=True)
    fig.update_layout(template="plotly_white", font=FONT, height=height, showlegend=False,
                      margin=dict(l=4, r=4, t=28 if title else 4, b=4), plot_bgcolor="white",
                      title=dict(text=escape(title), x=0.01, y=0.98, yanchor="top", font=dict(size=14)),
                      meta={"kind": "lane tree", "round": record.number if record is not None else 0})
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


# ---------------------------------------------------------------------------- bench and profile plots
_DASHES = ("solid", "dash", "longdash", "dashdot")      # runs of one policy (TAPS's estimators) told apart


def budget_figure(series: Mapping[str, list[dict]], metric: str, label: str, title: str,
                  baseline: float | None = None) -> go.Figure:
    """The bench's plot: `metric` against budget (log scale), one line per series (named by its run
    label) in its policy's colour and symbol (the policy of its rows' `selector`, else of its name);
    several series of one policy told apart by their dash, a hindsight policy (the oracle) dotted;
    `baseline` (AR's value) a dashed grey line."""
    fig = go.Figure()
    budgets = sorted({r["budget"] for items in series.values() for r in items})
    seen: dict[str, int] = {}
    for name, items in series.items():
        items = sorted(items, key=lambda r: r["budget"])
        run = items[0].get("selector", name) if items else name      # the rows' selector, else the name's
        found = run_policy(run)
        nth = seen[found.name if found else name] = seen.get(found.name if found else name, -1) + 1
        dash = "dot" if found is not None and found.hindsight else _DASHES[nth % len(_DASHES)]
        _policy_line(fig, name, run, [r["budget"] for r in items], [r[metric] for r in items], dash)
    if baseline is not None:
        fig.add_hline(y=baseline, line=dict(color=PALETTE["grey"], dash="dash", width=2), annotation_text=AR.label,
                      annotation_position="bottom right")
    _log_x_layout(fig, f"{label} vs budget", title, "budget (draft nodes verified per round)", budgets, label,
                  "selector")
    return fig


def _policy_line(fig: go.Figure, name: str, run: str, xs: list, ys: list, dash: str) -> None:
    """One run's line, in its policy's colour and symbol (`run`: its run label or policy name)."""
    colour = policy_colour(run)
    fig.add_trace(go.Scatter(x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=colour, width=3, dash=dash),
                             marker=dict(symbol=policy_symbol(run), size=11, color=colour,
                                         line=dict(color="#000", width=1))))


def _chart_title(fig: go.Figure, title: str, subtitle: str = "") -> None:
    """A one-plot chart's title and subtitle (plotly's own, 13 px), each wrapped to the chart's width
    (`CHART_PX`), and the top margin they need."""
    width = CHART_PX - 30
    big, small = fit_lines(title, width, 17), fit_lines(subtitle, width, 13) if subtitle else []
    fig.update_layout(title=dict(text="<br>".join(escape(line) for line in big), x=0.01, xanchor="left", y=1,
                                 yref="container", yanchor="top", pad=dict(t=10), font=dict(size=17),
                                 subtitle=dict(text="<br>".join(escape(line) for line in small), font=dict(size=13))),
                      margin=dict(l=70, r=20, t=24 + 22 * len(big) + 18 * len(small) + 16, b=60))


def _log_x_layout(fig: go.Figure, title: str, subtitle: str, x_title: str, ticks: list, y_title: str,
                  legend: str) -> None:
    """The bench plots' layout: a log x axis ticked at `ticks`, y from zero."""
    fig.update_layout(template="plotly_white", font=dict(FONT, size=15),
                      xaxis={"title": x_title, "type": "log", "tickvals": ticks, "ticktext": [str(t) for t in ticks]},
                      yaxis={"title": y_title, "rangemode": "tozero"}, legend={"title": legend})
    _chart_title(fig, title, subtitle)


def batch_figure(series: Mapping[str, list[tuple[int, float]]], policies: Mapping[str, str], title: str,
                 dashed: tuple[str, ...] = (), label: str = "speed-up over batched AR") -> go.Figure:
    """`python -m taps.bench --batch ... --plot`: each method's speed-up over AR at the same batch against the
    batch size (log 2), one line per method (named by its label) in its policy's colour and symbol
    (`policies`: label -> the registered policy's run label; the `dashed` ones, the batch plans,
    dashed in their policy's colour), AR's 1x a dashed grey line."""
    fig = go.Figure()
    batches = sorted({b for points in series.values() for b, _ in points})
    for name, points in series.items():
        _policy_line(fig, name, policies.get(name, name), [b for b, _ in points], [v for _, v in points],
                     "dash" if name in dashed else "solid")
    fig.add_hline(y=1.0, line=dict(color=PALETTE["grey"], dash="dash", width=2), annotation_text=f"{AR.label} (1x)",
                  annotation_position="bottom left")
    _log_x_layout(fig, f"{label} vs batch", title, "requests in a batch (one verify forward per round)", batches,
                  label, "method")
    return fig


def verify_latency_figure(profile) -> go.Figure:
    """A latency profile's verify time (fitted medians) against tree size, the drafter's pass as a
    dashed grey line."""
    fig = go.Figure(go.Scatter(x=list(profile.sizes), y=[1000 * s for s in profile.verify_s], mode="lines+markers",
                               name="verify (target tree forward)", line=dict(color=PALETTE["blue"], width=3),
                               marker=dict(size=7, color=PALETTE["blue"])))
    if profile.draft_s > 0:
        fig.add_hline(y=1000 * profile.draft_s, line=dict(color=PALETTE["grey"], dash="dash", width=2),
                      annotation_text="drafter pass", annotation_position="top left")
    fig.update_layout(template="plotly_white", font=dict(FONT, size=15), xaxis_title="tree size (draft nodes verified)",
                      yaxis={"title": "milliseconds (median)", "rangemode": "tozero"})
    _chart_title(fig, "Verify latency vs tree size",
                 f"{profile.pair} on {profile.device}, {profile.context_length} cached tokens")
    return fig


def reliability_figure(tables: Mapping[str, list[dict]], title: str = "") -> go.Figure:
    """The reliability diagram: per series (a run label, e.g. `taps/learned`), each bin's mean
    predicted reach against the share of its verified nodes the target accepted, the marker's area
    growing with the bin's node count (its number in the hover); the diagonal is perfect calibration.
    `tables`: rows of `taps.eval.metrics.reliability_table`."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="calibrated (predicted = accepted)",
                             line=dict(color=PALETTE["grey"], dash="dash", width=2), hoverinfo="skip"))
    seen: dict[str, int] = {}
    for name, rows in tables.items():
        if not rows:
            continue
        found = run_policy(name.split("/")[0].split(" ")[0])
        key = found.name if found else name
        nth = seen[key] = seen.get(key, -1) + 1
        colour = policy_colour(name.split("/")[0].split(" ")[0])
        most = max(r["nodes"] for r in rows)
        sizes = [8 + 14 * math.sqrt(r["nodes"] / most) for r in rows]
        fig.add_trace(go.Scatter(
            x=[r["predicted"] for r in rows], y=[r["observed"] for r in rows], name=name, mode="lines+markers",
            line=dict(color=colour, width=3, dash=_DASHES[nth % len(_DASHES)]),
            marker=dict(symbol=policy_symbol(name.split("/")[0].split(" ")[0]), size=sizes, color=colour,
                        line=dict(color="#000", width=1)),
            customdata=[[r["nodes"], r["bin"]] for r in rows],
            hovertemplate="reach %{customdata[1]}: %{customdata[0]} nodes<br>predicted %{x:.3f}, "
                          "accepted %{y:.3f}<extra>%{fullData.name}</extra>"))
    _chart_title(fig, "Reliability: predicted reach vs accepted share", title)
    fig.update_layout(template="plotly_white", font=dict(FONT, size=15),
                      xaxis={"title": "predicted reach (mean of the bin's verified nodes)", "range": [0, 1.02]},
                      yaxis={"title": "share the target accepted", "range": [0, 1.02]},
                      legend={"title": "estimator"})
    return fig
