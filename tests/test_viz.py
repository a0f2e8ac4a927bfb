"""The app's pure logic without streamlit: figures and exports (taps.studio.figures, taps.studio.export),
hindsight and failure search (taps.studio.failures), pair sources, prompts, run files, counters, race and
sweep (taps.studio.app_state)."""

from __future__ import annotations

import html
import json
from dataclasses import replace

import pytest

pytest.importorskip("plotly", reason="the app's packages are not installed (a bare GPU server)")

from conftest import fixed_profile, needs_png_export

from taps import DecodeConfig, DecodeSession, PairError, Round
from taps.eval.prompts import example_prompts, humaneval_prompts, parse_prompt_text
from taps.record import validate_round
from taps.studio import figures
from taps.studio.app_state import (
    ArBaseline,
    load_pair_from_source,
    load_run,
    metrics_csv,
    run_json,
)
from taps.studio.failures import (
    compare_rankings,
    explain_round,
    find_failures,
    hindsight_status,
    left_pool_depth,
    probe_round,
    target_path,
)
from taps.studio.lesson import round_text
from taps.studio.race import repeated_race, sweep
from taps.studio.speed import best_budgets, summarize_repeats


def synthetic_round(bonus_token: int = 14, **changes) -> Round:
    """root -> a, b; a -> c, d; b -> e; c -> f. Verified: root, a, b, c, e. The target accepts a,
    then its token at depth 2 is `bonus_token` (14 = d, in the pool but not verified)."""
    record = Round(
        index=2, selector="taps", estimator="online", budget=4, temperature=0.0, start=10, root_token=10,
        root_text="r", pool_tokens=[10, 11, 12, 13, 14, 15, 16], pool_texts=["r", "a", "b", "c", "d", "e", "f"],
        pool_parents=[-1, 0, 0, 1, 1, 2, 3], pool_depths=[0, 1, 1, 2, 2, 2, 3], pool_ranks=[0, 0, 1, 0, 1, 0, 0],
        pool_marginal=[1, .6, .35, .75, .17, .85, .67], pool_path_marginal=[1, .6, .35, .45, .1, .3, .3],
        pool_reach=[1, .6, .3, .5, .05, .2, .4], selected=[0, 1, 2, 3, 5],
        target_prob=[1.0, 1.0, 0.0, 0.0, None, 0.0, None],
        status=["root", "accepted", "rejected", "rejected", "unselected", "waste", "unselected"], accepted=[1],
        bonus_token=bonus_token, bonus_text="d" if bonus_token == 14 else "z", committed_tokens=[11, bonus_token],
        tau=2, verified_nodes=4, waste_nodes=1, rejected_siblings=2, expected_tau=2.6,
        timings={"draft": 0.001, "pool": 0.0, "estimate": 0.0, "select": 0.0, "verify": 0.002, "commit": 0.0})
    return replace(record, **changes)


def crowded_round(**changes) -> Round:
    """One root with 21 children: the accepted token (drafter rank 4) and 20 rejected siblings;
    under the accepted one an accepted child, a rejected sibling and pool nodes never verified;
    waste under two of the rejected siblings (6 and 5 nodes); the bonus token not in the pool."""
    words = ["self", " a", " file", " the", " x", " return", " if", " for", " in", " not", " and", " or", " is",
             " None", " True", " list", " dict", " int", " str", " len", " range"]
    tokens, texts, parents, depths, ranks = [500], ["\n"], [-1], [0], [0]

    def add(parent, text, rank):
        tokens.append(1000 + len(tokens))
        texts.append(text)
        parents.append(parent)
        depths.append(depths[parent] + 1)
        ranks.append(rank)
        return len(tokens) - 1

    level = [add(0, word, rank) for rank, word in enumerate(words)]           # nodes 1..21
    accepted = level[3]                                                          # " the", rank 4
    child = add(accepted, " file", 0)
    sibling = add(accepted, " path", 1)
    waste = [add(level[0], f" w{i}", i) for i in range(6)]
    deeper = [add(level[1], f" v{i}", i) for i in range(4)]
    waste += deeper + [add(deeper[0], " deep", 0)]
    for i in range(8):                                                           # pool, never verified
        add(child, f" p{i}", i)
    n = len(tokens)
    status = ["unselected"] * n
    status[0] = "root"
    for v in level:
        status[v] = "rejected"
    status[accepted] = status[child] = "accepted"
    status[sibling] = "rejected"
    for v in waste:
        status[v] = "waste"
    selected = [v for v in range(n) if status[v] != "unselected"]
    marginal = [1.0] + [0.5 / (1 + r) for r in ranks[1:]]
    path_marginal = [1.0] * n
    for v in range(1, n):
        path_marginal[v] = path_marginal[parents[v]] * marginal[v]
    target = [1.0 if status[v] in ("root", "accepted") else 0.0 if status[v] in ("rejected", "waste") else None
              for v in range(n)]
    record = Round(
        index=0, selector="taps", estimator="online", budget=64, temperature=0.0, start=5, root_token=500,
        root_text="\n", pool_tokens=tokens, pool_texts=texts, pool_parents=parents, pool_depths=depths,
        pool_ranks=ranks, pool_marginal=marginal, pool_path_marginal=path_marginal, pool_reach=list(path_marginal),
        selected=selected, target_prob=target, status=status, accepted=[accepted, child], bonus_token=2000,
        bonus_text=" name", committed_tokens=[tokens[accepted], tokens[child], 2000], tau=3,
        verified_nodes=len(selected) - 1, waste_nodes=len(waste), rejected_siblings=len(level) - 1 + 1,
        expected_tau=2.0, timings={})
    return replace(record, **changes)


@pytest.fixture(scope="module")
def tree_rounds(tiny_pair_f32):
    out = []
    for selector in ("ddtree", "taps", "dflash", "ar"):
        session = DecodeSession(tiny_pair_f32, "def f(x):\n", selector=selector, budget=16, max_new_tokens=12,
                                stop_at_eos=False)
        out += session.run()
    return out


def node_ids(trace) -> set[int]:
    return {int(row[0]) for row in trace.customdata} if trace.customdata is not None else set()


def traces(fig, name: str, axis: str | None = None):
    return [t for t in fig.data if t.name == name and (axis is None or t.xaxis in (axis, None))]


# ---------------------------------------------------------------------------- hindsight and explanations
def test_hindsight_on_a_known_round():
    record = synthetic_round()
    validate_round(record)
    assert hindsight_status(record) == ["root", "accepted", "rejected", "rejected", "accepted", "waste", "waste"]
    assert target_path(record) == [1, 4]
    assert left_pool_depth(record) is None
    line = explain_round(record)
    assert "he target's token 'd' at depth 2 was in the pool" in line and "reach ranked it #6" in line
    gone = synthetic_round(bonus_token=99)
    assert left_pool_depth(gone) == 2
    assert explain_round(gone) == "The target's token 'z' (id 99) left the pool at depth 2"
    spaced = synthetic_round(bonus_token=99, bonus_text=" ")
    assert explain_round(spaced) == "The target's token '␣' (id 99) left the pool at depth 2"
    clean = synthetic_round(accepted=[1, 3, 6], bonus_token=99, status=["root", "accepted", "rejected", "accepted",
                                                                         "unselected", "waste", "accepted"])
    assert explain_round(clean) == "TAPS accepted 3 tokens; nothing went wrong that hindsight can see"


def test_figures_of_a_known_round():
    record = synthetic_round()
    fig = figures.round_tree_figure(record)
    assert node_ids(traces(fig, "bonus: target's token")[0]) == {4}          # the bonus drawn once, on its node
    assert node_ids(traces(fig, "rejected-prefix waste")[0]) == {5}
    assert node_ids(traces(fig, "pool, not verified")[0]) == {6}
    labels = traces(fig, "token labels")[0]
    assert sorted(labels.text) == sorted(["r", "a", "b", "c", "e", "d"])
    compare = figures.ranking_comparison_figure(record, 3)
    assert node_ids(traces(compare, "only DDTree's pick")[0]) == {2}
    assert node_ids(traces(compare, "only TAPS's pick")[0]) == {6}
    assert node_ids(traces(compare, "picked by both")[0]) == {1, 3}
    assert "accepts 1, 0 under a rejected prefix" in compare.layout.title.subtitle.text
    assert "They differ on 2 nodes" in compare.layout.title.subtitle.text
    same = figures.ranking_comparison_figure(record, 1)
    assert "they agree this round" in same.layout.title.subtitle.text and same.layout.meta["differ"] == 0


def deep_round() -> Round:
    """A round six tokens deep, as round 19 of the first shipped example draws it: root
    "␣Parameters", accepted "⏎␣␣␣", "␣----------", "⏎␣␣␣", "␣n", "␣:", "␣int"; a rejected sibling
    "␣==========" at depth 2 with waste under it; pool nodes at depth 7."""
    texts = ["␣Parameters", "⏎␣␣␣", "␣----------", "⏎␣␣␣", "␣n", "␣:", "␣int", "␣==========", "⏎␣␣␣",
             "␣n_features_in", " p0", " p1"]
    parents = [-1, 0, 1, 2, 3, 4, 5, 1, 7, 8, 6, 6]
    status = ["root"] + ["accepted"] * 6 + ["rejected", "waste", "waste", "unselected", "unselected"]
    depths = [0]
    for v in range(1, len(parents)):
        depths.append(depths[parents[v]] + 1)
    n = len(texts)
    marginal = [1.0] + [0.6] * (n - 1)
    selected = [v for v in range(n) if status[v] != "unselected"]
    return Round(
        index=18, selector="taps", estimator="online", budget=32, temperature=0.0, start=40, root_token=100,
        root_text=texts[0], pool_tokens=list(range(100, 100 + n)), pool_texts=texts, pool_parents=parents,
        pool_depths=depths, pool_ranks=[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1], pool_marginal=marginal,
        pool_path_marginal=marginal, pool_reach=marginal, selected=selected,
        target_prob=[1.0 if s in ("root", "accepted") else 0.0 if s != "unselected" else None for s in status],
        status=status, accepted=[1, 2, 3, 4, 5, 6], bonus_token=500, bonus_text=":", committed_tokens=[101, 500],
        tau=7, verified_nodes=len(selected) - 1, waste_nodes=2, rejected_siblings=1, expected_tau=3.0, timings={})


def test_the_accepted_path_and_rejected_siblings_show_whole_tokens_at_1280x720():
    """At the Step page's size at 1280x720 (900x610), in the chart and in the light figure, the
    accepted path and the rejected sibling keep their whole token (equal depth columns cut them
    to five characters); a waste label longer than its column is cut."""
    from taps.studio.figures.light import light_svg
    from taps.studio.layout import plot_for

    record = deep_round()
    fig = figures.verdict_figure(record, plot=plot_for(900, 610))
    labels = list(traces(fig, "token labels")[0].text)
    for v in [0, 1, 2, 3, 4, 5, 6, 7]:
        assert html.escape(record.pool_texts[v], quote=False) in labels, (record.pool_texts[v], labels)
    assert any(label.startswith("␣n_") and label.endswith("…") for label in labels)     # the waste: cut
    svg = light_svg(fig, 900)
    assert "␣Parameters" in svg and "␣==========" in svg and "␣----------" in svg


def test_explanations_compare_and_count_waste():
    record = synthetic_round(waste_nodes=4, verified_nodes=5)
    ddtree = synthetic_round(selector="ddtree", accepted=[1, 2, 3, 4, 5])
    line = explain_round(record, {"ddtree": ddtree, "oracle": None})
    assert line.startswith("DDTree accepted 5 tokens where TAPS accepted 1: ")
    assert "TAPS spent 80% of its budget (4 of 5 verified nodes) under a rejected prefix" in line


def test_ranking_comparison_in_hindsight():
    record = synthetic_round()
    small = compare_rankings(record, 3)
    assert small.by_marginal == [0, 1, 2, 3] and small.by_reach == [0, 1, 3, 6]
    assert (small.accepts_marginal, small.accepts_reach) == (1, 1)
    assert (small.waste_marginal, small.waste_reach) == (0, 1)
    full = compare_rankings(record, 6)
    assert full.accepts_reach == 2 and full.reach_is_lower_bound
    assert full.describe("reach").startswith("accepts ≥ 2")


def test_hindsight_agrees_with_the_engine(tree_rounds):
    for record in tree_rounds:
        status = hindsight_status(record)
        assert [status[i] for i in record.selected] == [record.status[i] for i in record.selected]
        assert target_path(record)[: len(record.accepted)] == record.accepted


def test_oracle_probe_bounds_taps_at_the_same_position(tiny_pair_f32):
    config = DecodeConfig(selector="taps", budget=16, max_new_tokens=16, stop_at_eos=False)
    session = DecodeSession(tiny_pair_f32, "x = [1, 2", config)
    session.run()
    from taps.session import greedy_continuation

    future = greedy_continuation(tiny_pair_f32, session.prompt_ids, 16 + 8)
    for record in session.rounds:
        context = session.tokens[: record.start + 1]
        ahead = future[record.start + 1 - len(session.prompt_ids):]
        oracle = probe_round(tiny_pair_f32, context, config, "oracle", ahead)
        ddtree = probe_round(tiny_pair_f32, context, config, "ddtree")
        assert oracle.start == ddtree.start == record.start
        assert len(oracle.accepted) >= len(record.accepted)
        same = min(oracle.tau, record.tau)
        assert oracle.committed_tokens[:same] == record.committed_tokens[:same]


def test_find_failures_reports_cases(tiny_pair_f32):
    prompts = [{"id": "a", "prompt": "def g(y):"}, {"id": "b", "prompt": "x" * 400}, {"id": "c", "prompt": "for i in"}]
    config = DecodeConfig(selector="taps", budget=8, max_new_tokens=10, estimator="marginal", taps_mode="reach")
    seen = []
    report = find_failures(tiny_pair_f32, prompts, config, compare=("ddtree", "oracle"), waste_threshold=0.3,
                           on_progress=lambda done, total, name: seen.append((done, total)))
    assert report.prompts_run == 2 and len(report.skipped) == 1 and "b:" in report.skipped[0]
    assert seen[-1] == (3, 3)
    assert report.rounds_checked >= 2
    for case in report.cases:
        r = case.taps_round
        assert set(case.others) == {"ddtree", "oracle"}
        assert all(o is None or o.start == r.start for o in case.others.values())
        if "waste" in case.kinds:
            assert r.waste_nodes / r.verified_nodes >= 0.3
        for name in ("ddtree", "oracle"):
            if name in case.kinds:
                assert len(case.others[name].accepted) > len(r.accepted)
        assert case.explanation and case.row()["why"] == case.explanation
    lost = [(c.lost_to("ddtree"), c.lost_to("oracle")) for c in report.cases]
    assert lost == sorted(lost, reverse=True)                # below DDTree first, by tokens lost to it
    assert report.kinds == ["ddtree", "oracle", "waste"]


def test_failure_cases_compare_with_ddtree_unless_the_oracle_is_asked_for(tiny_pair_f32):
    """The oracle knows the target's tokens, so TAPS is below it in most rounds: it is compared (and
    flagged) only when asked. By default the cases are the rounds below DDTree, most tokens lost
    first, then the wasteful ones."""
    prompts = [{"id": "a", "prompt": "def g(y):"}, {"id": "c", "prompt": "for i in"}]
    config = DecodeConfig(selector="taps", budget=8, max_new_tokens=16, estimator="marginal", taps_mode="reach")
    report = find_failures(tiny_pair_f32, prompts, config, waste_threshold=0.3)
    assert report.kinds == ["ddtree", "waste"] and set(report.counts()) == {"ddtree", "waste"}
    with pytest.raises(ValueError, match="unknown kind 'oracle'"):
        report.of_kind("oracle")
    for case in report.cases:
        assert set(case.others) == {"ddtree"} and "oracle" not in case.kinds
    keys = [(-c.lost_to("ddtree"), -c.waste_share) for c in report.cases]
    assert keys == sorted(keys)
    assert all(c.row()["tokens lost to DDTree"] == c.lost_to("ddtree") for c in report.cases)


# ---------------------------------------------------------------------------- figures
def test_tree_layout_centres_parents():
    parents, ranks = [-1, 0, 0, 1, 1, 2], [0, 0, 1, 0, 1, 0]
    pos = figures.tree_positions(parents, ranks, range(6))
    assert [pos[v][0] for v in range(6)] == [0, 1, 1, 2, 2, 2]
    leaves = sorted(pos[v][1] for v in (3, 4, 5))
    assert leaves == [0.5, 1.5, 2.5]                       # one row apart
    assert pos[1][1] == 1.0 and pos[2][1] == 2.5 and pos[0][1] == 1.75


def one_round_a_shape(rounds: list[Round]) -> list[Round]:
    """The first round of each shape (selector, accepted, verified, selected): 8 of the 45 here."""
    shapes: dict[tuple, Round] = {}
    for r in rounds:
        shapes.setdefault((r.selector, len(r.accepted), r.verified_nodes, len(r.selected)), r)
    return list(shapes.values())


@pytest.mark.parametrize("color_by", list(figures.COLOR_MODES))
def test_round_tree_figure_matches_the_round(tree_rounds, color_by):
    """Every round in the first colour mode; in the others (which change only the colours), one
    round of each shape."""
    first = color_by == next(iter(figures.COLOR_MODES))
    for record in tree_rounds if first else one_round_a_shape(tree_rounds):
        fig = figures.round_tree_figure(record, color_by, max_pool_nodes=400)
        verified = set().union(*(node_ids(t) for name in ("root: last token", "accepted", "rejected sibling",
                                                         "rejected-prefix waste") for t in traces(fig, name)))
        meta = fig.layout.meta
        assert verified <= set(record.selected) and len(verified) + meta["grouped"] == len(record.selected)
        assert {0, *record.accepted} <= verified                                          # never grouped
        assert all(record.pool_parents[v] in verified for v in verified if v)            # prefix-closed
        for name, status in (("accepted", "accepted"), ("rejected sibling", "rejected"),
                             ("rejected-prefix waste", "waste"), ("pool, not verified", "unselected")):
            assert all(record.status[v] == status for t in traces(fig, name) for v in node_ids(t))
        accepted = node_ids(traces(fig, "accepted")[0]) if traces(fig, "accepted") else set()
        assert accepted == set(record.accepted)
        path = traces(fig, "accepted path")[0]
        assert list(path.x).count(None) == len(record.accepted)                         # one polyline an edge
        bonus = traces(fig, "bonus: target's token")
        assert len(bonus) == 1 and len(bonus[0].x) == 1
        held = figures.bonus_node(record)
        assert held is None or node_ids(bonus[0]) == {held}
        drawn = set().union(*(node_ids(t) for t in fig.data if t.mode and "markers" in t.mode))
        drawn -= {len(record.pool_tokens)}                                               # a bonus of its own
        assert all(record.pool_parents[v] in drawn for v in drawn if v)
        assert f"verified {record.verified_nodes}" in fig.layout.title.subtitle.text
        assert fig.layout.title.text.startswith(f"<b>Round {record.number}</b>")
        labels = traces(fig, "token labels")[0]
        assert len(labels.text) == meta["labels"] + meta["more"] and all(labels.text)
        assert meta["labels"] + meta["left_out"] == len(record.selected) + 1
        if meta["left_out"]:
            assert f"{meta['left_out']} of" in fig.layout.title.subtitle.text
        if color_by == "target":
            pool = traces(fig, "pool, not verified")
            assert not pool or not pool[0].x or pool[0].marker.color == figures.PALETTE["grey"]


def test_a_crowded_round_keeps_the_lesson_and_says_what_it_left_out():
    """Issue 34: one root, 20 rejected siblings, waste under two of them. Every size keeps the
    accepted path's labels (root, accepted tokens, bonus), drops pool dots, then waste labels, then
    rejected siblings' (the title says how many of each), and groups the rest as "+N more"."""
    from taps.studio.layout import plot_for

    record = crowded_round()
    validate_round(record)
    path_texts = {"⏎", "␣the", "␣file", "␣name"}
    for plot in (plot_for(900, 610), plot_for(900, 420), plot_for(1240, 420, True, "L"), plot_for(1560, 700, True)):
        fig = figures.round_tree_figure(record, plot=plot)
        meta, subtitle = fig.layout.meta, fig.layout.title.subtitle.text
        labels = list(traces(fig, "token labels")[0].text)
        assert path_texts <= set(labels), (plot, labels)
        assert fig.layout.height <= plot.height
        by = meta["left_out_by"]
        assert by["pool"] == 8 and by["waste"] == 11 and meta["labels"] + meta["left_out"] == 36
        assert "8 pool dots, 11 waste and" in subtitle and f"rejected-sibling labels ({meta['left_out']} of 36)" \
            in subtitle
        more = traces(fig, "+N more: grouped to fit")[0]
        assert meta["more"] == len(more.x) and meta["grouped"] == 11 + by["rejected"]
        assert sum(int(t.split("+")[1].split()[0]) for t in labels if t.startswith("+")) == meta["grouped"]
        assert all("nodes grouped to fit" in row[0] for row in more.customdata)
        assert meta["font_px"] == plot.font_px
    roomy = figures.round_tree_figure(record, plot=plot_for(1560, 1400, True, "S"))
    assert roomy.layout.meta["left_out"] == 0 and "Left out" not in roomy.layout.title.subtitle.text


def test_nodes_keep_their_identity_between_stages():
    from taps.studio.figures.round import node_path_id, path_ids

    record = synthetic_round()
    ids = path_ids(record)
    assert ids[:4] == ["10", "10/11", "10/12", "10/11/13"] and ids[6] == "10/11/13/16"
    assert node_path_id(record, len(record.pool_tokens)) == "10/11/14"             # a bonus of its own
    seen = {}
    for stage in ("pool", "estimate", "select", "verify", "commit"):
        fig = figures.lesson_figure(record, stage)
        for trace in fig.data:
            if trace.customdata is not None and trace.ids is not None and trace.name != "token labels":
                for row, key in zip(trace.customdata, trace.ids):
                    assert seen.setdefault(int(row[0]), key) == key                  # one node, one id
    assert seen[3] == "10/11/13" and seen[0] == "10"


def test_the_title_tells_the_truth_when_a_stop_rule_cuts_the_round():
    from taps.studio.figures.round import verdict_words

    record = synthetic_round()                                            # accepted 1, tau 2
    assert verdict_words(record) == "accepted 1 + bonus"
    eos = synthetic_round(tau=1, committed_tokens=[11], finished=True, stop_reason="end of text")
    assert verdict_words(eos) == "accepted 1 (end of text, no bonus)"
    fig = figures.round_tree_figure(eos)
    assert "accepted 1 (end of text, no bonus)" in fig.layout.title.subtitle.text
    assert "+ bonus" not in fig.layout.title.subtitle.text
    assert "not kept: end of text" in traces(fig, "bonus: target's token")[0].customdata[0][8]
    commit = figures.verdict_figure(eos, "commit").layout.title.subtitle.text.replace("<br>", " ")
    assert "does not join the text" in commit and "τ = 1" in commit
    cut = synthetic_round(accepted=[1, 3], tau=1, committed_tokens=[11], stop_reason="end of text",
                          status=["root", "accepted", "rejected", "accepted", "unselected", "waste", "unselected"])
    assert verdict_words(cut) == "accepted 2, 1 kept (end of text, no bonus)"
    last = synthetic_round(stop_reason="max new tokens", finished=True)
    assert verdict_words(last) == "accepted 1 + bonus (max new tokens)"


def test_figures_follow_the_theme_and_keep_the_mode_bar_off_titles():
    from taps.studio.figures.style import DARK_INK, DARK_PAPER, PLOT_CONFIG, apply_theme

    record = synthetic_round()
    light = figures.round_tree_figure(record)
    assert light.layout.modebar.orientation == "v" and PLOT_CONFIG["displayModeBar"] == "hover"
    assert light.layout.template.layout.paper_bgcolor != DARK_PAPER
    dark = apply_theme(figures.round_tree_figure(record), dark=True)
    assert dark.layout.paper_bgcolor == dark.layout.plot_bgcolor == DARK_PAPER
    assert dark.layout.font.color == DARK_INK
    assert dark.layout.template.layout.paper_bgcolor == "rgb(17,17,17)"          # plotly_dark underneath
    labels = traces(dark, "token labels")[0]
    assert labels.textfont.color == DARK_INK and DARK_PAPER in labels.textfont.shadow
    root = traces(dark, "root: last token")[0]
    assert root.marker.color == DARK_INK and traces(dark, "accepted")[0].marker.line.color == DARK_INK
    chart = apply_theme(figures.race_figure(summary_rows()[:2]), dark=True)
    assert chart.layout.paper_bgcolor == DARK_PAPER and chart.layout.modebar.orientation == "v"
    assert apply_theme(figures.round_tree_figure(record)).layout.paper_bgcolor != DARK_PAPER


def test_small_trees_smaller_than_the_budget_say_why():
    from taps.studio.lesson import size_explanation

    record = synthetic_round()                                                   # budget 4, verified 4
    assert "chose" not in figures.round_tree_figure(record, config={"taps_mode": "cost"}).layout.title.subtitle.text
    bigger = figures.round_tree_figure(synthetic_round(budget=32), config={"taps_mode": "cost"})
    text = bigger.layout.title.subtitle.text
    assert "The cost model chose 4 nodes of a budget of 32: expected tokens per second peaks there." in text
    assert "pool held only 4 nodes" in size_explanation(replace(record, budget=32, pool_tokens=[1] * 5), {})
    assert "utility rule" in size_explanation(replace(record, budget=32), {"taps_mode": "utility"})
    assert size_explanation(replace(record, selector="ar", budget=32), {}) == ""


def test_round_tree_figure_limits_the_pool_and_fits_its_plot(tree_rounds):
    from taps.studio.layout import Plot

    record = max(tree_rounds, key=lambda r: len(r.pool_tokens))
    fig = figures.round_tree_figure(record, "reach", max_pool_nodes=20)
    assert fig.layout.meta["shown_nodes"] <= max(20, len(record.selected) + 1) + 20
    for plot in (Plot(1240, 420), Plot(900, 600), Plot(1560, 700)):
        fig = figures.round_tree_figure(record, "reach", max_pool_nodes=100, plot=plot)
        assert fig.layout.height <= plot.height
    with pytest.raises(ValueError, match="colour by"):
        figures.round_tree_figure(record, "rainbow")


def test_lesson_figures_walk_the_stages(tree_rounds):
    record = max((r for r in tree_rounds if r.selector == "taps"), key=lambda r: r.verified_nodes)
    for n, stage in enumerate(("draft", "pool", "estimate", "select", "verify", "commit"), start=1):
        fig = figures.lesson_figure(record, stage, prompt="def f(x):")
        assert fig.layout.title.text.startswith(f"<b>Round {record.number} · {n} of 6")
        assert fig.layout.title.subtitle.text and fig.layout.meta["stage"] == stage
        names = {t.name for t in fig.data}
        assert ("accepted path" in names) == (stage in ("verify", "commit"))
        assert ("bonus: target's token" in names) == (stage == "commit")
        if stage == "select":
            assert node_ids(traces(fig, "picked for verifying")[0]) == set(record.selected) - {0}
    with pytest.raises(ValueError, match="unknown stage"):
        figures.lesson_figure(record, "plan")
    with pytest.raises(ValueError, match="pool or estimate"):
        figures.pool_figure(record, "select")
    with pytest.raises(ValueError, match="verify or commit"):
        figures.verdict_figure(record, "pool")
    whole, commit = figures.round_tree_figure(record), figures.verdict_figure(record, "commit")
    assert [t.name for t in whole.data] == [t.name for t in commit.data]          # the same drawing, retitled
    assert [list(t.x or []) for t in whole.data] == [list(t.x or []) for t in commit.data]


def test_ranking_comparison_figure(tree_rounds):
    record = next(r for r in tree_rounds if r.selector == "taps")
    fig = figures.ranking_comparison_figure(record, 8)
    comparison = compare_rankings(record, 8)
    picked = set().union(*(node_ids(t) for name in ("picked by both", "only DDTree's pick", "only TAPS's pick")
                           for t in traces(fig, name)))
    assert picked == (set(comparison.by_marginal) | set(comparison.by_reach)) - {0}
    assert node_ids(traces(fig, "only DDTree's pick")[0]) == set(comparison.by_marginal) - set(comparison.by_reach)
    assert "top 8" in fig.layout.title.text and fig.layout.meta["budget"] == 8


def summary_rows() -> list[dict]:
    from taps.studio.speed import spread_of

    def row(label, selector, budget, tau, rate, speed, rounds=5, new=10, nodes=20):
        return {"label": label, "selector": selector, "estimator": "marginal", "budget": budget, "tau": tau,
                "rounds": rounds, "new_tokens": new, "verified_nodes": nodes, "waste_share": 0.1, "lossless": True,
                "same_rounds": True, "modelled_speedup": speed, "modelled_round_s": 0.01,
                "tokens_per_s": spread_of(rate), "speedup": spread_of([r / 50 for r in rate]), "repeats": len(rate)}

    return [row("ar", "ar", 1, 1.0, [50, 51, 49], 1.0, rounds=10, nodes=0),
            row("ddtree", "ddtree", 4, 2.0, [80, 82, 79], 1.6),
            row("ddtree", "ddtree", 8, 2.5, [70, 71, 69], 1.4, rounds=4, nodes=32)]


def test_other_figures(tree_rounds):
    from taps.studio.toy import PRESETS, acceptance_curve, build_toy_tree

    preset = PRESETS["Two good openings"]
    tree = build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens)
    fig = figures.toy_tree_figure(tree, 8, rejected=2)
    assert len(traces(fig, "picked but unreachable (waste)")) == 2
    assert len(figures.toy_curve_figure(acceptance_curve(tree, 10)).data) == 2
    rows = summary_rows()
    race = figures.race_figure(rows[:2], "fixed profile")
    assert list(race.data[0].text) == ["1.00×", "1.60×"]
    assert list(race.data[1].error_y.array) == pytest.approx([1 / 50, 2 / 50])
    label = race.data[2]                                  # the measured medians, above the whiskers
    assert list(label.text) == ["1.00×", "1.60×"] and list(label.y) == pytest.approx([51 / 50, 82 / 50])
    best = best_budgets(rows)
    sweep_fig = figures.sweep_figure(rows, "fixed profile", best)
    star = [t for t in sweep_fig.data if t.marker.symbol == "star"][0]
    assert list(star.x) == [4]
    trade = figures.tradeoff_figure(rows)
    assert list(trade.data[0].x) == [4.0, 8.0] and list(trade.data[0].y) == [1.0, 1.5]
    assert len(figures.stage_share_figure({"verify": 0.5, "draft": 0.5}).data) == 6


def test_bench_plots_share_the_app_style():
    from taps.policies import REGISTRY

    rows = [{"budget": b, "tau": t} for b, t in ((4, 1.5), (8, 2.0))]
    series = {"ddtree": rows, "taps/marginal": rows, "taps/online": rows, "oracle": rows, "mine": rows}
    fig = figures.budget_figure(series, "tau", "tau", "a title", baseline=1.0)
    drawn = {t.name: t for t in fig.data}
    for name in ("ddtree", "taps/online", "oracle"):
        policy = REGISTRY[name.split("/")[0]]
        assert drawn[name].line.color == drawn[name].marker.color == policy.colour
        assert drawn[name].marker.symbol == policy.symbol
    assert drawn["mine"].line.color == figures.PALETTE["grey"]                 # no registered policy
    assert drawn["taps/marginal"].line.dash != drawn["taps/online"].line.dash   # one policy's runs told apart
    assert drawn["oracle"].line.dash == "dot"                                    # hindsight
    sized = figures.budget_figure({"ddtree (cost)": [dict(row, selector="ddtree") for row in rows]}, "tau", "tau", "")
    assert sized.data[0].line.color == REGISTRY["ddtree"].colour                 # a size choice in the name
    race = figures.race_figure(summary_rows()[:2])
    assert list(race.data[0].marker.color) == [REGISTRY["ar"].colour, REGISTRY["ddtree"].colour]


def test_a_plot_that_cannot_be_rendered_is_written_as_html(tmp_path, monkeypatch, capsys):
    """No kaleido or browser: the bench and profile plots fall back to HTML with a warning, never an error."""
    from taps.studio import export
    from taps.studio.plots import write_bench_plots

    def fail(*args, **kwargs):
        raise export.ExportError("the PNG export failed: no browser")

    monkeypatch.setattr(export, "render_images", fail)
    rows = [{"selector": "ar", "estimator": "none", "budget": 1, "mode": "", "tau": 1.0, "tokens_per_s": 50.0},
            {"selector": "ddtree", "estimator": "marginal", "budget": 4, "mode": "budget", "tau": 2.0,
             "tokens_per_s": 80.0}]
    paths = write_bench_plots(rows, tmp_path, "a title")
    assert [p.name for p in paths] == ["tau_vs_budget.html", "tokens_per_s_vs_budget.html"]
    assert all(p.exists() for p in paths) and not list(tmp_path.glob("*.png"))
    assert "tau_vs_budget.png not written (the PNG export failed: no browser)" in capsys.readouterr().err


def test_text_html_escapes_and_marks_rounds(tree_rounds):
    rounds = [r for r in tree_rounds if r.selector == "ddtree"]
    page = figures.run_text_html("<b>prompt</b>", rounds, current=rounds[0].index)
    assert "&lt;b&gt;prompt&lt;/b&gt;" in page
    assert page.count('title="round ') == len(rounds)
    assert page.count("outline:3px") == 1
    for record in rounds:
        assert f">{html.escape(round_text(record))}</span>" in page


@needs_png_export
def test_exports(tree_rounds):
    record = tree_rounds[0]
    fig = figures.export_title(figures.round_tree_figure(record), "def f(x):\n", record)
    title = fig.layout.title.text
    assert all(part in title for part in (f"Round {record.number}", f"selector {record.selector}",
                                          f"estimator {record.estimator}", f"budget {record.budget}", "def␣f(x):"))
    assert figures.figure_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in figures.figure_svg(fig)[:200]
    page = figures.figure_html(fig)
    assert "<html>" in page[:40] and "plotly" in page and len(page) > 1_000_000


@needs_png_export
def test_an_export_that_overruns_is_stopped_with_its_browser(tree_rounds):
    import subprocess

    from taps.studio.export import ExportError

    with pytest.raises(ExportError, match="did not finish within 1 s and was stopped"):
        figures.figure_png(figures.round_tree_figure(tree_rounds[0]), timeout_s=1.0)
    alive = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout.splitlines()
    assert not [line for line in alive if "taps.studio.export" in line and not line.startswith("Z")]


# ---------------------------------------------------------------------------- app state
def test_pair_sources(tiny_pair_dir):
    assert load_pair_from_source(str(tiny_pair_dir), "cpu").name == "tiny-random"
    with pytest.raises(PairError, match="neither a folder"):
        load_pair_from_source("/no/such/pair")
    with pytest.raises(PairError, match="neither a folder"):
        load_pair_from_source("not a pair")
    with pytest.raises(PairError, match="TARGET \\+ DRAFTER"):
        load_pair_from_source(" + drafter")
    with pytest.raises(PairError, match="not found"):
        load_pair_from_source("/no/target + /no/drafter")


def test_prompt_parsing():
    jsonl = '{"id": "a", "prompt": "def f():"}\n\n{"prompt": "hello", "kind": "prose"}\n'
    assert [(p["id"], p["prompt"]) for p in parse_prompt_text(jsonl)] == [("a", "def f():"), ("2", "hello")]
    plain = "def f():\n\n    return 1\n---\nOnce upon a time\n"
    assert [p["prompt"] for p in parse_prompt_text(plain)] == ["def f():\n\n    return 1", "Once upon a time"]
    assert len(parse_prompt_text("just one prompt")) == 1
    for bad, message in (("", "no prompts"), ("---\n---", "no prompts"), ('{"prompt": 3}', "non-empty string"),
                         ('{"prompt": "a"}\n{oops', "not a JSON line")):
        with pytest.raises(ValueError, match=message):
            parse_prompt_text(bad)


def test_example_prompts_fit_the_tiny_pair(tiny_pair_f32):
    prompts = example_prompts()
    assert len(prompts) >= 5 and {"code", "prose"} <= {p["kind"] for p in prompts}
    assert len({p["id"] for p in prompts}) == len(prompts)
    for p in prompts:
        assert p["prompt"].isascii()
        DecodeSession(tiny_pair_f32, p["prompt"], selector="ar", max_new_tokens=1)


def test_humaneval_prompts():
    prompts = humaneval_prompts(3)
    assert [p["id"] for p in prompts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_run_file_round_trip_and_errors(tree_rounds):
    rounds = [r for r in tree_rounds if r.selector == "taps"]
    text = run_json(rounds, prompt="def f(x):\n", pair_name="tiny-random", config=DecodeConfig(budget=16), text="t")
    saved = load_run(text.encode())
    assert saved.rounds == rounds and saved.prompt == "def f(x):\n" and saved.config["budget"] == 16
    assert load_run(json.dumps([r.to_dict() for r in rounds])).rounds == rounds
    broken_parent = json.loads(text)
    broken_parent["rounds"][0]["pool_parents"][1] = 5
    missing = json.loads(text)
    del missing["rounds"][1]["pool_reach"]
    wrong_status = json.loads(text)
    wrong_status["rounds"][0]["status"][0] = "maybe"
    for bad, message in ((b"\xff\xfe", "not UTF-8"), ("hello", "not JSON"), ('{"a": 1}', "not a TAPS Studio run"),
                         ("[]", "no rounds"), (json.dumps(broken_parent), "round 1 .*parents must come before"),
                         (json.dumps(missing), "round 2 .*missing"), (json.dumps(wrong_status), "status entries"),
                         ('{"format": "taps-studio-run", "rounds": [3]}', "not a JSON object")):
        with pytest.raises(ValueError, match=message):
            load_run(bad)
    lines = metrics_csv(rounds).splitlines()
    assert lines[0].startswith("round,") and "tau" in lines[0]
    assert [int(line.split(",")[0]) for line in lines[1:]] == [r.number for r in rounds]


def test_ar_baseline_matches_the_tokens(tiny_pair_f32):
    config = DecodeConfig(selector="ddtree", budget=8, max_new_tokens=20, stop_at_eos=False)
    baseline = ArBaseline(tiny_pair_f32, "abc", config)
    assert len(baseline.rounds(5)) == 5 and len(baseline.session.generated) == 5
    assert all(r.selector == "ar" and r.tau == 1 for r in baseline.rounds(3))


def test_race_and_sweep(tiny_pair_f32):
    config = DecodeConfig(budget=8, max_new_tokens=10, stop_at_eos=False)
    calls = []
    runs = repeated_race(tiny_pair_f32, "def h(", config, ["dflash", "ddtree", "taps", "oracle"], repeats=3,
                         profile=fixed_profile(tiny_pair_f32), on_round=lambda n, job, session, record: calls.append(n))
    assert len(runs) == 3 and sorted(set(calls)) == [0, 1, 2]
    assert [r["label"] for r in runs[0]] == ["ar", "dflash", "ddtree", "taps/online", "oracle"]
    assert all(r["lossless"] for r in runs[0]) and runs[0][0]["speedup_vs_ar"] == pytest.approx(1.0)
    assert all(r["new_tokens"] == 10 and "round_records" not in r for r in runs[0])
    summary = summarize_repeats(runs, fixed_profile(tiny_pair_f32))
    assert all(row["same_rounds"] and row["repeats"] == 3 for row in summary)
    assert all(row["modelled_speedup"] > 0 for row in summary)
    warm = repeated_race(tiny_pair_f32, "def h(", replace(config, temperature=0.7), ["taps", "oracle"],
                         profile=fixed_profile(tiny_pair_f32))
    assert [r["label"] for r in warm[0]] == ["ar", "taps/online"]
    ticks = []
    runs = sweep(tiny_pair_f32, "def h(", config, ["ar", "ddtree", "taps"], [2, 4], "marginal",
                 profile=fixed_profile(tiny_pair_f32), on_result=lambda done, total, row: ticks.append((done, total)))
    assert len(runs) == 3 and len(runs[0]) == 1 + 2 * 2 and ticks[-1] == (15, 15)
    best = best_budgets(summarize_repeats(runs))
    assert {row["selector"] for row in best} == {"ddtree", "taps/marginal"}
    with pytest.raises(ValueError, match="at least one budget"):
        sweep(tiny_pair_f32, "def h(", config, ["ddtree"], [], "marginal")
    with pytest.raises(ValueError, match="budget must be from 1 to 1024"):
        sweep(tiny_pair_f32, "def h(", config, ["ddtree"], [2000], "marginal")
    with pytest.raises(ValueError, match="tree selector"):
        sweep(tiny_pair_f32, "def h(", config, ["ar"], [4], "marginal")
    with pytest.raises(ValueError, match="scorer"):
        sweep(tiny_pair_f32, "def h(", config, ["ddtree", "taps"], [4], "learned")
    with pytest.raises(ValueError, match="repeats must be"):
        repeated_race(tiny_pair_f32, "def h(", config, ["taps"], repeats=1)
    with pytest.raises(ValueError, match="latency profile"):
        repeated_race(tiny_pair_f32, "def h(", config, ["taps"], on_round=lambda *args: pytest.fail("nothing may run"))
    with pytest.raises(ValueError, match="scorer"):
        repeated_race(tiny_pair_f32, "def h(", replace(config, estimator="learned"), ["taps"],
                      on_round=lambda *args: pytest.fail("nothing may run before the settings are checked"))


def test_a_round_the_stop_rule_cut_is_not_a_loss(tiny_pair_f32):
    """The compared round from the same position has the same tokens left to generate as the run had
    there: a last round that Max new tokens cut is cut the same way in the probe, so it is never
    flagged for tokens the run was not allowed to commit (issue 51 point 6)."""
    prompts = [{"id": "a", "prompt": "def g(y):"}, {"id": "c", "prompt": "for i in"}, {"id": "d", "prompt": "x = 1"}]
    for max_new in (2, 3, 5):
        config = DecodeConfig(selector="taps", budget=8, max_new_tokens=max_new, estimator="marginal",
                              taps_mode="reach")
        report = find_failures(tiny_pair_f32, prompts, config, compare=("ddtree", "oracle"))
        for case in report.cases:
            record = case.taps_round
            left = max_new - (record.start + 1 - len(tiny_pair_f32.encode_prompt(case.prompt)))
            for other in case.others.values():
                assert other is None or len(other.committed_tokens) <= left, (max_new, case.row())


def test_tradeoff_labels_never_share_a_spot():
    """Acceptance against cost (issue 51 point 3): a chain verifies the same nodes whatever the budget,
    so its budgets' labels piled on one point; now they are one label ("4–64"), and each selector's
    labels sit on their own side of its points."""
    def row(label, selector, budget, nodes, tokens):
        return {"label": label, "selector": selector, "budget": budget, "rounds": 10, "verified_nodes": nodes,
                "new_tokens": tokens}

    rows = [row("dflash", "dflash", b, 160, 40) for b in (4, 8, 16, 64)]
    rows += [row("ddtree", "ddtree", b, 10 * b, 20 + 2 * b) for b in (4, 8, 16, 64)]
    rows += [row("taps/online", "taps", b, 8 * b, 22 + 2 * b) for b in (4, 8, 16, 64)]
    fig = figures.tradeoff_figure(rows)
    for trace in fig.data:
        spots = list(zip(trace.x, trace.y))
        assert len(spots) == len(set(spots)) == len(trace.text), trace.name
    dflash = next(t for t in fig.data if t.name == "dflash")
    assert list(dflash.text) == ["4–64"]
    assert len({t.textposition for t in fig.data}) == len(fig.data)


def test_failure_cases_can_compare_with_dflash2(tiny_pair_f32):
    """TAPS below DFlash2 is a kind (issue 50): DFlash2's chain from the same position, its cases
    ranked after DDTree's, the tokens lost to it in the row."""
    prompts = [{"id": "a", "prompt": "def g(y):"}, {"id": "c", "prompt": "for i in"}]
    config = DecodeConfig(selector="taps", budget=8, max_new_tokens=16, estimator="marginal", taps_mode="reach")
    report = find_failures(tiny_pair_f32, prompts, config, compare=("ddtree", "dflash2"), waste_threshold=0.3)
    assert report.kinds == ["ddtree", "dflash2", "waste"]
    for case in report.cases:
        assert set(case.others) == {"ddtree", "dflash2"}
        other = case.others["dflash2"]
        assert other is None or other.selector == "dflash2"
        if "dflash2" in case.kinds:
            assert len(other.accepted) > len(case.taps_round.accepted)
        assert case.row()["tokens lost to DFlash2"] == case.lost_to("dflash2")
    keys = [(-c.lost_to("ddtree"), -c.lost_to("dflash2")) for c in report.cases]
    assert keys == sorted(keys)


def test_candidate_recall_counts_the_targets_token_among_the_drafters_candidates(tiny_pair_f32):
    """recall@1 <= recall@K per depth, both read off the rounds' pools against the decoded sequence;
    at depth 1 an accepted first node is the drafter's candidate by construction."""
    from taps.eval.metrics import candidate_recall

    config = DecodeConfig(selector="ddtree", budget=16, max_new_tokens=24)
    session = DecodeSession(tiny_pair_f32, "def g(y):", config)
    session.run()
    table = candidate_recall(session.rounds, session.tokens, depths=4, ks=(1, 4, 16))
    assert [row["depth"] for row in table] == [1, 2, 3, 4]
    for row in table:
        if row["rounds"]:
            assert 0 <= row["recall@1"] <= row["recall@4"] <= row["recall@16"] <= 1
    first = table[0]
    accepted_first = sum(1 for r in session.rounds if r.accepted)
    assert first["recall@16"] * first["rounds"] >= accepted_first


def test_long_chart_titles_wrap_to_the_charts_width():
    """A chart's title and subtitle lines each fit the chart's width at their font (Source Sans's
    widest average glyph): the batch sweep's subtitle, with a profile measured on a long CPU name at
    a date and time, wraps to two lines instead of running off the right edge (the browser test
    measures the drawn lines)."""
    from taps.studio.figures.style import CHART_PX, SUP, TEXT_EM, chart_title, fit_lines

    profile = ("reference latency profile of taps-code-10m, measured on the Intel(R) Xeon(R) Platinum 8481C CPU "
               "@ 2.70GHz (2 cores), 2026-12-07 19:31 UTC")
    fig = figures.batch_figure({"TAPS": [(1, 1.5), (2, 1.2)]}, {"TAPS": "taps/online"}, f"“def f(x…”, on the {profile}")
    lines = fig.layout.title.subtitle.text.split("<br>")
    assert len(lines) == 2 and lines[-1].endswith("19:31 UTC")
    assert all(len(html.unescape(line)) * TEXT_EM * 13 <= CHART_PX - 30 for line in lines)
    assert fig.layout.margin.t >= 24 + 22 + 2 * 18                        # room for the title and both lines
    markup, px = chart_title("modelled speed-up", f"on {profile}'s profile", 250, 17)
    subs = [line.removeprefix("<sup>").removesuffix("</sup>") for line in markup.split("<br>")[1:]]
    assert len(subs) >= 4 and all(len(html.unescape(s)) * TEXT_EM * SUP * 17 <= 250 for s in subs)
    assert px >= 1.3 * 17 * (1 + len(subs))
    assert fit_lines("a b", 900, 13) == ["a b"] and fit_lines("x" * 200, 100, 13) == ["x" * 200]
