"""Step through's link (taps.studio.link) without streamlit: state -> query parameters -> state,
and every bad or stale parameter getting the engine's message and the page's default."""

from __future__ import annotations

import pytest

from taps.config import MAX_BUDGET
from taps.policies import DDTREE, ORACLE, TAPS
from taps.studio.link import (
    DEFAULT_VIEW,
    MAX_PROMPT_CHARS,
    VIEWS,
    StepLink,
    fits,
    page_defaults,
    param_text,
    parse_step_link,
    setting_value,
    step_link_params,
    too_long,
)

EXAMPLES = [{"id": "fib", "title": "Python: Fibonacci", "prompt": "def fib(n):\n"},
            {"id": "csv", "title": "Python: read a CSV", "prompt": "import csv\n"}]
DEFAULTS = page_defaults(max_new_tokens=64)


def parse(params, pair=None):
    return parse_step_link(params, EXAMPLES, DEFAULTS, pair)


def test_the_issues_link_reads_as_written():
    link, messages = parse({"example": "fib", "selector": TAPS.name, "estimator": "learned", "budget": "16",
                            "taps_mode": "reach", "round": "4", "view": "tree", "profile": "reference-cpu-x"})
    assert messages == []
    assert link.prompt == "def fib(n):\n" and link.example == "fib" and link.round == 4 and link.view == "tree"
    assert link.settings == dict(DEFAULTS, selector=TAPS.name, estimator="learned", budget=16, taps_mode="reach")
    assert link.profile == "reference-cpu-x" and not link.presenter


@pytest.mark.parametrize("link", [
    StepLink(dict(DEFAULTS), "def fib(n):\n", "fib"),
    StepLink(dict(DEFAULTS, budget=16, taps_mode="reach", estimator="learned"), "def fib(n):\n", "fib", 4, "tree",
             profile="machine"),
    StepLink(dict(DEFAULTS, selector=DDTREE.name, temperature=0.7, seed=12, block_size=8), "x = [1, 2,\n  3]&?#",
             None, 2, "verify", True, "roofline-nvidia-h200-qwen3-8b"),
    StepLink(dict(DEFAULTS, max_new_tokens=200, lambda_depth=0.0125), "import csv\n", "csv", 1, "export"),
])
def test_state_to_params_and_back_is_the_same_state(link):
    params = step_link_params(link, DEFAULTS)
    assert all(isinstance(v, str) for v in params.values())
    again, messages = parse(params)
    assert messages == []
    for name in ("settings", "prompt", "example", "round", "view", "presenter", "profile"):
        assert getattr(again, name) == getattr(link, name), name
    assert step_link_params(again, DEFAULTS) == params


def test_only_non_default_settings_and_what_replays_the_run_are_written():
    link = StepLink(dict(DEFAULTS, budget=16), "def fib(n):\n", "fib", 3, "pool", profile="machine")
    assert step_link_params(link, DEFAULTS) == {"example": "fib", "budget": "16", "round": "3", "view": "pool",
                                                "profile": "machine"}
    own = StepLink(dict(DEFAULTS), "print(1)", None)
    assert step_link_params(own, DEFAULTS) == {"prompt": "print(1)", "view": DEFAULT_VIEW}
    assert parse({"prompt": "import csv\n"})[0].example == "csv"          # an example's text is that example


@pytest.mark.parametrize("params, field, words", [
    ({"example": "gone"}, "prompt", "unknown example 'gone': choose one of fib, csv"),
    ({"budget": "0"}, "budget", f"budget must be from 1 to {MAX_BUDGET}, got 0"),
    ({"budget": "99999"}, "budget", f"budget must be from 1 to {MAX_BUDGET}, got 99999"),
    ({"budget": "sixteen"}, "budget", "budget must be a whole number, got 'sixteen'"),
    ({"temperature": "hot"}, "temperature", "temperature must be a number, got 'hot'"),
    ({"temperature": "nan"}, "temperature", "temperature must be from 0.0 to 5.0, got nan"),
    ({"selector": "magic"}, "selector", "unknown selector 'magic'"),
    ({"taps_mode": "fast"}, "taps_mode", "unknown TAPS mode 'fast'"),
    ({"prompt": "x" * 9000}, "prompt", "longer than a link carries"),
    ({"prompt": "   "}, "prompt", "the prompt is empty"),
    ({"view": "slides"}, "view", "unknown view 'slides'"),
    ({"round": "0"}, "round", "round must be a whole number from 1"),
    ({"round": "-3"}, "round", "round must be a whole number from 1"),
    ({"round": "two"}, "round", "round must be a whole number from 1"),
    ({"profile": "../../etc/passwd"}, "profile", "is not a profile id"),
])
def test_every_bad_parameter_gets_a_message_and_the_default(params, field, words):
    link, messages = parse(dict(params, budget=params.get("budget", "16")) if field != "budget" else params)
    assert len(messages) == 1 and words in messages[0], messages
    fresh = StepLink(dict(DEFAULTS), EXAMPLES[0]["prompt"], "fib")
    expected = {"prompt": fresh.prompt, "round": 0, "view": DEFAULT_VIEW, "profile": None}
    if field in expected:
        assert getattr(link, field) == expected[field]
        assert link.settings["budget"] == 16                              # the good parameters stay
    else:
        assert link.settings[field] == DEFAULTS[field]
    assert field not in link.given


def test_settings_that_do_not_run_together_fall_back_with_the_engines_message():
    link, messages = parse({"selector": ORACLE.name, "temperature": "0.5", "budget": "8"})
    assert len(messages) == 1 and "greedy decoding only" in messages[0] and "default temperature" in messages[0]
    assert link.settings["selector"] == ORACLE.name and link.settings["temperature"] == 0.0
    assert link.settings["budget"] == 8


def test_a_pair_checks_the_prompt_and_what_the_pair_can_run(tiny_pair):
    long = "word " * (tiny_pair.max_context + 10)
    link, messages = parse({"prompt": long}, tiny_pair)
    assert link.prompt == EXAMPLES[0]["prompt"] and "longer than the model's context" in messages[0]
    block = tiny_pair.drafter.block_size
    link, messages = parse({"block_size": str(block + 5)}, tiny_pair)
    assert link.settings["block_size"] == DEFAULTS["block_size"] and f"the drafter's {block}" in messages[0]


def test_unknown_names_are_named_and_several_values_take_the_last():
    link, messages = parse({"budgte": "16", "budget": ["8", "12"]})
    assert link.settings["budget"] == 12 and messages == ["Link parameters not understood (ignored): budgte."]
    with pytest.raises(ValueError, match="not a decode setting"):
        page_defaults(colour="red")
    assert set(VIEWS) >= {"tree", "compare", "rounds", "export", "draft", "commit"}


def test_a_prompt_longer_than_a_link_carries_is_left_out_and_the_round_with_it():
    long = "x" * (MAX_PROMPT_CHARS + 1)
    assert not fits(long) and f"the prompt is {len(long)} characters, longer than a link carries" in too_long(long)
    params = step_link_params(StepLink(dict(DEFAULTS, budget=16), long, None, 3, "verify"), DEFAULTS)
    assert params == {"budget": "16", "view": "verify"}           # the settings and the view, never a 9 kB prompt
    edge = "x" * MAX_PROMPT_CHARS
    assert step_link_params(StepLink(dict(DEFAULTS), edge, None, 2), DEFAULTS)["prompt"] == edge
    assert "longer than a link carries" in parse({"prompt": long})[1][0]


def test_the_compare_budget_rides_in_the_link():
    link = StepLink(dict(DEFAULTS), "def fib(n):\n", "fib", 5, "compare", compare=32)
    params = step_link_params(link, DEFAULTS)
    again, messages = parse(params)
    assert params["compare"] == "32" and again.compare == 32 and "compare" in again.given and messages == []
    for bad in ("0", "2000", "many"):
        again, messages = parse({"example": "fib", "view": "compare", "compare": bad})
        assert again.compare == 0 and len(messages) == 1
        assert messages[0].startswith(f"Link parameter compare: compare must be a whole number from 1 to {MAX_BUDGET}")


def test_values_are_written_one_way_and_read_back_the_same():
    assert [param_text(v) for v in (16, 0.0, 0.7, 1.0, 0.0125, True, "cost")] == ["16", "0", "0.7", "1", "0.0125", "1",
                                                                                "cost"]
    for name, value in (("temperature", 0.7), ("lambda_depth", 0.0125), ("budget", 16), ("selector", DDTREE.name)):
        assert setting_value(name, param_text(value)) == value
