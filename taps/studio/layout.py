"""Tree layout for the round figures, in pixels: depth runs left to right, every labelled node gets
a row of its own at its depth, and labels are cut to the width a depth column has, so no two labels
overlap on the figure the page will actually draw.

The layout is a tidy tree (each parent at the middle of its first and last child) built bottom-up
from subtree contours: a subtree is placed just below its elder sibling's, as close as the nodes
at every shared depth allow. A labelled node needs `LABEL_ROW` pixels, a bare pool dot `DOT_ROW`.
Labels sit to the right of their node and never reach the next depth column, so only labels at the
same depth can meet, and the contours keep those a row apart.

`fit_tree` chooses what to draw in a given plot size: it drops the least important pool dots first,
then the labels of the least important verified nodes, and says how many labels it left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

FONT_PX = 14                      # token labels: monospace, so a label's width is known in advance
CHAR_PX = 0.62 * FONT_PX          # a monospace glyph's advance (0.60 em in DejaVu Sans Mono), with slack
LABEL_ROW = 20                    # vertical pixels a labelled node needs
MARKER_ROW = 15                   # vertical pixels an unlabelled verified node needs (its marker)
DOT_ROW = 7                       # vertical pixels an unlabelled pool dot needs
SQUEEZED_ROW = 5                  # what an unlabelled verified node gets when nothing else fits
MARKER_GAP = 12                   # from a node's centre to its label's left edge


@dataclass
class Plot:
    """The pixel size of a figure and of the margins around its plotting area."""

    width: int
    height: int
    left: int = 16
    right: int = 230
    top: int = 96
    bottom: int = 56

    @property
    def inner_width(self) -> int:
        return max(120, self.width - self.left - self.right)

    @property
    def inner_height(self) -> int:
        return max(80, self.height - self.top - self.bottom)


@dataclass
class TreeLayout:
    pos: dict[int, tuple[float, float]]   # node -> (depth, y in pixels from the top row)
    labels: dict[int, str]                # node -> label text as drawn (cut to the column width)
    left_out: int                         # nodes that should carry a label but got none
    span: float                           # pixels from the top row to the bottom row
    columns: int                          # depth columns, the label room after the deepest included
    label_chars: int                      # the longest label a column has room for
    dropped_pool: int = 0                 # pool dots not drawn to make room
    nodes: list[int] = field(default_factory=list)


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
    for v in sorted(nodes):
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
    """How many label characters fit between a node and the next depth column."""
    per_column = plot.inner_width / max(columns, 1)
    return int((per_column - MARKER_GAP - 4) // CHAR_PX)


def fit_tree(parents: Mapping[int, int] | Sequence[int], order: Mapping[int, tuple] | Sequence[tuple],
             required: Sequence[int], optional: Sequence[int], labelled: Sequence[int], texts: Mapping[int, str],
             plot: Plot) -> TreeLayout:
    """Lay out `required` nodes (prefix-closed, root first), as many of `optional` (pool nodes, best
    first, each with its ancestors) as fit, and label the `labelled` nodes (most important first).

    The tree must fit `plot.inner_height`: pool dots go first, then the labels at the end of
    `labelled`."""
    room = plot.inner_height
    required_set = set(required)
    extra = [v for v in optional if v not in required_set]
    want = list(labelled)

    def attempt(keep_pool: int, keep_labels: int, marker_row: int):
        nodes = _closure(parents, list(required) + extra[:keep_pool])
        shown = set(want[:keep_labels])
        rows = {v: LABEL_ROW if v in shown else marker_row if v in required_set else DOT_ROW for v in nodes}
        pos = tidy_positions(parents, order, nodes, rows)
        span = max(y for _, y in pos.values())
        return span + LABEL_ROW <= room, (nodes, pos, span, keep_pool, keep_labels)

    fits, found = attempt(len(extra), len(want), MARKER_ROW)
    keep_pool = len(extra)
    while not fits and keep_pool > 0:                  # pool dots go first, half at a time
        keep_pool = keep_pool // 2 if keep_pool > 8 else 0
        fits, found = attempt(keep_pool, len(want), MARKER_ROW)
    if not fits:                                       # then the last labels, as few as need be
        for marker_row in (MARKER_ROW, SQUEEZED_ROW):  # unlabelled verified nodes squeeze together last
            fits, found = attempt(0, 0, marker_row)
            if fits:
                low, high = 0, len(want)
                while low < high:
                    middle = (low + high + 1) // 2
                    if attempt(0, middle, marker_row)[0]:
                        low = middle
                    else:
                        high = middle - 1
                found = attempt(0, low, marker_row)[1]
                break
        else:                                          # too tall whatever is left out: keep the path's labels
            found = attempt(0, min(len(want), 3), SQUEEZED_ROW)[1]
    nodes, pos, span, keep_pool, keep_labels = found
    deepest = max(int(d) for d, _ in pos.values())
    columns = deepest + 1 + 1        # the depth columns and one column of room for the deepest labels
    chars = column_chars(plot, columns)
    labels = {v: cut_label(texts[v], chars) for v in want[:keep_labels] if v in pos}
    return TreeLayout(pos=pos, labels=labels, left_out=len(want) - len(labels), span=span, columns=columns,
                      label_chars=chars, dropped_pool=len(extra) - keep_pool, nodes=nodes)


def _closure(parents, nodes) -> list[int]:
    keep = {0}
    for v in nodes:
        v = int(v)
        while v > 0 and v not in keep:
            keep.add(v)
            v = int(parents[v])
    return sorted(keep)
