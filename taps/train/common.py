"""Pieces shared by the training stages: errors, flags, schedule, optimizer groups, checkpoints
(with their lock and SIGTERM pause), progress."""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import numpy as np
import torch
from tqdm import tqdm

from taps.flags import add_flags, apply_flags, check_limits
from taps.machine import usable_cores  # noqa: F401  (the training stages import it from here)

CHOICES = {"schedule": ("steps", "time"), "label": ("prob", "greedy")}
PAUSED_EXIT = 75  # EX_TEMPFAIL: paused by a signal; run the same command again to resume


class TrainError(RuntimeError):
    """A training stage cannot go on (a clash with earlier runs' files, a failed quick check); the
    message says why and what to do. The command line prints it as one line and exits with status 2."""


class Paused(Exception):
    """A run stopped by SIGTERM or SIGINT after saving its checkpoint; running the same command
    again resumes it. The command line exits with `PAUSED_EXIT`."""


def add_config_arguments(parser: argparse.ArgumentParser, *configs, choices: dict | None = None,
                         skip: tuple[str, ...] = ()) -> None:
    """One `--field-name` option per dataclass field (except `skip`; `taps.flags.add_flags`); an
    option not given parses as None, which keeps the config's default (`apply_arguments`)."""
    for cls in configs:
        add_flags(parser, cls, skip=skip, unset=True, choices={**CHOICES, **(choices or {})})


def apply_arguments(args: argparse.Namespace, *configs) -> None:
    """Copy the options the user set onto the config objects, then refuse, with a ValueError naming
    the option and its range, any field outside the limits its `taps.flags.spec` gives."""
    apply_flags(args, *configs)
    for cfg in configs:
        check_limits(cfg)


def check_loss_dropped(losses: list[float], stage: str, n: int = 5) -> None:
    """The --quick smoke test: the mean of the last n losses must be below that of the first n."""
    if len(losses) < 2 * n:
        raise TrainError(f"quick check failed: only {len(losses)} {stage} steps ran")
    first, last = float(np.mean(losses[:n])), float(np.mean(losses[-n:]))
    if not last < first:
        raise TrainError(f"quick check failed: {stage} loss did not go down ({first:.4f} -> {last:.4f})")
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
        if pid and pid != os.getpid() and process_alive(pid):   # else a stale lock of a finished or killed run
            raise TrainError(f"another run (pid {pid}) is training into {lock.parent}; "
                             f"stop it first or delete {lock}")
    lock.write_text(str(os.getpid()))


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs. Not `os.kill(pid, 0)` on Windows, where 0 is CTRL_C_EVENT (a
    Ctrl-C to the console's processes, this one included) and other numbers end the process: ask
    Windows for the process's exit code instead."""
    if os.name == "nt":
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.OpenProcess.restype = ctypes.c_void_p           # a HANDLE: pointer-sized
        kernel32.GetExitCodeProcess.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong))
        kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
        handle = kernel32.OpenProcess(0x1000, False, pid)        # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 5                   # ERROR_ACCESS_DENIED: it runs, as another user
        try:
            code = ctypes.c_ulong()
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                                       # it runs, as another user
        return True
    return True


def release_lock(lock: Path) -> None:
    if lock.exists() and lock.read_text().strip() == str(os.getpid()):
        lock.unlink()


class Checkpointer:
    """Atomic torch checkpoints every few minutes; `load` returns None when there is none.

    `guard()` (a context manager) keeps a run to itself: it holds a lock file beside the
    checkpoint, so that a second run into the same folder is refused, and turns SIGTERM and SIGINT
    (Ctrl-C) into a request (`stop_requested`) that the run answers at its next step boundary with
    `pause`: a checkpoint, a message and `Paused`. Running the same command again resumes there."""

    def __init__(self, path: Path, every_minutes: float):
        self.path = Path(path)
        self.lock = self.path.with_name("LOCK")
        self.every_s = every_minutes * 60
        self.last = time.time()
        self.signal: int | None = None        # the signal received; the handler only records it (no I/O)
        self._handlers: dict[int, Any] = {}

    def load(self) -> dict[str, Any] | None:
        return load_checkpoint(self.path)

    def save(self, state: dict[str, Any]) -> None:
        save_checkpoint(self.path, state)
        self.last = time.time()

    def maybe_save(self, snapshot: Callable[[], dict[str, Any]]) -> bool:
        """Save `snapshot()` if the last save is older than the interval (and no pause is asked for:
        the pause saves); returns whether it saved."""
        if self.stop_requested or time.time() - self.last < self.every_s:
            return False
        self.save(snapshot())
        return True

    @staticmethod
    def restore(state: dict[str, Any], model, optimizer, rng: np.random.Generator) -> None:
        """Put a saved run's weights, optimizer state and random generators (numpy's, and torch's
        when the stage saved it) back, to carry on where it stopped."""
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["numpy_rng"]
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])

    @property
    def stop_requested(self) -> bool:
        return self.signal is not None

    def _on_signal(self, signum, frame) -> None:
        self.signal = signum

    def restore_signals(self) -> None:
        """Give SIGTERM and SIGINT back their handlers from before `guard`."""
        for s, handler in self._handlers.items():
            signal.signal(s, handler)
        self._handlers = {}

    @contextmanager
    def guard(self) -> Iterator["Checkpointer"]:
        """Hold the lock and catch SIGTERM and SIGINT inside the block; give both back after it. A
        crash leaves no lock (a killed process leaves a stale one, which the next run ignores)."""
        acquire_lock(self.lock)
        self._handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield self
        finally:
            self.restore_signals()
            release_lock(self.lock)

    def pause(self, state: dict[str, Any], where: str) -> NoReturn:
        """Save `state`, let go of the lock and the signals, say so, and raise `Paused`."""
        self.restore_signals()
        self.save(state)
        release_lock(self.lock)
        message = (f"{signal.Signals(self.signal).name}: paused at {where}; checkpoint saved to {self.path}; "
                   f"run the same command again to resume")
        print("\n" + message, flush=True)
        raise Paused(message)


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
    """A tqdm bar of done/total; its postfix holds the rate, the minutes so far, the ETA (bounded by a
    time budget if given) and the stage's own figures. With `elapsed` (a stage's training time), the
    rate is per second of it, so a paused run's rate does not drop. The first `update` only notes
    where this session starts."""

    def __init__(self, total: int, label: str, unit: str = "step", budget_s: float | None = None, file=None):
        self.total, self.label, self.unit, self.budget_s = total, label, unit, budget_s
        self.file = file if file is not None else sys.stdout
        self.t0 = time.time()
        self.start_done: int | None = None
        self.start_elapsed: float | None = None
        self.bar: tqdm | None = None

    def update(self, done: int, elapsed: float | None = None, extra: str = "") -> None:
        if self.start_done is None:
            self.start_done, self.t0, self.start_elapsed = done, time.time(), elapsed
            self.bar = tqdm(total=self.total, initial=done, desc=self.label, unit=self.unit, file=self.file,
                            mininterval=1.0, dynamic_ncols=True,
                            bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} " + self.unit
                            + "s{postfix}")
            return
        if self.bar is None:                 # closed
            return
        self.bar.set_postfix_str(self.postfix(done, elapsed, extra), refresh=False)
        self.bar.update(done - self.bar.n)
        if done >= self.total:
            self.close()

    def postfix(self, done: int, elapsed: float | None, extra: str = "") -> str:
        """`rate unit/s | minutes | eta minutes | extra`."""
        wall = time.time() - self.t0
        if elapsed is not None and self.start_elapsed is not None:
            wall = elapsed - self.start_elapsed
        rate = (done - self.start_done) / wall if wall > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        if self.budget_s is not None and elapsed is not None:
            eta = min(eta, max(self.budget_s - elapsed, 0.0))
        shown = elapsed if elapsed is not None else wall
        return f"{rate:.2f} {self.unit}/s | {shown / 60:.1f} min | eta {eta / 60:.1f} min" + (
            f" | {extra}" if extra else "")

    def write(self, line: str) -> None:
        """Print a line above the bar."""
        tqdm.write(line, file=self.file)
        self.file.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
