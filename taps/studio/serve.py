"""How the app serves decodes to a classroom: many browser sessions on one server (docs/serving.md).

- `DecodeService`: a bounded pool of decode workers taking jobs from one queue. Clicks go before
  background work (rounds decoded ahead for autoplay, the AR baseline's catch-up), first come first
  served within each. A page waits for its job before it sends its next one, so the rounds of a
  class take turns: a lecturer's Step waits for at most one job of each other waiting page, never
  for a whole "Run to end". A waiting page asks its job how many jobs are ahead of it.
- `LinkRun`: the rounds of one link (pair, prompt, settings and, where trees are sized from one,
  latency profile), decoded once, one round at a time through the service, and read by every
  session that opens the same link; its AR baseline (the measured speed-up's yardstick) likewise.
  Runs are deterministic given the link (decisions never read the clock), so a shared round is the
  round each session would have decoded alone; its stage timings are the ones measured when it was
  decoded. A finished run drops its KV caches.
- `SharedRuns`: a bounded cache of LinkRuns, the least recently opened dropped first (a session
  that holds a dropped run keeps it until it closes).

The engine is safe to step from several threads at once (tests/test_concurrency.py); the service
bounds how many decodes run at once so that they do not fight over the cores: by default one
worker per group of torch threads (`default_workers`), one on a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict, deque
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..config import DecodeConfig
from ..pair import ModelPair
from ..session import DecodeSession
from .app_state import ArBaseline

log = logging.getLogger("taps.serve")
if not log.handlers:                       # the server's log shows what each link decoded
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s taps.serve: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False

WAIT_POLL_S = 0.25                 # how often a waiting page is told its place
AR_CHUNK = 8                       # AR baseline steps per background job


def default_workers() -> int:
    """Decode workers for this process: $TAPS_DECODE_WORKERS, else the cores this process may use
    over torch's threads per decode (the app runs one thread per decode: `app.py`), at most 4;
    one when CUDA is present (one GPU runs one decode's kernels at a time anyway)."""
    named = os.environ.get("TAPS_DECODE_WORKERS", "").strip()
    if named:
        try:
            return max(1, int(named))
        except ValueError:
            raise ValueError(f"TAPS_DECODE_WORKERS must be a whole number, got {named!r}") from None
    import torch

    if torch.cuda.is_available():
        return 1
    from ..machine import usable_cores

    return max(1, min(4, usable_cores() // max(torch.get_num_threads(), 1)))


@dataclass(eq=False)
class Job:
    """One piece of decode work and, once a worker has run it, its result or error."""

    work: Callable[[], Any]
    background: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class DecodeService:
    """A bounded pool of decode workers with one fair queue (see the module)."""

    def __init__(self, workers: int | None = None):
        self.workers = default_workers() if workers is None else max(1, int(workers))
        self._ready = threading.Condition()
        self._clicks: deque[Job] = deque()
        self._background: deque[Job] = deque()
        self._running: list[Job] = []
        self._threads: list[threading.Thread] = []
        self._local = threading.local()
        self.completed = 0

    def submit(self, work: Callable[[], Any], background: bool = False) -> Job:
        job = Job(work, background)
        with self._ready:
            (self._background if background else self._clicks).append(job)
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._serve, name=f"taps-decode-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._ready.notify()
        return job

    def ahead(self, job: Job) -> int:
        """Jobs that start or finish before this one: those running now and those queued before it
        (every click's, for a background job). 0 once it runs."""
        with self._ready:
            if job in self._running or job.done.is_set():
                return 0
            if job.background:
                queued = len(self._clicks) + self._background.index(job) if job in self._background else 0
            else:
                queued = self._clicks.index(job) if job in self._clicks else 0
            return queued + len(self._running)

    def in_worker(self) -> bool:
        """Whether the calling thread is one of this service's workers."""
        return getattr(self._local, "worker", False)

    def call(self, work: Callable[[], Any], background: bool = False,
             on_wait: Callable[[int], None] | None = None) -> Any:
        """Run `work` on a decode worker and return its result (or raise its error). While it waits,
        `on_wait(jobs ahead)` is called every WAIT_POLL_S seconds. Called from a worker (a job that
        itself decodes), it runs in place: a worker never waits for the queue it serves."""
        if self.in_worker():
            return work()
        return self.wait(self.submit(work, background), on_wait)

    def wait(self, job: Job, on_wait: Callable[[int], None] | None = None) -> Any:
        """Wait for a submitted job (see `call`)."""
        while not job.done.wait(WAIT_POLL_S):
            if on_wait is not None:
                on_wait(self.ahead(job))
        if job.error is not None:
            raise job.error
        return job.result

    @contextmanager
    def held(self, on_wait: Callable[[int], None] | None = None, background: bool = False):
        """Hold one worker's place while the caller decodes in its own thread: for work that draws
        as it goes (a race's lanes, a failure search's progress), which must run in the page's own
        thread. It waits in the queue like a job (`on_wait` told its place); while it is held, at
        most `workers - 1` other jobs run."""
        if self.in_worker():
            yield
            return
        started, release = threading.Event(), threading.Event()

        def occupy() -> None:
            started.set()
            release.wait()

        job = self.submit(occupy, background)
        try:
            while not started.wait(WAIT_POLL_S):
                if on_wait is not None:
                    on_wait(self.ahead(job))
            yield
        finally:
            release.set()

    def _take(self) -> Job:
        with self._ready:
            while not (self._clicks or self._background):
                self._ready.wait()
            job = (self._clicks or self._background).popleft()
            self._running.append(job)
            return job

    def _serve(self) -> None:
        self._local.worker = True
        while True:
            job = self._take()
            try:
                job.result = job.work()
            except BaseException as exc:  # noqa: BLE001 - the caller gets it; the worker serves on
                job.error = exc
            finally:
                with self._ready:
                    self._running.remove(job)
                    self.completed += 1
                job.done.set()


# ---------------------------------------------------------------------------- runs shared by link
def profile_digest(profile) -> str:
    """A short digest of a latency profile's contents ("" for none)."""
    if profile is None:
        return ""
    data = json.dumps(asdict(profile), sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def run_key(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, profile) -> tuple:
    """What decides a run's rounds: the loaded pair, the prompt's tokens, every setting and, where
    trees are sized from one, the latency profile."""
    settings = json.dumps(asdict(config), sort_keys=True, default=str)
    where = (pair.name, pair.fingerprint, str(pair.device), str(pair.dtype), pair.drafter_precision, id(pair))
    return where, tuple(prompt_ids), settings, profile_digest(profile) if config.uses_profile else ""


class LinkRun:
    """One link's run, shared read-only by every session that opens it (see the module)."""

    def __init__(self, key: tuple, pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, profile,
                 service: DecodeService):
        self.key, self.pair, self.service = key, pair, service
        self.name = hashlib.sha256(repr(key[1:]).encode()).hexdigest()[:8]     # for the log
        self.session = DecodeSession(pair, prompt_ids, config, profile=profile)
        self.baseline = ArBaseline(pair, prompt_ids, config)
        self.profile = profile
        self.opened = 0                    # sessions that opened this run
        self.decoded = 0                   # rounds this run decoded (each once)
        self._stepping = threading.Lock()  # one round (or AR chunk) of this run at a time
        self._baseline_stepping = threading.Lock()
        self._in_flight: Job | None = None

    @property
    def rounds(self):
        return self.session.rounds

    def _wait_for(self, lock: threading.Lock, on_wait) -> None:
        """Take `lock`, telling `on_wait` the place of the job another session is waiting on meanwhile."""
        while not lock.acquire(timeout=WAIT_POLL_S):
            if on_wait is not None:
                job = self._in_flight
                on_wait(self.service.ahead(job) if job is not None else 0)

    def ensure(self, count: int | None, on_wait: Callable[[int], None] | None = None, background: bool = False,
               on_round: Callable[[DecodeSession], None] | None = None) -> None:
        """Decode until the run has `count` rounds (None: to its end) or has finished, one round per
        service job. Sessions asking for rounds another is decoding wait for it: a round is decoded
        once, whoever asked first."""
        session = self.session
        while not session.finished and (count is None or len(session.rounds) < count):
            self._wait_for(self._stepping, on_wait)
            try:
                if session.finished or (count is not None and len(session.rounds) >= count):
                    return
                if self.service.in_worker():
                    self._step()
                else:
                    self._in_flight = self.service.submit(self._step, background)
                    self.service.wait(self._in_flight, on_wait)
            finally:
                self._in_flight = None
                self._stepping.release()
            if on_round is not None:
                on_round(session)

    def _step(self) -> None:
        record = self.session.step()
        self.decoded += 1
        log.info("link %s: decoded round %d (tau %d, %d nodes verified; %d session%s on this link)", self.name,
                 record.number, record.tau, record.verified_nodes, self.opened, "" if self.opened == 1 else "s")
        if self.session.finished:
            self.session.release()

    def catch_up_baseline(self, tokens: int, on_wait: Callable[[int], None] | None = None,
                          background: bool = False) -> None:
        """Decode the AR baseline to `tokens` tokens (or its end), AR_CHUNK steps per service job."""
        baseline = self.baseline.session
        while not baseline.finished and len(baseline.generated) < tokens:
            self._wait_for(self._baseline_stepping, on_wait)
            try:
                goal = min(tokens, len(baseline.generated) + AR_CHUNK)
                self.service.call(functools.partial(self._catch_up, goal), background=background, on_wait=on_wait)
            finally:
                self._baseline_stepping.release()

    def _catch_up(self, tokens: int) -> None:
        self.baseline.catch_up(tokens)
        main, baseline = self.session, self.baseline.session
        if baseline.finished or (main.finished and len(baseline.generated) >= len(main.generated)):
            baseline.release()


class SharedRuns:
    """A bounded cache of LinkRuns by run key (see the module)."""

    def __init__(self, service: DecodeService | None = None, limit: int = 32):
        self.service = service
        self.limit = max(1, int(limit))
        self._runs: OrderedDict[tuple, Future] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0

    def open(self, pair: ModelPair, prompt: str | list[int], config: DecodeConfig, profile=None,
             on_wait: Callable[[int], None] | None = None) -> LinkRun:
        """The run of this link, made (its prompt prefilled, through the service) by the first session
        that opens it and shared by the rest. Raises the engine's ValueError for a bad prompt or
        settings; a run that failed to start is not kept."""
        config.validate(pair)
        ids = pair.encode_prompt(prompt)
        key = run_key(pair, ids, config, profile)
        service = self.service or decode_service()
        with self._lock:
            future = self._runs.get(key)
            mine = future is None
            if mine:
                future = self._runs[key] = Future()
                while len(self._runs) > self.limit:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(key)
        if mine:
            try:
                run = service.call(lambda: LinkRun(key, pair, ids, config, profile, service), on_wait=on_wait)
            except BaseException as exc:
                with self._lock:
                    if self._runs.get(key) is future:
                        del self._runs[key]
                future.set_exception(exc)
                raise
            self.created += 1
            log.info("link %s: opened (%s, budget %d, %d prompt tokens); %d runs cached", run.name,
                     config.policy.label, config.budget, len(ids), len(self._runs))
            future.set_result(run)
        run = future.result()
        run.opened += 1
        return run

    def __len__(self) -> int:
        return len(self._runs)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()


_SERVICE: DecodeService | None = None
_RUNS: SharedRuns | None = None
_SINGLETONS = threading.Lock()


def decode_service() -> DecodeService:
    """The process's decode service (made at first use)."""
    global _SERVICE
    with _SINGLETONS:
        if _SERVICE is None:
            _SERVICE = DecodeService()
        return _SERVICE


def shared_runs() -> SharedRuns:
    """The process's cache of runs by link (made at first use; $TAPS_SHARED_RUNS runs at most)."""
    global _RUNS
    with _SINGLETONS:
        if _RUNS is None:
            _RUNS = SharedRuns(limit=int(os.environ.get("TAPS_SHARED_RUNS", "32") or 32))
        return _RUNS
