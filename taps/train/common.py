"""Pieces shared by the training stages: schedule, optimizer groups, checkpoints, progress."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cosine_lr(step: int, peak: float, warmup: int, max_steps: int, min_ratio: float) -> float:
    """Linear warmup to `peak`, then cosine decay to `min_ratio * peak` at `max_steps`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def weighted_split(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices, none on norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


class Checkpointer:
    """Atomic torch checkpoints every few minutes; `load` returns None when there is none."""

    def __init__(self, path: Path, every_minutes: float):
        self.path = Path(path)
        self.every_s = every_minutes * 60
        self.last = time.time()

    def load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=False)

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)
        self.last = time.time()

    def maybe_save(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        if time.time() - self.last >= self.every_s:
            self.save(snapshot())


class Progress:
    """One status line: done/total, rate, elapsed, ETA (bounded by a time budget if given)."""

    def __init__(self, total: int, label: str, unit: str = "step", budget_s: float | None = None):
        self.total, self.label, self.unit, self.budget_s = total, label, unit, budget_s
        self.t0 = time.time()
        self.start_done: int | None = None
        self.last_print = 0.0

    def update(self, done: int, elapsed: float | None = None, extra: str = "") -> None:
        if self.start_done is None:
            self.start_done, self.t0 = done, time.time()
            return
        now = time.time()
        if now - self.last_print < 1.0 and done < self.total:
            return
        self.last_print = now
        wall = now - self.t0
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
