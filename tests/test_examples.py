"""The app's examples teach: on the shipped pair at the app's default settings (taps.config's defaults,
sized by the shipped reference CPU profile), each shows a round with τ >= 2 and some waste among its
first three, its `look_for` line is about such a round and names tokens that round really verified;
the examples before the rewrite stay a bench suite (`examples-v1`)."""

from __future__ import annotations

import re

import pytest

from taps import DecodeSession
from taps.config import DecodeConfig
from taps.eval.prompts import (
    SUITES,
    example_by_id,
    example_prompts,
    look_for,
    parse_prompt_text,
    suite_prompts,
)
from taps.profiles import shipped_reference
from taps.studio.failures import visible_text

FIRST_ROUNDS = 3
QUOTED = re.compile(r"‘([^’]+)’")
TAU_CLAIM = re.compile(r"τ (\d+)")


@pytest.fixture(scope="module")
def shipped(shipped_pair):
    return shipped_pair          # conftest's: the shipped pair, loaded as the app loads it


@pytest.fixture(scope="module")
def first_rounds(shipped):
    """Each example's first three rounds at the app's default settings and the shipped profile."""
    name, profile, why = shipped_reference(shipped)
    assert profile is not None, why
    out = {}
    for example in example_prompts():
        session = DecodeSession(shipped, example["prompt"], DecodeConfig(), profile=profile)
        out[example["id"]] = [session.step() for _ in range(FIRST_ROUNDS) if not session.finished]
    return out


def teaches(record) -> bool:
    """Worth explaining: waste to point at, or a deep accepted path (a narrow tree that wastes nothing)."""
    return record.tau >= 2 and record.waste_nodes > 0 or record.tau >= 6


def test_every_example_has_a_round_worth_explaining(first_rounds):
    for example_id, rounds in first_rounds.items():
        assert len(rounds) == FIRST_ROUNDS, f"{example_id} ends within its first {FIRST_ROUNDS} rounds"
        assert any(teaches(r) for r in rounds), (example_id, [(r.tau, r.waste_nodes) for r in rounds])


def test_merge_sort_does_not_end_after_one_token(first_rounds):
    rounds = first_rounds["sort"]
    assert not rounds[0].finished and sum(r.tau for r in rounds) > 3


def test_look_for_lines_are_true_of_their_round(first_rounds):
    for example in example_prompts():
        line, number = example["look_for"], example["round"]
        assert 1 <= number <= FIRST_ROUNDS and line.startswith(f"Round {number}:"), example["id"]
        record = first_rounds[example["id"]][number - 1]
        assert teaches(record), (example["id"], record.tau, record.waste_nodes)
        verified = {visible_text(record.pool_texts[v]) for v in record.selected[1:]}
        committed = visible_text("".join(record.pool_texts[v] for v in record.accepted) + record.bonus_text)
        quoted = QUOTED.findall(line)
        assert quoted, example["id"]
        for token in quoted:
            assert token in verified or token in committed, (example["id"], token, sorted(verified))
        for claim in TAU_CLAIM.findall(line):
            assert int(claim) == record.tau, (example["id"], claim, record.tau)


def test_examples_are_python_code_or_english_inside_it():
    examples = example_prompts()
    assert 5 <= len(examples) <= 10 and len({e["id"] for e in examples}) == len(examples)
    assert "fib" in {e["id"] for e in examples}
    for example in examples:
        assert example["kind"] in ("code", "prose") and example["title"] and example["look_for"], example
        prompt = example["prompt"]
        assert prompt.isascii() and not prompt.endswith(("\n", " ")), example["id"]   # ends mid-line, on a token
        assert prompt.lstrip().startswith(("def ", "class ", "import ", "from ", "#")), example["id"]
        if example["kind"] == "prose":                 # English the model continues inside a comment or docstring
            last_line = prompt.splitlines()[-1].strip()
            assert last_line.startswith("#") or prompt.count('"""') % 2 == 1, example["id"]


def test_the_old_examples_stay_a_suite():
    assert {"examples", "examples-v1"} <= set(SUITES)
    name, prompts = suite_prompts("examples-v1")
    assert name == "examples-v1"
    assert [p["id"] for p in prompts] == ["fib", "sort", "csv", "loop", "story", "science", "letter"]
    assert prompts[1]["prompt"].endswith("middle = len(items) // 2\n")
    assert [p["id"] for p in suite_prompts("examples")[1]] == [p["id"] for p in example_prompts()]


def test_example_lookup_and_teaching_fields():
    assert example_by_id("fib")["title"] == "Python: Fibonacci"
    assert look_for("fib") == example_by_id("fib")["look_for"]
    with pytest.raises(ValueError, match="unknown example 'nope': choose one of fib"):
        example_by_id("nope")
    parsed = parse_prompt_text('{"prompt": "x", "look_for": "see", "round": 2}')
    assert parsed[0]["look_for"] == "see" and parsed[0]["round"] == 2
    for bad, message in (('{"prompt": "x", "round": 0}', "'round' must be a whole number"),
                         ('{"prompt": "x", "round": true}', "'round' must be a whole number"),
                         ('{"prompt": "x", "look_for": 3}', "'look_for' must be one line"),
                         ('{"prompt": "x", "look_for": "a\\nb"}', "'look_for' must be one line")):
        with pytest.raises(ValueError, match=message):
            parse_prompt_text(bad, "f.jsonl")
