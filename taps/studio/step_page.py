"""What the Step-through page decides (no Streamlit here: `app_pages/1_Step_through.py` arranges,
`app_pages/step_views.py` and `app_pages/step_export.py` draw).

- Which stage Stage by stage shows: a round not walked yet opens at the default stage
  (`stage_for_view`); ↑ / ↓ and the stage buttons move within a round and, past its ends, to the
  next or previous round (`StepMoves.stage_move`).
- What a key, an autoplay tick or Back / Forward does to the run (`StepMoves.act`).
- What the counters say (`counters`) and the line under the buttons (`note_line`).
- Which widget values a case opened from Failure cases or a loaded run puts in the page's widgets.

`state` is any mutable mapping (the page's `st.session_state`; a dict in the tests); `ctrl` a
`taps.studio.stepper.StepController`.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import asdict, dataclass

from ..record import STAGES
from .speed import MIN_MEASURED_ROUNDS, ar_progress_note, measured_shown

STAGE_TAB = "Stage by stage"     # the tab whose view walks a round's stages (`app_pages.lecture.TAB_LABELS`)


# ---------------------------------------------------------------------------- stages
def default_stage(state: MutableMapping) -> int:
    return STAGES.index(state.get("step_default_stage", STAGES[0]))


def stage_for_view(state: MutableMapping, view: int) -> int:
    """The stage Stage by stage shows: a new round (one not walked yet) opens at the default stage."""
    if state.get("step_stage_view") != view:
        state["step_stage"], state["step_stage_view"] = default_stage(state), view
    return min(max(int(state.get("step_stage", 0)), 0), len(STAGES) - 1)


def move_stage(state: MutableMapping, view: int, delta: int) -> None:
    """The previous or next stage of the round on view, kept within its six stages."""
    state["step_stage"] = min(max(state.get("step_stage", 0) + delta, 0), len(STAGES) - 1)
    state["step_stage_view"] = view


# ---------------------------------------------------------------------------- moves
class Actions:
    """Keys and autoplay ticks waiting to be acted on, filled by the keyboard component's callback
    (a plain list: a callback that touches st.session_state can be stopped there by a pending
    rerun, and the key lost with it; `app_pages.inputs.action_button`)."""

    def __init__(self) -> None:
        self.waiting: list[str] = []

    def add(self, name: str) -> None:
        self.waiting.append(name)

    def take(self) -> list[str]:
        taken, self.waiting = self.waiting, []
        return taken


class StepMoves:
    """What a move does to the run on view. `forward()` decodes or shows the next round with the
    page's prompt and settings (None when these cannot run: `problem` says why)."""

    def __init__(self, state: MutableMapping, ctrl, forward: Callable[[], str] | None, problem: str = ""):
        self.state, self.ctrl, self.forward, self.problem = state, ctrl, forward, problem

    def on_stage_tab(self) -> bool:
        return self.state.get("step_tab") == STAGE_TAB

    def stage_move(self, delta: int) -> str:
        """↓ / ↑ (and autoplay in Stage by stage): open Stage by stage; the next or previous stage,
        past the last one the next round (at the first stage), before the first the previous
        round's last."""
        state, ctrl = self.state, self.ctrl
        if not self.on_stage_tab():
            state["step_tab"] = STAGE_TAB
            stage_for_view(state, ctrl.view)
            return ""
        stage = stage_for_view(state, ctrl.view) + delta
        if 0 <= stage < len(STAGES):
            move_stage(state, ctrl.view, delta)
            return ""
        if delta > 0:
            notice = self.forward() if self.forward is not None else self.problem
            state["step_stage"], state["step_stage_view"] = 0, ctrl.view
            return notice
        if ctrl.view > 1:
            ctrl.back()
            state["step_stage"], state["step_stage_view"] = len(STAGES) - 1, ctrl.view
        return ""

    def act(self, name: str) -> str:
        """One key's (or autoplay tick's) move; returns a notice for the page."""
        state = self.state
        if name in ("play", "pause"):
            state["step_playing"] = name == "play" and not state.get("step_playing", False)
            return ""
        if name == "tick" and not state.get("step_playing"):
            return ""
        if name in ("stage_next", "stage_prev") or (name == "tick" and self.on_stage_tab()):
            return self.stage_move(-1 if name == "stage_prev" else 1)
        if name in ("next", "tick"):
            if self.forward is None:
                return f"Cannot run these settings: {self.problem}"
            return self.forward()
        {"prev": self.ctrl.back, "first": self.ctrl.first, "last": self.ctrl.last}[name]()
        return ""

    def autoplay_done(self) -> bool:
        """Whether autoplay has nothing left to show: the run ended, its last round on view (and in
        Stage by stage, its last stage)."""
        ctrl = self.ctrl
        return ctrl.finished and ctrl.view >= len(ctrl.visible) and (
            not self.on_stage_tab() or stage_for_view(self.state, ctrl.view) == len(STAGES) - 1)


def without_stop(notice: str, ctrl) -> str:
    """A notice less the end-of-run sentence (`stop_text`), which the page says once elsewhere."""
    return notice.replace(ctrl.stop_text(), "").strip() if ctrl.finished else notice


def note_line(notices: list[str], ahead: str, ctrl) -> str:
    """A compact page's one line under the buttons: the moves' notices and what the next Step does
    (or the run's end), each said once."""
    said = [without_stop(notice, ctrl) for notice in notices]
    return " ".join(dict.fromkeys(part for part in [*said, ahead] if part))


# ---------------------------------------------------------------------------- counters
@dataclass(frozen=True)
class Counter:
    label: str
    value: object
    delta: str | None = None
    help: str | None = None


# the columns' widths for the widest value each counter shows ("1024", "16.00", "100%", "10.00×") in the
# main column beside the sidebar at 1280 px, compact or not (the metric font is 1.6rem there, deltas wrap)
COUNTER_WIDTHS = (0.8, 0.9, 0.95, 1.4, 1.35, 2.0, 1.6)


def counters(record, numbers, shown_rounds, where: str, model_name: str, on_stage: bool, live: bool,
             load=None) -> tuple[list[Counter], str]:
    """The seven counters over a round on view (this round, the run so far, the modelled and the
    measured speed-up) and the sentence under them. `where` names the modelling profile in a few
    words, `model_name` in full; `load` is the machine's load when the run is live (greys the
    measured figure when busy)."""
    speed = numbers.speed
    modelled, measured = speed.modelled, speed.measured
    verified_run = sum(r.verified_nodes for r in shown_rounds)
    waste_round = record.waste_nodes / record.verified_nodes if record.verified_nodes else 0.0
    shown = measured_shown(measured, load if live else None)
    figures = [
        Counter("Tokens", numbers.tokens),
        Counter("τ this round", record.tau),
        Counter("τ mean", f"{numbers.tau_mean:.2f}"),
        Counter("Verified this round", record.verified_nodes, f"run {verified_run}",
                "Draft nodes the target checked this round; below, over the run so far"),
        Counter("Waste this round", f"{100 * waste_round:.0f}%", f"run {100 * numbers.waste_share:.0f}%",
                "Verified nodes under a rejected prefix, this round; below, over the run so far"),
        # in presenter mode the shorter label keeps the row one line high (the tree gets the rest)
        Counter(f"Modelled ({where})" if on_stage else f"Modelled speed-up ({where})",
                "—" if modelled is None else f"{modelled['speedup']:.2f}×",
                help="Deterministic: τ × AR step ÷ round time, read from " + model_name),
        Counter("Measured speed-up", shown.value, shown.note or None,
                f"Wall clock: per round, τ × the median AR step of this prompt here ÷ the round's time; the median "
                f"over the rounds so far, with their middle half. Shown after {MIN_MEASURED_ROUNDS} rounds, and "
                "greyed while the machine is busy"),
    ]
    lines = []
    if modelled is not None:
        lines.append(f"**Modelled** {modelled['speedup']:.2f}× = τ {modelled['tau']:.2f} × AR step "
                     f"{1000 * modelled['ar_step_s']:.2f} ms ÷ round {1000 * modelled['round_s']:.2f} ms, on the "
                     f"{model_name}.")
    else:
        lines.append("**Modelled**: no latency profile of this machine yet (measure it in the sidebar, or model "
                     "the speed on a reference profile).")
    if measured is not None:
        lines.append(shown.sentence)
        if shown.shown and measured.wide:
            lines.append("The rounds' measured speed-ups spread widely: the machine may be busy.")
        if shown.shown:
            lines.append(ar_progress_note(speed))
    elif not live:
        lines.append("**Measured**: — for a saved run (its times were measured where it ran).")
    return figures, " ".join(lines)


# ---------------------------------------------------------------------------- what fills the widgets
def widget_key(name: str) -> str:
    """The Step page's widget key of a decode setting."""
    return {"max_new_tokens": "step_max_new"}.get(name, f"step_{name}")


def request_values(request: dict, own_block: int, chat_usable: bool, own_prompt: str) -> dict:
    """The widget values of a case opened from Failure cases ("open in Step through"): its prompt,
    chat or not, and its settings (a block size of None: the drafter's own)."""
    values = {"step_prompt": request["prompt"], "step_example": own_prompt,
              "step_chat": bool(request.get("chat", False)) and chat_usable}
    for name, value in request["config"].items():
        values[widget_key(name)] = own_block if name == "block_size" and value is None else value
    return values


def saved_run_values(saved, settings, examples: list[dict], own_block: int, own_prompt: str,
                     known: Callable[[str, str], bool]) -> dict:
    """The widget values of a loaded run this pair can continue (`settings`, its DecodeConfig): its
    prompt as run (a chat run's as its template made it, which reads back as the same tokens, so
    Chat prompt is off), the example it is if it is one, and each setting the page has a widget for
    (`known(name, key)`)."""
    values = {"step_prompt": saved.prompt, "step_chat": False,
              "step_example": next((e["title"] for e in examples if e["prompt"] == saved.prompt), own_prompt)}
    for name, value in asdict(settings).items():
        key = widget_key(name)
        if known(name, key):
            values[key] = own_block if name == "block_size" and value is None else value
    return values


def remembered(state: MutableMapping, key: str, default, drawn: bool) -> None:
    """A widget's value kept apart from the widget, put back into it before it is drawn: a widget a
    run does not draw (its tab closed) loses its state, and must not show another value than the
    one the figure uses when it comes back. While the widget was drawn (`drawn`), its own value
    (the browser's latest) is the one kept."""
    if drawn and key in state:
        state[f"{key}__value"] = state[key]
    state[key] = state.setdefault(f"{key}__value", state.get(key, default))
