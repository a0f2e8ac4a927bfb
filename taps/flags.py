"""Command-line flags from dataclass fields, with their limits: one builder for the decode settings
(`taps.config`) and the training stages (`taps.train`).

A field made with `spec(default, help, lo, hi, choices)` keeps its help text and limits beside it;
`add_flags` gives every field a `--field-name` flag (help, limits and default in its help text), and
`check_limits` refuses a filled-in config whose fields fall outside their limits, with the same
words as `check_range` uses everywhere: "<name> must be from 1 to 1024, got 0".

`add_out_flag` gives a command its `--out`, an output folder in every command that writes files
(the sweep, taps compare, the profiles, the vLLM check), each saying in its help what it writes
there; a path that looks like a file (ends in .json, .md or .csv) or names one is refused.
`out_file` is a file's path in it, the folder made before any run.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import MISSING, Field, field, fields
from pathlib import Path
from typing import Any


def spec(default, help: str = "", lo=None, hi=None, choices=None, flag: bool = True) -> Any:
    """A dataclass field with its limits and help text kept beside it. `choices` may be a function
    returning them (read when a flag is built or a value checked); `flag=False` leaves it off the
    command line."""
    return field(default=default, metadata={"help": help, "min": lo, "max": hi, "choices": choices, "flag": flag})


def range_text(lo, hi) -> str:
    """The allowed range in words: "from 1 to 1024", "at least 0" or "at most 5.0"."""
    if lo is not None and hi is not None:
        return f"from {lo} to {hi}"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


def check_range(name: str, value, lo=None, hi=None) -> None:
    """Raise ValueError, naming `name` and its range, when the number `value` is NaN or outside [lo, hi]."""
    number = float(value)
    if math.isnan(number) or (lo is not None and number < lo) or (hi is not None and number > hi):
        raise ValueError(f"{name} must be {range_text(lo, hi)}, got {value!r}")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def field_default(f: Field):
    return f.default if f.default is not MISSING else None


def field_limits(f: Field) -> dict:
    """Help, min, max and choices of a field (empty help, no limits for a plain field); choices
    given as a function are called."""
    meta = f.metadata
    choices = meta.get("choices")
    return {"help": meta.get("help", ""), "min": meta.get("min"), "max": meta.get("max"),
            "choices": choices() if callable(choices) else choices}


def add_flags(parser: argparse.ArgumentParser, cls, *, skip: tuple[str, ...] = (), unset: bool = False,
              choices: dict[str, Any] | None = None) -> None:
    """One `--field-name` flag per field of the dataclass `cls` (except `skip` and fields made with
    `flag=False`): typed as its default (int when the default is None), with the field's choices (or
    those `choices` names for it), and a help text of the field's help, its limits and its default.
    With `unset`, a flag the user does not give parses as None, so that `apply_flags` keeps whatever
    the config object already holds."""
    for f in fields(cls):
        if f.name in skip or not f.metadata.get("flag", True):
            continue
        limits = field_limits(f)
        allowed = (choices or {}).get(f.name, limits["choices"])
        default = field_default(f)
        kind = type(default) if default is not None else int
        bounds = range_text(limits["min"], limits["max"]) if limits["min"] is not None or limits["max"] is not None \
            else ""
        help_text = limits["help"] + (f" ({bounds})" if bounds else "") + ("; " if limits["help"] else "") + \
            f"default {default}"
        parser.add_argument(flag_name(f.name), type=kind if allowed is None else str, choices=allowed,
                            default=None if unset else default, help=help_text)


def apply_flags(args: argparse.Namespace, *configs) -> None:
    """Copy the flags the user gave (those not None) onto the config objects' fields."""
    for cfg in configs:
        for f in fields(cfg):
            value = getattr(args, f.name, None)
            if value is not None:
                setattr(cfg, f.name, value)


def check_limits(cfg) -> None:
    """Raise ValueError for the first field of `cfg` outside its `spec` limits, naming its flag."""
    for f in fields(cfg):
        limits = field_limits(f)
        value = getattr(cfg, f.name)
        if value is not None and (limits["min"] is not None or limits["max"] is not None):
            check_range(flag_name(f.name), value, limits["min"], limits["max"])


FILE_SUFFIXES = (".json", ".md", ".csv")       # what an `--out` that means a file ends in


def out_folder(writes: str):
    """The type of an `--out` flag: the folder's path as given. A path that names a file, or looks
    like one (ends in .json, .md or .csv, without a trailing slash, and is not a folder already), is
    refused: argparse prints the message and exits with status 2 before anything is run or written.
    The message says what the command writes in the folder and which folder it could be."""
    def parse(text: str) -> str:
        path = Path(text)
        looks = path.suffix.lower() in FILE_SUFFIXES and not text.endswith(("/", os.sep))
        if path.is_dir() or not (path.is_file() or looks):
            return text
        why = "is a file" if path.is_file() else f"ends in {path.suffix}"
        instead = path.with_suffix("") if path.suffix else path.with_name(path.name + "-out")
        hint = f": give a folder, e.g. --out {instead}" if not instead.is_file() else ": give a folder"
        raise argparse.ArgumentTypeError(f"--out is a folder: this command writes {writes} in it; {text!r} {why}, "
                                         f"so nothing was run or written{hint}")
    return parse


def add_out_flag(parser: argparse.ArgumentParser, writes: str, more: str = "", default: str | None = None,
                 required: bool = False) -> None:
    """`--out DIR`, the same flag in every command that writes files: "output folder; writes
    <writes> in it", then `more` and the default; a file-like path refused (`out_folder`)."""
    tail = (f"; {more}" if more else "") + (f"; default {default}" if default is not None else "")
    parser.add_argument("--out", metavar="DIR", type=out_folder(writes), default=default, required=required,
                        help=f"output folder; writes {writes} in it{tail}")


def out_file(folder: str | None, name: str) -> Path | None:
    """`folder/name` for a command's `--out` (None without one), the folder made now: before any run,
    so that a folder that cannot be made is said at once (a ValueError), not after the runs."""
    if folder is None:
        return None
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {folder}: cannot make that folder ({exc.strerror or exc})") from None
    return Path(folder) / name
