"""Guided challenges: every card has an answer on the shipped pair (the engine, or the toy, run at
the card's link settings through the pages' own link parsers), its answer quotes what the engine
gives, and its link opens a page with those settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from taps import roofline
from taps.studio import challenges
from taps.studio.challenges import CARDS, H200_8B, PAGES, REFERENCE, card, check

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shipped(shipped_pair):
    assert shipped_pair.name == challenges.SHIPPED_PAIR      # conftest's: the shipped pair, as the app loads it
    return shipped_pair


@pytest.mark.parametrize("key", [c.key for c in CARDS])
def test_every_card_has_an_answer_on_the_shipped_pair(shipped, key):
    verdict = check(card(key), shipped)
    assert verdict.ok, verdict.problems


def test_the_cards():
    assert 5 <= len(CARDS) <= 8 and len({c.key for c in CARDS}) == len(CARDS)
    for item in CARDS:
        assert item.title and item.task and item.hint, item.key
        assert "{" not in item.answer and set(item.expected) and item.answer != item.answer_template, item.key
        assert item.link.startswith(f"/{item.page}?") and (ROOT / item.page_file).exists(), item.key
    assert set(PAGES) == {c.page for c in CARDS}            # every page a card opens, and no other
    links = " ".join(c.link for c in CARDS)
    assert f"profile={H200_8B}" in links and f"profile={REFERENCE}" in links
    assert card("waste-half").link == "/Step_through?example=merge&selector=ddtree&budget=16&round=2&view=verify"
    assert card("learn-reject").link == "/Learn?preset=Two%20good%20openings&factor=0.2&budget=8&reject=while"
    with pytest.raises(ValueError, match="unknown challenge 'nope': choose one of waste-half"):
        card("nope")


def test_profiles_the_cards_name_exist(shipped):
    assert H200_8B in roofline.roofline_ids(shipped)
    from taps.profiles import shipped_reference

    assert shipped_reference(shipped)[0] == REFERENCE


def test_toy_cards_answer_without_a_model():
    for key in ("learn-agree", "learn-reject"):
        verdict = check(card(key), None)
        assert verdict.ok, verdict.problems


def test_a_wrong_answer_or_a_bad_link_is_caught():
    item = card("learn-reject")
    wrong = replace(item, expected={**item.expected, "taps_unreachable": 2})
    verdict = check(wrong, None)
    assert not verdict.ok and "taps_unreachable = 2" in verdict.problems[0]
    false_claim = replace(item, holds=lambda facts: facts["taps_unreachable"] > facts["ddtree_unreachable"])
    assert "does not hold" in check(false_claim, None).problems[0]
    stale = replace(item, params={**item.params, "reject": "until"})
    verdict = check(stale, None)
    assert not verdict.ok and "not clean" in verdict.problems[0] and "'until'" in verdict.problems[0]
