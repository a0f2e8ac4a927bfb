"""The Failure cases page (AppTest, tiny pair): its summary names the prompts' source in plain words
and the profile trees were sized from, the table leaves the long "why" to the chosen case's note,
and presenter mode folds the settings away and puts the table in a tab."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")

from streamlit.testing.v1 import AppTest  # noqa: E402

from taps.studio.failures import checked_summary, source_phrase  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# the app on the tiny pair with this machine's profile saved (a fixed one), as tests/test_app.py runs it
from test_app import tiny_pair_env  # noqa: E402,F401


def search(presenter: bool) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("app_pages/3_Failure_cases.py").run()
    at.radio(key="fail_source").set_value("Your own").run()
    at.text_area(key="fail_text").set_value("def f(x):\n---\nfor i in range(")
    at.number_input(key="fail_budget").set_value(8)
    at.number_input(key="fail_max_new").set_value(10)
    at.slider(key="fail_waste_threshold").set_value(0.1)
    if presenter:
        at.session_state["presenter"] = True
    at.button(key="fail_btn").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (at.selectbox if presenter else at.segmented_control)(key="fail_kind").set_value("all").run()
    return at


def test_source_phrase():
    assert source_phrase("Your own") == "your own prompts" and source_phrase("HumanEval") == "HumanEval"
    assert checked_summary(12, 2, "Your own") == "Checked **12** TAPS rounds over **2** prompts from your own prompts"
    assert checked_summary(1, 1, "Shipped examples") == ("Checked **1** TAPS round over **1** prompt from the "
                                                         "shipped examples")


def test_the_summary_reads_and_the_why_is_shown_whole():
    at = search(presenter=False)
    summary = next(m.value for m in at.markdown if m.value.startswith("Checked"))
    assert "over **2** prompts from your own prompts (TAPS/" in summary and "the your own" not in summary
    assert "trees sized from" in summary                       # TAPS's cost mode: the profile is named
    assert "why" not in at.dataframe[0].value.columns and "round" in at.dataframe[0].value.columns
    case = at.session_state["fail_report"].cases[0]
    assert any(i.value == case.explanation for i in at.info)
    assert not at.tabs[-1].label == "All flagged"
    # the reliability diagram of every verified node, TAPS's and DDTree's, with the predicted and
    # accepted tau per round, as the report counted them
    report = at.session_state["fail_report"]
    expander = next(e for e in at.expander if e.label.startswith("Reliability"))
    text = " ".join(m.value for m in expander.markdown)
    for label, entry in report.reliability.items():
        assert entry["rounds"] > 0 and entry["counts"][:, 0].sum() > 0
        expected = entry["expected"] / entry["rounds"]
        assert f"{label} predicted {expected:.2f} tokens a round" in text
    assert set(report.reliability) == {"taps/online", "ddtree"}
    assert report.reliability["taps/online"]["rounds"] == report.rounds_checked


def test_presenter_mode_on_the_failure_page():
    at = search(presenter=True)
    assert not any(t.value == "Failure cases" for t in at.title)
    assert any(m.value.startswith("Checked **") for m in at.markdown)         # in the settings popover
    assert at.tabs[-1].label == "All flagged" and at.dataframe[0].value.shape[0] == len(
        at.session_state["fail_report"].cases)
    assert at.get("plotly_chart")
