"""What the app's pages need beyond the engine, as plain Python (no streamlit), tested directly.

- which model pair to load (the `TAPS_PAIR` folder, the shipped pair, a folder or hub ids typed in);
- an autoregressive baseline stepped alongside a run, so speed-ups compare equal work measured
  in the same process, and the live counters built from it;
- race (every selector on one prompt, AR first) and sweep (selectors x budgets) rows;
- run exports (rounds as JSON, metrics as CSV) and reloading a JSON run with clear errors.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import pandas as pd

from .config import SELECTORS, DecodeConfig
from .metrics import rounds_frame, speedup, summarize
from .pair import ModelPair, PairError, load_pair
from .record import Round, validate_round
from .runner import Job, plan_jobs, run_prompt, runnable_selectors, warm_up
from .session import DecodeSession

RUN_FORMAT = "taps-studio-run"
RACE_SELECTORS = SELECTORS


# ---------------------------------------------------------------------------- the model pair
def default_pair_source() -> str:
    """The `TAPS_PAIR` folder when set; otherwise "" (the shipped pair)."""
    return os.environ.get("TAPS_PAIR", "").strip()


def describe_source(source: str) -> str:
    return source.strip() or "the shipped pair (assets/models)"


def _looks_like_hub_id(text: str) -> bool:
    owner, _, name = text.partition("/")
    return bool(owner and name and "/" not in name and " " not in text and not text.startswith((".", "~")))


def load_pair_from_source(source: str, device: str = "auto") -> ModelPair:
    """Load a pair from what the user typed: "" (the shipped pair), a pair folder, a target hub id,
    or `TARGET + DRAFTER` (two folders or hub ids). Raises PairError with a clear message."""
    text = source.strip()
    if not text:
        return load_pair(None, device=device)
    if "+" in text:
        target, _, drafter = (part.strip() for part in text.partition("+"))
        if not target or not drafter:
            raise PairError("write a target and a drafter as `TARGET + DRAFTER` (folders or hub ids)")
        return load_pair(None, target=target, drafter=drafter, device=device)
    path = Path(text).expanduser()
    if path.is_dir():
        return load_pair(path, device=device)
    if _looks_like_hub_id(text):
        return load_pair(None, target=text, device=device)
    raise PairError(f"model pair not found: '{text}' is neither a folder on this machine nor a hub id "
                    "(owner/name)")


def pair_facts(pair: ModelPair) -> dict:
    """Name, sizes and device, formatted for the home page."""
    info = pair.describe()

    def millions(n: int) -> str:
        return f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n / 1e3:.1f} k"

    return {"name": info["name"], "device": f"{info['device']} ({info['dtype']})",
            "target": f"{millions(info['target_params'])} parameters, {info['target_layers']} layers",
            "drafter": (f"{millions(info['drafter_params'])} parameters, {info['drafter_layers']} layers, "
                        f"block size {info['block_size']}") if info["drafter_params"] else "none",
            "TAPS scorer": millions(info["scorer_params"]) + " parameters" if info["scorer_params"] else "none",
            "vocabulary": f"{info['vocab_size']} tokens", "context": f"{info['max_context']} tokens"}


# ---------------------------------------------------------------------------- AR baseline, counters
class ArBaseline:
    """Autoregressive decoding of the same prompt and settings, stepped just far enough to match a
    run's token count, so the speed-up compares equal work measured in the same process."""

    def __init__(self, pair: ModelPair, prompt: str | list[int], config: DecodeConfig):
        self.session = DecodeSession(pair, prompt, config, selector="ar")

    def catch_up(self, tokens: int) -> None:
        while len(self.session.generated) < tokens and not self.session.finished:
            self.session.step()

    def tokens_per_s(self, tokens: int) -> float:
        """AR tokens per second over its first `tokens` tokens (one token per AR round)."""
        self.catch_up(tokens)
        return summarize(self.session.rounds[:max(tokens, 1)]).tokens_per_s


@dataclass
class Counters:
    rounds: int
    tokens: int
    tau_last: float
    tau_mean: float
    tokens_per_s: float
    speedup_vs_ar: float | None      # None when no AR run of this prompt was measured here
    waste_share: float
    expected_tau: float
    stage_shares: dict[str, float]


def counters(rounds: list[Round], baseline: ArBaseline | None = None) -> Counters:
    summary = summarize(rounds)
    ratio = None
    if baseline is not None and rounds:
        ratio = speedup(summary.tokens_per_s, baseline.tokens_per_s(summary.new_tokens))
    return Counters(rounds=summary.rounds, tokens=summary.new_tokens,
                    tau_last=float(rounds[-1].tau) if rounds else 0.0, tau_mean=summary.tau,
                    tokens_per_s=summary.tokens_per_s, speedup_vs_ar=ratio, waste_share=summary.waste_share,
                    expected_tau=summary.expected_tau, stage_shares=summary.stage_shares)


def round_texts(record: Round) -> str:
    """The text a round committed (accepted tokens and bonus, after stop/length truncation)."""
    pieces = [record.pool_texts[i] for i in record.accepted] + [record.bonus_text]
    return "".join(pieces[: len(record.committed_tokens)])


def session_matches(session: DecodeSession | None, pair: ModelPair, prompt: str, config: DecodeConfig) -> bool:
    """Whether `session` was started on this pair with this prompt and these settings."""
    if session is None or session.pair is not pair or session.config != config:
        return False
    try:
        ids = pair.tokenizer.encode(prompt, add_special_tokens=False)
    except Exception:  # noqa: BLE001 - any tokenizer failure means "not the same prompt"
        return False
    return ids == session.prompt_ids


# ---------------------------------------------------------------------------- race and sweep
def race(pair: ModelPair, prompt: str, config: DecodeConfig, selectors: list[str],
         on_round: Callable[[Job, DecodeSession, Round], None] | None = None) -> list[dict]:
    """Each selector on the same prompt and settings, AR first (every speed-up is against it);
    `on_round(job, session, round)` after every round for live counters. At T>0 the oracle,
    defined for greedy decoding only, is left out."""
    jobs = [Job(s, config.estimator if s == "taps" else "marginal", config.budget)
            for s in runnable_selectors(selectors, config.temperature)]
    for job in jobs:                             # every setting checked before anything runs
        config.with_run(job.selector, job.estimator, job.budget).validate(pair)
    warm_up(pair, config)
    rows = run_prompt(pair, {"id": "race", "prompt": prompt}, jobs, config, on_round=on_round)
    return [row.as_dict() for row in rows]


def sweep(pair: ModelPair, prompt: str, config: DecodeConfig, selectors: list[str], budgets: list[int],
          estimator: str, on_result: Callable[[int, int, dict], None] | None = None) -> list[dict]:
    """AR once, then every selector x budget on one prompt (`on_result(done, total, row)`)."""
    if not budgets:
        raise ValueError("pick at least one budget")
    tree_selectors = runnable_selectors(selectors, config.temperature)
    if not tree_selectors:
        raise ValueError("pick at least one tree selector (dflash, ddtree, taps or oracle)")
    jobs: list[Job] = plan_jobs(tree_selectors, sorted(set(budgets)), [estimator])
    for job in jobs:
        config.with_run(job.selector, job.estimator, job.budget).validate(pair)
    warm_up(pair, config)
    done = []

    def collect(row) -> None:
        done.append(row)
        if on_result:
            on_result(len(done), len(jobs) + 1, row.as_dict())

    return [row.as_dict() for row in run_prompt(pair, {"id": "sweep", "prompt": prompt}, jobs, config,
                                                 on_result=collect)]


def sweep_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows with per-round accepted draft tokens and verified nodes (the acceptance-cost trade-off)."""
    frame = pd.DataFrame(rows)
    rounds = frame["rounds"].clip(lower=1)
    frame["accepted_per_round"] = (frame["new_tokens"] - frame["rounds"]).clip(lower=0) / rounds
    frame["verified_per_round"] = frame["verified_nodes"] / rounds
    return frame


def best_budgets(rows: list[dict]) -> pd.DataFrame:
    """For each tree selector, the budget with the highest tokens/s on this device."""
    frame = sweep_frame(rows)
    frame = frame[frame["selector"] != "ar"]
    if frame.empty:
        return pd.DataFrame(columns=["selector", "best budget", "tokens/s", "tau", "speed-up vs AR"])
    best = frame.loc[frame.groupby("label")["tokens_per_s"].idxmax()]
    return pd.DataFrame({"selector": best["label"], "best budget": best["budget"],
                         "tokens/s": best["tokens_per_s"].round(1), "tau": best["tau"].round(2),
                         "speed-up vs AR": best["speedup_vs_ar"].round(2)}).reset_index(drop=True)


# ---------------------------------------------------------------------------- exports and reload
@dataclass
class SavedRun:
    prompt: str
    pair_name: str
    config: dict
    text: str
    rounds: list[Round]


def run_json(rounds: list[Round], *, prompt: str, pair_name: str, config: DecodeConfig | dict, text: str) -> str:
    """A run as one JSON document: settings, prompt, generated text and every Round."""
    settings = asdict(config) if isinstance(config, DecodeConfig) else dict(config)
    return json.dumps({"format": RUN_FORMAT, "version": 1, "pair": pair_name, "prompt": prompt,
                       "config": settings, "text": text, "rounds": [r.to_dict() for r in rounds]}, indent=1)


def metrics_csv(rounds: list[Round]) -> str:
    return rounds_frame(rounds).to_csv(index=False)


def load_run(data: bytes | str) -> SavedRun:
    """Read a run saved by `run_json` (or a bare JSON list of Round records). Anything else raises
    ValueError saying why it is not a run."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("this file is not a TAPS Studio run: it is not UTF-8 text") from None
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"this file is not a TAPS Studio run: it is not JSON ({exc.msg}, line {exc.lineno})") from None
    if isinstance(raw, list):
        raw = {"format": RUN_FORMAT, "rounds": raw}
    if not isinstance(raw, dict) or raw.get("format") != RUN_FORMAT:
        raise ValueError(f"this JSON file is not a TAPS Studio run (expected \"format\": \"{RUN_FORMAT}\" "
                         "and a list of rounds; save one with the Export tab)")
    items = raw.get("rounds")
    if not isinstance(items, list) or not items:
        raise ValueError("this run holds no rounds")
    rounds = []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"round {n} of this run is not a JSON object")
        try:
            record = Round.from_dict(item)
            validate_round(record)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"round {n} of this run is not a valid round: {exc}") from None
        rounds.append(record)
    config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
    known = {f.name for f in fields(DecodeConfig)}
    return SavedRun(prompt=str(raw.get("prompt", "")), pair_name=str(raw.get("pair", "unknown pair")),
                    config={k: v for k, v in config.items() if k in known}, text=str(raw.get("text", "")),
                    rounds=rounds)
