"""The Learn page (Streamlit's AppTest, no browser): its state in the URL (preset, factor, budget,
reject), a bad value's message and default, presenter mode's tabs, and the challenge cards' links."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")

from streamlit.testing.v1 import AppTest  # noqa: E402

from taps.studio.challenges import CARDS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def tiny_app(monkeypatch, tiny_pair_dir):
    monkeypatch.setenv("TAPS_PAIR", str(tiny_pair_dir))


def open_learn(**params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page("app_pages/4_Learn.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_a_learn_link_opens_its_settings_and_the_url_follows_the_page():
    at = open_learn(preset="Sure start, shaky finish", factor="0.45", budget="12", reject="a dog")
    assert at.selectbox(key="learn_preset").value == "Sure start, shaky finish"
    assert at.slider(key="learn_factor").value == 0.45 and at.slider(key="learn_budget").value == 12
    assert at.selectbox(key="learn_reject").format_func(at.selectbox(key="learn_reject").value) == "depth 2: a dog"
    assert not at.warning and "DDTree nodes made unreachable" in metrics(at)
    at.slider(key="learn_budget").set_value(5).run()
    assert dict(at.query_params) == {"preset": "Sure start, shaky finish", "factor": "0.45", "budget": "5",
                                     "reject": "a dog"}
    at.selectbox(key="learn_reject").set_value(0).run()
    assert "reject" not in at.query_params and at.query_params["budget"] == "5"


def test_bad_link_values_get_a_message_and_the_defaults():
    at = open_learn(preset="Nope", factor="2", budget="x", reject="zebra")
    shown = " | ".join(w.value for w in at.warning)
    for part in ("unknown preset 'Nope'", "between 0 and 1, got 2", "from 1 to 60", "'zebra' is not a node"):
        assert part in shown
    assert at.selectbox(key="learn_preset").value == "Two good openings"
    assert (at.slider(key="learn_factor").value, at.slider(key="learn_budget").value) == (0.2, 8)
    assert at.selectbox(key="learn_reject").value == 0 and not at.exception


def test_presenter_mode_and_the_challenge_cards():
    at = open_learn()
    learn_cards = [c for c in CARDS if c.page == "Learn"]
    assert [t.label for t in at.tabs] == [] and len(at.get("page_link")) >= len(CARDS) - len(learn_cards)
    at.button(key=f"learn_card_{learn_cards[-1].key}").click().run()       # a card for this page: applied here
    assert at.query_params == learn_cards[-1].params and not at.exception
    assert at.selectbox(key="learn_reject").format_func(at.selectbox(key="learn_reject").value) == "depth 1: while"
    at.session_state["presenter"] = True
    at.run()
    assert [t.label for t in at.tabs] == ["Toy tree", "Expected tokens", "Rankings", "Challenges"]
    assert not at.metric and not at.exception                 # the numbers are one line beside the knobs
