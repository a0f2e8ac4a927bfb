"""Command line for the training stages: ``python -m taps.train {tokenizer,target,unloop,drafter,scorer,package}``.

Each stage is a module ``taps.train.<stage>`` exposing ``add_arguments(parser)`` and
``main(args)``. A stage's module is imported only to build its subcommand, and a stage whose
module is missing (or fails to import) is listed as unavailable instead of breaking the others.
"""

from __future__ import annotations

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
    _load(args.stage).main(args)


if __name__ == "__main__":
    main()
