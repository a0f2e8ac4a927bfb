"""What the Step-through page decides, without Streamlit (`taps.studio.step_page`): which stage a
round opens at, what a key or autoplay tick does to the run, what the counters and the note line
say, and what a Failure-cases case or a loaded run puts in the widgets."""

from __future__ import annotations

from types import SimpleNamespace

from taps.config import DecodeConfig
from taps.record import STAGES
from taps.studio.step_page import (
    STAGE_TAB,
    Actions,
    StepMoves,
    counters,
    move_stage,
    note_line,
    remembered,
    request_values,
    saved_run_values,
    stage_for_view,
)

LAST = len(STAGES) - 1


class FakeRun:
    """A run of `rounds` rounds on view at `view`, with the controller's moves the page calls."""

    def __init__(self, view: int = 1, decoded: int = 3, finished: bool = False):
        self.view, self.visible, self.finished, self.calls = view, [object()] * decoded, finished, []

    def back(self):
        self.calls.append("back")
        self.view = max(self.view - 1, 1)

    def first(self):
        self.calls.append("first")
        self.view = 1

    def last(self):
        self.calls.append("last")
        self.view = len(self.visible)

    def stop_text(self) -> str:
        return "The run ended (the token budget)."


def moves_on(run: FakeRun, state: dict, problem: str = "") -> StepMoves:
    def forward() -> str:
        run.calls.append("forward")
        run.view += 1
        return "decoded"
    return StepMoves(state, run, None if problem else forward, problem)


def test_a_new_round_opens_at_the_default_stage_and_stages_stay_in_range():
    state = {"step_default_stage": STAGES[2]}
    assert stage_for_view(state, 4) == 2 and state["step_stage_view"] == 4
    move_stage(state, 4, 10)
    assert stage_for_view(state, 4) == LAST                     # walked round: kept where it was
    move_stage(state, 4, -99)
    assert stage_for_view(state, 4) == 0
    assert stage_for_view(state, 5) == 2                        # the next round: the default again


def test_stage_moves_open_the_tab_then_walk_past_a_rounds_ends():
    run, state = FakeRun(view=2), {}
    moves = moves_on(run, state)
    assert moves.act("stage_next") == "" and state["step_tab"] == STAGE_TAB and run.calls == []
    for _ in range(LAST):
        moves.act("stage_next")
    assert stage_for_view(state, run.view) == LAST and run.view == 2
    assert moves.act("stage_next") == "decoded" and run.view == 3 and state["step_stage"] == 0   # past the last
    assert moves.act("stage_prev") == "" and run.view == 2 and state["step_stage"] == LAST       # before the first
    blocked = moves_on(FakeRun(view=2), {"step_tab": STAGE_TAB, "step_stage": LAST, "step_stage_view": 2},
                       problem="budget out of range")
    assert blocked.act("stage_next") == "budget out of range"


def test_keys_and_autoplay_ticks():
    run, state = FakeRun(view=2), {}
    moves = moves_on(run, state)
    assert moves.act("tick") == "" and run.calls == []          # not playing: a tick does nothing
    moves.act("play")
    assert state["step_playing"] and moves.act("tick") == "decoded" and run.calls == ["forward"]
    moves.act("play")                                            # space again: pauses
    assert not state["step_playing"]
    for key, call in (("prev", "back"), ("first", "first"), ("last", "last")):
        moves.act(key)
        assert run.calls[-1] == call
    assert moves_on(FakeRun(), {}, problem="no profile").act("next") == "Cannot run these settings: no profile"
    state["step_tab"], state["step_playing"] = STAGE_TAB, True
    moves.act("tick")                                            # in Stage by stage a tick walks a stage
    assert run.calls[-1] == "last" and stage_for_view(state, run.view) == 1


def test_autoplay_stops_at_the_runs_last_round_and_stage():
    state = {}
    done = moves_on(FakeRun(view=3, decoded=3, finished=True), state)
    assert done.autoplay_done()
    state.update(step_tab=STAGE_TAB, step_stage=0, step_stage_view=3)
    assert not done.autoplay_done()                              # the last round's stages still to walk
    state["step_stage"] = LAST
    assert done.autoplay_done()
    assert not moves_on(FakeRun(view=2, decoded=3, finished=True), {}).autoplay_done()
    assert not moves_on(FakeRun(view=3, decoded=3, finished=False), {}).autoplay_done()


def test_keys_wait_in_order_until_taken():
    actions = Actions()
    actions.add("next")
    actions.add("tick")
    assert actions.take() == ["next", "tick"] and actions.take() == []


def test_the_note_line_says_each_thing_once_and_the_runs_end_once():
    run = FakeRun(finished=True)
    ended = f"Decoded a round. {run.stop_text()}"
    assert note_line([ended, ended], run.stop_text(), run) == f"Decoded a round. {run.stop_text()}"
    assert note_line([], "", FakeRun()) == ""


def _round(tau=3, verified=8, waste=2):
    return SimpleNamespace(tau=tau, verified_nodes=verified, waste_nodes=waste)


def test_the_counters_say_the_round_the_run_and_both_speeds():
    speed = SimpleNamespace(modelled={"speedup": 1.84, "tau": 3.1, "ar_step_s": 0.004, "round_s": 0.0067},
                            measured=None, ar_step_s=0.004)
    numbers = SimpleNamespace(speed=speed, tokens=40, tau_mean=3.1, waste_share=0.25)
    figures, text = counters(_round(), numbers, [_round(), _round(verified=6)], "this machine",
                             "this machine's profile", on_stage=False, live=False)
    by_label = {f.label: f for f in figures}
    assert len(figures) == 7 and by_label["Tokens"].value == 40 and by_label["τ mean"].value == "3.10"
    assert by_label["Verified this round"].value == 8 and by_label["Verified this round"].delta == "run 14"
    assert by_label["Waste this round"].value == "25%" and by_label["Waste this round"].delta == "run 25%"
    assert by_label["Modelled speed-up (this machine)"].value == "1.84×"
    assert "**Modelled** 1.84× = τ 3.10 × AR step 4.00 ms ÷ round 6.70 ms, on the this machine's profile." in text
    assert "for a saved run" in text                            # not live, nothing measured
    short, _ = counters(_round(), numbers, [], "reference CPU", "x", on_stage=True, live=True)
    assert short[5].label == "Modelled (reference CPU)"          # presenter mode: one line high
    speed.modelled = None
    _, none = counters(_round(verified=0), numbers, [], "w", "x", on_stage=False, live=True)
    assert none.startswith("**Modelled**: no latency profile") and "saved run" not in none


def test_what_a_case_and_a_loaded_run_put_in_the_widgets():
    request = {"prompt": "def f():", "chat": True, "config": {"budget": 32, "block_size": None,
                                                               "max_new_tokens": 24}}
    assert request_values(request, 8, chat_usable=False, own_prompt="(own)") == {
        "step_prompt": "def f():", "step_example": "(own)", "step_chat": False, "step_budget": 32,
        "step_block_size": 8, "step_max_new": 24}
    saved = SimpleNamespace(prompt="fib")
    settings = DecodeConfig(budget=16, block_size=None)
    values = saved_run_values(saved, settings, [{"title": "Fibonacci", "prompt": "fib"}], 8, "(own)",
                              lambda name, key: name in ("budget", "block_size"))
    assert values == {"step_prompt": "fib", "step_chat": False, "step_example": "Fibonacci", "step_budget": 16,
                      "step_block_size": 8}
    assert saved_run_values(saved, settings, [], 8, "(own)", lambda n, k: False)["step_example"] == "(own)"


def test_a_widgets_value_outlives_the_widget():
    state = {"color": "reach"}
    remembered(state, "color", "tau", drawn=True)                # drawn: the browser's value is kept
    state["color"] = "depth"
    remembered(state, "color", "tau", drawn=True)
    assert state["color__value"] == "depth"
    del state["color"]                                           # its tab closed: Streamlit forgot it
    remembered(state, "color", "tau", drawn=False)
    assert state["color"] == "depth"
