"""Tree layout for the round figures, in pixels: depth runs left to right, every labelled node gets
a row of its own at its depth, and labels are cut to the width a depth column has, so no two labels
overlap on the figure the page will actually draw.

Type grows with the window: a `Plot` derives its label font from its width (about 14 px in a 900 px
wide column, 19 px across a 1600 px window) times its `label_scale` (presenter mode's S/M/L,
`LABEL_SIZES`); the rows, glyph widths and gaps below follow the font.

The layout is a tidy tree (each parent at the middle of its first and last child) built bottom-up
from subtree contours: a subtree is placed just below its elder sibling's, as close as the nodes
at every shared depth allow. A labelled node needs a label row, a bare pool dot a few pixels.
Labels sit to the right of their node, beyond its marker, and end before the next depth column;
edges leave a node after its label (`edge_points`), so no edge crosses a label.

`fit_tree` chooses what to draw in a given plot size. The first `keep` labels (a round's accepted
path: root, accepted nodes, bonus) are never dropped. When room runs out it drops pool dots first,
then the labels at the end of the list (waste, then rejected siblings), and a node whose label is
dropped joins a "+N more" entry under its parent (one marker standing for those N nodes, whose
tokens the figure lists on hover) rather than crowding the tree; it counts what it left out.

Depth columns are as wide as their labels need where the figure has room (`column_widths`): the
`whole` labels (a round's accepted path and its rejected siblings) get their whole token, up to
`WHOLE_CHARS` characters, their columns widened at the expense of columns that need less (short
tokens, bare pool dots); what is left is shared out evenly, and only the other labels are cut to
their column. Where even that does not fit, the whole labels are cut as little as the width allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

LABEL_SIZES = {"S": 0.85, "M": 1.0, "L": 1.3}   # presenter mode's label size control
FONT_PX = 14                      # the label font of a 900 px wide plot at label_scale 1
MIN_FONT_PX, MAX_FONT_PX = 10, 32
CHAR_EM = 0.62                    # a monospace glyph's advance (0.60 em in DejaVu Sans Mono), with slack
# module-level sizes at FONT_PX, for figures drawn without a Plot (the Learn toy tree)
CHAR_PX = CHAR_EM * FONT_PX
LABEL_ROW = 20
MARKER_GAP = 12
MORE = "more"                     # the kind of a "+N more" entry
WHOLE_CHARS = 12                  # a `whole` label (the accepted path, rejected siblings) is cut only beyond this
MIN_CHARS = 3                     # a column with labels keeps room for this many characters of its other labels


def font_for_width(width: float, scale: float = 1.0) -> int:
    """The label font in px for a plot `width` px wide: 14 px at 900 px, 19 px at 1560 px."""
    return int(round(min(MAX_FONT_PX, max(MIN_FONT_PX, (7 + 0.0076 * width) * scale))))


@dataclass
class Plot:
    """The pixel size of a figure and of the margins around its plotting area, and the scale of its
    token labels (presenter mode's S/M/L: `LABEL_SIZES`)."""

    width: int
    height: int
    left: int = 16
    right: int = 230
    top: int = 96
    bottom: int = 56
    label_scale: float = 1.0

    @property
    def inner_width(self) -> int:
        return max(120, self.width - self.left - self.right)

    @property
    def inner_height(self) -> int:
        return max(80, self.height - self.top - self.bottom)

    @property
    def font_px(self) -> int:
        """Token labels' font size in px."""
        return font_for_width(self.width, self.label_scale)

    @property
    def marker_scale(self) -> float:
        """How much larger than their base size node markers are drawn (they grow with the labels)."""
        return min(1.6, max(0.9, self.font_px / FONT_PX))

    @property
    def char_px(self) -> float:
        return CHAR_EM * self.font_px

    @property
    def label_row(self) -> int:
        """Vertical pixels a labelled node needs."""
        return int(math.ceil(1.45 * self.font_px))

    @property
    def marker_row(self) -> int:
        """Vertical pixels an unlabelled verified node needs (its marker and a little air)."""
        return int(math.ceil(17 * self.marker_scale + 2))

    @property
    def star_row(self) -> int:
        """Vertical pixels the bonus star needs (the largest marker: 21 px at marker scale 1) with air
        on both sides, so that it never covers a neighbour's marker."""
        return int(math.ceil(27 * self.marker_scale))

    @property
    def dot_row(self) -> int:
        return int(math.ceil(7 * self.marker_scale))

    @property
    def marker_gap(self) -> int:
        """From a node's centre to its label's left edge: beyond the largest marker (the bonus star)."""
        return int(math.ceil(10.5 * self.marker_scale + 0.25 * self.font_px + 2))


def plot_for(width: int, height: int, presenter: bool = False, size: str = "M") -> Plot:
    """The Plot for a figure area of `width` x `height` px; in presenter mode the labels are scaled
    by the size control (`size`: one of LABEL_SIZES), otherwise they are the width's own size."""
    if size not in LABEL_SIZES:
        raise ValueError(f"label size must be one of {', '.join(LABEL_SIZES)}, not {size!r}")
    if width <= 0 or height <= 0:
        raise ValueError(f"a plot needs a positive size, not {width}x{height}")
    return Plot(width=int(width), height=int(height), label_scale=LABEL_SIZES[size] if presenter else 1.0)


@dataclass
class TreeLayout:
    pos: dict[int, tuple[float, float]]   # node -> (depth, y in pixels from the top row)
    labels: dict[int, str]                # node -> label text as drawn (cut to the column width)
    left_out: int                         # nodes that should carry a label but got none
    span: float                           # pixels from the top row to the bottom row
    columns: int                          # depth columns, the label room after the deepest included
    label_chars: int                      # the fewest characters a column with labels has room for
    dropped_pool: int = 0                 # pool dots not drawn to make room
    nodes: list[int] = field(default_factory=list)           # drawn real nodes (groups not included)
    groups: dict[int, list[int]] = field(default_factory=dict)   # "+N more" id -> the nodes it stands for
    group_parent: dict[int, int] = field(default_factory=dict)
    left_out_by: dict[str, int] = field(default_factory=dict)   # left-out labels per kind (and "pool" dots)
    font_px: int = FONT_PX
    marker_scale: float = 1.0
    char_px: float = CHAR_PX
    gap_px: int = MARKER_GAP
    label_row: int = LABEL_ROW
    column_px: float = 100.0
    fan_x: dict[int, float] = field(default_factory=dict)    # depth -> x where edges leave that column
    depths: dict[int, int] = field(default_factory=dict)     # node (or "+N more" entry) -> its depth
    depth_x: list[float] = field(default_factory=list)       # depth -> its column's x, in average column widths
    chars_at: dict[int, int] = field(default_factory=dict)   # depth -> label characters its column has room for

    def label_x(self, v: int) -> float:
        """Where node v's label starts, in depth units (average column widths: a column is as wide
        as its labels need, `depth_x`)."""
        return self.pos[v][0] + self.gap_px / self.column_px

    def label_box(self, v: int) -> tuple[float, float, float, float]:
        """(left, right, top, bottom) of v's label in pixels from the plotting area's left and the
        top row, as the layout reckons it."""
        depth, y = self.pos[v]
        left = (depth + 0.5) * self.column_px + self.gap_px
        half = 0.6 * self.font_px
        return left, left + len(self.labels[v]) * self.char_px, y - half, y + half

    def edge_points(self, parent: int, child: int) -> list[tuple[float, float]]:
        """An edge's polyline: out of the parent after its label, along its row to the column's fan
        point, then straight to the child's centre; it crosses no label."""
        (x0, y0), (x1, y1) = self.pos[parent], self.pos[child]
        start = x0
        if parent in self.labels:
            start = x0 + (self.gap_px + len(self.labels[parent]) * self.char_px + 2) / self.column_px
        fan = max(start, self.fan_x.get(self.depths.get(parent, int(x0)), x0))
        points = [(start, y0)] + ([(fan, y0)] if fan > start else []) + [(x1, y1)]
        return points


def tidy_positions(parents: Mapping[int, int] | Sequence[int], order: Mapping[int, tuple] | Sequence[tuple],
                   nodes: Sequence[int], rows: Mapping[int, float]) -> dict[int, tuple[float, float]]:
    """(depth, y) per node, y in pixels. `nodes` must be prefix-closed and hold the root 0;
    children are stacked top to bottom in `order[v]` order; node v needs `rows[v]` pixels."""
    children: dict[int, list[int]] = {v: [] for v in nodes}
    for v in nodes:
        if v != 0:
            children[int(parents[v])].append(int(v))
    for kids in children.values():
        kids.sort(key=lambda v: (order[v], v))

    def place(v: int) -> tuple[dict[int, float], list[float], list[float]]:
        """Relative y of every node under v (v at 0), and the subtree's top and bottom contour per
        depth below v (index 0 = v's own depth)."""
        half = rows[v] / 2
        kids = children[v]
        if not kids:
            return {v: 0.0}, [-half], [half]
        ys: dict[int, float] = {}
        top: list[float] = []
        bottom: list[float] = []
        firsts = []
        for kid in kids:
            kid_ys, kid_top, kid_bottom = place(kid)
            shift = 0.0
            if bottom:
                shift = max(b - t for b, t in zip(bottom, kid_top))
            for node, y in kid_ys.items():
                ys[node] = y + shift
            firsts.append(shift)
            for d in range(len(kid_top)):
                if d < len(top):
                    bottom[d] = kid_bottom[d] + shift
                else:
                    top.append(kid_top[d] + shift)
                    bottom.append(kid_bottom[d] + shift)
        centre = (firsts[0] + firsts[-1]) / 2
        ys = {node: y - centre for node, y in ys.items()}
        ys[v] = 0.0
        return ys, [-half] + [t - centre for t in top], [half] + [b - centre for b in bottom]

    depth = {0: 0}
    for v in sorted(nodes):                   # parents come before their children
        if v != 0:
            depth[v] = depth[int(parents[v])] + 1
    ys, top, _ = place(0)
    lift = -min(top)
    return {v: (float(depth[v]), ys[v] + lift) for v in nodes}


def cut_label(text: str, chars: int) -> str:
    """`text` cut to `chars` characters (the last one an ellipsis when cut); never empty."""
    chars = max(chars, 1)
    if len(text) <= chars:
        return text or "∅"
    return text[: chars - 1] + "…" if chars > 1 else "…"


def column_chars(plot: Plot, columns: int) -> int:
    """How many label characters fit between a node's marker and the next depth column, leaving
    room for the next column's markers and for the edges to fan out, when all `columns` are as wide."""
    return chars_in(plot, plot.inner_width / max(columns, 1))


def chars_in(plot: Plot, per_column: float) -> int:
    """How many label characters fit in a column `per_column` px wide (marker, gap, fan apart)."""
    fan = max(10.0, 0.12 * per_column)
    return int((per_column - plot.marker_gap - fan - 9 * plot.marker_scale) // plot.char_px)


def column_px_for(plot: Plot, chars: int) -> float:
    """The narrowest column (px) whose labels have room for `chars` characters: `chars_in`'s inverse."""
    base = max(chars, 0) * plot.char_px + plot.marker_gap + 9 * plot.marker_scale
    return max(base + 10.0, base / 0.88) + 0.01


def edge_px(plot: Plot) -> float:
    """From the plotting area's left edge to the root's centre, and from the last column's to its right edge."""
    return 9 * plot.marker_scale + 6


def column_widths(plot: Plot, columns: int, whole: Mapping[int, int], others: Mapping[int, int]) -> list[float]:
    """The px from each depth column to the next (`columns - 1` of them, filling the plot but for
    `edge_px` at either end, room for the root's and the last column's markers): a column whose
    `whole` labels need `whole[d]` characters gets them (up to `WHOLE_CHARS`, fewer where the width
    does not allow), one with other labels only room for `MIN_CHARS` of them (fewer when
    `others[d]`, its longest, is shorter), one without labels at least 40% of an average column;
    the rest is shared out so the narrowest columns widen first. Equal columns where even the
    least of that does not fit."""
    count = columns - 1
    average = plot.inner_width / max(columns, 1)
    if count <= 0:
        return []
    total = plot.inner_width - 2 * edge_px(plot)
    floor = [column_px_for(plot, min(MIN_CHARS, others[d])) if d in others
             else max(0.4 * average, column_px_for(plot, 0)) for d in range(count)]
    for cap in range(WHOLE_CHARS, 0, -1):
        need = [max(floor[d], column_px_for(plot, min(cap, whole[d])) if d in whole else 0.0) for d in range(count)]
        if sum(need) <= total:
            break
    else:
        return [total / count] * count
    level, rest = total / count, total     # the level L with sum(max(need, L)) == total: the narrow ones rise to it
    for i, width in enumerate(sorted(need, reverse=True)):
        level = rest / (count - i)
        if width <= level:
            break
        rest -= width
    return [max(width, level) for width in need]


def more_label(count: int, chars: int) -> str:
    """A "+N more" entry's label, shortened to "+N" where the column is narrow."""
    text = f"+{count} more"
    return text if len(text) <= chars else f"+{count}"


@dataclass
class _Try:
    fits: bool
    nodes: list[int]
    pos: dict[int, tuple[float, float]]
    span: float
    keep_pool: int
    shown: list[int]
    groups: dict[int, list[int]]
    group_parent: dict[int, int]


class _Fitter:
    """Tries drawings of one tree at one plot size: which pool dots, which labels, which nodes
    grouped into "+N more" entries."""

    def __init__(self, parents, order, required, optional, labelled, plot: Plot, collapse: bool,
                 tall: Sequence[int] = ()):
        self.parents, self.order, self.plot, self.collapse = parents, order, plot, collapse
        self.tall = {int(v) for v in tall}
        self.required = [int(v) for v in required]
        self.required_set = set(self.required)
        self.extra = [int(v) for v in optional if int(v) not in self.required_set]
        self.want = list(dict.fromkeys(int(v) for v in labelled))
        self.base = max(self.required + self.extra + self.want + [0]) + 1
        self.depth = {0: 0}
        for v in sorted(_closure(parents, self.required + self.extra + self.want)):
            if v:
                self.depth[v] = self.depth[int(parents[v])] + 1
        self.kids: dict[int, list[int]] = {v: [] for v in self.required}
        for v in self.required:
            if v:
                self.kids[int(parents[v])].append(v)

    def _collapsed(self, dropped: list[int]) -> set[int]:
        """The required nodes whose labels are dropped and whose every required child is grouped too."""
        out: set[int] = set()
        if not self.collapse:
            return out
        for v in sorted(set(dropped) & self.required_set, key=lambda n: -self.depth[n]):
            if v and all(k in out for k in self.kids[v]):
                out.add(v)
        return out

    def attempt(self, keep_pool: int, keep_labels: int, marker_row: int) -> _Try:
        plot = self.plot
        shown = self.want[:keep_labels]
        collapsed = self._collapsed(self.want[keep_labels:])
        pool = []
        for v in self.extra[:keep_pool]:
            u = v
            while u > 0 and u not in collapsed:
                u = int(self.parents[u])
            if u == 0:
                pool.append(v)
        nodes = _closure(self.parents, [v for v in self.required if v not in collapsed] + pool)
        parent_of = {v: int(self.parents[v]) for v in nodes if v}
        order = {v: self.order[v] for v in nodes}
        groups: dict[int, list[int]] = {}
        group_parent: dict[int, int] = {}
        by_parent: dict[int, int] = {}
        group_of: dict[int, int] = {}
        for v in sorted(collapsed, key=lambda n: (self.depth[n], self.order[n], n)):
            p = int(self.parents[v])
            shown_parent = group_of.get(p, p)
            if shown_parent not in by_parent:
                gid = self.base + len(groups)
                by_parent[shown_parent], groups[gid], group_parent[gid] = gid, [], shown_parent
                parent_of[gid], order[gid] = shown_parent, (math.inf,)
            group_of[v] = by_parent[shown_parent]
            groups[group_of[v]].append(v)
        labelled = set(shown) | set(groups)
        rows = {v: plot.label_row if v in labelled else marker_row if v in self.required_set else plot.dot_row
                for v in list(nodes) + list(groups)}
        for v in self.tall & set(rows):
            rows[v] = max(rows[v], plot.star_row)
        pos = tidy_positions(parent_of, order, list(nodes) + list(groups), rows)
        span = max(y for _, y in pos.values())
        return _Try(span + plot.label_row <= plot.inner_height, nodes, pos, span, len(pool),
                    [v for v in shown if v in pos], groups, group_parent)

    def search(self, keep: int) -> _Try:
        """Pool dots go first (half at a time), then the last labels, as few as need be; the first
        `keep` labels stay whatever the size."""
        row = self.plot.marker_row
        tried = self.attempt(len(self.extra), len(self.want), row)
        keep_pool = len(self.extra)
        while not tried.fits and keep_pool > 0:
            keep_pool = keep_pool // 2 if keep_pool > 8 else 0
            tried = self.attempt(keep_pool, len(self.want), row)
        if tried.fits:
            return tried
        for marker_row in (row, max(5, row // 3)):     # unlabelled markers squeeze together last
            low, high = keep, len(self.want) - 1
            if not self.attempt(0, low, marker_row).fits:
                continue
            while low < high:
                middle = (low + high + 1) // 2
                if self.attempt(0, middle, marker_row).fits:
                    low = middle
                else:
                    high = middle - 1
            return self.attempt(0, low, marker_row)
        return self.attempt(0, keep, max(5, row // 3))   # too tall whatever is left out: keep the path


def fit_tree(parents: Mapping[int, int] | Sequence[int], order: Mapping[int, tuple] | Sequence[tuple],
             required: Sequence[int], optional: Sequence[int], labelled: Sequence[int], texts: Mapping[int, str],
             plot: Plot, keep: int = 1, kinds: Mapping[int, str] | None = None, collapse: bool = True,
             tall: Sequence[int] = (), whole: Sequence[int] | None = None) -> TreeLayout:
    """Lay out `required` nodes (prefix-closed, root first), as many of `optional` (pool nodes, best
    first, each with its ancestors) as fit, and label the `labelled` nodes (most important first;
    a node's ancestors before it). The first `keep` labels are never dropped.

    The tree must fit `plot.inner_height`: pool dots go first, then the labels at the end of
    `labelled`; with `collapse`, a required node whose label is dropped joins its parent's "+N more"
    entry (`TreeLayout.groups`). `kinds` names each labelled node's kind for `left_out_by`; `tall`
    nodes (the bonus star) get a row of `plot.star_row` pixels. The `whole` labels (by default the
    first `keep`) keep their whole text up to `WHOLE_CHARS` characters where the width allows: their
    columns are widened (`column_widths`), the other labels cut to their column."""
    while True:                      # a deep tree in a narrow plot: smaller type until labels have room
        fitter = _Fitter(parents, order, required, optional, labelled, plot, collapse, tall)
        keep = max(0, min(keep, len(fitter.want)))
        found = fitter.search(keep)
        pos = found.pos
        deepest = max(int(d) for d, _ in pos.values())
        deepest_label = max((int(pos[v][0]) for v in list(found.shown) + list(found.groups)), default=-1)
        columns = max(deepest + 1, deepest_label + 2)    # the depth columns and room for the deepest labels
        chars = column_chars(plot, columns)
        if chars >= 3 or plot.font_px <= MIN_FONT_PX:
            break
        plot = replace(plot, label_scale=plot.label_scale * 0.9)
    depths = {v: int(d) for v, (d, _) in pos.items()}
    whole_set = set(fitter.want[:keep] if whole is None else (int(v) for v in whole))
    needs: tuple[dict[int, int], dict[int, int]] = ({}, {})      # per depth: the longest whole / other label
    for v in found.shown:
        wanted = needs[0] if v in whole_set else needs[1]
        wanted[depths[v]] = max(wanted.get(depths[v], 1), len(texts[v]))
    for g, members in found.groups.items():
        needs[1][depths[g]] = max(needs[1].get(depths[g], 1), len(f"+{len(members)} more"))
    widths = column_widths(plot, columns, *needs)
    depth_x = [-0.5 + edge_px(plot) * columns / plot.inner_width if widths else 0.0]   # x -0.5: the area's left
    for width in widths:
        depth_x.append(depth_x[-1] + width * columns / plot.inner_width)
    chars_at = {d: chars_in(plot, width) for d, width in enumerate(widths)}
    pos = {v: (depth_x[depths[v]], y) for v, (_, y) in pos.items()}
    labels = {v: cut_label(texts[v], chars_at[depths[v]]) for v in found.shown}
    labels.update({g: more_label(len(members), chars_at[depths[g]]) for g, members in found.groups.items()})
    left_out_by: dict[str, int] = {}
    for v in fitter.want:
        if v not in labels:
            kind = (kinds or {}).get(v, "other")
            left_out_by[kind] = left_out_by.get(kind, 0) + 1
    dropped_pool = len(fitter.extra) - found.keep_pool
    if dropped_pool:
        left_out_by["pool"] = left_out_by.get("pool", 0) + dropped_pool
    labelled_chars = [chars_at[depths[v]] for v in labels]
    layout = TreeLayout(pos=pos, labels=labels, left_out=sum(1 for v in fitter.want if v not in labels),
                        span=found.span, columns=columns, label_chars=min(labelled_chars, default=chars),
                        dropped_pool=dropped_pool, nodes=found.nodes, groups=found.groups,
                        group_parent=found.group_parent, left_out_by=left_out_by, font_px=plot.font_px,
                        marker_scale=plot.marker_scale, char_px=plot.char_px, gap_px=plot.marker_gap,
                        label_row=plot.label_row, column_px=plot.inner_width / columns, depths=depths,
                        depth_x=depth_x, chars_at=chars_at)
    layout.fan_x = _fan_points(layout, plot)
    return layout


def _fan_points(layout: TreeLayout, plot: Plot) -> dict[int, float]:
    """Per depth, the x (in depth units) where edges leave the column: past its longest label."""
    fan: dict[int, float] = {}
    for v, (x, _) in layout.pos.items():
        reach = layout.gap_px + len(layout.labels[v]) * layout.char_px + 4 if v in layout.labels \
            else 9 * plot.marker_scale + 2
        depth = layout.depths[v]
        fan[depth] = max(fan.get(depth, 0.0), x + reach / layout.column_px)
    return fan


def _closure(parents, nodes) -> list[int]:
    keep = {0}
    for v in nodes:
        v = int(v)
        while v > 0 and v not in keep:
            keep.add(v)
            v = int(parents[v])
    return sorted(keep)
