"""Every page of the Streamlit app through streamlit.testing (AppTest), on the tiny random pair:
widgets set, buttons clicked, the figures' data checked against the Round records, bad input shown
as a clear message with the page still usable."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
from conftest import fixed_profile
from streamlit.testing.v1 import AppTest

from taps.studio.app_state import load_pair_from_source, run_json

ROOT = Path(__file__).resolve().parent.parent
STEP, RACE, FAIL, LEARN = ("1_Step_through.py", "2_Race_and_sweep.py", "3_Failure_cases.py", "4_Learn.py")
VERIFIED = ("root: last token", "accepted", "rejected sibling", "rejected-prefix waste")


@pytest.fixture(scope="module", autouse=True)
def tiny_pair_env(tiny_pair_dir):
    """The app on the tiny pair, with this machine's latency profile saved (a fixed one): what a
    user has after pressing *Measure latency profile* once."""
    from taps.eval.measure import forget_profiles
    from taps.profiles import profile_path

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TAPS_PAIR", str(tiny_pair_dir))
        pair = load_pair_from_source(str(tiny_pair_dir), "auto")
        fixed_profile(pair).save(profile_path(pair))
        yield
        profile_path(pair).unlink(missing_ok=True)
        forget_profiles()


@pytest.fixture(autouse=True)
def fresh_runs():
    """Every test starts with no run decoded in this process (the app shares runs by link)."""
    from taps.studio.serve import shared_runs

    shared_runs().clear()
    yield
    shared_runs().clear()


def open_page(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    if page:
        at.switch_page(f"app_pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart(at: AppTest, key: str) -> dict:
    found = [el for el in at.get("plotly_chart") if el.key == key]
    assert found, f"no chart {key}"
    return json.loads(found[0].proto.spec)


def node_ids(trace: dict) -> set[int]:
    return {int(row[0]) for row in trace.get("customdata") or []}


def nodes_named(spec: dict, *names: str) -> set[int]:
    return set().union(*(node_ids(t) for t in spec["data"] if t.get("name") in names))


def subtitle(spec: dict) -> str:
    return spec["layout"]["title"].get("subtitle", {}).get("text", "")


def errors(at: AppTest) -> str:
    return " | ".join(e.value for e in at.error)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def controller(at: AppTest):
    return at.session_state["step_controller"]


def step_setup(at: AppTest, prompt: str = "def add(a, b):\n    return", selector: str = "taps",
               budget: int = 16, max_new: int = 12) -> AppTest:
    at.text_area(key="step_prompt").set_value(prompt)
    at.selectbox(key="step_selector").set_value(selector)
    at.number_input(key="step_budget").set_value(budget)
    at.number_input(key="step_max_new").set_value(max_new)
    return at


def check_tree_matches(spec: dict, record) -> None:
    verified = nodes_named(spec, *VERIFIED)
    assert verified == set(record.selected)
    assert all(record.pool_parents[v] in verified for v in verified if v), "selected nodes must be prefix-closed"
    assert nodes_named(spec, "accepted") == set(record.accepted)
    assert nodes_named(spec, "rejected-prefix waste") == {i for i in record.selected if record.status[i] == "waste"}
    path = next(t for t in spec["data"] if t["name"] == "accepted path")
    assert len(path["x"]) == 3 * len(record.accepted)
    bonus = next(t for t in spec["data"] if t["name"] == "bonus: target's token")
    assert len(bonus["x"]) == 1
    assert spec["layout"]["title"]["text"].startswith(f"<b>Round {record.number}</b>")
    assert f"verified {record.verified_nodes}, accepted {len(record.accepted)} + bonus" in subtitle(spec)
    assert f"waste {record.waste_nodes}" in subtitle(spec)


# ---------------------------------------------------------------------------- the frame and home
def test_home_names_the_pair_and_the_pages():
    at = open_page()
    assert metrics(at)["Pair"] == "tiny-random"
    assert {link.proto.label for link in at.get("page_link")} >= {"Step through", "Race and sweep", "Failure cases",
                                                                   "Learn"}
    assert chart(at, "home_toy_chart")["data"]
    sidebar = [el.label for el in at.sidebar if hasattr(el, "label")]
    assert "Presenter mode" in sidebar and "Re-measure latency profile" in sidebar
    assert any("measured" in c.value and "1024 nodes" in c.value for c in at.sidebar.caption)
    # reference profiles: only those timed with this pair are offered; the others are named, with their pair
    from taps.cost_model import reference_profiles

    offered = at.sidebar.radio(key="model_profile").options
    shapes = "measured target shape (what-if hardware)"      # offered for any pair when assets/profiles holds one
    assert offered[0] == "this machine's profile" and offered[-1].startswith("roofline estimate") and all(
        name.endswith("(reference)") and reference_profiles("tiny-random").get(name.rsplit(" ", 1)[0])
        for name in offered[1:-1] if name != shapes)
    for name, profile in reference_profiles().items():
        if profile.pair != "tiny-random" and profile.kind == "measured":
            assert any(f"{name} (measured for {profile.pair}, not tiny-random)" in c.value for c in at.sidebar.caption)


# ---------------------------------------------------------------------------- step through
def test_step_draws_the_round_and_counts_match():
    at = step_setup(open_page(STEP))
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not errors(at)
    session = controller(at).session
    record = session.rounds[-1]
    assert session.config.budget == 16 and len(session.rounds) == 1
    assert session.profile is not None and session.profile.source == "fixed"      # read from disk, never measured
    check_tree_matches(chart(at, "step_tree_chart"), record)
    shown = metrics(at)
    assert shown["Tokens"] == str(record.tau) and shown["Verified this round"] == str(record.verified_nodes)
    assert shown["Modelled speed-up (this machine)"].endswith("×")
    assert shown["Measured speed-up"] == "—"                # a measured figure from round 5 (taps.studio.speed)
    assert any("**Modelled**" in c.value and "fixed latency profile of tiny-random" in c.value for c in at.caption)

    at.button(key="step_btn_step").click().run()
    assert len(controller(at).visible) == 2
    second = controller(at).visible[-1]
    check_tree_matches(chart(at, "step_tree_chart"), second)
    assert metrics(at)["Tokens"] == str(record.tau + second.tau)
    at.radio(key="step_color_by").set_value("target").run()
    spec = chart(at, "step_tree_chart")
    assert "target" in spec["layout"]["coloraxis"]["colorbar"]["title"]["text"]
    labels = next(t for t in spec["data"] if t["name"] == "token labels")
    assert len(labels["text"]) == len(second.selected) + 1 and all(labels["text"])   # every verified node + bonus


def round_slider(at):
    """The Step page's round slider (keyed by the controller's view version, so found by label)."""
    return next(s for s in at.slider if s.label == "Round")


def test_run_ten_slider_and_run_to_end():
    at = step_setup(open_page(STEP), max_new=40, budget=8)
    at.button(key="step_btn_run10").click().run()
    ctrl = controller(at)
    count = len(ctrl.visible)
    assert count == 10 or ctrl.finished
    assert round_slider(at).value == count
    round_slider(at).set_value(1).run()
    spec = chart(at, "step_tree_chart")
    assert spec["layout"]["meta"]["number"] == 1
    check_tree_matches(spec, ctrl.visible[0])
    assert metrics(at)["Tokens"] == str(ctrl.visible[0].tau)
    at.button(key="step_btn_run_end").click().run()
    ctrl = controller(at)
    assert ctrl.finished and ctrl.session.stop_reason in ("max new tokens", "end of text")
    assert metrics(at)["Tokens"] == str(len(ctrl.session.generated))
    assert round_slider(at).value == len(ctrl.visible)
    at.button(key="step_btn_step").click().run()
    assert any("finished" in i.value for i in at.info)
    at.button(key="step_btn_reset").click().run()
    assert controller(at).visible == [] and not at.exception            # the run from round 0 (still decoded: shared)


@pytest.mark.parametrize("selector", ["ar", "dflash", "ddtree", "oracle"])
def test_every_selector_steps(selector):
    at = step_setup(open_page(STEP), selector=selector, budget=8, max_new=8)
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not errors(at)
    record = controller(at).visible[-1]
    assert record.selector == selector
    check_tree_matches(chart(at, "step_tree_chart"), record)
    if selector == "ar":
        assert record.selected == [0]


def test_changed_settings_start_a_new_run():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.button(key="step_btn_step").click().run()
    assert len(controller(at).visible) == 2
    at.number_input(key="step_budget").set_value(4).run()
    assert any("next **Step** starts a new run" in c.value for c in at.caption)
    at.button(key="step_btn_step").click().run()
    session = controller(at).session
    assert len(session.rounds) == 1 and session.config.budget == 4
    assert any("started a new run" in i.value for i in at.info)


@pytest.mark.parametrize("key, value, message", [
    ("step_budget", 5000, "budget must be from 1 to 1024, got 5000"),
    ("step_budget", 0, "budget must be from 1 to 1024, got 0"),
    ("step_temperature", 100.0, "temperature must be from 0.0 to 5.0, got 100.0"),
    ("step_max_new", 99999, "max_new_tokens must be from 1 to 4096"),
    ("step_block_size", 40, "block_size must be from 2 to the drafter's 8"),
])
def test_out_of_range_numbers_get_the_engine_message(key, value, message):
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.number_input(key=key).set_value(value).run()
    assert at.number_input(key=key).value == value                       # kept as typed, never clamped
    assert message in errors(at)
    at.button(key="step_btn_step").click().run()
    assert message in errors(at) and len(controller(at).visible) == 1      # nothing ran with the old value


@pytest.mark.parametrize("change, message", [
    ({"step_prompt": "   "}, "empty"),
    ({"step_prompt": "x" * 300}, "longer than the model's context"),
    ({"step_selector": "oracle", "step_temperature": 0.5}, "greedy"),
    ({"step_selector": "taps", "step_estimator": "learned"}, "scorer"),
])
def test_bad_input_is_a_clear_message_and_the_page_stays_usable(change, message):
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    before = len(controller(at).visible)
    for key, value in change.items():
        widget = at.text_area(key=key) if key == "step_prompt" else (
            at.number_input(key=key) if key == "step_temperature" else at.selectbox(key=key))
        widget.set_value(value)
    at.button(key="step_btn_step").click().run()
    assert not at.exception
    assert message in errors(at)
    assert len(controller(at).visible) == before                           # the old run is untouched
    assert chart(at, "step_tree_chart")                                   # and still drawn
    step_setup(at, budget=8).selectbox(key="step_estimator").set_value("online")
    at.number_input(key="step_temperature").set_value(0.0)
    at.button(key="step_btn_step").click().run()
    assert not errors(at) and len(controller(at).visible) >= 1


def test_no_saved_profile_is_a_message_not_a_measurement(tiny_pair_dir):
    from taps.profiles import profile_path

    pair = load_pair_from_source(str(tiny_pair_dir), "auto")
    saved = profile_path(pair).read_text()
    profile_path(pair).unlink()
    try:
        at = step_setup(open_page(STEP), budget=8)
        assert any("sizes every tree from this machine's latency profile" in w.value for w in at.warning)
        at.button(key="step_btn_step").click().run()
        assert "Measure latency profile" in errors(at) and not controller(at).visible
        at.selectbox(key="step_taps_mode").set_value("reach").run()
        at.button(key="step_btn_step").click().run()
        assert not errors(at) and len(controller(at).visible) == 1          # reach mode needs no profile
    finally:
        profile_path(pair).write_text(saved)


@contextmanager
def no_saved_profile(pair_dir):
    """The tiny pair with this machine's profile taken away (as before anyone pressed *Measure*) and
    put back afterwards; yields the pair."""
    from taps.eval.measure import forget_profiles
    from taps.profiles import profile_path

    pair = load_pair_from_source(str(pair_dir), "auto")
    saved = profile_path(pair).read_text()
    profile_path(pair).unlink()
    forget_profiles()
    try:
        yield pair
    finally:
        profile_path(pair).write_text(saved)
        forget_profiles()


def measured(pair):
    """The sidebar's background measurement of `pair`, once it has ended."""
    import time

    from taps.studio import speed

    job = speed.measure_job(pair)
    while not job.done:
        time.sleep(0.2)
    return job


def test_the_sidebar_measures_a_profile_once_and_sessions_read_it(tiny_pair_dir):
    with no_saved_profile(tiny_pair_dir) as pair:
        at = open_page(STEP)
        assert any("No latency profile for tiny-random" in i.value for i in at.sidebar.info)
        at.sidebar.button(key="profile_measure_button").click().run()      # measures in a background thread
        measured(pair)
        at.run()
        assert not at.exception and any("Measured and saved" in s.value for s in at.sidebar.success)
        assert any("trees up to 254 nodes" in c.value for c in at.sidebar.caption)
        step_setup(at, budget=1024).button(key="step_btn_step").click().run()     # covered as far as it can go
        session = controller(at).session
        assert not errors(at) and session.profile.source == "measured"
        assert session.profile.key["pair"] == "tiny-random"


def test_block_size_starts_at_the_drafters_own():
    at = open_page(STEP)
    assert at.number_input(key="step_block_size").value == 8


def test_settings_survive_a_visit_to_another_page():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.switch_page(f"app_pages/{LEARN}").run()
    at.slider(key="learn_budget").set_value(5).run()
    at.switch_page(f"app_pages/{RACE}").run()
    at.number_input(key="race_repeats").set_value(4).run()
    at.switch_page(f"app_pages/{STEP}").run()
    assert at.number_input(key="step_budget").value == 8
    at.button(key="step_btn_step").click().run()
    assert len(controller(at).visible) == 2                                # the same run continued
    at.switch_page(f"app_pages/{LEARN}").run()
    assert at.slider(key="learn_budget").value == 5 and not at.exception
    at.switch_page(f"app_pages/{RACE}").run()
    assert at.number_input(key="race_repeats").value == 4


def test_presenter_mode_moves_the_settings_into_a_popover():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_step").click().run()
    at.toggle(key="presenter").set_value(True).run()
    assert not at.exception and at.toggle(key="presenter").value
    assert at.get("popover") and at.number_input(key="step_budget").value == 8     # settings in the popover
    at.button(key="step_btn_step").click().run()
    assert len(controller(at).visible) == 2
    check_tree_matches(chart(at, "step_tree_chart"), controller(at).visible[-1])
    at.toggle(key="presenter").set_value(False).run()
    assert not at.toggle(key="presenter").value


def test_saved_run_reloads_and_bad_files_are_refused():
    at = step_setup(open_page(STEP), budget=8)
    at.button(key="step_btn_run10").click().run()
    ctrl = controller(at)
    text = run_json(ctrl.visible, prompt="def add(a, b):\n    return", pair_name="tiny-random",
                    config=ctrl.session.config, text=ctrl.session.text)
    assert [r["number"] for r in json.loads(text)["rounds"]] == list(range(1, len(ctrl.visible) + 1))
    fresh = open_page(STEP)
    fresh.file_uploader(key="step_upload").set_value(("run.json", text.encode(), "application/json")).run()
    assert not fresh.exception and not errors(fresh)
    assert any("Viewing a saved run" in i.value for i in fresh.info)
    check_tree_matches(chart(fresh, "step_tree_chart"), ctrl.visible[-1])
    assert metrics(fresh)["Measured speed-up"] == "—"
    bad = open_page(STEP)
    bad.file_uploader(key="step_upload").set_value(("notes.json", b'{"hello": 1}', "application/json")).run()
    assert "not a TAPS Studio run" in errors(bad)
    step_setup(bad, budget=8)
    bad.button(key="step_btn_step").click().run()
    assert len(controller(bad).visible) == 1 and not bad.exception


def test_browser_sessions_are_isolated():
    """Two browser sessions on one link share its run (decoded once) but not their view of it; on
    another setting each has a run of its own."""
    first = step_setup(open_page(STEP), budget=8)
    second = open_page(STEP)
    first.button(key="step_btn_step").click().run()
    assert not controller(second).visible
    step_setup(second, budget=8).button(key="step_btn_run10").click().run()
    assert len(controller(first).visible) == 1 and len(controller(second).visible) == 10
    assert controller(first).run is controller(second).run and controller(first).run.decoded == 10
    step_setup(second, budget=4).button(key="step_btn_step").click().run()
    assert controller(first).run is not controller(second).run and len(controller(first).visible) == 1


def test_a_pair_that_fails_to_load_is_reported_and_the_old_one_kept():
    at = open_page(STEP)
    at.text_input(key="pair_source_input").set_value("/no/such/pair")
    at.button(key="pair_load_button").click().run()
    assert not at.exception
    assert "neither a folder" in errors(at) and "still using the previous pair" in errors(at)
    step_setup(at, budget=8).button(key="step_btn_step").click().run()
    assert len(controller(at).visible) == 1


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
    assert len(controller(at).visible) == 1


# ---------------------------------------------------------------------------- race and sweep
def test_race_and_sweep_repeat_and_show_both_speeds():
    at = open_page(RACE)
    at.text_area(key="race_prompt").set_value("def f(x):")       # no end-of-text from the tiny pair within 8 tokens
    at.number_input(key="race_budget").set_value(8)
    at.number_input(key="race_max_new").set_value(8)
    at.button(key="race_btn").click().run()
    assert not at.exception and not errors(at)
    runs = at.session_state["race_result"]["runs"]
    assert len(runs) == 3                                                 # three repeats by default
    assert [r["label"] for r in runs[0]] == ["ar", "dflash", "ddtree", "taps/online", "oracle", "dflash2"]
    assert all(r["lossless"] and r["new_tokens"] == 8 for rows in runs for r in rows)
    spec = chart(at, "race_chart")
    assert list(spec["data"][0]["x"]) == [r["label"] for r in runs[0]]
    assert "error_y" in spec["data"][1] and "median of 3 repeats" in spec["layout"]["annotations"][1]["text"]
    table = at.dataframe[0].value
    assert table.shape[0] == 6 and table["same rounds every repeat"].all()
    assert table["measured speed-up (range)"].str.contains("–").all()
    at.multiselect(key="race_selectors").set_value(["ddtree", "taps"])
    at.multiselect(key="sweep_budgets").set_value([2, 4])
    at.button(key="sweep_btn").click().run()
    assert not at.exception and not errors(at)
    runs = at.session_state["sweep_result"]["runs"]
    assert len(runs) == 3 and len(runs[0]) == 1 + 2 * 2
    spec = chart(at, "sweep_chart")
    assert {t["name"] for t in spec["data"] if t.get("showlegend") is not False} == {"ddtree", "taps/online"}
    assert chart(at, "tradeoff_chart")["data"]
    best = at.dataframe[1].value
    assert set(best["selector"]) == {"ddtree", "taps/online"}
    assert all(str(v) in ("2", "4") or v == "within noise" for v in best["best budget (measured)"])


def test_a_race_at_a_batch_on_a_profile_without_its_cost_offers_one_that_has_it():
    """This machine's profile (measured a request at a time) has no verify cost at a batch: at
    batch 4 the page says so and offers a profile that has one (for the tiny pair, which ships no
    reference, the H200 roofline estimate); on it the race decodes its five lanes."""
    at = open_page(RACE)
    at.text_area(key="race_prompt").set_value("def f(x):").run()
    assert not any("verify cost at a batch" in w.value for w in at.warning)     # one request: nothing to say
    at.selectbox(key="race_batch").set_value(4).run()
    assert any("verify cost at a batch, and the fixed latency profile" in w.value for w in at.warning)
    at.button(key="lanes_btn").click().run()
    assert "Cannot race: a race at a batch sizes batch-aware TAPS" in errors(at)
    at.button(key="race_batch_profile").click().run()
    assert not any("verify cost at a batch" in w.value for w in at.warning)
    at.button(key="lanes_btn").click().run()
    decoded = at.session_state["race_lanes"]["decoded"]
    assert not errors(at) and decoded.batch == 4 and len(decoded.lanes) == 5


def test_race_bad_input():
    at = open_page(RACE)
    at.text_area(key="race_prompt").set_value("")
    at.button(key="race_btn").click().run()
    assert not at.exception and "the prompt is empty" in errors(at)
    at.text_area(key="race_prompt").set_value("def f(")
    at.number_input(key="race_repeats").set_value(1)
    at.button(key="race_btn").click().run()
    assert "repeats must be a whole number from 3 to 20" in errors(at)
    at.number_input(key="race_repeats").set_value(3)
    at.multiselect(key="sweep_budgets").set_value([])
    at.button(key="sweep_btn").click().run()
    assert "at least one budget" in errors(at)


# ---------------------------------------------------------------------------- failure cases
def test_failure_cases_filter_by_kind_and_open_in_step_through():
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
    assert at.session_state["fail_kind"] == "ddtree"                      # TAPS below DDTree first
    at.segmented_control(key="fail_kind").set_value("all").run()
    assert at.dataframe[0].value.shape[0] == len(report.cases)
    assert list(at.dataframe[0].value["round"]) == [c.taps_round.number for c in report.cases]
    case_key = next(s.key for s in at.selectbox if s.key and s.key.startswith("fail_case_"))
    case = report.cases[-1]
    at.selectbox(key=case_key).set_value(len(report.cases) - 1).run()
    assert any(i.value == case.explanation for i in at.info)
    check_tree_matches(chart(at, "fail_tree_chart"), case.taps_round)
    if case.others["ddtree"] is not None:
        spec = chart(at, "fail_ddtree_chart")
        check_tree_matches(spec, case.others["ddtree"])
        assert spec["layout"]["title"]["text"].startswith(f"<b>Round {case.taps_round.number}</b>")
    at.button(key="fail_open_step").click().run()
    assert not at.exception
    ctrl = controller(at)
    assert ctrl.view == case.taps_round.number
    assert ctrl.visible[ctrl.view - 1].committed_tokens == case.taps_round.committed_tokens
    assert ctrl.visible[ctrl.view - 1].selected == case.taps_round.selected


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
    assert "fail_report" not in at.session_state                          # no stale report under the error
    at.file_uploader(key="fail_upload").set_value(("p.jsonl", b'{"prompt": "a"}\n{broken', "text/plain"))
    at.button(key="fail_btn").click().run()
    assert "p.jsonl, line 2: not a JSON line" in errors(at) and not at.exception


# ---------------------------------------------------------------------------- learn
def test_learn_page():
    at = open_page(LEARN)
    spec = chart(at, "learn_tree_chart")
    picked = ("picked", "picked but unreachable (waste)", "the rejected prefix")
    left = set().union(*(node_ids(t) for t in spec["data"] if t.get("name") in picked and t.get("xaxis", "x") == "x"))
    assert len(left) == 8
    shown = metrics(at)
    assert float(shown["Expected tokens/round, TAPS"]) > float(shown["Expected tokens/round, DDTree"])
    at.slider(key="learn_budget").set_value(4).run()
    at.selectbox(key="learn_reject").set_value(2).run()
    assert int(metrics(at)["DDTree nodes made unreachable"]) >= int(metrics(at)["TAPS nodes made unreachable"])
    assert nodes_named(chart(at, "learn_tree_chart"), "the rejected prefix") == {2}
    at.selectbox(key="learn_preset").set_value("Calibrated drafter").run()
    shown = metrics(at)
    assert shown["Expected tokens/round, TAPS"] == shown["Expected tokens/round, DDTree"]
    assert at.slider(key="learn_factor").value == 1.0
    for text, message in (("for=0.5, while=abc", "not a probability"),
                          ("a=0.5 b=0.5 c=0.5 d=0.5", "add up to 2.00"),
                          ("a=0.5 a=0.3", "the token 'a' appears twice")):
        at.text_area(key="learn_marginals").set_value(text).run()
        assert message in errors(at) and "cannot be a drafter's" in errors(at) and not at.exception
        assert chart(at, "learn_tree_chart") and chart(at, "learn_curve_chart")
    at.text_area(key="learn_marginals").set_value("a=0.9 b=0.1\nc=0.8 d=0.2").run()
    assert not errors(at) and at.slider(key="learn_budget").max == 6


def test_an_action_button_acts_once_per_click_even_when_streamlit_replays_it(monkeypatch):
    """Streamlit restarts a run that a new rerun request interrupts with the button still pressed
    but does not call its callback again: Step must not decode a second round. A run stopped
    after the callback but before the button (a rerun request was pending) leaves the next run
    without the press: Step must not lose the click either."""
    import types

    from app_pages import inputs as app_inputs

    fake = types.SimpleNamespace(session_state={})
    monkeypatch.setattr(app_inputs, "st", fake)

    class Row:
        def __init__(self, pressed: bool, callback_runs: bool):
            self.pressed, self.callback_runs = pressed, callback_runs

        def button(self, label, key, on_click=None, **kwargs):
            if self.callback_runs:
                on_click()
            return self.pressed

    act = lambda row: app_inputs.action_button(row, "Step", key="k")  # noqa: E731
    assert not act(Row(False, False))                  # a run without a click
    assert act(Row(True, True))                        # a click: acts
    assert not act(Row(True, False))                   # the same click replayed after an interruption
    assert not act(Row(False, False))
    assert act(Row(True, True)) and act(Row(True, True))  # two clicks: two actions
    assert act(Row(False, True))                       # a click whose press the run did not see: still acts
    assert not act(Row(False, False)) and not act(Row(True, False))


def test_an_action_buttons_callback_makes_no_streamlit_call():
    """Streamlit stops a callback at its first session-state access when another rerun request is
    pending (the viewport widget reports a resize just as Step is clicked): the click's callback
    must count it without one, or the click is lost."""
    from app_pages import inputs as app_inputs

    class Guarded(dict):
        def __getitem__(self, key):
            raise AssertionError("a Streamlit call in the callback")

        __setitem__ = __contains__ = get = setdefault = __getitem__

    clicks = app_inputs.Clicks()
    import unittest.mock

    with unittest.mock.patch.object(app_inputs, "st", unittest.mock.Mock(session_state=Guarded())) as fake:
        clicks.click()
        clicks.click()
        assert not fake.mock_calls
    assert clicks.take() and not clicks.take()


def _path_to(node, key: str, path: tuple = ()) -> tuple | None:
    """The child indices from `node` down to the element with widget key `key`."""
    for index, child in getattr(node, "children", {}).items():
        if getattr(child, "key", None) == key:
            return path + (index,)
        found = _path_to(child, key, path + (index,))
        if found:
            return found
    return None


def test_the_run_panel_stays_in_its_place_when_the_window_size_arrives():
    """Step through's run panel is a fragment, and a fragment that moves in the page is a new one: a
    Step clicked in it just as the browser's size report changed the layout (the settings going
    under the run on a 1280x720 window) was dropped, "the fragment ... does not exist anymore"
    (six pages pressing Step together lost a click in about one try of three). Whatever the
    window, the Step button keeps its place."""
    at = open_page(STEP)
    before = _path_to(at.main, "step_btn_step")
    assert before is not None
    for size in ({"width": 1280, "height": 720, "main": 900}, {"width": 1600, "height": 1000, "main": 1200}):
        at.session_state["viewport_size"] = size
        at.run()
        assert not at.exception
        assert _path_to(at.main, "step_btn_step") == before, size


def test_the_race_replay_buttons_wait_for_a_race():
    """Play, Step, Restart and End have nothing to replay before Race, and a click on one while the
    lanes decode would rerun the page and drop the race: they are disabled until lanes exist."""
    at = open_page(RACE)
    at.text_area(key="race_prompt").set_value("def f(x):")
    at.number_input(key="race_budget").set_value(8)
    at.number_input(key="race_max_new").set_value(8)
    at.run()
    replay = ("race_play", "race_step", "race_restart", "race_end")
    assert all(at.button(key=key).disabled for key in replay)
    at.button(key="lanes_btn").click().run()
    assert not at.exception and not errors(at) and at.session_state["race_lanes"]["decoded"].lanes
    at.button(key="race_end").click().run()
    assert not at.exception
    assert all(not at.button(key=key).disabled for key in ("race_step", "race_restart", "race_end"))


def test_no_press_step_hint_beside_cannot_run():
    """A fresh page with settings that cannot run says why, and not "Press Step" beside it (issue 51
    point 6); with good settings the hint is there."""
    at = open_page(STEP)
    assert any("Press **Step**" in i.value for i in at.info)
    at.number_input(key="step_budget").set_value(0).run()
    assert "budget must be from 1 to 1024" in errors(at)
    assert not any("Press **Step**" in i.value for i in at.info)
