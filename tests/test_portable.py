"""The portable paths (`taps.machine`): where oneDNN's packed linear or the int8 drafter is missing
(a PyTorch build without oneDNN's linear operators, an ARM build without a quantized engine), the
shipped pair still loads, decodes losslessly, and the app's first Step works, each fallback named
once in the log and in the sidebar's *About this machine*. `TAPS_ONEDNN=0` and `TAPS_INT8=0` force
them here; the detection itself is checked against a build that lacks each."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from taps import DecodeConfig, DecodeSession, load_pair, machine
from taps.eval.prompts import example_prompts
from taps.linear import kernel_name
from taps.pair import PairError

ROOT = Path(__file__).resolve().parent.parent
FORCED = {"onednn": "TAPS_ONEDNN", "int8": "TAPS_INT8"}
SELECTORS = ("dflash", "dflash2", "ddtree", "taps")


@pytest.fixture(params=sorted(FORCED))
def forced(request, monkeypatch):
    monkeypatch.setenv(FORCED[request.param], "0")
    return request.param


def test_the_detection_follows_the_build(monkeypatch):
    assert machine.onednn_linear() == (True, "") and machine.int8_drafting() == (True, "")   # this build has both
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert machine.onednn_linear() == (False, "this PyTorch build has no oneDNN")
    monkeypatch.setattr(machine, "_engines", lambda: ["none"])            # as on an ARM build without one
    assert machine.int8_drafting() == (False, "this PyTorch build has no quantized engine")
    assert [f.key for f in machine.fallbacks()] == ["onednn", "int8"]


def test_each_fallback_loads_the_shipped_pair_and_decodes_losslessly(forced):
    pair = load_pair(None, device="cpu")
    assert [f.key for f in machine.fallbacks()] == [forced]
    if forced == "onednn":
        assert kernel_name(pair.target) == "default" and pair.drafter_precision == "int8"
    else:
        assert kernel_name(pair.target) == "onednn" and pair.drafter_precision == "same"
    prompts = [p["prompt"] for p in example_prompts()[:4]]
    for prompt in prompts:
        ar = DecodeSession(pair, prompt, DecodeConfig(max_new_tokens=24).with_run("ar"))
        ar.run()
        for selector in SELECTORS:
            for budget in (8, 32):
                run = DecodeSession(pair, prompt, DecodeConfig(max_new_tokens=24).with_run(selector, budget=budget))
                run.run()
                assert run.generated == ar.generated, (forced, prompt, selector, budget)


def test_a_fallback_is_logged_once(monkeypatch):
    monkeypatch.setenv("TAPS_INT8", "0")
    monkeypatch.setattr(machine, "_announced", set())
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    machine.log.addHandler(handler)
    try:
        load_pair(None, device="cpu")
        load_pair(None, device="cpu")
        machine.announce()
    finally:
        machine.log.removeHandler(handler)
    assert len(seen) == 1 and "int8 drafter is unavailable (TAPS_INT8=0 is set)" in seen[0], seen


def test_int8_asked_for_where_it_is_missing_is_a_clear_message(monkeypatch):
    monkeypatch.setenv("TAPS_INT8", "0")
    with pytest.raises(PairError, match="drafter precision int8 is unavailable here .TAPS_INT8=0 is set.; use 'auto'"):
        load_pair(None, device="cpu", drafter_precision="int8")


def test_the_apps_first_step_works_on_each_fallback(forced, monkeypatch):
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from streamlit.testing.v1 import AppTest

    from taps.studio.serve import shared_runs

    monkeypatch.setenv("TAPS_PAIR", "")
    shared_runs().clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/1_Step_through.py").run()
    at.button(key="step_btn_step").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    session = at.session_state["step_controller"].session
    assert len(session.rounds) == 1 and session.rounds[0].tau >= 1
    pair = session.pair
    assert (kernel_name(pair.target) == "default") == (forced == "onednn")
    assert (pair.drafter_precision == "same") == (forced == "int8")
    about = next(e for e in at.expander if e.label.startswith("About this machine"))
    warned = " ".join(w.value for w in about.warning)
    assert f"{FORCED[forced]}=0 is set" in warned and "Portable path" in warned
    shared_runs().clear()
