"""The candidates view (issue 50): one round's drafter candidates as a grid, every selector's round on
it, the target's token in hindsight and the headroom per position. On the shipped pair (it has the
trained DFlash2 path selector): each selector's accepted cells are the target's own tokens, DFlash's
chain is the argmax row, DFlash2's walk one cell per position, the own round is the run's round, the
headroom rows are `candidate_recall` of the rounds' drafter candidates; the figure draws them; the
Step page opens the view from a link (AppTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taps import DecodeSession
from taps.config import DecodeConfig
from taps.eval.metrics import candidate_recall
from taps.policies import DDTREE, DFLASH, DFLASH2, TAPS
from taps.record import DRAFT_TOP_K
from taps.studio.candidates import candidates_view
from taps.studio.failures import probe_round

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def binary_search(items, target):"


def run(pair, selector: str, temperature: float = 0.0, rounds: int = 6):
    config = DecodeConfig(selector=selector, budget=32, max_new_tokens=40, temperature=temperature, seed=3)
    session = DecodeSession(pair, PROMPT, config)
    for _ in range(rounds):
        if session.finished:
            break
        session.step()
    return session


@pytest.fixture(scope="module")
def taps_run(shipped_pair):
    return run(shipped_pair, TAPS.name)


def view_of(session, number: int):
    record = session.rounds[number - 1]
    return record, candidates_view(session.pair, record, session.tokens, len(session.prompt_ids), session.config,
                                   session.rounds[:number])


def test_every_round_keeps_the_drafters_top_k(taps_run):
    for record in taps_run.rounds:
        assert len(record.draft_top) == len(record.draft_top_prob) > 0
        assert all(len(row) == DRAFT_TOP_K for row in record.draft_top)
        for probs in record.draft_top_prob:
            assert all(a >= b for a, b in zip(probs, probs[1:])) and 0 < sum(probs) <= 1 + 1e-6
        ranks = {(d, r) for d, r in zip(record.pool_depths[1:], record.pool_ranks[1:]) if r < DRAFT_TOP_K}
        for d, r in ranks:        # the pool's node at (depth, rank) holds the drafter's token of that rank
            tokens = {t for t, dd, rr in zip(record.pool_tokens, record.pool_depths, record.pool_ranks)
                      if (dd, rr) == (d, r)}
            assert tokens == {record.draft_top[d - 1][r]}


@pytest.mark.parametrize("number", [1, 3, 5, 6])
def test_each_selectors_accepted_cells_are_the_targets_tokens(taps_run, number):
    record, view = view_of(taps_run, number)
    # TAPS twice: with the run's estimator, and over DFlash2's candidates (the selector estimator)
    assert [o.key for o in view.overlays] == [DFLASH.name, DFLASH2.name, DDTREE.name, "taps/online", "taps/selector"]
    assert not view.missing
    for item in view.overlays:
        accepted = sorted((d, r) for d, r, verdict in item.nodes if verdict == "accepted")
        assert [d for d, _ in accepted] == list(range(1, len(accepted) + 1))      # a path from the root
        assert item.tau == len(accepted) + 1                          # the stop rule cut nothing in 6 rounds
        for d, r in accepted:         # by token: a probe's near-tied candidates may come in another order
            assert view.tokens[d - 1][r] == view.target[d - 1] if r < view.k else view.target_rank(d) is None
        # the first position it missed: the target's token was not among the children it verified there
        # of its last accepted node (the "rejected" verdicts; nodes under a rejected prefix are "waste")
        rejected_at = len(accepted) + 1
        tried = {r for d, r, verdict in item.nodes if d == rejected_at and verdict == "rejected"}
        assert view.target_rank(rejected_at) not in tried
    chain = next(o for o in view.overlays if o.name == DFLASH.name)
    assert {r for _, r, _ in chain.nodes} == {0}                       # DFlash: the argmax row
    leading = next((d - 1 for d in range(1, view.depth + 1) if view.target_rank(d) != 0), view.depth)
    assert chain.accepted == min(leading, len(chain.nodes))
    walk = next(o for o in view.overlays if o.name == DFLASH2.name)
    assert sorted(d for d, _, _ in walk.nodes) == list(range(1, len(walk.nodes) + 1))   # one cell per position
    own = next(o for o in view.overlays if o.own)
    assert own.key == "taps/online" and view.run == (TAPS.label, record.tau, record.verified_nodes)
    assert [o.key for o in view.overlays if o.own] == [own.key]
    other = probe_round(taps_run.pair, taps_run.tokens[: record.start + 1], taps_run.config.__class__(
        **{**taps_run.config.as_dict(), "selector": DDTREE.name}), DDTREE.name)
    ddtree = next(o for o in view.overlays if o.name == DDTREE.name)
    assert (ddtree.tau, ddtree.verified) == (other.tau, other.verified_nodes)


def test_the_headroom_rows_are_the_runs_candidate_recall(taps_run):
    _, view = view_of(taps_run, 4)
    expected = candidate_recall(taps_run.rounds[:4], taps_run.tokens, depths=view.depth, ks=(1, DRAFT_TOP_K))
    assert list(view.recall) == expected and view.recall_rounds == 4
    for row in view.recall:
        if row["rounds"]:
            assert row["recall@1"] <= row[f"recall@{DRAFT_TOP_K}"]


def test_a_sampled_run_and_an_ar_run_have_a_view(shipped_pair):
    sampled = run(shipped_pair, DFLASH2.name, temperature=0.7, rounds=3)
    _, view = view_of(sampled, 2)
    own = next(o for o in view.overlays if o.own)
    assert own.name == DFLASH2.name and view.temperature == 0.7
    again = view_of(sampled, 2)[1]
    assert again == view                           # the probes draw with the run's seed: the same view
    ar = run(shipped_pair, "ar", rounds=3)
    _, view = view_of(ar, 2)                        # AR drafts nothing: the grid is the probes' draft
    assert view.depth > 0 and not any(o.own for o in view.overlays) and view.run[0] == "AR"


def test_the_figure_boxes_the_target_and_draws_every_selector(taps_run):
    from taps.studio.figures import candidates_figure
    from taps.studio.layout import Plot

    _, view = view_of(taps_run, 3)
    fig = candidates_figure(view, Plot(width=1240, height=800), PROMPT)
    shown = fig.layout.meta["positions"]
    assert 1 <= shown <= view.depth and fig.layout.meta["rows"] == DRAFT_TOP_K     # tall enough for every rank
    boxes = next(t for t in fig.data if t.name == "the target's token (hindsight)")
    boxed = sum(1 for d in range(1, shown + 1) if view.target_rank(d) is not None)
    assert list(boxes.x).count(None) == boxed
    legend = {t.name for t in fig.data if t.showlegend is not False and t.name}
    for item in view.overlays:                       # each selector once in the legend, with its τ
        label = item.label + (f"/{item.estimator}" if item.estimator else "")     # DFlash is not DFlash2's prefix here
        assert sum(name.split(" τ ")[0] == label and f" τ {item.tau} (" in name for name in legend) == 1, legend
    text = next(t for t in fig.data if t.mode == "text" and t.hovertext)
    assert len(text.text) >= shown * DRAFT_TOP_K
    narrow = candidates_figure(view, Plot(width=700, height=560))
    assert narrow.layout.meta["positions"] < shown and "left out to fit" in str(narrow.layout.title.subtitle.text)
    # every overlay its own colour and shape, the two TAPS trees among them (one legend entry each)
    styles = {t.legendgroup: (t.marker.color, t.marker.symbol.replace("-open", "")) for t in fig.data
              if t.mode == "markers" and t.legendgroup}
    assert set(styles) == {o.key for o in view.overlays} and len(set(styles.values())) == len(styles)


def test_the_step_page_opens_the_view_from_a_link(monkeypatch):
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", "")                              # the shipped pair (it has a path selector)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    for key, value in {"example": "search", "round": "3", "view": "candidates", "budget": "16"}.items():
        at.query_params[key] = value
    at.switch_page("app_pages/1_Step_through.py").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    charts = [el for el in at.get("plotly_chart") if el.key == "step_candidates_chart"]
    assert charts and "Round 3: the drafter's top 16" in charts[0].proto.spec
    assert at.query_params["view"] == "candidates"


def _boxes(fig, plot):
    """The grid's token texts and the selectors' markers as pixel boxes (left, right, top, bottom), and
    the selectors' edges as pixel polylines, from the figure's own axes and margins."""
    import html

    from taps.studio.figures.candidates import MARKER_PX
    from taps.studio.layout import CHAR_EM

    layout, margin = fig.layout, fig.layout.margin
    (x0, x1), (y0, y1) = layout.xaxis.range, layout.yaxis.range
    width, height = plot.width - margin.l - margin.r, layout.height - margin.t - margin.b

    def px(x, y):
        return margin.l + (x - x0) / (x1 - x0) * width, margin.t + (y - y1) / (y0 - y1) * height

    grid = next(t for t in fig.data if t.mode == "text" and t.hovertext)
    font = grid.textfont.size
    texts = []
    for x, y, text in zip(grid.x, grid.y, grid.text):
        left, middle = px(x, y)
        texts.append((left, left + len(html.unescape(text)) * CHAR_EM * font, middle - font / 2, middle + font / 2))
    markers, edges = [], []
    for trace in fig.data:
        if trace.mode == "markers":
            for x, y in zip(trace.x, trace.y):
                cx, cy = px(x, y)
                half = MARKER_PX / 2 + 1
                markers.append((cx - half, cx + half, cy - half, cy + half))
        elif trace.mode == "lines" and trace.name is None and trace.fill is None:      # a selector's edges
            points = list(zip(trace.x, trace.y))
            for a, b in zip(points, points[1:]):
                if None not in a and None not in b:
                    edges.append((px(*a), px(*b)))
    return texts, markers, edges, grid


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _crosses(segment, box) -> bool:
    (xa, ya), (xb, yb) = segment
    for step in range(61):
        t = step / 60
        x, y = xa + (xb - xa) * t, ya + (yb - ya) * t
        if box[0] + 1 < x < box[1] - 1 and box[2] + 1 < y < box[3] - 1:
            return True
    return False


@pytest.mark.parametrize("extra", [0, 1])
def test_no_marker_or_edge_covers_a_token_and_rows_stay_readable_at_1280x720(taps_run, extra):
    """At the Step page's size at 1280x720 (900 x ~500 px): every rank's row at least 24 px, each token
    at least 6 characters; no selector's marker on a token's text (the rank-1 row included) and no
    edge across one; with a fifth selector (the lead's TAPS over DFlash2's candidates, drawn here as
    a copy of TAPS's round) the same, in a lane of its own."""
    from dataclasses import replace

    from taps.studio.figures import candidates_figure
    from taps.studio.layout import plot_for

    _, view = view_of(taps_run, 3)
    if extra:
        taps_round = next(o for o in view.overlays if o.name == TAPS.name)
        view = replace(view, overlays=view.overlays + (replace(taps_round, label="TAPS over DFlash2", own=False),))
    plot = plot_for(900, 500)
    fig = candidates_figure(view, plot, PROMPT)
    meta = fig.layout.meta
    assert meta["row_px"] >= 24 and meta["rows"] >= 6 and meta["chars"] >= 6 and meta["font_px"] >= 14
    assert meta["positions"] >= 4 and fig.layout.height <= plot.height            # one screen once scrolled to
    assert len(set(zip(meta["lanes"], [i % 2 for i in range(len(view.overlays))]))) == len(view.overlays)
    texts, markers, edges, grid = _boxes(fig, plot)
    assert len(texts) >= meta["positions"] * meta["rows"] and markers and edges
    first_row = [box for box, y in zip(texts, grid.y) if y == 1]
    assert len(first_row) == meta["positions"]
    for marker in markers:
        assert not any(_overlap(marker, text) for text in texts), marker
    for segment in edges:
        assert not any(_crosses(segment, text) for text in texts), segment
