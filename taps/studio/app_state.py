"""What the app's pages need beyond the engine, as plain Python (no streamlit), tested directly.

- which model pair to load (the `TAPS_PAIR` folder, the shipped pair, a folder or hub ids typed in);
- an autoregressive baseline stepped alongside a run, so speed-ups compare equal work measured
  in the same process;
- whether settings need this machine's latency profile (the app never lets a session measure one);
- the tables of a repeated race and sweep (`taps.studio.race` runs them);
- run exports (rounds as JSON, metrics as CSV) and reloading a JSON run with clear errors.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import pandas as pd

from ..config import DecodeConfig
from ..eval.metrics import rounds_frame
from ..pair import ModelPair, PairError, load_pair
from ..policies import AR
from ..record import Round, validate_round
from ..session import DecodeSession

RUN_FORMAT = "taps-studio-run"



# ---------------------------------------------------------------------------- the model pair
def default_pair_source() -> str:
    """The `TAPS_PAIR` folder when set; otherwise "" (the shipped pair)."""
    return os.environ.get("TAPS_PAIR", "").strip()


def describe_source(source: str) -> str:
    return source.strip() or "the shipped pair (assets/models)"


def _looks_like_hub_id(text: str) -> bool:
    owner, _, name = text.partition("/")
    return bool(owner and name and "/" not in name and " " not in text and not text.startswith((".", "~")))


def load_pair_from_source(source: str, device: str = "auto", roots: tuple[Path, ...] | None = None) -> ModelPair:
    """Load a pair from what the user typed: "" (the shipped pair), a pair folder, a target hub id,
    or `TARGET + DRAFTER` (two folders or hub ids). Raises PairError with a clear message.

    With `roots` (a class server, `taps.studio.lecturer`), folders are read only inside those roots
    and no message names a server path or says whether a path exists outside them."""
    text = source.strip()
    if not text:
        return load_pair(None, device=device)
    parts = _source_parts(text)
    if roots is not None:
        return _load_within(text, parts, device, roots)
    if len(parts) == 2:
        return _load_parts(parts, device)
    path = Path(text).expanduser()
    if path.is_dir():
        return load_pair(path, device=device)
    if _looks_like_hub_id(text):
        return load_pair(None, target=text, device=device)
    raise PairError(f"model pair not found: '{text}' is neither a folder on this machine nor a hub id "
                    "(owner/name)")


def _source_parts(text: str) -> list[str]:
    """What was typed, as one source or as `TARGET + DRAFTER`'s two."""
    parts = [part.strip() for part in text.partition("+")[::2]] if "+" in text else [text]
    if not all(parts):
        raise PairError("write a target and a drafter as `TARGET + DRAFTER` (folders or hub ids)")
    return parts


def _load_parts(parts: list, device: str) -> ModelPair:
    """A pair from resolved parts: a target and a drafter (folders or hub ids), a pair folder (a
    Path), or a target hub id."""
    if len(parts) == 2:
        return load_pair(None, target=str(parts[0]), drafter=str(parts[1]), device=device)
    if isinstance(parts[0], Path):
        return load_pair(parts[0], device=device)
    return load_pair(None, target=parts[0], device=device)


def _load_within(text: str, parts: list[str], device: str, roots: tuple[Path, ...]) -> ModelPair:
    """`load_pair_from_source` on a class server: each part an allowed folder or a hub id."""
    from .lecturer import allowed_folder, clean_message, not_allowed

    resolved, folders = [], []
    for part in parts:
        folder = allowed_folder(part, roots)
        if folder is not None:
            resolved.append(folder)
            folders.append((part, folder))
        elif _looks_like_hub_id(part) and not Path(part).expanduser().exists():
            resolved.append(part)
        else:
            raise not_allowed(part)
    try:
        return _load_parts(resolved, device)
    except PairError as exc:
        if not folders:                       # a hub id: what the hub said stays in the server's log
            logging.getLogger("taps.serve").warning("could not load %r from the hub: %s", text, exc)
            raise not_allowed(text) from None
        message = str(exc)
        for typed, folder in folders:
            message = clean_message(message, typed, folder)
        raise PairError(message) from None


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


# ---------------------------------------------------------------------------- AR baseline, profiles
class ArBaseline:
    """Autoregressive decoding of the same prompt and settings, stepped just far enough to match a
    run's token count, so the speed-up compares equal work measured in the same process."""

    def __init__(self, pair: ModelPair, prompt: str | list[int], config: DecodeConfig):
        self.session = DecodeSession(pair, prompt, config, selector=AR.name)

    def catch_up(self, tokens: int) -> None:
        while len(self.session.generated) < tokens and not self.session.finished:
            self.session.step()

    def rounds(self, tokens: int) -> list[Round]:
        """The AR rounds that produced the first `tokens` tokens (one token per round)."""
        self.catch_up(tokens)
        return self.session.rounds[:max(tokens, 1)]


def profile_needed(config: DecodeConfig) -> str:
    """Why these settings cannot run without this machine's latency profile ("" when they can)."""
    if not config.uses_profile:
        return ""
    return (f"{config.policy.label}'s cost mode sizes every tree from this machine's latency profile, and none "
            "is saved for this pair and device yet: measure it once with **Measure latency profile** in the sidebar "
            "(saved for next time), or pick another mode.")


def check_profile(config: DecodeConfig, profile) -> None:
    """Raise ValueError when `config` sizes trees from a profile and `profile` is None: the app
    never lets a session measure one on its own."""
    why = profile_needed(config)
    if why and profile is None:
        raise ValueError(why)


# ---------------------------------------------------------------------------- race and sweep tables
def sweep_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows with per-round accepted draft tokens and verified nodes (the acceptance-cost trade-off)."""
    frame = pd.DataFrame(rows)
    rounds = frame["rounds"].clip(lower=1)
    frame["accepted_per_round"] = (frame["new_tokens"] - frame["rounds"]).clip(lower=0) / rounds
    frame["verified_per_round"] = frame["verified_nodes"] / rounds
    return frame


def results_frame(summary: list[dict]) -> pd.DataFrame:
    """Repeated runs as one table (and CSV): measured figures as median, low and high."""
    rows = []
    for row in summary:
        flat = {k: v for k, v in row.items() if k not in ("tokens_per_s", "speedup")}
        for name in ("tokens_per_s", "speedup"):
            spread = row[name]
            flat.update({f"{name}_median": spread.median, f"{name}_low": spread.low, f"{name}_high": spread.high})
        rows.append(flat)
    return pd.DataFrame(rows)


def repeated_table(summary: list[dict]) -> pd.DataFrame:
    """The repeated race as the page shows it: per run τ, nodes per round, waste, the modelled
    speed-up, and the measured speed-up and tokens/s with their range."""
    return pd.DataFrame({
        "selector": [r["label"] for r in summary], "τ": [round(r["tau"], 2) for r in summary],
        "verified/round": [round(r["verified_nodes"] / max(r["rounds"], 1), 1) for r in summary],
        "waste %": [round(100 * r["waste_share"], 1) for r in summary],
        "modelled speed-up": [round(r["modelled_speedup"], 2) for r in summary],
        "measured speed-up (range)": [r["speedup"].text(2) for r in summary],
        "tokens/s (range)": [r["tokens_per_s"].text(1, "") for r in summary],
        "same output as AR": [r.get("verdict") or ("yes" if r["lossless"] else "NO") for r in summary],
        "same rounds every repeat": [r["same_rounds"] for r in summary]})


def best_table(best: list[dict]) -> pd.DataFrame:
    """The sweep's best budget per selector as the page shows it (`taps.studio.speed.best_budgets`)."""
    return pd.DataFrame(best).drop(columns=["clear", "tied"]).round({"modelled speed-up": 2})


def sweep_csv(summary: list[dict]) -> str:
    """The sweep as CSV: one row per run, measured figures as median, low and high, with accepted
    draft tokens and nodes verified per round."""
    rows = results_frame(summary).to_dict("records")
    return sweep_frame(rows).drop(columns=["round_counts", "round_shape"], errors="ignore").to_csv(index=False)


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
                       "config": settings, "text": text,
                       "rounds": [{"number": r.number, **r.to_dict()} for r in rounds]}, indent=1)


def rounds_table(rounds: list[Round]) -> pd.DataFrame:
    """One row per round (the page's table and the CSV), numbered from 1 as people count."""
    return rounds_frame(rounds)


def metrics_csv(rounds: list[Round]) -> str:
    return rounds_table(rounds).to_csv(index=False)


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
            raise ValueError(f"round {n + 1} of this run is not a JSON object")
        try:
            record = Round.from_dict(item)
            validate_round(record)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"round {n + 1} of this run is not a valid round: {exc}") from None
        rounds.append(record)
    config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
    known = {f.name for f in fields(DecodeConfig)}
    return SavedRun(prompt=str(raw.get("prompt", "")), pair_name=str(raw.get("pair", "unknown pair")),
                    config={k: v for k, v in config.items() if k in known}, text=str(raw.get("text", "")),
                    rounds=rounds)
