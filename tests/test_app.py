"""Every page of the Streamlit app through streamlit.testing (AppTest), on the tiny random pair:
widgets set, buttons clicked, the figures' data checked against the Round records, bad input shown
as a clear message with the page still usable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
from streamlit.testing.v1 import AppTest

from taps.app_state import run_json

ROOT = Path(__file__).resolve().parent.parent
STEP, RACE, FAIL, LEARN = ("1_Step_through.py", "2_Race_and_sweep.py", "3_Failure_cases.py", "4_Learn.py")


@pytest.fixture(scope="module", autouse=True)
def tiny_pair_env(tiny_pair_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TAPS_PAIR", str(tiny_pair_dir))
        yield


def open_page(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    if page:
        at.switch_page(f"pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart(at: AppTest, key: str) -> dict:
    found = [el for el in at.get("plotly_chart") if el.key == key]
    assert found, f"no chart {key}"
    return json.loads(found[0].proto.spec)


def node_ids(trace: dict) -> set[int]:
    return {int(row[0]) for row in trace.get("customdata") or []}


def nodes_named(spec: dict, *names: str, axis: str | None = None) -> set[int]:
    return set().union(*(node_ids(t) for t in spec["data"] if t.get("name") in names
                         and (axis is None or t.get("xaxis", "x") == axis)))


def errors(at: AppTest) -> str:
    return " | ".join(e.value for e in at.error)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def step_setup(at: AppTest, prompt: str = "def add(a, b):\n    return", selector: str = "taps",
               budget: int = 16, max_new: int = 12) -> AppTest:
    at.text_area(key="step_prompt").set_value(prompt)
    at.selectbox(key="step_selector").set_value(selector)
    at.number_input(key="step_budget").set_value(budget)
    at.number_input(key="step_max_new").set_value(max_new)
    return at


def check_tree_matches(spec: dict, record) -> None:
    verified = nodes_named(spec, "root (last committed token)", "accepted", "rejected sibling",
                           "rejected-prefix waste")
    assert verified == set(record.selected)
    assert all(record.pool_parents[v] in verified for v in verified if v), "selected nodes must be prefix-closed"
    assert nodes_named(spec, "accepted") == set(record.accepted)
    assert nodes_named(spec, "rejected-prefix waste") == {i for i in record.selected if record.status[i] == "waste"}
    path = next(t for t in spec["data"] if t["name"] == "accepted path")
    assert len(path["x"]) == 3 * len(record.accepted)
    bonus = next(t for t in spec["data"] if t["name"] == "bonus token (the target's own)")
    assert len(bonus["x"]) == 1
    title = spec["layout"]["title"]["text"]
    assert f"verified {record.verified_nodes}, accepted {len(record.accepted)} + bonus" in title
    assert f"waste {record.waste_nodes}" in title


# ---------------------------------------------------------------------------- home
def test_home_names_the_pair_and_the_pages():
    at = open_page()
    assert metrics(at)["Pair"] == "tiny-random"
    assert {link.proto.label for link in at.get("page_link")} == {"Step through", "Race and sweep", "Failure cases",
                                                                  "Learn"}
    assert chart(at, "home_toy_chart")["data"]


# ---------------------------------------------------------------------------- step through
def test_step_draws_the_round_and_counts_match():
    at = step_setup(open_page(STEP))
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not errors(at)
    session = at.session_state["step_session"]
    record = session.rounds[-1]
    assert session.config.budget == 16 and len(session.rounds) == 1
    check_tree_matches(chart(at, "step_tree_chart"), record)
    shown = metrics(at)
    assert shown["Tokens so far"] == str(record.tau) and shown["Verified this round"] == str(record.verified_nodes)
    assert shown["Speed-up vs AR"].endswith("×")

    at.button(key="step_btn_step").click().run()
    assert len(at.session_state["step_session"].rounds) == 2
    second = at.session_state["step_session"].rounds[-1]
    check_tree_matches(chart(at, "step_tree_chart"), second)
    assert metrics(at)["Tokens so far"] == str(record.tau + second.tau)
    compare = chart(at, "step_compare_chart")
    assert compare["layout"]["meta"]["budget"] == 16
    at.number_input(key="step_compare_budget").set_value(4).run()
    compare = chart(at, "step_compare_chart")
    assert len(nodes_named(compare, "picked, on the target's path", "picked, rejected sibling",
                           "picked, under a rejected prefix", "picked, verdict unknown", axis="x")) == 4
    at.radio(key="step_color_by").set_value("target").run()
    assert "target" in chart(at, "step_tree_chart")["layout"]["coloraxis"]["colorbar"]["title"]["text"]
    assert at.dataframe[0].value.shape[0] == 2
    assert {b.key for b in at.get("download_button")} >= {"step_dl_png", "step_dl_svg", "step_dl_html",
                                                          "step_dl_json", "step_dl_csv"}


def test_run_ten_slider_and_run_to_end():
    at = step_setup(open_page(STEP), max_new=40, budget=8)
    at.button(key="step_btn_run10").click().run()
    session = at.session_state["step_session"]
    count = len(session.rounds)
    assert count == 10 or session.finished
    assert at.slider(key="step_round_view").value == count
    at.slider(key="step_round_view").set_value(1).run()
    spec = chart(at, "step_tree_chart")
    assert spec["layout"]["meta"]["round"] == 0
    check_tree_matches(spec, session.rounds[0])
    assert metrics(at)["Tokens so far"] == str(session.rounds[0].tau)
    at.button(key="step_btn_run_end").click().run()
    session = at.session_state["step_session"]
    assert session.finished and session.stop_reason in ("max new tokens", "end of text")
    assert metrics(at)["Tokens so far"] == str(len(session.generated))
    assert at.slider(key="step_round_view").value == len(session.rounds)
    at.button(key="step_btn_step").click().run()
    assert any("finished" in i.value for i in at.info)
    at.button(key="step_btn_reset").click().run()
    assert at.session_state["step_session"].rounds == [] and not at.exception


@pytest.mark.parametrize("selector", ["ar", "dflash", "ddtree", "oracle"])
def test_every_selector_steps(selector):
    at = step_setup(open_page(STEP), selector=selector, budget=8, max_new=8)
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not errors(at)
    record = at.session_state["step_session"].rounds[-1]
    assert record.selector == selector
    check_tree_matches(chart(at, "step_tree_chart"), record)
    if selector == "ar":
        assert record.selected == [0]


def test_changed_settings_start_a_new_run():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.button(key="step_btn_step").click().run()
    assert len(at.session_state["step_session"].rounds) == 2
    at.number_input(key="step_budget").set_value(4).run()
    assert any("next **Step** starts a new run" in c.value for c in at.caption)
    at.button(key="step_btn_step").click().run()
    session = at.session_state["step_session"]
    assert len(session.rounds) == 1 and session.config.budget == 4


@pytest.mark.parametrize("change, message", [
    ({"step_prompt": "   "}, "empty"),
    ({"step_prompt": "x" * 300}, "longer than the model's context"),
    ({"step_selector": "oracle", "step_temperature": 0.5}, "greedy"),
    ({"step_selector": "taps", "step_estimator": "learned"}, "scorer"),
])
def test_bad_input_is_a_clear_message_and_the_page_stays_usable(change, message):
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    before = len(at.session_state["step_session"].rounds)
    for key, value in change.items():
        widget = at.text_area(key=key) if key == "step_prompt" else (
            at.number_input(key=key) if key == "step_temperature" else at.selectbox(key=key))
        widget.set_value(value)
    at.button(key="step_btn_step").click().run()
    assert not at.exception
    assert message in errors(at)
    assert len(at.session_state["step_session"].rounds) == before          # the old run is untouched
    assert chart(at, "step_tree_chart")                                   # and still drawn
    step_setup(at, budget=8).selectbox(key="step_estimator").set_value("online")
    at.number_input(key="step_temperature").set_value(0.0)
    at.button(key="step_btn_step").click().run()
    assert not errors(at) and len(at.session_state["step_session"].rounds) >= 1


def test_block_size_is_bounded_by_the_drafter():
    at = open_page(STEP)
    assert at.number_input(key="step_block_size").max == 8 == at.number_input(key="step_block_size").value


def test_settings_survive_a_visit_to_another_page():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.switch_page(f"pages/{LEARN}").run()
    at.slider(key="learn_budget").set_value(5).run()
    at.switch_page(f"pages/{RACE}").run()
    at.switch_page(f"pages/{STEP}").run()
    assert at.number_input(key="step_budget").value == 8
    at.button(key="step_btn_step").click().run()
    assert len(at.session_state["step_session"].rounds) == 2              # the same run continued
    at.switch_page(f"pages/{LEARN}").run()
    assert at.slider(key="learn_budget").value == 5 and not at.exception


def test_saved_run_reloads_and_bad_files_are_refused():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_run10").click().run()
    session = at.session_state["step_session"]
    text = run_json(session.rounds, prompt="def add(a, b):\n    return", pair_name="tiny-random",
                    config=session.config, text=session.text)
    fresh = open_page(STEP)
    fresh.file_uploader(key="step_upload").set_value(("run.json", text.encode(), "application/json")).run()
    assert not fresh.exception and not errors(fresh)
    assert any("Viewing a saved run" in i.value for i in fresh.info)
    spec = chart(fresh, "step_tree_chart")
    check_tree_matches(spec, session.rounds[-1])
    assert metrics(fresh)["Speed-up vs AR"] == "—"
    bad = open_page(STEP)
    bad.file_uploader(key="step_upload").set_value(("notes.json", b'{"hello": 1}', "application/json")).run()
    assert "not a TAPS Studio run" in errors(bad)
    step_setup(bad, budget=8)
    bad.button(key="step_btn_step").click().run()
    assert len(bad.session_state["step_session"].rounds) == 1 and not bad.exception


def test_browser_sessions_are_isolated():
    first = step_setup(open_page(STEP), budget=8)
    second = open_page(STEP)
    first.button(key="step_btn_step").click().run()
    assert "step_session" not in second.session_state
    step_setup(second, budget=8).button(key="step_btn_run10").click().run()
    assert len(first.session_state["step_session"].rounds) == 1
    assert first.session_state["step_session"] is not second.session_state["step_session"]


def test_a_pair_that_fails_to_load_is_reported_and_the_old_one_kept():
    at = open_page(STEP)
    at.text_input(key="pair_source_input").set_value("/no/such/pair")
    at.button(key="pair_load_button").click().run()
    assert not at.exception
    assert "neither a folder" in errors(at) and "still using the previous pair" in errors(at)
    step_setup(at, budget=8).button(key="step_btn_step").click().run()
    assert len(at.session_state["step_session"].rounds) == 1


def test_no_loadable_pair_is_a_message_and_another_can_be_loaded(monkeypatch, tiny_pair_dir):
    monkeypatch.setenv("TAPS_PAIR", "/no/such/pair")
    home = open_page()
    assert "Could not load the model pair from /no/such/pair" in errors(home)
    assert any("Learn" in i.value for i in home.info)
    at = open_page(STEP)
    assert "Type another pair folder in the sidebar" in errors(at) and at.button(key="pair_load_button")
    at.text_input(key="pair_source_input").set_value(str(tiny_pair_dir))
    at.button(key="pair_load_button").click().run()
    assert not errors(at) and not at.exception
    step_setup(at, budget=8).button(key="step_btn_step").click().run()
    assert len(at.session_state["step_session"].rounds) == 1


# ---------------------------------------------------------------------------- race and sweep
def test_race_and_sweep():
    at = open_page(RACE)
    at.number_input(key="race_budget").set_value(8)
    at.number_input(key="race_max_new").set_value(8)
    at.button(key="race_btn").click().run()
    assert not at.exception and not errors(at)
    rows = at.session_state["race_rows"]
    assert [r["label"] for r in rows] == ["ar", "dflash", "ddtree", "taps/online", "oracle"]
    assert all(r["lossless"] and r["new_tokens"] == 8 for r in rows)
    bars = chart(at, "race_chart")["data"][0]
    assert list(bars["x"]) == [r["label"] for r in rows]
    assert list(bars["y"]) == pytest.approx([r["tokens_per_s"] for r in rows])
    assert at.dataframe[0].value.shape[0] == 5
    at.multiselect(key="race_selectors").set_value(["ddtree", "taps"])
    at.multiselect(key="sweep_budgets").set_value([2, 4])
    at.button(key="sweep_btn").click().run()
    assert not at.exception and not errors(at)
    rows = at.session_state["sweep_rows"]
    assert len(rows) == 1 + 2 * 2
    spec = chart(at, "sweep_chart")
    assert {t["name"] for t in spec["data"] if t.get("showlegend") is not False} == {"ddtree", "taps/online"}
    assert chart(at, "tradeoff_chart")["data"]
    assert set(at.dataframe[1].value["best budget"]) <= {2, 4}


def test_race_bad_input():
    at = open_page(RACE)
    at.text_area(key="race_prompt").set_value("")
    at.button(key="race_btn").click().run()
    assert not at.exception and "the prompt is empty" in errors(at)
    at.multiselect(key="sweep_budgets").set_value([])
    at.button(key="sweep_btn").click().run()
    assert "at least one budget" in errors(at)


# ---------------------------------------------------------------------------- failure cases
def test_failure_cases_from_pasted_prompts():
    at = open_page(FAIL)
    at.radio(key="fail_source").set_value("Your own").run()
    at.text_area(key="fail_text").set_value("def f(x):\n---\nfor i in range(")
    at.number_input(key="fail_budget").set_value(8)
    at.number_input(key="fail_max_new").set_value(10)
    at.slider(key="fail_waste_threshold").set_value(0.1)
    at.button(key="fail_btn").click().run()
    assert not at.exception and not errors(at)
    report = at.session_state["fail_report"]
    assert report.prompts_run == 2 and report.rounds_checked >= 2 and report.cases
    assert at.dataframe[0].value.shape[0] == len(report.cases)
    case = report.cases[-1]
    at.selectbox(key="fail_case").set_value(len(report.cases) - 1).run()
    assert any(i.value == case.explanation for i in at.info)
    check_tree_matches(chart(at, "fail_tree_chart"), case.taps_round)
    if case.others["ddtree"] is not None:
        check_tree_matches(chart(at, "fail_ddtree_chart"), case.others["ddtree"])


def test_failure_cases_from_examples_and_bad_files():
    at = open_page(FAIL)
    at.number_input(key="fail_limit").set_value(2)
    at.number_input(key="fail_max_new").set_value(6)
    at.button(key="fail_btn").click().run()
    assert not at.exception and at.session_state["fail_report"].prompts_run == 2
    at.radio(key="fail_source").set_value("Your own").run()
    at.text_area(key="fail_text").set_value("  ")
    at.button(key="fail_btn").click().run()
    assert "holds no prompts" in errors(at)
    at.file_uploader(key="fail_upload").set_value(("p.jsonl", b'{"prompt": "a"}\n{broken', "text/plain"))
    at.button(key="fail_btn").click().run()
    assert "p.jsonl, line 2: not a JSON line" in errors(at) and not at.exception


# ---------------------------------------------------------------------------- learn
def test_learn_page():
    at = open_page(LEARN)
    spec = chart(at, "learn_tree_chart")
    picked = ("picked", "picked but unreachable (waste)", "the rejected prefix")
    assert len(nodes_named(spec, *picked, axis="x")) == 8 == len(nodes_named(spec, *picked, axis="x2"))
    shown = metrics(at)
    assert float(shown["Expected tokens/round, TAPS"]) > float(shown["Expected tokens/round, DDTree"])
    at.slider(key="learn_budget").set_value(4).run()
    assert len(nodes_named(chart(at, "learn_tree_chart"), *picked, axis="x2")) == 4
    at.selectbox(key="learn_reject").set_value(2).run()
    assert int(metrics(at)["DDTree nodes made unreachable"]) >= int(metrics(at)["TAPS nodes made unreachable"])
    assert nodes_named(chart(at, "learn_tree_chart"), "the rejected prefix") == {2}
    at.selectbox(key="learn_preset").set_value("Calibrated drafter").run()
    shown = metrics(at)
    assert shown["Expected tokens/round, TAPS"] == shown["Expected tokens/round, DDTree"]
    assert at.slider(key="learn_factor").value == 1.0
    at.text_area(key="learn_marginals").set_value("for=0.5, while=abc").run()
    assert "not a probability" in errors(at) and not at.exception
    assert chart(at, "learn_tree_chart") and chart(at, "learn_curve_chart")
    at.text_area(key="learn_marginals").set_value("a=0.9 b=0.1\nc=0.8 d=0.2").run()
    assert not errors(at) and at.slider(key="learn_budget").max == 6
