"""Two kinds of speed, never confused (plain Python, no torch).

*Modelled*: tau x t_AR / t_round, with t_AR and t_round read from a named latency profile for the
rounds a run actually made. Deterministic: the same rounds and profile give the same figure on an
idle machine and a busy one, and a profile of other hardware answers "what would this run gain
there?".

*Measured*: wall clock, which a busy machine bends. Race and sweep repeat every run (AR included,
interleaved, so a burst of load hits all of them alike) and show the median with the range over
repeats; Step through shows the median over the run's rounds with the middle half of them. A wide
spread or a busy machine gets a note, and a best budget is named only when it beats the
runner-up by more than that spread.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Iterable, Sequence

import numpy as np

from ..eval.metrics import modelled_speedup
from ..policies import policy
from ..record import Round
from ..verdict import combine

WIDE_SPREAD = 0.25           # (high - low) / median above this is called wide
BUSY_LOAD = 0.75             # 1-minute load average per core above this is called busy
MIN_REPEATS, MAX_REPEATS = 3, 20


@dataclass
class Spread:
    """A measured figure: the median and the low and high ends of its spread."""

    median: float
    low: float
    high: float
    count: int
    kind: str = "range"      # range (over repeats) | middle half (quartiles over rounds)

    @property
    def relative(self) -> float:
        return (self.high - self.low) / self.median if self.median > 0 else float("inf")

    @property
    def wide(self) -> bool:
        return self.count > 1 and self.relative > WIDE_SPREAD

    def text(self, digits: int = 2, unit: str = "×") -> str:
        """`1.32× (1.10–1.45×)`: the median, then the spread."""
        if self.count <= 1:
            return f"{self.median:.{digits}f}{unit}"
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}–{self.high:.{digits}f}{unit})"


def spread_of(values: Iterable[float], kind: str = "range") -> Spread:
    """Median and spread of measured values: their full range (`range`, for a few repeats) or their
    interquartile range (`middle half`, for many rounds). NaNs are left out."""
    data = np.asarray([v for v in values if v == v], dtype=float)
    if data.size == 0:
        return Spread(float("nan"), float("nan"), float("nan"), 0, kind)
    if kind == "range":
        low, high = float(data.min()), float(data.max())
    else:
        low, high = (float(x) for x in np.percentile(data, [25, 75]))
    return Spread(float(np.median(data)), low, high, int(data.size), kind)


def validate_repeats(repeats) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or \
            not MIN_REPEATS <= int(repeats) <= MAX_REPEATS:
        raise ValueError(f"repeats must be a whole number from {MIN_REPEATS} to {MAX_REPEATS} (a median and a "
                         f"spread need at least {MIN_REPEATS}), got {repeats!r}")
    return int(repeats)


@dataclass
class MachineLoad:
    load: float              # 1-minute load average
    cores: int

    @property
    def busy(self) -> bool:
        return self.load / max(self.cores, 1) > BUSY_LOAD

    def note(self) -> str:
        return f"This machine is {self.reason()}" if self.busy else ""

    def reason(self) -> str:
        """Why measured times are greyed, after "This machine is" (the page) or "The machine it ran on
        was" (the lecture file, read later elsewhere)."""
        return (f"busy (load {self.load:.1f} on {self.cores} cores): measured times are slower and noisier than on "
                "an idle machine. The modelled figures do not change.")


def machine_load() -> MachineLoad:
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):     # unobtainable, or Windows, which has no load average: never "busy"
        load = 0.0
    return MachineLoad(load=float(load), cores=os.cpu_count() or 1)


MACHINE = "machine"           # the id of this machine's own measured profile (links, `profile=machine`)
MEASURE_REASON = ("trees are sized from the reference CPU's timings until this machine's own are measured; "
                  "about a minute")


SHAPE_KIND = "measured-shape"  # a public target's shape timed on a device with random weights (taps.eval.shape_profile)


def _article(words: str) -> str:
    """"a" or "an" before `words` as read aloud ("an NVIDIA H200", "a CPU", "an Apple M3")."""
    first = words.split()[0] if words.split() else ""
    if first.isupper() and len(first) > 1:
        return "an" if first[0] in "AEFHILMNORSX" else "a"
    return "an" if first[:1].lower() in "aeiou" else "a"


def shape_label(profile) -> str:
    """What a measured shape profile prices, in words: "costs of a Qwen3-8B-shaped target on an NVIDIA
    H200 (measured, random weights, context 2048); acceptance of this pair"."""
    device = profile.device_label()
    model = profile.model.get("name") or "public"
    return (f"costs of a {model}-shaped target on {_article(device)} {device} (measured, random weights, "
            f"context {profile.context_length}); acceptance of this pair")


def shape_option(profile) -> str:
    """A measured shape profile in a few words, for a menu: "NVIDIA H200 × Qwen3-8B, context 2048"."""
    return f"{profile.device_label()} × {profile.model.get('name') or '?'}, context {profile.context_length}"


def shape_profiles() -> dict:
    """The measured shape profiles shipped in assets/profiles (kind measured-shape), by id: the costs
    of a public target's shape on a device nobody here has, offered for any pair's what-if (the
    rounds, and so the acceptance, stay this pair's)."""
    return {name: p for name, p in sorted(_shipped().items()) if p.kind == SHAPE_KIND}


def profile_name(profile) -> str:
    """A profile's name as every modelled figure shows it: what, where and when it was measured, or
    that it is a roofline estimate, or a measured shape's costs."""
    if profile is None:
        return "no latency profile"
    if profile.kind == SHAPE_KIND:
        return shape_label(profile)
    if profile.kind == "roofline":
        return profile.source.split(" (not measured)")[0] + " (not measured)"
    if profile.source in ("measured", "fixed"):
        return profile.describe()
    if profile.source.startswith("measured on "):
        when = f", {profile.measured_at}" if profile.measured_at else ""
        return f"reference latency profile of {profile.pair}, measured on the {profile.device_label()}{when}"
    return f"reference latency profile of {profile.pair}, {profile.source}"


def profile_limit(pair) -> int:
    """The largest tree a profile is measured for: the biggest budget, or what the pair's context holds."""
    from ..config import MAX_BUDGET

    return min(MAX_BUDGET, max(64, pair.max_context - 2))


def profile_label(profile_id: str, pair=None) -> str:
    """A profile id in a few words for a page ("this machine's measured profile", "the reference
    CPU's measured profile", "roofline estimate: NVIDIA H200 SXM × Qwen3-8B")."""
    from .. import roofline

    if not profile_id:
        return "no latency profile"
    if profile_id == MACHINE:
        return "this machine's measured profile"
    if profile_id.startswith(roofline.PREFIX):
        try:
            return roofline.label(*roofline.split_id(profile_id))
        except ValueError:
            return f"{profile_id} (an unknown roofline profile)"
    found = _shipped().get(profile_id)
    if found is None:
        return f"{profile_id} (not shipped with this app)"
    if found.kind == SHAPE_KIND:
        return shape_label(found)
    return f"the {found.device_label()}'s measured profile ({found.pair})"


def resolve_profile(pair, profile_id: str, budget: int = 0):
    """The profile an id names for this pair: (profile, "") or (None, why not). Trees larger than
    it was measured for are priced on the line through its last two sizes (`verify_time`), so
    `budget` does not rule a profile out. Ids: `machine`, a shipped reference (`reference-cpu-taps-code-10m`), a
    roofline estimate (`roofline-<device>-<model>`), or a shipped measured shape profile
    (`h200-qwen3-8b-bfloat16-ctx2048`: any pair's rounds priced at that shape's measured costs)."""
    from .. import roofline
    from ..profiles import same_pair, saved_profile

    if pair is None:
        return None, "no model pair is loaded"
    limit = profile_limit(pair)
    if profile_id == MACHINE:        # one measured for fewer nodes than `budget` prices the rest on its last line
        return saved_profile(pair)
    if profile_id.startswith(roofline.PREFIX):
        try:
            return _roofline(pair, *roofline.split_id(profile_id), limit), ""
        except ValueError as exc:
            return None, str(exc)
    found = _shipped().get(profile_id)
    if found is None:
        return None, f"no shipped profile is called {profile_id!r}"
    if found.kind == SHAPE_KIND:
        return found, ""
    if not same_pair(found, pair):
        return None, f"{profile_id} was measured for {found.pair or 'another pair'}, not for {pair.name}"
    return found, ""


_ROOFLINES: dict[tuple, object] = {}
_SHIPPED: dict[str, dict] = {}


def shipped_profiles(pair_name: str | None = None) -> dict:
    """The shipped measured profiles by id (`_shipped`), only those measured for `pair_name` when given."""
    return {name: p for name, p in _shipped().items() if pair_name is None or p.pair == pair_name}


def _shipped() -> dict:
    """The shipped measured profiles by id, read once per process (they do not change while it runs)."""
    from ..cost_model import REFERENCE_PROFILES, reference_profiles

    folder = str(REFERENCE_PROFILES)
    if folder not in _SHIPPED:
        _SHIPPED[folder] = reference_profiles()
    return _SHIPPED[folder]


def _roofline(pair, device: str, model: str, limit: int):
    from .. import roofline

    key = (device, model, pair.name, getattr(pair, "fingerprint", ""), limit)
    if key not in _ROOFLINES:
        _ROOFLINES[key] = roofline.roofline_profile(device, model, pair=pair, max_nodes=limit)
    return _ROOFLINES[key]


# ---------------------------------------------------------------------------- measuring in the background
@dataclass
class MeasureJob:
    """A latency-profile measurement running in a thread of its own; the page polls it."""

    path: str
    share: float = 0.0
    text: str = "starting"
    done: bool = False
    error: str = ""
    owner: str = ""              # who started it (a browser session's token): its notice is said to them alone

    def update(self, share: float, text: str) -> None:
        self.share, self.text = min(max(float(share), 0.0), 1.0), text


_JOBS: dict[str, MeasureJob] = {}
_JOBS_LOCK = threading.Lock()


def measure_job(pair) -> MeasureJob | None:
    """The measurement of this pair's profile here that is running or last ran in this process."""
    from ..profiles import profile_path

    return _JOBS.get(str(profile_path(pair))) if pair is not None else None


def start_measuring(pair, after: Callable[[], None] | None = None, owner: str = "") -> MeasureJob:
    """Measure and save this pair's profile here in a background thread (one at a time per pair and
    device); `after` runs once it is saved (e.g. to forget cached profiles); `owner` names who asked
    (a browser session's token: its notice is said to them alone). Returns the job."""
    from ..eval.measure import forget_profiles, measure_and_save
    from ..profiles import profile_path
    from .profile_news import profile_news

    path = str(profile_path(pair))
    with _JOBS_LOCK:
        job = _JOBS.get(path)
        if job is not None and not job.done:
            return job
        job = _JOBS[path] = MeasureJob(path, owner=owner)

    news = profile_news()         # what every page of the class, on any replica, is told (taps.studio.profile_news)
    news.started(path)

    def work() -> None:
        try:
            measure_and_save(pair, max_nodes=profile_limit(pair), progress=job.update)
            forget_profiles()
            if after is not None:
                after()
        except Exception as exc:  # noqa: BLE001 - the page shows any failure as a line, never a traceback
            job.error = f"{type(exc).__name__}: {exc}"
        finally:
            news.ended(path, job.error)
            job.share, job.done = (1.0 if not job.error else job.share), True

    threading.Thread(target=work, name="taps-measure-profile", daemon=True).start()
    return job


# ---------------------------------------------------------------------------- step through
MIN_MEASURED_ROUNDS = 5      # a measured speed-up is shown over at least this many rounds


@dataclass
class StepSpeed:
    modelled: dict | None        # modelled_speedup(...) of the rounds so far, or None without a profile
    measured: Spread | None      # per-round tau x median AR step / round time; None without an AR run
    ar_step_s: float             # the median measured AR step
    ar_timed: int = 0            # AR steps timed so far (the median is over these)
    ar_needed: int = 0           # AR steps for the tokens shown (the rest are timed in the background)


@dataclass
class MeasuredShown:
    """What the Step page (and the lecture file) show for the measured speed-up: a value only where
    it means something (enough rounds, a machine that is not busy), else a dash and why, greyed."""

    value: str                   # "1.84×" or "—"
    note: str                    # the spread ("1.62–2.05× middle half") or why there is no value
    sentence: str                # the caption's sentence about it
    shown: bool                  # whether `value` is a figure to read


def ar_progress_note(speed: StepSpeed) -> str:
    """Why two pages on one shared round may read different measured figures: the AR baseline's
    steps are timed in the background after a page draws, so its median moves until every step of
    the tokens shown is timed ("" once they all are)."""
    if speed.measured is None or speed.ar_timed >= speed.ar_needed:
        return ""
    return (f"The AR step it divides by is the median of the {speed.ar_timed} of {speed.ar_needed} AR steps timed so "
            "far (the rest are timed in the background), so it may still move a little, and two pages drawn at "
            "different moments can differ.")


def measured_shown(measured: Spread | None, load: MachineLoad | None = None) -> MeasuredShown:
    """The measured speed-up as the page shows it. Under MIN_MEASURED_ROUNDS rounds it is a dash
    ("from round 5"): one round's wall clock says little (a lone 0.24× beside a modelled 2× reads
    as "TAPS is slower"). On a busy machine (`load`) it is a dash with the rough figure in grey and
    the reason. Otherwise the median over the rounds with their middle half."""
    if measured is None or measured.count == 0:
        return MeasuredShown("—", "", "", False)
    rounds = f"{measured.count} round{'s' if measured.count != 1 else ''}"
    if measured.count < MIN_MEASURED_ROUNDS:
        return MeasuredShown("—", f"from round {MIN_MEASURED_ROUNDS}",
                             f"**Measured**: shown after {MIN_MEASURED_ROUNDS} rounds ({rounds} so far): one round's "
                             "wall clock says little.", False)
    if load is not None and load.busy:
        return MeasuredShown("—", f"{measured.median:.2f}× rough: machine busy",
                             f"**Measured**: {measured.text(2)} over {rounds}, greyed: {load.note()}", False)
    return MeasuredShown(f"{measured.median:.2f}×", f"{measured.low:.2f}–{measured.high:.2f}× middle half",
                         f"**Measured** {measured.text(2)} (median over {rounds}, middle half in brackets) against "
                         "an AR run of this prompt in this process.", True)


def step_speed(rounds: Sequence[Round], ar_rounds: Sequence[Round], profile, ar_needed: int = 0) -> StepSpeed:
    """The modelled speed-up of these rounds under `profile`, and the measured one: for each round,
    its tokens times the median AR step of the same prompt here, over its own time (the median of
    those over the rounds, with their middle half)."""
    modelled = modelled_speedup(list(rounds), profile) if profile is not None and rounds else None
    ar_times = [r.time_s for r in ar_rounds if r.time_s > 0]
    if not rounds or not ar_times:
        return StepSpeed(modelled, None, 0.0)
    ar_step = float(np.median(ar_times))
    per_round = [r.tau * ar_step / r.time_s for r in rounds if r.time_s > 0]
    return StepSpeed(modelled, spread_of(per_round, "middle half"), ar_step, len(ar_times), ar_needed)


# ---------------------------------------------------------------------------- race and sweep
def _key(row: dict) -> tuple:
    return (row["label"], row["budget"] if not policy(row["selector"]).baseline else 0)


def compact_rounds(row: dict) -> dict:
    """A run row with its round records replaced by what the speed figures need: per round the
    tokens and the nodes verified (`round_counts`), and a fingerprint of every round's selection
    (`round_shape`), so repeats can be checked for identical work without keeping every pool."""
    records = row.pop("round_records", None) or []
    row["round_counts"] = [[r["tau"], r["verified_nodes"]] for r in records]
    row["round_shape"] = hash(tuple((r["tau"], tuple(r["selected"]), tuple(r["accepted"])) for r in records))
    return row


def modelled_of(row: dict, profile) -> dict | None:
    """The modelled speed-up of a (compacted) run row under `profile`."""
    counts = row.get("round_counts") or []
    if profile is None or not counts:
        return None
    rounds = [SimpleNamespace(tau=tau, verified_nodes=nodes, selector=row["selector"],
                              estimator=row["estimator"]) for tau, nodes in counts]
    return modelled_speedup(rounds, profile)


def summarize_repeats(repeats: Sequence[Sequence[dict]], profile=None) -> list[dict]:
    """One row per run (selector, estimator, budget) over repeated races or sweeps: tau and nodes
    (identical every repeat: decisions never read the clock), the modelled speed-up under `profile`,
    and the measured tokens/s and speed-up as Spreads over the repeats."""
    groups: dict[tuple, list[dict]] = {}
    for rows in repeats:
        for row in rows:
            groups.setdefault(_key(row), []).append(row)
    out = []
    for (label, budget), rows in groups.items():
        first = rows[0]
        modelled = modelled_of(first, profile)
        out.append({
            "label": label, "selector": first["selector"], "estimator": first["estimator"], "budget": budget,
            "tau": first["tau"], "rounds": first["rounds"], "new_tokens": first["new_tokens"],
            "verified_nodes": first["verified_nodes"], "waste_share": first["waste_share"],
            "lossless": all(r["lossless"] for r in rows), "verdict": combine(rows),
            "same_rounds": all(r.get("round_shape") == first.get("round_shape") for r in rows),
            "modelled_speedup": modelled["speedup"] if modelled else float("nan"),
            "modelled_round_s": modelled["round_s"] if modelled else float("nan"),
            "tokens_per_s": spread_of(r["tokens_per_s"] for r in rows),
            "speedup": spread_of(r["speedup_vs_ar"] for r in rows),
            "repeats": len(rows)})
    return out


def spread_notes(summary: Sequence[dict], load: MachineLoad | None = None) -> list[str]:
    """Notes to show beside measured figures: a busy machine, and runs whose spread is wide."""
    notes = []
    if load is not None and load.note():
        notes.append(load.note())
    wide = [row["label"] + (f"@{row['budget']}" if not policy(row["selector"]).baseline else "") for row in summary
            if row["tokens_per_s"].wide]
    if wide:
        notes.append(f"Wide spread between repeats (over {int(100 * WIDE_SPREAD)}% of the median) for "
                     f"{', '.join(wide)}: read those measured figures as rough; more repeats narrow them.")
    return notes


NOISE_VERDICT = "within noise"


def best_budgets(summary: Sequence[dict]) -> list[dict]:
    """Per tree selector: the MODELLED best budget (the highest modelled speed-up under the profile,
    noise-free; the smaller budget on a tie), and the measured one (the highest median tokens/s)
    only when even its slowest repeat beats every other budget's fastest and the runs did not do
    identical work; otherwise "within noise", with the budgets the noise cannot tell apart in
    `tied`."""
    out = []
    labels = sorted({row["label"] for row in summary if not policy(row["selector"]).baseline})
    for label in labels:
        rows = sorted((r for r in summary if r["label"] == label), key=lambda r: -r["tokens_per_s"].median)
        best = rows[0]
        priced = [r for r in rows if r["modelled_speedup"] == r["modelled_speedup"]]
        modelled = max(priced, key=lambda r: (r["modelled_speedup"], -r["budget"])) if priced else None
        tied = [r["budget"] for r in rows[1:]
                if r["tokens_per_s"].high >= best["tokens_per_s"].low
                or (r["tau"], r["verified_nodes"], r["rounds"]) == (best["tau"], best["verified_nodes"],
                                                                    best["rounds"])]
        clear = len(rows) > 1 and not tied
        verdict = str(best["budget"]) if clear or len(rows) == 1 else NOISE_VERDICT
        out.append({"selector": label,
                    "best budget (modelled)": modelled["budget"] if modelled else None,
                    "modelled speed-up": modelled["modelled_speedup"] if modelled else float("nan"),
                    "best budget (measured)": verdict, "clear": clear,
                    "tied": sorted([best["budget"], *tied]) if not clear and len(rows) > 1 else [],
                    "tokens/s": best["tokens_per_s"].text(1, "")})
    return out
