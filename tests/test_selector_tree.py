"""TAPS over DFlash2's candidates (issue 60): the `selector` estimator reads the path selector's
transition distribution as q(b | a reached), times the learned scorer's q, and TAPS selects from its
usual pool by that reach. Checked here against the selector's definition written out in plain numpy;
lossless runs over drawn prompts are tests/test_lossless.py's (it is one of its runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from taps import DecodeSession, greedy_continuation, sample_continuation
from taps.config import DecodeConfig
from taps.estimate import SelectorEstimator, estimators_for, make_estimator
from taps.selectors import RoundContext, make_selector

PROMPT = [5, 17, 33, 2, 60, 8]


def _lattice(pair, temperature=0.0, prompt=PROMPT):
    s = DecodeSession(pair, prompt, selector="taps", estimator="selector", budget=16, temperature=temperature,
                      seed=3, max_new_tokens=8, stop_at_eos=False)
    with torch.inference_mode():
        return s, s._draft(s.tokens[-1], 7)


@torch.inference_mode()
def _brute_force_q(pair, lattice, root, parent_token, depth, temperature):
    """q(. | parent) over the top-K candidates at `depth`, from the selector's definition."""
    sel = pair.path_selector
    k = sel.top_k
    h = lattice.hidden[depth - 1].double()
    gate = sel.hidden_projection.weight.double() @ h
    a = sel.predecessor_codebook[parent_token].double() * gate
    cands = lattice.tokens[depth - 1, :k]
    scale = 1 / temperature if temperature > 0 else 1.0
    scores = np.array([lattice.logprobs[depth - 1, j] + scale * float(a @ sel.successor_codebook[c].double())
                       for j, c in enumerate(cands)])
    e = np.exp(scores - scores.max())
    mass = np.exp(lattice.logprobs[depth - 1, :k]).sum()           # the drafter's mass on the K candidates
    return mass * e / e.sum()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_each_edge_q_is_the_selectors_transition_softmax_with_the_scorers(tiny_pair, temperature):
    s, lattice = _lattice(tiny_pair, temperature)
    root = s.tokens[-1]
    est = make_estimator("selector", tiny_pair, "off", temperature)
    assert isinstance(est, SelectorEstimator) and est.partner is None        # the tiny pair has no scorer
    pool = make_selector("taps").pool(root, lattice, DecodeConfig(budget=10), RoundContext(estimator=est))
    q_sel = est.selector_q(pool, lattice)
    assert q_sel[0] == 1.0 and np.all((q_sel > 0) & (q_sel <= 1))
    k = tiny_pair.path_selector.top_k
    inside = 0
    for v in range(1, pool.size + 1):
        parent = pool.parents[v]
        parent_rank = pool.ranks[parent] if pool.depths[v] > 1 else 0
        if pool.ranks[v] >= k or parent_rank >= k:              # outside the top-K lattice: the marginal
            assert q_sel[v] == pytest.approx(math.exp(pool.marginal_logprob[v]))
            continue
        inside += 1
        want = _brute_force_q(tiny_pair, lattice, root, int(pool.tokens[parent]), int(pool.depths[v]), temperature)
        assert q_sel[v] == pytest.approx(want[pool.ranks[v]], rel=1e-6), v
    assert inside >= 5                               # the tiny pair's flat marginals put many past rank K
    sums = np.bincount(pool.parents[1:], weights=q_sel[1:], minlength=len(q_sel))
    assert sums.max() <= 1 + 1e-9                    # the children of one parent: parts of one distribution
    assert np.array_equal(est.edge_probs(pool, lattice), q_sel)
    # with a partner (the learned scorer where the pair has one; here the marginal) q is the geometric mean
    partner = make_estimator("marginal", tiny_pair, "off")
    both = SelectorEstimator(tiny_pair.path_selector, temperature, partner).edge_probs(pool, lattice)
    want = np.sqrt(q_sel[1:] * partner.edge_probs(pool, lattice)[1:])
    assert np.allclose(both[1:], want, rtol=1e-12) and both[0] == 1


def test_on_the_shipped_pair_the_selector_estimator_pools_with_the_scorer(shipped_pair):
    from taps.estimate import LearnedEstimator

    est = make_estimator("selector", shipped_pair, "online", 0.7)
    assert isinstance(est.partner, LearnedEstimator) and est.temperature == 0.7
    assert est.calibrator.reach_map is not None           # a map fitted for it ships in calibration.json


def test_it_ranks_the_pool_otherwise_than_the_marginal(tiny_pair):
    """The selector's q changes which nodes TAPS verifies (else it would be the marginal under another
    name) and its reach never grows along a path (the best nodes stay prefix-closed)."""
    orders = {}
    for prompt in ([5, 17, 33, 2, 60, 8], [40, 41, 42], [7, 7, 7, 9, 11, 3, 70, 2, 5, 61]):
        s, lattice = _lattice(tiny_pair, prompt=prompt)
        for name in ("selector", "marginal"):
            est = make_estimator(name, tiny_pair, "off")
            pool = make_selector("taps").pool(s.tokens[-1], lattice, DecodeConfig(budget=8), RoundContext(
                estimator=est))
            reach = est.raw_reach(pool, lattice)
            assert np.all(reach[1:] <= reach[pool.parents[1:]] + 1e-12)
            orders.setdefault(name, []).append(tuple(np.argsort(-reach[1:], kind="stable")[:8]))
    assert orders["selector"] != orders["marginal"]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_selector_trees_are_lossless_in_every_size_mode(tiny_pair, temperature):
    for prompt in ([5, 17, 33, 2, 60, 8], [40, 41, 42], [88]):
        n = 20
        want = (greedy_continuation(tiny_pair, prompt, n) if temperature == 0 else
                sample_continuation(tiny_pair, prompt, n, temperature, 7))
        for budget, mode in ((1, "reach"), (4, "cost"), (16, "utility"), (64, "reach")):
            s = DecodeSession(tiny_pair, prompt, selector="taps", estimator="selector", budget=budget,
                              taps_mode=mode, temperature=temperature, seed=7, max_new_tokens=n, stop_at_eos=False)
            s.run()
            assert s.generated == want, (prompt, budget, mode)
            assert all(r.verified_nodes <= budget for r in s.rounds)


def test_a_pair_without_a_path_selector_has_no_selector_estimator(tiny_pair_dir):
    from taps import load_pair

    bare = load_pair(tiny_pair_dir, drafter=str(tiny_pair_dir / "drafter"), device="cpu", dtype="float64")
    assert bare.path_selector is None
    assert "selector" not in estimators_for(bare) and "selector" in estimators_for(load_pair(tiny_pair_dir))
    with pytest.raises(ValueError, match="path selector"):
        DecodeConfig(selector="taps", estimator="selector").validate(bare)
    with pytest.raises(ValueError, match="path selector"):
        make_estimator("selector", bare)


def test_the_race_runs_taps_over_dflash2s_candidates_in_its_lane(monkeypatch):
    """The race page with the estimator set to the selector: TAPS's lane is TAPS over DFlash2's
    candidates, and it decodes (AppTest on the shipped pair, the race stepped until its first round)."""
    pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from taps.studio.challenges import _race

    monkeypatch.setenv("TAPS_PAIR", "")
    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "app.py"), default_timeout=180).run()
    for key, value in _race("fib", 16, "reference-cpu-taps-code-10m", estimator="selector").items():
        at.query_params[key] = value
    at.switch_page("app_pages/2_Race_and_sweep.py").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    at.number_input(key="race_max_new").set_value(8).run()
    at.button(key="lanes_btn").click().run()
    for _ in range(20):
        at.button(key="race_step").click().run()
        lanes = [el for el in at.get("plotly_chart") if el.key == "lane_tree_taps/selector"]
        if lanes and "round 1:" in str(lanes[0].proto.spec):
            break
    else:
        raise AssertionError("no TAPS/selector lane finished its first round")
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("plan", ["", "taps-batch"])
def test_a_batch_of_selector_trees_is_each_requests_own_text(tiny_pair, plan, temperature):
    """TAPS over DFlash2's candidates in a batch, each request its own tree (no plan) or under the
    batch-aware plan: every request's tokens are the target's own."""
    from conftest import batch_profile

    from taps.batch import BatchSession

    prompts = [[5, 17, 33, 2, 60, 8], [40, 41, 42], [9], [7, 7, 7, 9, 11, 3, 70, 2, 5, 61]]
    options = dict(selector="taps", estimator="selector", budget=16, temperature=temperature, seed=11,
                   max_new_tokens=16, stop_at_eos=False)
    extra = dict(profile=batch_profile(tiny_pair), plan=plan) if plan else {}
    batch = BatchSession(tiny_pair, [list(p) for p in prompts], **extra, **options)
    batch.run()
    for prompt, request in zip(prompts, batch.requests):
        want = (greedy_continuation(tiny_pair, prompt, 16) if temperature == 0 else
                sample_continuation(tiny_pair, prompt, 16, temperature, 11))
        assert request.generated == want, (plan, prompt)
