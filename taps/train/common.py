"""Pieces shared by the training stages: schedule, optimizer groups, checkpoints, progress."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

CHOICES = {"schedule": ("steps", "time"), "label": ("prob", "greedy")}


def add_config_arguments(parser: argparse.ArgumentParser, *configs, choices: dict | None = None,
                         skip: tuple[str, ...] = ()) -> None:
    """One `--field-name` option per dataclass field (except `skip`); None (unset) keeps the
    config's default."""
    choices = {**CHOICES, **(choices or {})}
    for cls in configs:
        for f in fields(cls):
            if f.name in skip:
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name in choices:
                parser.add_argument(flag, choices=choices[f.name], default=None, help=f"default {f.default}")
            else:
                kind = int if f.name == "max_files" else type(f.default)
                parser.add_argument(flag, type=kind, default=None, help=f"default {f.default}")


def apply_arguments(args: argparse.Namespace, *configs) -> None:
    """Copy the options the user set onto the config objects."""
    for cfg in configs:
        for f in fields(cfg):
            value = getattr(args, f.name, None)
            if value is not None:
                setattr(cfg, f.name, value)


def check_ranges(cfg, bounds: dict[str, tuple[float | None, float | None]]) -> None:
    """Refuse a config whose fields fall outside `bounds` (name -> (lowest, highest), None for no
    limit), naming the option and its allowed range, before any work starts."""
    for name, (low, high) in bounds.items():
        value = getattr(cfg, name)
        if (low is not None and value < low) or (high is not None and value > high):
            allowed = (f"between {low:g} and {high:g}" if low is not None and high is not None
                       else f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise SystemExit(f"--{name.replace('_', '-')} {value:g}: must be {allowed}")


def check_loss_dropped(losses: list[float], stage: str, n: int = 5) -> None:
    """The --quick smoke test: the mean of the last n losses must be below that of the first n."""
    if len(losses) < 2 * n:
        raise SystemExit(f"quick check failed: only {len(losses)} {stage} steps ran")
    first, last = float(np.mean(losses[:n])), float(np.mean(losses[-n:]))
    if not last < first:
        raise SystemExit(f"quick check failed: {stage} loss did not go down ({first:.4f} -> {last:.4f})")
    print(f"quick check ok: {stage} loss {first:.4f} -> {last:.4f}")


def _libc():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


LIBC = _libc()


def trim_heap() -> bool:
    """Hand the heap's free pages back to the system (glibc's `malloc_trim`). A loop that keeps a
    few small objects from each pass while it frees large temporaries (a pool's 700 x 4096 logits,
    a sequence's hidden states) leaves those pages pinned between the kept objects: collecting
    scorer traces of the 4-layer drafter's pair grew the process by 4-10 MB per 85 kB trace (a
    4,000-trace run filled 24 GB at trace 2,858), and by 2.7 MB with a trim before each sequence,
    at the same speed (120 traces, 2 runs each way). Returns whether it ran (False off glibc,
    where nothing changes)."""
    if LIBC is None or not hasattr(LIBC, "malloc_trim"):
        return False
    LIBC.malloc_trim(0)
    return True


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cosine_lr(step: int, peak: float, warmup: int, max_steps: int, min_ratio: float,
              time_fraction: float = 0.0) -> float:
    """Linear warmup to `peak`, then cosine decay to `min_ratio * peak` at `max_steps`, or earlier
    when `time_fraction` (the share of a time budget used) runs ahead of the steps."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, max((step - warmup) / max(1, max_steps - warmup), time_fraction))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def weighted_split(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices, none on norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically, through a temporary file of this process's own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def acquire_lock(lock: Path) -> None:
    """Refuse to run while another live process trains into the same folder."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    if lock.exists():
        text = lock.read_text().strip()
        pid = int(text) if text.isdigit() else 0
        if pid and pid != os.getpid():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                pass  # stale lock from a finished or killed run
            else:
                raise SystemExit(f"another run (pid {pid}) is training into {lock.parent}; "
                                 f"stop it first or delete {lock}")
    lock.write_text(str(os.getpid()))


def release_lock(lock: Path) -> None:
    if lock.exists() and lock.read_text().strip() == str(os.getpid()):
        lock.unlink()


class Checkpointer:
    """Atomic torch checkpoints every few minutes; `load` returns None when there is none."""

    def __init__(self, path: Path, every_minutes: float):
        self.path = Path(path)
        self.every_s = every_minutes * 60
        self.last = time.time()

    def load(self) -> dict[str, Any] | None:
        return load_checkpoint(self.path)

    def save(self, state: dict[str, Any]) -> None:
        save_checkpoint(self.path, state)
        self.last = time.time()

    def maybe_save(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        if time.time() - self.last >= self.every_s:
            self.save(snapshot())


class StepClock:
    """Training time for a time-budgeted schedule (`--schedule time`): the sum of the training
    steps' own durations, so evaluations, checkpoints and start-up do not count. A step that took
    more than `factor` times the median of the last `window` steps (the process was stopped with
    SIGSTOP to measure speed on an idle machine, or the machine slept) counts as that median, so a
    pause does not eat the schedule; a busy machine's slower steps still count in full."""

    def __init__(self, elapsed: float = 0.0, window: int = 50, factor: float = 5.0, clock=time.monotonic):
        self.elapsed, self.window, self.factor, self.clock = elapsed, window, factor, clock
        self.recent: list[float] = []
        self.paused_s = 0.0            # time left out, for the log
        self.last = 0.0                # the last step's counted duration
        self._t: float | None = None

    def start(self) -> None:
        self._t = self.clock()

    def stop(self) -> float:
        """End the step begun by `start`; returns the training time so far."""
        took = self.clock() - self._t
        if len(self.recent) >= 10:
            typical = float(np.median(self.recent))
            if took > self.factor * typical:
                self.paused_s += took - typical
                took = typical
        self.recent = (self.recent + [took])[-self.window:]
        self.last = took
        self.elapsed += took
        return self.elapsed


class Progress:
    """One status line: done/total, rate, elapsed, ETA (bounded by a time budget if given). With
    `elapsed` (a stage's training time), the rate is per second of it, so a paused run's rate does
    not drop."""

    def __init__(self, total: int, label: str, unit: str = "step", budget_s: float | None = None):
        self.total, self.label, self.unit, self.budget_s = total, label, unit, budget_s
        self.t0 = time.time()
        self.start_done: int | None = None
        self.start_elapsed: float | None = None
        self.last_print = 0.0

    def update(self, done: int, elapsed: float | None = None, extra: str = "") -> None:
        if self.start_done is None:
            self.start_done, self.t0, self.start_elapsed = done, time.time(), elapsed
            return
        now = time.time()
        if now - self.last_print < 1.0 and done < self.total:
            return
        self.last_print = now
        wall = now - self.t0
        if elapsed is not None and self.start_elapsed is not None:
            wall = elapsed - self.start_elapsed
        rate = (done - self.start_done) / wall if wall > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        if self.budget_s is not None and elapsed is not None:
            eta = min(eta, max(self.budget_s - elapsed, 0.0))
        shown = elapsed if elapsed is not None else wall
        sys.stdout.write(f"\r{self.label}: {done}/{self.total} {self.unit}s | {rate:.2f} {self.unit}/s | "
                         f"{shown / 60:.1f} min | eta {eta / 60:.1f} min | {extra}   ")
        sys.stdout.flush()
        if done >= self.total:
            sys.stdout.write("\n")
