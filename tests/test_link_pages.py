"""Links on the pages (Streamlit's AppTest, the tiny pair): every page reads and writes its link
through the link module (`taps.studio.link`) with one set of conventions; a round past the run's
end says so; a prompt longer than a link carries stays out of the address bar, and the Step page
says where to get a file that holds it; a link's latency profile is said on the page, with a
button back to the default."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
import test_app  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from taps.studio.link import MAX_PROMPT_CHARS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
H200 = "roofline-h200-qwen3-8b"

tiny_pair_env = test_app.tiny_pair_env     # the app on the tiny pair with a fixed profile saved (autouse)


def open_page(page: str, secrets: dict | None = None, **params) -> AppTest:
    """`page` opened on a link of `params`, on a server with `secrets` (a lecturer password: a class)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in (secrets or {}).items():
        at.secrets[key] = value
    at.run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(f"app_pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements) -> str:
    return " | ".join(e.value for e in elements)


def test_a_round_past_the_runs_end_says_so_and_shows_its_last_round():
    at = open_page("1_Step_through.py", prompt="def f(x):", selector="ddtree", budget="4", max_new_tokens="6",
                   round="999")
    ctrl = at.session_state["step_controller"]
    last = len(ctrl.session.rounds)
    assert ctrl.finished and ctrl.view == last < 999
    assert f"The link asks for round 999, but this run ends after round {last}: showing round {last}" in \
        texts(at.warning)
    assert at.query_params["round"] == str(last)                      # the address now names the round on view


def test_a_prompt_longer_than_a_link_carries_stays_out_of_the_address_bar():
    at = open_page("1_Step_through.py")
    long = "x = 1\n" * (20_000 // 6)
    at.text_area(key="step_prompt").set_value(long).run()
    assert "prompt" not in at.query_params and "example" not in at.query_params
    assert sum(len(v) for v in at.query_params.values()) < 400        # settings and view only, not a 33 kB URL
    notice = texts(at.info)
    assert f"the prompt is {len(long)} characters, longer than a link carries ({MAX_PROMPT_CHARS})" in notice
    assert "Run as JSON" in notice
    at.text_area(key="step_prompt").set_value("def f(x):").run()
    assert at.query_params["prompt"] == "def f(x):" and "longer than a link carries" not in texts(at.info)


def test_a_links_profile_is_said_on_the_page_with_a_way_back():
    at = open_page("1_Step_through.py", example="fib", selector="ddtree", budget="4", profile=H200)
    assert at.session_state["_profile_override"] == H200
    banner = texts(at.info)
    assert "A link set this session's latency profile: trees are sized from **roofline estimate: NVIDIA H200" in \
        banner and "not from this machine's profile" in banner
    assert at.query_params["profile"] == H200
    at.switch_page("app_pages/2_Race_and_sweep.py").run()             # every page whose runs a profile sizes
    assert "A link set this session's latency profile" in texts(at.info)
    at.button(key="profile_back").click().run()
    assert at.session_state["_profile_override"] is None and "A link set" not in texts(at.info)
    assert at.query_params["profile"] == "machine" and not at.exception


def test_every_page_reads_its_link_by_one_set_of_conventions():
    """The last of repeated values; the engine's checks and words; one message style on every page."""
    step = open_page("1_Step_through.py", budget=["8", "5000"], example="nope")
    race = open_page("2_Race_and_sweep.py", budget=["8", "5000"], example="nope", clock="sundial")
    learn = open_page("4_Learn.py", budget=["8", "500"], preset="Nope")
    for at, page in ((step, "Step"), (race, "Race"), (learn, "Learn")):
        shown = texts(at.warning)
        assert "Link parameter budget:" in shown and ("got 5000" in shown or "got '500'" in shown), (page, shown)
        assert ("Link parameter example: unknown example 'nope'" in shown) == (page != "Learn"), (page, shown)
    assert "Link parameter clock: unknown clock 'sundial': choose one of modelled, measured" in texts(race.warning)
    assert race.number_input(key="race_budget").value == 32 and step.number_input(key="step_budget").value == 32
    learned = open_page("4_Learn.py", budget=["60", "5"])
    assert learned.slider(key="learn_budget").value == 5 and not learned.warning
