"""Tree layout in pixels (taps.studio.layout): labels never overlap, fit their column, grow with the
window, the kept labels (a round's accepted path) are never dropped, what does not fit is counted
or grouped into "+N more", and no edge crosses a label."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps.studio.layout import (
    LABEL_ROW,
    LABEL_SIZES,
    Plot,
    column_chars,
    cut_label,
    fit_tree,
    font_for_width,
    plot_for,
    tidy_positions,
)


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


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def crosses(points, box) -> bool:
    """Whether the polyline `points` (depth units, pixels) enters `box` (pixels), sampled finely."""
    layout, pts = points
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        for step in range(41):
            t = step / 40
            x = ((x0 + (x1 - x0) * t) + 0.5) * layout.column_px
            y = y0 + (y1 - y0) * t
            if box[0] + 1 < x < box[1] - 1 and box[2] + 1 < y < box[3] - 1:
                return True
    return False


def chain(parents: list[int], leaf: int) -> list[int]:
    path = []
    while leaf > 0:
        path.append(leaf)
        leaf = parents[leaf]
    return [0] + path[::-1]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 120), st.integers(480, 1600), st.integers(300, 1000),
       st.sampled_from(list(LABEL_SIZES.values())))
def test_labels_never_overlap_fit_their_column_and_keep_the_path(seed, size, width, height, scale):
    parents = random_tree(seed, size)
    plot = Plot(width, height, label_scale=scale)
    nodes = list(range(size))
    required = nodes[: size // 2 + 1]
    path = chain(parents, required[-1])                                    # a root-to-node path: never dropped
    others = [v for v in required if v not in path]
    others.sort(key=lambda v: (len(chain(parents, v)), v))                  # ancestors before descendants
    texts = {v: f"tok{v}" * (1 + v % 3) for v in nodes}
    kinds = {v: "path" if v in path else ("waste" if v % 2 else "rejected") for v in required}
    layout = fit_tree(parents, {v: (v,) for v in nodes}, required, nodes[size // 2 + 1:], path + others, texts,
                      plot, keep=len(path), kinds=kinds)
    assert all(v in layout.labels for v in path)                            # the path is always labelled
    boxes = {v: layout.label_box(v) for v in layout.labels}
    for v, box in boxes.items():
        x, after = layout.pos[v][0], layout.depth_x[layout.depths[v] + 1]     # its column's x and the next one's
        if layout.label_chars >= 1:                                         # a column with room for a glyph
            assert box[1] + 9 * plot.marker_scale <= (after + 0.5) * layout.column_px + 1   # before the next one
        assert box[0] - (x + 0.5) * layout.column_px >= 10.5 * plot.marker_scale    # beyond the marker
        assert all(not overlap(box, other) for u, other in boxes.items() if u > v)
    assert all(text for text in layout.labels.values())
    real = [v for v in layout.labels if v not in layout.groups]
    assert layout.left_out == len(path) + len(others) - len(real)
    assert sum(n for kind, n in layout.left_out_by.items() if kind != "pool") == layout.left_out
    grouped = [v for members in layout.groups.values() for v in members]
    drawn = set(layout.nodes)
    assert not drawn & set(grouped) and set(required) <= drawn | set(grouped)       # every node drawn or grouped
    assert all(v not in layout.labels for v in grouped)
    if layout.left_out:                                                     # only when the tree did not fit otherwise
        assert layout.dropped_pool == size - (size // 2 + 1)
    if layout.span + layout.label_row <= plot.inner_height and layout.label_chars >= 1:
        edges = [(parents[v], v) for v in layout.nodes if v] + [(p, g) for g, p in layout.group_parent.items()]
        for a, b in edges:                                                  # no edge crosses a label
            pts = layout.edge_points(a, b)
            assert not any(crosses((layout, pts), box) for box in boxes.values()), (a, b)


def test_same_depth_labels_are_a_row_apart():
    parents = [-1, 0, 0, 0, 1, 2, 3]
    rows = {v: LABEL_ROW for v in range(7)}
    pos = tidy_positions(parents, {v: (v,) for v in range(7)}, list(range(7)), rows)
    for depth in (1, 2):
        ys = sorted(y for d, y in pos.values() if d == depth)
        assert all(b - a >= LABEL_ROW for a, b in zip(ys, ys[1:]))
    assert pos[0][1] == pos[2][1]                                   # the root centred on its children


def test_a_tree_without_labels_is_laid_out():
    layout = fit_tree([-1, 0, 0], {v: (v,) for v in range(3)}, [0, 1, 2], [], [], {}, Plot(900, 600))
    assert layout.labels == {} and layout.left_out == 0 and layout.columns == 2


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
    assert layout.span + layout.label_row <= Plot(1000, height).inner_height


def test_a_crowded_level_collapses_into_one_more_entry_and_keeps_the_path():
    """One root, 21 children (the accepted one ranked 4th, 20 rejected siblings), waste under two of
    them, the accepted child and a bonus under the accepted one: in a short plot the path keeps
    its labels and the rest of each crowded level becomes one "+N more" entry per parent."""
    parents = [-1] + [0] * 21 + [4, 4] + [1] * 6 + [2] * 5
    nodes = list(range(len(parents)))
    path = [0, 4, 22]
    rejected = [v for v in range(1, 22) if v != 4] + [23]
    waste = list(range(24, 35))
    kinds = {v: "rejected" for v in rejected} | {v: "waste" for v in waste} | {v: "path" for v in path}
    plot = plot_for(900, 420)
    layout = fit_tree(parents, {v: (v,) for v in nodes}, nodes, [], path + rejected + waste,
                      {v: f"t{v}" for v in nodes}, plot, keep=len(path), kinds=kinds)
    assert all(v in layout.labels for v in path)
    assert layout.left_out_by.get("waste") == 11                             # waste labels go first
    assert layout.left_out_by.get("rejected", 0) > 0
    kept = [v for v in rejected if v in layout.labels]
    assert kept == rejected[: len(kept)]                                     # the most likely siblings stay
    grouped = sorted(v for members in layout.groups.values() for v in members)
    assert grouped == sorted(set(rejected + waste) - set(kept))
    under_root = [g for g, p in layout.group_parent.items() if p == 0]
    assert len(under_root) == 1 and layout.labels[under_root[0]].startswith("+")
    assert layout.span + layout.label_row <= plot.inner_height
    nothing = fit_tree(parents, {v: (v,) for v in nodes}, nodes, [], path + rejected + waste,
                       {v: f"t{v}" for v in nodes}, plot, keep=len(path), collapse=False)
    assert all(v in nothing.labels for v in path) and not nothing.groups


def test_label_size_grows_with_the_window_and_the_presenter_control():
    assert 13 <= plot_for(900, 610).font_px <= 14                            # 1280 wide, normal mode
    assert plot_for(1560, 700, presenter=True, size="M").font_px >= 18      # 1600x1000, presenter mode
    assert plot_for(1500, 636, presenter=True).font_px >= 18
    sizes = [plot_for(1240, 420, presenter=True, size=s).font_px for s in ("S", "M", "L")]
    assert sizes == sorted(sizes) and sizes[0] < sizes[1] < sizes[2]
    assert plot_for(1240, 420, presenter=False, size="L").font_px == sizes[1]    # the control is presenter mode's
    assert font_for_width(480) < font_for_width(900) < font_for_width(1560)
    small, large = plot_for(900, 610), plot_for(1560, 700, presenter=True, size="L")
    assert large.label_row > small.label_row and large.char_px > small.char_px and large.marker_gap > small.marker_gap
    with pytest.raises(ValueError, match="label size must be one of S, M, L"):
        plot_for(900, 600, True, "XL")
    with pytest.raises(ValueError, match="positive size"):
        plot_for(0, 600)


@pytest.mark.parametrize("width", [900, 1240, 1600])
def test_the_bonus_star_has_room_of_its_own(width):
    """A `tall` node (the bonus star, the largest marker) gets a row of `star_row` pixels: its
    labelled siblings sit at least half a star row plus half a label row away, so the star never
    covers a rejected sibling's diamond (fib round 1 drew the star over one)."""
    parents = [-1, 0, 1, 1, 1, 1]
    plot = plot_for(width, 500)
    texts = {v: f"t{v}" for v in range(6)}
    plain = fit_tree(parents, {v: (v,) for v in range(6)}, list(range(6)), [], list(range(6)), texts, plot)
    starred = fit_tree(parents, {v: (v,) for v in range(6)}, list(range(6)), [], list(range(6)), texts, plot,
                       tall=[3])
    gaps = lambda layout, v: [abs(layout.pos[v][1] - layout.pos[u][1]) for u in (2, 3, 4, 5) if u != v]  # noqa: E731
    assert min(gaps(plain, 3)) == pytest.approx(plot.label_row)
    assert min(gaps(starred, 3)) >= (plot.star_row + plot.label_row) / 2 - 0.5
    assert plot.star_row > plot.label_row


def test_the_accepted_path_and_rejected_siblings_keep_their_whole_tokens_where_there_is_room():
    """A round at the Step page's size at 1280x720 (900x610): the accepted path and the rejected
    siblings (the `whole` labels) show their whole token up to 12 characters, their columns
    widened at the expense of short ones; only the other labels (waste here) are cut. In a plot
    too narrow for that, a whole label still gets at least what equal columns would give it."""
    texts = {0: "␣Parameters", 1: "⏎␣␣␣", 2: "␣parse_value", 3: "(", 4: "␣text", 5: ")", 6: ":",
             7: "␣validate_it", 8: "␣handle_everything", 9: "␣x", 10: "␣y", 11: "␣z"}
    parents = [-1, 0, 1, 2, 3, 4, 5, 1, 7, 6, 6, 6]
    path, rejected, waste = [0, 1, 2, 3, 4, 5, 6], [7], [8]
    kinds = {v: "path" for v in path} | {7: "rejected", 8: "waste"}
    wide = fit_tree(parents, {v: (v,) for v in range(12)}, list(range(9)), [9, 10, 11], path + rejected + waste,
                    texts, plot_for(900, 610), keep=len(path), kinds=kinds, whole=path + rejected)
    assert all(wide.labels[v] == texts[v] for v in path + rejected)
    assert wide.labels[8].endswith("…") and len(wide.labels[8]) < len(texts[8])     # the other labels are cut
    assert wide.chars_at[2] >= 12 > column_chars(plot_for(900, 610), wide.columns)   # equal columns would cut it
    assert wide.depth_x == sorted(wide.depth_x) and wide.depth_x[-1] < wide.columns - 0.5
    narrow_plot = plot_for(760, 610)
    narrow = fit_tree(parents, {v: (v,) for v in range(12)}, list(range(9)), [9, 10, 11], path + rejected + waste,
                      texts, narrow_plot, keep=len(path), kinds=kinds, whole=path + rejected)
    equal = column_chars(narrow_plot, narrow.columns)
    assert equal >= 3 and all(len(narrow.labels[v]) >= min(len(texts[v]), equal) for v in path + rejected)
    assert len(narrow.labels[2]) > equal
    assert any(narrow.labels[v] != texts[v] for v in path + rejected)           # no room for all: cut, not dropped
