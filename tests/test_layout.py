"""Tree layout in pixels (taps.studio.layout): labels never overlap, fit their column, and what does not
fit is counted."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps.studio.layout import CHAR_PX, FONT_PX, LABEL_ROW, MARKER_GAP, Plot, cut_label, fit_tree, tidy_positions


def random_tree(seed: int, size: int) -> list[int]:
    rng = random.Random(seed)
    depths = [0]
    parents = [-1]
    for v in range(1, size):
        parent = rng.randrange(v)
        while depths[parent] >= 8:
            parent = rng.randrange(v)
        parents.append(parent)
        depths.append(depths[parent] + 1)
    return parents


def label_boxes(layout, plot: Plot) -> list[tuple[float, float, float, float]]:
    per_column = plot.inner_width / layout.columns
    boxes = []
    for v, text in layout.labels.items():
        depth, y = layout.pos[v]
        left = depth * per_column + MARKER_GAP
        boxes.append((left, left + len(text) * CHAR_PX, y - FONT_PX * 0.6, y + FONT_PX * 0.6))
    return boxes


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 120), st.integers(480, 1600), st.integers(300, 1000))
def test_labels_never_overlap_and_fit_their_column(seed, size, width, height):
    parents = random_tree(seed, size)
    plot = Plot(width, height)
    nodes = list(range(size))
    texts = {v: f"tok{v}" * (1 + v % 3) for v in nodes}
    layout = fit_tree(parents, {v: (v,) for v in nodes}, nodes[: size // 2 + 1], nodes[size // 2 + 1:],
                      nodes[: size // 2 + 1], texts, plot)
    boxes = label_boxes(layout, plot)
    per_column = plot.inner_width / layout.columns
    for n, box in enumerate(boxes):
        assert box[1] - box[0] + MARKER_GAP <= per_column          # a label never reaches the next column
        assert all(not overlap(box, other) for other in boxes[n + 1:])
    assert all(text for text in layout.labels.values())
    assert layout.left_out == size // 2 + 1 - len(layout.labels)
    if layout.left_out:                                             # only when the tree did not fit otherwise
        assert layout.dropped_pool == size - (size // 2 + 1)
        more = fit_tree(parents, {v: (v,) for v in nodes}, nodes[: size // 2 + 1], [],
                        nodes[: len(layout.labels) + 1], texts, plot)
        assert more.left_out > 0                                    # one label more would not fit
    labelled = list(layout.labels)
    assert labelled == list(range(len(labelled)))                   # the most important labels come first


def test_same_depth_labels_are_a_row_apart():
    parents = [-1, 0, 0, 0, 1, 2, 3]
    rows = {v: LABEL_ROW for v in range(7)}
    pos = tidy_positions(parents, {v: (v,) for v in range(7)}, list(range(7)), rows)
    for depth in (1, 2):
        ys = sorted(y for d, y in pos.values() if d == depth)
        assert all(b - a >= LABEL_ROW for a, b in zip(ys, ys[1:]))
    assert pos[0][1] == pos[2][1]                                   # the root centred on its children


def test_cut_label():
    assert cut_label("return", 10) == "return" and cut_label("return", 4) == "ret…"
    assert cut_label("", 3) == "∅" and cut_label("abc", 0) == "…"


@pytest.mark.parametrize("height", [360, 420, 700])
def test_what_does_not_fit_is_dropped_pool_first(height):
    parents = [-1] + [0] * 40                                       # a fan of 40 children
    nodes = list(range(41))
    layout = fit_tree(parents, {v: (v,) for v in nodes}, nodes[:11], nodes[11:], nodes[:11],
                      {v: str(v) for v in nodes}, Plot(1000, height))
    if layout.dropped_pool < 30:
        assert layout.left_out == 0
    assert layout.span + LABEL_ROW <= Plot(1000, height).inner_height
