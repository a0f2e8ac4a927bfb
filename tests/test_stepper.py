"""The Step-through controller (taps.studio.stepper) without streamlit: start, advance, saved vs live,
replaying a run to a round, the counters, and the two speeds on a busy machine."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import fixed_profile

from taps import DecodeConfig
from taps.studio.serve import SharedRuns
from taps.studio.stepper import StepController

PROMPT = "def add(a, b):\n    return"


def controller() -> StepController:
    """A controller with runs of its own: these tests check one session's run from its first round
    (the app's controllers share runs by link: tests/test_serve.py)."""
    return StepController(runs=SharedRuns())


@pytest.fixture(scope="module")
def profile(tiny_pair_f32):
    return fixed_profile(tiny_pair_f32)


def config(**changes) -> DecodeConfig:
    return replace(DecodeConfig(budget=8, max_new_tokens=24, stop_at_eos=False), **changes)


def test_advance_starts_steps_and_restarts_on_new_settings(tiny_pair_f32, profile):
    ctrl = controller()
    assert ctrl.rounds == [] and ctrl.record() is None and not ctrl.live
    assert ctrl.advance(tiny_pair_f32, PROMPT, config(), profile) == ""
    assert len(ctrl.rounds) == 1 and ctrl.view == 1 and ctrl.live
    assert ctrl.session.profile is profile
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=3)
    assert len(ctrl.rounds) == 4 and ctrl.view == 4 and ctrl.record() is ctrl.rounds[-1]
    notice = ctrl.advance(tiny_pair_f32, PROMPT, config(budget=4), profile)
    assert notice == "Settings or prompt changed: started a new run." and len(ctrl.rounds) == 1
    ctrl.advance(tiny_pair_f32, PROMPT + " a", config(budget=4), profile)
    assert len(ctrl.rounds) == 1                                            # a new prompt: a new run
    ctrl.advance(tiny_pair_f32, PROMPT + " a", config(budget=4), profile, rounds=None)
    assert ctrl.finished and len(ctrl.session.generated) == 24
    assert "has finished" in ctrl.advance(tiny_pair_f32, PROMPT + " a", config(budget=4), profile)


def test_every_move_of_the_view_by_the_code_gets_a_new_version(tiny_pair_f32, profile):
    """The page keys its round slider by `view_version`, so a browser's stale slider value cannot
    pull the view back after a step; moves by the slider itself (plain `view =`) keep the version."""
    ctrl = controller()
    versions = [ctrl.view_version]
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=3)
    versions.append(ctrl.view_version)
    ctrl.view = 2                                                        # the slider moved it
    assert ctrl.view_version == versions[-1] and ctrl.record() is ctrl.rounds[1]
    ctrl.show(1)                                                         # a click on the text
    versions.append(ctrl.view_version)
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile)
    assert ctrl.view == 4
    versions.append(ctrl.view_version)
    ctrl.open_at(tiny_pair_f32, PROMPT, config(), profile, 2)
    assert ctrl.view == 2
    versions.append(ctrl.view_version)
    assert versions == sorted(set(versions))                             # each one new
    assert "has finished" not in ctrl.advance(tiny_pair_f32, PROMPT, config(), profile)
    with ctrl.lock:                                                      # re-entrant: a page run holds it
        with ctrl.lock:
            assert ctrl.view == 3


def test_bad_settings_leave_the_run_as_it_was(tiny_pair_f32, profile):
    ctrl = controller()
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=2)
    session = ctrl.session
    for bad, message in ((config(budget=0), "budget must be from 1"), (config(temperature=9.0), "temperature"),
                         (config(selector="oracle", temperature=0.5), "greedy")):
        with pytest.raises(ValueError, match=message):
            ctrl.advance(tiny_pair_f32, PROMPT, bad, profile)
        assert ctrl.session is session and len(ctrl.rounds) == 2
    with pytest.raises(ValueError, match="empty"):
        ctrl.advance(tiny_pair_f32, "  ", config(), profile)
    assert ctrl.session is session


def test_a_profile_is_required_never_measured(tiny_pair_f32, monkeypatch):
    from taps import profiles
    from taps.eval import measure

    monkeypatch.setattr(measure, "profile_for", lambda *a, **k: pytest.fail("the app must never measure a profile"))
    monkeypatch.setattr(profiles, "required_profile", lambda *a, **k: pytest.fail("the app reads no profile unasked"))
    ctrl = controller()
    with pytest.raises(ValueError, match="Measure latency profile"):
        ctrl.advance(tiny_pair_f32, PROMPT, config(taps_mode="cost"), None)
    with pytest.raises(ValueError, match="DDTree's cost mode"):
        ctrl.advance(tiny_pair_f32, PROMPT, config(selector="ddtree", ddtree_mode="cost"), None)
    ctrl.advance(tiny_pair_f32, PROMPT, config(taps_mode="reach"), None)        # reach needs none
    assert len(ctrl.rounds) == 1


def test_open_at_replays_the_same_rounds(tiny_pair_f32, profile):
    first = controller()
    first.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=None)
    again = controller()
    again.open_at(tiny_pair_f32, PROMPT, config(), profile, 3)
    assert again.view == 3 and len(again.rounds) == 3
    for a, b in zip(first.rounds, again.rounds):
        assert (a.selected, a.accepted, a.committed_tokens) == (b.selected, b.accepted, b.committed_tokens)
    again.open_at(tiny_pair_f32, PROMPT, config(), profile, 999)
    assert again.finished and again.view == len(again.rounds)


def test_saved_runs_are_viewed_apart_from_the_live_one(tiny_pair_f32, profile):
    ctrl = controller()
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=3)
    text = ctrl.run_file(tiny_pair_f32.name)
    assert ctrl.metrics_file().splitlines()[1].startswith("1,")
    viewer = controller()
    viewer.load(text.encode())
    assert not viewer.live and viewer.view == 3 and viewer.prompt_text == PROMPT
    assert [r.selected for r in viewer.rounds] == [r.selected for r in ctrl.rounds]
    assert viewer.numbers(profile).speed.measured is None                  # its times were measured elsewhere
    assert viewer.config["budget"] == 8
    with pytest.raises(ValueError, match="not a TAPS Studio run"):
        viewer.load(b'{"a": 1}')
    assert "continues this saved run live" in viewer.what_next_step_does(tiny_pair_f32, PROMPT, config(), profile)
    notice = viewer.advance(tiny_pair_f32, PROMPT, config(), profile)       # the same settings: continued live
    assert "the same rounds" in notice and viewer.live and len(viewer.rounds) == 4 and viewer.view == 4
    assert [r.selected for r in viewer.rounds[:3]] == [r.selected for r in ctrl.rounds[:3]]
    viewer.load(text.encode())
    says = viewer.what_next_step_does(tiny_pair_f32, PROMPT, config(budget=4), profile)
    assert "starts a new run from round 1" in says and "settings above differ" in says
    assert viewer.advance(tiny_pair_f32, PROMPT, config(budget=4), profile).startswith("Settings or prompt changed")
    assert viewer.live and len(viewer.rounds) == 1


def test_numbers_follow_the_round_on_view(tiny_pair_f32, profile):
    ctrl = controller()
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=4)
    ctrl.view = 2
    numbers = ctrl.numbers(profile)
    assert numbers.rounds == 2 and numbers.tokens == sum(r.tau for r in ctrl.rounds[:2])
    assert numbers.tau_round == ctrl.rounds[1].tau
    speed = numbers.speed
    assert speed.modelled["speedup"] > 0 and speed.measured.count == 2 and speed.ar_step_s > 0
    spans = ctrl.spans()
    assert [s["number"] for s in spans] == [1, 2, 3, 4]
    assert "".join(s["text"] for s in spans) == ctrl.session.text


def _busy(count: int = 2) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def test_a_busy_machine_changes_the_measured_speed_not_the_modelled_one(tiny_pair_f32, profile):
    """Decisions never read the clock: the same settings give the same rounds, hence the same
    modelled speed-up, with CPU-heavy processes alongside; the measured one comes with a spread."""
    quiet = controller()
    quiet.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=None)
    hogs = _busy()
    try:
        busy = controller()
        busy.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=None)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert [r.selected for r in busy.rounds] == [r.selected for r in quiet.rounds]
    calm, loaded = quiet.numbers(profile).speed, busy.numbers(profile).speed
    assert calm.modelled == loaded.modelled
    assert loaded.measured.count == len(busy.rounds) and loaded.measured.low <= loaded.measured.median \
        <= loaded.measured.high


def test_a_finished_run_says_why_at_once(tiny_pair_f32, profile):
    ctrl = controller()
    notice = ctrl.advance(tiny_pair_f32, PROMPT, config(max_new_tokens=6), profile, rounds=10)
    assert ctrl.finished and "Finished after" in notice and "Max new tokens" in notice
    assert ctrl.stop_text() in notice
    assert "has finished (it reached Max new tokens)" in ctrl.advance(tiny_pair_f32, PROMPT, config(max_new_tokens=6),
                                                                     profile)


def test_lecture_moves_back_forward_first_last(tiny_pair_f32, profile):
    ctrl = controller()
    ctrl.forward(tiny_pair_f32, PROMPT, config(), profile)                 # nothing shown yet: decodes round 1
    assert ctrl.view == 1 and len(ctrl.rounds) == 1
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=2)
    ctrl.back()
    ctrl.back()
    assert ctrl.view == 1 and ctrl.record() is ctrl.rounds[0]
    ctrl.back()
    assert ctrl.view == 1                                                  # not before the first round
    ctrl.forward(tiny_pair_f32, PROMPT, config(), profile)
    assert ctrl.view == 2 and len(ctrl.rounds) == 3                       # shown already: nothing decoded
    ctrl.last()
    assert ctrl.view == 3
    ctrl.forward(tiny_pair_f32, PROMPT, config(), profile)
    assert ctrl.view == 4 and len(ctrl.rounds) == 4                       # past the last: decodes the next
    ctrl.first()
    assert ctrl.view == 1 and ctrl.numbers(profile).rounds == 1


def test_rounds_decoded_ahead_stay_hidden_until_shown(tiny_pair_f32, profile):
    ctrl = controller()
    reference = controller()
    reference.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=5)
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile)
    thread = ctrl.decode_ahead(3)
    thread.join(timeout=60)
    assert len(ctrl.rounds) == 4 and len(ctrl.visible) == 1 and ctrl.view == 1
    assert len(ctrl.spans()) == 1 and ctrl.numbers(profile).rounds == 1
    assert ctrl.metrics_file().count("\n") == 2                           # header and the one round shown
    assert ctrl.decode_ahead(3) is None                                   # three ahead already
    ctrl.forward(tiny_pair_f32, PROMPT, config(), profile)
    ctrl.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=3)       # two decoded ahead, one new
    assert ctrl.view == 5 and len(ctrl.rounds) == 5 and len(ctrl.visible) == 5
    for a, b in zip(ctrl.rounds, reference.rounds):                       # the same rounds as stepped in turn
        assert (a.selected, a.committed_tokens) == (b.selected, b.committed_tokens)
    ctrl.last()
    assert ctrl.view == 5
    ctrl.advance(tiny_pair_f32, PROMPT, config(budget=4), profile)         # a new run: the old thread's gone
    assert ctrl.decode_ahead(2).join(timeout=60) is None and len(ctrl.rounds) == 3 and ctrl.view == 1


def test_the_ar_baseline_catches_up_off_the_clicks_path(tiny_pair_f32, profile):
    from taps.studio.stepper import AR_NOW

    ctrl = controller()
    ctrl.advance(tiny_pair_f32, PROMPT, config(max_new_tokens=24), profile, rounds=None)
    tokens = len(ctrl.session.generated)
    assert tokens > AR_NOW
    assert ctrl.numbers(profile).speed.measured is not None
    assert len(ctrl.baseline.session.rounds) == AR_NOW                      # only a few AR steps on the way
    ctrl.catch_up_later(delay_s=0.0).join(timeout=60)
    assert len(ctrl.baseline.session.generated) == tokens
    assert ctrl.catch_up_later() is None                                  # nothing left to decode
