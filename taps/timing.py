"""One stage timer for every round: `with timer("verify"): ...` adds that block's wall-clock
seconds to the stage, waiting for the GPU before and after on CUDA so a stage is charged for its
own kernels and nothing else."""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from .record import STAGES


class StageTimer:
    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.seconds = dict.fromkeys(STAGES, 0.0)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def __call__(self, stage: str):
        if stage not in self.seconds:
            raise ValueError(f"unknown stage '{stage}': the stages are {', '.join(STAGES)}")
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[stage] += time.perf_counter() - t0
