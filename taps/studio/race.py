"""The side-by-side race (plain Python, no streamlit): AR, DFlash, DDTree and TAPS (and the oracle,
at temperature 0 only) decode one prompt with the same settings, once; then a CLOCK replays their
rounds together. It is the app's one race path: the lanes (`decode_race`), the repeated race and
the sweep over budgets (`repeated_race`, `sweep`) all plan their runs with `race_jobs` or
`plan_jobs`, check them once (`check_runs`) and run them through `taps.eval.runner.run_prompt`.

- *modelled* clock (the default, deterministic): each round of a lane lasts what the page's latency
  profile says it costs, `profile.round_time(run label, verified nodes)` (an AR round: the profile's
  AR step), exactly what the modelled speed-up prices;
- *measured* clock: each round lasts the seconds it took here (one decode: noisy).

`Race.lanes_at(t)` is every lane at clock time t (tokens committed by rounds that ended by t, the
text so far, the last finished round, τ, nodes verified and waste so far); `Race.results()` is the
finish table: speed-up = τ × t_AR / t_round (mean round times), equal to the ratio of finish times
when the lanes write the same tokens. `Replay` is the replay's clock; `lane_html` and `clock_html`
draw a lane and the clock. Captions (`race_caption`, `sweep_caption`) are written from those numbers
only: two figures closer than the clock's noise are a tie, and a curve is said to peak only where
it turns down.

The race's link is `taps.studio.link`'s (`parse_race_link`, `race_link_params`).
"""

from __future__ import annotations

import bisect
import html
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from ..batch import PLANS, BatchSession
from ..batch_cost import of_profile, step_seconds
from ..config import DecodeConfig, check_value, run_label
from ..eval.metrics import modelled_round_s
from ..eval.runner import Job, plan_jobs, run_prompt, runnable_selectors, warm_up
from ..pair import ModelPair
from ..policies import AR, DDTREE, DFLASH, DFLASH2, ORACLE, TAPS, policy
from ..record import Round
from ..session import DecodeSession
from ..verdict import lossless_verdict
from .app_state import check_profile
from .link import CLOCKS
from .speed import MIN_REPEATS, compact_rounds, profile_name, validate_repeats

RACE_SELECTORS = (DFLASH.name, DDTREE.name, TAPS.name)   # AR always runs first; DFlash2 and the oracle on request
DEFAULT_NEW_TOKENS = 64
TIE = {"modelled": 0.02, "measured": 0.10}    # relative gap below which two speed-ups are a tie
SAME = 0.03                                    # relative gap below which two τ are "the same"
FEWER = 0.05                                   # relative gap in nodes per round worth naming
FLAT = 0.01                                    # a modelled curve moving less than this is flat
PACES = {"slow": 20.0, "normal": 10.0, "fast": 4.0}   # seconds the whole replay takes


# ---------------------------------------------------------------------------- decoding the lanes
@dataclass
class Lane:
    """One method's run: its rounds and the generated text after each of them."""

    selector: str
    estimator: str
    budget: int
    rounds: list[Round]
    texts: list[str]
    lossless: bool
    verdict: str = "yes"             # taps.verdict's text: "yes", "near-tie at token 38 (...)", "NO: bug at ..."
    verdict_detail: str = ""
    # a race at a batch (`decode_batch_race`): the lane's batch plan (None: its selector alone), and
    # per round the batched step it was part of, (requests in it, the forward's width, whether it
    # drafted), and that step's wall-clock seconds here
    plan: str | None = None
    steps: list[tuple[int, int, bool]] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)

    @property
    def run(self) -> str:
        """The run label its rounds are priced by (`taps/online`, `ddtree`, `ar`), as tables and
        profiles name it."""
        return run_label(self.selector, self.estimator)

    @property
    def label(self) -> str:
        """The lane's own label: its run label, and its batch plan after a + (`taps/online+taps-batch`)."""
        return f"{self.run}+{self.plan}" if self.plan else self.run

    @property
    def name(self) -> str:
        """The method's name for people (`TAPS`, `TAPS (batch-aware)`)."""
        return PLANS[self.plan] if self.plan else policy(self.selector).label

    @property
    def tokens(self) -> int:
        return sum(r.tau for r in self.rounds)


@dataclass
class Decoded:
    """Every lane of one race, decoded once (the clock is applied afterwards)."""

    prompt: str
    config: DecodeConfig
    lanes: list[Lane]
    batch: int = 1                   # requests decoded together; each lane shows the first, `prompt`
    companions: list[str] = field(default_factory=list)      # the batch's other prompts


def _jobs(selectors: Sequence[str], config: DecodeConfig) -> list[Job]:
    """One job per tree selector that can run at the config's temperature (the oracle is greedy
    only), at the config's budget; TAPS with the config's estimator."""
    return [Job(name, config.estimator if policy(name).uses_estimator else "marginal", config.budget)
            for name in runnable_selectors(selectors, config.temperature)]


def race_jobs(config: DecodeConfig, oracle: bool = False, dflash2: bool = False) -> list[Job]:
    """DFlash, DDTree and TAPS (DFlash2 after DFlash when asked for; the oracle last when asked for
    and the race is greedy) at the config's budget; TAPS with the config's estimator."""
    chosen = [DFLASH.name, *([DFLASH2.name] if dflash2 else []), *RACE_SELECTORS[1:]]
    return _jobs([*chosen, *([ORACLE.name] if oracle else [])], config)


def check_runs(pair: ModelPair, prompt: str, config: DecodeConfig, jobs: Sequence[Job], profile) -> None:
    """Every run of a race or sweep checked once, before anything decodes: a prompt, each job's
    settings on this pair (`DecodeConfig.validate`), and a latency profile wherever one sizes the
    trees. A ValueError with the engine's (or the app's) message otherwise."""
    if not prompt or not prompt.strip():
        raise ValueError("the prompt is empty: type one or pick an example")
    for job in jobs:
        settings = job.settings(config)
        settings.validate(pair)
        check_profile(settings, profile)


def decode_race(pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, oracle: bool = False,
                on_round: Callable[[str, int, int], None] | None = None, warm: bool = True,
                dflash2: bool = False) -> Decoded:
    """AR, then each method, on `prompt` with the same settings (`taps.eval.runner.run_prompt`, as
    the repeated race): every lane's rounds and its text after each round. `on_round(label, tokens
    so far, lanes done)` after each round (a progress bar). Raises ValueError for settings the pair
    or the profile cannot run (checked before anything decodes)."""
    jobs = race_jobs(config, oracle, dflash2)
    check_runs(pair, prompt, config, jobs, profile)
    if warm:
        warm_up(pair, config, jobs, profile)
    texts: dict[str, list[str]] = {}
    done = [0]

    def record(job: Job, session: DecodeSession, _round: Round) -> None:
        texts.setdefault(job.label, []).append(session.text)
        if on_round is not None:
            on_round(job.label, len(session.generated), done[0])
        if session.finished:
            done[0] += 1

    rows = run_prompt(pair, {"id": "race", "prompt": prompt}, jobs, config, profile=profile, on_round=record,
                      keep_rounds=True)
    lanes = []
    for job, row in zip([None, *jobs], rows):
        label = job.label if job is not None else AR.run_label(budget=None)
        lanes.append(Lane(selector=row.selector, estimator=row.estimator, budget=row.budget,
                          rounds=[Round.from_dict(r) for r in row.round_records], texts=texts.get(label, []),
                          lossless=row.lossless, verdict=row.verdict, verdict_detail=row.verdict_detail))
    return Decoded(prompt=prompt, config=config, lanes=lanes)


# ---------------------------------------------------------------------------- a race at a batch
def batch_companions(prompt: str, examples: Sequence[dict], batch: int) -> list[str]:
    """The other requests of a race at `batch`: the first batch - 1 example prompts that are not the
    race's own, in the examples' order (the same batch-mates on every machine and every visit)."""
    others = [e["prompt"] for e in examples if e["prompt"] != prompt]
    if not 1 <= batch <= len(others) + 1:
        raise ValueError(f"a race at a batch takes its other requests from the {len(examples)} example prompts: "
                         f"choose 1 to {len(others) + 1} requests, not {batch}")
    return others[:batch - 1]


def decode_batch_race(pair: ModelPair, prompt: str, config: DecodeConfig, companions: Sequence[str], profile=None,
                      oracle: bool = False, dflash2: bool = False,
                      on_round: Callable[[str, int, int], None] | None = None, warm: bool = True,
                      plans: Sequence[str] = ("taps-batch",)) -> Decoded:
    """The race's lanes with `prompt` in a batch with `companions` (`taps.batch.BatchSession`: one
    target forward verifies every request's tree): AR, each method at the config's budget, and the
    batch `plans` (`taps.batch.PLANS`; batch-aware TAPS by default: one width for the whole forward,
    sized from the profile's verify cost at a batch). Every lane shows the first request, `prompt`;
    each of its rounds keeps the batched step it was part of, so the clock prices it as that whole
    step (every request's round costs and one forward). Each lane's tokens are checked against AR's,
    as in the race. Raises ValueError for settings the pair or the profile cannot run (checked
    before anything decodes)."""
    jobs = race_jobs(config, oracle, dflash2)
    check_runs(pair, prompt, config, jobs, profile)
    if of_profile(profile) is None:
        raise ValueError(f"a race at a batch sizes batch-aware TAPS and prices its steps with the verify cost at a "
                         f"batch, and {_named(profile)} has none: pick the shipped reference profile or a "
                         f"roofline one, or measure this machine's with `python -m taps.bench --batch 1 --measure`")
    if warm:
        warm_up(pair, config, jobs, profile)
    prompts = [prompt, *companions]
    runs = [(config.with_run(AR.name), None), *((job.settings(config), None) for job in jobs),
            *((replace(config, selector=TAPS.name, taps_mode="reach"), plan) for plan in plans)]
    lanes: list[Lane] = []
    first_ar = None
    for settings, plan in runs:
        batch = BatchSession(pair, prompts, settings, profile=profile, plan=plan)
        first = batch.requests[0]
        lane = Lane(selector=settings.selector, estimator=settings.estimator, budget=settings.budget, rounds=[],
                    texts=[], lossless=True, plan=plan)
        while not first.finished:
            batch.step()
            lane.steps.append((*batch.widths[-1], batch.drafted[-1]))
            lane.step_s.append(batch.step_s[-1])
            lane.texts.append(first.text)
            if on_round is not None:
                on_round(lane.label, len(first.generated), len(lanes))
        lane.rounds = list(first.rounds)
        first_ar = first_ar or first
        verdict = lossless_verdict(pair, first.prompt_ids, first.generated, first_ar.generated, settings.temperature,
                                   settings.seed, run_rounds=first.rounds, ar_rounds=first_ar.rounds)
        lane.lossless, lane.verdict, lane.verdict_detail = verdict.same, verdict.text, verdict.detail
        lanes.append(lane)
    return Decoded(prompt=prompt, config=config, lanes=lanes, batch=len(prompts), companions=list(companions))


def _named(profile) -> str:
    return f"the {profile_name(profile)}" if profile is not None else "no latency profile"


BATCH_SWEEP_PLANS = ("taps-batch", "chain-batch")
CHAINS = (DFLASH.label, DFLASH2.label, PLANS["chain-batch"])
TREES = (DDTREE.label, TAPS.label, PLANS["taps-batch"])


def batch_sweep(pair: ModelPair, prompt: str, config: DecodeConfig, examples: Sequence[dict], batches: Sequence[int],
                profile=None, price=None, on_result: Callable[[int, int, str], None] | None = None) -> list[dict]:
    """The race at each number of requests in `batches` (its batch-mates from `examples`,
    `batch_companions`), with both batch plans as lanes: one row per batch and lane, the first
    request's τ, nodes per round and speed-up over AR in the same batch, on the modelled clock of
    `price` (else `profile`, which sizes the trees) and measured here (one decode).
    `on_result(lanes done, lanes in all, what)` after every lane's round (a progress bar)."""
    if not batches:
        raise ValueError("pick at least one batch size")
    for batch in batches:
        batch_companions(prompt, examples, batch)                  # every size checked before anything decodes
    lanes = 1 + len(race_jobs(config)) + len(BATCH_SWEEP_PLANS)
    total, rows = lanes * len(batches), []
    for n, batch in enumerate(batches):
        tick = None
        if on_result is not None:
            def tick(label: str, tokens: int, done: int, n=n, batch=batch) -> None:
                on_result(n * lanes + done, total, f"{batch} request{'s' if batch > 1 else ''} · {label}")
        decoded = decode_batch_race(pair, prompt, config, batch_companions(prompt, examples, batch), profile=profile,
                                    on_round=tick, warm=n == 0, plans=BATCH_SWEEP_PLANS)
        modelled = on_clock(decoded, "modelled", price or profile).results()
        measured = on_clock(decoded, "measured").results()
        for lane, model, wall in zip(decoded.lanes, modelled, measured):
            rows.append({"requests in a batch": batch, "method": lane.name, "run": lane.label,
                         "τ": model["τ"], "verified / round": model["verified / round"],
                         "speed-up (modelled)": model["speed-up"],
                         "speed-up (measured, one decode)": wall["speed-up"],
                         "steps that drafted": round(sum(d for *_, d in lane.steps) / max(len(lane.steps), 1), 2),
                         "same text as AR": lane.verdict})
    return rows


def batch_sweep_series(rows: Sequence[dict]) -> tuple[dict, dict, tuple]:
    """`batch_figure`'s series (each method's modelled speed-up against the batch, AR left out), the
    policy each method's colour is (the confidence chain DFlash's) and the dashed ones (the plans)."""
    series: dict[str, list[tuple[int, float]]] = {}
    colours: dict[str, str] = {}
    for row in rows:
        if _policy_of(row).baseline:
            continue
        series.setdefault(row["method"], []).append((row["requests in a batch"], row["speed-up (modelled)"]))
        colours[row["method"]] = (DFLASH.run_label() if row["run"].endswith("+chain-batch")
                                  else row["run"].split("+")[0])
    return series, colours, tuple(PLANS[plan] for plan in BATCH_SWEEP_PLANS)


def batch_sweep_caption(rows: Sequence[dict]) -> str:
    """The batch sweep in sentences from its (rounded, modelled) numbers: the fastest method at each
    batch, where each tree selector falls below the best chain, whether batch-aware TAPS stays at or
    above AR, and from which batch nothing speculative beats AR."""
    batches = sorted({row["requests in a batch"] for row in rows})
    if not batches:
        return ""
    at = {b: [r for r in rows if r["requests in a batch"] == b and not _policy_of(r).baseline] for b in batches}
    fastest = []
    for batch in batches:
        top = max(at[batch], key=lambda r: r["speed-up (modelled)"])
        fastest.append(f"{batch}: {top['method']} ({top['speed-up (modelled)']:.2f}×)")
    text = "Modelled, the fastest at each batch size: " + "; ".join(fastest) + "."
    below = []
    for name in TREES:
        under = [b for b in batches
                 if (tree := next((r for r in at[b] if r["method"] == name), None)) is not None
                 and any(r["method"] in CHAINS for r in at[b])
                 and tree["speed-up (modelled)"] < max(r["speed-up (modelled)"] for r in at[b] if r["method"] in CHAINS)
                 * (1 - TIE["modelled"])]
        if under:
            below.append(f"{name} at {', '.join(map(str, under))}")
    text += (" Below the best chain (by more than a tie): " + "; ".join(below) + "." if below else
             " No tree selector falls below the best chain by more than a tie.")
    plan = PLANS["taps-batch"]
    planned = {b: r["speed-up (modelled)"] for b in batches for r in at[b] if r["method"] == plan}
    under = [b for b, speed in planned.items() if speed < 1.0 - TIE["modelled"]]
    if planned:
        text += (f" {plan} falls below AR at {', '.join(map(str, under))}." if under else
                 f" {plan} stays at or above AR at every batch size (within a tie): where drafting would not "
                 "pay, its steps are AR's own, with no drafter work.")
    losing = [b for b in batches if all(r["speed-up (modelled)"] < 1.0 for r in at[b])]
    if losing:
        plural = "s" if losing[-1] > 1 else ""
        text += f" Nothing speculative beats AR at {', '.join(map(str, losing))} request{plural}."
    return text


# ---------------------------------------------------------------------------- repeated: the race and the sweep
def _repeat(pair: ModelPair, prompt: str, prompt_id: str, config: DecodeConfig, jobs: list[Job], repeats: int,
            profile, on_round=None, on_result=None) -> list[list[dict]]:
    """AR and every job, `repeats` times over (interleaved: a burst of load hits every run alike);
    per repeat one compacted row per run."""
    warm_up(pair, config)
    out: list[list[dict]] = []
    for n in range(repeats):
        hook = (lambda job, session, record, n=n: on_round(n, job, session, record)) if on_round else None
        done = (lambda row, n=n: on_result(n, row)) if on_result else None
        rows = run_prompt(pair, {"id": prompt_id, "prompt": prompt}, jobs, config, profile=profile, on_round=hook,
                          on_result=done, keep_rounds=True)
        out.append([compact_rounds(row.as_dict()) for row in rows])
    return out


def repeated_race(pair: ModelPair, prompt: str, config: DecodeConfig, selectors: Sequence[str],
                  repeats: int = MIN_REPEATS, profile=None,
                  on_round: Callable[[int, Job, DecodeSession, Round], None] | None = None) -> list[list[dict]]:
    """Each selector on the same prompt and settings, AR first (every speed-up is against it), the
    whole race `repeats` times; `on_round(repeat, job, session, round)` after every round for live
    counters. At T>0 the oracle, defined for greedy decoding only, is left out."""
    repeats = validate_repeats(repeats)
    jobs = _jobs(selectors, config)
    check_runs(pair, prompt, config, jobs, profile)
    return _repeat(pair, prompt, "race", config, jobs, repeats, profile, on_round=on_round)


def sweep(pair: ModelPair, prompt: str, config: DecodeConfig, selectors: Sequence[str], budgets: Sequence[int],
          estimator: str, repeats: int = MIN_REPEATS, profile=None,
          on_result: Callable[[int, int, dict], None] | None = None) -> list[list[dict]]:
    """AR, then every selector x budget on one prompt, `repeats` times (`on_result(done, total, row)`)."""
    repeats = validate_repeats(repeats)
    if not budgets:
        raise ValueError("pick at least one budget")
    for budget in budgets:
        check_value("budget", budget)
    tree_selectors = runnable_selectors(selectors, config.temperature)
    if not tree_selectors:
        raise ValueError("pick at least one tree selector (dflash, ddtree, taps or oracle)")
    jobs: list[Job] = plan_jobs(tree_selectors, sorted(set(budgets)), [estimator])
    check_runs(pair, prompt, config, jobs, profile)
    total = (len(jobs) + 1) * repeats
    done = [0]

    def collect(_repeat_index: int, row) -> None:
        done[0] += 1
        if on_result:
            on_result(done[0], total, row.as_dict())

    return _repeat(pair, prompt, "sweep", config, jobs, repeats, profile, on_result=collect)


# ---------------------------------------------------------------------------- the clock
@dataclass
class LaneState:
    """One lane at a clock time."""

    label: str
    name: str
    rounds_done: int
    tokens: int
    text: str
    tau: float              # tokens per finished round so far
    verified: int           # draft nodes verified so far
    waste: int              # of them, under a rejected prefix
    last: Round | None      # the last finished round (its tree), None before the first ends
    running: int            # the number (from 1) of the round under way; 0 once the lane is done
    finished: bool
    round_share: float      # how far the round under way has got (0..1)


@dataclass
class Race:
    """Decoded lanes on one clock: per lane, each round's duration and end time."""

    decoded: Decoded
    clock: str
    durations: list[list[float]]
    ends: list[list[float]] = field(init=False)

    def __post_init__(self) -> None:
        self.ends = []
        for times in self.durations:
            total, ends = 0.0, []
            for seconds in times:
                total += seconds
                ends.append(total)
            self.ends.append(ends)

    @property
    def lanes(self) -> list[Lane]:
        return self.decoded.lanes

    @property
    def end(self) -> float:
        """When the last lane finishes."""
        return max((ends[-1] for ends in self.ends if ends), default=0.0)

    def finish(self, lane: int) -> float:
        return self.ends[lane][-1] if self.ends[lane] else 0.0

    def next_event(self, t: float) -> float:
        """The first round end after `t` in any lane (the race's end when none is left)."""
        later = [ends[bisect.bisect_right(ends, t)] for ends in self.ends if bisect.bisect_right(ends, t) < len(ends)]
        return min(later, default=self.end)

    def lane_at(self, index: int, t: float) -> LaneState:
        lane, ends = self.lanes[index], self.ends[index]
        done = bisect.bisect_right(ends, t)          # rounds that ended at or before t
        rounds = lane.rounds[:done]
        tokens = sum(r.tau for r in rounds)
        finished = done >= len(ends)
        share = 0.0
        if not finished:
            start = ends[done - 1] if done else 0.0
            share = (t - start) / self.durations[index][done] if self.durations[index][done] > 0 else 0.0
        return LaneState(label=lane.label, name=lane.name, rounds_done=done, tokens=tokens,
                         text=lane.texts[done - 1] if done else "", tau=tokens / done if done else 0.0,
                         verified=sum(r.verified_nodes for r in rounds), waste=sum(r.waste_nodes for r in rounds),
                         last=rounds[-1] if rounds else None, running=0 if finished else done + 1,
                         finished=finished, round_share=min(max(share, 0.0), 1.0))

    def lanes_at(self, t: float) -> list[LaneState]:
        """Every lane at clock time `t` (seconds)."""
        return [self.lane_at(i, t) for i in range(len(self.lanes))]

    def results(self) -> list[dict]:
        """The finish table, one row per lane: τ, the mean round time, the speed-up over AR as τ ×
        t_AR / t_round, nodes verified per round, waste, finish time and whether the text equals
        AR's. Numbers are rounded as shown; captions read these rounded numbers."""
        ar_index = next(i for i, lane in enumerate(self.lanes) if policy(lane.selector).baseline)
        ar_step = _mean(self.durations[ar_index])
        rows = []
        for i, lane in enumerate(self.lanes):
            count = max(len(lane.rounds), 1)
            tau = lane.tokens / count
            round_s = _mean(self.durations[i])
            verified = sum(r.verified_nodes for r in lane.rounds)
            waste = sum(r.waste_nodes for r in lane.rounds)
            rows.append({
                "method": lane.name, "run": lane.label, "budget": "—" if policy(lane.selector).baseline
                else lane.budget, "rounds": len(lane.rounds), "tokens": lane.tokens, "τ": round(tau, 2),
                "t_round (ms)": round(1000 * round_s, 3), "t_AR (ms)": round(1000 * ar_step, 3),
                "speed-up": round(tau * ar_step / round_s, 2) if round_s > 0 else float("nan"),
                "verified / round": round(verified / count, 1), "waste %": round(100 * waste / verified, 1)
                if verified else 0.0, "finish (ms)": round(1000 * self.finish(i), 2),
                "same text as AR": lane.verdict})
        return rows


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def on_clock(decoded: Decoded, clock: str = "modelled", profile=None) -> Race:
    """The decoded lanes on the modelled clock of `profile` or on the measured one."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock '{clock}': choose one of {', '.join(CLOCKS)}")
    if clock == "modelled":
        if profile is None:
            raise ValueError("the modelled clock prices rounds with a latency profile, and none is available: "
                             "pick the measured clock or measure this machine's profile")
        if decoded.batch > 1:
            grid = of_profile(profile)
            if grid is None:
                raise ValueError(f"the modelled clock prices a batch's steps with the verify cost at a batch, and "
                                 f"{_named(profile)} has none: pick the measured clock or a profile that has it")
            durations = [[step_seconds(profile, grid, lane.run, *step) for step in lane.steps]
                         for lane in decoded.lanes]
        else:
            durations = [[modelled_round_s(r, profile) for r in lane.rounds] for lane in decoded.lanes]
    elif decoded.batch > 1:
        durations = [list(lane.step_s) for lane in decoded.lanes]
    else:
        durations = [[r.time_s for r in lane.rounds] for lane in decoded.lanes]
    return Race(decoded, clock, durations)


# ---------------------------------------------------------------------------- the replay
@dataclass
class Replay:
    """Where the replay's clock stands (seconds of the race's clock), whether it plays, and the wall
    clock's reading when it last moved: the page keeps one in its session and drives it."""

    t: float = 0.0
    playing: bool = False
    last_tick: float = 0.0

    def play(self, race: Race | None, now: float) -> None:
        """Play on (from the start again when the race is over)."""
        if race is not None and self.t >= race.end:
            self.t = 0.0
        self.playing, self.last_tick = True, now

    def pause(self) -> None:
        self.playing = False

    def step(self, race: Race | None) -> None:
        """Pause at the next round's end in any lane."""
        if race is not None:
            self.playing, self.t = False, race.next_event(self.t)

    def restart(self) -> None:
        self.playing, self.t = False, 0.0

    def start(self, now: float) -> None:
        """Play a new race from its start."""
        self.t, self.playing, self.last_tick = 0.0, True, now

    def to_end(self, race: Race | None) -> None:
        if race is not None:
            self.playing, self.t = False, race.end

    def advance(self, race: Race, now: float, pace: str) -> bool:
        """While playing, move the clock on by the wall time since the last move, at the pace where
        the whole race takes PACES[pace] seconds; True once it reaches the end (it stops there)."""
        if not self.playing:
            return False
        rate = race.end / PACES.get(pace, PACES["normal"])
        self.t = min(race.end, self.t + (now - self.last_tick) * rate)
        self.last_tick = now
        if self.t >= race.end:
            self.playing = False
            return True
        return False

    def at_end(self, race: Race | None) -> bool:
        return race is not None and not self.playing and self.t >= race.end


# ---------------------------------------------------------------------------- the lanes as HTML
LANE_CSS = """
<style>
.race-lane { border-left: 6px solid var(--lane); padding: 0.1rem 0.5rem; }
.race-lane .head { font-weight: 700; font-size: 1.1rem; }
.race-lane .stats { font-size: 0.95rem; line-height: 1.35; }
.race-lane .text { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace;
  font-size: 0.9rem; line-height: 1.35; height: var(--text-h); overflow: hidden; display: flex; overflow-wrap: anywhere;
  flex-direction: column-reverse; border: 1px solid #ccc; border-radius: 4px; padding: 0.2rem 0.35rem;
  background: #fff; color: #111; margin-top: 0.2rem; }
.race-clock { font-size: 1.05rem; }
</style>
"""


def clock_html(race: Race, t: float) -> str:
    """The replay's clock: where it stands, of how long, on which clock (its numbers in data-t, data-end)."""
    return (f'{LANE_CSS}<div class="race-clock" data-t="{t!r}" data-end="{race.end!r}">clock <b>{1000 * t:.2f} ms</b> '
            f'of {1000 * race.end:.2f} ms · {html.escape(race.clock)}</div>')


def lane_html(lane: LaneState, text_px: int) -> str:
    """One lane at a clock time: its method, round, tokens, τ, nodes verified, waste and text so far,
    in its policy's colour (its tokens in data-tokens)."""
    waste = f"{lane.waste} ({100 * lane.waste / lane.verified:.0f}%)" if lane.verified else "0"
    where = "done" if lane.finished else f"round {lane.running}"
    colour = _policy_of({"run": lane.label}).colour
    return (f'<div class="race-lane" data-lane="{html.escape(lane.label)}" data-tokens="{lane.tokens}" '
            f'style="--lane: {colour}; --text-h: {text_px}px">'
            f'<div class="head">{html.escape(lane.name)} <span style="font-weight:400">· {where}</span></div>'
            f'<div class="stats"><b>{lane.tokens}</b> tokens · τ {lane.tau:.2f}<br>verified {lane.verified} · '
            f'waste {waste}</div><div class="text"><span>{html.escape(lane.text) or "&nbsp;"}</span></div></div>')


def lane_title(lane: LaneState) -> str:
    """A lane's small tree's title: its last finished round."""
    if lane.last is None:
        return "no round finished yet"
    return f"round {lane.last.number}: τ {lane.last.tau}, verified {lane.last.verified_nodes}"


FINISH_DIGITS = {"τ": 2, "speed-up": 2, "t_round (ms)": 3, "t_AR (ms)": 3, "verified / round": 1, "waste %": 1,
                 "finish (ms)": 2}


def finish_table(rows: list[dict]) -> list[dict]:
    """The finish table as the page shows it: every figure at the digits the captions read."""
    return [{**{k: v for k, v in r.items() if k != "run"},
             **{name: f"{r[name]:.{n}f}" for name, n in FINISH_DIGITS.items()}} for r in rows]


def speed_formula(rows: list[dict], clock: str, priced_by: str = "") -> str:
    """The finish table's speed-up, said as a formula with AR's mean round on this clock (and the
    profile that priced it, on the modelled clock)."""
    ar = next(r for r in rows if _policy_of(r).baseline)
    where = f"the {clock} clock" + (f" of the {priced_by}" if clock == "modelled" and priced_by else "")
    return (f"**speed-up = τ × t_AR / t_round**, with t_AR = {ar['t_AR (ms)']:.3f} ms (AR's mean round on {where}) "
            "and t_round each method's mean round: the same as AR's finish time over the method's when both wrote "
            "the same tokens.")


# ---------------------------------------------------------------------------- captions from the data
def _gap(a: float, b: float) -> float:
    """Relative gap between two positive figures (of the larger)."""
    top = max(abs(a), abs(b))
    return abs(a - b) / top if top > 0 else 0.0


def _speed_sentence(rows: list[dict], clock: str) -> str:
    trees = sorted((r for r in rows if not _policy_of(r).baseline and not _policy_of(r).hindsight),
                   key=lambda r: -r["speed-up"])
    if not trees:
        return ""
    best = trees[0]
    tied = [r for r in trees[1:] if _gap(r["speed-up"], best["speed-up"]) <= TIE[clock]]
    where = f"on the {clock} clock"
    if tied:
        names = [best, *tied]
        listed = ", ".join(f"{r['method']} {r['speed-up']:.2f}×" for r in names)
        return (f"Here {_and([r['method'] for r in names])} tie {where} ({listed}: within "
                f"{100 * TIE[clock]:.0f}% of each other)")
    second = trees[1] if len(trees) > 1 else None
    text = f"{best['method']} is fastest {where} at {best['speed-up']:.2f}× AR"
    if second is not None:
        text += f", ahead of {second['method']} at {second['speed-up']:.2f}×"
    return text


def _policy_of(row: dict):
    return policy(row["run"].split("/")[0])


def _oracle_sentence(rows: list[dict]) -> str:
    bound = next((r for r in rows if _policy_of(r).hindsight), None)
    if bound is None:
        return ""
    return (f"{_policy_of(bound).in_prose()}, which knows the target's tokens in hindsight, reaches "
            f"{bound['speed-up']:.2f}× (τ {bound['τ']:.2f})")


def _nodes_sentence(rows: list[dict]) -> str:
    mine = next((r for r in rows if _policy_of(r) is TAPS), None)
    other = next((r for r in rows if r["run"] == DDTREE.name), None)
    if mine is None or other is None or not other["verified / round"]:
        return ""
    nodes, theirs = mine["verified / round"], other["verified / round"]
    share = round(100 * (theirs - nodes) / theirs)
    tau = (f"for the same τ ({mine['τ']:.2f})" if _gap(mine["τ"], other["τ"]) <= SAME else
           f"for τ {mine['τ']:.2f} against {other['τ']:.2f}")
    head = f"at budget {mine['budget']} {TAPS.label} verifies"
    if share / 100 > FEWER:
        return f"{head} {share}% fewer nodes per round than {DDTREE.label} ({nodes:.1f} against {theirs:.1f}) {tau}"
    if -share / 100 > FEWER:
        return f"{head} {-share}% more nodes per round than {DDTREE.label} ({nodes:.1f} against {theirs:.1f}) {tau}"
    return f"{head} about as many nodes per round as {DDTREE.label} ({nodes:.1f} against {theirs:.1f}) {tau}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def race_caption(rows: list[dict], clock: str = "modelled", priced_by: str = "") -> str:
    """What the finish table shows, in sentences built from its (rounded) numbers only; on the
    modelled clock, the profile that `priced_by` names."""
    parts = [s for s in (_speed_sentence(rows, clock), _nodes_sentence(rows), _oracle_sentence(rows)) if s]
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    text += _lossless_sentence(rows)
    if clock == "measured":
        text += " The measured clock is one decode on this machine: read small gaps as noise."
    elif priced_by:
        text += f" The modelled clock's round times: the {priced_by}."
    return text[0].upper() + text[1:]


def _lossless_sentence(rows: list[dict]) -> str:
    """Which lanes wrote other text than AR, and why (each row's "same text as AR": the verdict
    text, or a bare True/False): a near-tie that low-precision rounding decided is said apart."""
    verdicts = {r["method"]: r["same text as AR"] for r in rows if r["same text as AR"] not in (True, "yes")}
    ties = [m for m, v in verdicts.items() if str(v).startswith("near-tie")]
    lost = [m for m in verdicts if m not in ties]
    if not verdicts:
        return " Every lane wrote the same text as AR."
    text = ""
    if lost:
        why = [str(verdicts[m]) for m in lost if isinstance(verdicts[m], str)]
        text += f" Not lossless here: {_and(lost)} wrote other text than AR" + (f" ({'; '.join(why)})" if why else "")
        text += "."
    if ties:
        text += (f" {_and(ties)} left AR's text at a near-tie ({'; '.join(str(verdicts[m]) for m in ties)}): two "
                 f"tokens within rounding of each other, which a tree forward and an AR step round differently "
                 f"in low precision; not a bug (rerun in float32 for a strict check).")
    return text


def curve_shape(points: Sequence[tuple[int, float]]) -> str:
    """How a modelled speed-up curve over budgets behaves, in words, from its points only:
    "still rising at 64", "peaks at 16 (1.40×), then falls to 1.21× at 64", "flat from 16"."""
    points = sorted((b, v) for b, v in points if v == v)
    if not points:
        return "not priced (no latency profile)"
    if len(points) == 1:
        return f"one budget tried ({points[0][0]}: {points[0][1]:.2f}×)"
    top = max(v for _, v in points)
    peak = next(b for b, v in points if v == top)
    last_budget, last = points[-1]
    level = next(b for b, v in points if v >= top * (1 - FLAT))        # the first budget within FLAT of the top
    if peak == last_budget:
        before = points[-2][1]
        if last > before * (1 + FLAT):
            return f"still rising at the largest budget tried ({last_budget}: {last:.2f}×)"
        return f"levels off from {level} ({top:.2f}×)"
    if last >= top * (1 - FLAT):
        return f"flat from {level} ({top:.2f}×)"
    return f"peaks at {peak} ({top:.2f}×), then falls to {last:.2f}× at {last_budget}"


def sweep_caption(summary: Sequence[dict], best: Sequence[dict]) -> str:
    """The sweep in sentences from its numbers: where each modelled curve peaks (or that it still
    rises), and which measured best budgets stand above the noise."""
    labels = sorted({row["label"] for row in summary if not policy(row["selector"]).baseline})
    if not labels:
        return ""
    shapes = []
    for label in labels:
        points = [(row["budget"], row["modelled_speedup"]) for row in summary if row["label"] == label]
        shapes.append(f"{label} {curve_shape(points)}")
    text = "Modelled speed-up against budget: " + "; ".join(shapes) + "."
    clear = [row for row in best if row["clear"]]
    noisy = [row["selector"] for row in best if not row["clear"] and row.get("tied")]
    if clear:
        text += " Measured best budget above the noise: " + ", ".join(
            f"{row['selector']} {row['best budget (measured)']}" for row in clear) + "."
    if noisy:
        text += f" Measured: the budgets of {_and(noisy)} are within noise of each other (no best named)."
    return text
