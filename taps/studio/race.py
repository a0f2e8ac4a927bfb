"""The side-by-side race (plain Python, no streamlit): AR, DFlash, DDTree and TAPS (and the oracle,
at temperature 0 only) decode one prompt with the same settings, once; then a CLOCK replays their
rounds together.

- *modelled* clock (the default, deterministic): each round of a lane lasts what the named latency
  profile says it costs, `profile.round_time(run label, verified nodes)` (an AR round: the profile's
  AR step), exactly what the modelled speed-up prices;
- *measured* clock: each round lasts the seconds it took here (one decode: noisy).

`Race.lanes_at(t)` is every lane at clock time t (tokens committed by rounds that ended by t, the
text so far, the last finished round, τ, nodes verified and waste so far); `Race.results()` is the
finish table: speed-up = τ × t_AR / t_round (mean round times), equal to the ratio of finish times
when the lanes write the same tokens. Captions (`race_caption`, `sweep_caption`) are written from
those numbers only: two figures closer than the clock's noise are a tie, and a curve is said to
peak only where it turns down.

The race link (`race_link`, `link_values`) names the prompt (an example's id or the text), budget,
estimator, temperature, clock and latency profile.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..config import DecodeConfig, check_value, run_label
from ..eval.metrics import modelled_round_s
from ..eval.runner import Job, run_prompt, warm_up
from ..pair import ModelPair
from ..policies import AR, DDTREE, DFLASH, ORACLE, TAPS, policy
from ..record import Round
from ..session import DecodeSession
from .link import PROFILE_ID

CLOCKS = ("modelled", "measured")
RACE_SELECTORS = (DFLASH.name, DDTREE.name, TAPS.name)       # AR always runs first; the oracle on request
DEFAULT_NEW_TOKENS = 64
TIE = {"modelled": 0.02, "measured": 0.10}    # relative gap below which two speed-ups are a tie
SAME = 0.03                                    # relative gap below which two τ are "the same"
FEWER = 0.05                                   # relative gap in nodes per round worth naming
FLAT = 0.01                                    # a modelled curve moving less than this is flat
MAX_PROMPT_CHARS = 4000


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

    @property
    def label(self) -> str:
        """The run label (`taps/online`, `ddtree`, `ar`), as tables and profiles name it."""
        return run_label(self.selector, self.estimator)

    @property
    def name(self) -> str:
        """The method's name for people (`TAPS`)."""
        return policy(self.selector).label

    @property
    def tokens(self) -> int:
        return sum(r.tau for r in self.rounds)


@dataclass
class Decoded:
    """Every lane of one race, decoded once (the clock is applied afterwards)."""

    prompt: str
    config: DecodeConfig
    lanes: list[Lane]


def race_jobs(config: DecodeConfig, oracle: bool = False) -> list[Job]:
    """DFlash, DDTree and TAPS (and the oracle when asked for and the race is greedy) at the
    config's budget; TAPS with the config's estimator."""
    names = list(RACE_SELECTORS) + ([ORACLE.name] if oracle and config.temperature == 0 else [])
    return [Job(name, config.estimator if policy(name).uses_estimator else "marginal", config.budget)
            for name in names]


def decode_race(pair: ModelPair, prompt: str, config: DecodeConfig, profile=None, oracle: bool = False,
                on_round: Callable[[str, int, int], None] | None = None, warm: bool = True) -> Decoded:
    """AR, then each method, on `prompt` with the same settings (`taps.eval.runner.run_prompt`, as
    the repeated race): every lane's rounds and its text after each round. `on_round(label, tokens
    so far, lanes done)` after each round (a progress bar). Raises ValueError for settings the pair
    or the profile cannot run (checked before anything decodes)."""
    if not prompt or not prompt.strip():
        raise ValueError("the prompt is empty: type one or pick an example")
    jobs = race_jobs(config, oracle)
    config.with_run(AR.name).validate(pair)
    for job in jobs:
        settings = job.settings(config)
        settings.validate(pair)
        if settings.uses_profile and profile is None:
            raise ValueError(f"{settings.policy.label}'s cost mode sizes its trees from a latency profile, and none "
                             "is available for this pair: pick another TAPS mode or measure one")
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
        durations = [[modelled_round_s(r, profile) for r in lane.rounds] for lane in decoded.lanes]
    else:
        durations = [[r.time_s for r in lane.rounds] for lane in decoded.lanes]
    return Race(decoded, clock, durations)


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


def race_caption(rows: list[dict], clock: str = "modelled") -> str:
    """What the finish table shows, in sentences built from its (rounded) numbers only."""
    parts = [s for s in (_speed_sentence(rows, clock), _nodes_sentence(rows), _oracle_sentence(rows)) if s]
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    text += _lossless_sentence(rows)
    if clock == "measured":
        text += " The measured clock is one decode on this machine: read small gaps as noise."
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


# ---------------------------------------------------------------------------- the race link
LINK_FIELDS = ("example", "prompt", "budget", "estimator", "temperature", "clock", "profile")


def link_values(params: Mapping[str, str], examples: Sequence[dict]) -> tuple[dict, list[str]]:
    """The settings a race link names, and a message per bad parameter (which is then left out, so
    the page keeps its default): {"prompt", "example" (its id), "budget", "estimator",
    "temperature", "clock", "profile"}, each only when given and valid."""
    values: dict = {}
    problems: list[str] = []
    by_id = {e["id"]: e for e in examples}
    if "example" in params:
        chosen = by_id.get(str(params["example"]))
        if chosen is None:
            problems.append(f"unknown example '{params['example']}': choose one of {', '.join(by_id)}")
        else:
            values.update(example=chosen["id"], prompt=chosen["prompt"])
    elif "prompt" in params:
        text = str(params["prompt"])
        if not text.strip():
            problems.append("the link's prompt is empty")
        elif len(text) > MAX_PROMPT_CHARS:
            problems.append(f"the link's prompt is too long ({len(text)} characters; at most {MAX_PROMPT_CHARS})")
        else:
            values["prompt"] = text
    for name, kind, what in (("budget", int, "a whole number"), ("temperature", float, "a number"),
                             ("estimator", str, "")):
        if name not in params:
            continue
        raw = params[name]
        try:
            value = kind(raw)
        except (TypeError, ValueError):
            problems.append(f"link: {name} must be {what}, got {raw!r}")
            continue
        try:
            check_value(name, value)
        except ValueError as exc:
            problems.append(f"link: {exc}")
            continue
        values[name] = value
    if "clock" in params:
        if params["clock"] in CLOCKS:
            values["clock"] = params["clock"]
        else:
            problems.append(f"link: unknown clock '{params['clock']}': choose one of {', '.join(CLOCKS)}")
    if "profile" in params:
        name = str(params["profile"]).strip()
        if PROFILE_ID.match(name):
            values["profile"] = name
        else:
            problems.append(f"link: '{name[:60]}' is not a latency profile id (letters, digits, . _ @ + -)")
    return values, problems


def race_link(prompt: str, examples: Sequence[dict], budget: int, estimator: str, temperature: float, clock: str,
              profile: str = "") -> dict[str, str]:
    """The query parameters of a race link: an example's id when the prompt is one, else the text."""
    chosen = next((e for e in examples if e["prompt"] == prompt), None)
    params = {"example": chosen["id"]} if chosen is not None else {"prompt": prompt}
    params.update(budget=str(budget), estimator=estimator, temperature=f"{float(temperature):g}", clock=clock)
    if profile:
        params["profile"] = profile
    return params
