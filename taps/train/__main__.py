"""Command line for the training stages: ``python -m taps.train <stage>``, one of tokenizer, target,
unloop, drafter, scorer, calibrate, path_selector and package.

Each stage is a module ``taps.train.<stage>`` exposing ``add_arguments(parser)`` and
``main(args)``. A stage that refuses to go on (a `TrainError`, `ValueError` or `FileNotFoundError`:
an option out of range, a missing input, a clash with an earlier run's files) prints one line,
``error: <message>``, and exits with status 2; one paused by SIGTERM or Ctrl-C exits with 75.
A stage's module is imported only to build its subcommand, and a stage whose module is missing
(or fails to import) is listed as unavailable instead of breaking the others.
"""

from __future__ import annotations

import os

# Threads that sleep at OpenMP barriers instead of spinning: on a small shared machine this keeps
# training several times faster while another process is busy. It takes effect only if set before
# torch is first imported, so it comes before any stage module is (the `taps` package imports its
# names lazily, and `taps.train` imports nothing).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import importlib
import sys
from types import ModuleType

STAGES: dict[str, str] = {
    "tokenizer": "byte-level BPE tokenizer on the corpus' train split",
    "target": "Qwen3-architecture target LM trained from scratch",
    "unloop": "unlikelihood fine-tuning of the target against its own greedy loops",
    "drafter": "diffusion drafter trained against the target",
    "scorer": "TAPS path-conditioned scorer trained on target-verified pools",
    "calibrate": "reach calibration per estimator and temperature, fitted on validation pools, saved with the scorer",
    "path_selector": "DFlash2's path selector (the dflash2 policy) for a trained drafter, drafter and target frozen",
    "package": "copy a trained run into assets/models/<name> as a shippable pair",
}


def _load(stage: str) -> ModuleType:
    return importlib.import_module(f"taps.train.{stage}")


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """Subparsers for every stage; only ``chosen`` (if any) gets its module imported."""
    parser = argparse.ArgumentParser(prog="python -m taps.train",
                                     description="Training stages of the TAPS Studio model pair.")
    sub = parser.add_subparsers(dest="stage", metavar="{" + ",".join(STAGES) + "}", required=True)
    for stage, help_text in STAGES.items():
        sp = sub.add_parser(stage, help=help_text, description=help_text)
        if stage == chosen:
            _load(stage).add_arguments(sp)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    chosen = chosen if chosen in STAGES else None
    if chosen is not None:
        try:
            _load(chosen)
        except ImportError as exc:
            sys.exit(f"stage {chosen!r} is not available: {exc}")
    args = build_parser(chosen).parse_args(argv)
    stage = _load(args.stage)
    from taps.train.common import PAUSED_EXIT, Paused, TrainError

    try:
        stage.main(args)
    except Paused:
        sys.exit(PAUSED_EXIT)           # the stage said where it paused and how to resume
    except (TrainError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
