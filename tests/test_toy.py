"""The Learn page's toy: its true model, both rankings, the brute-force optimum, and input checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps.studio.toy import (
    PRESETS,
    acceptance_curve,
    build_toy_tree,
    choose,
    descendants,
    expected_tokens,
    format_marginals,
    parse_marginals,
    ranking_table,
)


def is_prefix_closed(parents, chosen) -> bool:
    chosen = set(int(v) for v in chosen)
    return 0 in chosen and all(int(parents[v]) in chosen for v in chosen if v)


marginal_rows = st.integers(1, 3).flatmap(lambda width: st.lists(    # each depth's probabilities sum to at most 1
    st.lists(st.floats(0.01, 1.0 / width), min_size=width, max_size=width), min_size=1, max_size=4))


def test_tree_shape_and_true_model():
    preset = PRESETS["Two good openings"]
    tree = build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens)
    assert tree.size == 2 + 4 + 8 + 16 + 32 + 64
    assert all(tree.parents[i] < i and tree.depths[i] == tree.depths[tree.parents[i]] + 1
               for i in range(1, len(tree.labels)))
    # the favourite path: reach is the plain product of marginals
    favourite = [1, 3, 7, 15, 31, 63]
    assert tree.path_text(63) == "for i in range ( n"
    assert tree.reach[63] == pytest.approx(0.50 * 0.9 ** 5)
    # "while i": the opening is off-mode, so the next token is accepted 0.2 x its marginal
    while_i = 5
    assert tree.path_text(while_i) == "while i"
    assert tree.reach[while_i] == pytest.approx(0.45 * 0.2 * 0.90)
    assert tree.path_marginal[while_i] == pytest.approx(0.45 * 0.90)
    assert tree.reach[favourite].tolist() == pytest.approx(tree.path_marginal[favourite].tolist())


@settings(max_examples=40, deadline=None)
@given(marginal_rows, st.floats(0.0, 1.0), st.integers(0, 60))
def test_rankings_are_prefix_closed_and_reach_is_monotone(rows, factor, budget):
    tree = build_toy_tree(rows, factor)
    for score in (tree.path_marginal, tree.reach):
        chosen = choose(score, budget)
        assert is_prefix_closed(tree.parents, chosen)
        assert len(chosen) - 1 == min(budget, tree.size)
    assert np.all(tree.reach[1:] <= tree.reach[tree.parents[1:]] + 1e-12)
    assert np.all(tree.reach <= tree.path_marginal + 1e-12)
    # TAPS's tree is never worse than DDTree's under the true model
    by_reach = expected_tokens(tree, choose(tree.reach, budget))
    assert by_reach >= expected_tokens(tree, choose(tree.path_marginal, budget)) - 1e-12


def test_reach_ranking_is_the_brute_force_optimum():
    tree = build_toy_tree([[0.5, 0.4], [0.7, 0.2], [0.6, 0.3]], 0.25)
    nodes = range(1, len(tree.labels))
    for budget in range(1, tree.size + 1):
        best = max(tree.reach[list(subset)].sum() for subset in itertools.combinations(nodes, budget)
                   if is_prefix_closed(tree.parents, (0,) + subset))
        assert expected_tokens(tree, choose(tree.reach, budget)) == pytest.approx(1 + best)


def test_calibrated_drafter_makes_both_rankings_agree():
    preset = PRESETS["Calibrated drafter"]
    tree = build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens)
    assert np.allclose(tree.reach, tree.path_marginal)
    curve = acceptance_curve(tree, 30)
    assert np.allclose(curve["by_marginal"], curve["by_reach"])


def test_two_openings_preset_shows_the_gap():
    preset = PRESETS["Two good openings"]
    tree = build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens)
    curve = acceptance_curve(tree, 20)
    assert curve["by_reach"].iloc[8] > curve["by_marginal"].iloc[8] + 0.05
    assert curve["by_reach"].iloc[0] == curve["by_marginal"].iloc[0] == 1.0
    assert np.all(np.diff(curve["by_reach"]) >= -1e-12)
    under_while = set(descendants(tree, 2))
    assert len(under_while) == 2 + 4 + 8 + 16 + 32
    assert len(under_while & set(choose(tree.path_marginal, 8).tolist())) > \
        len(under_while & set(choose(tree.reach, 8).tolist()))
    table = ranking_table(tree, 8)
    assert table["DDTree picks"].sum() == table["TAPS picks"].sum() == 8
    assert list(table["rank by marginal"]) == list(range(1, tree.size + 1))


def test_parse_and_format_round_trip():
    rows, words = parse_marginals("for=0.6, while=0.3, if=0.1\n0.5 0.25 0.25\n")
    assert rows == [[0.6, 0.3, 0.1], [0.5, 0.25, 0.25]]
    assert words[0] == ["for", "while", "if"] and words[1] == ["A2", "B2", "C2"]
    again = parse_marginals(format_marginals(rows, words))
    assert again == (rows, words)
    for preset in PRESETS.values():
        assert parse_marginals(preset.as_text())[0] == preset.marginals


def test_rows_above_one_are_refused_not_rescaled():
    with pytest.raises(ValueError, match="depth 1: the probabilities add up to 4.00.*at most 1"):
        build_toy_tree([[2.0, 2.0]], 0.5)
    assert build_toy_tree([[0.9, 0.08, 0.02]], 0.5).marginal[1:].tolist() == [0.9, 0.08, 0.02]


def test_duplicate_tokens_under_one_parent_are_refused():
    with pytest.raises(ValueError, match="depth 2: the token 'x' appears twice"):
        parse_marginals("a=0.5 b=0.5\nx=0.3 x=0.3")
    with pytest.raises(ValueError, match="appears twice"):
        build_toy_tree([[0.5, 0.4]], 0.5, [["a", "a"]])


@pytest.mark.parametrize("text, message", [
    ("", "no marginals"), ("a=b", "not a probability"), ("0.5 x", "not a probability"),
    ("0.5 0.5\n0.3", "same number"), ("-0.1 0.5", "negative"), ("0 0", "no probability mass"),
    ("\n".join(["0.5 0.5"] * 7), "at most 6"), ("a=0.5 b=0.5 c=0.5 d=0.5", "add up to 2.00"),
    ("0.1 0.1 0.1 0.1 0.1", "1 to 4"),
    ("\n".join(["0.2 0.2 0.2 0.2"] * 6), "keep it under"), ("nan 0.5", "finite"),
])
def test_bad_marginals_are_clear(text, message):
    with pytest.raises(ValueError, match=message):
        parse_marginals(text)


@pytest.mark.parametrize("factor", [-0.1, 1.5, float("nan")])
def test_bad_factor_is_clear(factor):
    with pytest.raises(ValueError, match="off-mode factor"):
        build_toy_tree([[0.5, 0.5]], factor)


def test_learn_link_round_trip_and_bad_values():
    from taps.studio.link import learn_link_params
    from taps.studio.link import parse_learn_link as parse_learn_params
    from taps.studio.toy import LearnState

    state = LearnState("Sure start, shaky finish", 0.45, 12, "a dog")
    again, messages = parse_learn_params(learn_link_params(state))
    assert again == state and messages == []
    assert parse_learn_params({"preset": "two-good-openings", "reject": "while  i"})[0] == LearnState(
        "Two good openings", 0.2, 8, "while i")
    default, messages = parse_learn_params({})
    assert default == LearnState("Two good openings", 0.2, 8, "") and messages == []
    bad = {"preset": "Nope", "factor": "1.5", "budget": "0", "reject": "zebra"}
    state, messages = parse_learn_params(bad)
    assert state == LearnState("Two good openings", 0.2, 8, "")
    assert [m.split(":")[0] for m in messages] == [f"Link parameter {name}" for name in bad]
    assert "unknown preset 'Nope': choose one of Two good openings" in messages[0]
    assert "between 0 and 1, got 1.5" in messages[1] and "from 1 to 60" in messages[2]
    state, messages = parse_learn_params({"factor": "x", "budget": "7.5"})
    assert (state.factor, state.budget) == (0.2, 8) and "not a number" in messages[0] and "'7.5'" in messages[1]
    state, messages = parse_learn_params({"factor": "0.33", "preset": "Flat drafter", "budget": "40"})
    assert state.factor == 0.35 and "steps of 0.05" in messages[0] and "from 1 to 39" in messages[1]


def test_ranking_table_puts_both_picks_next_to_the_path():
    preset = PRESETS["Two good openings"]
    table = ranking_table(build_toy_tree(preset.marginals, preset.off_mode_factor, preset.tokens), 8)
    assert list(table.columns[:3]) == ["path", "DDTree picks", "TAPS picks"]
