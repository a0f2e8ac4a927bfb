"""The Step-through controller: one run decoded round by round, or a saved run viewed; what the
page's buttons do and what its counters show. Plain Python (no streamlit), tested directly.

- The rounds on view belong to the link's run (`taps.studio.serve`): the pair, prompt, settings
  and (where trees are sized from one) latency profile decide a run's rounds, so every browser
  session on the same link shares one run, decoded once, one round per job of the decode service
  (`on_wait` tells a waiting page its place); each session has its own view of it (`view`,
  `revealed`). A controller made with `runs=SharedRuns()` keeps runs of its own (tests).
- `advance` opens the link's run when there is none, when the prompt, settings or latency profile
  changed, or when a saved run is on view that this pair cannot continue; then shows 1, 10 or all
  rounds more, decoding those the run does not have yet. A saved run of this pair, prompt and
  settings is continued live: replayed up to its last round, then stepped. A run that finishes
  says why at once (`stop_text`).
- Lecture moves: `forward`, `back`, `first`, `last` move the view a round (forward past the last
  round shown decodes the next one); `decode_ahead` keeps rounds decoded beyond the view (as
  background jobs) while autoplay runs, so the display's pace does not wait for the model. Rounds
  decoded ahead, or by other sessions on the link, stay hidden (`visible`) until the view reaches
  them.
- Every session gets this machine's saved latency profile (`profile=`): settings that size trees
  from a profile are refused with a clear message when none is saved, never measured here.
- `open_at` replays a run up to a round (Failure cases opens its cases this way); replays give the
  same rounds, because decisions read only the saved profile.
- `numbers` are the counters for the rounds up to the one on view: tokens, tau, waste, stage
  shares, the modelled speed-up under a named profile and the measured one with its spread. The
  AR baseline it divides by (the run's, shared like its rounds) is decoded a few steps at once and
  the rest in the background after the page has drawn (`catch_up_later`), off a Step click's path.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable, Sequence

from ..config import DecodeConfig
from ..eval.metrics import summarize
from ..pair import ModelPair
from ..record import Round
from ..session import DecodeSession
from .app_state import ArBaseline, SavedRun, check_profile, load_run, metrics_csv, run_json
from .lesson import round_text
from .serve import LinkRun, SharedRuns, run_key, shared_runs
from .speed import StepSpeed, step_speed

AR_NOW = 8                     # AR steps decoded on a click's path at most (the rest: catch_up_later)
STOP_WORDS = {"end of text": "the target accepted the end-of-text token",
              "max new tokens": "it reached Max new tokens",
              "context length": "the model's context is full"}


def saved_config(saved: SavedRun) -> DecodeConfig | None:
    """A saved run's settings as a DecodeConfig (None when the file's settings are not all ours)."""
    names = {f.name for f in fields(DecodeConfig)}
    try:
        return DecodeConfig(**{k: v for k, v in saved.config.items() if k in names})
    except TypeError:
        return None


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


def step_numbers(rounds: Sequence[Round], ar_rounds: Sequence[Round] = (), model_profile=None) -> StepNumbers:
    """The Step page's counters over `rounds` (a run's rounds up to the one on view), as
    `StepController.numbers` and the offline lecture file (`lecture_file`) show them. `ar_rounds`:
    the AR baseline's rounds as decoded, one token each (the first as many as `rounds` committed
    are used; none for a saved run)."""
    rounds = list(rounds)
    summary = summarize(rounds)
    ar = list(ar_rounds)[: max(summary.new_tokens, 1)] if rounds else []
    last = rounds[-1] if rounds else None
    return StepNumbers(rounds=summary.rounds, tokens=summary.new_tokens, tau_round=last.tau if last else 0,
                       tau_mean=summary.tau, verified_round=last.verified_nodes if last else 0,
                       waste_share=summary.waste_share, stage_shares=summary.stage_shares,
                       speed=step_speed(rounds, ar, model_profile, summary.new_tokens if ar else 0))


Waiting = Callable[[int], None] | None      # told the jobs ahead of this page's, while it waits


class StepController:
    def __init__(self, runs: SharedRuns | None = None) -> None:
        self.runs = runs                 # None: the process's runs, shared by link (`shared_runs`)
        self.run: LinkRun | None = None
        self.saved: SavedRun | None = None
        self.profile = None
        self.view = 0                  # the round on view, numbered from 1 (0: none yet)
        self.revealed = 0              # the last round shown so far; rounds after it were decoded ahead
        self._ahead: threading.Thread | None = None
        self._ar_thread: threading.Thread | None = None
        # bumped whenever the code (not the page's round slider) moves the view, so the page can
        # key its slider by it: a new slider starts at the new round, and a browser still holding
        # the old slider's value cannot pull the view back to an older round
        self.view_version = 0
        # held by a page run while it steps or draws this controller: two script runs of one
        # browser session can overlap (a rerun may start before the previous run has stopped),
        # and a run must not draw a run that another is still stepping
        self.lock = threading.RLock()

    @property
    def session(self) -> DecodeSession | None:
        """The live run's decoding session (shared with the other sessions on its link)."""
        return self.run.session if self.run is not None else None

    @property
    def baseline(self) -> ArBaseline | None:
        return self.run.baseline if self.run is not None else None

    # ------------------------------------------------------------------ what is on view
    @property
    def rounds(self) -> list[Round]:
        if self.saved is not None:
            return self.saved.rounds
        return self.session.rounds if self.session is not None else []

    @property
    def visible(self) -> list[Round]:
        """The rounds shown so far (a live run's rounds decoded ahead of the view are not)."""
        if self.saved is not None:
            return self.saved.rounds
        return self.rounds[: self.revealed]

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
        """Whether the live run has finished and its last round has been shown."""
        return self.live and self.session.finished and self.revealed >= len(self.session.rounds)

    def stop_text(self) -> str:
        """Why the live run stopped, in words ("" while it runs)."""
        if not self.finished:
            return ""
        why = STOP_WORDS.get(self.session.stop_reason, self.session.stop_reason)
        return f"Finished after {len(self.session.rounds)} rounds: {why}."

    def candidates(self, record: Round):
        """The candidates view of a live run's round (`taps.studio.candidates`): the other selectors run
        from its position with the run's settings and latency profile. A ValueError for a saved run
        (its decoding state is not here)."""
        from .candidates import candidates_view

        session = self.session
        if self.saved is not None or session is None:
            raise ValueError("the candidates view runs the other selectors from the round's position, so it needs a "
                             "live run: press Step (a saved run's rounds show in the other views)")
        return candidates_view(session.pair, record, list(session.tokens), len(session.prompt_ids), session.config,
                               self.visible, profile=self.profile)

    def record(self) -> Round | None:
        """The round on view."""
        rounds = self.visible
        if not rounds:
            return None
        self.view = min(max(self.view, 1), len(rounds))
        return rounds[self.view - 1]

    def matches(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None) -> bool:
        """Whether the live run is this link's: the same pair, prompt, settings and (where trees are
        sized from one) profile."""
        if self.run is None or self.saved is not None or self.session.pair is not pair:
            return False
        try:
            ids = pair.tokenizer.encode(prompt, add_special_tokens=False)
        except Exception:  # noqa: BLE001 - any tokenizer failure means "not the same prompt"
            return False
        return run_key(pair, ids, config, profile) == self.run.key

    # ------------------------------------------------------------------ actions
    def start(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, on_wait: Waiting = None) -> None:
        """This link's run (with its AR baseline) from round 0: opened, or shared with the sessions
        that opened it before. Raises ValueError (bad settings, no profile where one is needed) or
        RuntimeError with the message to show; the previous run then stays as it was."""
        config.validate(pair)
        check_profile(config, profile)
        runs = self.runs if self.runs is not None else shared_runs()
        self.run = runs.open(pair, prompt, config, profile, on_wait=on_wait)
        self.saved, self.profile = None, profile
        self.revealed = 0
        self.show(0)

    def continues_saved(self, pair: ModelPair, prompt: str, config: DecodeConfig) -> bool:
        """Whether the saved run on view is one this pair can continue live with these settings and
        prompt (the page puts a loaded run's settings and prompt in its widgets)."""
        saved = self.saved
        if saved is None or saved.pair_name != pair.name or saved.prompt != prompt:
            return False
        own = pair.drafter.block_size if pair.drafter is not None else None
        settings = saved_config(saved)
        if settings is None:
            return False
        return replace(settings, block_size=settings.block_size or own) == replace(config,
                                                                                 block_size=config.block_size or own)

    def what_next_step_does(self, pair: ModelPair, prompt: str, config: DecodeConfig | None, profile=None) -> str:
        """What the next Step will do to the run on view, said before it happens ("" when it steps it)."""
        if self.saved is not None:
            if config is not None and self.continues_saved(pair, prompt, config):
                return (f"The next **Step** continues this saved run live: it replays its {len(self.saved.rounds)} "
                        "rounds here with its settings and prompt, then decodes the next one.")
            why = (f"it was decoded by the pair {self.saved.pair_name}, not {pair.name}"
                   if self.saved.pair_name != pair.name else "the prompt or settings above differ from the run's")
            return f"The next **Step** starts a new run from round 1 ({why}); this saved run is then closed."
        if self.live and config is not None and not self.matches(pair, prompt, config, profile):
            return "Settings or prompt changed: the next **Step** starts a new run."
        return ""

    def advance(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, rounds: int | None = 1,
                on_round: Callable[[DecodeSession], None] | None = None, on_wait: Waiting = None) -> str:
        """Show `rounds` more rounds (None: to the end), decoding those the run does not have yet
        and opening this link's run first when needed (continuing a saved run of these settings).
        Returns a notice for the page ("" when there is none); raises like `start`."""
        notice = ""
        if not self.matches(pair, prompt, config, profile):
            if self.saved is not None and self.continues_saved(pair, prompt, config):
                count = len(self.saved.rounds)
                notice = self._continue_saved(pair, prompt, config, profile, count, on_round, on_wait)
            else:
                had_run = self.run is not None or self.saved is not None
                self.start(pair, prompt, config, profile, on_wait)
                if had_run:
                    notice = "Settings or prompt changed: started a new run."
        session = self.session
        if self.finished:
            return f"This run has finished ({STOP_WORDS.get(session.stop_reason, session.stop_reason)}). " \
                   "Press **Reset** to start again."
        with self.lock:
            target = None if rounds is None else self.revealed + rounds
            self.run.ensure(target, on_wait=on_wait, on_round=on_round)
            self.show(len(session.rounds) if target is None else min(target, len(session.rounds)))
        if self.finished:
            notice = " ".join(part for part in (notice, self.stop_text()) if part)
        return notice

    def _continue_saved(self, pair, prompt, config, profile, count, on_round, on_wait) -> str:
        saved = self.saved
        self.open_at(pair, prompt, config, profile, count, on_round, on_wait)
        same = [(r.selected, r.committed_tokens) for r in self.session.rounds] == \
               [(r.selected, r.committed_tokens) for r in saved.rounds]
        if same:
            return f"Continuing the saved run live: its {count} rounds replayed here, the same rounds."
        return (f"Continuing the saved run live: its {count} rounds replayed here came out different (another "
                "latency profile or machine sizes the trees differently); the rounds on view are this replay's.")

    # ------------------------------------------------------------------ lecture moves
    def forward(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, on_wait: Waiting = None) -> str:
        """The next round: the one after the view when it was shown already, else one more decoded
        (as Step does). Returns advance's notice."""
        if self.view < len(self.visible):
            self.show(self.view + 1)
            return ""
        return self.advance(pair, prompt, config, profile, 1, on_wait=on_wait)

    def back(self) -> None:
        self.show(max(self.view - 1, 1) if self.visible else 0)

    def first(self) -> None:
        self.show(1 if self.visible else 0)

    def last(self) -> None:
        self.show(len(self.visible))

    def decode_ahead(self, count: int = 2) -> threading.Thread | None:
        """Keep up to `count` rounds decoded beyond the last one shown, as background jobs of the
        decode service, from a thread of this controller's (the page does not wait for it). Returns
        the thread (None when nothing needs decoding)."""
        run = self.run
        if not self.live or run.session.finished or len(run.rounds) >= self.revealed + count:
            return None
        if self._ahead is not None and self._ahead.is_alive():
            return self._ahead
        goal = self.revealed + count
        self._ahead = threading.Thread(target=run.ensure, args=(goal,), kwargs={"background": True},
                                       name="taps-decode-ahead", daemon=True)
        self._ahead.start()
        return self._ahead

    def open_at(self, pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, number: int = 1,
                on_round: Callable[[DecodeSession], None] | None = None, on_wait: Waiting = None) -> None:
        """This link's run from its start, decoded (where it is not yet) up to round `number` (or
        its end), that round on view."""
        with self.lock:
            self.start(pair, prompt, config, profile, on_wait)
            self.run.ensure(number, on_wait=on_wait, on_round=on_round)
            self.show(min(number, len(self.session.rounds)))

    def load(self, data: bytes | str) -> None:
        """View a saved run (ValueError says why a file is not one); the live run is kept aside."""
        self.saved = load_run(data)
        self.show(len(self.saved.rounds))

    def show(self, number: int) -> None:
        """Put round `number` on view (0: none); it and the rounds before it count as shown."""
        self.view = number
        self.revealed = max(self.revealed, number)
        self.view_version += 1

    # ------------------------------------------------------------------ counters and files
    def numbers(self, model_profile=None) -> StepNumbers:
        """Counters over the rounds up to the one on view."""
        rounds = self.visible[: max(self.view, 0)]
        live = self.live and self.baseline is not None and rounds
        return step_numbers(rounds, self._ar_rounds(summarize(rounds).new_tokens) if live else [], model_profile)

    def _ar_rounds(self, tokens: int) -> list[Round]:
        """The AR steps for the first `tokens` tokens, as far as decoded: at least AR_NOW of them at
        once (the median AR step the measured speed-up divides by settles within a few), the rest
        by `catch_up_later` once the page has drawn, off the click's path."""
        decoded = self.baseline.session.rounds
        if len(decoded) < min(tokens, AR_NOW):
            self.run.catch_up_baseline(min(tokens, AR_NOW))
        return decoded[:max(tokens, 1)]

    def catch_up_later(self, delay_s: float = 0.3) -> threading.Thread | None:
        """Decode the run's AR baseline up to the tokens shown, as background jobs of the decode
        service, from a thread of this controller's that starts after `delay_s` (the browser draws
        the page meanwhile, so its steps are not timed against it)."""
        run = self.run
        if not self.live or run.baseline.session.finished or \
                len(run.baseline.session.generated) >= len(run.session.generated):
            return None
        if self._ar_thread is not None and self._ar_thread.is_alive():
            return self._ar_thread

        def work() -> None:
            time.sleep(delay_s)
            run.catch_up_baseline(len(run.session.generated), background=True)

        self._ar_thread = threading.Thread(target=work, name="taps-ar-catch-up", daemon=True)
        self._ar_thread.start()
        return self._ar_thread

    def spans(self) -> list[dict]:
        """The generated text, one piece per round, for the clickable text."""
        return [{"number": r.number, "tau": r.tau, "text": round_text(r)} for r in self.visible]

    def run_file(self, pair_name: str) -> str:
        if self.saved is not None:
            saved = self.saved
            return run_json(saved.rounds, prompt=saved.prompt, pair_name=saved.pair_name, config=saved.config,
                            text=saved.text)
        rounds = self.visible
        text = "".join(round_text(r) for r in rounds) if len(rounds) < len(self.rounds) else self.session.text
        return run_json(rounds, prompt=self.prompt_text, pair_name=pair_name, config=self.session.config, text=text)

    def metrics_file(self) -> str:
        return metrics_csv(self.visible)
