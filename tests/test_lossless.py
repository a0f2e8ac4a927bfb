"""Lossless: every selector's output equals plain decoding, token for token.

Property-based over random prompts (hypothesis), for every selector x budgets {1, 2, 8, 32, 64} x
block sizes, greedy (T=0) and sampled (T>0, same seed -> same draws).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taps import DecodeSession, greedy_continuation, sample_continuation

BUDGETS = (1, 2, 8, 32, 64)
# the tiny pair has a path selector: DFlash2's chain and TAPS over its candidates (the selector estimator)
RUNS = [("dflash", "marginal"), ("ddtree", "marginal"), ("taps", "marginal"), ("taps", "online"),
        ("taps", "selector"), ("oracle", "marginal"), ("ar", "marginal"), ("dflash2", "marginal")]
NEW_TOKENS = 24

prompts = st.lists(st.integers(min_value=2, max_value=95), min_size=1, max_size=40)


def _reference(pair, prompt, temperature, seed):
    if temperature == 0:
        return greedy_continuation(pair, prompt, NEW_TOKENS)
    return sample_continuation(pair, prompt, NEW_TOKENS, temperature, seed)


def _check_run(pair, prompt, reference, selector, estimator, budget, block_size, temperature, seed, mode,
               score_cap=0, pool_factor=4):
    session = DecodeSession(pair, prompt, selector=selector, estimator=estimator, budget=budget,
                            block_size=block_size, temperature=temperature, seed=seed, max_new_tokens=NEW_TOKENS,
                            stop_at_eos=False, taps_mode=mode, score_cap=score_cap, pool_factor=pool_factor,
                            oracle_tokens=reference if selector == "oracle" else None)
    session.run()
    assert session.generated == reference, (selector, estimator, budget, block_size, mode, score_cap)
    assert all(r.verified_nodes <= budget for r in session.rounds)
    assert sum(r.tau for r in session.rounds) == NEW_TOKENS
    if score_cap:
        assert all(len(r.pool_tokens) - 1 <= score_cap for r in session.rounds)


def _check_all(pair, prompt, block_size, temperature=0.0, seed=0, taps_modes=("cost",)):
    """The full cross product: every selector x every budget x every TAPS mode, with and without a
    score cap (the slow suite)."""
    reference = _reference(pair, prompt, temperature, seed)
    for selector, estimator in RUNS:
        if selector == "oracle" and temperature > 0:
            continue
        for budget in BUDGETS:
            for mode in (taps_modes if selector == "taps" else ("cost",)):
                _check_run(pair, prompt, reference, selector, estimator, budget, block_size, temperature, seed, mode)
                if selector == "taps":
                    _check_run(pair, prompt, reference, selector, estimator, budget, block_size, temperature, seed,
                               mode, score_cap=max(budget, 4))
                    _check_run(pair, prompt, reference, selector, estimator, budget, block_size, temperature, seed,
                               mode, pool_factor=0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, block_size=st.sampled_from([3, 8]), budget=st.sampled_from(BUDGETS),
       mode=st.sampled_from(("cost", "reach", "utility")), capped=st.booleans(), pool_factor=st.sampled_from([0, 4]))
def test_greedy_equals_plain_greedy(tiny_pair, prompt, block_size, budget, mode, capped, pool_factor):
    """Every selector on a drawn prompt, block size, budget and TAPS mode (the slow suite runs the
    whole cross product)."""
    reference = _reference(tiny_pair, prompt, 0.0, 0)
    for selector, estimator in RUNS:
        _check_run(tiny_pair, prompt, reference, selector, estimator, budget, block_size, 0.0, 0,
                   mode if selector == "taps" else "cost", max(budget, 4) if capped and selector == "taps" else 0,
                   pool_factor)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, seed=st.integers(0, 2**16), temperature=st.sampled_from([0.7, 1.0, 1.5]),
       budget=st.sampled_from(BUDGETS))
def test_sampling_equals_plain_sampling(tiny_pair, prompt, seed, temperature, budget):
    reference = _reference(tiny_pair, prompt, temperature, seed)
    for selector, estimator in RUNS:
        if selector != "oracle":
            _check_run(tiny_pair, prompt, reference, selector, estimator, budget, 8, temperature, seed, "cost")


def test_float32_greedy_is_lossless_on_text(tiny_pair_f32):
    prompt = "def fib(n):\n    return"
    ids = tiny_pair_f32.tokenizer.encode(prompt, add_special_tokens=False)
    reference = greedy_continuation(tiny_pair_f32, ids, NEW_TOKENS)
    for selector in ("dflash", "ddtree", "taps", "dflash2"):
        session = DecodeSession(tiny_pair_f32, prompt, selector=selector, budget=32,
                                max_new_tokens=NEW_TOKENS, stop_at_eos=False)
        session.run()
        assert session.generated == reference, selector


def test_matches_transformers_generate(tiny_pair):
    """Our AR reference is the same as transformers' own greedy generate."""
    import torch

    ids = [5, 17, 33, 2, 60]
    ours = greedy_continuation(tiny_pair, ids, 16)
    theirs = tiny_pair.target.generate(torch.tensor([ids], device=tiny_pair.device), max_new_tokens=16, do_sample=False,
                                       eos_token_id=None, pad_token_id=0)
    assert ours == theirs[0, len(ids):].tolist()


@pytest.mark.slow
@pytest.mark.timeout(1800)   # each drawn case runs the whole cross product of selectors, budgets and modes
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, block_size=st.sampled_from([2, 4, 8]), seed=st.integers(0, 2**16),
       temperature=st.sampled_from([0.0, 0.8]))
def test_lossless_many_prompts(tiny_pair, prompt, block_size, seed, temperature):
    _check_all(tiny_pair, prompt, block_size, temperature=temperature, seed=seed,
               taps_modes=("cost", "reach", "utility"))
