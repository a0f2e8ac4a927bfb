"""Decode settings: one `DecodeConfig`, its limits and its help texts.

Everything that reads or offers a decode setting derives from this module: the session validates
with `DecodeConfig.validate`, the command line builds its flags from `FIELDS` (`add_config_flags`),
and the app's pages take their defaults, limits and help from `field_spec`. A value out of range
gets the same message wherever it was typed.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .calibrate import CALIBRATIONS
from .flags import add_flags, check_range, field_default, field_limits, spec
from .policies import DDTREE, TAPS, names, policy

ESTIMATORS = ("marginal", "online", "learned", "selector")
TAPS_MODES = TAPS.size_modes
DDTREE_MODES = DDTREE.size_modes

MAX_BUDGET = 1024
MAX_NEW_TOKENS = 4096
MAX_TEMPERATURE = 5.0
NO_SELECTOR_ESTIMATOR = ("the 'selector' estimator reads DFlash2's path selector, and this pair ({name}) has none: "
                         "train one with `python -m taps.train path_selector`, or load a DFlash2 drafter")
NO_PATH_SELECTOR = ("this pair ({name}) has no DFlash2 path selector: train one for its drafter with "
                    "`python -m taps.train path_selector --out RUN --target PAIR/target --drafter PAIR/drafter` and "
                    "copy RUN/selector into the pair folder as selector/ (pair.json: \"selector\": \"selector\") or "
                    "name it when loading (--path-selector RUN/selector; load_pair(..., selector=...)); a DFlash2 "
                    "drafter checkpoint carries its own")


def run_label(selector: str, estimator: str = "", budget: int | None = None) -> str:
    """A run's (or a policy's) name in tables, legends, progress lines and latency profiles: `ar`,
    `ddtree@16`, `taps/online@16`, or without the budget `ddtree`, `taps/online`."""
    return policy(selector).run_label(estimator, budget)


def _spec(default, help: str, lo=None, hi=None, choices=None, flag: bool = True) -> Any:
    """A dataclass field with its limits and help text kept beside it (`taps.flags.spec`)."""
    return spec(default, help, lo, hi, choices, flag)


@dataclass
class DecodeConfig:
    selector: str = _spec(TAPS.name, "which nodes the target verifies each round", choices=names)
    budget: int = _spec(32, "draft nodes verified per round at most", 1, MAX_BUDGET)
    temperature: float = _spec(0.0, "0: greedy; above 0: sampling, still lossless", 0.0, MAX_TEMPERATURE)
    seed: int = _spec(0, "seed of the sampling draws (T > 0)", 0, 2**31 - 1)
    max_new_tokens: int = _spec(128, "new tokens to generate at most", 1, MAX_NEW_TOKENS)
    estimator: str = _spec("online", "TAPS's path-conditioned estimator (selector: DFlash2's path selector's "
                                     "transition probability times the learned scorer's)", choices=ESTIMATORS)
    calibration: str = _spec("online", "TAPS's reach calibration: online (the map shipped with the scorer, then "
                                       "this session's verdicts), static (the map only) or off (the estimator's "
                                       "raw reach)", choices=CALIBRATIONS)
    taps_mode: str = _spec("cost", "TAPS tree size: cost (latency profile), reach (the budget's best nodes) or "
                                   "utility (the authors' rule)", choices=TAPS_MODES)
    ddtree_mode: str = _spec("budget", "DDTree tree size: budget (always the budget's best nodes) or cost (the "
                                       "latency profile's best size, as TAPS's cost mode)", choices=DDTREE_MODES)
    block_size: int | None = _spec(None, "draft positions per round + 1 (default: the drafter's own)", 2)
    top_k: int = _spec(64, "drafter tokens kept per depth (the lattice width)", 1)
    beam_width: int = _spec(48, "TAPS pool: children kept per depth", 1)
    pool_cap: int = _spec(768, "TAPS pool: nodes at most", 1)
    pool_factor: int = _spec(4, "TAPS: the candidate pool is the best pool_factor x budget nodes by marginal path "
                                "score (0: the beam pool of beam_width and pool_cap)", 0, 64)
    score_cap: int = _spec(0, "TAPS: at most N candidate nodes, the best by marginal path score (0: no absolute cap)",
                           0)
    lambda_node: float = _spec(1.0, "utility mode: cost per node", 0.0)
    lambda_depth: float = _spec(0.002, "utility mode: cost per node and depth", 0.0)
    endpoint_cap: int = _spec(64, "utility mode: leaves at most", 1)
    stop_at_eos: bool = _spec(True, "stop at end-of-text", flag=False)

    def validate(self, pair=None) -> None:
        """Raise ValueError with a clear message for any out-of-range setting (and, given a pair,
        for settings the pair cannot run)."""
        for f in fields(self):
            check_value(f.name, getattr(self, f.name))
        if self.lambda_node + self.lambda_depth <= 0:
            raise ValueError("lambda_node and lambda_depth must not both be zero")
        chosen = policy(self.selector)
        if chosen.greedy_only and self.temperature > 0:
            raise ValueError(f"{chosen.in_prose()} is defined for greedy decoding only (temperature 0)")
        if pair is None:
            return
        if chosen.needs_drafter:
            if pair.drafter is None:
                raise ValueError(f"the '{self.selector}' selector needs a drafter, and this pair has none")
            if self.block_size is not None and self.block_size > pair.drafter.block_size:
                raise ValueError(f"block_size must be from 2 to the drafter's {pair.drafter.block_size}, "
                                 f"got {self.block_size!r}")
        if chosen.needs_path_selector and getattr(pair, "path_selector", None) is None:
            raise ValueError(NO_PATH_SELECTOR.format(name=pair.name))
        if chosen.uses_estimator and self.estimator == "learned" and pair.scorer is None:
            raise ValueError("the 'learned' estimator needs a trained TAPS scorer, and this pair has none")
        if chosen.uses_estimator and self.estimator == "selector" and getattr(pair, "path_selector", None) is None:
            raise ValueError(NO_SELECTOR_ESTIMATOR.format(name=pair.name))

    def with_run(self, selector: str, estimator: str | None = None, budget: int | None = None,
                 mode: str = "") -> "DecodeConfig":
        """These settings for another run of a race or sweep; `mode`, when given, is the size choice
        of a `taps` or `ddtree` run (its taps_mode or ddtree_mode)."""
        cfg = replace(self, selector=selector, estimator=estimator or self.estimator,
                      budget=self.budget if budget is None else budget)
        field_name = policy(selector).size_field
        return replace(cfg, **{field_name: mode}) if mode and field_name else cfg

    @property
    def size_mode(self) -> str:
        """How this run sizes its tree: its policy's size field (taps_mode for TAPS, ddtree_mode for
        DDTree), else ""."""
        field_name = self.policy.size_field
        return getattr(self, field_name) if field_name else ""

    @property
    def policy(self):
        """The registered policy of `selector` (`taps.policies`)."""
        return policy(self.selector)

    @property
    def uses_profile(self) -> bool:
        """Whether these settings size trees from a latency profile."""
        return self.policy.uses_profile(self.size_mode)

    def as_dict(self) -> dict:
        return asdict(self)


FIELDS = {f.name: f for f in fields(DecodeConfig)}


def field_spec(name: str) -> dict:
    """Default, min, max, choices and help of one setting (for pages and flags); the selector's
    choices are whatever the policy registry holds now."""
    f = FIELDS[name]
    return {"default": field_default(f), **field_limits(f)}


def check_value(name: str, value) -> None:
    """Raise ValueError, naming the setting and its range, when `value` is out of range."""
    spec = field_spec(name)
    if spec["choices"] is not None:
        if value not in spec["choices"]:
            kind = name.replace("_", " ").replace("taps mode", "TAPS mode").replace("ddtree mode", "DDTree mode")
            raise ValueError(f"unknown {kind} '{value}': choose one of {', '.join(spec['choices'])}")
        return
    if value is None and spec["default"] is None:
        return
    kind = type(spec["default"]) if spec["default"] is not None else int
    if kind is bool:
        return
    is_int = isinstance(value, int) and not isinstance(value, bool) or type(value).__name__.startswith("int")
    if kind is int and not is_int:
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                          and not type(value).__name__.startswith("float")):
        raise ValueError(f"{name} must be a number, got {value!r}")
    check_range(name, value, spec["min"], spec["max"])



def add_config_flags(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """One `--name` flag per decode setting (defaults, limits and help from DecodeConfig), plus
    `--ignore-eos`. `exclude` leaves out settings a command takes another way."""
    add_flags(parser, DecodeConfig, skip=exclude)
    parser.add_argument("--ignore-eos", action="store_true",
                        help="generate exactly --max-new-tokens (do not stop at end-of-text), as fixed-length "
                             "benchmarks do")


def config_from_args(args: argparse.Namespace, **overrides) -> DecodeConfig:
    """The DecodeConfig that parsed flags describe (settings a command does not offer keep their defaults)."""
    values = {name: getattr(args, name) for name in FIELDS if hasattr(args, name)}
    values["stop_at_eos"] = not getattr(args, "ignore_eos", False)
    values.update(overrides)
    return DecodeConfig(**values)
