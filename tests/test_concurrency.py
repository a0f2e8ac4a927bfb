"""Sessions that share a pair never touch each other: N `DecodeSession`s stepping at once in N
threads give, token for token and round for round, what each gives alone.

What sessions share is the loaded pair (target and drafter weights, the drafter's fused weights,
the scorer's folded tables, the latency profile); what a decode step writes (KV caches, masks,
captured features, estimator state) belongs to its session. These tests run every selector,
estimator and size mode, greedy and sampled, on the shipped pair as the app loads it, in threads
released together so their rounds interleave.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import fixed_profile

from taps import DecodeSession, load_pair
from taps.pair import default_pair_path

PROMPTS = [
    "def merge(left, right):\n    result = []\n    i = j = 0\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "import os\n\n\ndef read_lines(path):\n",
    "class Stack:\n    def __init__(self):\n",
    "def is_prime(n):\n    for d in range(2, n):\n",
    "def parse_config(path):\n    result = {}\n",
    "def mean(values):\n    return ",
    "for key, value in sorted(table.items()):\n",
]

# every selector, estimator and size mode; greedy and sampled (each with its seed)
CASES = [
    dict(selector="taps", estimator="learned", taps_mode="cost", budget=16),
    dict(selector="taps", estimator="online", taps_mode="reach", budget=32),
    dict(selector="taps", estimator="marginal", taps_mode="utility", budget=24, temperature=0.7, seed=3),
    dict(selector="taps", estimator="learned", taps_mode="reach", budget=8, temperature=0.7, seed=11),
    dict(selector="ddtree", ddtree_mode="budget", budget=16),
    dict(selector="ddtree", ddtree_mode="cost", budget=32, temperature=0.7, seed=5),
    dict(selector="dflash", budget=16, temperature=0.7, seed=7),
    dict(selector="oracle", budget=16),
]
TOKENS = 32


@pytest.fixture(scope="module")
def app_pair():
    """The shipped pair as the app and the CLI load it on the CPU (float32, oneDNN-packed target,
    the drafter at its default precision)."""
    return load_pair(default_pair_path())


_PROFILES: dict = {}


def _profile(pair):
    """One latency profile per pair, shared by every session (as the app shares its profiles)."""
    return _PROFILES.setdefault(id(pair), fixed_profile(pair))


def _session(pair, prompt: str, case: dict) -> DecodeSession:
    return DecodeSession(pair, prompt, profile=_profile(pair), max_new_tokens=TOKENS, stop_at_eos=False, **case)


def _trace(session: DecodeSession) -> list[tuple]:
    """Everything a round decided and committed: tokens, pool, estimates, tree, verdicts."""
    return [(r.committed_tokens, r.pool_tokens, r.pool_reach, r.selected, r.status, r.accepted, r.tau,
             r.verified_nodes, r.waste_nodes, r.expected_tau, r.bonus_token) for r in session.rounds]


def _solo(pair, prompt: str, case: dict) -> tuple[list[int], list[tuple]]:
    session = _session(pair, prompt, case)
    session.run()
    return session.generated, _trace(session)


def _together(pair, jobs: list[tuple[str, dict]], start_together: bool = True) -> list[tuple[list[int], list[tuple]]]:
    """Every job in its own thread: the sessions are made, then released at once, and each steps to
    its end (a barrier before every round, so the threads' rounds overlap)."""
    barrier = threading.Barrier(len(jobs))
    sessions = [None] * len(jobs)

    def work(index: int):
        prompt, case = jobs[index]
        barrier.wait()
        session = sessions[index] = _session(pair, prompt, case)
        while not session.finished:
            if start_together:
                try:
                    barrier.wait(timeout=30)
                except threading.BrokenBarrierError:
                    pass         # a session that finished early leaves the others to go on alone
            session.step()
        barrier.abort()          # release the others from waiting for this one
        return session.generated, _trace(session)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(work, range(len(jobs))))


def test_eight_sessions_in_eight_threads_equal_their_solo_runs(app_pair):
    jobs = list(zip(PROMPTS, CASES))
    alone = [_solo(app_pair, prompt, case) for prompt, case in jobs]
    together = _together(app_pair, jobs)
    for (prompt, case), solo, concurrent in zip(jobs, alone, together):
        assert concurrent[0] == solo[0], f"{case} on {prompt!r}: tokens differ when run alongside others"
        assert concurrent[1] == solo[1], f"{case} on {prompt!r}: rounds differ when run alongside others"


def test_sessions_on_one_prompt_step_in_lockstep_and_agree(app_pair):
    """Six sessions of the same prompt and settings (a class on one link), each round started at the
    same moment: all equal the solo run, round for round."""
    case = dict(selector="taps", estimator="learned", taps_mode="cost", budget=16)
    solo = _solo(app_pair, PROMPTS[0], case)
    for result in _together(app_pair, [(PROMPTS[0], case)] * 6):
        assert result == solo


def _shared_state(pair) -> dict:
    """What sessions share, as values a decode must leave as they were: every weight's and buffer's
    version counter (bumped by any in-place write), every module's hooks and attribute names, the
    fused drafter's and the scorer tables' attributes (tensor versions, array bytes), the profile's."""
    import numpy as np
    import torch

    from taps.estimate import scorer_tables
    from taps.fast_drafter import fast_drafter

    def seal(t):
        """A tensor's version counter; for inference tensors (which keep none) a checksum of its values."""
        if t.is_inference():
            values = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
            return t.data_ptr(), tuple(t.shape), complex(values.sum()), float(values.abs().sum())
        return t._version

    def tensors(module):
        return [(name, seal(t)) for name, t in [*module.named_parameters(), *module.named_buffers()]]

    def modules(model):
        return [(name, sorted(m.__dict__), len(m._forward_hooks), len(m._forward_pre_hooks))
                for name, m in model.named_modules()]

    def plain(obj):
        out = {}
        for name, value in vars(obj).items():
            if isinstance(value, torch.Tensor):
                out[name] = (value.data_ptr(), tuple(value.shape), seal(value))
            elif isinstance(value, np.ndarray):
                out[name] = value.tobytes()
            elif isinstance(value, (int, float, str, tuple, list, dict, type(None))):
                out[name] = repr(value)
            else:
                out[name] = id(value)
        return out

    fast = fast_drafter(pair)
    return {"target": (tensors(pair.target), modules(pair.target)),
            "drafter": (tensors(pair.drafter), modules(pair.drafter)),
            "scorer": (tensors(pair.scorer), plain(scorer_tables(pair))),
            "fast": (plain(fast), [plain(layer) for layer in fast.layers]),
            "profile": plain(_profile(pair)),
            "pair": {k: v for k, v in plain(pair).items() if k not in ("_texts",)}}


def test_decoding_writes_nothing_that_sessions_share(app_pair):
    """After one warm-up session (which builds the fused drafter and the scorer's tables once), four
    sessions decoding at once leave every shared weight, hook, table and attribute as it was."""
    _solo(app_pair, PROMPTS[1], CASES[0])
    before = _shared_state(app_pair)
    _together(app_pair, list(zip(PROMPTS[:4], CASES[:4])))
    assert _shared_state(app_pair) == before


def test_shared_parts_are_built_once_when_sessions_start_together(app_pair, monkeypatch):
    """The fused drafter and the scorer's tables are built under a lock: eight sessions starting at
    the same moment on a freshly loaded pair get one of each."""
    from taps import estimate, fast_drafter

    monkeypatch.setattr(fast_drafter, "_BUILT", {})
    monkeypatch.setattr(estimate, "_TABLES", {})
    barrier = threading.Barrier(8)

    def parts(_):
        barrier.wait()
        return fast_drafter.fast_drafter(app_pair), estimate.scorer_tables(app_pair)

    with ThreadPoolExecutor(max_workers=8) as pool:
        built = list(pool.map(parts, range(8)))
    assert len({id(fast) for fast, _ in built}) == 1 and len({id(tables) for _, tables in built}) == 1
