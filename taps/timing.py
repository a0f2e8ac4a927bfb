"""One stage timer for every round: `with timer("verify"): ...` adds that block's seconds to the stage.

On the CPU a stage is charged its wall-clock seconds (`time.perf_counter`). On CUDA the timer never
waits inside a round: it records a CUDA event (`enable_timing=True`) where each stage starts and ends,
and reading `seconds` synchronizes once, on the last event, then turns each event pair into seconds.
A stage is thus charged the stretch of the GPU's timeline between its boundaries: its own kernels, and
the host work it did while the GPU had nothing queued. The stages of a round follow each other, so
their seconds add up to the round's span, as on the CPU. Read `seconds` once, at the end of the round
(the session does, after the walk has already waited for the verdict): that is the one synchronize.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable

import torch

from .record import STAGES


class StageTimer:
    """Seconds per stage of one round (or of a prefill).

    `event` makes the timing events of a device (default: `torch.cuda.Event` on CUDA, none elsewhere);
    `clock` is the host clock of the event-free path. Both are parameters so that tests can drive the
    bookkeeping of either path on any machine."""

    def __init__(self, device: torch.device | str = "cpu", event: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.device = torch.device(device)
        if event is None and self.device.type == "cuda":
            event = _cuda_event
        self._event = event
        self._clock = clock
        self._seconds = dict.fromkeys(STAGES, 0.0)
        self._pending: list[tuple[str, object, object]] = []   # (stage, start event, end event), not read yet
        self._last = None                                      # the latest end event (its stage's end)

    @property
    def uses_events(self) -> bool:
        return self._event is not None

    @contextmanager
    def __call__(self, stage: str):
        if stage not in self._seconds:
            raise ValueError(f"unknown stage '{stage}': the stages are {', '.join(STAGES)}")
        if self._event is not None:
            # A stage starts where the previous one ended (one event per boundary), so the stages tile the round.
            start = self._last if self._last is not None else self._record()
            try:
                yield
            finally:
                self._last = self._record()
                self._pending.append((stage, start, self._last))
            return
        t0 = self._clock()
        try:
            yield
        finally:
            self._seconds[stage] += self._clock() - t0

    def _record(self):
        event = self._event()
        event.record()
        return event

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per stage. With events: waits once for the last recorded event, then reads them all."""
        if self._pending:
            self._pending[-1][2].synchronize()
            for stage, start, end in self._pending:
                self._seconds[stage] += max(start.elapsed_time(end), 0.0) / 1000.0
            self._pending.clear()
        return self._seconds


def _cuda_event():
    return torch.cuda.Event(enable_timing=True)
