"""Guided challenges: every card's claim holds on the shipped pair on the machine that runs the tests
(the engine, or the toy, run at the card's link settings through the pages' own link parsers), its
answer is written from what the engine gives there, its link opens a page with those settings, and
every number it quotes is on that page, in the view and at the budget the card opens (AppTest). No
test compares a decoded number with a constant: float kernels differ between CPUs (CI runs these
tests a second time with PyTorch and oneDNN held to another ISA)."""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from taps import roofline
from taps.studio import challenges
from taps.studio.challenges import CARDS, H200_8B, PAGES, REFERENCE, CardAnswers, Verdict, card, check

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shipped(shipped_pair):
    assert shipped_pair.name == challenges.SHIPPED_PAIR      # conftest's: the shipped pair, as the app loads it
    return shipped_pair


_VERDICTS: dict[str, Verdict] = {}


def verdict_of(key: str, pair) -> Verdict:
    """The card's verdict on the shipped pair (the toy for a Learn card) on this machine, worked out
    once per test process."""
    if key not in _VERDICTS:
        _VERDICTS[key] = check(card(key), None if card(key).page == "Learn" else pair)
    return _VERDICTS[key]


def facts(key: str, pair) -> dict:
    return verdict_of(key, pair).facts


@pytest.mark.parametrize("key", [c.key for c in CARDS])
def test_every_card_has_an_answer_on_the_shipped_pair(shipped, key):
    item = card(key)
    verdict = verdict_of(key, shipped)
    assert verdict.ok, verdict.problems
    assert verdict.answer == item.answer(verdict.facts) and "{" not in verdict.answer
    for name in item.quotes:                                 # every quoted fact is written into the answer
        value = verdict.facts[name]
        assert isinstance(value, str) or f"{value:.2f}" in verdict.answer or f"{value:.1f}" in verdict.answer \
            or str(value) in verdict.answer, (name, value, verdict.answer)


def test_the_cards():
    assert 5 <= len(CARDS) <= 10 and len({c.key for c in CARDS}) == len(CARDS)
    for item in CARDS:
        assert item.title and item.task and item.hint, item.key
        assert item.quotes and all(name.isidentifier() for name in item.quotes), item.key
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
        assert verdict.answer == card(key).answer(verdict.facts)


def test_a_false_claim_an_unknown_quote_or_a_bad_link_is_caught():
    item = card("learn-reject")
    unknown = replace(item, answer_template=item.answer_template + " And {taps_regret} more.")
    verdict = check(unknown, None)
    assert not verdict.ok and "quotes taps_regret" in verdict.problems[0] and not verdict.answer
    false_claim = replace(item, holds=lambda facts: facts["taps_unreachable"] > facts["ddtree_unreachable"])
    assert "does not hold" in check(false_claim, None).problems[0]
    stale = replace(item, params={**item.params, "reject": "until"})
    verdict = check(stale, None)
    assert not verdict.ok and "not clean" in verdict.problems[0] and "'until'" in verdict.problems[0]


# ---------------------------------------------------------------------------- each answer, on the page it opens
def open_card(item, monkeypatch, params: dict | None = None):
    """The app on the shipped pair (no profile of this machine saved), opened at the card's link
    (or at `params`: where a "find a round" card's claim holds on this machine)."""
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", "")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    for key, value in (params or item.params).items():
        at.query_params[key] = value
    at.switch_page(item.page_file).run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    return at


def chart(at, key: str) -> dict:
    found = [el for el in at.get("plotly_chart") if el.key == key]
    assert found, f"no chart {key}"
    return json.loads(found[0].proto.spec)


def title(at, key: str) -> str:
    layout = chart(at, key)["layout"]["title"]
    return layout.get("text", "") + " " + layout.get("subtitle", {}).get("text", "")


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def values(data) -> list:
    """A trace's array as plotly wrote it: a list, or a typed array (base64 bytes and a dtype)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return float(found[1])


def candidates_numbers(fig: dict) -> dict:
    """The chain-vs-tree card's numbers off the Candidates figure: each selector's τ and nodes verified
    from the legend, the target's rank per position from its boxes (a box's centre row), DFlash2's
    first miss from its rejected marker's hover data."""
    traces = fig["data"]
    legend = {t["name"].split(" τ")[0]: t["name"] for t in traces if t.get("showlegend") is not False
              and " τ " in t.get("name", "")}
    out = {"round": fig["layout"]["meta"]["round"]}
    for label, name in (("DFlash", "dflash"), ("DFlash2", "dflash2"), ("DDTree", "ddtree")):
        out[f"{name}_tau"] = number(r"τ (\d+)", legend[label])
        out[f"{name}_verified"] = number(r"\((\d+) verified\)", legend[label])
    box = next(t for t in traces if t.get("name") == "the target's token (hindsight)")
    xs, ys = values(box["x"]), values(box["y"])
    ranks = {}
    for start in range(0, len(xs), 6):                       # a box: five corners and a break
        corners = [(x, y) for x, y in zip(xs[start:start + 5], ys[start:start + 5])]
        ranks[round(sum(x for x, _ in corners[:4]) / 4)] = round(sum(y for _, y in corners[:4]) / 4)
    walk = next(t for t in traces if t.get("legendgroup") == "dflash2" and t.get("mode") == "markers"
                and "rejected" in t.get("hovertemplate", ""))
    position, walked = walk["customdata"][0]
    cells = next(t for t in traces if t.get("mode") == "text" and t.get("hovertext"))
    first = {(round(x), y): text for x, y, text in zip(values(cells["x"]), values(cells["y"]), cells["text"])}
    out.pop("dflash_verified")
    return {**out, "first_text": first[(1, ranks[1])], "first_rank": ranks[1], "miss_position": position,
            "walk_rank": walked, "miss_rank": ranks[position]}


def selector_numbers(fig: dict) -> dict:
    """The selector card's numbers off the Candidates figure: TAPS over DFlash2's candidates' and
    DDTree's τ and nodes (legend), the first node the selector's tree accepted that DDTree did not
    verify and the rank of its parent (the accepted cell one position before it) (markers)."""
    traces = fig["data"]
    legend = {t["name"].split(" τ")[0]: t["name"] for t in traces if t.get("showlegend") is not False
              and " τ " in t.get("name", "")}
    out = {"round": fig["layout"]["meta"]["round"]}
    for label, name in (("TAPS/selector", "taps"), ("DDTree", "ddtree")):
        out[f"{name}_tau"] = number(r"τ (\d+)", legend[label])
        out[f"{name}_verified"] = number(r"\((\d+) verified\)", legend[label])

    def cells(group: str, verdict: str = "") -> set:
        return {tuple(c) for t in traces if t.get("legendgroup") == group and t.get("mode") == "markers"
                and verdict in t.get("hovertemplate", "") for c in t["customdata"]}

    accepted = cells("taps/selector", "accepted")
    depth, rank = min(accepted - cells("ddtree"))
    parent = next((r for d, r in accepted if d == depth - 1), 1)
    return {**out, "kept_depth": depth, "kept_rank": rank, "parent_rank": parent}


def step_numbers(at, key: str, pair) -> dict:
    """The numbers a Step card's answer quotes, read off the page the card opens."""
    if key == "waste-half":                                  # Stage by stage, at Verify
        text = title(at, "step_lesson_chart")
        return {"budget": number(r"budget (\d+)", text), "verified": int(metric(at, "Verified this round")),
                "waste": number(r"(\d+) sat under a rejected prefix", text), "round": number(r"[Rr]ound (\d+)", text)}
    if key == "chain-vs-tree":                              # the Candidates view: its legend, boxes and markers
        found = candidates_numbers(chart(at, "step_candidates_chart"))
        assert found.pop("first_text") == facts(key, pair)["first_text"]      # the token in the boxed cell
        return found
    if key == "selector-keeps":                             # the Candidates view: its legend and markers
        return selector_numbers(chart(at, "step_candidates_chart"))
    if key == "deep-narrow":
        text = title(at, "step_lesson_chart")
        return {"tau": int(metric(at, "τ this round")), "verified": number(r"checks all (\d+) nodes", text),
                "round": number(r"[Rr]ound (\d+)", text)}
    if key == "taps-below-ddtree":                           # Marginal vs path, at the card's budget
        text = title(at, "step_compare_chart")
        drawn = [str(t) for trace in chart(at, "step_compare_chart")["data"] if "text" in trace.get("mode", "")
                 for t in trace.get("text", [])]                  # labels on the tree, not hover text
        assert any(drawn_as(facts(key, pair)["ddtree_first"], label) for label in drawn), drawn
        return {"round": number(r"Round (\d+)", text), "taps_tau": int(metric(at, "τ this round")),
                "taps_verified": int(metric(at, "Verified this round")), "compare": number(r"top (\d+)", text),
                "ddtree_accepts": number(r"\(DDTree\) accepts ≥ (\d+)", text),
                "reach_accepts": number(r"\(TAPS\) accepts ≥ (\d+)", text)}
    assert key == "cost-vs-reach"                            # the Select stage and its cost curve
    curve = chart(at, "step_size_chart")["data"][0]
    rate = dict(zip(values(curve["x"]), values(curve["y"])))
    verified = int(metric(at, "Verified this round"))
    return {"cost_nodes": verified, "cost_tau": int(metric(at, "τ this round")),
            "budget": number(r"budget (\d+)", title(at, "step_lesson_chart")), "cost_rate": round(rate[verified]),
            "budget_rate": round(rate[max(rate)])}


def drawn_as(token: str, label: str) -> bool:
    """Whether a tree label shows this token: whole, or cut to fit with "…" (its hover has it whole)."""
    return label == token or (label.endswith("…") and len(label) > 2 and token.startswith(label[:-1]))


STEP_CARDS = [c.key for c in CARDS if c.page == "Step_through"]


def numbers_of(item, pair) -> dict:
    """The numbers the card's answer quotes, as the engine gives them on this machine."""
    found = facts(item.key, pair)
    return {name: found[name] for name in item.quotes if isinstance(found[name], (int, float))}


def test_every_card_is_tested_on_the_page_it_opens():
    tested = {*STEP_CARDS, "h200-vs-laptop", "batch-eight", "learn-agree", "learn-reject"}
    assert tested == {c.key for c in CARDS}


@pytest.mark.parametrize("key", STEP_CARDS)
def test_a_step_cards_answer_is_on_the_page_it_opens(key, shipped, monkeypatch):
    item = card(key)
    params = verdict_of(key, shipped).params                 # the card's link, or where its claim holds here
    at = open_card(item, monkeypatch, params)
    ctrl = at.session_state["step_controller"]
    assert ctrl.view == int(params["round"])
    assert step_numbers(at, key, shipped) == numbers_of(item, shipped)


def test_the_race_cards_answer_is_on_the_page_it_opens(shipped, monkeypatch):
    """The H200 race: the profile's notice gives both verify(64) / verify(1); TAPS's lane at round 1
    the H200's tree; raced again after *Back to the reference CPU*, the CPU's."""
    item = card("h200-vs-laptop")
    at = open_card(item, monkeypatch)
    notice = " ".join(i.value for i in at.info)
    expected = facts(item.key, shipped)
    assert f"verify(64) / verify(1) = {expected['h200_ratio']:.2f} there, {expected['cpu_ratio']:.2f} on the " \
           "reference CPU" in notice
    at.number_input(key="race_max_new").set_value(8).run()       # round 1 is the same in a shorter race

    def first_taps_round() -> str:
        at.button(key="lanes_btn").click().run()
        at.button(key="race_restart").click().run()
        for _ in range(20):
            at.button(key="race_step").click().run()
            text = title(at, "lane_tree_taps/online")
            if text.startswith("round 1:"):
                return text
        raise AssertionError("TAPS's lane never finished round 1")

    assert f"round 1: τ {expected['h200_tau']}, verified {expected['h200_nodes']}" in first_taps_round()
    at.button(key="profile_back").click().run()
    assert "A link set" not in " ".join(i.value for i in at.info)
    assert f"round 1: τ {expected['cpu_tau']}, verified {expected['cpu_nodes']}" in first_taps_round()


@pytest.mark.slow
def test_the_batch_cards_answer_is_on_the_page_it_opens(shipped, monkeypatch):
    """Eight requests in a batch: the finish table at the race's end has every number the answer
    quotes; in the batch sweep, batch-aware TAPS's trees for one request are the answer's size and
    its steps that drafted at eight the answer's share.
    (Slow: the sweep decodes the race at four batch sizes, about 40 s.)"""
    item = card("batch-eight")
    at = open_card(item, monkeypatch)
    assert at.selectbox(key="race_batch").value == 8

    def finish_table() -> dict:
        at.button(key="lanes_btn").click().run()
        at.button(key="race_end").click().run()
        table = at.table[0].value
        return {method: dict(zip(table.columns, row)) for method, row in zip(table.index, table.values)}

    rows, expected = finish_table(), facts(item.key, shipped)
    plan = rows["TAPS (batch-aware)"]
    shown = {"dflash_speedup": rows["DFlash"]["speed-up"], "ddtree_speedup": rows["DDTree"]["speed-up"],
             "taps_speedup": rows["TAPS"]["speed-up"], "plan_speedup": plan["speed-up"],
             "taps_nodes": rows["TAPS"]["verified / round"], "plan_nodes": plan["verified / round"],
             "taps_tau": rows["TAPS"]["τ"], "plan_tau": plan["τ"]}
    assert {k: float(v) for k, v in shown.items()} == {k: expected[k] for k in shown}
    assert any("A batch of 8 requests" in c.value for c in at.caption)
    at.button(key="batch_sweep_btn").click().run()
    sweep = next(frame.value for frame in at.dataframe if "requests in a batch" in frame.value.columns)
    alone = sweep[(sweep["requests in a batch"] == 1) & (sweep["method"] == "TAPS (batch-aware)")]
    assert float(alone["verified / round"].iloc[0]) == expected["plan_nodes_alone"]
    eight = sweep[(sweep["requests in a batch"] == 8) & (sweep["method"] == "TAPS (batch-aware)")]
    assert float(eight["steps that drafted"].iloc[0]) == expected["plan_drafted"]


def test_the_learn_cards_answers_are_on_the_page_they_open(monkeypatch):
    agree = open_card(card("learn-agree"), monkeypatch)
    expected = facts("learn-agree", None)
    assert (metric(agree, "Expected tokens/round, DDTree"), metric(agree, "Expected tokens/round, TAPS")) == (
        f"{expected['ddtree_expected']:.2f}", f"{expected['taps_expected']:.2f}")
    agree.slider(key="learn_factor").set_value(1.0).run()                # the one move the card asks for
    assert metric(agree, "Expected tokens/round, DDTree") == metric(agree, "Expected tokens/round, TAPS") == \
        f"{expected['taps_expected_at_1']:.2f}"
    reject = open_card(card("learn-reject"), monkeypatch)
    expected = facts("learn-reject", None)
    assert (int(metric(reject, "DDTree nodes made unreachable")), int(metric(reject, "TAPS nodes made unreachable"))) \
        == (expected["ddtree_unreachable"], expected["taps_unreachable"])
    assert reject.slider(key="learn_budget").value == 8


def test_card_answers_are_worked_out_once_in_the_background(shipped):
    """The Learn page's answers: the toy's at once, the engine's as background jobs of the decode
    service (None until done), then kept: the same answer `check` writes on this machine."""
    from taps.studio.serve import DecodeService

    answers = CardAnswers(DecodeService(workers=1))
    toy_card, engine_card = card("learn-reject"), card("waste-half")
    assert answers.get(toy_card, shipped).answer == check(toy_card, None).answer
    first = answers.get(engine_card, shipped)
    deadline = time.monotonic() + 120
    while first is None and time.monotonic() < deadline:
        time.sleep(0.05)
        first = answers.get(engine_card, shipped)
    assert first is not None and first.ok and first.answer == check(engine_card, shipped).answer
    assert answers.get(engine_card, shipped) is first                    # kept: not worked out again


@pytest.mark.slow
def test_the_learn_page_writes_each_answer_from_this_machine(shipped, monkeypatch):
    """Every card's Answer popover on the Learn page holds the answer written from what the engine
    gives here; while the engine works, a line says so. (Slow: it works out every card's answer,
    about 30 s; each card's answer alone is checked in the default suite.)"""
    from taps.studio.challenges import card_answers

    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TAPS_PAIR", "")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/4_Learn.py").run()
    assert not at.exception
    deadline = time.monotonic() + 240
    while card_answers().pending(shipped) and time.monotonic() < deadline:
        time.sleep(0.2)
    at.run()
    shown = " ".join(m.value for m in at.markdown)
    for item in CARDS:
        verdict = check(item, None if item.page == "Learn" else shipped)
        assert verdict.answer in shown, item.key
    assert "Working this answer out" not in shown


def test_a_find_a_round_card_moves_its_link_to_where_its_claim_holds_here(shipped):
    """A card whose claim does not hold at its link's round on this machine (float kernels differ:
    the interesting round moves) takes the first round of its search where it does, and its link
    goes there; where it holds nowhere, the card's own round's problem is said."""
    item = card("deep-narrow")
    at_one = replace(item, params={**item.params, "round": "1"})
    alone = check(replace(at_one, search=()), shipped)
    assert not alone.ok and alone.params["round"] == "1"                 # round 1 is a shallow first tree
    moved = check(at_one, shipped)
    assert moved.ok and moved.params["round"] != "1" and moved.facts["round"] == int(moved.params["round"])
    assert f"round {moved.params['round']}:" in moved.answer
    never = check(replace(at_one, holds=lambda f: f["tau"] > 99), shipped)
    assert not never.ok and never.params == at_one.params and "does not hold" in never.problems[0]


def test_tokens_in_an_answer_are_escaped_markdown():
    """A token such as `__eq__` reads as itself in an answer, not as a bold "eq"."""
    answer = card("deep-narrow").answer({"title": "Python: a Point class", "round": 5, "verified": 16, "tau": 11,
                                          "accepted_text": "␣def␣__eq__(self,"})
    assert "␣def␣\\_\\_eq\\_\\_\\(self," in answer and "__eq__" not in answer
    assert "round 5:" in answer and "*Python: a Point class*" in answer        # the template's own markdown stays
