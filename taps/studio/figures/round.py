"""Figures of one round: its draft tree as a whole, stage by stage for the lesson (the drafter's
lattice, the pool, the estimate, the selection, the verdicts), its pool ranked two ways, the cost
model's view of its size, and the generated text round by round.

Round trees are laid out in pixels by `taps.studio.layout` (depth left to right, the favourite on
top, each parent centred on its children) for the plot size the page will draw, so every verified
node's token label fits beside it without touching another. A node's verdict is carried by its
marker shape and outline, never by hue alone: accepted = circle with a heavy outline on a thick
path, rejected sibling = diamond, rejected-prefix waste = cross on a dotted edge, pool nodes never
verified = small faint dots, root = square, bonus token = star. Token labels are monospace with
whitespace made visible.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ...config import run_label
from ...policies import DDTREE, PALETTE, TAPS
from ...record import STAGES, Round
from ..failures import compare_rankings, hindsight_status, target_path
from ..layout import Plot, TreeLayout, fit_tree
from ..lesson import STAGE_TITLES, expected_rate_curve, prompt_excerpt, round_text, size_explanation, stage_sentence
from .style import (
    DEFAULT_PLOT,
    FONT,
    MODEBAR,
    colour_axis,
    display_token,
    escape,
    figure_title,
    fmt,
    label_font,
    log_scale,
)
from .trees import edge_trace, label_trace, node_trace, tree_layout

COLOR_MODES = {"marginal": f"marginal product (what {DDTREE.label} ranks by)",
               "reach": f"path-conditioned reach (what {TAPS.label} ranks by)",
               "target": "target's probability (known after verification)"}
_COLOR_FIELDS = {"marginal": "pool_path_marginal", "reach": "pool_reach", "target": "target_prob"}
_ROUND_HOVER = ("<b>%{customdata[1]}</b>  (%{customdata[8]})<br>node %{customdata[0]} · depth %{customdata[2]}"
                " · drafter rank %{customdata[3]}<br>marginal %{customdata[4]} · marginal product %{customdata[5]}"
                "<br>reach %{customdata[6]} · target probability %{customdata[7]}<extra></extra>")
_NODE_KINDS = ("unselected", "picked", "waste", "rejected", "accepted", "root")


# ---------------------------------------------------------------------------- which pool nodes
def _score(record: Round, rank_by: str) -> np.ndarray:
    """The pool's marginal products when ranking (or colouring) by "marginal", its reach otherwise."""
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


# ---------------------------------------------------------------------------- node identity
def path_ids(record: Round) -> list[str]:
    """Every pool node's identity: its token path from the root ("12/7/301"), the same for the same
    node in every drawing of the round (a redraw between stages changes the tree in place)."""
    ids: list[str] = []
    for v, token in enumerate(record.pool_tokens):
        parent = record.pool_parents[v]
        ids.append(str(token) if v == 0 or parent < 0 else f"{ids[parent]}/{token}")
    return ids


def node_path_id(record: Round, v: int) -> str:
    """Node v's token path; v = len(pool) is the bonus token drawn as a node of its own."""
    if v < len(record.pool_tokens):
        return path_ids(record)[v]
    last = record.accepted[-1] if record.accepted else 0
    return f"{path_ids(record)[last]}/{record.bonus_token}"


def bonus_kept(record: Round) -> bool:
    """Whether the bonus token joined the text (a stop rule can cut it, or accepted tokens too)."""
    return record.tau > len(record.accepted)


def verdict_words(record: Round) -> str:
    """What the round committed, truthfully: "accepted 2 + bonus", or when a stop rule cut the
    round (end of text, the token limit) "accepted 1 (end of text, no bonus)"."""
    accepted = len(record.accepted)
    why = record.stop_reason or "stopped"
    if bonus_kept(record):
        return f"accepted {accepted} + bonus" + (f" ({record.stop_reason})" if record.stop_reason else "")
    if record.tau == accepted:
        return f"accepted {accepted} ({why}, no bonus)"
    return f"accepted {accepted}, {record.tau} kept ({why}, no bonus)"


# ---------------------------------------------------------------------------- drawing a round's tree
Labels = Callable[[list[int], int, np.ndarray], tuple[list[int], int]]
# (optional nodes, bonus node, score) -> (nodes to label, most important first; how many are never dropped)
_LONG_LEFT_OUT = ("Left out to fit: 20 pool dots, 20 waste and 20 rejected-sibling labels (40 of 60); "
                  "hover “+N more” for their tokens.")     # room kept for that line
_KIND_WORDS = {"waste": "waste", "rejected": "rejected-sibling", "picked": "picked", "unselected": "candidate",
               "other": "other"}


@dataclass
class _View:
    """What one drawing of a round's tree shows."""

    status: list[str]                 # each pool node's drawn status
    labels: Labels                    # the nodes to label, most important first
    required: list[int] = field(default_factory=lambda: [0])   # drawn whatever the size (the bonus added)
    any_depth: bool = False           # unverified nodes from any depth (else one past the drawn tree at most)
    verdicts: bool = False            # the accepted path drawn
    bonus: bool = False               # the bonus token drawn
    unselected_style: str = "unselected"
    grey_pool: bool = False           # unverified nodes left uncoloured (no estimate yet)


@dataclass
class _Drawn:
    layout: TreeLayout                # taps.studio.layout's fitted tree
    nodes: list[int]                  # drawn nodes (an own bonus node left out)
    bonus: int                        # the bonus token's node (len(pool) when the pool does not hold it)
    labelled: list[int]


def _by_depth_then_score(record: Round, score: np.ndarray, nodes) -> list[int]:
    return sorted(nodes, key=lambda v: (record.pool_depths[v], -score[v], v))


def _verdict_labels(record: Round, status: list[str], bonus: bool) -> Labels:
    """Root, the accepted path, the bonus (never dropped), then rejected siblings and waste, shallow
    and likely first: waste labels go before rejected siblings' when room runs out."""
    def labels(optional, bonus_at, score):
        def of(kind):
            return _by_depth_then_score(record, score, (v for v in record.selected if status[v] == kind))
        path = [0] + list(record.accepted) + ([bonus_at] if bonus else [])
        return path + of("rejected") + of("waste"), len(path)
    return labels


def _place(record: Round, view: _View, score: np.ndarray, max_pool_nodes: int, plot: Plot) -> _Drawn:
    """Which pool nodes to draw (the required ones, then the best others by `score`) and where."""
    held = bonus_node(record) if view.bonus else None
    bonus = held if held is not None else len(record.pool_tokens)
    last = record.accepted[-1] if record.accepted else 0
    parents = dict(enumerate(record.pool_parents))
    order = {v: (record.pool_ranks[v],) for v in range(len(record.pool_tokens))}
    texts = {v: display_token(t, 40) for v, t in enumerate(record.pool_texts)}
    if view.bonus and held is None:
        parents[bonus], order[bonus], texts[bonus] = last, (-1,), display_token(record.bonus_text, 40)
    required = sorted(set(view.required) | {bonus}) if view.bonus else list(view.required)
    deepest = max(record.pool_depths) if view.any_depth else \
        max(record.pool_depths[v] for v in required if v < len(record.pool_tokens)) + 1
    optional = _best_first(record, score, set(required), deepest)[: max(0, max_pool_nodes - len(required))]
    labelled, keep = view.labels(optional, bonus, score)
    kinds = {v: view.status[v] if v < len(view.status) else "bonus" for v in labelled}
    whole = labelled[:keep] + [v for v in labelled[keep:] if kinds[v] == "rejected"]   # whole tokens, where room
    layout = fit_tree(parents, order, required, optional, labelled, texts, plot, keep=keep, kinds=kinds,
                      tall=[bonus] if view.bonus else [], whole=whole)
    nodes = [v for v in layout.nodes if v != bonus or held is not None]
    return _Drawn(layout, nodes, bonus, labelled)


def _group_ids(record: Round, layout: TreeLayout) -> dict[int, str]:
    """A "+N more" entry's identity: its parent's token path and "+"."""
    out: dict[int, str] = {}
    for group in sorted(layout.groups):
        parent = layout.group_parent[group]
        out[group] = (out[parent] if parent in out else node_path_id(record, parent)) + "/+"
    return out


def _draw_edges(fig: go.Figure, record: Round, view: _View, drawn: _Drawn) -> None:
    """Edges by kind, routed round the labels; the accepted path and the bonus edge on top of the
    others but under every node and label."""
    layout, status = drawn.layout, view.status
    pos = layout.pos
    groups: dict[str, list] = {"pool": [], "verified": [], "waste": []}
    for v in drawn.nodes[1:]:
        if v == drawn.bonus and view.bonus:
            continue
        kind = "pool" if status[v] == "unselected" else "waste" if status[v] == "waste" else "verified"
        groups[kind].append((record.pool_parents[v], v))
    for group, members in layout.groups.items():
        groups["waste" if status[members[0]] == "waste" else "verified"].append((layout.group_parent[group], group))
    for kind, pairs in groups.items():
        fig.add_trace(edge_trace(pos, pairs, kind, layout=layout))
    if view.verdicts:
        chain = [0] + list(record.accepted)
        fig.add_trace(edge_trace(pos, list(zip(chain[:-1], chain[1:])), "path", layout=layout))
    if view.bonus:
        last = record.accepted[-1] if record.accepted else 0
        fig.add_trace(edge_trace(pos, [(last, drawn.bonus)], "bonus", showlegend=False, layout=layout))


def _group_trace(record: Round, view: _View, drawn: _Drawn, ids: dict[int, str], scale: float) -> go.Scatter:
    """The "+N more" entries: one marker each, its hover listing the nodes it stands for."""
    layout = drawn.layout
    entries = sorted(layout.groups)
    texts = []
    for group in entries:
        members = layout.groups[group]
        shown = ", ".join(f"{escape(display_token(record.pool_texts[v], 16))} ({view.status[v]})"
                          for v in members[:12])
        more = f", … {len(members) - 12} more" if len(members) > 12 else ""
        texts.append(f"<b>{len(members)} nodes grouped to fit</b><br>{shown}{more}")
    return node_trace(layout.pos, entries, "more", PALETTE["grey"], [[t] for t in texts],
                      "%{customdata[0]}<extra></extra>", size_scale=scale, ids=[ids[g] for g in entries])


def _draw_nodes(fig: go.Figure, record: Round, view: _View, drawn: _Drawn, color_by: str) -> str | None:
    """Node traces by status, then the bonus, the "+N more" entries and the labels; the colour
    bar's title, if one is needed."""
    layout, status, values = drawn.layout, view.status, getattr(record, _COLOR_FIELDS[color_by])
    pos, scale, ids = layout.pos, layout.marker_scale, path_ids(record)
    ids_of = {v: ids[v] for v in drawn.nodes} | {drawn.bonus: node_path_id(record, drawn.bonus)} \
        | _group_ids(record, layout)

    def rows(vs):
        return [[v, escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
                 record.pool_ranks[v] + 1, fmt(record.pool_marginal[v]), fmt(record.pool_path_marginal[v]),
                 fmt(record.pool_reach[v]), fmt(record.target_prob[v]), status[v]] for v in vs]

    colorbar = None
    for kind in _NODE_KINDS:
        members = [v for v in drawn.nodes if status[v] == kind and not (view.bonus and v == drawn.bonus)]
        if kind == "root":
            color: list[float] | str | None = "#000000"
        elif any(values[v] is None for v in members) or (kind == "unselected" and view.grey_pool):
            color = PALETTE["grey"]
        else:
            color = log_scale([values[v] for v in members])
            colorbar = colorbar or (COLOR_MODES[color_by].split(" (")[0] if members else None)
        style = view.unselected_style if kind == "unselected" else kind
        fig.add_trace(node_trace(pos, members, style, color, rows(members), _ROUND_HOVER, size_scale=scale,
                                 ids=[ids_of[v] for v in members]))
    if view.bonus:
        last = record.accepted[-1] if record.accepted else 0
        note = "bonus: the target's own token" + ("" if bonus_kept(record) else
                                                  f" (not kept: {record.stop_reason or 'stopped'})")
        bonus_row = [[drawn.bonus, escape(display_token(record.bonus_text, 24)), record.pool_depths[last] + 1, "—",
                      "—", "—", "—", "—", note]]
        fig.add_trace(node_trace(pos, [drawn.bonus], "bonus", PALETTE["orange"], bonus_row, _ROUND_HOVER,
                                 size_scale=scale, ids=[ids_of[drawn.bonus]]))
    if layout.groups:
        fig.add_trace(_group_trace(record, view, drawn, ids_of, scale))
    fig.add_trace(label_trace(pos, layout.labels, layout, ids=[ids_of[v] for v in layout.labels]))
    return colorbar


def _fit_below_title(place: Callable, layout_of: Callable, lines: list[str], plot: Plot):
    """`place(room)` with the room the title leaves; again, with room for the line saying what was
    left out, when something was."""
    found = place(replace(plot, top=figure_title(lines, plot)[1]))
    if layout_of(found).left_out_by:
        found = place(replace(plot, top=figure_title(lines + [_LONG_LEFT_OUT], plot)[1]))
    return found


def left_out_line(layout: TreeLayout, total: int) -> str:
    """The title line saying what was left out to fit, per kind: "" when nothing was."""
    by = dict(layout.left_out_by)
    parts = []
    if by.pop("pool", 0):
        parts.append(f"{layout.dropped_pool} pool dot{'s' if layout.dropped_pool != 1 else ''}")
    labels = [f"{by[kind]} {_KIND_WORDS.get(kind, kind.replace('_', ' '))}" for kind in
              ("waste", "rejected", "picked", "unselected", "candidate", "both", "only_marginal", "only_reach",
               "other", "path") if by.get(kind)]
    if labels:
        parts.append(f"{' and '.join([', '.join(labels[:-1]), labels[-1]] if len(labels) > 1 else labels)} "
                     f"label{'s' if layout.left_out != 1 else ''} ({layout.left_out} of {total})")
    if not parts:
        return ""
    return f"Left out to fit: {', '.join(parts)}" + ("; hover “+N more” for their tokens." if layout.groups else ".")


def _round_tree(record: Round, view: _View, color_by: str, max_pool_nodes: int, plot: Plot,
                lines: list[str], stage: str) -> go.Figure:
    """The round's tree as `view` shows it, titled by `lines` (a line about what was left out added)."""
    if color_by not in COLOR_MODES:
        raise ValueError(f"colour by one of {', '.join(COLOR_MODES)}, not {color_by!r}")
    drawn = _fit_below_title(lambda room: _place(record, view, _score(record, color_by), max_pool_nodes, room),
                             lambda found: found.layout, lines, plot)
    fig = go.Figure()
    _draw_edges(fig, record, view, drawn)
    colorbar = _draw_nodes(fig, record, view, drawn, color_by)
    layout = drawn.layout
    left = left_out_line(layout, len(drawn.labelled))
    title, title_px = figure_title(lines + ([left] if left else []), plot)
    tree_layout(fig, plot, layout, title, title_px,
                {"round": record.index, "number": record.number, "shown_nodes": len(drawn.nodes),
                 "pool_nodes": len(record.pool_tokens), "labels": len(layout.labels) - len(layout.groups),
                 "left_out": layout.left_out, "left_out_by": layout.left_out_by, "more": len(layout.groups),
                 "grouped": sum(len(m) for m in layout.groups.values()), "font_px": layout.font_px,
                 "stage": stage}, colorbar)
    return fig


def _heading(record: Round, prompt: str | None, stage: str | None = None) -> str:
    """`Round 3 · taps/online · budget 32 · “prompt”`, bold up to the run's name; with a stage,
    which of the six it is."""
    what = f"<b>Round {record.number}</b>" if stage is None else \
        f"<b>Round {record.number} · {STAGES.index(stage) + 1} of 6: {STAGE_TITLES[stage]}</b>"
    return (f"{what} · {run_label(record.selector, record.estimator)} · budget {record.budget}"
            + (f" · “{escape(prompt_excerpt(prompt))}”" if prompt else ""))


# ---------------------------------------------------------------------------- the figures of a round
def round_tree_figure(record: Round, color_by: str = "reach", max_pool_nodes: int = 60, plot: Plot | None = None,
                      prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """The whole round: its candidate pool (faint), the verified prefix-closed subtree (solid), the
    accepted path (thick), the bonus token (a star, drawn once), rejected siblings (diamonds) and
    rejected-prefix waste (crosses on dotted edges); nodes coloured by `color_by` (COLOR_MODES).

    `plot` is the pixel size the page has for it (height is a maximum). `config` (the run's
    settings) explains a tree smaller than its budget; `prompt` goes into the title."""
    status = list(record.status)
    view = _View(status, _verdict_labels(record, status, bonus=True), required=sorted(record.selected),
                 verdicts=True, bonus=True)
    lines = [_heading(record, prompt),
             f"verified {record.verified_nodes}, {verdict_words(record)}, rejected "
             f"siblings {record.rejected_siblings}, waste {record.waste_nodes}", size_explanation(record, config)]
    return _round_tree(record, view, color_by, max_pool_nodes, plot or DEFAULT_PLOT, lines, "")


def pool_figure(record: Round, stage: str = "pool", color_by: str = "reach", max_pool_nodes: int = 60,
                plot: Plot | None = None, prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """Lesson stages 2 and 3: the candidate pool before anything is picked, uncoloured ("pool") or
    coloured by its estimate with the best candidates labelled ("estimate")."""
    if stage not in ("pool", "estimate"):
        raise ValueError(f"the pool figure draws the pool or estimate stage, not {stage!r}")
    estimate = stage == "estimate"

    def labels(optional, bonus, score):
        return [0] + (optional[:12] if estimate else []), 1

    view = _View(["root"] + ["unselected"] * (len(record.status) - 1), labels, any_depth=True,
                 unselected_style="candidate" if estimate else "unselected", grey_pool=not estimate)
    lines = [_heading(record, prompt, stage), stage_sentence(record, stage, config)]
    return _round_tree(record, view, color_by, max_pool_nodes, plot or DEFAULT_PLOT, lines, stage)


def selection_figure(record: Round, color_by: str = "reach", max_pool_nodes: int = 60, plot: Plot | None = None,
                     prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """Lesson stage 4: the nodes picked for verifying, before the target has said anything."""
    status = ["root"] + ["picked" if s != "unselected" else s for s in record.status[1:]]

    def labels(optional, bonus, score):
        return [0] + _by_depth_then_score(record, score, (v for v in record.selected if v)), 1

    view = _View(status, labels, required=sorted(record.selected))
    lines = [_heading(record, prompt, "select"), stage_sentence(record, "select", config)]
    return _round_tree(record, view, color_by, max_pool_nodes, plot or DEFAULT_PLOT, lines, "select")


def stage_narration(record: Round, stage: str, config: Mapping | None = None) -> str:
    """The sentence a stage's figure is narrated by: `stage_sentence`, except a commit that a stop
    rule cut (no bonus joins the text), which says so."""
    if stage == "commit" and not bonus_kept(record):
        return (f"The round stops here: {verdict_words(record)}, "
                f"τ = {record.tau}; the target's own next token (the star) does not join the text.")
    return stage_sentence(record, stage, config)


def verdict_figure(record: Round, stage: str = "verify", color_by: str = "reach", max_pool_nodes: int = 60,
                   plot: Plot | None = None, prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """Lesson stages 5 and 6: the target's verdicts on the verified tree ("verify"), then the bonus
    token it adds ("commit")."""
    if stage not in ("verify", "commit"):
        raise ValueError(f"the verdict figure draws the verify or commit stage, not {stage!r}")
    status, commit = list(record.status), stage == "commit"
    view = _View(status, _verdict_labels(record, status, bonus=commit), required=sorted(record.selected),
                 verdicts=True, bonus=commit)
    lines = [_heading(record, prompt, stage), stage_narration(record, stage, config)]
    return _round_tree(record, view, color_by, max_pool_nodes, plot or DEFAULT_PLOT, lines, stage)


def lattice_figure(record: Round, plot: Plot | None = None, prompt: str | None = None, per_depth: int = 4) -> go.Figure:
    """Lesson stage 1, the draft: for each depth, the drafter's best tokens (its marginals) as a
    column, best on top, coloured and labelled by probability."""
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
    chars = max(3, int((plot.inner_width / (depth + 1) - 16) // plot.char_px))
    labels = [display_token(record.root_text, chars)] + [
        f"{display_token(record.pool_texts[v], chars - 5)} {record.pool_marginal[v]:.2f}" for v in nodes[1:]]
    fig = go.Figure(go.Scatter(
        x=xs, y=ys, mode="markers+text", text=[escape(t) for t in labels], textposition="bottom center",
        textfont=label_font(plot.font_px), cliponaxis=False, name="the drafter's best tokens",
        marker=dict(symbol=["square"] + ["circle"] * (len(nodes) - 1), size=[16] + [10 + 16 * record.pool_marginal[v]
                                                                                  for v in nodes[1:]],
                    color=["#000000"] + log_scale([record.pool_marginal[v] for v in nodes[1:]]),
                    coloraxis="coloraxis", line=dict(width=1, color="#000000")),
        hovertemplate="%{text}<extra></extra>"))
    title, title_px = figure_title([_heading(record, prompt, "draft"), stage_sentence(record, "draft")], plot)
    inner = min(plot.inner_height, 70 * per_depth)
    fig.update_xaxes(title_text="depth (0 = root)", dtick=1, range=[-0.6, depth + 0.6], showgrid=False,
                     zeroline=False, tickfont=dict(size=15), title_font=dict(size=15))
    fig.update_yaxes(title_text="drafter rank", range=[per_depth - 0.4, -0.6], dtick=1, tickvals=list(range(per_depth)),
                     ticktext=[str(r + 1) for r in range(per_depth)], showgrid=False, zeroline=False)
    fig.update_layout(template="plotly_white", font=FONT, height=int(title_px + inner + plot.bottom + 20),
                      title=title,
                      margin=dict(l=70, r=plot.right, t=title_px, b=plot.bottom + 20, autoexpand=False),
                      coloraxis=colour_axis("marginal", max(90, int(inner - 20))), showlegend=False, modebar=MODEBAR,
                      meta={"round": record.index, "number": record.number, "stage": "draft"})
    return fig


def lesson_figure(record: Round, stage: str, color_by: str = "reach", max_pool_nodes: int = 60,
                  plot: Plot | None = None, prompt: str | None = None, config: Mapping | None = None) -> go.Figure:
    """One stage of one round (one of STAGES), narrated on the figure: the lattice, the pool, the
    estimate, the selection, the verdicts, the commit."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}': the stages are {', '.join(STAGES)}")
    if stage == "draft":
        return lattice_figure(record, plot, prompt)
    if stage in ("pool", "estimate"):
        return pool_figure(record, stage, "reach" if color_by == "target" else color_by, max_pool_nodes, plot,
                           prompt, config)
    if stage == "select":
        return selection_figure(record, color_by, max_pool_nodes, plot, prompt, config)
    return verdict_figure(record, stage, color_by, max_pool_nodes, plot, prompt, config)


def size_curve_figure(record: Round, profile, height: int = 300) -> go.Figure:
    """Expected tokens per second against tree size under `profile` (the cost model's view of this
    round), the verified size marked."""
    sizes, rate = expected_rate_curve(record, profile)
    fig = go.Figure(go.Scatter(x=sizes, y=rate, mode="lines", line=dict(color=PALETTE["blue"], width=3),
                               name="expected tokens/s", hovertemplate="%{x} nodes: %{y:.0f} tokens/s<extra></extra>"))
    fig.add_vline(x=record.verified_nodes, line=dict(color=PALETTE["orange"], width=3, dash="dash"),
                  annotation_text=f"verified {record.verified_nodes}", annotation_position="top")
    fig.update_layout(template="plotly_white", font=dict(FONT, size=15), height=height,
                      margin=dict(l=60, r=20, t=88, b=50), showlegend=False,
                      title=dict(text=f"Round {record.number}: the cost model's<br>expected tokens/s by tree size",
                                 font=dict(size=16)),
                      xaxis_title="nodes verified", yaxis_title="tokens/s (modelled)")
    fig.update_yaxes(rangemode="tozero")
    return fig


def _comparison_nodes(fig: go.Figure, record: Round, layout: TreeLayout, kind: dict[int, str],
                      hindsight: list[str]) -> None:
    """The ranking comparison's nodes by who picks them, its "+N more" entries and its labels."""
    pos, nodes = layout.pos, layout.nodes
    hover = ("<b>%{customdata[1]}</b><br>node %{customdata[0]} · depth %{customdata[2]}<br>marginal product "
             "%{customdata[3]} · reach %{customdata[4]}<br>%{customdata[6]}; in hindsight: %{customdata[5]}"
             "<extra></extra>")
    picks = {"both": "picked by both", "only_marginal": "picked by DDTree only", "only_reach": "picked by TAPS only"}
    def rows(vs):
        return [[v, escape(display_token(record.pool_texts[v], 24)), record.pool_depths[v],
                 fmt(record.pool_path_marginal[v]), fmt(record.pool_reach[v]), hindsight[v],
                 picks.get(kind.get(v, ""), "picked by neither")] for v in vs]

    colors = {"both": PALETTE["grey"], "only_marginal": PALETTE["orange"], "only_reach": PALETTE["sky"]}
    ids, scale = path_ids(record), layout.marker_scale
    neither = [v for v in nodes[1:] if v not in kind]
    fig.add_trace(node_trace(pos, neither, "unselected", PALETTE["grey"], rows(neither), hover,
                             name="picked by neither", size_scale=scale, ids=[ids[v] for v in neither]))
    for name in ("both", "only_marginal", "only_reach"):
        members = [v for v in nodes if kind.get(v) == name]
        fig.add_trace(node_trace(pos, members, name, colors[name], rows(members), hover, size_scale=scale,
                                 ids=[ids[v] for v in members]))
    fig.add_trace(node_trace(pos, [0], "root", "#000000", rows([0]), hover, size_scale=scale, ids=[ids[0]]))
    group_ids = _group_ids(record, layout)
    if layout.groups:
        entries = sorted(layout.groups)
        texts = [[f"<b>{len(layout.groups[g])} nodes grouped to fit</b><br>" + ", ".join(
            escape(display_token(record.pool_texts[v], 16)) for v in layout.groups[g][:12])] for g in entries]
        fig.add_trace(node_trace(pos, entries, "more", PALETTE["grey"], texts, "%{customdata[0]}<extra></extra>",
                                 size_scale=scale, ids=[group_ids[g] for g in entries]))
    fig.add_trace(label_trace(pos, layout.labels, layout, ids=[group_ids.get(v) or ids[v] for v in layout.labels]))


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
    by_depth = lambda nodes: sorted(nodes, key=lambda v: (record.pool_depths[v], v))  # noqa: E731
    on_path = by_depth(path)        # the answer the student looks for: labelled first, never grouped
    differ = by_depth(by_marginal ^ by_reach)
    same = by_depth(by_marginal & by_reach)
    labelled = list(dict.fromkeys([0] + on_path + differ + same))
    kinds = {v: kind.get(v, "path") for v in labelled}
    heading = (f"<b>Round {record.number}: the same pool ranked two ways</b> · top {budget}"
               + (f" · “{escape(prompt_excerpt(prompt))}”" if prompt else ""))
    scores = (f"marginal product (DDTree) {comparison.describe('marginal')} · reach (TAPS) "
              f"{comparison.describe('reach')}")
    if differ:
        verdict = (f"They differ on {len(differ)} nodes: {len(by_marginal - by_reach)} only DDTree picks (diamonds), "
                   f"{len(by_reach - by_marginal)} only TAPS picks (squares).")
    else:
        verdict = f"Both rankings pick the same {len(by_marginal)} nodes: they agree this round."
    lines = [heading, scores, verdict]
    layout = _fit_below_title(lambda room: fit_tree(parents, order, required, optional, labelled, texts, room,
                                                    keep=1 + len(on_path), kinds=kinds), lambda found: found,
                              lines, plot)
    pos, nodes = layout.pos, layout.nodes
    drawn = set(nodes)

    fig = go.Figure()
    path_edges = [(record.pool_parents[v], v) for v in path if v in drawn]
    waste_edges = [(record.pool_parents[v], v) for v in nodes[1:] if v in kind and hindsight[v] == "waste"]
    picked_edges = [(record.pool_parents[v], v) for v in nodes[1:] if v in kind and hindsight[v] != "waste"]
    picked_edges += [(layout.group_parent[g], g) for g in layout.groups]
    fig.add_trace(edge_trace(pos, [(record.pool_parents[v], v) for v in nodes[1:] if v not in kind], "pool",
                             layout=layout))
    fig.add_trace(edge_trace(pos, picked_edges, "verified", layout=layout))
    fig.add_trace(edge_trace(pos, waste_edges, "waste", layout=layout))
    fig.add_trace(edge_trace(pos, path_edges, "path", name="the target's path (hindsight)", layout=layout))
    _comparison_nodes(fig, record, layout, kind, hindsight)

    left = left_out_line(layout, len(labelled))
    if left:
        lines.append(left)
    title, title_px = figure_title(lines, plot)
    tree_layout(fig, plot, layout, title, title_px,
                 {"round": record.index, "number": record.number, "budget": budget, "differ": len(differ),
                  "labels": len(layout.labels) - len(layout.groups), "left_out": layout.left_out,
                  "more": len(layout.groups), "font_px": layout.font_px}, None)
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


