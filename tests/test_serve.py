"""Serving a class (taps.studio.serve): the decode service's queue (clicks first, fair, places told),
runs shared by link (a class on one link decodes once, each session keeps its own view), a bounded
cache of runs, and finished runs that let go of their caches."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from conftest import fixed_profile

from taps import DecodeConfig
from taps.studio.serve import DecodeService, SharedRuns
from taps.studio.stepper import StepController

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def profile(tiny_pair_f32):
    return fixed_profile(tiny_pair_f32)


def config(**changes) -> DecodeConfig:
    return replace(DecodeConfig(budget=8, max_new_tokens=24, stop_at_eos=False), **changes)


# ---------------------------------------------------------------------------- the queue
def test_one_worker_serves_clicks_before_background_work_first_come_first_served():
    service = DecodeService(workers=1)
    gate = threading.Event()
    order: list[str] = []
    blocker = service.submit(gate.wait)                     # holds the only worker
    jobs = [service.submit(lambda name=name: order.append(name), background=name.startswith("bg"))
            for name in ("bg1", "click1", "bg2", "click2")]
    assert [service.ahead(job) for job in jobs] == [3, 1, 4, 2]   # the running job counts as ahead
    gate.set()
    for job in [blocker, *jobs]:
        service.wait(job)
    assert order == ["click1", "click2", "bg1", "bg2"]
    assert service.ahead(jobs[0]) == 0 and service.completed == 5


def test_a_waiting_caller_is_told_its_place_and_gets_errors_back():
    service = DecodeService(workers=1)
    gate = threading.Event()
    service.submit(gate.wait)
    places: list[int] = []
    threading.Timer(0.6, gate.set).start()
    assert service.call(lambda: 42, on_wait=places.append) == 42
    assert places and places[0] == 1
    with pytest.raises(ZeroDivisionError):
        service.call(lambda: 1 / 0)
    assert service.call(lambda: "still serving") == "still serving"


def test_at_most_the_workers_run_at_once():
    service = DecodeService(workers=2)
    running, peak, lock = [0], [0], threading.Lock()

    def work():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: service.call(work), range(12)))
    assert peak[0] == 2


def test_a_job_that_calls_the_service_runs_in_place():
    service = DecodeService(workers=1)
    assert service.call(lambda: service.call(lambda: "inner")) == "inner"


# ---------------------------------------------------------------------------- runs shared by link
def test_a_class_on_one_link_decodes_each_round_once(tiny_pair_f32, profile):
    """Six sessions on one link press Step three times together: each sees rounds 1-3 equal to a
    solo run's, and the link's run decoded three rounds in all."""
    runs = SharedRuns(DecodeService(workers=1))
    solo = StepController(runs=SharedRuns())
    solo.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=3)
    barrier = threading.Barrier(6)

    def student(_):
        ctrl = StepController(runs=runs)
        for _ in range(3):
            barrier.wait()
            ctrl.advance(tiny_pair_f32, PROMPT, config(), profile)
        return ctrl

    with ThreadPoolExecutor(max_workers=6) as pool:
        class_ = list(pool.map(student, range(6)))
    run = class_[0].run
    assert all(ctrl.run is run for ctrl in class_) and run.decoded == 3 and run.opened == 6 and runs.created == 1
    for ctrl in class_:
        assert ctrl.view == 3 and len(ctrl.visible) == 3
        assert [(r.selected, r.committed_tokens, r.tau) for r in ctrl.visible] == \
               [(r.selected, r.committed_tokens, r.tau) for r in solo.visible]


def test_each_session_keeps_its_own_view_of_a_shared_run(tiny_pair_f32, profile):
    runs = SharedRuns(DecodeService(workers=1))
    ahead, behind = StepController(runs=runs), StepController(runs=runs)
    ahead.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=4)
    behind.advance(tiny_pair_f32, PROMPT, config(), profile)
    assert behind.run is ahead.run and behind.run.decoded == 4
    assert behind.view == 1 and len(behind.visible) == 1 and behind.numbers(profile).rounds == 1
    assert ahead.view == 4 and ahead.numbers(profile).tokens > behind.numbers(profile).tokens
    behind.advance(tiny_pair_f32, PROMPT, config(), profile, rounds=2)    # rounds 2-3: decoded already
    assert behind.view == 3 and behind.run.decoded == 4
    behind.advance(tiny_pair_f32, PROMPT, config(budget=4), profile)      # another setting: a run of its own
    assert behind.run is not ahead.run and behind.view == 1 and ahead.view == 4


def test_sessions_on_different_links_step_together_as_alone(tiny_pair_f32, profile):
    """Eight sessions on eight links (selectors, estimators, T=0 and T>0), stepping through one
    service with two workers, each to the end: every run equals its solo run."""
    cases = [config(selector="taps", estimator="online"), config(selector="taps", estimator="marginal",
                                                               temperature=0.7, seed=4),
             config(selector="ddtree"), config(selector="ddtree", temperature=0.7, seed=2),
             config(selector="dflash"), config(selector="oracle"), config(selector="ar"),
             config(selector="taps", taps_mode="reach", budget=12)]
    prompts = [PROMPT, "x = 1\n", "def f(n):\n", "for i in", "class A:\n", "import os\n", "while True:\n", "y ="]

    def run_to_end(args, runs):
        prompt, settings = args
        ctrl = StepController(runs=runs)
        ctrl.advance(tiny_pair_f32, prompt, settings, profile, rounds=None)
        return [(r.selected, r.committed_tokens) for r in ctrl.visible]

    alone = [run_to_end(args, SharedRuns()) for args in zip(prompts, cases)]
    shared = SharedRuns(DecodeService(workers=2))
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda args: run_to_end(args, shared), zip(prompts, cases)))
    assert together == alone


def test_the_cache_of_runs_is_bounded_and_finished_runs_let_go_of_their_caches(tiny_pair_f32, profile):
    runs = SharedRuns(DecodeService(workers=1), limit=3)
    controllers = []
    for budget in range(1, 7):
        ctrl = StepController(runs=runs)
        ctrl.advance(tiny_pair_f32, PROMPT, config(budget=budget, max_new_tokens=6), profile, rounds=None)
        controllers.append(ctrl)
    assert len(runs) == 3 and runs.created == 6
    finished = controllers[-1].session
    assert finished.finished and finished.cache is None and finished.draft_context is None
    assert controllers[-1].visible and controllers[-1].session.text        # its rounds and text stay
    again = StepController(runs=runs)
    again.advance(tiny_pair_f32, PROMPT, config(budget=1, max_new_tokens=6), profile)   # dropped: decoded anew
    assert runs.created == 7 and again.run is not controllers[0].run


def test_a_held_place_counts_as_a_running_job():
    """A page that decodes in its own thread (a race) holds one worker's place: with one worker,
    a click submitted meanwhile waits until the place is given back."""
    service = DecodeService(workers=1)
    order: list[str] = []
    with service.held():
        job = service.submit(lambda: order.append("click"))
        time.sleep(0.3)
        assert order == [] and service.ahead(job) == 1
        order.append("race")
    service.wait(job)
    assert order == ["race", "click"]
    with pytest.raises(RuntimeError):
        with service.held():
            raise RuntimeError("a race that fails gives its place back")
    assert service.call(lambda: "served") == "served"
