"""The Step-through controller: one run decoded round by round, or a saved run viewed; what the
page's buttons do and what its counters show. Plain Python (no streamlit), tested directly.

- `advance` starts a fresh run when there is none, when the prompt, settings or latency profile
  changed, or when a saved run is on view; then steps 1, 10 or all rounds.
- Every session gets this machine's saved latency profile (`profile=`): settings that size trees
  from a profile are refused with a clear message when none is saved, never measured here.
- `open_at` replays a run up to a round (Failure cases opens its cases this way); replays give the
  same rounds, because decisions read only the saved profile.
- `numbers` are the counters for the rounds up to the one on view: tokens, tau, waste, stage
  shares, the modelled speed-up under a named profile and the measured one with its spread.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Callable

from ..config import DecodeConfig
from ..eval.metrics import summarize
from ..pair import ModelPair
from ..record import Round
from ..session import DecodeSession
from .app_state import ArBaseline, SavedRun, check_profile, load_run, metrics_csv, run_json
from .lesson import round_text
from .speed import StepSpeed, step_speed


@dataclass
class StepNumbers:
    rounds: int
    tokens: int
    tau_round: int
    tau_mean: float
    verified_round: int
    waste_share: float
    stage_shares: dict[str, float]
    speed: StepSpeed


class StepController:
    def __init__(self) -> None:
        self.session: DecodeSession | None = None
        self.baseline: ArBaseline | None = None
        self.saved: SavedRun | None = None
        self.profile = None
        self.view = 0                  # the round on view, numbered from 1 (0: none yet)
        # bumped whenever the code (not the page's round slider) moves the view, so the page can
        # key its slider by it: a new slider starts at the new round, and a browser still holding
        # the old slider's value cannot pull the view back to an older round
        self.view_version = 0
        # held by a page run while it steps or draws this controller: two script runs of one
        # browser session can overlap (a rerun may start before the previous run has stopped),
        # and a run must not draw a run that another is still stepping
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ what is on view
    @property
    def rounds(self) -> list[Round]:
        if self.saved is not None:
            return self.saved.rounds
        return self.session.rounds if self.session is not None else []

    @property
    def live(self) -> bool:
        return self.saved is None and self.session is not None

    @property
    def prompt_text(self) -> str:
        if self.saved is not None:
            return self.saved.prompt
        if self.session is None:
            return ""
        return self.session.pair.tokenizer.decode(self.session.prompt_ids)

    @property
    def config(self) -> dict:
        """The settings of the run on view, as a plain dict."""
        if self.saved is not None:
            return dict(self.saved.config)
        return asdict(self.session.config) if self.session is not None else {}

    @property
    def finished(self) -> bool:
        return self.live and self.session.finished

    def record(self) -> Round | None:
        """The round on view."""
        rounds = self.rounds
        if not rounds:
            return None
        self.view = min(max(self.view, 1), len(rounds))
        return rounds[self.view - 1]

    def matches(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None) -> bool:
        """Whether the live run was started on this pair, prompt, settings and profile."""
        session = self.session
        if session is None or self.saved is not None or session.pair is not pair or session.config != config:
            return False
        if self.profile is not profile and (self.profile is None or profile is None
                                            or self.profile.measured_at != profile.measured_at):
            return False
        try:
            ids = pair.tokenizer.encode(prompt, add_special_tokens=False)
        except Exception:  # noqa: BLE001 - any tokenizer failure means "not the same prompt"
            return False
        return ids == session.prompt_ids

    # ------------------------------------------------------------------ actions
    def start(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None) -> None:
        """A fresh run and its AR baseline. Raises ValueError (bad settings, no profile where one is
        needed) or RuntimeError with the message to show; the previous run then stays as it was."""
        config.validate(pair)
        check_profile(config, profile)
        session = DecodeSession(pair, prompt, config, profile=profile)
        baseline = ArBaseline(pair, prompt, config)
        self.session, self.baseline, self.saved, self.profile = session, baseline, None, profile
        self.show(0)

    def advance(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, rounds: int | None = 1,
                on_round: Callable[[DecodeSession], None] | None = None) -> str:
        """Step `rounds` rounds (None: to the end), starting a fresh run first when needed. Returns a
        notice for the page ("" when there is none); raises like `start`."""
        notice = ""
        if not self.matches(pair, prompt, config, profile):
            had_run = self.session is not None or self.saved is not None
            self.start(pair, prompt, config, profile)
            if had_run:
                notice = "Settings or prompt changed: started a new run."
        session = self.session
        if session.finished:
            return f"This run has finished ({session.stop_reason}). Press **Reset** to start again."
        done = 0
        while not session.finished and (rounds is None or done < rounds):
            session.step()
            done += 1
            if on_round is not None:
                on_round(session)
        self.show(len(session.rounds))
        return notice

    def open_at(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, number: int = 1,
                on_round: Callable[[DecodeSession], None] | None = None) -> None:
        """Replay a fresh run up to round `number` (or its end) and put that round on view."""
        self.start(pair, prompt, config, profile)
        while len(self.session.rounds) < number and not self.session.finished:
            self.session.step()
            if on_round is not None:
                on_round(self.session)
        self.show(min(number, len(self.session.rounds)))

    def load(self, data: bytes | str) -> None:
        """View a saved run (ValueError says why a file is not one); the live run is kept aside."""
        self.saved = load_run(data)
        self.show(len(self.saved.rounds))

    def show(self, number: int) -> None:
        """Put round `number` on view (0: none)."""
        self.view = number
        self.view_version += 1

    # ------------------------------------------------------------------ counters and files
    def numbers(self, model_profile=None) -> StepNumbers:
        """Counters over the rounds up to the one on view."""
        rounds = self.rounds[: max(self.view, 0)]
        summary = summarize(rounds)
        ar_rounds = self.baseline.rounds(summary.new_tokens) if self.live and self.baseline and rounds else []
        last = rounds[-1] if rounds else None
        return StepNumbers(rounds=summary.rounds, tokens=summary.new_tokens, tau_round=last.tau if last else 0,
                           tau_mean=summary.tau, verified_round=last.verified_nodes if last else 0,
                           waste_share=summary.waste_share, stage_shares=summary.stage_shares,
                           speed=step_speed(rounds, ar_rounds, model_profile))

    def spans(self) -> list[dict]:
        """The generated text, one piece per round, for the clickable text."""
        return [{"number": r.number, "tau": r.tau, "text": round_text(r)} for r in self.rounds]

    def run_file(self, pair_name: str) -> str:
        if self.saved is not None:
            saved = self.saved
            return run_json(saved.rounds, prompt=saved.prompt, pair_name=saved.pair_name, config=saved.config,
                            text=saved.text)
        return run_json(self.rounds, prompt=self.prompt_text, pair_name=pair_name, config=self.session.config,
                        text=self.session.text)

    def metrics_file(self) -> str:
        return metrics_csv(self.rounds)
